"""The exact zero test: refute first (sound), simplify after (under a time limit).

A wrong VJP must be refuted at a rational point before any simplification (the audit
found a wrong multi-head attention VJP spending ~20 minutes in ``sympy.together``); a
true identity, however much it cancels, must never be refuted; the time limit turns a
slow simplification into a ``timeout`` failure, never a hang and never a proof.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import numpy as np
import pytest
import sympy

import nlaverify.symbolic.exact as exact
import nlaverify.symbolic.refute as refute
from nlaverify.backends import get_namespace
from nlaverify.ops import sdpa
from nlaverify.ops.linear import affine, affine_vjp
from nlaverify.ops.registry import OPS
from nlaverify.ops.softmaxes import softmax
from nlaverify.symbolic.exact import (
    TIME_LIMIT_ENV,
    find_counterexample,
    is_zero,
    proof_time_limit,
    sample_points,
    symbol_array,
    zero_test,
)
from nlaverify.symbolic.vjp_proof import prove_vjp

a, b, x, y = sympy.symbols("a b x y", real=True)


def _trig_sum(n: int) -> sympy.Expr:
    """``sum_k sin^2 x_k + cos^2 x_k - n``: true, but only :func:`sympy.simplify` sees it
    (~1 s of CPU for n = 12, ~8 s for n = 24): a nontrivial true identity for the time
    limit."""
    xs = sympy.symbols(f"t1:{n + 1}", real=True)
    return sympy.Add(*[sympy.sin(t) ** 2 + sympy.cos(t) ** 2 for t in xs]) - n


# --------------------------------------------------------------------------- (a) wrong VJPs


def _mha_vjp_without(dropped: int):
    """The multi-head attention VJP with the Q (0), K (1) or V (2) term of dX dropped."""

    def vjp(xp: Any, G: Any, X: Any, W_Q: Any, W_K: Any, W_V: Any, W_O: Any,
            n_heads: int, causal: bool = False) -> tuple[Any, ...]:
        Q, K, V = (sdpa.split_heads(xp, affine(xp, X, W), n_heads) for W in (W_Q, W_K, W_V))
        A = sdpa.attention(xp, Q, K, V, causal)
        dM, dW_O = affine_vjp(xp, G, sdpa.merge_heads(xp, A), W_O)
        (dA,) = sdpa.merge_heads_vjp(xp, dM, A)
        dX, grads = None, []
        for k, (dH, W) in enumerate(zip(sdpa.attention_vjp(xp, dA, Q, K, V, causal),
                                        (W_Q, W_K, W_V), strict=True)):
            dXk, dWk = affine_vjp(xp, sdpa.merge_heads(xp, dH), X, W)
            if k != dropped:
                dX = dXk if dX is None else dX + dXk
            grads.append(dWk)
        return (dX, *grads, dW_O)

    return vjp


def _mha_vjp_scaled_dW_Q(xp: Any, G: Any, *args: Any, **static: Any) -> tuple[Any, ...]:
    dX, dW_Q, *rest = sdpa.multihead_attention_vjp(xp, G, *args, **static)
    return (dX, dW_Q * sympy.Rational(3, 2), *rest)


def test_dropped_term_of_mha_vjp_is_refuted_before_any_simplification(monkeypatch) -> None:
    def no_ladder(expr: sympy.Expr) -> str | None:
        raise AssertionError("simplification tried before the rational-point refutation")

    monkeypatch.setattr(exact, "_ladder", no_ladder)
    wrong = dataclasses.replace(OPS["multihead_attention"], vjp=_mha_vjp_without(2))
    proof = prove_vjp(wrong)  # default proof sizes: the audit's case
    assert proof.verdict == "failed"
    assert proof.detail.startswith("entry X[0, 0]: refuted at a rational point (value ")
    assert "sample point" in proof.detail


def test_scaled_dW_Q_of_mha_vjp_is_refuted_and_named() -> None:
    wrong = dataclasses.replace(OPS["multihead_attention"], vjp=_mha_vjp_scaled_dW_Q)
    proof = prove_vjp(wrong, {"n": 2, "d": 1, "hd": 2})
    assert proof.verdict == "failed"
    assert proof.detail.startswith("entry W_Q[0, 0]: refuted at a rational point"), proof.detail


def test_zero_test_reports_the_counterexample() -> None:
    result = zero_test(x**2 - x)
    assert result.verdict == "refuted" and not result.proved and not is_zero(x**2 - x)
    assert result.counterexample is not None
    ((sym, value),) = result.counterexample.point
    assert sym == x and abs(float(value**2 - value) - float(result.counterexample.value)) < 1e-12
    assert f"x = {value}" in result.detail


# --------------------------------------------------------------------------- (b) true identities


def test_true_mha_vjp_still_proves() -> None:
    proof = prove_vjp(OPS["multihead_attention"], {"n": 2, "d": 1, "hd": 2})
    assert proof.verdict == "proved", proof.detail


@pytest.mark.parametrize("expr, rung", [
    (sympy.exp(a) * sympy.exp(b) - sympy.exp(a + b), "0 by expand"),
    (1 / (x + y) + 1 / (x - y) - 2 * x / ((x + y) * (x - y)), "0 by together"),
    (sympy.sin(x) ** 2 + sympy.cos(x) ** 2 - 1, "0 by simplify"),
    (sympy.Integer(0), "0 as built"),
])
def test_true_identities_are_zero_and_say_how(expr: sympy.Expr, rung: str) -> None:
    result = zero_test(expr, time_limit=0)
    assert result.verdict == "zero" and result.reason == rung


# --------------------------------------------------------------------------- (c) time limit


def test_tiny_time_limit_on_a_true_identity_is_a_timeout_not_a_proof() -> None:
    result = zero_test(_trig_sum(12), time_limit=0.02)
    assert result.verdict == "timeout" and not result.proved
    assert result.reason == "timed out after 0.02 s" and "simplification" in result.detail
    assert not is_zero(_trig_sum(12), time_limit=0.02)


def _busy(expr: sympy.Expr) -> str:
    """A ladder that "proves" anything after 5 s of pure-Python work unless interrupted."""
    end = time.monotonic() + 5
    while time.monotonic() < end:
        pass
    return "expand"


def test_time_limit_interrupts_a_slow_ladder(monkeypatch) -> None:
    monkeypatch.setattr(exact, "_ladder", _busy)
    result = zero_test(sympy.exp(a) * sympy.exp(b) - sympy.exp(a + b), time_limit=0.1)
    assert result.verdict == "timeout" and result.reason == "timed out after 0.1 s"


def test_prove_vjp_names_the_entry_that_timed_out(monkeypatch) -> None:
    monkeypatch.setattr(exact, "_ladder", _busy)
    proof = prove_vjp(OPS["multihead_attention"], {"n": 2, "d": 1, "hd": 2}, time_limit=0.1)
    assert proof.verdict == "failed"
    assert proof.detail.startswith("entry X[0, 0]: timed out after 0.1 s"), proof.detail


def test_an_alarm_swallowed_by_a_bare_except_still_times_out(monkeypatch) -> None:
    def stubborn(expr: sympy.Expr) -> str:
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            try:
                while time.monotonic() < end:
                    pass
            except BaseException:  # what a careless library might do
                pass
        return "expand"

    monkeypatch.setattr(exact, "_ladder", stubborn)
    assert zero_test(sympy.exp(a) * sympy.exp(b) - sympy.exp(a + b),
                     time_limit=0.1).verdict == "timeout"


def test_time_limit_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv(TIME_LIMIT_ENV, "0.02")
    assert proof_time_limit() == 0.02
    assert zero_test(_trig_sum(12)).verdict == "timeout"
    for off in ("0", "none", "off", "inf"):
        monkeypatch.setenv(TIME_LIMIT_ENV, off)
        assert proof_time_limit() is None
    monkeypatch.setenv(TIME_LIMIT_ENV, "soon")
    with pytest.raises(ValueError, match=TIME_LIMIT_ENV):
        proof_time_limit()
    monkeypatch.delenv(TIME_LIMIT_ENV)
    assert proof_time_limit() == exact.DEFAULT_TIME_LIMIT


def test_a_callers_alarm_handler_and_timer_are_restored(monkeypatch) -> None:
    calls: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        calls.append(signum)

    monkeypatch.setattr(exact, "_ladder", _busy)
    expr = sympy.exp(a) * sympy.exp(b) - sympy.exp(a + b)
    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        assert zero_test(expr, time_limit=0.05).verdict == "timeout"
        assert signal.getsignal(signal.SIGALRM) is handler
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 25 < left <= 30 and calls == []
        # a caller's alarm due before the limit stops the test, then fires right after it
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        assert zero_test(expr, time_limit=10).verdict == "timeout"
        time.sleep(0.05)
        assert calls == [signal.SIGALRM]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_outside_the_main_thread_no_limit_but_still_refute_first() -> None:
    results: dict[str, Any] = {}

    def work() -> None:
        results["true"] = zero_test(_trig_sum(3), time_limit=1e-6)
        results["false"] = zero_test(sympy.exp(a) * sympy.exp(b) - sympy.exp(a - b),
                                     time_limit=1e-6)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert results["true"].verdict == "zero"
    assert results["false"].verdict == "refuted"


def test_derive_jobs_workers_enforce_the_limit(monkeypatch) -> None:
    """``derive --jobs`` runs proofs in spawned processes; each task runs in the worker's
    main thread, so SIGALRM works there, and the limit comes through the environment."""
    monkeypatch.setenv(TIME_LIMIT_ENV, "0.5")  # ample for the refutation in a fresh process
    exprs = [_trig_sum(24), sympy.exp(a) * sympy.exp(b) - sympy.exp(a - b)]  # 8 s, 1 ms
    with ProcessPoolExecutor(max_workers=2, mp_context=get_context("spawn")) as pool:
        verdicts = [r.verdict for r in pool.map(zero_test, exprs)]
    assert verdicts == ["timeout", "refuted"]


# --------------------------------------------------------------------------- (d) soundness


def _softmax_shift_difference() -> tuple[list[sympy.Expr], list[sympy.Symbol]]:
    """Stable softmax (opaque shift c_0) minus the plain one, entry by entry."""
    xp = get_namespace("sympy")
    xp.reset_shifts()
    z = symbol_array("z", (1, 3))
    shifted = np.asarray(softmax(xp, z), dtype=object)[0]
    e = [sympy.exp(v) for v in z[0]]
    return [s - v / sympy.Add(*e) for s, v in zip(shifted, e, strict=True)], [*z[0]]


@pytest.mark.parametrize("expr", [
    sympy.exp(a) * sympy.exp(b) - sympy.exp(a + b),
    sympy.sin(x) ** 2 + sympy.cos(x) ** 2 - 1,
    # the noise is multiplied by 10^30 y: only a magnitude-relative threshold ignores it
    10**30 * y * (sympy.sin(x) ** 2 + sympy.cos(x) ** 2 - 1) + sympy.exp(a) * sympy.exp(b)
    - sympy.exp(a + b),
    # cancellation amplified by a function (value ~1e-10 at 40 digits): only the
    # precision-doubling test rejects it
    sympy.exp(10**30 * (sympy.sin(x) ** 2 + sympy.cos(x) ** 2 - 1)) - 1,
    # amplified so much that even the 80-digit value is above 10^-20 of the magnitude:
    # only the agreement of the two precisions rejects it
    sympy.exp(10**64 * (sympy.sin(x) ** 2 + sympy.cos(x) ** 2 - 1)) - 1,
    sympy.tanh(x / 2) - (sympy.exp(x) - 1) / (sympy.exp(x) + 1),
    sympy.log(sympy.exp(a) + sympy.exp(b)) - a - sympy.log(1 + sympy.exp(b - a)),
])
def test_true_identities_with_cancellation_are_never_refuted(expr: sympy.Expr) -> None:
    assert expr != 0  # not cancelled as built
    assert find_counterexample(expr) is None
    symbols = sorted(expr.free_symbols, key=str)
    large = [{s: sympy.Rational((-1) ** i * (10**k + i), 3) for i, s in enumerate(symbols)}
             for k in (1, 2, 3)]
    assert find_counterexample(expr, large) is None
    assert zero_test(expr, points=large, time_limit=0).verdict in ("zero", "unproved")


@pytest.mark.parametrize("expr, point", [
    # the noise of a true sum, multiplied by 10^30 y inside a product
    (10**30 * y * (sympy.sin(x) ** 2 + sympy.cos(x) ** 2 - 1)
     + sympy.exp(a) * sympy.exp(b) - sympy.exp(a + b), None),
    # terms ~1e66 that cancel to ~0.01: noise ~1e26 at 40 digits
    (sympy.expand((x + y) ** 20) - (x + y) ** 20,
     {x: sympy.Rational(3001, 3), y: sympy.Rational(-7001, 7)}),
])
def test_rounding_noise_is_screened_by_the_magnitude(monkeypatch, expr, point) -> None:
    """The first, 40-digit value of a true identity stays below 10^-20 times the
    magnitude (sums of absolute values at every level, not just the top one), so the
    confirmation at 80 digits is never even needed."""
    digits: list[int] = []
    evaluate = refute._evaluate

    def spy(e: sympy.Expr, p: Any, d: int) -> Any:
        digits.append(d)
        return evaluate(e, p, d)

    points = [point] if point else sample_points(sorted(expr.free_symbols, key=str))
    assert any(evaluate(expr, p, 40)[0] != 0 for p in points)  # there is noise to screen
    monkeypatch.setattr(refute, "_evaluate", spy)
    assert find_counterexample(expr, points) is None
    assert digits and 80 not in digits


def test_softmax_shift_invariance_is_not_refuted_at_large_points() -> None:
    diffs, z = _softmax_shift_difference()
    c = sympy.Symbol("c_0", real=True)
    points = [{z[0]: sympy.Rational(1000), z[1]: sympy.Rational(-2001, 2),
               z[2]: sympy.Rational(1, 3), c: sympy.Integer(10**4)},
              {z[0]: sympy.Rational(700, 3), z[1]: sympy.Rational(701, 3),
               z[2]: sympy.Rational(-800), c: sympy.Rational(-10**6, 7)}]
    for d in diffs:
        assert d.has(c)
        assert find_counterexample(d) is None
        assert find_counterexample(d, points) is None
        assert zero_test(d, points=points, time_limit=0).verdict == "zero"


def test_sample_points_respect_assumptions() -> None:
    p = sympy.Symbol("p", positive=True)
    n = sympy.Symbol("n", integer=True, negative=True)
    c = sympy.Symbol("c_0", real=True)
    points = sample_points([c, n, p, x], 3)
    assert len(points) == 3
    assert all(pt[p] > 0 and pt[n] < 0 and pt[n].is_integer for pt in points)
    assert any(pt[c] < 0 for pt in points) and any(pt[c] > 0 for pt in points)
    assert all(v != 0 for pt in points for v in pt.values())
    assert sample_points([sympy.Symbol("e", even=True)], 3) == []  # not sampled, not unsound


def test_undefined_points_are_skipped_not_refuted() -> None:
    x0 = sample_points([x], 1)[0][x]
    assert find_counterexample(1 / (x - x0)) is not None
    assert find_counterexample(1 / (x - x0), [{x: x0}]) is None  # division by 0: skipped
    assert find_counterexample(sympy.sqrt(x) + 1, [{x: sympy.Rational(-1, 2)}]) is None
    assert find_counterexample(sympy.sqrt(x) + 1, [{x: sympy.Rational(1, 2)}]) is not None
    relu = sympy.Piecewise((x, x > 0), (0, True))
    assert find_counterexample(relu - sympy.Max(x, 0)) is None
    assert find_counterexample(relu - x) is not None  # wrong for x < 0: refuted there
    assert find_counterexample(relu - x, [{x: sympy.Rational(1, 3)}]) is None


def test_the_alarm_never_fires_inside_a_garbage_collector_callback(monkeypatch) -> None:
    # JAX registers a gc callback; an exception raised there is only printed as "ignored"
    # (pytest turns that into a failure): the deadline waits for the timer's next tick
    import gc
    import sys

    import jax  # noqa: F401 - its gc callback is the one that matters

    def churn(expr: sympy.Expr) -> str:
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            for _ in range(200):
                x: list = []
                x.append(x)  # reference cycles: a collection every few hundred
        return "expand"

    lost: list = []
    monkeypatch.setattr(sys, "unraisablehook", lost.append)
    monkeypatch.setattr(exact, "_ladder", churn)
    callbacks = list(gc.callbacks)
    for _ in range(8):
        assert zero_test(sympy.exp(a) * sympy.exp(b) - sympy.exp(a + b),
                         time_limit=0.05).verdict == "timeout"
    assert lost == [] and gc.callbacks == callbacks
