"""The ``kronecker`` family: Kronecker algebra, K-FAC and Shampoo (Baggag & Saad §5.3–5.4).

Exact proofs: every identity derives to "proved", and planted errors make them fail. The
float64 checks of the library against dense NumPy/SciPy references and JAX autodiff:
tests/test_kronecker_algebra.py, tests/test_kronecker_shampoo.py, tests/test_kronecker_kfac.py;
every backend and the bad-input errors: tests/test_kronecker_backends.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy

import nlaverify.identities.kfac
import nlaverify.identities.kronecker
import nlaverify.identities.shampoo
from nlaverify.curvature import kfac, kronecker, shampoo
from nlaverify.identities.core import get_identity, load_catalogue

KRONECKER_IDS = [i for i, x in load_catalogue().items() if x.family == "kronecker"]


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

