r"""The routers of released mixture-of-experts models: which experts a token uses (the
*selection*, piecewise constant) and the gate values of the chosen ones (differentiable).

**Qwen-MoE** (Qwen team, Qwen1.5-MoE / Qwen2-MoE / Qwen3-MoE; Hugging Face
``Qwen2MoeTopKRouter``): the router logits :math:`l = x W_r` (``gate.weight`` is
:math:`W_r^\top`), :math:`p = \operatorname{softmax}(l)`, the top-:math:`k` experts of
:math:`p` (equivalently of :math:`l`: softmax is increasing), gates :math:`g_e = p_e`
(``norm_topk_prob=False``: Qwen1.5-MoE, Qwen2-MoE) or :math:`g_e = p_e / \sum_{e'\in S}
p_{e'}` (``norm_topk_prob=True``: Qwen3-MoE), no :math:`\epsilon`:
:func:`qwen_moe_select`, and the gates of :func:`nlaverify.ops.moe._gates`.

**DeepSeek-V3** (DeepSeek-AI 2024, DeepSeek-V3 technical report §2.1.2; Hugging Face
``DeepseekV3TopkRouter``): sigmoid affinities :math:`s = \sigma(x W_r)`; the selection reads
:math:`s + b`, :math:`b` the load-balancing bias (``e_score_correction_bias``, auxiliary-loss
free balancing), group-limited: the :math:`E` experts in ``n_group`` consecutive groups, a
group's score the sum of its two largest biased scores, the ``topk_group`` best groups kept,
then the top-:math:`k` experts among theirs (:func:`group_limited_topk_mask`,
:func:`deepseek_v3_select`; :func:`deepseek_v3_route`, :func:`deepseek_v3_router` end to
end). The gates read :math:`s`, *never* :math:`b` (:func:`deepseek_v3_gates`):

.. math:: g_e = \rho\,\frac{M_e\, s_e}{\sum_{e'} M_{e'} s_{e'} + \epsilon}
          \quad(\texttt{norm\_topk\_prob}),\qquad g_e = \rho\, M_e s_e \quad\text{otherwise},

:math:`\rho` = ``routed_scaling_factor`` (2.5 in DeepSeek-V3), :math:`\epsilon = 10^{-20}`
(:data:`DEEPSEEK_V3_GATE_EPS`: Hugging Face's ``topk_weights.sum(dim=-1, keepdim=True) +
1e-20``, part of the convention; the gates then sum to :math:`\rho\,\Sigma/(\Sigma +
\epsilon)`, :math:`\Sigma = \sum_S s_e`, which is :math:`\rho` to within :math:`\epsilon/
\Sigma`, below float64's unit roundoff for :math:`\Sigma > 10^{-4}`).

**The selection is piecewise constant** in the scores (and the bias): its derivative is 0
wherever it is defined (away from ties, a set of measure zero), so the masks of this module
have no VJP or JVP; the ops of :mod:`nlaverify.ops.moe_shared` take the mask as a fixed
argument and differentiate the gates only (the gradient Hugging Face's autograd computes: its
``topk`` indices carry none).

Ties are broken towards the lower index everywhere (:func:`nlaverify.ops.moe.topk_mask`);
``torch.topk`` leaves the order of ties unspecified, so on tied scores the two may choose
differently (a set of measure zero).
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ShapeError
from nlaverify.ops._tangent import lin, tangents
from nlaverify.ops._validate import check_args, check_int, check_mask, check_positive_finite
from nlaverify.ops.activations import _sigmoid_pair, sigmoid
from nlaverify.ops.moe import topk_mask

__all__ = ["DEEPSEEK_V3_GATE_EPS", "deepseek_v3_affinity", "deepseek_v3_affinity_vjp",
           "deepseek_v3_gates", "deepseek_v3_gates_jvp",
           "deepseek_v3_gates_vjp", "deepseek_v3_route", "deepseek_v3_router",
           "deepseek_v3_select", "deepseek_v3_select_vjp", "group_limited_topk_mask",
           "masked_topk_mask", "qwen_moe_router", "qwen_moe_select", "sigmoid_gates_tangent"]

#: the :math:`\epsilon` of DeepSeek-V3's gate normaliser (Hugging Face
#: ``DeepseekV3TopkRouter.forward``: ``topk_weights.sum(dim=-1, keepdim=True) + 1e-20``)
DEEPSEEK_V3_GATE_EPS = 1e-20


def masked_topk_mask(xp: Namespace, scores: Any, allowed: Any, top_k: int) -> Any:
    r"""0/1 mask of the ``top_k`` largest ``scores`` among the ``allowed`` entries (``allowed``
    a 0/1 array of the same shape, ``(*, E)``): expert :math:`e` is chosen iff
    :math:`A_e = 1` and fewer than :math:`k` allowed experts outrank it (larger, or equal with
    a lower index), :math:`\sum_{f\ne e} A_f [f \succ e] < k`. With :math:`A = \mathbf 1` it
    is :func:`~nlaverify.ops.moe.topk_mask`. No :math:`-\infty` fill (Hugging Face's
    ``masked_fill(-inf)``): the dropped experts are out of the count. Piecewise constant:
    no derivative."""
    check_int("masked_topk_mask", "top_k", top_k)
    E = scores.shape[-1]
    cols = []
    for e in range(E):
        s_e = scores[..., e]
        one, zero = xp.ones_like(s_e), xp.zeros_like(s_e)
        rank = zero
        for f in range(E):
            if f == e:
                continue
            above = (xp.greater(scores[..., f], s_e) if f > e
                     else xp.greater(s_e, scores[..., f]))
            # f > e outranks e when larger; f < e when not smaller (a tie goes to f)
            beats = xp.where(above, one, zero) if f > e else xp.where(above, zero, one)
            rank = rank + allowed[..., f] * beats
        chosen = xp.where(xp.greater(rank, top_k - 1), zero, one)
        cols.append(allowed[..., e] * chosen)
    return xp.stack(cols, axis=-1)


def _group_allowed(xp: Namespace, op: str, scores: Any, top_k: int, n_group: int,
                   topk_group: int, *, best: int) -> Any:
    r"""The 0/1 mask ``(*, E)`` of the experts in the ``topk_group`` best of ``n_group``
    consecutive groups of ``scores``, a group scored by the sum of its ``best`` largest
    entries (DeepSeek-V3: 2; DeepSeek-V2: 1, its maximum), ties to the lower group; the
    arguments validated under ``op``'s name (groups of at least ``best`` experts, ``top_k`` at
    most the kept groups' experts)."""
    dims = check_args(op, xp, {"scores": (scores, ("*", "E"))})
    for name, v in (("top_k", top_k), ("n_group", n_group), ("topk_group", topk_group)):
        check_int(op, name, v)
    E = dims["E"]
    if n_group < 1 or E % n_group or E // n_group < best:
        least = f" leaving groups of at least {best} experts" if best > 1 else ""
        raise ShapeError(f"{op}: argument 'n_group': expected a divisor of E={E}{least}, got "
                         f"{n_group}")
    if not 1 <= topk_group <= n_group:
        raise ShapeError(f"{op}: argument 'topk_group': expected 1 <= topk_group <= "
                         f"n_group={n_group}, got {topk_group}")
    size = E // n_group
    if not 1 <= top_k <= topk_group * size:
        raise ShapeError(f"{op}: argument 'top_k': expected 1 <= top_k <= topk_group * E / "
                         f"n_group = {topk_group * size}, got {top_k}")
    group_scores = [xp.sum(topk_mask(xp, part, best) * part, axis=-1)
                    for part in (scores[..., g * size:(g + 1) * size] for g in range(n_group))]
    keep = topk_mask(xp, xp.stack(group_scores, axis=-1), topk_group)   # (*, n_group)
    return xp.concat([xp.stack([keep[..., g]] * size, axis=-1) for g in range(n_group)],
                     axis=-1)


