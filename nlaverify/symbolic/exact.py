"""Symbolic arrays and the exact zero test used by every proof.

:func:`zero_test` decides whether an expression is identically 0, in two stages:

1. **Refute first.** The expression is evaluated at a few deterministic rational
   points in high-precision floating point (:func:`find_counterexample`). A value
   that is clearly nonzero is a counterexample: the identity is false, and no
   simplification is tried. This is cheap (milliseconds) and it is what makes a
   *wrong* identity fail at once: a wrong VJP used to spend many minutes in
   :func:`sympy.together` before the point evaluation ever ran. Sampling never
   proves anything; it only refutes.
2. **The symbolic ladder**, cheapest first: expansion, the numerator of
   :func:`sympy.together`, then :func:`sympy.piecewise_fold` +
   :func:`sympy.simplify`. Only an exact 0 counts as proved. The ladder runs under a
   time limit (:data:`DEFAULT_TIME_LIMIT`, the environment variable
   :data:`TIME_LIMIT_ENV`, or the ``time_limit`` argument): past it the verdict is
   ``"timeout"``, a failure, never a hang.

:func:`is_zero` is the boolean form used by the proofs; :class:`ZeroTest` says why.
"""

from __future__ import annotations

import functools
import gc
import math
import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import mpmath
import numpy as np
import sympy

#: seconds the symbolic ladder may spend on one expression (see :func:`proof_time_limit`)
DEFAULT_TIME_LIMIT = 60.0
#: environment variable overriding :data:`DEFAULT_TIME_LIMIT` (seconds; ``0``/``none``: no limit)
TIME_LIMIT_ENV = "NLAVERIFY_PROOF_TIME_LIMIT"
#: how many rational points :func:`zero_test` tries before simplifying
REFUTATION_POINTS = 3
#: significant digits of the first evaluation; the confirmation uses twice as many
REFUTATION_DIGITS = 40

ZeroVerdict = Literal["zero", "refuted", "timeout", "unproved"]


def symbol_array(name: str, shape: tuple[int, ...], **assumptions: Any) -> np.ndarray:
    """Object array of real symbols ``name_{i,j}`` (1-based indices, as in the papers)."""
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        sub = ",".join(str(i + 1) for i in idx)
        out[idx] = sympy.Symbol(f"{name}_{{{sub}}}" if sub else name, real=True, **assumptions)
    return out


# --------------------------------------------------------------------------- results


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


@dataclass(frozen=True)
class ZeroTest:
    """The outcome of :func:`zero_test`.

    ``verdict`` is ``"zero"`` (proved identically 0), ``"refuted"`` (clearly nonzero at
    a rational point: a counterexample), ``"timeout"`` (past the time limit) or
    ``"unproved"`` (the ladder ended without reaching 0 and no sample point refuted it).
    Only ``"zero"`` is a proof. ``reason`` is a short phrase for a message
    (``refuted at a rational point (value -0.371)``, ``timed out after 60 s``, ``does not
    simplify to 0``, ``0 by together``); ``detail`` the rest (the point, the phase that
    ran out of time).
    """

    verdict: ZeroVerdict
    reason: str
    detail: str = ""
    counterexample: Counterexample | None = None

    @property
    def proved(self) -> bool:
        return self.verdict == "zero"


# --------------------------------------------------------------------------- the zero test


def is_zero(expr: sympy.Expr, *, time_limit: float | None = None) -> bool:
    """True when ``expr`` is proved identically 0 (see :func:`zero_test`, which says why
    not: refuted, timed out or unproved)."""
    return zero_test(expr, time_limit=time_limit).proved


def zero_test(
    expr: sympy.Expr, *, time_limit: float | None = None,
    points: Sequence[Mapping[sympy.Symbol, sympy.Rational]] | None = None,
) -> ZeroTest:
    """Decide whether ``expr`` is identically 0: refute first, simplify after.

    1. :func:`find_counterexample` at ``points`` (default: :func:`sample_points`, the
       same :data:`REFUTATION_POINTS` deterministic rational points every run). A clearly
       nonzero value ends the test with ``"refuted"`` before any simplification.
    2. The ladder (:func:`_ladder`) under ``time_limit`` seconds (``None``: the default,
       :func:`proof_time_limit`; ``0`` or ``math.inf``: no limit).
       The limit is enforced with ``SIGALRM`` and so only in the main thread (a worker of
       ``nlaverify derive --jobs`` runs its task in its main thread); elsewhere the ladder
       runs without a limit, after the same refutation.

    The refutation runs inside the time limit as well: a deadline covers the whole test.
    """
    expr = sympy.sympify(expr) if not isinstance(expr, sympy.Basic) else expr
    if expr == 0:
        return ZeroTest("zero", "0 as built")
    limit = proof_time_limit() if time_limit is None else time_limit
    phase = "refutation"
    start = time.monotonic()
    try:
        with _deadline(limit) as timer:
            found = find_counterexample(expr, points)
            if found is not None:
                return ZeroTest("refuted", "refuted at a rational point (value "
                                f"{mpmath.nstr(found.value, 6)})", found.describe(), found)
            phase = "simplification"
            rung = _ladder(expr)
        if timer.fired:  # the alarm was swallowed by a bare ``except`` inside SymPy
            raise _Timeout
    except _Timeout:
        return ZeroTest("timeout", f"timed out after {_seconds(limit)} s",
                        f"in the {phase}, {time.monotonic() - start:.2f} s used")
    if rung is None:
        tried = REFUTATION_POINTS if points is None else len(points)
        return ZeroTest("unproved", "does not simplify to 0",
                        f"no counterexample at {tried} rational points")
    return ZeroTest("zero", f"0 by {rung}")


