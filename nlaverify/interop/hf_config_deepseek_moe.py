r"""DeepSeek-V3's mixture-of-experts layers in the config mapping (issue 23): the MoE keys of a
Hugging Face ``DeepseekV3Config`` <-> the released routers' fields of
:class:`~nlaverify.config.TransformerConfig` (:mod:`nlaverify.config_moe`).

Checked against ``transformers`` 5.25 (``models/deepseek_v3/configuration_deepseek_v3.py``,
``modeling_deepseek_v3.py``: ``DeepseekV3DecoderLayer`` builds ``DeepseekV3MoE`` where
``layer_idx >= first_k_dense_replace``, else ``DeepseekV3MLP`` of width
``intermediate_size``); DeepSeek-AI 2024, DeepSeek-V3 technical report §2.1.2:

* ``n_routed_experts`` (alias ``num_local_experts``, ``attribute_map``) :math:`E` experts of
  width ``moe_intermediate_size`` :math:`m`, top ``num_experts_per_tok`` :math:`k` chosen by
  :math:`\sigma(xW_r) + b` among ``topk_group`` of ``n_group`` groups
  (``DeepseekV3TopkRouter``; ``moe_router="sigmoid"``), the chosen affinities renormalised
  when ``norm_topk_prob`` (``moe_renormalize``) and scaled by :math:`\rho` =
  ``routed_scaling_factor``;
* ``n_shared_experts`` :math:`n_s \ge 1` ungated shared experts, one SwiGLU of width
  :math:`n_s m` (``DeepseekV3MLP(intermediate_size=moe_intermediate_size *
  n_shared_experts)``): ``d_shared_expert`` :math:`= n_s m`;
* ``first_k_dense_replace`` :math:`K`: blocks :math:`0..K-1` dense (``moe_dense_layers``).

The original code's keys: ``scoring_func`` (only ``"sigmoid"``), ``topk_method`` (only
``"noaux_tc"``, the bias-corrected group-limited selection HF implements) and
``moe_layer_freq`` (only 1: HF reads none of the three, so any other value would be a model
HF does not build) are checked; ``aux_loss_alpha``, ``seq_aux`` (training losses) and
``ep_size`` (expert parallelism) change no forward pass and are read and ignored.
"""

from __future__ import annotations

from typing import Any

from nlaverify.config_moe import expert_width
from nlaverify.config_options import ConfigError
from nlaverify.interop.hf_config_reader import typed

__all__ = ["DEEPSEEK_V3_MOE_DEFAULTS", "deepseek_v3_moe_export", "deepseek_v3_moe_fields",
           "deepseek_v3_moe_rebuilt", "refuse_fixed"]

#: ``DeepseekV3Config``'s defaults of the MoE keys (transformers 5.25)
DEEPSEEK_V3_MOE_DEFAULTS: dict[str, Any] = {
    "n_routed_experts": 256, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
    "routed_scaling_factor": 2.5, "norm_topk_prob": True, "n_shared_experts": 1,
    "moe_intermediate_size": 2048}

#: the original code's keys and the only value HF's model agrees with
_FIXED = {"scoring_func": "sigmoid", "topk_method": "noaux_tc", "moe_layer_freq": 1}


def _get(r: Any, key: str, kind: str) -> Any:
    return typed(r.mt, key, r.raw(key, DEEPSEEK_V3_MOE_DEFAULTS[key]), kind)


def refuse_fixed(r: Any, fixed: dict[str, Any], prefix: str) -> None:
    """Refuse, naming the key, any of the original code's router keys ``fixed`` set to another
    value than the one the Hugging Face ``{prefix}TopkRouter`` / ``{prefix}DecoderLayer``
    compute (``True`` is not ``1``); mark the training-only keys read."""
    for key, want in fixed.items():
        got = r.raw(key)
        if got is not None and (got != want or type(got) is not type(want)):  # not True
            raise ConfigError(f"load_hf_config: {r.mt} config: field {key!r}: only {want!r} is "
                              f"supported (what {prefix}TopkRouter / {prefix}DecoderLayer "
                              f"compute), got {got!r}")
    for key in ("aux_loss_alpha", "seq_aux", "ep_size"):
        r.raw(key)


