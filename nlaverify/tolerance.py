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

Below float64 (:mod:`nlaverify.precision`) two refinements of the same model
matter; both reduce to the formula above when there is one precision and few stages.

*Mixed precisions inside a stage.* A stage stores its result in precision
:math:`u` (the ``dtype``), may accumulate its sums in a wider precision
:math:`u_a` (``accumulation``: bfloat16 matmuls and reductions on XLA accumulate in
float32) and may round the operands of its products to a narrower one :math:`u_p`
(``products``: TF32 tensor cores round float32 operands to a 10-bit mantissa).
The probabilistic analysis then gives, per stage, :math:`\lambda\sqrt{k u_a^2 +
2u_p^2} + u`, within a factor 3 of

.. math:: u_{\text{stage}}(k) = \max\bigl(\sqrt{k}\,u_a,\ u_p,\ u\bigr),

which is :math:`\sqrt{k}\,u` when the three precisions agree (so every float64 bound
is unchanged). With bfloat16 storage and float32 accumulation :math:`u_{\text{stage}}
= 2^{-8}` for every :math:`k < 2^{32}`: the error is the final rounding, not
:math:`\sqrt{k}` bfloat16 roundings (which, for :math:`k = 2048`, would be a
vacuous 18 %).

*Composition of stages.* The default composition is linear, :math:`C D\,
u_{\text{stage}}`: the worst case, where the errors of the :math:`D` stages align;
right for the few stages of a cross-check (forward then backward). Higham & Mary's
argument, which the model already applies to the :math:`k` roundings of one
accumulation, applies as well to the chain of :math:`D` stages when their rounding
errors are independent and mean zero: they add in quadrature (``composition=
"random"``; Higham & Mary 2019, Thm. 3.1 with :math:`n = D k` roundings). Applied
consistently, the same holds for the factors inside :math:`C = \lambda c`: the
:math:`c = C/\lambda \approx 10.7` roundings it counts linearly (two sides times the
few elementary operations per entry) also add in quadrature, while :math:`\lambda = 3`,
the confidence level, stays. So

.. math:: \mathrm{rtol}_{\text{random}} = \sqrt{\lambda C}\;\kappa\,\sqrt{D}\;
          u_{\text{stage}}(k),\qquad \sqrt{\lambda C} = \sqrt{96} \approx 9.8 .

Node-by-node verification of a Transformer counts tens of stages (about 45 to the
loss of the 4-block ``mid`` preset, 100 to its first cotangent, before the residual
averaging of :mod:`nlaverify.precision`); there the linear rule is vacuous for
bfloat16 (:math:`32 \cdot 45 \cdot 2^{-8} > 5`), and the measured errors do not grow
with depth at all (``docs/guide/precision.md``, "Verification below float64").

A central finite difference :math:`(f(x+hv) - f(x-hv))/2h` has truncation
error :math:`h^2 |f'''|/6` and rounding error :math:`u/h`;
:func:`finite_difference_tolerance` bounds it from the same inputs.

Seed: Baggag & Saad §2.6 (back-propagation as a chain of stages); Higham & Mary,
"A new approach to probabilistic rounding error analysis", SIAM J. Sci. Comput.
41(5), 2019.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

#: the constant C of the model (see the module docstring)
SAFETY = 32.0
#: lambda, the confidence level inside C (standard deviations of the probabilistic bound)
LAMBDA = 3.0

_UNIT_ROUNDOFF = {
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
    # TF32 (NVIDIA tensor cores): float32 range, 10 explicit mantissa bits
    "tfloat32": 2.0**-11,
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

    def compare(self, actual: Any, expected: Any, *, floor: float = 1.0) -> Comparison:
        r"""Compare two arrays (any backend, converted to float64 NumPy).

        The scale is :math:`\max(\text{floor}, \max_\iota|e_\iota|)`: ``floor=1`` (the
        default) is the unit scale of the inputs; ``floor=0`` gives the plain normwise
        relative error (an all-zero reference then falls back to the absolute error).
        """
        a = _as_float64(actual)
        e = _as_float64(expected)
        if a.shape != e.shape:
            raise ValueError(f"compare: shapes differ: actual {a.shape} vs expected {e.shape}")
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(e))):
            return Comparison(math.inf, 1.0, False)
        max_abs = float(np.max(np.abs(a - e))) if a.size else 0.0
        scale = max(floor, float(np.max(np.abs(e))) if e.size else 0.0) or 1.0
        return Comparison(max_abs, scale, max_abs <= self.rtol * scale)


def _as_float64(x: Any) -> np.ndarray:
    from nlaverify.backends.host import to_float64

    return to_float64(x)


