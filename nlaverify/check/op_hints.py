"""What a failing ``check_op`` case says beyond its rows: the conventions of the op that are
options (:data:`nlaverify.ops.conventions.CONVENTIONS`), the ones in force, and the ones the
user's kernel follows when they are not the ones in force (RoPE's pairing and base: a
half-split kernel checked against the interleaved op fails by a factor of 1e5, which reads
as a wrong base unless the report says which pairing the kernel follows).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.cases.inputs import OpCaseInput, registered
from nlaverify.check.adapters import to_float64
from nlaverify.check.op_plan import OpPlan
from nlaverify.check.op_reference import _case_condition, _tol
from nlaverify.check.op_subject import _user_args
from nlaverify.check.report import compare_arrays
from nlaverify.ops.conventions import conventions
from nlaverify.tolerance import Tolerance

__all__ = ["convention_notes", "diagnosis_notes"]


@dataclass(frozen=True)
class _Probe:
    """A case with the user's forward output on it and the forward row's bound there,
    each computed once (the condition estimate runs the reference four times)."""

    case: OpCaseInput
    out: np.ndarray
    tol: Tolerance


def _probe(plan: OpPlan, case: OpCaseInput) -> _Probe | None:
    s = plan.settings
    try:
        out = to_float64(s.forward(_user_args(case, s.framework, s.dtype)),
                         what="output of fn")
    except Exception:
        return None
    return _Probe(case, out, _tol(s, case, _case_condition(case, "forward"), 1))


def _agrees(plan: OpPlan, probe: _Probe, forward: Any, static: dict[str, Any]
            ) -> tuple[bool, float, float]:
    """``forward`` (against ``xp``) on the probe's case in float64 NumPy against the user's
    output, under the forward row's bound: ``(agrees, error, bound)``."""
    from nlaverify.backends import get_namespace

    try:
        with np.errstate(all="ignore"):
            ref = np.asarray(forward(get_namespace("numpy"), *probe.case.args, **static),
                             dtype=np.float64)
    except Exception:
        return False, float("nan"), probe.tol.rtol
    row = compare_arrays(plan.settings.subject, "forward", probe.out, ref, probe.tol)
    return row.verdict == "pass", row.error, row.bound


def _confirming_case(plan: OpPlan, case: OpCaseInput) -> OpCaseInput | None:
    """A second case at the top of the drawn sizes (no batch axes): a mistake named on the
    shrunk minimal case must also explain the kernel there (at ``n = 2, d = 1`` a forgotten
    mask and a mask off by one, or the mean absolute value and the RMS, agree)."""
    from nlaverify.cases.inputs import drawn_input

    sizes = {k: hi for k, (_, hi) in plan.ranges.items()}
    if plan.spec.fix_sizes:
        sizes = plan.spec.fix_sizes(sizes)
    try:
        return drawn_input(plan.spec, sizes, (), 2**20 + 7, plan.settings.dtype,
                           plan.spec.static)
    except Exception:
        return None


def diagnosis_notes(plan: OpPlan, case: OpCaseInput) -> list[str]:
    """What a failing case says about the bug, one line each: the conventions in force
    and the ones the kernel follows (:func:`convention_notes`), and the classic mistake its
    forward equals within the same bound (:data:`nlaverify.ops.variants.VARIANTS`): on the
    failing case and, where the kernel is wrong on ordinary inputs too, on a second case
    at the top of the drawn sizes; and the only variant that does. Nothing is claimed for a
    kernel whose forward agrees with the op (its bug is in a derivative), or where no
    variant or more than one agrees."""
    from nlaverify.ops.variants import variants_of

    first = _probe(plan, case)
    notes = convention_notes(plan, case, first)
    if first is None or not (registered(plan.spec) and variants_of(plan.spec.name)):
        return notes
    static = dict(plan.spec.static)
    if _agrees(plan, first, plan.spec.forward, static)[0]:
        return notes
    candidates = []
    for v in variants_of(plan.spec.name):
        ok, error, bound = _agrees(plan, first, v.forward, static)
        if ok:
            candidates.append((v, error, bound))
    if not candidates:
        return notes
    second_case = _confirming_case(plan, case)
    second = _probe(plan, second_case) if second_case is not None else None
    where = ""
    if second is not None and not _agrees(plan, second, plan.spec.forward, static)[0]:
        # the kernel is wrong on ordinary inputs too: the mistake must explain it there
        candidates = [(v, e, b) for v, e, b in candidates
                      if _agrees(plan, second, v.forward, static)[0]]
        where = "; confirmed on a second case at the top of the drawn sizes"
    # (where the kernel is right on ordinary inputs, its bug shows only on special ones,
    # as a missing max shift on huge logits: the failing case alone decides)
    if len(candidates) == 1:
        v, error, bound = candidates[0]
        notes.append(f"diagnosis: your forward equals {v.op} with {v.what} (error "
                     f"{error:.2g}, bound {bound:.2g}{where})")
    return notes


def convention_notes(plan: OpPlan, case: OpCaseInput,
                     probe: _Probe | None = None) -> list[str]:
    """For an op whose conventions are options (:data:`~nlaverify.ops.conventions.CONVENTIONS`),
    at a failing case: the conventions in force and, when the kernel's forward agrees with
    the reference under other values (within the same bound), the values it follows.
    ``probe``: the case's :class:`_Probe`, when the caller has it."""
    table = conventions(plan.spec)
    if not table:
        return []
    static = dict(plan.spec.static)

    def described(key: str, value: Any) -> str:
        return f"{key}={value!r} ({dict(table[key]).get(value, 'yours')})"

    notes = [f"{plan.spec.name}: conventions in force: "
             + ", ".join(described(k, static.get(k)) for k in table)]
    probe = probe if probe is not None else _probe(plan, case)
    if probe is None or _agrees(plan, probe, plan.spec.forward, static)[0]:
        return notes  # a kernel whose forward agrees with the conventions in force
    for values in itertools.product(*(tuple(v for v, _ in table[k]) for k in table)):
        alt = dict(zip(table, values, strict=True))
        if all(static.get(k) == v for k, v in alt.items()):
            continue
        if _agrees(plan, probe, plan.spec.forward, {**static, **alt})[0]:
            change = {k: v for k, v in alt.items() if static.get(k) != v}
            notes.append(f"{plan.spec.name}: your forward follows "
                         + ", ".join(described(k, v) for k, v in change.items())
                         + f": pass static={change!r} if that is your convention")
            break
    return notes
