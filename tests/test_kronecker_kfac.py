"""K-FAC (Baggag & Saad §5.3): the factors and the exact block against loops over positions,
padding masked out, and K-FAC against a JAX GGN (exact where the theory says so)."""

from __future__ import annotations

import numpy as np
import pytest
from _kronecker_helpers import NP, SIZES, _assert_close, _rng
from hypothesis import given
from hypothesis import strategies as st

from nlaverify.backends import get_namespace
from nlaverify.curvature import kfac
from nlaverify.errors import ArgumentError
from nlaverify.strategies import seeds
from nlaverify.tolerance import tolerance

# --------------------------------------------------------------------------- K-FAC


def _kfac_reference(A, G, mode, mask=None):
    """Loops over positions: the factors as written in the docstring."""
    N, R, _ = A.shape
    m = np.ones((N, R)) if mask is None else mask
    if mode == "expand":
        A_f = sum(m[n, r] * np.outer(A[n, r], A[n, r]) for n in range(N) for r in range(R))
        G_f = sum(np.outer(g, g) for g in G.reshape(-1, G.shape[-1]))
        return A_f / m.sum(), G_f
    means = [sum(m[n, r] * A[n, r] for r in range(R)) / m[n].sum() for n in range(N)]
    sums = G.sum(axis=2).reshape(-1, G.shape[-1])
    return sum(np.outer(a, a) for a in means) / N, sum(np.outer(g, g) for g in sums)


@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), SIZES, SIZES, seeds,
       st.sampled_from(kfac.MODES), st.booleans())
def test_kfac_factors_and_exact_block_match_loops(S: int, N: int, R: int, d_in: int,
                                                  d_out: int, seed: int, mode: str,
                                                  bias: bool) -> None:
    rng = _rng(seed)
    A, G = rng.standard_normal((N, R, d_in)), rng.standard_normal((S, N, R, d_out))
    A_aug = np.concatenate([A, np.ones((N, R, 1))], axis=-1) if bias else A
    A_f, G_f = kfac.kfac_factors(NP, A, G, mode=mode, bias=bias)
    ref_A, ref_G = _kfac_reference(A_aug, G, mode)
    tol = tolerance("float64", size=S * N * R, depth=2)
    _assert_close(A_f, ref_A, tol)
    _assert_close(G_f, ref_G, tol)
    _assert_close(kfac.kfac_block(NP, A_f, G_f), np.kron(ref_A, ref_G), tol)
    exact = sum(np.outer(v, v) for v in (
        sum(np.kron(A_aug[n, r], G[s, n, r]) for r in range(R)) for s in range(S)
        for n in range(N)))
    _assert_close(kfac.exact_layer_block(NP, A, G, bias=bias), exact, tol)
    grad = sum(np.outer(A_aug[n, r], G[0, n, r]) for n in range(N) for r in range(R))
    _assert_close(kfac.kfac_gradient(NP, A, G[0], bias=bias), grad, tol)


@pytest.mark.parametrize("mode", kfac.MODES)
def test_kfac_mask_leaves_padding_out(mode: str) -> None:
    rng = _rng(7)
    A, G = rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 2, 3, 2))
    mask = np.array([[1, 1, 0], [1, 0, 0]])
    G = G * mask[None, :, :, None]  # padded positions carry no loss
    A_f, G_f = kfac.kfac_factors(NP, A, G, mode=mode, mask=mask.astype(bool))
    ref_A, ref_G = _kfac_reference(A, G, mode, mask)
    tol = tolerance("float64", size=6, depth=2)
    _assert_close(A_f, ref_A, tol)
    _assert_close(G_f, ref_G, tol)
    one_A, _ = kfac.kfac_factors(NP, A[1, :1], G[:, 1, :1], mode=mode)  # (R, d) input
    _assert_close(one_A, np.outer(A[1, 0], A[1, 0]), tol)


