r"""Hugging Face ``config.json`` <-> :class:`~nlaverify.config.TransformerConfig`.

The conventions of the configuration side, in one place (the weights' side is
:mod:`nlaverify.interop.weights`). Checked against ``transformers`` 5.24
(``models/<type>/configuration_<type>.py`` and ``modeling_<type>.py``).

Model types (:data:`SUPPORTED`) and what each fixes:

* ``gpt2``: LayerNorm, pre-LN, learned positions (``n_positions``), Conv1D projections with
  biases everywhere, ``n_inner`` (default :math:`4d`), tied ``lm_head`` unless
  ``tie_word_embeddings`` is false. ``activation_function``: ``gelu_new`` and
  ``gelu_pytorch_tanh`` are the tanh GELU (``mlp="gelu"``), ``gelu`` the exact erf GELU
  (``"gelu_erf"``), ``relu``. ``scale_attn_weights`` must be true,
  ``scale_attn_by_inverse_layer_idx`` and ``add_cross_attention`` false;
  ``reorder_and_upcast_attn`` changes only the precision of HF's attention, not the function,
  and is accepted. The aliases of ``GPT2Config.attribute_map`` (``hidden_size``,
  ``num_attention_heads``, ``num_hidden_layers``, ``max_position_embeddings``) are read too;
  the legacy ``n_ctx`` must equal ``n_positions``.
* ``llama``, ``mistral``, ``mixtral``, ``qwen2``, ``qwen3``, ``gemma``: RMSNorm (``rms_norm_eps``),
  pre-norm, RoPE, a gated MLP. ``hidden_act``: ``silu`` -> ``"swiglu"``; ``gelu_pytorch_tanh``
  / ``gelu_new`` (and, for Gemma only, ``gelu``, which ``GemmaConfig.__post_init__`` rewrites
  to ``gelu_pytorch_tanh``) -> ``"geglu"``. ``head_dim`` may be given (free :math:`d_h`, it
  need not divide ``hidden_size``). Biases: ``llama`` has ``attention_bias`` (Q, K, V and O)
  and ``mlp_bias``; ``qwen3`` and ``gemma`` ``attention_bias``; ``qwen2`` always has Q/K/V
  biases and no O bias (``attn_bias=True, attn_out_bias=False``); ``mistral`` and ``mixtral``
  none. ``mixtral``: ``num_local_experts`` (alias ``num_experts``, at least 1) experts, top
  ``num_experts_per_tok`` (between 1 and the number of experts), gates renormalised over the
  selected experts. ``qwen2_moe``, ``qwen3_moe``: as ``qwen2``, ``qwen3`` (``qwen2_moe``'s
  Q/K/V biases by ``qkv_bias``) with Qwen's mixture of experts
  (:mod:`~nlaverify.interop.hf_config_qwen_moe`). ``qwen3``: RMSNorm of
  each head's query and key (``qk_norm``). ``gemma``: the embedding times :math:`\sqrt d`
  (``embed_scale``), tied embeddings by default, RMSNorm gains :math:`1 + w` (a weights-side
  convention). A legacy ``hidden_activation`` key (``transformers`` 4.x Gemma) is accepted only
  as ``gelu_pytorch_tanh`` (its other values meant different functions across versions).
* ``mamba`` / ``mamba2``: Mamba's / Mamba-2's blocks without an MLP (:mod:`nlaverify.interop.
  hf_config_mamba`, ``hf_config_mamba2``); ``rwkv``: RWKV-4's (``hf_config_rwkv``).
* ``gpt_neox``: Pythia / GPT-NeoX, the parallel LayerNorm block with partial rotary in the half
  pairing (:mod:`nlaverify.interop.hf_config_neox`).
* ``gptj``: GPT-J, one LayerNorm per parallel block, interleaved partial rotary, a biased
  ``lm_head`` (:mod:`nlaverify.interop.hf_config_gptj`).
* ``phi``: Phi-2, one LayerNorm per parallel block, half-pairing partial rotary, every bias
  (:mod:`nlaverify.interop.hf_config_neox`).
* ``starcoder2``, ``stablelm``, ``gemma2``, ``granite``, ``olmo2``, ``phi3``, ``ministral``,
  ``olmo`` (LayerNorm without gain or bias), ``cohere`` (parallel, bias-free LayerNorm,
  ``logit_scale``), ``falcon``, ``opt``, ``gemma3_text`` (Gemma 3: QK-norm, local RoPE base
  ``rope_local_base``): each in ``nlaverify.interop.hf_config_<type>``.
* ``gemma3`` (``Gemma3ForConditionalGeneration``): read as its language model, ``text_config``
  (a ``gemma3_text``); the vision tower and multimodal projector are **not modelled**: the
  config's name ends in ``-language-model`` and :attr:`HFConfig.note` says so
  (:mod:`nlaverify.interop.hf_config_gemma3`).
* ``deepseek_v3``, ``deepseek_v2``: DeepSeek-V3 / V2 with every layer dense, multi-head
  latent attention (:mod:`nlaverify.interop.hf_config_deepseek`).
* Sliding windows: ``mistral``/``mixtral`` ``sliding_window`` (``None`` = full attention);
  ``qwen2``/``qwen3`` ``sliding_window`` applies only when ``use_sliding_window``, and then to
  layers ``>= max_window_layers`` (or as ``layer_types`` says): a window on some layers only
  cannot be expressed and is an error.

RoPE: the base :math:`b` is ``rope_theta`` (old top-level key) or ``rope_parameters
["rope_theta"]`` (``transformers`` 5), default 10000 (Mixtral :math:`10^6`), and must be an
integer below :math:`2^{53}` (``TransformerConfig.rope_base``; above it a float no longer
names one integer). The scaling is ``rope_scaling`` (old) or the rest of
``rope_parameters``; its ``rope_type`` (or legacy ``type``) is ``default``, ``linear``
(``factor``) or ``llama3`` (``factor``, ``low_freq_factor``, ``high_freq_factor``,
``original_max_position_embeddings``, default ``max_position_embeddings`` as in
``RotaryEmbeddingConfigMixin.standardize_rope_params``) or ``yarn`` (``factor``; optional
``original_max_position_embeddings``, ``beta_fast`` (32), ``beta_slow`` (1), ``mscale``,
``mscale_all_dim``, with a cos/sin amplitude of 1: :class:`~nlaverify.config.RopeScaling`);
any other (``dynamic``, ``longrope``, ...) or an unknown key in it (YaRN's ``truncate``,
``attention_factor``) is an error.

Strictness. ``model_type`` and the sizes (``vocab_size``, the width, the depth, the number of
heads and, for the gated models, ``intermediate_size``) are required; every other field takes
the default of the ``transformers`` config class. A key that is neither interpreted nor in
:data:`IGNORED` (metadata, generation, dropout and training-only options, listed with the
reason; some for the model types of :data:`IGNORED_ONLY` only) is an error naming it, as is
an interpreted key with a value nlaverify cannot express. Nothing is silently dropped.
``return_dict`` must be true (false makes HF return tuples). LoRA adapters (``lora_rank > 0``)
have no HF counterpart: :func:`hf_config_dict` refuses them (merge them first,
:func:`nlaverify.finetune.merge_lora`). Keys beginning with ``_`` are ignored (``_name_or_path``,
the ``_source`` notes of ``nlaverify/data/hf_configs``; OPT reads ``_remove_final_layer_norm``).

The tables (:data:`SUPPORTED`, :data:`IGNORED`, :data:`HF_DEFAULTS`, ...) live in
:mod:`nlaverify.interop.hf_config_tables`, the reverse :func:`hf_config_dict` in
:mod:`nlaverify.interop.hf_config_export`; both are re-exported here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nlaverify.config import ConfigError, RopeScaling, TransformerConfig
from nlaverify.interop.hf_config_cohere import cohere_fields
from nlaverify.interop.hf_config_deepseek import deepseek_v2_fields, deepseek_v3_fields
from nlaverify.interop.hf_config_export import hf_config_dict
from nlaverify.interop.hf_config_falcon import falcon_fields
from nlaverify.interop.hf_config_gemma2 import gemma2_fields
from nlaverify.interop.hf_config_gemma3 import VISION_NOTE, gemma3_fields, gemma3_text_dict
from nlaverify.interop.hf_config_gptj import gptj_fields
from nlaverify.interop.hf_config_granite import granite_fields
from nlaverify.interop.hf_config_mamba import mamba_fields
from nlaverify.interop.hf_config_mamba2 import mamba2_fields
from nlaverify.interop.hf_config_ministral import ministral_fields
from nlaverify.interop.hf_config_neox import neox_fields, phi_fields
from nlaverify.interop.hf_config_olmo import olmo_fields
from nlaverify.interop.hf_config_olmo2 import olmo2_fields
from nlaverify.interop.hf_config_opt import opt_fields
from nlaverify.interop.hf_config_phi3 import phi3_fields
from nlaverify.interop.hf_config_qwen_moe import QWEN_MOE, qwen_moe_fields
from nlaverify.interop.hf_config_reader import Reader, read_source, typed
from nlaverify.interop.hf_config_rwkv import rwkv_fields
from nlaverify.interop.hf_config_stablelm import stablelm_fields
from nlaverify.interop.hf_config_starcoder2 import starcoder2_fields
from nlaverify.interop.hf_config_tables import (
    _GATED_ACTS,
    _GPT2_ACTS,
    _GPT2_ALIASES,
    ARCHITECTURES,
    HF_DEFAULTS,
    IGNORED,
    IGNORED_ONLY,
    SUPPORTED,
)

__all__ = ["ARCHITECTURES", "HF_DEFAULTS", "IGNORED", "IGNORED_ONLY", "SUPPORTED", "HFConfig",
           "hf_config_dict", "load_hf_config"]


@dataclass(frozen=True)
class HFConfig:
    """A Hugging Face configuration read by :func:`load_hf_config`: its ``model_type``, the
    equivalent :class:`TransformerConfig` and the ``raw`` dict as given; ``note`` says what of
    the checkpoint is not modelled (a ``gemma3`` config: ``model_type`` and ``raw`` are its
    ``text_config``'s, the vision side left out)."""

    model_type: str
    config: TransformerConfig
    raw: dict[str, Any] = field(compare=False)
    note: str = field(default="", compare=False)


def load_hf_config(source: Mapping[str, Any] | str | os.PathLike) -> HFConfig:
    r"""The :class:`TransformerConfig` of a Hugging Face ``config.json``.

    Args:
        source: the config as a dict, the path of a ``config.json``, or a checkpoint
            directory holding one.

    Returns:
        An :class:`HFConfig`. The conventions (which HF field sets which option, the
        defaults, the rejected values) are listed in the module docstring; sources: the
        ``transformers`` 5.24 configuration and modeling files of each model type.

    Raises:
        ConfigError: naming the key: a missing required field, an unsupported
            ``model_type``, key or value (e.g. ``rope_type='dynamic'``), a non-integral
            ``rope_theta``.
    """
    d, name = read_source(source)
    mt = d.get("model_type")
    if mt is None:
        raise ConfigError("load_hf_config: missing required field 'model_type'")
    if mt == "gemma3":  # Gemma3ForConditionalGeneration: its language model only
        text = load_hf_config(gemma3_text_dict(d))
        return HFConfig(text.model_type, text.config.replace(
            name=f"{name or 'hf-gemma3'}-language-model"), text.raw, VISION_NOTE)
    if mt not in SUPPORTED:
        raise ConfigError(f"load_hf_config: field 'model_type': expected one of "
                          f"{', '.join(SUPPORTED)}, got {mt!r}")
    r = Reader(d, mt)
    # PreTrainedConfig.return_dict: false makes *ForCausalLM return tuples, not the output
    # objects verification reads (HF then fails); true is the default and harmless
    if r.get_any("return_dict", "bool") is False:
        raise ConfigError(f"load_hf_config: {mt} config: field 'return_dict': only true is "
                          "supported, got false")
    roped = {"gpt_neox": neox_fields, "phi": phi_fields, "starcoder2": starcoder2_fields,
             "stablelm": stablelm_fields, "gemma2": gemma2_fields, "granite": granite_fields,
             "olmo2": olmo2_fields, "phi3": phi3_fields, "olmo": olmo_fields,
             "cohere": cohere_fields, "falcon": falcon_fields,
             "ministral": ministral_fields,
             "gemma3_text": gemma3_fields, "deepseek_v3": deepseek_v3_fields,
             "deepseek_v2": deepseek_v2_fields}  # each given the RoPE reader
    plain = {"gpt2": _gpt2, "mamba": mamba_fields, "gptj": gptj_fields, "opt": opt_fields,
             "rwkv": rwkv_fields, "mamba2": mamba2_fields}  # each given the reader only
    kw = (plain[mt](r) if mt in plain else roped[mt](r, _rope) if mt in roped else
          _llama_family(r))
    r.check_unknown()
    kw["name"] = name or f"hf-{mt}"
    try:
        cfg = TransformerConfig(**kw)
    except ConfigError as e:
        raise ConfigError(f"load_hf_config: {mt} config gives an invalid model: {e}") from None
    return HFConfig(mt, cfg, dict(d))


def _gpt2(r: Reader) -> dict[str, Any]:
    """GPT2Config -> TransformerConfig fields (transformers/models/gpt2)."""
    d = dict(r.d)
    for alias, key in _GPT2_ALIASES.items():
        if alias in d:
            r.used.add(alias)
            if key in d and d[key] != d[alias]:
                raise ConfigError(f"load_hf_config: gpt2 config: field {alias!r}={d[alias]!r} "
                                  f"contradicts {key!r}={d[key]!r}")
            d[key] = d[alias]
    r2 = Reader(d, "gpt2")
    vocab = r2.get("vocab_size", "int", required=True)
    dm = r2.get("n_embd", "int", required=True)
    nl = r2.get("n_layer", "int", required=True)
    nh = r2.get("n_head", "int", required=True)
    ctx = r2.get("n_positions", "int")
    inner = r2.get("n_inner", "int?")
    act = r2.get("activation_function", "str")
    if act not in _GPT2_ACTS:
        raise ConfigError(f"load_hf_config: gpt2 config: field 'activation_function': expected "
                          f"one of {', '.join(_GPT2_ACTS)}, got {act!r}")
    for key, want in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                      ("add_cross_attention", False)):
        if r2.get(key, "bool") is not want:
            raise ConfigError(f"load_hf_config: gpt2 config: field {key!r}: only {want} is "
                              f"supported, got {d[key]!r}")
    if "n_ctx" in d:
        r2.used.add("n_ctx")
        if d["n_ctx"] != ctx:
            raise ConfigError(f"load_hf_config: gpt2 config: field 'n_ctx'={d['n_ctx']!r} "
                              f"differs from n_positions={ctx}")
    out = dict(vocab_size=vocab, d_model=dm, n_heads=nh, n_blocks=nl,
               d_mlp=inner if inner is not None else 4 * dm, norm="layernorm",
               placement="pre", positions="learned", context=ctx, mlp=_GPT2_ACTS[act],
               attn_bias=True, mlp_bias=True,
               tied_embeddings=r2.get("tie_word_embeddings", "bool"),
               norm_eps=r2.get("layer_norm_epsilon", "float"))
    r.used |= r2.used
    return out


