"""The Hugging Face side of the config mapping, as tables: model types, ignored keys, defaults.

:data:`SUPPORTED` model types and their :data:`ARCHITECTURES` class, the keys accepted and
ignored (:data:`IGNORED`, with the reason; :data:`IGNORED_ONLY` for the model types they belong
to), the defaults of the ``transformers`` 5.24 config classes (:data:`HF_DEFAULTS`) and the
activation names. Read by :func:`nlaverify.interop.hf_config.load_hf_config` and its reverse
:func:`nlaverify.interop.hf_config_export.hf_config_dict`; the conventions themselves are
documented in :mod:`nlaverify.interop.hf_config`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: the Hugging Face ``model_type`` values nlaverify maps
SUPPORTED = ("gpt2", "llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "mamba",
             "gpt_neox", "gptj", "phi", "starcoder2", "stablelm",
             "gemma2", "granite", "olmo2", "phi3", "ministral", "olmo", "cohere",
             "falcon", "opt", "rwkv", "mamba2", "gemma3_text", "qwen2_moe", "qwen3_moe",
             "deepseek_v3", "deepseek_v2")

#: the ``*ForCausalLM`` class of each model type (the ``architectures`` entry)
ARCHITECTURES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM",
                 "mistral": "MistralForCausalLM", "mixtral": "MixtralForCausalLM",
                 "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "gemma": "GemmaForCausalLM", "mamba": "MambaForCausalLM",
                 "gpt_neox": "GPTNeoXForCausalLM", "gptj": "GPTJForCausalLM",
                 "phi": "PhiForCausalLM", "starcoder2": "Starcoder2ForCausalLM",
                 "stablelm": "StableLmForCausalLM", "gemma2": "Gemma2ForCausalLM",
                 "granite": "GraniteForCausalLM", "olmo2": "Olmo2ForCausalLM",
                 "phi3": "Phi3ForCausalLM", "ministral": "MinistralForCausalLM",
                 "olmo": "OlmoForCausalLM", "cohere": "CohereForCausalLM",
                 "falcon": "FalconForCausalLM", "opt": "OPTForCausalLM",
                 "rwkv": "RwkvForCausalLM", "mamba2": "Mamba2ForCausalLM",
                 "gemma3_text": "Gemma3ForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
                 "qwen3_moe": "Qwen3MoeForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
                 "deepseek_v2": "DeepseekV2ForCausalLM"}

_META = "metadata (no effect on the function computed)"
_GEN = "tokenizer / generation setting (no effect on the function computed)"
_TRAIN = "training-time only (dropout, auxiliary loss, initialisation, router noise)"
_SERIAL = "a PreTrainedConfig serialisation field (no effect on the forward pass)"

#: keys accepted and ignored, with the reason
IGNORED: dict[str, str] = {
    "architectures": _META, "transformers_version": _META, "torch_dtype": _META,
    "dtype": "the weights carry their dtype", "use_cache": _GEN, "bos_token_id": _GEN,
    "eos_token_id": _GEN, "pad_token_id": _GEN, "cache_implementation": _GEN,
    "tokenizer_class": _GEN,
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
    **{k: "initialisation only (MambaMixer.init_mamba_weights draws dt_proj from it)"
       for k in ("time_step_scale", "time_step_min", "time_step_max", "time_step_init_scheme",
                 "time_step_floor")},
    "rescale_prenorm_residual": "initialisation only (MambaPreTrainedModel._init_weights)",
    "use_mambapy": "the algorithm of HF's scan (mambapy's parallel scan, when installed), "
                   "not its function",
    "use_associative_scan": "the algorithm of HF's scan (an associative scan under "
                            "torch.compile only), not its function",
    "residual_in_fp32": "the precision of HF's residual stream (a float32 copy), not its "
                        "function",
    "pad_vocab_size_multiple": "mamba_ssm's training-time vocabulary padding; vocab_size is "
                               "the padded size (MambaConfig does not read it)",
    "fused_add_norm": "a mamba_ssm kernel choice (MambaConfig does not read it)",
    "rms_norm": "a mamba_ssm option MambaConfig does not read (HF's MambaBlock is RMSNorm)",
    "n_layer": "mamba_ssm's name of num_hidden_layers (MambaConfig does not read it)",
    "hidden_dropout": _TRAIN, "classifier_dropout": _TRAIN + " (the classification head)",
    "is_decoder": _SERIAL + " (GPTNeoXForCausalLM is causal whatever it says)",
    "residual_dropout": _TRAIN, "embedding_dropout": _TRAIN,
    "hidden_act": "not read by Gemma2Config (Gemma2MLP reads hidden_activation)",
    "dropout": _TRAIN, "init_std": _TRAIN,
    "layerdrop": _TRAIN + " (OPTDecoder skips layers only in training)",
    "chunk_size": "the chunk length of HF's SSD algorithm, not its function (the chunked "
                  "algorithm equals the recurrence for every chunking: identity "
                  "ssm_ssd_chunked_equals_recurrence)",
    "time_step_rank": "not read by Mamba2Mixer (Mamba-2's dt is a column of in_proj per head)",
    "rescale_every": "HF's eval-mode inference rescaling of RWKV (block i's attention.output "
                     "and feed_forward.value weights divided by 2^(i // R) in place, the stream "
                     "halved every R blocks: a float16 overflow guard), not the trained "
                     "function (LayerNorm's eps is not scale-invariant); nlaverify maps R = 0 "
                     "and verify --hf builds HF's model with rescale_every = 0",
}

#: keys of :data:`IGNORED` that belong to some model types only (elsewhere: unsupported)
IGNORED_ONLY: dict[str, tuple[str, ...]] = {
    **{k: ("gpt2", "gptj", "phi") for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop")},
    **{k: ("gpt2", "gptj", "phi", "phi3") for k in ("resid_pdrop", "embd_pdrop")},
    **{k: ("gpt2",) for k in ("reorder_and_upcast_attn", "summary_type", "summary_use_proj",
                              "summary_activation", "summary_proj_to_labels",
                              "summary_first_dropout")},
    **{k: ("mixtral", "qwen2_moe", "qwen3_moe") for k in ("router_aux_loss_coef",
                                                           "output_router_logits")},
    "router_jitter_noise": ("mixtral",),
    "pretraining_tp": ("llama",),
    **{k: ("mamba",) for k in ("time_step_scale", "time_step_init_scheme", "use_mambapy",
                               "use_associative_scan")},
    **{k: ("mamba", "mamba2") for k in ("time_step_min", "time_step_max", "time_step_floor",
                                        "rescale_prenorm_residual", "residual_in_fp32",
                                        "pad_vocab_size_multiple", "fused_add_norm",
                                        "rms_norm", "n_layer")},
    **{k: ("mamba2",) for k in ("chunk_size", "time_step_rank")},
    **{k: ("gpt_neox",) for k in ("classifier_dropout", "is_decoder")},
    "hidden_dropout": ("gpt_neox", "stablelm", "falcon"),
    "hidden_act": ("gemma2", "gemma3_text"),
    **{k: ("opt",) for k in ("dropout", "init_std", "layerdrop")},
    "rescale_every": ("rwkv",),
    **{k: ("starcoder2",) for k in ("residual_dropout", "embedding_dropout")},
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
    "mamba": {"state_size": 16, "expand": 2, "conv_kernel": 4, "use_bias": False,
              "use_conv_bias": True, "hidden_act": "silu", "layer_norm_epsilon": 1e-5,
              "time_step_rank": "auto", "tie_word_embeddings": True, "intermediate_size": None},
    "mamba2": {"num_heads": 128, "head_dim": 64, "n_groups": 8, "state_size": 128,
               "expand": 2, "conv_kernel": 4, "use_bias": False, "use_conv_bias": True,
               "hidden_act": "silu", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": False},
    "gpt_neox": {"hidden_act": "gelu", "max_position_embeddings": 2048, "layer_norm_eps": 1e-5,
                 "tie_word_embeddings": False, "use_parallel_residual": True,
                 "attention_bias": True, "rope_theta": 10000.0},
    "gptj": {"n_positions": 2048, "rotary_dim": 64, "n_inner": None,
             "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
             "tie_word_embeddings": False},
    "phi": {"num_key_value_heads": None, "hidden_act": "gelu_new",
            "max_position_embeddings": 2048, "layer_norm_eps": 1e-5,
            "tie_word_embeddings": False, "qk_layernorm": False, "rope_theta": 10000.0},
    "starcoder2": {"num_key_value_heads": 2, "hidden_act": "gelu_pytorch_tanh",
                   "max_position_embeddings": 4096, "norm_epsilon": 1e-5,
                   "tie_word_embeddings": True, "sliding_window": None, "use_bias": True,
                   "rope_theta": 10000.0},
    "stablelm": {"num_key_value_heads": 32, "hidden_act": "silu",
                 "max_position_embeddings": 4096, "layer_norm_eps": 1e-5,
                 "tie_word_embeddings": False, "use_qkv_bias": False, "qk_layernorm": False,
                 "use_parallel_residual": False, "rope_theta": 10000.0},
    "gemma2": {"num_key_value_heads": 4, "head_dim": 256,
               "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 8192,
               "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "attention_bias": False,
               "query_pre_attn_scalar": 256, "sliding_window": 4096, "layer_types": None,
               "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
               "use_bidirectional_attention": None, "rope_theta": 10000.0},
    # the sizes too: google/gemma-3-4b-it's text_config leaves vocab_size, the heads to them
    "gemma3_text": {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
                    "num_hidden_layers": 26, "num_attention_heads": 8,
                    "num_key_value_heads": 4, "head_dim": 256,
                    "hidden_activation": "gelu_pytorch_tanh",
                    "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
                    "tie_word_embeddings": True, "attention_bias": False,
                    "query_pre_attn_scalar": 256, "sliding_window": 4096,
                    "sliding_window_pattern": 6, "layer_types": None,
                    "attn_logit_softcapping": None, "final_logit_softcapping": None,
                    "use_bidirectional_attention": False},
    "granite": {"num_key_value_heads": None, "hidden_act": "silu",
                "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
                "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
                "embedding_multiplier": 1.0, "logits_scaling": 1.0,
                "residual_multiplier": 1.0, "attention_multiplier": 1.0,
                "rope_theta": 10000.0},
    "olmo2": {"num_key_value_heads": None, "hidden_act": "silu",
              "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
              "tie_word_embeddings": False, "attention_bias": False, "rope_theta": 10000.0},
    "olmo": {"num_key_value_heads": None, "hidden_act": "silu",
             "max_position_embeddings": 2048, "tie_word_embeddings": False,
             "attention_bias": False, "clip_qkv": None, "rope_theta": 10000.0},
    "cohere": {"num_key_value_heads": None, "hidden_act": "silu",
               "max_position_embeddings": 8192, "layer_norm_eps": 1e-5,
               "tie_word_embeddings": True, "attention_bias": False, "logit_scale": 0.0625,
               "use_qk_norm": False, "rope_theta": 500000.0},
    "falcon": {"num_ln_in_parallel_attn": None, "layer_norm_epsilon": 1e-5,
               "num_kv_heads": None, "alibi": False, "new_decoder_architecture": False,
               "multi_query": True, "parallel_attn": True, "bias": False,
               "max_position_embeddings": 2048, "ffn_hidden_size": None,
               "activation": "gelu", "tie_word_embeddings": True, "rope_theta": 10000.0},
    "opt": {"activation_function": "relu", "max_position_embeddings": 2048,
            "do_layer_norm_before": True, "_remove_final_layer_norm": False,
            "word_embed_proj_dim": None, "enable_bias": True,
            "layer_norm_elementwise_affine": True, "tie_word_embeddings": True},
    "phi3": {"num_key_value_heads": None, "hidden_act": "silu",
             "max_position_embeddings": 4096, "original_max_position_embeddings": 4096,
             "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "sliding_window": None,
             "rope_theta": 10000.0},
    "rwkv": {"context_length": 1024, "attention_hidden_size": None,
             "intermediate_size": None, "layer_norm_epsilon": 1e-5,
             "tie_word_embeddings": False},
    "qwen2_moe": {"num_key_value_heads": 16, "hidden_act": "silu",
                  "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
                  "tie_word_embeddings": False, "use_sliding_window": False,
                  "decoder_sparse_step": 1, "moe_intermediate_size": 1408,
                  "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4,
                  "num_experts": 60, "norm_topk_prob": False, "qkv_bias": True,
                  "rope_theta": 10000.0},
    "qwen3_moe": {"num_key_value_heads": 4, "hidden_act": "silu",
                  "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
                  "tie_word_embeddings": False, "attention_bias": False,
                  "use_sliding_window": False, "decoder_sparse_step": 1,
                  "moe_intermediate_size": 768, "num_experts_per_tok": 8, "num_experts": 128,
                  "norm_topk_prob": False, "rope_theta": 10000.0},
    "ministral": {"num_key_value_heads": 8, "head_dim": None, "hidden_act": "silu",
                  "max_position_embeddings": 4096 * 32, "rms_norm_eps": 1e-6,
                  "tie_word_embeddings": False, "sliding_window": 4096, "layer_types": None,
                  "rope_theta": 10000.0},
    "deepseek_v3": {"num_key_value_heads": 128, "hidden_act": "silu",
                    "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
                    "tie_word_embeddings": False, "attention_bias": False,
                    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
                    "v_head_dim": 128, "qk_nope_head_dim": 128, "first_k_dense_replace": 3,
                    "rope_interleave": True, "rope_theta": 10000.0},
    "deepseek_v2": {"num_key_value_heads": None, "hidden_act": "silu",
                    "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
                    "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
                    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
                    "v_head_dim": 128, "qk_nope_head_dim": 128, "first_k_dense_replace": 0,
                    "rope_theta": 10000.0},
}

#: the gated activations of the Llama family: HF ``hidden_act`` -> ``TransformerConfig.mlp``
_GATED_ACTS = {"silu": "swiglu", "gelu_pytorch_tanh": "geglu", "gelu_new": "geglu"}
#: GPT-2's ``activation_function`` -> ``TransformerConfig.mlp``
_GPT2_ACTS = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu": "gelu_erf",
              "relu": "relu"}


def first_mismatch(c: Any, build: Callable[[], Any],
                   spelled: Mapping[str, Any] | None = None) -> tuple[str, Any, Any] | None:
    """The first field of the :class:`~nlaverify.config.TransformerConfig` ``c`` that differs
    from ``build()``, the config a model type's Hugging Face fields give back, as ``(field,
    value, expected)``, or ``None`` (``name`` is not compared). ``spelled`` gives ``c``'s
    value of a field as the type spells it (e.g. ``rotary_dim=None`` for the whole head); a
    config the type cannot build at all is ``("d_model", d_model, the reason)``. Every
    ``*_mismatch`` of the ``hf_config_*`` modules is this comparison."""
    from dataclasses import fields

    from nlaverify.config import ConfigError, TransformerConfig

    try:
        want = build()
    except ConfigError as e:
        return "d_model", c.d_model, str(e)
    spelled = spelled or {}
    for f in fields(TransformerConfig):
        got = spelled[f.name] if f.name in spelled else getattr(c, f.name)
        if f.name != "name" and got != getattr(want, f.name):
            return f.name, getattr(c, f.name), getattr(want, f.name)
    return None
