"""The Newton–Schulz coefficient designer (minimax odd polynomials by Remez, Polar Express)
and its figures: equioscillation certified by exact root isolation, the SymPy closed form of
the optimal cubic against Remez, the designed schedules against Muon's, planted mutants."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from nlaverify.errors import ArgumentError
from nlaverify.optim import designer
from nlaverify.optim.certify import certified_interval
from nlaverify.optim.designer import (
    DIGITS,
    compare,
    design,
    minimax_odd,
    optimal_cubic,
    optimal_cubic_closed_form,
)
from nlaverify.optim.newton_schulz import MUON, odd_polynomial
from nlaverify.symbolic.exact import is_zero
from nlaverify.tolerance import tolerance

#: certified_interval rounds lo/hi outward to float64: compare with float64's tolerance
CERT_TOL = tolerance("float64", depth=2)
#: Remez stops when the error is levelled to 10^(6 - DIGITS) relative
REMEZ_TOL = tolerance("mpmath", digits=DIGITS - 6)


def _check_equioscillation(mm, degree: int, lower, upper) -> tuple[bool, str]:
    """The error 1 - p attains +E, -E, +E, ... at degree // 2 + 2 points (exact rational
    evaluation) and the certified range of p on [lower, upper] is [1 - E, 1 + E]."""
    E = mm.error
    ref = mm.reference
    if len(ref) != degree // 2 + 2 or ref[0] != Fraction(lower) or ref[-1] != Fraction(upper):
        return False, f"reference {ref}"
    if any(b <= a for a, b in itertools.pairwise(ref)):
        return False, "reference not increasing"
    errs = [1 - odd_polynomial(mm.coeffs, x) for x in ref]
    if not REMEZ_TOL.compare([float(e) for e in errs],
                             [float((-1) ** j * E) for j in range(len(ref))],
                             floor=float(E)).ok:
        return False, f"not levelled: {[float(e) for e in errs]} vs E = {float(E)}"
    cert = certified_interval(mm.coeffs, 1, lower, upper)
    cmp = CERT_TOL.compare([cert.lo, cert.hi], [float(1 - E), float(1 + E)])
    return cmp.ok, f"certified [{cert.lo}, {cert.hi}] vs 1 -+ E = {float(E)}: {cmp}"


@pytest.mark.parametrize(("degree", "lower", "upper"), [
    (1, Fraction(1, 2), 1), (3, Fraction(1, 10), 1), (5, Fraction(1, 1000), 1),
    (7, Fraction(1, 100), 1), (5, Fraction(99, 100), Fraction(101, 100)), (9, 0.3, 1.5)])
def test_minimax_equioscillates(degree, lower, upper):
    mm = minimax_odd(degree, lower, upper)
    ok, why = _check_equioscillation(mm, degree, lower, upper)
    assert ok, why


@given(degree=st.sampled_from([3, 5, 7]), lower=st.floats(1e-3, 0.95))
def test_minimax_equioscillates_hypothesis(degree, lower):
    mm = minimax_odd(degree, lower, 1)
    ok, why = _check_equioscillation(mm, degree, lower, 1)
    assert ok, why


def test_closed_form_cubic_satisfies_equioscillation_exactly():
    """Independent of how it was derived: e = 1 - p is +E at l, -E at x*, +E at 1, and
    p'(x*) = 0, as exact SymPy identities in the symbol l."""
    f = optimal_cubic_closed_form()
    x = sp.Symbol("x")
    p = f["a"] * x + f["b"] * x**3
    at = {"l": f["l"], "x*": f["x_star"], "1": sp.Integer(1)}
    assert is_zero(1 - p.subs(x, at["l"]) - f["E"])
    assert is_zero(1 - p.subs(x, at["x*"]) + f["E"])
    assert is_zero(1 - p.subs(x, at["1"]) - f["E"])
    assert is_zero(sp.diff(p, x).subs(x, at["x*"]))
    # a planted error (the critical point of the plain cubic (3x - x^3)/2) is caught
    assert not is_zero(1 - p.subs(x, 1 / sp.sqrt(3)) + f["E"])


@pytest.mark.parametrize("lower", [Fraction(1, 10), Fraction(1, 1000), Fraction(1, 2)])
def test_closed_form_cubic_matches_remez(lower):
    exact = optimal_cubic(lower)
    mm = minimax_odd(3, lower, 1)
    closed = [float(sp.N(exact[k], DIGITS)) for k in ("a", "b", "E")]
    remez = [float(mm.coeffs[0]), float(mm.coeffs[1]), float(mm.error)]
    assert REMEZ_TOL.compare(remez, closed).ok, (remez, closed)
    assert abs(float(mm.reference[1]) - float(sp.N(exact["x_star"]))) < REMEZ_TOL.rtol ** 0.5


