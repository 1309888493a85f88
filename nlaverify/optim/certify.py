r"""Certified ranges of Newton–Schulz polynomial iterations (Baggag & Saad §5.5, Muon).

After :math:`k` steps of :func:`nlaverify.optim.newton_schulz.newton_schulz` every singular
value :math:`\sigma \in [\ell, u]` of the normalised input becomes
:math:`(p_k \circ \dots \circ p_1)(\sigma)`. This module encloses the exact range

.. math:: R_k = (p_k \circ \dots \circ p_1)([\ell, u]) \subseteq [\mathrm{lo}, \mathrm{hi}]

*without sampling*. The image of an interval :math:`[a, b]` under a polynomial :math:`p` is
the interval :math:`[\min, \max]` of :math:`p` over :math:`\{a, b\} \cup \{c \in [a, b] :
p'(c) = 0\}`. The real critical points are isolated exactly (FLINT's certified complex root
isolation of the integer polynomial :math:`\mathrm{den}\cdot p'`, whose real roots come
back with an exactly zero imaginary part), :math:`p` is evaluated on the endpoints in exact
rational arithmetic and on the critical points in arb ball arithmetic, and the hull is
rounded *outward* to a rational with :data:`GRID_BITS` significant bits. Since a continuous
image of an interval is an interval, :math:`R_j = p_j(R_{j-1})` and an enclosure of
:math:`R_{j-1}` maps to an enclosure of :math:`R_j`: no wrapping effect, and the rounding
(about :math:`2^{-200}` relative per step) is the only slack.

Certified numbers (:func:`certified_interval` from :math:`[10^{-3}, 1]` after 5 steps;
``tests/test_ns_certify.py`` checks them):

* Muon (:data:`~nlaverify.optim.newton_schulz.MUON`): :math:`R_5 \subseteq
  [0.4705, 1.2024]`, error :math:`0.5295`. The singular values never settle at 1, since
  :math:`p(1) = 0.701 \ne 1` and all three fixed points :math:`0, 0.8680, 1.2637` repel
  (:math:`p' = 3.44, -1.58, 6.47`); from step 8 on they stay in the absorbing interval
  :math:`[0.6818, 1.1344]` (:func:`absorbing_interval`), whose ends are :math:`p(c_2)` and
  :math:`p(p(c_2))` at the critical point :math:`c_2 = 1.0501` (the other is
  :math:`c_1 = 0.5545`, :math:`p(c_1) = 1.2024`).
* the cubic :math:`(3x - x^3)/2`: :math:`R_5 \subseteq [0.00759, 1]`, error
  :math:`0.9924`; it takes 21 steps to bring the error below :math:`10^{-8}` (growth
  :math:`\times 3/2` per step near 0, then quadratic convergence).
* the quintic :math:`(15x - 10x^3 + 3x^5)/8`: :math:`R_5 \subseteq [0.02317, 1]`, error
  :math:`0.9768`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np
from flint import arb, ctx, fmpq, fmpq_poly

from nlaverify.errors import ArgumentError
from nlaverify.optim import polynomials as _pl

#: working precision (bits) of the ball arithmetic and of the root isolation
PREC = 320
#: significant bits kept when an enclosure endpoint is rounded outward to a rational
GRID_BITS = 200

Exact = tuple[Fraction, ...]


@dataclass(frozen=True)
class CertifiedInterval:
    r"""An outward-rounded enclosure :math:`[\mathrm{lo}, \mathrm{hi}]` of the exact range
    after ``steps`` steps, and ``error`` :math:`= \max(|1 - \mathrm{lo}|, |\mathrm{hi} - 1|)
    \ge \max_{x \in [\ell, u]} |1 - p_k \circ \dots \circ p_1(x)|` (rounded up)."""

    lo: float
    hi: float
    error: float
    steps: int


@dataclass(frozen=True)
class Enclosure:
    """A certified enclosure ``lo <= value <= hi`` of a real number (floats rounded outward)."""

    lo: float
    hi: float

    @property
    def mid(self) -> float:
        return 0.5 * (self.lo + self.hi)

    def contains(self, x: float) -> bool:
        return self.lo <= x <= self.hi


@dataclass(frozen=True)
class FixedPoint:
    r"""A fixed point :math:`x^\ast = p(x^\ast) \ge 0`, its multiplier :math:`p'(x^\ast)`,
    and ``stable``: True when :math:`|p'(x^\ast)| < 1` is certified (attracting), False when
    :math:`|p'(x^\ast)| > 1` is (repelling), None when the balls cannot decide."""

    value: Enclosure
    derivative: Enclosure
    stable: bool | None


@dataclass(frozen=True)
class AbsorbingInterval:
    r"""An interval :math:`J = [\mathrm{lo}, \mathrm{hi}]` with a certified :math:`p(J)
    \subseteq [\mathrm{image\_lo}, \mathrm{image\_hi}] \subseteq J`, which the exact range
    :math:`R_n` from :math:`[\ell, u]` lies in after ``entered_after`` = :math:`n` steps, so
    :math:`R_k \subseteq J` for every :math:`k \ge n`."""

    lo: float
    hi: float
    image_lo: float
    image_hi: float
    entered_after: int


# -- exact inputs -------------------------------------------------------------------------


def _exact(value: Any, name: str) -> Fraction:
    """A real number as an exact Fraction (a float is taken exactly, not by its repr)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        if type(value).__module__.startswith("sympy") and getattr(value, "is_Rational", False):
            return Fraction(int(value.p), int(value.q))
        raise ArgumentError(f"{name}: expected a real number (int, Fraction, float), "
                            f"got {type(value).__name__} {value!r}")
    if isinstance(value, numbers.Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    f = float(value)
    if not math.isfinite(f):
        raise ArgumentError(f"{name}: expected a finite number, got {value!r}")
    return Fraction(f)


def _exact_coeffs(coeffs: Any, name: str = "coeffs") -> Exact:
    if isinstance(coeffs, (str, bytes)) or not _pl._is_row(coeffs) or not len(coeffs):
        raise ArgumentError(f"{name}: expected a non-empty tuple (a_1, a_3, ...), got {coeffs!r}")
    return tuple(_exact(c.item() if getattr(c, "ndim", None) == 0 else c, f"{name}[{i}]")
                 for i, c in enumerate(coeffs))


def exact_schedule(coeffs: Any, steps: int) -> list[Exact]:
    """:func:`~nlaverify.optim.polynomials.schedule` with every coefficient an exact
    Fraction (one tuple repeated, or a per-step schedule of tuples or a 2-d array)."""
    plan = _pl.schedule(coeffs, steps)
    if not _pl.is_schedule(coeffs):  # one tuple: convert (and check) it once
        return [_exact_coeffs(coeffs)] * len(plan)
    return [_exact_coeffs(c, f"coeffs[{k}]") for k, c in enumerate(plan)]


# -- outward rounding ---------------------------------------------------------------------


def _round(q: Fraction, up: bool, bits: int = GRID_BITS) -> Fraction:
    """``q`` rounded toward -inf (``up=False``) or +inf to ``bits`` significant bits."""
    if q == 0:
        return q
    shift = bits - (abs(q.numerator).bit_length() - q.denominator.bit_length())
    scaled = q * Fraction(2) ** shift
    n = math.ceil(scaled) if up else math.floor(scaled)
    return Fraction(n) / Fraction(2) ** shift


def _to_float(q: Fraction, up: bool) -> float:
    """The nearest float on the outer side of ``q`` (beyond the float range: +-inf outward,
    the largest finite float inward)."""
    try:
        f = float(q)
    except OverflowError:
        big = math.inf if (q > 0) == up else math.nextafter(math.inf, 0)
        return big if q > 0 else -big
    if up and Fraction(f) < q:
        f = math.nextafter(f, math.inf)
    elif not up and Fraction(f) > q:
        f = math.nextafter(f, -math.inf)
    return f


def _arb_bound(x: arb, up: bool) -> Fraction:
    """An exact rational bound of the ball ``x`` (its upper or lower end, itself exact)."""
    man, exp = (x.upper() if up else x.lower()).man_exp()
    return Fraction(int(man)) * Fraction(2) ** int(exp)


def _enclosure(x: arb) -> Enclosure:
    return Enclosure(_to_float(_arb_bound(x, False), False), _to_float(_arb_bound(x, True), True))


# -- the polynomial, its derivative and their real roots ----------------------------------


def _poly(coeffs: Exact) -> fmpq_poly:
    full = [Fraction(0)] * (2 * len(coeffs))
    full[1::2] = coeffs
    return fmpq_poly([fmpq(c.numerator, c.denominator) for c in full])


def _real_roots(poly: fmpq_poly) -> tuple[arb, ...]:
    """Certified balls around the distinct real roots, ascending. FLINT isolates every
    complex root and returns the real ones with an *exactly* zero imaginary part."""
    if poly.degree() < 1:
        return ()
    with ctx.workprec(PREC):
        roots = [r.real for r, _ in poly.numer().complex_roots()
                 if r.imag.is_exact() and r.imag == 0]
    return tuple(sorted(roots, key=lambda r: float(r.mid())))


def _arb_coeffs(coeffs: Exact) -> tuple[arb, ...]:
    return tuple(arb(fmpq(c.numerator, c.denominator)) for c in coeffs)


def _derivative_coeffs(coeffs: Exact) -> Exact:
    r""":math:`p'(x) = \sum_j (2j+1) a_{2j+1} x^{2j}` as :math:`x^{-1}` times an odd polynomial
    is awkward, so return the even coefficients ``(a_1, 3a_3, 5a_5, ...)`` of :math:`p'`."""
    return tuple((2 * j + 1) * c for j, c in enumerate(coeffs))


def _derivative_at(coeffs: Exact, x: arb) -> arb:
    q = arb(0)
    for c in reversed(_arb_coeffs(_derivative_coeffs(coeffs))):
        q = c + q * x * x
    return q


@lru_cache(maxsize=256)
def _critical(coeffs: Exact) -> tuple[arb, ...]:
    return _real_roots(_poly(coeffs).derivative())


def critical_points(coeffs: Any) -> list[Enclosure]:
    r"""Certified enclosures of the real critical points :math:`p'(c) = 0`, :math:`c > 0`
    (:math:`p'` is even, so the negative ones are their mirror images), ascending."""
    return [_enclosure(r) for r in _critical(_exact_coeffs(coeffs)) if r > 0]


def fixed_points(coeffs: Any) -> list[FixedPoint]:
    r"""The fixed points :math:`x = p(x) \ge 0` (0 always, :math:`p` being odd), enclosed,
    with their multipliers :math:`p'(x)` and certified stability, ascending."""
    c = _exact_coeffs(coeffs)
    q = _poly(c) - fmpq_poly([0, 1])
    if q == 0:
        raise ArgumentError("coeffs: p(x) = x identically, every point is fixed")
    with ctx.workprec(PREC):
        balls = [arb(0)] + [r for r in _real_roots(q) if r > 0]
        out = []
        for r in balls:
            d = _derivative_at(c, r)
            stable = True if abs(d) < 1 else False if abs(d) > 1 else None
            out.append(FixedPoint(_enclosure(r), _enclosure(d), stable))
    return out


# -- the certified image of an interval ---------------------------------------------------


def image(coeffs: Exact, lo: Fraction, hi: Fraction) -> tuple[Fraction, Fraction]:
    r"""An outward-rounded rational enclosure of the exact image :math:`p([\mathrm{lo},
    \mathrm{hi}])`: the hull of :math:`p` at the endpoints (exact, through
    :func:`~nlaverify.optim.polynomials.odd_polynomial`) and at the critical points inside
    (ball arithmetic)."""
    values_lo = [_pl.odd_polynomial(coeffs, lo), _pl.odd_polynomial(coeffs, hi)]
    values_hi = list(values_lo)
    balls = _critical(coeffs)
    if balls:
        with ctx.workprec(PREC):
            a = _arb_coeffs(coeffs)
            lo_arb, hi_arb = arb(fmpq(lo.numerator, lo.denominator)), arb(
                fmpq(hi.numerator, hi.denominator))
            for r in balls:
                if not (r.upper() < lo_arb or r.lower() > hi_arb):  # may lie in [lo, hi]
                    v = _pl.odd_polynomial(a, r)
                    values_lo.append(_arb_bound(v, False))
                    values_hi.append(_arb_bound(v, True))
    return _round(min(values_lo), False), _round(max(values_hi), True)


def certified_trajectory(coeffs: Any, steps: int, lower: Any,
                         upper: Any = 1) -> list[tuple[Fraction, Fraction]]:
    r"""The exact rational enclosures :math:`R_0 = [\ell, u], R_1, \dots, R_k` of the ranges
    after each step (see the module docstring); ``coeffs`` as for :func:`certified_interval`.
    A diverging iteration stops early: the list ends at the first enclosure beyond
    :data:`DIVERGED` (:math:`2^{1100}`, outside the float range), so it has fewer than
    :math:`k + 1` entries and the later ranges are only known to be outside the floats."""
    lo, hi = _exact(lower, "lower"), _exact(upper, "upper")
    if not 0 <= lo <= hi:
        raise ArgumentError(f"lower, upper: expected 0 <= lower <= upper, got lower={lower!r}, "
                            f"upper={upper!r}")
    plan = exact_schedule(coeffs, steps)
    out = [(lo, hi)]
    for c in plan:
        if _diverged(lo, hi):  # the next image would only grow: stop (the rest is +-inf)
            break
        lo, hi = image(c, lo, hi)
        out.append((lo, hi))
    return out


#: an enclosure beyond this magnitude has left the float range (max float < 2**1024): its
#: images are not computed (their exact rationals would grow by the degree in bits per step)
DIVERGED = Fraction(2) ** 1100


def _diverged(lo: Fraction, hi: Fraction) -> bool:
    return max(abs(lo), abs(hi)) > DIVERGED


def certified_interval(coeffs: Any, steps: int, lower: Any, upper: Any = 1) -> CertifiedInterval:
    r"""Certified enclosure of :math:`(p_k \circ \dots \circ p_1)([\ell, u])`, ``lower`` =
    :math:`\ell`, ``upper`` = :math:`u` (Fraction, int or float, all taken exactly,
    :math:`0 \le \ell \le u`), ``coeffs`` one tuple ``(a_1, a_3, ...)`` of any odd degree
    or a per-step schedule of ``steps`` tuples. Baggag & Saad §5.5.

    Returns a :class:`CertifiedInterval` whose ``lo``/``hi`` are rounded outward to floats,
    so the exact range is inside :math:`[\mathrm{lo}, \mathrm{hi}]`; a diverging iteration
    (an enclosure beyond :data:`DIVERGED`) returns :math:`(-\infty, \infty)` at once
    instead of growing exact rationals of billions of bits."""
    traj = certified_trajectory(coeffs, steps, lower, upper)
    return interval_of(traj, steps)


def interval_of(traj: list[tuple[Fraction, Fraction]], steps: int) -> CertifiedInterval:
    r"""The :class:`CertifiedInterval` of the last enclosure of a
    :func:`certified_trajectory` of ``steps`` steps (:math:`(-\infty, \infty)` and error
    :math:`\infty` when the trajectory stopped early, diverging)."""
    if len(traj) < steps + 1:
        return CertifiedInterval(-math.inf, math.inf, math.inf, steps)
    lo, hi = traj[steps]
    error = max(abs(1 - lo), abs(hi - 1))
    return CertifiedInterval(_to_float(lo, False), _to_float(hi, True), _to_float(error, True),
                             steps)


def absorbing_interval(coeffs: Any, lower: Any = Fraction(1, 1000), upper: Any = 1, *,
                       max_steps: int = 200) -> AbsorbingInterval:
    r"""An absorbing interval :math:`J`, :math:`p(J) \subseteq J` certified, that the
    iteration from :math:`[\ell, u]` enters: iterate the certified ranges until they settle,
    widen by :math:`2^{-90}` (relative), and check the inclusion of the certified image
    (widening by the hull up to four times). Raises :class:`ArgumentError` when none is
    certified within ``max_steps`` steps (e.g. :math:`\ell = 0`: 0 is a repelling fixed
    point)."""
    c = _exact_coeffs(coeffs)
    if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
        raise ArgumentError(f"max_steps: expected an integer >= 1, got {max_steps!r}")
    traj = certified_trajectory(c, 0, lower, upper)
    (lo, hi), prev = traj[0], None
    tol = Fraction(1, 2**100)
    for n in range(max_steps + 1):
        if prev is not None and abs(lo - prev[0]) <= tol and abs(hi - prev[1]) <= tol:
            J = (_round(lo - _widen(lo), False), _round(hi + _widen(hi), True))
            for _ in range(4):
                K = image(c, *J)
                if J[0] <= K[0] and K[1] <= J[1]:
                    return AbsorbingInterval(_to_float(J[0], False), _to_float(J[1], True),
                                             _to_float(K[0], False), _to_float(K[1], True), n)
                J = (min(J[0], K[0]) - _widen(K[0]), max(J[1], K[1]) + _widen(K[1]))
        if _diverged(lo, hi):
            raise ArgumentError(f"coeffs: the iteration from [{lower}, {upper}] diverges "
                                f"(beyond 2**1100 after {n} steps): no absorbing interval")
        prev, (lo, hi) = (lo, hi), image(c, lo, hi)
    raise ArgumentError(f"coeffs: no absorbing interval certified within max_steps={max_steps} "
                        f"steps from [{lower}, {upper}]")


def _widen(x: Fraction) -> Fraction:
    return max(abs(x), Fraction(1)) / Fraction(2) ** 90


# -- float64 samples, for figures and tests -----------------------------------------------


def iterate_map(coeffs: Any, steps: int, x: Any) -> np.ndarray:
    r"""The scalar map :math:`(p_k \circ \dots \circ p_1)(x)` in float64 on an array ``x``
    (coefficients rounded once to float64): the samples a figure plots, *not* a
    certificate."""
    out = np.asarray(x, dtype=np.float64)
    for c in exact_schedule(coeffs, steps):
        out = _pl.odd_polynomial(tuple(float(a) for a in c), out)
    return out


__all__ = [
    "DIVERGED",
    "AbsorbingInterval",
    "CertifiedInterval",
    "Enclosure",
    "FixedPoint",
    "absorbing_interval",
    "certified_interval",
    "certified_trajectory",
    "critical_points",
    "exact_schedule",
    "fixed_points",
    "image",
    "interval_of",
    "iterate_map",
]
