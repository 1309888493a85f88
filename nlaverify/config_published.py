"""The published hyper-parameters and parameter totals of the presets, with their sources.

:data:`PUBLISHED` records, field by field, what each preset modelling a released Transformer
(GPT-2 small, GPT-3 175B, Llama-3 and 3.1 405B, Gemma 2B and 7B) should be, and where that
value is published; :data:`PUBLISHED_TOTALS` the exact parameter counts
(Baggag & Saad §3.11.2-3.11.3, Tables 2-5). :func:`nlaverify.config.preset_mismatches`
compares a preset against its table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nlaverify.config_options import RopeScaling


@dataclass(frozen=True)
class Figure:
    """A published value of one configuration field (or parameter total), and its source."""

    value: Any
    source: str


_GPT2 = "Radford et al. 2019"
_GPT2_HF = "Hugging Face gpt2/config.json"
_BROWN = "Brown et al. 2020"
_BS = "Baggag & Saad"
_LLAMA = "Dubey et al. 2024 (The Llama 3 Herd of Models)"
_LLAMA_REL = "released Llama 3 params.json"
_UNUSED = "not used by this architecture (library default)"
_COUNT3 = "the counting convention of Baggag & Saad Table 3"
_COUNT4 = "the counting convention of Baggag & Saad Table 4"
_VASWANI = "Vaswani et al. 2017 §3.2.1 (scaled dot-product attention)"
#: every published preset uses exact softmax attention; the other options keep defaults
_SOFTMAX = {
    "attention": Figure("softmax", _VASWANI),
    "random_features": Figure(64, _UNUSED),
    "feature_seed": Figure(0, _UNUSED),
    "orthogonal_features": Figure(True, _UNUSED),
    "linformer_k": Figure(8, _UNUSED),
    "rope_scaling": Figure(None, "no RoPE frequency scaling"),
    "sliding_window": Figure(None, "full causal attention (no sliding window)"),
    "qk_norm": Figure(False, "no normalisation of queries and keys"),
    "attn_out_bias": Figure(None, "as attn_bias"),
    "moe_renormalize": Figure(True, _UNUSED),
    "moe_router": Figure("softmax", _UNUSED),
    "moe_intermediate_size": Figure(None, _UNUSED),
    "d_shared_expert": Figure(0, _UNUSED),
    "shared_expert_gate": Figure(False, _UNUSED),
    "routed_scaling_factor": Figure(1.0, _UNUSED),
    "n_group": Figure(1, _UNUSED),
    "topk_group": Figure(1, _UNUSED),
    "moe_dense_layers": Figure((), _UNUSED),
    "embed_scale": Figure(False, "embeddings not rescaled"),
    "lora_rank": Figure(0, "the pre-trained model (no LoRA adapter)"),
    "lora_alpha": Figure(None, _UNUSED),
    "lora_targets": Figure(("q", "v"), _UNUSED),
    "mixer": Figure("attention", "every block mixes tokens by attention (no state-space "
                                 "block)"),
    "ssm_state": Figure(16, _UNUSED),
    "ssm_conv": Figure(4, _UNUSED),
    "ssm_expand": Figure(2, _UNUSED),
    "ssm_dt_rank": Figure(None, _UNUSED),
    "ssm_heads": Figure(1, _UNUSED),
    "ssm_groups": Figure(1, _UNUSED),
    "rwkv_attention_size": Figure(None, _UNUSED),
    "attn_softcap": Figure(None, "attention scores not soft-capped (Gemma 2 caps them)"),
    "final_softcap": Figure(None, "logits not soft-capped (Gemma 2 caps them)"),
    "parallel_residual": Figure(False, "attention, then the MLP on the updated stream"),
    "parallel_norms": Figure(1, _UNUSED),
    "rotary_dim": Figure(None, "RoPE, where used, rotates the whole head"),
    "unembed_bias": Figure(False, "logits x W_U without a bias"),
    "post_norms": Figure(False, "no norm on the sublayer outputs (Gemma 2 has them)"),
    "query_pre_attn_scalar": Figure(None, "scores q k^T / sqrt(d_head)"),
    "window_layers": Figure(None, _UNUSED),
    "rope_local_base": Figure(None, _UNUSED),
    "position_offset": Figure(0, "position p reads row p of a learned table (OPT's reads p + 2)"),
    "embed_multiplier": Figure(None, "embeddings not multiplied (Granite multiplies them)"),
    "residual_multiplier": Figure(None, "x + F(N(x)), the sublayer output unscaled"),
    "pre_norms": Figure(True, "each sublayer reads the normalised stream"),
    "qk_norm_joint": Figure(False, _UNUSED),
    "kv_lora_rank": Figure(0, "keys and values projected per head (DeepSeek's MLA compresses "
                              "them to a latent)"),
    "q_lora_rank": Figure(None, _UNUSED),
    "qk_nope_head_dim": Figure(None, _UNUSED),
    "qk_rope_head_dim": Figure(None, _UNUSED),
    "v_head_dim": Figure(None, _UNUSED),
    "norm_affine": Figure(True, "each norm has learned gains (OLMo's have none)"),
    "norm_bias": Figure(True, "a LayerNorm, where used, has its bias (Cohere's has none)"),
    "rope_pairing": Figure("interleaved", "the graph's RoPE pairing (Hugging Face's half "
                                          "pairing is a permutation of W_Q, W_K columns)"),
}

#: the presets that stand for no published model (test and benchmark sizes)
UNPUBLISHED = frozenset({"tiny", "tiny-mamba", "tiny-rwkv", "mid"})

#: Published hyper-parameters of each preset that models a published Transformer, field
#: by field (every field of :class:`TransformerConfig` but ``name``), with the source.
#: Where a preset follows a parameter-counting convention rather than the model (GPT-3's
#: learned positions are not counted by Baggag & Saad Table 3), the source says so.
PUBLISHED: dict[str, dict[str, Figure]] = {
    "gpt2-small": {
        "vocab_size": Figure(50257, f"{_GPT2} §2.2 (byte-level BPE, 50,257 tokens); {_GPT2_HF}"),
        "d_model": Figure(768, f"{_GPT2} Table 2 (smallest model); {_BS} Table 5"),
        "n_heads": Figure(12, f"{_GPT2_HF} (n_head)"),
        "n_blocks": Figure(12, f"{_GPT2} Table 2 (12 layers)"),
        "d_mlp": Figure(3072, f"{_GPT2_HF} (n_inner = 4 d_model)"),
        "n_kv_heads": Figure(12, "multi-head attention: one key/value head per query head"),
        "d_head": Figure(64, "d_model / n_heads"),
        "norm": Figure("layernorm", f"{_GPT2} §2.3"),
        "placement": Figure("pre", f"{_GPT2} §2.3 (layer normalization moved to the input "
                                   "of each sub-block)"),
        "positions": Figure("learned", f"{_GPT2_HF} (wpe)"),
        "context": Figure(1024, f"{_GPT2} §2.3 (context size 1024 tokens)"),
        "mlp": Figure("gelu", f"{_GPT2_HF} (activation_function gelu_new, the tanh form)"),
        "n_experts": Figure(0, "dense model"),
        "top_k": Figure(1, _UNUSED),
        "attn_bias": Figure(True, f"{_GPT2_HF} (Conv1D projections carry biases)"),
        "mlp_bias": Figure(True, f"{_GPT2_HF} (Conv1D projections carry biases)"),
        "tied_embeddings": Figure(True, f"{_GPT2_HF} (lm_head tied to wte)"),
        "final_norm": Figure(True, f"{_GPT2} §2.3 (an additional layer normalization after "
                                   "the final self-attention block)"),
        "causal": Figure(True, "decoder-only language model"),
        "temperature": Figure(1.0, "training objective (no temperature)"),
        "norm_eps": Figure(1e-5, f"{_GPT2_HF} (layer_norm_epsilon)"),
        "rope_base": Figure(10000, _UNUSED),
        **_SOFTMAX,
    },
    "gpt3-175b": {
        "vocab_size": Figure(50257, f"{_BS} Table 2; {_BROWN} §2.1 (GPT-2's tokenizer)"),
        "d_model": Figure(12288, f"{_BS} Table 2; {_BROWN} Table 2.1"),
        "n_heads": Figure(96, f"{_BS} Table 2; {_BROWN} Table 2.1"),
        "n_blocks": Figure(96, f"{_BS} Table 2; {_BROWN} Table 2.1"),
        "d_mlp": Figure(49152, f"{_BS} Table 2; {_BROWN} §2.1 (d_ff = 4 d_model)"),
        "n_kv_heads": Figure(96, "multi-head attention: one key/value head per query head"),
        "d_head": Figure(128, f"{_BROWN} Table 2.1 (d_head = 128)"),
        "norm": Figure("layernorm", f"{_BROWN} §2.1 (GPT-2's architecture)"),
        "placement": Figure("pre", f"{_BROWN} §2.1 (pre-normalization)"),
        "positions": Figure("sinusoidal", f"{_COUNT3}: no positional parameters counted "
                                          "(GPT-3 itself learns them)"),
        "context": Figure(2048, f"{_BROWN} §2.1 (n_ctx = 2048)"),
        "mlp": Figure("gelu", f"{_BROWN} §2.1 (GPT-2's architecture)"),
        "n_experts": Figure(0, "dense model"),
        "top_k": Figure(1, _UNUSED),
        "attn_bias": Figure(False, f"{_COUNT3}: (3 d d_head + d_head d) n_heads per block"),
        "mlp_bias": Figure(True, f"{_COUNT3}: 2 d_mlp d + (d_mlp + d) per block"),
        "tied_embeddings": Figure(False, f"{_COUNT3}: W_E and W_U, 2 d n_vocab"),
        "final_norm": Figure(False, f"{_COUNT3}: gamma, beta 2 x (2 d) x n_blocks"),
        "causal": Figure(True, "decoder-only language model"),
        "temperature": Figure(1.0, "training objective (no temperature)"),
        "norm_eps": Figure(1e-5, "GPT-2's layer_norm_epsilon (not restated for GPT-3)"),
        "rope_base": Figure(10000, _UNUSED),
        **_SOFTMAX,
    },
    "llama3-405b": {
        "vocab_size": Figure(128256, f"{_BS} Table 2 (128,256); {_LLAMA} §3.2 and Table 3 "
                                     f"(128K: 100K tiktoken + 28K tokens); {_LLAMA_REL}"),
        "d_model": Figure(16384, f"{_BS} Table 2; {_LLAMA} Table 3"),
        "n_heads": Figure(128, f"{_BS} Table 2; {_LLAMA} Table 3"),
        "n_blocks": Figure(126, f"{_BS} Table 2; {_LLAMA} Table 3"),
        "d_mlp": Figure(53248, f"{_BS} Table 2; {_LLAMA} Table 3 (FFN dimension)"),
        "n_kv_heads": Figure(8, f"{_BS} Table 2; {_LLAMA} §3.2 and Table 3 (grouped-query "
                                "attention, 8 key/value heads)"),
        "d_head": Figure(128, "d_model / n_heads"),
        "norm": Figure("rmsnorm", f"{_LLAMA} §3.2 (Llama 2's architecture); {_LLAMA_REL}"),
        "placement": Figure("pre", f"{_LLAMA} §3.2 (Llama 2's architecture)"),
        "positions": Figure("rope", f"{_LLAMA} Table 3"),
        "context": Figure(8192, f"{_LLAMA} §3.4.1 (pre-training context of 8K tokens)"),
        "mlp": Figure("swiglu", f"{_LLAMA} Table 3 (activation function SwiGLU)"),
        "n_experts": Figure(0, f"{_LLAMA} §3.2 (a dense Transformer, not a mixture of "
                               "experts)"),
        "top_k": Figure(1, _UNUSED),
        "attn_bias": Figure(False, f"{_LLAMA_REL}; {_BS} Table 4 (no attention biases)"),
        "mlp_bias": Figure(False, _LLAMA_REL),
        "tied_embeddings": Figure(False, f"{_LLAMA_REL}; {_BS} Table 4 (W_E and W_U)"),
        "final_norm": Figure(True, _LLAMA_REL),
        "causal": Figure(True, "decoder-only language model"),
        "temperature": Figure(1.0, "training objective (no temperature)"),
        "norm_eps": Figure(1e-5, f"{_LLAMA_REL} (norm_eps)"),
        "rope_base": Figure(500000, f"{_LLAMA} §3.2 and Table 3 (RoPE base frequency "
                                    "theta = 500,000)"),
        **_SOFTMAX,
    },
}
_GEMMA = "Gemma Team 2024 (Gemma: Open Models Based on Gemini Research and Technology)"
_GEMMA_HF = "released google/gemma-{} config.json"
for _size, _d, _h, _kv, _L, _m in (("2b", 2048, 8, 1, 18, 16384), ("7b", 3072, 16, 16, 28, 24576)):
    _hf = _GEMMA_HF.format(_size)
    PUBLISHED[f"gemma-{_size}"] = {
        **_SOFTMAX,
        "vocab_size": Figure(256000, f"{_hf} (the paper's Table 1 counts 256,128 embedding "
                                     "rows)"),
        "d_model": Figure(_d, f"{_GEMMA} Table 1"),
        "n_heads": Figure(_h, f"{_GEMMA} Table 1"),
        "n_blocks": Figure(_L, f"{_GEMMA} Table 1"),
        "d_mlp": Figure(_m, f"{_hf} (intermediate_size; Table 1's feedforward hidden dims "
                            f"{2 * _m} count the gate and up projections together)"),
        "n_kv_heads": Figure(_kv, f"{_GEMMA} Table 1 (multi-query attention for 2B)"),
        "d_head": Figure(256, f"{_GEMMA} Table 1 (head size 256)"),
        "norm": Figure("rmsnorm", f"{_GEMMA} §2 (RMSNorm)"),
        "placement": Figure("pre", "Hugging Face GemmaDecoderLayer (input_layernorm before "
                                   "attention, post_attention_layernorm before the MLP)"),
        "positions": Figure("rope", f"{_GEMMA} §2 (RoPE)"),
        "context": Figure(8192, f"{_GEMMA} §2 (context length of 8192 tokens)"),
        "mlp": Figure("geglu", f"{_GEMMA} §2 (GeGLU); {_hf} (gelu_pytorch_tanh)"),
        "n_experts": Figure(0, "dense model"),
        "top_k": Figure(1, _UNUSED),
        "attn_bias": Figure(False, f"{_hf} (attention_bias false)"),
        "mlp_bias": Figure(False, _hf),
        "tied_embeddings": Figure(True, f"{_GEMMA} §2 (shared input and output embeddings)"),
        "final_norm": Figure(True, _hf),
        "causal": Figure(True, "decoder-only language model"),
        "temperature": Figure(1.0, "training objective (no temperature)"),
        "norm_eps": Figure(1e-6, f"{_hf} (rms_norm_eps)"),
        "rope_base": Figure(10000, f"{_hf} (rope_theta)"),
        "embed_scale": Figure(True, "Hugging Face GemmaModel (embeddings times "
                                    "sqrt(hidden_size))"),
    }
PUBLISHED["llama3.1-405b"] = {
    **PUBLISHED["llama3-405b"],
    "context": Figure(131072, "released Llama-3.1-405B config.json (max_position_embeddings; "
                              f"{_LLAMA} §3.4.2: 128K context)"),
    "rope_scaling": Figure(RopeScaling("llama3", 8.0, 1.0, 4.0, 8192),
                           "released Llama-3.1-405B config.json (rope_scaling: llama3, factor "
                           "8, low 1, high 4, original 8192)"),
}
PUBLISHED["llama3-405b-seed-table"] = {
    **PUBLISHED["llama3-405b"],
    "norm": Figure("layernorm", f"{_COUNT4}: gamma and beta per norm"),
    "mlp_bias": Figure(True, f"{_COUNT4}: MLP biases 2 d_mlp + d_model per block"),
    "final_norm": Figure(False, f"{_COUNT4}: 2 x (2 d) x n_blocks norm parameters"),
}

#: Published parameter totals, exact: ``(value, source)``.
PUBLISHED_TOTALS: dict[str, tuple[int, str]] = {
    "gpt2-small": (124_439_808, "Hugging Face gpt2, num_parameters() (Radford et al. 2019 "
                                "Table 2 reports 117M)"),
    "gpt3-175b": (175_191_908_352, f"{_BS} Table 3 and §3.11.3"),
    "llama3-405b-seed-table": (405_872_984_064, f"{_BS} Table 4 and §3.11.3"),
    "llama3-405b": (405_853_388_800, "Hugging Face meta-llama/Llama-3.1-405B, safetensors "
                                     f"total ({_LLAMA} §1: 405B)"),
    "llama3.1-405b": (405_853_388_800, "Hugging Face meta-llama/Llama-3.1-405B, safetensors "
                                       "total (RoPE scaling adds no parameter)"),
    # Table 2 of the paper counts 256,128 embedding rows (524,550,144 + 1,981,884,416 for 2B;
    # 786,825,216 + 7,751,248,896 for 7B); the released vocabulary has 256,000: 128 d fewer
    "gemma-2b": (2_506_434_560 - 128 * 2048, f"{_GEMMA} Table 2, less 128 x 2048 embedding "
                                             "parameters (256,000 released rows)"),
    "gemma-7b": (8_538_074_112 - 128 * 3072, f"{_GEMMA} Table 2, less 128 x 3072 embedding "
                                             "parameters (256,000 released rows)"),
}