def _llama_family(r: Reader) -> dict[str, Any]:
    """LlamaConfig and its relatives -> TransformerConfig fields."""
    mt, dm = r.mt, r.get("hidden_size", "int", required=True)
    nh = r.get("num_attention_heads", "int", required=True)
    kw: dict[str, Any] = dict(
        vocab_size=r.get("vocab_size", "int", required=True), d_model=dm, n_heads=nh,
        n_blocks=r.get("num_hidden_layers", "int", required=True),
        d_mlp=r.get("intermediate_size", "int", required=True), norm="rmsnorm",
        placement="pre", positions="rope",
        context=r.get("max_position_embeddings", "int"),
        norm_eps=r.get("rms_norm_eps", "float"),
        tied_embeddings=r.get("tie_word_embeddings", "bool"))
    kv = r.get("num_key_value_heads", "int?")
    kw["n_kv_heads"] = nh if kv is None else kv
    if mt in ("qwen2", *QWEN_MOE):  # no field in the configs; the attention reads getattr
        dh = typed(mt, "head_dim", r.raw("head_dim"), "int?")
    else:
        dh = r.get("head_dim", "int?")
    kw["d_head"] = dm // nh if dh is None else dh
    kw["mlp"] = _activation(r)
    kw.update(_biases(r))
    if mt == "mixtral":
        kw["n_experts"] = _num_experts(r)
        kw["top_k"] = r.get("num_experts_per_tok", "int")
        if not 1 <= kw["top_k"] <= kw["n_experts"]:
            raise ConfigError(f"load_hf_config: mixtral config: field 'num_experts_per_tok': "
                              f"expected an integer in [1, {kw['n_experts']}] (the number of "
                              f"experts), got {kw['top_k']}")
    if mt in QWEN_MOE:
        kw.update(qwen_moe_fields(r, kw["n_blocks"]))
    if mt in ("qwen3", "qwen3_moe"):
        kw["qk_norm"] = True
    if mt == "gemma":
        kw["embed_scale"] = True
        if r.get("use_bidirectional_attention", "bool?"):
            raise ConfigError("load_hf_config: gemma config: field "
                              "'use_bidirectional_attention': only false/null is supported, "
                              "got true")
    window = _sliding_window(r)
    if window is not None:
        kw["sliding_window"] = window
    base, scaling = _rope(r, kw["context"])
    kw["rope_base"] = base
    if scaling is not None:
        kw["rope_scaling"] = scaling
    return kw


