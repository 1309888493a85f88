"""Curvature of a graph model (GGN, Fisher, empirical Fisher, Hessian) against references
independent of the library: JAX autodiff of the ops' *forwards* only.

* Hessian: ``jax.hessian`` of the loss as a function of the selected parameters;
* GGN: :math:`J^\\top H_L J` with :math:`J` = ``jax.jacfwd`` of the logits node and
  :math:`H_L` = ``jax.hessian`` of the loss op's forward as a function of the logits (so a
  missing :math:`1/N` or factor 2 in the likelihood or the reduction is caught);
* empirical Fisher: per-position gradients read off ``jax.grad`` of the loss in the logits,
  with the weights stated here (mean: :math:`1/N` over non-ignored targets; sum: 1);
* exact Fisher: the expectation over classes written out,
  :math:`\\sum_c p_c\\,g_c g_c^\\top`, :math:`g_c = \\nabla_z(-\\log\\operatorname{softmax}
  (z)_c)` (categorical), or :math:`I` (unit-variance Gaussian).

Tolerances come from :func:`curvature_tolerance` (the tolerance model); statistical bounds
from the sample standard deviation of the Monte-Carlo estimator.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlaverify.backends import get_namespace, to_float64
from nlaverify.config import TransformerConfig, preset
from nlaverify.curvature.graph import (
    CurvatureProblem,
    curvature_problem,
    empirical_fisher_vp,
    fisher_vp,
    ggn_vp,
    gradient,
    hessian_vp,
    jacobian_tvp,
    jacobian_vp,
)
from nlaverify.curvature.likelihoods import Likelihood, Reduction
from nlaverify.curvature.operators import (
    curvature_tolerance,
    dense,
    fd_step,
    hessian_fd_tolerance,
    linear_operator,
)
from nlaverify.errors import ArgumentError
from nlaverify.graph.build import build_mlp, build_transformer
from nlaverify.graph.core import add_input, add_op, evaluate
from nlaverify.graph.run import init_params, sample_data
from nlaverify.ops.loss import IGNORE_INDEX
from nlaverify.strategies import seeds, transformer_configs

jax.config.update("jax_enable_x64", True)
JAX = get_namespace("jax")
CI = os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci"


# ------------------------------------------------------------------------------------------
# Models
# ------------------------------------------------------------------------------------------

def mlp_case(sizes: list[int], batch: int, seed: int) -> tuple[nx.DiGraph, dict, dict]:
    """Baggag & Saad's MLP (tanh, affine output, 1/2 squared error: Gaussian, "sum")."""
    g = build_mlp(sizes)
    rng = np.random.default_rng(seed + 1)
    data = {"x": rng.standard_normal((batch, sizes[0])),
            "y": rng.standard_normal((batch, sizes[-1]))}
    return g, init_params(g, seed), data


def classifier_graph(d_in: int, hidden: int, classes: int) -> nx.DiGraph:
    """x -> tanh(x W1 + b1) W2 + b2 -> mean cross-entropy (categorical, "mean")."""
    g = nx.DiGraph()
    add_input(g, "x", ("n", d_in))
    add_input(g, "targets", ("n",))
    g.nodes["targets"]["dtype"] = "int"
    for name, shape, block in (("W1", (d_in, hidden), 0), ("b1", (hidden,), 0),
                               ("W2", (hidden, classes), 1), ("b2", (classes,), 1)):
        g.add_node(name, kind="param", shape=shape, block=block, component="mlp",
                   init=("normal", 1.0))
    add_op(g, "s1", "affine", ["x", "W1", "b1"])
    add_op(g, "h1", "tanh", ["s1"])
    add_op(g, "logits", "affine", ["h1", "W2", "b2"])
    add_op(g, "loss", "cross_entropy", ["logits", "targets"])
    return g


def classifier_case(d_in: int, hidden: int, classes: int, n: int,
                    seed: int) -> tuple[nx.DiGraph, dict, dict]:
    g = classifier_graph(d_in, hidden, classes)
    rng = np.random.default_rng(seed + 2)
    targets = rng.integers(0, classes, size=n)
    targets[1::3] = IGNORE_INDEX  # padding: weight 0, and N counts the others only
    return g, init_params(g, seed), {"x": rng.standard_normal((n, d_in)), "targets": targets}


def transformer_case(cfg: TransformerConfig, n: int, batch: int | None,
                     seed: int) -> tuple[nx.DiGraph, dict, dict]:
    g = build_transformer(cfg)
    return g, init_params(g, seed), sample_data(cfg.vocab_size, n, seed, batch=batch)