def deepseek_v3_moe_fields(r: Any, n_blocks: int, dense: int) -> dict[str, Any]:
    """The MoE fields of a ``deepseek_v3`` config whose blocks ``dense..n_blocks-1`` are
    mixtures of experts (module docstring), read through the reader ``r``. Raises
    :class:`ConfigError` naming the key."""
    mt = r.mt
    refuse_fixed(r, _FIXED, "DeepseekV3")
    E = _get(r, "n_routed_experts", "int")
    if r.has("num_local_experts"):
        alias = typed(mt, "num_local_experts", r.raw("num_local_experts"), "int")
        if alias != E:
            raise ConfigError(f"load_hf_config: {mt} config: field 'num_local_experts'={alias}"
                              f" contradicts 'n_routed_experts'={E}")
    if E < 2:
        raise ConfigError(f"load_hf_config: {mt} config: field 'n_routed_experts': expected "
                          f"an integer >= 2, got {E}")
    k = _get(r, "num_experts_per_tok", "int")
    groups, chosen = _get(r, "n_group", "int"), _get(r, "topk_group", "int")
    if groups < 1 or E % groups or E // groups < 2:
        raise ConfigError(f"load_hf_config: {mt} config: field 'n_group'={groups}: expected a "
                          f"divisor of n_routed_experts={E} leaving groups of at least 2 "
                          f"experts (the router sums each group's top 2)")
    if not 1 <= chosen <= groups:
        raise ConfigError(f"load_hf_config: {mt} config: field 'topk_group'={chosen}: "
                          f"expected an integer in [1, n_group={groups}]")
    if not 1 <= k <= chosen * (E // groups):
        raise ConfigError(f"load_hf_config: {mt} config: field 'num_experts_per_tok'={k}: "
                          f"expected an integer in [1, topk_group * n_routed_experts / n_group"
                          f" = {chosen * (E // groups)}]")
    m = _get(r, "moe_intermediate_size", "int")
    if m < 1:
        raise ConfigError(f"load_hf_config: {mt} config: field 'moe_intermediate_size': "
                          f"expected an integer >= 1, got {m}")
    shared = _get(r, "n_shared_experts", "int")
    if shared < 1:
        raise ConfigError(f"load_hf_config: {mt} config: field 'n_shared_experts': expected "
                          f"an integer >= 1 (DeepseekV3MoE always builds its shared experts), "
                          f"got {shared}")
    rho = _get(r, "routed_scaling_factor", "float")
    return dict(n_experts=E, top_k=k, moe_router="sigmoid", n_group=groups, topk_group=chosen,
                routed_scaling_factor=float(rho),
                moe_renormalize=_get(r, "norm_topk_prob", "bool"),
                moe_intermediate_size=m, d_shared_expert=shared * m, shared_expert_gate=False,
                moe_dense_layers=tuple(range(max(dense, 0))))


def deepseek_v3_moe_rebuilt(c: Any) -> dict[str, Any]:
    """The MoE fields of ``c`` as a ``DeepseekV3Config`` gives them back (for the export's
    mismatch): the sigmoid router, ungated shared experts of a whole number of experts'
    widths, the dense blocks a prefix :math:`0..K-1`; every field at its default without
    experts."""
    if not c.n_experts:
        return {}
    m = expert_width(c)
    return dict(n_experts=c.n_experts, top_k=c.top_k, moe_router="sigmoid", n_group=c.n_group,
                topk_group=c.topk_group, routed_scaling_factor=float(c.routed_scaling_factor),
                moe_renormalize=c.moe_renormalize, moe_intermediate_size=m,
                d_shared_expert=max(1, c.d_shared_expert // m) * m, shared_expert_gate=False,
                moe_dense_layers=tuple(range(len(c.moe_dense_layers))))


def deepseek_v3_moe_export(c: Any) -> dict[str, Any]:
    """The MoE keys of ``c`` (checked against :func:`deepseek_v3_moe_rebuilt`) for a
    ``DeepseekV3Config``; with no experts every layer dense (``first_k_dense_replace`` =
    ``num_hidden_layers``)."""
    if not c.n_experts:
        return {"first_k_dense_replace": c.n_blocks}
    m = expert_width(c)
    return {"first_k_dense_replace": len(c.moe_dense_layers), "n_routed_experts": c.n_experts,
            "num_experts_per_tok": c.top_k, "n_group": c.n_group, "topk_group": c.topk_group,
            "routed_scaling_factor": float(c.routed_scaling_factor),
            "norm_topk_prob": c.moe_renormalize, "moe_intermediate_size": m,
            "n_shared_experts": c.d_shared_expert // m}
