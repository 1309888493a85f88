"""How check_op calls a user's kernel (issue 34, item 6): statics its signature names are
passed by keyword; a signature that cannot take the op's arguments is one line restating
the op's signature (was a TypeError row with a reproducer per case); a kernel that raises is
named at its file and line; a NaN output leaks no RuntimeWarning; a bfloat16 kernel that
returns float32 is noted."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from nlaverify.check import CheckError, check_op

torch = pytest.importorskip("torch")


def rmsnorm_eps(x, gamma, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * gamma


def test_statics_named_in_the_signature_are_passed_by_keyword() -> None:
    report = check_op(rmsnorm_eps, "rmsnorm", framework="numpy", dtype="float64",
                      examples=3, static={"eps": 1e-3})
    assert report.ok, report
    # the value in force reaches the kernel: a wrong eps would fail (here the kernel's own
    # default is absent, so without the keyword it could not even be called)


def test_a_signature_that_cannot_take_the_op_is_one_line() -> None:
    def three(x, gamma, beta):
        return x

    with pytest.raises(CheckError) as err:
        check_op(three, "rmsnorm", framework="numpy", examples=1)
    message = str(err.value)
    assert message.startswith("argument 'fn': three(x, gamma, beta) cannot be called")
    assert "rmsnorm(x[..., n, d], gamma[d]); static: eps=1e-05" in message


def test_a_kernel_that_raises_is_named_at_its_line() -> None:
    def broken(x, gamma):
        return x.reshape(-1, 7) * gamma  # a reshape that fails

    report = check_op(broken, "rmsnorm", framework="numpy", examples=1, batch=False)
    reason = report.first_failure.reason
    assert "raised ValueError" in reason and "test_check_op_calls.py:" in reason, reason
    assert "x.reshape(-1, 7) * gamma" in reason, reason


def test_a_nan_output_leaks_no_warning() -> None:
    def nan_kernel(x, gamma):
        return x * np.nan

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = check_op(nan_kernel, "rmsnorm", framework="numpy", examples=1)
    assert report.failures


def test_a_bfloat16_kernel_returning_float32_is_noted() -> None:
    def upcast(x, gamma):
        x = x.float()
        return (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * gamma.float())

    report = check_op(upcast, "rmsnorm", dtype="bfloat16", examples=3, hostile=False)
    assert any("fn returned float32 for a bfloat16 check" in n for n in report.notes), report


def test_batch_axes_do_not_widen_the_bound_of_a_per_sequence_op() -> None:
    """k of the tolerance model is the largest array of one sequence (issue 34, item 7): a
    batch of 3 x 2 sequences of 3 x 4 SiLU inputs is judged with k = 12, not 72; a loss
    that reduces the batch keeps the whole batch."""
    def silu(x):
        return x / (1 + np.exp(-x))

    report = check_op(silu, "silu", framework="numpy", dtype="float32", examples=2,
                      hostile=False, shapes={"n": 3, "d": 4}, batch=(3, 2))
    forward = next(r for r in report.rows if r.check == "forward")
    assert "sqrt(k=12)" in forward.reason, forward.reason


def test_a_misspelt_op_gets_a_did_you_mean() -> None:
    with pytest.raises(CheckError, match=r"unknown op 'rmsnrom': did you mean 'rmsnorm'\?"):
        check_op(lambda x, g: x, "rmsnrom", framework="numpy")


def test_the_table_columns_stay_aligned_with_long_names() -> None:
    """The columns are as wide as their longest entry: the numbers of every row start at
    the same column."""
    from nlaverify.check import CheckReport, Row

    report = CheckReport("s", "check_op", rows=[
        Row("s", "forward", 1e-3, 1e-2, "pass", "out[0]"),
        Row("s", "vjp (torch autodiff) a_very_long_argument_name (hostile seed 3)", 1e-3,
            1e-2, "pass", "a_very_long_argument_name[12, 345, 6789]")])
    lines = str(report).splitlines()[1:3]
    assert lines[0].index("1.00e-03") == lines[1].index("1.00e-03"), "\n".join(lines)


@pytest.mark.parametrize("op, static, words", [
    ("rmsnorm", {"eps": "abc"}, "rejects"),
    ("rope", {"base": 0}, "non-finite"),
    ("rope", {"base": -5}, "non-finite"),
    ("rope", {"layout": "bogus"}, "rejects"),
])
def test_a_bad_static_is_named_before_any_case_runs(op, static, words) -> None:
    calls = []

    def fn(*args):
        calls.append(1)
        return args[0]

    with pytest.raises(CheckError, match=f"argument 'static'.*{words}"):
        check_op(fn, op, static=static, framework="numpy", examples=2)
    assert not calls


def test_a_kernel_detected_as_numpy_gets_the_framework_hint() -> None:
    """Only tensor methods (no torch call) look like NumPy to the detection: the error row
    says to pass framework=."""
    def methods_only(x, g):
        return x.expand(*x.shape) * g

    report = check_op(methods_only, "rmsnorm", examples=1)
    assert "pass framework='torch' or 'jax'" in report.first_failure.reason, report