# ------------------------------------------------------------------------------------------
# Independent references: JAX autodiff of the ops' forwards, no hand derivative
# ------------------------------------------------------------------------------------------

@dataclass
class Reference:
    J: np.ndarray            # (m, P): logits (flattened, m = positions x C) in the params
    ggn: np.ndarray
    ef: np.ndarray
    fisher: np.ndarray
    grad: np.ndarray | None
    hessian: np.ndarray | None


def reference(problem: CurvatureProblem, *, hessian: bool = True) -> Reference:
    g, logits, loss = problem.graph, problem.logits, problem.loss
    inputs = {k: jnp.asarray(v) for k, v in problem.inputs.items()}
    names, shapes = problem.params, problem.shapes
    sizes = [math.prod(shapes[p]) for p in names]
    offsets = np.cumsum([0, *sizes])

    def unflat(x: Any) -> dict[str, Any]:
        return {p: x[offsets[k]:offsets[k + 1]].reshape(shapes[p]) for k, p in enumerate(names)}

    def logits_of(x: Any) -> Any:
        return evaluate(g, JAX, {**inputs, **unflat(x)}, outputs=[logits])[logits]

    def loss_of(x: Any) -> Any:
        return evaluate(g, JAX, {**inputs, **unflat(x)}, outputs=[loss])[loss]

    def loss_of_logits(z: Any) -> Any:
        return evaluate(g, JAX, inputs, outputs=[loss], overrides={logits: z})[loss]

    p0 = jnp.concatenate([inputs[p].reshape(-1) for p in names])
    m = math.prod(np.shape(problem.values[logits]))
    jac = jax.jacrev if m < p0.size else jax.jacfwd  # the cheaper of two independent modes

    def everything(x: Any) -> tuple:  # one compilation
        z = logits_of(x)
        second = (jax.grad(loss_of)(x), jax.hessian(loss_of)(x)) if hessian else (None, None)
        return (z, jac(logits_of)(x), jax.grad(loss_of_logits)(z),
                jax.hessian(loss_of_logits)(z), *second)

    z, J, dL, HL, grad, H = jax.jit(everything)(p0)
    C, m, P = z.shape[-1], z.size, p0.size
    J2, HL2 = np.asarray(J).reshape(m, P), np.asarray(HL).reshape(m, m)
    # the weights, stated here: the graph's cross-entropy is the mean over the targets that
    # are not the ignore-index; its 1/2 squared error is the plain sum over rows
    if problem.loss_op == "cross_entropy":
        mask = np.asarray(problem.targets) != IGNORE_INDEX
        w = mask / mask.sum()
    else:
        w = np.ones(z.shape[:-1])
    w = w.reshape(-1)
    Jpos = J2.reshape(-1, C, P)                                # (positions, C, P)
    g_obs = np.asarray(dL).reshape(-1, C)                      # w_i grad l_i
    ef = sum(np.outer(Jpos[i].T @ g_obs[i], Jpos[i].T @ g_obs[i]) / w[i]
             for i in range(len(w)) if w[i] > 0)
    if problem.loss_op == "cross_entropy":                     # sum_c p_c g_c g_c^T
        zz = np.asarray(z).reshape(-1, C)
        p = np.asarray(jax.nn.softmax(zz, axis=-1))
        gc = -np.asarray(jax.vmap(jax.jacrev(jax.nn.log_softmax))(zz))  # (pos, c, C)
        Fz = np.einsum("ic,ica,icb->iab", p, gc, gc)
    else:                                                      # E[(z - y)(z - y)^T] = I
        Fz = np.broadcast_to(np.eye(C), (len(w), C, C))
    fisher = np.einsum("i,iap,iab,ibq->pq", w, Jpos, Fz, Jpos, optimize=True)
    return Reference(J2, J2.T @ HL2 @ J2, np.asarray(ef), fisher,
                     None if grad is None else np.asarray(grad),
                     None if H is None else np.asarray(H))


def flat(problem: CurvatureProblem, v: dict) -> np.ndarray:
    return to_float64(problem.flatten(v))