def test_known_optimal_cubic_on_tenth_to_one():
    """The optimum stated in :func:`optimal_cubic`'s docstring, to 6 digits (a, b, E)."""
    exact = optimal_cubic(Fraction(1, 10))
    mm = minimax_odd(3, Fraction(1, 10), 1)
    stated = {"a": 3.963405, "b": -3.570635, "E": 0.607230}
    got = {"a": mm.coeffs[0], "b": mm.coeffs[1], "E": mm.error}
    for k, v in stated.items():
        assert round(float(sp.N(exact[k], 20)), 6) == v
        assert round(float(got[k]), 6) == v
    assert sp.simplify(exact["x_star"] ** 2 - sp.Rational(37, 100)) == 0


def _rounding_condition(d) -> float:
    r"""First-order propagation of rounding the coefficients to float64: step :math:`j`
    moves its image ends by at most :math:`u M_j`, :math:`M_j = \sum_i |a_i| u_j^{2i+1}`
    (the largest term sum on :math:`[\ell_j, u_j]`), and moves the ends of its input by
    :math:`|p_j'|` at the ends (zero at the interior extrema), so
    :math:`S_j = S_{j-1} \max(|p_j'(\ell_j)|, |p_j'(u_j)|) + M_j` and the condition of the
    final error :math:`E_k` is :math:`S_k / E_k`."""
    lo, hi, S = Fraction(d.lower), Fraction(1), 0.0
    for c, E in zip(d.schedule, d.step_errors, strict=True):
        dp = [(2 * i + 1) * a for i, a in enumerate(c)]
        slope = max(abs(float(sum(b * x ** (2 * i) for i, b in enumerate(dp)))) for x in (lo, hi))
        S = S * slope + float(sum(abs(a) * hi ** (2 * i + 1) for i, a in enumerate(c)))
        lo, hi = 1 - Fraction(E), 1 + Fraction(E)
    return max(1.0, S / d.step_errors[-1])


@pytest.mark.parametrize(("steps", "lower"), [(5, 1e-3), (5, 1e-2), (3, 0.1)])
def test_designed_beats_muon(steps, lower):
    rows = {r["name"].split(" ")[0]: r for r in compare(steps, lower)}
    assert rows["designed"]["error"] < rows["muon"]["error"]
    assert rows["designed"]["error"] < min(rows["cubic"]["error"], rows["quintic"]["error"])
    d = design(steps, lower)
    assert d.error == rows["designed"]["error"]
    assert len(d.schedule) == steps and all(len(c) == 3 for c in d.schedule)
    # the certified error of the float64 coefficients is the greedy optimum E_k
    tol = tolerance("float64", condition=_rounding_condition(d), depth=steps)
    assert tol.compare([d.error], [d.step_errors[-1]], floor=0).ok, (d.error, d.step_errors)


def test_greedy_intervals_chain():
    """Each step maps its interval onto [1 - E_j, 1 + E_j], certified, one step at a time."""
    d = design(4, Fraction(1, 50), degree=3)
    lo, hi = Fraction(1, 50), Fraction(1)
    for c, E in zip(d.schedule, d.step_errors, strict=True):
        cert = certified_interval(c, 1, lo, hi)
        tol = tolerance("float64", condition=_rounding_condition(d))
        assert tol.compare([cert.lo, cert.hi], [1 - E, 1 + E]).ok
        lo, hi = 1 - Fraction(E), 1 + Fraction(E)


def test_perturbed_designed_coefficient_is_worse():
    d = design(5, Fraction(1, 100))
    for j in range(d.steps):
        for i in range(len(d.schedule[j])):
            for sign in (1, -1):
                plan = [list(c) for c in d.schedule]
                plan[j][i] *= 1 + sign * Fraction(1, 2**20)
                bad = certified_interval([tuple(c) for c in plan], d.steps, d.lower, 1)
                assert bad.error > d.error, (j, i, sign, bad.error, d.error)
    # a designed schedule for the wrong lower end is worse on [eps, 1] too
    other = design(5, Fraction(1, 10))
    assert certified_interval(other.schedule, 5, d.lower, 1).error > d.error


def test_skipping_the_exchange_is_caught(monkeypatch):
    """A Remez that never moves its (Chebyshev) reference returns the interpolant: not
    equioscillating, and a worse design."""
    good = minimax_odd(5, Fraction(1, 10), 1)
    good_design = design(5, Fraction(1, 100))

    def no_exchange(ctx, c, lo, hi):
        n = len(c) + 1
        return [(lo + hi) / 2 - (hi - lo) / 2 * ctx.cospi(ctx.mpf(j) / (n - 1))
                for j in range(n)]

    monkeypatch.setattr(designer, "_exchange", no_exchange)
    bad = minimax_odd(5, Fraction(1, 10), 1)
    ok, _ = _check_equioscillation(bad, 5, Fraction(1, 10), 1)
    assert not ok
    # de la Vallee Poussin: the levelled error on any alternating reference is a lower
    # bound, the certified maximum an upper bound; the interpolant's bracket straddles E*
    assert bad.error < good.error < certified_interval(bad.coeffs, 1, Fraction(1, 10), 1).error
    assert design(5, Fraction(1, 100)).error > good_design.error


