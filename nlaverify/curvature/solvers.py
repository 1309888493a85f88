r"""Matrix-free numerics on curvature operators: damped natural-gradient solves (conjugate
gradients), top eigenvalues (Lanczos) and traces (Hutchinson).

Baggag & Saad §5.1 (natural gradient :math:`F^{-1}\nabla L`), §5.2 (Gauss–Newton). The
operators are flat, symmetric positive semidefinite matvecs :math:`v \mapsto Mv` (Hessian,
GGN, Fisher; see :func:`nlaverify.curvature.graph.linear_operator`); no matrix is formed.

The generic numerics come from two maintained JAX libraries rather than being written here:
``lineax`` (Kidger & al.) for the conjugate-gradient solve, with the operator tagged
symmetric positive semidefinite, and ``matfree`` (Krämer) for the Lanczos
tridiagonalisation with full reorthogonalisation and the Monte-Carlo trace estimator with
its standard error. What is ours is what certifies the result: each Ritz value comes with
its residual norm :math:`\lVert M x - \theta x\rVert`, which bounds its distance to an
eigenvalue of :math:`M` (for symmetric :math:`M`, some eigenvalue lies in
:math:`[\theta - \lVert r\rVert, \theta + \lVert r\rVert]`), each trace estimate with the
exact variance of its estimator, and each solve with its true residual.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from nlaverify.errors import ArgumentError, DTypeError, NonFiniteError

Matvec = Callable[[Any], Any]


def _check_size(size: Any) -> int:
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ArgumentError(f"size: expected a positive integer (the operator's dimension), "
                            f"got {size!r}")
    return size


@dataclass(frozen=True)
class RitzPairs:
    r"""Top eigenvalue estimates of a symmetric operator.

    ``values`` (descending), ``vectors`` (rows, unit norm), ``residuals``
    :math:`\lVert M x_i - \theta_i x_i\rVert` (so an eigenvalue of :math:`M` lies within
    ``residuals[i]`` of ``values[i]``), and the number of matvecs used.
    """

    values: np.ndarray
    vectors: np.ndarray
    residuals: np.ndarray
    matvecs: int


def top_eigenvalues(matvec: Matvec, size: int, k: int = 3, *, krylov: int | None = None,
                    seed: int = 0) -> RitzPairs:
    r"""The ``k`` largest eigenvalues of the symmetric operator ``matvec`` (dimension
    ``size``) by Lanczos with full reorthogonalisation (``matfree``), from a seeded random
    start, with ``krylov`` Krylov vectors (default :math:`\min(n, \max(2k + 10, 20))`).

    Returns :class:`RitzPairs`; the residuals are recomputed with ``k`` extra matvecs. A
    low-rank operator (rank below the Krylov size: a GGN or Fisher of a small batch) makes
    the Krylov space invariant early: Lanczos restarts there orthogonally
    (:func:`_lanczos`), so the null space's 0, negative eigenvalues and repeated ones are
    found. Each residual bounds the distance of its value to *some* eigenvalue of the
    operator; the values are the largest Ritz values, which converge to the largest
    eigenvalues as the Krylov size grows (a clustered spectrum may need a larger
    ``krylov``).
    """
    import jax
    import jax.numpy as jnp

    size = _check_size(size)
    if not isinstance(k, int) or not 1 <= k <= size:
        raise ArgumentError(f"k: expected an integer in [1, size={size}], got {k!r}")
    m = min(size, max(2 * k + 10, 20)) if krylov is None else krylov
    if not isinstance(m, int) or not k <= m <= size:
        raise ArgumentError(f"krylov: expected an integer in [k={k}, size={size}], got {m!r}")
    v0 = np.asarray(jax.random.normal(jax.random.key(seed), (size,), dtype=jnp.float64))
    v0 = v0 / _norm(v0)

    def apply(x: np.ndarray) -> np.ndarray:
        return np.asarray(matvec(x), np.float64)

    rng = np.random.default_rng(seed + 1)
    if not _norm(apply(v0)) > 0:
        # the Krylov space of a random start is {0} only for the zero operator (with
        # probability 1): every eigenvalue is 0; Lanczos would divide 0 by 0
        Q = np.linalg.qr(rng.standard_normal((size, k)))[0].T
        res = np.array([_norm(apply(x)) for x in Q])
        return RitzPairs(np.zeros(k), Q, res, 1 + k)
    Q, H = _lanczos(apply, v0, m, rng)
    vals, vecs = _deflated_ritz(Q, H)
    used = Q.shape[0]
    if vals.size == 0:
        raise NonFiniteError(f"top_eigenvalues: Lanczos broke down ({m} Krylov vectors for a "
                             f"dimension-{size} operator gave non-finite values at the first "
                             "step); the operator returned non-finite values or is not "
                             "symmetric")
    order = np.argsort(vals)[::-1][:k]
    vals, vecs = vals[order], vecs[order]
    vecs = vecs / np.array([[_norm(v)] for v in vecs])
    if vals.shape[0] < k:
        # the invariant Krylov space holds every eigencomponent of the random start: the
        # eigenvalues it misses are repeats, for a low-rank PSD operator the zero eigenvalue
        # of its null space; its vectors are a basis orthogonal to the Krylov vectors found
        # (their residuals, recomputed below, show whether 0 is right there)
        extra = k - vals.shape[0]
        R = rng.standard_normal((size, extra))
        R = R - vecs.T @ (vecs @ R)
        Qx = np.linalg.qr(R)[0].T
        vals = np.concatenate([vals, np.zeros(extra)])
        vecs = np.concatenate([vecs, Qx])
        order = np.argsort(vals)[::-1]
        vals, vecs = vals[order], vecs[order]
    res = np.array([_norm(apply(x) - t * x) for t, x in zip(vals, vecs, strict=True)])
    return RitzPairs(vals, vecs, res, used + k)


#: a Lanczos coefficient beta_j at most this times max|T| ends the Krylov space there
#: (:func:`_lanczos`, :func:`_deflated_ritz`)
DEFLATION = 1e-10


def _norm(x: np.ndarray) -> float:
    """The 2-norm without underflow or overflow of its squares (entries near 1e-200 or
    1e200): scaled by the largest magnitude first."""
    s = float(np.max(np.abs(x), initial=0.0))
    if s == 0.0 or not np.isfinite(s):
        return s
    return s * float(np.linalg.norm(x / s))


def _lanczos(matvec: Matvec, v0: np.ndarray, m: int,
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    r"""``m`` steps of Lanczos with full reorthogonalisation (twice, Parlett's "twice is
    enough") from the unit vector ``v0``: the Krylov vectors as rows :math:`Q` and
    :math:`T = Q M Q^\top`, tridiagonal. Where the Krylov space becomes invariant
    (:math:`\beta_j \le` :data:`DEFLATION` :math:`\max|T|`: a low-rank operator after its
    rank, a repeated eigenvalue), it restarts from a random vector orthogonal to every
    vector so far, with :math:`\beta_j = 0` (:math:`T` block diagonal, each block exactly
    :math:`M` on an invariant or Krylov space): the null space's 0, a negative eigenvalue
    of an indefinite operator and the other copies of a repeated one are then found, not
    assumed. It stops early, with the rows it has, at a non-finite value. The loop runs on
    the host over the user's ``matvec`` (a jitted operator is compiled once and reused by
    every step and by the residuals; the loop under ``jax.jit``, as matfree runs it,
    compiled the operator into each call's program again: 12 of the 28 s of a curvature
    report)."""
    size = v0.shape[0]
    Q = np.zeros((m, size))
    alpha, beta = np.zeros(m), np.zeros(m)
    Q[0] = v0
    steps = m
    for j in range(m):
        w = np.asarray(matvec(Q[j]), np.float64)
        alpha[j] = Q[j] @ w
        for _ in range(2):
            w = w - Q[: j + 1].T @ (Q[: j + 1] @ w)
        if not np.isfinite(alpha[j]) or not np.all(np.isfinite(w)):
            steps = j + 1 if np.isfinite(alpha[j]) else j
            break
        if j + 1 == m:
            break
        beta[j] = _norm(w)
        scale = max(float(np.max(np.abs(alpha[: j + 1]))), float(np.max(beta[: j + 1])))
        if beta[j] > DEFLATION * scale:
            Q[j + 1] = w / beta[j]
            continue
        beta[j] = 0.0  # invariant: restart orthogonally to the space found so far
        r = rng.standard_normal(size)
        n0 = _norm(r)
        for _ in range(2):
            r = r - Q[: j + 1].T @ (Q[: j + 1] @ r)
        n = _norm(r)
        if not n > 1e-8 * n0:
            steps = j + 1  # the space is everything: nothing left to find
            break
        Q[j + 1] = r / n
    H = np.diag(alpha[:steps]) + np.diag(beta[: steps - 1], 1) + np.diag(beta[: steps - 1], -1)
    return Q[:steps], H


def _deflated_ritz(Q: np.ndarray, H: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Ritz values and vectors of a Lanczos run (``Q``: Krylov vectors as rows, ``H``:
    :math:`T = Q M Q^\top`; :func:`_lanczos` has already split it into blocks where the
    space became invariant): the eigenpairs of :math:`T`, lifted by :math:`Q`."""
    if H.shape[0] == 0:
        return np.zeros(0), np.zeros((0, Q.shape[1]))
    vals, S = np.linalg.eigh(H)
    return vals, S.T @ Q