def check_products(problem: CurvatureProblem, ref: Reference, seed: int) -> None:
    """Dense matrices against the references; the GGN and Hessian products against
    dense @ v (the other products: :func:`test_every_product_matches_its_dense_matrix`)."""
    tol = curvature_tolerance(problem)
    v = np.random.default_rng(seed).standard_normal(problem.size)
    G = dense(problem, "ggn")
    assert tol.compare(G, ref.ggn).ok, ("ggn", tol.compare(G, ref.ggn), tol.reason)
    F = dense(problem, "fisher")
    assert tol.compare(F, ref.fisher).ok, ("fisher", tol.compare(F, ref.fisher))
    assert tol.compare(F, G).ok  # canonical links: GGN = Fisher
    E = dense(problem, "empirical_fisher")
    assert tol.compare(E, ref.ef).ok, ("ef", tol.compare(E, ref.ef))
    assert tol.compare(flat(problem, ggn_vp(problem, v)), G @ v).ok
    if ref.hessian is not None:
        H = dense(problem, "hessian")
        assert tol.compare(H, ref.hessian).ok, ("hessian", tol.compare(H, ref.hessian))
        assert tol.compare(flat(problem, hessian_vp(problem, v)), H @ v).ok
        assert tol.compare(flat(problem, gradient(problem)), ref.grad).ok


@pytest.mark.parametrize("case", ["mlp", "classifier"])
def test_every_product_matches_its_dense_matrix(case) -> None:
    g, params, data = (mlp_case([2, 3, 2], 4, 0) if case == "mlp"
                       else classifier_case(2, 3, 4, 7, 0))
    problem = curvature_problem(g, "jax", params, data, block=1)
    ref = reference(problem, hessian=False)
    tol = curvature_tolerance(problem)
    rng = np.random.default_rng(0)
    v = rng.standard_normal(problem.size)
    Jv = to_float64(jacobian_vp(problem, v)).reshape(-1)
    assert tol.compare(Jv, ref.J @ v).ok
    u = rng.standard_normal(ref.J.shape[0])
    z_shape = np.shape(problem.values[problem.logits])
    assert tol.compare(flat(problem, jacobian_tvp(problem, u.reshape(z_shape))),
                       ref.J.T @ u).ok
    for kind, prod in (("fisher", fisher_vp), ("empirical_fisher", empirical_fisher_vp)):
        assert tol.compare(flat(problem, prod(problem, v)), dense(problem, kind) @ v).ok, kind
    for kind in ("ggn", "fisher", "empirical_fisher", "hessian"):
        op = linear_operator(problem, kind)
        assert tol.compare(op(jnp.asarray(v)), dense(problem, kind) @ v).ok, kind


# ------------------------------------------------------------------------------------------
# Random MLPs, classifiers and Transformers against the references
# ------------------------------------------------------------------------------------------

# each example compiles a handful of small jitted functions: keep CI short, nightly long
@settings(max_examples=4 if CI else 100)
@given(st.lists(st.integers(1, 4), min_size=2, max_size=4), st.integers(1, 4), seeds,
       st.booleans())
def test_mlp_curvature_matches_autodiff(sizes, batch, seed, one_block) -> None:
    g, params, data = mlp_case(sizes, batch, seed % 1000)
    problem = curvature_problem(g, "jax", params, data, block=1 if one_block else None)
    assert problem.likelihood == Likelihood("gaussian", 1)
    assert problem.reduction == Reduction("sum")
    check_products(problem, reference(problem), seed)


@settings(max_examples=4 if CI else 100)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(2, 5), st.integers(2, 6), seeds)
def test_classifier_curvature_matches_autodiff(d_in, hidden, classes, n, seed) -> None:
    g, params, data = classifier_case(d_in, hidden, classes, n, seed % 1000)
    problem = curvature_problem(g, "jax", params, data)
    assert problem.reduction == Reduction("mean")
    assert float(np.sum(to_float64(problem.weights))) == pytest.approx(1.0)
    check_products(problem, reference(problem), seed)


@settings(max_examples=3 if CI else 50)
@given(transformer_configs(), st.integers(2, 4), st.sampled_from([None, 2]), seeds,
       st.booleans())
def test_transformer_ggn_fisher_ef_match_autodiff(cfg, n, batch, seed, one_block) -> None:
    g, params, data = transformer_case(cfg, n, batch, seed % 1000)
    problem = curvature_problem(g, "jax", params, data,
                                block=cfg.n_blocks - 1 if one_block else None)
    ref = reference(problem, hessian=False)
    tol = curvature_tolerance(problem)
    G, F, E = (dense(problem, k) for k in ("ggn", "fisher", "empirical_fisher"))
    assert tol.compare(G, ref.ggn).ok, (tol.compare(G, ref.ggn), tol.reason)
    assert tol.compare(F, ref.fisher).ok and tol.compare(E, ref.ef).ok
    v = np.random.default_rng(seed).standard_normal(problem.size)
    assert tol.compare(flat(problem, ggn_vp(problem, v)), G @ v).ok


