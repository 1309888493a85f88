r"""Hugging Face ``Gemma3TextConfig`` and ``Gemma3Config`` <->
:class:`~nlaverify.config.TransformerConfig` (issue 23).

Checked against ``transformers`` 5.25 (``models/gemma3/configuration_gemma3.py`` and
``modeling_gemma3.py``). A ``Gemma3ForCausalLM`` (``model_type: gemma3_text``; Gemma Team
2025, Gemma 3 §2) is Gemma 2's block (sandwich norms, scores over
:math:`\sqrt{\text{query\_pre\_attn\_scalar}}`, local and global layers, :math:`\sqrt d`
embedding scale, ``1 + w`` RMSNorm gains, GeGLU, tied embeddings) with

* QK-norm: ``q_norm``/``k_norm``, a Gemma ``1 + w`` RMSNorm over each head's :math:`d_h`
  before RoPE (``qk_norm``);
* ``layer_types`` (``sliding_attention`` / ``full_attention`` per layer; absent: every
  ``sliding_window_pattern``-th layer global, the legacy key, default 6) -> ``window_layers``;
* RoPE per layer type: the local layers at ``rope_parameters["sliding_attention"]`` (legacy
  ``rope_local_base_freq``, default :math:`10^4`), unscaled -> ``rope_local_base``; the global
  layers at ``rope_parameters["full_attention"]`` (legacy ``rope_theta``, default
  :math:`10^6`, and ``rope_scaling``: linear, factor 8 in the 4B+ releases) -> ``rope_base``,
  ``rope_scaling``;
* no soft caps by default (both keys read; ``null``: none).

``use_bidirectional_attention`` must be false or null (HF then also halves the window).
``hidden_act`` is ignored (``Gemma3MLP`` reads ``hidden_activation``). Every size has
``Gemma3TextConfig``'s default, as in Hugging Face (the released ``gemma-3-4b-it`` text config
gives only the hidden and MLP sizes, the layers, the window and the scaling).

``model_type: gemma3`` (``Gemma3ForConditionalGeneration``) is read as its language model,
``text_config``: the SigLIP vision tower (``vision_config``) and the multimodal projector are
**not modelled** (nor counted); the loaded config's name ends in ``-language-model`` and
:data:`VISION_NOTE` says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nlaverify.config import ConfigError, RopeScaling, TransformerConfig
from nlaverify.interop.hf_config_gemma2 import _fields as _gemma2_fields
from nlaverify.interop.hf_config_gemma2 import _types, gemma2_hf_dict
from nlaverify.interop.hf_config_tables import _GATED_ACTS, first_mismatch

__all__ = ["VISION_NOTE", "config_note", "gemma3_fields", "gemma3_hf_dict", "gemma3_mismatch",
           "gemma3_text_dict"]

_KINDS = ("sliding_attention", "full_attention")
#: what a ``gemma3`` (multimodal) config's loaded model leaves out
VISION_NOTE = ("the language model of a Gemma3ForConditionalGeneration (text_config); its "
               "SigLIP vision tower and multimodal projector are not modelled or counted")
#: the keys of ``Gemma3Config`` around ``text_config`` (the vision side, tokens, init)
WRAPPER_KEYS = ("vision_config", "mm_tokens_per_image", "boi_token_index", "eoi_token_index",
                "image_token_index", "initializer_range", "tie_word_embeddings")


def config_note(config: TransformerConfig) -> dict[str, str]:
    """``{"note": VISION_NOTE}`` for a config :func:`~nlaverify.interop.hf_config.
    load_hf_config` read from a ``gemma3`` (multimodal) file (its name ends in
    ``-language-model``), else ``{}``: what ``nlaverify params`` adds to its report."""
    return {"note": VISION_NOTE} if config.name.endswith("-language-model") else {}


def gemma3_text_dict(d: Mapping[str, Any]) -> dict[str, Any]:
    """The ``gemma3_text`` dict of a ``gemma3`` (``Gemma3Config``) dict: its ``text_config``
    (``model_type`` defaulting to ``gemma3_text``; the wrapper's ``tie_word_embeddings``
    passed down when the text config has none, refused when they differ). Raises
    :class:`ConfigError` naming the key."""
    unknown = sorted(k for k in set(d) - {*WRAPPER_KEYS, "text_config", "model_type"}
                     - _IGNORED_TOP if not str(k).startswith("_"))
    if unknown:
        raise ConfigError(f"load_hf_config: gemma3 config: unsupported key {unknown[0]!r}: "
                          "nlaverify does not know what it changes, so it is not ignored")
    text = d.get("text_config")
    if not isinstance(text, Mapping):
        raise ConfigError(f"load_hf_config: gemma3 config: field 'text_config': expected an "
                          f"object (the language model's Gemma3TextConfig), got {text!r}")
    text = dict(text)
    mt = text.setdefault("model_type", "gemma3_text")
    if mt != "gemma3_text":
        raise ConfigError(f"load_hf_config: gemma3 config: field 'text_config.model_type': "
                          f"expected 'gemma3_text', got {mt!r}")
    if "tie_word_embeddings" in d:
        tie = d["tie_word_embeddings"]
        if "tie_word_embeddings" in text and text["tie_word_embeddings"] != tie:
            raise ConfigError(f"load_hf_config: gemma3 config: field 'tie_word_embeddings'="
                              f"{tie!r} contradicts 'text_config.tie_word_embeddings'="
                              f"{text['tie_word_embeddings']!r}")
        text["tie_word_embeddings"] = tie
    return text


#: top-level keys of a released ``gemma3`` config.json with no effect on the language model
_IGNORED_TOP = {"architectures", "transformers_version", "torch_dtype", "dtype",
                "eos_token_id", "bos_token_id", "pad_token_id", "image_token_id",
                "boi_token_id", "eoi_token_id", "use_cache"}


def _rope_part(r: Any, rope: Callable[[Any, int], tuple[int, Any]], part: dict[str, Any],
               legacy: str, default: float, where: str, ctx: int
               ) -> tuple[int, RopeScaling | None]:
    """``(base, scaling)`` of one layer type's ``rope_parameters`` entry ``part``, its base
    the legacy key ``legacy`` where given (else ``part``'s, else ``default``), read by the
    RoPE reader ``rope``; its messages name ``rope_parameters.<where>``."""
    from nlaverify.interop.hf_config_reader import Reader

    theta = r.raw(legacy)
    if theta is not None and part.get("rope_theta", theta) != theta:
        raise ConfigError(f"load_hf_config: {r.mt} config: field {legacy!r}={theta!r} "
                          f"contradicts 'rope_parameters.{where}.rope_theta'="
                          f"{part['rope_theta']!r}")
    part = {**part, "rope_theta": part.get("rope_theta", default) if theta is None else theta}
    sub = {"rope_parameters": part}
    try:
        return rope(Reader(sub, r.mt), ctx)
    except ConfigError as e:
        raise ConfigError(str(e).replace("'rope_parameters.", f"'rope_parameters.{where}.")
                          .replace("'rope_parameters'", f"'rope_parameters.{where}'")) from None


def _ropes(r: Any, rope: Callable[[Any, int], tuple[int, Any]], ctx: int
           ) -> tuple[int, RopeScaling | None, int]:
    """``(global base, global scaling, local base)`` (``Gemma3TextConfig.
    convert_rope_params_to_dict``): ``rope_parameters`` per layer type, the legacy
    ``rope_theta`` / ``rope_scaling`` on the global layers, ``rope_local_base_freq`` on the
    local ones; defaults :math:`10^6` and :math:`10^4`."""
    mt = r.mt
    params = r.raw("rope_parameters") or {}
    if not isinstance(params, Mapping) or not set(params) <= set(_KINDS) or not all(
            v is None or isinstance(v, Mapping) for v in params.values()):
        raise ConfigError(f"load_hf_config: {mt} config: field 'rope_parameters': expected "
                          f"an object with entries {', '.join(_KINDS)}, got {params!r}")
    scaling = r.raw("rope_scaling")
    if scaling is not None and not isinstance(scaling, Mapping):
        raise ConfigError(f"load_hf_config: {mt} config: field 'rope_scaling': expected an "
                          f"object or null, got {scaling!r}")
    full = {**(params.get("full_attention") or {}), **(scaling or {})}
    local = dict(params.get("sliding_attention") or {})
    base, scaled = _rope_part(r, rope, full, "rope_theta", 1e6, "full_attention", ctx)
    lbase, lscaled = _rope_part(r, rope, local, "rope_local_base_freq", 1e4,
                                "sliding_attention", ctx)
    if lscaled is not None:
        raise ConfigError(f"load_hf_config: {mt} config: field 'rope_parameters."
                          f"sliding_attention.rope_type': the local layers' RoPE is unscaled "
                          f"(TransformerConfig.rope_local_base), got {lscaled.kind!r}")
    return base, scaled, lbase


def gemma3_fields(r: Any, rope: Callable[[Any, int], tuple[int, Any]]) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of a ``Gemma3TextConfig`` dict (module
    docstring), read through :mod:`~nlaverify.interop.hf_config`'s reader ``r``; ``rope``
    is its RoPE reader. Raises :class:`ConfigError` naming the key."""
    mt = r.mt
    act = r.get("hidden_activation", "str")
    if act not in _GATED_ACTS:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_activation': expected "
                          f"one of {', '.join(_GATED_ACTS)}, got {act!r}")
    if r.get("use_bidirectional_attention", "bool?"):
        raise ConfigError(f"load_hf_config: {mt} config: field 'use_bidirectional_attention': "
                          "only false/null is supported, got true")
    n = r.get("num_hidden_layers", "int")
    w = r.get("sliding_window", "int?")
    pattern = r.get("sliding_window_pattern", "int")
    if pattern < 1:
        raise ConfigError(f"load_hf_config: {mt} config: field 'sliding_window_pattern': "
                          f"expected an integer >= 1, got {pattern}")
    types = r.raw("layer_types")
    if types is None:  # Gemma3TextConfig.__post_init__: every pattern-th layer global
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention"
                 for i in range(n)]
    if not isinstance(types, list) or len(types) != n or not set(types) <= set(_KINDS):
        raise ConfigError(f"load_hf_config: {mt} config: field 'layer_types': expected {n} "
                          f"entries of {', '.join(_KINDS)}, got {types!r}")
    if w is None and "sliding_attention" in types:
        raise ConfigError(f"load_hf_config: {mt} config: field 'sliding_window': null, but "
                          "'layer_types' asks for sliding attention")
    ctx = r.get("max_position_embeddings", "int")
    base, scaling, local = _ropes(r, rope, ctx)
    caps = [r.get(k, "float?") for k in ("attn_logit_softcapping", "final_logit_softcapping")]
    return _fields(r.get("vocab_size", "int"), r.get("hidden_size", "int"),
                   r.get("num_attention_heads", "int"),
                   r.get("num_key_value_heads", "int"), r.get("head_dim", "int"), n,
                   r.get("intermediate_size", "int"), _GATED_ACTS[act], ctx,
                   r.get("rms_norm_eps", "float"), r.get("tie_word_embeddings", "bool"),
                   r.get("attention_bias", "bool"), r.get("query_pre_attn_scalar", "float"),
                   w, types, caps, (base, scaling, local))


