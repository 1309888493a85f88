r"""The attention kernels of ``benchmarks/user_bugs.py`` (through :mod:`_user_kernels`):
scaled dot-product and causal attention, FlashAttention's online-softmax forward, RoPE and
``repeat_kv`` (GQA), each correct and buggy, checked by ``check_op``.

RoPE pairs :math:`(x_{2i}, x_{2i+1})` (RoFormer's interleaved convention,
``nlaverify/ops/rotary.py``; Hugging Face's half split is a permutation of the head's
coordinates, hence a *bug* against this op); ``repeat_kv`` lets query head :math:`k` read
key/value head :math:`\lfloor k/n_{\text{rep}}\rfloor`.
"""

from __future__ import annotations

import math
from typing import Any

from _kernels_ops import _acc_dtype, _torch

BLOCK = 2  # the key block of the online-softmax kernels (n > 2 shows a missing rescale)


# -- attention ----------------------------------------------------------------------------


def attention_torch(Q: Any, K: Any, V: Any) -> Any:
    s = Q @ K.transpose(-1, -2) / math.sqrt(Q.shape[-1])
    return s.softmax(-1) @ V


def attention_torch_by_d(Q: Any, K: Any, V: Any) -> Any:
    s = Q @ K.transpose(-1, -2) / Q.shape[-1]  # bug: 1/d_k, not 1/sqrt(d_k)
    return s.softmax(-1) @ V


def causal_attention_torch(Q: Any, K: Any, V: Any) -> Any:
    torch = _torch()
    n = Q.shape[-2]
    s = Q @ K.transpose(-1, -2) / math.sqrt(Q.shape[-1])
    keep = torch.ones(n, n, dtype=torch.bool).tril()
    return s.masked_fill(~keep, float("-inf")).softmax(-1) @ V


def causal_attention_torch_peek(Q: Any, K: Any, V: Any) -> Any:
    torch = _torch()
    n = Q.shape[-2]
    s = Q @ K.transpose(-1, -2) / math.sqrt(Q.shape[-1])
    keep = torch.ones(n, n, dtype=torch.bool).tril(diagonal=1)  # bug: sees the next token
    return s.masked_fill(~keep, float("-inf")).softmax(-1) @ V


def causal_attention_jax(Q: Any, K: Any, V: Any) -> Any:
    import jax
    import jax.numpy as jnp

    n = Q.shape[-2]
    s = Q @ jnp.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
    keep = jnp.arange(n)[:, None] >= jnp.arange(n)[None, :]
    return jax.nn.softmax(jnp.where(keep, s, -jnp.inf), axis=-1) @ V


def causal_attention_jax_no_self(Q: Any, K: Any, V: Any) -> Any:
    import jax
    import jax.numpy as jnp

    n = Q.shape[-2]
    s = Q @ jnp.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
    keep = jnp.arange(n)[:, None] > jnp.arange(n)[None, :]  # bug: '>' masks the diagonal
    return jax.nn.softmax(jnp.where(keep, s, -jnp.inf), axis=-1) @ V


