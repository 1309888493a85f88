r"""Intrinsic dimension and anisotropy of a point cloud (Baggag & Saad §3.15–3.16: the
subspaces where the model operates), written against NumPy in float64.

Rows of ``X`` (:math:`N \times D`) are points :math:`x_i`; :math:`r_j(x_i)` is the distance
from :math:`x_i` to its :math:`j`-th nearest other point (:func:`knn_distances`).

**TwoNN** (Facco, d'Errico, Rodriguez & Laio 2017). If the density is locally constant on a
:math:`d`-dimensional manifold, the number of points in a ball of radius :math:`r` grows like
:math:`r^d`, and the ratio :math:`\mu = r_2/r_1` is Pareto: :math:`P(\mu > m) = m^{-d}`,
:math:`m \ge 1`, whatever the density. So :math:`\log\mu \sim \mathrm{Exp}(d)` and
:math:`S = \sum_{i=1}^N \log\mu_i \sim \Gamma(N, d)` (the ratios treated as independent).
:func:`twonn` returns the unbiased maximum-likelihood form

.. math:: \hat d = \frac{N-1}{S},\qquad \mathbb E\hat d = d,\qquad
          \operatorname{sd}\hat d = \frac{d}{\sqrt{N-2}},

from :math:`\mathbb E S^{-1} = d/(N-1)` and :math:`\mathbb E S^{-2} = d^2/((N-1)(N-2))`
(the MLE proper, :math:`N/S`, is biased up by :math:`N/(N-1)`); the standard error reported
is :math:`\hat d/\sqrt{N-2}`. :func:`twonn_fit` is the paper's own estimator: the slope of
the line through the origin fitting :math:`-\log(1 - F(\mu_{(i)}))` against
:math:`\log\mu_{(i)}` (:math:`F` the empirical distribution, :math:`F(\mu_{(i)}) = i/N`),
the 10 % largest ratios discarded.

**Levina–Bickel** (2004) with MacKay & Ghahramani's correction (2005). Given
:math:`r_k(x)`, the :math:`k - 1` nearer distances are, for a Poisson process of rate
:math:`\propto r^d`, the order statistics of :math:`k-1` draws with
:math:`P(r_j \le t) = (t/r_k)^d`, so :math:`\log(r_k/r_j) \sim \mathrm{Exp}(d)` and
:math:`\hat m_k(x)^{-1} = \frac1{k-1}\sum_{j<k}\log\frac{r_k(x)}{r_j(x)}` is unbiased for
:math:`1/d`. Averaging these inverses (not the estimates :math:`\hat m_k`, whose mean is
biased up) gives :func:`levina_bickel`: :math:`\hat d = \bigl(\frac1N\sum_i
\hat m_k(x_i)^{-1}\bigr)^{-1}`. Neighbourhoods overlap, so the nominal standard error
:math:`\hat d/\sqrt{N(k-1)}` (independent neighbourhoods) is a lower bound; the known-answer
tests measure the real one. At :math:`k = 2` it is TwoNN's :math:`N/S`.

**PCA at an energy** (:func:`pca_dimension`): the least :math:`m` with
:math:`\sum_{j\le m}\sigma_j^2 \ge \text{energy}\cdot\sum_j\sigma_j^2`, :math:`\sigma_j` the
singular values of the centred data (an SVD of :math:`X - \bar x`, never an eigensolver on
:math:`X^\top X`, which would square the condition number). It measures the *linear* span:
a curved manifold of dimension :math:`d` may need many more components.

**Anisotropy** (Ethayarajh 2019): the mean cosine over ordered pairs :math:`i \ne j` of
rows, in :math:`O(ND)` (:func:`anisotropy`). With :math:`u_i = x_i/\|x_i\|` and
:math:`\bar u = \frac1N\sum_i u_i`,
:math:`N^2\|\bar u\|^2 = \sum_{i,j} u_i^\top u_j = N + \sum_{i\ne j}\cos\theta_{ij}`, so

.. math:: \frac1{N(N-1)}\sum_{i\ne j}\cos\theta_{ij} = \frac{N\|\bar u\|^2 - 1}{N - 1}.

It is 0 in expectation for isotropic directions and 1 when every row points the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.errors import ArgumentError, NonFiniteError, ShapeError

__all__ = [
    "IntrinsicEstimate",
    "anisotropy",
    "knn_distances",
    "levina_bickel",
    "levina_bickel_from_distances",
    "neighbour_ratios",
    "pca_dimension",
    "pca_energies",
    "sphere_samples",
    "subspace_samples",
    "swiss_roll_samples",
    "twonn",
    "twonn_fit",
    "twonn_fit_from_ratios",
    "twonn_from_ratios",
]


@dataclass(frozen=True)
class IntrinsicEstimate:
    r"""An intrinsic-dimension estimate: ``dimension`` :math:`\hat d`, its standard error
    ``se`` under the estimator's model (independent samples; ``nan`` where none is derived),
    the number ``n`` of points and the ``method``."""

    method: str
    dimension: float
    se: float
    n: int


def _points(op: str, X: Any, at_least: int) -> np.ndarray:
    """``X`` as a finite float64 ``(N, D)`` array with ``N >= at_least``."""
    A = np.asarray(X)
    if A.ndim != 2:
        raise ShapeError(f"{op}: argument 'X': expected a 2-D array (points as rows), got "
                         f"shape {A.shape}")
    if A.shape[0] < at_least or A.shape[1] < 1:
        raise ShapeError(f"{op}: argument 'X': expected at least {at_least} rows and one "
                         f"column, got shape {A.shape}")
    A = A.astype(np.float64)
    if not np.all(np.isfinite(A)):
        raise NonFiniteError(f"{op}: argument 'X': entry {np.argwhere(~np.isfinite(A))[0]} "
                             "is not finite")
    return A


def _int(op: str, name: str, v: Any, low: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < low:
        raise ArgumentError(f"{op}: argument '{name}': expected an integer >= {low}, got {v!r}")
    return int(v)


def knn_distances(X: Any, k: int, *, block: int = 512) -> np.ndarray:
    r"""The distances :math:`r_1 \le \dots \le r_k` from each row of ``X`` to its ``k``
    nearest *other* rows, an ``(N, k)`` array (brute force, ``block`` rows at a time:
    :math:`O(N^2 D)` time, :math:`O(\text{block}\cdot N)` memory).

    Candidates are chosen with :math:`\|x\|^2 + \|y\|^2 - 2x^\top y` on the centred data
    (distances are translation invariant and centred norms are smaller), whose absolute error
    is about :math:`(D + 2)\,u\max\|x - \bar x\|^2`; the ``k`` distances returned are
    recomputed from the differences :math:`x_i - x_j` of the data *as given* (centring rounds
    each entry by :math:`u|x|`, which would cost a pair :math:`10^{-6}` apart four digits),
    with relative error about :math:`\sqrt D u`. The Gram formula's cancellation thus only
    matters between neighbours whose squared distances agree to its absolute error. A point
    is never its own neighbour (excluded by index, so duplicate rows give distance 0)."""
    op = "knn_distances"
    k = _int(op, "k", k, 1)
    block = _int(op, "block", block, 1)
    X0 = _points(op, X, k + 1)
    A = X0 - X0.mean(axis=0)  # for the selection only: centring rounds each entry by u|x|
    n = A.shape[0]
    sq = np.einsum("ij,ij->i", A, A)
    out = np.empty((n, k))
    for lo in range(0, n, block):
        rows = np.arange(lo, min(lo + block, n))
        d2 = sq[rows, None] + sq[None, :] - 2.0 * (A[rows] @ A.T)
        d2[np.arange(rows.size), rows] = np.inf  # not its own neighbour
        idx = np.argpartition(d2, k - 1, axis=1)[:, :k]
        exact = np.linalg.norm(X0[rows, None, :] - X0[idx], axis=2)
        out[rows] = np.sort(exact, axis=1)
    return out


def _no_duplicates(op: str, r1: np.ndarray) -> None:
    zero = int(np.count_nonzero(r1 == 0.0))
    if zero:
        raise ArgumentError(f"{op}: {zero} points have a duplicate (nearest distance 0): the "
                            "ratio r2/r1 is undefined; remove duplicate rows first "
                            "(np.unique(X, axis=0))")


def twonn_from_ratios(mu: Any) -> IntrinsicEstimate:
    r"""TwoNN from the ratios :math:`\mu_i = r_2/r_1 \ge 1`: :math:`\hat d = (N-1)/\sum_i
    \log\mu_i`, unbiased for Pareto ratios, with standard error :math:`\hat d/\sqrt{N-2}`
    (module docstring). Needs :math:`N \ge 3`."""
    op = "twonn_from_ratios"
    m = np.asarray(mu, dtype=np.float64)
    if m.ndim != 1 or m.size < 3:
        raise ShapeError(f"{op}: argument 'mu': expected a 1-D array of at least 3 ratios, "
                         f"got shape {m.shape}")
    if not np.all(np.isfinite(m)) or np.any(m < 1.0):
        raise ArgumentError(f"{op}: argument 'mu': expected finite ratios r2/r1 >= 1, got "
                            f"min {np.min(m)!r}")
    s = float(np.sum(np.log(m)))
    if s <= 0.0:
        raise ArgumentError(f"{op}: every ratio is 1 (r2 = r1 at every point): no dimension")
    n = m.size
    d = (n - 1) / s
    return IntrinsicEstimate("TwoNN (MLE)", d, d / math.sqrt(n - 2), n)


def neighbour_ratios(r: Any) -> np.ndarray:
    r"""TwoNN's ratios :math:`\mu_i = r_2(x_i)/r_1(x_i)` from the ``(N, k)`` sorted distances
    of :func:`knn_distances` (``k >= 2``). Raises on duplicate rows (:math:`r_1 = 0`)."""
    op = "neighbour_ratios"
    r = np.asarray(r, dtype=np.float64)
    if r.ndim != 2 or r.shape[1] < 2:
        raise ShapeError(f"{op}: argument 'r': expected (N, k) distances with k >= 2, got "
                         f"shape {r.shape}")
    _no_duplicates(op, r[:, 0])
    return r[:, 1] / r[:, 0]


def _ratios(X: Any) -> np.ndarray:
    return neighbour_ratios(knn_distances(X, 2))


def twonn(X: Any) -> IntrinsicEstimate:
    r"""TwoNN (Facco et al. 2017), maximum likelihood: :func:`twonn_from_ratios` of
    :math:`\mu_i = r_2(x_i)/r_1(x_i)`. Raises on duplicate rows (:math:`r_1 = 0`)."""
    return twonn_from_ratios(_ratios(X))


def twonn_fit(X: Any, *, discard: float = 0.1) -> IntrinsicEstimate:
    r"""TwoNN as Facco et al. compute it: the least-squares slope through the origin of
    :math:`y_i = -\log(1 - i/N)` against :math:`x_i = \log\mu_{(i)}` (ratios sorted), the
    fraction ``discard`` of the largest ratios left out (their :math:`y` is dominated by the
    empirical tail, and :math:`i = N` gives :math:`\log 0`). No standard error is derived
    (``se`` is ``nan``); the tests measure it."""
    return twonn_fit_from_ratios(_ratios(X), discard=discard)


def twonn_fit_from_ratios(mu: Any, *, discard: float = 0.1) -> IntrinsicEstimate:
    r""":func:`twonn_fit` from the ratios :math:`\mu_i = r_2/r_1 \ge 1`."""
    op = "twonn_fit"
    if not (isinstance(discard, float | int) and 0.0 < discard < 1.0):
        raise ArgumentError(f"{op}: argument 'discard': expected a fraction in (0, 1), got "
                            f"{discard!r}")
    mu = np.sort(np.asarray(mu, dtype=np.float64))
    if mu.ndim != 1 or not np.all(np.isfinite(mu)) or (mu.size and mu[0] < 1.0):
        raise ArgumentError(f"{op}: argument 'mu': expected a 1-D array of finite ratios "
                            ">= 1")
    n = mu.size
    keep = math.floor((1.0 - discard) * n)
    if keep < 2:
        raise ShapeError(f"{op}: {n} points keep {keep} ratios after discarding "
                         f"{discard:g}: too few")
    x = np.log(mu[:keep])
    y = -np.log1p(-np.arange(1, keep + 1) / n)
    return IntrinsicEstimate("TwoNN (fit)", float(x @ y / (x @ x)), math.nan, n)


def levina_bickel(X: Any, k: int = 20) -> IntrinsicEstimate:
    r"""Levina–Bickel MLE with ``k`` neighbours, MacKay–Ghahramani's average of the inverse
    local estimates: :math:`\hat d = N(k-1)/\sum_i\sum_{j<k}\log(r_k(x_i)/r_j(x_i))`.
    ``se`` is the nominal :math:`\hat d/\sqrt{N(k-1)}` of independent neighbourhoods
    (module docstring: an underestimate). Needs ``k >= 2``; raises on duplicate rows."""
    k = _int("levina_bickel", "k", k, 2)
    return levina_bickel_from_distances(knn_distances(X, k))


def levina_bickel_from_distances(r: Any) -> IntrinsicEstimate:
    r""":func:`levina_bickel` from the ``(N, k)`` neighbour distances of :func:`knn_distances`,
    sorted along each row (one neighbour search serves every estimator: TwoNN's ratios are
    :func:`neighbour_ratios` of the same array)."""
    op = "levina_bickel"
    r = np.asarray(r, dtype=np.float64)
    if r.ndim != 2 or r.shape[1] < 2 or r.shape[0] < 1:
        raise ShapeError(f"{op}: argument 'r': expected (N, k) distances with k >= 2, got "
                         f"shape {r.shape}")
    _no_duplicates(op, r[:, 0])
    k, n = r.shape[1], r.shape[0]
    inverse = np.log(r[:, k - 1:k] / r[:, :k - 1]).sum(axis=1) / (k - 1)  # unbiased for 1/d
    mean = float(np.mean(inverse))
    if not mean > 0.0:
        raise ArgumentError(f"{op}: every point has {k} equidistant neighbours: no dimension")
    return IntrinsicEstimate(f"Levina-Bickel (k={k})", 1.0 / mean,
                             1.0 / mean / math.sqrt(n * (k - 1)), n)


def pca_energies(X: Any) -> np.ndarray:
    r"""The cumulative fractions of variance :math:`\sum_{j\le m}\sigma_j^2/\sum_j\sigma_j^2`,
    :math:`m = 1, \dots, \min(N, D)`, of the centred rows (SVD; the last entry is exactly 1)."""
    A = _points("pca_energies", X, 2)
    A = A - A.mean(axis=0)
    A = A - A.mean(axis=0)  # a second pass removes the first mean's rounding (Björck)
    s = np.linalg.svd(A, compute_uv=False)
    c = np.cumsum(s * s)
    if c[-1] == 0.0:
        raise ArgumentError("pca_energies: argument 'X': every row is the same point")
    return c / c[-1]


def pca_dimension(X: Any, energy: float = 0.9) -> int:
    r"""The number of principal components holding the fraction ``energy`` of the variance:
    the least :math:`m` with :func:`pca_energies` :math:`\ge` ``energy``."""
    if not (isinstance(energy, float | int) and 0.0 < energy <= 1.0):
        raise ArgumentError(f"pca_dimension: argument 'energy': expected a fraction in (0, 1], "
                            f"got {energy!r}")
    return int(np.searchsorted(pca_energies(X), energy, side="left")) + 1


def anisotropy(X: Any) -> float:
    r"""The mean cosine :math:`\frac1{N(N-1)}\sum_{i\ne j}\cos\theta_{ij}` of the rows of
    ``X``, as :math:`(N\|\bar u\|^2 - 1)/(N - 1)` with :math:`\bar u` the mean of the unit rows
    (module docstring: :math:`O(ND)`, not :math:`O(N^2 D)`). Its absolute rounding error is
    about :math:`D u` (each :math:`\|u_i\| = 1` to :math:`\sqrt D u`). Raises on a zero row."""
    A = _points("anisotropy", X, 2)
    big = np.max(np.abs(A), axis=1)
    if np.any(big == 0.0):
        raise ArgumentError(f"anisotropy: argument 'X': row {int(np.argmin(big))} is zero: "
                            "its direction is undefined")
    # scale each row by a power of two near its largest entry (exact) before squaring, so
    # that neither 1e200 overflows nor 1e-200 underflows (as ops/norms.py does)
    B = np.ldexp(A, -np.frexp(big)[1][:, None])
    u_bar = (B / np.sqrt(np.einsum("ij,ij->i", B, B))[:, None]).mean(axis=0)
    n = A.shape[0]
    return float((n * (u_bar @ u_bar) - 1.0) / (n - 1))


def _sizes(op: str, n: Any, k: Any, D: Any, least_D: int) -> tuple[int, int, int]:
    n, k, D = _int(op, "n", n, 1), _int(op, "k", k, 1), _int(op, "D", D, 1)
    if D < least_D:
        raise ArgumentError(f"{op}: argument 'D': expected at least {least_D} for k = {k}, "
                            f"got {D}")
    return n, k, D


def _rotation(rng: np.random.Generator, D: int, k: int) -> np.ndarray:
    """A ``(k, D)`` matrix with orthonormal rows, uniform (QR of a Gaussian, signs fixed)."""
    q, r = np.linalg.qr(rng.standard_normal((D, k)))
    return (q * np.sign(np.diag(r))).T


def subspace_samples(seed: int, n: int, k: int, D: int) -> np.ndarray:
    r"""``n`` points uniform on the unit cube :math:`[0, 1]^k`, rotated into a random
    ``k``-dimensional subspace of :math:`\mathbb R^D` (intrinsic dimension ``k``)."""
    n, k, D = _sizes("subspace_samples", n, k, D, k)
    rng = np.random.default_rng(seed)
    return rng.random((n, k)) @ _rotation(rng, D, k)


def sphere_samples(seed: int, n: int, k: int, D: int) -> np.ndarray:
    r"""``n`` points uniform on the unit sphere :math:`S^k \subset \mathbb R^{k+1}` (normalised
    Gaussians), rotated into :math:`\mathbb R^D`, :math:`D \ge k + 1` (intrinsic dimension
    ``k``)."""
    n, k, D = _sizes("sphere_samples", n, k, D, k + 1)
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((n, k + 1))
    return (g / np.linalg.norm(g, axis=1, keepdims=True)) @ _rotation(rng, D, k + 1)


def swiss_roll_samples(seed: int, n: int) -> np.ndarray:
    r"""``n`` points uniform (by area) on the Swiss roll :math:`(t\cos t, h, t\sin t)`,
    :math:`t \in [3\pi/2, 9\pi/2]`, :math:`h \in [0, 21]` (intrinsic dimension 2): the area
    element is :math:`\sqrt{1 + t^2}\,dt\,dh`, so :math:`t` is drawn by rejection from the
    uniform law with acceptance :math:`\sqrt{1+t^2}/\sqrt{1+t_{\max}^2}`."""
    n = _int("swiss_roll_samples", "n", n, 1)
    rng = np.random.default_rng(seed)
    lo, hi = 1.5 * np.pi, 4.5 * np.pi
    t = np.empty(0)
    while t.size < n:
        c = rng.uniform(lo, hi, 2 * n)
        t = np.concatenate([t, c[rng.random(2 * n) * np.hypot(1.0, hi) < np.hypot(1.0, c)]])
    t = t[:n]
    h = rng.uniform(0.0, 21.0, n)
    return np.stack([t * np.cos(t), h, t * np.sin(t)], axis=1)