def _fields(vocab: int, d: int, heads: int, kv: int, dh: int, blocks: int, d_mlp: int,
            mlp: str, ctx: int, eps: float, tied: bool, bias: bool, scalar: float,
            window: int | None, types: list[str], caps: list[float | None],
            ropes: tuple[int, RopeScaling | None, int | None]) -> dict[str, Any]:
    """The fields of a Hugging Face Gemma 3 of these values: Gemma 2's
    (:func:`~nlaverify.interop.hf_config_gemma2._fields`) with QK-norm and the local blocks'
    RoPE base."""
    fields = _gemma2_fields(vocab, d, heads, kv, dh, blocks, d_mlp, mlp, ctx, eps, tied, bias,
                            scalar, window, types, caps[0], caps[1], ropes[0], ropes[1])
    local = "sliding_attention" in types
    return {**fields, "qk_norm": True, "rope_local_base": ropes[2] if local else None}


def gemma3_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``Gemma3TextConfig`` cannot express, as
    ``(field, value, expected)``, or ``None``."""
    if c.mlp not in _GATED_ACTS.values():
        return "mlp", c.mlp, tuple(sorted(set(_GATED_ACTS.values())))
    if c.query_pre_attn_scalar is None:
        return "query_pre_attn_scalar", None, "a number (Gemma 3 always scales by it)"
    if c.sliding_window is not None and c.rope_local_base is None:
        return "rope_local_base", None, "a number (Gemma 3's local layers have their own base)"
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
            c.vocab_size, c.d_model, c.n_heads, c.n_kv_heads or c.n_heads, c.d_head or 1,
            c.n_blocks, c.d_mlp, c.mlp, c.context, c.norm_eps, c.tied_embeddings, c.attn_bias,
            c.query_pre_attn_scalar, c.sliding_window, _types(c),
            [c.attn_softcap, c.final_softcap], (c.rope_base, c.rope_scaling,
                                                c.rope_local_base))))


def gemma3_hf_dict(c: TransformerConfig, rope: dict[str, Any]) -> dict[str, Any]:
    """The ``Gemma3TextConfig`` fields of ``c`` (checked by :func:`gemma3_mismatch`), every
    size written out: Gemma 2's (:func:`~nlaverify.interop.hf_config_gemma2.gemma2_hf_dict`)
    with ``rope`` the global ``rope_parameters`` entry and the local one unscaled at
    ``rope_local_base`` (:math:`10^4`, HF's default, when no block is windowed)."""
    local = c.rope_local_base if c.rope_local_base is not None else 10_000
    return {**gemma2_hf_dict(c, rope), "architectures": ["Gemma3ForCausalLM"],
            "model_type": "gemma3_text",
            "rope_parameters": {"full_attention": rope, "sliding_attention": {
                "rope_type": "default", "rope_theta": float(local)}}}
