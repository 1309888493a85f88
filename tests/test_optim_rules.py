"""The reference update rules (:mod:`nlaverify.optim.rules`, :mod:`nlaverify.optim.muon`)
against optax 0.2.8 in float64, step by step (the independent oracle), on NumPy against JAX,
under ``jax.jit``, against dense oracles (SVD polar factor, ``numpy.linalg.solve``) for Shampoo
and the natural gradient, with planted mutants that the cross-check must catch."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.optim import base as B
from nlaverify.optim import elementwise as E
from nlaverify.optim import muon as _mu
from nlaverify.optim import newton_schulz as _ns
from nlaverify.optim import rules as R
from nlaverify.tolerance import tolerance

jax = pytest.importorskip("jax")
pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
import optax.contrib  # noqa: E402

JX, NP = get_namespace("jax"), get_namespace("numpy")  # the jax namespace enables float64
STEPS, LR = 5, 0.1


@dataclass(frozen=True)
class Case:
    """One rule and its optax twin; ``stages``: dependent rounding stages per step (Muon: the
    Newton–Schulz steps plus the normalisation and the moment)."""

    name: str
    ours: Callable[[], R.Rule]
    theirs: Callable[[], object]
    stages: int = 1


CASES = [
    Case("sgd", lambda: R.sgd(LR), lambda: optax.sgd(LR)),
    Case("heavy_ball", lambda: R.momentum(LR, 0.9), lambda: optax.sgd(LR, 0.9)),
    Case("nesterov", lambda: R.momentum(LR, 0.9, nesterov=True),
         lambda: optax.sgd(LR, 0.9, nesterov=True)),
    Case("adagrad", lambda: R.adagrad(LR), lambda: optax.adagrad(LR)),
    Case("rmsprop", lambda: R.rmsprop(LR, 0.9), lambda: optax.rmsprop(LR, 0.9)),
    Case("rmsprop_nesterov", lambda: R.rmsprop(LR, 0.9, momentum=0.8, nesterov=True),
         lambda: optax.rmsprop(LR, 0.9, momentum=0.8, nesterov=True)),
    Case("adam", lambda: R.adam(LR), lambda: optax.adam(LR)),
    Case("nadam", lambda: R.adam(LR, nesterov=True), lambda: optax.adam(LR, nesterov=True)),
    Case("adamw", lambda: R.adamw(LR, weight_decay=0.1),
         lambda: optax.adamw(LR, weight_decay=0.1)),
    Case("muon", lambda: R.muon(LR), lambda: optax.contrib.muon(LR), stages=7),
    Case("muon_heavy_ball_decay", lambda: R.muon(LR, 0.9, nesterov=False, weight_decay=0.1),
         lambda: optax.contrib.muon(LR, beta=0.9, nesterov=False, weight_decay=0.1), stages=7),
    Case("muon_rms", lambda: R.muon(LR, scaling=0.2),
         lambda: optax.contrib.muon(LR, consistent_rms=0.2), stages=7),
]
#: a learning-rate schedule (optax's own: the oracle of which count each rule feeds it)
SCHEDULE = optax.linear_schedule(LR, LR / 10, STEPS - 1)
SCHEDULED = [
    Case("sgd_schedule", lambda: R.sgd(SCHEDULE), lambda: optax.sgd(SCHEDULE)),
    Case("adam_schedule", lambda: R.adam(SCHEDULE), lambda: optax.adam(SCHEDULE)),
    Case("adamw_schedule", lambda: R.adamw(SCHEDULE, weight_decay=0.1),
         lambda: optax.adamw(SCHEDULE, weight_decay=0.1)),
    Case("muon_schedule", lambda: R.muon(SCHEDULE), lambda: optax.contrib.muon(SCHEDULE),
         stages=7),
]
CASES += SCHEDULED
BY_NAME = {c.name: c for c in CASES}


def _tree(shapes: dict[str, tuple[int, ...]], seed: int) -> list[dict[str, np.ndarray]]:
    """Parameters and ``STEPS`` gradients: standard normal float64."""
    rng = np.random.default_rng(seed)
    return [{k: rng.standard_normal(s) for k, s in shapes.items()} for _ in range(STEPS + 1)]


SHAPES = {"W_wide": (3, 5), "W_tall": (6, 2), "b": (5,), "s": (1,)}


def _tol(case: Case, shapes: dict[str, tuple[int, ...]]):
    # float64, the longest accumulation is a Gram/Frobenius sum over a matrix, and the
    # errors of the STEPS steps (each with `stages` dependent stages) compound
    size = max(int(np.prod(s)) for s in shapes.values())
    return tolerance("float64", size=size, depth=STEPS * case.stages)


@functools.cache
def _optax(name: str):
    """optax's rule, its update jitted once per case (optax.contrib.muon runs eagerly at
    seconds per step); ours runs eagerly, so a monkeypatched formula takes effect."""
    tx = BY_NAME[name].theirs()
    return optax.GradientTransformation(tx.init, jax.jit(tx.update))


def _cross_check(case: Case, shapes: dict[str, tuple[int, ...]], seed: int = 0) -> float:
    """Run ours (JAX) and optax side by side for STEPS steps; the worst normwise error of the
    updates over the learning rate (directions of unit scale); asserts nothing."""
    params, *grads = _tree(shapes, seed)
    ours, theirs = case.ours(), _optax(case.name)
    p_o = {k: jnp.asarray(v) for k, v in params.items()}
    p_t = dict(p_o)
    s_o, s_t = ours.init(JX, p_o), theirs.init(p_t)
    tol, worst = _tol(case, shapes), 0.0
    for g in grads:
        g = {k: jnp.asarray(v) for k, v in g.items()}
        u_o, s_o = ours.update(JX, g, s_o, p_o)
        u_t, s_t = theirs.update(g, s_t, p_t)
        for k in shapes:
            c = tol.compare(np.asarray(u_o[k]) / LR, np.asarray(u_t[k]) / LR)
            worst = max(worst, c.normwise / tol.rtol)
        p_o, p_t = R.apply_updates(JX, p_o, u_o), optax.apply_updates(p_t, u_t)
    return worst


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_matches_optax_step_by_step(case: Case) -> None:
    assert _cross_check(case, SHAPES) <= 1.0


@given(m=st.integers(1, 5), n=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_muon_matches_optax_any_shape(m: int, n: int, seed: int) -> None:
    shapes = {"W": (m, n), "v": (n,)}
    assert _cross_check(BY_NAME["muon"], shapes, seed) <= 1.0


def _bad_bias(xp, m, beta, count):
    return m / (1 - R.const(xp, beta) ** (R.count_as(xp, count, m) + 1))


def _bad_ema(xp, m, g, beta):
    return R.const(xp, beta) * g + (1 - R.const(xp, beta)) * m  # b and 1 - b swapped


@pytest.mark.parametrize("target, attr, bad, cases", [
    (E, "bias_correction", _bad_bias, ("adam", "muon")),
    (E, "ema", _bad_ema, ("adam", "rmsprop")),
    (E, "nesterov_trace", lambda xp, v, g, b: v, ("nesterov",)),
    (E, "heavy_ball", lambda xp, v, g, b: g + v, ("heavy_ball",)),
    (E, "adagrad_direction", lambda xp, s, g, eps: g / xp.sqrt(s), ("adagrad",)),
    (E, "decoupled_decay", lambda xp, d, w, wd: d - R.const(xp, wd) * w, ("adamw",)),
    (_mu, "shape_scale", lambda xp, shape, scaling: xp.const_sqrt(max(shape[-2:]), shape[-1]),
     ("muon",)),  # Jordan's scale in place of optax's
    (_ns, "MUON", _ns.QUINTIC, ("muon",)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_planted_mutant_is_caught(monkeypatch, target, attr, bad, cases) -> None:
    # the unpatched cases pass in test_matches_optax_step_by_step
    monkeypatch.setattr(target, attr, bad)
    if attr == "MUON":  # the default coefficients are bound at construction
        monkeypatch.setitem(BY_NAME, "muon", Case("muon", lambda: R.muon(LR, ns_coeffs=bad),
                                                  BY_NAME["muon"].theirs, 7))
    for name in cases:
        assert _cross_check(BY_NAME[name], SHAPES) > 1.0, name


def test_schedule_counts_are_optaxs(monkeypatch) -> None:
    """The cases above pass with a schedule; one that feeds it t + 1 (not t) does not."""
    real = R.learning_rate
    monkeypatch.setattr(B, "learning_rate", lambda xp, lr, c: real(xp, lr, c + 1))  # Muon's
    monkeypatch.setattr(E, "learning_rate", lambda xp, lr, c: real(xp, lr, c + 1))  # the rest
    for case in SCHEDULED:
        assert _cross_check(case, SHAPES) > 1.0, case.name


#: low precision: (dtype, NumPy's dtype for the ml_dtypes path)
LOW = [("bfloat16", jnp.bfloat16), ("float16", jnp.float16)]
#: dependent elementwise rounding stages of one Adam step (two moments, their
#: corrections, square root, epsilon, division, learning rate); the moments are moving
#: averages, contractions, so earlier steps' roundings do not grow
ADAM_STAGES = 8


def _low_tol(dtype: str, shape: tuple[int, ...], matrix: bool):
    """Per-step tolerance of a low-precision update against optax's in the same dtype.
    Adam (and Muon's fallback): elementwise stages composed at random. Muon's matrix:
    Newton–Schulz, three dependent products per step, sums of ``max(shape)`` terms
    accumulated in float32 (XLA), the cancelling terms of Muon's quintic (condition
    sum of the |a_i| = 10.25): the model's bound, loose in bfloat16."""
    if not matrix:
        return tolerance(dtype, depth=ADAM_STAGES, composition="random")
    kappa = float(sum(abs(a) for a in _ns.MUON))
    return tolerance(dtype, size=max(shape), depth=3 * 5 + 2, condition=kappa,
                     composition="random", accumulation="float32")


