"""NumPy, JAX and CuPy namespaces through array-api-compat, and ``array-api-strict``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nlaverify.backends.base import BackendUnavailable, Namespace


class ArrayAPINamespace(Namespace):
    """A standard array API namespace plus the few extras of :class:`Namespace`.

    Every attribute not defined here (``exp``, ``sum``, ``matmul``, ``where``,
    ``reshape``, ``permute_dims``, ``float64`` ...) is the array API function of
    the wrapped namespace, so the ops read as plain array-API code.
    """

    def __init__(self, name: str, xp: Any, erf: Any, tracer_type: type | None = None):
        self.name = name
        self._xp = xp
        self.erf = erf
        self._tracer_type = tracer_type
        self.pi = math.pi

    def __getattr__(self, attr: str) -> Any:
        # only reached for attributes not set on the instance or class
        return getattr(self._xp, attr)

    def asarray(self, x: Any, dtype: Any = None, **kwargs: Any) -> Any:
        return self._xp.asarray(x, dtype=dtype, **kwargs)

    def const(self, v: Any) -> Any:
        # a NumPy scalar (np.float64(1e-5)) would promote float32/bfloat16 arrays: hand the
        # ops a Python number, which takes the array's dtype (array API promotion rules)
        return v.item() if isinstance(v, np.generic) else v

    def rational(self, p: int, q: int = 1) -> float:
        return p / q

    def const_sqrt(self, p: int, q: int = 1, pi_power: int = 0) -> float:
        return math.sqrt(p / q * math.pi**pi_power)

    def stability_shift(self, z: Any, axis: int = -1) -> Any:
        m = self._xp.max(z, axis=axis, keepdims=True)
        # an all-masked row has max -inf: shift it by 0, so z - c stays -inf (not nan)
        return self._xp.where(m == -math.inf, self._xp.zeros_like(m), m)

    def safe_row_sum(self, e: Any, axis: int = -1) -> Any:
        s = self._xp.sum(e, axis=axis, keepdims=True)
        # 0 only on an all-masked row (otherwise s >= 1): there softmax is 0/1 = 0
        return self._xp.where(s > 0, s, self._xp.ones_like(s))

    def nan_masked_rows(self, p: Any, e: Any, axis: int = -1) -> Any:
        s = self._xp.sum(e, axis=axis, keepdims=True)
        return self._xp.where(s > 0, p, self._xp.asarray(float("nan"), dtype=p.dtype))

    def norm_scale(self, x: Any, eps: Any, axis: int = -1) -> Any:
        # max(max|x|, sqrt(eps)) rounded up to a power of two and held inside the normal
        # range: x/s is then exact, and 1/s a normal number (XLA computes x/s as x*(1/s),
        # and a subnormal 1/s flushed to 0 on the CPU would turn a huge row into 0/0)
        xp = self._xp
        m = xp.max(xp.abs(x), axis=axis, keepdims=True)
        m = xp.maximum(m, xp.full_like(m, math.sqrt(float(eps))))
        info = xp.finfo(x.dtype)
        top = math.frexp(float(info.max))[1] - 2          # 126 for float32, 1022 for float64
        low = math.frexp(float(info.smallest_normal))[1]  # -125, -1021
        e = xp.clip(xp.ceil(xp.log2(m)), min=low, max=top)
        return xp.pow(xp.full_like(e, 2.0), e)

    def one_hot(self, tokens: Any, depth: int, dtype: Any) -> Any:
        return self._xp.astype(tokens[..., None] == self.arange(depth), dtype)

    def is_concrete(self, x: Any) -> bool:
        return self._tracer_type is None or not isinstance(x, self._tracer_type)


class JaxNamespace(ArrayAPINamespace):
    """JAX's namespace: :meth:`Namespace.linear_recurrence` as one ``jax.lax.scan``."""

    def linear_recurrence(self, a: Any, b: Any, axis: int = -3, reverse: bool = False) -> Any:
        r"""The states of :math:`x_k = a_k \odot x_{k-1} + b_k`, :math:`x_0 = b_0` (or the
        reverse recurrence), as :meth:`Namespace.linear_recurrence` computes them, the same
        operations in the same order, in one ``jax.lax.scan`` over the steps
        :math:`k \ge 1`."""
        import jax

        if axis >= 0:
            raise ValueError(f"linear_recurrence: expected a negative axis, got {axis}")
        xp = self._xp
        dtype = xp.result_type(a, b)  # the loop's promotion (lax.scan's carry keeps one type)
        am = xp.moveaxis(xp.asarray(a, dtype=dtype), axis, 0)
        bm = xp.moveaxis(xp.asarray(b, dtype=dtype), axis, 0)
        if reverse:
            am, bm = am[::-1], bm[::-1]

        def step(x: Any, ab: tuple[Any, Any]) -> tuple[Any, Any]:
            new = ab[0] * x + ab[1]
            return new, new

        _, rest = jax.lax.scan(step, bm[0], (am[1:], bm[1:]))
        states = xp.concatenate([bm[:1], rest], axis=0)
        if reverse:
            states = states[::-1]
        return xp.moveaxis(states, 0, axis)


