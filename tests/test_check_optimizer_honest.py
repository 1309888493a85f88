"""check_optimizer tells the whole truth in a narrow dtype (issue 34, item 1).

A bfloat16 weight of size ~1 does not move under an update of 3e-4: a trajectory check in
bfloat16 saw the same numbers for a correct AdamW and for one whose second-moment bias
correction uses beta1 (the update 1.41x too large at betas (0.9, 0.95)), and passed both.
The update rows compare the user's update d = w_t - w_{t-1} with the reference's entry by
entry, the storage rounding u|w| counted per entry: where the weights are small the update
is resolved and the typo is killed (ratio ~3.5); where no entry resolves it the row is
inconclusive, never a pass, and ``report.ok`` is false unless inconclusive rows are allowed.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from nlaverify.check import check_optimizer  # noqa: E402
from nlaverify.check.optimizer import (  # noqa: E402
    ERROR_MODELS,
    STORE_ROUNDINGS,
    update_row,
)

BETAS = (0.9, 0.95)
WD = 0.01


def adamw(lr: float, *, beta1_in_second_correction: bool = False):
    """AdamW written as people write it in PyTorch, with the typo as a switch."""

    class AdamW(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, dict(lr=lr))
            self.t = 0

        @torch.no_grad()
        def step(self):
            b1, b2 = BETAS
            self.t += 1
            for group in self.param_groups:
                for p in group["params"]:
                    state = self.state[p]
                    if not state:
                        state["m"], state["v"] = torch.zeros_like(p), torch.zeros_like(p)
                    m, v = state["m"], state["v"]
                    p.mul_(1 - lr * WD)
                    m.mul_(b1).add_(p.grad, alpha=1 - b1)
                    v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                    c1 = 1 - b1 ** self.t
                    c2 = 1 - (b1 if beta1_in_second_correction else b2) ** self.t
                    p.addcdiv_(m / c1, (v / c2).sqrt() + 1e-8, value=-lr)

    return AdamW


def rule(lr: float):
    return ("adamw", dict(lr=lr, b1=BETAS[0], b2=BETAS[1], eps=1e-8, weight_decay=WD))


@pytest.mark.parametrize("lr", [3e-4, 3e-2])
def test_the_bfloat16_adamw_typo_is_never_passed(lr: float) -> None:
    """Killed at every seed, by an update row (the trajectory rows cannot see it)."""
    for seed in range(4):
        report = check_optimizer(adamw(lr, beta1_in_second_correction=True), rule(lr),
                                 dtype="bfloat16", seed=seed)
        assert report.failures, report
        first = report.first_failure
        assert first.check.startswith("update") and first.where.startswith("update['")
        assert 1.2 < abs(first.actual / first.expected) < 1.6, first  # sqrt(2) = 1.41


@pytest.mark.parametrize("lr", [3e-4, 3e-2, 0.1])
def test_the_correct_bfloat16_adamw_raises_no_false_alarm(lr: float) -> None:
    """Seeds 3, 4, 7 and 15 at lr 0.1 have entries whose first moment cancels (gradients of
    opposite signs): its bfloat16 rounding is relative to the magnitudes added, not to the
    moment, and a bound relative to |u| alone false-alarmed there (ratio up to 1.8)."""
    for seed in (0, 1, 2, 3, 4, 7, 15):
        report = check_optimizer(adamw(lr), rule(lr), dtype="bfloat16", seed=seed)
        assert report.ran and not report.failures, report
        # every row is a resolved pass or an honest inconclusive one
        assert all(r.verdict == "pass" or r.inconclusive for r in report.rows), report


def test_an_unresolvable_update_is_inconclusive_not_passed() -> None:
    """Weights of size ~1 only (given params): in bfloat16 an update of 3e-4 is below half
    an ulp at every entry; the row says so and gives the smallest error it could have seen.
    The report is not ok, and allowing inconclusive rows does not make it ok when no row
    at all resolved anything."""
    rng = np.random.default_rng(0)
    params = {"w": np.sign(rng.standard_normal((4, 3))) * rng.uniform(1.0, 2.0, (4, 3))}
    grads = [{"w": rng.standard_normal((4, 3))} for _ in range(2)]
    for bug in (False, True):
        report = check_optimizer(adamw(3e-4, beta1_in_second_correction=bug), rule(3e-4),
                                 params=params, grads=grads, dtype="bfloat16")
        assert not report.failures and not report.ok, report
        rows = [r for r in report.rows if r.check.startswith("update")]
        assert rows and all(r.inconclusive for r in rows), report
        assert "below the resolution of bfloat16 weights" in rows[0].reason
        assert "smallest error it could have seen" in rows[0].reason
        assert "inconclusive" in report.summary() and "inconclusive" in str(report)
        report.allow_inconclusive = True
        assert not report.ok  # allowed, but nothing at all was resolved: proves nothing
    # the same weights in float32 resolve the update: the typo is killed there
    report = check_optimizer(adamw(3e-4, beta1_in_second_correction=True), rule(3e-4),
                             params=params, grads=grads, dtype="float32")
    assert report.failures, report


def test_update_row_bound_terms() -> None:
    """The bound of one entry is STORE_ROUNDINGS x u x |w| plus the rule's tau x |u_i| (an
    elementwise rule's error is componentwise: the small update of entry 1 is judged
    against its own size, not the largest): an error just inside passes, just outside
    fails at that entry."""
    from nlaverify.tolerance import tolerance

    model = ERROR_MODELS["sgd"]
    w0 = np.array([1.0, 2.0**-10, 0.0])
    u = np.array([-1e-3, -1e-6, -1e-3])
    exact = update_row("s", 1, "w", w0, w0 + u, u, "float32", model)
    # (w0 + u) - w0 in float64: one rounding of size |w0| = 1, read against max|u| = 1e-3
    differencing = tolerance("float64", condition=float(np.max(np.abs(w0)) / np.max(np.abs(u))))
    assert exact.verdict == "pass" and exact.error <= differencing.rtol, differencing.reason
    tau = tolerance("float32", depth=model.stages).rtol
    for i in (0, 1):
        bound = STORE_ROUNDINGS * 2.0**-24 * max(abs(w0[i]), abs(w0[i] + u[i])) + tau * abs(u[i])
        bump = np.zeros(3)
        bump[i] = 0.9 * bound
        assert update_row("s", 1, "w", w0, w0 + u + bump, u, "float32", model).verdict == "pass"
        bump[i] = 1.1 * bound
        bad = update_row("s", 1, "w", w0, w0 + u + bump, u, "float32", model)
        assert bad.verdict == "fail" and bad.where == f"update['w'][{i}]", bad
        # the ratio is 1.1 up to the float64 rounding of w0 + u + bump, read against bound
        ratio_tol = tolerance("float64", condition=max(1.0, abs(w0[i])) / bound)
        assert abs(bad.ratio - 1.1) <= 1.1 * ratio_tol.rtol, (bad.ratio, ratio_tol.reason)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_optimizer_bug_is_named(dtype: str) -> None:
    """The diagnosis runs Adam's classic mistakes on the user's trajectory (issue 35): the
    beta1 typo and Adam's L2 decay are named; a wrong learning rate is named as a factor
    on the updates, never as a classic mistake alone."""
    report = check_optimizer(adamw(3e-2, beta1_in_second_correction=True), rule(3e-2),
                             dtype=dtype)
    lines = [n for n in report.notes if n.startswith("diagnosis:")]
    assert len(lines) == 1 and "bias correction by beta1" in lines[0], report.notes
    if dtype == "float32":  # Adam's L2 decay (1 % of the update here) is below bfloat16's
        coupled = check_optimizer(lambda p: torch.optim.Adam(p, lr=3e-2, betas=BETAS,
                                                             eps=1e-8, weight_decay=WD),
                                  rule(3e-2), dtype=dtype)
        lines = [n for n in coupled.notes if n.startswith("diagnosis:")]
        assert coupled.failures and len(lines) == 1 and "added to the gradient" in lines[0], \
            coupled.notes
    # a doubled learning rate is no classic mistake: named as a factor on the updates; in
    # bfloat16 it equals the first moment's correction by beta2 within the bound, and the
    # line gives both explanations instead of one wrong one
    faster = check_optimizer(adamw(6e-2), rule(3e-2), dtype=dtype)  # lr doubled
    lines = [n for n in faster.notes if n.startswith("diagnosis:")]
    assert faster.failures and len(lines) == 1, faster.notes
    if dtype == "float32":
        assert "times 2 at every step" in lines[0] and "bias correction" not in lines[0]
    else:
        assert "learning rate x 2" in lines[0], lines[0]


class _AdamWithoutDecay(torch.optim.AdamW):
    """AdamW whose weight decay was dropped: only the decay's part of the update differs."""

    def __init__(self, params, **kw):
        super().__init__(params, **{**kw, "weight_decay": 0.0})