@pytest.mark.parametrize("dtype, jdt", LOW, ids=[d for d, _ in LOW])
@pytest.mark.parametrize("name", ["adam", "adamw", "muon"])
def test_low_precision_matches_optax(name: str, dtype: str, jdt) -> None:
    """bfloat16/float16 parameters: updates in the parameters' dtype, equal to optax's step
    by step (the bias correction 1 - b2^t is computed in float64: in bfloat16 b2 = 0.999
    rounds to 1 and Adam's update to 0). Muon: a matrix and a vector (its AdamW fallback)."""
    ours, theirs = {"adam": (R.adam(LR), optax.adam(LR)),
                    "adamw": (R.adamw(LR, weight_decay=0.1), optax.adamw(LR, weight_decay=0.1)),
                    "muon": (R.muon(LR), optax.contrib.muon(LR))}[name]
    shapes = {"W": (4, 3), "b": (3,)}
    params, *grads = _tree(shapes, 6)
    p_o = {k: jnp.asarray(v, jdt) for k, v in params.items()}
    p_t = dict(p_o)
    s_o, s_t = ours.init(JX, p_o), theirs.init(p_t)
    update = jax.jit(theirs.update)
    for g in grads:
        g = {k: jnp.asarray(v, jdt) for k, v in g.items()}
        u_o, s_o = ours.update(JX, g, s_o, p_o)
        u_t, s_t = update(g, s_t, p_t)
        for k, shape in shapes.items():
            assert u_o[k].dtype == jdt, (k, u_o[k].dtype)
            tol = _low_tol(dtype, shape, name == "muon" and k == "W")
            assert tol.rtol < 1 or name == "muon", tol.reason  # Adam's is not vacuous
            assert tol.compare(np.asarray(u_o[k], np.float64) / LR,
                               np.asarray(u_t[k], np.float64) / LR).ok, (k, tol.reason)
        p_o, p_t = R.apply_updates(JX, p_o, u_o), optax.apply_updates(p_t, u_t)
    assert s_o["count"].dtype == jnp.int32 and int(s_o["count"]) == STEPS


