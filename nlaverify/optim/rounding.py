r"""The rounding term of the Newton–Schulz iteration (Baggag & Saad §5.5): where the singular
values of a *computed* :func:`~nlaverify.optim.newton_schulz.newton_schulz` can be.

Each step :math:`X \leftarrow p(X)` in floating point adds a spectral-norm error
:math:`r_j` (the tolerance model, :func:`step_rounding`, or a measured one), which the later
steps carry through the scalar map: :func:`rounding_bound` (tolerance model per step) and
:func:`propagate` (measured per-step errors) return a :class:`RoundingBound`, which widens
the certified interval of :mod:`nlaverify.optim.certify`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from nlaverify.errors import ArgumentError
from nlaverify.optim.polynomials import Coefficients, schedule


@dataclass(frozen=True)
class RoundingBound:
    r"""Where the singular values of a *computed* iteration can be (:func:`rounding_bound`,
    :func:`propagate`). ``per_step`` = :math:`(r_0, r_1, \dots, r_k)`: the spectral-norm
    rounding of the input (storage and normalisation) and of each step; ``gains`` =
    :math:`L_j = \max|p_j'|` over the region the values occupy before step :math:`j`;
    ``delta`` :math:`= \delta_k`, :math:`\delta_0 = r_0`, :math:`\delta_j = L_j
    \delta_{j-1} + r_j`; ``[lo, hi]``: the interval propagation :math:`T_j =
    |p_j|(T_{j-1}) \oplus [-r_j, r_j]` of :math:`T_0 = [\ell - r_0, u + r_0]` (clipped at
    0), and ``[0, zero_hi]`` that of :math:`\{0\}` (exact zero singular values).
    ``inf`` when the propagated region leaves the polynomial's basin (the bound is then
    vacuous)."""

    per_step: tuple[float, ...]
    gains: tuple[float, ...]
    delta: float
    lo: float
    hi: float
    zero_hi: float
    reason: str

    def envelope(self, certified: Any) -> tuple[float, float]:
        r"""The certified interval plus the rounding term: :math:`[\max(\mathrm{lo}_c -
        \delta, \mathrm{lo}), \min(\mathrm{hi}_c + \delta, \mathrm{hi})]` (both bounds
        hold, so their intersection does), never narrower than the certified
        ``[certified.lo, certified.hi]`` itself."""
        lo = max(self.lo, certified.lo - self.delta)
        hi = min(self.hi, certified.hi + self.delta)
        return min(lo, certified.lo), max(hi, certified.hi)

    def contains(self, sigma: Any, certified: Any, zeros: bool = False) -> bool:
        """Whether every value of ``sigma`` lies in :meth:`envelope` (or, with ``zeros``,
        in ``[0, zero_hi]``)."""
        import numpy as np

        lo, hi = self.envelope(certified)
        s = np.asarray(sigma, dtype=np.float64)
        inside = (s >= lo) & (s <= hi)
        if zeros:
            inside |= (s >= 0) & (s <= self.zero_hi)
        return bool(np.all(inside))


_VACUOUS = 1e6  # a region beyond this has left every basin of a Newton–Schulz polynomial


def _float_coeffs(c: Coefficients) -> list[float]:
    return [float(a) for a in c]


def _abs_image(c: Coefficients, lo: float, hi: float) -> tuple[float, float]:
    """The exact range of :math:`|p|` on ``[lo, hi]`` (certified image, rounded to floats)."""
    from nlaverify.optim.certify import _exact_coeffs, image

    a, b = image(_exact_coeffs(c), Fraction(lo), Fraction(hi))
    if a >= 0:
        return float(a), float(b)
    if b <= 0:
        return float(-b), float(-a)
    return 0.0, float(max(-a, b))


def _max_abs_derivative(c: Coefficients, lo: float, hi: float) -> float:
    r""":math:`\max |p'|` on ``[lo, hi]``: at the ends and the real roots of :math:`p''`
    (float64; a model quantity, not a certified one)."""
    import numpy as np

    coef = np.zeros(2 * len(c))
    coef[1::2] = _float_coeffs(c)
    d1 = np.polynomial.Polynomial(coef).deriv()
    pts = [lo, hi] + [float(r.real) for r in d1.deriv().roots()
                      if abs(r.imag) <= 1e-9 * max(1.0, abs(r)) and lo <= r.real <= hi]
    return max(abs(float(d1(x))) for x in pts)


def step_rounding(c: Coefficients, dtype: Any, n: int, bound: float, *,
                  accumulation: Any = None) -> float:
    r"""The tolerance model's spectral-norm rounding :math:`r` of one step
    :math:`X \leftarrow p(X)`, :math:`\|X\|_2 \le` ``bound``, on the wide side (longest
    sum ``n``): :func:`nlaverify.tolerance.tolerance` with ``size`` :math:`= n`,
    ``depth`` :math:`= d` dependent products (:math:`A = XX^\top`, :math:`d - 2` Horner
    products, :math:`BX`), composed at random (``composition="random"``: independent
    stages add in quadrature), and ``condition`` :math:`\kappa = \max(1, \sum_i
    |a_{2i+1}|\,\mathrm{bound}^{2i+1})`, the size of the terms that cancel to
    :math:`p(X) = O(1)` (10.25 for Muon at bound 1, 2 for the cubic)."""
    from nlaverify.tolerance import tolerance

    kappa = max(1.0, sum(abs(a) * bound ** (2 * i + 1) for i, a in enumerate(_float_coeffs(c))))
    return tolerance(dtype, size=max(1, n), depth=max(1, len(c)), condition=kappa,
                     accumulation=accumulation, composition="random").rtol


def _propagate(plan: list[Coefficients], lower: float, upper: float, r0: float,
               step_r: Any, reason: str) -> RoundingBound:
    lo, hi, zhi, delta = max(0.0, lower - r0), upper + r0, r0, r0
    rs, gains = [r0], []
    for j, c in enumerate(plan):
        if not hi < _VACUOUS:
            rs.append(math.inf)
            gains.append(math.inf)
            lo, hi, zhi, delta = 0.0, math.inf, math.inf, math.inf
            continue
        r = float(step_r(j, c, hi))
        L = _max_abs_derivative(c, lo, hi)
        rs.append(r)
        gains.append(L)
        delta = L * delta + r
        ilo, ihi = _abs_image(c, lo, hi)
        lo, hi = max(0.0, ilo - r), ihi + r
        zhi = (_abs_image(c, 0.0, zhi)[1] + r) if zhi < _VACUOUS else math.inf
    if not hi < _VACUOUS:
        lo, hi, zhi, delta = 0.0, math.inf, math.inf, math.inf
    return RoundingBound(tuple(rs), tuple(gains), delta, lo, hi, min(zhi, hi), reason)


def propagate(coeffs: Coefficients | Sequence[Coefficients], steps: int, per_step: Any,
              lower: float = 0.0, upper: float = 1.0) -> RoundingBound:
    r"""The :class:`RoundingBound` of given per-step spectral-norm errors ``per_step`` =
    :math:`(r_0, \dots, r_k)` (measured ones, for an a-posteriori check), from singular
    values in :math:`[\ell, u]` = ``[lower, upper]``. By Weyl's inequality the computed
    :math:`\hat X_j = p_j(\hat X_{j-1}) + E_j` has singular values within
    :math:`\|E_j\|_2 \le r_j` of those of :math:`p_j(\hat X_{j-1})`, which are
    :math:`|p_j|` of those of :math:`\hat X_{j-1}` (an odd polynomial acts on singular
    values): hence :math:`T_j`; and by the mean value theorem each stays within
    :math:`\delta_j` of the exact image of the same input value."""
    plan = schedule(coeffs, steps)
    r = [float(x) for x in per_step]
    if len(r) != len(plan) + 1:
        raise ArgumentError(f"per_step: expected {len(plan) + 1} errors (input and one per "
                            f"step), got {len(r)}")
    return _propagate(plan, float(lower), float(upper), r[0], lambda j, c, b: r[j + 1],
                      "measured per-step errors")


def rounding_bound(coeffs: Coefficients | Sequence[Coefficients], steps: int, dtype: Any,
                   n: int, *, m: int | None = None, lower: float = 0.0, upper: float = 1.0,
                   normalize: bool = True, accumulation: Any = None) -> RoundingBound:
    r"""The tolerance model's rounding term for
    :func:`~nlaverify.optim.newton_schulz.newton_schulz` in ``dtype`` on an
    :math:`m \times n` matrix (``m`` defaults to ``n``; the longer side governs the sums)
    with singular values in ``[lower, upper]`` (after normalisation): :math:`r_0` =
    :func:`~nlaverify.tolerance.tolerance` of storing the input and, with ``normalize``,
    of the Frobenius norm (:math:`mn` terms, two stages), times ``upper``; :math:`r_j` =
    :func:`step_rounding` at the current region's upper end; carried through the map by
    :func:`propagate`'s recursion: each rounding is amplified by at most :math:`\max|p'|`
    over the region (the absorbing region, once entered) per later step. ``accumulation``
    as for :func:`~nlaverify.tolerance.tolerance` (``"float32"`` for bfloat16 on XLA).
    Baggag & Saad §5.5; Higham & Mary (2019) for the per-stage model."""
    from nlaverify.tolerance import tolerance

    plan = schedule(coeffs, steps)
    long_side, short = max(n, m or n), min(n, m or n)
    r0 = tolerance(dtype, size=short * long_side if normalize else long_side,
                   depth=2 if normalize else 1, accumulation=accumulation,
                   composition="random").rtol * float(upper)
    from nlaverify.backends.host import dtype_name

    name = dtype if isinstance(dtype, str) else dtype_name(dtype)
    return _propagate(plan, float(lower), float(upper), r0,
                      lambda j, c, b: step_rounding(c, dtype, long_side, b,
                                                    accumulation=accumulation),
                      f"tolerance model, {name}, n={long_side}, random composition per step")


__all__ = ["RoundingBound", "propagate", "rounding_bound", "step_rounding"]
