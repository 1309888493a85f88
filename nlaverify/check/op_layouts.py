"""Memory layouts in ``check_op``: the same values in non-contiguous storage.

A kernel that reads its inputs' storage as row-major (a raw Triton or CUDA kernel that
ignores strides, a ``view`` that needs contiguity, ``as_strided`` with the row-major
strides) is correct on a contiguous tensor and wrong, or raising, on a transposed view or a
slice of the same values: what a model hands it from a fused QKV projection or a padded
buffer. For PyTorch and CuPy kernels every drawn
case is also run with each argument of two or more dimensions given as such a view (the
first half of the last axis of a buffer twice as wide: rows strided, the last axis
contiguous, as a slice of a fused QKV projection), and compared with the reference under
the same bound. On a failure each argument is tried alone, and the row names the first one
the kernel fails on ("fails on a sliced view of x"). NumPy is left out (its users rarely
write stride-blind kernels; its arrays are handed as given), and JAX has no layouts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nlaverify.cases.inputs import OpCaseInput
from nlaverify.check.adapters import to_float64
from nlaverify.check.op_subject import _Settings
from nlaverify.check.report import Row, compare_arrays, error_row
from nlaverify.tolerance import Tolerance

__all__ = ["FRAMEWORKS", "layout_rows", "noncontiguous"]

#: the frameworks whose kernels get non-contiguous views
FRAMEWORKS = ("torch", "cupy")
#: the check name of the layout rows
CHECK = "forward (non-contiguous views)"


def noncontiguous(x: Any, framework: str) -> tuple[Any, str]:
    """``x`` with the same values in non-contiguous storage, and what kind of view it is:
    the first half of the last axis of a buffer twice as wide (``"sliced"``: strides
    ``(..., 2d, 1)``, as a slice of a fused QKV projection or of a padded row is). The
    last axis keeps a unit stride, as activations in a model do, so a kernel that reshapes
    with ``view`` still works; one that reads storage as contiguous row-major does not."""
    if framework == "torch":
        import torch

        buf = torch.zeros((*x.shape[:-1], 2 * x.shape[-1]), dtype=x.dtype, device=x.device)
        buf[..., : x.shape[-1]] = x
        return buf[..., : x.shape[-1]], "sliced"
    import cupy  # pragma: no cover - needs a GPU

    buf = cupy.zeros((*x.shape[:-1], 2 * x.shape[-1]), dtype=x.dtype)  # pragma: no cover
    buf[..., : x.shape[-1]] = x  # pragma: no cover
    return buf[..., : x.shape[-1]], "sliced"  # pragma: no cover


def _viewable(case: OpCaseInput, args: list[Any]) -> list[int]:
    """The arguments that get a view: floating (real or fixed), two or more dimensions (a
    one-dimensional slice of a wider buffer is still contiguous) with more than one row."""
    out = []
    for k, (a, x) in enumerate(zip(case.spec.args, args, strict=True)):
        if a.kind == "tokens" or getattr(x, "ndim", 0) < 2:
            continue
        if int(np.prod(x.shape[:-1])) < 2 or x.shape[-1] < 1:
            continue  # a single row of a wider buffer is contiguous
        out.append(k)
    return out


def _run(s: _Settings, case: OpCaseInput, args: list[Any], ref_out: np.ndarray,
         tol: Tolerance, check: str) -> Row:
    try:
        out = s.call(*args)  # eagerly: a layout exists only outside jit
        out64 = to_float64(out, what="output of fn")
    except Exception as exc:
        return error_row(s.subject, check, exc, where="fn")
    return compare_arrays(s.subject, check, out64, ref_out, tol, label="out")


def layout_rows(s: _Settings, case: OpCaseInput, args: list[Any], ref_out: np.ndarray,
                tol: Tolerance) -> list[Row]:
    """The forward of ``case`` on non-contiguous views of its arguments ``args`` (the
    framework's arrays of the case), against the reference output under ``tol``: one row,
    naming the argument and the view when it fails (module docstring)."""
    if s.framework not in FRAMEWORKS or not s.layouts:
        return []
    which = _viewable(case, args)
    if not which:
        return []
    views = {k: noncontiguous(args[k], s.framework) for k in which}
    together = [views[k][0] if k in views else x for k, x in enumerate(args)]
    row = _run(s, case, together, ref_out, tol, CHECK)
    if row.verdict == "pass":
        return [row]
    for k in which:  # name the argument
        alone = [views[k][0] if j == k else x for j, x in enumerate(args)]
        single = _run(s, case, alone, ref_out, tol, CHECK)
        if single.verdict != "pass":
            name, kind = case.spec.args[k].name, views[k][1]
            strides = tuple(getattr(views[k][0], "stride", lambda: ())())
            raised = math.isnan(single.bound)  # an error row: the kernel raised
            s.note(f"diagnosis: your kernel {'requires' if raised else 'reads'} {name}'s "
                   f"storage {'to be' if raised else 'as'} contiguous row-major: it "
                   f"{'raises' if raised else 'fails'} on a {kind} view of {name} (strides "
                   f"{strides}) and passes on the same values stored contiguously (call "
                   f".contiguous() on it, or index with its strides)")
            return [Row(s.subject, CHECK, single.error, single.bound, "fail", single.where,
                        single.actual, single.expected,
                        f"fails on a {kind} view of {name} (the same values, strides "
                        f"{strides}; passes on contiguous storage): the kernel assumes a "
                        f"contiguous row-major layout ({single.reason})")]
    return [row]
