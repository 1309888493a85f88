"""Masked discrete diffusion (issue 21, item 4; :mod:`nlaverify.diffusion`, family
``diffusion``): the proofs; on an enumerable toy model (vocabulary 3 and a mask, length 2: 16
noisy sequences) the Monte-Carlo ELBO against the exact value, the quadrature of the
continuous-time integrand, the discrete ELBO's first-order convergence, the ELBO as a bound on
the reverse model's exact log-likelihood, the time reversal by integrating the Kolmogorov
equations, and the errors on bad input.

Independent oracles: SciPy's adaptive quadrature (the integral of the integrand against the
closed Beta-weight form), SciPy's ODE solver (the reversed chain's marginals against the
forward ones and against the closed-form masked marginals), the exact law of the reverse model
by enumeration of every path (the bound).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate

from nlaverify import diffusion as df
from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError
from nlaverify.identities import diffusion as proofs
from nlaverify.tolerance import tolerance

NP = get_namespace("numpy")
V, L, MASK = 3, 2, 3
X0 = np.array([0, 2])


def _toy(seed: int = 0, length: int = L):
    """A model whose logits depend on the whole noisy sequence (a table over the
    (V+1)**length states)."""
    table = np.random.default_rng(seed).normal(size=(V + 1,) * length + (length, V))

    def log_probs(xt: np.ndarray) -> np.ndarray:
        idx = np.where(np.asarray(xt) == MASK, V, xt)
        z = table[tuple(idx[..., i] for i in range(length))]
        return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))

    return log_probs


LOGP = _toy()


@pytest.mark.parametrize("derive", [proofs.derive_chapman_kolmogorov,
                                    proofs.derive_time_reversal, proofs.derive_posterior,
                                    proofs.derive_step_kl, proofs.derive_continuous_limit])
def test_proofs(derive) -> None:
    proof = derive()
    assert proof.verdict == "proved", proof.detail


@pytest.mark.parametrize("name", sorted(df.SCHEDULES))
@pytest.mark.parametrize("x0", [X0, np.array([0, 2, 1])], ids=["L2", "L3"])
def test_integral_of_integrand_is_the_closed_form(name: str, x0: np.ndarray) -> None:
    """Length 3 too: its Beta weights (1/3 for one mask, 1/6 for two, 1/3 for three) are not
    all equal, as those of length 2 are."""
    sch, logp = df.SCHEDULES[name], _toy(1, len(x0))
    exact = float(df.nelbo_exact(NP, x0, logp, V, MASK))
    # the integrand is smooth on (0, 1]: the quadrature's error is rounding in its nodes
    tol = tolerance("float64", size=21 * 50, depth=3)
    val, err = integrate.quad(lambda t: float(df.nelbo_integrand(NP, x0, logp, sch, t, V,
                                                                   MASK)),
                              0.0, 1.0, epsabs=tol.rtol, epsrel=tol.rtol, limit=50)
    assert err <= tol.rtol * abs(exact)
    assert tol.compare(val, exact, floor=0).ok, (val, exact, tol.reason)


@pytest.mark.parametrize("name", sorted(df.SCHEDULES))
def test_monte_carlo_elbo_within_its_standard_error(name: str) -> None:
    """t = v^2 with the density 1/(2 sqrt t): the estimator's variance is finite (with uniform
    t it is not: the weight ~ 1/t meets a mask of probability ~ t)."""
    sch = df.SCHEDULES[name]
    exact = float(df.nelbo_exact(NP, X0, LOGP, V, MASK))
    rng = np.random.default_rng(20260521)
    n = 200_000
    v = rng.random(n)
    t = np.where(v > 0, v, 1.0) ** 2
    y = df.nelbo_samples(NP, X0, LOGP, sch, t, rng.random((n, L)), V, MASK,
                         density=1 / (2 * np.sqrt(t)))
    se = float(np.std(y, ddof=1)) / math.sqrt(n)
    # 5 standard errors: a false alarm has probability < 1e-6; the bound must resolve a
    # 10 % error in the weight (a shift of 0.1 * exact) at 5 standard errors or more
    assert 5 * se < 0.05 * exact, (se, exact)
    assert abs(float(np.mean(y)) - exact) <= 5 * se, (float(np.mean(y)), exact, se)


@pytest.mark.parametrize("name", sorted(df.SCHEDULES))
def test_discrete_elbo_converges_at_first_order(name: str) -> None:
    sch = df.SCHEDULES[name]
    exact = float(df.nelbo_exact(NP, X0, LOGP, V, MASK))
    e1, e2 = (float(df.discrete_nelbo(NP, X0, LOGP, sch, T, V, MASK)) - exact
              for T in (200, 400))
    # a Riemann sum of a smooth integrand: the error is c/T + O(1/T^2), so it halves
    assert e1 < 0 and e2 < 0
    assert 0.45 <= e2 / e1 <= 0.55, (e1, e2)


@pytest.mark.parametrize("name", sorted(df.SCHEDULES))
@pytest.mark.parametrize("T", [1, 2, 5])
def test_elbo_bounds_the_reverse_model_log_likelihood(name: str, T: int) -> None:
    sch = df.SCHEDULES[name]
    p = df.reverse_process_marginal(NP, LOGP, sch, T, V, L, MASK)
    tol = tolerance("float64", size=(V + 1) ** L, depth=T + 1)
    assert tol.compare(p.sum(), 1.0).ok  # the reverse model ends clean, a distribution
    gaps = []
    for x0 in np.ndindex(*(V,) * L):
        nelbo = float(df.discrete_nelbo(NP, np.array(x0), LOGP, sch, T, V, MASK))
        gaps.append(nelbo + math.log(p[x0]))
    assert min(gaps) >= -tol.rtol * max(1.0, max(abs(g) for g in gaps)), gaps
    if T == 1:  # one step unmasks every position at once from the all-masked sequence:
        # p(x0) = prod_i mu_i(x0_i | all masked), the ELBO's one term: equality
        assert max(abs(g) for g in gaps) <= tol.rtol * max(1.0, max(abs(g) for g in gaps))
    else:  # the posterior over paths is not the model's: a strict bound for this model
        assert max(gaps) > 1e3 * tol.rtol


def _solve(rhs, y0, t0, t1, rtol):
    sol = integrate.solve_ivp(rhs, (t0, t1), y0, method="DOP853", rtol=rtol, atol=rtol,
                              dense_output=True)
    assert sol.success
    return sol


def test_reversed_chain_runs_the_marginals_backward() -> None:
    rng = np.random.default_rng(7)
    base, phase = rng.uniform(0.5, 2.0, (3, 3)), rng.uniform(0, 2 * np.pi, (3, 3))

    def Q(t: float) -> np.ndarray:
        q = base * (1 + 0.5 * np.sin(3 * t + phase))
        np.fill_diagonal(q, 0.0)
        return q - np.diag(q.sum(axis=1))

    T, p0 = 2.0, np.array([0.7, 0.2, 0.1])
    # the local tolerance of the solves, and the growth of an error over [0, T]
    solver = tolerance("float64", size=10 ** 4, depth=2)
    growth = math.exp(T * max(np.abs(Q(t)).sum(axis=1).max() for t in np.linspace(0, T, 101)))
    fwd = _solve(lambda t, p: df.kolmogorov_forward(NP, p, Q(t)), p0, 0.0, T, solver.rtol)

    def reverse(rates):
        return _solve(lambda s, r: df.kolmogorov_forward(NP, r, rates(T - s, fwd.sol(T - s))),
                      fwd.y[:, -1], 0.0, T, solver.rtol)

    back = reverse(lambda t, p: df.reverse_rates(NP, Q(t), p))
    tol = tolerance("float64", size=10 ** 4, depth=4, condition=growth)
    for s in np.linspace(0, T, 9):
        assert tol.compare(back.sol(s), fwd.sol(T - s)).ok, (s, tol.reason)
    # without the ratio p(y)/p(x) (a plain transpose) the marginals are not reproduced
    def naive(t, p):
        q = Q(t).T * (1 - np.eye(3))
        return q - np.diag(q.sum(axis=1))

    wrong = reverse(naive)
    assert not tol.compare(wrong.sol(T), p0).ok


def test_masked_reversal_against_the_closed_form_marginals() -> None:
    sch, data = df.SCHEDULES["cosine"], np.array([0.5, 0.3, 0.2])
    t_hi, t_lo = 0.9, 0.1

    def marginal(t: float) -> np.ndarray:
        return np.append(data, 0.0) @ df.transition_matrix(NP, 1.0, sch.alpha(NP, t), V)

    def Q(t: float) -> np.ndarray:
        return df.masked_rate_matrix(NP, sch.alpha(NP, t), sch.alpha_prime(NP, t), V)

    solver = tolerance("float64", size=10 ** 4, depth=2)
    rhs = lambda s, r: df.kolmogorov_forward(  # noqa: E731
        NP, r, df.reverse_rates(NP, Q(t_hi - s), marginal(t_hi - s)))
    back = _solve(rhs, marginal(t_hi), 0.0, t_hi - t_lo, solver.rtol)
    growth = math.exp(max(float(df.masking_weight(NP, sch, t)) for t in (t_lo, t_hi)))
    tol = tolerance("float64", size=10 ** 4, depth=4, condition=growth)
    assert tol.compare(back.y[:, -1], marginal(t_lo)).ok, tol.reason


def test_posterior_is_bayes_rule_numerically() -> None:
    a_s, a_t = 0.7, 0.25
    K_s, K_ts, K_t = (df.transition_matrix(NP, *a, V) for a in ((1.0, a_s), (a_s, a_t),
                                                                  (1.0, a_t)))
    tol = tolerance("float64", size=V + 1, depth=3)
    for x0 in range(V):
        for xt, j in ((x0, x0), (MASK, V)):
            bayes = K_s[x0] * K_ts[:, j] / K_t[x0, j]
            post = df.masked_posterior(NP, a_s, a_t, np.eye(V)[[x0]], np.array([xt]), V, MASK)
            assert tol.compare(post[0], bayes).ok


def test_bad_input_is_refused_naming_the_argument() -> None:
    with pytest.raises(ArgumentError, match="'alpha_t'"):
        df.transition_matrix(NP, 1.0, 1.5, V)
    with pytest.raises(ArgumentError, match="'alpha_s'"):
        df.masked_posterior(NP, -0.1, 0.5, np.eye(V)[[0]], np.array([MASK]), V, MASK)
    with pytest.raises(ArgumentError, match="'mask_id'"):
        df.forward_marginal(NP, X0, 0.5, V, mask_id=1)  # clashes with token 1
    with pytest.raises(ArgumentError, match="'mask_id'"):
        df.discrete_nelbo(NP, X0, LOGP, df.SCHEDULES["linear"], 4, V, mask_id=-1)
    bad = np.array([[-1.0, 1.0, 0.0], [0.5, -1.0, 0.5], [0.0, 0.2, -0.1]])  # last row: 0.1
    with pytest.raises(ArgumentError, match="'Q'"):
        df.reverse_rates(NP, bad, np.array([0.2, 0.3, 0.5]))
    with pytest.raises(ArgumentError, match="'Q'"):
        df.kolmogorov_forward(NP, np.array([0.2, 0.3, 0.5]), bad)
    with pytest.raises(ArgumentError, match="'x0'"):
        df.nelbo_exact(NP, np.array([0, MASK]), LOGP, V, MASK)
    with pytest.raises(ArgumentError, match="'T'"):
        df.discrete_nelbo(NP, X0, LOGP, df.SCHEDULES["linear"], 0, V, MASK)


def _graph_denoiser(causal: bool = False, vocab_size: int = V + 1):
    from nlaverify.config import TransformerConfig
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import init_params

    cfg = TransformerConfig(vocab_size=vocab_size, d_model=8, n_heads=2, n_blocks=1, d_mlp=16,
                            context=4, causal=causal)
    return cfg, init_params(build_transformer(cfg), seed=3)


def test_transformer_denoiser_elbo() -> None:
    """The graph's bidirectional Transformer (vocabulary 3 and the mask id 3) as the model:
    it sees the future, its ELBO's Monte-Carlo estimate matches the enumeration, and the ELBO
    bounds its reverse process's exact log-likelihood."""
    cfg, params = _graph_denoiser()
    logp = df.transformer_log_probs(cfg, params, V, MASK)
    out = logp(np.array([[MASK, 0], [MASK, 2]]))
    assert out.shape == (2, L, V)
    tol = tolerance("float64", size=cfg.d_model * cfg.d_mlp, depth=4)
    assert tol.compare(np.exp(out).sum(axis=-1), np.ones((2, L))).ok
    assert not tol.compare(out[0, 0], out[1, 0]).ok  # position 0 depends on position 1
    sch = df.SCHEDULES["cosine"]
    exact = float(df.nelbo_exact(NP, X0, logp, V, MASK))
    rng = np.random.default_rng(11)
    n = 100_000
    t = np.maximum(rng.random(n), np.finfo(np.float64).tiny) ** 2
    y = df.nelbo_samples(NP, X0, logp, sch, t, rng.random((n, L)), V, MASK,
                         density=1 / (2 * np.sqrt(t)))
    se = float(np.std(y, ddof=1)) / math.sqrt(n)
    assert 5 * se < 0.05 * exact and abs(float(np.mean(y)) - exact) <= 5 * se
    p = df.reverse_process_marginal(NP, logp, sch, 3, V, L, MASK)
    nelbo = float(df.discrete_nelbo(NP, X0, logp, sch, 3, V, MASK))
    assert nelbo >= -math.log(p[tuple(X0)]) - tol.rtol * nelbo


