r"""DeepSeek-V2's mixture-of-experts layers in the config mapping (issue 23): the MoE keys of a
Hugging Face ``DeepseekV2Config`` <-> the fields of :class:`~nlaverify.config.TransformerConfig`
(``moe_router="softmax_group"``, :mod:`nlaverify.config_moe`).

Checked against ``transformers`` 5.25 (``models/deepseek_v2/configuration_deepseek_v2.py``,
``modeling_deepseek_v2.py``: ``DeepseekV2DecoderLayer`` builds ``DeepseekV2Moe`` where
``layer_idx >= first_k_dense_replace``, else ``DeepseekV2MLP``); DeepSeek-AI 2024,
DeepSeek-V2 technical report §2.2:

* ``n_routed_experts`` :math:`E` experts of width ``moe_intermediate_size`` :math:`m`, top
  ``num_experts_per_tok`` :math:`k` of :math:`s = \operatorname{softmax}(xW_r)`;
  ``topk_method`` ``"greedy"`` (``n_group``, ``topk_group`` read and ignored: HF reads them
  only for the group limit; ours 1 and 1) or ``"group_limited_greedy"`` (``n_group`` groups
  scored by their max, ``topk_group`` kept; both required); any other method refused by key;
* gates :math:`\rho\, s_e`, :math:`\rho` = ``routed_scaling_factor``, never renormalised:
  HF's router does not read ``norm_topk_prob`` (the modular file deletes it), so only false
  (the released value) is accepted (``moe_renormalize=False``) — true would be a model the
  original code renormalises and HF does not;
* ``n_shared_experts`` :math:`n_s \ge 1` ungated shared experts, one SwiGLU of width
  :math:`n_s m` (``shared_experts``), no bias (``mlp_bias`` true refused with MoE layers:
  ``DeepseekV2MLP`` would give the shared experts biases nlaverify does not model);
* ``first_k_dense_replace`` :math:`K`: blocks :math:`0..K-1` dense (``moe_dense_layers``).

The original code's keys ``scoring_func`` (only ``"softmax"``) and ``moe_layer_freq`` (only
1) are checked (HF reads neither); ``aux_loss_alpha``, ``seq_aux``, ``ep_size`` (training,
parallelism) are read and ignored.
"""

from __future__ import annotations

from typing import Any

from nlaverify.config_moe import expert_width
from nlaverify.config_options import ConfigError
from nlaverify.interop.hf_config_deepseek_moe import refuse_fixed
from nlaverify.interop.hf_config_reader import typed

__all__ = ["DEEPSEEK_V2_MOE_DEFAULTS", "deepseek_v2_moe_export", "deepseek_v2_moe_fields",
           "deepseek_v2_moe_rebuilt"]

#: ``DeepseekV2Config``'s defaults of the MoE keys (transformers 5.25); ``num_experts_per_tok``
#: and ``n_group``/``topk_group`` default to None there: required when used
DEEPSEEK_V2_MOE_DEFAULTS: dict[str, Any] = {
    "n_routed_experts": 64, "routed_scaling_factor": 1.0, "topk_method": "greedy",
    "norm_topk_prob": False, "n_shared_experts": 2, "moe_intermediate_size": 1407}

_METHODS = ("greedy", "group_limited_greedy")
_FIXED = {"scoring_func": "softmax", "moe_layer_freq": 1}


def _err(mt: str, key: str, msg: str) -> ConfigError:
    return ConfigError(f"load_hf_config: {mt} config: field {key!r}: {msg}")


def _get(r: Any, key: str, kind: str) -> Any:
    return typed(r.mt, key, r.raw(key, DEEPSEEK_V2_MOE_DEFAULTS[key]), kind)


def _required_int(r: Any, key: str) -> int:
    v = r.raw(key)
    if v is None:
        raise _err(r.mt, key, "required (DeepseekV2Config's default None) with MoE layers")
    return typed(r.mt, key, v, "int")


