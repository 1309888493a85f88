r"""Hugging Face ``CohereConfig`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 23).

Checked against ``transformers`` 5.25 (``models/cohere/configuration_cohere.py`` and
``modeling_cohere.py``). A ``CohereForCausalLM`` (Cohere Command-R) is a *parallel* block with
one shared norm (``CohereDecoderLayer``: :math:`x \leftarrow x + \operatorname{Attn}(N(x)) +
\operatorname{MLP}(N(x))`: ``parallel_residual=True, parallel_norms=1``), ``CohereLayerNorm``
a LayerNorm with a gain and *no* bias (``norm_bias=False``, ``layer_norm_eps``), Llama's gated
MLP without biases, grouped-query attention with ``attention_bias`` on Q, K, V and O, RoPE in
the *interleaved* pairing (``rotate_half`` rotates :math:`(x_{2i}, x_{2i+1})`, the angles
``repeat_interleave``\ d: the graph's own pairing, nothing permuted), tied embeddings by
default, and the logits multiplied by ``logit_scale`` :math:`s`: the graph's ``temperature``
:math:`T = 1/s` (:math:`Z/T` for :math:`sZ`: equal in exact arithmetic, and in floating
point when :math:`s` is a power of two, as Command-R's 0.0625 is).

Fields: ``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``intermediate_size`` (required); ``num_key_value_heads`` (``None``: the heads),
``hidden_act`` (``silu`` / ``gelu_pytorch_tanh`` / ``gelu_new``), ``max_position_embeddings``,
``layer_norm_eps``, ``tie_word_embeddings``, ``attention_bias``, ``logit_scale`` (a number
> 0; ``null`` is refused: ``CohereForCausalLM`` multiplies by it), RoPE as for Llama.
``use_qk_norm`` (Command-R+'s per-head LayerNorm of queries and keys) must be false: refused
by name. The head dimension is ``hidden_size // num_attention_heads``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nlaverify.config import ConfigError, RopeScaling, TransformerConfig
from nlaverify.interop.hf_config_tables import _GATED_ACTS, first_mismatch

__all__ = ["cohere_fields", "cohere_hf_dict", "cohere_mismatch"]


def cohere_fields(r: Any, rope: Callable[[Any, int], tuple[int, Any]]) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of a ``CohereConfig`` dict (module docstring),
    read through :mod:`~nlaverify.interop.hf_config`'s reader ``r``; ``rope`` its RoPE
    reader. Raises :class:`ConfigError` naming the key."""
    mt = "cohere"
    act = r.get("hidden_act", "str")
    if act not in _GATED_ACTS:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_act': expected one of "
                          f"{', '.join(_GATED_ACTS)}, got {act!r}")
    if r.get("use_qk_norm", "bool?"):
        raise ConfigError(f"load_hf_config: {mt} config: field 'use_qk_norm'=True: Cohere's "
                          "per-head LayerNorm of queries and keys is not modelled; expected "
                          "false")
    s = r.get("logit_scale", "float?")
    if s is None or s <= 0:
        raise ConfigError(f"load_hf_config: {mt} config: field 'logit_scale'={s!r}: expected "
                          "a number > 0 (CohereForCausalLM multiplies the logits by it)")
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
                   r.get("layer_norm_eps", "float"), r.get("tie_word_embeddings", "bool"),
                   r.get("attention_bias", "bool"), 1.0 / s, base, scaling)


def _fields(vocab: int, d: int, heads: int, kv: int, blocks: int, d_mlp: int, mlp: str,
            ctx: int, eps: float, tied: bool, bias: bool, temperature: float, base: int,
            scaling: RopeScaling | None) -> dict[str, Any]:
    """The fields of a Hugging Face Cohere model of these values, the fixed ones included."""
    return dict(vocab_size=vocab, d_model=d, n_heads=heads, n_kv_heads=kv, n_blocks=blocks,
                d_mlp=d_mlp, norm="layernorm", norm_bias=False, placement="pre",
                positions="rope", context=ctx, mlp=mlp, attn_bias=bias, tied_embeddings=tied,
                norm_eps=eps, parallel_residual=True, parallel_norms=1,
                temperature=temperature, rope_base=base, rope_scaling=scaling)


def cohere_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``CohereConfig`` cannot express, as ``(field,
    value, expected)``, or ``None``."""
    if c.mlp not in _GATED_ACTS.values():
        return "mlp", c.mlp, tuple(sorted(set(_GATED_ACTS.values())))
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
            c.vocab_size, c.d_model, c.n_heads, c.n_kv_heads or c.n_heads, c.n_blocks, c.d_mlp,
            c.mlp, c.context, c.norm_eps, c.tied_embeddings, c.attn_bias, c.temperature,
            c.rope_base, c.rope_scaling)))


def cohere_hf_dict(c: TransformerConfig, rope: dict[str, Any]) -> dict[str, Any]:
    """The ``CohereConfig`` fields of ``c`` (checked by :func:`cohere_mismatch`), every size
    written out; ``rope`` its ``rope_parameters``."""
    return {"architectures": ["CohereForCausalLM"], "model_type": "cohere",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, "num_attention_heads": c.n_heads,
            "num_key_value_heads": c.n_kv_heads, "intermediate_size": c.d_mlp,
            "hidden_act": "silu" if c.mlp == "swiglu" else "gelu_pytorch_tanh",
            "max_position_embeddings": c.context, "layer_norm_eps": c.norm_eps,
            "tie_word_embeddings": c.tied_embeddings, "attention_bias": c.attn_bias,
            "logit_scale": 1.0 / c.temperature, "use_qk_norm": False,
            "rope_parameters": rope}