@pytest.mark.parametrize("make", [lambda: R.adamw(LR, weight_decay=0.1), lambda: R.muon(LR),
                                  lambda: R.rmsprop(LR, momentum=0.5), lambda: R.adagrad(LR)],
                         ids=["adamw", "muon", "rmsprop", "adagrad"])
def test_numpy_bfloat16_keeps_dtypes_and_agrees_with_jax(make) -> None:
    """NumPy's bfloat16 (ml_dtypes) promotes ``array * python_float`` to float32; the
    updates and the state stay bfloat16 there too, the counter int32, and the update agrees
    with the JAX bfloat16 one (Adam's tolerance per step; Muon's matrix: the model's)."""
    import ml_dtypes

    rule = make()
    shapes = {"W": (4, 3), "b": (3,)}
    params, *grads = _tree(shapes, 7)
    runs = {}
    for xp, dt in ((NP, ml_dtypes.bfloat16), (JX, jnp.bfloat16)):
        p = {k: xp.asarray(v, dtype=dt) for k, v in params.items()}
        s0 = s = rule.init(xp, p)
        for g in grads[:2]:
            u, s = rule.update(xp, {k: xp.asarray(v, dtype=dt) for k, v in g.items()}, s, p)
        assert all(v.dtype == dt for v in u.values()), (xp.name, [v.dtype for v in u.values()])
        assert [str(x.dtype) for x in jax.tree.leaves(s)] == [
            str(x.dtype) for x in jax.tree.leaves(s0)], xp.name
        runs[xp.name] = u
    for k, shape in shapes.items():
        tol = _low_tol("bfloat16", shape, rule.name == "muon" and k == "W")
        assert tol.compare(np.asarray(runs["numpy"][k], np.float64) / LR,
                           np.asarray(runs["jax"][k], np.float64) / LR).ok, k


