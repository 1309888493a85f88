"""nlaverify.interop.hf_config: Hugging Face config.json <-> TransformerConfig.

Oracles: the published config files (``nlaverify/data/hf_configs``) with the figures their
model cards and papers state, and, where installed, the ``transformers`` config classes
themselves (their defaults and their own serialisation of each config).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nlaverify.config import ConfigError, RopeScaling, TransformerConfig
from nlaverify.interop.hf_config import SUPPORTED, hf_config_dict, load_hf_config

DATA = Path(__file__).resolve().parents[1] / "nlaverify" / "data" / "hf_configs"
_LLAMA = {"model_type": "llama", "vocab_size": 13, "hidden_size": 16, "intermediate_size": 24,
          "num_hidden_layers": 2, "num_attention_heads": 4}
#: the fields each model type requires (everything else takes the HF class default)
MINIMAL = {
    "gpt2": {"model_type": "gpt2", "vocab_size": 13, "n_embd": 16, "n_layer": 2, "n_head": 4},
    **{mt: {**_LLAMA, "model_type": mt} for mt in SUPPORTED
       if mt not in ("gpt2", "mamba", "gpt_neox", "gptj", "starcoder2", "stablelm", "falcon",
                     "opt", "rwkv", "mamba2", "deepseek_v3", "deepseek_v2")},
    "mamba": {"model_type": "mamba", "vocab_size": 13, "hidden_size": 16,
              "num_hidden_layers": 2},
    "rwkv": {"model_type": "rwkv", "vocab_size": 13, "hidden_size": 16,
             "num_hidden_layers": 2},
    # Mamba2Config's defaults: 128 heads of 64 = expand * hidden_size, 8 groups
    "mamba2": {"model_type": "mamba2", "vocab_size": 13, "hidden_size": 4096,
               "num_hidden_layers": 2},
    # d_h = 8: the default rotary_pct 0.25 rotates 2 coordinates
    "gpt_neox": {**_LLAMA, "model_type": "gpt_neox", "num_attention_heads": 2},
    # heads of 128 >= GPTJConfig's default rotary_dim 64
    "gptj": {"model_type": "gptj", "vocab_size": 13, "n_embd": 256, "n_layer": 2, "n_head": 2},
    # 4 query heads on Starcoder2Config's default 2 key/value heads
    "starcoder2": {**_LLAMA, "model_type": "starcoder2"},
    # StableLmConfig's 32 key/value heads; d_h = 8: the default fraction 0.25 rotates 2
    "stablelm": {**_LLAMA, "model_type": "stablelm", "hidden_size": 256,
                 "num_attention_heads": 32},
    # 4 heads on Gemma2Config's default 4 key/value heads of 256; 3 layers: 0 and 2 local
    "gemma2": {**_LLAMA, "model_type": "gemma2", "num_hidden_layers": 3},
    # none: every size takes Gemma3TextConfig's default, as google/gemma-3-4b-it's text
    # config relies on (26 layers, every 6th global; 8 heads on 4 key/value heads of 256)
    "gemma3_text": {"model_type": "gemma3_text"},
    # FalconConfig: no intermediate_size (ffn_hidden_size defaults to 4 hidden_size)
    "falcon": {k: v for k, v in {**_LLAMA, "model_type": "falcon"}.items()
               if k != "intermediate_size"},
    # DeepseekV3Config's 128 key/value heads must be the heads (MLA); first_k_dense_replace
    # 3 >= 2 layers: every layer dense
    "deepseek_v3": {**_LLAMA, "model_type": "deepseek_v3", "num_attention_heads": 128},
    # DeepseekV2Config's first_k_dense_replace 0 makes every layer MoE: required to be dense
    "deepseek_v2": {**_LLAMA, "model_type": "deepseek_v2", "first_k_dense_replace": 2},
    # OPTConfig's MLP width is ffn_dim
    "opt": {k: v for k, v in {**_LLAMA, "model_type": "opt", "ffn_dim": 24}.items()
            if k != "intermediate_size"},
}
# head counts the class defaults of num_key_value_heads (Mistral, Mixtral 8; Qwen2/3 32;
# Gemma 16) divide but do not equal, so a wrong default would change the config
MINIMAL["qwen2"] = {**MINIMAL["qwen2"], "num_attention_heads": 64, "hidden_size": 128}
MINIMAL["qwen3"] = {**MINIMAL["qwen3"], "num_attention_heads": 64, "hidden_size": 128}
MINIMAL["mixtral"] = {**MINIMAL["mixtral"], "num_attention_heads": 16, "hidden_size": 32}
MINIMAL["mistral"] = {**MINIMAL["mistral"], "num_attention_heads": 16, "hidden_size": 32}
MINIMAL["gemma"] = {**MINIMAL["gemma"], "num_attention_heads": 32}
MINIMAL["ministral"] = {**MINIMAL["ministral"], "num_attention_heads": 16, "hidden_size": 32}
MINIMAL["qwen2_moe"] = {**MINIMAL["qwen2_moe"], "num_attention_heads": 16, "hidden_size": 32}
#: published files nlaverify refuses, and the key it names (StarCoder2-3B's rope_theta
#: 999999.4420358813 is no integer base)
REFUSED = {"starcoder2-3b.json": r"'rope_parameters\.rope_theta'"}


def test_published_configs():
    c = load_hf_config(DATA / "llama-3.1-405b.json").config
    assert (c.vocab_size, c.d_model, c.n_blocks, c.n_heads, c.n_kv_heads, c.d_mlp) == (
        128256, 16384, 126, 128, 8, 53248)
    assert (c.rope_base, c.norm_eps, c.context, c.mlp, c.tied_embeddings) == (
        500000, 1e-5, 131072, "swiglu", False)
    assert c.rope_scaling == RopeScaling("llama3", 8.0, 1.0, 4.0, 8192)
    c = load_hf_config(DATA / "llama-3.2-1b.json").config
    assert c.tied_embeddings and c.rope_scaling.factor == 32.0 and c.d_head == 64
    assert load_hf_config(DATA / "llama-3-8b.json").config.rope_scaling is None
    c = load_hf_config(DATA / "gemma-2b.json").config
    assert (c.vocab_size, c.d_model, c.n_blocks, c.n_heads, c.n_kv_heads, c.d_head, c.d_mlp,
            c.norm_eps, c.rope_base, c.context) == (256000, 2048, 18, 8, 1, 256, 16384, 1e-6,
                                                    10000, 8192)
    assert c.mlp == "geglu" and c.embed_scale and c.tied_embeddings  # hidden_act "gelu"
    c = load_hf_config(DATA / "gemma-7b.json").config
    assert (c.d_model, c.n_blocks, c.n_heads, c.n_kv_heads, c.d_head, c.d_mlp) == (
        3072, 28, 16, 16, 256, 24576)
    assert c.n_heads * c.d_head != c.d_model
    assert load_hf_config(DATA / "mistral-7b-v0.1.json").config.sliding_window == 4096
    c = load_hf_config(DATA / "mixtral-8x7b.json").config
    assert (c.n_experts, c.top_k, c.rope_base, c.sliding_window) == (8, 2, 1000000, None)
    c = load_hf_config(DATA / "qwen2-7b.json").config
    assert c.attn_bias and c.attn_out_bias is False and c.sliding_window is None
    c = load_hf_config(DATA / "gpt2.json").config
    assert c == TransformerConfig(vocab_size=50257, d_model=768, n_heads=12, n_blocks=12,
                                  d_mlp=3072, context=1024, mlp="gelu", attn_bias=True,
                                  mlp_bias=True, tied_embeddings=True)


def test_sources_dict_path_directory(tmp_path):
    d = json.loads((DATA / "gemma-2b.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(d))
    a, b, c = (load_hf_config(s) for s in (d, tmp_path / "config.json", tmp_path))
    assert a.config == b.config == c.config and c.model_type == "gemma"
    assert c.config.name == tmp_path.name and a.raw == d


#: TransformerConfigs each model type can express, with its options in use
EXPRESSIBLE = {
    "gpt2": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_blocks=2, d_mlp=24,
                              context=16, mlp="gelu_erf", attn_bias=True, mlp_bias=True,
                              tied_embeddings=False, norm_eps=1e-6),
    "llama": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2, d_head=8,
                               n_blocks=2, d_mlp=24, norm="rmsnorm", positions="rope",
                               mlp="swiglu", attn_bias=True, mlp_bias=True, rope_base=500000,
                               rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 12)),
    "mistral": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2,
                                 n_blocks=2, d_mlp=24, norm="rmsnorm", positions="rope",
                                 mlp="swiglu", sliding_window=3,
                                 rope_scaling=RopeScaling("linear", 2.0)),
    "mixtral": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2,
                                 n_blocks=2, d_mlp=24, norm="rmsnorm", positions="rope",
                                 mlp="swiglu", n_experts=4, top_k=2),
    "qwen2": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2, n_blocks=2,
                               d_mlp=24, norm="rmsnorm", positions="rope", mlp="swiglu",
                               attn_bias=True, attn_out_bias=False, sliding_window=5,
                               tied_embeddings=True),
    "qwen3": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2, d_head=8,
                               n_blocks=2, d_mlp=24, norm="rmsnorm", positions="rope",
                               mlp="swiglu", qk_norm=True),
    # Qwen2-MoE: a gated shared expert, block 0 dense, gates not renormalised, Q/K/V biases
    "qwen2_moe": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2,
                                   n_blocks=2, d_mlp=24, norm="rmsnorm", positions="rope",
                                   mlp="swiglu", n_experts=4, top_k=2, moe_renormalize=False,
                                   moe_intermediate_size=8, d_shared_expert=12,
                                   shared_expert_gate=True, moe_dense_layers=(0,),
                                   attn_bias=True, attn_out_bias=False),
    "qwen3_moe": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2,
                                   d_head=8, n_blocks=2, d_mlp=24, norm="rmsnorm",
                                   positions="rope", mlp="swiglu", qk_norm=True, n_experts=4,
                                   top_k=2, moe_intermediate_size=8),
    "gemma": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=1, d_head=8,
                               n_blocks=2, d_mlp=24, norm="rmsnorm", positions="rope",
                               mlp="geglu", embed_scale=True, tied_embeddings=True,
                               norm_eps=1e-6),
    # no MLP, no positions, an explicit rank (2 != ceil(16/16)), untied
    "mamba": TransformerConfig(vocab_size=13, d_model=16, n_heads=1, n_blocks=2, d_mlp=1,
                               norm="rmsnorm", positions="none", context=2048, mlp="none",
                               mixer="mamba", ssm_state=4, ssm_conv=3, ssm_expand=3,
                               ssm_dt_rank=2, tied_embeddings=False, norm_eps=1e-6),
    # Mamba-2: 4 heads of 8 channels, 2 groups of B, C (state 3), conv 3, tied
    "mamba2": TransformerConfig(vocab_size=13, d_model=16, n_heads=1, n_blocks=2, d_mlp=1,
                                norm="rmsnorm", positions="none", context=2048, mlp="none",
                                mixer="mamba2", ssm_heads=4, ssm_groups=2, ssm_state=3,
                                ssm_conv=3, tied_embeddings=True),
    # RWKV-4: time mixing of width 8 != d, channel mixing of 24, untied, no positions
    "rwkv": TransformerConfig(vocab_size=13, d_model=16, n_heads=1, n_blocks=2, d_mlp=24,
                              positions="none", context=32, mixer="rwkv",
                              rwkv_attention_size=8),
    # sequential (not parallel) blocks, no attention biases, the tanh GELU, tied, 6 of d_h = 8
    # coordinates rotated (a fraction 0.75 that HF's int(d_h * p) must read back as 6)
    "gpt_neox": TransformerConfig(vocab_size=13, d_model=16, n_heads=2, n_blocks=2, d_mlp=24,
                                  positions="rope", rope_pairing="half", rotary_dim=6,
                                  mlp="gelu", mlp_bias=True, tied_embeddings=True,
                                  norm_eps=1e-6, rope_base=500000),
    # the erf GELU, 4 of d_h = 8 coordinates rotated in GPT-J's (interleaved) pairing
    "gptj": TransformerConfig(vocab_size=13, d_model=16, n_heads=2, n_blocks=2, d_mlp=24,
                              positions="rope", rotary_dim=4, mlp="gelu_erf", mlp_bias=True,
                              unembed_bias=True, parallel_residual=True, context=32),
    # grouped-query attention, 2 of d_h = 4 coordinates rotated in the half pairing
    "phi": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2, n_blocks=2,
                             d_mlp=24, positions="rope", rope_pairing="half", rotary_dim=2,
                             attn_bias=True, mlp_bias=True, unembed_bias=True,
                             parallel_residual=True, norm_eps=1e-6),
    # no biases, the erf GELU, untied, a window of 3, grouped-query attention
    "starcoder2": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2,
                                    n_blocks=2, d_mlp=24, positions="rope", rope_pairing="half",
                                    mlp="gelu_erf", sliding_window=3, rope_base=100000),
    # parallel, Q/K/V biases (none on O), GeGLU, tied, 6 of d_h = 8 coordinates rotated
    "stablelm": TransformerConfig(vocab_size=13, d_model=16, n_heads=2, n_kv_heads=1,
                                  n_blocks=2, d_mlp=24, positions="rope", rope_pairing="half",
                                  rotary_dim=6, mlp="geglu", attn_bias=True,
                                  attn_out_bias=False, tied_embeddings=True,
                                  parallel_residual=True, norm_eps=1e-6),
    # sandwich norms, s = 5 != d_h = 8, a window of 3 on block 1 of 3, one cap, SwiGLU,
    # biases, untied, Llama-3 RoPE scaling
    "gemma2": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2, d_head=8,
                                n_blocks=3, d_mlp=24, norm="rmsnorm", positions="rope",
                                mlp="swiglu", attn_bias=True, embed_scale=True,
                                post_norms=True, query_pre_attn_scalar=5, sliding_window=3,
                                window_layers=(1,), attn_softcap=20.0, norm_eps=1e-6,
                                rope_scaling=RopeScaling("linear", 2.0)),
    # QK-norm, sandwich norms, s = 5, windows on blocks 0 and 2 of 3 at local base 100,
    # block 1 at base 5000 scaled linearly by 4, one cap, SwiGLU, biases, untied
    "gemma3_text": TransformerConfig(
        vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2, d_head=8, n_blocks=3, d_mlp=24,
        norm="rmsnorm", positions="rope", mlp="swiglu", attn_bias=True, embed_scale=True,
        post_norms=True, qk_norm=True, query_pre_attn_scalar=5, sliding_window=3,
        window_layers=(0, 2), rope_local_base=100, rope_base=5000, final_softcap=20.0,
        norm_eps=1e-6, rope_scaling=RopeScaling("linear", 4.0)),
    # every multiplier (attention_multiplier 0.25: s = 16), GeGLU, MLP biases, tied
    "granite": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2,
                                 n_blocks=2, d_mlp=24, norm="rmsnorm", positions="rope",
                                 mlp="geglu", mlp_bias=True, tied_embeddings=True,
                                 embed_multiplier=2.5, residual_multiplier=0.5,
                                 query_pre_attn_scalar=16.0, temperature=4.0, norm_eps=1e-6),
    # GeGLU, tied, no biases, Llama-3 RoPE scaling
    "olmo2": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2, n_blocks=2,
                               d_mlp=24, norm="rmsnorm", positions="rope", mlp="geglu",
                               tied_embeddings=True, pre_norms=False, post_norms=True,
                               qk_norm=True, qk_norm_joint=True, norm_eps=1e-6,
                               rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 64)),
    # GeGLU, tied, 6 of d_h = 8 coordinates rotated, a window of 5
    "phi3": TransformerConfig(vocab_size=13, d_model=16, n_heads=2, n_kv_heads=1, n_blocks=2,
                              d_mlp=24, norm="rmsnorm", positions="rope", rope_pairing="half",
                              rotary_dim=6, mlp="geglu", tied_embeddings=True,
                              sliding_window=5, norm_eps=1e-6),
    # windows on blocks 0 and 2 of 3, d_h = 6 != d/h, GeGLU, tied
    "ministral": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2,
                                   d_head=6, n_blocks=3, d_mlp=24, norm="rmsnorm",
                                   positions="rope", mlp="geglu", tied_embeddings=True,
                                   sliding_window=2, window_layers=(0, 2), norm_eps=1e-6),
    # LayerNorms without gain or bias (epsilon fixed at 1e-5), GeGLU, tied, Q/K/V/O biases,
    # grouped-query attention, linear RoPE scaling
    "olmo": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2, n_blocks=2,
                              d_mlp=24, positions="rope", mlp="geglu", attn_bias=True,
                              tied_embeddings=True, norm_affine=False,
                              rope_scaling=RopeScaling("linear", 2.0)),
    # one shared bias-free LayerNorm before parallel attention and MLP, interleaved RoPE,
    # GeGLU, untied, Q/K/V/O biases, logits times 1/8 (temperature 8)
    "cohere": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2,
                                n_blocks=2, d_mlp=24, positions="rope", mlp="geglu",
                                attn_bias=True, norm_bias=False, parallel_residual=True,
                                temperature=8.0, norm_eps=1e-6, rope_base=8000000),
    # Falcon-7B's block: one shared LayerNorm, multi-query (one K/V head), half-pairing RoPE,
    # here with every bias, the tanh GELU, untied
    "falcon": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=1,
                                n_blocks=2, d_mlp=24, positions="rope", rope_pairing="half",
                                mlp="gelu", attn_bias=True, mlp_bias=True,
                                parallel_residual=True, norm_eps=1e-6, rope_base=500000),
    # OPT-125M's block without biases or norm gains, the erf GELU, untied (learned positions
    # read from row 2 of the table)
    "opt": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, n_blocks=2, d_mlp=24,
                             positions="learned", context=32, mlp="gelu_erf", attn_bias=False,
                             mlp_bias=False, norm_affine=False, tied_embeddings=False,
                             position_offset=2),
    # DeepSeek-V3's block, every layer dense: multi-head latent attention with full-rank
    # queries, RoPE by rotate_half, heads of d_c = 4 + d_r = 2 and values of 3, GeGLU
    "deepseek_v3": TransformerConfig(vocab_size=13, d_model=16, n_heads=2, d_head=6,
                                     n_blocks=2, d_mlp=24, norm="rmsnorm", positions="rope",
                                     mlp="geglu", rope_pairing="half", rope_base=500000,
                                     norm_eps=1e-5, kv_lora_rank=5, qk_nope_head_dim=4,
                                     qk_rope_head_dim=2, v_head_dim=3),
    # DeepSeek-V2's: a query latent, interleaved RoPE (its only pairing), MLP biases
    "deepseek_v2": TransformerConfig(vocab_size=13, d_model=16, n_heads=4, d_head=6,
                                     n_blocks=2, d_mlp=24, norm="rmsnorm", positions="rope",
                                     mlp="swiglu", mlp_bias=True, norm_eps=1e-5,
                                     kv_lora_rank=5, q_lora_rank=7, qk_nope_head_dim=2,
                                     qk_rope_head_dim=4, v_head_dim=3),
}


@pytest.mark.parametrize("mt", SUPPORTED)
def test_round_trips(mt):
    cfg = EXPRESSIBLE[mt]
    d = hf_config_dict(cfg, mt)
    assert load_hf_config(d).config == cfg
    assert hf_config_dict(load_hf_config(d).config, mt) == d
    # and a published file survives config -> dict -> config
    for f in DATA.glob("*.json"):
        if f.name in REFUSED:
            with pytest.raises(ConfigError, match=REFUSED[f.name]):
                load_hf_config(f)
            continue
        h = load_hf_config(f)
        if h.model_type == mt:
            assert load_hf_config(hf_config_dict(h.config, mt)).config == h.config


def test_rope_keys_old_new_and_legacy_type():
    scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    old = {**_LLAMA, "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", **scaling}}
    new = {**_LLAMA, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
                                         **scaling}}
    assert load_hf_config(old).config == load_hf_config(new).config
    assert load_hf_config(new).config.rope_base == 500000
    linear = load_hf_config({**_LLAMA, "rope_scaling": {"type": "linear", "factor": 2.0}})
    assert linear.config.rope_scaling == RopeScaling("linear", 2.0)
    # original_max_position_embeddings defaults to max_position_embeddings (standardize)
    no_orig = {k: v for k, v in scaling.items() if k != "original_max_position_embeddings"}
    c = load_hf_config({**_LLAMA, "max_position_embeddings": 64,
                        "rope_scaling": {"rope_type": "llama3", **no_orig}}).config
    assert c.rope_scaling.original_context == 64


def test_activations_and_sliding_windows():
    gpt2 = MINIMAL["gpt2"]
    for act, mlp in (("gelu_new", "gelu"), ("gelu_pytorch_tanh", "gelu"), ("gelu", "gelu_erf"),
                     ("relu", "relu")):
        assert load_hf_config({**gpt2, "activation_function": act}).config.mlp == mlp
    for act in ("gelu", "gelu_pytorch_tanh"):  # HF Gemma forces the tanh form for "gelu"
        assert load_hf_config({**MINIMAL["gemma"], "hidden_act": act}).config.mlp == "geglu"
    assert load_hf_config({**_LLAMA, "hidden_act": "gelu_pytorch_tanh"}).config.mlp == "geglu"
    q = {**MINIMAL["qwen2"], "sliding_window": 7}
    assert load_hf_config(q).config.sliding_window is None  # use_sliding_window false
    on = {**q, "use_sliding_window": True}
    assert load_hf_config({**on, "max_window_layers": 0}).config.sliding_window == 7
    assert load_hf_config({**on, "max_window_layers": 2}).config.sliding_window is None
    with pytest.raises(ConfigError, match="some layers only"):
        load_hf_config({**on, "max_window_layers": 1})
    # Mistral's class default window is 4096
    assert load_hf_config(MINIMAL["mistral"]).config.sliding_window == 4096


@pytest.mark.parametrize(("change", "match"), [
    ({"model_type": "bloom"}, "model_type.*'bloom'"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, r"rope_type.*'yarn'"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}},
     r"missing required field 'rope_scaling\.high_freq_factor'"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0, "beta_fast": 3}},
     r"'rope_scaling\.beta_fast'"),
    ({"rope_theta": 10000.5}, r"'rope_theta'.*integral.*10000\.5"),
    ({"rope_theta": 10000.0, "rope_parameters": {"rope_type": "default", "rope_theta": 5e5}},
     "contradicts"),
    ({"hidden_act": "gelu"}, r"'hidden_act'.*'gelu'"),
    ({"hidden_act": "swish"}, r"'hidden_act'.*'swish'"),
    ({"attention_bias": "yes"}, r"'attention_bias'.*true or false"),
    ({"some_new_option": 1}, r"unsupported key 'some_new_option'"),
    ({"router_jitter_noise": 0.1}, r"unsupported key 'router_jitter_noise'"),  # Mixtral's
    ({"vocab_size": None}, r"'vocab_size'.*an integer"),
    ({"rope_theta": float(2**53)}, r"'rope_theta'.*\[2, 2\*\*53\)"),
    ({"return_dict": False}, r"'return_dict'.*only true"),
])
def test_bad_llama_configs_name_the_key(change, match):
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**_LLAMA, **change})


@pytest.mark.parametrize("mt", SUPPORTED)
def test_missing_required_fields(mt):
    for key in MINIMAL[mt]:
        if key == "model_type":
            continue
        bad = {k: v for k, v in MINIMAL[mt].items() if k != key}
        with pytest.raises(ConfigError, match=f"missing required field '{key}'"):
            load_hf_config(bad)
    with pytest.raises(ConfigError, match="missing required field 'model_type'"):
        load_hf_config({k: v for k, v in MINIMAL[mt].items() if k != "model_type"})


def test_other_unsupported_values():
    for change, match in (({"scale_attn_by_inverse_layer_idx": True}, "only False"),
                          ({"n_ctx": 7}, "n_ctx"), ({"hidden_size": 32}, "contradicts")):
        with pytest.raises(ConfigError, match=match):
            load_hf_config({**MINIMAL["gpt2"], **change})
    with pytest.raises(ConfigError, match=r"'hidden_activation'.*'gelu'"):
        load_hf_config({**MINIMAL["gemma"], "hidden_activation": "gelu"})
    with pytest.raises(ConfigError, match=r"'hidden_act'.*'gelu_pytorch_tanh'"):
        load_hf_config({**MINIMAL["mixtral"], "hidden_act": "gelu_pytorch_tanh"})
    with pytest.raises(ConfigError, match="no such file"):
        load_hf_config(DATA / "no-such-model.json")


@pytest.mark.parametrize(("mt", "change", "field"), [
    ("llama", {"norm": "layernorm"}, "norm"),
    ("gpt2", {"positions": "rope", "norm": "layernorm"}, "positions"),
    ("gpt2", {"attn_bias": False}, "attn_bias"),
    ("gpt2", {"position_offset": 2}, "position_offset"),
    ("mistral", {"attn_bias": True}, "attn_bias"),
    ("qwen2", {"attn_out_bias": None}, "attn_out_bias"),
    ("llama", {"qk_norm": True}, "qk_norm"),
    ("llama", {"sliding_window": 4}, "sliding_window"),
    ("gemma", {"mlp": "swiglu"}, "mlp"),
    ("mixtral", {"moe_renormalize": False}, "moe_renormalize"),
    ("llama", {"placement": "post"}, "placement"),
    ("llama", {"lora_rank": 2}, "lora_rank"),
    ("llama", {"rotary_dim": 4}, "rotary_dim"),
    ("llama", {"rope_pairing": "half"}, "rope_pairing"),
    ("llama", {"parallel_residual": True}, "parallel_residual"),
    ("gpt_neox", {"norm": "rmsnorm"}, "norm"),
    ("gpt_neox", {"rope_pairing": "interleaved"}, "rope_pairing"),
    ("gpt_neox", {"mlp_bias": False}, "mlp_bias"),
    ("gpt_neox", {"parallel_residual": True, "parallel_norms": 1}, "parallel_norms"),
    ("gpt_neox", {"rope_scaling": RopeScaling("linear", 2.0)}, "rope_scaling"),
    ("llama", {"unembed_bias": True}, "unembed_bias"),
    ("gptj", {"unembed_bias": False}, "unembed_bias"),
    ("gptj", {"rope_pairing": "half"}, "rope_pairing"),
    ("gptj", {"rope_base": 500000}, "rope_base"),
    ("gptj", {"parallel_norms": 2}, "parallel_norms"),
    ("phi", {"attn_bias": False}, "attn_bias"),
    ("phi", {"parallel_residual": False}, "parallel_residual"),
    ("starcoder2", {"mlp": "swiglu"}, "mlp"),
    ("starcoder2", {"mlp_bias": True}, "mlp_bias"),
    ("starcoder2", {"rope_pairing": "interleaved"}, "rope_pairing"),
    ("starcoder2", {"norm": "rmsnorm"}, "norm"),
    ("starcoder2", {"attn_out_bias": True}, "attn_out_bias"),
    ("stablelm", {"attn_out_bias": None}, "attn_out_bias"),
    ("stablelm", {"mlp": "gelu"}, "mlp"),
    ("stablelm", {"parallel_norms": 2}, "parallel_norms"),
    ("stablelm", {"mlp_bias": True}, "mlp_bias"),
    ("stablelm", {"qk_norm": True}, "qk_norm"),
    ("gemma3_text", {"qk_norm": False}, "qk_norm"),
    ("gemma3_text", {"rope_local_base": None}, "rope_local_base"),
    ("gemma2", {"post_norms": False}, "post_norms"),
    ("gemma2", {"query_pre_attn_scalar": None}, "query_pre_attn_scalar"),
    ("gemma2", {"embed_scale": False}, "embed_scale"),
    ("gemma2", {"window_layers": (0, 1, 2)}, "window_layers"),
    ("gemma2", {"attn_out_bias": False}, "attn_out_bias"),
    ("gemma", {"post_norms": True}, "post_norms"),
    ("llama", {"attn_softcap": 5.0}, "attn_softcap"),
    ("granite", {"attn_out_bias": False}, "attn_out_bias"),
    ("granite", {"qk_norm": True}, "qk_norm"),
    ("granite", {"embed_multiplier": None, "embed_scale": True}, "embed_scale"),
    ("llama", {"residual_multiplier": 2.0}, "residual_multiplier"),
    ("llama", {"embed_multiplier": 3.0}, "embed_multiplier"),
    ("olmo2", {"pre_norms": True}, "pre_norms"),
    ("olmo2", {"qk_norm_joint": False}, "qk_norm_joint"),
    ("olmo2", {"mlp_bias": True}, "mlp_bias"),
    ("qwen3", {"qk_norm_joint": True}, "qk_norm_joint"),
    ("phi3", {"rope_pairing": "interleaved"}, "rope_pairing"),
    ("phi3", {"attn_bias": True}, "attn_bias"),
    ("phi3", {"rope_scaling": RopeScaling("linear", 2.0)}, "rope_scaling"),
    ("ministral", {"window_layers": (0, 1, 2)}, "window_layers"),
    ("ministral", {"attn_bias": True}, "attn_bias"),
    ("mistral", {"window_layers": (0,)}, "window_layers"),
    ("olmo", {"norm_affine": True}, "norm_affine"),
    ("olmo", {"norm_eps": 1e-6}, "norm_eps"),
    ("olmo", {"norm": "rmsnorm"}, "norm"),
    ("llama", {"norm_affine": False}, "norm_affine"),
    ("cohere", {"norm_bias": True}, "norm_bias"),
    ("cohere", {"parallel_residual": False}, "parallel_residual"),
    ("cohere", {"rope_pairing": "half"}, "rope_pairing"),
    ("cohere", {"mlp_bias": True}, "mlp_bias"),
    ("falcon", {"n_kv_heads": 2}, "n_kv_heads"),
    ("falcon", {"parallel_norms": 2}, "parallel_norms"),
    ("falcon", {"mlp_bias": False}, "mlp_bias"),
    ("falcon", {"rope_pairing": "interleaved"}, "rope_pairing"),
    ("opt", {"placement": "post"}, "placement"),
    ("opt", {"mlp_bias": True}, "mlp_bias"),
    ("opt", {"norm_eps": 1e-6}, "norm_eps"),
    ("opt", {"position_offset": 0}, "position_offset"),
    ("stablelm", {"norm_bias": False}, "norm_bias"),
])
def test_hf_config_dict_refuses_what_hf_cannot_express(mt, change, field):
    cfg = EXPRESSIBLE[mt].replace(**change)
    with pytest.raises(ConfigError, match=rf"TransformerConfig\.{field}\b"):
        hf_config_dict(cfg, mt)


# --- against transformers -----------------------------------------------------------------


@pytest.mark.parametrize("mt", SUPPORTED)
def test_defaults_and_serialisation_agree_with_transformers(mt):
    """Absent fields take the installed config class's defaults: the minimal dict and HF's
    own serialisation of it (every field written out) give the same config; HF accepts
    ``hf_config_dict`` and serialises it back to the same config."""
    transformers = pytest.importorskip("transformers")
    minimal = MINIMAL[mt]
    full = transformers.AutoConfig.for_model(**minimal).to_dict()
    assert load_hf_config(full).config == load_hf_config(minimal).config
    cfg = EXPRESSIBLE[mt]
    d = hf_config_dict(cfg, mt)
    assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == cfg


@pytest.mark.parametrize(("change", "match"), [
    ({"num_local_experts": 0}, r"'num_local_experts': expected an integer >= 1, got 0"),
    ({"num_experts": 0}, r"'num_experts': expected an integer >= 1, got 0"),
    ({"num_experts_per_tok": 5}, r"'num_experts_per_tok'.*\[1, 4\]"),
    ({"num_experts_per_tok": 0}, r"'num_experts_per_tok'"),
])
def test_mixtral_expert_counts(change, match):
    """num_local_experts = 0 must not become a dense SwiGLU model."""
    base = {**MINIMAL["mixtral"], "num_local_experts": 4}
    if "num_experts" in change:
        base.pop("num_local_experts")
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**base, **change})


def test_non_utf8_config_is_a_config_error(tmp_path):
    from nlaverify.interop import config_from_file

    f = tmp_path / "config.json"
    f.write_bytes(b'{"model_type": "llama", "name": "\xff"}')
    with pytest.raises(ConfigError, match="UTF-8"):
        load_hf_config(f)
    with pytest.raises(ConfigError, match="not readable"):
        config_from_file(f)
    with pytest.raises(ConfigError, match="UTF-8"):
        config_from_file(tmp_path)  # the directory holding it