def tolerance(
    dtype: Any, *, size: int = 1, condition: float = 1.0, depth: float = 1,
    digits: int | None = None, accumulation: Any = None, products: Any = None,
    composition: Literal["linear", "random"] = "linear",
) -> Tolerance:
    r"""The tolerance for comparing a result computed in ``dtype`` with a reference.

    Args:
        dtype: the working (storage) precision of the less precise side (a NumPy/JAX
            dtype, its name, or ``"mpmath"`` with ``digits``).
        size: the longest accumulation :math:`k` (e.g. the inner dimension, or the
            number of entries of a reduction).
        condition: an estimate :math:`\kappa \ge 1` of the condition number.
        depth: the number :math:`D` of dependent stages (e.g. forward then backward = 2).
        accumulation: the precision :math:`u_a` sums are accumulated in (default
            ``dtype``), e.g. ``"float32"`` for bfloat16 on XLA.
        products: the precision :math:`u_p` the operands of products are rounded to
            (default ``dtype``), e.g. ``"tfloat32"`` for float32 matmuls on tensor cores.
        composition: ``"linear"`` (worst case: :math:`C D`) or ``"random"`` (independent
            rounding errors add in quadrature: :math:`\sqrt{\lambda C}\sqrt D`); see the
            module docstring.

    Returns:
        :math:`\mathrm{rtol} = C \kappa\, D\, u_{\text{stage}}(k)` (linear) or
        :math:`\sqrt{\lambda C}\, \kappa \sqrt{D}\, u_{\text{stage}}(k)` (random) with
        its reason, :math:`u_{\text{stage}}(k) = \max(\sqrt k\, u_a, u_p, u)`; with the
        defaults, :math:`C \kappa D \sqrt k u` as before.
    """
    if size < 1 or depth < 1 or not condition >= 1.0:
        raise ValueError(f"tolerance: expected size >= 1, depth >= 1, condition >= 1; got "
                         f"size={size}, depth={depth}, condition={condition}")
    if composition not in ("linear", "random"):
        raise ValueError(f"tolerance: argument 'composition': expected 'linear' or 'random', "
                         f"got {composition!r}")
    u = unit_roundoff(dtype, digits)
    name = _name(dtype)
    if composition == "linear":
        const, c_txt, phi, d_txt = SAFETY, f"C={SAFETY:g}", depth, f"D={depth:g}"
    else:
        const = math.sqrt(LAMBDA * SAFETY)
        c_txt, phi, d_txt = (f"sqrt(lambda C)={const:.3g}", math.sqrt(depth),
                             f"sqrt(D={depth:.3g})")
    if accumulation is None and products is None:
        rtol = const * condition * phi * math.sqrt(size) * u
        return Tolerance(rtol, f"{c_txt} x kappa={condition:.3g} x {d_txt} x "
                               f"sqrt(k={size}) x u({name})={u:.3g}")
    u_a = u if accumulation is None else unit_roundoff(accumulation)
    u_p = u if products is None else unit_roundoff(products)
    rtol = const * condition * phi * max(math.sqrt(size) * u_a, u_p, u)
    parts = [f"sqrt(k={size}) x u_acc({_name(accumulation or dtype)})={u_a:.3g}"]
    if products is not None:
        parts.append(f"u_prod({_name(products)})={u_p:.3g}")
    parts.append(f"u({name})={u:.3g}")
    return Tolerance(rtol, f"{c_txt} x kappa={condition:.3g} x {d_txt} x "
                           f"max({', '.join(parts)})")


def _name(dtype: Any) -> str:
    if dtype == "mpmath":
        return "mpmath"
    return str(getattr(dtype, "name", None) or getattr(dtype, "__name__", None) or dtype)


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


def extrapolated_difference_tolerance(
    digits: int, step: float, *, condition: float = 1.0, size: int = 1
) -> Tolerance:
    r"""Tolerance of the Richardson-extrapolated central difference
    :math:`(4D(h/2) - D(h))/3` in ``digits``-digit arithmetic: :math:`C(\kappa^5 h^4 +
    3\kappa\sqrt{k}\,u/h)`. With :math:`D(h) = f' + h^2 f^{(3)}/6 + h^4 f^{(5)}/120 + \dots`
    the extrapolation cancels the :math:`h^2` term and leaves :math:`-h^4 f^{(5)}/480`
    (the fifth derivative bounded through the condition estimate, as the third is in
    :func:`finite_difference_tolerance`); the rounding of the two differences,
    :math:`u/h` and :math:`2u/h`, combines to :math:`(4\cdot 2 + 1)u/(3h) = 3u/h`. The step
    :math:`h = u^{1/5}` balances the two: the error is :math:`O(u^{4/5})`, where a plain
    central difference at that step keeps an :math:`h^2 = u^{2/5}` truncation."""
    u = unit_roundoff("mpmath", digits)
    rtol = SAFETY * (condition**5 * step**4 + 3 * condition * math.sqrt(size) * u / step)
    return Tolerance(rtol, f"C={SAFETY:g} x (kappa^5 h^4 + 3 kappa sqrt(k) u/h), h={step:.1e}, "
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
