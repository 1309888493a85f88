r"""Seeded tests of high-dimensional geometry and Johnson–Lindenstrauss (Baggag & Saad §3.14.1).

Every statistical bound is five standard errors of a *derived* variance (fixed seeds, so the
outcome is deterministic; by the CLT a fresh seed fails with probability about
:math:`6\cdot10^{-7}`), and every claim has a planted mutant that fails it:

* **band fraction**: :math:`N` independent pairs (or all :math:`\binom n2` pairs, whose band
  indicators are pairwise independent, so the binomial variance :math:`p(1-p)/N` is exact);
  mutants: a wrong density exponent (the expected probability integrated from the mutated
  library density), non-centred vectors (pairwise dependence inflates the variance).
* **variance of cos θ**: :math:`\overline{t^2}` (known mean 0) against :math:`1/d` with
  :math:`\operatorname{Var}\overline{t^2} = (\mathbb E t^4 - d^{-2})/N =
  2(d-1)/(d^2(d+2)N)`; mutant :math:`1/(d-1)`.
* **JL mean / variance**: :math:`\|Px\|^2/\|x\|^2` over :math:`R` projections, mean within
  :math:`5\sqrt{\mathrm{Var}/R}` of 1 (Var from
  :func:`~nlaverify.geometry.jl.sq_norm_ratio_variance`), sample variance within five
  fourth-moment standard errors of Var; mutants: scaling :math:`1/d` instead of :math:`1/k`,
  Achlioptas with wrong probabilities (mean 3/2; or kurtosis 6).
* **JL tail**: the fraction of :math:`\varepsilon`-distorted norms below the Dasgupta–Gupta
  bound (plus five binomial SE), and for the Gaussian within five SE of the exact
  :math:`\chi^2_k` tail; mutant: scaling :math:`1/d`.
"""

from __future__ import annotations

import math
from fractions import Fraction
from statistics import NormalDist

import mpmath
import numpy as np
import pytest
import sympy
from scipy import integrate, special

from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError, DTypeError, ShapeError
from nlaverify.geometry import angles as an
from nlaverify.geometry import jl
from nlaverify.tolerance import tolerance

XP = get_namespace("numpy")
Z = 5.0  # standard errors
Z_POWER = NormalDist().inv_cdf(0.99)  # power 0.99: an error (Z + Z_POWER) se away is caught


def _z(measured: float, expected: float, se: float) -> float:
    return (measured - expected) / se


def _quad(f, a: float, b: float) -> tuple[float, float]:
    """scipy's adaptive quadrature: the value and its error estimate."""
    val, err = integrate.quad(f, a, b, epsabs=1e-13, epsrel=1e-12, limit=200)
    return val, err


def _quad_band(d: int, delta_degrees: float) -> tuple[float, float]:
    """The band probability integrated numerically from the running density (scipy quad),
    with quad's error estimate: an independent route to :func:`angle_band_probability`."""
    s = math.sin(math.radians(delta_degrees))
    return _quad(lambda t: float(an.cosine_density(XP, np.float64(t), d)), -s, s)


# -- the exact law -------------------------------------------------------------------------


