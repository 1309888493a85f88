"""The training objectives (issue 21, item 3; :mod:`nlaverify.objectives`, family
``objectives``): the proofs, and on an enumerable tiny model (vocabulary 3, length 3: all 27
sequences) the exact KL-regularised optimum reached by gradient ascent, the chain rule, DPO
against JAX autodiff and an independent log-sigmoid, REINFORCE by enumeration and by sampling,
and the errors on bad input.

Independent oracles: ``jax.grad`` (gradient ascent on J and the DPO gradient),
``jax.nn.log_sigmoid`` (the DPO loss), the closed-form softmax Jacobian and ``jax.grad`` of the
expected reward (REINFORCE). TRL (1.16) has no standalone DPO loss to compare with: its
``DPOTrainer._compute_loss`` computes ``-logsigmoid(beta * delta_score)`` inline on a model's
forward, the form ``jax.nn.log_sigmoid`` checks here.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from nlaverify import objectives as ob
from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.identities import objectives as proofs
from nlaverify.tolerance import tolerance

NP = get_namespace("numpy")
V, N = 3, 3  # the tiny model: 27 sequences


def _softmax_rows(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _tables(seed: int, scale: float = 0.5) -> list[np.ndarray]:
    """Conditional tables of a well-conditioned autoregressive law (every entry >= ~0.1)."""
    rng = np.random.default_rng(seed)
    return [_softmax_rows(rng.normal(0.0, scale, (V,) * (t + 1))) for t in range(N)]


# -- the proofs --------------------------------------------------------------------------------
@pytest.mark.parametrize("derive", [
    proofs.derive_chain_rule, proofs.derive_ce_kl_entropy, proofs.derive_forward_kl_ml,
    proofs.derive_gibbs_optimum, proofs.derive_dpo, proofs.derive_reinforce])
def test_every_identity_is_proved(derive) -> None:
    proof = derive()
    assert proof.verdict == "proved", proof.detail


def test_planted_mistakes_are_refuted(monkeypatch) -> None:
    real_kl = ob.kl
    # the KL's order flipped inside the chain rule: KL(q||p) per conditional
    monkeypatch.setattr(ob, "chain_rule_kl", lambda xp, p, q: ob.sequence_kl(xp, q, p))
    assert proofs.derive_chain_rule().verdict == "failed"
    monkeypatch.undo()
    # the Gibbs policy with e^{beta r} for e^{r/beta}
    monkeypatch.setattr(ob, "gibbs_policy", lambda xp, ref, r, beta: (
        ref * xp.exp(r * beta) / xp.sum(ref * xp.exp(r * beta))))
    assert proofs.derive_gibbs_optimum().verdict == "failed"
    monkeypatch.undo()
    # the baseline subtracted outside the score: E[grad log pi * r - b] is biased
    monkeypatch.setattr(ob, "_reinforce_terms", lambda xp, th, y, rw, b: (
        ob.score_softmax(xp, th, y) * rw[:, None] - b))
    assert proofs.derive_reinforce().verdict == "failed"
    monkeypatch.undo()
    # the entropy left out of the cross-entropy's decomposition: CE = KL
    monkeypatch.setattr(ob, "cross_entropy", lambda xp, p, q: real_kl(xp, p, q))
    assert proofs.derive_ce_kl_entropy().verdict == "failed"


# -- the tiny model: exact optimum vs gradient ascent ------------------------------------------
def test_gradient_ascent_reaches_the_gibbs_optimum() -> None:
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from nlaverify.ops.softmaxes import softmax

    jxp = get_namespace("jax")
    beta = 0.5
    ref = ob.joint_distribution(NP, _tables(0)).reshape(-1)
    r = np.random.default_rng(1).uniform(0.0, 1.0, V ** N)
    star = ob.gibbs_policy(NP, ref, r, beta)
    best = beta * ob.log_partition(NP, ref, r, beta)

    def J(thetas):  # the policy: one softmax per prefix (39 logits), any law of full support
        pi = jnp.reshape(ob.joint_distribution(jxp, [softmax(jxp, th) for th in thetas]), (-1,))
        return ob.kl_regularised_objective(jxp, pi, jnp.asarray(ref), jnp.asarray(r), beta)

    grad = jax.grad(J)

    @jax.jit
    def ascend(thetas):
        return jax.lax.fori_loop(0, 5000, lambda i, th: [a + 4.0 * g for a, g in zip(
            th, grad(th), strict=True)], thetas)

    thetas = ascend([jnp.zeros((V,) * (t + 1)) for t in range(N)])
    pi = ob.joint_distribution(NP, [np.asarray(softmax(jxp, th)) for th in thetas]).reshape(-1)
    # at the optimum gradient ascent stalls at rounding: pi is a product of N softmaxes (N
    # stages, 27 entries), its error amplified by 1/min pi* (the curvature of beta KL in pi)
    tol = tolerance("float64", size=V ** N, depth=N, condition=1.0 / float(star.min()))
    assert tol.compare(pi, star).ok, (np.max(np.abs(pi - star)), tol.reason)
    value = float(J(thetas))
    # J(pi*) = beta log Z, and nothing exceeds it (J sums 27 products and logs)
    vtol = tolerance("float64", size=V ** N, depth=3)
    assert vtol.compare(float(ob.kl_regularised_objective(NP, star, ref, r, beta)), best).ok
    assert value <= best + vtol.rtol * max(1.0, abs(best))
    assert vtol.compare(value, best).ok
    # the same ascent, stopped early, is not there yet: the comparison can fail
    early = jax.jit(lambda th: jax.lax.fori_loop(0, 3, lambda i, t: [
        a + 4.0 * g for a, g in zip(t, grad(t), strict=True)], th))(
        [jnp.zeros((V,) * (t + 1)) for t in range(N)])
    pi3 = ob.joint_distribution(NP, [np.asarray(softmax(jxp, th)) for th in early]).reshape(-1)
    assert not tol.compare(pi3, star).ok


def test_the_chain_rule_and_the_sequence_probabilities() -> None:
    p, q = _tables(2, scale=1.0), _tables(3, scale=1.0)
    # V^N products and logs, summed over 27 sequences, against the N-stage chain
    tol = tolerance("float64", size=V ** N, depth=2 * N)
    assert tol.compare(ob.chain_rule_kl(NP, p, q), ob.sequence_kl(NP, p, q)).ok
    joint = ob.joint_distribution(NP, p)
    logs = [ob.sequence_log_prob(NP, p, x) for x in itertools.product(range(V), repeat=N)]
    assert tol.compare(np.asarray(logs), np.log(joint).reshape(-1)).ok
    assert tolerance("float64", size=V ** N).compare(joint.sum(), 1.0).ok
    flat_p, flat_q = joint.reshape(-1), ob.joint_distribution(NP, q).reshape(-1)
    ce = ob.cross_entropy(NP, flat_p, flat_q)
    assert tol.compare(ce, ob.kl(NP, flat_p, flat_q) + ob.entropy(NP, flat_p)).ok
    # per token: PPL = e^{CE/N}; bits per byte with 4 bytes per token
    ppl = ob.perplexity(NP, ce / N)
    assert tol.compare(ob.bits_per_byte(NP, ce / N, 4.0), np.log2(ppl) / 4.0).ok
    # the KL is not symmetric (Baptista, Stuart & Tran §4.1): here by far more than rounding
    reverse = ob.kl(NP, flat_q, flat_p)
    assert not tol.compare(reverse, ob.kl(NP, flat_p, flat_q)).ok


def test_maximum_likelihood_fits_the_forward_kl_not_the_reverse() -> None:
    """§4.1 of Baptista, Stuart & Tran on the tiny model: within the family of laws with
    independent tokens, gradient descent on the expected negative log-likelihood reaches the
    product of the data's marginals (the forward-KL minimiser, in closed form); descent on the
    reverse KL stops elsewhere, and each minimiser loses on the other's divergence."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from nlaverify.ops.softmaxes import softmax

    jxp = get_namespace("jax")
    p_tables = _tables(6, scale=1.0)  # dependent tokens
    p = ob.joint_distribution(NP, p_tables)
    flat_p = jnp.asarray(p.reshape(-1))

    def model(phis):  # q(x) = prod_t q_t(x_t): every table ignores the prefix
        tables = [jnp.broadcast_to(softmax(jxp, phi), (V,) * (t + 1))
                  for t, phi in enumerate(phis)]
        return jnp.reshape(ob.joint_distribution(jxp, tables), (-1,))

    def descend(loss):
        grad = jax.grad(loss)
        return jax.jit(lambda phis: jax.lax.fori_loop(0, 3000, lambda i, ph: [
            a - 1.0 * g for a, g in zip(ph, grad(ph), strict=True)], phis))(
            [jnp.zeros(V) for _ in range(N)])

    q_ml = np.asarray(model(descend(lambda ph: ob.cross_entropy(jxp, flat_p, model(ph)))))
    q_rev = np.asarray(model(descend(lambda ph: ob.kl(jxp, model(ph), flat_p))))
    marginals = [p.sum(axis=tuple(a for a in range(N) if a != t)) for t in range(N)]
    product = ob.joint_distribution(NP, [np.broadcast_to(m, (V,) * (t + 1))
                                         for t, m in enumerate(marginals)]).reshape(-1)
    # the descent stalls at rounding: N softmax stages, error amplified by 1/min q
    tol = tolerance("float64", size=V ** N, depth=N, condition=1.0 / float(product.min()))
    assert tol.compare(q_ml, product).ok, (np.max(np.abs(q_ml - product)), tol.reason)
    assert not tol.compare(q_rev, product).ok
    fwd = lambda q: float(ob.kl(NP, np.asarray(flat_p), q))  # noqa: E731
    rev = lambda q: float(ob.kl(NP, q, np.asarray(flat_p)))  # noqa: E731
    assert fwd(q_ml) < fwd(q_rev) and rev(q_rev) < rev(q_ml)


