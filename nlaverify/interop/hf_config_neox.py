r"""Hugging Face ``GPTNeoXConfig`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 23).

Checked against ``transformers`` 5.25 (``models/gpt_neox/configuration_gpt_neox.py`` and
``modeling_gpt_neox.py``). A ``GPTNeoXForCausalLM`` (Pythia, GPT-NeoX-20B; Black et al. 2022)
is an embedding ``embed_in``, ``num_hidden_layers`` LayerNorm (with bias) blocks, a final
LayerNorm and an untied ``lm_head`` (released checkpoints: ``embed_out``). Each block is
:math:`x \leftarrow x + \operatorname{Attn}(N_1(x)) + \operatorname{MLP}(N_2(x))` when
``use_parallel_residual`` (the default; ``parallel_residual=True, parallel_norms=2``), else
the sequential pre-LN block. Attention: one fused ``query_key_value`` whose output is
``(heads, 3, head_dim)`` per token (the weights' side), RoPE in the *half* pairing
(``rotate_half``: ``rope_pairing="half"``) on the first ``int(head_dim *
partial_rotary_factor)`` coordinates (``rotary_dim``; ``None`` when that is the whole head),
both projections biased by ``attention_bias``; the MLP ``dense_h_to_4h``, ``hidden_act``,
``dense_4h_to_h``, always biased.

Fields: ``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``intermediate_size`` (required); ``hidden_act`` (``gelu`` the erf GELU, ``gelu_new`` /
``gelu_pytorch_tanh`` the tanh one, ``relu``), ``max_position_embeddings``,
``layer_norm_eps``, ``tie_word_embeddings``, ``use_parallel_residual``, ``attention_bias``.
RoPE: ``rope_parameters`` (``rope_theta``, ``partial_rotary_factor``, ``rope_type``
``default``) as ``transformers`` 5 writes it, or the legacy top-level ``rotary_emb_base`` and
``rotary_pct`` of released configs (``GPTNeoXConfig.convert_rope_params_to_dict``; default
base 10000, fraction 0.25); the rotated coordinates must be an even number >= 2 (HF's odd
count would pair a coordinate with itself). Dropouts are ignored (training only).

``phi`` (``PhiConfig``, Phi-1/1.5/2): the same partial rotary in the half pairing (legacy
top-level ``partial_rotary_factor``, default 0.5, and ``rope_theta``), one ``input_layernorm``
per parallel block (``parallel_norms=1``), Q/K/V and ``dense`` biased, ``num_key_value_heads``
(grouped-query attention), MLP ``fc1``/``fc2`` biased, ``final_layernorm``, an ``lm_head`` with a
bias (``unembed_bias``; ``tie_word_embeddings`` must be false); ``qk_layernorm`` must be false.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.interop.hf_config_tables import first_mismatch

__all__ = ["neox_fields", "neox_hf_dict", "neox_mismatch", "phi_fields", "phi_hf_dict",
           "phi_mismatch"]

#: ``hidden_act`` of GPT-NeoX -> ``TransformerConfig.mlp`` (ACT2FN's names)
NEOX_ACTS = {"gelu": "gelu_erf", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu",
             "relu": "relu"}


#: per model type: the legacy top-level keys of the rotated fraction and the base, and the
#: fraction's default (``GPTNeoXConfig.convert_rope_params_to_dict``; ``PhiConfig``)
_LEGACY = {"gpt_neox": ("rotary_pct", "rotary_emb_base", 0.25),
           "phi": ("partial_rotary_factor", "rope_theta", 0.5),
           "stablelm": ("partial_rotary_factor", "rope_theta", 0.25),
           "phi3": ("partial_rotary_factor", "rope_theta", 1.0)}


def _rope_dict(r: Any) -> tuple[dict[str, Any], float]:
    """The RoPE parameters of a GPT-NeoX or Phi dict, as the Llama family spells them
    (``rope_theta`` only: the fraction taken out), and the rotated fraction; legacy top-level
    keys folded in."""
    mt = r.mt
    pct_key, base_key, default = _LEGACY[mt]
    params = r.raw("rope_parameters") or r.raw("rope_scaling") or {}
    if not isinstance(params, Mapping):
        raise ConfigError(f"load_hf_config: {mt} config: field 'rope_parameters': expected an "
                          f"object or null, got {params!r}")
    rp = dict(params)
    pct = rp.pop("partial_rotary_factor", None)
    for legacy, key, value in ((pct_key, "partial_rotary_factor", pct),
                               (base_key, "rope_theta", rp.get("rope_theta"))):
        if r.has(legacy):
            v = r.raw(legacy)
            if value is not None and v != value:
                raise ConfigError(f"load_hf_config: {mt} config: field {legacy!r}={v!r} "
                                  f"contradicts 'rope_parameters.{key}'={value!r}")
            if key == "rope_theta":
                rp["rope_theta"] = v
            else:
                pct = v
    if pct is None:
        pct = default
    if isinstance(pct, bool) or not isinstance(pct, int | float) or not 0 < pct <= 1:
        raise ConfigError(f"load_hf_config: {mt} config: field 'partial_rotary_factor' "
                          f"({pct_key}): expected a number in (0, 1], got {pct!r}")
    return rp, float(pct)


def _rotary(r: Any, rope: Callable[[Any, int], tuple[int, Any]], ctx: int, dh: int
            ) -> tuple[int, int | None]:
    """``(rope_base, rotary_dim)`` of a GPT-NeoX or Phi dict (``rotary_dim`` ``None`` for
    the whole head): HF's ``int(head_dim * partial_rotary_factor)`` coordinates, even."""
    mt = r.mt
    rp, pct = _rope_dict(r)
    view = type(r)({"model_type": mt, "rope_parameters": rp}, mt)
    base, scaling = rope(view, ctx)
    if scaling is not None:
        raise ConfigError(f"load_hf_config: {mt} config: field 'rope_parameters.rope_type': "
                          f"only 'default' is supported for {mt}")
    rot = int(dh * pct)  # GPTNeoXAttention / PhiAttention.rotary_ndims
    if rot < 2 or rot % 2:
        raise ConfigError(f"load_hf_config: {mt} config: field 'partial_rotary_factor' "
                          f"({_LEGACY[mt][0]})={pct}: rotates int({dh} * {pct}) = {rot} "
                          "coordinates of each head; expected an even number >= 2")
    return base, None if rot == dh else rot