_WD = ("adamw", {"lr": 1e-3, "weight_decay": 0.01})


def test_an_unresolved_weight_decay_is_said_not_passed_silently() -> None:
    """In bfloat16 at lr x lambda = 1e-5 the decay's part of each update (<= 2e-5) is below
    every update row's bound: a kernel that drops the decay cannot be told apart, and the
    report says so in a note (it passed with no word before); in float32 the decay is
    resolved, the bug is killed, and the correct kernel gets no such note."""
    opts = {"lr": 1e-3, "weight_decay": 0.01}

    def decay_notes(report):
        return [n for n in report.notes if "weight decay's part" in n]

    bf = check_optimizer(_AdamWithoutDecay, _WD, options=opts, dtype="bfloat16")
    assert not bf.failures and decay_notes(bf), bf
    assert "would pass here" in decay_notes(bf)[0]
    f32 = check_optimizer(_AdamWithoutDecay, _WD, options=opts, dtype="float32")
    assert f32.failures
    ok = check_optimizer(torch.optim.AdamW, _WD, options=opts, dtype="float32")
    assert ok.ok and not decay_notes(ok)
    # a rule without a decay gets no note
    adam = check_optimizer(torch.optim.Adam, ("adam", {"lr": 1e-3}), options={"lr": 1e-3},
                           dtype="bfloat16")
    assert not decay_notes(adam)