def group_limited_topk_mask(xp: Namespace, scores: Any, top_k: int, n_group: int,
                            topk_group: int) -> Any:
    r"""DeepSeek-V3's group-limited top-:math:`k` (node-limited routing, §2.1.2): the
    :math:`E` experts of ``scores`` ``(*, E)`` in ``n_group`` consecutive groups of
    :math:`E/n_{\text{group}} \ge 2`; a group's score is the sum of its two largest scores;
    the ``topk_group`` best groups are kept (ties: lower group first) and the ``top_k``
    best experts among theirs chosen (:func:`masked_topk_mask`). With ``topk_group ==
    n_group`` it is the plain :func:`~nlaverify.ops.moe.topk_mask` (identity
    ``moe_group_limited_all_groups_is_topk``). Piecewise constant: no derivative."""
    allowed = _group_allowed(xp, "group_limited_topk_mask", scores, top_k, n_group,
                             topk_group, best=2)
    return masked_topk_mask(xp, scores, allowed, top_k)


def qwen_moe_select(xp: Namespace, logits: Any, top_k: int) -> Any:
    r"""Qwen-MoE's selection: the ``top_k`` largest router logits ``(*, E)`` (the top-k of
    :math:`\operatorname{softmax}(l)`, softmax being increasing). Piecewise constant."""
    return topk_mask(xp, logits, top_k)


