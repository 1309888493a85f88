r"""Hugging Face ``OlmoConfig`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 23).

Checked against ``transformers`` 5.25 (``models/olmo/configuration_olmo.py`` and
``modeling_olmo.py``). An ``OlmoForCausalLM`` (OLMo v1; Groeneveld et al. 2024, OLMo:
Accelerating the Science of Language Models) is Llama's model (pre-norm, RoPE permuted to the
interleaved pairing on the weights' side, a gated MLP, grouped-query attention,
``attention_bias`` on Q, K, V and O) with ``OlmoLayerNorm`` in place of RMSNorm: a LayerNorm
with *no* learned gain or bias, :math:`\epsilon = 10^{-5}` fixed in the code (``norm="layernorm",
norm_affine=False, norm_eps=1e-5``), before each sublayer and at the end.

Fields: ``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``intermediate_size`` (required); ``num_key_value_heads`` (``None``: the heads),
``hidden_act`` (``silu`` / ``gelu_pytorch_tanh`` / ``gelu_new``), ``max_position_embeddings``,
``tie_word_embeddings``, ``attention_bias``, RoPE as for Llama. ``clip_qkv`` (queries, keys
and values clamped to :math:`[-c, c]`, OLMo-1.7) must be null: refused by name. The head
dimension is ``hidden_size // num_attention_heads`` (a ``head_dim`` key is refused as unknown).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nlaverify.config import ConfigError, RopeScaling, TransformerConfig
from nlaverify.interop.hf_config_tables import _GATED_ACTS, first_mismatch

__all__ = ["olmo_fields", "olmo_hf_dict", "olmo_mismatch"]

#: OlmoLayerNorm's epsilon (``F.layer_norm(..., eps=1e-5)``, not a config key)
OLMO_EPS = 1e-5


def olmo_fields(r: Any, rope: Callable[[Any, int], tuple[int, Any]]) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of an ``OlmoConfig`` dict (module docstring),
    read through :mod:`~nlaverify.interop.hf_config`'s reader ``r``; ``rope`` its RoPE
    reader. Raises :class:`ConfigError` naming the key."""
    mt = "olmo"
    act = r.get("hidden_act", "str")
    if act not in _GATED_ACTS:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_act': expected one of "
                          f"{', '.join(_GATED_ACTS)}, got {act!r}")
    clip = r.get("clip_qkv", "float?")
    if clip is not None:
        raise ConfigError(f"load_hf_config: {mt} config: field 'clip_qkv'={clip!r}: clamping "
                          "queries, keys and values is not modelled; expected null")
    d = r.get("hidden_size", "int", required=True)
    h = r.get("num_attention_heads", "int", required=True)
    if h < 1 or d % h:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_size'={d}: expected a "
                          f"multiple of num_attention_heads={h}")
    kv = r.get("num_key_value_heads", "int?")
    ctx = r.get("max_position_embeddings", "int")
    base, scaling = rope(r, ctx)
    return _fields(r.get("vocab_size", "int", required=True), d, h, h if kv is None else kv,
                   r.get("num_hidden_layers", "int", required=True),
                   r.get("intermediate_size", "int", required=True), _GATED_ACTS[act], ctx,
                   r.get("tie_word_embeddings", "bool"), r.get("attention_bias", "bool"),
                   base, scaling)


def _fields(vocab: int, d: int, heads: int, kv: int, blocks: int, d_mlp: int, mlp: str,
            ctx: int, tied: bool, bias: bool, base: int,
            scaling: RopeScaling | None) -> dict[str, Any]:
    """The fields of a Hugging Face OLMo of these values, the fixed ones included."""
    return dict(vocab_size=vocab, d_model=d, n_heads=heads, n_kv_heads=kv, n_blocks=blocks,
                d_mlp=d_mlp, norm="layernorm", norm_affine=False, placement="pre",
                positions="rope", context=ctx, mlp=mlp, attn_bias=bias, tied_embeddings=tied,
                norm_eps=OLMO_EPS, rope_base=base, rope_scaling=scaling)


def olmo_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``OlmoConfig`` cannot express, as ``(field,
    value, expected)``, or ``None``."""
    if c.mlp not in _GATED_ACTS.values():
        return "mlp", c.mlp, tuple(sorted(set(_GATED_ACTS.values())))
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
            c.vocab_size, c.d_model, c.n_heads, c.n_kv_heads or c.n_heads, c.n_blocks, c.d_mlp,
            c.mlp, c.context, c.tied_embeddings, c.attn_bias, c.rope_base, c.rope_scaling)))


def olmo_hf_dict(c: TransformerConfig, rope: dict[str, Any]) -> dict[str, Any]:
    """The ``OlmoConfig`` fields of ``c`` (checked by :func:`olmo_mismatch`), every size
    written out; ``rope`` its ``rope_parameters``."""
    return {"architectures": ["OlmoForCausalLM"], "model_type": "olmo",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, "num_attention_heads": c.n_heads,
            "num_key_value_heads": c.n_kv_heads, "intermediate_size": c.d_mlp,
            "hidden_act": "silu" if c.mlp == "swiglu" else "gelu_pytorch_tanh",
            "max_position_embeddings": c.context, "tie_word_embeddings": c.tied_embeddings,
            "attention_bias": c.attn_bias, "clip_qkv": None, "rope_parameters": rope}
