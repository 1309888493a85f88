"""Array namespaces: one way to ask for a backend by name.

Every formula in :mod:`nlaverify.ops` is written once against the small
interface of :class:`~nlaverify.backends.base.Namespace`. The same function then
runs on

========  ======================================================================
name      what it gives
========  ======================================================================
numpy     the hand-derived implementation on the CPU (array-api-compat)
jax       the autodiff side, float64 enabled (``jax.vjp`` is the oracle)
cupy      the GPU implementation (array-api-compat); only where a GPU is present
strict    array-api-strict on its emulated ``device1``: refuses implicit host conversion
          and non-standard calls, the CI stand-in for a GPU
sympy     exact: object arrays of SymPy expressions (symbols and rationals)
mpmath    high precision: object arrays of ``mpf`` in a private context
========  ======================================================================
"""

from __future__ import annotations

from nlaverify.backends.base import BackendUnavailable, Namespace
from nlaverify.backends.host import dtype_name, to_float64, to_host
from nlaverify.backends.objectns import MpmathNamespace, SympyNamespace

BACKENDS: tuple[str, ...] = ("numpy", "jax", "cupy", "strict", "sympy", "mpmath")
DEFAULT_MPMATH_DIGITS = 50

__all__ = [
    "BACKENDS",
    "DEFAULT_MPMATH_DIGITS",
    "BackendUnavailable",
    "MpmathNamespace",
    "Namespace",
    "SympyNamespace",
    "available_backends",
    "dtype_name",
    "get_namespace",
    "to_float64",
    "to_host",
]

_CACHE: dict[tuple[str, int | None], Namespace] = {}


def get_namespace(name: str, *, digits: int | None = None) -> Namespace:
    """Return the array namespace called ``name``.

    Args:
        name: one of :data:`BACKENDS`.
        digits: decimal digits of the ``mpmath`` namespace (default
            :data:`DEFAULT_MPMATH_DIGITS`, at least 40 is advised); ignored by the others.

    Raises:
        ValueError: unknown ``name`` (the message lists the known ones).
        BackendUnavailable: the backend cannot run here (e.g. ``cupy`` without a GPU).
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}: expected one of {', '.join(BACKENDS)}")
    if name == "mpmath":
        digits = DEFAULT_MPMATH_DIGITS if digits is None else int(digits)
        if digits < 16:
            raise ValueError(f"digits: expected >= 16 for the mpmath backend, got {digits}")
    else:
        digits = None
    key = (name, digits)
    if key not in _CACHE:
        _CACHE[key] = _make(name, digits)
    return _CACHE[key]


def _make(name: str, digits: int | None) -> Namespace:
    if name == "sympy":
        return SympyNamespace()
    if name == "mpmath":
        assert digits is not None
        return MpmathNamespace(digits)
    from nlaverify.backends.arrayapi import make_array_api_namespace

    return make_array_api_namespace(name)


def available_backends() -> dict[str, str | None]:
    """Map each backend name to ``None`` when it runs here, else to the reason it cannot."""
    out: dict[str, str | None] = {}
    for name in BACKENDS:
        try:
            get_namespace(name)
            out[name] = None
        except BackendUnavailable as exc:
            out[name] = str(exc)
    return out
