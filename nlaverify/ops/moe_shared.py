r"""Mixture-of-experts blocks with shared experts beside the routed ones: Qwen2-MoE and
DeepSeek-V3, forward, VJP and JVP, with the routing held fixed.

**Qwen2-MoE** (Qwen team, Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B; Hugging Face
``Qwen2MoeSparseMoeBlock``): routed SwiGLU experts gated by the softmax router (top-:math:`k`
entries of :math:`\operatorname{softmax}(xW_r)`, renormalised with ``norm_topk_prob``), plus
one shared SwiGLU expert :math:`S` of its own width (``shared_expert_intermediate_size``)
gated per token by a sigmoid of a linear form of the token (``shared_expert_gate``, a
:math:`d\to 1` linear map :math:`w_{sg}`):

.. math:: y = \sum_{e\in S(x)} g_e(x)\, E_e(x) + \sigma(x\cdot w_{sg})\, S(x).

**DeepSeek-V3** (DeepSeek-AI 2024, DeepSeek-V3 technical report §2.1.2, eq. (12)-(16);
Hugging Face ``DeepseekV3MoE``): routed SwiGLU experts gated by the sigmoid router of
:func:`nlaverify.ops.moe_routing.deepseek_v3_gates` (scaled by ``routed_scaling_factor``,
normaliser :math:`+10^{-20}`), plus ``n_shared_experts`` shared experts always on and
ungated, one SwiGLU of width ``n_shared_experts * moe_intermediate_size`` (Hugging Face
``shared_experts``):

.. math:: y = \sum_{e\in S(x)} g_e(x)\, E_e(x) + S(x).

Each expert is :math:`E(x) = (\operatorname{SiLU}(xW_1)\odot xW_3)W_2` (``gate_proj``,
``up_proj``, ``down_proj``; Hugging Face's fused ``experts.gate_up_proj[e]`` is
:math:`[W_1^e; W_3^e]^\top` and ``experts.down_proj[e]`` is :math:`{W_2^e}^\top`).

The mask (which experts each token uses, from :func:`nlaverify.ops.moe_routing.qwen_moe_select`
or :func:`~nlaverify.ops.moe_routing.deepseek_v3_select`) is a fixed argument: the selection
is piecewise constant, its derivative 0 almost everywhere, and the gradient flows to the
router weight :math:`W_r` and the token through the gate values only (as Hugging Face's
autograd: its ``topk`` indices carry no gradient). Experts are computed densely, every
expert on every token (the reference semantics). A batch ``(*, n, d)`` is flattened into
rows (routing is per token).
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ShapeError
from nlaverify.ops._tangent import lin, tangents, tsum
from nlaverify.ops._validate import check_args, check_mask
from nlaverify.ops.activations import _sigmoid_pair, swiglu, swiglu_jvp, swiglu_vjp
from nlaverify.ops.moe import _gates, _rows, _selected
from nlaverify.ops.moe_routing import (
    DEEPSEEK_V3_GATE_EPS,
    deepseek_v3_gates,
    deepseek_v3_gates_vjp,
    sigmoid_gates_tangent,
)
from nlaverify.ops.softmaxes import softmax_jvp_from_output, softmax_vjp_from_output

__all__ = ["deepseek_v3_moe", "deepseek_v3_moe_jvp", "deepseek_v3_moe_vjp", "qwen2_moe",
           "qwen2_moe_jvp", "qwen2_moe_vjp", "swiglu_mlp"]

_ROUTED = (("W_r", ("d", "E")), ("W1", ("E", "d", "m")), ("W3", ("E", "d", "m")),
           ("W2", ("E", "m", "d")), ("U1", ("d", "f")), ("U3", ("d", "f")), ("U2", ("f", "d")))


def swiglu_mlp(xp: Namespace, X: Any, W1: Any, W3: Any, W2: Any) -> tuple[Any, Any]:
    r"""``((A, B, H), Y)``: :math:`A = XW_1`, :math:`B = XW_3`, :math:`H =
    \operatorname{SiLU}(A)\odot B`, :math:`Y = HW_2`; with stacked weights ``(E, d, m)``
    every expert at once (``Y`` ``(E, n, d)``)."""
    A, B = xp.matmul(X, W1), xp.matmul(X, W3)
    H = swiglu(xp, A, B)
    return (A, B, H), xp.matmul(H, W2)


def _mlp_vjp(xp: Namespace, dY: Any, X: Any, hidden: tuple[Any, Any, Any], W1: Any, W3: Any,
             W2: Any) -> tuple[Any, Any, Any, Any]:
    r""":math:`(\bar X, \bar W_1, \bar W_3, \bar W_2)` of :func:`swiglu_mlp` (for stacked
    experts :math:`\bar X` keeps the expert axis: the caller sums it)."""
    A, B, H = hidden
    dA, dB = swiglu_vjp(xp, xp.matmul(dY, xp.matrix_transpose(W2)), A, B)
    XT = xp.matrix_transpose(X)
    dX = xp.matmul(dA, xp.matrix_transpose(W1)) + xp.matmul(dB, xp.matrix_transpose(W3))
    return dX, xp.matmul(XT, dA), xp.matmul(XT, dB), xp.matmul(xp.matrix_transpose(H), dY)


def _opt_sum(*terms: Any) -> Any:
    return None if all(t is None for t in terms) else tsum(*terms)


def _mlp_jvp(xp: Namespace, dX: Any, dW: tuple[Any, Any, Any], X: Any,
             hidden: tuple[Any, Any, Any], W1: Any, W3: Any, W2: Any) -> Any:
    r""":math:`\dot Y` of :func:`swiglu_mlp` (``None`` when every tangent is): :math:`\dot A
    = \dot XW_1 + X\dot W_1`, likewise :math:`\dot B`, the SwiGLU JVP, :math:`\dot Y =
    \dot HW_2 + H\dot W_2`."""
    A, B, H = hidden
    dW1, dW3, dW2 = dW

    def proj(W: Any, dw: Any) -> Any:
        return _opt_sum(lin(dX, lambda t: xp.matmul(t, W)), lin(dw, lambda t: xp.matmul(X, t)))

    dA, dB = proj(W1, dW1), proj(W3, dW3)
    dH = None if dA is None and dB is None else swiglu_jvp(xp, (dA, dB), A, B)
    return _opt_sum(lin(dH, lambda t: xp.matmul(t, W2)), lin(dW2, lambda t: xp.matmul(H, t)))


def _check(op: str, xp: Namespace, X: Any, mask: Any, weights: tuple[Any, ...],
           w_sg: Any = None, T: tuple[Any, ...] | None = None) -> None:
    specs = {"X": (X, ("*", "n", "d"))}
    for (name, dims), W in zip(_ROUTED, weights, strict=True):
        specs[name] = (W, dims)
    if w_sg is not None:
        specs["w_sg"] = (w_sg, ("d",))
    names = [n for n, _ in specs.items()]
    if T is not None:
        specs.update({f"d{n}": (t, specs[n][1]) for n, t in zip(names, T, strict=True)})
    dims = check_args(op, xp, specs)
    check_args(op, xp, {"mask": (mask, ("*", "n", "E"))}, bound=dims, floating=False)
    check_mask(op, xp, mask)
    if tuple(mask.shape) != (*tuple(X.shape)[:-1], dims["E"]):
        raise ShapeError(f"{op}: argument 'mask': expected shape "
                         f"{(*tuple(X.shape)[:-1], dims['E'])} (the rows of 'X' by E), got "
                         f"{tuple(mask.shape)}")


class _Gating:
    """The gate map :math:`l \\mapsto g` of a router (mask fixed), its VJP and JVP."""

    def __init__(self, xp: Namespace, logits: Any, mask: Any, kind: str,
                 static: dict[str, Any]) -> None:
        self.xp, self.logits, self.mask, self.kind, self.static = xp, logits, mask, kind, static
        if kind == "softmax":
            self.gates, self.p = _gates(xp, logits, mask, static["renormalize"])
        elif kind == "softmax_scaled":   # DeepSeek-V2: rho M . softmax(l), no renormalising
            g, self.p = _gates(xp, logits, mask, False)
            self.rho = xp.const(static["routed_scaling_factor"])
            self.gates = self.rho * g
        else:
            self.s, self.s_neg = _sigmoid_pair(xp, logits)
            self.gates = deepseek_v3_gates(xp, self.s, mask, **static)

    def vjp(self, dg: Any) -> Any:
        xp = self.xp
        if self.kind == "softmax":
            return softmax_vjp_from_output(xp, _selected(xp, dg, self.mask), self.p)
        if self.kind == "softmax_scaled":
            return softmax_vjp_from_output(xp, _selected(xp, self.rho * dg, self.mask), self.p)
        (ds,) = deepseek_v3_gates_vjp(xp, dg, self.s, self.mask, **self.static)
        return ds * self.s * self.s_neg

    def jvp(self, dl: Any) -> Any:
        xp = self.xp
        if self.kind == "softmax":
            return lin(dl, lambda t: _selected(xp, softmax_jvp_from_output(xp, t, self.p),
                                               self.mask))
        if self.kind == "softmax_scaled":
            return lin(dl, lambda t: self.rho * _selected(
                xp, softmax_jvp_from_output(xp, t, self.p), self.mask))
        return sigmoid_gates_tangent(xp, dl, self.logits, self.mask, **self.static)


def _forward(xp: Namespace, X: Any, mask: Any, weights: tuple[Any, ...], w_sg: Any,
             kind: str, static: dict[str, Any]) -> dict[str, Any]:
    """Every intermediate of a block (rows of tokens)."""
    W_r, W1, W3, W2, U1, U3, U2 = weights
    f: dict[str, Any] = {"gating": _Gating(xp, xp.matmul(X, W_r), mask, kind, static)}
    f["hidden"], f["Y"] = swiglu_mlp(xp, X, W1, W3, W2)                 # Y: (E, n, d)
    f["hidden_s"], f["S"] = swiglu_mlp(xp, X, U1, U3, U2)               # S: (n, d)
    f["gT"] = xp.permute_dims(f["gating"].gates, (1, 0))[:, :, None]    # (E, n, 1)
    y = xp.sum(f["gT"] * f["Y"], axis=0)
    if w_sg is None:
        f["out"] = y + f["S"]
    else:
        f["sg"] = _sigmoid_pair(xp, xp.matmul(X, w_sg))                 # sigma(z), sigma(-z)
        f["out"] = y + f["sg"][0][:, None] * f["S"]
    return f


def _block(op: str, xp: Namespace, X: Any, mask: Any, weights: tuple[Any, ...], w_sg: Any,
           kind: str, static: dict[str, Any]) -> Any:
    _check(op, xp, X, mask, weights, w_sg)
    shape = tuple(X.shape)
    f = _forward(xp, _rows(xp, X), _rows(xp, mask), weights, w_sg, kind, static)
    return xp.reshape(f["out"], shape)


def _block_vjp(op: str, xp: Namespace, G: Any, X: Any, mask: Any, weights: tuple[Any, ...],
               w_sg: Any, kind: str, static: dict[str, Any]) -> tuple[Any, ...]:
    _check(op, xp, X, mask, weights, w_sg)
    shape = tuple(X.shape)
    X, mask, G = _rows(xp, X), _rows(xp, mask), _rows(xp, G)
    W_r, W1, W3, W2, U1, U3, U2 = weights
    f = _forward(xp, X, mask, weights, w_sg, kind, static)
    XT = xp.matrix_transpose(X)
    dl = f["gating"].vjp(xp.permute_dims(xp.sum(G * f["Y"], axis=-1), (1, 0)))   # (n, E)
    dXe, dW1, dW3, dW2 = _mlp_vjp(xp, f["gT"] * G, X, f["hidden"], W1, W3, W2)
    dX = xp.sum(dXe, axis=0) + xp.matmul(dl, xp.matrix_transpose(W_r))
    if w_sg is None:
        dXs, dU1, dU3, dU2 = _mlp_vjp(xp, G, X, f["hidden_s"], U1, U3, U2)
        return (xp.reshape(dX + dXs, shape), xp.matmul(XT, dl), dW1, dW3, dW2, dU1, dU3, dU2)
    sig, sig_neg = f["sg"]
    dXs, dU1, dU3, dU2 = _mlp_vjp(xp, sig[:, None] * G, X, f["hidden_s"], U1, U3, U2)
    dz = xp.sum(G * f["S"], axis=-1) * sig * sig_neg                            # (n,)
    dX = dX + dXs + dz[:, None] * w_sg[None, :]
    return (xp.reshape(dX, shape), xp.matmul(XT, dl), dW1, dW3, dW2, dU1, dU3, dU2,
            xp.matmul(XT, dz))


def _block_jvp(op: str, xp: Namespace, T: tuple[Any, ...], X: Any, mask: Any,
               weights: tuple[Any, ...], w_sg: Any, kind: str, static: dict[str, Any]) -> Any:
    names = ("dX", *(f"d{n}" for n, _ in _ROUTED), *(("dw_sg",) if w_sg is not None else ()))
    T = tangents(op, T, names)
    _check(op, xp, X, mask, weights, w_sg, T)
    shape = tuple(X.shape)
    X, mask = _rows(xp, X), _rows(xp, mask)
    dX, dW_r, dW1, dW3, dW2, dU1, dU3, dU2 = (lin(T[0], lambda t: _rows(xp, t)), *T[1:8])
    W_r, W1, W3, W2, U1, U3, U2 = weights
    f = _forward(xp, X, mask, weights, w_sg, kind, static)
    dl = _opt_sum(lin(dX, lambda t: xp.matmul(t, W_r)), lin(dW_r, lambda t: xp.matmul(X, t)))
    dg = f["gating"].jvp(dl)                                                    # (n, E)
    dY = _mlp_jvp(xp, dX, (dW1, dW3, dW2), X, f["hidden"], W1, W3, W2)           # (E, n, d)
    routed = _opt_sum(lin(dg, lambda t: xp.permute_dims(t, (1, 0))[:, :, None] * f["Y"]),
                      lin(dY, lambda t: f["gT"] * t))
    routed = lin(routed, lambda t: xp.sum(t, axis=0))
    dS = _mlp_jvp(xp, dX, (dU1, dU3, dU2), X, f["hidden_s"], U1, U3, U2)
    if w_sg is None:
        return xp.reshape(tsum(routed, dS), shape)
    sig, sig_neg = f["sg"]
    dz = _opt_sum(lin(dX, lambda t: xp.matmul(t, w_sg)), lin(T[8], lambda t: xp.matmul(X, t)))
    shared = _opt_sum(lin(dz, lambda t: (sig * sig_neg * t)[:, None] * f["S"]),
                      lin(dS, lambda t: sig[:, None] * t))
    return xp.reshape(tsum(routed, shared), shape)


def qwen2_moe(xp: Namespace, X: Any, mask: Any, W_r: Any, W1: Any, W3: Any, W2: Any, U1: Any,
              U3: Any, U2: Any, w_sg: Any, *, renormalize: bool = False) -> Any:
    r"""Qwen2-MoE's sparse MoE block (module docstring). ``X`` ``(*, n, d)``; ``mask``
    ``(*, n, E)`` the chosen experts (:func:`~nlaverify.ops.moe_routing.qwen_moe_select` of
    :math:`XW_r`); ``W_r`` ``(d, E)`` the router (Hugging Face ``gate.weight`` transposed);
    ``W1, W3`` ``(E, d, m)``, ``W2`` ``(E, m, d)`` the experts; ``U1, U3`` ``(d, f)``, ``U2``
    ``(f, d)`` the shared expert; ``w_sg`` ``(d,)`` its gate (``shared_expert_gate.weight[0]``).
    ``renormalize``: ``norm_topk_prob``.

    .. math:: y = \sum_e g_e E_e(x) + \sigma(x\cdot w_{sg})\,S(x),\quad g = M\odot
       \operatorname{softmax}(xW_r)\ \text{(renormalised over } M\text{ with norm\_topk\_prob)}.
    """
    return _block("qwen2_moe", xp, X, mask, (W_r, W1, W3, W2, U1, U3, U2), w_sg, "softmax",
                  {"renormalize": renormalize})


def qwen2_moe_vjp(xp: Namespace, G: Any, X: Any, mask: Any, W_r: Any, W1: Any, W3: Any,
                  W2: Any, U1: Any, U3: Any, U2: Any, w_sg: Any, *, renormalize: bool = False
                  ) -> tuple[Any, ...]:
    r"""VJP of :func:`qwen2_moe` (mask fixed): the routed experts as
    :func:`nlaverify.ops.moe.moe_vjp` (:math:`\bar g_{te} = \langle G_t, E_e(x_t)\rangle`,
    :math:`\bar l = \operatorname{softmax\_vjp}_p(M\odot\bar g)`, :math:`\bar W_r = X^\top\bar
    l`), the shared expert's MLP VJP with cotangent :math:`\sigma(z)\,G`, and its gate
    :math:`\bar z_t = \langle G_t, S(x_t)\rangle\,\sigma(z_t)\sigma(-z_t)`, :math:`\bar
    w_{sg} = X^\top\bar z`; :math:`\bar X` sums the four paths (experts, router, shared
    expert, shared gate).

    Returns:
        ``(dX, dW_r, dW1, dW3, dW2, dU1, dU3, dU2, dw_sg)`` (none for the mask).
    """
    return _block_vjp("qwen2_moe_vjp", xp, G, X, mask, (W_r, W1, W3, W2, U1, U3, U2), w_sg,
                      "softmax", {"renormalize": renormalize})


def qwen2_moe_jvp(xp: Namespace, T: tuple[Any, ...], X: Any, mask: Any, W_r: Any, W1: Any,
                  W3: Any, W2: Any, U1: Any, U3: Any, U2: Any, w_sg: Any, *,
                  renormalize: bool = False) -> Any:
    r"""JVP of :func:`qwen2_moe` (mask fixed), the dual of :func:`qwen2_moe_vjp`:
    :math:`\dot l = \dot XW_r + X\dot W_r`, :math:`\dot g = M\odot(p\odot(\dot l -
    \langle\dot l, p\rangle\mathbf 1))` (renormalised: :math:`p = g`), :math:`\dot y =
    \sum_e(\dot g_e E_e + g_e\dot E_e) + \sigma(z)\sigma(-z)\dot z\,S + \sigma(z)\dot S`,
    :math:`\dot z = \dot Xw_{sg} + X\dot w_{sg}`. ``T`` one tangent per real argument
    (``dX, dW_r, dW1, dW3, dW2, dU1, dU3, dU2, dw_sg``), ``None`` a zero tangent."""
    return _block_jvp("qwen2_moe_jvp", xp, T, X, mask, (W_r, W1, W3, W2, U1, U3, U2), w_sg,
                      "softmax", {"renormalize": renormalize})


def _ds_static(routed_scaling_factor: float, renormalize: bool, eps: float) -> dict[str, Any]:
    return {"routed_scaling_factor": routed_scaling_factor, "renormalize": renormalize,
            "eps": eps}


def deepseek_v3_moe(xp: Namespace, X: Any, mask: Any, W_r: Any, W1: Any, W3: Any, W2: Any,
                    U1: Any, U3: Any, U2: Any, *, routed_scaling_factor: float = 1.0,
                    renormalize: bool = True, eps: float = DEEPSEEK_V3_GATE_EPS) -> Any:
    r"""DeepSeek-V3's MoE block (module docstring): ``mask`` ``(*, n, E)`` from
    :func:`~nlaverify.ops.moe_routing.deepseek_v3_select` (the biased, group-limited
    choice); ``W_r`` ``(d, E)``; experts as :func:`qwen2_moe`; ``U1, U3`` ``(d, f)``, ``U2``
    ``(f, d)`` the shared experts (``f = n_shared_experts * moe_intermediate_size``).

    .. math:: y = \sum_e g_e E_e(x) + S(x),\quad g = \rho\,\frac{M\odot\sigma(xW_r)}
       {\sum_e M_e\sigma(xW_r)_e + \epsilon}.
    """
    return _block("deepseek_v3_moe", xp, X, mask, (W_r, W1, W3, W2, U1, U3, U2), None,
                  "sigmoid", _ds_static(routed_scaling_factor, renormalize, eps))


def deepseek_v3_moe_vjp(xp: Namespace, G: Any, X: Any, mask: Any, W_r: Any, W1: Any, W3: Any,
                        W2: Any, U1: Any, U3: Any, U2: Any, *,
                        routed_scaling_factor: float = 1.0, renormalize: bool = True,
                        eps: float = DEEPSEEK_V3_GATE_EPS) -> tuple[Any, ...]:
    r"""VJP of :func:`deepseek_v3_moe` (mask fixed): :math:`\bar g_{te} = \langle G_t,
    E_e(x_t)\rangle`, :math:`\bar s = M\odot(\rho\bar g - \langle\bar g, g\rangle)/Z`
    (:func:`~nlaverify.ops.moe_routing.deepseek_v3_gates_vjp`), :math:`\bar l = \bar s\odot
    \sigma(l)\sigma(-l)`, :math:`\bar W_r = X^\top\bar l`; the shared experts' MLP VJP with
    cotangent :math:`G`.

    Returns:
        ``(dX, dW_r, dW1, dW3, dW2, dU1, dU3, dU2)``.
    """
    return _block_vjp("deepseek_v3_moe_vjp", xp, G, X, mask, (W_r, W1, W3, W2, U1, U3, U2),
                      None, "sigmoid", _ds_static(routed_scaling_factor, renormalize, eps))


def deepseek_v3_moe_jvp(xp: Namespace, T: tuple[Any, ...], X: Any, mask: Any, W_r: Any,
                        W1: Any, W3: Any, W2: Any, U1: Any, U3: Any, U2: Any, *,
                        routed_scaling_factor: float = 1.0, renormalize: bool = True,
                        eps: float = DEEPSEEK_V3_GATE_EPS) -> Any:
    r"""JVP of :func:`deepseek_v3_moe` (mask fixed): :math:`\dot s = \sigma(l)\sigma(-l)
    \odot(\dot XW_r + X\dot W_r)`, :math:`\dot g = (\rho M\odot\dot s - g\sum_e M_e\dot
    s_e)/Z`, :math:`\dot y = \sum_e(\dot g_e E_e + g_e\dot E_e) + \dot S`. ``T`` one tangent
    per real argument (``dX, dW_r, dW1, dW3, dW2, dU1, dU3, dU2``)."""
    return _block_jvp("deepseek_v3_moe_jvp", xp, T, X, mask, (W_r, W1, W3, W2, U1, U3, U2),
                      None, "sigmoid", _ds_static(routed_scaling_factor, renormalize, eps))
