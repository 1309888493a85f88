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
  selected experts. ``qwen3``: RMSNorm of
  each head's query and key (``qk_norm``). ``gemma``: the embedding times :math:`\sqrt d`
  (``embed_scale``), tied embeddings by default, RMSNorm gains :math:`1 + w` (a weights-side
  convention). A legacy ``hidden_activation`` key (``transformers`` 4.x Gemma) is accepted only
  as ``gelu_pytorch_tanh`` (its other values meant different functions across versions).
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
``RotaryEmbeddingConfigMixin.standardize_rope_params``); any other (``yarn``, ``dynamic``,
``longrope``, ...) or an unknown key in it is an error.

Strictness. ``model_type`` and the sizes (``vocab_size``, the width, the depth, the number of
heads and, for the gated models, ``intermediate_size``) are required; every other field takes
the default of the ``transformers`` config class. A key that is neither interpreted nor in
:data:`IGNORED` (metadata, generation, dropout and training-only options, listed with the
reason; some for the model types of :data:`IGNORED_ONLY` only) is an error naming it, as is
an interpreted key with a value nlaverify cannot express.
``return_dict`` must be true (false makes HF return tuples). A ``TransformerConfig`` with
LoRA adapters (``lora_rank > 0``) has no HF counterpart: :func:`hf_config_dict` refuses it
(merge the adapters first, :func:`nlaverify.finetune.merge_lora`). Keys beginning with
``_`` are ignored (HF's own ``_name_or_path``, and the ``_source`` notes of
``nlaverify/data/hf_configs``). Nothing is silently dropped.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nlaverify.config import ConfigError, RopeScaling, TransformerConfig

#: the Hugging Face ``model_type`` values nlaverify maps
SUPPORTED = ("gpt2", "llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma")

#: the ``*ForCausalLM`` class of each model type (the ``architectures`` entry)
ARCHITECTURES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM",
                 "mistral": "MistralForCausalLM", "mixtral": "MixtralForCausalLM",
                 "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "gemma": "GemmaForCausalLM"}

_META = "metadata (no effect on the function computed)"
_GEN = "tokenizer / generation setting (no effect on the function computed)"
_TRAIN = "training-time only (dropout, auxiliary loss, initialisation, router noise)"
_SERIAL = "a PreTrainedConfig serialisation field (no effect on the forward pass)"

#: keys accepted and ignored, with the reason
IGNORED: dict[str, str] = {
    "architectures": _META, "transformers_version": _META, "torch_dtype": _META,
    "dtype": "the weights carry their dtype", "use_cache": _GEN, "bos_token_id": _GEN,
    "eos_token_id": _GEN, "pad_token_id": _GEN, "tokenizer_class": _GEN,
    "task_specific_params": _GEN, "initializer_range": _TRAIN, "attention_dropout": _TRAIN,
    "resid_pdrop": _TRAIN, "embd_pdrop": _TRAIN, "attn_pdrop": _TRAIN,
    "router_aux_loss_coef": _TRAIN, "output_router_logits": _TRAIN,
    "router_jitter_noise": _TRAIN + " (MixtralSparseMoeBlock applies it only in training)",
    "chunk_size_feed_forward": _SERIAL + " (chunking is exact)", "id2label": _SERIAL,
    "label2id": _SERIAL, "is_encoder_decoder": _SERIAL, "output_attentions": _SERIAL,
    "output_hidden_states": _SERIAL, "problem_type": _SERIAL,
    "pretraining_tp": "unused by LlamaForCausalLM in transformers 5",
    "reorder_and_upcast_attn": "the precision of HF's GPT-2 attention, not its function",
    "summary_type": "GPT-2 sequence-summary head (not the language model)",
    "summary_use_proj": "GPT-2 sequence-summary head", "summary_activation":
    "GPT-2 sequence-summary head", "summary_proj_to_labels": "GPT-2 sequence-summary head",
    "summary_first_dropout": "GPT-2 sequence-summary head",
}