def _numpy_erf(x: Any) -> Any:
    """SciPy's ``erf``, imported on the first call (80 ms no command pays for nothing)."""
    import scipy.special

    return scipy.special.erf(x)


def make_array_api_namespace(name: str) -> ArrayAPINamespace:
    """Build the ``numpy``, ``jax`` or ``cupy`` namespace (see :func:`get_namespace`)."""
    if name == "numpy":
        import array_api_compat.numpy as xp

        return ArrayAPINamespace("numpy", xp, _numpy_erf)
    if name == "jax":
        import jax

        # References are float64: enable it before the first array is made.
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        import jax.scipy.special

        return JaxNamespace("jax", jnp, jax.scipy.special.erf, jax.core.Tracer)
    if name == "cupy":
        try:
            import cupy
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise BackendUnavailable(
                "cupy: not installed (pip install 'nlaverify[cuda12]' or '[cuda13]')"
            ) from exc
        try:  # pragma: no cover - needs a GPU
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # pragma: no cover - depends on the machine
            raise BackendUnavailable(f"cupy: no GPU ({exc})") from exc
        if count < 1:  # pragma: no cover - depends on the machine
            raise BackendUnavailable("cupy: no GPU (0 CUDA devices)")
        import array_api_compat.cupy as cxp  # pragma: no cover - needs a GPU
        import cupyx.scipy.special  # pragma: no cover - needs a GPU

        return ArrayAPINamespace("cupy", cxp, cupyx.scipy.special.erf)  # pragma: no cover
    if name == "strict":
        try:
            import array_api_strict
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise BackendUnavailable("strict: array-api-strict is not installed "
                                     "(pip install 'nlaverify[test]')") from exc
        return StrictNamespace(array_api_strict)
    raise ValueError(f"unknown array-API backend {name!r}")


class StrictNamespace(ArrayAPINamespace):
    """``array-api-strict`` on its emulated accelerator ``device1``: the CI stand-in for a GPU.

    Like CuPy, its arrays refuse implicit conversion to NumPy (``numpy.asarray`` raises)
    and cannot be mixed with arrays of another device; unlike NumPy, it accepts only
    the standard's functions and indexing. Every array the namespace creates lives on
    ``device1`` (a "current device", as in CuPy), so only an explicit transfer
    (:func:`nlaverify.backends.host.to_host`) reaches the host. ``erf`` is not in the
    standard: it is computed on the host after an explicit transfer and moved back.
    """

    _CREATORS = ("asarray", "arange", "zeros", "ones", "full", "eye", "empty", "linspace")

    def __init__(self, xp: Any) -> None:
        super().__init__("strict", xp, self._erf_on_host)
        self.device = xp.Device("device1")
        for fn in self._CREATORS:
            setattr(self, fn, self._on_device(getattr(xp, fn)))

    def _on_device(self, create: Any) -> Any:
        def make(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("device", self.device)
            return create(*args, **kwargs)

        make.__name__ = create.__name__
        return make

    def _erf_on_host(self, x: Any) -> Any:
        import scipy.special

        from nlaverify.backends.host import to_host

        return self._xp.asarray(scipy.special.erf(to_host(x)), dtype=x.dtype, device=x.device)
