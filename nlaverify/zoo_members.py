"""The members of the zoo (:data:`ZOO`) and the reference :data:`BASE` they start from; what
each member is for is said beside it. The zoo itself (coverage, verification, field effects)
is :mod:`nlaverify.zoo`.
"""

from __future__ import annotations

from typing import Any

from nlaverify.config import TransformerConfig

__all__ = ["BASE", "ZOO"]


#: the reference: every field at its default, sizes tiny (the zoo's sizes start from it;
#: fields without a default count as "non-default" where they differ from it). Plain
#: defaults are verified by the ``tiny`` preset, so it is not itself a zoo member.
_SIZES: dict[str, Any] = dict(vocab_size=11, d_model=8, n_heads=2, n_blocks=1, d_mlp=12,
                              context=8)
BASE = TransformerConfig(**_SIZES, name="base")


def _member(name: str, **changes: Any) -> TransformerConfig:
    """A zoo member: :data:`BASE`'s sizes with ``changes`` (defaults resolved afresh)."""
    return TransformerConfig(**{**_SIZES, **changes}, name=name)


ZOO: tuple[TransformerConfig, ...] = (
    # GQA: 4 query heads on 2 key/value heads (n_rep = 2); d_head = 4 != d/h = 2;
    # RoPE with base 7; pre-RMSNorm; dense SwiGLU
    _member("gqa-rope-swiglu", n_heads=4, n_kv_heads=2, d_head=4, norm="rmsnorm",
            positions="rope", rope_base=7, mlp="swiglu"),
    # ReLU experts, 2 of 3; attention biases; learned positions, pre-LayerNorm
    _member("moe-relu-top2", n_experts=3, top_k=2, mlp="relu", attn_bias=True, d_mlp=6),
    # GELU experts, 1 of 4; sinusoidal positions; tied embeddings, no final norm,
    # temperature 0.5, a larger vocabulary
    _member("moe-gelu-top1-tied", n_experts=4, top_k=1, mlp="gelu", positions="sinusoidal",
            d_mlp=6, tied_embeddings=True, final_norm=False, temperature=0.5, vocab_size=17),
    # SwiGLU experts under GQA and RoPE (default base); pre-RMSNorm with epsilon 0.1
    # gates not renormalised (the top 2 entries of the softmax over all 3 experts)
    _member("moe-swiglu-gqa", n_heads=4, n_kv_heads=2, d_head=4, n_experts=3, top_k=2,
            mlp="swiglu", norm="rmsnorm", positions="rope", norm_eps=0.1, d_mlp=6,
            moe_renormalize=False),
    # Post-LN LayerNorm, two blocks, epsilon 0.5, every bias, dense GELU, learned positions
    # read with OPT's offset 2 (position p reads row p + 2 of a table of context + 2 rows)
    _member("post-layernorm", placement="post", norm_eps=0.5, n_blocks=2, attn_bias=True,
            mlp_bias=True, position_offset=2),
    # Post-LN RMSNorm with epsilon 0.25, a wider model with 3 heads, no positions,
    # bidirectional attention, temperature 3, dense ReLU, every bias, context 5 < n
    _member("post-rmsnorm-bidirectional", placement="post", norm="rmsnorm", norm_eps=0.25,
            d_model=12, n_heads=3, d_mlp=10, positions="none", causal=False,
            temperature=3.0, mlp="relu", attn_bias=True, mlp_bias=True, context=5),
    # FAVOR+ (positive random features, causal prefix sums) with 8 i.i.d. Gaussian
    # features per head from seed 1 (Baggag & Saad §4.4)
    _member("favor-plus-iid", attention="favor+", random_features=8, feature_seed=1,
            orthogonal_features=False),
    # Linformer: keys and values projected to k = 3 rows by trained E, F (3 x context);
    # bidirectional, sequences of at most context = 6 tokens (shorter ones zero-padded)
    _member("linformer-k3", attention="linformer", linformer_k=3, causal=False, context=6),
    # Llama-3.1's RoPE scaling with d_h = 6 and L = 512 (one frequency kept, one blended,
    # one divided by 8), a sliding window of 2 < n, QK-norm (Qwen3), Q/K/V biases without
    # an output bias (Qwen2), the erf GELU
    _member("rope-scaled-window-qknorm", d_head=6, norm="rmsnorm", positions="rope",
            rope_scaling={"kind": "llama3", "factor": 8.0, "original_context": 512},
            sliding_window=2, qk_norm=True, attn_bias=True, attn_out_bias=False,
            mlp="gelu_erf"),
    # Gemma's choices: GeGLU, embeddings times sqrt(d), tied, one key/value head,
    # 2 heads of 6 on d = 8
    _member("gemma-like", mlp="geglu", embed_scale=True, tied_embeddings=True,
            norm="rmsnorm", positions="rope", n_kv_heads=1, d_head=6, d_mlp=10),
    # LoRA of rank 2, scale alpha/r = 3, on every projection: biased (Q, K, V, O) and not (MLP)
    _member("lora-r2-all", lora_rank=2, lora_alpha=6.0,
            lora_targets=("q", "k", "v", "o", "mlp"), attn_bias=True),
    # Mamba's block in place of attention (Gu & Dao 2023): a state of 3 per channel, a
    # convolution of width 3 < n, d_inner = 3 d, Delta of rank 2; pre-RMSNorm, no positions
    _member("mamba-rmsnorm", mixer="mamba", ssm_state=3, ssm_conv=3, ssm_expand=3,
            ssm_dt_rank=2, norm="rmsnorm", positions="none", mlp="swiglu"),
    # a hybrid as Jamba interleaves them: Mamba in block 0, RoPE attention in block 1
    _member("hybrid-mamba-attention", n_blocks=2, mixer=("mamba", "attention"),
            positions="rope", ssm_state=2, ssm_expand=1),
    # RWKV-4's block (Peng et al. 2023): time mixing of width a = 6 != d (rwkv_attention_size),
    # channel mixing of width 12, ln0 on the embedding, two blocks, no positions
    _member("rwkv", n_blocks=2, mixer="rwkv", rwkv_attention_size=6, positions="none"),
    # a hybrid: RoPE attention with a SwiGLU MLP in block 0 (so no ln0), RWKV in block 1
    _member("hybrid-rwkv-attention", n_blocks=2, mixer=("attention", "rwkv"),
            positions="rope", mlp="swiglu"),
    # Mamba-2's block (Dao & Gu 2024) as Hugging Face's Mamba2Block (no MLP): 4 heads of 4
    # channels, 2 groups of B, C (state 3), a convolution of width 3; pre-RMSNorm
    _member("mamba2", n_blocks=2, mixer="mamba2", ssm_heads=4, ssm_groups=2, ssm_state=3,
            ssm_conv=3, norm="rmsnorm", positions="none", mlp="none"),
    # a hybrid: RoPE attention in block 0, Mamba-2 (2 heads of 8, one group) in block 1
    _member("hybrid-mamba2-attention", n_blocks=2, mixer=("attention", "mamba2"),
            positions="rope", ssm_heads=2, ssm_state=2),
    # Gemma 2's soft caps (Gemma Team 2024): scores 0.5 (before the mask), logits 1.5; post-LN
    _member("softcap-rmsnorm", attn_softcap=0.5, final_softcap=1.5, norm="rmsnorm",
            placement="post"),
    # GPT-NeoX (Black et al. 2022): x + Attn(N1(x)) + MLP(N2(x)), RoPE, every bias
    _member("parallel-neox", parallel_residual=True, parallel_norms=2, n_blocks=2,
            positions="rope", attn_bias=True, mlp_bias=True),
    # partial rotary in the half pairing (Pythia's rotary_pct, Phi's partial_rotary_factor):
    # 4 of d_h = 6 coordinates rotated as (x_i, x_{i+2}), 2 passed through
    _member("partial-rotary-half", d_head=6, positions="rope", rotary_dim=4,
            rope_pairing="half"),
    # GPT-J (Wang & Komatsuzaki 2021): one shared norm, interleaved rotary on 2 of d_h = 6,
    # biased MLP and lm_head, no attention biases
    _member("gptj-like", d_head=6, positions="rope", rotary_dim=2, parallel_residual=True,
            mlp_bias=True, unembed_bias=True),
    # Gemma 2 (Gemma Team 2024): sandwich norms, scores over sqrt(s = 2) not sqrt(d_h = 6),
    # a window of 2 < n on block 0 only (block 1 global), soft caps, RMSNorm, GeGLU
    _member("gemma2-like", n_blocks=2, d_head=6, norm="rmsnorm", positions="rope",
            mlp="geglu", post_norms=True, query_pre_attn_scalar=2, sliding_window=2,
            window_layers=(0,), attn_softcap=2.0, final_softcap=3.0, norm_eps=0.1),
    # Gemma 3 (Gemma Team 2025): Gemma 2's sandwich norms and scalar without soft caps, a
    # per-head QK-norm, a window of 2 on block 0 only with its own RoPE base 100 (unscaled),
    # block 1 global with the default base scaled linearly by 2 (the 4B+ releases' factor 8)
    _member("gemma3-like", n_blocks=2, d_head=6, norm="rmsnorm", positions="rope",
            mlp="geglu", post_norms=True, query_pre_attn_scalar=3, sliding_window=2,
            window_layers=(0,), qk_norm=True, rope_local_base=100,
            rope_scaling={"kind": "linear", "factor": 2.0}, embed_scale=True,
            tied_embeddings=True, norm_eps=0.1),
    # Granite (IBM 2024): embeddings times 3, sublayer outputs times 0.25, scores over
    # sqrt(s = 4) (attention_multiplier 1/2), logits over 2 (temperature); SwiGLU, GQA
    _member("granite-like", n_blocks=2, norm="rmsnorm", positions="rope", mlp="swiglu",
            n_kv_heads=1, embed_multiplier=3.0, residual_multiplier=0.25,
            query_pre_attn_scalar=4, temperature=2.0),
    # OLMo 2 (OLMo Team 2024): no pre-norms, a norm on each sublayer's output, QK-norm over
    # all heads at once (gains of h d_h = 8), GQA, SwiGLU, RoPE in the half pairing
    _member("olmo2-like", n_blocks=2, norm="rmsnorm", positions="rope", mlp="swiglu",
            n_kv_heads=1, d_head=4, rope_pairing="half", pre_norms=False, post_norms=True,
            qk_norm=True, qk_norm_joint=True, norm_eps=0.1),
    # OLMo (Groeneveld et al. 2024): LayerNorms with no learned gain or bias, SwiGLU, RoPE in
    # the half pairing, no biases, tied embeddings
    _member("olmo-like", n_blocks=2, positions="rope", mlp="swiglu", rope_pairing="half",
            norm_affine=False, tied_embeddings=True, norm_eps=0.1),
    # Cohere Command-R: one shared LayerNorm with gains and no bias before parallel attention
    # and MLP, interleaved RoPE, SwiGLU, tied embeddings, logits times 1/4 (temperature 4)
    _member("cohere-like", n_blocks=2, positions="rope", mlp="swiglu", parallel_residual=True,
            norm_bias=False, tied_embeddings=True, temperature=4.0, norm_eps=0.1),
    # Qwen2-MoE (Qwen team 2024): 4 SwiGLU experts of width 4 != d_mlp, top 2 of the softmax
    # unrenormalised, a shared expert of width 6 gated by sigmoid(x w_sg); block 0 dense
    # (mlp_only_layers), block 1 sparse; RMSNorm, RoPE
    _member("qwen2-moe-like", n_blocks=2, norm="rmsnorm", positions="rope", mlp="swiglu",
            n_experts=4, top_k=2, moe_renormalize=False, moe_intermediate_size=4,
            d_shared_expert=6, shared_expert_gate=True, moe_dense_layers=(0,)),
    # DeepSeek-V3's router (DeepSeek-AI 2024 §2.1.2): sigmoid affinities, 6 experts in 3
    # groups of 2, the best 2 groups kept, top 2 chosen by s + b, gates rho s / sum s with
    # rho = 2.5, ungated shared experts of width 5; block 1 sparse (first_k_dense_replace 1)
    _member("deepseek-v3-like", n_blocks=2, norm="rmsnorm", positions="rope", mlp="swiglu",
            n_experts=6, top_k=2, moe_router="sigmoid", n_group=3, topk_group=2,
            routed_scaling_factor=2.5, moe_intermediate_size=3, d_shared_expert=5,
            moe_dense_layers=(0,)),
    # DeepSeek-V2's router (DeepSeek-AI 2024 §2.2): softmax affinities, 6 experts in 3 groups
    # of 2 scored by their max, the best 2 groups kept, top 3 chosen, gates 2 s (never
    # renormalised), ungated shared experts of width 4; block 1 sparse
    _member("deepseek-v2-like", n_blocks=2, norm="rmsnorm", positions="rope", mlp="swiglu",
            n_experts=6, top_k=3, moe_router="softmax_group", n_group=3, topk_group=2,
            moe_renormalize=False, routed_scaling_factor=2.0, moe_intermediate_size=3,
            d_shared_expert=4, moe_dense_layers=(0,)),
    # an ungated shared expert under the softmax router, Mixtral's renormalised gates
    _member("moe-shared-ungated", mlp="swiglu", n_experts=3, top_k=2, d_shared_expert=4,
            d_mlp=6),
    # DeepSeek-V2/V3 (DeepSeek-AI 2024, §2.1): multi-head latent attention, a key-value
    # latent of 4 and a query latent of 6, heads of d_c = 2 + d_r = 4 rotated (interleaved,
    # one key shared by the heads) for scores, values of d_v = 3 != 6; RMSNorm, SwiGLU
    _member("mla", n_blocks=2, norm="rmsnorm", positions="rope", mlp="swiglu",
            kv_lora_rank=4, q_lora_rank=6, qk_nope_head_dim=2, qk_rope_head_dim=4,
            v_head_dim=3),
)
