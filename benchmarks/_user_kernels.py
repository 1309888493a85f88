r"""The kernels of ``benchmarks/user_bugs.py``: LLM kernels written the way people write them
(PyTorch and JAX), each in a correct and a buggy version.

Each :class:`Kernel` names the nlaverify call that checks it (``check_op`` against a proved
op of :data:`nlaverify.ops.registry.OPS`, ``check_optimizer`` against a reference rule,
``check_function`` against a reference function, ``check_decode``), the bug in one line, and
the two versions. The correct versions are the idioms of the field (Hugging Face's
``LlamaRMSNorm`` upcast, ``F.layer_norm``'s biased variance, FlashAttention's running max
and rescale, Meta's interleaved RoPE, ``repeat_interleave`` for GQA); the buggy ones are the
mistakes people make and post about (Baggag & Saad §3 for the ops, §2.4 and §5.5 for the
optimizers, §5.3 for K-FAC).

Conventions the kernels follow, from the reference ops (``nlaverify.check.op_signature``):
RoPE pairs :math:`(x_{2i}, x_{2i+1})` (RoFormer's interleaved convention,
``nlaverify/ops/rotary.py``; Hugging Face's half split is a permutation of the head's
coordinates, hence a *bug* against this op); ``repeat_kv`` lets query head :math:`k` read
key/value head :math:`\lfloor k/n_{\text{rep}}\rfloor`; ``cross_entropy`` ignores targets
``-100`` and averages over the others.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

EPS = 1e-5  # the reference ops' eps (rmsnorm, layernorm)
IGNORE = -100  # the reference cross_entropy's ignore index
BLOCK = 2  # the key block of the online-softmax kernels (n > 2 shows a missing rescale)


@dataclass(frozen=True)
class Kernel:
    """One benchmark entry: ``correct`` and ``buggy`` versions of a kernel, checked by
    ``call`` against ``target`` (an op, a rule or a reference), in each of ``dtypes``.
    ``options`` are extra keywords of the call (``shapes=``, ``batch=``); ``grad`` the sizes
    of the float64 inputs for ``torch.autograd.gradcheck`` / ``jax.test_util.check_grads``
    (``None``: they do not apply, e.g. an optimizer step has no backward to check)."""

    name: str
    framework: str
    call: str
    target: str
    bug: str
    correct: Callable[..., Any]
    buggy: Callable[..., Any]
    dtypes: tuple[str, ...] = ("float32", "bfloat16")
    options: dict[str, Any] = field(default_factory=dict)
    grad: dict[str, int] | None = None


def _torch() -> Any:
    import torch

    return torch


def _acc_dtype(x: Any) -> Any:
    """float32 at least: what fused kernels accumulate in (float64 stays float64)."""
    torch = _torch()
    return torch.promote_types(x.dtype, torch.float32)


# -- softmax ------------------------------------------------------------------------------


def softmax_torch(z: Any) -> Any:
    e = (z - z.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def softmax_torch_no_shift(z: Any) -> Any:
    e = z.exp()  # bug: exp overflows for logits > 88 (float32, bfloat16)
    return e / e.sum(-1, keepdim=True)


def softmax_jax(z: Any) -> Any:
    import jax.numpy as jnp

    e = jnp.exp(z - jnp.max(z, axis=-1, keepdims=True))
    return e / jnp.sum(e, axis=-1, keepdims=True)


def softmax_jax_no_shift(z: Any) -> Any:
    import jax.numpy as jnp

    e = jnp.exp(z)  # bug: no max shift
    return e / jnp.sum(e, axis=-1, keepdims=True)


# -- norms --------------------------------------------------------------------------------


def rmsnorm_torch(x: Any, gamma: Any) -> Any:
    # Hugging Face's LlamaRMSNorm: upcast, normalise, cast back
    h = x.to(_acc_dtype(x))
    h = h * (h.pow(2).mean(-1, keepdim=True) + EPS).rsqrt()
    return gamma * h.to(x.dtype)


def rmsnorm_torch_no_mean(x: Any, gamma: Any) -> Any:
    h = x.to(_acc_dtype(x))
    h = h * (h.pow(2).sum(-1, keepdim=True) + EPS).rsqrt()  # bug: sum, not mean (no 1/d)
    return gamma * h.to(x.dtype)


def rmsnorm_jax(x: Any, gamma: Any) -> Any:
    import jax.numpy as jnp

    ms = jnp.mean(x.astype(jnp.promote_types(x.dtype, jnp.float32)) ** 2, axis=-1,
                  keepdims=True)
    return (x * jnp.sqrt(ms + EPS) ** -1).astype(x.dtype) * gamma


def rmsnorm_jax_eps_outside(x: Any, gamma: Any) -> Any:
    import jax.numpy as jnp

    ms = jnp.mean(x.astype(jnp.promote_types(x.dtype, jnp.float32)) ** 2, axis=-1,
                  keepdims=True)
    return (x / (jnp.sqrt(ms) + EPS)).astype(x.dtype) * gamma  # bug: eps outside the root


def layernorm_torch(x: Any, gamma: Any, beta: Any) -> Any:
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    return (x - mu) / (var + EPS).sqrt() * gamma + beta


def layernorm_torch_unbiased(x: Any, gamma: Any, beta: Any) -> Any:
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True)  # bug: torch.var is unbiased (1/(d-1)) by default
    return (x - mu) / (var + EPS).sqrt() * gamma + beta


def layernorm_jax(x: Any, gamma: Any, beta: Any) -> Any:
    import jax.numpy as jnp

    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + EPS) * gamma + beta


def layernorm_jax_unbiased(x: Any, gamma: Any, beta: Any) -> Any:
    import jax.numpy as jnp

    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True, ddof=1)  # bug: the sample variance
    return (x - mu) / jnp.sqrt(var + EPS) * gamma + beta


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


# -- hand-written backward passes ---------------------------------------------------------


def _rmsnorm_function(mean_in_backward: bool) -> Any:
    torch = _torch()

    class RMSNormFunction(torch.autograd.Function):
        """A fused RMSNorm with a hand-written backward:
        x̄ = r (ḡ γ) - x r^3 mean(ḡ γ x), γ̄ = Σ ḡ x r, with r = 1/sqrt(mean(x²) + eps)."""

        @staticmethod
        def forward(ctx: Any, x: Any, gamma: Any) -> Any:
            r = (x.pow(2).mean(-1, keepdim=True) + EPS).rsqrt()
            ctx.save_for_backward(x, gamma, r)
            return x * r * gamma

        @staticmethod
        def backward(ctx: Any, g: Any) -> tuple[Any, Any]:
            x, gamma, r = ctx.saved_tensors
            gg = g * gamma
            dot = (gg * x).mean(-1, keepdim=True) if mean_in_backward else \
                (gg * x).sum(-1, keepdim=True)  # bug: the 1/d of the mean dropped
            dx = r * gg - x * r.pow(3) * dot
            dgamma = (g * x * r).reshape(-1, x.shape[-1]).sum(0)
            return dx, dgamma

    return RMSNormFunction


def rmsnorm_torch_function(x: Any, gamma: Any) -> Any:
    return _rmsnorm_function(True).apply(x, gamma)


def rmsnorm_torch_function_bad_backward(x: Any, gamma: Any) -> Any:
    return _rmsnorm_function(False).apply(x, gamma)


def _softmax_custom_vjp(all_axes_bug: bool) -> Any:
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def softmax(z: Any) -> Any:
        return jax.nn.softmax(z, axis=-1)

    def fwd(z: Any) -> tuple[Any, Any]:
        y = jax.nn.softmax(z, axis=-1)
        return y, y

    def bwd(y: Any, g: Any) -> tuple[Any]:
        if all_axes_bug:  # bug: <g, y> summed over every axis, not per row
            return (y * (g - jnp.sum(g * y)),)
        return (y * (g - jnp.sum(g * y, axis=-1, keepdims=True)),)

    softmax.defvjp(fwd, bwd)
    return softmax


def softmax_jax_custom_vjp(z: Any) -> Any:
    return _softmax_custom_vjp(False)(z)


def softmax_jax_custom_vjp_bad(z: Any) -> Any:
    return _softmax_custom_vjp(True)(z)


# -- long reductions in float16 -----------------------------------------------------------


def affine_torch_fp32_acc(X: Any, W: Any, b: Any) -> Any:
    dt = _acc_dtype(X)
    return (X.to(dt) @ W.to(dt) + b.to(dt)).to(X.dtype)


def affine_torch_fp16_acc(X: Any, W: Any, b: Any) -> Any:
    # bug (in float16): the running sum of a naive kernel kept in the input's dtype
    acc = b.expand(*X.shape[:-1], W.shape[-1]).clone()
    for k in range(X.shape[-1]):
        acc = acc + X[..., k:k + 1] * W[k]
    return acc


def rmsnorm_torch_fp16_sum(x: Any, gamma: Any) -> Any:
    # bug (in float16): the sum of squares over d in the input's dtype
    acc = x.new_zeros(*x.shape[:-1], 1)
    for k in range(x.shape[-1]):
        acc = acc + x[..., k:k + 1] * x[..., k:k + 1]
    return x * (acc / x.shape[-1] + EPS).rsqrt() * gamma


# -- activations and losses ---------------------------------------------------------------


def gelu_torch(x: Any) -> Any:
    return _torch().nn.functional.gelu(x)


def gelu_torch_tanh(x: Any) -> Any:
    return _torch().nn.functional.gelu(x, approximate="tanh")  # bug: the tanh approximation


def gelu_jax(x: Any) -> Any:
    import jax

    return jax.nn.gelu(x, approximate=False)


def gelu_jax_default(x: Any) -> Any:
    import jax

    return jax.nn.gelu(x)  # bug: jax.nn.gelu defaults to the tanh approximation


def swiglu_jax(a: Any, b: Any) -> Any:
    import jax

    return jax.nn.silu(a) * b


def swiglu_jax_swapped(a: Any, b: Any) -> Any:
    import jax

    return a * jax.nn.silu(b)  # bug: the gate on the up projection


def cross_entropy_torch(Z: Any, t: Any) -> Any:
    F = _torch().nn.functional
    return F.cross_entropy(Z.reshape(-1, Z.shape[-1]), t.reshape(-1), ignore_index=IGNORE)


def cross_entropy_torch_mean_all(Z: Any, t: Any) -> Any:
    logp = Z.log_softmax(-1)
    keep = t != IGNORE
    nll = -logp.gather(-1, t.clamp(min=0)[..., None])[..., 0] * keep
    return nll.sum() / t.numel()  # bug: divides by every token, ignored ones too


def cross_entropy_jax(Z: Any, t: Any) -> Any:
    import jax
    import jax.numpy as jnp

    keep = t != IGNORE
    logp = jax.nn.log_softmax(Z, axis=-1)
    nll = -jnp.take_along_axis(logp, jnp.where(keep, t, 0)[..., None], axis=-1)[..., 0]
    return jnp.sum(jnp.where(keep, nll, 0)) / jnp.sum(keep)


def cross_entropy_jax_no_ignore(Z: Any, t: Any) -> Any:
    import optax

    # bug: optax's integer-label loss knows no ignore index
    return optax.softmax_cross_entropy_with_integer_labels(Z, t).mean()


# -- optimizers ---------------------------------------------------------------------------

ADAMW = {"lr": 1e-2, "b1": 0.9, "b2": 0.999, "eps": 1e-8, "weight_decay": 0.1}


def adamw_init_torch(params: dict[str, Any]) -> dict[str, Any]:
    torch = _torch()
    return {"t": 0, "m": {k: torch.zeros_like(v) for k, v in params.items()},
            "v": {k: torch.zeros_like(v) for k, v in params.items()}}


def _adam_step_torch(params: dict[str, Any], grads: dict[str, Any], state: dict[str, Any],
                     coupled: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    h = ADAMW
    t = state["t"] + 1
    new, m_all, v_all = {}, {}, {}
    for k, p in params.items():
        g = grads[k] + h["weight_decay"] * p if coupled else grads[k]  # bug: L2, not AdamW
        m = h["b1"] * state["m"][k] + (1 - h["b1"]) * g
        v = h["b2"] * state["v"][k] + (1 - h["b2"]) * g * g
        mhat, vhat = m / (1 - h["b1"] ** t), v / (1 - h["b2"] ** t)
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


# -- the table ----------------------------------------------------------------------------

_G = {"n": 4, "d": 8, "m": 6, "d_k": 4, "d_v": 3, "h": 2, "h_kv": 2, "d_h": 6, "V": 5,
      "d_in": 64, "d_out": 3}
FP16 = ("float16",)

KERNELS: list[Kernel] = [
    Kernel("softmax", "torch", "check_op", "softmax", "no max shift",
           softmax_torch, softmax_torch_no_shift, grad=_G),
    Kernel("softmax", "jax", "check_op", "softmax", "no max shift",
           softmax_jax, softmax_jax_no_shift, grad=_G),
    Kernel("rmsnorm", "torch", "check_op", "rmsnorm", "sum of squares, no 1/d",
           rmsnorm_torch, rmsnorm_torch_no_mean, grad=_G),
    Kernel("rmsnorm", "jax", "check_op", "rmsnorm", "eps outside the root",
           rmsnorm_jax, rmsnorm_jax_eps_outside, grad=_G),
    Kernel("layernorm", "torch", "check_op", "layernorm", "unbiased variance (torch.var)",
           layernorm_torch, layernorm_torch_unbiased, grad=_G),
    Kernel("layernorm", "jax", "check_op", "layernorm", "unbiased variance (ddof=1)",
           layernorm_jax, layernorm_jax_unbiased, grad=_G),
    Kernel("attention", "torch", "check_op", "attention", "scores scaled by 1/d_k",
           attention_torch, attention_torch_by_d, grad=_G),
    Kernel("causal attention", "torch", "check_op", "causal_attention",
           "mask tril(diagonal=1): sees the next token",
           causal_attention_torch, causal_attention_torch_peek, grad=_G),
    Kernel("causal attention", "jax", "check_op", "causal_attention",
           "mask '>' : excludes the diagonal", causal_attention_jax,
           causal_attention_jax_no_self, grad=_G),
    Kernel("online-softmax attention", "torch", "check_op", "attention",
           "no exp(m - m') rescale of l and acc", online_attention_torch,
           online_attention_torch_no_rescale, grad=_G),
    Kernel("online-softmax causal attention", "jax", "check_op", "causal_attention",
           "no exp(m - m') rescale of l and acc", online_causal_attention_jax,
           online_causal_attention_jax_no_rescale, grad=_G),
    Kernel("rope", "torch", "check_op", "rope", "half-split pairs (rotate_half)",
           rope_torch, rope_torch_half_split, grad=_G),
    Kernel("rope", "jax", "check_op", "rope", "half-split pairs",
           rope_jax, rope_jax_half_split, grad=_G),
    Kernel("repeat_kv (GQA)", "torch", "check_op", "repeat_kv", "Tensor.repeat (tile)",
           repeat_kv_torch, repeat_kv_torch_tile, grad=_G),
    Kernel("repeat_kv (GQA)", "jax", "check_op", "repeat_kv", "jnp.tile",
           repeat_kv_jax, repeat_kv_jax_tile, grad=_G),
    Kernel("rmsnorm autograd.Function", "torch", "check_op", "rmsnorm",
           "backward: sum for mean in x̄", rmsnorm_torch_function,
           rmsnorm_torch_function_bad_backward, grad=_G),
    Kernel("softmax custom_vjp", "jax", "check_op", "softmax",
           "bwd: <g, y> over all axes", softmax_jax_custom_vjp, softmax_jax_custom_vjp_bad,
           grad=_G),
    Kernel("affine, d_in = 4096", "torch", "check_op", "affine",
           "float16 running sum", affine_torch_fp32_acc, affine_torch_fp16_acc, FP16,
           {"shapes": {"d_in": 4096, "n": (1, 2), "d_out": (1, 2)}, "batch": False},
           grad=_G),
    Kernel("rmsnorm, d = 4096", "torch", "check_op", "rmsnorm",
           "float16 sum of squares", rmsnorm_torch, rmsnorm_torch_fp16_sum, FP16,
           {"shapes": {"d": 4096, "n": (1, 2)}, "batch": False}, grad=_G),
    Kernel("gelu (erf)", "torch", "check_op", "gelu_erf", "approximate='tanh'",
           gelu_torch, gelu_torch_tanh, grad=_G),
    Kernel("gelu (erf)", "jax", "check_op", "gelu_erf", "jax.nn.gelu default (tanh)",
           gelu_jax, gelu_jax_default, grad=_G),
    Kernel("swiglu", "jax", "check_op", "swiglu", "SiLU on the wrong branch",
           swiglu_jax, swiglu_jax_swapped, grad=_G),
    Kernel("cross-entropy", "torch", "check_op", "cross_entropy",
           "mean over all tokens, ignored ones too", cross_entropy_torch,
           cross_entropy_torch_mean_all, grad=_G),
    Kernel("cross-entropy", "jax", "check_op", "cross_entropy",
           "no ignore index (optax integer labels)", cross_entropy_jax,
           cross_entropy_jax_no_ignore, grad=_G),
    Kernel("AdamW step", "torch", "check_optimizer", "adamw", "coupled (L2) decay",
           adamw_step_torch, adamw_step_torch_coupled),
    Kernel("Muon step", "jax", "check_optimizer", "muon", "no normalisation before NS",
           muon_step_jax, muon_step_jax_no_normalize),
    Kernel("Muon step, gradients x 30", "jax", "check_optimizer", "muon",
           "no normalisation before NS", muon_step_jax, muon_step_jax_no_normalize,
           options={"grad_scale": 30.0}),
    Kernel("K-FAC factors", "jax", "check_function", "kfac_factors",
           "sum over positions, not the mean", kfac_factors_jax, kfac_factors_jax_sum),
    Kernel("KV-cache decoder", "torch", "check_decode", "causal decoder (GQA, RoPE)",
           "RoPE position = cache length after the append (off by one)", decoder_torch,
           decoder_torch_rope_after_append),
]
