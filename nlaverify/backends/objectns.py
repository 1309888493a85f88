"""Namespaces over NumPy object arrays: exact SymPy and high-precision mpmath.

They implement the subset of the array API that :mod:`nlaverify.ops` uses, with
the same names and signatures, so an op runs unchanged on them. Elementwise
functions map a scalar function over the array; reductions and ``@`` use
NumPy's object-dtype loops (which call the scalars' ``+`` and ``*``).
"""

from __future__ import annotations

import numbers
import operator
import sys
from collections.abc import Callable, Sequence
from typing import Any

import mpmath
import numpy as np

from nlaverify.backends.base import Namespace


class _LazySympy:
    """``sympy``, imported on first use: the mpmath namespace and the NumPy-backed paths
    never touch it (0.2 s of every command's start otherwise)."""

    def __getattr__(self, name: str) -> Any:
        import sympy as module

        globals()["sympy"] = module
        return getattr(module, name)


sympy: Any = _LazySympy()


def _is_sympy(v: Any) -> bool:
    """``v`` is a SymPy expression (never true before SymPy is imported, so the mpmath
    namespace can ask without importing it)."""
    module = sys.modules.get("sympy")
    return module is not None and isinstance(v, module.Basic)


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool | np.bool_)


class ObjectNamespace(Namespace):
    """Shared machinery of the SymPy and mpmath namespaces."""

    object_arrays = True
    float32: Any = object
    float64: Any = object
    int64: Any = np.int64
    bool: Any = np.bool_

    # -- conversion ------------------------------------------------------------
    def scalar(self, v: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def const(self, v: Any) -> Any:
        return self.scalar(v)

    def asarray(self, x: Any, dtype: Any = None) -> np.ndarray:
        if dtype is not None and dtype is not object and np.dtype(dtype).kind in "iu":
            return np.asarray(x, dtype=dtype)  # integer index arrays (tokens) on request
        arr = np.asarray(x, dtype=object) if not isinstance(x, np.ndarray) else x
        out = np.empty(arr.shape, dtype=object)
        for idx, v in np.ndenumerate(arr):
            out[idx] = self.scalar(v)
        return out

    def _map(self, f: Callable[[Any], Any], x: Any) -> np.ndarray:
        arr = np.asarray(x, dtype=object)
        out = np.empty(arr.shape, dtype=object)
        for idx, v in np.ndenumerate(arr):
            out[idx] = f(v)
        return out

    def _wrap(self, v: Any) -> np.ndarray:
        if isinstance(v, np.ndarray):
            return v
        out = np.empty((), dtype=object)
        out[()] = v
        return out

    # -- creation --------------------------------------------------------------
    def zeros(self, shape: Sequence[int] | int, dtype: Any = None) -> np.ndarray:
        return np.full(shape, self.scalar(0), dtype=object)

    def ones(self, shape: Sequence[int] | int, dtype: Any = None) -> np.ndarray:
        return np.full(shape, self.scalar(1), dtype=object)

    def zeros_like(self, x: Any) -> np.ndarray:
        return self.zeros(np.shape(x))

    def ones_like(self, x: Any) -> np.ndarray:
        return self.ones(np.shape(x))

    def arange(self, n: int) -> np.ndarray:
        return np.arange(n)

    def one_hot(self, tokens: Any, depth: int, dtype: Any = None) -> np.ndarray:
        hot = np.asarray(tokens)[..., None] == np.arange(depth)
        return self.asarray(hot.astype(np.int64), dtype=object)

    def astype(self, x: Any, dtype: Any) -> np.ndarray:
        return self.asarray(x, dtype=object)

    # -- shape manipulation ----------------------------------------------------
    def reshape(self, x: Any, shape: Sequence[int]) -> np.ndarray:
        return np.reshape(x, shape)

    def permute_dims(self, x: Any, axes: Sequence[int]) -> np.ndarray:
        return np.transpose(x, axes)

    def matrix_transpose(self, x: Any) -> np.ndarray:
        return np.swapaxes(x, -1, -2)

    def take(self, x: Any, indices: Any, axis: int = 0) -> np.ndarray:
        return np.take(x, np.asarray(indices), axis=axis)

    def concat(self, arrays: Sequence[Any], axis: int = 0) -> np.ndarray:
        return np.concatenate(arrays, axis=axis)

    def stack(self, arrays: Sequence[Any], axis: int = 0) -> np.ndarray:
        return np.stack(arrays, axis=axis)

    def tril(self, x: Any, k: int = 0) -> np.ndarray:
        return np.tril(x, k)

    # -- arithmetic ------------------------------------------------------------
    def matmul(self, a: Any, b: Any) -> np.ndarray:
        return self._wrap(np.matmul(a, b))

    def sum(self, x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False):
        return self._wrap(np.sum(np.asarray(x, dtype=object), axis=axis, keepdims=keepdims))

    def where(self, cond: Any, a: Any, b: Any) -> np.ndarray:
        c, a, b = np.broadcast_arrays(np.asarray(cond), np.asarray(a, dtype=object),
                                      np.asarray(b, dtype=object))
        out = np.empty(c.shape, dtype=object)
        for idx, ci in np.ndenumerate(c):
            out[idx] = self._select(ci, a[idx], b[idx])
        return out

    def _select(self, cond: Any, a: Any, b: Any) -> Any:
        return a if cond else b

    def greater(self, a: Any, b: Any) -> np.ndarray:
        """Elementwise ``a > b`` as an object array (symbolic relations stay unevaluated)."""
        return np.frompyfunc(operator.gt, 2, 1)(np.asarray(a, dtype=object), b)

    def equal(self, a: Any, b: Any) -> np.ndarray:
        """Elementwise ``a == b`` as an object array: a SymPy ``Eq`` (``true``/``false``
        when decidable, else unevaluated, so that ``where`` builds a ``Piecewise``) on the
        exact namespace, a ``bool`` on mpmath."""
        return np.frompyfunc(self._equal, 2, 1)(np.asarray(a, dtype=object), b)

    def isfinite(self, x: Any) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def all(self, x: Any) -> bool:
        return bool(np.all(x))

    def exp(self, x: Any) -> np.ndarray:
        return self._map(self._exp, x)

    def log(self, x: Any) -> np.ndarray:
        return self._map(self._log, x)

    def sqrt(self, x: Any) -> np.ndarray:
        return self._map(self._sqrt, x)

    def tanh(self, x: Any) -> np.ndarray:
        return self._map(self._tanh, x)

    def sin(self, x: Any) -> np.ndarray:
        return self._map(self._sin, x)

    def cos(self, x: Any) -> np.ndarray:
        return self._map(self._cos, x)

    def erf(self, x: Any) -> np.ndarray:
        return self._map(self._erf, x)

    def expm1(self, x: Any) -> np.ndarray:
        r""":math:`e^x - 1` (exact on SymPy; mpmath's ``expm1``, without cancellation)."""
        return self._map(self._expm1, x)

    def log1p(self, x: Any) -> np.ndarray:
        r""":math:`\log(1 + x)` (exact on SymPy; mpmath's ``log1p``, without cancellation)."""
        return self._map(self._log1p, x)

    _exp: Callable[[Any], Any]
    _log: Callable[[Any], Any]
    _sqrt: Callable[[Any], Any]
    _tanh: Callable[[Any], Any]
    _sin: Callable[[Any], Any]
    _cos: Callable[[Any], Any]
    _erf: Callable[[Any], Any]
    _expm1: Callable[[Any], Any]
    _log1p: Callable[[Any], Any]
    _equal: Callable[[Any, Any], Any]


class SympyNamespace(ObjectNamespace):
    """Exact arithmetic on object arrays of SymPy expressions."""

    name = "sympy"
    exact = True

    def __init__(self) -> None:
        self.pi = sympy.pi
        self.inf = sympy.oo
        self._exp, self._log, self._sqrt = sympy.exp, sympy.log, self._exact_sqrt
        self._tanh, self._sin, self._cos, self._erf = sympy.tanh, sympy.sin, sympy.cos, sympy.erf
        self._expm1 = lambda v: sympy.exp(v) - 1
        self._log1p = lambda v: sympy.log(1 + v)
        self._equal = sympy.Eq
        self._shift_count = 0
        self._scales: dict[tuple[Any, ...], sympy.Symbol] = {}

    @staticmethod
    def _exact_sqrt(v: Any) -> sympy.Basic:
        r""":math:`\sqrt v` after taking the common factors out of the terms of ``v``
        (:func:`sympy.factor_terms`, an exact rewriting), so that a positive factor leaves
        the root: :math:`\sqrt{\sum_j c_j^2/(d s^2) + \epsilon/s^2} = \sqrt{\sum_j
        c_j^2/d + \epsilon}\,/\,s` for :math:`s > 0`. This is how the opaque
        :meth:`norm_scale` of the normalizations cancels exactly, and cheaply, in every
        proof (lemma ``norm_scale_invariance``)."""
        return sympy.sqrt(sympy.factor_terms(v))

    def scalar(self, v: Any) -> sympy.Basic:
        """Exact SymPy value of ``v``; a float is taken as the binary number it is."""
        if isinstance(v, sympy.Basic):
            return v
        if _is_bool(v):
            return sympy.true if v else sympy.false
        if isinstance(v, numbers.Integral):
            return sympy.Integer(int(v))
        if isinstance(v, numbers.Real):
            fv = float(v)
            if fv == float("inf"):
                return sympy.oo
            if fv == float("-inf"):
                return -sympy.oo
            return sympy.Rational(fv)
        raise TypeError(f"cannot convert {type(v).__name__} to an exact SymPy number")

    def rational(self, p: int, q: int = 1) -> sympy.Rational:
        return sympy.Rational(p, q)

    def const_sqrt(self, p: int, q: int = 1, pi_power: int = 0) -> sympy.Basic:
        return sympy.sqrt(sympy.Rational(p, q) * sympy.pi**pi_power)

    def reset_shifts(self) -> None:
        """Restart the numbering of :meth:`stability_shift` and :meth:`norm_scale` symbols
        (for reproducible proofs)."""
        self._shift_count = 0
        self._scales = {}

    def stability_shift(self, z: Any, axis: int = -1) -> np.ndarray:
        shape = list(np.shape(z))
        shape[axis] = 1
        out = np.empty(shape, dtype=object)
        for idx in np.ndindex(*shape):
            out[idx] = sympy.Symbol(f"c_{self._shift_count}", real=True)
            self._shift_count += 1
        return out

    def nan_masked_rows(self, p: Any, e: Any, axis: int = -1) -> np.ndarray:
        """``p`` unchanged: the exact rows are symbols, never all masked."""
        return np.asarray(p, dtype=object)

    def safe_row_sum(self, e: Any, axis: int = -1) -> np.ndarray:
        """The plain row sum: the exact side keeps :math:`\\sum_j e^{z_j-c}` (the guard
        of the floating backends is licensed by ``softmax_denominator_at_least_one``)."""
        return self.sum(e, axis=axis, keepdims=True)

    def norm_scale(self, x: Any, eps: Any, axis: int = -1) -> np.ndarray:
        """An opaque positive symbol :math:`s_k` per row: the same symbol for the same row
        (and ``eps``) until :meth:`reset_shifts`, so that a forward function, its VJP and its
        Jacobian, run on the same input, share the scale as the floating kernels do."""
        rows = np.moveaxis(np.asarray(x, dtype=object), axis, -1)
        out = np.empty((*rows.shape[:-1], 1), dtype=object)
        for idx in np.ndindex(*rows.shape[:-1]):
            key = (*rows[idx], eps)
            if key not in self._scales:
                self._scales[key] = sympy.Symbol(f"s_{len(self._scales)}", positive=True)
            out[(*idx, 0)] = self._scales[key]
        return np.moveaxis(out, -1, axis)

    def without_shifts(self, x: Any) -> Any:
        """Set every :meth:`stability_shift` symbol to 0 (allowed by the lemma
        ``softmax_shift_invariance``): an exact value free of the opaque shifts."""
        def clean(v: Any) -> Any:
            if not isinstance(v, sympy.Basic):
                return v
            shifts = {s: 0 for s in v.free_symbols if s.name.startswith("c_")}
            return v.xreplace(shifts)

        return self._map(clean, x) if isinstance(x, np.ndarray) else clean(x)

    def _select(self, cond: Any, a: Any, b: Any) -> Any:
        if _is_bool(cond) or cond in (sympy.true, sympy.false):
            return a if bool(cond) else b
        # Inside the branch taken when ``cond`` holds, ``cond`` is true (and false inside the
        # other): resolve the nested selections on the same condition, so that e.g. the
        # stable sigmoid's where(x > 0, f(where(x > 0, -x, x)), ...) is one flat Piecewise.
        if isinstance(a, sympy.Basic):
            a = a.xreplace({cond: sympy.true})
        if isinstance(b, sympy.Basic):
            b = b.xreplace({cond: sympy.false})
        return sympy.Piecewise((a, cond), (b, True))

    def isfinite(self, x: Any) -> np.ndarray:
        return self._map(lambda v: not (v.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan)), x)


