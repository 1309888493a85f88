"""The reverse of :func:`nlaverify.interop.hf_config.load_hf_config`: a
:class:`~nlaverify.config.TransformerConfig` written as a Hugging Face ``config.json`` dict.

:func:`hf_config_dict` refuses what the model type cannot express (each fixed option of the
type, listed in :mod:`nlaverify.interop.hf_config`), so that loading the dict back gives the
config again: ``load_hf_config(hf_config_dict(c, t)).config == c``.
"""

from __future__ import annotations

from typing import Any

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.interop.hf_config_cohere import cohere_hf_dict, cohere_mismatch
from nlaverify.interop.hf_config_deepseek import (
    deepseek_v2_hf_dict,
    deepseek_v2_mismatch,
    deepseek_v3_hf_dict,
    deepseek_v3_mismatch,
)
from nlaverify.interop.hf_config_falcon import falcon_hf_dict, falcon_mismatch
from nlaverify.interop.hf_config_gemma2 import gemma2_hf_dict, gemma2_mismatch
from nlaverify.interop.hf_config_gemma3 import gemma3_hf_dict, gemma3_mismatch
from nlaverify.interop.hf_config_gptj import gptj_hf_dict, gptj_mismatch
from nlaverify.interop.hf_config_granite import granite_hf_dict, granite_mismatch
from nlaverify.interop.hf_config_mamba import mamba_hf_dict, mamba_mismatch
from nlaverify.interop.hf_config_mamba2 import mamba2_hf_dict, mamba2_mismatch
from nlaverify.interop.hf_config_ministral import ministral_hf_dict, ministral_mismatch
from nlaverify.interop.hf_config_neox import (
    neox_hf_dict,
    neox_mismatch,
    phi_hf_dict,
    phi_mismatch,
)
from nlaverify.interop.hf_config_olmo import olmo_hf_dict, olmo_mismatch
from nlaverify.interop.hf_config_olmo2 import olmo2_hf_dict, olmo2_mismatch
from nlaverify.interop.hf_config_opt import opt_hf_dict, opt_mismatch
from nlaverify.interop.hf_config_phi3 import phi3_hf_dict, phi3_mismatch
from nlaverify.interop.hf_config_qwen_moe import QWEN_MOE, moe_fixed, qwen_moe_export
from nlaverify.interop.hf_config_rwkv import rwkv_hf_dict, rwkv_mismatch
from nlaverify.interop.hf_config_stablelm import stablelm_hf_dict, stablelm_mismatch
from nlaverify.interop.hf_config_starcoder2 import starcoder2_hf_dict, starcoder2_mismatch
from nlaverify.interop.hf_config_tables import _GPT2_ACTS, ARCHITECTURES, SUPPORTED

#: model type -> (its ``*_mismatch``, its ``*_hf_dict``, whether the dict takes the
#: ``rope_parameters``): the types mapped by a module ``hf_config_<type>`` of their own
#: the model types with multi-head latent attention (``kv_lora_rank > 0``)
MLA_TYPES: tuple[str, ...] = ("deepseek_v3", "deepseek_v2")

