r"""Angles between random directions in :math:`\mathbb R^d`: the exact law and its sampling.

Baggag & Saad §3.14.1, Fig. 24 and Table 5: in :math:`d_{\text{model}} = 12{,}288` dimensions
(GPT-3, GPT-4) almost every pair of random directions is within a few degrees of orthogonal.

**The law.** For independent :math:`u, v` uniform on :math:`S^{d-1}`, :math:`t = \cos\theta =
u^\top v` has the density (the area of the :math:`(d-2)`-sphere of latitude :math:`t`, over the
whole sphere)

.. math:: f_d(t) = c_d\,(1 - t^2)^{(d-3)/2} \ \text{on } [-1, 1], \qquad
   c_d = \frac{\Gamma(d/2)}{\sqrt\pi\,\Gamma\bigl((d-1)/2\bigr)},

so :math:`\theta` itself has the density :math:`c_d\sin^{d-2}\theta` on :math:`[0, \pi]`.
Integration by parts gives every even moment, :math:`\mathbb E\,t^{2j+2} = \mathbb E\,t^{2j}
\,(2j + 1)/(d + 2j)`: mean 0, :math:`\mathbb E\,t^2 = 1/d`, :math:`\mathbb E\,t^4 =
3/(d(d + 2))`. The band :math:`|\theta - 90°| \le \delta` is :math:`|t| \le \sin\delta`, of
probability the regularized incomplete beta :math:`I_{\sin^2\delta}(\tfrac12,
\tfrac{d-1}2)` (substitute :math:`u = t^2`), and, differentiating in :math:`\delta`, the same
recurrence in :math:`d` (:func:`band_probability`):

.. math:: P_2 = \frac{2\delta}\pi,\quad P_3 = \sin\delta,\quad
   P_d = P_{d-2} + \frac{2c_d}{d-2}\,\sin\delta\,\cos^{d-3}\delta.

The proofs of :mod:`nlaverify.identities.geometry` run these functions on SymPy.

**Sampling.** Normalised Gaussian rows are uniform directions. The cosines of *all* pairs of
:math:`n` independent uniform directions are **pairwise independent** (given :math:`u_i`,
:math:`u_i^\top u_j` and :math:`u_i^\top u_k` are independent, with a law free of
:math:`u_i`), so a sum over all :math:`\binom n2` pairs of a function of one cosine has
exactly the variance of :math:`\binom n2` independent terms: the band count's is the binomial
:math:`Np(1-p)`, and the mean of :math:`t^2` has variance :math:`(\mathbb E t^4 -
d^{-2})/N = 2(d-1)/(d^2(d+2)N)`. (They are not mutually independent: the three cosines of a
triangle are not.) :func:`angle_statistics` streams over the Gram matrix in blocks, so 10,000
vectors in 12,288 dimensions (50 million pairs) cost one ``float32`` copy of the vectors.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import mpmath
import numpy as np
import sympy

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, ShapeError

__all__ = [
    "AngleStatistics",
    "angle_band_normal_approximation",
    "angle_band_probability",
    "angle_density",
    "angle_statistics",
    "band_fraction",
    "band_probability",
    "band_probability_increment",
    "cosine_density",
    "cosine_density_constant",
    "cosine_moment",
    "pairwise_cosines",
    "random_unit_vectors",
]

PAIR_MODES = ("pairs", "first", "all")


def _symbolic(d: Any) -> bool:
    return isinstance(d, sympy.Basic) and not d.is_Integer


def _check_int(op: str, name: str, v: Any, low: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer, sympy.Integer)) or v < low:
        raise ArgumentError(f"{op}: argument {name!r}: expected an integer >= {low}, got {v!r}")
    return int(v)


def _check_delta(op: str, delta_degrees: Any) -> float:
    try:
        v = float(delta_degrees)
    except (TypeError, ValueError):
        v = math.nan
    if isinstance(delta_degrees, bool) or not 0.0 <= v <= 90.0:
        raise ArgumentError(f"{op}: argument 'delta_degrees': expected a number in [0, 90], "
                            f"got {delta_degrees!r}")
    return v


def _check_radians(op: str, xp: Namespace, delta: Any) -> None:
    r"""``delta`` in :math:`[0, \pi/2]` when it is a concrete number (a SymPy symbol or a JAX
    tracer is let through; a SymPy number is compared exactly)."""
    if isinstance(delta, sympy.Basic):
        if delta.free_symbols:
            return
        ok = bool(delta >= 0) and bool(delta <= sympy.pi / 2)
    elif not xp.object_arrays and not xp.is_concrete(delta):
        return
    else:
        try:
            v = np.asarray(delta, dtype=np.float64)
        except (TypeError, ValueError, RuntimeError):
            v = np.asarray(float(delta))
        ok = bool(np.all(v >= 0) and np.all(v <= np.pi / 2))
    if not ok:
        raise ArgumentError(f"{op}: argument 'delta': expected radians in [0, pi/2], got "
                            f"{delta!r}")


def cosine_density_constant(xp: Namespace, d: Any) -> Any:
    r"""The normaliser :math:`c_d = \Gamma(d/2)/(\sqrt\pi\,\Gamma((d-1)/2))` of the density of
    :math:`\cos\theta` (Baggag & Saad §3.14.1).

    For an integer :math:`d \ge 2` it is built from :math:`c_2 = 1/\pi`, :math:`c_3 = 1/2` and
    :math:`c_d = c_{d-2}\,(d-2)/(d-3)` (:math:`\Gamma(x+1) = x\Gamma(x)`), as one rational
    times :math:`c_2` or :math:`c_3` (exact on SymPy, correctly rounded elsewhere); a symbolic
    ``d`` (a SymPy expression, for the proofs) gives the Gamma form itself."""
    if _symbolic(d):
        return sympy.gamma(d / 2) / (sympy.sqrt(sympy.pi) * sympy.gamma((d - 1) / 2))
    d = _check_int("cosine_density_constant", "d", d, 2)
    num, den = _constant_ratio(d)
    base = xp.const_sqrt(1, 1, -2) if d % 2 == 0 else xp.rational(1, 2)
    return xp.rational(num, den) * base


@functools.lru_cache(maxsize=64)
def _constant_ratio(d: int) -> tuple[int, int]:
    """:math:`c_d/c_2` or :math:`c_d/c_3` as an exact ratio of integers (cached: for
    :math:`d = 12{,}288` they have some 20,000 digits)."""
    start = 2 if d % 2 == 0 else 3
    num = math.prod(range(start, d - 1, 2))  # (d-2)(d-4)...start
    den = math.prod(range(start - 1, d - 2, 2))  # (d-3)(d-5)...(start-1)
    return num, den


def _exponent(xp: Namespace, d: Any) -> Any:
    return (d - 3) / 2 if _symbolic(d) else xp.rational(int(d) - 3, 2)


def cosine_density(xp: Namespace, t: Any, d: Any) -> Any:
    r"""The density of :math:`t = \cos\theta` for independent uniform directions in
    :math:`\mathbb R^d` (Baggag & Saad §3.14.1, Fig. 24):

    .. math:: f_d(t) = \frac{\Gamma(d/2)}{\sqrt\pi\,\Gamma\bigl(\tfrac{d-1}2\bigr)}
       (1 - t^2)^{(d-3)/2}, \qquad -1 \le t \le 1,

    mean 0, variance :math:`1/d` (:func:`cosine_moment`). ``t`` must lie in :math:`[-1, 1]`
    (checked for concrete floating input); ``d`` an integer :math:`\ge 2` or a SymPy
    expression."""
    c = cosine_density_constant(xp, d)
    if not xp.object_arrays and xp.is_concrete(t):
        a = np.asarray(t)
        if a.size and not bool(np.all(np.abs(a) <= 1)):
            raise ArgumentError("cosine_density: argument 't': expected values in [-1, 1], got "
                                f"a value of magnitude {float(np.nanmax(np.abs(a)))!r}")
    return c * (1 - t * t) ** _exponent(xp, d)


def angle_density(xp: Namespace, theta: Any, d: Any) -> Any:
    r"""The density of the angle :math:`\theta \in [0, \pi]` (radians) between independent
    uniform directions in :math:`\mathbb R^d`: :math:`f_d(\cos\theta)\sin\theta =
    c_d\sin^{d-2}\theta` (change of variables :math:`t = \cos\theta`; Baggag & Saad Fig. 24).
    Per degree, multiply by :math:`\pi/180`."""
    if _symbolic(d):
        return cosine_density(xp, xp.cos(theta), d) * xp.sin(theta)
    d = _check_int("angle_density", "d", d, 2)
    # c_d sin^{d-2}(theta) directly: f_d(cos theta) sin theta is 0 * inf = nan at theta = 0,
    # pi for d = 2 (the density of theta is the constant 1/pi there)
    s = xp.sin(theta)
    return cosine_density_constant(xp, d) * (s ** (d - 2) if d > 2 else s * 0 + 1)


def cosine_moment(xp: Namespace, d: Any, j: int) -> Any:
    r""":math:`\mathbb E\cos^{2j}\theta = \prod_{i=0}^{j-1}\frac{2i+1}{d+2i}` for uniform
    directions in :math:`\mathbb R^d` (integration by parts, module docstring): 1,
    :math:`1/d`, :math:`3/(d(d+2))`, ...; the odd moments are 0. ``d``: an integer
    :math:`\ge 2` or a SymPy expression."""
    j = _check_int("cosine_moment", "j", j, 0)
    if not _symbolic(d):
        d = _check_int("cosine_moment", "d", d, 2)
    out: Any = xp.rational(1)
    for i in range(j):
        out = out * (2 * i + 1) / (d + 2 * i) if _symbolic(d) else out * xp.rational(
            2 * i + 1, d + 2 * i)
    return out


def band_probability_increment(xp: Namespace, sin_delta: Any, cos_delta: Any, d: Any,
                               c_d: Any = None) -> Any:
    r"""The step :math:`P_d - P_{d-2} = \frac{2c_d}{d-2}\sin\delta\cos^{d-3}\delta` of
    :func:`band_probability`, from ``sin_delta`` and ``cos_delta`` (:math:`d \ge 4` or
    symbolic; ``c_d``: :func:`cosine_density_constant`, computed when not given)."""
    c = cosine_density_constant(xp, d) if c_d is None else c_d
    if _symbolic(d):
        return 2 / (d - 2) * c * sin_delta * cos_delta ** (d - 3)
    d = _check_int("band_probability_increment", "d", d, 4)
    return xp.rational(2, d - 2) * c * sin_delta * cos_delta ** (d - 3)


def band_probability(xp: Namespace, delta: Any, d: int) -> Any:
    r""":math:`P(|\theta - \pi/2| \le \delta) = P(|\cos\theta| \le \sin\delta)` for
    independent uniform directions in :math:`\mathbb R^d`, ``delta`` in radians
    (:math:`0 \le \delta \le \pi/2`; Baggag & Saad §3.14.1, Fig. 24), by the recurrence

    .. math:: P_2 = \frac{2\delta}{\pi},\quad P_3 = \sin\delta,\quad P_d = P_{d-2} +
       \frac{2c_d}{d-2}\sin\delta\cos^{d-3}\delta

    (:math:`dP_d/d\delta = 2f_d(\sin\delta)\cos\delta = 2c_d\cos^{d-2}\delta`; every step is
    positive, so the floating sum is stable). Exact on SymPy; :math:`O(d)` terms (for
    :math:`d = 12{,}288` prefer :func:`angle_band_probability`, the incomplete beta, or use
    this on mpmath as its independent check).

    Raises:
        ArgumentError: ``d`` not an integer :math:`\ge 2`; ``delta`` outside
            :math:`[0, \pi/2]` (where the recurrence is not the probability).
    """
    d = _check_int("band_probability", "d", d, 2)
    _check_radians("band_probability", xp, delta)
    start = 2 if d % 2 == 0 else 3
    s, c = xp.sin(delta), xp.cos(delta)
    p = delta * 2 * xp.const_sqrt(1, 1, -2) if start == 2 else s
    coef = cosine_density_constant(xp, start)
    for j in range(start + 2, d + 1, 2):
        coef = coef * xp.rational(j - 2, j - 3)  # c_j = c_{j-2} (j-2)/(j-3)
        p = p + band_probability_increment(xp, s, c, j, coef)
    return p


def angle_band_probability(d: int, delta_degrees: float, *, digits: int = 50) -> mpmath.mpf:
    r"""The exact probability that the angle between two independent uniform directions in
    :math:`\mathbb R^d` lies within ``delta_degrees`` of :math:`90°` (Baggag & Saad Fig. 24:
    the 88°–92° band is ``delta_degrees=2``):

    .. math:: P(|\theta - 90°| \le \delta) = P(\cos^2\theta \le \sin^2\delta) =
       I_{\sin^2\delta}\bigl(\tfrac12, \tfrac{d-1}2\bigr),

    (:math:`\cos^2\theta \sim \mathrm{Beta}(\tfrac12, \tfrac{d-1}2)`), the regularized
    incomplete beta evaluated by mpmath at ``digits`` significant digits, whatever the
    peakedness of the density (for :math:`d = 12{,}288`, :math:`\mathrm{sd}(\theta) \approx
    0.52°`). ``delta_degrees`` is read as the decimal it prints as."""
    d = _check_int("angle_band_probability", "d", d, 2)
    _check_delta("angle_band_probability", delta_degrees)
    digits = _check_int("angle_band_probability", "digits", digits, 15)
    ctx = mpmath.MPContext()
    ctx.dps = digits + 10
    delta = ctx.mpf(str(delta_degrees)) * ctx.pi / 180
    x = ctx.sin(delta) ** 2
    p = ctx.betainc(ctx.mpf(1) / 2, ctx.mpf(d - 1) / 2, 0, x, regularized=True)
    out = mpmath.MPContext()
    out.dps = digits
    return out.mpf(p)


def angle_band_normal_approximation(d: int, delta_degrees: float) -> float:
    r"""The normal approximation of :func:`angle_band_probability`: :math:`\cos\theta \approx
    N(0, 1/d)`, so :math:`P \approx \operatorname{erf}(\sin\delta\,\sqrt{d/2})` (Baggag &
    Saad §3.14.1; the exact law has lighter tails, :math:`\mathbb E t^4 = 3/(d(d+2)) <
    3/d^2`)."""
    d = _check_int("angle_band_normal_approximation", "d", d, 2)
    delta = math.radians(_check_delta("angle_band_normal_approximation", delta_degrees))
    return math.erf(math.sin(delta) * math.sqrt(d / 2))


# -- sampling (numpy, seeded) --------------------------------------------------------------


def random_unit_vectors(seed: int, count: int, d: int, *, dtype: Any = np.float64,
                        block: int = 1024) -> np.ndarray:
    r"""``count`` independent directions uniform on :math:`S^{d-1}` (rows of a
    ``(count, d)`` array): Gaussian rows :math:`g \sim N(0, I_d)` divided by :math:`\|g\|`
    (rotation invariance; Baggag & Saad Fig. 24). Drawn block by block in ``dtype``
    (``float32`` halves the memory of 10,000 × 12,288: 0.5 GB), norms accumulated in
    float64; reproducible bit for bit from ``seed``."""
    count = _check_int("random_unit_vectors", "count", count, 1)
    d = _check_int("random_unit_vectors", "d", d, 1)
    block = _check_int("random_unit_vectors", "block", block, 1)
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        from nlaverify.errors import DTypeError

        raise DTypeError(f"random_unit_vectors: argument 'dtype': expected float32 or float64, "
                         f"got {dtype}")
    rng = np.random.default_rng(seed)
    out = np.empty((count, d), dtype=dtype)
    for i in range(0, count, block):
        g = rng.standard_normal((min(block, count - i), d), dtype=dtype)
        norms = np.sqrt(np.einsum("ij,ij->i", g, g, dtype=np.float64))
        out[i:i + g.shape[0]] = g / norms[:, None].astype(dtype)
    return out


def _rows(op: str, X: Any, at_least: int = 2) -> np.ndarray:
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] < at_least or X.shape[1] < 1:
        raise ShapeError(f"{op}: argument 'X': expected shape (n >= {at_least}, d >= 1), got "
                         f"{X.shape}")
    if X.dtype.kind != "f":
        from nlaverify.errors import DTypeError

        raise DTypeError(f"{op}: argument 'X': expected a floating dtype, got {X.dtype}")
    return X


def _unit(X: np.ndarray) -> np.ndarray:
    n = np.sqrt(np.einsum("ij,ij->i", X, X, dtype=np.float64))
    if not np.all(n > 0):
        raise ArgumentError("angle functions: argument 'X': expected nonzero rows, got a zero row")
    return X / n[:, None].astype(X.dtype)


def pairwise_cosines(X: Any, *, mode: str = "pairs", max_pairs: int = 10**7) -> np.ndarray:
    r"""Cosines :math:`x_i^\top x_j/(\|x_i\|\|x_j\|)` (float64) of the rows of ``X``:

    * ``"pairs"``: rows :math:`(0, 1), (2, 3), \dots`: :math:`\lfloor n/2\rfloor` independent
      pairs;
    * ``"first"``: row 0 against each other row (:math:`n - 1` cosines, independent for
      uniform directions, like every set of pairwise cosines: module docstring);
    * ``"all"``: the :math:`\binom n2` pairs :math:`i < j` in row-major order (refused above
      ``max_pairs``; :func:`angle_statistics` streams any number).
    """
    X = _unit(_rows("pairwise_cosines", X))
    if mode not in PAIR_MODES:
        raise ArgumentError(f"pairwise_cosines: argument 'mode': expected one of "
                            f"{', '.join(PAIR_MODES)}, got {mode!r}")
    n = X.shape[0]
    if mode == "pairs":
        m = n // 2
        return np.einsum("ij,ij->i", X[0:2 * m:2], X[1:2 * m:2], dtype=np.float64)
    if mode == "first":
        return np.asarray(X[1:] @ X[0], dtype=np.float64)
    if n * (n - 1) // 2 > max_pairs:
        raise ArgumentError(f"pairwise_cosines: {n} rows have {n * (n - 1) // 2} pairs, more "
                            f"than max_pairs={max_pairs}; use angle_statistics (streamed)")
    G = np.asarray(X @ X.T, dtype=np.float64)
    return G[np.triu_indices(n, k=1)]


def band_fraction(cosines: Any, delta_degrees: float) -> float:
    r"""The fraction of ``cosines`` with :math:`|\theta - 90°| \le \delta`, i.e.
    :math:`|\cos\theta| \le \sin\delta` (Baggag & Saad Fig. 24)."""
    c = np.asarray(cosines, dtype=np.float64)
    if c.ndim != 1 or c.size == 0:
        raise ShapeError(f"band_fraction: argument 'cosines': expected a nonempty 1-d array, "
                         f"got shape {c.shape}")
    s = math.sin(math.radians(_check_delta("band_fraction", delta_degrees)))
    return float(np.count_nonzero(np.abs(c) <= s)) / c.size


@dataclass(frozen=True)
class AngleStatistics:
    r"""Streamed statistics of the :math:`N = \binom n2` pairwise angles of ``n`` vectors in
    :math:`\mathbb R^d` (:func:`angle_statistics`)."""

    n: int
    d: int
    pairs: int
    delta_degrees: float
    in_band: int
    sum_c2: float
    sum_c4: float
    edges_degrees: np.ndarray
    counts: np.ndarray
    below: int
    above: int

    @property
    def fraction(self) -> float:
        """The measured fraction of pairs within ``delta_degrees`` of 90°."""
        return self.in_band / self.pairs

    def fraction_se(self, p: float) -> float:
        r"""The standard error :math:`\sqrt{p(1-p)/N}` of :attr:`fraction` when the exact
        probability is ``p``: exact for all pairs of uniform directions, the indicators being
        pairwise independent (module docstring)."""
        return math.sqrt(p * (1.0 - p) / self.pairs)

    @property
    def mean_c2(self) -> float:
        r""":math:`\overline{\cos^2\theta}`, the variance estimate with the known mean 0."""
        return self.sum_c2 / self.pairs

    @property
    def mean_c2_se(self) -> float:
        r"""Its exact standard error for uniform directions, :math:`\sqrt{(\mathbb E t^4 -
        (\mathbb E t^2)^2)/N} = \sqrt{2(d-1)/(d^2(d+2)N)}`."""
        return math.sqrt(2.0 * (self.d - 1) / (self.d**2 * (self.d + 2) * self.pairs))


def angle_statistics(X: Any, *, delta_degrees: float = 2.0, edges_degrees: Any = None,
                     block: int = 1000) -> AngleStatistics:
    r"""Statistics of the angles of all :math:`\binom n2` pairs of rows of ``X`` (normalised
    here), streamed over ``block``:math:`\times`\ ``block`` tiles of the Gram matrix in
    ``X``'s dtype: the count within ``delta_degrees`` of 90°, :math:`\sum\cos^2`,
    :math:`\sum\cos^4` (float64) and a histogram of the angles in degrees over
    ``edges_degrees`` (with the counts below and above its range). Memory: one tile; time:
    :math:`n^2 d` flops (Baggag & Saad Fig. 24: :math:`n = 10{,}000`, :math:`d = 12{,}288`)."""
    X = _unit(_rows("angle_statistics", X))
    s = math.sin(math.radians(_check_delta("angle_statistics", delta_degrees)))
    block = _check_int("angle_statistics", "block", block, 1)
    edges = (np.asarray([0.0, 180.0]) if edges_degrees is None
             else np.asarray(edges_degrees, dtype=np.float64))
    if edges.ndim != 1 or edges.size < 2 or not np.all(np.diff(edges) > 0):
        raise ArgumentError("angle_statistics: argument 'edges_degrees': expected increasing "
                            f"edges (at least 2), got shape {edges.shape}")
    n = X.shape[0]
    counts = np.zeros(edges.size - 1, dtype=np.int64)
    uniform = bool(np.allclose(np.diff(edges), edges[1] - edges[0], rtol=1e-12, atol=0.0))
    in_band = below = above = 0
    s2 = s4 = 0.0
    for i in range(0, n, block):
        A = X[i:i + block]
        for j in range(i, n, block):
            G = A @ X[j:j + block].T  # in X's dtype (float32 halves the time of the Gram)
            c = G[np.triu_indices(G.shape[0], k=1, m=G.shape[1])] if i == j else G.ravel()
            in_band += int(np.count_nonzero(np.abs(c) <= s))
            c64 = c.astype(np.float64)
            c2 = c64 * c64
            s2 += float(c2.sum())
            s4 += float(c2 @ c2)
            deg = np.degrees(np.arccos(np.clip(c, -1.0, 1.0)))
            if uniform:  # numpy's fast path for equal bins
                counts += np.histogram(deg, bins=edges.size - 1, range=(edges[0], edges[-1]))[0]
            else:
                counts += np.histogram(deg, bins=edges)[0]
            below += int(np.count_nonzero(deg < edges[0]))
            above += int(np.count_nonzero(deg > edges[-1]))
    return AngleStatistics(n, X.shape[1], n * (n - 1) // 2, float(delta_degrees), in_band, s2,
                           s4, edges, counts, below, above)
