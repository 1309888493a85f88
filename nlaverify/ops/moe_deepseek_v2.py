r"""DeepSeek-V2's mixture of experts (DeepSeek-AI 2024, DeepSeek-V2 technical report §2.2;
Hugging Face ``DeepseekV2TopkRouter``, ``DeepseekV2Moe``, transformers 5.25): the softmax
router, its greedy or group-limited selection, the scaled gates and the ungated shared experts.

The affinities are the softmax over *all* :math:`E` experts,
:math:`s = \operatorname{softmax}(xW_r)` (:func:`deepseek_v2_affinity`).
The selection (:func:`deepseek_v2_select`) is, for
``topk_method="greedy"``, the plain top-:math:`k` of :math:`s` (``n_group = topk_group = 1``
here); for ``"group_limited_greedy"`` the :math:`E` experts in ``n_group`` consecutive
groups, a group scored by its **largest** affinity (DeepSeek-V3 sums the two largest of
:math:`s + b`), the ``topk_group`` best groups kept, then the top-:math:`k` experts among
theirs (:func:`group_max_topk_mask`). The gates are the chosen affinities times :math:`\rho`
= ``routed_scaling_factor``, never renormalised (Hugging Face 5.25 deletes
``norm_topk_prob`` from the router: ``topk_weights * self.routed_scaling_factor``):

.. math:: y = \sum_{e\in S(x)} \rho\, s_e(x)\, E_e(x) + S(x),

:math:`S` the ``n_shared_experts`` shared experts as one ungated SwiGLU of width
``n_shared_experts * moe_intermediate_size`` (``shared_experts``). The selection is piecewise
constant (no derivative, as :mod:`nlaverify.ops.moe_routing`); the block's VJP and JVP hold
the mask fixed (:func:`deepseek_v2_moe_vjp`, :func:`deepseek_v2_moe_jvp`).
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._validate import check_args, check_positive_finite
from nlaverify.ops.moe import topk_mask
from nlaverify.ops.moe_routing import _group_allowed
from nlaverify.ops.moe_shared import _block, _block_jvp, _block_vjp
from nlaverify.ops.softmaxes import softmax

__all__ = ["deepseek_v2_affinity", "deepseek_v2_affinity_vjp", "deepseek_v2_moe",
           "deepseek_v2_moe_jvp", "deepseek_v2_moe_vjp", "deepseek_v2_select",
           "deepseek_v2_select_vjp", "group_max_topk_mask"]

def group_max_topk_mask(xp: Namespace, scores: Any, top_k: int, n_group: int,
                        topk_group: int) -> Any:
    r"""DeepSeek-V2's device-limited top-:math:`k` (``group_limited_greedy``, report §2.2.2):
    the :math:`E` experts of ``scores`` ``(*, E)`` in ``n_group`` consecutive groups of
    :math:`E/n_{\text{group}} \ge 1`; a group scores :math:`\max_{e\in g} s_e`; the
    ``topk_group`` best groups are kept (ties: lower group first), the others' scores set to
    0 (HF's ``masked_fill(~score_mask, 0.0)``) and the ``top_k`` best of all :math:`E` chosen
    (:func:`~nlaverify.ops.moe.topk_mask`; on affinities, positive, the best of the kept
    groups' experts). With
    ``topk_group == n_group`` it is the plain :func:`~nlaverify.ops.moe.topk_mask` (identity
    ``moe_group_max_all_groups_is_topk``). Piecewise constant: no derivative."""
    allowed = _group_allowed(xp, "group_max_topk_mask", scores, top_k, n_group, topk_group,
                             best=1)   # a group scores its maximum
    # HF's masked_fill(~score_mask, 0.0), then top-k over all E: on affinities (> 0) the
    # top-k of the kept groups; on signed scores a dropped expert's 0 outranks a kept
    # negative one, as in DeepseekV2TopkRouter
    return topk_mask(xp, scores * allowed, top_k)


def deepseek_v2_affinity(xp: Namespace, logits: Any) -> Any:
    r"""DeepSeek-V2's affinities :math:`s = \operatorname{softmax}(l)` over all experts of the
    router logits :math:`l = xW_r` ``(*, E)`` (report eq. (11); Hugging Face
    ``router_logits.softmax(dim=-1)``), the input of :func:`deepseek_v2_select` (a graph
    node). The gates recompute :math:`s` from :math:`W_r` inside :func:`deepseek_v2_moe`, so
    this node feeds the piecewise-constant choice only and takes no cotangent."""
    check_args("deepseek_v2_affinity", xp, {"logits": (logits, ("*", "E"))})
    return softmax(xp, logits)


def deepseek_v2_affinity_vjp(xp: Namespace, G: Any, logits: Any) -> tuple[()]:
    """No cotangent: the affinities feed the selection only (its argument fixed)."""
    return ()


def deepseek_v2_select(xp: Namespace, scores: Any, top_k: int, n_group: int = 1,
                       topk_group: int = 1) -> Any:
    r"""DeepSeek-V2's selection of the affinities ``scores`` :math:`s` ``(*, E)``:
    :func:`group_max_topk_mask` (``topk_method="greedy"``: ``n_group = topk_group = 1``, the
    plain top-:math:`k`). Piecewise constant: no derivative."""
    check_args("deepseek_v2_select", xp, {"scores": (scores, ("*", "E"))})
    return group_max_topk_mask(xp, scores, top_k, n_group, topk_group)


def deepseek_v2_select_vjp(xp: Namespace, G: Any, scores: Any, top_k: int, n_group: int = 1,
                           topk_group: int = 1) -> tuple[()]:
    """No cotangent: the selection is piecewise constant (its derivative is 0 wherever it is
    defined), its argument fixed (as :func:`nlaverify.ops.moe.topk_mask_vjp`)."""
    return ()


def _static(op: str, rho: float) -> dict[str, Any]:
    check_positive_finite(op, "routed_scaling_factor", rho)
    return {"routed_scaling_factor": rho}


def deepseek_v2_moe(xp: Namespace, X: Any, mask: Any, W_r: Any, W1: Any, W3: Any, W2: Any,
                    U1: Any, U3: Any, U2: Any, *, routed_scaling_factor: float = 1.0) -> Any:
    r"""DeepSeek-V2's MoE block (module docstring): ``X`` ``(*, n, d)``; ``mask``
    ``(*, n, E)`` from :func:`deepseek_v2_select`; ``W_r`` ``(d, E)`` (``gate.weight``
    transposed); ``W1, W3`` ``(E, d, m)``, ``W2`` ``(E, m, d)`` the experts (``gate_up_proj[e]
    = [W_1^e; W_3^e]^\top``, ``down_proj[e] = {W_2^e}^\top``); ``U1, U3`` ``(d, f)``, ``U2``
    ``(f, d)`` the shared experts.

    .. math:: y = \sum_e g_e E_e(x) + S(x),\quad g = \rho\, M\odot\operatorname{softmax}(xW_r).
    """
    return _block("deepseek_v2_moe", xp, X, mask, (W_r, W1, W3, W2, U1, U3, U2), None,
                  "softmax_scaled", _static("deepseek_v2_moe", routed_scaling_factor))


def deepseek_v2_moe_vjp(xp: Namespace, G: Any, X: Any, mask: Any, W_r: Any, W1: Any, W3: Any,
                        W2: Any, U1: Any, U3: Any, U2: Any, *,
                        routed_scaling_factor: float = 1.0) -> tuple[Any, ...]:
    r"""VJP of :func:`deepseek_v2_moe` (mask fixed): :math:`\bar g_{te} = \langle G_t,
    E_e(x_t)\rangle`, :math:`\bar l = \operatorname{softmax\_vjp}_s(\rho\, M\odot\bar g) =
    s\odot(\bar a - \langle\bar a, s\rangle\mathbf 1)`, :math:`\bar a = \rho M\odot\bar g`,
    :math:`\bar W_r = X^\top\bar l`; the shared experts' MLP VJP with cotangent :math:`G`.

    Returns:
        ``(dX, dW_r, dW1, dW3, dW2, dU1, dU3, dU2)``.
    """
    return _block_vjp("deepseek_v2_moe_vjp", xp, G, X, mask, (W_r, W1, W3, W2, U1, U3, U2),
                      None, "softmax_scaled",
                      _static("deepseek_v2_moe_vjp", routed_scaling_factor))


def deepseek_v2_moe_jvp(xp: Namespace, T: tuple[Any, ...], X: Any, mask: Any, W_r: Any,
                        W1: Any, W3: Any, W2: Any, U1: Any, U3: Any, U2: Any, *,
                        routed_scaling_factor: float = 1.0) -> Any:
    r"""JVP of :func:`deepseek_v2_moe` (mask fixed), the dual of :func:`deepseek_v2_moe_vjp`:
    :math:`\dot l = \dot XW_r + X\dot W_r`, :math:`\dot g = \rho\, M\odot(s\odot(\dot l -
    \langle\dot l, s\rangle\mathbf 1))`, :math:`\dot y = \sum_e(\dot g_e E_e + g_e\dot E_e) +
    \dot S`. ``T`` one tangent per real argument (``dX, dW_r, dW1, dW3, dW2, dU1, dU3,
    dU2``), ``None`` a zero tangent."""
    return _block_jvp("deepseek_v2_moe_jvp", xp, T, X, mask, (W_r, W1, W3, W2, U1, U3, U2),
                      None, "softmax_scaled",
                      _static("deepseek_v2_moe_jvp", routed_scaling_factor))
