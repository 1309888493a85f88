r"""Hugging Face ``Gemma2Config`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 23).

Checked against ``transformers`` 5.25 (``models/gemma2/configuration_gemma2.py`` and
``modeling_gemma2.py``). A ``Gemma2ForCausalLM`` (Gemma Team 2024, Gemma 2) is Gemma's
model (embeddings times :math:`\sqrt d`, RMSNorm gains :math:`1 + w`, GeGLU, an explicit
``head_dim``, tied embeddings by default; the weights' side is the Llama family's, RoPE
permuted to the interleaved pairing) with, per block, *sandwich* norms (``post_norms``:
``input_layernorm`` -> attention -> ``post_attention_layernorm`` -> add, then
``pre_feedforward_layernorm`` -> MLP -> ``post_feedforward_layernorm`` -> add), scores
:math:`qk^T \cdot` ``query_pre_attn_scalar`` :math:`^{-1/2}` soft-capped by
``attn_logit_softcapping`` before the mask (``attn_softcap``), a sliding window on the layers
``layer_types`` marks ``sliding_attention`` (default: the even layers, 0, 2, ...:
``window_layers``; all of them: ``None``), the logits capped by ``final_logit_softcapping``
(``final_softcap``).

Fields: ``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``intermediate_size`` (required); ``num_key_value_heads``, ``head_dim``,
``hidden_activation`` (``gelu_pytorch_tanh`` / ``gelu_new`` -> ``"geglu"``, ``silu`` ->
``"swiglu"``), ``max_position_embeddings``, ``rms_norm_eps``, ``tie_word_embeddings``,
``attention_bias`` (Q, K, V and O), ``query_pre_attn_scalar``, ``sliding_window``,
``layer_types``, both soft caps (``null``: none), RoPE as for Llama.
``use_bidirectional_attention`` must be false or null. ``hidden_act`` is ignored
(``Gemma2MLP`` reads ``hidden_activation``; released configs carry both).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nlaverify.config import ConfigError, RopeScaling, TransformerConfig
from nlaverify.interop.hf_config_tables import _GATED_ACTS, first_mismatch

__all__ = ["gemma2_fields", "gemma2_hf_dict", "gemma2_mismatch"]

_KINDS = ("sliding_attention", "full_attention")


def gemma2_fields(r: Any, rope: Callable[[Any, int], tuple[int, Any]]) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of a ``Gemma2Config`` dict (module docstring),
    read through :mod:`~nlaverify.interop.hf_config`'s reader ``r``; ``rope`` is its RoPE
    reader. Raises :class:`ConfigError` naming the key."""
    mt = "gemma2"
    act = r.get("hidden_activation", "str")
    if act not in _GATED_ACTS:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_activation': expected "
                          f"one of {', '.join(_GATED_ACTS)}, got {act!r}")
    if r.get("use_bidirectional_attention", "bool?"):
        raise ConfigError(f"load_hf_config: {mt} config: field 'use_bidirectional_attention': "
                          "only false/null is supported, got true")
    n = r.get("num_hidden_layers", "int", required=True)
    w = r.get("sliding_window", "int?")
    types = r.raw("layer_types")
    if types is None:  # Gemma2Config.__post_init__
        types = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
    if not isinstance(types, list) or len(types) != n or not set(types) <= set(_KINDS):
        raise ConfigError(f"load_hf_config: {mt} config: field 'layer_types': expected {n} "
                          f"entries of {', '.join(_KINDS)}, got {types!r}")
    if w is None and "sliding_attention" in types:
        raise ConfigError(f"load_hf_config: {mt} config: field 'sliding_window': null, but "
                          "'layer_types' asks for sliding attention")
    dh = r.get("head_dim", "int")
    base, scaling = rope(r, r.get("max_position_embeddings", "int"))
    caps = [r.get(k, "float?") for k in ("attn_logit_softcapping", "final_logit_softcapping")]
    return _fields(r.get("vocab_size", "int", required=True),
                   r.get("hidden_size", "int", required=True),
                   r.get("num_attention_heads", "int", required=True),
                   r.get("num_key_value_heads", "int"), dh, n,
                   r.get("intermediate_size", "int", required=True), _GATED_ACTS[act],
                   r.get("max_position_embeddings", "int"), r.get("rms_norm_eps", "float"),
                   r.get("tie_word_embeddings", "bool"), r.get("attention_bias", "bool"),
                   r.get("query_pre_attn_scalar", "float"), w, types, caps[0], caps[1], base,
                   scaling)