def test_transformer_hessian_matches_autodiff() -> None:
    # forward-over-reverse of the hand-VJP gradient against JAX's own Hessian product
    cfg = TransformerConfig(vocab_size=7, d_model=4, n_heads=2, n_blocks=2, d_mlp=4,
                            context=8, norm="rmsnorm", positions="rope", temperature=2.0)
    g, params, data = transformer_case(cfg, 3, 2, 0)
    problem = curvature_problem(g, "jax", params, data, block=1)
    assert problem.logits == "logits_tempered"
    inputs = problem.inputs
    p0 = {p: inputs[p] for p in problem.params}

    def loss_of(sel: dict) -> Any:
        return evaluate(g, JAX, {**inputs, **sel}, outputs=["loss"])["loss"]

    v = problem.unflatten(np.random.default_rng(3).standard_normal(problem.size))
    want = jax.jit(lambda t: jax.jvp(jax.grad(loss_of), (p0,), (t,))[1])(v)
    got = hessian_vp(problem, v)
    assert curvature_tolerance(problem).compare(problem.flatten(got),
                                                problem.flatten(want)).ok


# ------------------------------------------------------------------------------------------
# Monte-Carlo Fisher
# ------------------------------------------------------------------------------------------

#: standard errors allowed: a false alarm of 2 Phi(-5) = 6e-7 per check when the central
#: limit theorem holds, 1/k^2 = 4 % by Chebyshev's inequality without it
K_SIGMA = 5.0


def test_monte_carlo_fisher_converges_at_the_root_s_rate() -> None:
    g, params, data = classifier_case(2, 4, 4, 24, 5)
    problem = curvature_problem(g, "jax", params, data)
    v = np.random.default_rng(0).standard_normal(problem.size)
    exact = float(v @ to_float64(problem.flatten(fisher_vp(problem, v))))

    def quad(samples: int, seed: int) -> float:
        return float(v @ to_float64(linear_operator(problem, "fisher", samples=samples,
                                                    seed=seed)(v)))

    # the spread of one draw X = sum_i w_i (g_i^T J_i v)^2, from independent seeds
    sd = float(np.std([quad(1, 10_000 + s) for s in range(256)], ddof=1))
    rms = {}
    for S in (16, 64, 256):
        errors = np.array([quad(S, 100 * S + r) - exact for r in range(8)])
        bound = K_SIGMA * sd / math.sqrt(S)
        assert np.all(np.abs(errors) <= bound), (S, errors, bound)
        rms[S] = float(np.sqrt(np.mean(errors**2)))
    assert K_SIGMA * sd / math.sqrt(256) < 0.5 * exact     # the bound is not vacuous
    assert rms[256] < rms[64] < rms[16]
    assert rms[16] / rms[256] > 2.0                        # expected sqrt(256/16) = 4
    # dense and matrix-free use the same draws
    F16 = dense(problem, "fisher", samples=16, seed=7)
    tol = curvature_tolerance(problem)
    assert tol.compare(flat(problem, fisher_vp(problem, v, samples=16, seed=7)), F16 @ v).ok


# ------------------------------------------------------------------------------------------
# Planted convention errors, GGN versus Fisher versus empirical Fisher
# ------------------------------------------------------------------------------------------

def test_planted_missing_one_over_n_is_caught(monkeypatch) -> None:
    g, params, data = classifier_case(2, 3, 3, 6, 1)
    problem = curvature_problem(g, "jax", params, data)
    ref = reference(problem, hessian=False)
    tol = curvature_tolerance(problem)
    assert tol.compare(dense(problem, "ggn"), ref.ggn).ok
    monkeypatch.setattr(Reduction, "weights", lambda self, xp, mask: mask)  # "sum" for "mean"
    planted = curvature_problem(g, "jax", params, data)
    assert not tol.compare(dense(planted, "ggn"), ref.ggn).ok


def test_planted_factor_two_in_the_likelihood_hessian_is_caught(monkeypatch) -> None:
    g, params, data = mlp_case([3, 4, 2], 3, 2)
    problem = curvature_problem(g, "jax", params, data)
    ref = reference(problem, hessian=False)
    tol = curvature_tolerance(problem)
    v = np.random.default_rng(0).standard_normal(problem.size)
    assert tol.compare(flat(problem, ggn_vp(problem, v)), ref.ggn @ v).ok
    hvp = Likelihood.hvp
    monkeypatch.setattr(Likelihood, "hvp", lambda self, xp, z, t: 2 * hvp(self, xp, z, t))
    planted = curvature_problem(g, "jax", params, data)
    assert not tol.compare(flat(planted, ggn_vp(planted, v)), ref.ggn @ v).ok
    assert not tol.compare(dense(planted, "ggn"), ref.ggn).ok