def neox_fields(r: Any, rope: Callable[[Any, int], tuple[int, Any]]) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of a ``GPTNeoXConfig`` dict, read through
    :mod:`~nlaverify.interop.hf_config`'s reader ``r``; ``rope`` is its RoPE reader
    (``rope(reader, context) -> (base, scaling)``), run on the dict with the rotated
    fraction taken out. Raises :class:`ConfigError` naming a key nlaverify cannot express."""
    mt = "gpt_neox"
    d = r.get("hidden_size", "int", required=True)
    h = r.get("num_attention_heads", "int", required=True)
    if h < 1 or d % h:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_size'={d}: expected a "
                          f"multiple of num_attention_heads={h}")
    act = r.get("hidden_act", "str")
    if act not in NEOX_ACTS:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_act': expected one of "
                          f"{', '.join(NEOX_ACTS)}, got {act!r}")
    ctx = r.get("max_position_embeddings", "int")
    base, rot = _rotary(r, rope, ctx, d // h)
    parallel = r.get("use_parallel_residual", "bool")
    return _fields(r.get("vocab_size", "int", required=True), d, h,
                   r.get("num_hidden_layers", "int", required=True),
                   r.get("intermediate_size", "int", required=True), NEOX_ACTS[act], ctx,
                   r.get("layer_norm_eps", "float"), r.get("tie_word_embeddings", "bool"),
                   parallel, r.get("attention_bias", "bool"), base, rot)


def _fields(vocab: int, d: int, heads: int, blocks: int, d_mlp: int, mlp: str, ctx: int,
            eps: float, tied: bool, parallel: bool, attn_bias: bool, base: int,
            rotary_dim: int | None) -> dict[str, Any]:
    """The fields of a Hugging Face GPT-NeoX of these values, the fixed ones included."""
    return dict(vocab_size=vocab, d_model=d, n_heads=heads, n_blocks=blocks, d_mlp=d_mlp,
                norm="layernorm", placement="pre", positions="rope", rope_pairing="half",
                rotary_dim=rotary_dim, rope_base=base, context=ctx, mlp=mlp,
                attn_bias=attn_bias, mlp_bias=True, tied_embeddings=tied, norm_eps=eps,
                parallel_residual=parallel, parallel_norms=2 if parallel else 1)


def neox_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``GPTNeoXConfig`` cannot express, as
    ``(field, value, expected)``, or ``None``."""
    if c.mlp not in NEOX_ACTS.values():
        return "mlp", c.mlp, tuple(sorted(set(NEOX_ACTS.values())))
    rot = None if c.rotary_dim == c.d_head else c.rotary_dim
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
            c.vocab_size, c.d_model, c.n_heads, c.n_blocks, c.d_mlp, c.mlp, c.context,
            c.norm_eps, c.tied_embeddings, c.parallel_residual, c.attn_bias, c.rope_base,
            rot)), {"rotary_dim": rot})


def _fraction(rot: int, dh: int) -> float:
    """A float ``p`` with ``int(dh * p) == rot`` (HF's ``rotary_ndims``), ``rot / dh`` when
    that rounds right."""
    p = rot / dh
    while int(dh * p) < rot:
        p = math.nextafter(p, 2.0)
    return p


