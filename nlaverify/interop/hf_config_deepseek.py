r"""Hugging Face ``DeepseekV3Config`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 23).

Checked against ``transformers`` 5.25 (``models/deepseek_v3/configuration_deepseek_v3.py`` and
``modeling_deepseek_v3.py``). A ``DeepseekV3ForCausalLM`` (DeepSeek-AI 2024, DeepSeek-V3
§2.1) is Llama's pre-RMSNorm decoder with a SwiGLU MLP and multi-head latent attention
(``DeepseekV3Attention``; :mod:`nlaverify.config_mla`): ``kv_lora_rank``, ``q_lora_rank``
(``null``: a full-rank ``q_proj``), ``qk_nope_head_dim``, ``qk_rope_head_dim``,
``v_head_dim`` map to the fields of the same names; ``rope_interleave`` (default true;
``null`` is false, as ``DeepseekV3Attention``'s ``if config.rope_interleave`` reads it)
rotates the pairs :math:`(x_{2i}, x_{2i+1})` (``apply_rotary_pos_emb_interleave``, whose output
lists the rotated pairs' first coordinates, then their second: a permutation of the
interleaved rotation shared by queries and keys, so the scores are the same) and is
``rope_pairing="interleaved"``; false is ``rotate_half``'s ``"half"``. ``d_head`` is set to
the query-key width :math:`d_c + d_r` (the graph's MLA does not read it).

Mixture-of-experts layers (``first_k_dense_replace`` below ``num_hidden_layers``):
DeepSeek-V3's sigmoid router with group-limited top-k and shared experts,
:mod:`nlaverify.interop.hf_config_deepseek_moe`; DeepSeek-V2's softmax router (greedy or
group-limited by the groups' max), :mod:`nlaverify.interop.hf_config_deepseek_v2_moe`.
Refused by key: ``attention_bias`` true (biases on
``q_a_proj``, ``kv_a_proj_with_mqa`` and ``o_proj``), ``num_key_value_heads`` other than
``num_attention_heads`` (``repeat_kv`` of keys already materialised per head), RoPE
scalings other than linear, llama3 and yarn. With every layer dense the experts' keys
(``moe_intermediate_size``, ``n_shared_experts``, ``n_routed_experts``,
``routed_scaling_factor``, ``n_group``, ``topk_group``, ``num_experts_per_tok``,
``norm_topk_prob``, ``output_router_logits``) build no module and are read and ignored;
``num_nextn_predict_layers`` (multi-token prediction modules) builds none in
``DeepseekV3ForCausalLM`` either; ``qk_head_dim`` and ``head_dim``, which the HF class
derives, must agree with the head dimensions.

``deepseek_v2`` (``models/deepseek_v2``): the same attention and block, RoPE always on
interleaved pairs (``apply_rotary_emb`` multiplies complex pairs :math:`x_{2i} + i x_{2i+1}`
and writes them back in place: no permutation), ``mlp_bias`` (biases on the dense MLP's
three projections), ``num_key_value_heads`` defaulting to the heads, ``first_k_dense_replace``
required (its default 0 makes every layer MoE; ``first_k_dense_replace`` below
``num_hidden_layers``: MoE layers, as above), ``topk_method`` read and ignored with the
other experts' keys when every layer is dense; no ``rope_interleave`` key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nlaverify.config import ConfigError, RopeScaling, TransformerConfig
from nlaverify.interop.hf_config_deepseek_moe import (
    deepseek_v3_moe_export,
    deepseek_v3_moe_fields,
    deepseek_v3_moe_rebuilt,
)
from nlaverify.interop.hf_config_deepseek_v2_moe import (
    deepseek_v2_moe_export,
    deepseek_v2_moe_fields,
    deepseek_v2_moe_rebuilt,
)
from nlaverify.interop.hf_config_tables import _GATED_ACTS, first_mismatch

__all__ = ["deepseek_v2_fields", "deepseek_v2_hf_dict", "deepseek_v2_mismatch",
           "deepseek_v3_fields", "deepseek_v3_hf_dict", "deepseek_v3_mismatch"]

#: keys of the experts and of multi-token prediction: no module of a dense-only model
_UNREAD = ("moe_intermediate_size", "n_shared_experts", "n_routed_experts",
           "routed_scaling_factor", "n_group", "topk_group", "num_experts_per_tok",
           "norm_topk_prob", "output_router_logits", "num_nextn_predict_layers",
           "num_mtp_layers", "pretraining_tp", "topk_method")


def deepseek_v3_fields(r: Any, rope: Callable[[Any, int], tuple[int, Any]]) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of a ``DeepseekV3Config`` dict (module
    docstring), read through :mod:`~nlaverify.interop.hf_config`'s reader ``r``; ``rope``
    its RoPE reader. Raises :class:`ConfigError` naming the key."""
    return _deepseek_fields(r, rope, "deepseek_v3")