def test_transformer_denoiser_refuses_a_causal_config_or_a_missing_mask() -> None:
    cfg, params = _graph_denoiser(causal=True)
    with pytest.raises(ArgumentError, match="'config'"):
        df.transformer_log_probs(cfg, params, V, MASK)
    cfg, params = _graph_denoiser(vocab_size=V)
    with pytest.raises(ArgumentError, match="'mask_id'"):
        df.transformer_log_probs(cfg, params, V, MASK)


def test_jax_runs_the_same_functions() -> None:
    """The functions written against ``xp`` run on JAX (under ``jax.jit`` too) as on NumPy;
    ``jax.grad`` of each schedule is its hand-written derivative (an autodiff oracle)."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    JX = get_namespace("jax")
    sch = df.SCHEDULES["cosine"]
    tol = tolerance("float64", size=(V + 1) ** L, depth=4)
    for f in (lambda xp: df.nelbo_integrand(xp, X0, LOGP, sch, 0.3, V, MASK),
              lambda xp: df.discrete_nelbo(xp, X0, LOGP, sch, 4, V, MASK),
              lambda xp: df.reverse_rates(xp, df.masked_rate_matrix(xp, 0.6, -0.5, V),
                                          xp.asarray([0.2, 0.2, 0.2, 0.4]))):
        assert tol.compare(np.asarray(f(JX)), f(NP)).ok
    post = jax.jit(lambda a: df.masked_posterior(JX, a, 0.3, JX.asarray(np.eye(V)[[0]]),
                                                 np.array([MASK]), V, MASK))(0.7)
    assert tol.compare(np.asarray(post), [[0.4 / 0.7, 0.0, 0.0, 0.3 / 0.7]]).ok
    for s in df.SCHEDULES.values():
        for t in (0.1, 0.5, 0.9):
            grad = jax.grad(lambda u, s=s: s.alpha(JX, u))(t)
            assert tol.compare(float(grad), float(s.alpha_prime(NP, t))).ok
