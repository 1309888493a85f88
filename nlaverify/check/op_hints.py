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
    ref = _evaluate(probe, forward, static)
    if ref is None:
        return False, float("nan"), probe.tol.rtol
    row = compare_arrays(plan.settings.subject, "forward", probe.out, ref, probe.tol)
    return row.verdict == "pass", row.error, row.bound


def _evaluate(probe: _Probe, forward: Any, static: dict[str, Any]) -> np.ndarray | None:
    """``forward`` (against ``xp``) on the probe's case in float64 NumPy, or ``None`` where
    it raises."""
    from nlaverify.backends import get_namespace

    try:
        with np.errstate(all="ignore"):
            return np.asarray(forward(get_namespace("numpy"), *probe.case.args, **static),
                              dtype=np.float64)
    except Exception:
        return None


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
    failing case, where the kernel must also sit within a quarter of its distance to the op
    from the mistake, and on a second case at the top of the drawn sizes; and the only
    variant that does. For a kernel whose forward agrees with the op, the mistakes of a
    backward (:func:`_backward_diagnosis`). Nothing is claimed where no variant or more than
    one agrees."""
    from nlaverify.ops.variants import variants_of

    first = _probe(plan, case)
    notes = convention_notes(plan, case, first)
    if first is None or not (registered(plan.spec) and variants_of(plan.spec.name)):
        return notes
    static = dict(plan.spec.static)
    if _agrees(plan, first, plan.spec.forward, static)[0]:
        return notes + _backward_diagnosis(plan, case)
    op_out = _evaluate(first, plan.spec.forward, static)
    if op_out is None:
        return notes
    # the kernel must sit much nearer the variant than it sits to the op (a quarter of that
    # distance): in a wide (bfloat16) bound a kernel halfway between the two agrees with both
    off = compare_arrays("", "", first.out, op_out, first.tol).error
    candidates = []
    for v in variants_of(plan.spec.name):
        if v.forward is None:
            continue
        ok, error, bound = _agrees(plan, first, v.forward, static)
        if ok and error <= off / 4:
            candidates.append((v, error, bound))
    if not candidates:
        return notes
    second_case = _confirming_case(plan, case)
    second = _probe(plan, second_case) if second_case is not None else None
    if second is None:
        return notes
    # the mistake must explain the kernel on a second case at the top of the drawn sizes
    # too, whether or not the kernel fails there: a kernel wrong only at n = 1 (zeros) agrees
    # there with a mask without the diagonal, which the second case refutes; a missing max
    # shift, wrong only on huge logits, equals the op (and the kernel) on the second case
    candidates = [(v, e, b) for v, e, b in candidates
                  if _agrees(plan, second, v.forward, static)[0]]
    where = "; confirmed on a second case at the top of the drawn sizes"
    if len(candidates) == 1:
        v, error, bound = candidates[0]
        notes.append(f"diagnosis: your forward equals {v.op} with {v.what} (error "
                     f"{error:.2g}, bound {bound:.2g}{where})")
    return notes


def _user_cotangents(plan: OpPlan, case: OpCaseInput) -> list[np.ndarray] | None:
    """The user's VJP at the case (theirs or their framework's autodiff), float64."""
    from nlaverify.check.adapters import to_framework

    s = plan.settings
    n_real = sum(a.kind == "real" for a in case.spec.args)
    try:
        args = _user_args(case, s.framework, s.dtype)
        G = to_framework(case.cotangent, s.framework, s.dtype)
        cots = s.call_vjp(G, *args) if s.vjp is not None else s.autodiff_vjp(G, args)
        cots = list(cots) if isinstance(cots, list | tuple) else [cots]
        if len(cots) != n_real:
            return None
        return [to_float64(c, what="cotangent") for c in cots]
    except Exception:
        return None


def _vjp_agrees(plan: OpPlan, case: OpCaseInput, got: list[np.ndarray], vjp: Any,
                tol: Tolerance) -> tuple[bool, float, float]:
    """``vjp`` (against ``xp``) at the case in float64 NumPy against the user's cotangents,
    every array under the VJP rows' bound: ``(agrees, worst error, its bound)``."""
    from nlaverify.backends import get_namespace

    try:
        with np.errstate(all="ignore"):
            ref = vjp(get_namespace("numpy"), case.cotangent, *case.args, **dict(case.static))
        ref = [np.asarray(r, np.float64) for r in ref]
    except Exception:
        return False, float("nan"), tol.rtol
    rows = [compare_arrays(plan.settings.subject, "vjp", g, r, tol)
            for g, r in zip(got, ref, strict=True)]
    worst = max(rows, key=lambda r: r.ratio)
    return all(r.verdict == "pass" for r in rows), worst.error, worst.bound


