"""An independent decoder-only Transformer in JAX: the oracle of the whole pipeline.

Written from the equations of Baggag & Saad §3.2-3.13 and Baptista, Stuart & Tran
§5 with ``jax.numpy`` and ``jax.nn`` only: it imports nothing from
:mod:`nlaverify.ops` or :mod:`nlaverify.graph`, and its gradient is ``jax.grad``.
Parameters use the graph's node names (``blocks.{l}.attn.q.W_Q`` ...), so the
same dictionary feeds both. Formulations deliberately differ from the ops where
the mathematics allows: RoPE by complex multiplication, GQA by ``jnp.repeat``,
top-k routing by ``jax.lax.top_k``, cross-entropy by ``jax.nn.log_softmax``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from nlaverify.config import TransformerConfig

jax.config.update("jax_enable_x64", True)

Params = Mapping[str, Any]


def _proj(p: Params, name: str, x: Any, w: str, b: str, bias: bool) -> Any:
    y = x @ p[f"{name}.{w}"]
    return y + p[f"{name}.{b}"] if bias else y


def _norm(p: Params, name: str, x: Any, cfg: TransformerConfig) -> Any:
    if cfg.norm == "rmsnorm":
        return p[f"{name}.gamma"] * x / jnp.sqrt(jnp.mean(x**2, axis=-1, keepdims=True)
                                                   + cfg.norm_eps)
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    return p[f"{name}.gamma"] * (x - mu) / jnp.sqrt(var + cfg.norm_eps) + p[f"{name}.beta"]


def _rope(x: Any, base: int) -> Any:
    """Rotate coordinate pairs (2i, 2i+1) of row t by t*theta_i: complex multiplication."""
    h, n, dh = x.shape
    theta = base ** (-jnp.arange(0, dh, 2) / dh)
    phase = jnp.exp(1j * jnp.arange(n)[:, None] * theta[None, :])
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * phase
    return jnp.stack([z.real, z.imag], axis=-1).reshape(h, n, dh)


def _attention(p: Params, name: str, x: Any, cfg: TransformerConfig) -> Any:
    n = x.shape[0]
    H, Hkv, dh = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
    q = _proj(p, f"{name}.q", x, "W_Q", "b_Q", cfg.attn_bias).reshape(n, H, dh).transpose(1, 0, 2)
    k = _proj(p, f"{name}.k", x, "W_K", "b_K", cfg.attn_bias).reshape(n, Hkv, dh).transpose(
        1, 0, 2)
    v = _proj(p, f"{name}.v", x, "W_V", "b_V", cfg.attn_bias).reshape(n, Hkv, dh).transpose(
        1, 0, 2)
    if cfg.positions == "rope":
        q, k = _rope(q, cfg.rope_base), _rope(k, cfg.rope_base)
    k, v = jnp.repeat(k, cfg.n_rep, axis=0), jnp.repeat(v, cfg.n_rep, axis=0)
    s = jnp.einsum("hid,hjd->hij", q, k) / jnp.sqrt(dh)
    if cfg.causal:
        s = jnp.where(jnp.tril(jnp.ones((n, n), dtype=bool)), s, -jnp.inf)
    a = jnp.einsum("hij,hjd->hid", jax.nn.softmax(s, axis=-1), v)
    return _proj(p, f"{name}.out", a.transpose(1, 0, 2).reshape(n, H * dh), "W_O", "b_O",
                 cfg.attn_bias)


def _act(cfg: TransformerConfig, u: Any) -> Any:
    return jax.nn.gelu(u, approximate=True) if cfg.mlp == "gelu" else jax.nn.relu(u)


def _mlp(p: Params, name: str, x: Any, cfg: TransformerConfig) -> Any:
    if cfg.n_experts:
        scores = x @ p[f"{name}.W_router"]
        top_vals, top_idx = jax.lax.top_k(scores, cfg.top_k)
        gates_k = jax.nn.softmax(top_vals, axis=-1)                     # (n, k)
        gates = jnp.zeros_like(scores).at[jnp.arange(x.shape[0])[:, None], top_idx].set(gates_k)
        if cfg.mlp == "swiglu":
            h = jax.nn.silu(jnp.einsum("nd,edm->enm", x, p[f"{name}.W1"])) * jnp.einsum(
                "nd,edm->enm", x, p[f"{name}.W3"])
            y = jnp.einsum("enm,emd->end", h, p[f"{name}.W2"])
        else:
            h = _act(cfg, jnp.einsum("nd,edm->enm", x, p[f"{name}.W_in"]))
            y = jnp.einsum("enm,emd->end", h, p[f"{name}.W_out"])
        return jnp.einsum("ne,end->nd", gates, y)
    if cfg.mlp == "swiglu":
        g = _proj(p, f"{name}.gate", x, "W_gate", "b_gate", cfg.mlp_bias)
        u = _proj(p, f"{name}.up", x, "W_up", "b_up", cfg.mlp_bias)
        return _proj(p, f"{name}.out", jax.nn.silu(g) * u, "W_down", "b_down", cfg.mlp_bias)
    u = _proj(p, f"{name}.in", x, "W_in", "b_in", cfg.mlp_bias)
    return _proj(p, f"{name}.out", _act(cfg, u), "W_out", "b_out", cfg.mlp_bias)


def _sinusoidal(n: int, d: int) -> Any:
    pos = jnp.arange(n)[:, None]
    i = jnp.arange(d)[None, :]
    angle = pos / 10000.0 ** ((i - i % 2) / d)
    return jnp.where(i % 2 == 0, jnp.sin(angle), jnp.cos(angle))


def logits(params: Params, tokens: Any, cfg: TransformerConfig) -> Any:
    r"""Logits :math:`Z \in \mathbb R^{n \times V}` (already divided by the temperature)."""
    n = tokens.shape[0]
    x = params["embed.W_E"][tokens]
    if cfg.positions == "learned":
        x = x + params["pos.W_P"][:n]
    elif cfg.positions == "sinusoidal":
        x = x + _sinusoidal(n, cfg.d_model)
    for layer in range(cfg.n_blocks):
        b = f"blocks.{layer}"
        if cfg.placement == "pre":
            x = x + _attention(params, f"{b}.attn", _norm(params, f"{b}.norm1", x, cfg), cfg)
            x = x + _mlp(params, f"{b}.mlp", _norm(params, f"{b}.norm2", x, cfg), cfg)
        else:
            x = _norm(params, f"{b}.norm1", x + _attention(params, f"{b}.attn", x, cfg), cfg)
            x = _norm(params, f"{b}.norm2", x + _mlp(params, f"{b}.mlp", x, cfg), cfg)
    if cfg.final_norm:
        x = _norm(params, "final_norm", x, cfg)
    z = x @ (params["embed.W_E"].T if cfg.tied_embeddings else params["unembed.W_U"])
    return z / cfg.temperature


def loss(params: Params, tokens: Any, targets: Any, cfg: TransformerConfig) -> Any:
    r"""Mean next-token cross-entropy :math:`-\frac1n\sum_i \log p_{i,t_i}`."""
    logp = jax.nn.log_softmax(logits(params, tokens, cfg), axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[:, None], axis=-1))


def make_value_and_grad(cfg: TransformerConfig):
    """``jit(value_and_grad(loss))`` for ``cfg``: ``f(params, tokens, targets)``."""
    return jax.jit(jax.value_and_grad(lambda p, t, y: loss(p, t, y, cfg)))
