r"""The op kernels of ``benchmarks/user_bugs.py`` (through :mod:`_user_kernels`) that are not
attention: softmax, RMSNorm and LayerNorm, hand-written backward passes, long float16
reductions, activations and losses, each correct and buggy, checked by ``check_op``.

The conventions are the reference ops' (``nlaverify.check.op_signature``): :data:`EPS` for
the norms, ``cross_entropy`` ignores targets :data:`IGNORE` and averages over the others.
"""

from __future__ import annotations

from typing import Any

EPS = 1e-5  # the reference ops' eps (rmsnorm, layernorm)
IGNORE = -100  # the reference cross_entropy's ignore index


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


def rmsnorm_torch_stride_blind(x: Any, gamma: Any) -> Any:
    # reads x's storage as contiguous row-major, as a raw Triton/CUDA kernel indexing
    # x_ptr + i * d + j does: right on contiguous tensors, wrong on a transposed view
    strides, acc = [], 1
    for n in reversed(x.shape):
        strides.append(acc)
        acc *= n
    return rmsnorm_torch(x.as_strided(x.shape, tuple(reversed(strides))), gamma)


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
