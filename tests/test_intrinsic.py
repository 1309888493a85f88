r"""Known-answer tests of :mod:`nlaverify.geometry.intrinsic` (Facco et al. 2017; Levina &
Bickel 2004; Ethayarajh 2019; Baggag & Saad §3.15–3.16).

Independent oracles: the Pareto law of :math:`r_2/r_1` (TwoNN's unbiasedness, drawn exactly,
no neighbour search), SciPy's ``cdist`` for the neighbour distances, the :math:`O(N^2)`
definition of the mean pairwise cosine, and point clouds of known dimension :math:`k`: a
uniform cube in a rotated :math:`k`-subspace of :math:`\mathbb R^{32}`, the sphere
:math:`S^k` rotated into :math:`\mathbb R^{32}`, the Swiss roll (:math:`k = 2` in
:math:`\mathbb R^3`), :math:`N = 8000`.

The finite-sample bias of every estimator on every cloud was measured by simulation (12
seeds, 100–111, disjoint from the test's seed 0; ``BIAS`` below, relative to :math:`k`):
boundaries (the cube's faces, for large :math:`k` a ball of radius :math:`r_2` reaches
several) and curvature (the sphere) make every estimator read low: at :math:`k = 10` on
the cube TwoNN by 13 %, Levina–Bickel by 16 %. ``python tests/test_intrinsic.py`` measures
the table again (about 3 minutes). A known-answer test checks
:math:`|\hat d/k - 1 - b| \le 4\sigma`, :math:`\sigma` the larger of the measured sd
and the model's (TwoNN: :math:`1/\sqrt{N-2}`), inflated by :math:`\sqrt{1 + 1/12}` for
the uncertainty of the measured bias. ``test_planted_scale_error_is_detected`` shows that
every such bound rejects an estimate off by 10 % either way.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from nlaverify.errors import ArgumentError, NonFiniteError, ShapeError
from nlaverify.geometry import intrinsic as gi
from nlaverify.tolerance import tolerance

N, D, LB_K = 8000, 32, 20
#: relative bias b and sd of (TwoNN MLE, TwoNN fit, Levina-Bickel k=20), measured at N =
#: 8000 over seeds 100..111 (``_estimates(name, k, seed)``; ``python tests/test_intrinsic.py``)
BIAS: dict[tuple[str, int], tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    ("subspace", 2): ((-0.0016, -0.0020, -0.0123), (0.0136, 0.0139, 0.0026)),
    ("subspace", 5): ((-0.0499, -0.0486, -0.0773), (0.0135, 0.0152, 0.0027)),
    ("subspace", 10): ((-0.1261, -0.1281, -0.1584), (0.0146, 0.0126, 0.0035)),
    ("sphere", 2): ((-0.0049, -0.0042, -0.0005), (0.0136, 0.0148, 0.0035)),
    ("sphere", 5): ((0.0025, 0.0022, -0.0141), (0.0127, 0.0142, 0.0032)),
    ("sphere", 10): ((-0.0413, -0.0459, -0.0741), (0.0133, 0.0151, 0.0027)),
    ("swiss", 2): ((-0.0046, -0.0072, -0.0132), (0.0170, 0.0174, 0.0030)),
}
ESTIMATORS = ("twonn", "twonn_fit", "levina_bickel")
CASES = sorted(BIAS)


def _cloud(name: str, k: int, seed: int, n: int = N) -> np.ndarray:
    if name == "subspace":
        return gi.subspace_samples(seed, n, k, D)
    if name == "sphere":
        return gi.sphere_samples(seed, n, k, D)
    return gi.swiss_roll_samples(seed, n)


@functools.cache
def _estimates(name: str, k: int, seed: int = 0) -> tuple[float, float, float]:
    """(TwoNN MLE, TwoNN fit, Levina-Bickel) from one neighbour search."""
    r = gi.knn_distances(_cloud(name, k, seed), LB_K)
    mu = gi.neighbour_ratios(r)
    return (gi.twonn_from_ratios(mu).dimension, gi.twonn_fit_from_ratios(mu).dimension,
            gi.levina_bickel_from_distances(r).dimension)


def _bound(name: str, k: int, which: int) -> tuple[float, float]:
    """(centre 1 + b, half-width 4 sigma) for d_hat / k."""
    bias, sd = BIAS[name, k][0][which], BIAS[name, k][1][which]
    model = 1.0 / math.sqrt(N - 2) if which < 2 else 0.0
    return 1.0 + bias, 4.0 * max(sd, model) * math.sqrt(1.0 + 1.0 / 12)


@pytest.mark.parametrize("case", CASES, ids=[f"{n}-k{k}" for n, k in CASES])
@pytest.mark.parametrize("which", range(3), ids=ESTIMATORS)
def test_known_answer(case, which):
    """Each estimate of a cloud of known dimension k lies within 4 sigma of k(1 + b): detects
    a scale error of the estimator above 4 sigma (1.1 % to 7.2 % of k by case and estimator;
    test_planted_scale_error_is_detected) or a change of its finite-sample bias that large."""
    name, k = case
    centre, half = _bound(name, k, which)
    ratio = _estimates(name, k)[which] / k
    assert abs(ratio - centre) <= half, (name, k, ESTIMATORS[which], ratio, centre, half)


@pytest.mark.parametrize("case", CASES, ids=[f"{n}-k{k}" for n, k in CASES])
@pytest.mark.parametrize("which", range(3), ids=ESTIMATORS)
@pytest.mark.parametrize("scale", [0.9, 1.1])
def test_planted_scale_error_is_detected(case, which, scale):
    """An estimator off by 10 % (its estimate scaled by 0.9 or 1.1) fails the known-answer
    bound of every case: the bounds are tight enough to mean something."""
    name, k = case
    centre, half = _bound(name, k, which)
    assert abs(scale * _estimates(name, k)[which] / k - centre) > half


def test_twonn_mle_is_unbiased_on_pareto_ratios():
    r"""For exact Pareto ratios (:math:`\log\mu \sim \mathrm{Exp}(d)`), :math:`\hat d =
    (N-1)/\sum\log\mu` has mean :math:`d` and sd :math:`d/\sqrt{N-2}`. At :math:`N = 8`,
    20,000 replicates: the mean within 4 standard errors (0.035 at d = 3) detects the MLE
    proper :math:`N/\sum\log\mu` (biased by 1/7 = 14 %), and the sd within 10 % (the sample
    sd's relative error is about 2 %) detects a wrong variance formula."""
    d, n, reps = 3.0, 8, 20_000
    rng = np.random.default_rng(0)
    mu = np.exp(rng.exponential(1.0 / d, (reps, n)))  # P(mu > m) = m^-d
    est = [gi.twonn_from_ratios(row) for row in mu]
    values = np.array([e.dimension for e in est])
    sd = d / math.sqrt(n - 2)
    assert abs(values.mean() - d) <= 4 * sd / math.sqrt(reps), values.mean()
    assert abs(values.std(ddof=1) / sd - 1) <= 0.1, values.std(ddof=1)
    # the reported SE is d_hat / sqrt(N - 2): its mean square is E d_hat^2/(N-2)
    se2 = np.mean([e.se**2 for e in est])
    assert abs(se2 / (np.mean(values**2) / (n - 2)) - 1) <= tolerance(
        "float64", size=reps).rtol


def test_levina_bickel_at_two_neighbours_is_the_twonn_mle():
    """At k = 2 the MacKay-Ghahramani average is TwoNN's N / sum log mu: the two codes agree
    to rounding (detects an off-by-one in Levina-Bickel's neighbour indexing)."""
    X = gi.sphere_samples(1, 500, 3, 6)
    lb, tw = gi.levina_bickel(X, 2), gi.twonn(X)
    assert abs(lb.dimension * (lb.n - 1) / lb.n / tw.dimension - 1) <= tolerance(
        "float64", size=lb.n).rtol


def test_knn_distances_match_cdist():
    r"""The neighbour distances equal SciPy's ``cdist`` entry by entry, to the relative
    rounding of a difference-based distance, on (a) a cloud translated by :math:`10^6`, where
    the uncentred Gram formula loses every digit of a unit distance (detects a missing
    centring), and (b) pairs :math:`10^{-6}` apart in a cloud of spread 1, where even the
    centred Gram formula :math:`\|x\|^2 + \|y\|^2 - 2x^\top y` has relative error about
    :math:`u/10^{-12} = 10^{-4}` (detects distances not recomputed from the differences)."""
    rng = np.random.default_rng(2)
    far = rng.standard_normal((300, 5)) + 1e6
    base = rng.standard_normal((150, 5))
    pairs = np.vstack([base, base + 1e-6 * rng.standard_normal((150, 5))])
    tol = tolerance("float64", size=5).rtol
    for X in (far, pairs):
        want = np.sort(cdist(X, X), axis=1)[:, 1:4]  # column 0 is the point itself
        got = gi.knn_distances(X, 3, block=64)
        assert np.max(np.abs(got - want) / want) <= tol


def test_anisotropy_equals_the_pairwise_mean_cosine():
    r"""The :math:`O(ND)` formula :math:`(N\|\bar u\|^2 - 1)/(N-1)` equals the mean of the
    off-diagonal cosines, for a cloud with a common direction (mean cosine about 0.5) and an
    isotropic one (about 0); detects a missing :math:`-1` or :math:`N - 1` (errors of order
    :math:`1/N` = 0.2 % here, far above the tolerance)."""
    rng = np.random.default_rng(3)
    for X in (rng.standard_normal((400, 16)) + 1.0, rng.standard_normal((400, 16))):
        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        C = U @ U.T
        n = len(X)
        want = (C.sum() - np.trace(C)) / (n * (n - 1))
        assert abs(gi.anisotropy(X) - want) <= tolerance("float64", size=n * 16).rtol
    ones = np.ones((5, 3)) * np.arange(1, 6)[:, None]
    assert abs(gi.anisotropy(ones) - 1.0) <= tolerance("float64", size=3).rtol
    # rows at 1e200 and 1e-200 (squares overflow / underflow): the cosines are scale-free
    X = rng.standard_normal((50, 4)) + 0.5
    scaled = X * np.where(np.arange(50) % 2, 1e200, 1e-200)[:, None]
    assert abs(gi.anisotropy(scaled) - gi.anisotropy(X)) <= tolerance("float64", size=50 * 4).rtol


@pytest.mark.parametrize("k", [2, 5, 10])
def test_pca_is_exact_on_a_linear_subspace(k):
    r"""Points of a rotated :math:`k`-subspace: the energy outside the first :math:`k`
    components is rounding (:math:`\le 10^{-20}`), so at energy :math:`1 - 10^{-12}` PCA
    reads exactly :math:`k`; the isotropic cube needs :math:`\lceil 0.9k\rceil` components at
    90 % (its :math:`k` variances are equal to :math:`O(1/\sqrt N)`). A Gaussian with variances
    :math:`2^{-j}` needs the population's :math:`m^*` (margin above 1 %, 40 sd)."""
    X = gi.subspace_samples(0, 2000, k, D)
    assert gi.pca_dimension(X, 1 - 1e-12) == k
    assert gi.pca_dimension(X, 0.9) == math.ceil(0.9 * k - 1e-9)
    var = 2.0 ** -np.arange(k)
    share = np.cumsum(var) / var.sum()
    m_star = int(np.searchsorted(share, 0.9)) + 1
    rng = np.random.default_rng(k)
    Q = np.linalg.qr(rng.standard_normal((D, k)))[0]  # orthonormal columns
    G = (rng.standard_normal((20000, k)) * np.sqrt(var)) @ Q.T
    assert gi.pca_dimension(G, 0.9) == m_star
    assert gi.pca_dimension(gi.sphere_samples(0, 2000, k, D), 1 - 1e-12) == k + 1


def test_bad_input_is_named():
    with pytest.raises(ArgumentError, match="duplicate"):
        gi.twonn(np.vstack([np.eye(4), np.eye(4)[:1]]))
    with pytest.raises(ShapeError, match="2-D"):
        gi.twonn(np.ones(5))
    with pytest.raises(NonFiniteError):
        gi.levina_bickel(np.array([[0.0, 1.0], [1.0, np.nan], [2.0, 0.0], [3.0, 1.0]]), 2)
    with pytest.raises(ArgumentError, match="zero"):
        gi.anisotropy(np.array([[1.0, 0.0], [0.0, 0.0]]))
    with pytest.raises(ArgumentError, match="energy"):
        gi.pca_dimension(np.eye(3), 0.0)
    with pytest.raises(ArgumentError, match=">= 1"):
        gi.twonn_from_ratios([0.5, 2.0, 3.0])
    with pytest.raises(ArgumentError, match="'D'"):
        gi.sphere_samples(0, 10, 5, 5)  # S^5 needs R^6


if __name__ == "__main__":  # measure BIAS again: 12 seeds disjoint from the tests' seed 0
    for name, k in CASES:
        rel = np.array([_estimates(name, k, seed) for seed in range(100, 112)]) / k
        print(f"    ({name!r}, {k}): ({tuple(np.round(rel.mean(0) - 1, 4))}, "
              f"{tuple(np.round(rel.std(0, ddof=1), 4))}),")
