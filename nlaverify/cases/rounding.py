"""Values rounded to a dtype: the inputs every case of an op is made of.

A case's real values are float64 numbers exactly representable in the dtype of the kernel
under test, so that the kernel (in that dtype) and the float64 or mpmath reference see the
*same* inputs and a comparison measures the kernel's arithmetic, not the rounding of its
inputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nlaverify.errors import CheckError

__all__ = ["DTYPES", "exact_in"]

#: the dtypes a case can be rounded to
DTYPES = ("float64", "float32", "bfloat16", "float16")


def exact_in(values: Any, dtype: str, *, strict: bool = False) -> np.ndarray:
    r"""``values`` rounded to ``dtype`` (``float64``, ``float32``, ``bfloat16`` through
    ml_dtypes, ``float16``) and back to float64: :math:`\operatorname{fl}_{t}(x)` for the
    format :math:`t`, numbers exactly representable in ``dtype``.

    ``strict``: a finite value beyond the dtype's range (rounded to :math:`\pm\infty`) is a
    :class:`~nlaverify.errors.CheckError` instead of an infinity (what ``check_op`` asks of
    the values it hands a kernel; the hostile strategies ask for infinities on purpose).
    An unknown ``dtype`` is a ``CheckError`` (a ``ValueError``) naming the argument."""
    if dtype not in DTYPES:
        raise CheckError(f"exact_in: argument 'dtype': expected one of {', '.join(DTYPES)}, "
                         f"got {dtype!r}")
    x = np.asarray(values, dtype=np.float64)
    if dtype == "float64":
        return x.copy()
    if dtype == "bfloat16":
        import ml_dtypes

        target: Any = ml_dtypes.bfloat16
    else:
        target = np.dtype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        y = x.astype(target).astype(np.float64)
    if strict and np.any(np.isinf(y) & np.isfinite(x)):
        raise CheckError(f"an input value exceeds the range of {dtype} (max "
                         f"{float(np.nanmax(np.abs(x[np.isfinite(x)]))):.3g}): rescale "
                         "the inputs (shapes=) or check in a wider dtype")
    return y
