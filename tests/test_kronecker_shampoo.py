"""Shampoo (Baggag & Saad §5.4): inverse roots against SciPy, one gradient gives the polar
factor, rank-deficient gradients, a vector's Shampoo is full-matrix Adagrad, and the
statistics' decay and epsilon."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from _kronecker_helpers import NP, SIZES, _assert_close, _cond, _rng, _spd
from hypothesis import given
from hypothesis import strategies as st

from nlaverify.backends import get_namespace
from nlaverify.curvature import shampoo
from nlaverify.strategies import seeds
from nlaverify.tolerance import tolerance

# --------------------------------------------------------------------------- Shampoo


@given(st.sampled_from([1, 2, 4]), SIZES, seeds)
def test_inverse_root_matches_scipy(p: int, n: int, seed: int) -> None:
    M = _spd(n, seed)
    got = shampoo.inverse_root(NP, M, p)
    expected = np.real(scipy.linalg.fractional_matrix_power(M, -1.0 / p))
    _assert_close(got, expected, tolerance("float64", size=n, condition=_cond(M), depth=2))


def _svd_input(m: int, n: int, r: int, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """``G = U_r diag(s) V_r^T`` with s in [0.5, 2], its polar factor and (s_max/s_min)^2."""
    rng = _rng(seed)
    U, _ = np.linalg.qr(rng.standard_normal((m, m)))
    V, _ = np.linalg.qr(rng.standard_normal((n, n)))
    s = rng.uniform(0.5, 2.0, size=r)
    return (U[:, :r] * s) @ V[:, :r].T, U[:, :r] @ V[:, :r].T, float((s.max() / s.min()) ** 2)


@given(SIZES, SIZES, seeds)
def test_shampoo_with_one_gradient_is_the_polar_factor(m: int, n: int, seed: int) -> None:
    G, polar, kappa = _svd_input(m, n, min(m, n), seed)
    U, _, Vt = np.linalg.svd(G, full_matrices=False)
    stats = shampoo.shampoo_statistics(NP, G, shampoo.shampoo_init(NP, G))
    # the eigen route works with G G^T: its condition is that of G squared
    _assert_close(shampoo.shampoo_direction(NP, G, stats), U @ Vt,
                  tolerance("float64", size=max(m, n), condition=kappa, depth=3))
    _assert_close(U @ Vt, polar, tolerance("float64", size=max(m, n), condition=kappa))


@given(st.integers(2, 5), st.integers(2, 5), seeds)
def test_shampoo_rank_deficient_gradient(m: int, n: int, seed: int) -> None:
    r = _rng(seed).integers(1, min(m, n))  # rank < min(m, n)
    G, polar, kappa = _svd_input(m, n, int(r), seed)
    stats = shampoo.shampoo_statistics(NP, G)
    _assert_close(shampoo.shampoo_direction(NP, G, stats), polar,
                  tolerance("float64", size=max(m, n), condition=kappa, depth=3))


@given(SIZES, st.integers(1, 7), seeds)
def test_shampoo_of_a_vector_is_full_matrix_adagrad(n: int, k: int, seed: int) -> None:
    rng = _rng(seed)
    gs = rng.standard_normal((k, n)) * rng.uniform(0.5, 2.0, size=(k, 1))
    stats = shampoo.shampoo_init(NP, gs[0])
    for g in gs:
        stats = shampoo.shampoo_statistics(NP, g, stats)
    # full-matrix Adagrad, from an SVD of the gradients (not an eigh of their Gram matrix)
    U, s, _ = np.linalg.svd(gs.T, full_matrices=False)
    keep = s > s[0] * 1e-8
    H_inv_sqrt = (U[:, keep] / s[keep]) @ U[:, keep].T
    v = rng.standard_normal(n)
    kappa = float((s[keep].max() / s[keep].min()) ** 2)
    tol = tolerance("float64", size=max(n, k), condition=kappa, depth=3)
    _assert_close(shampoo.shampoo_direction(NP, v, stats), H_inv_sqrt @ v, tol)
    _assert_close(stats[0], gs.T @ gs, tolerance("float64", size=k))


def test_shampoo_statistics_decay_and_epsilon() -> None:
    G1, G2 = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
    L0, R0 = shampoo.shampoo_init(NP, G1, 0.5)
    np.testing.assert_array_equal(L0, 0.5 * np.eye(2))
    L, R = shampoo.shampoo_statistics(NP, G2, shampoo.shampoo_statistics(NP, G1, (L0, R0)),
                                      beta=0.25)
    np.testing.assert_array_equal(L, 0.25 * (L0 + G1 @ G1.T) + G2 @ G2.T)
    np.testing.assert_array_equal(R, 0.25 * (R0 + G1.T @ G1) + G2.T @ G2)



@pytest.mark.parametrize("p", [2, 4])
def test_inverse_root_exact_on_irreducible_cubics(p: int) -> None:
    """Integer matrices whose characteristic polynomial has an irreducible cubic factor
    (casus irreducibilis: no real radical form) get exact real algebraic roots: no
    Piecewise left, every entry evaluates, and (M^{+1/p})^p M is the projector onto the
    range of M to 40 digits (SymPy's diagonalization took ~120 s and left 27 Piecewise
    atoms that evalf could not evaluate)."""
    import mpmath
    import sympy

    sp = get_namespace("sympy")
    G = np.array([[2, 1, 0], [1, 1, 1], [0, 1, 2], [1, 0, 1]])  # rank 3 in R^4
    cases = [np.array([[6, 2, 1], [2, 5, 2], [1, 2, 4]]), G @ G.T]
    for M in cases:
        n = M.shape[0]
        R = shampoo.inverse_root(sp, M.astype(object) * sympy.Integer(1), p)
        assert not any(x.has(sympy.Piecewise) for x in R.ravel())
        with mpmath.workdps(50):
            Rm = mpmath.matrix([[sympy.N(x, 50) for x in row] for row in R])
            P = Rm**p * mpmath.matrix(M.tolist())
            assert mpmath.norm(P * P - P) < mpmath.mpf(10) ** -40
            rank = int(np.linalg.matrix_rank(M))
            assert abs(sum(P[i, i] for i in range(n)) - rank) < mpmath.mpf(10) ** -40
