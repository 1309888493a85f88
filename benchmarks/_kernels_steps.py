r"""The kernels of ``benchmarks/user_bugs.py`` (through :mod:`_user_kernels`) that are not
single ops: an AdamW and a Muon step (``check_optimizer``, Baggag & Saad §2.4 and §5.5),
K-FAC factors (``check_function``, §5.3) and a KV-cache decoder (``check_decode``), each
correct and buggy.
"""

from __future__ import annotations

import math
from typing import Any

from _kernels_ops import _torch

# -- optimizers ---------------------------------------------------------------------------

ADAMW = {"lr": 1e-2, "b1": 0.9, "b2": 0.999, "eps": 1e-8, "weight_decay": 0.1}


def adamw_init_torch(params: dict[str, Any]) -> dict[str, Any]:
    torch = _torch()
    return {"t": 0, "m": {k: torch.zeros_like(v) for k, v in params.items()},
            "v": {k: torch.zeros_like(v) for k, v in params.items()}}


#: AdamW at a pretraining learning rate with betas (0.9, 0.95): there a second-moment bias
#: correction by beta1 makes the update 1.41x too large, and a bfloat16 weight of size 1 does
#: not move under a step of 3e-4
ADAMW_95 = {"lr": 3e-4, "b1": 0.9, "b2": 0.95, "eps": 1e-8, "weight_decay": 0.1}


