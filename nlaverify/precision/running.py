r"""A first-order running error bound of an op evaluated in a floating precision (Wilkinson's
running error analysis, Higham 2002 §3.3; the recurrence bound of §3.1 and Lemma 3.1).

The tolerance model's generic bound :math:`C\kappa D \max(\sqrt k u_a, u)` counts a
computation as :math:`D` stages of one rounding each, amplified by one condition number. A
recurrence is not: the selective scan :math:`x_k = \bar A_k x_{k-1} + \bar B_k u_k` is
:math:`L` stages deep, and its backward (the state adjoint
:math:`\lambda_k = \bar y_k C_k^\top + \bar A_{k+1}\lambda_{k+1}`) too, and both damp
an old rounding error by the decay products :math:`\prod \bar A`. Here the op itself (the
proved forward, VJP or JVP of :data:`~nlaverify.ops.registry.OPS`, written once against
``xp``) runs on :class:`RunningErrorNamespace`, whose scalars carry their value :math:`v`
(float64, at the case's inputs, which are exact in the kernel's dtype: the reference sees the
kernel's rounded inputs, so only the kernel's arithmetic errs) and a first-order bound
:math:`e` on the absolute error a kernel that rounds every result to the dtype makes in it:

.. math::
   \widehat{a \circ b} = (a \circ b)(1 + \delta),\ |\delta| \le u
   \quad\Longrightarrow\quad
   e_{a\pm b} = e_a + e_b + u|a \pm b|,\quad
   e_{ab} = |b| e_a + |a| e_b + u|ab|,\quad
   e_{a/b} = \frac{e_a + |a/b|\, e_b}{|b|} + u\,\Bigl|\frac ab\Bigr| ,

an elementary function :math:`f` (``exp``, ``log1p``, ...) :math:`e_{f(a)} = |f'(a)| e_a +
u_f |f(a)|` with :math:`u_f = u + u_a` (evaluated faithfully in the accumulation precision
:math:`u_a`, then rounded once to the dtype: XLA and PyTorch evaluate bfloat16 ``exp`` in
float32), and a sum of :math:`k` terms accumulated in :math:`u_a` and stored in the dtype
(Higham (4.4), recursive summation, first order)

.. math:: e_{\sum_i a_i} = \sum_i e_{a_i} + (k-1)\,u_a \sum_i |a_i| + u\,\Bigl|\sum_i a_i\Bigr| .

Applied to the recurrence this is the sum over the depth weighted by the decay products,
:math:`e_{x_k} = \sum_{j\le k} \bigl(\prod_{i=j+1}^{k} |\bar A_i|\bigr)\, u\,(|\bar A_j
x_{j-1}| + |x_j|) + \dots` (a product and a sum rounded a step; the dots are the drive's
:math:`\bar B_j u_j` own roundings, damped alike): no constant :math:`C`, no generic
:math:`\kappa` (the weights :math:`\sum|\text{terms}|` of every sum relative to
:math:`|\text{sum}|` are the scan's own condition, entry by entry), no stage count. Each scalar
also counts the roundings :math:`m` on its deepest path, and :func:`running_error` divides the
first-order bound by :math:`1 - m u`, the second-order terms of every path bounded as in
Higham's Lemma 3.1 (:math:`\prod_{i\le m}(1+\delta_i)^{\pm1} = 1 + \theta_m`, :math:`|\theta_m|
\le m u/(1 - m u)`; the weights :math:`|\cdot|` are the exact values, a kernel's differ by the
same relative :math:`\theta_m`); it returns :math:`\infty` when :math:`m u \ge 1` (nothing can
be said).

Constants and matmuls. A Python constant of the op (:math:`10^{-5}`, :math:`1/\sqrt d`) is
rounded once to the dtype unless it is representable; a product or quotient by an exact
:math:`\pm 2^j` is exact; an infinity (a masked score) is exact in the kernel too. A matmul
(:meth:`RunningErrorNamespace.matmul`) rounds each product with :math:`u_p` (``u_prod``:
:math:`u` by default; the graph check passes :math:`u_a` for bfloat16 operands, whose
products are exact in a float32 accumulator, and TF32's operand rounding) and works on the
value and bound arrays at once.

Scope and honesty. The bound is the worst case over the signs of every rounding of *the op's
own evaluation order* (the reference's). A kernel that evaluates the same sums in another
order (an associative scan inside chunks, autodiff's backward) rounds at other sites: each
product :math:`\prod \bar A` reassociated, each state a sum of the same terms. The terms
:math:`|\cdot|` it rounds are the same as here up to one level of reassociation, and the
worst case aligns every rounding, which rounding errors of independent sign do not do (they
add in quadrature, Higham & Mary 2019): the measured errors of sequential and chunked
bfloat16 and float32 scans are 2 to 20 times below this bound (worst row 0.52, median
0.05 to 0.2; ``tests/test_ssm_check_op.py``, ``docs/guide/precision.md``). A kernel that
keeps intermediates in a wider precision (XLA's fusions) only errs less. A kernel that
accumulates sums in the dtype itself (not in float32) is outside the default model: pass
``accumulation=`` to ``check_op``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nlaverify.backends.objectns import ObjectNamespace

__all__ = ["RunningError", "RunningErrorNamespace", "as_arrays", "running_error",
           "running_namespace"]


class RunningError:
    """A value, a first-order bound on its absolute rounding error, and the number of
    roundings on its deepest path (see the module docstring for the rules)."""

    __slots__ = ("e", "m", "ns", "v")

    def __init__(self, v: float, e: float, m: int, ns: RunningErrorNamespace) -> None:
        self.v, self.e, self.m, self.ns = float(v), float(e), int(m), ns

    # -- helpers -----------------------------------------------------------------------
    def _lift(self, other: Any) -> RunningError:
        """A constant of the op (a Python number): rounded once to the dtype
        (:meth:`RunningErrorNamespace.const`)."""
        if isinstance(other, RunningError):
            return other
        return self.ns.const(other)

    def _rounded(self, v: float, e: float, m: int) -> RunningError:
        if math.isinf(v):  # a masked score: an exact infinity met, exact in the run too
            return RunningError(v, 0.0, m + 1, self.ns)
        return RunningError(v, e + self.ns.u * abs(v), m + 1, self.ns)

    # -- arithmetic ----------------------------------------------------------------------
    def __add__(self, other: Any) -> Any:
        if isinstance(other, np.ndarray):
            return NotImplemented  # the array applies the op entry by entry
        o = self._lift(other)
        return self._rounded(self.v + o.v, self.e + o.e, max(self.m, o.m))

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        if isinstance(other, np.ndarray):
            return NotImplemented  # the array applies the op entry by entry
        o = self._lift(other)
        return self._rounded(self.v - o.v, self.e + o.e, max(self.m, o.m))

    def __rsub__(self, other: Any) -> Any:
        if isinstance(other, np.ndarray):
            return NotImplemented  # the array applies the op entry by entry
        return self._lift(other).__sub__(self)

    def __mul__(self, other: Any) -> Any:
        if isinstance(other, np.ndarray):
            return NotImplemented  # the array applies the op entry by entry
        o = self._lift(other)
        if _exact_power_of_two(o):  # a sign or a power of two: exact (no underflow here)
            return RunningError(self.v * o.v, self.e * abs(o.v), self.m, self.ns)
        if _exact_power_of_two(self):
            return RunningError(self.v * o.v, o.e * abs(self.v), o.m, self.ns)
        return self._rounded(self.v * o.v, abs(o.v) * self.e + abs(self.v) * o.e,
                             max(self.m, o.m))

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> Any:
        if isinstance(other, np.ndarray):
            return NotImplemented  # the array applies the op entry by entry
        o = self._lift(other)
        q = self.v / o.v
        if _exact_power_of_two(o):
            return RunningError(q, self.e / abs(o.v), self.m, self.ns)
        return self._rounded(q, (self.e + abs(q) * o.e) / abs(o.v), max(self.m, o.m))

    def __rtruediv__(self, other: Any) -> Any:
        if isinstance(other, np.ndarray):
            return NotImplemented  # the array applies the op entry by entry
        return self._lift(other).__truediv__(self)

    def __neg__(self) -> RunningError:
        return RunningError(-self.v, self.e, self.m, self.ns)

    def __pos__(self) -> RunningError:
        return self

    def __abs__(self) -> RunningError:
        return RunningError(abs(self.v), self.e, self.m, self.ns)

    # comparisons decide branches on the value (a branch flip inside the error band is a
    # jump the first-order model does not see: the ops branch only where both sides agree,
    # softplus' and the sigmoid's stable forms)
    def __gt__(self, other: Any) -> bool:
        return self.v > self._lift(other).v

    def __lt__(self, other: Any) -> bool:
        return self.v < self._lift(other).v

    def __ge__(self, other: Any) -> bool:
        return self.v >= self._lift(other).v

    def __le__(self, other: Any) -> bool:
        return self.v <= self._lift(other).v

    def __eq__(self, other: Any) -> bool:  # type: ignore[override]
        return self.v == self._lift(other).v

    def __hash__(self) -> int:
        return hash(self.v)

    def __float__(self) -> float:
        return self.v

    def __repr__(self) -> str:
        return f"RunningError({self.v:.6g} ± {self.e:.3g}, m={self.m})"


def _exact_power_of_two(s: RunningError) -> bool:
    r"""An exact constant :math:`\pm 2^j`: a product with it, or a quotient by it, is exact."""
    if s.e != 0.0 or s.m != 0 or s.v == 0.0 or not math.isfinite(s.v):
        return False
    return math.frexp(abs(s.v))[0] == 0.5


class RunningErrorNamespace(ObjectNamespace):
    r"""The array namespace of :class:`RunningError` scalars: an op written against ``xp``
    runs on it unchanged and returns, entry by entry, its value and the first-order bound
    on the error of a kernel in precision ``u`` with sums accumulated in ``u_acc``."""

    name = "running_error"

    def __init__(self, u: float, u_acc: float, u_prod: float | None = None) -> None:
        self.u, self.u_acc = float(u), float(u_acc)
        #: the relative error of one product of a matmul (:meth:`matmul`)
        self.u_prod = self.u if u_prod is None else float(u_prod)
        #: the significand bits of the dtype (:math:`u = 2^{-p}`)
        self.bits = round(-math.log2(self.u)) if self.u > 0 else 0
        self.pi, self.inf = math.pi, math.inf
        self._equal = operator.eq

    def scalar(self, v: Any) -> Any:
        """An input: exact (the kernel's inputs are values of its dtype)."""
        if isinstance(v, bool | np.bool_):
            return bool(v)
        if isinstance(v, RunningError):
            return v
        return RunningError(float(v), 0.0, 0, self)

    def const(self, v: Any) -> Any:
        r"""A constant of the op (``xp.const(eps)``, a Python number in an operation): exact
        when representable in the dtype, else rounded once, :math:`e = u|v|` (the kernel
        casts :math:`10^{-5}` to the dtype)."""
        if isinstance(v, bool | np.bool_ | RunningError):
            return self.scalar(v)
        v = float(v)
        return RunningError(v, 0.0 if self._representable(v) else self.u * abs(v), 0, self)

    def _representable(self, v: float) -> bool:
        if not math.isfinite(v) or v == 0.0 or self.bits <= 0:
            return True
        mant, _ = math.frexp(v)
        return float(mant * 2.0**self.bits).is_integer()

    def rational(self, p: int, q: int = 1) -> Any:
        # a constant of the op: the kernel rounds it once to the dtype (1/2, 1/sqrt(d), ...)
        v = p / q
        return RunningError(v, 0.0 if float(v).is_integer() else self.u * abs(v), 0, self)

    def const_sqrt(self, p: int, q: int = 1, pi_power: int = 0) -> Any:
        v = math.sqrt(p / q * math.pi**pi_power)
        return RunningError(v, self.u * v, 0, self)

    def _function(self, f: Callable[[float], float], df: Callable[[float], float],
                  x: Any) -> np.ndarray:
        u_f = self.u + self.u_acc

        def one(a: Any) -> RunningError:
            a = self.scalar(a)
            v = f(a.v)
            return RunningError(v, abs(df(a.v)) * a.e + u_f * abs(v), a.m + 1, self)

        return self._map(one, x)

    def exp(self, x: Any) -> np.ndarray:
        return self._function(math.exp, math.exp, x)

    def expm1(self, x: Any) -> np.ndarray:
        return self._function(math.expm1, math.exp, x)

    def log(self, x: Any) -> np.ndarray:
        return self._function(math.log, lambda a: 1.0 / a, x)

    def log1p(self, x: Any) -> np.ndarray:
        return self._function(math.log1p, lambda a: 1.0 / (1.0 + a), x)

    def sqrt(self, x: Any) -> np.ndarray:
        return self._function(math.sqrt, lambda a: 0.5 / math.sqrt(a) if a else math.inf, x)

    def tanh(self, x: Any) -> np.ndarray:
        return self._function(math.tanh, lambda a: 1.0 - math.tanh(a) ** 2, x)

    def sin(self, x: Any) -> np.ndarray:
        return self._function(math.sin, math.cos, x)

    def cos(self, x: Any) -> np.ndarray:
        return self._function(math.cos, lambda a: -math.sin(a), x)

    def erf(self, x: Any) -> np.ndarray:
        return self._function(math.erf, lambda a: 2 / math.sqrt(math.pi) * math.exp(-a * a), x)

    def sum(self, x: Any, axis: int | tuple[int, ...] | None = None,
            keepdims: bool = False) -> np.ndarray:
        r"""Recursive summation in :math:`u_a`, stored in the dtype (module docstring):
        :math:`\sum e_i + (k - 1) u_a \sum|a_i| + u|\sum a_i|`, :math:`m = \max m_i + k`."""
        arr = np.asarray(x, dtype=object)
        if arr.size == 0:
            return self._wrap(np.sum(arr, axis=axis, keepdims=keepdims))
        v, e, m = self._parts(arr)
        k = arr.size // max(1, np.sum(np.ones(arr.shape), axis=axis, keepdims=keepdims).size)
        total = np.sum(v, axis=axis, keepdims=keepdims)
        err = (np.sum(e, axis=axis, keepdims=keepdims)
               + (k - 1) * self.u_acc * np.sum(np.abs(v), axis=axis, keepdims=keepdims)
               + self.u * np.abs(total))
        depth = np.max(m, axis=axis, keepdims=keepdims) + k
        out = np.empty(np.shape(total), dtype=object)
        for idx in np.ndindex(np.shape(total)):
            out[idx] = RunningError(np.asarray(total)[idx], np.asarray(err)[idx],
                                    int(np.asarray(depth)[idx]), self)
        return out

    def matmul(self, a: Any, b: Any) -> np.ndarray:
        r""":math:`AB` with :math:`k` products of relative error :math:`u_p` each (``u_prod``:
        the dtype's :math:`u` by default; :math:`u_a` for bfloat16 operands, whose products
        are exact in a float32 accumulator; TF32's operand rounding), summed as
        :meth:`sum`: :math:`e = E_A|B| + |A|E_B + (u_p + (k-1)u_a)|A||B| + u|AB|`,
        evaluated on the value and bound arrays at once."""
        a, b = np.asarray(a, dtype=object), np.asarray(b, dtype=object)
        (va, ea, ma), (vb, eb, mb) = self._parts(a), self._parts(b)
        k = va.shape[-1] if va.ndim else 1
        v = np.matmul(va, vb)
        e = (np.matmul(ea, np.abs(vb)) + np.matmul(np.abs(va), eb)
             + (self.u_prod + (k - 1) * self.u_acc) * np.matmul(np.abs(va), np.abs(vb))
             + self.u * np.abs(v))
        depth = int(max(ma.max(initial=0), mb.max(initial=0))) + 1 + k
        out = np.empty(np.shape(v), dtype=object)
        for idx in np.ndindex(np.shape(v)):
            out[idx] = RunningError(v[idx], e[idx], depth, self)
        return out

    def _parts(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The value, bound and depth arrays of an array of scalars."""
        lifted = self._map(self.scalar, x)
        flat = lifted.reshape(-1)
        v = np.fromiter((s.v for s in flat), float, flat.size).reshape(x.shape)
        e = np.fromiter((s.e for s in flat), float, flat.size).reshape(x.shape)
        m = np.fromiter((s.m for s in flat), float, flat.size).reshape(x.shape)
        return v, e, m

    def max(self, x: Any, axis: int | None = None, keepdims: bool = False) -> np.ndarray:
        return self._wrap(np.max(np.asarray(x, dtype=object), axis=axis, keepdims=keepdims))

    def isfinite(self, x: Any) -> np.ndarray:
        return self._map(lambda s: math.isfinite(self.scalar(s).v), x).astype(bool)

    def stability_shift(self, z: Any, axis: int = -1) -> np.ndarray:
        r"""The shift :math:`c` as an *exact* constant (:math:`e = 0`, no rounding): the op
        is proved for every shift (the exact backend's opaque symbol, lemmas
        ``softmax_shift_invariance``, ``log_sum_exp_shift``), so the kernel's
        :math:`\hat c` is compared with the exact evaluation at the same :math:`\hat c`,
        and what went into :math:`\hat c` cancels. Carrying its error instead counted it
        in every exponent as if it did not cancel: RWKV's running maximum :math:`m_o`
        (a sum of rounded steps) gave its WKV output a bound of 0.58 relative in
        bfloat16 (``tiny-rwkv``, seed 1, batch 2) where the run erred by 1e-2. The value is
        the maximum at the exact weights; the run's differs by its error, a common factor
        :math:`e^{\hat c - c} = 1 + O(u)` of every term after it, second order in the
        bound (as the exact weights :math:`|\cdot|` of :func:`running_error`)."""
        def exact(s: Any) -> Any:
            v = self.scalar(s).v
            return RunningError(0.0 if v == -math.inf else v, 0.0, 0, self)

        return self._map(exact, self.max(z, axis=axis, keepdims=True))

    def safe_row_sum(self, e: Any, axis: int = -1) -> np.ndarray:
        return self._map(lambda s: self.scalar(1) if self.scalar(s).v == 0 else s,
                         self.sum(e, axis=axis, keepdims=True))

    def norm_scale(self, x: Any, eps: Any, axis: int = -1) -> np.ndarray:
        shape = list(np.shape(x))
        shape[axis] = 1
        return self.ones(shape)


def running_error(values: Any) -> np.ndarray:
    r"""The bound on the absolute error of each entry of an op's result evaluated on
    :class:`RunningErrorNamespace`: :math:`e / (1 - m u)` (Higham's Lemma 3.1 turns the
    first-order bound of :math:`m` roundings into a rigorous one), :math:`\infty` where
    :math:`m u \ge 1` or the value is not finite."""
    arr = np.asarray(values, dtype=object)

    def one(s: Any) -> float:
        if not isinstance(s, RunningError):
            return 0.0  # a constant of the op: exact
        mu = s.m * s.ns.u
        if mu >= 1.0 or not (math.isfinite(s.v) and math.isfinite(s.e)):
            return math.inf
        return s.e / (1.0 - mu)

    return np.vectorize(one, otypes=[float])(arr) if arr.size else np.zeros(arr.shape)


def running_namespace(u: float, u_acc: float, u_prod: float | None = None
                      ) -> RunningErrorNamespace:
    """The namespace for a kernel of unit roundoff ``u`` accumulating in ``u_acc``, the
    products of its matmuls of relative error ``u_prod`` (default ``u``)."""
    return RunningErrorNamespace(u, u_acc, u_prod)


def as_arrays(xs: Sequence[Any]) -> list[np.ndarray]:
    """Each result of an op on the namespace as its bound array (``None`` kept)."""
    return [None if x is None else running_error(x) for x in xs]
