r"""Hugging Face ``Phi3Config`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 23).

Checked against ``transformers`` 5.25 (``models/phi3/configuration_phi3.py`` and
``modeling_phi3.py``). A ``Phi3ForCausalLM`` (Phi-3; Abdin et al. 2024) is Llama's block
(RMSNorm, pre-norm, SwiGLU, no biases, grouped-query attention) with *fused* projections:
``qkv_proj`` (output rows :math:`[Q \mid K \mid V]`, ``Phi3Attention.forward``'s slices at
:math:`h d_h` and :math:`(h + h_{kv}) d_h`) and ``gate_up_proj`` (rows gate then up,
``chunk(2)``); RoPE in the half pairing (``rotate_half``: ``rope_pairing="half"``, nothing
permuted) on the first ``int(head_dim * partial_rotary_factor)`` coordinates (default the
whole head); an optional ``sliding_window`` on every layer (Mistral's mask).

Fields: ``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``intermediate_size`` (required); ``num_key_value_heads`` (``None``: the heads),
``hidden_act`` (``silu`` / ``gelu_pytorch_tanh`` / ``gelu_new``), ``max_position_embeddings``,
``rms_norm_eps``, ``tie_word_embeddings``, ``sliding_window``; RoPE (``rope_parameters`` or
the legacy ``rope_theta`` / ``partial_rotary_factor``; ``rope_type`` ``default`` only: Phi-3's
``longrope`` is refused by that key). ``original_max_position_embeddings`` is read and
unused (``Phi3Config`` gives it to ``longrope`` only). Dropouts (``resid_pdrop``,
``embd_pdrop``) are ignored (training only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.interop.hf_config_neox import _fraction, _rotary
from nlaverify.interop.hf_config_tables import _GATED_ACTS, first_mismatch

__all__ = ["phi3_fields", "phi3_hf_dict", "phi3_mismatch"]


def phi3_fields(r: Any, rope: Callable[[Any, int], tuple[int, Any]]) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of a ``Phi3Config`` dict (module docstring),
    read through :mod:`~nlaverify.interop.hf_config`'s reader ``r``; ``rope`` its RoPE
    reader. Raises :class:`ConfigError` naming the key."""
    mt = "phi3"
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
    r.get("original_max_position_embeddings", "int")  # longrope's only (refused)
    base, rot = _rotary(r, rope, ctx, d // h)
    return _fields(r.get("vocab_size", "int", required=True), d, h, h if kv is None else kv,
                   r.get("num_hidden_layers", "int", required=True),
                   r.get("intermediate_size", "int", required=True), _GATED_ACTS[act], ctx,
                   r.get("rms_norm_eps", "float"), r.get("tie_word_embeddings", "bool"),
                   r.get("sliding_window", "int?"), base, rot)


def _fields(vocab: int, d: int, heads: int, kv: int, blocks: int, d_mlp: int, mlp: str,
            ctx: int, eps: float, tied: bool, window: int | None, base: int,
            rotary_dim: int | None) -> dict[str, Any]:
    """The fields of a Hugging Face Phi-3 of these values, the fixed ones included."""
    return dict(vocab_size=vocab, d_model=d, n_heads=heads, n_kv_heads=kv, n_blocks=blocks,
                d_mlp=d_mlp, norm="rmsnorm", placement="pre", positions="rope",
                rope_pairing="half", rotary_dim=rotary_dim, rope_base=base, context=ctx,
                mlp=mlp, tied_embeddings=tied, norm_eps=eps, sliding_window=window)


def phi3_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``Phi3Config`` cannot express, as ``(field,
    value, expected)``, or ``None``."""
    if c.mlp not in _GATED_ACTS.values():
        return "mlp", c.mlp, tuple(sorted(set(_GATED_ACTS.values())))
    rot = None if c.rotary_dim == c.d_head else c.rotary_dim
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
            c.vocab_size, c.d_model, c.n_heads, c.n_kv_heads or c.n_heads, c.n_blocks, c.d_mlp,
            c.mlp, c.context, c.norm_eps, c.tied_embeddings, c.sliding_window, c.rope_base,
            rot)), {"rotary_dim": rot})


def phi3_hf_dict(c: TransformerConfig) -> dict[str, Any]:
    """The ``Phi3Config`` fields of ``c`` (checked by :func:`phi3_mismatch`), every size
    written out."""
    dh = c.d_model // c.n_heads
    return {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, "num_attention_heads": c.n_heads,
            "num_key_value_heads": c.n_kv_heads, "intermediate_size": c.d_mlp,
            "hidden_act": "silu" if c.mlp == "swiglu" else "gelu_pytorch_tanh",
            "max_position_embeddings": c.context, "rms_norm_eps": c.norm_eps,
            "tie_word_embeddings": c.tied_embeddings, "sliding_window": c.sliding_window,
            "rope_parameters": {"rope_type": "default", "rope_theta": float(c.rope_base),
                                "partial_rotary_factor": _fraction(c.rotary_dim or dh, dh)}}