def _jax_ggn(A, W1, W2, nonlinear: bool, pool: bool):
    """GGN of vec_r(W1) and the per-sequence output cotangents of the first layer, by JAX, for
    z_n = phi(pool(A_n W1)) W2 and L = (1/2N) sum_n ||z_n - y_n||^2 (Hessian I/N)."""
    import jax
    import jax.numpy as jnp

    get_namespace("jax")  # float64
    N, R, _ = A.shape

    def head(H):
        H = jnp.tanh(H) if nonlinear else H
        return ((H.mean(axis=1, keepdims=True) if pool else H) @ W2).reshape(-1)

    J = np.asarray(jax.jacfwd(lambda w: head(jnp.asarray(A) @ w.reshape(W1.shape)))(
        jnp.asarray(W1.ravel())))
    # cotangents of H for the columns of the Hessian's square root I/sqrt(N); the samples of
    # sequence n are its own outputs (the other sequences' cotangents vanish)
    Jh = np.asarray(jax.jacfwd(head)(jnp.asarray(A @ W1))) / np.sqrt(N)
    Jh = Jh.reshape(N, -1, N, R, W1.shape[1])
    G = np.stack([Jh[n, :, n] for n in range(N)], axis=1)
    return J.T @ J / N, G


@pytest.mark.parametrize(("nonlinear", "pool", "mode", "exact"), [
    (False, False, "expand", True), (False, True, "reduce", True),
    (True, False, "expand", False), (False, True, "expand", False)])
def test_kfac_against_a_jax_ggn(nonlinear: bool, pool: bool, mode: str, exact: bool) -> None:
    rng = _rng(3)
    N, R = 3, 2
    A, W1, W2 = (rng.standard_normal((N, R, 3)), rng.standard_normal((3, 2)),
                 rng.standard_normal((2, 2)))
    ggn, G = _jax_ggn(A, W1, W2, nonlinear, pool)
    tol = tolerance("float64", size=N * R * 3, depth=3)
    _assert_close(kfac.exact_layer_block(NP, A, G), ggn, tol)
    gap = tol.compare(kfac.kfac_block(NP, *kfac.kfac_factors(NP, A, G, mode=mode)), ggn)
    # exact: within rounding; not exact: far outside it (not a near miss)
    assert gap.ok if exact else gap.normwise > 1e6 * tol.rtol, gap



def test_subsampled_factors_are_unbiased_exactly() -> None:
    """The mean of the subsampled factors over every subset I of |I| = 2 of the 6 positions
    is the full factors, exactly (SymPy, integer statistics): kills a missing NR/|I| scale of
    G_f (off by 3x), a sum for A_f's mean (off by 2x) or a subset drawn from the wrong axis."""
    from itertools import combinations

    import sympy

    sp = get_namespace("sympy")
    rng = _rng(11)
    S, N, R, d_in, d_out = 2, 2, 3, 2, 3
    A = np.vectorize(sympy.Integer, otypes=[object])(rng.integers(-3, 4, (N, R, d_in)))
    G = np.vectorize(sympy.Integer, otypes=[object])(rng.integers(-3, 4, (S, N, R, d_out)))
    A_full, G_full = kfac.kfac_factors(sp, A, G, bias=True)
    subsets = list(combinations(range(N * R), 2))
    A_sum, G_sum = 0 * A_full, 0 * G_full
    for rows in subsets:
        A_s, G_s = kfac.kfac_factors(sp, A, G, bias=True, rows=np.array(rows))
        A_sum, G_sum = A_sum + A_s, G_sum + G_s
    k = sympy.Rational(1, len(subsets))
    assert all(sympy.simplify(v) == 0 for v in (A_sum * k - A_full).ravel())
    assert all(sympy.simplify(v) == 0 for v in (G_sum * k - G_full).ravel())
    # every position, in any order, is the full statistics (with a mask too)
    every = _rng(1).permutation(N * R)
    mask = np.array([[1, 1, 0], [1, 0, 1]])
    for m in (None, mask):
        full = kfac.kfac_factors(sp, A, G, mask=m)
        sub = kfac.kfac_factors(sp, A, G, mask=m, rows=every)
        assert all((x - y == 0).all() for x, y in zip(full, sub, strict=True))


def test_subsampled_factors_refuse_bad_rows() -> None:
    A, G = np.ones((2, 3, 2)), np.ones((1, 2, 3, 2))
    for rows, match in ((np.array([0, 6]), r"distinct positions in \[0, 6\)"),
                        (np.array([1, 1]), "distinct"), (np.array([0.5]), "integer"),
                        (np.array([], dtype=int), "non-empty")):
        with pytest.raises(ArgumentError, match=match):
            kfac.kfac_factors(NP, A, G, rows=rows)
    with pytest.raises(ArgumentError, match="mode='expand'"):
        kfac.kfac_factors(NP, A, G, mode="reduce", rows=np.array([0]))
    with pytest.raises(ArgumentError, match=r"1 <= count <= 6"):
        kfac.subsample_rows(6, 7)
    assert list(kfac.subsample_rows(6, 6)) == list(range(6))
