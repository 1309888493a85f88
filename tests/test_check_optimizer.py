"""``nlaverify.check.check_optimizer``: correct peers (torch.optim, optax, users' own steps)
pass in float64, float32 and bfloat16; each planted user bug fails, named at its step and
leaf; bad input is a CheckError naming the argument, or a failed row with the exception."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from nlaverify.check import CheckError, check_optimizer
from nlaverify.check.optimizer import DEFAULT_SHAPES, MIN_TOP_SINGULAR_VALUE, _draw

torch = pytest.importorskip("torch")
optax = pytest.importorskip("optax")
pytest.importorskip("optax.contrib")

LR, WD = 0.1, 0.1
ADAMW = ("adamw", dict(lr=LR, weight_decay=WD))
MATRICES = {"W": np.zeros((4, 6)), "V": np.zeros((6, 3))}  # Muon without a fallback leaf


def torch_adamw(p):
    return torch.optim.AdamW(p, lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=WD)


# --------------------------------------------------------------------- users' own steps


def user_adam(lr=LR, b1=0.9, b2=0.999, eps=1e-8, wd=WD, *, coupled=False, bias=True,
              shift=0, eps_in_sqrt=False):
    """AdamW as people write it in PyTorch, with the switches of the usual bugs."""

    def init(params):
        return {"t": 0, "m": {k: torch.zeros_like(v) for k, v in params.items()},
                "v": {k: torch.zeros_like(v) for k, v in params.items()}}

    def step(params, grads, state):
        t = state["t"] + 1
        new, m, v = {}, {}, {}
        for k, w in params.items():
            g = grads[k] + wd * w if coupled else grads[k]  # coupled: L2 in the gradient
            m[k] = b1 * state["m"][k] + (1 - b1) * g
            v[k] = b2 * state["v"][k] + (1 - b2) * g * g
            mh, vh = (m[k] / (1 - b1 ** (t + shift)), v[k] / (1 - b2 ** (t + shift))) \
                if bias else (m[k], v[k])
            d = mh / torch.sqrt(vh + eps) if eps_in_sqrt else mh / (torch.sqrt(vh) + eps)
            new[k] = w - lr * (d if coupled else d + wd * w)
        return new, {"t": t, "m": m, "v": v}

    return step, init


def user_muon(lr=LR, beta=0.95, eps=1e-8, *, normalise=True):
    """optax.contrib.muon's conventions in NumPy (Nesterov with bias corrections, the
    transpose trick, shape scale sqrt(max(1, n/m))), for matrices only."""
    a, b, c = 3.4445, -4.7750, 2.0315

    def init(params):
        return {"t": 0, "mu": {k: np.zeros_like(v) for k, v in params.items()}}

    def step(params, grads, state):
        t = state["t"] + 1
        new, mu = {}, {}
        for k, w in params.items():
            g = grads[k]
            mu[k] = beta * state["mu"][k] + (1 - beta) * g
            X = beta * mu[k] / (1 - beta ** (t + 1)) + (1 - beta) * g / (1 - beta ** t)
            tall = X.shape[0] > X.shape[1]
            X = X.T if tall else X
            if normalise:
                X = X / (np.sqrt(np.sum(X * X)) + eps)
            for _ in range(5):
                A = X @ X.T
                X = a * X + (b * A + c * A @ A) @ X
            X = X.T if tall else X
            new[k] = w - lr * np.sqrt(max(1.0, w.shape[1] / w.shape[0])) * X
        return new, {"t": t, "mu": mu}

    return step, init


def user_shampoo(lr=LR, epsilon=1e-6, root=4):
    """Shampoo in PyTorch (eigh, pseudo-inverse 4th roots; a vector: L^{-1/2} g)."""

    def inv_root(S, p):
        w, Q = torch.linalg.eigh(S)
        keep = w > 32 * math.sqrt(S.shape[0]) * torch.finfo(S.dtype).eps / 2 * w.max()
        f = torch.where(keep, w.clamp_min(torch.finfo(S.dtype).tiny) ** (-1.0 / p),
                        torch.zeros_like(w))
        return (Q * f) @ Q.T

    def init(params):
        return {k: tuple(epsilon * torch.eye(n, dtype=v.dtype) for n in v.shape)
                for k, v in params.items()}

    def step(params, grads, stats):
        new, out = {}, {}
        for k, w in params.items():
            g = grads[k]
            if g.ndim == 1:
                L = stats[k][0] + torch.outer(g, g)
                out[k] = (L,)
                new[k] = w - lr * inv_root(L, 2) @ g
            else:
                L, R = stats[k][0] + g @ g.T, stats[k][1] + g.T @ g
                out[k] = (L, R)
                new[k] = w - lr * inv_root(L, root) @ g @ inv_root(R, root)
        return new, out

    return step, init


# --------------------------------------------------------------------- correct peers


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_torch_adamw_is_adamw_over_seeds(dtype: str) -> None:
    """torch.optim.AdamW(lr, betas, eps, weight_decay) IS optax's adamw (module docstring):
    never a false alarm, over 20 seeds (the worst ratio is 0.04 in float32, 0.19 in
    bfloat16 over 50)."""
    for seed in range(20):
        report = check_optimizer(torch_adamw, ADAMW, dtype=dtype, seed=seed)
        assert report, report
        # one update row per step and leaf, every one resolved (none inconclusive)
        updates = [r for r in report.ran if r.check.startswith("update")]
        assert len(updates) == len(DEFAULT_SHAPES) * 5 and not report.inconclusive
    # the rows name the step and the leaf, and the bound says why it has its value
    row = [r for r in report.rows if r.check == "step 5"][-1]
    assert row.where.startswith("params['b'][")
    assert "after 5 steps" in row.reason and "D=40" in row.reason
    row = report.rows[-1]
    assert row.check == "update 5" and row.where.startswith("update['b'][")
    assert "storage" in row.reason and "resolves relative update errors" in row.reason


def test_torch_class_with_options() -> None:
    report = check_optimizer(torch.optim.AdamW, ADAMW, dtype="float32",
                             options=dict(lr=LR, weight_decay=WD))
    assert report and report.subject == "AdamW"
    # torch's default weight decay is 1e-2, optax's 1e-4: the defaults differ
    assert not check_optimizer(torch.optim.AdamW, ("adamw", dict(lr=LR)), options=dict(lr=LR))


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
@pytest.mark.parametrize("name, tx, rule", [
    ("adamw", lambda: optax.adamw(LR, weight_decay=WD), ADAMW),
    ("muon", lambda: optax.contrib.muon(LR), ("muon", dict(lr=LR))),
    ("rmsprop", lambda: optax.rmsprop(LR, momentum=0.9), ("rmsprop", dict(lr=LR,
                                                                          momentum=0.9))),
], ids=lambda v: v if isinstance(v, str) else "")
def test_optax_peers_pass(name, tx, rule, dtype: str) -> None:
    for seed in range(1 if name == "muon" else 2):  # Muon: a jit compilation of 2 s each
        report = check_optimizer(tx(), rule, dtype=dtype, seed=seed)
        assert report.ran and not report.failures, report
        if dtype == "bfloat16" and name != "adamw":
            # the error models of Muon (17 stages, kappa 9.25) and RMSprop with momentum
            # (kappa = t) reach a bound of 1 in bfloat16: those rows are inconclusive, never
            # passes, and the report is not ok unless they are allowed
            assert report.inconclusive and not report.ok, report
            assert any("cannot resolve this rule's update" in r.reason
                       for r in report.inconclusive), report
        else:
            assert report, report


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("nesterov", [False, True])
def test_torch_sgd_momentum_is_momentum(nesterov: bool, dtype: str) -> None:
    report = check_optimizer(
        lambda p: torch.optim.SGD(p, lr=LR, momentum=0.9, nesterov=nesterov),
        ("momentum", dict(lr=LR, beta=0.9, nesterov=nesterov)), dtype=dtype)
    assert report, report


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_users_correct_steps_pass(dtype: str) -> None:
    step, init = user_adam()
    assert check_optimizer(step, ADAMW, init=init, dtype=dtype)
    step, init = user_muon()
    assert check_optimizer(step, ("muon", dict(lr=LR)), init=init, params=MATRICES,
                           dtype=dtype)
    step, init = user_shampoo()
    report = check_optimizer(step, ("shampoo", dict(lr=LR)), init=init, dtype=dtype)
    assert report, report


# --------------------------------------------------------------------- planted bugs


def _killed(report, step: int = 1) -> None:
    first = report.first_failure
    assert first is not None, report
    assert first.check == f"step {step}", report
    assert first.where.startswith("params['") and first.where.endswith("]"), first.where
    assert first.ratio > 1


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("bug, kw, step", [
    ("coupled decay (L2)", dict(coupled=True), 1),
    ("no bias correction", dict(bias=False), 1),
    ("bias correction one step ahead", dict(shift=1), 1),
], ids=lambda v: v if isinstance(v, str) else "")
def test_adam_bugs_are_killed(bug: str, kw: dict, step: int, dtype: str) -> None:
    fn, init = user_adam(**kw)
    _killed(check_optimizer(fn, ADAMW, init=init, dtype=dtype), step)


def test_torch_adam_with_weight_decay_is_not_adamw() -> None:
    """The real-world form of the coupled-decay bug: torch.optim.Adam's weight_decay is L2.
    Killed even in bfloat16."""
    for dtype in ("float64", "float32", "bfloat16"):
        _killed(check_optimizer(lambda p: torch.optim.Adam(p, lr=LR, weight_decay=WD), ADAMW,
                                dtype=dtype))


@pytest.mark.parametrize("dtype, eps", [("float64", 1e-8), ("float32", 1e-3)])
def test_eps_inside_the_root_is_killed(dtype: str, eps: float) -> None:
    """adamw fixes eps outside the root (eps_root = 0); inside is a bug. In float32 it is
    resolved from eps = 1e-3 (a relative change of eps/2 in the direction)."""
    fn, init = user_adam(eps=eps, eps_in_sqrt=True)
    _killed(check_optimizer(fn, ("adamw", dict(lr=LR, weight_decay=WD, eps=eps)), init=init,
                            dtype=dtype))
    fn, init = user_adam(eps=eps)
    assert check_optimizer(fn, ("adamw", dict(lr=LR, weight_decay=WD, eps=eps)), init=init,
                           dtype=dtype)


def test_torch_rmsprop_puts_eps_outside_the_root() -> None:
    """optax's rmsprop (the rule) adds eps inside the root, torch's outside: a convention
    difference the check names (eps = 1e-8: visible in float64)."""
    _killed(check_optimizer(lambda p: torch.optim.RMSprop(p, lr=LR, alpha=0.9, eps=1e-8),
                            ("rmsprop", dict(lr=LR, decay=0.9, eps=1e-8))))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_momentum_with_dampening_is_killed_at_step_2(dtype: str) -> None:
    """torch's dampening skips the first step (the buffer starts at g_1), so step 1 passes
    and step 2 fails."""
    report = check_optimizer(lambda p: torch.optim.SGD(p, lr=LR, momentum=0.9, dampening=0.1),
                             ("momentum", dict(lr=LR, beta=0.9)), dtype=dtype)
    _killed(report, 2)
    assert all(r.ok for r in report.rows if r.check == "step 1")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_muon_without_normalisation_diverges_and_is_killed(dtype: str) -> None:
    fn, init = user_muon(normalise=False)
    with np.errstate(all="ignore"):
        report = check_optimizer(fn, ("muon", dict(lr=LR)), init=init, params=MATRICES,
                                 dtype=dtype)
    _killed(report)
    # it diverged (the moment's singular values pass 1.3), not merely drifted
    assert report.first_failure.error > 1e3 or math.isinf(report.first_failure.error)
    # with small gradients (the iteration converges, to the wrong matrix) the diagnosis
    # names the mistake: the reference rule with normalize=False. (Where the iteration
    # diverges, rounding decides which entries overflow first: nothing is claimed then.)
    rng = np.random.default_rng(0)
    small = [{k: 0.1 * rng.standard_normal(v.shape) for k, v in MATRICES.items()}
             for _ in range(5)]
    for normalise in (False, True):
        fn, init = user_muon(normalise=normalise)
        report = check_optimizer(fn, ("muon", dict(lr=LR)), init=init, params=MATRICES,
                                 grads=small, dtype=dtype)
        diagnosis = [n for n in report.notes if n.startswith("diagnosis:")]
        if normalise:
            assert report.ok and not diagnosis, report
        else:
            assert len(diagnosis) == 1 and "no Frobenius normalisation" in diagnosis[0], \
                report.notes


def test_drawn_gradients_make_muon_diverge_without_normalisation() -> None:
    _, grads = _draw(DEFAULT_SHAPES, 5, "float64", 0)
    for g in grads:
        for k in ("W", "V"):
            assert np.linalg.norm(g[k], 2) >= MIN_TOP_SINGULAR_VALUE * (1 - 1e-12)


def test_shampoo_with_the_wrong_root_is_killed() -> None:
    fn, init = user_shampoo(root=2)
    _killed(check_optimizer(fn, ("shampoo", dict(lr=LR)), init=init))


# --------------------------------------------------------------------- bad input


def test_unknown_rule_lists_the_known_ones() -> None:
    with pytest.raises(CheckError, match=r"'rule'.*known: sgd, momentum.*shampoo"):
        check_optimizer(torch_adamw, "lion")
    with pytest.raises(CheckError, match=r"'rule'.*lr"):
        check_optimizer(torch_adamw, ("adamw", dict(lr=-1.0)))
    with pytest.raises(CheckError, match="'rule'"):
        check_optimizer(torch_adamw, 3)


def test_a_rule_object_is_accepted() -> None:
    from nlaverify.optim import rules as R

    assert check_optimizer(torch_adamw, R.adamw(LR, weight_decay=WD), dtype="float32")


@pytest.mark.parametrize("update, match", [
    (42, "'update'.*int"),
    (lambda a, b: a, "'update'.*2 positional"),
    (lambda p: 3, "'update'.*factory returned int"),
], ids=["int", "two-args", "factory-not-optimizer"])
def test_bad_update_is_named(update, match: str) -> None:
    with pytest.raises(CheckError, match=match):
        check_optimizer(update, ADAMW, framework="torch" if "factory" in match else None)


def test_an_optimizer_instance_is_refused() -> None:
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))])
    with pytest.raises(CheckError, match=r"'update'.*instance"):
        check_optimizer(opt, ADAMW)


def test_bad_arguments_are_named() -> None:
    step, init = user_adam()
    for kw, arg in [(dict(dtype="int8"), "dtype"), (dict(dtype="float8"), "dtype"),
                    (dict(params={"W": "abc"}), "params"), (dict(params=[1, 2]), "params"),
                    (dict(params={"W": np.full(3, 1e6)}, dtype="float16"), "params"),
                    (dict(params={"W": np.zeros(3)}, grads=[{"V": np.zeros(3)}]), "grads"),
                    (dict(params={"W": np.zeros(3)}, grads=[{"W": np.zeros(4)}]), "grads"),
                    (dict(steps=0), "steps"), (dict(framework="tensorflow"), "framework"),
                    (dict(init=3), "init")]:
        kw = {"init": init, **kw}
        with pytest.raises(CheckError, match=f"'{arg}'"):
            check_optimizer(step, ADAMW, **kw)


def test_torch_not_installed_is_named(monkeypatch) -> None:
    step, init = user_adam()
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails
    with pytest.raises(CheckError, match=r"'framework'.*'torch' is not installed"):
        check_optimizer(step, ADAMW, init=init, framework="torch")


def test_a_step_that_raises_fails_its_row() -> None:
    step, init = user_adam()
    calls = []

    def flaky(params, grads, state):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("out of memory")
        return step(params, grads, state)

    report = check_optimizer(flaky, ADAMW, init=init, framework="torch")
    assert not report
    first = report.first_failure
    assert first.check == "step 3" and "RuntimeError: out of memory" in first.reason
    assert [r.verdict for r in report.rows[-2:]] == ["skip", "skip"]  # steps 4, 5 not run

    def bad_init(params):
        raise ValueError("no state")

    report = check_optimizer(step, ADAMW, init=bad_init)
    assert report.first_failure.check == "init" and "no state" in report.first_failure.reason


@pytest.mark.parametrize("wrong, match", [
    (lambda new, s: new, "expected \\(params, state\\)"),
    (lambda new, s: ({k: v for k, v in new.items() if k != "b"}, s), "missing \\['b'\\]"),
    (lambda new, s: ({**new, "W": "oops"}, s), "params\\['W'\\].*expected an array"),
], ids=["no-state", "missing-leaf", "string-leaf"])
def test_wrong_structure_returned_fails_the_row(wrong, match: str) -> None:
    step, init = user_adam()
    report = check_optimizer(lambda p, g, s: wrong(*step(p, g, s)), ADAMW, init=init,
                             framework="torch")
    first = report.first_failure
    assert first.check == "step 1"
    assert pytest.importorskip("re").search(match, first.reason), first.reason


def test_given_params_and_grads() -> None:
    rng = np.random.default_rng(3)
    params = {"w": rng.standard_normal((3, 2))}
    grads = [{"w": rng.standard_normal((3, 2))} for _ in range(3)]
    report = check_optimizer(torch_adamw, ADAMW, params=params, grads=grads)
    assert report and [r.check for r in report.rows] == [
        "step 1", "update 1", "step 2", "update 2", "step 3", "update 3"]


def test_a_jax_step_is_detected_and_a_sign_error_killed() -> None:
    import jax.numpy as jnp

    def sgd(params, grads, state):
        return {k: w - LR * jnp.asarray(grads[k]) for k, w in params.items()}, state

    def sgd_ascent(params, grads, state):
        return {k: w + LR * jnp.asarray(grads[k]) for k, w in params.items()}, state

    report = check_optimizer(sgd, ("sgd", dict(lr=LR)), dtype="float32")
    assert report and "on jax" in report.notes[0]
    _killed(check_optimizer(sgd_ascent, ("sgd", dict(lr=LR)), dtype="float32"))


def test_a_wrong_reference_is_caught_by_the_torch_peer(monkeypatch) -> None:
    """The check is as good as its reference: torch's AdamW, an independent oracle, fails a
    reference whose decoupled decay is halved."""
    from nlaverify.optim import elementwise as E

    monkeypatch.setattr(E, "decoupled_decay", lambda xp, d, w, wd: d + E.const(xp, wd) / 2 * w)
    _killed(check_optimizer(torch_adamw, ADAMW, dtype="float32"))


def test_the_reproducer_runs_and_prints_the_reference_value(capsys) -> None:
    report = check_optimizer(lambda p: torch.optim.Adam(p, lr=LR, weight_decay=WD), ADAMW,
                             dtype="float32", steps=2)
    first = report.first_failure
    exec(first.reproducer, {})  # our own generated snippet, as a user would paste it
    assert float(capsys.readouterr().out) == first.expected
    assert "reproducer" in report.failure_text()


def test_cupy_without_a_gpu_is_named() -> None:
    # cupy: absent here, or present without a GPU: either is named
    step, init = user_adam()
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        pytest.skip("a GPU is present")
    except Exception:
        pass
    with pytest.raises(CheckError, match="'framework'"):
        check_optimizer(step, ADAMW, init=init, framework="cupy")
