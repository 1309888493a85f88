"""Mixture-of-experts feed-forward with a softmax top-k router (Baggag & Saad §3.12).

The routing decision (which :math:`k` experts a token uses) is piecewise
constant in the router scores, so its derivative is 0 almost everywhere: it is
a separate op, :func:`topk_mask`, whose output is a *fixed* (non-differentiated)
argument of :func:`moe`. Given the mask :math:`M`, the gates are the softmax of
the router scores restricted to the selected experts (Mixtral),

.. math:: g_{te} = \\frac{M_{te}\\, e^{s_{te}}}{\\sum_{e'} M_{te'} e^{s_{te'}}},\\qquad
          y_t = \\sum_e g_{te}\\, E_e(x_t),

and the gradient flows to the router through the gate softmax. Experts are
computed densely (every expert on every token, then weighted by the gates,
zero for unselected experts): the reference semantics, not a fast kernel.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ShapeError
from nlaverify.ops._tangent import lin, tangents, tsum
from nlaverify.ops._validate import check_args, check_int, check_mask
from nlaverify.ops.activations import (
    gelu_tanh,
    gelu_tanh_jvp,
    gelu_tanh_vjp,
    relu,
    relu_jvp,
    relu_vjp,
    swiglu,
    swiglu_jvp,
    swiglu_vjp,
)
from nlaverify.ops.softmaxes import (
    softmax,
    softmax_jvp_from_output,
    softmax_vjp_from_output,
)

_ACT = {"relu": (relu, relu_vjp), "gelu": (gelu_tanh, gelu_tanh_vjp)}
_ACT_JVP = {"relu": relu_jvp, "gelu": gelu_tanh_jvp}


def topk_mask(xp: Namespace, scores: Any, top_k: int) -> Any:
    r"""0/1 mask of the ``top_k`` largest router scores of each row (ties: lower index
    first); ``scores`` ``(*, E)``. Its derivative is 0 wherever it is defined: routing is
    held fixed."""
    dims = check_args("topk_mask", xp, {"scores": (scores, ("*", "E"))})
    check_int("topk_mask", "top_k", top_k)
    if not 1 <= top_k <= dims["E"]:
        raise ShapeError(f"topk_mask: argument 'top_k': expected 1 <= top_k <= E={dims['E']}, "
                         f"got {top_k}")
    cols = []
    for e in range(dims["E"]):
        s_e = scores[..., e]
        one, zero = xp.ones_like(s_e), xp.zeros_like(s_e)
        rank = zero
        for f in range(dims["E"]):
            # expert f outranks e when larger, or equal with a lower index (ties)
            if f > e:
                rank = rank + xp.where(xp.greater(scores[..., f], s_e), one, zero)
            elif f < e:
                rank = rank + xp.where(xp.greater(s_e, scores[..., f]), zero, one)
        cols.append(xp.where(xp.greater(rank, top_k - 1), zero, one))
    return xp.stack(cols, axis=-1)


def topk_mask_vjp(xp: Namespace, G: Any, scores: Any, top_k: int) -> tuple[()]:
    """No cotangent: the scores argument is fixed (routing held fixed)."""
    return ()


def _gates(xp: Namespace, scores: Any, mask: Any, renormalize: bool = True
           ) -> tuple[Any, Any]:
    r"""``(gates, p)``: the gates and the softmax they are read from. Renormalised
    (Mixtral): :math:`g = p = \operatorname{softmax}(s + \log M)`; otherwise (e.g. Qwen-MoE
    with ``norm_topk_prob=False``): :math:`p = \operatorname{softmax}(s)`, :math:`g = M
    \odot p`, the selected entries of the softmax over all experts."""
    if renormalize:
        g = softmax(xp, xp.where(xp.greater(mask, 0), scores, -xp.inf))
        return g, g
    p = softmax(xp, scores)
    return _selected(xp, p, mask), p


def _selected(xp: Namespace, A: Any, mask: Any) -> Any:
    """``A`` at the selected experts, 0 elsewhere."""
    return xp.where(xp.greater(mask, 0), A, xp.zeros_like(A))


def _experts(xp: Namespace, X: Any, weights: tuple[Any, ...], activation: str):
    """Per expert: hidden pre-activations and outputs, each stacked on axis 0."""
    if activation == "swiglu":
        W1, W3, W2 = weights
        A, B = xp.matmul(X, W1), xp.matmul(X, W3)  # (E, n, m) by broadcasting
        H = swiglu(xp, A, B)
        return (A, B, H), xp.matmul(H, W2)
    W_in, W_out = weights
    f, _ = _ACT[activation]
    A = xp.matmul(X, W_in)
    H = f(xp, A)
    return (A, H), xp.matmul(H, W_out)


def moe(xp: Namespace, X: Any, scores: Any, mask: Any, *weights: Any,
        activation: str = "gelu", renormalize: bool = True) -> Any:
    r"""Routed expert MLPs. ``X`` ``(*, n, d)``, ``scores`` ``(*, n, E)`` router scores,
    ``mask`` ``(*, n, E)`` from :func:`topk_mask`; ``weights`` are ``W_in (E, d, m)``,
    ``W_out (E, m, d)`` or, for SwiGLU, ``W1, W3 (E, d, m)``, ``W2 (E, m, d)``. Routing is
    per token, so a batch is flattened into rows and the result unflattened.
    ``renormalize=False``: the gates are the selected entries of the softmax over all
    experts (:func:`_gates`)."""
    _check_moe(xp, X, scores, mask, weights, activation)
    shape = tuple(X.shape)
    X, scores, mask = _rows(xp, X), _rows(xp, scores), _rows(xp, mask)
    gates, _ = _gates(xp, scores, mask, renormalize)
    _, Y = _experts(xp, X, weights, activation)                   # (E, n, d)
    return xp.reshape(xp.sum(xp.permute_dims(gates, (1, 0))[:, :, None] * Y, axis=0), shape)


def _rows(xp: Namespace, A: Any) -> Any:
    """``(*, n, c) -> (N, c)``: the tokens of a batch as rows."""
    return A if len(A.shape) == 2 else xp.reshape(A, (-1, A.shape[-1]))


def moe_vjp(xp: Namespace, G: Any, X: Any, scores: Any, mask: Any, *weights: Any,
            activation: str = "gelu", renormalize: bool = True) -> tuple[Any, ...]:
    r"""VJP of :func:`moe` with the routing held fixed:

    .. math:: \bar Y_e = g_{\cdot e} \odot G,\quad \bar g_{te} = \langle G_t, Y_{e,t}\rangle,
       \quad \bar s = \operatorname{softmax\_vjp}_p(M \odot \bar g),

    :math:`p` the softmax the gates are read from (:func:`_gates`; renormalised,
    :math:`p = g` vanishes off the mask so the mask changes nothing),

    then each expert's MLP VJP; :math:`\bar X` sums the experts' input cotangents.

    Returns:
        ``(dX, dscores, dW...)`` (no cotangent for the mask).
    """
    _check_moe(xp, X, scores, mask, weights, activation)
    x_shape, s_shape = tuple(X.shape), tuple(scores.shape)
    X, scores, mask, G = _rows(xp, X), _rows(xp, scores), _rows(xp, mask), _rows(xp, G)
    gates, p = _gates(xp, scores, mask, renormalize)
    hidden, Y = _experts(xp, X, weights, activation)
    gT = xp.permute_dims(gates, (1, 0))[:, :, None]                 # (E, n, 1)
    dgates = xp.permute_dims(xp.sum(G * Y, axis=-1), (1, 0))        # (n, E)
    dscores = xp.reshape(softmax_vjp_from_output(xp, _selected(xp, dgates, mask), p), s_shape)
    dY = gT * G                                                     # (E, n, d)
    XT = xp.matrix_transpose(X)
    if activation == "swiglu":
        W1, W3, W2 = weights
        A, B, H = hidden
        dW2 = xp.matmul(xp.matrix_transpose(H), dY)
        dA, dB = swiglu_vjp(xp, xp.matmul(dY, xp.matrix_transpose(W2)), A, B)
        dX = xp.reshape(xp.sum(xp.matmul(dA, xp.matrix_transpose(W1)) + xp.matmul(
            dB, xp.matrix_transpose(W3)), axis=0), x_shape)
        return dX, dscores, xp.matmul(XT, dA), xp.matmul(XT, dB), dW2
    W_in, W_out = weights
    A, H = hidden
    _, f_vjp = _ACT[activation]
    dW_out = xp.matmul(xp.matrix_transpose(H), dY)
    (dA,) = f_vjp(xp, xp.matmul(dY, xp.matrix_transpose(W_out)), A)
    dX = xp.reshape(xp.sum(xp.matmul(dA, xp.matrix_transpose(W_in)), axis=0), x_shape)
    return dX, dscores, xp.matmul(XT, dA), dW_out


def moe_jvp(xp: Namespace, T: tuple[Any, ...], X: Any, scores: Any, mask: Any, *weights: Any,
            activation: str = "gelu", renormalize: bool = True) -> Any:
    r"""JVP of :func:`moe` with the routing held fixed (Baggag & Saad §3.12.2), the
    forward-mode dual of :func:`moe_vjp`. With gates :math:`g_t = \operatorname{softmax}
    (s_t + \log M_t)` and expert outputs :math:`Y_{e}`:

    .. math:: \dot g_t = g_t \odot \bigl(\dot s_t - \langle \dot s_t, g_t\rangle\mathbf 1
       \bigr),\qquad \dot y_t = \sum_e \bigl(\dot g_{te}\, Y_{e,t} + g_{te}\,
       \dot Y_{e,t}\bigr),

    :math:`\dot g` by the (symmetric) softmax Jacobian, zero at unselected experts
    (:math:`g_{te} = 0`; the mask gets no tangent); :math:`\dot Y_e` forward through the
    expert MLP, :math:`\dot A = \dot X W^e_{\text{in}} + X \dot W^e_{\text{in}}`, the
    activation's JVP, :math:`\dot Y_e = \dot H W^e_{\text{out}} + H \dot W^e_{\text{out}}`
    (SwiGLU: :math:`\dot A` and :math:`\dot B` through :math:`W_1, W_3`, then
    :func:`~nlaverify.ops.activations.swiglu_jvp` and :math:`W_2`).

    Not renormalised (:math:`g = M \odot p`, :math:`p = \operatorname{softmax}(s)`):
    :math:`\dot g = M \odot \bigl(p \odot (\dot s - \langle \dot s, p\rangle\mathbf 1)
    \bigr)`.

    ``T = (dX, dscores, dW...)``, one per real argument (none for the mask), an entry
    ``None`` meaning a zero tangent.
    """
    _check_moe(xp, X, scores, mask, weights, activation)
    dX, ds, *dW = tangents("moe_jvp", T, ("dX", "dscores",
                                         *(f"dW{k + 1}" for k in range(len(weights)))))
    specs = {"X": (X, ("*", "n", "d")), "dX": (dX, ("*", "n", "d")),
             "scores": (scores, ("*", "n", "E")), "dscores": (ds, ("*", "n", "E"))}
    for (name, dims), W, dw in zip(_weight_dims(activation), weights, dW, strict=True):
        specs.update({name: (W, dims), f"d{name}": (dw, dims)})
    check_args("moe_jvp", xp, specs)
    shape = tuple(X.shape)
    X, scores, mask = _rows(xp, X), _rows(xp, scores), _rows(xp, mask)
    dX, ds = lin(dX, lambda t: _rows(xp, t)), lin(ds, lambda t: _rows(xp, t))
    gates, p = _gates(xp, scores, mask, renormalize)
    hidden, Y = _experts(xp, X, weights, activation)
    dgates = lin(ds, lambda t: _selected(xp, softmax_jvp_from_output(xp, t, p), mask))  # (n, E)

    def proj(dx: Any, W: Any, dw: Any) -> Any:  # tangent of X W (E, n, m), or None
        return _tsum_or_none(lin(dx, lambda t: xp.matmul(t, W)),
                             lin(dw, lambda t: xp.matmul(X, t)))

    if activation == "swiglu":
        (W1, W3, W2), (dW1, dW3, dW2) = weights, dW
        A, B, H = hidden
        dA, dB = proj(dX, W1, dW1), proj(dX, W3, dW3)
        dH = None if dA is None and dB is None else swiglu_jvp(xp, (dA, dB), A, B)
    else:
        (_, W2), (dW_in, dW2) = weights, dW
        A, H = hidden
        dH = lin(proj(dX, weights[0], dW_in), lambda t: _ACT_JVP[activation](xp, (t,), A))
    dY = _tsum_or_none(lin(dH, lambda t: xp.matmul(t, W2)), lin(dW2, lambda t: xp.matmul(H, t)))
    gT = xp.permute_dims(gates, (1, 0))[:, :, None]                        # (E, n, 1)
    out = tsum(lin(dgates, lambda t: xp.permute_dims(t, (1, 0))[:, :, None] * Y),
               lin(dY, lambda t: gT * t))
    return xp.reshape(xp.sum(out, axis=0), shape)


def _weight_dims(activation: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The expert weights' names and named dimensions."""
    if activation == "swiglu":
        return (("W1", ("E", "d", "m")), ("W3", ("E", "d", "m")), ("W2", ("E", "m", "d")))
    return (("W_in", ("E", "d", "m")), ("W_out", ("E", "m", "d")))


def _tsum_or_none(*terms: Any) -> Any:
    return None if all(t is None for t in terms) else tsum(*terms)


def _check_moe(xp, X, scores, mask, weights, activation) -> None:
    if activation not in ("relu", "gelu", "swiglu"):
        raise ShapeError(f"moe: argument 'activation': expected relu, gelu or swiglu, got "
                         f"{activation!r}")
    n_w = 3 if activation == "swiglu" else 2
    if len(weights) != n_w:
        raise ShapeError(f"moe: expected {n_w} expert weight arrays for {activation}, got "
                         f"{len(weights)}")
    specs = {"X": (X, ("*", "n", "d")), "scores": (scores, ("*", "n", "E"))}
    specs.update({name: (W, dims) for (name, dims), W in zip(_weight_dims(activation), weights,
                                                             strict=True)})
    dims = check_args("moe", xp, specs)
    check_args("moe", xp, {"mask": (mask, ("*", "n", "E"))}, bound=dims, floating=False)
    check_mask("moe", xp, mask)
    if tuple(mask.shape) != tuple(scores.shape):
        raise ShapeError(f"moe: argument 'mask': expected shape {tuple(scores.shape)} (the "
                         f"shape of 'scores'), got {tuple(mask.shape)}")