@pytest.mark.parametrize("d", [2, 3, 4, 7, 16, 512, 12288])
def test_band_probability_three_routes_agree(d: int) -> None:
    exact = float(an.angle_band_probability(d, 2.0))
    # scipy's regularized incomplete beta: an independent implementation
    ref = float(special.betainc(0.5, (d - 1) / 2, math.sin(math.radians(2.0)) ** 2))
    rec = float(an.band_probability(XP, np.float64(math.radians(2.0)), d))
    tol = tolerance(np.float64, size=max(d // 2, 1), depth=max(d // 2, 1))
    assert tol.compare(rec, exact, floor=0.0).ok
    assert tolerance(np.float64, size=d).compare(ref, exact, floor=0.0).ok
    val, err = _quad_band(d, 2.0)
    assert abs(val - exact) <= 10 * err + tol.rtol
    assert 0.0 < exact < 1.0


def test_exact_values_and_normal_approximation() -> None:
    p = an.angle_band_probability(12288, 2)
    assert mpmath.nstr(p, 12) == "0.999890983908"
    assert float(p) == pytest.approx(float(an.angle_band_probability(12288, "2")))
    # the normal approximation is close in the bulk, and its tail is the heavier one
    normal = an.angle_band_normal_approximation(12288, 2)
    assert abs(normal - float(p)) < 1e-6 and normal < float(p)
    # d = 3: uniform cos, P = sin(delta); d = 4: (2/pi)(delta + sin delta cos delta)
    delta = math.radians(10.0)
    rel = tolerance(np.float64, size=4, depth=2).rtol  # the float closed forms' rounding
    assert float(an.angle_band_probability(3, 10)) == pytest.approx(math.sin(delta), rel=rel)
    assert float(an.angle_band_probability(4, 10)) == pytest.approx(
        2 / math.pi * (delta + math.sin(delta) * math.cos(delta)), rel=rel)
    assert float(an.angle_band_probability(50, 90)) == 1.0
    assert float(an.angle_band_probability(50, 0)) == 0.0


def test_density_moments_numeric_and_symbolic() -> None:
    for d in (3, 10, 300):
        m = [_quad(lambda t, j=j, d=d: t**j * float(an.cosine_density(XP, t, d)), -1.0, 1.0)
             for j in (0, 1, 2, 4)]
        rt = tolerance(np.float64, size=d).rtol
        want = (1.0, 0.0, float(an.cosine_moment(XP, d, 1)), float(an.cosine_moment(XP, d, 2)))
        for (val, err), w in zip(m, want, strict=True):
            assert abs(val - w) <= 10 * err + rt
    sp = get_namespace("sympy")
    assert an.cosine_moment(sp, 8, 2) == sympy.Rational(3, 80)
    assert an.cosine_density_constant(sp, 6) == sympy.Rational(8, 3) / sympy.pi  # (2*4)/(1*3)/pi
    # mpmath at 40 digits agrees with the Gamma form
    mp = get_namespace("mpmath", digits=40)
    for d in (5, 12288):
        ctx = mp.ctx
        gamma_form = ctx.gamma(ctx.mpf(d) / 2) / (ctx.sqrt(ctx.pi) * ctx.gamma(ctx.mpf(d - 1) / 2))
        got = an.cosine_density_constant(mp, d)
        assert abs(got / gamma_form - 1) < tolerance("mpmath", digits=40, size=d).rtol


# -- sampling: band fraction and variance --------------------------------------------------


@pytest.mark.parametrize("d", [16, 512])
def test_band_fraction_independent_pairs(d: int) -> None:
    N = 60_000
    X = an.random_unit_vectors(11 + d, 2 * N, d)
    c = an.pairwise_cosines(X, mode="pairs")
    assert c.shape == (N,)
    delta = 2.0 if d == 512 else 12.0
    p = float(an.angle_band_probability(d, delta))
    se = math.sqrt(p * (1 - p) / N)
    assert 0.2 < p < 0.8
    assert abs(_z(an.band_fraction(c, delta), p, se)) <= Z


def _all_pairs_stats(d: int, n: int = 1500, seed: int = 5) -> an.AngleStatistics:
    return an.angle_statistics(an.random_unit_vectors(seed, n, d), delta_degrees=12.0,
                               block=600)


def test_band_fraction_all_pairs_and_exponent_mutant(monkeypatch: pytest.MonkeyPatch) -> None:
    d, delta, n = 16, 12.0, 2500  # 3.1 million pairs: the mutant is 14 SE away
    st = _all_pairs_stats(d, n=n)
    assert st.pairs == n * (n - 1) // 2
    # the probability integrated from the running density (quad), an independent route
    p, err = _quad_band(d, delta)
    assert abs(p - float(an.angle_band_probability(d, delta))) <= 10 * err
    assert abs(_z(st.fraction, p, st.fraction_se(p))) <= Z
    # planted: the density with exponent (d - 2)/2 (a dropped Jacobian factor)
    monkeypatch.setattr(an, "_exponent", lambda xp, d: xp.rational(int(d) - 2, 2))
    p_bad = _quad_band(d, delta)[0]
    assert abs(_z(st.fraction, p_bad, st.fraction_se(p_bad))) > Z


@pytest.mark.parametrize("d", [16, 512])
def test_variance_of_cosine_is_one_over_d(d: int) -> None:
    st = _all_pairs_stats(d, seed=7 + d)
    assert abs(_z(st.mean_c2, float(an.cosine_moment(XP, d, 1)), st.mean_c2_se)) <= Z
    if d == 16:  # the planted 1/(d-1) is 54 SE away at d = 16 (1.5 SE at d = 512)
        assert abs(_z(st.mean_c2, 1 / (d - 1), st.mean_c2_se)) > Z
    # the same from the pairs mode, with the SE from the fourth moment
    c = an.pairwise_cosines(an.random_unit_vectors(3 + d, 40_000, d), mode="pairs")
    e4 = float(an.cosine_moment(XP, d, 2))
    se = math.sqrt((e4 - d**-2) / c.size)
    assert abs(_z(float(np.mean(c * c)), 1 / d, se)) <= Z


def test_pairwise_independence_gives_the_binomial_variance() -> None:
    r"""The variance of the all-pairs band fraction over replicates is :math:`p(1-p)/N`
    (pairwise independence); with non-centred vectors (a planted bias) the pairs sharing a
    vector are correlated and the variance is inflated."""
    d, n, R, delta = 16, 40, 400, 12.0
    p = float(an.angle_band_probability(d, delta))
    N = n * (n - 1) // 2
    want = p * (1 - p) / N

    def replicate_var(bias: float) -> tuple[float, float]:
        rng = np.random.default_rng(99)
        fr = []
        for _ in range(R):
            X = rng.standard_normal((n, d)) + bias
            fr.append(an.angle_statistics(X, delta_degrees=delta).fraction)
        f = np.asarray(fr)
        s2 = float(f.var(ddof=1))
        c = f - f.mean()
        return s2, math.sqrt(max(float(np.mean(c**4)) - s2 * s2, 0.0) / R)

    s2, se = replicate_var(0.0)
    assert abs(_z(s2, want, se)) <= Z
    s2_bad, se_bad = replicate_var(0.35)
    assert _z(s2_bad, want, se_bad) > Z


def test_pair_modes_and_streaming_agree() -> None:
    X = an.random_unit_vectors(1, 301, 20)
    allc = an.pairwise_cosines(X, mode="all")
    assert allc.shape == (301 * 300 // 2,)
    st = an.angle_statistics(X, delta_degrees=30.0, edges_degrees=np.linspace(0, 180, 37),
                             block=64)
    tol = tolerance(np.float64, size=20)
    assert st.in_band == int(np.count_nonzero(np.abs(allc) <= math.sin(math.radians(30))))
    assert tol.compare(st.sum_c2, float(allc @ allc), floor=0.0).ok
    assert int(st.counts.sum()) + st.below + st.above == st.pairs
    first = an.pairwise_cosines(X, mode="first")
    assert tol.compare(first, allc[:300]).ok
    G = X @ X.T
    assert tol.compare(an.pairwise_cosines(X, mode="pairs"), np.diag(G, 1)[::2][:150]).ok
    assert np.array_equal(X, an.random_unit_vectors(1, 301, 20))
    assert tol.compare(np.linalg.norm(X, axis=1), np.ones(301)).ok
    X32 = an.random_unit_vectors(1, 10, 20, dtype=np.float32)
    assert X32.dtype == np.float32


# -- Johnson–Lindenstrauss ------------------------------------------------------------------

K, D, R = 32, 64, 4000
X_GENERIC = np.random.default_rng(2).standard_normal(D)
X_HALF = np.r_[1.0, 1.0, np.zeros(D - 2)]  # |x|_4^4/|x|_2^4 = 1/2: the kurtosis shows


def _ratios(P: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.asarray(jl.projected_sq_norm(XP, x, P)) / float(x @ x)


def _mean_z(r: np.ndarray, var: float) -> float:
    return _z(float(r.mean()), 1.0, math.sqrt(var / r.size))


def _var_z(r: np.ndarray, var: float) -> float:
    s2 = float(r.var(ddof=1))
    c = r - r.mean()
    se = math.sqrt(max(float(np.mean(c**4)) - s2 * s2, 0.0) / r.size)
    return _z(s2, var, se)


LAWS = {"gaussian": jl.GAUSSIAN, "achlioptas": jl.ACHLIOPTAS, "rademacher": jl.RADEMACHER}


@pytest.mark.parametrize("name", list(LAWS))
def test_projection_mean_and_variance(name: str) -> None:
    r"""Power: the variance test (five fourth-moment SE) detects a relative error
    :math:`\delta` of :func:`~nlaverify.geometry.jl.sq_norm_ratio_variance` w.p. >= 0.99
    once :math:`\delta \ge (5 + z_{0.99})\,\mathrm{se}(s^2)/\mathrm{Var}`, about
    :math:`7.33\sqrt{(\kappa_r - 1)/R}` (:math:`\kappa_r \approx 3`, the ratio's kurtosis):
    8.0-9.1 % at R = 16000 projections (asserted below; at the former R = 4000, 18 %). The
    vectors are the first 16 entries of the generic one and (1, 1) (the ratio depends on x
    only, so fewer columns keep the cost down). Planted: Var x 1.1 and x 0.9 fail. The mean
    test detects a 1.5 % error of the mean (:math:`7.33\sqrt{2/(kR)}`; entries' variance
    off by 10 % is 50 SE). Cost ~0.1-0.35 s per law."""
    law, R_VAR = LAWS[name], 16000
    for i, x in enumerate((X_GENERIC[:16], X_HALF[:2])):
        P = jl.random_projection(17 + i, K, x.size, law, replicates=R_VAR)
        r = _ratios(P, x)
        var = float(jl.sq_norm_ratio_variance(XP, x, K, law))
        assert abs(_mean_z(r, var)) <= Z
        assert abs(_var_z(r, var)) <= Z
        c = r - r.mean()
        se = math.sqrt((float(np.mean(c**4)) - float(r.var(ddof=1)) ** 2) / R_VAR)
        assert (Z + Z_POWER) * se <= 0.1 * var  # the stated power
        for planted in (1.1 * var, 0.9 * var):
            assert abs(_var_z(r, planted)) > Z, planted
    assert float(jl.sq_norm_ratio_variance(XP, X_HALF, K, law)) <= 2.0 / K * (
        1 + tolerance(np.float64, size=D, depth=2).rtol)


def test_projection_mutants_fail() -> None:
    var = float(jl.sq_norm_ratio_variance(XP, X_GENERIC, K, jl.GAUSSIAN))
    # scaled 1/d instead of 1/k
    P = jl.gaussian_projection(21, K, D, replicates=R) * math.sqrt(K / D)
    assert abs(_mean_z(_ratios(P, X_GENERIC), var)) > Z
    # Achlioptas with the probabilities (1/4, 1/2, 1/4): mean 3/2
    wrong = jl.EntryLaw("wrong", (-1, 0, 1), (Fraction(1, 4), Fraction(1, 2), Fraction(1, 4)),
                        Fraction(3))
    P = jl.achlioptas_projection(22, K, D, law=wrong, replicates=R)
    assert abs(_mean_z(_ratios(P, X_GENERIC), var)) > Z
    # unit variance but kurtosis 6 (+-1 w.p. 1/12 each, scale 6): the mean holds, the
    # variance claimed for Achlioptas does not
    heavy = jl.EntryLaw("heavy", (-1, 0, 1), (Fraction(1, 12), Fraction(5, 6), Fraction(1, 12)),
                        Fraction(6))
    r = _ratios(jl.achlioptas_projection(23, K, D, law=heavy, replicates=R), X_HALF)
    claimed = float(jl.sq_norm_ratio_variance(XP, X_HALF, K, jl.ACHLIOPTAS))
    assert abs(_mean_z(r, float(jl.sq_norm_ratio_variance(XP, X_HALF, K, heavy)))) <= Z
    assert abs(_var_z(r, claimed)) > Z


def test_sparse_law_is_sampled_with_its_probabilities() -> None:
    P = jl.achlioptas_projection(5, 200, 300)
    v = np.round(P * math.sqrt(200 / 3)).astype(int)
    assert set(np.unique(v)) <= {-1, 0, 1}
    n = v.size
    for value, prob in ((-1, 1 / 6), (0, 2 / 3), (1, 1 / 6)):
        f = float(np.mean(v == value))
        assert abs(_z(f, prob, math.sqrt(prob * (1 - prob) / n))) <= Z


@pytest.mark.parametrize("name", ["gaussian", "achlioptas"])
def test_distortion_probability_below_dasgupta_gupta(name: str) -> None:
    r"""The fraction of :math:`\varepsilon`-distorted squared norms (k = 64, eps = 0.3) is at
    most the Dasgupta–Gupta bound (0.632) plus five binomial SE, and for the Gaussian it is
    the exact :math:`\chi^2_k` tail p = 0.0863 within five binomial SE.

    Power: the Gaussian rate detects a relative error :math:`\delta` of p w.p. >= 0.99 once
    :math:`\delta \ge (5 + z_{0.99})\sqrt{(1-p)/(pR)}`: 37.7 % at the R = 4000 of the
    first check, 8.9 % at the 72000 projections (of 2 columns) of the second (asserted);
    the planted p x 1.1 and x 0.9 fail. The one-sided check against the DG bound has no
    power statement: the bound is 7x the rate (a 10 % error of its constant cannot show;
    tests/test_geometry.py::test_dasgupta_gupta_dimension_and_epsilon pins its closed
    form). Cost ~1 s per law (the d = 128 draws; the power check adds ~0.2 s)."""
    k, d, eps = 64, 128, 0.3
    x = np.random.default_rng(8).standard_normal(d)
    law = LAWS[name]
    bound = float(jl.dg_pair_bound(XP, k, eps))
    band = Z * math.sqrt(bound * (1 - bound) / R)
    P = jl.random_projection(31, k, d, law, replicates=R)
    frac = float((np.abs(_ratios(P, x) - 1.0) > eps).mean())
    assert frac <= bound + band
    if name == "gaussian":  # exactly chi^2_k / k
        p = jl.chi2_distortion_probability(k, eps)
        assert p <= bound
        assert abs(_z(frac, p, math.sqrt(p * (1 - p) / R))) <= Z
        # the rate with power: 18 chunks of 4000 projections of x in R^2 (the ratio is
        # chi^2_k/k whatever d, so two columns suffice), binomial se sqrt(p(1-p)/R)
        x2, n = np.random.default_rng(8).standard_normal(2), 18 * R
        hits = sum(int((np.abs(_ratios(jl.gaussian_projection(100 + c, k, 2, replicates=R),
                                       x2) - 1.0) > eps).sum()) for c in range(18))
        se = math.sqrt(p * (1 - p) / n)
        assert abs(_z(hits / n, p, se)) <= Z
        assert (Z + Z_POWER) * se <= 0.1 * p  # the stated power
        for planted in (1.1 * p, 0.9 * p):
            assert abs(_z(hits / n, planted, se)) > Z, planted
    # planted: entries scaled 1/d instead of 1/k (every squared norm shrinks by k/d = 1/2)
    Pm = P * math.sqrt(k / d)
    frac_bad = float((np.abs(_ratios(Pm, x) - 1.0) > eps).mean())
    assert frac_bad > bound + band


def test_distortion_of_point_sets() -> None:
    X = np.random.default_rng(4).standard_normal((30, 50))
    assert jl.distortion(X, np.eye(50)) <= tolerance(np.float64, size=50).rtol
    # an orthogonal map preserves every distance
    Q, _ = np.linalg.qr(np.random.default_rng(5).standard_normal((50, 50)))
    assert jl.distortion(X, Q) <= tolerance(np.float64, size=50, depth=2).rtol
    # the pairs agree with the brute force
    P = jl.gaussian_projection(6, 20, 50)
    pd = jl.pair_distortions(X, P)
    i, j = 3, 17
    idx = i * 30 - i * (i + 1) // 2 + (j - i - 1)
    brute = np.sum((P @ (X[i] - X[j])) ** 2) / np.sum((X[i] - X[j]) ** 2) - 1
    assert tolerance(np.float64, size=50).compare(pd[idx], brute).ok
    assert jl.distortion(X, P) == pytest.approx(float(np.max(np.abs(pd))))


def test_dasgupta_gupta_dimension_and_epsilon() -> None:
    assert jl.jl_min_dimension(1000, 0.1) == 5921
    assert jl.jl_min_dimension(10, 0.5) == 111
    for n, k in ((200, 256), (1000, 5921), (10**4, 4096)):
        e = jl.jl_epsilon(n, k)
        assert 0 < e < 1
        # e is the smallest float that fits: the exponent meets 4 ln n / k up to one ulp of e,
        # times the condition e g'(e)/g(e) of g(e) = e^2/2 - e^3/3
        cond = (1 - e) / (0.5 - e / 3)
        tol = tolerance(np.float64, size=2, depth=2, condition=max(1.0, cond))
        assert float(jl.dg_exponent(XP, e)) == pytest.approx(4 * math.log(n) / k, rel=tol.rtol)
        assert jl.jl_min_dimension(n, e) <= k < jl.jl_min_dimension(n, np.nextafter(e, 0))
    assert math.isnan(jl.jl_epsilon(200, 100))  # below 24 ln n: no guarantee
    for k in (1, 8, 100, 1000):
        for eps in (0.05, 0.5, 0.95):
            assert jl.chi2_distortion_probability(k, eps) <= float(jl.dg_pair_bound(XP, k, eps))


def test_jl_epsilon_is_the_exact_inverse() -> None:
    """``jl_epsilon(n, k)`` is the smallest float eps with ``jl_min_dimension(n, eps) <= k``:
    the root found in float64 could fall a few units below it (``jl_min_dimension(100,
    jl_epsilon(100, 200))`` was 201)."""
    assert jl.jl_min_dimension(100, jl.jl_epsilon(100, 200)) <= 200
    for n in (2, 100, 1000, 10**6):
        lo = math.ceil(24 * math.log(n)) + 1
        for k in (lo, lo + 1, lo + 37, 2 * lo, 10 * lo + 3):
            e = jl.jl_epsilon(n, k)
            assert jl.jl_min_dimension(n, e) <= k, (n, k)
            assert jl.jl_min_dimension(n, float(np.nextafter(e, 0.0))) > k, (n, k)


def test_angle_density_at_the_poles() -> None:
    r""":math:`c_d\sin^{d-2}\theta` at every :math:`\theta \in [0, \pi]`: for :math:`d = 2`
    the constant :math:`1/\pi` (the composite :math:`f_2(\cos\theta)\sin\theta` is
    :math:`\infty\cdot 0` at the poles), 0 at the poles for :math:`d \ge 3`, and it
    integrates to 1."""
    theta = np.array([0.0, 0.3, np.pi / 2, np.pi])
    got = an.angle_density(XP, theta, 2)
    tol = tolerance(np.float64, size=8, depth=2)
    assert np.all(np.isfinite(got)) and np.allclose(got, 1 / np.pi, rtol=tol.rtol, atol=0)
    for d in (3, 5, 12):
        got = an.angle_density(XP, theta, d)
        want = np.array([float(mpmath.gamma(d / 2) / (mpmath.sqrt(mpmath.pi)
                                                      * mpmath.gamma((d - 1) / 2))
                               * mpmath.sin(t) ** (d - 2)) for t in theta])
        assert tol.compare(got, want).ok, d
        val, err = _quad(lambda t, d=d: float(an.angle_density(XP, np.float64(t), d)), 0, np.pi)
        assert abs(val - 1) <= max(err, tol.rtol), (d, val)


# -- bad input -------------------------------------------------------------------------------


def test_bad_input() -> None:
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ArgumentError, match="'k'"):
            jl.gaussian_projection(0, bad, 4)
        with pytest.raises(ArgumentError, match="'k'"):
            jl.dg_pair_bound(XP, bad, 0.5)
    for eps in (0, 1, -0.1, 1.5, True, "x"):
        with pytest.raises(ArgumentError, match="'eps'"):
            jl.jl_min_dimension(10, eps)
        with pytest.raises(ArgumentError, match="'eps'"):
            jl.chi2_distortion_probability(10, eps)
    with pytest.raises(ArgumentError, match="'n'"):
        jl.jl_min_dimension(1, 0.5)
    X = np.zeros((5, 6))
    with pytest.raises(ShapeError, match="'P'"):
        jl.distortion(np.ones((5, 6)), np.ones((3, 7)))
    with pytest.raises(ArgumentError, match="distinct"):
        jl.distortion(X, np.ones((3, 6)))
    with pytest.raises(DTypeError, match="'X'"):
        jl.distortion(np.ones((5, 6), dtype=int), np.ones((3, 6)))
    with pytest.raises(ShapeError, match="'x', 'P'"):
        jl.projected_sq_norm(XP, np.ones(4), np.ones((3, 5)))
    with pytest.raises(ArgumentError, match="EntryLaw"):
        jl.EntryLaw("bad", (-1, 1), (Fraction(1, 2), Fraction(1, 3)), Fraction(1))
    with pytest.raises(ArgumentError, match="'d'"):
        an.cosine_density(XP, np.zeros(3), 1)
    with pytest.raises(ArgumentError, match="'t'"):
        an.cosine_density(XP, np.array([0.5, 1.5]), 5)
    for delta in (-1, 91, "x", True):
        with pytest.raises(ArgumentError, match="'delta_degrees'"):
            an.angle_band_probability(10, delta)
    with pytest.raises(ArgumentError, match="'mode'"):
        an.pairwise_cosines(np.ones((4, 3)), mode="some")
    with pytest.raises(ArgumentError, match="max_pairs"):
        an.pairwise_cosines(np.eye(10), mode="all", max_pairs=10)
    with pytest.raises(ShapeError, match="'X'"):
        an.angle_statistics(np.ones((1, 3)))
    with pytest.raises(ArgumentError, match="nonzero"):
        an.pairwise_cosines(np.zeros((4, 3)))
    with pytest.raises(DTypeError, match="'dtype'"):
        an.random_unit_vectors(0, 3, 3, dtype=np.int32)
    with pytest.raises(ArgumentError, match="'edges_degrees'"):
        an.angle_statistics(np.eye(3), edges_degrees=[3.0, 1.0])
    for delta in (-0.0998, 1.82, np.float64(-1e-3)):
        with pytest.raises(ArgumentError, match="'delta'"):
            an.band_probability(XP, np.float64(delta), 4)
    with pytest.raises(ArgumentError, match="'delta'"):
        an.band_probability(get_namespace("sympy"), sympy.pi, 4)
    with pytest.raises(ArgumentError, match=r"'x'.*nonzero"):
        jl.sq_norm_ratio_variance(XP, np.zeros(4), 8)


# -- the proofs see planted errors -----------------------------------------------------------


def test_proofs_fail_on_planted_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from nlaverify.identities import geometry as ig

    with monkeypatch.context() as m:
        m.setattr(an, "_exponent", lambda xp, d: (d - 2) / 2 if isinstance(d, sympy.Basic)
                  and not d.is_Integer else xp.rational(int(d) - 2, 2))
        assert ig.derive_cosine_density().verdict == "failed"
    with monkeypatch.context() as m:
        m.setattr(jl, "sq_norm_ratio_variance", lambda xp, x, k, law=jl.GAUSSIAN:
                  xp.rational(2) / k)
        assert ig.derive_projection_moments().verdict == "failed"
    with monkeypatch.context() as m:
        m.setattr(jl, "dg_exponent", lambda xp, eps: eps * eps / 2 - eps**3 / 4)
        assert ig.derive_dasgupta_gupta().verdict == "failed"