@dataclass(frozen=True)
class TraceEstimate:
    r"""A Hutchinson estimate :math:`\hat t = \frac1S\sum_s v_s^\top M v_s`.

    ``mean``, ``sem`` (the sample standard error), ``samples`` :math:`S`, and the
    ``sampler`` (``"rademacher"``: :math:`\operatorname{Var}[v^\top M v] = 2(\lVert
    M\rVert_F^2 - \sum_i M_{ii}^2)`; ``"normal"``: :math:`2\lVert M\rVert_F^2`, see
    :func:`hutchinson_variance`).
    """

    mean: float
    sem: float
    samples: int
    sampler: str


def hutchinson_trace(matvec: Matvec, size: int, samples: int, *, seed: int = 0,
                     sampler: Literal["rademacher", "normal"] = "rademacher") -> TraceEstimate:
    r"""Hutchinson's trace estimator :math:`\operatorname{tr} M \approx \frac1S\sum_s
    v_s^\top M v_s`, :math:`\mathbb E[v v^\top] = I` (``matfree.stochtrace``), with its
    standard error; ``seed`` fixes the probes."""
    import jax
    import jax.numpy as jnp
    from matfree import stochtrace

    size = _check_size(size)
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 2:
        raise ArgumentError(f"samples: expected an integer >= 2 (a standard error needs two), "
                            f"got {samples!r}")
    make = {"rademacher": stochtrace.sampler_signs, "normal": stochtrace.sampler_normal}
    if sampler not in make:
        raise ArgumentError(f"sampler: expected 'rademacher' or 'normal', got {sampler!r}")
    draw = make[sampler](jnp.zeros((size,), dtype=jnp.float64), num=samples)
    estimate = stochtrace.estimator_monte_carlo_mean_and_sem(stochtrace.monte_carlo_trace(),
                                                            draw)
    mean, sem = estimate(matvec, jax.random.key(seed))
    return TraceEstimate(float(mean), float(sem), samples, sampler)


