r"""The mixture-of-experts options of released routers (issue 23): their checks, the experts'
width, which blocks are sparse, DeepSeek-V3's load-balancing bias, and the parameters a token
activates.

Qwen-MoE (Qwen1.5-MoE, Qwen2-MoE, Qwen3-MoE; Hugging Face ``Qwen2MoeSparseMoeBlock``,
``Qwen3MoeSparseMoeBlock``): the softmax router (``moe_router="softmax"``), experts of width
``moe_intermediate_size``, a shared SwiGLU expert of width ``d_shared_expert`` gated by
:math:`\sigma(x\cdot w_{sg})` (``shared_expert_gate``), dense MLPs in the blocks
``moe_dense_layers`` (``mlp_only_layers``, ``decoder_sparse_step``). DeepSeek-V3
(DeepSeek-AI 2024, technical report §2.1.2; ``DeepseekV3MoE``): the sigmoid router
(``moe_router="sigmoid"``), the selection by :math:`\sigma(xW_r) + b` limited to ``topk_group``
of ``n_group`` groups, gates scaled by :math:`\rho` = ``routed_scaling_factor``, ungated shared
experts (width ``d_shared_expert`` = ``n_shared_experts * moe_intermediate_size``), the first
``first_k_dense_replace`` blocks dense. DeepSeek-V2 (DeepSeek-AI 2024, technical report §2.2;
``DeepseekV2Moe``): the softmax router over all experts (``moe_router="softmax_group"``), the
selection greedy (``n_group = topk_group = 1``) or limited to ``topk_group`` of ``n_group``
groups scored by their largest affinity, gates :math:`\rho\, s_e` never renormalised
(``moe_renormalize=False``), ungated shared experts, no bias.

The load-balancing bias :math:`b` (``e_score_correction_bias``) is a *buffer* in Hugging
Face (updated outside the gradient, not in ``parameters()``): the graph holds it as a constant
input ``blocks.{l}.mlp.e_bias`` (:func:`routing_bias`, never counted as a parameter, never
differentiated); a released checkpoint's trained values are passed with the data, which
replace the constant (:func:`nlaverify.graph.build.graph_constants`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nlaverify.config_options import ConfigError

__all__ = ["MOE_DEFAULTS", "MOE_ROUTERS", "activated_line", "activated_parameters",
           "check_moe", "expert_width", "routing_bias", "sparse_block"]

#: the routers of :attr:`TransformerConfig.moe_router`: Mixtral's and Qwen's softmax,
#: DeepSeek-V3's sigmoid, DeepSeek-V2's group-limited softmax
MOE_ROUTERS = ("softmax", "sigmoid", "softmax_group")

#: the released routers' options at their defaults (Mixtral's router, no shared expert)
MOE_DEFAULTS = {"moe_router": "softmax", "moe_intermediate_size": None, "d_shared_expert": 0,
             "shared_expert_gate": False, "routed_scaling_factor": 1.0, "n_group": 1,
             "topk_group": 1, "moe_dense_layers": ()}


def _err(field: str, want: str, got: Any) -> ConfigError:
    return ConfigError(f"TransformerConfig.{field}: expected {want}, got {got!r}")


def _check_types(cfg: Any) -> None:
    if cfg.moe_router not in MOE_ROUTERS:
        raise _err("moe_router", f"one of {', '.join(MOE_ROUTERS)}", cfg.moe_router)
    for f, low, none_ok in (("moe_intermediate_size", 1, True), ("d_shared_expert", 0, False),
                            ("n_group", 1, False), ("topk_group", 1, False)):
        v = getattr(cfg, f)
        if v is None and none_ok:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise _err(f, f"an integer >= {low}" + (" or None" if none_ok else ""), v)
    if not isinstance(cfg.shared_expert_gate, bool):
        raise _err("shared_expert_gate", "True or False", cfg.shared_expert_gate)
    rho = cfg.routed_scaling_factor
    if isinstance(rho, bool) or not isinstance(rho, int | float) or not (
            math.isfinite(rho) and rho > 0):
        raise _err("routed_scaling_factor", "a finite number > 0", rho)
    layers = cfg.moe_dense_layers
    if isinstance(layers, list):
        object.__setattr__(cfg, "moe_dense_layers", tuple(layers))
        layers = cfg.moe_dense_layers
    if not isinstance(layers, tuple) or any(
            isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < cfg.n_blocks
            for i in layers) or list(layers) != sorted(set(layers)):
        raise _err("moe_dense_layers", f"a tuple of distinct block indices in [0, "
                                       f"n_blocks={cfg.n_blocks}) in increasing order", layers)


def check_moe(cfg: Any) -> None:
    r"""The released routers' options (module docstring), each refusal a :class:`ConfigError`
    naming the field: every option at its default without experts; the softmax router has no
    :math:`\rho` and no groups; DeepSeek-V2's ``"softmax_group"`` (:func:`nlaverify.ops.
    moe_deepseek_v2.deepseek_v2_moe`) as the sigmoid router but groups of one expert allowed
    and no renormalising; the sigmoid router (:func:`nlaverify.ops.moe_shared.
    deepseek_v3_moe`) has SwiGLU experts, ungated shared experts, and groups of at least two
    experts (:func:`nlaverify.ops.moe_routing.group_limited_topk_mask`); a shared expert is a
    SwiGLU (Hugging Face ``Qwen2MoeMLP``, ``DeepseekV3MLP``) and its gate needs it."""
    _check_types(cfg)
    if not cfg.n_experts:
        for f, v in MOE_DEFAULTS.items():
            if getattr(cfg, f) != v:
                raise ConfigError(f"TransformerConfig.{f}: applies to mixtures of experts "
                                  f"(n_experts > 0); expected {v!r} with n_experts=0, got "
                                  f"{getattr(cfg, f)!r}")
        return
    if cfg.d_shared_expert and cfg.mlp != "swiglu":
        raise _err("mlp", "'swiglu' with a shared expert (d_shared_expert > 0)", cfg.mlp)
    if cfg.shared_expert_gate and not cfg.d_shared_expert:
        raise _err("shared_expert_gate", "False without a shared expert (d_shared_expert=0)",
                   True)
    if cfg.moe_router == "softmax":
        for f in ("routed_scaling_factor", "n_group", "topk_group"):
            if getattr(cfg, f) != MOE_DEFAULTS[f]:
                raise ConfigError(f"TransformerConfig.{f}: applies to moe_router='sigmoid' "
                                  f"(DeepSeek-V3); expected {MOE_DEFAULTS[f]!r} with the softmax "
                                  f"router, got {getattr(cfg, f)!r}")
        return
    r = cfg.moe_router
    if cfg.mlp != "swiglu":
        raise _err("mlp", f"'swiglu' experts with moe_router={r!r}", cfg.mlp)
    if not cfg.d_shared_expert:
        raise _err("d_shared_expert", f"> 0 with moe_router={r!r} (DeepSeek's shared "
                                      "experts)", 0)
    if cfg.shared_expert_gate:
        raise _err("shared_expert_gate", f"False with moe_router={r!r} (DeepSeek's "
                                         "shared experts are ungated)", True)
    E, G = cfg.n_experts, cfg.n_group
    least = 2 if r == "sigmoid" else 1   # V3 sums a group's top two; V2 takes its max
    if r == "softmax_group" and cfg.moe_renormalize:
        raise _err("moe_renormalize", "False with moe_router='softmax_group' (DeepSeek-V2's "
                                      "gates rho * s are never renormalised)", True)
    if E % G or E // G < least:
        raise _err("n_group", f"a divisor of n_experts={E} leaving groups of at least "
                              f"{least}", G)
    if cfg.topk_group > G:
        raise _err("topk_group", f"<= n_group={G}", cfg.topk_group)
    if cfg.top_k > cfg.topk_group * (E // G):
        raise _err("top_k", f"<= topk_group * n_experts / n_group = "
                            f"{cfg.topk_group * (E // G)}", cfg.top_k)


def expert_width(cfg: Any) -> int:
    """The routed experts' width: ``moe_intermediate_size``, or ``d_mlp`` when ``None``."""
    return cfg.d_mlp if cfg.moe_intermediate_size is None else cfg.moe_intermediate_size


def sparse_block(cfg: Any, layer: int) -> bool:
    """Whether block ``layer`` has the mixture of experts (not one of ``moe_dense_layers``)."""
    return bool(cfg.n_experts) and layer not in cfg.moe_dense_layers


def routing_bias(cfg: Any, layer: int) -> np.ndarray:
    r"""The load-balancing bias :math:`b \in \mathbb R^E` of block ``layer`` under the sigmoid
    router, the graph's constant ``blocks.{layer}.mlp.e_bias``: a fixed draw
    :math:`N(0, 1/4)` from ``SeedSequence([23, layer])``, rounded to a multiple of
    :math:`1/8` (exact in bfloat16 and every wider type, so a low-precision run holds the very
    bias of the float64 reference), standing in for the trained values (Hugging Face
    initialises the buffer to zeros; a zero bias would leave the selection by :math:`s + b`
    untested). A checkpoint's values are passed with the data."""
    seed = np.random.SeedSequence([23, layer]).generate_state(1)[0]
    return np.round(8 * np.random.default_rng(int(seed)).normal(0.0, 0.5, cfg.n_experts)) / 8


def activated_parameters(cfg: Any, total: int, experts: int) -> int:
    r"""The parameters one token activates: ``total`` less the routed experts it does not use,
    :math:`P_{act} = P - \sum_{l\ \text{sparse}} (E - k)\,P_e`, with ``experts`` :math:`=
    \sum_l E\,P_e` the routed experts' parameters (component ``moe.experts``): the router, the
    shared experts and every dense part count in full (Qwen's and DeepSeek's "activated
    parameters"; Baggag & Saad §3.12)."""
    if not cfg.n_experts:
        return total
    return total - experts * (cfg.n_experts - cfg.top_k) // cfg.n_experts


def activated_line(cfg: Any, counts: Any) -> tuple[int, str] | None:
    """``(activated, text)`` for ``nlaverify params`` of a mixture of experts
    (:func:`activated_parameters` of the :class:`~nlaverify.graph.build.ParameterCounts`
    ``counts``), ``None`` for a dense model."""
    if not cfg.n_experts:
        return None
    active = activated_parameters(cfg, counts.total, counts.by_component.get("moe.experts", 0))
    return active, (f"{active:>20,}  {100 * active / counts.total:6.2f} %  ({cfg.top_k} of "
                    f"{cfg.n_experts} routed experts, shared and dense parts)")
