"""Smoke test of ``benchmarks/user_bugs.py``: a handful of its correct/buggy kernel pairs,
one seed each. ``nlaverify.check`` must pass every correct version and kill every buggy one,
naming the argument or entry; ``torch.autograd.gradcheck`` must miss a forward bug (a
missing ``1/d``: consistent forward and backward) and catch a wrong hand-written backward.
The full measurement (50 seeds, every kernel) is the benchmark's, not CI's."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import _user_kernels as uk
import user_bugs

pytest.importorskip("torch")
pytest.importorskip("jax")


def kernel(name: str, framework: str) -> uk.Kernel:
    return next(k for k in uk.KERNELS if k.name == name and k.framework == framework)


# (kernel, framework, dtype, the start of the failing row's `where` for the buggy one)
PAIRS = [
    ("rmsnorm", "torch", "float32", "out["),  # the missing 1/d shows in the forward
    ("rope", "torch", "bfloat16", "out["),  # half-split pairs: wrong even in bfloat16
    ("softmax", "jax", "float32", "out["),  # overflow: only the hostile logits show it
    ("rmsnorm autograd.Function", "torch", "float32", "x["),  # backward only: names x̄
    ("K-FAC factors", "jax", "bfloat16", "output["),
    ("rmsnorm, stride-blind", "torch", "float32", "out["),  # a transposed view of x
    ("rope, half layout", "torch", "float32", "out["),  # interleaved where half is in force
]


@pytest.mark.parametrize(("name", "framework", "dtype", "where"), PAIRS,
                         ids=[f"{n}-{f}-{d}" for n, f, d, _ in PAIRS])
def test_correct_passes_and_bug_is_killed(name: str, framework: str, dtype: str,
                                          where: str) -> None:
    k = kernel(name, framework)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # JAX's float64 truncation notes and the like
        good = user_bugs.run_check(k, "correct", dtype, 0, examples=2, hostile=1)
        bad = user_bugs.run_check(k, "buggy", dtype, 0, examples=2, hostile=1)
    assert good.ok, good
    assert not bad.ok, f"{name} ({framework}, {dtype}): the bug survived\n{bad}"
    assert bad.first_failure.where.startswith(where), bad
    assert bad.first_failure.ratio > 1


def test_gradcheck_misses_a_forward_bug_and_catches_a_backward_bug() -> None:
    assert user_bugs.gradcheck_verdict(kernel("rmsnorm", "torch"), "buggy") == "passed"
    f = kernel("rmsnorm autograd.Function", "torch")
    assert user_bugs.gradcheck_verdict(f, "correct") == "passed"
    assert user_bugs.gradcheck_verdict(f, "buggy") == "caught"


def test_table_reports_kills_and_alarms() -> None:
    k = kernel("repeat_kv (GQA)", "torch")
    res = user_bugs.measure(k, seeds=1, quick=True)
    assert all(res.killed.values()) and all(a[0] == 0 for a in res.alarms.values())
    text = user_bugs.table([res], "smoke", 0.0)
    assert "killed: forward: out[" in text and "kill rate 2/2" in text


def test_the_bfloat16_adamw_typo_is_killed_and_the_correct_step_never_fails() -> None:
    """AdamW at lr 3e-4 with betas (0.9, 0.95), beta1 in the second moment's correction:
    killed in bfloat16 by an update row; the correct step has no failure (rows the dtype
    cannot resolve are inconclusive, never passes)."""
    k = kernel("AdamW step, betas (0.9, 0.95), lr 3e-4", "torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        good = user_bugs.run_check(k, "correct", "bfloat16", 0, examples=2, hostile=1)
        bad = user_bugs.run_check(k, "buggy", "bfloat16", 0, examples=2, hostile=1)
    assert good.ran and not good.failures, good
    assert bad.failures and bad.first_failure.check.startswith("update"), bad



def test_the_latency_benchmark_times_a_kernel() -> None:
    """benchmarks/check_latency.py: one kernel, no warm repeats (a smoke test: the timings
    themselves are the benchmark's, not CI's)."""
    import check_latency

    first, again = check_latency.time_kernel(kernel("repeat_kv (GQA)", "torch"), repeats=0)
    assert first > 0 and again == first


def test_the_assert_close_peer() -> None:
    """torch.testing.assert_close with its default tolerances, on the forward: it catches a
    missing 1/d in RMSNorm and passes the correct kernel (the benchmark's peer column)."""
    k = kernel("rmsnorm", "torch")
    assert user_bugs.assert_close_verdict(k, "correct", "float32") == "passed"
    assert user_bugs.assert_close_verdict(k, "buggy", "float32") == "caught"
