r"""The one report type of :mod:`nlaverify.check`: rows of (subject, check, error, bound,
ratio, verdict), each failure naming the argument or node and the entry where it is worst.

Every ``check_*`` call returns a :class:`CheckReport`. ``report.ok`` is true when every row
that ran passed, at least one ran (an empty check proves nothing) and no row was
*inconclusive* (:func:`inconclusive_row`: a bound too wide to resolve what the row checks,
so that a wrong result would have passed too; ``CheckReport.allow_inconclusive = True``
accepts them explicitly); ``bool(report)`` is
``report.ok``, so ``assert report`` works in pytest and shows the one-line summary (the first
failure: where, yours, the reference, the ratio);
``report.raise_if_failed()`` raises :class:`CheckFailed` (an :class:`AssertionError`) with
the same table and the reproducer of the first failure; ``report.to_json()`` is the
machine-readable form.

The comparison of one array is :func:`compare_arrays`: the normwise criterion of
:mod:`nlaverify.tolerance`,

.. math:: \mathrm{error} = \frac{\max_\iota |a_\iota - e_\iota|}{\max(1, \max_\iota |e_\iota|)}
          \le \mathrm{bound},\qquad \mathrm{ratio} = \mathrm{error} / \mathrm{bound},

and the entry :math:`\iota^\ast = \arg\max_\iota |a_\iota - e_\iota|` (a non-finite entry of
the subject first) is reported with the user's value and the reference's.

Seed: Baggag & Saad §2.6 (back-propagation as a chain of stages, each checked against its
reference); Higham & Mary (2019) for the bound.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from nlaverify.errors import CheckError  # re-exported: its home was this module
from nlaverify.tolerance import Tolerance

Verdict = Literal["pass", "fail", "skip"]

__all__ = [
    "INCONCLUSIVE",
    "CheckError",
    "CheckFailed",
    "CheckReport",
    "Row",
    "compare_arrays",
    "error_row",
    "factor_note",
    "inconclusive_row",
    "skip_row",
]

#: the prefix of the reason of an inconclusive row (a skipped row whose check ran but could
#: not resolve what it checks)
INCONCLUSIVE = "inconclusive: "


class CheckFailed(AssertionError):
    """Raised by :meth:`CheckReport.raise_if_failed`; its message is the table of failing
    rows and the reproducer of the first one."""

    def __init__(self, report: CheckReport) -> None:
        self.report = report
        super().__init__(report.failure_text())


@dataclass(frozen=True)
class Row:
    """One check of one subject.

    ``error`` and ``bound`` are normwise relative (see the module docstring); ``where`` names
    the argument or node and the worst entry (``"x[1, 0, 3]"``); ``actual`` and ``expected``
    are the user's and the reference's values there; ``reason`` says why the bound has its
    value (the tolerance model's terms) or why the check failed or was skipped.
    """

    subject: str
    check: str
    error: float
    bound: float
    verdict: Verdict
    where: str = ""
    actual: float | None = None
    expected: float | None = None
    reason: str = ""
    reproducer: str | None = None

    @property
    def ratio(self) -> float:
        """``error / bound`` (``inf`` for a non-finite error, ``nan`` for a skipped row)."""
        if self.verdict == "skip":
            return math.nan
        if math.isnan(self.bound):  # a subject that raised: no bound, an infinite ratio
            return math.inf if self.verdict == "fail" else math.nan
        if math.isinf(self.error):
            return math.inf
        return self.error / self.bound if self.bound > 0 else (math.inf if self.error else 0.0)

    @property
    def ok(self) -> bool:
        return self.verdict != "fail"

    @property
    def inconclusive(self) -> bool:
        """The check ran, but its bound could not resolve what it checks
        (:func:`inconclusive_row`): neither a pass nor a failure."""
        return self.verdict == "skip" and self.reason.startswith(INCONCLUSIVE)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ratio"] = self.ratio
        return {k: _jsonable(v) for k, v in d.items()}


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


@dataclass
class CheckReport:
    """The outcome of one ``check_*`` call: its rows, in the order they ran."""

    subject: str
    kind: str
    rows: list[Row] = field(default_factory=list)
    #: free-form notes (the reference used, what was not checked and why)
    notes: list[str] = field(default_factory=list)
    #: accept inconclusive rows in :attr:`ok` (they are never passes; set it to say so)
    allow_inconclusive: bool = False

    # -- verdict -------------------------------------------------------------------------

    @property
    def ran(self) -> list[Row]:
        return [r for r in self.rows if r.verdict != "skip"]

    @property
    def failures(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == "fail"]

    @property
    def inconclusive(self) -> list[Row]:
        """The rows whose bound could not resolve what they check."""
        return [r for r in self.rows if r.inconclusive]

    @property
    def ok(self) -> bool:
        """Every row that ran passed, at least one ran, and none was inconclusive (unless
        :attr:`allow_inconclusive`)."""
        return bool(self.ran) and not self.failures and (
            self.allow_inconclusive or not self.inconclusive)

    def __bool__(self) -> bool:
        return self.ok

    @property
    def first_failure(self) -> Row | None:
        return self.failures[0] if self.failures else None

    @property
    def worst_ratio(self) -> float:
        """The largest ``error / bound`` of the rows that ran (0 if none)."""
        ratios = [r.ratio for r in self.ran if not math.isnan(r.ratio)]
        return max(ratios, default=0.0)

    def raise_if_failed(self) -> CheckReport:
        """Raise :class:`CheckFailed` unless :attr:`ok`; return ``self`` otherwise."""
        if not self.ok:
            raise CheckFailed(self)
        return self

    def extend(self, rows: Iterable[Row]) -> None:
        self.rows.extend(rows)

    # -- output --------------------------------------------------------------------------

    def as_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "kind": self.kind, "ok": self.ok,
                "worst_ratio": _jsonable(self.worst_ratio), "notes": list(self.notes),
                "rows": [r.as_dict() for r in self.rows]}

    def to_json(self, **kw: Any) -> str:
        """The report as JSON (non-finite numbers as ``"inf"`` / ``null``)."""
        return json.dumps(self.as_dict(), **kw)

    def table(self, rows: Sequence[Row] | None = None) -> str:
        """A fixed-width table of ``rows`` (default: all) and a closing count line."""
        rows = self.rows if rows is None else rows
        # columns as wide as their longest entry (at least the header's), so that a long
        # check name or entry does not shift the numbers
        wc = max([42, *(len(r.check) for r in rows)])
        ww = max([22, *(len(r.where) for r in rows)])
        head = (f"{'check':<{wc}} {'where':<{ww}} {'error':>9} {'bound':>9} {'ratio':>8}  "
                "verdict")
        lines = [head]
        for r in rows:
            if r.verdict == "skip":
                lines.append(f"{r.check:<{wc}} {r.where:<{ww}} {'':>9} {'':>9} {'':>8}  "
                             + (r.reason if r.inconclusive else f"skip: {r.reason}"))
                continue
            lines.append(f"{r.check:<{wc}} {r.where:<{ww}} {_num(r.error):>9} "
                         f"{_num(r.bound):>9} {_num(r.ratio, '.2f'):>8}  {r.verdict}")
            if r.verdict == "fail":
                if r.actual is not None or r.expected is not None:
                    lines.append(f"    {r.where or 'value'}: yours {_val(r.actual)}, reference "
                                 f"{_val(r.expected)}")
                if r.reason:
                    lines.append(f"    {r.reason}")
        lines.append(self.counts())
        return "\n".join(lines)

    def counts(self) -> str:
        """One line: what was and was not tested (passed, failed, inconclusive, skipped)."""
        n_pass = sum(r.verdict == "pass" for r in self.rows)
        n_fail = sum(r.verdict == "fail" for r in self.rows)
        n_inc = len(self.inconclusive)
        n_skip = sum(r.verdict == "skip" for r in self.rows) - n_inc
        return (f"{self.kind} {self.subject}: {n_pass} passed, {n_fail} failed, "
                f"{n_inc} inconclusive, {n_skip} skipped")

    def failure_text(self) -> str:
        """The failing rows (or why nothing ran), then the first failure's reproducer."""
        if not self.ran:
            text = (f"{self.kind} {self.subject}: nothing ran\n"
                    + self.table([r for r in self.rows])
                    + "".join(f"\nnote: {n}" for n in self.notes))
        else:
            text = self.table(self.failures or self.inconclusive)
        first = self.first_failure
        if first is not None and first.reproducer:
            how = ("define your function where marked, then it runs as it is"
                   if _PLACEHOLDER in first.reproducer else "runs as it is")
            text += f"\n\nreproducer ({how}):\n" + first.reproducer
        return text

    def __str__(self) -> str:
        text = self.table()
        if self.notes:
            text += "\n" + "\n".join(f"note: {n}" for n in self.notes)
        return text

    def summary(self) -> str:
        """One line: the verdict, the counts and, on failure, the first failing row (where,
        yours, the reference, the ratio)."""
        n_fail = len(self.failures)
        head = f"{self.kind} {self.subject}: "
        if self.ok:
            inc = (f", {len(self.inconclusive)} inconclusive (allowed)" if self.inconclusive
                   else "")
            return head + (f"ok, {len(self.ran)} rows, worst ratio "
                           f"{_num(self.worst_ratio, '.3g')}{inc}")
        first = self.first_failure
        if first is None and self.inconclusive:
            row = self.inconclusive[0]
            return head + (f"NOT OK: {len(self.inconclusive)} inconclusive rows (nothing "
                           f"failed, but they tested nothing); first: {row.check}: "
                           f"{row.reason}"[:200])
        if first is None:
            return head + "FAILED: nothing ran"
        where = f" at {first.where}" if first.where else ""
        values = (f": yours {_val(first.actual)}, reference {_val(first.expected)}"
                  if first.actual is not None or first.expected is not None else
                  f": {first.reason}"[:120])
        return (head + f"FAILED {n_fail}/{len(self.ran)} rows; first: {first.check}{where}"
                f"{values}, ratio {_num(first.ratio, '.3g')}")

    def __repr__(self) -> str:
        # one line: pytest shows it for ``assert report`` and cuts long reprs (saferepr), so
        # the first failure comes first; ``str(report)`` and raise_if_failed give the table
        return f"CheckReport({self.summary()})"


#: the mark of a reproducer line where the user defines or imports a function that cannot
#: be imported by name (defined in ``__main__``, a lambda, a closure)
_PLACEHOLDER = "= ...  # your function"


def _num(x: float | None, fmt: str = ".2e") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return "inf"
    return format(x, fmt)


def _val(x: float | None) -> str:
    return "-" if x is None else repr(float(x))


def _float64(x: Any) -> np.ndarray:
    from nlaverify.backends.host import to_float64

    return to_float64(x)


def compare_arrays(subject: str, check: str, actual: Any, expected: Any, tol: Tolerance, *,
                   label: str = "output", floor: float = 1.0) -> Row:
    """One row: ``actual`` (the user's array) against ``expected`` (the reference) by ``tol``.

    A shape mismatch fails the row, naming the expected and actual shapes; a non-finite
    entry of ``actual`` where the reference is finite fails it at that entry (the same
    non-finite value on both sides, e.g. a ``-inf`` log-probability of a masked entry,
    counts as agreement).
    """
    a, e = _float64(actual), _float64(expected)
    if a.shape != e.shape:
        return Row(subject, check, math.inf, tol.rtol, "fail", label,
                   reason=f"{label}: expected shape {e.shape}, got {a.shape}")
    if a.size == 0:
        return Row(subject, check, 0.0, tol.rtol, "pass", label, reason=tol.reason)
    same = (a == e) | (np.isnan(a) & np.isnan(e))
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, nan: judged below
        diff = np.where(same, 0.0, np.abs(a - e))
    diff = np.where(np.isnan(diff), np.inf, diff)
    finite_e = e[np.isfinite(e)]
    scale = max(floor, float(np.max(np.abs(finite_e))) if finite_e.size else 0.0) or 1.0
    flat = int(np.argmax(diff))
    idx = np.unravel_index(flat, a.shape)
    worst = float(diff[idx])
    error = worst / scale
    where = f"{label}[{', '.join(str(int(i)) for i in idx)}]" if a.ndim else label
    ok = error <= tol.rtol
    reason = tol.reason if ok else f"bound {tol.rtol:.3g} = {tol.reason}"
    return Row(subject, check, error, tol.rtol, "pass" if ok else "fail", where,
               float(a[idx]), float(e[idx]), reason)


def error_row(subject: str, check: str, exc: BaseException, *, where: str = "") -> Row:
    """A check whose subject raised: it fails on its own row with the exception and the line
    of the user's code it came from (the innermost frame outside nlaverify and the
    frameworks)."""
    return Row(subject, check, math.inf, math.nan, "fail", where,
               reason=f"raised {type(exc).__name__}: {exc}{_origin(exc)}")


#: path parts of code that is not the user's: a frame there is not where their bug is
_NOT_USERS = ("/nlaverify/", "/site-packages/", "/dist-packages/", "/lib/python", "<frozen")


def _origin(exc: BaseException) -> str:
    """`` (at file:line: code)`` of the innermost frame of ``exc`` in the user's code, or
    ``""``."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not any(part in f.filename.replace("\\", "/") for part in _NOT_USERS)]
    if not frames:
        return ""
    f = frames[-1]
    return f" (at {f.filename}:{f.lineno}: {(f.line or '').strip()})"


def skip_row(subject: str, check: str, why: str) -> Row:
    """A check that could not run here (no autodiff in NumPy, no GPU): skipped, with why."""
    return Row(subject, check, math.nan, math.nan, "skip", "", reason=why)


def inconclusive_row(subject: str, check: str, why: str, *, resolution: float | None = None,
                     where: str = "") -> Row:
    """A check that ran but whose bound cannot resolve what it checks (a normwise bound of 1
    or more accepts any error; an optimizer's update below the resolution of the stored
    weights): neither a pass nor a failure. ``resolution``, when known, is the smallest
    (relative) error the row could have seen; :attr:`CheckReport.ok` is false while such a
    row stands, unless the report allows it."""
    seen = (f"; the smallest error it could have seen: {resolution:.3g}"
            if resolution is not None and math.isfinite(resolution) else "")
    return Row(subject, check, math.nan, math.nan, "skip", where,
               reason=f"{INCONCLUSIVE}{why}{seen}")


def with_reproducer(row: Row, code: str) -> Row:
    return replace(row, reproducer=code)


def factor_note(actual: np.ndarray, expected: np.ndarray, tol: Any) -> str | None:
    r"""A diagnosis for an output that is the reference times one constant: the
    least-squares factor :math:`\alpha = \langle y, r\rangle / \langle r, r\rangle`, when
    :math:`\alpha r` agrees with the output under the same bound ``tol`` and
    :math:`\alpha \ne 1` there, named as an integer :math:`k` ("a sum where a mean over
    :math:`k` terms belongs?"), its reciprocal, or a square root where it is one within the
    bound; ``None`` otherwise (nothing is claimed outside the bound)."""
    a = np.asarray(actual, np.float64)
    e = np.asarray(expected, np.float64)
    if a.shape != e.shape or not (np.all(np.isfinite(a)) and np.all(np.isfinite(e))):
        return None
    den = float(np.sum(e * e))
    if den == 0:
        return None
    alpha = float(np.sum(a * e)) / den
    if alpha == 0:
        return None
    # the output divided by the factor against the reference, under the same bound (the
    # scaled reference would stretch the bound by the factor and hide a shift besides)
    row = compare_arrays("", "", a / alpha, e, tol)
    if row.verdict != "pass" or compare_arrays("", "", e, alpha * e, tol).verdict == "pass":
        return None
    rel = max(tol.rtol, 1e-12)

    def near(x: float, k: float) -> bool:
        return abs(x - k) <= rel * abs(k)

    k = round(alpha)
    if k >= 2 and near(alpha, k):
        what = f"{k} (a sum where a mean over {k} terms belongs?)"
    elif alpha > 0 and round(1 / alpha) >= 2 and near(1 / alpha, round(1 / alpha)):
        what = f"1/{round(1 / alpha)} (a mean where a sum belongs, or an extra division?)"
    elif alpha > 0 and round(alpha * alpha) >= 2 and near(alpha * alpha, round(alpha * alpha)):
        what = f"sqrt({round(alpha * alpha)})"
    else:
        what = f"{alpha:.6g}"
    return (f"diagnosis: your output equals the reference times {what} (error {row.error:.2g}, "
            f"bound {row.bound:.2g})")