def _num_experts(r: Reader) -> int:
    """Mixtral's ``num_local_experts`` (``MixtralConfig.attribute_map`` alias
    ``num_experts``)."""
    n, key = r.get("num_local_experts", "int"), "num_local_experts"
    if r.has("num_experts"):
        alias = typed(r.mt, "num_experts", r.raw("num_experts"), "int")
        if r.has("num_local_experts") and alias != n:
            raise ConfigError(f"load_hf_config: mixtral config: field 'num_experts'={alias} "
                              f"contradicts 'num_local_experts'={n}")
        n = alias
        key = key if r.has("num_local_experts") else "num_experts"
    if n < 1:  # 0 would silently build a dense SwiGLU model
        raise ConfigError(f"load_hf_config: mixtral config: field {key!r}: expected an "
                          f"integer >= 1, got {n}")
    return n


def _activation(r: Reader) -> str:
    mt = r.mt
    act = r.get("hidden_act", "str")
    if mt == "gemma":
        if act == "gelu":  # GemmaConfig.__post_init__: legacy "gelu" means the tanh form
            act = "gelu_pytorch_tanh"
        legacy = typed(mt, "hidden_activation", r.raw("hidden_activation"), "str?")
        if legacy is not None and legacy != "gelu_pytorch_tanh":
            raise ConfigError(f"load_hf_config: gemma config: field 'hidden_activation': only "
                              f"'gelu_pytorch_tanh' is supported, got {legacy!r}")
    allowed = ("silu",) if mt in ("mixtral", *QWEN_MOE) else tuple(_GATED_ACTS)
    if act not in allowed:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_act': expected one of "
                          f"{', '.join(allowed)}, got {act!r}")
    return _GATED_ACTS[act]


