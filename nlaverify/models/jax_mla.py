r"""Multi-head latent attention in the independent JAX model (DeepSeek-AI 2024, DeepSeek-V2
§2.1.2-2.1.3; Hugging Face ``DeepseekV3Attention``), written from the paper with
``jax.numpy`` and without the graph's ops: the scores are the sum of the two dot products,

.. math:: S_{i,t,s} = \frac{\langle q^C_{t,i}, k^C_{s,i}\rangle + \langle q^R_{t,i},
   k^R_s\rangle}{\sqrt{d_c + d_r}},

the shared rotated key broadcast to the heads (:func:`shared_key`; the graph joins the halves
and repeats the key). The joined query and key are recorded for the node-by-node comparison only.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from nlaverify.config import TransformerConfig
from nlaverify.models.jax_attention import Params, Record, _proj, _rms, _rope

__all__ = ["mla", "shared_key"]

#: Hugging Face ``DeepseekV3RMSNorm``'s default epsilon, which the latent norms keep
_LATENT_EPS = 1e-6


def _yarn_mscale(cfg: TransformerConfig) -> float:
    """DeepSeek's YaRN attention factor m = 0.1 mscale_all_dim ln(s) + 1 (1 without YaRN,
    for s <= 1 or without mscale_all_dim); the scores are multiplied by m^2."""
    sc = cfg.rope_scaling
    if sc is None or sc.kind != "yarn" or not sc.mscale_all_dim or sc.factor <= 1:
        return 1.0
    return 0.1 * sc.mscale_all_dim * math.log(sc.factor) + 1.0


def shared_key(k_rot: Any, heads: int) -> Any:
    r"""The rotated key every head reads: :math:`k^R` ``(n, d_r)`` broadcast to ``(heads, n,
    d_r)`` (DeepSeek-V2 eq. 17, one :math:`k^R_t` for all heads)."""
    return jnp.broadcast_to(k_rot, (heads, *k_rot.shape))


def mla(p: Params, name: str, x: Any, cfg: TransformerConfig, rec: Record) -> Any:
    r"""One MLA sublayer of ``x`` ``(n, d)`` (module docstring), recording ``{name}.q_a``,
    ``q_a_norm`` (with ``q_lora_rank``), ``q_nope``, ``q_pe``, ``c_kv``, ``kv_a_norm``,
    ``k_pe``, ``k_nope``, ``v``, ``q_rope`` ``(h, n, d_r)``, ``k_rope`` ``(1, n, d_r)``,
    ``q``, ``k`` ``(h, n, d_c + d_r)``, ``heads`` ``(h, n, d_v)``, ``out``."""
    n, H = x.shape[0], cfg.n_heads
    dc, dr, dv = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    cq = x
    if cfg.q_lora_rank is not None:
        rec[f"{name}.q_a"] = x @ p[f"{name}.q_a.W_DQ"]
        cq = rec[f"{name}.q_a_norm"] = _rms(rec[f"{name}.q_a"], p[f"{name}.q_a_norm.gamma"],
                                            _LATENT_EPS)
    qc = rec[f"{name}.q_nope"] = cq @ p[f"{name}.q_nope.W_UQ"]
    qr = rec[f"{name}.q_pe"] = cq @ p[f"{name}.q_pe.W_QR"]
    rec[f"{name}.c_kv"] = x @ p[f"{name}.c_kv.W_DKV"]
    c = rec[f"{name}.kv_a_norm"] = _rms(rec[f"{name}.c_kv"], p[f"{name}.kv_a_norm.gamma"],
                                        _LATENT_EPS)
    kr = rec[f"{name}.k_pe"] = x @ p[f"{name}.k_pe.W_KR"]
    kc = rec[f"{name}.k_nope"] = c @ p[f"{name}.k_nope.W_UK"]
    v = rec[f"{name}.v"] = c @ p[f"{name}.v.W_UV"]
    qc, qr, kc, v = (z.reshape(n, H, w) for z, w in ((qc, dc), (qr, dr), (kc, dc), (v, dv)))
    q_rot = _rope(qr.transpose(1, 0, 2), cfg)  # (H, n, d_r)
    k_rot = _rope(kr[None], cfg)[0]  # (n, d_r): one key for every head
    k_heads = shared_key(k_rot, H)
    s = (jnp.einsum("tic,sic->its", qc, kc) + jnp.einsum("itr,isr->its", q_rot, k_heads)) / \
        jnp.sqrt(dc + dr) * _yarn_mscale(cfg) ** 2
    if cfg.causal:
        s = jnp.where(jnp.tril(jnp.ones((n, n), dtype=bool)), s, -jnp.inf)
    a = jnp.einsum("its,siv->itv", jax.nn.softmax(s, axis=-1), v)
    rec[f"{name}.q_rope"], rec[f"{name}.k_rope"] = q_rot, k_rot[None]
    rec[f"{name}.q"] = jnp.concatenate([qc.transpose(1, 0, 2), q_rot], axis=-1)
    rec[f"{name}.k"] = jnp.concatenate([kc.transpose(1, 0, 2), k_heads], axis=-1)
    rec[f"{name}.heads"] = a
    rec[f"{name}.out"] = _proj(p, f"{name}.out", a.transpose(1, 0, 2).reshape(n, H * dv),
                               "W_O", "b_O", cfg.out_bias)
    return rec[f"{name}.out"]
