r"""The one tolerance model of nlaverify.

Every numeric comparison asks :func:`tolerance` for its bound and says why; no
test holds a bare constant. The model is the probabilistic rounding-error
analysis of Higham & Mary (2019): a length-:math:`k` inner product computed
in precision :math:`u` has a relative error of order :math:`\sqrt{k}\,u` (not
the worst-case :math:`k u`), errors compound through :math:`D` dependent
stages, and are amplified by the condition number :math:`\kappa` of the
computation:

.. math:: \mathrm{rtol} = C\, \kappa\, D \sqrt{k}\, u,\qquad C = 32,

where :math:`C` covers the constant of the bound (:math:`\lambda \approx 3`
standard deviations), the two compared computations both carrying error
(a factor 2), and the few elementary operations per output entry.
Comparisons are *normwise*: the largest entrywise error is measured against
the larger of the reference's largest entry and the unit scale of the inputs,

.. math:: \max_\iota |a_\iota - e_\iota| \le \mathrm{rtol}\,\max\bigl(1, \max_\iota|e_\iota|\bigr),

the natural criterion for backward-stable kernels (entries near 0 cannot have
small *relative* error, and normwise error is what a backward-error bound gives).

A central finite difference :math:`(f(x+hv) - f(x-hv))/2h` has truncation
error :math:`h^2 |f'''|/6` and rounding error :math:`u/h`;
:func:`finite_difference_tolerance` bounds it from the same inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: the constant C of the model (see the module docstring)
SAFETY = 32.0

_UNIT_ROUNDOFF = {
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
    "float32": 2.0**-24,
    "float64": 2.0**-53,
}


def unit_roundoff(dtype: Any, digits: int | None = None) -> float:
    r"""Unit roundoff :math:`u` of ``dtype``; ``"mpmath"`` with ``digits`` gives
    :math:`\tfrac12 10^{1-\text{digits}}`."""
    if dtype == "mpmath":
        if digits is None:
            raise ValueError("unit_roundoff: digits is required for the mpmath dtype")
        return 0.5 * 10.0 ** (1 - digits)
    name = getattr(dtype, "name", None) or str(np.dtype(dtype) if not isinstance(dtype, str)
                                                 else dtype)
    name = name.rsplit(".", 1)[-1]
    if name not in _UNIT_ROUNDOFF:
        raise ValueError(f"unit_roundoff: argument 'dtype': expected one of "
                         f"{', '.join(_UNIT_ROUNDOFF)} or 'mpmath', got {name!r}")
    return _UNIT_ROUNDOFF[name]


@dataclass(frozen=True)
class Comparison:
    """The outcome of :meth:`Tolerance.compare`."""

    max_abs: float
    scale: float
    ok: bool

    @property
    def normwise(self) -> float:
        """The normwise relative error ``max_abs / scale``."""
        return self.max_abs / self.scale


@dataclass(frozen=True)
class Tolerance:
    """A normwise relative tolerance and the reason it has that value."""

    rtol: float
    reason: str

    def compare(self, actual: Any, expected: Any) -> Comparison:
        """Compare two arrays (any backend, converted to float64 NumPy)."""
        a = _as_float64(actual)
        e = _as_float64(expected)
        if a.shape != e.shape:
            raise ValueError(f"compare: shapes differ: actual {a.shape} vs expected {e.shape}")
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(e))):
            return Comparison(math.inf, 1.0, False)
        max_abs = float(np.max(np.abs(a - e))) if a.size else 0.0
        scale = max(1.0, float(np.max(np.abs(e))) if e.size else 0.0)
        return Comparison(max_abs, scale, max_abs <= self.rtol * scale)


def _as_float64(x: Any) -> np.ndarray:
    from nlaverify.backends.host import to_float64

    return to_float64(x)


def tolerance(
    dtype: Any, *, size: int = 1, condition: float = 1.0, depth: int = 1,
    digits: int | None = None,
) -> Tolerance:
    r"""The tolerance for comparing a result computed in ``dtype`` with a reference.

    Args:
        dtype: the working precision of the less precise side (a NumPy/JAX dtype,
            its name, or ``"mpmath"`` with ``digits``).
        size: the longest accumulation :math:`k` (e.g. the inner dimension, or the
            number of entries of a reduction).
        condition: an estimate :math:`\kappa \ge 1` of the condition number.
        depth: the number :math:`D` of dependent stages (e.g. forward then backward = 2).

    Returns:
        :math:`\mathrm{rtol} = C \kappa D \sqrt{k} u` with its reason.
    """
    if size < 1 or depth < 1 or not condition >= 1.0:
        raise ValueError(f"tolerance: expected size >= 1, depth >= 1, condition >= 1; got "
                         f"size={size}, depth={depth}, condition={condition}")
    u = unit_roundoff(dtype, digits)
    rtol = SAFETY * condition * depth * math.sqrt(size) * u
    name = "mpmath" if dtype == "mpmath" else getattr(dtype, "name", str(dtype))
    return Tolerance(rtol, f"C={SAFETY:g} x kappa={condition:.3g} x D={depth} x sqrt(k={size}) "
                           f"x u({name})={u:.3g}")


def finite_difference_tolerance(
    digits: int, step: float, *, condition: float = 1.0, size: int = 1
) -> Tolerance:
    r"""Tolerance of a central difference with step :math:`h` in ``digits``-digit arithmetic:
    :math:`C(\kappa^3 h^2 + \kappa\sqrt{k}\,u/h)`, truncation plus rounding, where the
    third derivative is bounded through the condition estimate."""
    u = unit_roundoff("mpmath", digits)
    rtol = SAFETY * (condition**3 * step**2 + condition * math.sqrt(size) * u / step)
    return Tolerance(rtol, f"C={SAFETY:g} x (kappa^3 h^2 + kappa sqrt(k) u/h), h={step:.1e}, "
                           f"kappa={condition:.3g}, k={size}, u={u:.1e}")


def magnitude_condition(*arrays: Any, power: int = 2) -> float:
    r"""A generic condition estimate from input magnitudes,
    :math:`\kappa = \max(1, \max|a|)^{p}`: exponentials, products and cubic terms of the
    Transformer ops amplify relative errors by powers of the input size."""
    m = 1.0
    for a in arrays:
        arr = _as_float64(a)
        if arr.size:
            m = max(m, float(np.max(np.abs(arr))))
    return m**power