def _ladder(expr: sympy.Expr) -> str | None:
    """The rung that reduced ``expr`` to exactly 0, or ``None`` (not proved).

    Expansion, then the numerator of :func:`sympy.together` (rational identities), then
    :func:`sympy.simplify` (transcendental ones). An expression with a
    :class:`~sympy.Piecewise` is first tried with each Piecewise as an opaque atom (zero
    as a rational function of the atoms is zero for any of their values); otherwise it is
    folded and proved branch by branch (sufficient: every branch identically 0).
    """
    if expr == 0:
        return "construction"  # a Piecewise branch that is 0 as built
    if expr.has(sympy.Piecewise):
        # first with every Piecewise an opaque atom: an identity in the atoms holds whatever
        # values they take (elu1_attention: 2^8 branches when folded, 3 s unfolded)
        num, _ = sympy.fraction(sympy.together(expr))
        if sympy.expand(num) == 0:
            return "together, Piecewise atoms opaque"
        expr = sympy.piecewise_fold(expr)
        if isinstance(expr, sympy.Piecewise):
            rungs = [_ladder(branch) for branch, _ in expr.args]
            if any(r is None for r in rungs):
                return None
            return "piecewise_fold, then " + " and ".join(sorted(set(map(str, rungs))))
    if sympy.expand(expr) == 0:
        return "expand"
    num, _ = sympy.fraction(sympy.together(expr))
    if sympy.expand(num) == 0:
        return "together"
    return "simplify" if sympy.simplify(expr) == 0 else None


# --------------------------------------------------------------------------- time limit


def proof_time_limit() -> float | None:
    """Seconds one :func:`zero_test` may take: :data:`TIME_LIMIT_ENV` when set, else
    :data:`DEFAULT_TIME_LIMIT`. ``0``, ``none``, ``off`` or ``inf`` mean no limit.

    Read at each call, so a test can set it and ``derive --jobs`` workers (spawned
    processes, which inherit the environment) see the parent's value.
    """
    raw = os.environ.get(TIME_LIMIT_ENV, "").strip().lower()
    if not raw:
        return DEFAULT_TIME_LIMIT
    if raw in ("none", "off", "inf"):
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{TIME_LIMIT_ENV}={raw!r}: expected seconds (a number), "
                         "or 0/none/off for no limit") from None
    if math.isnan(value) or value < 0:
        raise ValueError(f"{TIME_LIMIT_ENV}={raw!r}: expected a nonnegative number of seconds")
    return value or None


class _Timeout(BaseException):
    """Raised by the ``SIGALRM`` handler of :func:`_deadline`. A ``BaseException`` so that
    SymPy's ``except Exception`` clauses do not swallow it."""


@dataclass
class _Timer:
    active: bool = False
    fired: bool = False


def _seconds(limit: float | None) -> str:
    return "inf" if limit is None else f"{limit:g}"


@contextmanager
def _deadline(seconds: float | None) -> Iterator[_Timer]:
    """Raise :class:`_Timeout` in the body after ``seconds`` (``None``/``0``/``inf``: never).

    ``ITIMER_REAL`` + ``SIGALRM``: a Python signal handler runs between bytecodes, so
    SymPy's pure-Python loops are interrupted (a single long C call finishes first). The
    timer repeats every 0.1 s after it first fires, so an alarm swallowed by a bare
    ``except`` is raised again. Only the main thread may install signal handlers; in any
    other thread (or without ``setitimer``) there is no limit. A timer already armed by
    the caller (another deadline, a test harness) is restored afterwards with its remaining
    time, and if it would have fired during the body it fires at once after it.
    """
    timer = _Timer()
    usable = (seconds is not None and 0 < seconds < math.inf and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield timer
        return

    in_gc = [False]

    def on_alarm(signum: int, frame: Any) -> None:
        # inside a garbage-collector callback (JAX registers one) an exception is only
        # printed as "ignored": wait for the next tick of the repeating timer instead
        if not timer.active:
            return
        timer.fired = True  # the time is up even if the raise must wait for the next tick
        if not in_gc[0] and frame is not None and frame.f_code not in (
                gc_first.__code__, gc_last.__code__):
            raise _Timeout

    # bracket every collection: the first callback marks its start, the last its end, so
    # any callback in between (JAX's among them) runs with the flag set
    def gc_first(phase: str, info: dict) -> None:
        if phase == "start":
            in_gc[0] = True

    def gc_last(phase: str, info: dict) -> None:
        if phase == "stop":
            in_gc[0] = False

    gc.callbacks.insert(0, gc_first)
    gc.callbacks.append(gc_last)
    # ``None``: a handler installed from C, which Python cannot reinstate; use the default
    old_handler = signal.signal(signal.SIGALRM, on_alarm) or signal.SIG_DFL
    start = time.monotonic()
    timer.active = True
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds, 0.1)
    if 0 < old_delay < seconds:  # the caller's alarm is due first: stop there too
        signal.setitimer(signal.ITIMER_REAL, old_delay, 0.1)
    try:
        yield timer
    finally:
        while True:  # an alarm may arrive while restoring: the handler then only no-ops
            try:
                timer.active = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old_handler)  # runs pending handlers first
                break
            except _Timeout:  # pragma: no cover - a race of a few bytecodes
                continue
        for cb in (gc_first, gc_last):
            if cb in gc.callbacks:
                gc.callbacks.remove(cb)
        if old_delay > 0:
            left = old_delay - (time.monotonic() - start)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6), old_interval)


# --------------------------------------------------------------------------- refutation


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