_OWN_MODULE: dict[str, tuple[Any, Any, bool]] = {
    "mamba": (mamba_mismatch, mamba_hf_dict, False),
    "mamba2": (mamba2_mismatch, mamba2_hf_dict, False),
    "rwkv": (rwkv_mismatch, rwkv_hf_dict, False),
    "gpt_neox": (neox_mismatch, neox_hf_dict, False),
    "gptj": (gptj_mismatch, gptj_hf_dict, False),
    "phi": (phi_mismatch, phi_hf_dict, False),
    "starcoder2": (starcoder2_mismatch, starcoder2_hf_dict, False),
    "stablelm": (stablelm_mismatch, stablelm_hf_dict, False),
    "gemma2": (gemma2_mismatch, gemma2_hf_dict, True),
    "gemma3_text": (gemma3_mismatch, gemma3_hf_dict, True),
    "granite": (granite_mismatch, granite_hf_dict, True),
    "olmo2": (olmo2_mismatch, olmo2_hf_dict, True),
    "cohere": (cohere_mismatch, cohere_hf_dict, True),
    "opt": (opt_mismatch, opt_hf_dict, False),
    "falcon": (falcon_mismatch, falcon_hf_dict, False),
    "olmo": (olmo_mismatch, olmo_hf_dict, True),
    "phi3": (phi3_mismatch, phi3_hf_dict, False),
    "ministral": (ministral_mismatch, ministral_hf_dict, True),
    "deepseek_v3": (deepseek_v3_mismatch, deepseek_v3_hf_dict, True),
    "deepseek_v2": (deepseek_v2_mismatch, deepseek_v2_hf_dict, True),
}


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
    if getattr(c, "kv_lora_rank", 0) and model_type not in MLA_TYPES:
        raise ConfigError(f"hf_config_dict: {model_type} cannot express TransformerConfig."
                          f"kv_lora_rank={c.kv_lora_rank!r} (expected 0: it has no multi-head "
                          f"latent attention)")
    if model_type in _OWN_MODULE:  # the types whose mapping lives in a module of its own
        mismatch, to_dict, with_rope = _OWN_MODULE[model_type]
        bad = mismatch(c)
        if bad is not None:
            raise ConfigError(f"hf_config_dict: {model_type} cannot express TransformerConfig."
                              f"{bad[0]}={bad[1]!r} (expected {bad[2]!r})")
        return to_dict(c, _rope_parameters(c)) if with_rope else to_dict(c)
    gpt2 = model_type == "gpt2"
    fixed: dict[str, Any] = {
        "placement": "pre", "final_norm": True, "causal": True, "temperature": 1.0,
        "attention": "softmax", "norm": "layernorm" if gpt2 else "rmsnorm",
        "positions": "learned" if gpt2 else "rope",
        "n_experts": 0 if model_type not in ("mixtral", *QWEN_MOE) else c.n_experts,
        **moe_fixed(c, model_type),
        "qk_norm": model_type in ("qwen3", "qwen3_moe"), "embed_scale": model_type == "gemma",
        "rope_pairing": "interleaved", "rotary_dim": None,
        "parallel_residual": False, "unembed_bias": False, "post_norms": False,
        "query_pre_attn_scalar": None, "window_layers": None, "attn_softcap": None,
        "final_softcap": None, "embed_multiplier": None, "residual_multiplier": None,
        "pre_norms": True, "qk_norm_joint": False, "norm_affine": True, "norm_bias": True,
        "mixer": "attention", "rope_local_base": None, "position_offset": 0,
    }
    if model_type not in QWEN_MOE:  # Qwen MoE: norm_topk_prob either way
        fixed["moe_renormalize"] = True
    if model_type not in ("mistral", "mixtral", "qwen2", "qwen3"):
        fixed["sliding_window"] = None  # (Qwen MoE: no window, hf_config_qwen_moe)
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
        elif model_type == "qwen2_moe":
            fixed["out_bias"] = False
        else:
            fixed["out_bias"] = c.attn_bias
    if model_type in ("mixtral", *QWEN_MOE):
        fixed["mlp"] = "swiglu"
        if c.n_experts < 1:
            raise ConfigError(f"hf_config_dict: {model_type} needs TransformerConfig.n_experts"
                              " >= 1, got 0")
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
    elif model_type in ("qwen3", "gemma", "qwen3_moe"):
        d["attention_bias"] = c.attn_bias
    elif model_type == "qwen2_moe":
        d["qkv_bias"] = c.attn_bias
    if model_type in QWEN_MOE:
        d.update(qwen_moe_export(c, model_type))
    if model_type == "mixtral":
        d.update(num_local_experts=c.n_experts, num_experts_per_tok=c.top_k)
    if model_type in ("mistral", "mixtral"):
        d["sliding_window"] = c.sliding_window
    elif model_type in ("qwen2", "qwen3"):
        d.update(use_sliding_window=c.sliding_window is not None,
                 sliding_window=c.sliding_window, max_window_layers=0)
    d["rope_parameters"] = _rope_parameters(c)
    return d


def _rope_parameters(c: TransformerConfig) -> dict[str, Any]:
    """``rope_parameters`` of ``c`` as ``transformers`` 5 writes it (base and scaling)."""
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": float(c.rope_base)}
    s = c.rope_scaling
    if s is not None:
        rope.update(rope_type=s.kind, factor=float(s.factor))
        if s.kind == "yarn":  # DeepSeek's keys (mscale, mscale_all_dim only when given)
            rope.update(original_max_position_embeddings=s.original_context,
                        beta_fast=float(s.beta_fast), beta_slow=float(s.beta_slow),
                        **{k: float(v) for k, v in (("mscale", s.mscale), (
                            "mscale_all_dim", s.mscale_all_dim)) if v is not None})
        if s.kind == "llama3":
            rope.update(low_freq_factor=float(s.low_freq_factor),
                        high_freq_factor=float(s.high_freq_factor),
                        original_max_position_embeddings=s.original_context)
    return rope