def neox_hf_dict(c: TransformerConfig) -> dict[str, Any]:
    """The ``GPTNeoXConfig`` fields of ``c`` (already checked by :func:`neox_mismatch`),
    every size written out: ``transformers.AutoConfig.for_model(**d)`` builds it."""
    dh = c.d_model // c.n_heads
    act = {v: k for k, v in NEOX_ACTS.items() if k != "gelu_pytorch_tanh"}[c.mlp]
    return {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, "num_attention_heads": c.n_heads,
            "intermediate_size": c.d_mlp, "hidden_act": act,
            "max_position_embeddings": c.context, "layer_norm_eps": c.norm_eps,
            "tie_word_embeddings": c.tied_embeddings,
            "use_parallel_residual": c.parallel_residual, "attention_bias": c.attn_bias,
            "rope_parameters": {"rope_type": "default", "rope_theta": float(c.rope_base),
                                "partial_rotary_factor": _fraction(c.rotary_dim or dh, dh)}}


def phi_fields(r: Any, rope: Callable[[Any, int], tuple[int, Any]]) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of a ``PhiConfig`` dict (module docstring), read
    through the reader ``r``; ``rope`` as for :func:`neox_fields`."""
    mt = "phi"
    d = r.get("hidden_size", "int", required=True)
    h = r.get("num_attention_heads", "int", required=True)
    if h < 1 or d % h:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_size'={d}: expected a "
                          f"multiple of num_attention_heads={h}")
    act = r.get("hidden_act", "str")
    if act not in NEOX_ACTS:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_act': expected one of "
                          f"{', '.join(NEOX_ACTS)}, got {act!r}")
    for key in ("tie_word_embeddings", "qk_layernorm"):
        if r.get(key, "bool"):
            raise ConfigError(f"load_hf_config: {mt} config: field {key!r}: only false is "
                              "supported" + (" (Phi's lm_head has a bias of its own)" if
                                             key.startswith("tie") else ""))
    ctx = r.get("max_position_embeddings", "int")
    base, rot = _rotary(r, rope, ctx, d // h)
    kv = r.get("num_key_value_heads", "int?")
    return _phi(r.get("vocab_size", "int", required=True), d, h, h if kv is None else kv,
                r.get("num_hidden_layers", "int", required=True),
                r.get("intermediate_size", "int", required=True), NEOX_ACTS[act], ctx,
                r.get("layer_norm_eps", "float"), base, rot)


def _phi(vocab: int, d: int, heads: int, kv: int, blocks: int, d_mlp: int, mlp: str,
         ctx: int, eps: float, base: int, rotary_dim: int | None) -> dict[str, Any]:
    """The fields of a Hugging Face Phi of these values, the fixed ones included."""
    return dict(vocab_size=vocab, d_model=d, n_heads=heads, n_kv_heads=kv, n_blocks=blocks,
                d_mlp=d_mlp, norm="layernorm", placement="pre", positions="rope",
                rope_pairing="half", rotary_dim=rotary_dim, rope_base=base, context=ctx,
                mlp=mlp, attn_bias=True, mlp_bias=True, unembed_bias=True, norm_eps=eps,
                parallel_residual=True, parallel_norms=1)


def phi_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``PhiConfig`` cannot express, or ``None``."""
    if c.mlp not in NEOX_ACTS.values():
        return "mlp", c.mlp, tuple(sorted(set(NEOX_ACTS.values())))
    rot = None if c.rotary_dim == c.d_head else c.rotary_dim
    return first_mismatch(c, lambda: TransformerConfig(**_phi(
        c.vocab_size, c.d_model, c.n_heads, c.n_kv_heads, c.n_blocks, c.d_mlp, c.mlp, c.context,
        c.norm_eps, c.rope_base, rot)), {"rotary_dim": rot})


def phi_hf_dict(c: TransformerConfig) -> dict[str, Any]:
    """The ``PhiConfig`` fields of ``c`` (checked by :func:`phi_mismatch`)."""
    dh = c.d_model // c.n_heads
    act = {v: k for k, v in NEOX_ACTS.items() if k != "gelu_pytorch_tanh"}[c.mlp]
    return {"architectures": ["PhiForCausalLM"], "model_type": "phi",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, "num_attention_heads": c.n_heads,
            "num_key_value_heads": c.n_kv_heads, "intermediate_size": c.d_mlp,
            "hidden_act": act, "max_position_embeddings": c.context,
            "layer_norm_eps": c.norm_eps, "tie_word_embeddings": False, "qk_layernorm": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": float(c.rope_base),
                                "partial_rotary_factor": _fraction(c.rotary_dim or dh, dh)}}