def deepseek_v2_fields(r: Any, rope: Callable[[Any, int], tuple[int, Any]]) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of a ``DeepseekV2Config`` dict (module
    docstring); as :func:`deepseek_v3_fields`."""
    return _deepseek_fields(r, rope, "deepseek_v2")


def _deepseek_fields(r: Any, rope: Callable[[Any, int], tuple[int, Any]], mt: str
                     ) -> dict[str, Any]:
    blocks = r.get("num_hidden_layers", "int", required=True)
    # DeepseekV2Config's default 0 makes every layer MoE: V2 must say its dense layers
    dense = r.get("first_k_dense_replace", "int?", required=mt == "deepseek_v2")
    moe: dict[str, Any] = {}
    if mt == "deepseek_v3" and dense is not None and dense < blocks:  # hf_config_deepseek_moe
        moe = deepseek_v3_moe_fields(r, blocks, dense)
    elif mt == "deepseek_v2" and dense is not None and dense < blocks:
        moe = deepseek_v2_moe_fields(r, blocks, dense, bool(r.get("mlp_bias", "bool")))
    elif dense is None or dense < blocks:
        raise ConfigError(
            f"load_hf_config: {mt} config: field 'first_k_dense_replace'={dense!r}: layers "
            f"{dense or 0}..{blocks - 1} would be mixture-of-experts layers (DeepSeek-V2's "
            f"softmax router), which nlaverify does not model yet; expected "
            f"first_k_dense_replace >= num_hidden_layers={blocks} (every layer dense)")
    for key in _UNREAD:
        r.raw(key)
    act = r.get("hidden_act", "str")
    if act not in _GATED_ACTS:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_act': expected one of "
                          f"{', '.join(_GATED_ACTS)}, got {act!r}")
    h = r.get("num_attention_heads", "int", required=True)
    kv = r.get("num_key_value_heads", "int?")
    if kv is not None and kv != h:
        raise ConfigError(f"load_hf_config: {mt} config: field 'num_key_value_heads'={kv}: "
                          f"multi-head latent attention gives every head its own key and "
                          f"value; expected num_attention_heads={h}")
    if r.get("attention_bias", "bool"):
        raise ConfigError(f"load_hf_config: {mt} config: field 'attention_bias': only false "
                          "is supported (biases of q_a_proj, kv_a_proj_with_mqa, o_proj), got "
                          "true")
    dims = {k: r.get(k, "int") for k in ("kv_lora_rank", "qk_nope_head_dim",
                                         "qk_rope_head_dim", "v_head_dim")}
    dims["q_lora_rank"] = r.get("q_lora_rank", "int?")
    for key, want in (("qk_head_dim", dims["qk_nope_head_dim"] + dims["qk_rope_head_dim"]),
                      ("head_dim", dims["qk_rope_head_dim"])):
        got = r.get_any(key, "int?")
        if got is not None and got != want:
            raise ConfigError(f"load_hf_config: {mt} config: field {key!r}={got}: expected "
                              f"{want}, as DeepseekV3Config derives it")
    ctx = r.get("max_position_embeddings", "int")
    base, scaling = rope(r, ctx)
    v2 = mt == "deepseek_v2"
    interleave = True if v2 else r.get("rope_interleave", "bool?")
    return _fields(r.get("vocab_size", "int", required=True),
                   r.get("hidden_size", "int", required=True), h, blocks,
                   r.get("intermediate_size", "int", required=True), _GATED_ACTS[act], ctx,
                   r.get("rms_norm_eps", "float"), r.get("tie_word_embeddings", "bool"),
                   base, scaling, "interleaved" if interleave else "half", dims,
                   r.get("mlp_bias", "bool") if v2 else False, moe)


def _fields(vocab: int, d: int, heads: int, blocks: int, d_mlp: int, mlp: str, ctx: int,
            eps: float, tied: bool, base: int, scaling: RopeScaling | None, pairing: str,
            dims: dict[str, Any], mlp_bias: bool = False, moe: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    """The fields of a Hugging Face DeepSeek-V2/V3 of these values (``moe``: the MoE
    fields, :mod:`~nlaverify.interop.hf_config_deepseek_moe`; none: every layer dense)."""
    return dict(vocab_size=vocab, d_model=d, n_heads=heads, n_kv_heads=heads,
                d_head=dims["qk_nope_head_dim"] + dims["qk_rope_head_dim"], n_blocks=blocks,
                d_mlp=d_mlp, norm="rmsnorm", placement="pre", positions="rope", context=ctx,
                mlp=mlp, tied_embeddings=tied, norm_eps=eps, rope_base=base,
                rope_scaling=scaling, rope_pairing=pairing, mlp_bias=mlp_bias, **dims,
                **(moe or {}))


def deepseek_v3_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``DeepseekV3Config`` cannot express (its MoE
    blocks: :func:`~nlaverify.interop.hf_config_deepseek_moe.deepseek_v3_moe_rebuilt`), as
    ``(field, value, expected)``, or ``None``."""
    return _mismatch(c, False)