class MpmathNamespace(ObjectNamespace):
    """High-precision arithmetic: object arrays of ``mpf`` in a private context.

    The context is private (``mpmath.MPContext``), so the working precision of
    this namespace never changes the global ``mpmath.mp``.
    """

    name = "mpmath"

    def __init__(self, digits: int) -> None:
        ctx = mpmath.MPContext()
        ctx.dps = digits
        self.ctx = ctx
        self.digits = digits
        self.pi = ctx.pi
        self.inf = ctx.inf
        self._exp, self._log, self._sqrt = ctx.exp, ctx.log, ctx.sqrt
        self._tanh, self._sin, self._cos, self._erf = ctx.tanh, ctx.sin, ctx.cos, ctx.erf
        self._expm1, self._log1p, self._equal = ctx.expm1, ctx.log1p, operator.eq

    def __repr__(self) -> str:
        return f"<nlaverify namespace mpmath ({self.digits} digits)>"

    def scalar(self, v: Any) -> Any:
        """``v`` as an ``mpf`` of this context (a float converts exactly)."""
        if _is_bool(v):
            return bool(v)
        if _is_sympy(v):
            return self.ctx.mpf(sympy.N(v, self.digits + 10).__str__()) if v.is_number else v
        if isinstance(v, numbers.Integral):
            return self.ctx.mpf(int(v))
        if isinstance(v, numbers.Real):
            return self.ctx.mpf(float(v))
        return self.ctx.mpf(v)

    def rational(self, p: int, q: int = 1) -> Any:
        return self.ctx.mpf(p) / q

    def const_sqrt(self, p: int, q: int = 1, pi_power: int = 0) -> Any:
        return self.ctx.sqrt(self.ctx.mpf(p) / q * self.ctx.pi**pi_power)

    def stability_shift(self, z: Any, axis: int = -1) -> np.ndarray:
        ninf = -self.ctx.inf
        return self._map(lambda m: self.scalar(0) if m == ninf else m,
                         self.max(z, axis=axis, keepdims=True))

    def safe_row_sum(self, e: Any, axis: int = -1) -> np.ndarray:
        return self._map(lambda s: self.scalar(1) if s == 0 else s,
                         self.sum(e, axis=axis, keepdims=True))

    def nan_masked_rows(self, p: Any, e: Any, axis: int = -1) -> np.ndarray:
        zero = np.asarray(self._map(lambda s: s == 0, self.sum(e, axis=axis, keepdims=True)),
                          dtype=bool)
        return np.where(zero, self.ctx.nan, np.asarray(p, dtype=object)).astype(object)

    def norm_scale(self, x: Any, eps: Any, axis: int = -1) -> np.ndarray:
        """:math:`s = 1`: the reference evaluates the unscaled definition (its exponent
        range is unbounded), an independent check of the floating kernels' scaling."""
        shape = list(np.shape(x))
        shape[axis] = 1
        return self.ones(shape)

    def max(self, x: Any, axis: int | None = None, keepdims: bool = False) -> np.ndarray:
        return self._wrap(np.max(np.asarray(x, dtype=object), axis=axis, keepdims=keepdims))

    def isfinite(self, x: Any) -> np.ndarray:
        return self._map(lambda v: bool(self.ctx.isfinite(v)), x).astype(bool)
