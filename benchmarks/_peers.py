"""The peers of ``benchmarks/user_bugs.py``, the tools a user would otherwise pick, each
judging a kernel ``caught`` or ``passed`` on the same inputs: ``torch.autograd.gradcheck`` /
``jax.test_util.check_grads`` (float64 finite differences), ``torch.testing.assert_close``
with its default dtype tolerances, and FlashAttention's test rule (the kernel's error at
most twice a naive same-dtype implementation's).
"""

from __future__ import annotations

from typing import Any

import _user_kernels as uk
import numpy as np

__all__ = ["assert_close_verdict", "flash_rule_verdict", "grad_inputs", "gradcheck_verdict"]


def grad_inputs(k: uk.Kernel, rng: np.random.Generator) -> list[np.ndarray]:
    """Float64 standard-normal arguments of the op in ``op_signature`` order at the sizes
    ``k.grad`` (token ids in ``[0, V)``, a third of them the ignore index)."""
    from nlaverify.ops.registry import get_op

    sizes = dict(k.grad or {})
    sizes.update({d: v for d, v in k.options.get("shapes", {}).items() if isinstance(v, int)
                  and d not in ("d_in", "d")})
    args = []
    for a in get_op(k.target).args:
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in a.dims)
        if a.kind == "tokens":
            t = rng.integers(0, sizes["V"], size=shape)
            t[1:][rng.random(shape[0] - 1) < 1 / 3] = uk.IGNORE
            args.append(t)
        else:
            args.append(rng.standard_normal(shape))
    return args


def gradcheck_verdict(k: uk.Kernel, version: str, seed: int = 0) -> str:
    """``caught`` (the tool reports a mismatch), ``passed``, or ``error: ...`` (it could not
    run), for ``torch.autograd.gradcheck`` / ``jax.test_util.check_grads``."""
    from nlaverify.ops.registry import get_op

    fn = getattr(k, version)
    args = grad_inputs(k, np.random.default_rng(seed))
    real = [i for i, a in enumerate(get_op(k.target).args) if a.kind == "real"]
    if k.framework == "torch":
        import torch

        ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) if i in real
              else torch.tensor(a) for i, a in enumerate(args)]
        try:
            ok = torch.autograd.gradcheck(fn, tuple(ts), raise_exception=False)
        except Exception as exc:
            return f"error: {type(exc).__name__}"
        return "passed" if ok else "caught"
    import jax
    import jax.numpy as jnp
    from jax.test_util import check_grads

    with jax.enable_x64(True):
        xs = [jnp.asarray(a) for a in args]

        def f(*reals: Any) -> Any:
            full = list(xs)
            for i, r in zip(real, reals, strict=True):
                full[i] = r
            return fn(*full)

        try:
            check_grads(f, tuple(xs[i] for i in real), order=1, modes=("rev",))
        except AssertionError:
            return "caught"
        except Exception as exc:
            return f"error: {type(exc).__name__}"
        return "passed"


def assert_close_verdict(k: uk.Kernel, version: str, dtype: str, seed: int = 0) -> str:
    """``caught``, ``passed`` or ``error: ...`` for ``torch.testing.assert_close`` with its
    default tolerances for ``dtype`` (bfloat16: rtol 1.6e-2, atol 1e-5; float32: 1.3e-6,
    1e-5): the kernel's output in ``dtype`` on the inputs of :func:`grad_inputs` rounded to
    ``dtype``, against the op's float64 output on the same inputs rounded to ``dtype`` (the
    forward only: the peer compares outputs)."""
    import torch

    from nlaverify.backends import get_namespace
    from nlaverify.cases.rounding import exact_in
    from nlaverify.check.adapters import to_float64, to_framework
    from nlaverify.ops.registry import get_op

    spec = get_op(k.target)
    static = {**spec.static, **k.options.get("static", {})}
    args = [a if np.issubdtype(np.asarray(a).dtype, np.integer) else exact_in(a, dtype)
            for a in grad_inputs(k, np.random.default_rng(seed))]
    try:
        out = getattr(k, version)(*[to_framework(a, k.framework, None if np.issubdtype(
            np.asarray(a).dtype, np.integer) else dtype) for a in args])
        mine = torch.from_numpy(np.array(to_float64(out))).to(getattr(torch, dtype))
        ref = torch.from_numpy(np.asarray(spec.forward(get_namespace("numpy"), *args,
                                                       **static), dtype=np.float64))
        torch.testing.assert_close(mine, ref.to(getattr(torch, dtype)), equal_nan=True)
    except AssertionError:
        return "caught"
    except Exception as exc:
        return f"error: {type(exc).__name__}"
    return "passed"


