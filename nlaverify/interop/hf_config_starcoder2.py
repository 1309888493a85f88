r"""Hugging Face ``Starcoder2Config`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 23).

Checked against ``transformers`` 5.25 (``models/starcoder2/configuration_starcoder2.py`` and
``modeling_starcoder2.py``). A ``Starcoder2ForCausalLM`` (StarCoder 2, Lozhkov et al. 2024) is
an embedding ``embed_tokens``, ``num_hidden_layers`` sequential pre-LN blocks
:math:`x \leftarrow x + \operatorname{Attn}(N_1(x))`, :math:`x \leftarrow x +
\operatorname{MLP}(N_2(x))` with ``nn.LayerNorm`` (weight and bias, ``norm_epsilon``), a final
LayerNorm ``norm`` and an ``lm_head`` tied to the embedding by default. Attention: ``q_proj``,
``k_proj``, ``v_proj``, ``o_proj`` (grouped-query: ``num_key_value_heads``), all four biased
when ``use_bias``; RoPE on the whole head in the *half* pairing (``rotate_half``:
``rope_pairing="half"``, so no permutation of the weights); an optional ``sliding_window``
on every layer (the mask of Mistral). MLP: the *non-gated* ``c_fc`` -> ``hidden_act`` ->
``c_proj``, biased when ``use_bias``.

Fields: ``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``intermediate_size`` (required); ``num_key_value_heads`` (default 2), ``hidden_act``
(ACT2FN's names: ``gelu_pytorch_tanh`` / ``gelu_new`` the tanh GELU, ``gelu`` the erf one,
``relu``), ``max_position_embeddings``, ``norm_epsilon``, ``tie_word_embeddings``,
``sliding_window``, ``use_bias``, RoPE (``rope_parameters`` or the legacy top-level
``rope_theta``; ``rope_type`` ``default`` only). Dropouts (``attention_dropout``,
``residual_dropout``, ``embedding_dropout``) are ignored (training only). The base must be an
integer (``TransformerConfig.rope_base``): the published StarCoder2-3B's ``rope_theta =
999999.4420358813`` is refused by that key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.interop.hf_config_neox import NEOX_ACTS
from nlaverify.interop.hf_config_tables import first_mismatch

__all__ = ["starcoder2_fields", "starcoder2_hf_dict", "starcoder2_mismatch"]


def starcoder2_fields(r: Any, rope: Callable[[Any, int], tuple[int, Any]]) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of a ``Starcoder2Config`` dict (module
    docstring), read through :mod:`~nlaverify.interop.hf_config`'s reader ``r``; ``rope`` is
    its RoPE reader. Raises :class:`ConfigError` naming a key nlaverify cannot express."""
    mt = "starcoder2"
    d = r.get("hidden_size", "int", required=True)
    h = r.get("num_attention_heads", "int", required=True)
    if h < 1 or d % h:  # Starcoder2Attention: head_dim = hidden_size // num_attention_heads
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_size'={d}: expected a "
                          f"multiple of num_attention_heads={h}")
    act = r.get("hidden_act", "str")
    if act not in NEOX_ACTS:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_act': expected one of "
                          f"{', '.join(NEOX_ACTS)}, got {act!r}")
    ctx = r.get("max_position_embeddings", "int")
    base, scaling = rope(r, ctx)
    if scaling is not None:
        raise ConfigError(f"load_hf_config: {mt} config: field 'rope_parameters.rope_type': "
                          f"only 'default' is supported for {mt}")
    return _fields(r.get("vocab_size", "int", required=True), d, h,
                   r.get("num_key_value_heads", "int"),
                   r.get("num_hidden_layers", "int", required=True),
                   r.get("intermediate_size", "int", required=True), NEOX_ACTS[act], ctx,
                   r.get("norm_epsilon", "float"), r.get("tie_word_embeddings", "bool"),
                   r.get("use_bias", "bool"), r.get("sliding_window", "int?"), base)


def _fields(vocab: int, d: int, heads: int, kv: int, blocks: int, d_mlp: int, mlp: str,
            ctx: int, eps: float, tied: bool, bias: bool, window: int | None,
            base: int) -> dict[str, Any]:
    """The fields of a Hugging Face StarCoder 2 of these values, the fixed ones included."""
    return dict(vocab_size=vocab, d_model=d, n_heads=heads, n_kv_heads=kv, n_blocks=blocks,
                d_mlp=d_mlp, norm="layernorm", placement="pre", positions="rope",
                rope_pairing="half", rope_base=base, context=ctx, mlp=mlp, attn_bias=bias,
                mlp_bias=bias, tied_embeddings=tied, norm_eps=eps, sliding_window=window)


def starcoder2_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``Starcoder2Config`` cannot express, as
    ``(field, value, expected)``, or ``None``."""
    if c.mlp not in NEOX_ACTS.values():
        return "mlp", c.mlp, tuple(sorted(set(NEOX_ACTS.values())))
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
            c.vocab_size, c.d_model, c.n_heads, c.n_kv_heads or c.n_heads, c.n_blocks, c.d_mlp,
            c.mlp, c.context, c.norm_eps, c.tied_embeddings, c.attn_bias, c.sliding_window,
            c.rope_base)))


def starcoder2_hf_dict(c: TransformerConfig) -> dict[str, Any]:
    """The ``Starcoder2Config`` fields of ``c`` (already checked by
    :func:`starcoder2_mismatch`), every size written out."""
    act = {v: k for k, v in NEOX_ACTS.items() if k != "gelu_new"}[c.mlp]
    return {"architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, "num_attention_heads": c.n_heads,
            "num_key_value_heads": c.n_kv_heads, "intermediate_size": c.d_mlp,
            "hidden_act": act, "max_position_embeddings": c.context,
            "norm_epsilon": c.norm_eps, "tie_word_embeddings": c.tied_embeddings,
            "use_bias": c.attn_bias, "sliding_window": c.sliding_window,
            "rope_parameters": {"rope_type": "default", "rope_theta": float(c.rope_base)}}
