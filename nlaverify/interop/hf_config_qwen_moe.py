r"""The Qwen mixtures of experts (``qwen2_moe``: Qwen1.5-MoE, Qwen2-MoE; ``qwen3_moe``) in the
config mapping: the MoE fields both ways (transformers 5 ``Qwen2MoeConfig``,
``Qwen3MoeConfig``; ``Qwen2MoeDecoderLayer``, ``Qwen2MoeSparseMoeBlock``).

* ``num_experts`` (Qwen3-MoE's alias ``num_local_experts``) :math:`E \ge 1` experts of width
  ``moe_intermediate_size``, top ``num_experts_per_tok``, ``norm_topk_prob`` renormalises the
  chosen softmax entries (``moe_renormalize``); dense blocks (width ``intermediate_size``)
  where HF builds ``Qwen2MoeMLP``: ``layer_idx in mlp_only_layers`` or :math:`(l + 1) \bmod`
  ``decoder_sparse_step`` :math:`\ne 0` (``moe_dense_layers``).
* ``qwen2_moe``: one shared SwiGLU expert of width ``shared_expert_intermediate_size``
  gated by :math:`\sigma(x\cdot w_{sg})` (``d_shared_expert``, ``shared_expert_gate``),
  Q/K/V biases by ``qkv_bias`` and no O bias; ``qwen3_moe``: no shared expert, QK-norm, all
  four biases by ``attention_bias``.
* Sliding windows (``use_sliding_window``) are refused: Qwen2-MoE's layer pattern (windows on
  the even layers below ``max_window_layers``) has no :class:`TransformerConfig` form and no
  released Qwen MoE uses one; ``sliding_window``, ``max_window_layers`` are then unused.
"""

from __future__ import annotations

from typing import Any

from nlaverify.config_moe import MOE_DEFAULTS
from nlaverify.config_options import ConfigError
from nlaverify.interop.hf_config_reader import Reader, typed

__all__ = ["QWEN_MOE", "moe_fixed", "qwen_moe_export", "qwen_moe_fields"]

#: the Qwen MoE model types
QWEN_MOE = ("qwen2_moe", "qwen3_moe")


def _dense_layers(r: Reader, n_blocks: int) -> tuple[int, ...]:
    mt = r.mt
    step = r.get("decoder_sparse_step", "int")
    if step < 1:
        raise ConfigError(f"load_hf_config: {mt} config: field 'decoder_sparse_step': "
                          f"expected an integer >= 1, got {step}")
    only = r.raw("mlp_only_layers")
    only = [] if only is None else only
    if not isinstance(only, list) or any(
            isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_blocks
            for i in only):
        raise ConfigError(f"load_hf_config: {mt} config: field 'mlp_only_layers': expected "
                          f"a list of layer indices in [0, {n_blocks}), got {only!r}")
    return tuple(i for i in range(n_blocks) if i in only or (i + 1) % step)


def qwen_moe_fields(r: Reader, n_blocks: int) -> dict[str, Any]:
    """The MoE fields of a ``qwen2_moe`` / ``qwen3_moe`` config (module docstring)."""
    mt = r.mt
    E = r.get("num_experts", "int")
    if mt == "qwen3_moe" and r.has("num_local_experts"):  # Qwen3MoeConfig.attribute_map
        alias = typed(mt, "num_local_experts", r.raw("num_local_experts"), "int")
        if r.has("num_experts") and alias != E:
            raise ConfigError(f"load_hf_config: {mt} config: field 'num_local_experts'={alias}"
                              f" contradicts 'num_experts'={E}")
        E = alias
    if E < 1:  # 0 would silently build a dense model
        raise ConfigError(f"load_hf_config: {mt} config: field 'num_experts': expected an "
                          f"integer >= 1, got {E}")
    k = r.get("num_experts_per_tok", "int")
    if not 1 <= k <= E:
        raise ConfigError(f"load_hf_config: {mt} config: field 'num_experts_per_tok': "
                          f"expected an integer in [1, {E}] (the number of experts), got {k}")
    kw: dict[str, Any] = dict(n_experts=E, top_k=k,
                              moe_renormalize=r.get("norm_topk_prob", "bool"),
                              moe_intermediate_size=r.get("moe_intermediate_size", "int"),
                              moe_dense_layers=_dense_layers(r, n_blocks))
    if mt == "qwen2_moe":
        f = r.get("shared_expert_intermediate_size", "int")
        if f < 1:
            raise ConfigError(f"load_hf_config: {mt} config: field "
                              f"'shared_expert_intermediate_size': expected an integer >= 1 "
                              f"(Qwen2MoeSparseMoeBlock always has its shared expert), got {f}")
        kw.update(d_shared_expert=f, shared_expert_gate=True)
    if r.get("use_sliding_window", "bool"):
        raise ConfigError(f"load_hf_config: {mt} config: field 'use_sliding_window': only "
                          "false is supported (no released Qwen MoE uses a window)")
    r.raw("sliding_window")
    r.raw("max_window_layers")
    types = r.raw("layer_types")
    if types is not None and (not isinstance(types, list) or set(types) - {"full_attention"}
                              or len(types) != n_blocks):
        raise ConfigError(f"load_hf_config: {mt} config: field 'layer_types': expected "
                          f"{n_blocks} entries (num_hidden_layers), only 'full_attention' "
                          f"layers supported, got {types!r}")
    return kw


def qwen_moe_export(c: Any, model_type: str) -> dict[str, Any]:
    """The MoE keys of :func:`nlaverify.interop.hf_config_export.hf_config_dict` for a Qwen
    MoE type: ``mlp_only_layers`` lists the dense blocks (``decoder_sparse_step`` 1)."""
    d: dict[str, Any] = dict(num_experts=c.n_experts, num_experts_per_tok=c.top_k,
                             norm_topk_prob=c.moe_renormalize,
                             moe_intermediate_size=c.moe_intermediate_size or c.d_mlp,
                             decoder_sparse_step=1, mlp_only_layers=list(c.moe_dense_layers),
                             use_sliding_window=False)
    if model_type == "qwen2_moe":
        d["shared_expert_intermediate_size"] = c.d_shared_expert
    return d


def moe_fixed(c: Any, model_type: str) -> dict[str, Any]:
    r"""The MoE fields a Llama-family ``model_type`` fixes, for the export's refusals: every
    option at its default but for the Qwen MoE types, which fix the softmax router without
    groups or :math:`\rho`, no window, and the shared expert (gated, ``qwen2_moe``) or none
    (``qwen3_moe``). ``moe_intermediate_size=None`` is written as ``d_mlp``."""
    if model_type not in QWEN_MOE:  # a tuple lists the allowed values: () is ((),)
        return {**MOE_DEFAULTS, "moe_dense_layers": ((),)}
    fixed = {f: MOE_DEFAULTS[f] for f in ("moe_router", "routed_scaling_factor", "n_group",
                                          "topk_group")}
    fixed["sliding_window"] = None
    if model_type == "qwen3_moe":
        fixed.update(d_shared_expert=0, shared_expert_gate=False)
    elif not c.d_shared_expert:
        raise ConfigError("hf_config_dict: qwen2_moe needs TransformerConfig.d_shared_expert "
                          ">= 1 (Qwen2MoeSparseMoeBlock always has its shared expert), got 0")
    else:
        fixed["shared_expert_gate"] = True
    return fixed
