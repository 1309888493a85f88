r"""Mamba's block in JAX, independently of the graph's ops: the oracle of the ``mamba`` mixer.

Written from Gu & Dao 2023 (Figure 3 and Algorithm 2) and Hugging Face ``MambaMixer``'s slow
path with ``jax.numpy``, ``jax.nn`` and ``jax.lax`` only; it imports nothing from
:mod:`nlaverify.ops` or :mod:`nlaverify.graph`. Where the ops shift rows tap by tap and unroll
the recurrence in Python, this module convolves with ``jax.lax.conv_general_dilated``
(``feature_group_count = d_inner``, PyTorch's depthwise layout) and carries the state with
``jax.lax.scan``; :math:`A = -e^{A_{\log}}`, :math:`\Delta = \operatorname{softplus}` by
``jax.nn.softplus`` (Baptista, Stuart & Tran §5.3.4: :math:`v_{k+1} = f(v_k, h_k)`).

:func:`mamba_step` is the same block for one token with its carried state (the last
``d_conv - 1`` inputs of the convolution and the SSM state): recurrent decoding, which
:func:`mamba_mixer` must equal token by token
(:func:`nlaverify.models.jax_transformer.make_mamba_decode_step` runs a whole model so).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from nlaverify.config import TransformerConfig

__all__ = ["mamba_mixer", "mamba_state", "mamba_step"]

Params = Mapping[str, Any]


def _depthwise_causal(x: Any, w: Any, b: Any) -> Any:
    """PyTorch's ``conv1d(groups=E, padding=k-1)[..., :n]`` on ``x`` ``(n, E)``, ``w``
    ``(E, k)``: a cross-correlation over the input padded by ``k - 1`` zeros in front."""
    n, E = x.shape
    k = w.shape[-1]
    lhs = jnp.pad(x.T, ((0, 0), (k - 1, 0)))[None]                     # (1, E, n + k - 1)
    out = jax.lax.conv_general_dilated(lhs, w[:, None, :], (1,), "VALID",
                                       dimension_numbers=("NCH", "OIH", "NCH"),
                                       feature_group_count=E)
    return out[0].T[:n] + b


def _ssm_inputs(p: Params, name: str, x: Any) -> dict[str, Any]:
    """The projections of the block's input ``x`` ``(n, d)`` that do not depend on the
    convolution: ``in_x`` and ``in_z``."""
    return {"in_x": x @ p[f"{name}.in_x.W"], "in_z": x @ p[f"{name}.in_z.W"]}


def _selective(p: Params, name: str, u: Any, z: Any, h0: Any) -> tuple[Any, Any, dict]:
    """The selective SSM on ``u`` ``(n, E)`` from state ``h0`` ``(E, N)``, gated by
    ``silu(z)``: ``(out, last state, record)``."""
    low = u @ p[f"{name}.dt_low.W"]
    Bm, Cm = u @ p[f"{name}.B.W"], u @ p[f"{name}.C.W"]
    dt = low @ p[f"{name}.dt.W"]
    A = -jnp.exp(p[f"{name}.A_log"])                                   # (E, N)
    Delta = jax.nn.softplus(dt + p[f"{name}.dt.b"])                    # (n, E)

    def step(h: Any, inp: tuple[Any, ...]) -> tuple[Any, Any]:
        d_t, b_t, c_t, u_t = inp
        h = jnp.exp(d_t[:, None] * A) * h + (d_t * u_t)[:, None] * b_t[None, :]
        return h, h @ c_t

    h, ys = jax.lax.scan(step, h0, (Delta, Bm, Cm, u))
    y = (ys + p[f"{name}.D"] * u) * jax.nn.silu(z)
    return y, h, {"dt_low": low, "B": Bm, "C": Cm, "dt": dt, "scan": y}


def mamba_mixer(p: Params, name: str, x: Any, cfg: TransformerConfig,
                rec: dict[str, Any]) -> Any:
    r"""Mamba's block on one sequence ``x`` ``(n, d)`` (Gu & Dao 2023): :math:`u =
    \operatorname{silu}(\operatorname{conv}(xW_x))`, the selective scan of :math:`u` gated by
    :math:`\operatorname{silu}(xW_z)`, times :math:`W_{out}`. Records the graph's node names
    ``{name}.in_x`` ... ``{name}.out`` in ``rec``."""
    E, N = cfg.d_inner, cfg.ssm_state
    pre = _ssm_inputs(p, name, x)
    conv = _depthwise_causal(pre["in_x"], p[f"{name}.conv.w"], p[f"{name}.conv.b"])
    u = jax.nn.silu(conv)
    y, _, parts = _selective(p, name, u, pre["in_z"], jnp.zeros((E, N), dtype=x.dtype))
    out = y @ p[f"{name}.out.W"]
    rec.update({f"{name}.{k}": v for k, v in {**pre, "conv": conv, "conv_act": u, **parts,
                                              "out": out}.items()})
    return out


def mamba_state(cfg: TransformerConfig, dtype: Any = jnp.float64) -> tuple[Any, Any]:
    """The empty decoding state of one block: the last ``d_conv - 1`` inputs of the
    convolution ``(d_conv - 1, E)`` and the SSM state ``(E, N)``, zeros."""
    return (jnp.zeros((cfg.ssm_conv - 1, cfg.d_inner), dtype=dtype),
            jnp.zeros((cfg.d_inner, cfg.ssm_state), dtype=dtype))


def mamba_step(p: Params, name: str, x_t: Any, state: tuple[Any, Any]
               ) -> tuple[Any, tuple[Any, Any]]:
    r"""One token ``x_t`` ``(d,)`` through Mamba's block with the carried state (the
    convolution's window and the SSM state, :func:`mamba_state`): ``(out_t, new state)``.
    The recurrence of Baptista, Stuart & Tran §5.3.4 written as decoding runs it: constant
    work and memory per token."""
    window, h = state
    pre = _ssm_inputs(p, name, x_t[None, :])
    full = jnp.concatenate([window, pre["in_x"]], axis=0)               # (k, E)
    conv = jnp.sum(full.T * p[f"{name}.conv.w"], axis=-1) + p[f"{name}.conv.b"]
    u = jax.nn.silu(conv)[None, :]
    y, h, _ = _selective(p, name, u, pre["in_z"], h)
    return (y @ p[f"{name}.out.W"])[0], (full[1:], h)