def _online_torch(Q: Any, K: Any, V: Any, causal: bool, rescale: bool) -> Any:
    """FlashAttention's forward: keys in blocks of BLOCK, a running max m, running sum l and
    output accumulator in float32 at least; each new block rescales both by exp(m - m')."""
    torch = _torch()
    dt = _acc_dtype(Q)
    q, k, v = Q.to(dt), K.to(dt), V.to(dt)
    n = q.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=dt)
    l = torch.zeros_like(m)  # noqa: E741 (FlashAttention's name)
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=dt)
    rows = torch.arange(n)[:, None]
    for j in range(0, n, BLOCK):
        s = q @ k[..., j:j + BLOCK, :].transpose(-1, -2) * scale
        if causal:
            s = s.masked_fill(torch.arange(j, min(j + BLOCK, n))[None, :] > rows,
                              float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = (s - m_new).exp()
        alpha = (m - m_new).exp() if rescale else torch.ones_like(m)  # bug: no rescale
        l = alpha * l + p.sum(-1, keepdim=True)  # noqa: E741
        acc = alpha * acc + p @ v[..., j:j + BLOCK, :]
        m = m_new
    return (acc / l).to(Q.dtype)


def online_attention_torch(Q: Any, K: Any, V: Any) -> Any:
    return _online_torch(Q, K, V, causal=False, rescale=True)


def online_attention_torch_no_rescale(Q: Any, K: Any, V: Any) -> Any:
    return _online_torch(Q, K, V, causal=False, rescale=False)


def _online_jax(Q: Any, K: Any, V: Any, causal: bool, rescale: bool) -> Any:
    import jax.numpy as jnp

    dt = jnp.promote_types(Q.dtype, jnp.float32)
    q, k, v = Q.astype(dt), K.astype(dt), V.astype(dt)
    n = q.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = jnp.full((*q.shape[:-1], 1), -jnp.inf, dtype=dt)
    l = jnp.zeros_like(m)  # noqa: E741
    acc = jnp.zeros((*q.shape[:-1], v.shape[-1]), dtype=dt)
    rows = jnp.arange(n)[:, None]
    for j in range(0, n, BLOCK):
        s = q @ jnp.swapaxes(k[..., j:j + BLOCK, :], -1, -2) * scale
        if causal:
            s = jnp.where(jnp.arange(j, min(j + BLOCK, n))[None, :] > rows, -jnp.inf, s)
        m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
        p = jnp.exp(s - m_new)
        alpha = jnp.exp(m - m_new) if rescale else jnp.ones_like(m)  # bug: no rescale
        l = alpha * l + jnp.sum(p, axis=-1, keepdims=True)  # noqa: E741
        acc = alpha * acc + p @ v[..., j:j + BLOCK, :]
        m = m_new
    return (acc / l).astype(Q.dtype)


def online_causal_attention_jax(Q: Any, K: Any, V: Any) -> Any:
    return _online_jax(Q, K, V, causal=True, rescale=True)


def online_causal_attention_jax_no_rescale(Q: Any, K: Any, V: Any) -> Any:
    return _online_jax(Q, K, V, causal=True, rescale=False)


# -- RoPE and GQA -------------------------------------------------------------------------


def _rope_tables_torch(X: Any) -> tuple[Any, Any]:
    torch = _torch()
    n, d = X.shape[-2], X.shape[-1]
    dt = _acc_dtype(X)
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=dt) / d))
    angles = torch.arange(n, dtype=dt)[:, None] * inv[None, :]  # (n, d/2)
    return angles.cos(), angles.sin()


def rope_torch(X: Any) -> Any:
    # Meta's llama: rotate the pairs (x_{2i}, x_{2i+1})
    torch = _torch()
    cos, sin = _rope_tables_torch(X)
    x = X.to(cos.dtype).reshape(*X.shape[:-1], -1, 2)
    x0, x1 = x[..., 0], x[..., 1]
    out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
    return out.reshape(X.shape).to(X.dtype)


def rope_torch_half_split(X: Any) -> Any:
    # Hugging Face's rotate_half: pairs (x_i, x_{i+d/2}); a bug against interleaved weights
    torch = _torch()
    cos, sin = _rope_tables_torch(X)
    cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    x = X.to(cos.dtype)
    h = x.shape[-1] // 2
    rotated = torch.cat([-x[..., h:], x[..., :h]], -1)
    return (x * cos + rotated * sin).to(X.dtype)


def _rope_tables_jax(X: Any) -> tuple[Any, Any]:
    import jax.numpy as jnp

    n, d = X.shape[-2], X.shape[-1]
    inv = 1.0 / (10000.0 ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    angles = jnp.arange(n, dtype=jnp.float32)[:, None] * inv[None, :]
    return jnp.cos(angles), jnp.sin(angles)


def rope_jax(X: Any) -> Any:
    import jax.numpy as jnp

    cos, sin = _rope_tables_jax(X)
    x = X.astype(jnp.promote_types(X.dtype, jnp.float32)).reshape(*X.shape[:-1], -1, 2)
    x0, x1 = x[..., 0], x[..., 1]
    out = jnp.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)
    return out.reshape(X.shape).astype(X.dtype)


def rope_jax_half_split(X: Any) -> Any:
    import jax.numpy as jnp

    cos, sin = _rope_tables_jax(X)
    cos, sin = jnp.concatenate([cos, cos], -1), jnp.concatenate([sin, sin], -1)
    x = X.astype(jnp.promote_types(X.dtype, jnp.float32))
    x1, x2 = jnp.split(x, 2, axis=-1)  # bug: half-split pairs
    return (x * cos + jnp.concatenate([-x2, x1], -1) * sin).astype(X.dtype)


def repeat_kv_torch(X: Any) -> Any:
    return X.repeat_interleave(2, dim=-3)


def repeat_kv_torch_tile(X: Any) -> Any:
    reps = [1] * X.dim()
    reps[-3] = 2
    return X.repeat(*reps)  # bug: Tensor.repeat tiles: head k reads head k mod h_kv


def repeat_kv_jax(X: Any) -> Any:
    import jax.numpy as jnp

    return jnp.repeat(X, 2, axis=-3)


def repeat_kv_jax_tile(X: Any) -> Any:
    import jax.numpy as jnp

    reps = [1] * X.ndim
    reps[-3] = 2
    return jnp.tile(X, reps)  # bug: tile, not repeat
