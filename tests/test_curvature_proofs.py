"""The `curvature` family: every identity proved, each able to fail on a planted bug; the
likelihoods against JAX autodiff and Monte-Carlo sampling; the natural gradient on every
backend; the Figure 30 model (natural gradient vs gradient descent) and its figure."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

import nlaverify.identities.curvature as ids
import nlaverify.identities.natural_gradient as ngids
from nlaverify.backends import get_namespace, to_float64
from nlaverify.curvature import kronecker as kr
from nlaverify.curvature import likelihoods as lk
from nlaverify.curvature import natural as nat
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.strategies import spd_matrices, well_conditioned_matrices
from nlaverify.tolerance import tolerance

#: the family, from its module (independent of the other catalogue modules)
CATALOGUE = {x.id: x for x in (*ids.IDENTITIES, *ngids.IDENTITIES)}
CURVATURE = list(CATALOGUE)
F64 = "float64"


def test_the_family_is_complete_and_certifies_the_library() -> None:
    assert len(CURVATURE) == 14
    assert all(x.family == "curvature" for x in CATALOGUE.values())
    certified = {c for i in CURVATURE for c in CATALOGUE[i].certifies}
    for f in (lk.Likelihood.nll, lk.Likelihood.grad, lk.Likelihood.hessian,
              lk.Likelihood.hessian_sqrt, lk.Likelihood.hvp, lk.Reduction.weights,
              lk.ggn_matrix, lk.empirical_fisher, lk.likelihood_of, nat.natural_gradient,
              nat.model_loss, nat.model_grad, nat.model_fisher, kr.solve):
        assert f"{f.__module__}.{f.__qualname__}" in certified


# --------------------------------------------------------------------------- planted bugs

_ORIG_HESSIAN = lk.Likelihood.hessian
_ORIG_GRAD = lk.Likelihood.grad
_ORIG_WEIGHTS = lk.Reduction.weights


def _hessian_without_ppT(self, xp, z):
    if self.family != "categorical":
        return _ORIG_HESSIAN(self, xp, z)
    C = z.shape[-1]
    return xp.one_hot(xp.arange(C), C, z.dtype) * self._diag(xp, z)[..., None]


def _bernoulli_hessian_squared(self, xp, z):
    if self.family != "bernoulli":
        return _ORIG_HESSIAN(self, xp, z)
    C = z.shape[-1]
    s = self._diag(xp, z)
    return xp.one_hot(xp.arange(C), C, z.dtype) * (s * 4 * s)[..., None]


def _gaussian_hessian_unscaled(self, xp, z):
    if self.family != "gaussian":
        return _ORIG_HESSIAN(self, xp, z)
    C = z.shape[-1]
    return xp.one_hot(xp.arange(C), C, z.dtype) + 0 * z[..., None]


def _grad_doubled_target(self, xp, z, y):
    if self.family != "categorical":
        return _ORIG_GRAD(self, xp, z, y)
    return _ORIG_GRAD(self, xp, z, y) - xp.one_hot(y, z.shape[-1], z.dtype)


def _mean_without_one_over_n(self, xp, mask):
    return mask if self.name == "mean" else _ORIG_WEIGHTS(self, xp, mask)


def _sequence_mean_as_mean(self, xp, mask):
    if self.name == "sequence_mean":
        return mask / (mask.shape[0] * xp.sum(mask))
    return _ORIG_WEIGHTS(self, xp, mask)


def _diagonal_natural_gradient(xp, F, g, damping=0):
    return g / xp.sum(F * xp.one_hot(xp.arange(F.shape[0]), F.shape[0], F.dtype), axis=-1)


_ORIG_NATURAL_GRADIENT = nat.natural_gradient
_ORIG_SOLVE = kr.solve


def _natural_gradient_double_damping(xp, F, g, damping=0):
    # the reviewer's plant: (F + 2 lambda I)^{-1} g; exact at damping 0
    return _ORIG_NATURAL_GRADIENT(xp, F, g, 2 * damping)


def _natural_gradient_solves_transpose(xp, F, g, damping=0):
    return _ORIG_NATURAL_GRADIENT(xp, xp.matrix_transpose(F), g, damping)


def _solve_doubled(xp, A, B):
    # kronecker.solve returning 2 A^{-1} B: natural_gradient must call it through the module
    return 2 * _ORIG_SOLVE(xp, A, B)


def _ggn_without_weights(xp, likelihood, J, z, weights=None):
    return _ORIG_GGN(xp, likelihood, J, z, None)


def _empirical_fisher_is_ggn(xp, likelihood, J, z, y, weights=None):
    return _ORIG_GGN(xp, likelihood, J, z, weights)


_ORIG_GGN = lk.ggn_matrix
_ORIG_FISHER = nat.model_fisher

PLANTED = [
    ((lk.Likelihood, "hessian", _hessian_without_ppT),
     ("categorical_hessian", "fisher_is_expected_hessian", "ggn_equals_fisher_categorical",
      "ggn_hessian_decomposition")),
    ((lk.Likelihood, "hessian", _bernoulli_hessian_squared),
     ("gaussian_bernoulli_hessian", "ggn_equals_fisher_bernoulli")),
    ((lk.Likelihood, "hessian", _gaussian_hessian_unscaled),
     ("gaussian_bernoulli_hessian", "ggn_equals_fisher_gaussian")),
    ((lk.Likelihood, "grad", _grad_doubled_target), ("score_zero_mean",)),
    ((lk.Reduction, "weights", _mean_without_one_over_n), ("reduction_conventions",)),
    ((lk.Reduction, "weights", _sequence_mean_as_mean), ("reduction_conventions",)),
    ((nat, "natural_gradient", _diagonal_natural_gradient),
     ("natural_gradient_invariance", "natural_gradient_gaussian_model")),
    ((nat, "natural_gradient", _natural_gradient_double_damping),
     ("natural_gradient_invariance", "natural_gradient_gaussian_model")),
    ((nat, "natural_gradient", _natural_gradient_solves_transpose),
     ("natural_gradient_invariance",)),
    ((kr, "solve", _solve_doubled),
     ("natural_gradient_invariance", "natural_gradient_gaussian_model")),
    ((lk, "ggn_matrix", _ggn_without_weights),
     ("ggn_equals_fisher_gaussian", "ggn_equals_fisher_categorical",
      "ggn_equals_fisher_bernoulli")),
    ((lk, "empirical_fisher", _empirical_fisher_is_ggn), ("empirical_fisher_is_not_fisher",)),
    ((nat, "model_fisher", lambda xp, w, M, y: 2 * _ORIG_FISHER(xp, w, M, y)),
     ("natural_gradient_gaussian_model",)),
]


@pytest.mark.parametrize(("patch", "identity_ids"), PLANTED,
                         ids=[f"{p[0][1]}:{p[0][2].__name__}" for p in PLANTED])
def test_planted_bug_fails_the_proof(patch, identity_ids, monkeypatch) -> None:
    owner, name, bad = patch
    monkeypatch.setattr(owner, name, bad)
    for identity_id in identity_ids:
        proof = CATALOGUE[identity_id].derive()
        assert proof.verdict == "failed", (identity_id, proof.detail)


def test_a_failed_proof_names_the_comparison(monkeypatch) -> None:
    monkeypatch.setattr(lk.Reduction, "weights", _mean_without_one_over_n)
    proof = ngids.derive_reductions()
    assert proof.verdict == "failed"
    assert proof.detail.startswith("mean: weights vs counted factors")
    assert "refuted" in proof.detail or "does not" in proof.detail


# --------------------------------------------------------------------------- numerics


def _cases(rng: np.random.Generator) -> list[tuple[lk.Likelihood, np.ndarray, np.ndarray]]:
    z = rng.standard_normal((4, 3))
    return [(lk.Likelihood("categorical"), z, rng.integers(0, 3, size=4)),
            (lk.Likelihood("gaussian", 0.7), z, rng.standard_normal((4, 3))),
            (lk.Likelihood("bernoulli"), z, rng.integers(0, 2, size=(4, 3)).astype(float))]


def test_hessian_and_hvp_against_jax_autodiff() -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    xj = get_namespace("jax")
    xn = get_namespace("numpy")
    rng = np.random.default_rng(0)
    v = rng.standard_normal((4, 3))
    for lik, z, y in _cases(rng):
        tol = tolerance(F64, size=3, depth=2)

        def total(zz, lik=lik, y=y):
            return xj.sum(lik.nll(xj, zz, xj.asarray(y)))

        H_ref = np.asarray(jax.hessian(total)(xj.asarray(z)))  # (4, 3, 4, 3), block diagonal
        H_blocks = np.stack([H_ref[p, :, p, :] for p in range(4)])
        assert tol.compare(lik.hessian(xn, z), H_blocks).ok, lik
        assert tol.compare(lik.hvp(xn, z, v), np.einsum("pij,pj->pi", H_blocks, v)).ok, lik
        S = lik.hessian_sqrt(xn, z)
        assert tol.compare(S @ np.swapaxes(S, -1, -2), H_blocks).ok, lik
        assert tol.compare(lik.grad(xn, z, y), np.asarray(jax.grad(total)(xj.asarray(z)))).ok


def test_sampled_fisher_matches_the_hessian_within_five_standard_errors() -> None:
    # Monte-Carlo Fisher E[g g^T] from Likelihood.sample, one position of each family: each
    # entry within 5 standard errors (the sample variance of g_i g_j over K draws); the
    # score's mean within 5 exact standard errors (Var g_i = F_ii)
    xn = get_namespace("numpy")
    rng = np.random.default_rng(1)
    K = 20000
    z = np.array([0.3, -1.1, 0.7])
    for lik in (lk.Likelihood("categorical"), lk.Likelihood("gaussian", 0.5),
                lk.Likelihood("bernoulli")):
        zs = np.broadcast_to(z, (K, 3))
        noise = (rng.standard_normal((K, 3)) if lik.noise_kind() == "normal"
                 else rng.uniform(size=(K, 3)))
        g = lik.grad(xn, zs, lik.sample(xn, zs, noise))
        outer = g[:, :, None] * g[:, None, :]
        H = lik.hessian(xn, z)
        se = np.sqrt(outer.var(axis=0) / K)
        assert np.all(np.abs(outer.mean(axis=0) - H) <= 5 * se + tolerance(F64).rtol), lik
        assert np.all(np.abs(g.mean(axis=0)) <= 5 * np.sqrt(np.diag(H) / K)), lik  # score mean


@given(spd_matrices(3, max_condition=10.0), well_conditioned_matrices(3, max_condition=5.0),
       st.integers(0, 2**31 - 1))
def test_natural_gradient_is_invariant_numerically(F, A, seed) -> None:
    xn = get_namespace("numpy")
    g = np.random.default_rng(seed).standard_normal(3)
    d_w = nat.natural_gradient(xn, F, g)
    d_theta = nat.natural_gradient(xn, A.T @ F @ A, A.T @ g)
    cond = np.linalg.cond(F) * np.linalg.cond(A) ** 2
    assert tolerance(F64, size=3, condition=cond, depth=3).compare(A @ d_theta, d_w).ok


@pytest.mark.parametrize("backend", ["jax", "strict", "mpmath"])
def test_natural_gradient_on_every_backend(backend: str) -> None:
    rng = np.random.default_rng(2)
    F = np.cov(rng.standard_normal((3, 8))) + np.eye(3)
    g = rng.standard_normal(3)
    ref = nat.natural_gradient(get_namespace("numpy"), F, g, damping=0.25)
    xp = get_namespace(backend)
    out = nat.natural_gradient(xp, xp.asarray(F), xp.asarray(g), damping=0.25)
    tol = tolerance(F64, size=3, condition=float(np.linalg.cond(F)), depth=2)
    assert tol.compare(to_float64(out), ref).ok
    assert tolerance(F64, size=3, condition=float(np.linalg.cond(F))).compare(
        (F + 0.25 * np.eye(3)) @ ref, g).ok


def test_bad_shapes_are_named() -> None:
    xn = get_namespace("numpy")
    lik = lk.Likelihood("categorical")
    with pytest.raises(ShapeError, match=r"'J'.*expected shape"):
        lk.ggn_matrix(xn, lik, np.zeros((2, 3, 4)), np.zeros((2, 5)))
    with pytest.raises(ShapeError, match="'weights'"):
        lk.empirical_fisher(xn, lik, np.zeros((2, 3, 4)), np.zeros((2, 3)), np.zeros(2, int),
                            np.ones(3))
    with pytest.raises(ShapeError, match="'F'"):
        nat.natural_gradient(xn, np.zeros((2, 3)), np.zeros(2))
    with pytest.raises(ShapeError, match="'g'"):
        nat.natural_gradient(xn, np.eye(2), np.zeros(3))
    with pytest.raises(ArgumentError, match="damping"):
        nat.natural_gradient(xn, np.eye(2), np.zeros(2), damping=-1.0)
    with pytest.raises(ShapeError, match="'y'"):
        nat.model_loss(xn, np.zeros(2), np.eye(2), np.zeros((4, 3)))
    with pytest.raises(ShapeError, match="every sequence needs at least one target"):
        lk.Reduction("sequence_mean").weights(xn, np.array([[1.0, 0.0], [0.0, 0.0]]))
    with pytest.raises(ShapeError, match="the batch has at least one target"):
        lk.Reduction("mean").weights(xn, np.zeros((2, 2)))
    with pytest.raises(ArgumentError, match="steps"):
        nat.descend(np.eye(2), np.zeros((3, 2)), np.zeros(2), -1)


# --------------------------------------------------------------------------- Figure 30


@pytest.fixture(scope="session")
def figure_paths() -> tuple[nat.DescentPaths, nat.DescentPaths]:
    M, y, w0 = nat.figure_model()
    return nat.descend(M, y, w0, 400, lr_ngd=1.0), nat.descend(M, y, w0, 40, lr_ngd=0.5)


def test_natural_gradient_lands_on_the_optimum_in_one_step(figure_paths) -> None:
    full, _ = figure_paths
    tol = tolerance(F64, size=32, condition=full.condition, depth=2)
    assert not tol.compare(full.ngd[0], full.optimum).ok
    assert all(tol.compare(w, full.optimum).ok for w in full.ngd[1:])


def test_gradient_descent_contracts_exactly_at_the_rate_of_the_condition_number(
        figure_paths) -> None:
    full, half = figure_paths
    kappa = full.condition
    assert kappa == pytest.approx(25.0, rel=tolerance(F64, condition=25.0).rtol)
    rho = (kappa - 1) / (kappa + 1)
    tol = tolerance(F64, size=32, condition=kappa, depth=4)
    # the error w_t - w* is multiplied by (I - eta F), eigenvalues -rho and rho: the gap by
    # rho^2 per step, while rounding stays small against the gap
    t = np.arange(30)
    assert tol.compare(full.gd_gap[t], full.gd_gap[0] * rho ** (2 * t)).ok
    assert tol.compare(half.ngd_gap[:20], half.ngd_gap[0] * 0.25 ** np.arange(20)).ok
    # iterations to shrink the gap by 1e-10: ceil(ln 1e-10 / (2 ln rho)) for gradient
    # descent, 1 for the natural gradient
    target = 1e-10 * full.gd_gap[0]
    predicted = math.ceil(math.log(1e-10) / (2 * math.log(rho)))
    n_gd = int(np.argmax(full.gd_gap <= target))
    n_ngd = int(np.argmax(full.ngd_gap <= target))
    assert n_ngd == 1
    assert predicted - 1 <= n_gd <= predicted + 1
    assert n_gd > kappa * n_ngd  # kappa log-factor more iterations


def test_figure_is_an_svg_with_two_axes_and_reproducible(tmp_path: Path) -> None:
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    paths = nat.figure(str(a), steps=10)
    nat.figure(str(b), steps=10)
    text = a.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert text.count('<g id="axes_') == 2
    assert a.read_bytes() == b.read_bytes()
    assert paths.gd.shape == paths.ngd.shape == (11, 2)


def test_committed_figure_is_current(repo_root: Path, monkeypatch) -> None:
    spec = importlib.util.spec_from_file_location("curvature_derivation",
                                                  repo_root / "derivations" / "curvature.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.chdir(repo_root)
    assert module.figure_is_current(), "run `python derivations/curvature.py --figure-only`"


def test_exact_namespace_runs_the_model() -> None:
    xs = get_namespace("sympy")
    M, y = np.array([[2, 0], [1, 1]]), np.array([[1, 0], [3, 2]])
    w = xs.asarray(np.array([0, 0]))
    d = nat.natural_gradient(xs, nat.model_fisher(xs, w, xs.asarray(M), xs.asarray(y)),
                             nat.model_grad(xs, w, xs.asarray(M), xs.asarray(y)))
    assert list(w - d) == [sympy.Integer(2), sympy.Integer(1)]  # the mean of the data