def test_zero_probabilities_follow_0_log_0() -> None:
    p, q = np.array([0.5, 0.5, 0.0]), np.array([0.25, 0.25, 0.5])
    tol = tolerance("float64", size=3, depth=2)
    assert tol.compare(ob.kl(NP, p, q), np.log(2.0)).ok
    assert tol.compare(ob.entropy(NP, p), np.log(2.0)).ok
    with pytest.raises(ArgumentError, match="'q'"):
        ob.kl(NP, q, p)  # KL(q||p) = +inf: q puts mass where p has none


# -- DPO ---------------------------------------------------------------------------------------
def _pairs(seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    lw, ll, rw, rl = (rng.normal(-20.0, 8.0, 64) for _ in range(4))
    lw[:4] = [-1.0, -1.0, -500.0, 0.0]  # margins of +-hundreds: the stable form must hold
    ll[:4] = [-900.0, -1.0, -1.0, 0.0]
    rw[:4], rl[:4] = 0.0, 0.0
    return lw, ll, rw, rl


@pytest.mark.parametrize("beta", [0.1, 1.0])
def test_dpo_loss_and_gradient_against_jax(beta: float) -> None:
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    jxp = get_namespace("jax")
    lw, ll, rw, rl = _pairs(0)
    loss = ob.dpo_loss(NP, lw, ll, rw, rl, beta)
    m = beta * ((lw - rw) - (ll - rl))
    oracle = -np.asarray(jax.nn.log_sigmoid(jnp.asarray(m)))  # an independent implementation
    # a margin of 4 terms, then the softplus (exp, log1p): a few stages on one entry
    tol = tolerance("float64", size=4, depth=3, condition=max(1.0, float(np.max(np.abs(m)))))
    assert tol.compare(loss, oracle, floor=0).ok, tol.reason
    g_w, g_l = ob.dpo_loss_grad(NP, lw, ll, rw, rl, beta)
    auto_w, auto_l = jax.grad(lambda a, b: jnp.sum(ob.dpo_loss(
        jxp, a, b, jnp.asarray(rw), jnp.asarray(rl), beta)), argnums=(0, 1))(
        jnp.asarray(lw), jnp.asarray(ll))
    gtol = tolerance("float64", size=4, depth=4)
    assert gtol.compare(g_w, np.asarray(auto_w)).ok
    assert gtol.compare(g_l, np.asarray(auto_l)).ok
    assert np.all(np.isfinite(loss)) and np.all(loss >= 0)


def test_the_gibbs_policy_makes_dpo_the_bradley_terry_likelihood() -> None:
    ref = ob.joint_distribution(NP, _tables(4)).reshape(-1)
    r = np.random.default_rng(5).normal(0.0, 1.0, V ** N)
    beta = 0.7
    star = ob.gibbs_policy(NP, ref, r, beta)
    w, lose = np.arange(0, 13), np.arange(13, 26)
    dpo = ob.dpo_loss(NP, np.log(star[w]), np.log(star[lose]), np.log(ref[w]),
                      np.log(ref[lose]), beta)
    tol = tolerance("float64", size=V ** N, depth=4, condition=1.0 / beta)
    assert tol.compare(dpo, ob.bradley_terry_nll(NP, r[w], r[lose])).ok


# -- REINFORCE ---------------------------------------------------------------------------------
THETA = np.array([0.3, -0.4, 0.1, 0.8])
REWARD = np.array([5.0, 6.0, 4.5, 5.5])  # offset from 0: the baseline matters


@pytest.mark.parametrize("b", [0.0, 5.0, -3.0])
def test_reinforce_is_unbiased_by_enumeration(b: float) -> None:
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    jxp = get_namespace("jax")
    exact = np.asarray(jax.grad(lambda t: ob.expected_reward(jxp, t, jnp.asarray(REWARD)))(
        jnp.asarray(THETA)))
    tol = tolerance("float64", size=THETA.size, depth=3, condition=float(np.max(np.abs(REWARD))))
    assert tol.compare(ob.reinforce_expectation(NP, THETA, REWARD, b), exact).ok
    assert tol.compare(ob.expected_reward_grad(NP, THETA, REWARD), exact).ok


def test_reinforce_sampled_within_its_variance_bound() -> None:
    pi = _softmax_rows(THETA)
    exact = ob.expected_reward_grad(NP, THETA, REWARD)
    n = 1_500_000  # enough for the baseline-free estimator too (its variance is ~50x)
    rng = np.random.default_rng(2024)
    y = rng.choice(THETA.size, size=n, p=pi)
    spread = []
    for b in (0.0, float(pi @ REWARD)):
        estimate = ob.reinforce_estimate(NP, THETA, y, REWARD[y], b)
        # the per-sample terms' exact variance, by enumeration of the 4 outcomes
        terms = ob.score_softmax(NP, THETA, np.arange(THETA.size)) * (REWARD - b)[:, None]
        sd = np.sqrt(pi @ terms ** 2 - exact ** 2)
        bound = 5.0 * sd / np.sqrt(n)  # 5 standard errors: a false alarm below 1e-6 a coordinate
        assert np.all(np.abs(estimate - exact) <= bound), (estimate, exact, bound)
        # not vacuous: a 10 % error in the largest coordinate exceeds the bound
        assert np.all(bound < 0.1 * np.max(np.abs(exact)))
        spread.append(sd)
    # the baseline E[r] lowers the variance here (it does not change the mean)
    assert np.all(spread[1] < spread[0])


# -- bad input ---------------------------------------------------------------------------------
def test_bad_input_names_the_argument() -> None:
    p = np.array([0.2, 0.3, 0.5])
    with pytest.raises(ArgumentError, match="'p'"):
        ob.kl(NP, np.array([0.2, 0.3, 0.6]), p)
    with pytest.raises(ArgumentError, match="'q'"):
        ob.cross_entropy(NP, p, np.array([-0.1, 0.6, 0.5]))
    with pytest.raises(ShapeError, match="'p'"):
        ob.kl(NP, p, np.array([0.5, 0.5]))
    for beta in (0.0, -1.0):
        with pytest.raises(ArgumentError, match="'beta'"):
            ob.gibbs_policy(NP, p, np.zeros(3), beta)
        with pytest.raises(ArgumentError, match="'beta'"):
            ob.dpo_loss(NP, np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(2), beta)
    with pytest.raises(ShapeError, match="'logp_l'"):
        ob.dpo_loss(NP, np.zeros(2), np.zeros(3), np.zeros(2), np.zeros(2), 0.1)
    with pytest.raises(ShapeError, match="'pi_ref'"):
        ob.gibbs_policy(NP, p, np.zeros(4), 1.0)
    tables = _tables(0)
    with pytest.raises(ShapeError, match=r"'tables'.*tables\[1\]"):
        ob.joint_distribution(NP, [tables[0], tables[2]])
    with pytest.raises(ArgumentError, match=r"'p_tables\[2\]'"):
        ob.chain_rule_kl(NP, [*tables[:2], tables[2] * 1.1], tables)
    with pytest.raises(ShapeError, match="'tokens'"):
        ob.sequence_log_prob(NP, tables, [0, 1, 3])
    with pytest.raises(ArgumentError, match="'bytes_per_token'"):
        ob.bits_per_byte(NP, 1.0, 0.0)
    with pytest.raises(ShapeError, match="'y'"):
        ob.reinforce_estimate(NP, THETA, np.array([0, 4]), np.zeros(2))
    with pytest.raises(ShapeError, match="'rewards'"):
        ob.reinforce_estimate(NP, THETA, np.array([0, 1]), np.zeros(3))