def test_tweaks_documented_and_off_by_default():
    plain = design(5, 1e-3)
    assert plain == design(5, 1e-3, safety=1.0, cushion=0.0)
    tweaked = design(5, 1e-3, safety=1.01, cushion=0.02407327424182761)
    assert tweaked.schedule != plain.schedule
    # still certified, still far better than Muon, never better than the greedy optimum
    assert plain.error <= tweaked.error < certified_interval(MUON, 5, 1e-3, 1).error
    tol = tolerance("float64", condition=_rounding_condition(plain), depth=5)
    assert tol.compare([tweaked.error], [tweaked.step_errors[-1]], floor=0).ok


@pytest.mark.parametrize(("call", "name"), [
    (lambda: minimax_odd(4, 0.1, 1), "degree"),
    (lambda: minimax_odd(0, 0.1, 1), "degree"),
    (lambda: minimax_odd(True, 0.1, 1), "degree"),
    (lambda: minimax_odd(5.0, 0.1, 1), "degree"),
    (lambda: minimax_odd(5, 0, 1), "lower"),
    (lambda: minimax_odd(5, 0.5, 0.4), "lower"),
    (lambda: minimax_odd(5, "a", 1), "lower"),
    (lambda: minimax_odd(5, 0.1, 1, digits=10), "digits"),
    (lambda: design(0, 0.1), "steps"),
    (lambda: design(True, 0.1), "steps"),
    (lambda: design(3, 1.0), "lower"),
    (lambda: design(3, -0.1), "lower"),
    (lambda: design(3, 0.1, degree=2), "degree"),
    (lambda: design(3, 0.1, safety=0.9), "safety"),
    (lambda: design(3, 0.1, cushion=1.0), "cushion"),
    (lambda: optimal_cubic(0), "lower"),
])
def test_bad_arguments(call, name):
    with pytest.raises(ArgumentError, match=name):
        call()


def test_figures_are_reproducible(tmp_path):
    from nlaverify.optim.figures import draw_maps, draw_spectra

    a = draw_maps(tmp_path / "a.svg", steps=2)
    b = draw_maps(tmp_path / "b.svg", steps=2)
    assert a.read_bytes() == b.read_bytes() and a.read_bytes().startswith(b"<?xml")
    s = draw_spectra(tmp_path / "s.svg", steps=2, shape=(48, 24))
    assert b"<svg" in s.read_bytes() and not list(tmp_path.glob(".tmp-*"))


@pytest.mark.parametrize(("steps", "lower", "degree"), [
    (6, 0.1, 5), (7, 0.1, 5), (9, 1e-3, 5), (10, 1e-3, 5), (14, 1e-3, 3)])
def test_long_designs_fall_back_to_newton_schulz(steps, lower, degree):
    """Once E_j < STOP_ERROR (below the float64 rounding of the coefficients) the remaining
    steps are the Newton–Schulz polynomial of the same degree; the certificate is that of
    the schedule that runs (these designs crashed in the Remez solve at 40 digits)."""
    from nlaverify.optim.newton_schulz import newton_schulz_family

    d = design(steps, lower, degree)
    assert 1 <= d.designed < steps and len(d.schedule) == steps
    assert d.step_errors[d.designed - 1] < designer.STOP_ERROR <= d.step_errors[d.designed - 2]
    assert d.schedule[d.designed:] == [newton_schulz_family((degree - 1) // 2)] * (
        steps - d.designed)
    # below float64's resolution near 1, certified on the actual schedule
    assert d.error == certified_interval(d.schedule, steps, Fraction(lower), 1).error
    assert d.error <= tolerance("float64").rtol and len(d.step_errors) == steps
    shorter = design(d.designed, lower, degree)  # the designed prefix is the greedy optimum
    assert shorter.schedule == d.schedule[:d.designed] and shorter.designed == d.designed


def test_minimax_on_a_narrow_interval_needs_more_digits():
    """[1 - 1e-13, 1 + 1e-13] at degree 7: the working precision grows with the digits the
    ends share, and the result still equioscillates."""
    lo, hi = 1 - Fraction(1, 10**13), 1 + Fraction(1, 10**13)
    assert designer.working_digits(DIGITS, 3, lo, hi) >= DIGITS + 5 * 13
    mm = minimax_odd(7, lo, hi)
    ok, why = _check_equioscillation(mm, 7, lo, hi)
    assert ok, why
