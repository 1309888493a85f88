"""The attention sublayer of the independent JAX model (:mod:`nlaverify.models.jax_transformer`),
written from the papers without the graph's ops: projections (LoRA merged), QK-norms, RoPE in
both pairings and partial, Gemma's query scalar and soft cap, windows, and the random-feature
and projected attention variants.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from nlaverify.config import TransformerConfig

jax.config.update("jax_enable_x64", True)

Params = Mapping[str, Any]
Record = dict[str, Any]

__all__ = ["_attention", "_proj", "_rms", "_rope", "_softcap"]


def _proj(p: Params, name: str, x: Any, w: str, b: str, bias: bool,
          lora: tuple[str, TransformerConfig] | None = None) -> Any:
    """x W (+ b); LoRA ``(target, cfg)``: x (W + (alpha/r) A B) (+ b), merged (unlike the graph)."""
    W = p[f"{name}.{w}"]
    if lora is not None and lora[1].lora_rank and lora[0] in lora[1].lora_targets:
        cfg = lora[1]
        alpha = cfg.lora_rank if cfg.lora_alpha is None else cfg.lora_alpha
        W = W + (alpha / cfg.lora_rank) * (p[f"{name}.lora_A"] @ p[f"{name}.lora_B"])
    y = x @ W
    return y + p[f"{name}.{b}"] if bias else y


def _rms(x: Any, gamma: Any, eps: float) -> Any:
    return gamma * x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)


def _frequencies(dh: int, cfg: TransformerConfig, local: bool = False) -> Any:
    """theta_i = base^(-2i/d_h), rescaled as Llama-3.1's released code does it: by wavelength
    bands, with jnp.where (the ops decide each band in Python). ``local``: a windowed block of
    Gemma 3, whose RoPE has its own base and no scaling (``rope_local_base``)."""
    if local and cfg.rope_local_base is not None:
        return float(cfg.rope_local_base) ** (-jnp.arange(0, dh, 2) / dh)
    theta = cfg.rope_base ** (-jnp.arange(0, dh, 2) / dh)
    sc = cfg.rope_scaling
    if sc is None:
        return theta
    if sc.kind == "linear":
        return theta / sc.factor
    if sc.kind == "yarn":  # DeepSeek's yarn_find_correction_range and linear_ramp_mask
        # the ramp's ends: where theta_i turns beta times over the original context (static)
        bound = [dh * math.log(sc.original_context / (beta * 2 * math.pi)) / (2 * math.log(
            cfg.rope_base)) for beta in (sc.beta_fast, sc.beta_slow)]
        lo, hi = max(math.floor(bound[0]), 0), min(math.ceil(bound[1]), dh - 1)
        hi = hi + 0.001 if hi == lo else hi
        mask = jnp.clip((jnp.arange(dh // 2) - lo) / (hi - lo), 0.0, 1.0)
        return theta / sc.factor * mask + theta * (1.0 - mask)
    wavelength = 2 * jnp.pi / theta
    smooth = (sc.original_context / wavelength - sc.low_freq_factor) / (
        sc.high_freq_factor - sc.low_freq_factor)
    blended = (1 - smooth) * theta / sc.factor + smooth * theta
    scaled = jnp.where(wavelength > sc.original_context / sc.low_freq_factor,
                       theta / sc.factor, blended)
    return jnp.where(wavelength < sc.original_context / sc.high_freq_factor, theta, scaled)


def _rope(x: Any, cfg: TransformerConfig, local: bool = False) -> Any:
    """Rotate coordinate pairs of row t by t*theta_i: complex multiplication. The pairs are
    (2i, 2i+1) (``rope_pairing="interleaved"``) or (i, i + r/2) (``"half"``) of the first
    r = ``rotary_dim`` coordinates (theta_i = base^(-2i/r)); the others pass unchanged.
    ``local``: the block attends through the window (Gemma 3's local base)."""
    h, n, dh = x.shape
    r = dh if cfg.rotary_dim is None else cfg.rotary_dim
    rot, rest = x[..., :r], x[..., r:]
    theta = _frequencies(r, cfg, local)
    phase = jnp.exp(1j * jnp.arange(n)[:, None] * theta[None, :])
    if cfg.rope_pairing == "half":
        z = (rot[..., : r // 2] + 1j * rot[..., r // 2:]) * phase
        rot = jnp.concatenate([z.real, z.imag], axis=-1)
    else:
        z = (rot[..., 0::2] + 1j * rot[..., 1::2]) * phase
        rot = jnp.stack([z.real, z.imag], axis=-1).reshape(h, n, r)
    return jnp.concatenate([rot, rest], axis=-1)


def _softcap(z: Any, c: float) -> Any:
    r"""Gemma 2's soft cap :math:`c\tanh(z/c)`, written as :math:`c(2\sigma(2z/c) - 1)`
    (the logistic form of tanh, not the ops' ``tanh``; Gemma Team 2024 §2)."""
    return c * (2.0 * jax.nn.sigmoid(2.0 * z / c) - 1.0)


def _kernel_rows(A: Any, v: Any, causal: bool) -> Any:
    """Row-normalised kernel attention from the full ``(h, n, n)`` matrix ``A`` (the
    quadratic form, masked by ``jnp.tril``): ``(A V) / (A 1)``."""
    if causal:
        A = A * jnp.tril(jnp.ones(A.shape[-2:]))
    return jnp.einsum("hij,hjd->hid", A, v) / jnp.sum(A, axis=-1, keepdims=True)


def _other_attention(p: Params, name: str, q: Any, k: Any, v: Any, cfg: TransformerConfig,
                     layer: int, draw: int) -> Any:
    r"""The attention variants of Baggag & Saad §4.3-4.4, each as its quadratic form (an
    explicit :math:`n \times n` matrix), not the linear order of the ops:

    * FAVOR: :math:`\hat A_{ij} = e^{\|\tilde q_i\|^2/2}\, \phi(\tilde q_i)^\top
      \phi(\tilde k_j)\, e^{\|\tilde k_j\|^2/2}`, :math:`\phi(x) = \sqrt{2/m}\cos(W x +
      b)`, :math:`\tilde x = x/d^{1/4}`;
    * FAVOR+: :math:`\hat A_{ij} = \phi(\tilde q_i)^\top \phi(\tilde k_j)`,
      :math:`\phi(x) = e^{W x - \|x\|^2/2}/\sqrt m` (no stabiliser: it cancels);
    * elu+1: :math:`A_{ij} = \phi(q_i)^\top \phi(k_j)`, :math:`\phi = \operatorname{elu}
      + 1`;
    * efficient (Shen et al.): :math:`\operatorname{softmax}_{rows}(Q)
      \operatorname{softmax}_{cols}(K)^\top V`;
    * Linformer: :math:`\operatorname{softmax}(Q (E K)^\top/\sqrt d)(F V)`.

    Random features: ``cfg.feature_draws(layer, draw)``, one matrix per head.
    """
    dh = q.shape[-1]
    if cfg.attention == "efficient":
        A = jnp.einsum("hid,hjd->hij", jax.nn.softmax(q, axis=-1), jax.nn.softmax(k, axis=-2))
        return jnp.einsum("hij,hjd->hid", A, v)
    if cfg.attention == "linformer":
        E, F = p[f"{name}.linformer.E"], p[f"{name}.linformer.F"]
        # a sequence shorter than the projections' length is zero-padded to it
        pad = ((0, 0), (0, E.shape[-1] - k.shape[-2]), (0, 0))
        k, v = jnp.pad(k, pad), jnp.pad(v, pad)
        s = jnp.einsum("hid,hkd->hik", q, jnp.einsum("hkn,hnd->hkd", E, k)) / jnp.sqrt(dh)
        return jnp.einsum("hik,hkd->hid", jax.nn.softmax(s, axis=-1),
                          jnp.einsum("hkn,hnd->hkd", F, v))
    if cfg.attention == "elu1":
        fq, fk = jax.nn.elu(q) + 1.0, jax.nn.elu(k) + 1.0
        return _kernel_rows(jnp.einsum("him,hjm->hij", fq, fk), v, cfg.causal)
    draws = {key: jnp.asarray(val) for key, val in cfg.feature_draws(layer, draw).items()}
    W = draws["W"]
    m = W.shape[-2]
    qs, ks = q / dh**0.25, k / dh**0.25
    if cfg.attention == "favor+":
        def phi(x: Any) -> Any:
            return jnp.exp(jnp.einsum("hnd,hmd->hnm", x, W)
                           - 0.5 * jnp.sum(x**2, axis=-1, keepdims=True)) / jnp.sqrt(m)
        return _kernel_rows(jnp.einsum("him,hjm->hij", phi(qs), phi(ks)), v, cfg.causal)

    def trig(x: Any) -> Any:
        return jnp.sqrt(2.0 / m) * jnp.cos(jnp.einsum("hnd,hmd->hnm", x, W)
                                           + draws["b"][:, None, :])

    def scale(x: Any) -> Any:
        return jnp.exp(0.5 * jnp.sum(x**2, axis=-1))

    A = scale(qs)[:, :, None] * jnp.einsum("him,hjm->hij", trig(qs), trig(ks)) \
        * scale(ks)[:, None, :]
    return _kernel_rows(A, v, cfg.causal)


def _attention(p: Params, name: str, x: Any, cfg: TransformerConfig, rec: Record,
               layer: int = 0, draw: int = 0) -> Any:
    n = x.shape[0]
    H, Hkv, dh = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
    rec[f"{name}.q"] = _proj(p, f"{name}.q", x, "W_Q", "b_Q", cfg.attn_bias, ("q", cfg))
    rec[f"{name}.k"] = _proj(p, f"{name}.k", x, "W_K", "b_K", cfg.attn_bias, ("k", cfg))
    rec[f"{name}.v"] = _proj(p, f"{name}.v", x, "W_V", "b_V", cfg.attn_bias, ("v", cfg))
    qr, kr = rec[f"{name}.q"], rec[f"{name}.k"]
    if cfg.qk_norm_joint:  # OLMo 2: the whole projection's row normalised, then the heads
        qr = rec[f"{name}.q_norm"] = _rms(qr, p[f"{name}.q_norm.gamma"], cfg.norm_eps)
        kr = rec[f"{name}.k_norm"] = _rms(kr, p[f"{name}.k_norm.gamma"], cfg.norm_eps)
    q = qr.reshape(n, H, dh).transpose(1, 0, 2)
    k = kr.reshape(n, Hkv, dh).transpose(1, 0, 2)
    v = rec[f"{name}.v"].reshape(n, Hkv, dh).transpose(1, 0, 2)
    if cfg.qk_norm and not cfg.qk_norm_joint:
        q = rec[f"{name}.q_norm"] = _rms(q, p[f"{name}.q_norm.gamma"], cfg.norm_eps)
        k = rec[f"{name}.k_norm"] = _rms(k, p[f"{name}.k_norm.gamma"], cfg.norm_eps)
    # the blocks that see only the last sliding_window keys (Gemma 2 and 3: local layers)
    local = cfg.sliding_window is not None and (cfg.window_layers is None
                                                 or layer in cfg.window_layers)
    if cfg.positions == "rope":
        q, k = _rope(q, cfg, local), _rope(k, cfg, local)
        rec[f"{name}.q_rope"], rec[f"{name}.k_rope"] = q, k
    if cfg.n_rep > 1:
        k, v = jnp.repeat(k, cfg.n_rep, axis=0), jnp.repeat(v, cfg.n_rep, axis=0)
        rec[f"{name}.k_shared"], rec[f"{name}.v_shared"] = k, v
    if cfg.attention == "softmax":
        # Gemma 2 divides the scores by sqrt(query_pre_attn_scalar), here in one step
        s = jnp.einsum("hid,hjd->hij", q, k) * (
            dh if cfg.query_pre_attn_scalar is None else cfg.query_pre_attn_scalar) ** -0.5
        if cfg.attn_softcap is not None:  # Gemma 2: capped before the mask
            s = _softcap(s, cfg.attn_softcap)
        if cfg.causal:
            seen = jnp.tril(jnp.ones((n, n), dtype=bool))
            if local:
                # the last w positions: a band of the triangle (Gemma 2: on some layers)
                seen = seen & ~jnp.tril(seen, -cfg.sliding_window)
            s = jnp.where(seen, s, -jnp.inf)
        a = jnp.einsum("hij,hjd->hid", jax.nn.softmax(s, axis=-1), v)
    else:
        a = _other_attention(p, name, q, k, v, cfg, layer, draw)
    rec[f"{name}.heads"] = a
    rec[f"{name}.out"] = _proj(p, f"{name}.out", a.transpose(1, 0, 2).reshape(n, H * dh),
                               "W_O", "b_O", cfg.out_bias, ("o", cfg))
    return rec[f"{name}.out"]
