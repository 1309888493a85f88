"""Certified ranges of Newton–Schulz iterations (:mod:`nlaverify.optim.certify`).

Three independent checks of the enclosure: it contains dense float64 samples of the scalar map
(necessary), it is tight (the sampled hull reaches it, so it is not vacuous), and for one and
two steps it contains SymPy's exact range (real algebraic critical points, evaluated to 40
digits). A planted bug (critical points ignored) fails the sample test.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from nlaverify.errors import ArgumentError
from nlaverify.optim import certify
from nlaverify.optim.newton_schulz import CUBIC, MUON, QUINTIC, newton_schulz_family
from nlaverify.tolerance import tolerance

LOWER = Fraction(1, 1000)
CASES = {"cubic": CUBIC, "quintic": QUINTIC, "muon": MUON, "order3": newton_schulz_family(3)}


def _samples(lower: float, upper: float, n: int = 100_000) -> np.ndarray:
    """Uniform and geometric grids (the map is steepest near small x), endpoints included."""
    lin = np.linspace(lower, upper, n // 2)
    geo = np.geomspace(max(lower, 1e-12), upper, n // 2) if upper > 0 else lin
    return np.concatenate([lin, geo, [lower, upper]])


def _float_rtol(coeffs, steps: int, hi: float):
    """Rounding errors of the float64 samples: ``steps`` dependent stages, each amplified by the
    later steps' slopes, bounded by ``max|p'|`` on ``[0, max(1, hi)]`` per step."""
    plan = certify.exact_schedule(coeffs, steps)
    grid = np.linspace(0.0, max(1.0, hi), 2001)
    kappa = 1.0
    for c in plan:
        d = sum((2 * j + 1) * float(a) * grid ** (2 * j) for j, a in enumerate(c))
        kappa *= max(1.0, float(np.max(np.abs(d))))
    return tolerance(np.float64, depth=max(steps, 1) * len(plan[0] if plan else (0,)),
                     condition=kappa)


def _contains_samples(coeffs, steps: int, lower, upper=1) -> bool:
    res = certify.certified_interval(coeffs, steps, lower, upper)
    ys = certify.iterate_map(coeffs, steps, _samples(float(lower), float(upper)))
    slack = _float_rtol(coeffs, steps, res.hi).rtol * max(1.0, abs(res.hi), abs(res.lo))
    return bool(ys.min() >= res.lo - slack and ys.max() <= res.hi + slack)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("steps", [0, 1, 3, 5])
def test_contains_samples(name, steps):
    assert _contains_samples(CASES[name], steps, LOWER)


@pytest.mark.parametrize("name", ["cubic", "quintic", "muon"])
def test_tight(name):
    # not vacuous: 10^5 samples reach [lo, hi] to within 1e-6 (the sampling gap h^2 f''/8)
    res = certify.certified_interval(CASES[name], 5, LOWER)
    ys = certify.iterate_map(CASES[name], 5, _samples(float(LOWER), 1.0))
    assert ys.min() - res.lo <= 1e-6 and res.hi - ys.max() <= 1e-6, (res, ys.min(), ys.max())
    assert res.error >= max(abs(1 - ys.min()), abs(ys.max() - 1))


def test_documented_numbers():
    muon = certify.certified_interval(MUON, 5, LOWER)
    assert (round(muon.lo, 4), round(muon.hi, 4)) == (0.4705, 1.2024)
    cubic = certify.certified_interval(CUBIC, 5, LOWER)
    quintic = certify.certified_interval(QUINTIC, 5, LOWER)
    assert cubic.hi == quintic.hi == 1.0
    assert (round(cubic.lo, 5), round(quintic.lo, 5)) == (0.00759, 0.02317)
    assert certify.certified_interval(CUBIC, 21, LOWER).error < 1e-8
    absorbing = certify.absorbing_interval(MUON)
    assert (round(absorbing.lo, 4), round(absorbing.hi, 4)) == (0.6818, 1.1344)


def _sympy_range(coeffs, steps: int, lower: Fraction, upper: Fraction):
    """The exact range, step by step: p at the endpoints and at SymPy's real roots of p'."""
    x = sympy.Symbol("x", real=True)
    lo, hi = sympy.Rational(lower), sympy.Rational(upper)
    for c in certify.exact_schedule(coeffs, steps):
        p = sum(sympy.Rational(a) * x ** (2 * j + 1) for j, a in enumerate(c))
        crit = [r for r in sympy.real_roots(sympy.Poly(sympy.diff(p, x), x))
                if sympy.N(r - lo, 50) >= 0 and sympy.N(hi - r, 50) >= 0]
        vals = [sympy.N(p.subs(x, v), 40) for v in [lo, hi, *crit]]
        lo, hi = min(vals), max(vals)
    return float(lo), float(hi), lo, hi


@pytest.mark.parametrize("name", ["cubic", "muon", "order3"])
@pytest.mark.parametrize("steps", [1, 2])
def test_matches_sympy_exact_range(name, steps):
    res = certify.certified_interval(CASES[name], steps, LOWER)
    lo, hi, lo40, hi40 = _sympy_range(CASES[name], steps, LOWER, Fraction(1))
    assert res.lo <= lo40 + sympy.Float(1e-35) and hi40 - sympy.Float(1e-35) <= res.hi
    # outward rounding to float costs at most one ulp on each side
    assert res.lo >= np.nextafter(lo, -np.inf) and res.hi <= np.nextafter(hi, np.inf)


def test_planted_bug_ignoring_critical_points_fails(monkeypatch):
    assert _contains_samples(MUON, 1, LOWER)
    monkeypatch.setattr(certify, "_critical", lambda coeffs: ())
    assert not _contains_samples(MUON, 1, LOWER)
    assert not _contains_samples(MUON, 5, LOWER)


def test_schedule_and_float_coefficients():
    plan = [MUON, MUON, QUINTIC, CUBIC]
    assert _contains_samples(plan, 4, LOWER)
    floats = tuple(float(a) for a in MUON)
    assert _contains_samples(floats, 5, 1e-3)
    exact = certify.certified_interval(MUON, 5, LOWER)
    approx = certify.certified_interval(floats, 5, 1e-3)  # floats taken exactly: tiny change
    assert abs(exact.lo - approx.lo) < 1e-9 and abs(exact.hi - approx.hi) < 1e-9


@given(st.lists(st.floats(-3, 3), min_size=1, max_size=4),
       st.floats(0, 0.9), st.floats(0.05, 0.5), st.integers(1, 3))
def test_random_polynomials_contain_samples(coeffs, lower, width, steps):
    coeffs = (2.0, *coeffs[1:]) if len(coeffs) > 1 else (1.5,)
    assert _contains_samples(tuple(coeffs), steps, lower, lower + width)


def test_fixed_and_critical_points_match_sympy():
    x = sympy.Symbol("x", real=True)
    for coeffs in (MUON, CUBIC, QUINTIC):
        p = sum(sympy.Rational(a) * x ** (2 * j + 1) for j, a in enumerate(coeffs))
        fixed = sorted({r for r in sympy.real_roots(sympy.Poly(p - x, x)) if r >= 0})
        got = certify.fixed_points(coeffs)
        assert len(got) == len(fixed)
        for fp, r in zip(got, fixed, strict=True):
            assert fp.value.contains(float(r)) or fp.value.lo == fp.value.hi == float(r)
            d = float(sympy.N(sympy.diff(p, x).subs(x, r), 30))
            assert fp.derivative.lo <= d <= fp.derivative.hi
            assert fp.stable == (abs(d) < 1)
        crit = sorted({r for r in sympy.real_roots(sympy.Poly(sympy.diff(p, x), x)) if r > 0})
        got_c = certify.critical_points(coeffs)
        assert all(c.lo <= float(r) <= c.hi for c, r in zip(got_c, crit, strict=True))


def test_absorbing_interval_is_absorbing():
    for coeffs in (MUON, CUBIC):
        a = certify.absorbing_interval(coeffs)
        J = np.linspace(a.lo, a.hi, 20001)
        image = certify.iterate_map(coeffs, 1, J)
        assert image.min() >= a.lo and image.max() <= a.hi
        assert a.lo <= a.image_lo <= a.image_hi <= a.hi
        ys = certify.iterate_map(coeffs, a.entered_after, _samples(1e-3, 1.0, 2000))
        for _ in range(20):
            assert ys.min() >= a.lo and ys.max() <= a.hi
            ys = certify.iterate_map(coeffs, 1, ys)
    with pytest.raises(ArgumentError, match="absorbing"):
        certify.absorbing_interval(CUBIC, 0, 1, max_steps=5)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"lower": -0.1}, "lower"),
    ({"lower": 0.5, "upper": 0.25}, "lower"),
    ({"lower": float("nan")}, "lower"),
    ({"lower": "0.1"}, "lower"),
    ({"upper": True}, "upper"),
    ({"steps": -1}, "steps"),
    ({"steps": 2.0}, "steps"),
    ({"coeffs": ()}, "coeffs"),
    ({"coeffs": 3.0}, "coeffs"),
    ({"coeffs": (1.5, "x")}, r"coeffs\[1\]"),
    ({"coeffs": (1.5, float("inf"))}, r"coeffs\[1\]"),
    ({"coeffs": [MUON, CUBIC], "steps": 3}, "coeffs"),
])
def test_bad_arguments(kwargs, match):
    args = {"coeffs": MUON, "steps": 2, "lower": LOWER, **kwargs}
    with pytest.raises(ArgumentError, match=match):
        certify.certified_interval(**args)


def test_diverging_iteration_returns_infinity_fast():
    """(3x + x^3) from [0.5, 1] grows by a power of 3 per step; its exact rationals would
    reach billions of bits: the enclosure beyond 2**1100 is reported as (-inf, inf)."""
    import time

    start = time.perf_counter()
    res = certify.certified_interval((3, 1), 15, 0.5)
    assert time.perf_counter() - start < 2.0
    assert (res.lo, res.hi, res.error) == (-np.inf, np.inf, np.inf)
    assert len(certify.certified_trajectory((3, 1), 15, 0.5)) < 16
    with pytest.raises(ArgumentError, match="diverges"):
        certify.absorbing_interval((3, 1), 0.5)
    finite = certify.certified_interval((3, 1), 3, 0.5)  # not yet diverged: finite, exact
    assert finite.lo == float(certify.iterate_map((3, 1), 3, [0.5])[0])


def test_degree7_range_set_by_an_interior_critical_point():
    """p(x) = x(1 - x^2)^3 = x - 3x^3 + 3x^5 - x^7 vanishes at both ends of [0, 1]: its
    maximum (6/7)^3/sqrt 7 is at the interior critical point 1/sqrt 7 (SymPy)."""
    x = sympy.symbols("x")
    p = x * (1 - x**2) ** 3
    coeffs = tuple(Fraction(int(c)) for c in sympy.Poly(p, x).all_coeffs()[::-1][1::2])
    assert sympy.expand(sum(a * x ** (2 * j + 1) for j, a in enumerate(coeffs)) - p) == 0
    (crit,) = [r for r in sympy.solve(sympy.diff(p, x), x) if r.is_positive and r < 1]
    top = float(p.subs(x, crit))
    res = certify.certified_interval(coeffs, 1, 0, 1)
    assert res.lo == 0.0 and np.nextafter(top, -np.inf) <= res.hi <= np.nextafter(top, np.inf)


def test_increasing_map_range_set_by_the_upper_endpoint():
    """The cubic (3x - x^3)/2 increases on [0.1, 0.5] (critical point 1): the range is
    [p(0.1), p(0.5)], both ends exact rationals, the upper one set by the upper endpoint."""
    lo, hi = Fraction(1, 10), Fraction(1, 2)
    res = certify.certified_interval(CUBIC, 1, lo, hi)
    want = [float(sum(a * v ** (2 * j + 1) for j, a in enumerate(CUBIC))) for v in (lo, hi)]
    assert [res.lo, res.hi] == pytest.approx(want, rel=tolerance("float64").rtol)
    two = certify.certified_interval([CUBIC, (Fraction(2),)], 2, lo, hi)  # then 2x
    assert two.hi == pytest.approx(2 * want[1], rel=tolerance("float64").rtol)
