r"""Multi-head latent attention as graph nodes (DeepSeek-AI 2024, DeepSeek-V2 §2.1.2-2.1.3;
Hugging Face ``DeepseekV3Attention``), the attention sublayer of a config with
``kv_lora_rank`` :math:`r > 0` (:mod:`nlaverify.config_mla`), from proved ops only.

With :math:`h` heads, :math:`d_c` = ``qk_nope_head_dim``, :math:`d_r` =
``qk_rope_head_dim``, :math:`d_v` = ``v_head_dim``:

.. math:: c^{KV} = \operatorname{RMSNorm}(x W^{DKV}),\quad k^R = \operatorname{RoPE}(x W^{KR}),
   \quad k^C_i = c^{KV} W^{UK}_i,\quad v_i = c^{KV} W^{UV}_i,

.. math:: c^Q = \operatorname{RMSNorm}(x W^{DQ}),\quad q^C_i = c^Q W^{UQ}_i,\quad q^R_i =
   \operatorname{RoPE}(c^Q W^{QR}_i),\quad o_i = \operatorname{softmax}\Bigl(\frac{[q^C_i;
   q^R_i][k^C_i; k^R]^\top}{\sqrt{d_c + d_r}} + M\Bigr) v_i,

:math:`y = [o_1, \dots, o_h] W^O` (:math:`c^Q = x` without ``q_lora_rank``). Hugging Face's
joint projections are split by output here, each part its own ``linear`` node (the split of a
projection's columns is a partition of its weight, :mod:`nlaverify.interop.weights_layout_mla`):
``kv_a_proj_with_mqa`` is :math:`[W^{DKV} \mid W^{KR}]`, ``kv_b_proj`` holds head by head
:math:`[W^{UK}_i \mid W^{UV}_i]`, ``q_b_proj`` (or ``q_proj``) :math:`[W^{UQ}_i \mid
W^{QR}_i]`. The shared key is one head (``split_heads`` with one head) repeated to all
(``repeat_kv``), joined to each head's own part by ``concat_last``
(:mod:`nlaverify.ops.concat`); the attention op's default scale :math:`1/\sqrt{d_k}` is
:math:`1/\sqrt{d_c + d_r}` of the joined key (times :math:`m^2` under YaRN,
:func:`~nlaverify.config_mla.mla_score_scale`), and its value width :math:`d_v` may differ.
Identity ``mla_graph_equals_absorbed`` proves this path equal to
:func:`nlaverify.ops.mla.mla_attention_absorbed` on the same weights.
"""

from __future__ import annotations

from typing import Any

from nlaverify.config import TransformerConfig
from nlaverify.config_mla import MLA_NORM_EPS, mla_score_scale

__all__ = ["mla_sublayer"]


def mla_sublayer(b: Any, p: str, x: str, cfg: TransformerConfig, block: int,
                 rope: dict[str, Any]) -> str:
    r"""The nodes of one MLA sublayer under ``p`` (module docstring), reading ``x``
    ``(n, d)``: ``q_a``, ``q_a_norm`` (with ``q_lora_rank``), ``q_nope``, ``q_pe``,
    ``c_kv``, ``k_pe``, ``kv_a_norm``, ``k_nope``, ``v`` (projections, ``(n, \cdot)``); the
    heads ``q_nope_heads``, ``q_pe_heads``, ``k_nope_heads``, ``v_heads`` ``(h, n,
    \cdot)``, ``k_pe_heads`` ``(1, n, d_r)``; ``q_rope``, ``k_rope`` (RoPE with ``rope``'s
    statics), ``k_shared`` ``(h, n, d_r)``; ``q``, ``k`` ``(h, n, d_c + d_r)``; ``heads``
    ``(h, n, d_v)``, ``merged``, ``out``."""
    H, d = cfg.n_heads, cfg.d_model
    dc, dr, dv, r, rq = (cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim,
                         cfg.kv_lora_rank, cfg.q_lora_rank)
    assert dc is not None and dr is not None and dv is not None
    comp = "attention"

    def gain(name: str, z: str, width: int) -> str:
        g = b.param(f"{p}.{name}.gamma", (width,), "norms.mla", ("one_plus", 0.1), block)
        return b.op(f"{p}.{name}", "rmsnorm", [z, g], ("n", width), eps=MLA_NORM_EPS)

    cq, dq = x, d
    if rq is not None:  # DeepSeek-V2 eq. 12: c^Q = x W^{DQ}, normalised (q_a_layernorm)
        cq = gain("q_a_norm", b.project(f"{p}.q_a", x, d, rq, False, comp, block, "W_DQ"), rq)
        dq = rq
    qc = b.project(f"{p}.q_nope", cq, dq, H * dc, False, comp, block, "W_UQ")
    qr = b.project(f"{p}.q_pe", cq, dq, H * dr, False, comp, block, "W_QR")
    ckv = gain("kv_a_norm", b.project(f"{p}.c_kv", x, d, r, False, comp, block, "W_DKV"), r)
    kr = b.project(f"{p}.k_pe", x, d, dr, False, comp, block, "W_KR")
    kc = b.project(f"{p}.k_nope", ckv, r, H * dc, False, comp, block, "W_UK")
    v = b.project(f"{p}.v", ckv, r, H * dv, False, comp, block, "W_UV")
    heads = {name: b.op(f"{p}.{name}_heads", "split_heads", [z], (H, "n", w), n_heads=H)
             for name, z, w in (("q_nope", qc, dc), ("q_pe", qr, dr), ("k_nope", kc, dc),
                                ("v", v, dv))}
    kh = b.op(f"{p}.k_pe_heads", "split_heads", [kr], (1, "n", dr), n_heads=1)
    qrot = b.op(f"{p}.q_rope", "rope", [heads["q_pe"]], (H, "n", dr), **rope)
    krot = b.op(f"{p}.k_rope", "rope", [kh], (1, "n", dr), **rope)
    if H > 1:  # DeepSeek-V2 eq. 17: one rotated key k^R_t for every head
        krot = b.op(f"{p}.k_shared", "repeat_kv", [krot], (H, "n", dr), n_rep=H)
    q = b.op(f"{p}.q", "concat_last", [heads["q_nope"], qrot], (H, "n", dc + dr))
    k = b.op(f"{p}.k", "concat_last", [heads["k_nope"], krot], (H, "n", dc + dr))
    scale = mla_score_scale(cfg)  # YaRN's m^2 / sqrt(d_c + d_r), else the op's default
    o = b.op(f"{p}.heads", "attention", [q, k, heads["v"]], (H, "n", dv), causal=cfg.causal,
             **({} if scale is None else {"scale": scale}))
    om = b.op(f"{p}.merged", "merge_heads", [o], ("n", H * dv))
    return b.project(f"{p}.out", om, H * dv, d, cfg.out_bias, comp, block, "W_O", "b_O", "o")