def _biases(r: Reader) -> dict[str, Any]:
    """The projection biases each model type has (module docstring)."""
    mt = r.mt
    if mt == "llama":
        return {"attn_bias": r.get("attention_bias", "bool"),
                "mlp_bias": r.get("mlp_bias", "bool")}
    if mt in ("qwen3", "gemma", "qwen3_moe"):
        return {"attn_bias": r.get("attention_bias", "bool")}
    if mt == "qwen2_moe":  # Qwen2MoeAttention: q/k/v_proj bias=qkv_bias, o_proj none
        return {"attn_bias": r.get("qkv_bias", "bool"), "attn_out_bias": False}
    if mt == "qwen2":  # Qwen2Attention: q/k/v_proj bias=True, o_proj bias=False
        return {"attn_bias": True, "attn_out_bias": False}
    return {}


def _sliding_window(r: Reader) -> int | None:
    mt = r.mt
    if mt in ("mistral", "mixtral"):
        return r.get("sliding_window", "int?")
    if mt not in ("qwen2", "qwen3"):
        return None
    use = r.get("use_sliding_window", "bool")
    w = r.get("sliding_window", "int?")
    if not use:  # Qwen2Config.__post_init__: sliding_window = None unless use_sliding_window
        w = None
    n = r.get("num_hidden_layers", "int", required=True)
    mwl = r.get("max_window_layers", "int")
    types = r.raw("layer_types")
    if types is None:  # Qwen2Config.__post_init__
        types = ["sliding_attention" if w is not None and i >= mwl else "full_attention"
                 for i in range(n)]
    if not isinstance(types, list) or len(types) != n or not set(types) <= {
            "sliding_attention", "full_attention"}:
        raise ConfigError(f"load_hf_config: {mt} config: field 'layer_types': expected "
                          f"{n} entries 'full_attention' / 'sliding_attention', got {types!r}")
    kinds = set(types)
    if kinds == {"full_attention"}:
        return None
    if len(kinds) > 1:
        raise ConfigError(f"load_hf_config: {mt} config: a sliding window on some layers only "
                          f"(use_sliding_window={use}, max_window_layers={mwl}, layer_types "
                          "mixed) cannot be expressed: TransformerConfig.sliding_window "
                          "applies to every block")
    if w is None:
        raise ConfigError(f"load_hf_config: {mt} config: field 'layer_types' asks for sliding "
                          "attention but 'sliding_window' is null or use_sliding_window is "
                          "false")
    return w