def hutchinson_variance(M: Any, sampler: Literal["rademacher", "normal"] = "rademacher"
                        ) -> float:
    r"""The exact variance of one Hutchinson sample :math:`v^\top M v` for a symmetric
    :math:`M`: Rademacher :math:`2(\lVert M\rVert_F^2 - \sum_i M_{ii}^2)`, standard normal
    :math:`2\lVert M\rVert_F^2` (Hutchinson 1990; Avron & Toledo 2011)."""
    A = np.asarray(M, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ArgumentError(f"M: expected a square matrix, got shape {A.shape}")
    fro = float(np.sum(A * A))
    return 2.0 * (fro - float(np.sum(np.diag(A) ** 2))) if sampler == "rademacher" else 2 * fro


@dataclass(frozen=True)
class Solve:
    r"""A damped solve :math:`(M + \lambda I) x = b`: the solution, the true relative
    residual :math:`\lVert b - (M + \lambda I)x\rVert / \lVert b\rVert` (recomputed, not
    the solver's own), and the CG steps taken."""

    x: Any
    residual: float
    steps: int


def damped_solve(matvec: Matvec, b: Any, damping: float, *, rtol: float | None = None,
                 max_steps: int | None = None) -> Solve:
    r"""Solve :math:`(M + \lambda I) x = b` by conjugate gradients (``lineax.CG``) on the
    matrix-free PSD ``matvec``: with :math:`M = F` and :math:`b = \nabla L`, the damped
    natural gradient :math:`(F + \lambda I)^{-1}\nabla L` (Baggag & Saad §5.1, eq. for
    :math:`F(w)^{-1}\nabla_w L`). ``damping`` :math:`\lambda > 0` makes the system
    positive definite (a Fisher or GGN of an over-parametrised model is singular).
    ``rtol`` defaults to :math:`\sqrt{u}` of float64 times 10; ``max_steps`` to :math:`10n`.
    """
    import jax.numpy as jnp
    import lineax as lx

    b = jnp.asarray(b)
    if b.ndim != 1:
        raise ArgumentError(f"b: expected a flat vector, got shape {tuple(b.shape)}")
    if not jnp.issubdtype(b.dtype, jnp.floating):
        raise DTypeError(f"b: expected a real floating dtype, got {b.dtype}")
    if not bool(jnp.all(jnp.isfinite(b))):
        raise NonFiniteError("b: expected finite entries, got nan or inf")
    try:  # Python, NumPy and 0-d JAX scalars alike; a matrix is not a damping
        damping = float(damping) if np.ndim(damping) == 0 else damping
    except (TypeError, ValueError):
        pass
    if not isinstance(damping, float) or not math.isfinite(damping) or damping <= 0:
        raise ArgumentError(f"damping: expected a finite number > 0 (a scalar times the "
                            f"identity), got {damping!r}")
    n = int(b.shape[0])
    tol = 10 * math.sqrt(float(jnp.finfo(b.dtype).eps)) if rtol is None else rtol
    op = lx.FunctionLinearOperator(lambda v: matvec(v) + damping * v,
                                   jax_struct(b),
                                   tags=(lx.symmetric_tag, lx.positive_semidefinite_tag))
    # lineax scales its stopping test entrywise, |r_i| <= atol + rtol |b_i|: with atol = 0 an
    # exact zero in b (a parameter with zero gradient, e.g. the key bias, whose gradient
    # vanishes by softmax shift invariance) could never be met. atol = rtol max|b| makes the
    # test normwise: max|r| <= rtol (max|b| + |b_i|) (with b scaled to max|b| = 1 below).
    # The system is solved for b / max|b| and the solution scaled back: CG's inner products
    # of a tiny b (below about 1e-154) underflow to 0 and would stop it at x = 0.
    scale = float(jnp.max(jnp.abs(b)))
    if scale == 0.0:  # b = 0: x = 0 solves it exactly
        return Solve(jnp.zeros_like(b), 0.0, 0)
    bs = b / scale
    sol = lx.linear_solve(op, bs, lx.CG(rtol=tol, atol=tol, max_steps=max_steps or 10 * n),
                          throw=False)
    y = sol.value
    r = bs - (matvec(y) + damping * y)
    rel = float(jnp.linalg.norm(r) / jnp.linalg.norm(bs))
    return Solve(y * scale, rel, int(sol.stats.get("num_steps", -1)))


def jax_struct(x: Any) -> Any:
    """The ``jax.ShapeDtypeStruct`` of ``x`` (the input structure lineax asks for)."""
    import jax

    return jax.ShapeDtypeStruct(x.shape, x.dtype)


def natural_gradient_cg(problem: Any, damping: float, *, kind: str = "fisher",
                     samples: int | None = None, seed: int = 0, rtol: float | None = None
                     ) -> tuple[dict[str, Any], Solve]:
    r"""The damped natural gradient :math:`(F + \lambda I)^{-1}\nabla_\theta L` of a
    :class:`~nlaverify.curvature.graph.CurvatureProblem` (JAX backend), by conjugate
    gradients on the matrix-free Fisher (Baggag & Saad §5.1: the natural-gradient direction
    :math:`F(w)^{-1}\nabla_w L`; ``kind="ggn"`` gives the Gauss–Newton step of §5.2, the
    same for the canonical likelihoods; ``samples`` the Monte-Carlo Fisher). The step is
    :math:`\theta \leftarrow \theta - \eta` times the returned direction.

    Returns:
        ``({param: direction}, Solve)``; the :class:`Solve` holds the true residual.
    """
    from nlaverify.curvature.graph import gradient
    from nlaverify.curvature.operators import linear_operator

    if kind not in ("fisher", "ggn", "empirical_fisher"):
        raise ArgumentError(f"natural_gradient_cg: argument 'kind': expected 'fisher', 'ggn' or "
                            f"'empirical_fisher', got {kind!r}")
    op = linear_operator(problem, kind, samples=samples, seed=seed)  # type: ignore[arg-type]
    sol = damped_solve(op, problem.flatten(gradient(problem)), damping, rtol=rtol)
    return problem.unflatten(sol.x), sol