#: keys of :data:`IGNORED` that belong to some model types only (elsewhere: unsupported)
IGNORED_ONLY: dict[str, tuple[str, ...]] = {
    **{k: ("gpt2",) for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop",
                              "reorder_and_upcast_attn", "summary_type", "summary_use_proj",
                              "summary_activation", "summary_proj_to_labels",
                              "summary_first_dropout")},
    **{k: ("mixtral",) for k in ("router_aux_loss_coef", "output_router_logits",
                                 "router_jitter_noise")},
    "pretraining_tp": ("llama",),
}

_GPT2_ALIASES = {"hidden_size": "n_embd", "max_position_embeddings": "n_positions",
                 "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"}

#: defaults of the transformers 5.24 config classes for the fields nlaverify reads
#: (``None`` for ``head_dim`` / ``num_key_value_heads``: derived as HF's ``__post_init__``)
HF_DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt2": {"n_positions": 1024, "n_inner": None, "activation_function": "gelu_new",
             "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
             "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
             "add_cross_attention": False},
    "llama": {"num_key_value_heads": None, "head_dim": None, "hidden_act": "silu",
              "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
              "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
              "rope_theta": 10000.0},
    "mistral": {"num_key_value_heads": 8, "head_dim": None, "hidden_act": "silu",
                "max_position_embeddings": 4096 * 32, "rms_norm_eps": 1e-6,
                "tie_word_embeddings": False, "sliding_window": 4096, "rope_theta": 10000.0},
    "mixtral": {"num_key_value_heads": 8, "head_dim": None, "hidden_act": "silu",
                "max_position_embeddings": 4096 * 32, "rms_norm_eps": 1e-5,
                "tie_word_embeddings": False, "sliding_window": None, "num_local_experts": 8,
                "num_experts_per_tok": 2, "rope_theta": 1e6},
    "qwen2": {"num_key_value_heads": 32, "head_dim": None, "hidden_act": "silu",
              "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
              "tie_word_embeddings": False, "use_sliding_window": False,
              "sliding_window": 4096, "max_window_layers": 28, "layer_types": None,
              "rope_theta": 10000.0},
    "qwen3": {"num_key_value_heads": 32, "head_dim": 128, "hidden_act": "silu",
              "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
              "tie_word_embeddings": False, "attention_bias": False,
              "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28,
              "layer_types": None, "rope_theta": 10000.0},
    "gemma": {"num_key_value_heads": 16, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
              "max_position_embeddings": 8192, "rms_norm_eps": 1e-6,
              "tie_word_embeddings": True, "attention_bias": False,
              "use_bidirectional_attention": None, "rope_theta": 10000.0},
}

#: the gated activations of the Llama family: HF ``hidden_act`` -> ``TransformerConfig.mlp``
_GATED_ACTS = {"silu": "swiglu", "gelu_pytorch_tanh": "geglu", "gelu_new": "geglu"}
#: GPT-2's ``activation_function`` -> ``TransformerConfig.mlp``
_GPT2_ACTS = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu": "gelu_erf",
              "relu": "relu"}


@dataclass(frozen=True)
class HFConfig:
    """A Hugging Face configuration read by :func:`load_hf_config`: its ``model_type``, the
    equivalent :class:`TransformerConfig` and the ``raw`` dict as given."""

    model_type: str
    config: TransformerConfig
    raw: dict[str, Any] = field(compare=False)


