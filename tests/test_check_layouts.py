"""Memory layouts (issue 34, item 4): PyTorch kernels also see non-contiguous views of the
same values on every drawn case, and a kernel that reads storage as row-major or asserts
contiguity is named at the argument and the view; ``inputs=`` are handed over as given
(a transposed view stays one)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from nlaverify.check import check_op  # noqa: E402


def _row_major_strides(shape):
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


def rmsnorm(x, gamma):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * gamma


def rmsnorm_reading_storage_row_major(x, gamma):
    """A stride-blind kernel: it reads x's storage as if it were contiguous row-major (what
    a raw Triton/CUDA kernel indexing ``x_ptr + i * d + j`` does)."""
    x = x.as_strided(x.shape, _row_major_strides(x.shape))
    return rmsnorm(x, gamma)


def rmsnorm_asserting_contiguity(x, gamma):
    assert x.is_contiguous(), "x must be contiguous"
    return rmsnorm(x, gamma)


def test_a_correct_kernel_passes_on_every_layout() -> None:
    report = check_op(rmsnorm, "rmsnorm", dtype="float32")
    assert report.ok, report
    rows = [r for r in report.rows if r.check == "forward (non-contiguous views)"]
    assert rows and rows[0].verdict == "pass", report


def test_a_row_major_assuming_kernel_is_killed_on_a_sliced_view() -> None:
    report = check_op(rmsnorm_reading_storage_row_major, "rmsnorm", dtype="float32")
    assert report.failures, report
    row = report.first_failure
    assert row.check == "forward (non-contiguous views)", report
    assert "fails on a sliced view of x" in row.reason, row.reason
    diagnosis = [n for n in report.notes if n.startswith("diagnosis:")]
    assert len(diagnosis) == 1 and "reads x's storage as contiguous row-major" in diagnosis[0]
    # without the layouts, the same kernel passes: contiguous inputs cannot see the bug
    assert check_op(rmsnorm_reading_storage_row_major, "rmsnorm", dtype="float32",
                    layouts=False).ok


def test_a_kernel_asserting_contiguity_is_named() -> None:
    report = check_op(rmsnorm_asserting_contiguity, "rmsnorm", dtype="float32")
    row = report.first_failure
    assert row is not None and "x must be contiguous" in row.reason, report
    assert "sliced view of x" in row.reason, row.reason


def test_explicit_inputs_are_passed_as_given() -> None:
    """A transposed view given in inputs= reaches the kernel as a transposed view."""
    x = torch.randn(4, 3).t()  # (3, 4), non-contiguous
    gamma = torch.randn(4)
    seen = []

    def spy(x, g):
        seen.append(x.is_contiguous())
        return rmsnorm(x, g)

    assert check_op(spy, "rmsnorm", dtype="float32", inputs=[[x, gamma]]).ok
    assert seen and not seen[0]
    report = check_op(rmsnorm_reading_storage_row_major, "rmsnorm", dtype="float32",
                      inputs=[[x, gamma]])
    assert report.failures and report.first_failure.check.startswith("forward"), report


def test_kernels_that_reshape_with_view_still_pass() -> None:
    """The views keep the last axis contiguous, as a model's activations do: nanoGPT's
    ``view(-1, d)`` reshapes work on them (a transposed view would make them raise)."""
    def rms_view(x, g):
        flat = x.view(-1, x.shape[-1])
        return rmsnorm(flat, g).view(x.shape)

    assert check_op(rms_view, "rmsnorm", dtype="float32").ok