@pytest.mark.parametrize("name", ["momentum", "nesterov_rms", "adamw", "nadamw", "muon",
                                  "shampoo", "adagrad", "sgd_decay"])
def test_numpy_and_jit_agree_with_jax(name: str) -> None:
    rules = {
        "momentum": lambda: R.momentum(LR, 0.9), "adagrad": lambda: R.adagrad(LR),
        "nesterov_rms": lambda: R.rmsprop(LR, momentum=0.9, nesterov=True),
        "adamw": lambda: R.adamw(lambda t: LR / (1.0 + t), weight_decay=0.1),
        "nadamw": lambda: R.adamw(LR, nesterov=True), "sgd_decay": lambda: R.sgd(LR, 0.1),
        "muon": lambda: R.muon(LR, weight_decay=0.1, scaling="jordan"),
        "shampoo": lambda: R.shampoo(LR, epsilon=1e-3, beta=0.9),
    }
    rule = rules[name]()
    params, *grads = _tree(SHAPES, 1)
    runs = {}
    # Shampoo's eager JAX eigendecompositions are slow: NumPy against the jitted run only
    backends = [("numpy", NP, False), ("jit", JX, True)] + (
        [] if name == "shampoo" else [("jax", JX, False)])
    for label, xp, jit in backends:
        step = jax.jit(lambda g, s, p, xp=xp: rule.update(xp, g, s, p)) if jit else (
            lambda g, s, p, xp=xp: rule.update(xp, g, s, p))
        p = {k: xp.asarray(v) for k, v in params.items()}
        s = rule.init(xp, p)
        for g in grads:
            u, s = step({k: xp.asarray(v) for k, v in g.items()}, s, p)
            p = R.apply_updates(xp, p, u)
        runs[label] = p
    tol = tolerance("float64", size=30, depth=STEPS * 7, condition=10.0 if name == "shampoo"
                    else 1.0)  # Shampoo: eigendecompositions of conditioned statistics
    for label in runs.keys() - {"jit"}:
        for k in SHAPES:
            assert tol.compare(np.asarray(runs[label][k]), np.asarray(runs["jit"][k])).ok, (
                label, k)


def test_state_is_a_jittable_pytree_of_fixed_dtypes() -> None:
    p = {"W": jnp.ones((4, 3), jnp.float32), "b": jnp.ones((3,), jnp.float32)}
    for rule in (R.sgd(0.1), R.adamw(0.1), R.muon(0.1)):
        s0 = rule.init(JX, p)
        u, s1 = jax.jit(lambda g, s, p, rule=rule: rule.update(JX, g, s, p))(p, s0, p)
        assert jax.tree.structure(s0) == jax.tree.structure(s1)
        assert [x.dtype for x in jax.tree.leaves(s0)] == [x.dtype for x in jax.tree.leaves(s1)]
        assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(u))