@pytest.mark.parametrize("case", ["mlp", "classifier"])
def test_ggn_is_the_fisher_but_not_the_empirical_fisher(case) -> None:
    g, params, data = (mlp_case([2, 3, 2], 4, 0) if case == "mlp"
                       else classifier_case(2, 3, 4, 7, 0))
    problem = curvature_problem(g, "jax", params, data, block=1)
    tol = curvature_tolerance(problem)
    G, F, E = (dense(problem, k) for k in ("ggn", "fisher", "empirical_fisher"))
    assert tol.compare(F, G).ok
    assert tol.compare(E, F, floor=0).normwise > 0.1  # far beyond rounding
    assert np.allclose(G, G.T, rtol=0, atol=tol.rtol * np.abs(G).max())


# ------------------------------------------------------------------------------------------
# Backends
# ------------------------------------------------------------------------------------------

#: the largest model whose dense GGN (and Fisher) is checked against the autodiff reference
TINY_CASE = ("tiny", 3, 2, 0)  # preset, sequence length, batch, seed


def largest_dense_checked() -> int:
    """The parameter count of the largest model whose dense GGN this file checks against
    ``jax.jacrev``/``jax.hessian`` (all parameters of the ``tiny`` preset; the hypothesis
    Transformers are drawn smaller on average, with ``max_d_model=8``)."""
    from nlaverify.graph.build import parameter_counts

    return parameter_counts(build_transformer(preset(TINY_CASE[0]))).total


@pytest.fixture(scope="session")
def tiny() -> tuple:
    name, n, batch, seed = TINY_CASE
    g, params, data = transformer_case(preset(name), n, batch, seed)
    return g, params, data, curvature_problem(g, "jax", params, data)


def test_dense_ggn_and_fisher_of_the_tiny_preset_match_autodiff(tiny) -> None:
    problem = tiny[3]
    assert problem.size == largest_dense_checked() == 1520
    ref = reference(problem, hessian=False)
    tol = curvature_tolerance(problem)
    G = dense(problem, "ggn")
    assert tol.compare(G, ref.ggn).ok, (tol.compare(G, ref.ggn), tol.reason)
    assert tol.compare(dense(problem, "fisher"), ref.fisher).ok


def test_numpy_and_mpmath_products_match_jax_on_tiny(tiny) -> None:
    g, params, data, ref = tiny
    v = np.random.default_rng(1).standard_normal(ref.size)
    want = flat(ref, ggn_vp(ref, v))
    tol = curvature_tolerance(ref)
    for backend, digits in (("numpy", None), ("mpmath", 30)):
        problem = curvature_problem(g, backend, params, data, digits=digits)
        assert tol.compare(flat(problem, ggn_vp(problem, v)), want).ok, backend
        assert tol.compare(flat(problem, gradient(problem)), flat(ref, gradient(ref))).ok
    want_ef = flat(ref, empirical_fisher_vp(ref, v))
    assert tol.compare(flat(problem, empirical_fisher_vp(problem, v)), want_ef).ok
    assert tol.compare(flat(problem, fisher_vp(problem, v)), want).ok


def test_mpmath_hessian_by_extrapolated_differences_matches_jax() -> None:
    g, params, data = mlp_case([2, 3, 2], 3, 4)
    exact = curvature_problem(g, "jax", params, data)
    v = np.random.default_rng(2).standard_normal(exact.size)
    want = flat(exact, hessian_vp(exact, v))
    problem = curvature_problem(g, "mpmath", params, data, digits=30)
    got = hessian_vp(problem, v)
    assert curvature_tolerance(exact).compare(to_float64(problem.flatten(got)), want).ok
    # at its own precision: against the same differences in 45 digits, within the bound
    finer = curvature_problem(g, "mpmath", params, data, digits=45)
    ref45 = finer.flatten(hessian_vp(finer, v))
    err = max(abs(a - b) for a, b in zip(problem.flatten(got), ref45, strict=True))
    bound = hessian_fd_tolerance(problem).rtol * max(1.0, float(np.abs(v).max()))
    # the bound is the error model of the extrapolated difference at h = u^(1/5), O(u^(4/5));
    # a plain central difference at that step keeps its h^2 = u^(2/5) truncation, which
    # exceeds the bound by ~u^(-2/5) = 1e12 at 30 digits: the extrapolation must be there
    h = fd_step(30)
    assert float(err) <= bound < 1e-3 * h**2, (float(err), bound, h**2)
    with pytest.raises(ArgumentError, match="no second-order mode"):
        hessian_vp(curvature_problem(g, "numpy", params, data), v)