class _Reader:
    """Reads typed fields of one config dict, remembering which keys were used."""

    def __init__(self, d: Mapping[str, Any], model_type: str) -> None:
        self.d, self.mt, self.used = d, model_type, {"model_type"}

    def has(self, key: str) -> bool:
        return key in self.d

    def raw(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return self.d.get(key, default)

    def get(self, key: str, kind: str, *, required: bool = False) -> Any:
        """The value of ``key`` (the HF class default when absent and not ``required``),
        checked to be of ``kind`` (``"int"``, ``"float"``, ``"bool"``, ``"str"``, with
        ``"int?"`` etc. allowing ``None``)."""
        self.used.add(key)
        if key not in self.d:
            if required:
                raise ConfigError(f"load_hf_config: {self.mt} config: missing required field "
                                  f"{key!r}")
            return HF_DEFAULTS[self.mt][key]
        return _typed(self.mt, key, self.d[key], kind)

    def get_any(self, key: str, kind: str) -> Any:
        """``key`` checked to be of ``kind`` when present, else ``None``."""
        self.used.add(key)
        return _typed(self.mt, key, self.d[key], kind) if key in self.d else None

    def check_unknown(self) -> None:
        import difflib

        extra = [k for k in self.d if k not in self.used and not str(k).startswith("_")
                 and (k not in IGNORED or self.mt not in IGNORED_ONLY.get(k, (self.mt,)))]
        if extra:
            close = difflib.get_close_matches(str(extra[0]), sorted(self.used), n=2)
            hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
            raise ConfigError(f"load_hf_config: {self.mt} config: unsupported key {extra[0]!r} "
                              f"= {self.d[extra[0]]!r}{hint}: nlaverify does not know what it "
                              "changes, so it is not ignored"
                              + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""))


_KINDS = {"int": "an integer", "float": "a finite number", "bool": "true or false",
          "str": "a string"}


def _typed(mt: str, key: str, v: Any, kind: str) -> Any:
    """``v`` checked to be of ``kind`` (see :meth:`_Reader.get`), else a ConfigError."""
    optional = kind.endswith("?")
    base = kind.rstrip("?")
    if v is None and optional:
        return None
    ok = {"int": isinstance(v, int) and not isinstance(v, bool),
          "float": isinstance(v, int | float) and not isinstance(v, bool)
          and math.isfinite(v),
          "bool": isinstance(v, bool), "str": isinstance(v, str)}[base]
    if not ok:
        raise ConfigError(f"load_hf_config: {mt} config: field {key!r}: expected "
                          f"{_KINDS[base]}{' or null' if optional else ''}, got {v!r}")
    return v


