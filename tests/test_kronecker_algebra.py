"""Kronecker algebra (Baggag & Saad §5.3): products, vec, solves, factored damping, the
K-FAC preconditioner and eigenpairs against dense NumPy, in float64."""

from __future__ import annotations

import numpy as np
from _kronecker_helpers import NP, SIZES, _assert_close, _cond, _rng, _spd
from hypothesis import given
from hypothesis import strategies as st

from nlaverify.curvature import kfac, kronecker
from nlaverify.strategies import seeds
from nlaverify.tolerance import tolerance

# --------------------------------------------------------------------------- Kronecker algebra


@given(SIZES, SIZES, SIZES, SIZES, seeds)
def test_kron_vec_and_matvec_match_dense_numpy(m: int, n: int, p: int, q: int, seed: int) -> None:
    rng = _rng(seed)
    A, B, X = rng.standard_normal((m, n)), rng.standard_normal((p, q)), rng.standard_normal((n, q))
    # one product per entry: exact in floating point
    np.testing.assert_array_equal(kronecker.kron(NP, A, B), np.kron(A, B))
    np.testing.assert_array_equal(kronecker.vec(NP, X), X.ravel(order="F"))
    np.testing.assert_array_equal(kronecker.vec_rows(NP, X), X.ravel())
    np.testing.assert_array_equal(kronecker.unvec(NP, kronecker.vec(NP, X), (n, q)), X)
    np.testing.assert_array_equal(kronecker.unvec_rows(NP, kronecker.vec_rows(NP, X), (n, q)), X)
    Y = kronecker.kron_matvec(NP, A, B, X)
    expected = np.kron(A, B) @ X.ravel()
    # condition of a product: the magnitude of its terms over that of the result
    kappa = max(1.0, np.max(np.abs(A) @ np.abs(X) @ np.abs(B).T) / max(1.0, np.max(np.abs(
        expected))))
    _assert_close(Y.ravel(), expected, tolerance("float64", size=n * q, condition=kappa, depth=2))


@given(SIZES, SIZES, seeds, seeds, seeds)
def test_kron_solve_matches_a_dense_solve(m: int, p: int, s1: int, s2: int, s3: int) -> None:
    A = _spd(m, s1)
    B = _spd(p, s2)
    X = _rng(s3).standard_normal((m, p))
    Z = kronecker.kron_solve(NP, A, B, X)
    expected = np.linalg.solve(np.kron(A, B), X.ravel())
    _assert_close(Z.ravel(), expected, tolerance("float64", size=m * p,
                                                 condition=_cond(A) * _cond(B), depth=2))



@given(SIZES, SIZES, seeds, seeds, st.floats(0.01, 10.0))
def test_factored_damping_solve_and_expansion(m: int, p: int, s1: int, s2: int,
                                              lam: float) -> None:
    A, B = _spd(m, s1), _spd(p, s2)
    X = _rng(s1 ^ s2).standard_normal((m, p))
    pi = np.sqrt((np.trace(A) / m) / (np.trace(B) / p))  # Martens & Grosse's trace-norm pi
    np.testing.assert_allclose(kronecker.trace_norm_pi(NP, A, B), pi, rtol=tolerance(
        "float64", size=max(m, p), depth=2).rtol)
    Ad, Bd = kronecker.damped_factors(NP, A, B, lam)
    alpha, beta = pi * np.sqrt(lam), np.sqrt(lam) / pi
    dense = np.kron(A + alpha * np.eye(m), B + beta * np.eye(p))
    tol = tolerance("float64", size=4, depth=2)
    _assert_close(np.kron(Ad, Bd), dense, tol)
    # the expansion, and the extra term that makes it differ from A ⊗ B + λI
    expansion = (np.kron(A, B) + alpha * np.kron(np.eye(m), B) + beta * np.kron(A, np.eye(p))
                 + lam * np.eye(m * p))
    _assert_close(dense, expansion, tol)
    extra = dense - (np.kron(A, B) + lam * np.eye(m * p))
    _assert_close(extra, np.sqrt(lam) * (pi * np.kron(np.eye(m), B) + np.kron(A, np.eye(p)) / pi),
                  tol)
    assert np.max(np.abs(extra)) > 100 * tol.rtol * max(1.0, np.max(np.abs(dense)))
    Z = kronecker.damped_kron_solve(NP, A, B, X, lam)
    _assert_close(Z.ravel(), np.linalg.solve(dense, X.ravel()), tolerance(
        "float64", size=m * p, condition=_cond(Ad) * _cond(Bd), depth=3))


def test_kfac_precondition_is_the_damped_kronecker_solve_and_keeps_float32() -> None:
    rng = _rng(5)
    A, G = rng.standard_normal((2, 3, 3)), rng.standard_normal((2, 2, 3, 2))
    A_f, G_f = kfac.kfac_factors(NP, A, G)
    grad = kfac.kfac_gradient(NP, A, G[0])
    lam = 0.1
    pi = np.sqrt((np.trace(A_f) / 3) / (np.trace(G_f) / 2))
    dense = np.kron(A_f + pi * np.sqrt(lam) * np.eye(3), G_f + np.sqrt(lam) / pi * np.eye(2))
    got = kfac.kfac_precondition(NP, A_f, G_f, grad, lam)
    _assert_close(got.ravel(), np.linalg.solve(dense, grad.ravel()),
                  tolerance("float64", size=6, condition=_cond(dense), depth=3))
    # a Python damping takes the factors' dtype (no float32 -> float64 promotion)
    A32, G32 = A_f.astype(np.float32), G_f.astype(np.float32)
    assert kfac.kfac_precondition(NP, A32, G32, grad.astype(np.float32), lam).dtype == np.float32


@given(SIZES, SIZES, seeds, seeds)
def test_kron_eigh_matches_numpy(m: int, p: int, s1: int, s2: int) -> None:
    A, B = _spd(m, s1), _spd(p, s2)
    w, V = kronecker.kron_eigh(NP, A, B)
    K = np.kron(A, B)
    # symmetric eigenvalues are perfectly conditioned (Weyl): absolute error ~ u ||K||
    tol = tolerance("float64", size=m * p, depth=2)
    _assert_close(np.sort(w), np.linalg.eigvalsh(K), tol)
    _assert_close(K @ V, V * w, tol)
    _assert_close(V.T @ V, np.eye(m * p), tol)
    np.testing.assert_allclose(kronecker.trace(NP, K), np.trace(A) * np.trace(B),
                               rtol=tol.rtol)

