r"""Mamba-2's recurrent decoding in JAX (Dao & Gu 2024, §7: the SSM's recurrent mode;
Baptista, Stuart & Tran §5.3.4: :math:`v_{k+1} = f(v_k, h_k)`), independently of the graph's
ops: the decoder :func:`~nlaverify.check.check_decode` checks against the full forward.

Each token goes through the blocks with the state each block carries, never seeing the
sequence again: the last :math:`k - 1` inputs of the depthwise convolution over
:math:`[x, B, C]` and the SSM state :math:`h \in \mathbb R^{H\times P\times N}`. One step,
with :math:`A = -e^{A_{\log}}`, :math:`\Delta = \operatorname{softplus}(\delta + b_\Delta)`,
head :math:`j` reading group :math:`\lfloor jG/H\rfloor`,

.. math:: h \leftarrow e^{\Delta A} h + \Delta\, x B^\top,\qquad y = h C + D\odot x,\qquad
   \mathrm{out} = \mathrm{GatedRMS}(y, z)\, W_{out} .

Written with ``jax.numpy`` and ``jax.nn`` only; it imports nothing of :mod:`nlaverify.ops` or
:mod:`nlaverify.graph` (the full forward it must equal is the graph's scan, or the JAX model's
dual attention form).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from nlaverify.config import NO_MLP, TransformerConfig
from nlaverify.models.decode_loop import recurrent_step, unembed
from nlaverify.models.jax_mamba2 import _rms, gated_rms

__all__ = ["make_mamba2_decode_step", "mamba2_state"]

jax.config.update("jax_enable_x64", True)  # float64 states, as the JAX model's

State = tuple[Any, Any]


def mamba2_state(cfg: TransformerConfig, dtype: Any = jnp.float64) -> State:
    """The empty state of one Mamba-2 block: the convolution's window ``(k - 1, E + 2GN)``
    and the SSM state ``(H, P, N)``, zeros."""
    E, GN = cfg.d_inner, cfg.ssm_groups * cfg.ssm_state
    return (jnp.zeros((cfg.ssm_conv - 1, E + 2 * GN), dtype),
            jnp.zeros((cfg.ssm_heads, E // cfg.ssm_heads, cfg.ssm_state), dtype))


def mamba2_step(p: Mapping[str, Any], name: str, u: Any, state: State,
                cfg: TransformerConfig) -> tuple[Any, State, Any]:
    """One token ``u`` ``(d,)`` through the mixer ``name`` with its carried ``state``:
    ``(out, new state, y)`` (module docstring; ``y`` the scan's output ``(H, P)``)."""
    E, H, G, N = cfg.d_inner, cfg.ssm_heads, cfg.ssm_groups, cfg.ssm_state
    P, window, h = E // H, *state
    parts = ("conv_x", "conv_B", "conv_C")
    xi = jnp.concatenate([u @ p[f"{name}.in_{k}.W"] for k in ("x", "B", "C")])
    full = jnp.concatenate([window, xi[None]], axis=0)                     # (k, C)
    w = jnp.concatenate([p[f"{name}.{c}.w"] for c in parts])                # (C, k)
    act = jax.nn.silu(jnp.sum(full.T * w, axis=-1) + jnp.concatenate(
        [p[f"{name}.{c}.b"] for c in parts]))
    x, B, C = act[:E].reshape(H, P), act[E:E + G * N], act[E + G * N:]
    Bh = jnp.repeat(B.reshape(G, N), H // G, axis=0)                       # (H, N)
    Ch = jnp.repeat(C.reshape(G, N), H // G, axis=0)
    Dt = jax.nn.softplus(u @ p[f"{name}.in_dt.W"] + p[f"{name}.dt.b"])     # (H,)
    A = -jnp.exp(p[f"{name}.A_log"])
    h = jnp.exp(Dt * A)[:, None, None] * h + (Dt[:, None] * x)[:, :, None] * Bh[:, None, :]
    y = jnp.einsum("hpn,hn->hp", h, Ch) + p[f"{name}.D"][:, None] * x
    normed = gated_rms(y.reshape(E), u @ p[f"{name}.in_z.W"], p[f"{name}.norm.gamma"], G,
                       cfg.norm_eps)
    return normed @ p[f"{name}.out.W"], (full[1:], h), y


def make_mamba2_decode_step(cfg: TransformerConfig, params: Mapping[str, Any]
                            ) -> Callable[..., tuple[Any, list[State], dict[str, Any]]]:
    r"""A recurrent decoder for a model whose every block is Mamba-2's as Hugging Face's
    ``Mamba2Block`` (pre-RMSNorm, no MLP; ``check_decode``'s step protocol: ``step(tokens,
    start, cache) -> (logits, cache, intermediates)``): the cache is one
    :func:`mamba2_state` per block. Intermediates: ``blocks.{l}.mamba2.scan``,
    ``blocks.{l}.mamba2.out`` and ``blocks.{l}.resid1`` of the chunk's positions."""
    if any(cfg.block_mixer(layer) != "mamba2" for layer in range(cfg.n_blocks)):
        raise ValueError(f"make_mamba2_decode_step: every block must be 'mamba2', got mixer="
                         f"{cfg.mixer!r}")
    if cfg.mlp != NO_MLP or cfg.placement != "pre" or cfg.norm != "rmsnorm" or (
            cfg.positions != "none" or cfg.final_softcap is not None or cfg.embed_scale
            or cfg.embed_multiplier is not None or cfg.residual_multiplier is not None
            or not cfg.norm_affine or cfg.post_norms or not cfg.pre_norms):
        raise ValueError("make_mamba2_decode_step: Hugging Face's Mamba2Block only (mlp="
                         "'none', pre-RMSNorm, no positions, no caps or multipliers)")
    p = {k: jnp.asarray(v) for k, v in params.items()}
    nodes = ("mamba2.scan", "mamba2.out", "resid1")

    def token(t: Any, pos: int, states: list[State], rec: dict[str, list]) -> Any:
        x = p["embed.W_E"][t]
        for layer in range(cfg.n_blocks):
            b = f"blocks.{layer}"
            out, states[layer], y = mamba2_step(
                p, f"{b}.mamba2", _rms(x, p[f"{b}.norm1.gamma"], cfg.norm_eps),
                states[layer], cfg)
            x = x + out
            for node, value in zip(nodes, (y, out, x), strict=True):
                rec[f"{b}.{node}"].append(value)
        if cfg.final_norm:
            x = _rms(x, p["final_norm.gamma"], cfg.norm_eps)
        return unembed(p, cfg, x)

    return recurrent_step(cfg, token, mamba2_state, nodes)
