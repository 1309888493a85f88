r"""``check_op``: a user's op or kernel, and its VJP/JVP, against the proved op.

The subject is the user's forward ``fn`` (NumPy, JAX, PyTorch or CuPy) in the user's dtype,
with their VJP/JVP or, when they give none, their framework's autodiff of ``fn``. The
reference is the op of :data:`nlaverify.ops.registry.OPS` whose forward, VJP and JVP are
proved exactly (``nlaverify derive``), run on the mpmath namespace at 30 digits on the *same*
inputs: drawn in float64 and rounded to the user's dtype first, so the comparison measures
the user's arithmetic, not the rounding of the inputs.

Cases: hypothesis draws sizes (the op's ranges or ``shapes=``), leading batch and head axes
on the per-token arguments (those with a sequence axis ``n``: the batching family proves the
reference op on a batch is the op on each sequence) and a seed for the values; the hostile
cases of :data:`nlaverify.strategies.HOSTILE_OPS` (logits of :math:`\pm 10^4`, masked rows,
tiny, huge and constant norm rows, activations far in the tails) and of Mamba-2's scan
(trained-like decays, :mod:`nlaverify.cases.hostile_ssm`) follow. A failing drawn case
is shrunk by hypothesis to a minimal one, which the report prints as a runnable reproducer.

Bound of every row: :func:`nlaverify.tolerance.tolerance` for the user's dtype, with
:math:`k` the largest array of the case, depth 1 (forward) or 2 (a derivative), float32
accumulation below float32 (what PyTorch's and XLA's CPU and GPU kernels do; ``accumulation=``
to change it), and the condition :math:`\kappa` estimated at the case by small-sample
statistical condition estimation (Kenney & Laub 1994) on the float64 reference: the inputs
are perturbed componentwise, :math:`x(1 + \epsilon r)` with random signs :math:`r` and
:math:`\epsilon = 2^{-26}`, and

.. math:: \kappa = \max\Bigl(1,\ \max_{r}\frac{\|f(x(1+\epsilon r)) - f(x)\|_\infty}
          {\epsilon\,\max(1, \|f(x)\|_\infty)}\Bigr)

over three draws, the amplification of a backward-stable kernel's relative input
perturbations in the normwise measure of :func:`~nlaverify.check.report.compare_arrays`
(likewise for the VJP with the cotangent perturbed too). The derivative rows also take the
op's a-priori condition (``OpSpec.condition``, e.g. :math:`\max|x|/\sigma` for the norms)
when it is larger: an input perturbation cannot see the rounding of the intermediates a
backward reuses (LayerNorm's :math:`\hat x` at small :math:`d`). Hostile cases keep the
condition estimates derived for them (``nlaverify.strategies.hostile_op_cases``).

Recurrences (:data:`~nlaverify.check.op_reference.RUNNING_ERROR_OPS`: the selective scans)
take another bound: the stage model counts a scan as one or two stages, while its forward and
its backward are :math:`n` stages deep, each old rounding damped by the decay products
:math:`\prod\bar A`; the generic :math:`C\kappa D u` was about 100 times the float32 error
of a scan and above 1 in bfloat16 (inconclusive on 17 of 20 seeds of a correct kernel at
:math:`n = 4`). Their rows take the op's first-order running error bound
(:mod:`nlaverify.precision.running`): the proved forward, VJP or JVP evaluated on the
kernel's (rounded) inputs with every result's rounding error propagated entry by entry
(Higham 2002 §3.1, §3.3), no constant and no separate :math:`\kappa`; so do the hostile
cases of Mamba-2's scan (:data:`~nlaverify.cases.hostile_ssm.HOSTILE_RUNNING_OPS`).

A kernel that writes to its inputs (``x.mul_()``) or returns integers fails its forward
row, naming the argument or the dtype.

Selections (``deepseek_v3_select``, ``topk_mask``; :mod:`~nlaverify.check.op_selection`) are
judged token by token: a token within the dtype's rounding of a top-k boundary is not judged
(only such tokens differing: inconclusive), any other differing token fails the row.

Seed: Baggag & Saad §2.6 (every op's VJP), §3 (the ops); Higham & Mary (2019), Kenney &
Laub (1994) for the bound.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from nlaverify.cases.inputs import (
    OpCaseInput,
    explicit_inputs,
    hostile_inputs,
    real_indices,
    registered,
)
from nlaverify.cases.rounding import exact_in as _exact_in
from nlaverify.check.adapters import array_framework, to_float64, to_framework
from nlaverify.check.op_hints import diagnosis_notes
from nlaverify.check.op_layouts import layout_rows
from nlaverify.check.op_plan import OpPlan, plan_op_check
from nlaverify.check.op_reference import (
    RELATIVE_DTYPES,
    _case_condition,
    _derived_condition,
    _reference,
    _sce_per_array,
    _tol,
    amplified,
    reference_sources,
    relative_floor,
    running_bounds,
    running_tol,
)
from nlaverify.check.op_search import search
from nlaverify.check.op_selection import selection_margin
from nlaverify.check.op_subject import (
    _as_list,
    _integer_output,
    _mutated,
    _Settings,
    _snapshot,
    _user_args,
    _wider_output,
    reproducer,
)
from nlaverify.check.report import (
    CheckError,
    CheckReport,
    Row,
    compare_arrays,
    error_row,
    inconclusive_row,
    skip_row,
    with_reproducer,
)
from nlaverify.ops.registry import OpSpec, op_signature

__all__ = ["OpCaseInput", "check_op", "exact_in", "op_signature"]


def exact_in(values: Any, dtype: str) -> np.ndarray:
    """``values`` rounded to ``dtype`` (float64, float32, bfloat16, float16) and back to
    float64: numbers exactly representable in ``dtype``, so the user's kernel and the
    reference see the same inputs. Values beyond the dtype's range are a
    :class:`~nlaverify.check.report.CheckError` (:func:`nlaverify.cases.exact_in` with
    ``strict=True``)."""
    return _exact_in(values, dtype, strict=True)


def _run_case(s: _Settings, case: OpCaseInput) -> list[Row]:
    """Every row of one case; a row that would pass under a bound of 1 or more is skipped
    instead (a normwise relative bound >= 1 accepts any error: the case is too
    ill-conditioned for the dtype, and nothing was checked)."""
    rows = _case_rows(s, case)
    return [inconclusive_row(r.subject, r.check, f"cannot resolve: bound {r.bound:.3g} >= 1 "
                             f"at this case ({r.reason})", resolution=r.bound)
            if r.verdict == "pass" and r.bound >= 1 else r for r in rows]


def _case_rows(s: _Settings, case: OpCaseInput) -> list[Row]:
    """Every row of one case: forward, each cotangent, the tangent."""
    spec = case.spec
    rows: list[Row] = []
    tag = "" if case.origin == "drawn" else f" ({case.origin})"
    want_jvp = s.check_jvp and reference_sources(spec)["jvp"] is not None
    ref = _reference(case, want_jvp, s.reference)
    args = _user_args(case, s.framework, s.dtype)
    before = _snapshot(args)
    kappa_f = _case_condition(case, "forward")
    try:
        out = s.forward(args)
        got = array_framework(out)
        if got is not None and got != s.framework and not (s.framework == "numpy"
                                                             and np.ndim(out) == 0):
            raise CheckError(f"argument 'framework': fn was called with {s.framework} "
                             f"arrays and returned a {got} array: pass framework={got!r}")
        out64 = to_float64(out, what="output of fn")
    except CheckError:
        raise
    except Exception as exc:
        row = error_row(s.subject, "forward" + tag, exc, where="fn")
        if s.framework == "numpy" and "numpy.ndarray" in str(exc):
            row = replace(row, reason=row.reason + " (fn was called with NumPy arrays, the "
                          "framework detected from it: for a PyTorch or JAX kernel pass "
                          "framework='torch' or 'jax')")
        return [row]
    run_f = running_bounds(s, case, "forward")
    tol_f = (_tol(s, case, kappa_f, 1) if run_f is None
             else running_tol(run_f[0], ref.out, 1.0, s.dtype))
    row = compare_arrays(s.subject, "forward" + tag, out64, ref.out, tol_f, label="out")
    row = selection_margin(row, case, out64, ref.out, s.dtype)  # a near tie: inconclusive
    wider = _wider_output(out, s.framework, s.dtype)
    if wider:
        s.note(f"fn returned {wider} for a {s.dtype} check: its output was not rounded to "
               f"{s.dtype} (the rows judge it by {s.dtype}'s bound; fine if your kernel "
               "means to return the wider type)")
    integer = _integer_output(out)
    if integer is not None:
        row = replace(row, verdict="fail", error=math.inf, reason=f"out: fn returned "
                      f"{integer}, expected a floating array ({s.dtype})")
    changed = _mutated(case, before, args)
    if changed is not None:
        row = replace(row, verdict="fail", error=math.inf, where=changed, actual=None,
                      expected=None, reason=f"fn modified its argument {changed!r} in "
                      "place: a kernel must not write to its inputs")
    rows.append(row)
    if changed is not None:  # every later call would see the modified values
        return rows
    if case.origin == "drawn" and row.verdict == "pass":
        rows += layout_rows(s, case, args, ref.out, tol_f)
    if not spec.differentiable:
        return rows
    real = real_indices(spec)
    names = [spec.args[k].name for k in real]
    # a derivative's statistical estimate perturbs the inputs only; it is blind to the
    # rounding of the intermediates a kernel's backward reuses (a normalization's x-hat,
    # whose error 1/sigma amplifies, while x-hat itself barely moves with x when d is
    # small): the op's a-priori condition covers those
    kappa_d = max(kappa_f, _derived_condition(case))
    kappa_b = max(kappa_d, _case_condition(case, "vjp"))
    tol_b = _tol(s, case, kappa_b, 2)
    G = to_framework(case.cotangent, s.framework, s.dtype)
    if ref.cotangents is None:
        rows.append(skip_row(s.subject, "vjp", ref.missing))
    try:
        if ref.cotangents is None:
            cots = None
        elif s.vjp is not None:
            cots = _as_list(s.call_vjp(G, *args), "output of vjp", len(real))
            how = "vjp"
        else:
            cots = s.autodiff_vjp(G, args)
            how = f"vjp ({s.framework} autodiff)"
    except NotImplementedError as exc:
        rows.append(skip_row(s.subject, "vjp", str(exc)))
        cots = None
    except CheckError:
        raise
    except Exception as exc:
        rows.append(error_row(s.subject, "vjp" + tag, exc, where="vjp"))
        cots = None
    relative = relative_floor(s.dtype, case)
    # a recurrence's own bound, entry by entry (running_bounds), replaces the stage model
    run_b = running_bounds(s, case, "vjp") if cots is not None else None
    per_array = _sce_per_array(case, "vjp") if cots is not None and run_b is None and any(
        relative_floor(s.dtype, case, name) for name in names) else None
    if cots is not None:
        for i, (name, c, e) in enumerate(zip(names, cots, ref.cotangents, strict=True)):
            tol_i, floor = tol_b, 1.0
            if run_b is not None:
                floor = 0.0 if relative_floor(s.dtype, case, name) else 1.0
                tol_i = running_tol(run_b[i], e, floor, s.dtype)
            elif per_array is not None and relative_floor(s.dtype, case, name):
                # relative to this cotangent's own magnitude; the op's a-priori
                # amplification only where it bears (amplified)
                kappa_i = kappa_d if amplified(case, name) else kappa_f
                tol_i, floor = _tol(s, case, max(kappa_i, per_array[i]), 2), 0.0
            rows.append(compare_arrays(s.subject, f"{how} {name}{tag}",
                                       to_float64(c, what=f"cotangent of {name}"), e, tol_i,
                                       label=name, floor=floor))
    if want_jvp and ref.tangent is None and ref.missing:
        rows.append(skip_row(s.subject, "jvp", ref.missing))
    if want_jvp and ref.tangent is not None:
        kappa_t = max(kappa_d, _case_condition(case, "jvp"))
        T = [to_framework(t, s.framework, s.dtype) for t in case.tangents]
        try:
            if s.jvp is not None:
                tan = s.call_jvp(tuple(T), *args)
                how = "jvp"
            else:
                tan = s.autodiff_jvp(T, args)
                how = f"jvp ({s.framework} autodiff)"
            floor, kappa_rel = 1.0, None
            run_t = running_bounds(s, case, "jvp")
            if relative:
                got_rel = _sce_per_array(case, "jvp") if run_t is None else [1.0]
                if got_rel is not None:
                    floor, kappa_rel = 0.0, max(kappa_d, got_rel[0])
            tol_t = (_tol(s, case, kappa_rel or kappa_t, 2) if run_t is None
                     else running_tol(run_t[0], ref.tangent, floor, s.dtype))
            rows.append(compare_arrays(s.subject, how + tag, to_float64(tan, what="tangent"),
                                       ref.tangent, tol_t, label="tangent", floor=floor))
        except NotImplementedError as exc:
            rows.append(skip_row(s.subject, "jvp", str(exc)))
        except CheckError:
            raise
        except Exception as exc:
            if s.jvp is not None:
                rows.append(error_row(s.subject, "jvp" + tag, exc, where="jvp"))
            else:  # the framework's forward mode could not run fn: not the user's bug
                rows.append(skip_row(s.subject, "jvp", f"{s.framework} forward-mode autodiff "
                                     f"of fn raised {type(exc).__name__}: {exc}"))
    return rows


# -- the reproducer ----------------------------------------------------------------------


def check_op(
    fn: Callable[..., Any],
    op: str | OpSpec,
    *,
    vjp: Callable[..., Any] | None = None,
    jvp: Callable[..., Any] | None = None,
    dtype: str = "float32",
    framework: str | None = None,
    static: Mapping[str, Any] | None = None,
    shapes: Mapping[str, int | tuple[int, int]] | None = None,
    batch: bool | Sequence[int] = True,
    examples: int = 12,
    hostile: bool | int | str = True,
    inputs: Sequence[Any] | None = None,
    check_jvp: bool = True,
    accumulation: str | None = None,
    products: str | None = None,
    reference: str = "mpmath",
    seed: int = 0,
    name: str | None = None,
    layouts: bool = True,
) -> CheckReport:
    r"""Check your forward ``fn`` (and its VJP/JVP) against the proved op ``op``.

    Args:
        fn: your forward, called as ``fn(*args)`` with the op's arguments in the order of
            :func:`op_signature` (arrays of ``framework`` in ``dtype``; token ids int64),
            returning one array. Bake static values (``eps``, ``n_heads``) into ``fn``;
            ``static=`` sets the reference's.
        op: a name of :data:`nlaverify.ops.registry.OPS` (``"rmsnorm"``, ``"softmax"``,
            ``"causal_attention"``, ...) or an :class:`~nlaverify.ops.registry.OpSpec`.
        vjp: your reverse mode, ``vjp(G, *args) -> (x̄, ...)`` (one cotangent per real
            argument). Omitted: your framework's autodiff of ``fn`` (JAX, PyTorch); NumPy
            and CuPy have none, so their VJP rows are skipped, with the reason.
        jvp: your forward mode, ``jvp(tangents, *args) -> ḟ``. Omitted: the framework's.
        dtype: the precision of your kernel: ``float64``, ``float32``, ``bfloat16``,
            ``float16``; the bound is the tolerance model's for it.
        framework: ``numpy``, ``jax``, ``torch`` or ``cupy``; default: detected from ``fn``
            (:func:`~nlaverify.check.adapters.detect_framework`).
        shapes: sizes (``{"d": 64}``) or ranges (``{"n": (1, 16)}``) of the named
            dimensions; default the op's small ranges.
        batch: ``True`` draws leading axes ``()``, ``(B,)`` or ``(B, H)`` for the per-token
            arguments (``B, H \le 3``); ``False`` none; a tuple fixes them.
        examples: hypothesis-drawn cases (a failing one is shrunk to a minimal one).
        hostile: the hostile cases of ``HOSTILE_OPS`` (``True``: 4 seeds; an int: that many):
            logits of :math:`\pm 10^4` with masked rows, attention scores of
            :math:`\pm 10^4`, activations in the tails, Mamba-2's trained-like decays
            (judged by the scan's running error bound); for the norms the rows a model
            meets (:func:`~nlaverify.check.op_cases.realistic_norm_rows`). ``"extreme"``:
            the full hostile strategies (norm rows up to the dtype's overflow, where
            :math:`x^2` overflows in a naive kernel: a robustness test beyond what models
            meet).
        inputs: explicit cases instead of drawn ones: a list of argument lists, of
            ``(args, cotangent)`` pairs, or of ``(args, cotangent, tangents)`` triples (one
            tangent per real argument: what the reproducer of a failure uses).
        accumulation, products: the precisions of sums and of products' operands, as in
            :func:`~nlaverify.tolerance.tolerance` (default: float32 sums below float32;
            ``products="tfloat32"`` for float32 matmuls on tensor cores).
        reference: ``"mpmath"`` (30 digits) or ``"float64"`` (the same proved op on NumPy:
            for float32 and narrower kernels at large shapes, where the mpmath loop over
            entries costs seconds per case; its error is far below the bound).
        seed: the seed of the drawn values (the run is deterministic).
        name: the subject's name in the report (default: ``fn``'s).
        layouts: PyTorch and CuPy kernels also run every drawn case on non-contiguous
            views of the same values (transposed, strided), and a kernel that assumes a
            contiguous row-major layout is named (:mod:`~nlaverify.check.op_layouts`);
            ``inputs=`` are handed to ``fn`` as given.

    Returns:
        A :class:`~nlaverify.check.report.CheckReport`: one row per case and check, the
        worst row per check when all pass; a failure names the argument and entry, your
        value, the reference, the bound and the ratio, and carries a reproducer.
    """
    plan = plan_op_check(fn, op, vjp=vjp, jvp=jvp, dtype=dtype, framework=framework,
                         static=static, shapes=shapes, batch=batch, examples=examples,
                         hostile=hostile, check_jvp=check_jvp, accumulation=accumulation,
                         products=products, reference=reference, name=name, layouts=layouts)
    report = CheckReport(plan.settings.subject, "check_op")
    report.notes.extend(plan.notes)
    if inputs is not None:
        report = _explicit_stage(plan, inputs, report)
        report.notes.extend(plan.settings.notes)
        return report
    kept = _Kept()
    failed = _drawn_stage(plan, examples, seed, kept)
    hostile_failed, n_hostile = _hostile_stage(plan, hostile, kept)
    if not examples and not n_hostile:
        report.notes.append(f"nothing ran: examples=0 and {plan.spec.name} has no hostile "
                            "cases here (hostile=" + repr(hostile) + "): the report is not ok")
    report.notes.extend(plan.settings.notes)
    return _summarize(report, failed + hostile_failed, kept, plan.settings.dtype)


# -- the stages --------------------------------------------------------------------------


def _explicit_stage(plan: OpPlan, inputs: Sequence[Any], report: CheckReport) -> CheckReport:
    """The cases ``inputs`` spells out, each row reported (a failure with its reproducer)."""
    s = plan.settings
    for case in explicit_inputs(plan.spec, inputs, s.dtype, plan.spec.static,
                                convert=to_float64):
        rows = _run_case(s, case)
        if any(r.verdict == "fail" for r in rows):
            rows = _attach(rows, reproducer(s, case, plan.op_text, plan.options))
            report.notes.extend(n for n in diagnosis_notes(plan, case)
                                if n not in report.notes)
        report.extend(rows)
    return report


class _Kept:
    """The worst passing row per check (its origin dropped), the first skip of each, and
    the cases each check could not resolve (inconclusive: reported only for a check that no
    case resolved)."""

    def __init__(self) -> None:
        self.worst: dict[str, Row] = {}
        self.unresolved: dict[str, list[Row]] = {}
        #: notes on a failing case (the conventions a kernel follows)
        self.hints: list[str] = []

    def __call__(self, rows: list[Row]) -> None:
        for r in rows:
            key = _ORIGIN.sub("", r.check)
            if r.inconclusive:
                self.unresolved.setdefault(key, []).append(r)
            elif r.verdict == "skip":
                self.worst.setdefault("skip " + r.check, r)
            elif key not in self.worst or _rank(r) > _rank(self.worst[key]):
                self.worst[key] = r

    def rows(self) -> tuple[list[Row], list[str]]:
        """The kept rows (a check that no case resolved as one inconclusive row) and notes
        on the checks that some cases resolved and others could not."""
        rows, notes = list(self.worst.values()), []
        for key, unresolved in self.unresolved.items():
            if key in self.worst:
                notes.append(f"{key}: {len(unresolved)} case(s) could not be resolved (bound "
                             ">= 1, e.g. " + unresolved[0].check + "); the row above is the "
                             "worst of the cases that resolved it")
            else:
                rows.append(unresolved[0])
        return rows, notes


def _drawn_stage(plan: OpPlan, examples: int, seed: int, keep: _Kept) -> list[Row]:
    """Hypothesis draws ``examples`` cases; the rows of the minimal failing one (shrunk),
    with its reproducer, or none (the passing rows went to ``keep``)."""
    if not examples:
        return []
    s = plan.settings
    minimal = search(s, plan.spec, plan.ranges, plan.choices, examples, seed, s.dtype, keep,
                     _run_case)
    if minimal is None:
        return []
    keep.hints.extend(diagnosis_notes(plan, minimal))
    return _attach(_run_case(s, minimal), reproducer(s, minimal, plan.op_text, plan.options))


def _hostile_stage(plan: OpPlan, hostile: bool | int | str, keep: _Kept
                   ) -> tuple[list[Row], int]:
    """The hostile cases up to the first failure: its rows with the reproducer (or none),
    and how many hostile cases the op has here."""
    s = plan.settings
    count = 4 if hostile in (True, "extreme") else int(hostile or 0)
    cases = hostile_inputs(plan.spec, s.dtype, count, plan.spec.static,
                           extreme=hostile == "extreme")
    if count and not cases and not registered(plan.spec):
        keep([skip_row(s.subject, "hostile", f"no hostile cases for {plan.spec.name}: "
                       "name the kinds of your op's arguments (user_op(..., hostile={'Q': "
                       "'scores'}): logits, scores, norm_rows, activations) or pass the "
                       "extreme inputs your kernel must survive with inputs=")])
    for case in cases:
        rows = _run_case(s, case)
        if any(r.verdict == "fail" for r in rows):
            if not keep.hints:  # the drawn failure's diagnosis stands
                keep.hints.extend(diagnosis_notes(plan, case))
            return _attach(rows, reproducer(s, case, plan.op_text, plan.options)), len(cases)
        keep(rows)
    return [], len(cases)


def _summarize(report: CheckReport, failed: list[Row], kept: _Kept, dtype: str) -> CheckReport:
    """The failing cases' rows (failures first), or the worst passing row of each check (one
    inconclusive row for a check that no case could resolve), and for a narrow dtype the
    resolution of the passing rows: the errors they could not have seen."""
    report.notes.extend(kept.hints)
    if failed:
        report.extend(r for r in failed if r.verdict != "pass")
        report.extend(r for r in failed if r.verdict == "pass")
    else:
        rows, notes = kept.rows()
        report.extend(rows)
        report.notes.extend(notes)
        passed = [r for r in rows if r.verdict == "pass" and math.isfinite(r.bound)]
        if dtype in RELATIVE_DTYPES and passed:
            worst = max(passed, key=lambda r: r.bound)
            report.notes.append(
                f"resolution in {dtype}: a row sees only errors above its bound, up to "
                f"{worst.bound:.2g} of the array's scale here ({worst.check}); a smaller "
                f"error passes unseen (a bug that scales that array by 1 + "
                f"{worst.bound / 2:.2g}, say): the rows of a float32 check resolve ~1e-5")
    return report


_ORIGIN = re.compile(r" \((hostile seed \d+|input \d+)\)$")


def _rank(r: Row) -> float:
    ratio = r.ratio
    return -1.0 if math.isnan(ratio) else ratio


def _attach(rows: list[Row], code: str) -> list[Row]:
    return [with_reproducer(r, code) if r.verdict == "fail" else r for r in rows]


