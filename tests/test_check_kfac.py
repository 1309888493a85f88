"""K-FAC for a user's JAX model (nlaverify.check.kfac): exact where the theory says (one
example; one linear layer under a Gaussian likelihood, mean or sum), the curvature report on
a small MLP and a small Transformer-like model (taps certified against the GGN through
params), and check_kfac naming the planted user bugs: a sum instead of a mean in A, a
missing 1/N in G, the Fisher's targets taken from the data instead of the model."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

from nlaverify.check import CheckError  # noqa: E402
from nlaverify.check.kfac import check_kfac, kfac_report, model_kfac  # noqa: E402
from nlaverify.tolerance import tolerance  # noqa: E402

# -- user models, written the way users write them, with taps at their linear layers ----------


def mlp(p, x, tap):
    h = jnp.tanh(tap("mlp.in", x, x @ p["W1"] + p["b1"]))
    return tap("mlp.out", h, h @ p["W2"] + p["b2"])


MLP_LAYERS = {"mlp.in": ("W1", "b1"), "mlp.out": ("W2", "b2")}


def linear(p, x, tap):
    return tap("lin", x, x @ p["W"] + p["b"])


def transformer(p, tokens, tap):
    """One pre-norm block (single head, causal) on (B, n) tokens -> (B, n, V) logits."""
    x = p["emb"][tokens] + p["pos"][: tokens.shape[-1]]
    h = x - x.mean(-1, keepdims=True)
    h = h / jnp.sqrt((h * h).mean(-1, keepdims=True) + 1e-5)
    q, k, v = (tap(f"attn.{c}", h, h @ p[f"W{c}"]) for c in "qkv")
    s = q @ jnp.swapaxes(k, -1, -2) / jnp.sqrt(q.shape[-1])
    n = tokens.shape[-1]
    att = jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -jnp.inf), -1) @ v
    x = x + tap("attn.o", att, att @ p["Wo"])
    u = jax.nn.gelu(tap("mlp.up", x, x @ p["W1"]))
    x = x + tap("mlp.down", u, u @ p["W2"])
    return x @ p["emb"].T


TF_LAYERS = {"attn.q": "Wq", "attn.k": "Wk", "attn.v": "Wv", "attn.o": "Wo", "mlp.up": "W1",
             "mlp.down": "W2"}


@pytest.fixture(scope="module")
def data():
    ks = jax.random.split(jax.random.key(0), 15)
    p = {"W1": jax.random.normal(ks[0], (3, 5)) * 0.7, "b1": jnp.zeros(5) + 0.1,
         "W2": jax.random.normal(ks[1], (5, 4)) * 0.7, "b2": jax.random.normal(ks[2], (4,)) * .1}
    x = jax.random.normal(ks[3], (6, 3))
    y = jax.random.randint(ks[4], (6,), 0, 4)
    V, d, n = 5, 4, 3
    shapes = {"emb": (V, d), "pos": (n, d), "Wq": (d, d), "Wk": (d, d), "Wv": (d, d),
              "Wo": (d, d), "W1": (d, 2 * d), "W2": (2 * d, d)}
    tp = {name: jax.random.normal(k, s) * 0.5 for k, (name, s) in zip(ks[5:], shapes.items(),
                                                                     strict=False)}
    toks = jax.random.randint(ks[-2], (2, n), 0, V)
    tgt = jax.random.randint(ks[-1], (2, n), 0, V)
    return {"mlp": (p, {"inputs": x, "targets": y}),
            "tf": (tp, {"inputs": toks, "targets": tgt,
                        "mask": jnp.array([[1, 1, 1], [1, 1, 0]])})}


# -- exactness: where K-FAC is the exact block, it matches to the tolerance model -----------


def test_kfac_exact_for_one_example_and_for_a_gaussian_linear_layer(data):
    p, batch = data["mlp"]
    one = {"inputs": batch["inputs"][:1], "targets": batch["targets"][:1]}
    mk = model_kfac(mlp, p, one, MLP_LAYERS)
    bound = mk.bound("float64").rtol
    for row in mk.kfac_errors():
        assert row["relative_error"] <= bound, row
    # one linear layer, Gaussian: G_n = w_n I, so the mean of a a^T times sum w is exact
    ks = jax.random.split(jax.random.key(7), 3)
    pl = {"W": jax.random.normal(ks[0], (3, 2)), "b": jnp.ones(2)}
    lb = {"inputs": jax.random.normal(ks[1], (7, 3)), "targets": jax.random.normal(ks[2], (7, 2))}
    for reduction in ("mean", "sum"):
        mk = model_kfac(linear, pl, lb, {"lin": ("W", "b")}, likelihood="gaussian",
                        reduction=reduction)
        for row in mk.kfac_errors():
            assert row["relative_error"] <= mk.bound("float64").rtol, (reduction, row)
    # ... and not exact elsewhere: the six-example tanh MLP (so the test above is not vacuous)
    errs = model_kfac(mlp, p, batch, MLP_LAYERS).kfac_errors(("expand",))
    assert all(0.1 < e["relative_error"] < 2 for e in errs), errs


def test_factors_equal_a_hand_computation_on_the_mlp(data):
    """The first layer's A is the mean of [x, 1][x, 1]^T; G is sum_n w_n J_n^T H_n J_n with
    J_n = W2^T diag(1 - h_n^2) (built here by hand, not by seeds or taps)."""
    p, batch = data["mlp"]
    A_f, G_f = model_kfac(mlp, p, batch, MLP_LAYERS).factors("expand")["mlp.in"]
    x = batch["inputs"]
    a = jnp.concatenate([x, jnp.ones((6, 1))], 1)
    h = jnp.tanh(x @ p["W1"] + p["b1"])
    pr = jax.nn.softmax(h @ p["W2"] + p["b2"])
    H = jax.vmap(jnp.diag)(pr) - pr[:, :, None] * pr[:, None, :]
    J = p["W2"].T[None] * (1 - h**2)[:, None, :]                      # (n, C, d_out)
    G = jnp.einsum("ncd,nce,nef->df", J, H, J) / 6
    # products of length 6 (and C x d_out) summed in float64, both sides rounding
    assert tolerance("float64", size=a.shape[0], depth=1).compare(A_f, a.T @ a / 6).ok
    assert tolerance("float64", size=J.shape[1], depth=2).compare(G_f, G).ok


# -- the curvature report -------------------------------------------------------------------


def test_report_on_mlp_and_transformer(data):
    p, batch = data["mlp"]
    rep = kfac_report(mlp, p, batch, MLP_LAYERS, top=2, kinds=("ggn",))
    text = str(rep)
    assert "mlp.in" in text and "mlp.out" in text and "expand" in text and "reduce" in text
    mc = model_kfac(mlp, p, batch, MLP_LAYERS).curvature
    taps_tol = tolerance("float64", size=mc.size, depth=2)  # two routes to one block
    assert all(t <= taps_tol.rtol for t in rep.taps.values()), (rep.taps, taps_tol.reason)
    G = mc.dense("ggn")
    # Lanczos' top Ritz value within its certified residual of the dense eigenvalue
    top = np.linalg.eigvalsh(G)[-1]
    assert abs(rep.eigenvalues["ggn"][0] - top) <= rep.residuals["ggn"][0] + taps_tol.rtol * top
    tp, tb = data["tf"]
    rep = kfac_report(transformer, tp, tb, TF_LAYERS, kinds=())  # K-FAC only: fast
    tf_tol = tolerance("float64", size=model_kfac(transformer, tp, tb, TF_LAYERS).curvature.size,
                       depth=2)
    assert set(rep.taps) == set(TF_LAYERS) and max(rep.taps.values()) <= tf_tol.rtol, rep.taps
    by = {(e["layer"], e["mode"]): e["relative_error"] for e in rep.kfac}
    assert len(by) == 12 and all(0 < v < 2 for v in by.values()), by
    # the positions share the weight: expand and reduce are different approximations
    assert abs(by[("mlp.up", "expand")] - by[("mlp.up", "reduce")]) > 1e-3
    assert rep.as_dict()["kfac"][0]["size"] == 16


# -- a user's K-FAC code --------------------------------------------------------------------


def user_kfac(p, batch, *, a_sum=False, g_no_mean=False, samples=None, data_targets=False,
              key=None):
    """K-FAC (expand) factors of the MLP written by hand, the way a user writes them: the
    exact Fisher by the closed-form expectation over classes, or `samples` MC draws."""
    x = batch["inputs"].astype(p["W1"].dtype)
    N = x.shape[0]
    h = jnp.tanh(x @ p["W1"] + p["b1"])
    pr = jax.nn.softmax(h @ p["W2"] + p["b2"])
    one = jnp.ones((N, 1), x.dtype)
    A1, A2 = (jnp.concatenate([v, one], 1) for v in (x, h))
    A1, A2 = (v.T @ v / (1 if a_sum else N) for v in (A1, A2))
    w = 1 if g_no_mean else 1 / N
    if samples is None:
        H = jax.vmap(jnp.diag)(pr) - pr[:, :, None] * pr[:, None, :]
        J = p["W2"].T[None] * (1 - h**2)[:, None, :]
        return {"mlp.in": (A1, w * jnp.einsum("ncd,nce,nef->df", J, H, J)),
                "mlp.out": (A2, w * H.sum(0))}
    if data_targets:
        y = jnp.broadcast_to(batch["targets"], (samples, N))
    else:
        y = jax.random.categorical(key, jnp.log(pr), axis=-1, shape=(samples, N))
    g2 = pr[None] - jax.nn.one_hot(y, pr.shape[-1], dtype=pr.dtype)    # (S, N, C)
    g1 = (g2 @ p["W2"].T) * (1 - h**2)[None]
    G1 = jnp.einsum("snd,sne->de", g1, g1) * w / samples
    G2 = jnp.einsum("snd,sne->de", g2, g2) * w / samples
    return {"mlp.in": (A1, G1), "mlp.out": (A2, G2)}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_check_kfac_passes_correct_and_names_the_planted_bugs(data, dtype):
    p, batch = data["mlp"]
    ok = check_kfac(user_kfac, mlp, p, batch, MLP_LAYERS, dtype=dtype)
    assert ok, repr(ok)
    bad = check_kfac(lambda q, b: user_kfac(q, b, a_sum=True), mlp, p, batch, MLP_LAYERS,
                     dtype=dtype)
    failed = {r.check for r in bad.failures}
    assert failed == {"layer 'mlp.in' factor A", "layer 'mlp.out' factor A"}, repr(bad)
    assert "yours is 6 x the reference (positions = 6" in bad.first_failure.reason
    assert bad.first_failure.where.startswith("mlp.in.A[")
    bad = check_kfac(lambda q, b: user_kfac(q, b, g_no_mean=True), mlp, p, batch, MLP_LAYERS,
                     dtype=dtype)
    assert {r.check for r in bad.failures} == {"layer 'mlp.in' factor G",
                                               "layer 'mlp.out' factor G"}, repr(bad)


def test_check_kfac_accepts_the_same_block_split_otherwise(data):
    p, batch = data["mlp"]

    def moved(q, b):  # the 1/N on G instead of A: the same A (x) G
        f = user_kfac(q, b, a_sum=True)
        return {k: (A, G / 6) for k, (A, G) in f.items()}

    rep = check_kfac(moved, mlp, p, batch, MLP_LAYERS)
    assert rep and any("same block" in n for n in rep.notes), repr(rep)


def test_check_kfac_monte_carlo_fisher_and_targets_from_the_data(data):
    p, batch = data["mlp"]
    S = 4000
    key = jax.random.key(11)
    mc_ok = check_kfac(lambda q, b: user_kfac(q, b, samples=S, key=key), mlp, p, batch,
                       MLP_LAYERS, samples=S)
    assert mc_ok, repr(mc_ok)
    bad = check_kfac(lambda q, b: user_kfac(q, b, samples=S, data_targets=True), mlp, p,
                     batch, MLP_LAYERS, samples=S)
    assert not bad and all(r.check.endswith("factor G") for r in bad.failures), repr(bad)
    assert "targets came from the data" in bad.first_failure.reason
    assert bad.worst_ratio > 3
    # too few draws to tell: 1/N missing on an MC G is still caught (a factor 6)
    bad = check_kfac(lambda q, b: user_kfac(q, b, samples=S, key=key, g_no_mean=True), mlp, p,
                     batch, MLP_LAYERS, samples=S)
    assert {r.check for r in bad.failures} >= {"layer 'mlp.out' factor G"}, repr(bad)


# -- bad input names the argument ----------------------------------------------------------


def test_bad_input_names_the_argument(data):
    p, batch = data["mlp"]
    with pytest.raises(CheckError, match="'nope' is never tapped"):
        model_kfac(mlp, p, batch, {"nope": "W1"})
    with pytest.raises(CheckError, match="'W9' is not a leaf"):
        model_kfac(mlp, p, batch, {"mlp.in": ("W9", "b1")})
    with pytest.raises(CheckError, match=r"tap\('mlp.in', a, s\): expected a of shape"):
        model_kfac(mlp, p, batch, {"mlp.in": ("W2", "b2")})

    def tapped_after_tanh(q, x, tap):
        h = tap("mlp.in", x, jnp.tanh(x @ q["W1"] + q["b1"]))
        return h @ q["W2"] + q["b2"]

    with pytest.raises(CheckError, match="s is not a W"):
        model_kfac(tapped_after_tanh, p, batch, {"mlp.in": ("W1", "b1")})

    def twice(q, x, tap):
        h = tap("l", x, x @ q["W1"])
        return tap("l", x, x @ q["W1"])[:, :4] + h[:, :4]

    with pytest.raises(CheckError, match="tapped twice"):
        model_kfac(twice, p, batch, {"l": "W1"})
    with pytest.raises(CheckError, match="share the leaf 'W1'"):
        model_kfac(lambda q, x, tap: tap("l1", x, x @ q["W1"]) + tap("l2", x, x @ q["W1"]),
                   p, batch, {"l1": "W1", "l2": "W1"})
    def w1_used_twice(q, x, tap):  # the taps and s are right, but W1 feeds a second path
        h = jnp.tanh(tap("mlp.in", x, x @ q["W1"] + q["b1"]))
        return h @ q["W2"] + q["b2"] + 0.3 * (x @ q["W1"])[:, :4]

    with pytest.raises(CheckError, match=r"layer 'mlp\.in'.*differs from the GGN's"):
        kfac_report(w1_used_twice, p, batch, {"mlp.in": ("W1", "b1")}, kinds=())
    with pytest.raises(CheckError, match="'kinds'"):
        kfac_report(mlp, p, batch, MLP_LAYERS, kinds=("gnn",))
    with pytest.raises(CheckError, match="'model_fn'"):
        model_kfac(lambda q, x: x @ q["W1"], p, batch, {"l": "W1"})
    with pytest.raises(CheckError, match="'likelihood'"):
        model_kfac(mlp, p, batch, MLP_LAYERS, likelihood=lambda z, y: jnp.sum(z))
    with pytest.raises(CheckError, match="'layers'"):
        model_kfac(mlp, p, batch, {})
    with pytest.raises(CheckError, match="'mode'"):
        check_kfac(user_kfac, mlp, p, batch, MLP_LAYERS, mode="expanded")
    with pytest.raises(CheckError, match=r"missing layer 'mlp\.out'"):
        check_kfac(lambda q, b: {"mlp.in": user_kfac(q, b)["mlp.in"]}, mlp, p, batch,
                   MLP_LAYERS)
    raising = check_kfac(lambda q, b: 1 / 0, mlp, p, batch, MLP_LAYERS)
    assert not raising and "ZeroDivisionError" in raising.first_failure.reason