def test_shampoo_first_step_is_polar_factor() -> None:
    """Shampoo with epsilon = 0, one gradient: -lr U V^T (SVD oracle) for a matrix and
    -lr g/|g| for a vector (full-matrix Adagrad)."""
    rng = np.random.default_rng(2)
    G = {"W": rng.standard_normal((4, 3)), "v": rng.standard_normal(5)}
    rule = R.shampoo(LR, epsilon=0.0)
    for xp in (NP, JX):
        g = {k: xp.asarray(v) for k, v in G.items()}
        u, _ = rule.update(xp, g, rule.init(xp, g), g)
        U, _, Vt = np.linalg.svd(G["W"], full_matrices=False)
        tol = tolerance("float64", size=4, depth=4, condition=np.linalg.cond(G["W"]) ** 2)
        assert tol.compare(np.asarray(u["W"]), -LR * U @ Vt).ok
        assert tol.compare(np.asarray(u["v"]), -LR * G["v"] / np.linalg.norm(G["v"])).ok


def test_natural_gradient_dense_and_matvec() -> None:
    rng = np.random.default_rng(3)
    params = {"a": rng.standard_normal((2, 2)), "b": rng.standard_normal(3)}
    g = {k: rng.standard_normal(v.shape) for k, v in params.items()}
    A = rng.standard_normal((7, 7))
    F = A @ A.T / 7
    lam = 0.5
    flat = np.concatenate([g["a"].ravel(), g["b"]])  # sorted keys, row-major
    want = -LR * np.linalg.solve(F + lam * np.eye(7), flat)
    tol = tolerance("float64", size=7, condition=np.linalg.cond(F + lam * np.eye(7)))
    dense = lambda xp, p, g: xp.asarray(F)  # noqa: E731
    for xp, curvature, cg in ((NP, dense, False), (JX, dense, False),
                              (JX, lambda xp, p, g: (lambda x: jnp.asarray(F) @ x), True)):
        rule = R.natural_gradient(LR, curvature, damping=lam)
        pp = {k: xp.asarray(v) for k, v in params.items()}
        u, _ = rule.update(xp, {k: xp.asarray(v) for k, v in g.items()}, rule.init(xp, pp), pp)
        got = np.concatenate([np.asarray(u["a"]).ravel(), np.asarray(u["b"])])
        # CG stops at its own relative residual (sqrt(u) x 10): compare at that level there
        if cg:  # CG stops at the relative residual 10 sqrt(u) of damped_solve's default
            bound = 10 * np.sqrt(np.finfo(float).eps) * np.linalg.cond(F + lam * np.eye(7))
            assert np.max(np.abs(got - want)) <= bound * np.abs(want).max()
        else:
            assert tol.compare(got, want).ok


def test_muon_scalings_and_fallback() -> None:
    shape = (2, 8)
    assert _mu.shape_scale(NP, shape, "optax") == 2.0  # sqrt(4): exact in binary
    assert _mu.shape_scale(NP, shape, "jordan") == 1.0
    assert _mu.shape_scale(NP, (8, 2), "jordan") == 2.0
    assert _mu.shape_scale(NP, shape, "none") == 1
    # a custom predicate sends a matrix to the fallback rule (here plain SGD)
    rule = R.muon(LR, adam=R.sgd(LR), is_matrix=lambda name, s: name != "emb")
    g = {"emb": np.ones((2, 3)), "W": np.ones((2, 3))}
    u, s = rule.update(NP, g, rule.init(NP, g), g)
    assert np.array_equal(u["emb"], -LR * g["emb"]) and set(s["mu"]) == {"W"}


