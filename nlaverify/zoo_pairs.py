"""The field-effect pairs of the zoo (:mod:`nlaverify.zoo`): for every field of
:class:`~nlaverify.config.TransformerConfig`, zoo members and another value of that field,
so that :func:`nlaverify.zoo.field_effect` sees each field change the model. A table only
(member names, values); kept apart so that :mod:`nlaverify.zoo` stays readable.
"""

from __future__ import annotations

from typing import Any

#: For each field, ``(zoo member, other value)`` pairs: the member and its copy with that
#: one field changed must differ by far more than the tolerance (:func:`field_effect`).
#: ``context`` acts on a forward pass only as the cap on the sequence length.
EFFECT_PAIRS: dict[str, tuple[tuple[str, Any], ...]] = {
    "vocab_size": (("moe-gelu-top1-tied", 11),),
    "d_model": (("moe-relu-top2", 16),),
    "n_heads": (("gqa-rope-swiglu", 2),),
    "n_blocks": (("post-layernorm", 1),),
    "d_mlp": (("moe-relu-top2", 12),),
    "n_kv_heads": (("gqa-rope-swiglu", 4),),
    "d_head": (("gqa-rope-swiglu", 2),),
    "norm": (("gqa-rope-swiglu", "layernorm"),),
    "placement": (("post-layernorm", "pre"),),
    "positions": (("gqa-rope-swiglu", "learned"), ("moe-gelu-top1-tied", "learned"),
                  ("post-rmsnorm-bidirectional", "learned")),
    "context": (("post-rmsnorm-bidirectional", 8),),
    "mlp": (("gqa-rope-swiglu", "gelu"), ("post-rmsnorm-bidirectional", "gelu"),
            ("rope-scaled-window-qknorm", "gelu"), ("gemma-like", "swiglu")),
    "n_experts": (("moe-relu-top2", 0),),
    "top_k": (("moe-relu-top2", 1),),
    "moe_router": (("moe-shared-ungated", "sigmoid"), ("deepseek-v2-like", "sigmoid")),
    "moe_intermediate_size": (("qwen2-moe-like", None),),
    "d_shared_expert": (("moe-shared-ungated", 0),),
    "shared_expert_gate": (("moe-shared-ungated", True),),
    "routed_scaling_factor": (("deepseek-v3-like", 1.0),),
    "n_group": (("deepseek-v3-like", 2),  # 2 groups of 3, both kept: plain top-k
                ("deepseek-v2-like", 2)),  # V2's max-scored groups: both kept, plain top-k
    "topk_group": (("deepseek-v3-like", 3),),
    "moe_dense_layers": (("qwen2-moe-like", ()), ("deepseek-v3-like", (1,))),
    "attn_bias": (("moe-relu-top2", False),),
    "mlp_bias": (("post-layernorm", False),),
    "tied_embeddings": (("moe-gelu-top1-tied", False),),
    "final_norm": (("moe-gelu-top1-tied", True),),
    "causal": (("post-rmsnorm-bidirectional", True),),
    "temperature": (("moe-gelu-top1-tied", 1.0),),
    "norm_eps": (("post-layernorm", 1e-5),),
    "rope_base": (("gqa-rope-swiglu", 10000),),
    "attention": (("favor-plus-iid", "softmax"), ("linformer-k3", "efficient")),
    "random_features": (("favor-plus-iid", 16),),
    "feature_seed": (("favor-plus-iid", 0),),
    "orthogonal_features": (("favor-plus-iid", True),),
    "linformer_k": (("linformer-k3", 4),),
    "rope_scaling": (("rope-scaled-window-qknorm", None),),
    "sliding_window": (("rope-scaled-window-qknorm", None),),
    "qk_norm": (("rope-scaled-window-qknorm", False),),
    "attn_out_bias": (("rope-scaled-window-qknorm", True),),
    "moe_renormalize": (("moe-swiglu-gqa", True),),
    "embed_scale": (("gemma-like", False),),
    "lora_rank": (("lora-r2-all", 0),),
    "lora_alpha": (("lora-r2-all", None),),
    "lora_targets": (("lora-r2-all", ("q", "v")),),
    "mixer": (("mamba-rmsnorm", "attention"), ("hybrid-mamba-attention",
                                               ("attention", "mamba")),
              ("rwkv", "attention"), ("hybrid-rwkv-attention", ("rwkv", "attention")),
              ("mamba2", "mamba"), ("hybrid-mamba2-attention", ("mamba2", "attention"))),
    "ssm_state": (("mamba-rmsnorm", 5),),
    "ssm_conv": (("mamba-rmsnorm", 1),),
    "ssm_expand": (("mamba-rmsnorm", 1),),
    "ssm_dt_rank": (("mamba-rmsnorm", None),),
    "ssm_heads": (("mamba2", 2),),
    "ssm_groups": (("mamba2", 1),),
    "rwkv_attention_size": (("rwkv", None),),
    "attn_softcap": (("softcap-rmsnorm", None),),
    "final_softcap": (("softcap-rmsnorm", None),),
    "parallel_residual": (("parallel-neox", False),),
    "parallel_norms": (("parallel-neox", 1),),  # GPT-J's one shared norm
    "rotary_dim": (("partial-rotary-half", None),),  # the whole head rotated
    "rope_pairing": (("partial-rotary-half", "interleaved"),),  # GPT-J's pairs
    "unembed_bias": (("gptj-like", False),),
    "post_norms": (("gemma2-like", False),),
    "query_pre_attn_scalar": (("gemma2-like", None),),
    "window_layers": (("gemma2-like", (1,)), ("gemma2-like", None)),
    # Gemma 3: the local blocks on the global base, and the local base moved
    "rope_local_base": (("gemma3-like", None), ("gemma3-like", 7)),
    # the graphs draw the table first after W_E, so offset 0's table is the first rows of
    # offset 2's: the same table, other rows read
    "position_offset": (("post-layernorm", 0),),
    "embed_multiplier": (("granite-like", None),),
    "residual_multiplier": (("granite-like", None), ("granite-like", 1.5)),
    "pre_norms": (("olmo2-like", True),),
    "qk_norm_joint": (("olmo2-like", False),),
    "kv_lora_rank": (("mla", 2),),
    "q_lora_rank": (("mla", None),),  # full-rank queries (DeepSeek-V2-Lite's q_proj)
    "qk_nope_head_dim": (("mla", 1),),
    "qk_rope_head_dim": (("mla", 2),),
    "v_head_dim": (("mla", 6),),
    "norm_affine": (("olmo-like", True),),
    "norm_bias": (("cohere-like", True),),
}
