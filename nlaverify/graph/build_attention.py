"""The attention sublayer of :func:`nlaverify.graph.build.build_transformer`: projections,
QK-norms, RoPE (Gemma 3: each block's base), Gemma's query scalar, the shared key/value heads
of grouped-query attention, and the attention node of the configured variant (softmax with its
window and soft cap, the random-feature and projected variants with their constant inputs).
"""

from __future__ import annotations

import math
from typing import Any

from nlaverify.config import TransformerConfig
from nlaverify.config_mla import uses_mla
from nlaverify.graph.build_mla import mla_sublayer
from nlaverify.graph.core import add_input

__all__ = ["ATTENTION_OPS", "attention_sublayer"]


#: the op of each attention variant (:data:`nlaverify.config.ATTENTIONS`)
ATTENTION_OPS = {"softmax": "attention", "favor": "favor_attention",
                 "favor+": "favor_plus_attention", "elu1": "elu1_attention",
                 "efficient": "efficient_attention", "linformer": "linformer_attention"}


def attention_sublayer(b: Any, p: str, x: str, cfg: TransformerConfig, block: int) -> str:
    if uses_mla(cfg):  # DeepSeek-V2's multi-head latent attention (graph.build_mla)
        return mla_sublayer(b, p, x, cfg, block, _rope_static(cfg, block))
    H, Hkv, dh, d = cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.d_model
    assert Hkv is not None and dh is not None
    comp = "attention"
    q = b.project(f"{p}.q", x, d, H * dh, cfg.attn_bias, comp, block, "W_Q", "b_Q", "q")
    k = b.project(f"{p}.k", x, d, Hkv * dh, cfg.attn_bias, comp, block, "W_K", "b_K", "k")
    v = b.project(f"{p}.v", x, d, Hkv * dh, cfg.attn_bias, comp, block, "W_V", "b_V", "v")
    if cfg.qk_norm_joint:  # OLMo 2: one RMSNorm over all heads' queries (keys), then split
        q, k = (b.op(f"{p}.{name}_norm", "rmsnorm", [z, b.param(
            f"{p}.{name}_norm.gamma", (heads * dh,), "norms.qk", ("one_plus", 0.1), block)],
            ("n", heads * dh), eps=cfg.norm_eps) for name, z, heads in (("q", q, H),
                                                                         ("k", k, Hkv)))
    qh = b.op(f"{p}.q_heads", "split_heads", [q], (H, "n", dh), n_heads=H)
    kh = b.op(f"{p}.k_heads", "split_heads", [k], (Hkv, "n", dh), n_heads=Hkv)
    vh = b.op(f"{p}.v_heads", "split_heads", [v], (Hkv, "n", dh), n_heads=Hkv)
    if cfg.qk_norm and not cfg.qk_norm_joint:  # RMSNorm over each head's d_h (Qwen3)
        for name, heads in (("q", H), ("k", Hkv)):
            g = b.param(f"{p}.{name}_norm.gamma", (dh,), "norms.qk", ("one_plus", 0.1), block)
            node = b.op(f"{p}.{name}_norm", "rmsnorm", [qh if name == "q" else kh, g],
                        (heads, "n", dh), eps=cfg.norm_eps)
            qh, kh = (node, kh) if name == "q" else (qh, node)
    if cfg.positions == "rope":
        rope = _rope_static(cfg, block)
        if cfg.rotary_dim is not None and cfg.rotary_dim < dh:  # partial rotary
            rope["rotary_dim"] = cfg.rotary_dim
        qh = b.op(f"{p}.q_rope", "rope", [qh], (H, "n", dh), **rope)
        kh = b.op(f"{p}.k_rope", "rope", [kh], (Hkv, "n", dh), **rope)
    if cfg.query_pre_attn_scalar is not None:  # Gemma 2: scores qk^T / sqrt(s), not sqrt(d_h)
        qh = b.op(f"{p}.q_scaled", "scale", [qh], (H, "n", dh),
                  c=math.sqrt(dh / cfg.query_pre_attn_scalar))
    if cfg.n_rep > 1:
        kh = b.op(f"{p}.k_shared", "repeat_kv", [kh], (H, "n", dh), n_rep=cfg.n_rep)
        vh = b.op(f"{p}.v_shared", "repeat_kv", [vh], (H, "n", dh), n_rep=cfg.n_rep)
    o = _attention_heads(b, p, qh, kh, vh, cfg, block)
    om = b.op(f"{p}.merged", "merge_heads", [o], ("n", H * dh))
    return b.project(f"{p}.out", om, H * dh, d, cfg.out_bias, comp, block, "W_O", "b_O", "o")


def _rope_static(cfg: TransformerConfig, block: int) -> dict[str, Any]:
    """The statics of block ``block``'s ``rope`` nodes: the base and the frequency scaling
    (Gemma 3: the local blocks' own base, unscaled; :meth:`TransformerConfig.block_rope`),
    the pairing."""
    base, scaling = cfg.block_rope(block)
    rope: dict[str, Any] = {"base": base}
    if scaling is not None:
        rope["scaling"] = scaling
    if cfg.rope_pairing != "interleaved":  # GPT-NeoX's (x_i, x_{i+r/2})
        rope["layout"] = cfg.rope_pairing
    return rope


def _attention_heads(b: Any, p: str, qh: str, kh: str, vh: str, cfg: TransformerConfig,
                     block: int) -> str:
    """The attention node ``{p}.heads`` ``(H, n, d_h)`` of the configured variant, with its
    random features (constant inputs ``{p}.features.W`` / ``.b``, see :func:`feature_inputs`)
    or its Linformer projections (parameters ``{p}.linformer.E`` / ``.F``, ``(H, k,
    context)``)."""
    H, dh = cfg.n_heads, cfg.d_head
    op = ATTENTION_OPS[cfg.attention]
    shape = (H, "n", dh)
    if cfg.attention == "softmax":
        # Gemma 2: some blocks
        window = {"window": cfg.sliding_window} if cfg.windowed(block) else {}
        if cfg.attn_softcap is not None:  # Gemma 2: c tanh(S/c) on the scores, then the mask
            return b.op(f"{p}.heads", "softcap_attention", [qh, kh, vh], shape,
                        cap=cfg.attn_softcap, causal=cfg.causal, **window)
        return b.op(f"{p}.heads", op, [qh, kh, vh], shape, causal=cfg.causal, **window)
    if cfg.attention in ("efficient", "linformer"):
        extra = []
        if cfg.attention == "linformer":
            k = cfg.linformer_k
            extra = [b.param(f"{p}.linformer.{e}", (H, k, cfg.context), f"attention.{e}",
                             ("normal", k**-0.5), block) for e in ("E", "F")]
        return b.op(f"{p}.heads", op, [qh, kh, vh, *extra], shape)
    extra = []
    for key, value in cfg.feature_draws(block).items():
        extra.append(add_input(b.g, f"{p}.features.{key}", value.shape))
        b.g.nodes[extra[-1]].update(value=value, constant=True)
    return b.op(f"{p}.heads", op, [qh, kh, vh, *extra], shape, causal=cfg.causal)
