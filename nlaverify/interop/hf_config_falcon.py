r"""Hugging Face ``FalconConfig`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 23).

Checked against ``transformers`` 5.25 (``models/falcon/configuration_falcon.py`` and
``modeling_falcon.py``). A ``FalconForCausalLM`` of the original decoder
(``new_decoder_architecture=false``: Falcon-7B/-RW; Almazrouei et al. 2023) is
``transformer.word_embeddings``, ``num_hidden_layers`` LayerNorm (with bias) blocks,
``transformer.ln_f`` and ``lm_head`` (no bias; tied by ``tie_word_embeddings``). With
``parallel_attn`` (the default) a block is :math:`x \leftarrow x + \operatorname{Attn}(N(x)) +
\operatorname{MLP}(N(x))` with one ``input_layernorm`` (``parallel_residual=True,
parallel_norms=1``), else the sequential pre-LN block (``input_layernorm``,
``post_attention_layernorm``). Attention: one fused ``query_key_value``; with ``multi_query``
(the default) its rows are :math:`[Q \mid k \mid v]`, all query heads then one key and one
value head (``split([num_heads, 1, 1])``: grouped-query attention with ``n_kv_heads=1``),
without, ``(heads, 3, head_dim)`` per head as GPT-NeoX's; RoPE on the whole head in the half
pairing (``rotate_half``). MLP ``dense_h_to_4h``, ``activation``, ``dense_4h_to_h``. Every
Linear is biased by ``bias`` (``attn_bias``, ``out_bias``, ``mlp_bias``).

Fields: ``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``
(required); ``ffn_hidden_size`` (``None``: 4 ``hidden_size``), ``activation`` (``gelu`` the erf
GELU, ``gelu_new`` / ``gelu_pytorch_tanh`` the tanh one, ``relu``), ``layer_norm_epsilon``,
``max_position_embeddings``, ``tie_word_embeddings``, ``parallel_attn``, ``multi_query``,
``bias``, ``num_kv_heads`` (read only without ``multi_query``), ``num_key_value_heads`` (HF's
derived count: must agree), RoPE (``rope_parameters`` / ``rope_theta``, ``default`` only).
Refused by key: ``new_decoder_architecture=true`` (Falcon-40B/180B's grouped layout, not
mapped), ``alibi=true`` (ALiBi biases are not modelled), ``num_ln_in_parallel_attn=2`` (HF's
old decoder builds ``ln_attn`` / ``ln_mlp`` but reads ``input_layernorm``: it fails).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.interop.hf_config_neox import NEOX_ACTS
from nlaverify.interop.hf_config_tables import first_mismatch

__all__ = ["falcon_fields", "falcon_hf_dict", "falcon_mismatch"]


def falcon_fields(r: Any, rope: Callable[[Any, int], tuple[int, Any]]) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of a ``FalconConfig`` dict (module docstring),
    read through :mod:`~nlaverify.interop.hf_config`'s reader ``r``; ``rope`` its RoPE
    reader. Raises :class:`ConfigError` naming the key."""
    mt = "falcon"
    for key, why in (("new_decoder_architecture", "Falcon-40B/180B's grouped query_key_value "
                      "and norms are not mapped"),
                     ("alibi", "ALiBi position biases are not modelled")):
        if r.get(key, "bool"):
            raise ConfigError(f"load_hf_config: {mt} config: field {key!r}: only false is "
                              f"supported ({why})")
    nln = r.get("num_ln_in_parallel_attn", "int?")
    if nln not in (None, 1):
        raise ConfigError(f"load_hf_config: {mt} config: field 'num_ln_in_parallel_attn'="
                          f"{nln!r}: expected null or 1 without new_decoder_architecture")
    d = r.get("hidden_size", "int", required=True)
    h = r.get("num_attention_heads", "int", required=True)
    if h < 1 or d % h:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_size'={d}: expected a "
                          f"multiple of num_attention_heads={h}")
    act = r.get("activation", "str")
    if act not in NEOX_ACTS:
        raise ConfigError(f"load_hf_config: {mt} config: field 'activation': expected one of "
                          f"{', '.join(NEOX_ACTS)}, got {act!r}")
    mq = r.get("multi_query", "bool")
    kv = r.get("num_kv_heads", "int?")
    kv = 1 if mq else (h if kv is None else kv)
    if not mq and kv != h:
        raise ConfigError(f"load_hf_config: {mt} config: field 'num_kv_heads'={kv}: without "
                          f"multi_query the old decoder has one key head per query head ({h})")
    derived = r.get_any("num_key_value_heads", "int?")
    if derived is not None and derived != kv:
        raise ConfigError(f"load_hf_config: {mt} config: field 'num_key_value_heads'="
                          f"{derived} contradicts multi_query={mq} ({kv} key/value heads)")
    ffn = r.get("ffn_hidden_size", "int?")
    ctx = r.get("max_position_embeddings", "int")
    base, scaling = rope(r, ctx)
    if scaling is not None:
        raise ConfigError(f"load_hf_config: {mt} config: field 'rope_parameters.rope_type': "
                          "only 'default' is supported for falcon")
    return _fields(r.get("vocab_size", "int", required=True), d, h, kv,
                   r.get("num_hidden_layers", "int", required=True),
                   4 * d if ffn is None else ffn, NEOX_ACTS[act], ctx,
                   r.get("layer_norm_epsilon", "float"), r.get("tie_word_embeddings", "bool"),
                   r.get("parallel_attn", "bool"), r.get("bias", "bool"), base)