@pytest.mark.parametrize("make, arg", [
    (lambda: R.sgd(-1.0), "lr"), (lambda: R.sgd(float("nan")), "lr"),
    (lambda: R.momentum(0.1, beta=1.0), "beta"), (lambda: R.adam(0.1, b2=1.5), "b2"),
    (lambda: R.adamw(0.1, eps=-1e-8), "eps"),
    (lambda: R.adamw(0.1, weight_decay=-1), "weight_decay"),
    (lambda: R.adagrad(0.1, eps="x"), "eps"), (lambda: R.rmsprop(0.1, decay=2), "decay"),
    (lambda: R.muon(0.1, ns_steps=-1), "ns_steps"),
    (lambda: R.muon(0.1, scaling="kj"), "scaling"),
    (lambda: R.muon(0.1, beta=True), "beta"), (lambda: R.shampoo(0.1, epsilon=-1), "epsilon"),
    (lambda: R.natural_gradient(0.1, None), "curvature"),
    # 0-d arrays are range-checked like numbers; flags are booleans; coefficients numbers
    (lambda: R.adam(np.asarray(-1.0)), "lr"), (lambda: R.adam(0.1, b1=np.asarray(1.5)), "b1"),
    (lambda: R.adam(0.1, eps=np.asarray(1 + 1j)), "eps"),
    (lambda: R.muon(0.1, ns_coeffs="abc"), "ns_coeffs"),
    (lambda: R.muon(0.1, ns_coeffs=(1.5, "x")), "ns_coeffs"),
    (lambda: R.momentum(0.1, nesterov="no"), "nesterov"),
    (lambda: R.adam(0.1, nesterov=1), "nesterov"),
    (lambda: R.muon(0.1, bias_correction="yes"), "bias_correction"),
])
def test_bad_hyperparameters_are_named(make, arg) -> None:
    with pytest.raises(ArgumentError, match=f"'{arg}'"):
        make()


@pytest.mark.parametrize("rule", [R.sgd(0.1), R.momentum(0.1), R.adagrad(0.1), R.rmsprop(0.1),
                                  R.adamw(0.1), R.muon(0.1), R.shampoo(0.1)],
                         ids=lambda r: r.name)
def test_mismatched_grads_are_named(rule: R.Rule) -> None:
    p = {"W": np.ones((2, 3)), "b": np.ones(3)}
    s = rule.init(NP, p)
    with pytest.raises(ShapeError, match=r"'b'.*\(3,\).*\(4,\)"):
        rule.update(NP, {"W": np.ones((2, 3)), "b": np.ones(4)}, s, p)
    with pytest.raises(ShapeError, match=r"missing \['b'\]"):
        rule.update(NP, {"W": np.ones((2, 3))}, s, p)
    with pytest.raises(ShapeError, match="'W'"):
        R.apply_updates(NP, p, {"W": np.ones((3, 2)), "b": np.ones(3)})


def test_zero_d_array_hyperparameters_work() -> None:
    rule = R.adam(np.asarray(0.1), b1=np.asarray(0.9))
    g = {"w": np.ones(3)}
    u, _ = rule.update(NP, g, rule.init(NP, g))
    assert np.allclose(u["w"], -0.1, rtol=tolerance("float64", depth=ADAM_STAGES).rtol)


def test_another_rules_state_is_named() -> None:
    g = {"W": np.ones((2, 3))}
    for rule, other in ((R.adam(0.1), R.sgd(0.1)), (R.sgd(0.1), R.adam(0.1)),
                        (R.muon(0.1), R.momentum(0.1)), (R.rmsprop(0.1), R.adagrad(0.1))):
        with pytest.raises(ArgumentError, match=r"'state'.*keys"):
            rule.update(NP, g, other.init(NP, g), g)


def test_adagrad_propagates_nan_like_optax() -> None:
    g = {"w": np.array([np.nan, 1.0])}
    rule = R.adagrad(LR)
    u, _ = rule.update(NP, g, rule.init(NP, g))
    tx = optax.adagrad(LR)
    want, _ = tx.update({"w": jnp.asarray(g["w"])}, tx.init({"w": jnp.asarray(g["w"])}))
    assert np.isnan(u["w"][0]) and np.isnan(np.asarray(want["w"])[0])
    assert u["w"][1] == pytest.approx(float(want["w"][1]), rel=tolerance("float64").rtol)


def test_muon_empty_matrix_has_an_empty_update() -> None:
    rule = R.muon(LR)
    for shape in ((0, 4), (4, 0)):
        g = {"W": np.zeros(shape), "b": np.ones(2)}
        u, _ = rule.update(NP, g, rule.init(NP, g), g)
        assert u["W"].shape == shape and np.all(np.isfinite(u["b"]))


