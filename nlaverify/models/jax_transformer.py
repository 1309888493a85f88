"""An independent decoder-only Transformer in JAX: the oracle of the whole pipeline.

Written from the equations of Baggag & Saad §3.2-3.13 and Baptista, Stuart & Tran
§5 with ``jax.numpy`` and ``jax.nn`` only: it imports nothing from
:mod:`nlaverify.ops` or :mod:`nlaverify.graph`, and its gradient is ``jax.grad``.
Parameters use the graph's node names (``blocks.{l}.attn.q.W_Q`` ...), so the
same dictionary feeds both. Formulations deliberately differ from the ops where
the mathematics allows: RoPE by complex multiplication, GQA by ``jnp.repeat``,
top-k routing by ``jax.lax.top_k``, cross-entropy by ``jax.nn.log_softmax``, Mamba's block
by ``jax.lax.conv_general_dilated`` and ``jax.lax.scan`` (:mod:`.jax_mamba`), and the
linearized attentions (FAVOR, FAVOR+, elu+1, Shen, Linformer; Baggag & Saad §4.3-4.4) as
explicit ``n x n`` quadratic forms where the ops use the linear order and prefix
sums. The random features are the config's own draws
(:meth:`~nlaverify.config.TransformerConfig.feature_draws`), the graph's fixed inputs.

One traversal, :func:`intermediates`, computes the model and records the residual
stream and the sublayer outputs under the names of the graph nodes holding the same
values (see its docstring); :func:`logits` and :func:`loss` are built on it, so a
disagreement with the graph can be traced to the first node where the two part.
Tokens are one sequence ``(n,)`` or a batch ``(B, n)`` (mapped with ``jax.vmap``);
a target equal to :data:`IGNORE_INDEX` marks a position without a target.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from nlaverify.config import NO_MLP, TransformerConfig
from nlaverify.models.decode_loop import recurrent_step, unembed
from nlaverify.models.jax_mamba import mamba_mixer, mamba_state, mamba_step
from nlaverify.models.jax_mamba2 import graph_mamba2_mixer
from nlaverify.models.jax_rwkv import graph_channel_mix, graph_time_mix

jax.config.update("jax_enable_x64", True)

Params = Mapping[str, Any]
Record = dict[str, Any]

#: a target with this value contributes nothing to the loss (PyTorch's convention)
IGNORE_INDEX = -100


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


def _norm(p: Params, name: str, x: Any, cfg: TransformerConfig) -> Any:
    # no learned gain (OLMo) or bias (Cohere): 1 and 0
    g = p[f"{name}.gamma"] if cfg.norm_affine else 1.0
    if cfg.norm == "rmsnorm":
        return g * x / jnp.sqrt(jnp.mean(x**2, axis=-1, keepdims=True) + cfg.norm_eps)
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    beta = p[f"{name}.beta"] if cfg.norm_affine and cfg.norm_bias else 0.0
    return g * (x - mu) / jnp.sqrt(var + cfg.norm_eps) + beta


def _frequencies(dh: int, cfg: TransformerConfig) -> Any:
    """theta_i = base^(-2i/d_h), rescaled as Llama-3.1's released code does it: by wavelength
    bands, with jnp.where (the ops decide each band in Python)."""
    theta = cfg.rope_base ** (-jnp.arange(0, dh, 2) / dh)
    sc = cfg.rope_scaling
    if sc is None:
        return theta
    if sc.kind == "linear":
        return theta / sc.factor
    wavelength = 2 * jnp.pi / theta
    smooth = (sc.original_context / wavelength - sc.low_freq_factor) / (
        sc.high_freq_factor - sc.low_freq_factor)
    blended = (1 - smooth) * theta / sc.factor + smooth * theta
    scaled = jnp.where(wavelength > sc.original_context / sc.low_freq_factor,
                       theta / sc.factor, blended)
    return jnp.where(wavelength < sc.original_context / sc.high_freq_factor, theta, scaled)


def _rope(x: Any, cfg: TransformerConfig) -> Any:
    """Rotate coordinate pairs of row t by t*theta_i: complex multiplication. The pairs are
    (2i, 2i+1) (``rope_pairing="interleaved"``) or (i, i + r/2) (``"half"``) of the first
    r = ``rotary_dim`` coordinates (theta_i = base^(-2i/r)); the others pass unchanged."""
    h, n, dh = x.shape
    r = dh if cfg.rotary_dim is None else cfg.rotary_dim
    rot, rest = x[..., :r], x[..., r:]
    theta = _frequencies(r, cfg)
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
    if cfg.positions == "rope":
        q, k = _rope(q, cfg), _rope(k, cfg)
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
            if cfg.sliding_window is not None and (
                    cfg.window_layers is None or layer in cfg.window_layers):
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


def _act(cfg: TransformerConfig, u: Any) -> Any:
    if cfg.mlp in ("gelu", "geglu"):
        return jax.nn.gelu(u, approximate=True)
    if cfg.mlp == "gelu_erf":
        return jax.nn.gelu(u, approximate=False)
    return jax.nn.silu(u) if cfg.mlp == "swiglu" else jax.nn.relu(u)


def _rms(x: Any, gamma: Any, eps: float) -> Any:
    return gamma * x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)


def _mlp(p: Params, name: str, x: Any, cfg: TransformerConfig, rec: Record) -> Any:
    if cfg.n_experts:
        scores = x @ p[f"{name}.W_router"]
        rec[f"{name}.scores"] = scores
        top_vals, top_idx = jax.lax.top_k(scores, cfg.top_k)
        if cfg.moe_renormalize:                                         # (n, k)
            gates_k = jax.nn.softmax(top_vals, axis=-1)
        else:
            gates_k = jnp.take_along_axis(jax.nn.softmax(scores, axis=-1), top_idx, axis=-1)
        gates = jnp.zeros_like(scores).at[jnp.arange(x.shape[0])[:, None], top_idx].set(gates_k)
        if cfg.mlp == "swiglu":
            h = jax.nn.silu(jnp.einsum("nd,edm->enm", x, p[f"{name}.W1"])) * jnp.einsum(
                "nd,edm->enm", x, p[f"{name}.W3"])
            y = jnp.einsum("enm,emd->end", h, p[f"{name}.W2"])
        else:
            h = _act(cfg, jnp.einsum("nd,edm->enm", x, p[f"{name}.W_in"]))
            y = jnp.einsum("enm,emd->end", h, p[f"{name}.W_out"])
        rec[f"{name}.out"] = jnp.einsum("ne,end->nd", gates, y)
        return rec[f"{name}.out"]
    if cfg.mlp in ("swiglu", "geglu"):
        g = _proj(p, f"{name}.gate", x, "W_gate", "b_gate", cfg.mlp_bias, ("mlp", cfg))
        u = _proj(p, f"{name}.up", x, "W_up", "b_up", cfg.mlp_bias, ("mlp", cfg))
        rec[f"{name}.gate"], rec[f"{name}.up"], rec[f"{name}.act"] = g, u, _act(cfg, g) * u
        rec[f"{name}.out"] = _proj(p, f"{name}.out", rec[f"{name}.act"], "W_down", "b_down",
                                   cfg.mlp_bias, ("mlp", cfg))
        return rec[f"{name}.out"]
    rec[f"{name}.in"] = _proj(p, f"{name}.in", x, "W_in", "b_in", cfg.mlp_bias, ("mlp", cfg))
    rec[f"{name}.act"] = _act(cfg, rec[f"{name}.in"])
    rec[f"{name}.out"] = _proj(p, f"{name}.out", rec[f"{name}.act"], "W_out", "b_out",
                               cfg.mlp_bias, ("mlp", cfg))
    return rec[f"{name}.out"]


def _mix(p: Params, b: str, x: Any, cfg: TransformerConfig, rec: Record, layer: int,
         draw: int) -> Any:
    """Block ``b``'s mixer: attention, Mamba's, RWKV's or Mamba-2's (its scan's dual form)."""
    m = cfg.block_mixer(layer)
    if m != "attention":
        return {"mamba": mamba_mixer, "mamba2": graph_mamba2_mixer, "rwkv": lambda *a: (
            graph_time_mix(*a[:3], a[4]))}[m](p, f"{b}.{m}", x, cfg, rec)
    return _attention(p, f"{b}.attn", x, cfg, rec, layer, draw)


def _sinusoidal(n: int, d: int) -> Any:
    pos = jnp.arange(n)[:, None]
    i = jnp.arange(d)[None, :]
    angle = pos / 10000.0 ** ((i - i % 2) / d)
    return jnp.where(i % 2 == 0, jnp.sin(angle), jnp.cos(angle))


def _sequence(params: Params, tokens: Any, cfg: TransformerConfig, draw: int = 0) -> Record:
    """The model on one sequence ``(n,)``, recording its intermediates."""
    rec: Record = {}
    n = tokens.shape[0]
    x = rec["embed"] = params["embed.W_E"][tokens]
    if cfg.embed_scale:
        x = rec["embed_scaled"] = x * jnp.sqrt(jnp.asarray(cfg.d_model, dtype=x.dtype))
    elif cfg.embed_multiplier is not None:  # Granite
        x = rec["embed_scaled"] = cfg.embed_multiplier * x
    if cfg.positions == "learned":
        x = x + params["pos.W_P"][:n]
    elif cfg.positions == "sinusoidal":
        x = x + _sinusoidal(n, cfg.d_model)
    rec["x0"] = x
    for layer in range(cfg.n_blocks):
        b = f"blocks.{layer}"
        if cfg.parallel_residual:  # x + Attn(N1(x)) + MLP(N(x)): the block's input, twice
            h = rec[f"{b}.norm1"] = _norm(params, f"{b}.norm1", x, cfg)
            if cfg.parallel_norms == 2:
                h = rec[f"{b}.norm2"] = _norm(params, f"{b}.norm2", x, cfg)
            m = _mlp(params, f"{b}.mlp", h, cfg, rec)
            a = _mix(params, b, rec[f"{b}.norm1"], cfg, rec, layer, draw)
            rec[f"{b}.resid1"] = x + a
            x = rec[f"{b}.resid2"] = x + (a + m)
        elif cfg.placement == "pre":
            if layer == 0 and cfg.block_mixer(0) == "rwkv":  # RWKV's ln0 (HF pre_ln)
                x = rec[f"{b}.ln0"] = _norm(params, f"{b}.ln0", x, cfg)
            h = x
            if cfg.pre_norms:  # OLMo 2 has none: the sublayers read the stream
                h = rec[f"{b}.norm1"] = _norm(params, f"{b}.norm1", x, cfg)
            a = _mix(params, b, h, cfg, rec, layer, draw)
            if cfg.post_norms:  # Gemma 2's sandwich norms
                a = rec[f"{b}.post_norm1"] = _norm(params, f"{b}.post_norm1", a, cfg)
            r = 1.0 if cfg.residual_multiplier is None else cfg.residual_multiplier
            x = rec[f"{b}.resid1"] = x + r * a  # Granite's residual multiplier
            rwkv = cfg.block_mixer(layer) == "rwkv"  # its channel mixing for the MLP
            if cfg.mlp == NO_MLP and not rwkv:  # Mamba's block: x + Mixer(N(x)) only
                continue
            h = x
            if cfg.pre_norms:
                h = rec[f"{b}.norm2"] = _norm(params, f"{b}.norm2", x, cfg)
            m = graph_channel_mix(params, f"{b}.ffn", h, rec) if rwkv else _mlp(
                params, f"{b}.mlp", h, cfg, rec)
            if cfg.post_norms:
                m = rec[f"{b}.post_norm2"] = _norm(params, f"{b}.post_norm2", m, cfg)
            x = rec[f"{b}.resid2"] = x + r * m
        else:
            rec[f"{b}.resid1"] = x + _mix(params, b, x, cfg, rec, layer, draw)
            x = rec[f"{b}.norm1"] = _norm(params, f"{b}.norm1", rec[f"{b}.resid1"], cfg)
            if cfg.mlp == NO_MLP:
                continue
            rec[f"{b}.resid2"] = x + _mlp(params, f"{b}.mlp", x, cfg, rec)
            x = rec[f"{b}.norm2"] = _norm(params, f"{b}.norm2", rec[f"{b}.resid2"], cfg)
    if cfg.final_norm:
        x = rec["final_norm"] = _norm(params, "final_norm", x, cfg)
    z = x @ (params["embed.W_E"].T if cfg.tied_embeddings else params["unembed.W_U"])
    z = z + params["unembed.b_U"] if cfg.unembed_bias else z
    if cfg.final_softcap is not None:
        rec["logits_uncapped"], z = z, _softcap(z, cfg.final_softcap)
    rec["logits"] = z
    if cfg.temperature != 1.0:
        rec["logits_tempered"] = rec["logits"] / cfg.temperature
    return rec


def intermediates(params: Params, tokens: Any, cfg: TransformerConfig,
                  targets: Any = None, *, draw: int = 0) -> dict[str, Any]:
    r"""Every recorded value of the model, keyed by the graph node holding the same value.

    Keys (``b = blocks.{l}``): ``embed``, ``x0`` (the stream entering block 0);
    ``b.norm1``, ``b.norm2`` (the norms' outputs); ``b.attn.q|k|v`` (projections,
    ``(n, h d_h)``), ``b.attn.q_rope``/``k_rope`` (RoPE only), ``b.attn.k_shared``/
    ``v_shared`` (grouped-query attention only, after sharing), ``b.attn.heads``
    (``(H, n, d_h)``), ``b.attn.out``; ``b.mlp.out`` and, by MLP kind, ``b.mlp.in``,
    ``b.mlp.gate``, ``b.mlp.up``, ``b.mlp.act`` or ``b.mlp.scores`` (router); for a Mamba
    block (``cfg.block_mixer``) ``b.mamba.in_x``, ``in_z``, ``conv``, ``conv_act``,
    ``dt_low``, ``B``, ``C``, ``dt``, ``scan``, ``out`` in place of ``b.attn.*`` (Mamba-2:
    ``b.mamba2.*``, :func:`~.jax_mamba2.mamba2_mixer`); for an RWKV
    block ``b.rwkv.time_mix`` and ``b.ffn.channel_mix`` (and ``blocks.0.ln0``); the
    residual sums ``b.resid1 = s + \operatorname{Attn}(\cdot)``, ``b.resid2 = s +
    \operatorname{MLP}(\cdot)``; ``final_norm`` (when present), ``logits`` and, when
    the temperature :math:`T \ne 1`, ``logits_tempered`` :math:`= Z/T`; ``loss`` (a
    scalar, over the whole batch) when ``targets`` are given.

    Pre-LN (Baggag & Saad §3.9): the stream after each sublayer *is* ``b.resid1`` /
    ``b.resid2``. Post-LN: ``b.resid1`` is the sum before the norm and the stream is
    ``b.norm1 = N(b.resid1)`` (likewise ``b.norm2``), exactly as in the graph. Parallel
    (``parallel_residual``): ``b.resid2`` :math:`= s + (\operatorname{Attn} +
    \operatorname{MLP})`, both of the block's input ``s`` (the MLP of the shared ``b.norm1``
    or of ``b.norm2``), ``b.resid1 = s + \operatorname{Attn}``. With
    ``final_softcap`` :math:`c`, ``logits`` :math:`= c\tanh(Z/c)` of ``logits_uncapped``
    :math:`Z`. Without an MLP (``mlp="none"``) a block records no ``b.norm2``, ``b.mlp.*``
    or ``b.resid2``.

    Args:
        tokens: ``(n,)`` or a batch ``(B, n)`` of token ids; with a batch, every value
            gains a leading axis ``B``.
        targets: optional, the tokens' shape (see :func:`loss`).
        draw: the redraw number of the random features (FAVOR, FAVOR+:
            ``cfg.feature_draws(layer, draw)``; the graph's constants are draw 0).
    """
    tokens = jnp.asarray(tokens)
    params = {k: jnp.asarray(v) for k, v in params.items()}
    if tokens.ndim == 1:
        rec = _sequence(params, tokens, cfg, draw)
    elif tokens.ndim == 2:
        rec = jax.vmap(lambda t: _sequence(params, t, cfg, draw))(tokens)
    else:
        raise ValueError(f"intermediates: argument 'tokens': expected shape (n,) or (B, n), "
                         f"got {tuple(tokens.shape)}")
    if targets is not None:
        rec["loss"] = _mean_nll(_output(rec), targets)
    return rec


def _output(rec: Mapping[str, Any]) -> Any:
    return rec["logits_tempered"] if "logits_tempered" in rec else rec["logits"]


def logits(params: Params, tokens: Any, cfg: TransformerConfig, *, draw: int = 0) -> Any:
    r"""Logits :math:`Z/T \in \mathbb R^{n \times V}` (or ``(B, n, V)``), already divided
    by the temperature :math:`T` (``draw``: see :func:`intermediates`)."""
    return _output(intermediates(params, tokens, cfg, draw=draw))


def _mean_nll(z: Any, targets: Any) -> Any:
    r""":math:`-\frac1{|K|}\sum_{i \in K} \log \operatorname{softmax}(z_i)_{t_i}` over the
    kept positions :math:`K = \{i : t_i \ne` ``IGNORE_INDEX``:math:`\}` of the whole batch
    (NaN when nothing is kept, as 0/0)."""
    targets = jnp.asarray(targets)
    if targets.shape != z.shape[:-1]:
        raise ValueError(f"loss: argument 'targets': expected shape {tuple(z.shape[:-1])} (the "
                         f"tokens' shape), got {tuple(targets.shape)}")
    keep = targets != IGNORE_INDEX
    logp = jax.nn.log_softmax(z, axis=-1)
    picked = jnp.take_along_axis(logp, jnp.where(keep, targets, 0)[..., None], axis=-1)[..., 0]
    return -jnp.sum(jnp.where(keep, picked, 0.0)) / jnp.sum(keep)


def loss(params: Params, tokens: Any, targets: Any, cfg: TransformerConfig) -> Any:
    r"""Mean next-token cross-entropy :math:`-\frac1{|K|}\sum_{i\in K} \log p_{i,t_i}` over
    the positions :math:`K` whose target is not :data:`IGNORE_INDEX` (all of them
    normally, so :math:`|K| = n`, or :math:`Bn` for a batch)."""
    return _mean_nll(logits(params, tokens, cfg), targets)


def make_value_and_grad(cfg: TransformerConfig) -> Callable[..., Any]:
    """``jit(value_and_grad(loss))`` for ``cfg``: ``f(params, tokens, targets)``."""
    return jax.jit(jax.value_and_grad(lambda p, t, y: loss(p, t, y, cfg)))


def make_value_grad_and_logits(cfg: TransformerConfig) -> Callable[..., Any]:
    """One jitted ``f(params, tokens, targets) -> ((loss, logits), grads)`` for ``cfg``:
    the loss, its gradient and the (tempered) logits of one traversal, one compilation."""
    def f(p: Params, t: Any, y: Any) -> tuple[Any, Any]:
        z = logits(p, t, cfg)
        return _mean_nll(z, y), z

    return jax.jit(jax.value_and_grad(f, has_aux=True))


def make_mamba_decode_step(cfg: TransformerConfig, params: Params) -> Any:
    r"""A recurrent decoder for a model whose every block is Mamba's (``check_decode``'s
    step protocol: ``step(tokens, start, cache) -> (logits, cache, intermediates)``): each
    token goes through the blocks one at a time with the carried states of
    :func:`~nlaverify.models.jax_mamba.mamba_step` (the cache: one per block), never
    seeing the sequence again.
    Intermediates: ``blocks.{l}.mamba.out`` and ``blocks.{l}.resid1`` of the chunk's
    positions. Learned, RoPE-free or absent positions (the blocks read no position)."""
    if any(cfg.block_mixer(layer) != "mamba" for layer in range(cfg.n_blocks)):
        raise ValueError(f"make_mamba_decode_step: every block must be 'mamba', got mixer="
                         f"{cfg.mixer!r}")
    if cfg.positions == "sinusoidal" or cfg.parallel_residual or cfg.post_norms or (
            not cfg.pre_norms) or (
            cfg.embed_multiplier is not None or cfg.residual_multiplier is not None):
        raise ValueError("make_mamba_decode_step: sinusoidal positions, parallel residuals, "
                         "post-sublayer norms and Granite's multipliers are not supported")
    p = {k: jnp.asarray(v) for k, v in params.items()}

    def block(layer: int, x: Any, state: Any, rec: dict[str, list]) -> tuple[Any, Any]:
        b = f"blocks.{layer}"
        if cfg.placement == "pre":
            y, state = mamba_step(p, f"{b}.mamba", _norm(p, f"{b}.norm1", x, cfg), state)
            x = x + y
            rec[f"{b}.resid1"].append(x)
            if cfg.mlp != NO_MLP:
                x = x + _mlp(p, f"{b}.mlp", _norm(p, f"{b}.norm2", x[None], cfg), cfg, {})[0]
        else:
            y, state = mamba_step(p, f"{b}.mamba", x, state)
            rec[f"{b}.resid1"].append(x + y)
            x = _norm(p, f"{b}.norm1", x + y, cfg)
            if cfg.mlp != NO_MLP:
                x = _norm(p, f"{b}.norm2", x + _mlp(p, f"{b}.mlp", x[None], cfg, {})[0], cfg)
        rec[f"{b}.mamba.out"].append(y)
        return x, state

    def token(tok: Any, pos: int, states: list, rec: dict[str, list]) -> Any:
        x = p["embed.W_E"][tok]
        if cfg.embed_scale:
            x = x * jnp.sqrt(jnp.asarray(cfg.d_model, dtype=x.dtype))
        if cfg.positions == "learned":
            x = x + p["pos.W_P"][pos]
        for layer in range(cfg.n_blocks):
            x, states[layer] = block(layer, x, states[layer], rec)
        if cfg.final_norm:
            x = _norm(p, "final_norm", x, cfg)
        z = unembed(p, cfg, x)
        return z if cfg.final_softcap is None else _softcap(z, cfg.final_softcap)

    return recurrent_step(cfg, token, mamba_state, ("mamba.out", "resid1"))