def deepseek_v2_moe_fields(r: Any, n_blocks: int, dense: int, mlp_bias: bool
                           ) -> dict[str, Any]:
    """The MoE fields of a ``deepseek_v2`` config whose blocks ``dense..n_blocks-1`` are
    mixtures of experts (module docstring), read through the reader ``r``. Raises
    :class:`ConfigError` naming the key."""
    mt = r.mt
    refuse_fixed(r, _FIXED, "DeepseekV2")
    method = _get(r, "topk_method", "str")
    if method not in _METHODS:
        raise _err(mt, "topk_method", f"expected one of {', '.join(_METHODS)} (what "
                                      f"DeepseekV2TopkRouter implements), got {method!r}")
    if _get(r, "norm_topk_prob", "bool"):
        raise _err(mt, "norm_topk_prob", "only false is supported: HF's DeepseekV2TopkRouter "
                                         "never renormalises (it does not read the key), got "
                                         "true")
    if mlp_bias:
        raise _err(mt, "mlp_bias", "only false is supported with MoE layers (biases on the "
                                   "shared experts), got true")
    E = _get(r, "n_routed_experts", "int")
    if E < 2:
        raise _err(mt, "n_routed_experts", f"expected an integer >= 2, got {E}")
    k = _required_int(r, "num_experts_per_tok")
    groups, chosen = 1, 1
    if method == "group_limited_greedy":
        groups, chosen = _required_int(r, "n_group"), _required_int(r, "topk_group")
    else:
        r.raw("n_group"), r.raw("topk_group")
    if groups < 1 or E % groups:
        raise _err(mt, "n_group", f"expected a divisor of n_routed_experts={E}, got {groups}")
    if not 1 <= chosen <= groups:
        raise _err(mt, "topk_group", f"expected an integer in [1, n_group={groups}], got "
                                     f"{chosen}")
    if not 1 <= k <= chosen * (E // groups):
        raise _err(mt, "num_experts_per_tok", f"expected an integer in [1, topk_group * "
                                              f"n_routed_experts / n_group = "
                                              f"{chosen * (E // groups)}], got {k}")
    m = _get(r, "moe_intermediate_size", "int")
    if m < 1:
        raise _err(mt, "moe_intermediate_size", f"expected an integer >= 1, got {m}")
    shared = _get(r, "n_shared_experts", "int")
    if shared < 1:
        raise _err(mt, "n_shared_experts", f"expected an integer >= 1 (nlaverify's DeepSeek-V2 "
                                           f"block has shared experts), got {shared}")
    rho = _get(r, "routed_scaling_factor", "float")
    return dict(n_experts=E, top_k=k, moe_router="softmax_group", n_group=groups,
                topk_group=chosen, routed_scaling_factor=float(rho), moe_renormalize=False,
                moe_intermediate_size=m, d_shared_expert=shared * m, shared_expert_gate=False,
                moe_dense_layers=tuple(range(max(dense, 0))))


def deepseek_v2_moe_rebuilt(c: Any) -> dict[str, Any]:
    """The MoE fields of ``c`` as a ``DeepseekV2Config`` gives them back (for the export's
    mismatch): the group-limited softmax router, no renormalising, ungated shared experts of
    a whole number of experts' widths, the dense blocks a prefix; none without experts."""
    if not c.n_experts:
        return {}
    m = expert_width(c)
    return dict(n_experts=c.n_experts, top_k=c.top_k, moe_router="softmax_group",
                n_group=c.n_group, topk_group=c.topk_group,
                routed_scaling_factor=float(c.routed_scaling_factor), moe_renormalize=False,
                moe_intermediate_size=m, d_shared_expert=max(1, c.d_shared_expert // m) * m,
                shared_expert_gate=False, moe_dense_layers=tuple(range(len(c.moe_dense_layers))))


def deepseek_v2_moe_export(c: Any) -> dict[str, Any]:
    """The MoE keys of ``c`` (checked against :func:`deepseek_v2_moe_rebuilt`) for a
    ``DeepseekV2Config``: ``topk_method`` ``"greedy"`` with one group kept of one,
    ``"group_limited_greedy"`` otherwise; without experts every layer dense."""
    if not c.n_experts:
        return {"first_k_dense_replace": c.n_blocks}
    m = expert_width(c)
    greedy = c.n_group == 1 and c.topk_group == 1
    return {"first_k_dense_replace": len(c.moe_dense_layers), "n_routed_experts": c.n_experts,
            "num_experts_per_tok": c.top_k,
            "topk_method": "greedy" if greedy else "group_limited_greedy",
            "n_group": c.n_group, "topk_group": c.topk_group,
            "routed_scaling_factor": float(c.routed_scaling_factor), "norm_topk_prob": False,
            "moe_intermediate_size": m, "n_shared_experts": c.d_shared_expert // m}
