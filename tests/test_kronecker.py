"""The ``kronecker`` family: Kronecker algebra, K-FAC and Shampoo (Baggag & Saad §5.3–5.4).

Exact proofs (every identity derives to "proved", and planted errors make them fail), then
float64 checks of the library against dense NumPy/SciPy references and JAX autodiff, on
every backend, and the bad-input errors.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import sympy
from hypothesis import given
from hypothesis import strategies as st

import nlaverify.identities.kfac
import nlaverify.identities.kronecker
import nlaverify.identities.shampoo
from nlaverify.backends import get_namespace, to_float64
from nlaverify.curvature import kfac, kronecker, shampoo
from nlaverify.errors import ArgumentError, DTypeError, ShapeError
from nlaverify.identities.core import get_identity, load_catalogue
from nlaverify.strategies import seeds
from nlaverify.tolerance import tolerance

NP = get_namespace("numpy")
SIZES = st.integers(1, 5)
KRONECKER_IDS = [i for i, x in load_catalogue().items() if x.family == "kronecker"]


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _cond(M: np.ndarray) -> float:
    return float(np.linalg.cond(M))


def _assert_close(actual, expected, tol) -> None:
    result = tol.compare(actual, expected)
    assert result.ok, f"normwise error {result.normwise:.3g} > {tol.rtol:.3g} ({tol.reason})"


# --------------------------------------------------------------------------- proofs


def test_the_family_is_registered_with_seed_and_certified_functions() -> None:
    assert len(KRONECKER_IDS) == 17
    for identity_id in KRONECKER_IDS:
        identity = get_identity(identity_id)
        assert identity.seed.startswith("Baggag & Saad §5.")
        assert identity.certifies and all(c.startswith("nlaverify.curvature.")
                                          for c in identity.certifies)


def _swapped_matvec(xp, A, B, X):
    return xp.matmul(xp.matmul(B, X), xp.matrix_transpose(A))  # (B ⊗ A) instead of (A ⊗ B)


_ORIGINAL = {"kron": kronecker.kron, "kron_solve": kronecker.kron_solve,
             "kfac_factors": kfac.kfac_factors, "inverse_root": shampoo.inverse_root,
             "trace_norm_pi": kronecker.trace_norm_pi, "kfac_block": kfac.kfac_block,
             "damped_kron_solve": kronecker.damped_kron_solve,
             "symmetric_eigh": kronecker.symmetric_eigh,
             "shampoo_statistics": shampoo.shampoo_statistics,
             "shampoo_init": shampoo.shampoo_init}


def _kfac_without_mean(xp, A, G, **kw):
    A_f, G_f = _ORIGINAL["kfac_factors"](xp, A, G, **kw)
    return A_f * (A.shape[0] * A.shape[1] if A.ndim == 3 else A.shape[0]), G_f  # no 1/(NR)


def _kfac_rescaled(xp, A, G, **kw):
    """c A_f and G_f / c: the same Kronecker product, the wrong split between the factors."""
    A_f, G_f = _ORIGINAL["kfac_factors"](xp, A, G, **kw)
    return A_f * 2, G_f * xp.rational(1, 2)


def _kfac_ignoring_mask(xp, A, G, *, mask=None, **kw):
    return _ORIGINAL["kfac_factors"](xp, A, G, **kw)


def _eigh_without_gram_schmidt(xp, M):
    """SymPy's eigenvectors normalized one by one: orthonormal only when each eigenvalue is
    simple (a symmetric matrix's eigenspaces are orthogonal to each other, but the basis SymPy
    returns inside a repeated one is not orthogonal)."""
    if not xp.exact:
        return _ORIGINAL["symmetric_eigh"](xp, M)
    values, vectors = [], []
    for value, mult, basis in sympy.Matrix(M).applyfunc(sympy.expand).eigenvects():
        values += [value] * mult
        vectors += [b / b.norm() for b in basis]
    n = len(values)
    return (np.array(values, dtype=object),
            np.array([[vectors[j][i] for j in range(n)] for i in range(n)], dtype=object))


def _statistics_without_decay(xp, G, stats=None, *, beta=None):
    return _ORIGINAL["shampoo_statistics"](xp, G, stats)


_EXACT_KFAC = ["kfac_exact_one_sample", "kfac_exact_deep_linear",
               "kfac_expand_exact_shared_positions", "kfac_reduce_exact_mean_pooled"]

PLANTED = {
    "kron_matvec with the Kronecker order swapped": (
        "kron_vec_product", kronecker, "kron_matvec", _swapped_matvec),
    "kron with its factors swapped": (
        "kron_vec_outer", kronecker, "kron", lambda xp, A, B: _ORIGINAL["kron"](xp, B, A)),
    "kron_solve with A transposed": (
        "kron_inverse", kronecker, "kron_solve",
        lambda xp, A, B, X: _ORIGINAL["kron_solve"](xp, A.T, B, X)),
    "trace-norm pi inverted": (
        "kron_factored_damping", kronecker, "trace_norm_pi",
        lambda xp, A, B: 1 / _ORIGINAL["trace_norm_pi"](xp, A, B)),
    "damped_kron_solve ignoring the damping": (
        "kron_factored_damping", kronecker, "damped_kron_solve",
        lambda xp, A, B, X, damping, *, pi=None: kronecker.kron_solve(xp, A, B, X)),
    "damped_kron_solve with pi = 1 by default": (
        "kron_factored_damping", kronecker, "damped_kron_solve",
        lambda xp, A, B, X, damping, *, pi=None: _ORIGINAL["damped_kron_solve"](
            xp, A, B, X, damping, pi=1 if pi is None else pi)),
    "symmetric_eigh without Gram-Schmidt (Kronecker eigenpairs)": (
        "kron_eigenpairs", kronecker, "symmetric_eigh", _eigh_without_gram_schmidt),
    "symmetric_eigh without Gram-Schmidt, seen by Shampoo through the module": (
        "shampoo_one_gradient_is_polar_factor", kronecker, "symmetric_eigh",
        _eigh_without_gram_schmidt),
    "symmetric_eigh without Gram-Schmidt, seen by full-matrix Adagrad": (
        "shampoo_order_one_is_full_matrix_adagrad", kronecker, "symmetric_eigh",
        _eigh_without_gram_schmidt),
    "kron with its factors swapped, seen by kfac_block through the module": (
        "kfac_exact_deep_linear", kronecker, "kron",
        lambda xp, A, B: _ORIGINAL["kron"](xp, B, A)),
    "K-FAC-expand without its 1/(NR)": (
        "kfac_expand_exact_shared_positions", kfac, "kfac_factors", _kfac_without_mean),
    "K-FAC-expand ignoring the mask": (
        "kfac_expand_exact_shared_positions", kfac, "kfac_factors", _kfac_ignoring_mask),
    "K-FAC-reduce ignoring the mask": (
        "kfac_reduce_exact_mean_pooled", kfac, "kfac_factors", _kfac_ignoring_mask),
    **{f"K-FAC factors 2 A_f, G_f / 2 ({i})": (i, kfac, "kfac_factors", _kfac_rescaled)
       for i in _EXACT_KFAC},
    "K-FAC block with the Kronecker order swapped": (
        "kfac_exact_deep_linear", kfac, "kfac_block",
        lambda xp, A_f, G_f: _ORIGINAL["kron"](xp, G_f, A_f)),
    "the reference block replaced by K-FAC": (
        "kfac_not_exact", kfac, "exact_layer_block",
        lambda xp, A, G, **kw: _ORIGINAL["kfac_block"](
            xp, *_ORIGINAL["kfac_factors"](xp, A, G, **kw))),
    "Shampoo with square roots instead of fourth roots": (
        "shampoo_one_gradient_is_polar_factor", shampoo, "inverse_root",
        lambda xp, M, p, **kw: _ORIGINAL["inverse_root"](xp, M, 2, **kw)),
    "full-matrix Adagrad with the fourth root": (
        "shampoo_order_one_is_full_matrix_adagrad", shampoo, "inverse_root",
        lambda xp, M, p, **kw: _ORIGINAL["inverse_root"](xp, M, 4, **kw)),
    "Shampoo statistics ignoring beta": (
        "shampoo_order_one_is_full_matrix_adagrad", shampoo, "shampoo_statistics",
        _statistics_without_decay),
    "Shampoo init ignoring epsilon": (
        "shampoo_order_one_is_full_matrix_adagrad", shampoo, "shampoo_init",
        lambda xp, G, epsilon=0: _ORIGINAL["shampoo_init"](xp, G, 0)),
}


@pytest.mark.parametrize("plant", list(PLANTED))
def test_a_planted_error_fails_the_proof(plant: str, monkeypatch) -> None:
    identity_id, module, name, broken = PLANTED[plant]
    monkeypatch.setattr(module, name, broken)
    assert get_identity(identity_id).derive().verdict == "failed"


def _row_major_vec_entry(X, m, t):
    return X(sympy.floor((t - 1) / m) + 1, sympy.Mod(t - 1, m) + 1)


@pytest.mark.parametrize(("identity_id", "name", "broken"), [
    ("kron_vec_outer", "_vec_entry", _row_major_vec_entry),
    ("kron_transpose", "_entry", lambda M, transposed=False: lambda i, j: M[i, j]),
])
def test_the_general_size_parts_can_fail(identity_id: str, name: str, broken,
                                         monkeypatch) -> None:
    """The flat-index parts compare two different routes: a wrong index map (vec read
    row-major; the transpose's entries not swapped) fails them."""
    monkeypatch.setattr(nlaverify.identities.kronecker, name, broken)
    proof = get_identity(identity_id).derive()
    assert proof.verdict == "failed"
    assert proof.steps[0].text.startswith("General sizes") and "differ" in proof.steps[0].text


def test_the_deep_linear_proof_covers_every_layer_and_labels_its_argument() -> None:
    steps = get_identity("kfac_exact_deep_linear").derive().steps
    checked = [s.text for s in steps if s.text.startswith(("two linear", "three linear"))]
    assert len(checked) == (2 + 3) * 3  # every layer of both nets, N = 1, 2, 3
    assert steps[-1].text.startswith("Argument (by hand, not machine-checked)")


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


def _spd(n: int, seed: int, max_condition: float = 10.0) -> np.ndarray:
    """An SPD matrix with eigenvalues in [1, max_condition] (as ``spd_matrices``)."""
    rng = _rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    lam = np.exp(rng.uniform(0.0, np.log(max_condition), size=n))
    M = (Q * lam) @ Q.T
    return (M + M.T) / 2


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


# --------------------------------------------------------------------------- backends


@pytest.mark.parametrize("backend", ["jax", "strict", "mpmath"])
def test_every_backend_agrees_with_numpy(backend: str) -> None:
    xp = get_namespace(backend)
    rng = _rng(11)
    A, B, X = _spd(3, 1), _spd(2, 2), rng.standard_normal((3, 2))
    Am, G = rng.standard_normal((2, 2, 3)), rng.standard_normal((2, 2, 2, 2))
    cases = [
        (lambda ns, *a: kronecker.kron(ns, *a), (A, B)),
        (lambda ns, *a: kronecker.kron_matvec(ns, *a), (A, B, X)),
        (lambda ns, *a: kronecker.damped_kron_solve(ns, *a, 0.5), (A, B, X)),
        (lambda ns, *a: kfac.kfac_factors(ns, *a, mode="reduce", bias=True)[0], (Am, G)),
        (lambda ns, *a: kfac.exact_layer_block(ns, *a), (Am, G)),
        (lambda ns, G1: shampoo.shampoo_direction(ns, G1, shampoo.shampoo_statistics(ns, G1)),
         (X,)),
    ]
    tol = tolerance("float64", size=16, condition=_cond(A) * _cond(B), depth=3)
    for f, args in cases:
        got = f(xp, *(xp.asarray(a) for a in args))
        _assert_close(to_float64(got), f(NP, *args), tol)


# --------------------------------------------------------------------------- bad input


_M2, _M3 = np.eye(2), np.eye(3)
BAD = [
    (lambda: kronecker.kron(NP, np.ones(3), _M2), ShapeError, r"kron: argument 'A'"),
    (lambda: kronecker.kron_solve(NP, np.ones((2, 3)), _M2, np.ones((2, 2))), ShapeError,
     r"kron_solve: argument 'A': expected shape \(m=2, m=2\)"),
    (lambda: kronecker.kron_matvec(NP, _M2, _M3, np.ones((2, 2))), ShapeError,
     r"argument 'X': expected shape \(n=2, q=3\)"),
    (lambda: kronecker.kron_solve(NP, _M2, _M3, np.ones((3, 2))), ShapeError, r"argument 'X'"),
    (lambda: kronecker.damped_kron_solve(NP, _M2, _M3, np.ones((2, 3)), -1.0), ArgumentError,
     r"argument 'damping': expected >= 0"),
    (lambda: kronecker.damped_factors(NP, _M2, _M3, np.ones(2)), ShapeError,
     r"argument 'damping': expected a scalar"),
    (lambda: kronecker.damped_factors(NP, _M2, _M3, 1.0, pi=0.0), ArgumentError,
     r"argument 'pi': expected > 0"),
    (lambda: kronecker.unvec(NP, np.ones(5), (2, 3)), ShapeError, r"unvec: argument 'v'"),
    (lambda: kronecker.kron(NP, np.eye(2, dtype=int), _M2), DTypeError, r"argument 'A'"),
    (lambda: kfac.kfac_factors(NP, np.ones((2, 3, 4)), np.ones((1, 2, 3, 5)), mode="both"),
     ArgumentError, r"argument 'mode'"),
    (lambda: kfac.kfac_factors(NP, np.ones((2, 3, 4)), np.ones((1, 3, 3, 5))), ShapeError,
     r"argument 'G': expected shape \(S=1, N=2, R=3, d_out\)"),
    (lambda: kfac.kfac_factors(NP, np.ones((2, 3, 4)), np.ones((1, 2, 3, 5)),
                               mask=np.full((2, 3), 2)), ArgumentError, r"argument 'mask'"),
    (lambda: kfac.kfac_factors(NP, np.ones((2, 3, 4)), np.ones((1, 2, 3, 5)),
                               mask=np.array([[1, 0, 0], [0, 0, 0]])), ArgumentError,
     r"fully masked"),
    (lambda: kfac.kfac_block(NP, np.ones((2, 3)), _M2), ShapeError, r"argument 'A_factor'"),
    (lambda: shampoo.inverse_root(NP, _M2, 0), ArgumentError, r"argument 'p'"),
    (lambda: shampoo.inverse_root(get_namespace("sympy"), np.eye(2, dtype=int).astype(object),
                                  2, rtol=1e-8), ArgumentError, r"argument 'rtol'"),
    (lambda: shampoo.shampoo_direction(NP, np.ones((2, 2, 2)), ()), ShapeError,
     r"argument 'G': expected a vector"),
    (lambda: shampoo.shampoo_direction(NP, np.ones((2, 3)), (_M2,)), ShapeError,
     r"argument 'stats': expected 2 matrices"),
    (lambda: shampoo.shampoo_direction(NP, np.ones((2, 3)), (_M2, _M2)), ShapeError,
     r"argument 'stats\[1\]'"),
]


@pytest.mark.parametrize(("call", "error", "match"), BAD)
def test_bad_input_gets_a_clear_error(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()
