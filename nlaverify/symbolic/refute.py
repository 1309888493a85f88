"""Refutation: the first stage of :func:`~nlaverify.symbolic.exact.zero_test`.

An expression is evaluated at a few deterministic rational points (:func:`sample_points`) in
high-precision floating point, together with its *magnitude* (:func:`find_counterexample`); a
value that is clearly nonzero, and reproduced at twice the precision, is a
:class:`Counterexample`: the identity is false. Sampling never proves anything; it only
refutes. :mod:`nlaverify.symbolic.exact` re-exports every public name.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mpmath
import sympy

#: how many rational points :func:`~nlaverify.symbolic.exact.zero_test` tries before
#: simplifying
REFUTATION_POINTS = 3
#: significant digits of the first evaluation; the confirmation uses twice as many
REFUTATION_DIGITS = 40


@dataclass(frozen=True)
class Counterexample:
    """A rational point where an expression is clearly nonzero, and its value there."""

    point: tuple[tuple[sympy.Symbol, sympy.Rational], ...]
    value: mpmath.mpf
    magnitude: mpmath.mpf
    index: int

    def describe(self, max_symbols: int = 6) -> str:
        """``at sample point 0 (terms of magnitude 42.8): x = 3/7, y = -2/5, ...`` (at most
        ``max_symbols`` symbols shown)."""
        shown = ", ".join(f"{s} = {v}" for s, v in self.point[:max_symbols])
        more = len(self.point) - max_symbols
        where = (shown + (f", ... ({more} more)" if more > 0 else "")) or "no free symbols"
        return (f"at sample point {self.index} (terms of magnitude "
                f"{mpmath.nstr(self.magnitude, 3)}): {where}")



def sample_points(
    symbols: Sequence[sympy.Symbol], count: int = REFUTATION_POINTS
) -> list[dict[sympy.Symbol, sympy.Rational]]:
    """``count`` deterministic rational points for ``symbols`` that respect their
    assumptions.

    Symbol ``k`` at point ``m`` gets magnitude ``a/q_m`` with ``a = 1 + (71(k+1) + 13m)
    mod 199`` (distinct for the first 198 symbols, as ``71`` is invertible mod the prime
    ``199``) and ``q_m`` one of 101, 89, 113, 97, 107: values in ``(0, 2.3)``, away from 0
    and from each other, so neither ``exp`` overflows nor a difference ``x_i - x_j``
    vanishes by accident. A symbol that may be negative (every real symbol, the opaque
    stability shifts ``c_k`` included) gets a sign that varies with ``k`` and ``m``; a
    positive (nonnegative) one stays positive, a negative (nonpositive) one negative, an
    integer one gets an integer. A symbol whose assumptions the chosen value would
    contradict (``even``, ``prime``, ...) makes the list empty: no refutation is attempted
    rather than an unsound one.
    """
    denominators = (101, 89, 113, 97, 107)
    out = []
    for m in range(count):
        point: dict[sympy.Symbol, sympy.Rational] = {}
        for k, sym in enumerate(symbols):
            a = 1 + (71 * (k + 1) + 13 * m) % 199
            value = sympy.Integer(1 + a % 7) if sym.is_integer else sympy.Rational(
                a, denominators[m % len(denominators)])
            if sym.is_nonpositive or (not sym.is_nonnegative and (k * k + k + 7 * m) % 3 == 0):
                value = -value
            facts = sym.assumptions0
            if any(getattr(value, f"is_{key}") is not truth for key, truth in facts.items()
                   if key != "commutative"):
                return []
            point[sym] = value
        out.append(point)
    return out


def find_counterexample(
    expr: sympy.Expr, points: Sequence[Mapping[sympy.Symbol, sympy.Rational]] | None = None,
    *, digits: int = REFUTATION_DIGITS,
) -> Counterexample | None:
    """A point of ``points`` (default :func:`sample_points`) where ``expr`` is clearly
    nonzero, or ``None``. A point where ``expr`` is undefined (division by 0, log of a
    negative, no true Piecewise branch, a condition too close to call) is skipped; an
    expression the evaluator does not know (:func:`_evaluate`) is not sampled at all.

    **The threshold.** With ``p = digits`` (40) and ``u = 10^-p``, ``expr`` is evaluated in
    ``p``-digit floating point, giving ``v_p``, together with its *magnitude* ``M``: the
    same tree with every sum replaced by the sum of the absolute values of its terms, at
    every level (products multiply magnitudes; a function value or a non-integer power
    is its own magnitude). ``M`` is the scale of the classical rounding-error bound of a
    sum/product tree, ``|v_p - v| <~ n u M``; divisions by cancelling denominators and
    function evaluations add an amplification ``kappa``. So a *true* identity evaluates to
    a residue ``|v_p| <~ kappa n 10^-40 M``. A value is a counterexample only if

    1. ``|v_p| > 10^(-p/2) M = 10^-20 M`` (screen, at 40 digits): the residue of a true
       identity passes only if ``kappa n > 10^20``, far beyond these expressions at points
       of size ``O(1)`` (the top-level terms alone would not do: ``10^30 y (sin^2 x +
       cos^2 x - 1)`` is a single term whose noise is ``10^-10``); and
    2. at ``2p = 80`` digits the value is reproduced: ``|v_p - v_2p| <= 10^-10 |v_2p|`` and
       ``|v_2p| > 10^-20 M`` (confirmation). This holds whenever ``kappa < 10^80``: doubling
       the precision shrinks the residue of a true identity by ``10^-40``, so ``v_p`` and
       ``v_2p`` disagree in their first digit (or ``v_2p`` is exactly 0), whereas a genuine
       value ``|v| > 10^-20 M`` is reproduced to 10 digits whenever ``kappa n < 10^10``.
       Beyond ``10^80`` (e.g. ``sin(x + 2^400)``, where ``x`` is lost at both precisions)
       a true identity can be refuted: that costs a proof, never soundness (a refutation
       proves nothing true false in the catalogue's sense: the identity is then reported
       failed and must be looked at).

    Test 2 alone is what makes refutation sound; test 1 is cheap (most true identities
    never need the 80-digit evaluation) and a second, independent guard. A genuine value
    below ``10^-20 M``, or one so ill-conditioned that it is not reproduced, is missed:
    then the ladder decides, which costs time, never soundness.
    """
    symbols = sorted(expr.free_symbols, key=lambda s: (str(s), str(s.assumptions0)))
    if not all(isinstance(s, sympy.Symbol) for s in symbols):
        return None  # Indexed and other non-symbol atoms: not sampled
    if points is None:
        points = sample_points(symbols, REFUTATION_POINTS)
    for index, point in enumerate(points):
        try:
            low, low_mag = _evaluate(expr, point, digits)
            if not abs(low) > mpmath.mpf(10) ** (-digits // 2) * low_mag:
                continue  # indistinguishable from the rounding noise of a true identity
            high, high_mag = _evaluate(expr, point, 2 * digits)
        except _Unsupported:
            return None
        except (_Undefined, ZeroDivisionError, OverflowError, ValueError, RecursionError):
            continue  # undefined (or not evaluable) at this point: try the next one
        stable = abs(low - high) <= mpmath.mpf(10) ** -10 * abs(high)
        if stable and abs(high) > mpmath.mpf(10) ** (-digits // 2) * high_mag:
            ordered = tuple((s, sympy.Rational(point[s])) for s in symbols if s in point)
            return Counterexample(ordered, mpmath.mpf(high), mpmath.mpf(high_mag), index)
    return None


class _Undefined(Exception):
    """The expression has no real value at the point (division by 0, log of a negative,
    an infinity, a Piecewise without a true branch, a condition too close to call)."""


class _Unsupported(Exception):
    """The expression contains something the evaluator does not know."""


#: SymPy functions evaluated by the same-named function of an ``MPContext``
_FUNCTIONS: dict[type, str] = {
    sympy.exp: "exp", sympy.log: "log", sympy.sin: "sin", sympy.cos: "cos",
    sympy.tan: "tan", sympy.sinh: "sinh", sympy.cosh: "cosh", sympy.tanh: "tanh",
    sympy.asin: "asin", sympy.acos: "acos", sympy.atan: "atan", sympy.asinh: "asinh",
    sympy.acosh: "acosh", sympy.atanh: "atanh", sympy.erf: "erf", sympy.erfc: "erfc",
}


@functools.cache
def _context(digits: int) -> mpmath.MPContext:
    """A private mpmath context at ``digits`` digits (built once: building one costs ~1 ms;
    its precision is never changed afterwards, so threads may share it)."""
    ctx = mpmath.MPContext()
    ctx.dps = digits
    return ctx


def _evaluate(
    expr: sympy.Expr, point: Mapping[sympy.Symbol, sympy.Rational], digits: int
) -> tuple[Any, Any]:
    """``(value, magnitude)`` of the real expression ``expr`` at ``point`` in
    ``digits``-digit arithmetic (see :func:`find_counterexample` for the magnitude).

    A direct walk of the expression tree, memoized on shared subexpressions, is
    ~100x cheaper than :func:`sympy.lambdify` (whose printing dominates) and needs no
    global precision: the private context (:func:`_context`) leaves ``mpmath.mp`` alone. Complex
    intermediate values are "undefined" (the identities are statements about reals).
    """
    ctx = _context(digits)
    ambiguous = ctx.mpf(10) ** (-(digits // 2))

    def real(v: Any) -> Any:
        if not isinstance(v, ctx.mpf) or not ctx.isfinite(v):
            raise _Undefined
        return v

    def number(r: sympy.Rational) -> Any:
        return ctx.mpf(int(r.p)) / int(r.q)

    memo: dict[sympy.Basic, tuple[Any, Any]] = {}
    for sym, val in point.items():
        v = number(sympy.Rational(val))
        memo[sym] = (v, abs(v))

    def sign(node: sympy.Basic) -> int:
        """The sign of a real argument of a discontinuous function; near 0: undefined."""
        v, m = ev(node)
        if abs(v) <= ambiguous * m:
            raise _Undefined
        return 1 if v > 0 else -1

    def truth(cond: sympy.Basic) -> bool:
        if cond is sympy.true or cond is sympy.false:
            return bool(cond)
        if isinstance(cond, sympy.And):
            return all(truth(c) for c in cond.args)
        if isinstance(cond, sympy.Or):
            return any(truth(c) for c in cond.args)
        if isinstance(cond, sympy.Not):
            return not truth(cond.args[0])
        if isinstance(cond, (sympy.StrictGreaterThan, sympy.GreaterThan,
                             sympy.StrictLessThan, sympy.LessThan)):
            s = sign(cond.lhs - cond.rhs)
            return s > 0 if isinstance(cond, (sympy.StrictGreaterThan, sympy.GreaterThan)) \
                else s < 0
        raise _Unsupported(type(cond).__name__)

    def ev(node: sympy.Basic) -> tuple[Any, Any]:
        hit = memo.get(node)
        if hit is not None:
            return hit
        if node.is_Rational:
            v = number(node)
            out = (v, abs(v))
        elif node.is_Float:
            v = ctx.mpf(node._mpf_)
            out = (v, abs(v))
        elif isinstance(node, sympy.NumberSymbol):
            v = ctx.mpf(node.evalf(digits + 10)._mpf_)
            out = (v, abs(v))
        elif node.is_Add:
            terms = [ev(t) for t in node.args]
            out = (ctx.fsum(v for v, _ in terms), ctx.fsum(m for _, m in terms))
        elif node.is_Mul:
            v, m = ctx.mpf(1), ctx.mpf(1)
            for fv, fm in map(ev, node.args):
                v, m = v * fv, m * fm
            out = (v, m)
        elif node.is_Pow:
            base, exponent = node.args
            bv, bm = ev(base)
            if exponent.is_Integer:
                if bv == 0 and exponent < 0:
                    raise _Undefined
                v = real(bv ** int(exponent))
                out = (v, bm ** int(exponent) if exponent > 0 else abs(v))
            else:
                v = real(ctx.power(bv, ev(exponent)[0]))
                out = (v, abs(v))
        elif type(node) in _FUNCTIONS and len(node.args) == 1:
            v = real(getattr(ctx, _FUNCTIONS[type(node)])(ev(node.args[0])[0]))
            out = (v, abs(v))
        elif isinstance(node, sympy.Abs):
            v, m = ev(node.args[0])
            out = (abs(v), m)
        elif isinstance(node, (sympy.Max, sympy.Min)):
            pairs = [ev(a) for a in node.args]
            pick = max if isinstance(node, sympy.Max) else min
            out = (pick(v for v, _ in pairs), max(m for _, m in pairs))
        elif isinstance(node, sympy.sign):
            out = (ctx.mpf(sign(node.args[0])), ctx.mpf(1))
        elif isinstance(node, sympy.Heaviside):
            out = (ctx.mpf(int(sign(node.args[0]) > 0)), ctx.mpf(1))
        elif isinstance(node, sympy.Piecewise):
            for branch, cond in node.args:
                if truth(cond):
                    out = ev(branch)
                    break
            else:
                raise _Undefined
        else:
            raise _Unsupported(type(node).__name__)
        real(out[0])
        memo[node] = out
        return out

    return ev(expr)