def _read_source(source: Mapping[str, Any] | str | os.PathLike) -> tuple[dict[str, Any], str]:
    """The config dict and a name for it (the file's directory or stem)."""
    if isinstance(source, Mapping):
        return dict(source), ""
    if not isinstance(source, str | os.PathLike):
        raise ConfigError(f"load_hf_config: argument 'source': expected a dict, a config.json "
                          f"path or a checkpoint directory, got {type(source).__name__}")
    path = Path(source)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError(f"load_hf_config: argument 'source': no such file {str(path)!r}")
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"load_hf_config: {str(path)!r} is not valid UTF-8 JSON: {e}"
                          ) from None
    except OSError as e:
        raise ConfigError(f"load_hf_config: {str(path)!r}: not readable ({e})") from None
    if not isinstance(d, dict):
        raise ConfigError(f"load_hf_config: {str(path)!r}: expected a JSON object, got "
                          f"{type(d).__name__}")
    name = path.parent.name if path.name == "config.json" else path.stem
    return d, name


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
            ``model_type``, key or value (e.g. ``rope_type='yarn'``), a non-integral
            ``rope_theta``.
    """
    d, name = _read_source(source)
    mt = d.get("model_type")
    if mt is None:
        raise ConfigError("load_hf_config: missing required field 'model_type'")
    if mt not in SUPPORTED:
        raise ConfigError(f"load_hf_config: field 'model_type': expected one of "
                          f"{', '.join(SUPPORTED)}, got {mt!r}")
    r = _Reader(d, mt)
    # PreTrainedConfig.return_dict: false makes *ForCausalLM return tuples, not the output
    # objects verification reads (HF then fails); true is the default and harmless
    if r.get_any("return_dict", "bool") is False:
        raise ConfigError(f"load_hf_config: {mt} config: field 'return_dict': only true is "
                          "supported, got false")
    kw = _gpt2(r) if mt == "gpt2" else _llama_family(r)
    r.check_unknown()
    kw["name"] = name or f"hf-{mt}"
    try:
        cfg = TransformerConfig(**kw)
    except ConfigError as e:
        raise ConfigError(f"load_hf_config: {mt} config gives an invalid model: {e}") from None
    return HFConfig(mt, cfg, dict(d))


def _gpt2(r: _Reader) -> dict[str, Any]:
    """GPT2Config -> TransformerConfig fields (transformers/models/gpt2)."""
    d = dict(r.d)
    for alias, key in _GPT2_ALIASES.items():
        if alias in d:
            r.used.add(alias)
            if key in d and d[key] != d[alias]:
                raise ConfigError(f"load_hf_config: gpt2 config: field {alias!r}={d[alias]!r} "
                                  f"contradicts {key!r}={d[key]!r}")
            d[key] = d[alias]
    r2 = _Reader(d, "gpt2")
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


def _llama_family(r: _Reader) -> dict[str, Any]:
    """LlamaConfig and its relatives -> TransformerConfig fields."""
    mt = r.mt
    dm = r.get("hidden_size", "int", required=True)
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
    if mt == "qwen2":  # no field in Qwen2Config; Qwen2Attention reads getattr(config, "head_dim")
        dh = _typed(mt, "head_dim", r.raw("head_dim"), "int?")
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
    if mt == "qwen3":
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


def _num_experts(r: _Reader) -> int:
    """Mixtral's ``num_local_experts`` (``MixtralConfig.attribute_map`` alias
    ``num_experts``)."""
    n, key = r.get("num_local_experts", "int"), "num_local_experts"
    if r.has("num_experts"):
        alias = _typed(r.mt, "num_experts", r.raw("num_experts"), "int")
        if r.has("num_local_experts") and alias != n:
            raise ConfigError(f"load_hf_config: mixtral config: field 'num_experts'={alias} "
                              f"contradicts 'num_local_experts'={n}")
        n = alias
        key = key if r.has("num_local_experts") else "num_experts"
    if n < 1:  # 0 would silently build a dense SwiGLU model
        raise ConfigError(f"load_hf_config: mixtral config: field {key!r}: expected an "
                          f"integer >= 1, got {n}")
    return n


def _activation(r: _Reader) -> str:
    mt = r.mt
    act = r.get("hidden_act", "str")
    if mt == "gemma":
        if act == "gelu":  # GemmaConfig.__post_init__: legacy "gelu" means the tanh form
            act = "gelu_pytorch_tanh"
        legacy = _typed(mt, "hidden_activation", r.raw("hidden_activation"), "str?")
        if legacy is not None and legacy != "gelu_pytorch_tanh":
            raise ConfigError(f"load_hf_config: gemma config: field 'hidden_activation': only "
                              f"'gelu_pytorch_tanh' is supported, got {legacy!r}")
    allowed = ("silu",) if mt == "mixtral" else tuple(_GATED_ACTS)
    if act not in allowed:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_act': expected one of "
                          f"{', '.join(allowed)}, got {act!r}")
    return _GATED_ACTS[act]


def _biases(r: _Reader) -> dict[str, Any]:
    """The projection biases each model type has (module docstring)."""
    mt = r.mt
    if mt == "llama":
        return {"attn_bias": r.get("attention_bias", "bool"),
                "mlp_bias": r.get("mlp_bias", "bool")}
    if mt in ("qwen3", "gemma"):
        return {"attn_bias": r.get("attention_bias", "bool")}
    if mt == "qwen2":  # Qwen2Attention: q/k/v_proj bias=True, o_proj bias=False
        return {"attn_bias": True, "attn_out_bias": False}
    return {}


def _sliding_window(r: _Reader) -> int | None:
    mt = r.mt
    if mt in ("mistral", "mixtral"):
        w = r.get("sliding_window", "int?")
        return w
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
                         "original_max_position_embeddings"}}


def _rope(r: _Reader, context: int) -> tuple[int, RopeScaling | None]:
    """``(rope_base, rope_scaling)`` from ``rope_theta`` / ``rope_scaling`` (old keys) or
    ``rope_parameters`` (transformers 5)."""
    mt = r.mt
    params = r.raw("rope_parameters")
    scaling = r.raw("rope_scaling")
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
        top = _typed(mt, "rope_theta", r.raw("rope_theta"), "float")
        if theta is not None and theta != top:
            raise ConfigError(f"load_hf_config: {mt} config: field 'rope_theta'={top!r} "
                              f"contradicts {theta_key}={theta!r}")
        theta, theta_key = top, "rope_theta"
    if theta is None:
        theta, theta_key = HF_DEFAULTS[mt]["rope_theta"], "rope_theta"
    theta = _typed(mt, theta_key, theta, "float")
    # above 2**53 a float no longer determines the integer HF's float base stands for
    if theta != int(theta) or not 2 <= theta < 2**53:
        raise ConfigError(f"load_hf_config: {mt} config: field {theta_key!r}: expected an "
                          f"integral base in [2, 2**53) (TransformerConfig.rope_base is an "
                          f"integer), got {theta!r}")
    kind = rp.pop("rope_type", None)
    legacy = rp.pop("type", None)
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
    for k in sorted(_ROPE_KEYS[kind] - {"original_max_position_embeddings"}):
        if k not in rp:
            raise ConfigError(f"load_hf_config: {mt} config: missing required field "
                              f"'{where}.{k}' for rope_type {kind!r}")
        _typed(mt, f"{where}.{k}", rp[k], "float")
    if kind == "linear":
        return int(theta), RopeScaling("linear", float(rp["factor"]))
    orig = _typed(mt, f"{where}.original_max_position_embeddings",
                  rp.get("original_max_position_embeddings", context), "int")
    try:
        return int(theta), RopeScaling("llama3", float(rp["factor"]),
                                       float(rp["low_freq_factor"]),
                                       float(rp["high_freq_factor"]), orig)
    except ConfigError as e:
        raise ConfigError(f"load_hf_config: {mt} config: field {where!r}: {e}") from None


# ---------------------------------------------------------------------------------------------
# the reverse: TransformerConfig -> config.json dict


def hf_config_dict(config: TransformerConfig, model_type: str) -> dict[str, Any]:
    """A ``config.json`` dict of ``model_type`` describing ``config``.

    ``transformers.AutoConfig.for_model(**d)`` builds it (the dict holds ``model_type``;
    ``for_model(model_type, **d)`` would pass it twice), and :func:`load_hf_config` maps it
    back to a config equal to ``config`` (``attn_out_bias`` normalised: ``None`` when it
    equals ``attn_bias``). Sizes are always written, so HF defaults never decide them.

    Raises:
        ConfigError: naming the field that ``model_type`` cannot express (e.g. a LayerNorm
            Llama, a GPT-2 with RoPE, a sliding window on GPT-2).
    """
    if model_type not in SUPPORTED:
        raise ConfigError(f"hf_config_dict: argument 'model_type': expected one of "
                          f"{', '.join(SUPPORTED)}, got {model_type!r}")
    c = config
    if getattr(c, "lora_rank", 0):
        raise ConfigError(f"hf_config_dict: TransformerConfig.lora_rank={c.lora_rank}: Hugging "
                          f"Face {model_type} has no LoRA adapters and they would be dropped; "
                          "merge them first (nlaverify.finetune.merge_lora: W = W0 + s A B)")
    gpt2 = model_type == "gpt2"
    fixed: dict[str, Any] = {
        "placement": "pre", "final_norm": True, "causal": True, "temperature": 1.0,
        "attention": "softmax", "norm": "layernorm" if gpt2 else "rmsnorm",
        "positions": "learned" if gpt2 else "rope",
        "n_experts": 0 if model_type != "mixtral" else c.n_experts,
        "qk_norm": model_type == "qwen3", "embed_scale": model_type == "gemma",
        "moe_renormalize": True,
    }
    if model_type not in ("mistral", "mixtral", "qwen2", "qwen3"):
        fixed["sliding_window"] = None
    if gpt2:
        fixed.update(attn_bias=True, out_bias=True, mlp_bias=True, n_kv_heads=c.n_heads,
                     d_head=c.d_model // c.n_heads, rope_scaling=None)
    else:
        if model_type != "llama":
            fixed["mlp_bias"] = False
        if model_type in ("mistral", "mixtral"):
            fixed.update(attn_bias=False, out_bias=False)
        elif model_type == "qwen2":
            fixed.update(attn_bias=True, out_bias=False)
        else:
            fixed["out_bias"] = c.attn_bias
    if model_type == "mixtral":
        fixed["mlp"] = "swiglu"
        if c.n_experts < 1:
            raise ConfigError("hf_config_dict: mixtral needs TransformerConfig.n_experts >= 1, "
                              "got 0")
    elif model_type == "gemma":
        fixed["mlp"] = "geglu"
    elif not gpt2:
        fixed["mlp"] = ("swiglu", "geglu")
    else:
        fixed["mlp"] = ("gelu", "gelu_erf", "relu")
    for f, want in fixed.items():
        got = getattr(c, f)
        if (got not in want) if isinstance(want, tuple) else got != want:
            name = "attn_out_bias (with attn_bias)" if f == "out_bias" else f
            raise ConfigError(f"hf_config_dict: {model_type} cannot express "
                              f"TransformerConfig.{name}={got!r} (expected {want!r})")
    d: dict[str, Any] = {"architectures": [ARCHITECTURES[model_type]],
                         "model_type": model_type, "vocab_size": c.vocab_size}
    if gpt2:
        d.update(n_embd=c.d_model, n_layer=c.n_blocks, n_head=c.n_heads, n_inner=c.d_mlp,
                 n_positions=c.context, layer_norm_epsilon=c.norm_eps,
                 activation_function={v: k for k, v in _GPT2_ACTS.items()
                                      if k != "gelu_pytorch_tanh"}[c.mlp],
                 tie_word_embeddings=c.tied_embeddings)
        return d
    d.update(hidden_size=c.d_model, intermediate_size=c.d_mlp, num_hidden_layers=c.n_blocks,
             num_attention_heads=c.n_heads, num_key_value_heads=c.n_kv_heads,
             head_dim=c.d_head, max_position_embeddings=c.context, rms_norm_eps=c.norm_eps,
             hidden_act="silu" if c.mlp == "swiglu" else "gelu_pytorch_tanh",
             tie_word_embeddings=c.tied_embeddings)
    if model_type == "llama":
        d.update(attention_bias=c.attn_bias, mlp_bias=c.mlp_bias)
    elif model_type in ("qwen3", "gemma"):
        d["attention_bias"] = c.attn_bias
    if model_type == "mixtral":
        d.update(num_local_experts=c.n_experts, num_experts_per_tok=c.top_k)
    if model_type in ("mistral", "mixtral"):
        d["sliding_window"] = c.sliding_window
    elif model_type in ("qwen2", "qwen3"):
        d.update(use_sliding_window=c.sliding_window is not None,
                 sliding_window=c.sliding_window, max_window_layers=0)
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": float(c.rope_base)}
    s = c.rope_scaling
    if s is not None:
        rope.update(rope_type=s.kind, factor=float(s.factor))
        if s.kind == "llama3":
            rope.update(low_freq_factor=float(s.low_freq_factor),
                        high_freq_factor=float(s.high_freq_factor),
                        original_max_position_embeddings=s.original_context)
    d["rope_parameters"] = rope
    return d
