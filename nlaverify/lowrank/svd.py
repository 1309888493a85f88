r"""Low-rank approximation: the truncated SVD (Eckart–Young) and the randomized SVD.

Baggag & Saad §4.1 (low-rank factorisation as compression; Table 6: the energy of a
gradient concentrates in a few singular values). With :math:`A = \sum_i \sigma_i u_i
v_i^\top` (:math:`\sigma_1 \ge \sigma_2 \ge \dots \ge 0`) and :math:`A_k = \sum_{i \le k}
\sigma_i u_i v_i^\top`,

.. math:: \|A - A_k\|_2 = \sigma_{k+1},\qquad
          \|A - A_k\|_F = \Bigl(\sum_{i > k}\sigma_i^2\Bigr)^{1/2},

and no matrix of rank :math:`\le k` does better in either norm (Eckart & Young 1936,
Mirsky 1960). The randomized SVD (Halko, Martinsson & Tropp 2011, "HMT": Alg. 4.1, 4.4, 5.1)
finds an orthonormal :math:`Q` (:math:`l = k + p` columns) with :math:`A \approx QQ^\top A`
from :math:`Y = (AA^\top)^q A\Omega`, :math:`\Omega` Gaussian, and its expected error obeys
HMT Theorems 10.5–10.6 (:func:`expected_error_bound`).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.lowrank import _xp

__all__ = [
    "approximation_errors",
    "expected_error_bound",
    "gaussian_test_matrix",
    "low_rank",
    "randomized_range_finder",
    "randomized_svd",
    "truncated_svd",
    "truncation_errors",
]


def _matrix_shape(fn: str, A: Any) -> tuple[int, int]:
    shape = tuple(getattr(A, "shape", ()))
    if len(shape) != 2:
        raise ShapeError(f"{fn}: argument 'A': expected a matrix (m, n), got shape {shape}")
    return int(shape[0]), int(shape[1])


def _count(fn: str, name: str, v: Any, lo: int, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo or (
            hi is not None and v > hi):
        rng = f"an integer in [{lo}, {hi}]" if hi is not None else f"an integer >= {lo}"
        raise ArgumentError(f"{fn}: argument '{name}': expected {rng}, got {v!r}")
    return int(v)


def _check_spectrum(fn: str, name: str, s: Any) -> None:
    """``s`` non-negative and non-increasing (singular values in the SVD's order); entries
    that cannot be compared (symbols, tracers) are let through."""
    try:
        v = np.asarray(s, dtype=np.float64).ravel()
    except (TypeError, ValueError, RuntimeError):
        return
    if not np.all(np.isfinite(v)) or np.any(v < 0) or np.any(np.diff(v) > 0):
        raise ArgumentError(f"{fn}: argument {name!r}: expected finite singular values, "
                            f"non-negative and in non-increasing order, got {v[:6]}"
                            + (" ..." if v.size > 6 else ""))


def truncated_svd(xp: Namespace, A: Any, k: int) -> tuple[Any, Any, Any]:
    r"""The best rank-``k`` approximation :math:`A_k = U_k\operatorname{diag}(s_k)V_k^\top`
    of the ``(m, n)`` matrix ``A`` (Eckart–Young; Baggag & Saad §4.1): the ``k`` leading
    singular triplets, ``(U_k (m, k), s_k (k,), Vh_k (k, n))``. Exact on SymPy for matrices
    whose singular values are rational (the proofs), ``linalg.svd`` elsewhere.

    Raises:
        ShapeError: ``A`` is not a matrix.
        ArgumentError: ``k`` not an integer in :math:`[0, \min(m, n)]`.
    """
    m, n = _matrix_shape("truncated_svd", A)
    k = _count("truncated_svd", "k", k, 0, min(m, n))
    U, s, Vh = _xp.svd(xp, A)
    return U[:, :k], s[:k], Vh[:k, :]


def low_rank(xp: Namespace, U: Any, s: Any, Vh: Any) -> Any:
    r""":math:`U\operatorname{diag}(s)V^\top` of a (truncated) SVD."""
    return xp.matmul(U * xp.reshape(s, (1, -1)), Vh)


def truncation_errors(xp: Namespace, s: Any, k: int) -> tuple[Any, Any]:
    r"""The Eckart–Young errors of the rank-``k`` truncation, from the singular values
    ``s`` (descending, all :math:`\min(m, n)` of them): :math:`(\sigma_{k+1},\
    (\sum_{i>k}\sigma_i^2)^{1/2})`, spectral and Frobenius (both 0 when :math:`k = \min(m,n)`).

    Raises:
        ArgumentError: ``k`` not an integer in :math:`[0, \text{len}(s)]`; ``s`` not
            non-negative and non-increasing.
    """
    r = int(np.shape(s)[0])
    k = _count("truncation_errors", "k", k, 0, r)
    _check_spectrum("truncation_errors", "s", s)
    tail = s[k:]
    if k == r:
        zero = xp.zeros((), dtype=s.dtype) if not xp.object_arrays else xp.zeros(())
        return zero, zero
    return tail[0], xp.sqrt(xp.sum(tail * tail))


def approximation_errors(xp: Namespace, A: Any, B: Any) -> tuple[Any, Any]:
    r""":math:`(\|A - B\|_2, \|A - B\|_F)`, measured (the spectral norm as the largest
    singular value of the residual)."""
    R = A - B
    _, s, _ = _xp.svd(xp, R)
    spectral = s[0] if np.shape(s)[0] else xp.sqrt(xp.sum(R * R))
    return spectral, xp.sqrt(xp.sum(R * R))


def gaussian_test_matrix(n: int, cols: int, seed: int, dtype: Any = np.float64) -> np.ndarray:
    r"""The Gaussian test matrix :math:`\Omega \in \mathbb R^{n\times l}`, :math:`l` =
    ``cols``, entries
    :math:`N(0, 1)`, from ``numpy.random.default_rng(seed)`` (host, ``dtype``)."""
    return np.random.default_rng(seed).standard_normal((n, cols)).astype(dtype)


def randomized_range_finder(xp: Namespace, A: Any, k: int, p: int = 5, q: int = 0, *,
                            seed: int = 0, omega: Any = None) -> Any:
    r"""An orthonormal :math:`Q \in \mathbb R^{m\times(k+p)}` with :math:`A \approx
    QQ^\top A` (HMT Alg. 4.1; with ``q`` power iterations Alg. 4.4, the randomized
    subspace iteration; Baggag & Saad §4.1):

    .. math:: Y_0 = A\Omega,\ Q_0 = \operatorname{qr}(Y_0);\qquad
              \tilde Q_j = \operatorname{qr}(A^\top Q_{j-1}),\
              Q_j = \operatorname{qr}(A\tilde Q_j),\quad j = 1..q .

    Re-orthonormalising between the products keeps the directions of the small singular
    values, which :math:`(AA^\top)^qA\Omega` formed directly loses to rounding once
    :math:`(\sigma_1/\sigma_j)^{2q+1}` exceeds :math:`1/u`. The range of :math:`Q_q` is that
    of :math:`(AA^\top)^qA\Omega` in exact arithmetic. If :math:`k + p \ge
    \operatorname{rank} A` then :math:`QQ^\top A = A` (almost surely; the proofs check it
    exactly).

    Args:
        A: ``(m, n)``.
        k: target rank, :math:`1 \le k`; :math:`l = k + p \le \min(m, n)`.
        p: oversampling, :math:`\ge 0` (the bounds of :func:`expected_error_bound` need 2).
        q: power iterations, :math:`\ge 0`.
        seed: the seed of :func:`gaussian_test_matrix` when ``omega`` is not given.
        omega: an explicit ``(n, k + p)`` test matrix (exact ones for the proofs).
    """
    m, n = _matrix_shape("randomized_range_finder", A)
    k = _count("randomized_range_finder", "k", k, 1, min(m, n))
    p = _count("randomized_range_finder", "p", p, 0, min(m, n) - k)
    q = _count("randomized_range_finder", "q", q, 0)
    if omega is None:
        Om = gaussian_test_matrix(n, k + p, seed)
        omega = xp.asarray(Om) if xp.object_arrays else xp.astype(xp.asarray(Om), A.dtype)
    if tuple(np.shape(omega)) != (n, k + p):
        raise ShapeError(f"randomized_range_finder: argument 'omega': expected shape "
                         f"({n}, {k + p}), got {tuple(np.shape(omega))}")
    Q = _xp.orthonormal_basis(xp, xp.matmul(A, omega))
    At = xp.matrix_transpose(A)
    for _ in range(q):
        Qt = _xp.orthonormal_basis(xp, xp.matmul(At, Q))
        Q = _xp.orthonormal_basis(xp, xp.matmul(A, Qt))
    return Q


def randomized_svd(xp: Namespace, A: Any, k: int, p: int = 5, q: int = 0, *,
                   seed: int = 0, omega: Any = None) -> tuple[Any, Any, Any]:
    r"""The rank-``k`` randomized SVD (HMT Alg. 5.1 on :func:`randomized_range_finder`):
    :math:`B = Q^\top A` (:math:`l\times n`), :math:`B = \tilde U\Sigma V^\top`,
    :math:`U = Q\tilde U`; the ``k`` leading triplets ``(U (m, k), s (k,), Vh (k, n))``.
    The error :math:`\|A - QQ^\top A\|` of the range bounds that of :math:`U\Sigma V^\top`
    before truncation to ``k`` (HMT §5.1). Baggag & Saad §4.1."""
    Q = randomized_range_finder(xp, A, k, p, q, seed=seed, omega=omega)
    B = xp.matmul(xp.matrix_transpose(Q), A)
    Ub, s, Vh = _xp.svd(xp, B)
    U = xp.matmul(Q, Ub)
    return U[:, :k], s[:k], Vh[:k, :]


def expected_error_bound(sigma: Any, k: int, p: int, q: int = 0) -> tuple[float, float]:
    r"""HMT's bounds on the expected error of :func:`randomized_range_finder` with
    :math:`l = k + p` Gaussian samples, from the singular values ``sigma`` of :math:`A`
    (descending, float64 on the host):

    .. math:: \mathbb E\|A - QQ^\top A\|_F \le \Bigl(1 + \frac{k}{p-1}\Bigr)^{1/2}
              \Bigl(\sum_{j>k}\sigma_j^2\Bigr)^{1/2}\quad\text{(HMT Thm. 10.5)},

    .. math:: \mathbb E\|A - QQ^\top A\|_2 \le \Bigl(1 + \sqrt{\tfrac{k}{p-1}}\Bigr)
              \sigma_{k+1} + \frac{e\sqrt{k+p}}{p}\Bigl(\sum_{j>k}\sigma_j^2\Bigr)^{1/2}
              \quad\text{(HMT Thm. 10.6)};

    with ``q`` power iterations the spectral bound is that of the matrix
    :math:`(AA^\top)^qA` (singular values :math:`\sigma_j^{2q+1}`) raised to
    :math:`1/(2q+1)` (HMT Cor. 10.10); the Frobenius bound is given for ``q = 0`` only
    (``nan`` otherwise). Returns ``(frobenius, spectral)``. Baggag & Saad §4.1.

    Raises:
        ArgumentError: :math:`k < 2` or :math:`p < 2` (the theorems' hypotheses: the
            :math:`(p-1)` comes from :math:`\mathbb E\|\Omega_1^\dagger\|_F^2 = k/(p-1)`,
            infinite for :math:`p \le 1`), or :math:`k + p > \text{len}(\sigma)`, or
            ``sigma`` not non-negative and non-increasing.
    """
    s = np.asarray(sigma, dtype=np.float64)
    if s.ndim != 1:
        raise ShapeError(f"expected_error_bound: argument 'sigma': expected a vector, got "
                         f"shape {s.shape}")
    _check_spectrum("expected_error_bound", "sigma", s)
    k = _count("expected_error_bound", "k", k, 2)
    p = _count("expected_error_bound", "p", p, 2)
    q = _count("expected_error_bound", "q", q, 0)
    if k + p > s.size:
        raise ArgumentError(f"expected_error_bound: arguments 'k', 'p': expected k + p <= "
                            f"min(m, n) = {s.size}, got {k} + {p}")
    e = 2 * q + 1
    t = s[k:] ** e
    tail = math.sqrt(float(np.sum(t * t)))
    spectral = ((1 + math.sqrt(k / (p - 1))) * float(t[0])
                + math.e * math.sqrt(k + p) / p * tail) ** (1.0 / e)
    frob = math.sqrt(1 + k / (p - 1)) * tail if q == 0 else float("nan")
    return frob, spectral
