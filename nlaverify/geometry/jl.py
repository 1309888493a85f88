r"""Johnson–Lindenstrauss random projections: Gaussian and Achlioptas, moments, the
Dasgupta–Gupta bound.

Baggag & Saad §3.14.1 (JL as the geometry of weak interference; its use in Linformer, §4.4).
A projection :math:`P \in \mathbb R^{k\times d}` has i.i.d. entries :math:`s =
\sqrt{\lambda/k}\,v` with :math:`v` drawn from an :class:`EntryLaw` (:math:`\lambda\,\mathbb E
v^2 = 1`): the standard Gaussian (:math:`\lambda = 1`), Achlioptas' sparse law :math:`v \in
\{-1, 0, 1\}` with probabilities :math:`(\tfrac16, \tfrac23, \tfrac16)`, :math:`\lambda = 3`
(two thirds of the entries are 0), or his Rademacher law :math:`v = \pm 1`.

**Moments** (each row :math:`r` contributes :math:`(r^\top x)^2`; the rows are i.i.d.): with
:math:`\kappa = \mathbb E v^4/(\mathbb E v^2)^2` the kurtosis of the entry law,

.. math:: \mathbb E\|Px\|^2 = \|x\|^2,\qquad
   \operatorname{Var}\frac{\|Px\|^2}{\|x\|^2} = \frac{2 + (\kappa - 3)\,\|x\|_4^4/\|x\|_2^4}k.

Gaussian and sparse Achlioptas both have :math:`\kappa = 3` (:math:`\mathbb E s^4 = 3/k^2`):
the same variance :math:`2/k`; Rademacher (:math:`\kappa = 1`) has less, never more.

**Dasgupta–Gupta** (2003). For the Gaussian, :math:`k\|Px\|^2/\|x\|^2 \sim \chi^2_k`;
Chernoff with :math:`\mathbb E e^{\lambda g^2} = (1 - 2\lambda)^{-1/2}` gives
:math:`P(\chi^2_k \ge (1+\varepsilon)k) \le ((1+\varepsilon)e^{-\varepsilon})^{k/2}` and
:math:`P(\chi^2_k \le (1-\varepsilon)k) \le ((1-\varepsilon)e^{\varepsilon})^{k/2}`, and
:math:`\ln(1+\varepsilon) \le \varepsilon - \varepsilon^2/2 + \varepsilon^3/3`,
:math:`\ln(1-\varepsilon) \le -\varepsilon - \varepsilon^2/2` turn both into

.. math:: P\bigl(\|Px\|^2 \notin [1-\varepsilon, 1+\varepsilon]\,\|x\|^2\bigr) \le
   2\exp\bigl(-k(\varepsilon^2/2 - \varepsilon^3/3)/2\bigr);

a union bound over the :math:`\binom n2` pairs makes every pairwise distance
:math:`\varepsilon`-preserved with probability at least :math:`1/n` once
:math:`k \ge 4\ln n/(\varepsilon^2/2 - \varepsilon^3/3)`. (Achlioptas proves the same bound
for his two laws.) The proofs of :mod:`nlaverify.identities.geometry` run
:func:`projected_sq_norm`, :func:`sq_norm_ratio_variance`, :meth:`EntryLaw.moment` and the
bound functions on SymPy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, DTypeError, ShapeError

__all__ = [
    "ACHLIOPTAS",
    "GAUSSIAN",
    "RADEMACHER",
    "EntryLaw",
    "achlioptas_projection",
    "chi2_distortion_probability",
    "dg_exponent",
    "dg_pair_bound",
    "distortion",
    "gaussian_projection",
    "jl_epsilon",
    "jl_min_dimension",
    "pair_distortions",
    "pairwise_sq_distances",
    "projected_sq_norm",
    "random_projection",
    "sq_norm_ratio_variance",
]


@dataclass(frozen=True)
class EntryLaw:
    r"""The law of one entry :math:`s = \sqrt{\lambda/k}\,v` of a random projection with
    :math:`k` rows: ``values`` and their ``probs`` (exact fractions), or the standard Gaussian
    when ``values`` is empty; ``scale`` is :math:`\lambda`."""

    name: str
    values: tuple[int, ...]
    probs: tuple[Fraction, ...]
    scale: Fraction

    def __post_init__(self) -> None:
        if len(self.values) != len(self.probs) or any(p <= 0 for p in self.probs) or (
                self.values and sum(self.probs) != 1) or self.scale <= 0:
            raise ArgumentError(f"EntryLaw {self.name!r}: expected positive probabilities "
                                f"summing to 1, one per value, and a positive scale; got values "
                                f"{self.values}, probs {self.probs}, scale {self.scale}")

    @property
    def gaussian(self) -> bool:
        return not self.values

    def raw_moment(self, j: int) -> Fraction:
        r""":math:`\mathbb E v^j` (the unscaled law), exactly: :math:`(j-1)!!` or 0 for the
        Gaussian."""
        if self.gaussian:
            return Fraction(0) if j % 2 else Fraction(math.prod(range(j - 1, 0, -2)))
        return sum((p * Fraction(v) ** j for v, p in zip(self.values, self.probs, strict=True)),
                   Fraction(0))

    def kurtosis(self) -> Fraction:
        r""":math:`\kappa = \mathbb E v^4/(\mathbb E v^2)^2` (3 for the Gaussian)."""
        return self.raw_moment(4) / self.raw_moment(2) ** 2

    def moment(self, xp: Namespace, j: int, k: Any) -> Any:
        r""":math:`\mathbb E s^j = (\lambda/k)^{j/2}\,\mathbb E v^j` for ``k`` rows (an integer
        or a SymPy symbol), exact on SymPy."""
        m = self.raw_moment(j)
        if m == 0:
            return xp.rational(0)
        ratio = xp.rational(self.scale.numerator, self.scale.denominator) / k
        out = xp.rational(m.numerator, m.denominator) * ratio ** (j // 2)
        return out * ratio ** xp.rational(1, 2) if j % 2 else out


GAUSSIAN = EntryLaw("gaussian", (), (), Fraction(1))
#: Achlioptas (2003), the sparse law: :math:`\sqrt{3/k}\cdot\{+1, 0, -1\}` w.p. 1/6, 2/3, 1/6
ACHLIOPTAS = EntryLaw("achlioptas", (-1, 0, 1), (Fraction(1, 6), Fraction(2, 3), Fraction(1, 6)),
                      Fraction(3))
#: Achlioptas (2003), the dense law: :math:`\pm 1/\sqrt k` w.p. 1/2 each
RADEMACHER = EntryLaw("rademacher", (-1, 1), (Fraction(1, 2), Fraction(1, 2)), Fraction(1))


def _check_size(op: str, name: str, v: Any, low: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
        raise ArgumentError(f"{op}: argument {name!r}: expected an integer >= {low}, got {v!r}")
    return int(v)


def _check_eps(op: str, eps: Any) -> None:
    bad = isinstance(eps, bool)
    try:
        ok = 0 < eps < 1
    except TypeError:
        ok = False
    if bad or not ok:
        raise ArgumentError(f"{op}: argument 'eps': expected a number in (0, 1), got {eps!r}")


def random_projection(seed: int, k: int, d: int, law: EntryLaw = GAUSSIAN, *,
                      replicates: int | None = None) -> np.ndarray:
    r"""A ``k`` :math:`\times` ``d`` projection with i.i.d. entries :math:`\sqrt{\lambda/k}\,v`,
    :math:`v \sim` ``law`` (float64, seeded; Baggag & Saad §3.14.1); ``replicates=R``: ``R``
    independent draws, shape ``(R, k, d)``. A discrete law is sampled by comparing one uniform
    per entry with the cumulative ``probs``."""
    k = _check_size("random_projection", "k", k)
    d = _check_size("random_projection", "d", d)
    lead = () if replicates is None else (_check_size("random_projection", "replicates",
                                                      replicates),)
    rng = np.random.default_rng(seed)
    scale = math.sqrt(law.scale / k)
    if law.gaussian:
        return rng.standard_normal((*lead, k, d)) * scale
    u = rng.random((*lead, k, d))
    edges = np.cumsum([float(p) for p in law.probs])[:-1]
    idx = np.searchsorted(edges, u, side="right")
    return np.asarray(law.values, dtype=np.float64)[idx] * scale


def gaussian_projection(seed: int, k: int, d: int, *, replicates: int | None = None
                        ) -> np.ndarray:
    r"""The Gaussian JL projection: :math:`P_{ij} \sim N(0, 1/k)`, shape ``(k, d)``
    (Johnson–Lindenstrauss 1984; Dasgupta–Gupta 2003; Baggag & Saad §3.14.1)."""
    return random_projection(seed, k, d, GAUSSIAN, replicates=replicates)


def achlioptas_projection(seed: int, k: int, d: int, *, law: EntryLaw = ACHLIOPTAS,
                          replicates: int | None = None) -> np.ndarray:
    r"""Achlioptas' database-friendly projection (2003): :math:`P_{ij} = \sqrt{3/k}\cdot
    \{+1, 0, -1\}` with probabilities :math:`\tfrac16, \tfrac23, \tfrac16` (two thirds
    zeros), or with ``law=RADEMACHER`` :math:`\pm 1/\sqrt k`; shape ``(k, d)`` (Baggag & Saad
    §3.14.1)."""
    return random_projection(seed, k, d, law, replicates=replicates)


def projected_sq_norm(xp: Namespace, x: Any, P: Any) -> Any:
    r""":math:`\|Px\|^2 = \sum_r (p_r^\top x)^2` for ``x`` of shape ``(d,)`` and ``P`` of shape
    ``(k, d)`` (or ``(R, k, d)``: one value per replicate), written against ``xp``."""
    xs, ps = tuple(x.shape), tuple(P.shape)
    if len(xs) != 1 or len(ps) not in (2, 3) or ps[-1] != xs[0]:
        raise ShapeError(f"projected_sq_norm: arguments 'x', 'P': expected shapes (d,) and "
                         f"(k, d) or (R, k, d), got {xs} and {ps}")
    y = xp.sum(P * x, axis=-1)
    return xp.sum(y * y, axis=-1)


def sq_norm_ratio_variance(xp: Namespace, x: Any, k: Any, law: EntryLaw = GAUSSIAN) -> Any:
    r""":math:`\operatorname{Var}(\|Px\|^2/\|x\|^2) = \bigl(2 + (\kappa - 3)\|x\|_4^4/
    \|x\|_2^4\bigr)/k` for a ``k``-row projection with entries from ``law`` (module
    docstring; :math:`2/k` for Gaussian and sparse Achlioptas).

    Raises:
        ArgumentError: ``x`` is the zero vector (the ratio is undefined).
    """
    kap = law.kurtosis() - 3
    if not xp.object_arrays and xp.is_concrete(x) and not bool(xp.any(x != 0)):
        raise ArgumentError("sq_norm_ratio_variance: argument 'x': expected a nonzero vector "
                            "(the ratio ||Px||^2/||x||^2 is undefined at x = 0), got all zeros")
    n2 = xp.sum(x * x)
    n4 = xp.sum(x * x * x * x)
    return (2 + xp.rational(kap.numerator, kap.denominator) * n4 / (n2 * n2)) / k


def dg_exponent(xp: Namespace, eps: Any) -> Any:
    r"""The Dasgupta–Gupta exponent :math:`\varepsilon^2/2 - \varepsilon^3/3` (positive and
    increasing on :math:`(0, 1)`, up to :math:`1/6`)."""
    return eps * eps / 2 - eps * eps * eps / 3


def dg_pair_bound(xp: Namespace, k: Any, eps: Any) -> Any:
    r"""The Dasgupta–Gupta bound on the probability that one squared distance is distorted by
    more than ``eps``: :math:`2\exp(-k(\varepsilon^2/2 - \varepsilon^3/3)/2)` (module
    docstring; Baggag & Saad §3.14.1)."""
    if not xp.object_arrays:
        _check_size("dg_pair_bound", "k", k)
        _check_eps("dg_pair_bound", eps)
    return 2 * xp.exp(-k * dg_exponent(xp, eps) / 2)


def jl_min_dimension(n: int, eps: float) -> int:
    r"""The Dasgupta–Gupta target dimension :math:`k = \lceil 4\ln n/(\varepsilon^2/2 -
    \varepsilon^3/3)\rceil`: a Gaussian projection to :math:`k` dimensions keeps every
    squared distance among ``n`` points within :math:`1 \pm \varepsilon` with probability
    at least :math:`1/n` (Baggag & Saad §3.14.1; Dasgupta–Gupta 2003, Thm 2.1)."""
    n = _check_size("jl_min_dimension", "n", n, 2)
    _check_eps("jl_min_dimension", eps)
    e = Fraction(eps) if isinstance(eps, (int, Fraction)) else Fraction(str(eps))
    q = e * e / 2 - e * e * e / 3
    # ceil(4 ln n / q): 4 ln n / q is irrational (n >= 2), 40 digits decide the ceiling
    ctx = mpmath.MPContext()
    ctx.dps = 40
    k = int(ctx.ceil(4 * ctx.log(n) / (ctx.mpf(q.numerator) / q.denominator)))
    return max(k, 1)


def jl_epsilon(n: int, k: int) -> float:
    r"""The smallest :math:`\varepsilon \in (0, 1)` that :func:`jl_min_dimension` allows with
    ``k`` dimensions: the root of :math:`\varepsilon^2/2 - \varepsilon^3/3 = 4\ln n/k`
    (``nan`` when no :math:`\varepsilon < 1` is allowed, i.e. about when :math:`4\ln n/k
    \ge 1/6`: the bound guarantees nothing below :math:`k = 24\ln n`).

    Found as the smallest float64 with ``jl_min_dimension(n, eps) <= k``, by bisection on
    the ordered bit patterns of the floats in :math:`(0, 1)` (64 steps; the predicate is
    monotone, the exponent increasing on :math:`(0, 1)`), so the inverse is consistent:
    ``jl_min_dimension(n, jl_epsilon(n, k)) <= k`` always, and one unit in the last place
    less needs more than ``k`` dimensions."""
    n = _check_size("jl_epsilon", "n", n, 2)
    k = _check_size("jl_epsilon", "k", k)

    def bits(e: float) -> int:
        return int(np.float64(e).view(np.int64))

    def allows(i: int) -> bool:
        return jl_min_dimension(n, float(np.int64(i).view(np.float64))) <= k

    lo, hi = bits(5e-324), bits(float(np.nextafter(1.0, 0.0)))  # (0, 1) as ordered integers
    if not allows(hi):
        return math.nan
    while hi - lo > 1:  # invariant: allows(hi), not allows(lo) (eps -> 0 allows nothing)
        mid = (lo + hi) // 2
        if allows(mid):
            hi = mid
        else:
            lo = mid
    return float(np.int64(hi).view(np.float64))


def chi2_distortion_probability(k: int, eps: float) -> float:
    r"""The exact probability that a Gaussian projection distorts one squared norm by more
    than ``eps``: :math:`P(|\chi^2_k/k - 1| > \varepsilon)` (scipy), which
    :func:`dg_pair_bound` bounds."""
    k = _check_size("chi2_distortion_probability", "k", k)
    _check_eps("chi2_distortion_probability", eps)
    from scipy.special import gammainc, gammaincc  # chi2_k cdf(x) = P(k/2, x/2)

    return float(gammaincc(k / 2, (1 + eps) * k / 2) + gammainc(k / 2, (1 - eps) * k / 2))


def _points(op: str, X: Any, P: Any) -> tuple[np.ndarray, np.ndarray]:
    X, P = np.asarray(X), np.asarray(P)
    if X.ndim != 2 or X.shape[0] < 2:
        raise ShapeError(f"{op}: argument 'X': expected shape (n >= 2, d), got {X.shape}")
    if P.ndim != 2 or P.shape[1] != X.shape[1]:
        raise ShapeError(f"{op}: argument 'P': expected shape (k, d={X.shape[1]}), got "
                         f"{P.shape}")
    for name, a in (("X", X), ("P", P)):
        if a.dtype.kind != "f":
            raise DTypeError(f"{op}: argument {name!r}: expected a floating dtype, got {a.dtype}")
    return X.astype(np.float64, copy=False), P.astype(np.float64, copy=False)


def pairwise_sq_distances(X: Any) -> np.ndarray:
    r""":math:`\|x_i - x_j\|^2` for the :math:`\binom n2` pairs :math:`i < j` of rows of
    ``X`` (row-major order, float64), from explicit differences (no cancellation)."""
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] < 2:
        raise ShapeError(f"pairwise_sq_distances: argument 'X': expected shape (n >= 2, d), "
                         f"got {X.shape}")
    X = X.astype(np.float64, copy=False)
    out = []
    for i in range(X.shape[0] - 1):
        dx = X[i + 1:] - X[i]
        out.append(np.einsum("ij,ij->i", dx, dx))
    return np.concatenate(out)


def pair_distortions(X: Any, P: Any, *, sq_distances: Any = None) -> np.ndarray:
    r""":math:`\|P(x_i - x_j)\|^2/\|x_i - x_j\|^2 - 1` for the :math:`\binom n2` pairs
    :math:`i < j` of rows of ``X`` (``(n, d)``), ``P`` of shape ``(k, d)``, row-major order.
    Differences are formed explicitly after projecting (:math:`Px_i - Px_j = P(x_i -
    x_j)`); ``sq_distances`` (:func:`pairwise_sq_distances` of ``X``) may be passed to reuse
    them across projections."""
    X, P = _points("pair_distortions", X, P)
    den = pairwise_sq_distances(X) if sq_distances is None else np.asarray(sq_distances)
    n = X.shape[0]
    if den.shape != (n * (n - 1) // 2,):
        raise ShapeError(f"pair_distortions: argument 'sq_distances': expected shape "
                         f"({n * (n - 1) // 2},), got {den.shape}")
    if not np.all(den > 0):
        raise ArgumentError("pair_distortions: argument 'X': expected distinct rows, got a "
                            "repeated row")
    num = pairwise_sq_distances(X @ P.T)
    return num / den - 1.0


def distortion(X: Any, P: Any, *, sq_distances: Any = None) -> float:
    r"""The JL distortion of ``P`` on the rows of ``X``: :math:`\max_{i<j}\bigl|\|Px_i -
    Px_j\|^2/\|x_i - x_j\|^2 - 1\bigr|` (:func:`pair_distortions`; Baggag & Saad §3.14.1)."""
    return float(np.max(np.abs(pair_distortions(X, P, sq_distances=sq_distances))))