def _adam_step_torch(params: dict[str, Any], grads: dict[str, Any], state: dict[str, Any],
                     coupled: bool, h: dict[str, float] = ADAMW, beta1_in_v: bool = False
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    t = state["t"] + 1
    new, m_all, v_all = {}, {}, {}
    for k, p in params.items():
        g = grads[k] + h["weight_decay"] * p if coupled else grads[k]  # bug: L2, not AdamW
        m = h["b1"] * state["m"][k] + (1 - h["b1"]) * g
        v = h["b2"] * state["v"][k] + (1 - h["b2"]) * g * g
        c2 = 1 - (h["b1"] if beta1_in_v else h["b2"]) ** t  # bug: beta1 in v's correction
        mhat, vhat = m / (1 - h["b1"] ** t), v / c2
        u = mhat / (vhat.sqrt() + h["eps"])
        if not coupled:
            u = u + h["weight_decay"] * p
        new[k], m_all[k], v_all[k] = p - h["lr"] * u, m, v
    return new, {"t": t, "m": m_all, "v": v_all}


def adamw_step_torch(params: dict[str, Any], grads: dict[str, Any],
                     state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return _adam_step_torch(params, grads, state, coupled=False)


def adamw_step_torch_coupled(params: dict[str, Any], grads: dict[str, Any],
                             state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return _adam_step_torch(params, grads, state, coupled=True)


def adamw95_step_torch(params: dict[str, Any], grads: dict[str, Any],
                       state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return _adam_step_torch(params, grads, state, coupled=False, h=ADAMW_95)


def adamw95_step_torch_beta1_in_v(params: dict[str, Any], grads: dict[str, Any],
                                  state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return _adam_step_torch(params, grads, state, coupled=False, h=ADAMW_95, beta1_in_v=True)


MUON = {"lr": 0.02, "beta": 0.95, "nesterov": True, "bias_correction": False,
        "scaling": "jordan", "eps": 1e-7}
MUON_COEFFS = (3.4445, -4.7750, 2.0315)
MUON_SHAPES = {"W": (4, 6), "V": (6, 3)}


def _muon_step_jax(params: dict[str, Any], grads: dict[str, Any], state: Any,
                   normalize: bool) -> tuple[dict[str, Any], Any]:
    """Keller Jordan's Muon on matrices: Nesterov momentum (no bias correction), five
    quintic Newton–Schulz steps from the Frobenius-normalised moment, on the wide side,
    the update scaled by sqrt(max(1, rows/cols))."""
    import jax.numpy as jnp

    h = MUON
    a, b, c = MUON_COEFFS
    mu = state if state is not None else {k: jnp.zeros_like(v) for k, v in params.items()}
    new, mu_new = {}, {}
    for k, p in params.items():
        g = grads[k]
        m = h["beta"] * mu[k] + (1 - h["beta"]) * g
        X = h["beta"] * m + (1 - h["beta"]) * g
        if normalize:
            X = X / (jnp.linalg.norm(X) + h["eps"])  # bug when dropped: NS needs sigma <= 1
        tall = X.shape[0] > X.shape[1]
        if tall:
            X = X.T
        for _ in range(5):
            A = X @ X.T
            X = a * X + (b * A + c * A @ A) @ X
        if tall:
            X = X.T
        scale = math.sqrt(max(1.0, p.shape[0] / p.shape[1]))
        new[k], mu_new[k] = p - h["lr"] * scale * X, m
    return new, mu_new


def muon_step_jax(params: dict[str, Any], grads: dict[str, Any],
                  state: Any) -> tuple[dict[str, Any], Any]:
    return _muon_step_jax(params, grads, state, normalize=True)


def muon_step_jax_no_normalize(params: dict[str, Any], grads: dict[str, Any],
                               state: Any) -> tuple[dict[str, Any], Any]:
    return _muon_step_jax(params, grads, state, normalize=False)


# -- K-FAC --------------------------------------------------------------------------------


def kfac_factors_jax(A: Any, G: Any) -> tuple[Any, Any]:
    """K-FAC's factors of one linear layer, expand mode (Baggag & Saad §5.3): the mean of
    a a^T over the N R positions, the sum of g g^T over samples and positions."""

    a = A.reshape(-1, A.shape[-1])
    g = G.reshape(-1, G.shape[-1])
    return a.T @ a / a.shape[0], g.T @ g


def kfac_factors_jax_sum(A: Any, G: Any) -> tuple[Any, Any]:
    a = A.reshape(-1, A.shape[-1])
    g = G.reshape(-1, G.shape[-1])
    return a.T @ a, g.T @ g  # bug: a sum over positions, not the mean


# -- incremental decoding with a KV cache ------------------------------------------------


def decode_config() -> Any:
    """The decoder of the KV-cache kernels: Llama-style (RMSNorm, interleaved RoPE, GQA with
    two key/value heads for four query heads, SwiGLU), two blocks."""
    from nlaverify.config import TransformerConfig

    return TransformerConfig(vocab_size=13, d_model=8, n_heads=4, n_kv_heads=2, n_blocks=2,
                             d_mlp=16, norm="rmsnorm", positions="rope", mlp="swiglu",
                             context=16, name="user-bugs-decoder")


def _decoder_torch(params: dict[str, Any], dtype: str, rope_after_append: bool) -> Any:
    """A PyTorch decoding step with a preallocated cache (one k/v buffer per block), in
    ``dtype`` with norms and softmax in float32; returns ``(step, cache_factory)``."""
    torch = _torch()
    cfg = decode_config()
    H, Hkv, dh = cfg.n_heads, cfg.n_kv_heads, cfg.d_model // cfg.n_heads
    dt = getattr(torch, dtype)
    P = {k: torch.tensor(v, dtype=torch.float64).to(dt) for k, v in params.items()}

    def norm(x: Any, g: Any) -> Any:
        h = x.float()
        return g * (h * (h.pow(2).mean(-1, keepdim=True) + cfg.norm_eps).rsqrt()).to(dt)

    def rope(x: Any, pos: Any) -> Any:  # (h, t, dh), pairs (x_2i, x_2i+1)
        inv = 1.0 / (cfg.rope_base ** (torch.arange(0, dh, 2, dtype=torch.float32) / dh))
        ang = pos.float()[:, None] * inv[None, :]
        c, s = ang.cos(), ang.sin()
        xf = x.float()
        x0, x1 = xf[..., 0::2], xf[..., 1::2]
        return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).reshape(x.shape).to(dt)

    def cache_factory() -> Any:
        return [{"k": torch.zeros(Hkv, cfg.context, dh, dtype=dt),
                 "v": torch.zeros(Hkv, cfg.context, dh, dtype=dt)} for _ in range(cfg.n_blocks)]

    def step(tokens: Any, start: int, cache: Any) -> Any:
        t = int(tokens.shape[0])
        end = start + t
        # bug: the position read from the cache length after the append (start + t), so a
        # single decoding step is rotated one position ahead
        first = end if (rope_after_append and t == 1) else start
        pos = torch.arange(first, first + t)
        x = P["embed.W_E"][tokens]
        seen = {}
        for b in range(cfg.n_blocks):
            p = f"blocks.{b}"
            h = norm(x, P[f"{p}.norm1.gamma"])
            q = (h @ P[f"{p}.attn.q.W_Q"]).reshape(t, H, dh).transpose(0, 1)
            k = (h @ P[f"{p}.attn.k.W_K"]).reshape(t, Hkv, dh).transpose(0, 1)
            v = (h @ P[f"{p}.attn.v.W_V"]).reshape(t, Hkv, dh).transpose(0, 1)
            q, k = rope(q, pos), rope(k, pos)
            cache[b]["k"][:, start:end] = k
            cache[b]["v"][:, start:end] = v
            K, V = cache[b]["k"][:, :end], cache[b]["v"][:, :end]
            seen[f"{p}.attn.k_rope"], seen[f"{p}.attn.v_heads"] = K, V
            K, V = K.repeat_interleave(H // Hkv, 0), V.repeat_interleave(H // Hkv, 0)
            S = (q @ K.transpose(1, 2)).float() / math.sqrt(dh)
            keep = torch.arange(start, end)[:, None] >= torch.arange(end)[None, :]
            o = S.masked_fill(~keep, float("-inf")).softmax(-1).to(dt) @ V
            seen[f"{p}.attn.heads"] = o
            x = x + o.transpose(0, 1).reshape(t, H * dh) @ P[f"{p}.attn.out.W_O"]
            h = norm(x, P[f"{p}.norm2.gamma"])
            a = h @ P[f"{p}.mlp.gate.W_gate"]
            x = x + (torch.nn.functional.silu(a) * (h @ P[f"{p}.mlp.up.W_up"])) @ P[
                f"{p}.mlp.out.W_down"]
        return norm(x, P["final_norm.gamma"]) @ P["unembed.W_U"], cache, seen

    return step, cache_factory


def decoder_torch(params: dict[str, Any], dtype: str) -> Any:
    return _decoder_torch(params, dtype, rope_after_append=False)


def decoder_torch_rope_after_append(params: dict[str, Any], dtype: str) -> Any:
    return _decoder_torch(params, dtype, rope_after_append=True)
