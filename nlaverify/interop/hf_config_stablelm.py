r"""Hugging Face ``StableLmConfig`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 23).

Checked against ``transformers`` 5.25 (``models/stablelm/configuration_stablelm.py`` and
``modeling_stablelm.py``). A ``StableLmForCausalLM`` (StableLM-2; Bellagente et al. 2024) is
an embedding ``embed_tokens``, ``num_hidden_layers`` pre-LN blocks with ``nn.LayerNorm``
(weight and bias, ``layer_norm_eps``), a final LayerNorm ``norm`` and an ``lm_head``. A block
is sequential, :math:`x \leftarrow x + \operatorname{Attn}(N_1(x))`, :math:`x \leftarrow x +
\operatorname{MLP}(N_2(x))`, or, with ``use_parallel_residual``, :math:`x \leftarrow x +
\operatorname{Attn}(N_1(x)) + \operatorname{MLP}(N_1(x))` with the one ``input_layernorm``
(``parallel_residual=True, parallel_norms=1``; ``StableLmDecoderLayer`` then has no
``post_attention_layernorm``). Attention: ``q_proj``, ``k_proj``, ``v_proj`` biased when
``use_qkv_bias``, ``o_proj`` never (``attn_out_bias=False``); grouped-query
(``num_key_value_heads``); RoPE in the *half* pairing (``rotate_half``) on the first
``int(head_dim * partial_rotary_factor)`` coordinates (``rotary_dim``; default fraction 0.25,
``StableLmConfig.__post_init__``). The MLP is the gated ``down(act(gate(x)) * up(x))``
without biases (``silu`` -> ``"swiglu"``, ``gelu_pytorch_tanh`` / ``gelu_new`` ->
``"geglu"``).

Fields: ``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``intermediate_size`` (required); ``num_key_value_heads`` (default 32),
``hidden_act``, ``max_position_embeddings``, ``layer_norm_eps``, ``tie_word_embeddings``,
``use_qkv_bias``, ``use_parallel_residual``; RoPE as ``rope_parameters`` (``rope_theta``,
``partial_rotary_factor``, ``rope_type`` ``default``) or the legacy top-level
``partial_rotary_factor`` and ``rope_theta``. Refused by key: ``qk_layernorm=true``
(``StableLmLayerNormPerHead``: a LayerNorm with its own weights for *each* head, where the
graph's QK-norm is one RMSNorm shared by the heads). Dropouts (``hidden_dropout``,
``attention_dropout``) are ignored (training only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.interop.hf_config_neox import _fraction, _rotary
from nlaverify.interop.hf_config_tables import _GATED_ACTS, first_mismatch

__all__ = ["stablelm_fields", "stablelm_hf_dict", "stablelm_mismatch"]


def stablelm_fields(r: Any, rope: Callable[[Any, int], tuple[int, Any]]) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of a ``StableLmConfig`` dict (module docstring),
    read through :mod:`~nlaverify.interop.hf_config`'s reader ``r``; ``rope`` is its RoPE
    reader. Raises :class:`ConfigError` naming a key nlaverify cannot express."""
    mt = "stablelm"
    d = r.get("hidden_size", "int", required=True)
    h = r.get("num_attention_heads", "int", required=True)
    if h < 1 or d % h:  # StableLmAttention: head_dim = hidden_size // num_heads
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_size'={d}: expected a "
                          f"multiple of num_attention_heads={h}")
    act = r.get("hidden_act", "str")
    if act not in _GATED_ACTS:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_act': expected one of "
                          f"{', '.join(_GATED_ACTS)}, got {act!r}")
    if r.get("qk_layernorm", "bool"):
        raise ConfigError(f"load_hf_config: {mt} config: field 'qk_layernorm': only false is "
                          "supported (StableLM's per-head LayerNorms, one weight per head, are "
                          "not the graph's shared RMSNorm QK-norm)")
    ctx = r.get("max_position_embeddings", "int")
    base, rot = _rotary(r, rope, ctx, d // h)
    return _fields(r.get("vocab_size", "int", required=True), d, h,
                   r.get("num_key_value_heads", "int"),
                   r.get("num_hidden_layers", "int", required=True),
                   r.get("intermediate_size", "int", required=True), _GATED_ACTS[act], ctx,
                   r.get("layer_norm_eps", "float"), r.get("tie_word_embeddings", "bool"),
                   r.get("use_qkv_bias", "bool"), r.get("use_parallel_residual", "bool"),
                   base, rot)


def _fields(vocab: int, d: int, heads: int, kv: int, blocks: int, d_mlp: int, mlp: str,
            ctx: int, eps: float, tied: bool, qkv_bias: bool, parallel: bool, base: int,
            rotary_dim: int | None) -> dict[str, Any]:
    """The fields of a Hugging Face StableLM of these values, the fixed ones included
    (``attn_out_bias`` ``None`` when it equals ``attn_bias``: both false)."""
    return dict(vocab_size=vocab, d_model=d, n_heads=heads, n_kv_heads=kv, n_blocks=blocks,
                d_mlp=d_mlp, norm="layernorm", placement="pre", positions="rope",
                rope_pairing="half", rotary_dim=rotary_dim, rope_base=base, context=ctx,
                mlp=mlp, attn_bias=qkv_bias, attn_out_bias=False if qkv_bias else None,
                tied_embeddings=tied, norm_eps=eps, parallel_residual=parallel,
                parallel_norms=1)


def stablelm_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``StableLmConfig`` cannot express, as
    ``(field, value, expected)``, or ``None``."""
    if c.mlp not in _GATED_ACTS.values():
        return "mlp", c.mlp, tuple(sorted(set(_GATED_ACTS.values())))
    rot = None if c.rotary_dim == c.d_head else c.rotary_dim
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
            c.vocab_size, c.d_model, c.n_heads, c.n_kv_heads or c.n_heads, c.n_blocks, c.d_mlp,
            c.mlp, c.context, c.norm_eps, c.tied_embeddings, c.attn_bias, c.parallel_residual,
            c.rope_base, rot)), {"rotary_dim": rot})


def stablelm_hf_dict(c: TransformerConfig) -> dict[str, Any]:
    """The ``StableLmConfig`` fields of ``c`` (checked by :func:`stablelm_mismatch`), every
    size written out."""
    dh = c.d_model // c.n_heads
    return {"architectures": ["StableLmForCausalLM"], "model_type": "stablelm",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, "num_attention_heads": c.n_heads,
            "num_key_value_heads": c.n_kv_heads, "intermediate_size": c.d_mlp,
            "hidden_act": "silu" if c.mlp == "swiglu" else "gelu_pytorch_tanh",
            "max_position_embeddings": c.context, "layer_norm_eps": c.norm_eps,
            "tie_word_embeddings": c.tied_embeddings, "use_qkv_bias": c.attn_bias,
            "use_parallel_residual": c.parallel_residual, "qk_layernorm": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": float(c.rope_base),
                                "partial_rotary_factor": _fraction(c.rotary_dim or dh, dh)}}
