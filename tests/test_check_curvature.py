"""Curvature of a user's JAX model (nlaverify.check.curvature): products against dense
autodiff references built here independently (jax.jacfwd of the outputs, jax.hessian of the
loss in z and in the parameters), GGN = Fisher for the categorical likelihood, and
check_curvature naming a buggy user GGN (J^T J, the loss Hessian missing) at its entry."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402

from nlaverify.check import CheckError, model_curvature  # noqa: E402
from nlaverify.check.curvature import check_curvature, curvature_bound  # noqa: E402
from nlaverify.check.function_estimators import FALSE_ALARM  # noqa: E402
from nlaverify.tolerance import tolerance  # noqa: E402

# -- two user models, written the way users write them --------------------------------------


def mlp(params, x):
    h = jnp.tanh(x @ params["W1"] + params["b1"])
    return h @ params["W2"] + params["b2"]


def mlp_params(key):
    k1, k2, k3 = jax.random.split(key, 3)
    return {"W1": jax.random.normal(k1, (3, 5)) * 0.7, "b1": jnp.zeros(5) + 0.1,
            "W2": jax.random.normal(k2, (5, 4)) * 0.7,
            "b2": jax.random.normal(k3, (4,)) * 0.1}


def transformer(params, tokens):
    """One pre-norm block (single head, causal) on (B, n) tokens -> (B, n, V) logits."""
    x = params["emb"][tokens] + params["pos"][: tokens.shape[-1]]
    h = x - x.mean(-1, keepdims=True)
    h = h / jnp.sqrt((h * h).mean(-1, keepdims=True) + 1e-5)
    q, k, v = h @ params["Wq"], h @ params["Wk"], h @ params["Wv"]
    s = q @ jnp.swapaxes(k, -1, -2) / jnp.sqrt(q.shape[-1])
    n = tokens.shape[-1]
    s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -jnp.inf)
    x = x + jax.nn.softmax(s, -1) @ v @ params["Wo"]
    x = x + jax.nn.gelu(x @ params["W1"]) @ params["W2"]
    return x @ params["emb"].T


def transformer_params(key, V=5, d=4, n=3):
    ks = jax.random.split(key, 8)
    shapes = {"emb": (V, d), "pos": (n, d), "Wq": (d, d), "Wk": (d, d), "Wv": (d, d),
              "Wo": (d, d), "W1": (d, 2 * d), "W2": (2 * d, d)}
    return {name: jax.random.normal(k, s) * 0.5 for k, (name, s) in zip(ks, shapes.items(),
                                                                       strict=True)}


def ce_loss(model):
    def loss_fn(params, batch):
        logp = jax.nn.log_softmax(model(params, batch["inputs"]), -1)
        return -jnp.take_along_axis(logp, batch["targets"][..., None], -1).mean()
    return loss_fn


@pytest.fixture(scope="module")
def cases():
    key = jax.random.key(0)
    x = jax.random.normal(jax.random.key(1), (6, 3))
    y = jax.random.randint(jax.random.key(2), (6,), 0, 4)
    toks = jax.random.randint(jax.random.key(3), (2, 3), 0, 5)
    tgt = jax.random.randint(jax.random.key(4), (2, 3), 0, 5)
    return {"mlp": (mlp, mlp_params(key), {"inputs": x, "targets": y}),
            "transformer": (transformer, transformer_params(key),
                            {"inputs": toks, "targets": tgt})}


def dense_ggn(model, params, batch):
    """J^T H_L J built densely: jax.jacfwd of the logits, jax.hessian of the loss in z."""
    flat, unravel = ravel_pytree(params)
    z = model(params, batch["inputs"])
    J = jax.jit(jax.jacfwd(lambda t: model(unravel(t), batch["inputs"])))(flat)
    J = J.reshape(z.size, -1)

    def loss_of_z(zf):
        logp = jax.nn.log_softmax(zf.reshape(z.shape), -1)
        return -jnp.take_along_axis(logp, batch["targets"][..., None], -1).mean()

    H = jax.jit(jax.hessian(loss_of_z))(z.reshape(-1))
    return np.asarray(J.T @ H @ J)


def mc_fisher_reference(model, params, batch, samples):
    r"""The exact law of the Monte-Carlo Fisher (mean reduction, categorical likelihood):
    :math:`\hat F = \frac1N\sum_i \frac1S\sum_s u_{si}u_{si}^\top`, :math:`u = J_i^\top(p_i -
    e_y)`, :math:`y \sim \mathrm{Cat}(p_i)`, enumerated over the C classes. Returns (F, sd,
    A, w): the mean, the entrywise standard deviation of :math:`\hat F`, the per-example
    per-class terms :math:`u u^\top` (N, C, P, P) and their probabilities (N, C)."""
    flat, unravel = ravel_pytree(params)
    z = model(params, batch["inputs"])
    J = np.asarray(jax.jacfwd(lambda t: model(unravel(t), batch["inputs"]))(flat))
    p = np.asarray(jax.nn.softmax(z, -1))
    N = p.shape[0]
    U = np.einsum("nc,ncp->np", p, J)[:, None, :] - J          # (N, C, P)
    A = np.einsum("nyp,nyq->nypq", U, U)
    m = np.einsum("ny,nypq->npq", p, A)
    var = np.einsum("ny,nypq->npq", p, A * A) - m * m           # one draw, example n
    return m.sum(0) / N, np.sqrt(var.sum(0) / (N * N * samples)), A, p / N


def mc_fisher_projection(F_hat, F, A, pw, samples):
    r"""The z-score and sd of :math:`t = \langle\hat F, F\rangle/\|F\|_F^2` (mean 1):
    :math:`\operatorname{Var} t = \sum_i w_i^2\operatorname{Var}_y(u^\top F u)/(S\|F\|_F^4)`
    exactly, so a relative error :math:`\delta` in the Fisher's scale is detected w.p.
    >= 0.99 once :math:`\delta \ge (z_\alpha + z_{0.99})\,\mathrm{sd}`."""
    f2 = float(np.sum(F * F))
    q = np.einsum("nypq,pq->ny", A, F)                          # u^T F u per example, class
    N = pw.shape[0]
    p = pw * N
    var = np.sum((np.sum(p * q * q, 1) - np.sum(p * q, 1) ** 2) / N**2) / samples
    sd = float(np.sqrt(var)) / f2
    return (float(np.sum(F_hat * F)) / f2 - 1.0) / sd, sd


def _bound(mc):
    return curvature_bound(mc, "float64").rtol


@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_ggn_fisher_hessian_against_dense_autodiff(cases, name):
    model, params, batch = cases[name]
    mc = model_curvature(ce_loss(model), params, batch, model_fn=model)
    rtol = _bound(mc)
    G = dense_ggn(model, params, batch)
    scale = max(1.0, np.abs(G).max())
    assert np.abs(mc.dense("ggn") - G).max() <= rtol * scale
    # the exact Fisher by the square-root route equals the GGN (categorical likelihood)
    assert np.abs(mc.dense("fisher") - G).max() <= rtol * scale
    if name == "mlp":  # the Hessian product against jax.hessian (the MLP: fast to build)
        flat, unravel = ravel_pytree(params)
        Hd = np.asarray(jax.jit(jax.hessian(lambda t: ce_loss(model)(unravel(t), batch)))(flat))
        assert np.abs(mc.dense("hessian") - Hd).max() <= rtol * max(1.0, np.abs(Hd).max())
    # pytree in, pytree out
    v = jax.tree.map(jnp.ones_like, params)
    out = mc.matvec(v)
    assert jax.tree.structure(out) == jax.tree.structure(params)
    assert np.abs(ravel_pytree(out)[0] - G @ np.ones(mc.size)).max() <= rtol * scale


def test_empirical_and_monte_carlo_fisher(cases):
    model, params, batch = cases["mlp"]
    mc = model_curvature(None, params, batch, model_fn=model, samples=4000, seed=1)
    flat, unravel = ravel_pytree(params)
    z = model(params, batch["inputs"])
    J = jax.jit(jax.jacfwd(lambda t: model(unravel(t), batch["inputs"])))(flat)  # (n, C, P)
    g = jax.nn.softmax(z) - jax.nn.one_hot(batch["targets"], 4)
    u = jnp.einsum("nc,ncp->np", g, J)
    emp = np.asarray(u.T @ u / z.shape[0])
    got = mc.dense("empirical_fisher")
    assert np.abs(got - emp).max() <= _bound(mc) * max(1.0, np.abs(emp).max())
    # the MC Fisher is a Monte-Carlo mean of the GGN: an entrywise z-test with the exact sd
    # (the law of u u^T enumerated over the classes), Bonferroni over the P^2 entries, and a
    # z-test of the projection t = <F_mc, G>/|G|^2. Power (tests/test_power.py): at S = 4000
    # the projection detects a 4.3 % error in the Fisher's scale w.p. >= 0.99 (sd 0.0060,
    # z 4.9 + 2.33); the old band (24 x max|G| sqrt(2/S) = 0.54 max|G|) let through the
    # Fisher x 1.1 (any scale error below ~50 %). Cost ~1.8 s (was 1.4 s).
    F_mc, G = mc.dense("fisher"), dense_ggn(model, params, batch)
    F, sd, A, pw = mc_fisher_reference(model, params, batch, 4000)
    assert np.abs(F - G).max() <= _bound(mc) * max(1.0, np.abs(G).max())
    zc = NormalDist().inv_cdf(1 - FALSE_ALARM / (2 * F.size))
    assert np.all(np.abs(F_mc - F) <= zc * sd + _bound(mc) * np.abs(F).max()), "fisher entry"
    z, sd_t = mc_fisher_projection(F_mc, F, A, pw, 4000)
    z1 = NormalDist().inv_cdf(1 - FALSE_ALARM / 2)               # one statistic: 4.9
    assert abs(z) <= z1, ("fisher projection", z)
    assert (z1 + NormalDist().inv_cdf(0.99)) * sd_t <= 0.10        # the stated power
    # it is sampled, not the exact one: off by a tenth of a standard error at least
    assert np.abs(F_mc - F).max() > 0.1 * sd.max()


def test_eigenvalues_and_natural_gradient(cases):
    model, params, batch = cases["mlp"]
    mc = model_curvature(None, params, batch, model_fn=model)
    G = dense_ggn(model, params, batch)
    pairs = mc.top_eigenvalues(2)
    exact = np.sort(np.linalg.eigvalsh(G))[::-1][:2]
    assert np.all(np.abs(pairs.values - exact) <= pairs.residuals + _bound(mc) * exact[0])
    d, sol = mc.natural_gradient(1e-2, kind="ggn")
    grad = ravel_pytree(mc.gradient())[0]
    ref = np.linalg.solve(G + 1e-2 * np.eye(mc.size), grad)
    # CG stops at the relative residual 10 sqrt(u) (nlaverify.curvature.solvers.damped_solve);
    # the forward error is then at most kappa(G + lambda I) times it
    cg_rtol = 10 * np.sqrt(np.finfo(np.float64).eps)
    assert sol.residual <= cg_rtol
    kappa = np.linalg.cond(G + 1e-2 * np.eye(mc.size))
    assert np.abs(ravel_pytree(d)[0] - ref).max() <= kappa * cg_rtol * np.abs(ref).max()
    text = mc.summary(top=2, kinds=("ggn", "empirical_fisher"))
    assert "ggn" in text and "empirical_fisher" in text and "+-" in text
    assert f"{exact[0]:.4g}"[:4] in text


def test_check_curvature_passes_correct_and_names_missing_loss_hessian(cases):
    model, params, batch = cases["transformer"]

    @jax.jit
    def my_ggn(p, b, v):           # correct: jvp, softmax-CE Hessian, vjp (mean over tokens)
        f = lambda q: model(q, b["inputs"])  # noqa: E731
        z, Jv = jax.jvp(f, (p,), (v,))
        pr = jax.nn.softmax(z, -1)
        HJv = (pr * Jv - pr * (pr * Jv).sum(-1, keepdims=True)) / z[..., 0].size
        return jax.vjp(f, p)[1](HJv)[0]

    @jax.jit
    def my_ggn_buggy(p, b, v):     # J^T J: the loss Hessian forgotten
        f = lambda q: model(q, b["inputs"])  # noqa: E731
        z, Jv = jax.jvp(f, (p,), (v,))
        return jax.vjp(f, p)[1](Jv / z[..., 0].size)[0]

    ok = check_curvature(my_ggn, None, params, batch, model_fn=model)
    assert ok, repr(ok)
    bad = check_curvature(my_ggn_buggy, None, params, batch, model_fn=model)
    assert not bad.ok
    row = bad.first_failure
    assert row.check == "ggn product, probe 0"
    assert row.where.startswith("['") and "[" in row.where[2:], row.where  # e.g. ['W2'][3, 1]
    assert row.ratio > 1e6
    assert "ggn product" in repr(bad)
    # float32 (on the MLP, faster to compile): the correct product passes, the buggy fails
    model, params, batch = cases["mlp"]
    ok32 = check_curvature(my_ggn, None, params, batch, model_fn=model, dtype="float32")
    assert ok32, repr(ok32)
    bad32 = check_curvature(my_ggn_buggy, None, params, batch, model_fn=model, dtype="float32")
    assert not bad32 and bad32.worst_ratio > 100, repr(bad32)


def test_check_curvature_hessian_sign_bug(cases):
    model, params, batch = cases["mlp"]
    loss = ce_loss(model)

    @jax.jit
    def hvp(p, b, v):
        return jax.jvp(jax.grad(lambda q: loss(q, b)), (p,), (v,))[1]

    def hvp_bad(p, b, v):  # the second-order term of the tanh layer with the wrong sign
        return jax.tree.map(lambda a, c: a - 0.01 * c, hvp(p, b, v), v)

    assert check_curvature(hvp, loss, params, batch, kind="hessian")
    assert not check_curvature(hvp_bad, loss, params, batch, kind="hessian")


def test_bound_comes_from_the_tolerance_model(cases):
    model, params, batch = cases["mlp"]
    mc = model_curvature(None, params, batch, model_fn=model)
    t = curvature_bound(mc, "float32")
    assert t.rtol < tolerance("float32", size=10**6, depth=1000).rtol
    assert "kappa" in t.reason


def test_bad_input_names_the_argument(cases):
    model, params, batch = cases["mlp"]
    with pytest.raises(CheckError, match="'kind'"):
        model_curvature(None, params, batch, model_fn=model, kind="gnn")
    with pytest.raises(CheckError, match="'batch'"):
        model_curvature(None, params, (batch["inputs"],), model_fn=model)
    with pytest.raises(CheckError, match="needs model_fn"):
        model_curvature(ce_loss(model), params, batch, kind="ggn")
    with pytest.raises(CheckError, match="disagree"):
        model_curvature(lambda p, b: 2 * ce_loss(model)(p, b), params, batch, model_fn=model)
    with pytest.raises(CheckError, match="targets"):
        model_curvature(None, params, {"inputs": batch["inputs"], "targets": batch["targets"][:3]},
                        model_fn=model)
    mc = model_curvature(None, params, batch, model_fn=model)
    with pytest.raises(CheckError, match="'v'"):
        mc.matvec(jnp.ones(3))
    with pytest.raises(CheckError, match="no Fisher"):
        model_curvature(None, params, batch, model_fn=model,
                        likelihood=lambda z, y: jnp.sum(z**2)).operator("fisher")
    raising = check_curvature(lambda p, b, v: 1 / 0, None, params, batch, model_fn=model)
    assert not raising.ok and "ZeroDivisionError" in raising.first_failure.reason


def test_low_precision_bound_is_not_vacuous_and_monte_carlo_is_refused(cases):
    """bfloat16: tens of stages composed in quadrature with float32 sums give a bound below 1
    (the linear rule gave 13.8: no bfloat16 bug could fail); a Monte-Carlo product is random
    and is refused with the way to check it."""
    model, params, batch = cases["mlp"]
    mc = model_curvature(None, params, batch, model_fn=model)
    assert curvature_bound(mc, "bfloat16").rtol < 1  # an error the size of Cv is seen
    with pytest.raises(CheckError, match=r"argument 'samples'.*mc_fisher"):
        check_curvature(lambda p, b, v: v, None, params, batch, model_fn=model,
                        kind="fisher", samples=16)


def test_failing_product_is_diagnosed(cases):
    """The note names what a wrong GGN product equals (issue 24, item 2): the loss Hessian
    left out, its diagonal only, the Hessian for the GGN, a sum for the mean, a factor; a
    correct product gets no note, and a product matching none gets none."""
    model, params, batch = cases["mlp"]
    loss = ce_loss(model)
    f_of = lambda b: (lambda q: model(q, b["inputs"]))  # noqa: E731

    def ggn(diag_only=False, hessian=True, scale=1.0):
        @jax.jit
        def product(p, b, v):
            f = f_of(b)
            z, Jv = jax.jvp(f, (p,), (v,))
            pr = jax.nn.softmax(z, -1)
            HJv = pr * Jv - (0 if diag_only else pr * (pr * Jv).sum(-1, keepdims=True))
            HJv = (HJv if hessian else Jv) / z[..., 0].size
            return jax.tree.map(lambda a: scale * a, jax.vjp(f, p)[1](HJv)[0])
        return product

    @jax.jit
    def hvp(p, b, v):
        return jax.jvp(jax.grad(lambda q: loss(q, b)), (p,), (v,))[1]

    @jax.jit
    def noise(p, b, v):
        return jax.tree.map(lambda a: a + 0.3 * jnp.sin(a), ggn()(p, b, v))

    expect = {"J^T W J v: the loss Hessian H_l left out": ggn(hessian=False),
              "only the diagonal of the categorical loss Hessian": ggn(diag_only=True),
              "the hessian product (kind='hessian'), not the ggn": hvp,
              "without the position weights": ggn(scale=float(np.size(batch["targets"]))),
              }
    for note, fn in expect.items():
        rep = check_curvature(fn, loss, params, batch, model_fn=model)
        assert not rep.ok and any(note in n for n in rep.notes), (note, rep.notes)
    rep = check_curvature(ggn(scale=2.0), loss, params, batch, model_fn=model)
    assert any("is 2 times the ggn product" in n for n in rep.notes), rep.notes
    ok = check_curvature(ggn(), loss, params, batch, model_fn=model)
    assert ok and not any(n.startswith("your product") for n in ok.notes)
    rep = check_curvature(noise, loss, params, batch, model_fn=model)
    assert not rep.ok and not any(n.startswith("your product") for n in rep.notes), rep.notes
