r"""Hugging Face ``MinistralConfig`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 23).

Checked against ``transformers`` 5.25 (``models/ministral/configuration_ministral.py`` and
``modeling_ministral.py``). A ``MinistralForCausalLM`` (Ministral 8B, Mistral AI 2024) is
Mistral's model (RMSNorm, pre-norm, SwiGLU, grouped-query attention without biases, an
explicit ``head_dim``, RoPE permuted to the interleaved pairing on the weights' side) whose
sliding window applies to the layers ``layer_types`` marks ``sliding_attention``
(``window_layers``; ``MinistralConfig.__post_init__``: all of them when ``sliding_window`` is
set and ``layer_types`` absent, none otherwise).

Fields: ``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``intermediate_size`` (required); ``num_key_value_heads`` (default 8; ``null``: the heads),
``head_dim`` (``null``: ``hidden_size // num_attention_heads``), ``hidden_act``,
``max_position_embeddings``, ``rms_norm_eps``, ``tie_word_embeddings``, ``sliding_window``,
``layer_types``, RoPE as for Llama.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nlaverify.config import ConfigError, RopeScaling, TransformerConfig
from nlaverify.interop.hf_config_tables import _GATED_ACTS, first_mismatch

__all__ = ["ministral_fields", "ministral_hf_dict", "ministral_mismatch"]

_KINDS = ("sliding_attention", "full_attention")


def ministral_fields(r: Any, rope: Callable[[Any, int], tuple[int, Any]]) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of a ``MinistralConfig`` dict (module
    docstring), read through :mod:`~nlaverify.interop.hf_config`'s reader ``r``; ``rope`` its
    RoPE reader. Raises :class:`ConfigError` naming the key."""
    mt = "ministral"
    act = r.get("hidden_act", "str")
    if act not in _GATED_ACTS:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_act': expected one of "
                          f"{', '.join(_GATED_ACTS)}, got {act!r}")
    d = r.get("hidden_size", "int", required=True)
    h = r.get("num_attention_heads", "int", required=True)
    n = r.get("num_hidden_layers", "int", required=True)
    kv, dh = r.get("num_key_value_heads", "int?"), r.get("head_dim", "int?")
    w = r.get("sliding_window", "int?")
    types = r.raw("layer_types")
    if types is None:  # MinistralConfig.__post_init__
        types = [_KINDS[0] if w is not None else _KINDS[1]] * n
    if not isinstance(types, list) or len(types) != n or not set(types) <= set(_KINDS):
        raise ConfigError(f"load_hf_config: {mt} config: field 'layer_types': expected {n} "
                          f"entries of {', '.join(_KINDS)}, got {types!r}")
    if w is None and _KINDS[0] in types:
        raise ConfigError(f"load_hf_config: {mt} config: field 'sliding_window': null, but "
                          "'layer_types' asks for sliding attention")
    ctx = r.get("max_position_embeddings", "int")
    base, scaling = rope(r, ctx)
    return _fields(r.get("vocab_size", "int", required=True), d, h, h if kv is None else kv,
                   (d // h if h else 0) if dh is None else dh, n,
                   r.get("intermediate_size", "int", required=True), _GATED_ACTS[act], ctx,
                   r.get("rms_norm_eps", "float"), r.get("tie_word_embeddings", "bool"), w,
                   types, base, scaling)


def _fields(vocab: int, d: int, heads: int, kv: int, dh: int, blocks: int, d_mlp: int,
            mlp: str, ctx: int, eps: float, tied: bool, window: int | None,
            types: list[str], base: int, scaling: RopeScaling | None) -> dict[str, Any]:
    """The fields of a Hugging Face Ministral of these values, the fixed ones included."""
    local = tuple(i for i, t in enumerate(types) if t == _KINDS[0])
    return dict(vocab_size=vocab, d_model=d, n_heads=heads, n_kv_heads=kv, d_head=dh,
                n_blocks=blocks, d_mlp=d_mlp, norm="rmsnorm", placement="pre",
                positions="rope", context=ctx, mlp=mlp, tied_embeddings=tied, norm_eps=eps,
                sliding_window=window if local else None,
                window_layers=None if not local or len(local) == blocks else local,
                rope_base=base, rope_scaling=scaling)


def _types(c: TransformerConfig) -> list[str]:
    """``layer_types`` of ``c``: every block windowed when ``window_layers`` is ``None``."""
    if c.sliding_window is None:
        return [_KINDS[1]] * c.n_blocks
    local = range(c.n_blocks) if c.window_layers is None else c.window_layers
    return [_KINDS[0] if i in local else _KINDS[1] for i in range(c.n_blocks)]


def ministral_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``MinistralConfig`` cannot express, as
    ``(field, value, expected)``, or ``None``."""
    if c.mlp not in _GATED_ACTS.values():
        return "mlp", c.mlp, tuple(sorted(set(_GATED_ACTS.values())))
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
            c.vocab_size, c.d_model, c.n_heads, c.n_kv_heads or c.n_heads, c.d_head or 1,
            c.n_blocks, c.d_mlp, c.mlp, c.context, c.norm_eps, c.tied_embeddings,
            c.sliding_window, _types(c), c.rope_base, c.rope_scaling)))


def ministral_hf_dict(c: TransformerConfig, rope: dict[str, Any]) -> dict[str, Any]:
    """The ``MinistralConfig`` fields of ``c`` (checked by :func:`ministral_mismatch`), every
    size written out; ``rope`` its ``rope_parameters``."""
    return {"architectures": ["MinistralForCausalLM"], "model_type": "ministral",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, "num_attention_heads": c.n_heads,
            "num_key_value_heads": c.n_kv_heads, "head_dim": c.d_head,
            "intermediate_size": c.d_mlp,
            "hidden_act": "silu" if c.mlp == "swiglu" else "gelu_pytorch_tanh",
            "max_position_embeddings": c.context, "rms_norm_eps": c.norm_eps,
            "tie_word_embeddings": c.tied_embeddings, "sliding_window": c.sliding_window,
            "layer_types": _types(c), "rope_parameters": rope}
