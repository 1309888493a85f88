r"""RWKV-4's recurrent decoding in JAX ("RNN mode"; Peng et al. 2023 §4; Baptista, Stuart &
Tran §5.3.4: :math:`v_{k+1} = f(v_k, h_k)`), independently of the graph's ops: the decoder
:func:`~nlaverify.check.check_decode` checks against the full forward.

Each token goes through the blocks with the state each block carries, never seeing the
sequence again: the time mixing's previous input :math:`x_{t-1}`, the WKV's numerator and
denominator :math:`(a, b)` scaled by :math:`e^{-p}` and the shift :math:`p` (from :math:`p =
-\infty`: an empty sum), and the channel mixing's previous input. One step of the time
mixing, with :math:`w = -e^{\text{time\_decay}}`, :math:`u` = ``time_first``,

.. math:: q = \max(p, u + k_t),\quad \mathrm{wkv}_t = \frac{e^{p - q}a + e^{u + k_t - q}v_t}
   {e^{p - q}b + e^{u + k_t - q}},\qquad p' = \max(p + w, k_t),\ a' = e^{p + w - p'}a +
   e^{k_t - p'}v_t,\ b' = e^{p + w - p'}b + e^{k_t - p'},

every exponent :math:`\le 0`. Written with ``jax.numpy`` and ``jax.nn`` only; it imports
nothing of :mod:`nlaverify.ops` or :mod:`nlaverify.graph` (the full forward it must equal is
the graph's WKV scan, or the JAX model's per-channel softmax attention).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from nlaverify.config import TransformerConfig
from nlaverify.models.decode_loop import recurrent_step, unembed
from nlaverify.models.jax_rwkv import _layernorm as _ln

__all__ = ["make_rwkv_decode_step", "rwkv_state"]

jax.config.update("jax_enable_x64", True)  # float64 states, as the JAX model's

State = tuple[Any, Any, Any, Any, Any]


def rwkv_state(cfg: TransformerConfig, dtype: Any = jnp.float64) -> State:
    r"""The empty state of one RWKV block: the time mixing's :math:`x_{-1} = 0` ``(d,)``,
    :math:`a = b = 0` and :math:`p = -\infty` ``(a,)``, the channel mixing's :math:`x_{-1} = 0`
    ``(d,)``."""
    d, a = cfg.d_model, cfg.rwkv_dim
    return (jnp.zeros(d, dtype), jnp.zeros(a, dtype), jnp.zeros(a, dtype),
            jnp.full(a, -jnp.inf, dtype), jnp.zeros(d, dtype))


def _layernorm(p: Mapping[str, Any], name: str, x: Any, eps: float) -> Any:
    """The norm ``name`` of the graph's parameters (the JAX RWKV model's LayerNorm)."""
    return _ln(x, p[f"{name}.gamma"], p[f"{name}.beta"], eps)


def _time_mix_step(p: Mapping[str, Any], name: str, x: Any, state: State
                   ) -> tuple[Any, State]:
    """One token of the time mixing (module docstring) with the graph's parameters
    ``{name}.mu_k`` ... ``{name}.W_o``."""
    prev, a, b, shift, ffn_prev = state

    def mixed(mu: str) -> Any:
        return prev + p[f"{name}.{mu}"] * (x - prev)

    k, v = mixed("mu_k") @ p[f"{name}.W_k"], mixed("mu_v") @ p[f"{name}.W_v"]
    r = jax.nn.sigmoid(mixed("mu_r") @ p[f"{name}.W_r"])
    w, u = -jnp.exp(p[f"{name}.time_decay"]), p[f"{name}.time_first"]
    q = jnp.maximum(shift, u + k)
    e1, e2 = jnp.exp(shift - q), jnp.exp(u + k - q)
    out = (r * (e1 * a + e2 * v) / (e1 * b + e2)) @ p[f"{name}.W_o"]
    q2 = jnp.maximum(shift + w, k)
    e1, e2 = jnp.exp(shift + w - q2), jnp.exp(k - q2)
    return out, (x, e1 * a + e2 * v, e1 * b + e2, q2, ffn_prev)


def _channel_mix_step(p: Mapping[str, Any], name: str, x: Any, prev: Any) -> Any:
    """One token of the channel mixing, its state the previous input ``prev``."""
    zk = (prev + p[f"{name}.mu_k"] * (x - prev)) @ p[f"{name}.W_k"]
    r = jax.nn.sigmoid((prev + p[f"{name}.mu_r"] * (x - prev)) @ p[f"{name}.W_r"])
    return r * (jnp.square(jax.nn.relu(zk)) @ p[f"{name}.W_v"])


def make_rwkv_decode_step(cfg: TransformerConfig, params: Mapping[str, Any]
                          ) -> Callable[..., tuple[Any, list[State], dict[str, Any]]]:
    r"""A recurrent decoder for a model whose every block is RWKV's (``check_decode``'s step
    protocol: ``step(tokens, start, cache) -> (logits, cache, intermediates)``): the cache
    is one :func:`rwkv_state` per block. Intermediates: ``blocks.{l}.rwkv.time_mix``,
    ``blocks.{l}.ffn.channel_mix`` and ``blocks.{l}.resid2`` of the chunk's positions."""
    if any(cfg.block_mixer(layer) != "rwkv" for layer in range(cfg.n_blocks)):
        raise ValueError(f"make_rwkv_decode_step: every block must be 'rwkv', got mixer="
                         f"{cfg.mixer!r}")
    if cfg.final_softcap is not None or cfg.embed_multiplier is not None or not (
            cfg.norm_affine and cfg.norm_bias):
        raise ValueError("make_rwkv_decode_step: soft-capped logits, an embedding multiplier "
                         "and norms without learned gain and bias are not supported")
    p = {k: jnp.asarray(v) for k, v in params.items()}
    eps, nodes = cfg.norm_eps, ("rwkv.time_mix", "ffn.channel_mix", "resid2")

    def token(t: Any, pos: int, states: list[State], rec: dict[str, list]) -> Any:
        x = p["embed.W_E"][t]
        if cfg.embed_scale:
            x = x * jnp.sqrt(jnp.asarray(cfg.d_model, dtype=x.dtype))
        x = _layernorm(p, "blocks.0.ln0", x, eps)
        for layer in range(cfg.n_blocks):
            b = f"blocks.{layer}"
            y, s = _time_mix_step(p, f"{b}.rwkv", _layernorm(p, f"{b}.norm1", x, eps),
                                  states[layer])
            x = x + y
            h = _layernorm(p, f"{b}.norm2", x, eps)
            f = _channel_mix_step(p, f"{b}.ffn", h, s[4])
            x = x + f
            states[layer] = (*s[:4], h)
            for node, value in zip(nodes, (y, f, x), strict=True):
                rec[f"{b}.{node}"].append(value)
        if cfg.final_norm:
            x = _layernorm(p, "final_norm", x, eps)
        return unembed(p, cfg, x)

    return recurrent_step(cfg, token, rwkv_state, nodes)