def _fields(vocab: int, d: int, heads: int, kv: int, blocks: int, d_mlp: int, mlp: str,
            ctx: int, eps: float, tied: bool, parallel: bool, bias: bool,
            base: int) -> dict[str, Any]:
    """The fields of a Hugging Face Falcon (old decoder) of these values."""
    return dict(vocab_size=vocab, d_model=d, n_heads=heads, n_kv_heads=kv, n_blocks=blocks,
                d_mlp=d_mlp, norm="layernorm", placement="pre", positions="rope",
                rope_pairing="half", rope_base=base, context=ctx, mlp=mlp, attn_bias=bias,
                mlp_bias=bias, tied_embeddings=tied, norm_eps=eps,
                parallel_residual=parallel, parallel_norms=1)


def falcon_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``FalconConfig`` (old decoder) cannot
    express, as ``(field, value, expected)``, or ``None``."""
    if c.mlp not in NEOX_ACTS.values():
        return "mlp", c.mlp, tuple(sorted(set(NEOX_ACTS.values())))
    if c.n_kv_heads not in (1, c.n_heads):
        return "n_kv_heads", c.n_kv_heads, (1, c.n_heads)
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
            c.vocab_size, c.d_model, c.n_heads, c.n_kv_heads, c.n_blocks, c.d_mlp, c.mlp,
            c.context, c.norm_eps, c.tied_embeddings, c.parallel_residual, c.attn_bias,
            c.rope_base)))


def falcon_hf_dict(c: TransformerConfig) -> dict[str, Any]:
    """The ``FalconConfig`` fields of ``c`` (checked by :func:`falcon_mismatch`)."""
    mq = c.n_kv_heads == 1 and c.n_heads > 1
    act = {v: k for k, v in NEOX_ACTS.items() if k != "gelu_pytorch_tanh"}[c.mlp]
    return {"architectures": ["FalconForCausalLM"], "model_type": "falcon",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, "num_attention_heads": c.n_heads,
            "num_kv_heads": c.n_heads, "multi_query": mq, "new_decoder_architecture": False,
            "alibi": False, "parallel_attn": c.parallel_residual, "bias": c.attn_bias,
            "ffn_hidden_size": c.d_mlp, "activation": act,
            "max_position_embeddings": c.context, "layer_norm_epsilon": c.norm_eps,
            "tie_word_embeddings": c.tied_embeddings,
            "rope_parameters": {"rope_type": "default", "rope_theta": float(c.rope_base)}}
