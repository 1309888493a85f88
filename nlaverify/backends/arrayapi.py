"""NumPy, JAX and CuPy namespaces, all through array-api-compat."""

from __future__ import annotations

import math
from typing import Any

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

    def asarray(self, x: Any, dtype: Any = None) -> Any:
        return self._xp.asarray(x, dtype=dtype)

    def const(self, v: Any) -> Any:
        return v

    def rational(self, p: int, q: int = 1) -> float:
        return p / q

    def const_sqrt(self, p: int, q: int = 1, pi_power: int = 0) -> float:
        return math.sqrt(p / q * math.pi**pi_power)

    def stability_shift(self, z: Any, axis: int = -1) -> Any:
        return self._xp.max(z, axis=axis, keepdims=True)

    def one_hot(self, tokens: Any, depth: int, dtype: Any) -> Any:
        xp = self._xp
        return xp.astype(tokens[..., None] == xp.arange(depth), dtype)

    def is_concrete(self, x: Any) -> bool:
        return self._tracer_type is None or not isinstance(x, self._tracer_type)


def make_array_api_namespace(name: str) -> ArrayAPINamespace:
    """Build the ``numpy``, ``jax`` or ``cupy`` namespace (see :func:`get_namespace`)."""
    if name == "numpy":
        import array_api_compat.numpy as xp
        import scipy.special

        return ArrayAPINamespace("numpy", xp, scipy.special.erf)
    if name == "jax":
        import jax

        # References are float64: enable it before the first array is made.
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        import jax.scipy.special

        return ArrayAPINamespace("jax", jnp, jax.scipy.special.erf, jax.core.Tracer)
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
    raise ValueError(f"unknown array-API backend {name!r}")
