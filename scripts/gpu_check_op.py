"""check_op on GPU kernels (issue 17): a CuPy softmax in float32 and float16 (CuPy has no
bfloat16) and JAX kernels in bfloat16 on the default device (the GPU where there is one),
each correct and with a planted bug; prints each report's verdict, worst ratio, first failure
and time. Run by ``scripts/device_check.sh``; on a machine without CuPy the CuPy part says
so and the JAX part runs on the CPU.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from nlaverify.check import check_op


def jax_rmsnorm(x, gamma):
    return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-5) * gamma


def jax_rmsnorm_sum(x, gamma):  # planted: the sum for the mean
    return x / jnp.sqrt(jnp.sum(x * x, axis=-1, keepdims=True) + 1e-5) * gamma


def jax_causal_attention(q, k, v):
    n = q.shape[-2]
    s = q @ jnp.swapaxes(k, -1, -2) / jnp.sqrt(q.shape[-1]).astype(q.dtype)
    s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -jnp.inf)
    return jax.nn.softmax(s, axis=-1) @ v


def jax_causal_attention_by_d(q, k, v):  # planted: 1/d for 1/sqrt(d)
    n = q.shape[-2]
    s = q @ jnp.swapaxes(k, -1, -2) / q.shape[-1]
    s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -jnp.inf)
    return jax.nn.softmax(s, axis=-1) @ v


def show(label: str, make) -> None:
    start = time.perf_counter()
    report = make()
    sec = time.perf_counter() - start
    first = report.first_failure
    where = "" if first is None else f"  first failure: {first.check} at {first.where}, " \
                                     f"ratio {first.ratio:.3g}"
    print(f"{label:<46} {'ok' if report.ok else 'FAIL':<5} worst ratio "
          f"{report.worst_ratio:9.3g}  {sec:6.1f} s{where}")


def main() -> int:
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}")
    shapes = {"d": (16, 64)}
    show("jax rmsnorm bfloat16", lambda: check_op(jax_rmsnorm, "rmsnorm", dtype="bfloat16",
                                                   shapes=shapes))
    show("jax rmsnorm (sum for mean) bfloat16",
         lambda: check_op(jax_rmsnorm_sum, "rmsnorm", dtype="bfloat16", shapes=shapes))
    att = {"d_k": (16, 64), "d_v": (8, 32), "n": (4, 32)}  # large: the float64 reference
    show("jax causal attention bfloat16", lambda: check_op(
        jax_causal_attention, "causal_attention", dtype="bfloat16", shapes=att,
        reference="float64"))
    show("jax causal attention (1/d) bfloat16", lambda: check_op(
        jax_causal_attention_by_d, "causal_attention", dtype="bfloat16", shapes=att,
        reference="float64"))
    try:
        import cupy as cp

        cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no CuPy or no GPU here
        print(f"cupy: not run ({type(exc).__name__}: {exc})")
        return 0

    def cupy_softmax(z):
        e = cp.exp(z - z.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def cupy_softmax_unshifted(z):  # planted: no max shift
        e = cp.exp(z)
        return e / e.sum(axis=-1, keepdims=True)

    for dtype in ("float32", "float16"):
        show(f"cupy softmax {dtype}", lambda dtype=dtype: check_op(
            cupy_softmax, "softmax", dtype=dtype, framework="cupy"))
        show(f"cupy softmax (no shift) {dtype}", lambda dtype=dtype: check_op(
            cupy_softmax_unshifted, "softmax", dtype=dtype, framework="cupy"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