def _fields(vocab: int, d: int, heads: int, kv: int, dh: int, blocks: int, d_mlp: int,
            mlp: str, ctx: int, eps: float, tied: bool, bias: bool, scalar: float,
            window: int | None, types: list[str], attn_cap: float | None,
            final_cap: float | None, base: int, scaling: RopeScaling | None
            ) -> dict[str, Any]:
    """The fields of a Hugging Face Gemma 2 of these values, the fixed ones included."""
    local = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    return dict(vocab_size=vocab, d_model=d, n_heads=heads, n_kv_heads=kv, d_head=dh,
                n_blocks=blocks, d_mlp=d_mlp, norm="rmsnorm", placement="pre",
                positions="rope", context=ctx, mlp=mlp, attn_bias=bias, tied_embeddings=tied,
                norm_eps=eps, embed_scale=True, post_norms=True, query_pre_attn_scalar=scalar,
                sliding_window=window if local else None,
                window_layers=None if not local or len(local) == blocks else local,
                attn_softcap=attn_cap, final_softcap=final_cap, rope_base=base,
                rope_scaling=scaling)


def _types(c: TransformerConfig) -> list[str]:
    """``layer_types`` of ``c``: every block windowed when ``window_layers`` is ``None``."""
    if c.sliding_window is None:
        return ["full_attention"] * c.n_blocks
    local = range(c.n_blocks) if c.window_layers is None else c.window_layers
    return [_KINDS[0] if i in local else _KINDS[1] for i in range(c.n_blocks)]


def gemma2_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``Gemma2Config`` cannot express, as
    ``(field, value, expected)``, or ``None``."""
    if c.mlp not in _GATED_ACTS.values():
        return "mlp", c.mlp, tuple(sorted(set(_GATED_ACTS.values())))
    if c.query_pre_attn_scalar is None:
        return "query_pre_attn_scalar", None, "a number (Gemma 2 always scales by it)"
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
            c.vocab_size, c.d_model, c.n_heads, c.n_kv_heads or c.n_heads, c.d_head or 1,
            c.n_blocks, c.d_mlp, c.mlp, c.context, c.norm_eps, c.tied_embeddings, c.attn_bias,
            c.query_pre_attn_scalar, c.sliding_window, _types(c), c.attn_softcap,
            c.final_softcap, c.rope_base, c.rope_scaling)))


def gemma2_hf_dict(c: TransformerConfig, rope: dict[str, Any]) -> dict[str, Any]:
    """The ``Gemma2Config`` fields of ``c`` (checked by :func:`gemma2_mismatch`), every size
    written out; ``rope`` its ``rope_parameters``."""
    s = c.query_pre_attn_scalar
    return {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, "num_attention_heads": c.n_heads,
            "num_key_value_heads": c.n_kv_heads, "head_dim": c.d_head,
            "intermediate_size": c.d_mlp,
            "hidden_activation": "silu" if c.mlp == "swiglu" else "gelu_pytorch_tanh",
            "max_position_embeddings": c.context, "rms_norm_eps": c.norm_eps,
            "tie_word_embeddings": c.tied_embeddings, "attention_bias": c.attn_bias,
            "query_pre_attn_scalar": int(s) if s == int(s) else s,
            "sliding_window": c.sliding_window, "layer_types": _types(c),
            "attn_logit_softcapping": c.attn_softcap,
            "final_logit_softcapping": c.final_softcap, "rope_parameters": rope}