def _fa_atol(ref: np.ndarray) -> float:
    """FlashAttention's absolute slack: twice the rounding of ``ref + 0.3 - 0.3`` in float32
    (``2 * (out_ref + 0.3 - 0.3 - out_ref).abs().max()`` in its tests)."""
    r = np.asarray(ref, np.float32)
    return 2.0 * float(np.max(np.abs((r + np.float32(0.3)) - np.float32(0.3) - r), initial=0.0))


def flash_rule_verdict(k: uk.Kernel, version: str, dtype: str, seed: int = 0) -> str:
    """``caught``, ``passed`` or ``error: ...`` for FlashAttention's test rule: the kernel's
    error against a reference one precision up (float32 for bfloat16, float64 for float32)
    at most twice that of a naive implementation in the same dtype, plus
    :func:`_fa_atol` -- on the output and on every cotangent (``jax.vjp`` / autograd), for
    the inputs of :func:`grad_inputs` rounded to ``dtype``. The naive implementation is the
    catalogue op run on JAX's namespace in ``dtype`` (a plain, unfused one)."""
    import jax
    import jax.numpy as jnp

    from nlaverify.backends import get_namespace
    from nlaverify.cases.rounding import exact_in
    from nlaverify.check.adapters import autodiff_vjp, to_float64, to_framework
    from nlaverify.ops.registry import get_op

    spec = get_op(k.target)
    static = {**spec.static, **k.options.get("static", {})}
    rng = np.random.default_rng(seed)
    args = [a if np.issubdtype(np.asarray(a).dtype, np.integer) else exact_in(a, dtype)
            for a in grad_inputs(k, rng)]
    real = [i for i, a in enumerate(spec.args) if a.kind == "real"]
    up = "float64" if dtype == "float32" else "float32"
    jxp = get_namespace("jax")

    def op_run(dt: str) -> tuple[np.ndarray, list[np.ndarray]]:
        xs = [jnp.asarray(a) if i not in real else jnp.asarray(a, dtype=getattr(jnp, dt))
              for i, a in enumerate(args)]

        def f(*reals: Any) -> Any:
            full = list(xs)
            for i, r in zip(real, reals, strict=True):
                full[i] = r
            return spec.forward(jxp, *full, **static)

        with jax.enable_x64(True):
            out, pull = jax.vjp(f, *[xs[i] for i in real])
            G = jnp.asarray(exact_in(np.random.default_rng([seed, 9]).standard_normal(
                np.shape(out)), dt), dtype=out.dtype)
            cots = pull(G)
        return np.asarray(out, np.float64), [np.asarray(c, np.float64) for c in cots]

    try:
        ref_out, ref_cots = op_run(up)
        naive_out, naive_cots = op_run(dtype)
        G = exact_in(np.random.default_rng([seed, 9]).standard_normal(np.shape(ref_out)), dtype)
        fw = [to_framework(a, k.framework, None if i not in real else dtype)
              for i, a in enumerate(args)]
        out, cots = autodiff_vjp(getattr(k, version), k.framework, fw, real,
                                 to_framework(G, k.framework, dtype))
        mine = [to_float64(out)] + [to_float64(c) for c in cots]
    except Exception as exc:
        return f"error: {type(exc).__name__}"
    for m, n, r in zip(mine, [naive_out, *naive_cots], [ref_out, *ref_cots], strict=True):
        err = np.max(np.abs(m - r), initial=0.0) if np.all(np.isfinite(m)) else np.inf
        if not err <= 2.0 * np.max(np.abs(n - r), initial=0.0) + _fa_atol(r):
            return "caught"
    return "passed"
