r"""Hugging Face ``GraniteConfig`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 23).

Checked against ``transformers`` 5.25 (``models/granite/configuration_granite.py`` and
``modeling_granite.py``). A ``GraniteForCausalLM`` (IBM Granite 3.0) is Llama's model (RMSNorm,
pre-norm, RoPE permuted to the interleaved pairing on the weights' side, a gated MLP,
grouped-query attention, ``attention_bias`` on Q, K, V and O, ``mlp_bias``) with four
multipliers: ``embedding_multiplier`` :math:`m` (``GraniteModel.forward``: the embedding
times :math:`m`; ``embed_multiplier``), ``residual_multiplier`` :math:`r` (each block
:math:`x + r\,\operatorname{Attn}(N_1(x))`, then :math:`x + r\,\operatorname{MLP}(N_2(x))`;
``residual_multiplier``), ``attention_multiplier`` :math:`a` (``GraniteAttention.scaling``:
scores :math:`a\,qk^T` in place of :math:`qk^T/\sqrt{d_h}`; ``query_pre_attn_scalar``
:math:`s = a^{-2}`, exact when :math:`a` is a power of two as in the releases) and
``logits_scaling`` :math:`t` (logits over :math:`t`, before the loss: ``temperature``).
A multiplier of 1 is ``None`` in the config (no node); ``attention_multiplier`` is always
a scale, so it is always ``query_pre_attn_scalar``.

Fields: ``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``intermediate_size`` (required); ``num_key_value_heads`` (``None``: the heads),
``hidden_act`` (``silu`` / ``gelu_pytorch_tanh`` / ``gelu_new``), ``max_position_embeddings``,
``rms_norm_eps``, ``tie_word_embeddings``, ``attention_bias``, ``mlp_bias``, the four
multipliers (finite, > 0), RoPE as for Llama.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nlaverify.config import ConfigError, RopeScaling, TransformerConfig
from nlaverify.interop.hf_config_tables import _GATED_ACTS, first_mismatch

__all__ = ["granite_fields", "granite_hf_dict", "granite_mismatch"]

_MULTIPLIERS = ("embedding_multiplier", "residual_multiplier", "attention_multiplier",
                "logits_scaling")


def granite_fields(r: Any, rope: Callable[[Any, int], tuple[int, Any]]) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of a ``GraniteConfig`` dict (module docstring),
    read through :mod:`~nlaverify.interop.hf_config`'s reader ``r``; ``rope`` its RoPE
    reader. Raises :class:`ConfigError` naming the key."""
    mt = "granite"
    act = r.get("hidden_act", "str")
    if act not in _GATED_ACTS:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_act': expected one of "
                          f"{', '.join(_GATED_ACTS)}, got {act!r}")
    mult = {}
    for k in _MULTIPLIERS:
        v = r.get(k, "float")
        if not v > 0:
            raise ConfigError(f"load_hf_config: {mt} config: field {k!r}: expected a number "
                              f"> 0, got {v!r}")
        mult[k] = v
    h = r.get("num_attention_heads", "int", required=True)
    kv = r.get("num_key_value_heads", "int?")
    ctx = r.get("max_position_embeddings", "int")
    base, scaling = rope(r, ctx)
    return _fields(r.get("vocab_size", "int", required=True),
                   r.get("hidden_size", "int", required=True), h, h if kv is None else kv,
                   r.get("num_hidden_layers", "int", required=True),
                   r.get("intermediate_size", "int", required=True), _GATED_ACTS[act], ctx,
                   r.get("rms_norm_eps", "float"), r.get("tie_word_embeddings", "bool"),
                   r.get("attention_bias", "bool"), r.get("mlp_bias", "bool"),
                   *(mult[k] for k in _MULTIPLIERS), base, scaling)


def _fields(vocab: int, d: int, heads: int, kv: int, blocks: int, d_mlp: int, mlp: str,
            ctx: int, eps: float, tied: bool, attn_bias: bool, mlp_bias: bool, embed: float,
            resid: float, attn: float, logits: float, base: int,
            scaling: RopeScaling | None) -> dict[str, Any]:
    """The fields of a Hugging Face Granite of these values, the fixed ones included."""
    return dict(vocab_size=vocab, d_model=d, n_heads=heads, n_kv_heads=kv, n_blocks=blocks,
                d_mlp=d_mlp, norm="rmsnorm", placement="pre", positions="rope", context=ctx,
                mlp=mlp, attn_bias=attn_bias, mlp_bias=mlp_bias, tied_embeddings=tied,
                norm_eps=eps, embed_multiplier=None if embed == 1 else embed,
                residual_multiplier=None if resid == 1 else resid,
                query_pre_attn_scalar=attn ** -2, temperature=logits, rope_base=base,
                rope_scaling=scaling)


def granite_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``GraniteConfig`` cannot express, as
    ``(field, value, expected)``, or ``None``."""
    if c.mlp not in _GATED_ACTS.values():
        return "mlp", c.mlp, tuple(sorted(set(_GATED_ACTS.values())))
    s = c.query_pre_attn_scalar if c.query_pre_attn_scalar is not None else c.d_head
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
            c.vocab_size, c.d_model, c.n_heads, c.n_kv_heads or c.n_heads, c.n_blocks,
            c.d_mlp, c.mlp, c.context, c.norm_eps, c.tied_embeddings, c.attn_bias, c.mlp_bias,
            c.embed_multiplier or 1.0, c.residual_multiplier or 1.0, s ** -0.5,
            c.temperature, c.rope_base, c.rope_scaling)))


def granite_hf_dict(c: TransformerConfig, rope: dict[str, Any]) -> dict[str, Any]:
    """The ``GraniteConfig`` fields of ``c`` (checked by :func:`granite_mismatch`), every
    size written out; ``rope`` its ``rope_parameters``."""
    return {"architectures": ["GraniteForCausalLM"], "model_type": "granite",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, "num_attention_heads": c.n_heads,
            "num_key_value_heads": c.n_kv_heads, "intermediate_size": c.d_mlp,
            "hidden_act": "silu" if c.mlp == "swiglu" else "gelu_pytorch_tanh",
            "max_position_embeddings": c.context, "rms_norm_eps": c.norm_eps,
            "tie_word_embeddings": c.tied_embeddings, "attention_bias": c.attn_bias,
            "mlp_bias": c.mlp_bias, "embedding_multiplier": c.embed_multiplier or 1.0,
            "residual_multiplier": c.residual_multiplier or 1.0,
            "attention_multiplier": c.query_pre_attn_scalar ** -0.5,
            "logits_scaling": c.temperature, "rope_parameters": rope}