def deepseek_v3_affinity(xp: Namespace, logits: Any) -> Any:
    r"""DeepSeek-V3's affinities :math:`s = \sigma(l)` of the router logits :math:`l = xW_r`
    ``(*, E)`` (technical report eq. (15); Hugging Face ``router_logits.sigmoid()``), the
    input of the selection :func:`deepseek_v3_select` (a graph node). The gates recompute
    :math:`s` from :math:`W_r` inside :func:`nlaverify.ops.moe_shared.deepseek_v3_moe`, so this
    node feeds the piecewise-constant choice only and takes no cotangent."""
    check_args("deepseek_v3_affinity", xp, {"logits": (logits, ("*", "E"))})
    return sigmoid(xp, logits)


def deepseek_v3_affinity_vjp(xp: Namespace, G: Any, logits: Any) -> tuple[()]:
    """No cotangent: the affinities feed the selection only (its argument fixed)."""
    return ()


def deepseek_v3_select(xp: Namespace, scores: Any, bias: Any, top_k: int, n_group: int,
                       topk_group: int) -> Any:
    r"""DeepSeek-V3's selection: :func:`group_limited_topk_mask` of :math:`s + b`, ``scores``
    the affinities :math:`s = \sigma(l)` ``(*, E)``, ``bias`` ``(E,)``
    (``e_score_correction_bias``). The bias enters here only. Piecewise constant: no
    derivative."""
    check_args("deepseek_v3_select", xp, {"scores": (scores, ("*", "E")),
                                          "bias": (bias, ("E",))})
    return group_limited_topk_mask(xp, scores + bias, top_k, n_group, topk_group)


def deepseek_v3_select_vjp(xp: Namespace, G: Any, scores: Any, bias: Any, top_k: int,
                           n_group: int, topk_group: int) -> tuple[()]:
    """No cotangent: the selection is piecewise constant (its derivative is 0 wherever it is
    defined), its arguments fixed (as :func:`nlaverify.ops.moe.topk_mask_vjp`)."""
    return ()


def _check_gates(op: str, xp: Namespace, s: Any, mask: Any, rho: Any,
                 ds: Any = None) -> None:
    dims = check_args(op, xp, {"scores": (s, ("*", "E")), "dscores": (ds, ("*", "E"))})
    check_args(op, xp, {"mask": (mask, ("*", "E"))}, bound=dims, floating=False)
    if tuple(mask.shape) != tuple(s.shape):
        raise ShapeError(f"{op}: argument 'mask': expected shape {tuple(s.shape)} (the shape "
                         f"of 'scores'), got {tuple(mask.shape)}")
    check_mask(op, xp, mask)
    check_positive_finite(op, "routed_scaling_factor", rho)


def _normaliser(xp: Namespace, a: Any, eps: float) -> Any:
    return xp.sum(a, axis=-1, keepdims=True) + xp.const(eps)


def deepseek_v3_gates(xp: Namespace, scores: Any, mask: Any, *,
                      routed_scaling_factor: float = 1.0, renormalize: bool = True,
                      eps: float = DEEPSEEK_V3_GATE_EPS) -> Any:
    r"""DeepSeek-V3's gates from the affinities ``scores`` :math:`s = \sigma(l)` ``(*, E)``
    and the chosen experts ``mask`` (module docstring): :math:`g = \rho\, a/(\sum_e a_e +
    \epsilon)`, :math:`a = M\odot s`, or :math:`g = \rho\, a` without ``renormalize``. The
    bias is not an argument: it chooses, it never weighs."""
    _check_gates("deepseek_v3_gates", xp, scores, mask, routed_scaling_factor)
    a = _on(xp, scores, mask)
    rho = xp.const(routed_scaling_factor)
    return rho * a / _normaliser(xp, a, eps) if renormalize else rho * a


def _on(xp: Namespace, A: Any, mask: Any) -> Any:
    """``A`` at the chosen experts, 0 elsewhere."""
    return xp.where(xp.greater(mask, 0), A, xp.zeros_like(A))


