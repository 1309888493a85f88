"""The one place where an array leaves its device for the host.

Device arrays (CuPy on a GPU, ``array-api-strict`` on its emulated ``device1``)
refuse implicit conversion by ``numpy.asarray``; code on the pipeline path must
never rely on it. :func:`to_host` is the single, explicit transfer used where a
host copy is really wanted (comparisons, reports, token-range checks).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def to_host(x: Any) -> np.ndarray:
    """A NumPy copy (or view) of ``x``, moved explicitly from whichever device holds it.

    NumPy arrays and Python scalars pass through ``numpy.asarray``; CuPy arrays use
    ``.get()``; JAX arrays ``jax.device_get``; array-API arrays with a non-host device
    (``array-api-strict``) are moved with ``to_device`` first. Object arrays (SymPy,
    mpmath) are returned unchanged.
    """
    if isinstance(x, np.ndarray | np.generic | int | float | bool):
        return np.asarray(x)
    mod = type(x).__module__.split(".", 1)[0]
    if mod == "cupy":  # pragma: no cover - needs a GPU
        return x.get()
    if mod in ("jax", "jaxlib"):
        # a jax.Array's own __array__ is jax.device_get without its pytree walk (a third
        # of the lowered graph's per-call cost on tiny, where token ids are checked)
        if hasattr(x, "addressable_shards"):
            return np.asarray(x)
        import jax

        return np.asarray(jax.device_get(x))
    if mod == "array_api_strict":
        import array_api_strict

        return np.asarray(x.to_device(array_api_strict.Device("CPU_DEVICE")))
    return np.asarray(x)


def to_float64(x: Any) -> np.ndarray:
    """:func:`to_host`, then float64 (object arrays of SymPy numbers or ``mpf``
    converted entry by entry)."""
    arr = to_host(x)
    if arr.dtype == object:
        return np.asarray([float(v) for v in arr.reshape(-1)], dtype=np.float64).reshape(
            arr.shape)
    return arr.astype(np.float64)


def dtype_name(dtype: Any) -> str:
    """The plain name of a dtype of any backend (``"float32"``, ``"bfloat16"`` ...)."""
    name = getattr(dtype, "name", None) or str(dtype)
    return str(name).rsplit(".", 1)[-1]