_ROPE_KEYS = {"default": set(), "linear": {"factor"},
              "llama3": {"factor", "low_freq_factor", "high_freq_factor",
                         "original_max_position_embeddings"},
              "yarn": {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
                       "mscale", "mscale_all_dim"}}
#: keys of rope_parameters that may be absent (HF's defaults: the context; YaRN's 32, 1, none)
_ROPE_OPTIONAL = {"original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
                  "mscale_all_dim"}


def _rope(r: Reader, context: int) -> tuple[int, RopeScaling | None]:
    """``(rope_base, rope_scaling)`` from ``rope_theta`` / ``rope_scaling`` (old keys) or
    ``rope_parameters`` (transformers 5)."""
    mt = r.mt
    params, scaling = r.raw("rope_parameters"), r.raw("rope_scaling")
    for key, v in (("rope_parameters", params), ("rope_scaling", scaling)):
        if v is not None and not isinstance(v, Mapping):
            raise ConfigError(f"load_hf_config: {mt} config: field {key!r}: expected an object "
                              f"or null, got {v!r}")
    if params and scaling and dict(params) != dict(scaling):
        raise ConfigError(f"load_hf_config: {mt} config: fields 'rope_parameters' and "
                          "'rope_scaling' both given and different")
    where = "rope_parameters" if params else "rope_scaling"
    rp = dict(params or scaling or {})
    theta_key = f"{where}.rope_theta"
    theta = rp.pop("rope_theta", None)
    if r.has("rope_theta"):
        top = typed(mt, "rope_theta", r.raw("rope_theta"), "float")
        if theta is not None and theta != top:
            raise ConfigError(f"load_hf_config: {mt} config: field 'rope_theta'={top!r} "
                              f"contradicts {theta_key}={theta!r}")
        theta, theta_key = top, "rope_theta"
    if theta is None:
        theta, theta_key = HF_DEFAULTS[mt]["rope_theta"], "rope_theta"
    theta = typed(mt, theta_key, theta, "float")
    # above 2**53 a float no longer determines the integer HF's float base stands for
    if theta != int(theta) or not 2 <= theta < 2**53:
        raise ConfigError(f"load_hf_config: {mt} config: field {theta_key!r}: expected an "
                          f"integral base in [2, 2**53) (TransformerConfig.rope_base is an "
                          f"integer), got {theta!r}")
    kind, legacy = rp.pop("rope_type", None), rp.pop("type", None)
    if kind is not None and legacy is not None and kind != legacy:
        raise ConfigError(f"load_hf_config: {mt} config: field '{where}.rope_type'={kind!r} "
                          f"contradicts '{where}.type'={legacy!r}")
    kind = kind or legacy or "default"
    if kind not in _ROPE_KEYS:
        raise ConfigError(f"load_hf_config: {mt} config: field '{where}.rope_type': expected "
                          f"one of {', '.join(_ROPE_KEYS)}, got {kind!r}")
    extra = set(rp) - _ROPE_KEYS[kind]
    if extra:
        k = sorted(extra)[0]
        raise ConfigError(f"load_hf_config: {mt} config: field '{where}.{k}'={rp[k]!r} is not "
                          f"supported with rope_type {kind!r}")
    if kind == "default":
        return int(theta), None
    for k in sorted(_ROPE_KEYS[kind] - _ROPE_OPTIONAL):
        if k not in rp:
            raise ConfigError(f"load_hf_config: {mt} config: missing required field "
                              f"'{where}.{k}' for rope_type {kind!r}")
        typed(mt, f"{where}.{k}", rp[k], "float")
    if kind == "linear":
        return int(theta), RopeScaling("linear", float(rp["factor"]))
    orig = typed(mt, f"{where}.original_max_position_embeddings",
                  rp.get("original_max_position_embeddings", context), "int")
    try:
        if kind == "yarn":  # _compute_yarn_parameters: beta_fast or 32, beta_slow or 1
            opt = {k: typed(mt, f"{where}.{k}", rp.get(k), "float?") for k in (
                "beta_fast", "beta_slow", "mscale", "mscale_all_dim")}
            return int(theta), RopeScaling(
                "yarn", float(rp["factor"]), original_context=orig,
                beta_fast=float(opt["beta_fast"] or 32), beta_slow=float(opt["beta_slow"] or 1),
                mscale=opt["mscale"], mscale_all_dim=opt["mscale_all_dim"])
        return int(theta), RopeScaling("llama3", float(rp["factor"]),
                                       float(rp["low_freq_factor"]),
                                       float(rp["high_freq_factor"]), orig)
    except ConfigError as e:
        raise ConfigError(f"load_hf_config: {mt} config: field {where!r}: {e}") from None