def deepseek_v2_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """As :func:`deepseek_v3_mismatch` for ``DeepseekV2Config`` (interleaved RoPE only, MLP
    biases allowed)."""
    return _mismatch(c, True)


def _mismatch(c: TransformerConfig, v2: bool) -> tuple[str, Any, Any] | None:
    if c.mlp not in _GATED_ACTS.values():
        return "mlp", c.mlp, tuple(sorted(set(_GATED_ACTS.values())))
    if not c.kv_lora_rank:
        return "kv_lora_rank", c.kv_lora_rank, "a positive latent rank"
    dims = {k: getattr(c, k) for k in ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
                                       "qk_rope_head_dim", "v_head_dim")}
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
        c.vocab_size, c.d_model, c.n_heads, c.n_blocks, c.d_mlp, c.mlp, c.context, c.norm_eps,
        c.tied_embeddings, c.rope_base, c.rope_scaling, "interleaved" if v2 else
        c.rope_pairing, dims, c.mlp_bias if v2 else False,
        deepseek_v2_moe_rebuilt(c) if v2 else deepseek_v3_moe_rebuilt(c))))


def deepseek_v2_hf_dict(c: TransformerConfig, rope: dict[str, Any]) -> dict[str, Any]:
    """The ``DeepseekV2Config`` fields of ``c`` (checked by :func:`deepseek_v2_mismatch`):
    :func:`deepseek_v3_hf_dict`'s without ``rope_interleave``, with ``mlp_bias``."""
    d = {k: v for k, v in deepseek_v3_hf_dict(c, rope).items() if k != "rope_interleave"}
    return {**d, "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
            "mlp_bias": c.mlp_bias, **deepseek_v2_moe_export(c)}


def deepseek_v3_hf_dict(c: TransformerConfig, rope: dict[str, Any]) -> dict[str, Any]:
    """The ``DeepseekV3Config`` fields of ``c`` (checked by :func:`deepseek_v3_mismatch`),
    every size written out, the MoE keys by
    :func:`~nlaverify.interop.hf_config_deepseek_moe.deepseek_v3_moe_export` (without experts
    every layer dense); ``rope`` its ``rope_parameters``."""
    return {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, **deepseek_v3_moe_export(c),
            "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_heads,
            "intermediate_size": c.d_mlp, "kv_lora_rank": c.kv_lora_rank,
            "q_lora_rank": c.q_lora_rank, "qk_nope_head_dim": c.qk_nope_head_dim,
            "qk_rope_head_dim": c.qk_rope_head_dim, "v_head_dim": c.v_head_dim,
            "hidden_act": "silu" if c.mlp == "swiglu" else "gelu_pytorch_tanh",
            "max_position_embeddings": c.context, "rms_norm_eps": c.norm_eps,
            "tie_word_embeddings": c.tied_embeddings, "attention_bias": False,
            "rope_interleave": c.rope_pairing == "interleaved", "rope_parameters": rope}
