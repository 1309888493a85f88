r"""Hugging Face ``Olmo2Config`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 23).

Checked against ``transformers`` 5.25 (``models/olmo2/configuration_olmo2.py`` and
``modeling_olmo2.py``). An ``Olmo2ForCausalLM`` (OLMo Team 2024, 2 OLMo 2 Furious) is Llama's
model (RMSNorm, RoPE permuted to the interleaved pairing on the weights' side, a gated MLP,
grouped-query attention, ``attention_bias`` on Q, K, V and O) with *no* norm before the
sublayers and one after each (``Olmo2DecoderLayer``: :math:`x \leftarrow x +
N_a(\operatorname{Attn}(x))`, :math:`x \leftarrow x + N_m(\operatorname{MLP}(x))`:
``pre_norms=False, post_norms=True``), and QK-norm over the whole projection (``q_norm``
of size :math:`h\,d_h`, ``k_norm`` of :math:`h_{kv} d_h`, before the split into heads:
``qk_norm=True, qk_norm_joint=True``).

Fields: ``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``intermediate_size`` (required); ``num_key_value_heads`` (``None``: the heads),
``hidden_act`` (``silu`` / ``gelu_pytorch_tanh`` / ``gelu_new``), ``max_position_embeddings``,
``rms_norm_eps``, ``tie_word_embeddings``, ``attention_bias``, RoPE as for Llama. The head
dimension is ``hidden_size // num_attention_heads`` (a ``head_dim`` key is refused as
unknown: ``Olmo2Config`` has none).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nlaverify.config import ConfigError, RopeScaling, TransformerConfig
from nlaverify.interop.hf_config_tables import _GATED_ACTS, first_mismatch

__all__ = ["olmo2_fields", "olmo2_hf_dict", "olmo2_mismatch"]


def olmo2_fields(r: Any, rope: Callable[[Any, int], tuple[int, Any]]) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of an ``Olmo2Config`` dict (module docstring),
    read through :mod:`~nlaverify.interop.hf_config`'s reader ``r``; ``rope`` its RoPE
    reader. Raises :class:`ConfigError` naming the key."""
    mt = "olmo2"
    act = r.get("hidden_act", "str")
    if act not in _GATED_ACTS:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_act': expected one of "
                          f"{', '.join(_GATED_ACTS)}, got {act!r}")
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
                   r.get("rms_norm_eps", "float"), r.get("tie_word_embeddings", "bool"),
                   r.get("attention_bias", "bool"), base, scaling)


def _fields(vocab: int, d: int, heads: int, kv: int, blocks: int, d_mlp: int, mlp: str,
            ctx: int, eps: float, tied: bool, bias: bool, base: int,
            scaling: RopeScaling | None) -> dict[str, Any]:
    """The fields of a Hugging Face OLMo 2 of these values, the fixed ones included."""
    return dict(vocab_size=vocab, d_model=d, n_heads=heads, n_kv_heads=kv, n_blocks=blocks,
                d_mlp=d_mlp, norm="rmsnorm", placement="pre", positions="rope", context=ctx,
                mlp=mlp, attn_bias=bias, tied_embeddings=tied, norm_eps=eps, pre_norms=False,
                post_norms=True, qk_norm=True, qk_norm_joint=True, rope_base=base,
                rope_scaling=scaling)


def olmo2_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``Olmo2Config`` cannot express, as ``(field,
    value, expected)``, or ``None``."""
    if c.mlp not in _GATED_ACTS.values():
        return "mlp", c.mlp, tuple(sorted(set(_GATED_ACTS.values())))
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
            c.vocab_size, c.d_model, c.n_heads, c.n_kv_heads or c.n_heads, c.n_blocks, c.d_mlp,
            c.mlp, c.context, c.norm_eps, c.tied_embeddings, c.attn_bias, c.rope_base,
            c.rope_scaling)))


def olmo2_hf_dict(c: TransformerConfig, rope: dict[str, Any]) -> dict[str, Any]:
    """The ``Olmo2Config`` fields of ``c`` (checked by :func:`olmo2_mismatch`), every size
    written out; ``rope`` its ``rope_parameters``."""
    return {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, "num_attention_heads": c.n_heads,
            "num_key_value_heads": c.n_kv_heads, "intermediate_size": c.d_mlp,
            "hidden_act": "silu" if c.mlp == "swiglu" else "gelu_pytorch_tanh",
            "max_position_embeddings": c.context, "rms_norm_eps": c.norm_eps,
            "tie_word_embeddings": c.tied_embeddings, "attention_bias": c.attn_bias,
            "rope_parameters": rope}