@pytest.mark.parametrize("nesterov", [False, True])
def test_muon_bias_correction_matters_only_with_nesterov(nesterov: bool) -> None:
    """Module docstring of nlaverify.optim.muon: with eps = 0, bias correction only rescales
    the momentum without Nesterov (same update), but with Nesterov it changes the update."""
    params, *grads = _tree({"W": (3, 4)}, 8)
    runs = []
    for bc in (True, False):
        rule = R.muon(LR, nesterov=nesterov, eps=0.0, bias_correction=bc)
        s, us = rule.init(NP, params), []
        for g in grads:
            u, s = rule.update(NP, g, s, params)
            us.append(u["W"] / LR)
        runs.append(np.stack(us))
    tol = tolerance("float64", size=4, depth=7)
    assert tol.compare(runs[0], runs[1]).ok is (not nesterov)


def test_weight_decay_needs_params() -> None:
    for rule in (R.sgd(0.1, 0.1), R.adamw(0.1), R.muon(0.1, weight_decay=0.1)):
        g = {"W": np.ones((2, 3))}
        with pytest.raises(ArgumentError, match="'params'"):
            rule.update(NP, g, rule.init(NP, g), None)


@pytest.mark.parametrize("backend", ["strict", "mpmath"])
def test_other_namespaces_agree(backend: str) -> None:
    """The same rules on array-api-strict (no implicit host conversion) and on mpmath at 50
    digits (the high-precision reference for NumPy's float64 run)."""
    from nlaverify.backends import to_float64

    xp = get_namespace(backend)
    params, *grads = _tree(SHAPES, 4)
    for rule in (R.adamw(LR, weight_decay=0.1), R.muon(LR), R.rmsprop(LR, momentum=0.5)):
        runs = {}
        for label, ns in (("numpy", NP), (backend, xp)):
            p = {k: ns.asarray(v) for k, v in params.items()}
            s = rule.init(ns, p)
            for g in grads[:2]:
                u, s = rule.update(ns, {k: ns.asarray(v) for k, v in g.items()}, s, p)
                p = R.apply_updates(ns, p, u)
            runs[label] = {k: to_float64(v) for k, v in p.items()}
        tol = tolerance("float64", size=30, depth=2 * 7)
        for k in SHAPES:
            assert tol.compare(runs["numpy"][k], runs[backend][k]).ok, (rule.name, k)


def _jordan_muon(params: dict, grads: list, lr: float, beta: float) -> dict:
    """Keller Jordan's reference Muon step (github.com/KellerJordan/Muon, PyTorch), written
    out in NumPy: ``buf.lerp_(g, 1 - beta)``, Nesterov ``g.lerp_(buf, beta)``, his quintic
    with ``X / (|X|_F + 1e-7)`` on the wide side, ``max(1, rows/cols)**0.5``, no bias
    correction."""
    a, b, c = 3.4445, -4.7750, 2.0315
    p, buf = dict(params), {k: np.zeros_like(v) for k, v in params.items()}
    for g in grads:
        for k in p:
            buf[k] = buf[k] + (1 - beta) * (g[k] - buf[k])
            X = g[k] + beta * (buf[k] - g[k])
            tall = X.shape[0] > X.shape[1]
            X = X.T if tall else X
            X = X / (np.linalg.norm(X) + 1e-7)
            for _ in range(5):
                A = X @ X.T
                X = a * X + (b * A + c * A @ A) @ X
            X = X.T if tall else X
            p[k] = p[k] - lr * X * max(1, X.shape[0] / X.shape[1]) ** 0.5
    return p


def test_muon_jordan_conventions_match_his_reference() -> None:
    shapes = {"wide": (3, 5), "tall": (6, 2)}
    params, *grads = _tree(shapes, 5)
    rule = R.muon(LR, 0.95, eps=1e-7, scaling="jordan", bias_correction=False)
    p, s = dict(params), rule.init(NP, params)
    for g in grads:
        u, s = rule.update(NP, g, s, p)
        p = R.apply_updates(NP, p, u)
    want = _jordan_muon(params, grads, LR, 0.95)
    tol = tolerance("float64", size=30, depth=STEPS * 7)
    for k in shapes:
        assert tol.compare(p[k], want[k]).ok, k
    # and optax's scale on the tall matrix is not his: the default differs there
    assert _mu.shape_scale(NP, (6, 2), "optax") != _mu.shape_scale(NP, (6, 2), "jordan")
