r"""Uniform quantizers (symmetric and affine, per tensor and per channel) and their error bounds.

Baggag & Saad §4.1 (quantization: weights stored as :math:`b`-bit integers, integer-only
inference; Jacob et al. 2018). A :math:`b`-bit uniform quantizer with step
:math:`\Delta > 0`, zero point :math:`z` and integer range :math:`[q_{\min}, q_{\max}]` maps

.. math:: q(x) = \operatorname{clip}\bigl(\operatorname{round}(x/\Delta) + z,\ q_{\min},
          q_{\max}\bigr),\qquad Q(x) = \Delta\,(q(x) - z),

* **symmetric** (:math:`b \ge 2`): :math:`z = 0`, :math:`q_{\max} = -q_{\min} = 2^{b-1} - 1`
  (the "restricted" range, symmetric about 0), :math:`\Delta = \max|x| / q_{\max}`;
* **asymmetric** (affine, :math:`b \ge 1`): :math:`q_{\min} = 0`, :math:`q_{\max} = 2^b - 1`,
  :math:`\Delta = (\beta - \alpha)/q_{\max}` with :math:`\alpha = \min(\min x, 0)`,
  :math:`\beta = \max(\max x, 0)` (0 is representable exactly, so zero padding and ReLU
  zeros are), :math:`z = \operatorname{round}(-\alpha/\Delta)`.

Per channel (``axis``): one :math:`(\Delta, z)` per index of ``axis``, the extremes taken over
the other axes. ``round`` is round-half-to-even (as ``numpy.round`` and ``jax.numpy.round``);
the bounds below hold for any tie rule.

**Element-wise bound.** For every :math:`x` in the covered interval
:math:`[\Delta(q_{\min} - z) - \Delta/2,\ \Delta(q_{\max} - z) + \Delta/2]`,
:math:`|x - Q(x)| \le \Delta/2`: with :math:`t = x/\Delta + z`, if
:math:`\operatorname{round}(x/\Delta) + z` is in range the error is
:math:`\Delta|t - \operatorname{round}(t)| \le \Delta/2`; if it is below :math:`q_{\min}`
then :math:`t \le q_{\min} - \tfrac12`, so :math:`t = q_{\min} - \tfrac12` and the clipped
error is :math:`\Delta/2` (likewise above). The interval contains
:math:`[-\max|x|, \max|x|]` (symmetric) and :math:`[\alpha, \beta]` (asymmetric, since
:math:`|z + \alpha/\Delta| \le \tfrac12`). In floating point the bound holds up to the
rounding of :math:`x/\Delta` and :math:`\Delta(q - z)`: in a floating dtype of unit
roundoff :math:`u`, :math:`\mathrm{fl}(x/\Delta) = (x/\Delta)(1 + \delta_1)` moves
:math:`t` by at most :math:`u|x|/\Delta` and :math:`\mathrm{fl}(\Delta(q - z))` adds at
most :math:`u\,\Delta|q - z| \le uM`, :math:`M = \Delta\max(|q_{\min} - z|, |q_{\max} -
z|)`, so (with :math:`|x| \le M + \Delta/2` on the covered interval)

.. math:: |x - Q(x)| \le \frac\Delta2 + u\,(2M + \Delta)

(:func:`error_bound`; :math:`u = 0` on SymPy). The integers :math:`q - z` must be exact in
the dtype: ``bits`` is at most its significand precision (24 for float32, 8 for bfloat16).

**Linear layer.** For :math:`Y = XW` with :math:`W` quantized (steps :math:`\Delta_{kj}`,
i.e. per tensor or per output channel :math:`j`), :math:`E = W - Q(W)`:

.. math:: |Y - XQ(W)|_{ij} = \Bigl|\sum_k X_{ik}E_{kj}\Bigr| \le \frac12\sum_k |X_{ik}|
          \Delta_{kj}\quad\text{(worst case, a bound)};

modelling the :math:`E_{kj}` as independent and uniform on :math:`[-\Delta_{kj}/2,
\Delta_{kj}/2]` (Widrow's model, not a bound) the error has standard deviation
:math:`(\sum_k X_{ik}^2\Delta_{kj}^2/12)^{1/2}` (:func:`linear_output_error_rms`).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, DTypeError, NonFiniteError, ShapeError
from nlaverify.lowrank import _xp

__all__ = [
    "QuantParams",
    "covered_interval",
    "dequantize",
    "error_bound",
    "fake_quantize",
    "linear_output_error_bound",
    "linear_output_error_rms",
    "quantization_params",
    "quantize",
]


@dataclass(frozen=True)
class QuantParams:
    """A quantizer: step :math:`\\Delta` and zero point :math:`z` (arrays broadcastable to
    the quantized tensor: shape ``()`` per tensor, keepdims shape per channel), the integer
    range, and how they were chosen."""

    scale: Any
    zero_point: Any
    qmin: int
    qmax: int
    bits: int
    symmetric: bool
    axis: int | None
    #: the unit roundoff :math:`u` of the arithmetic (0 on SymPy; :func:`error_bound`)
    roundoff: float = 0.0


def _reduce_axes(ndim: int, axis: int | None) -> tuple[int, ...] | None:
    if axis is None:
        return None
    return tuple(i for i in range(ndim) if i != axis % ndim)


def _check_bits(bits: Any, symmetric: bool) -> int:
    lo = 2 if symmetric else 1
    if isinstance(bits, bool) or not isinstance(bits, numbers.Integral) or not (
            lo <= bits <= 32):
        why = " (the symmetric range [-(2^(b-1)-1), 2^(b-1)-1] is {0} for b = 1)" if (
            symmetric and bits == 1) else ""
        raise ArgumentError(f"quantization_params: argument 'bits': expected an integer in "
                            f"[{lo}, 32] for a {'symmetric' if symmetric else 'asymmetric'} "
                            f"quantizer, got {bits!r}{why}")
    return int(bits)


#: significand precision (bits, the implicit one included) of the floating dtypes
_PRECISION = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


def _roundoff(xp: Namespace, x: Any, bits: int, symmetric: bool) -> float:
    """The unit roundoff of ``x``'s arithmetic, after checking that ``x`` is finite (when
    it can be inspected) and that the integers of a ``bits``-bit quantizer are exact in its
    dtype."""
    if xp.exact:
        return 0.0
    if xp.name == "mpmath":
        return 2.0 ** -int(xp.ctx.prec)  # type: ignore[attr-defined]
    name = str(getattr(x.dtype, "name", x.dtype)).rsplit(".", 1)[-1]
    if name not in _PRECISION:
        raise DTypeError(f"quantization_params: argument 'x': expected a floating dtype "
                         f"({', '.join(_PRECISION)}), got {name}")
    p = _PRECISION[name]
    top = bits - 1 if symmetric else bits  # the integers reach 2^top - 1
    if top > p:
        raise ArgumentError(f"quantization_params: argument 'bits': expected at most "
                            f"{p + bits - top} for {name} (its {p}-bit significand must hold "
                            f"the integers up to 2^{top}), got {bits}")
    if xp.is_concrete(x) and not bool(xp.all(xp.isfinite(x))):
        raise NonFiniteError("quantization_params: argument 'x': expected finite values, got "
                             "inf or nan")
    return 2.0 ** -p


def quantization_params(xp: Namespace, x: Any, bits: int, *, symmetric: bool = True,
                        axis: int | None = None) -> QuantParams:
    r"""The step and zero point of a ``bits``-bit quantizer of ``x`` (module docstring):
    from :math:`\max|x|` (symmetric) or from :math:`\min x, \max x` (asymmetric), over the
    whole tensor (``axis=None``) or per index of ``axis`` (per channel). An all-zero tensor
    (or channel) gets :math:`\Delta = 1` (any step represents 0 exactly). Baggag & Saad §4.1.

    Raises:
        ArgumentError: ``bits`` not an integer in :math:`[2, 32]` (symmetric) or
            :math:`[1, 32]` (asymmetric), or beyond the significand of ``x``'s dtype;
            ``axis`` out of range.
        ShapeError: ``x`` is not an array.
        DTypeError: ``x`` not floating (on the floating backends).
        NonFiniteError: ``x`` holds inf or nan (a NaN maximum would silently give a zero
            step, an infinite one an infinite step).
    """
    bits = _check_bits(bits, symmetric)
    shape = tuple(getattr(x, "shape", ()))
    if not hasattr(x, "shape"):
        raise ShapeError(f"quantization_params: argument 'x': expected an array of the "
                         f"{xp.name} namespace, got {type(x).__name__}")
    if axis is not None and (isinstance(axis, bool) or not isinstance(axis, numbers.Integral)
                             or not -len(shape) <= axis < len(shape)):
        raise ArgumentError(f"quantization_params: argument 'axis': expected None or an "
                            f"integer in [{-len(shape)}, {len(shape) - 1}] for shape {shape}, "
                            f"got {axis!r}")
    roundoff = _roundoff(xp, x, bits, symmetric)
    red = _reduce_axes(len(shape), axis)
    keep = axis is not None
    if symmetric:
        qmax = 2 ** (bits - 1) - 1
        qmin = -qmax
        width = _xp.amax(xp, _xp.absolute(xp, x), axis=red, keepdims=keep)
    else:
        qmin, qmax = 0, 2**bits - 1
        zero = xp.zeros_like(_xp.amax(xp, x, axis=red, keepdims=keep))
        lo = _xp.minimum(xp, _xp.amin(xp, x, axis=red, keepdims=keep), zero)
        hi = _xp.maximum(xp, _xp.amax(xp, x, axis=red, keepdims=keep), zero)
        width = hi - lo
    nonzero = xp.greater(width, 0) if not xp.object_arrays else _obj_gt0(width)
    safe = xp.where(nonzero, width, xp.ones_like(width))
    scale = xp.where(nonzero, safe / xp.const(qmax), xp.ones_like(width))
    if symmetric:
        z = xp.zeros_like(scale)
    else:
        z = _xp.round_half_even(xp, -lo / scale)
    return QuantParams(scale, z, qmin, qmax, bits, symmetric, axis, roundoff)


def _obj_gt0(w: Any) -> np.ndarray:
    arr = np.asarray(w, dtype=object)
    return np.vectorize(lambda v: bool(v > 0), otypes=[bool])(arr) if arr.size else arr


def quantize(xp: Namespace, x: Any, params: QuantParams) -> Any:
    r"""The integers :math:`q = \operatorname{clip}(\operatorname{round}(x/\Delta) + z,
    q_{\min}, q_{\max})` (in ``x``'s dtype; round half to even)."""
    t = _xp.round_half_even(xp, x / params.scale) + params.zero_point
    return _xp.clip(xp, t, params.qmin, params.qmax)


def dequantize(xp: Namespace, q: Any, params: QuantParams) -> Any:
    r""":math:`Q = \Delta\,(q - z)`."""
    return params.scale * (q - params.zero_point)


def fake_quantize(xp: Namespace, x: Any, bits: int, *, symmetric: bool = True,
                  axis: int | None = None) -> tuple[Any, QuantParams]:
    r"""Quantize then dequantize ``x``: :math:`(Q(x), \text{params})` (simulated
    quantization, as in quantization-aware training). Baggag & Saad §4.1."""
    params = quantization_params(xp, x, bits, symmetric=symmetric, axis=axis)
    return dequantize(xp, quantize(xp, x, params), params), params


def error_bound(params: QuantParams) -> Any:
    r"""The element-wise bound on :math:`|x - Q(x)|`, valid on :func:`covered_interval`
    (per channel: per index of ``axis``): :math:`\Delta/2` in exact arithmetic, plus
    :math:`u(2M + \Delta)` for the rounding of :math:`x/\Delta` and :math:`\Delta(q - z)`
    in a dtype of unit roundoff :math:`u` (module docstring; ``params.roundoff``)."""
    if not params.roundoff:
        return params.scale / 2
    d, z = params.scale, params.zero_point
    reach = d * _xp_max_abs(params.qmin - z, params.qmax - z)
    return params.scale / 2 + params.roundoff * (2 * reach + d)


def _xp_max_abs(a: Any, b: Any) -> Any:
    r""":math:`\max(|a|, |b|)` for the (floating, non-negative-scale) zero-point arithmetic."""
    return (abs(a) + abs(b) + abs(abs(a) - abs(b))) / 2


def covered_interval(params: QuantParams) -> tuple[Any, Any]:
    r"""The interval :math:`[\Delta(q_{\min} - z) - \Delta/2,\ \Delta(q_{\max} - z) +
    \Delta/2]` on which :math:`|x - Q(x)| \le \Delta/2` (it contains the calibration
    range)."""
    d, z = params.scale, params.zero_point
    return d * (params.qmin - z) - d / 2, d * (params.qmax - z) + d / 2


def _steps(xp: Namespace, step: Any, w_shape: tuple[int, int]) -> Any:
    if len(w_shape) != 2:
        raise ShapeError(f"linear_output_error_bound: argument 'w_shape': expected (k, n), got "
                         f"{w_shape}")
    ones = xp.ones(w_shape) if xp.object_arrays else xp.ones(w_shape, dtype=step.dtype)
    return ones * step


def linear_output_error_bound(xp: Namespace, X: Any, step: Any,
                              w_shape: tuple[int, int]) -> Any:
    r"""The worst-case bound :math:`B_{ij} = \tfrac12\sum_k |X_{ik}|\,\Delta_{kj}` on
    :math:`|XW - XQ(W)|_{ij}` for ``W`` of shape ``w_shape`` = :math:`(k, n)` quantized
    with steps ``step`` (broadcastable to ``w_shape``: a scalar per tensor, ``(1, n)`` per
    output channel). Holds whenever every :math:`W_{kj}` lies in the covered interval (always,
    when the quantizer was calibrated on :math:`W`). Baggag & Saad §4.1."""
    D = _steps(xp, step, w_shape)
    return xp.matmul(_xp.absolute(xp, X), D) / 2


def linear_output_error_rms(xp: Namespace, X: Any, step: Any,
                            w_shape: tuple[int, int]) -> Any:
    r"""The standard deviation :math:`(\sum_k X_{ik}^2\Delta_{kj}^2/12)^{1/2}` of
    :math:`(XW - XQ(W))_{ij}` under Widrow's model (rounding errors independent and uniform
    on :math:`[-\Delta/2, \Delta/2]`): a typical size, **not** a bound."""
    D = _steps(xp, step, w_shape)
    return xp.sqrt(xp.matmul(X * X, D * D) / 12)
