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

:func:`is_zero` is the boolean form used by the proofs; :class:`ZeroTest` says why. The
refutation stage (:func:`sample_points`, :func:`find_counterexample`) lives in
:mod:`nlaverify.symbolic.refute` and is re-exported here.
"""

from __future__ import annotations

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

from nlaverify.symbolic.normal_form import normal_form_rung
from nlaverify.symbolic.piecewise import piecewise_rung
from nlaverify.symbolic.refute import (  # noqa: F401  (re-exported)
    REFUTATION_DIGITS,
    REFUTATION_POINTS,
    Counterexample,
    find_counterexample,
    sample_points,
)

#: seconds the symbolic ladder may spend on one expression (see :func:`proof_time_limit`)
DEFAULT_TIME_LIMIT = 60.0
#: environment variable overriding :data:`DEFAULT_TIME_LIMIT` (seconds; ``0``/``none``: no limit)
TIME_LIMIT_ENV = "NLAVERIFY_PROOF_TIME_LIMIT"

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
    # the rational normal form over QQ (nlaverify.symbolic.normal_form): what expand and
    # the numerator of together decide, in sparse polynomial rings, without rebuilding trees
    rung, supported = normal_form_rung(expr)
    if rung is not None:
        return "together, Piecewise atoms opaque" if expr.has(sympy.Piecewise) else rung
    if expr.has(sympy.Piecewise):
        # first with every Piecewise an opaque atom: an identity in the atoms holds whatever
        # values they take (elu1_attention: 2^8 branches when folded, 3 s unfolded); the
        # normal form above did that unless it could not read the expression
        if not supported:
            num, _ = sympy.fraction(sympy.together(expr))
            if sympy.expand(num) == 0:
                return "together, Piecewise atoms opaque"
        rung = piecewise_rung(expr)  # branch by branch, without folding
        if rung is not None:
            return rung
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