def deepseek_v3_gates_vjp(xp: Namespace, G: Any, scores: Any, mask: Any, *,
                          routed_scaling_factor: float = 1.0, renormalize: bool = True,
                          eps: float = DEEPSEEK_V3_GATE_EPS) -> tuple[Any]:
    r"""VJP of :func:`deepseek_v3_gates` (mask fixed): with :math:`Z = \sum_e a_e +
    \epsilon`,

    .. math:: \bar s = M\odot\frac{\rho\,\bar g - \langle\bar g, g\rangle\mathbf 1}{Z}
       \quad(\texttt{renormalize}),\qquad \bar s = \rho\, M\odot\bar g\quad\text{otherwise}.
    """
    _check_gates("deepseek_v3_gates_vjp", xp, scores, mask, routed_scaling_factor, G)
    rho = xp.const(routed_scaling_factor)
    if not renormalize:
        return (_on(xp, rho * G, mask),)
    a = _on(xp, scores, mask)
    Z = _normaliser(xp, a, eps)
    g = rho * a / Z
    return (_on(xp, (rho * G - xp.sum(G * g, axis=-1, keepdims=True)) / Z, mask),)


def deepseek_v3_gates_jvp(xp: Namespace, T: tuple[Any], scores: Any, mask: Any, *,
                          routed_scaling_factor: float = 1.0, renormalize: bool = True,
                          eps: float = DEEPSEEK_V3_GATE_EPS) -> Any:
    r"""JVP of :func:`deepseek_v3_gates` (mask fixed), the dual of
    :func:`deepseek_v3_gates_vjp`: :math:`\dot a = M\odot\dot s`,

    .. math:: \dot g = \frac{\rho\,\dot a - g\,\textstyle\sum_e \dot a_e}{Z}
       \quad(\texttt{renormalize}),\qquad \dot g = \rho\,\dot a\quad\text{otherwise}.

    ``T = (dscores,)``; ``None`` is not allowed (a zero direction has a zero JVP)."""
    (ds,) = tangents("deepseek_v3_gates_jvp", T, ("dscores",))
    _check_gates("deepseek_v3_gates_jvp", xp, scores, mask, routed_scaling_factor, ds)
    rho = xp.const(routed_scaling_factor)
    da = _on(xp, ds, mask)
    if not renormalize:
        return rho * da
    a = _on(xp, scores, mask)
    Z = _normaliser(xp, a, eps)
    g = rho * a / Z
    return (rho * da - g * xp.sum(da, axis=-1, keepdims=True)) / Z


def sigmoid_gates_tangent(xp: Namespace, dlogits: Any, logits: Any, mask: Any,
                          **static: Any) -> Any:
    r"""The gates' tangent along router logits :math:`\dot l` (``None``: zero), through
    :math:`\dot s = \sigma(l)\sigma(-l)\odot\dot l`: a helper of the block ops."""
    s, s_neg = _sigmoid_pair(xp, logits)
    return lin(dlogits, lambda t: deepseek_v3_gates_jvp(xp, (s * s_neg * t,), s, mask,
                                                        **static))


def deepseek_v3_route(xp: Namespace, scores: Any, bias: Any, *, top_k: int, n_group: int,
                      topk_group: int, routed_scaling_factor: float = 1.0,
                      renormalize: bool = True, eps: float = DEEPSEEK_V3_GATE_EPS
                      ) -> tuple[Any, Any]:
    r"""DeepSeek-V3's routing of the affinities :math:`s` ``(*, E)``: ``(gates, mask)``, the
    gates dense (0 off the chosen experts): :func:`deepseek_v3_select` of :math:`s + b`, then
    :func:`deepseek_v3_gates` of :math:`s` (identity ``moe_bias_chooses_never_weighs``)."""
    mask = deepseek_v3_select(xp, scores, bias, top_k, n_group, topk_group)
    gates = deepseek_v3_gates(xp, scores, mask, routed_scaling_factor=routed_scaling_factor,
                              renormalize=renormalize, eps=eps)
    return gates, mask


def deepseek_v3_router(xp: Namespace, logits: Any, bias: Any, **static: Any
                       ) -> tuple[Any, Any]:
    r"""DeepSeek-V3's router end to end from the router logits :math:`l = xW_r` ``(*, E)``:
    :func:`deepseek_v3_route` of :math:`s = \sigma(l)` (``static``: its keyword arguments).
    Hugging Face's ``(topk_weights, topk_indices)`` scattered into :math:`E` columns."""
    return deepseek_v3_route(xp, sigmoid(xp, logits), bias, **static)


def qwen_moe_router(xp: Namespace, logits: Any, *, top_k: int, renormalize: bool = False
                    ) -> tuple[Any, Any]:
    r"""Qwen-MoE's router end to end: ``(gates, mask)``, the gates dense: the selected
    entries of :math:`\operatorname{softmax}(l)`, renormalised to sum to 1 with
    ``renormalize`` (``norm_topk_prob``; :func:`nlaverify.ops.moe._gates`)."""
    from nlaverify.ops.moe import _gates

    mask = qwen_moe_select(xp, logits, top_k)
    return _gates(xp, logits, mask, renormalize)[0], mask