def _backward_diagnosis(plan: OpPlan, case: OpCaseInput) -> list[str]:
    """For a kernel whose forward is right and whose derivative fails: the classic mistake
    of a hand-written backward (a :class:`~nlaverify.ops.variants.Variant` with ``vjp``)
    its cotangents equal within the VJP rows' bound, on the failing case and on a second
    case at the top of the drawn sizes, and the only one; where the op's own VJP agrees
    under the same comparison nothing is claimed."""
    from nlaverify.check.op_reference import _derived_condition
    from nlaverify.ops.variants import variants_of

    backward = [v for v in variants_of(plan.spec.name)
                if v.vjp is not None or v.forward is not None]
    if not backward or plan.spec.vjp is None:
        return []
    cases = [case]
    second = _confirming_case(plan, case)
    if second is not None:
        cases.append(second)
    candidates = list(backward)
    found: dict[int, tuple[float, float]] = {}
    used = 0
    for k, c in enumerate(cases):
        got = _user_cotangents(plan, c)
        if got is None:
            return []
        kappa = max(_case_condition(c, "forward"), _derived_condition(c),
                    _case_condition(c, "vjp"))
        tol = _tol(plan.settings, c, kappa, 2)
        if tol.rtol >= 1:
            continue  # a bound that resolves nothing here tells no variant apart
        used += 1
        op_ok, off, _ = _vjp_agrees(plan, c, got, plan.spec.vjp, tol)
        if k == 0 and op_ok:
            return []  # the op's own VJP explains the kernel here: nothing to name
        # on the second case too, whether or not the kernel fails there: a kernel right on
        # ordinary inputs keeps only the mistakes that are right there as well
        kept = []
        probe = None
        for v in candidates:
            if v.vjp is None:  # a forward mistake seen in a derivative first (bfloat16)
                probe = probe or _probe(plan, c)
                if probe is None or not _agrees(plan, probe, v.forward, dict(c.static))[0]:
                    continue
            vjp = v.vjp or _autodiff_vjp(plan, v)
            ok, error, bound = _vjp_agrees(plan, c, got, vjp, tol)
            # on the failing case the kernel must sit much nearer the mistake than it sits
            # to the op (a quarter): a term halved is within a wide bound of both
            if ok and (k > 0 or error <= off / 4):
                kept.append(v)
                found.setdefault(id(v), (error, bound))
        candidates = kept
    if len(candidates) != 1 or id(candidates[0]) not in found or not used:
        return []
    v = candidates[0]
    error, bound = found[id(v)]
    if v.vjp is None:
        return [f"diagnosis: your kernel equals {v.op} with {v.what}: its forward agrees with "
                f"that within the bound and its VJP equals that one's by autodiff (error "
                f"{error:.2g}, bound {bound:.2g}; on the failing case and a second at the top "
                f"of the drawn sizes)"]
    return [f"diagnosis: your VJP equals {v.op}'s with {v.what} (error {error:.2g}, bound "
            f"{bound:.2g}; on the failing case and a second at the top of the drawn sizes)"]


def _autodiff_vjp(plan: OpPlan, v: Any) -> Any:
    """The VJP of a forward variant ``v`` by JAX autodiff in float64 (as a ``vjp(xp, G,
    *args, **static)`` on NumPy arrays): the reference autodiff of a user's op
    (:func:`~nlaverify.check.op_reference._autodiff`) on the variant's spec."""
    from dataclasses import replace

    from nlaverify.check.op_reference import _autodiff

    spec = replace(plan.spec, forward=v.forward)

    def vjp(xp: Any, G: Any, *args: Any, **static: Any) -> list[np.ndarray]:
        case = OpCaseInput(spec, list(args), G, [], dict(static), "variant")
        cots, _ = _autodiff(case, False, {"vjp": "autodiff", "jvp": None})
        return cots or []

    return vjp


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
