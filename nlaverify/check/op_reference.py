"""The reference of :func:`nlaverify.check.check_op` at a case: the proved op, its VJP and
JVP run on mpmath (or float64 NumPy), and the statistical condition estimate of the forward,
VJP and JVP (see :mod:`nlaverify.check.op` for the math and the seed sections). The cases
themselves come from :mod:`nlaverify.cases`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.cases.inputs import OpCaseInput, real_indices, registered
from nlaverify.check.op_subject import _Settings
from nlaverify.ops.registry import OpSpec
from nlaverify.tolerance import Tolerance, tolerance

#: digits of the mpmath reference (its error, 1e-30, is far below float64's 1.1e-16)
REFERENCE_DIGITS = 30
#: relative perturbation of the statistical condition estimate (in float64: the measured
#: differences keep ~10 significant digits)
SCE_EPS = 2.0**-26
SCE_DRAWS = 3


def _ns_args(xp: Any, case: OpCaseInput) -> list[Any]:
    out = []
    for a, x in zip(case.spec.args, case.args, strict=True):
        if a.kind == "tokens":
            out.append(x)
        else:
            out.append(xp.asarray(x) if xp.object_arrays else xp.asarray(x, dtype=xp.float64))
    return out


@dataclass
class _Reference:
    out: np.ndarray
    #: ``None``: no reference VJP (``missing`` says why)
    cotangents: list[np.ndarray] | None
    tangent: np.ndarray | None
    missing: str = ""


#: the references ``check_op`` can run the proved op on
REFERENCES = ("mpmath", "float64")


def reference_sources(spec: OpSpec) -> dict[str, str | None]:
    """Where the reference's VJP and JVP come from: ``"proved"`` (an op of the catalogue,
    proved by ``nlaverify derive``), ``"given"`` (a :func:`~nlaverify.check.user_op`'s own,
    proved only if :func:`~nlaverify.check.prove` ran on it), ``"autodiff"`` (a user op
    without one: JAX autodiff of its forward in float64, not proved) or ``None`` (no
    reference: the row is skipped, saying why)."""
    if not spec.differentiable:
        return {"vjp": None, "jvp": None}
    user = hasattr(spec, "vjp_given")
    vjp = ("given" if spec.vjp_given else "autodiff") if user else "proved"  # type: ignore[attr-defined]
    jvp = ("given" if user else "proved") if spec.jvp is not None else (
        "autodiff" if user else None)
    return {"vjp": vjp, "jvp": jvp}


def _autodiff(case: OpCaseInput, want_jvp: bool, sources: dict[str, str | None]
              ) -> tuple[list[np.ndarray] | None, np.ndarray | None]:
    """The cotangents and the tangent by JAX autodiff of the op's forward in float64, for
    the derivatives whose source is ``"autodiff"`` (``None`` for the others)."""
    from nlaverify.backends import get_namespace
    from nlaverify.backends.host import to_float64 as f64

    xp = get_namespace("jax")  # float64 enabled
    spec = case.spec
    args = [xp.asarray(x) if a.kind == "tokens" else xp.asarray(x, dtype=xp.float64)
            for a, x in zip(spec.args, case.args, strict=True)]
    cot = tan = None
    if sources["vjp"] == "autodiff":
        _, cots = spec.autodiff_vjp(args, xp.asarray(case.cotangent, dtype=xp.float64),
                                    **case.static)
        cot = [f64(c) for c in cots]
    if want_jvp and sources["jvp"] == "autodiff":
        tan = f64(spec.autodiff_jvp(args, [xp.asarray(t, dtype=xp.float64)
                                           for t in case.tangents], **case.static))
    return cot, tan


def _reference(case: OpCaseInput, want_jvp: bool, reference: str = "mpmath") -> _Reference:
    r"""The proved op, its VJP and JVP at the case: in mpmath at :data:`REFERENCE_DIGITS`
    digits, or (``"float64"``) on NumPy in float64, whose error (:math:`\approx 2^{-53}
    \kappa`) is :math:`2^{-29}` below float32's unit roundoff: a reference for float32 and
    narrower subjects that costs a NumPy call instead of an mpmath loop per entry. A user
    op's derivatives that were not given come from JAX autodiff in float64
    (:func:`reference_sources`)."""
    from nlaverify.backends import get_namespace
    from nlaverify.backends.host import to_float64 as f64

    xp = (get_namespace("mpmath", digits=REFERENCE_DIGITS) if reference == "mpmath"
          else get_namespace("numpy"))
    args = _ns_args(xp, case)
    spec, st = case.spec, case.static
    sources = reference_sources(spec)
    out = f64(spec.forward(xp, *args, **st))
    auto_cot = auto_tan = None
    missing = ""
    if "autodiff" in (sources["vjp"], sources["jvp"]):
        try:
            auto_cot, auto_tan = _autodiff(case, want_jvp, sources)
        except Exception as exc:  # the forward is not traceable by JAX
            missing = (f"no reference derivative: JAX autodiff of your forward raised "
                       f"{type(exc).__name__}: {exc} (give vjp=/jvp= to user_op)")
        finite_ref = np.all(np.isfinite(case.args[0])) if case.args else True
        bad = [a for a in (auto_cot or []) + ([auto_tan] if auto_tan is not None else [])
               if not np.all(np.isfinite(a))]
        if bad and finite_ref:  # autodiff through a kink (sqrt at 0, a where): no reference
            auto_cot = auto_tan = None
            missing = ("no reference derivative here: JAX autodiff of your forward gives "
                       "non-finite values at this case (a square root at 0, a branch of "
                       "where): give vjp=/jvp= to user_op")
    cot: list[np.ndarray] | None
    if sources["vjp"] is None:
        cot = []
    elif sources["vjp"] == "autodiff":
        cot = auto_cot
    else:
        cot = [f64(c) for c in spec.vjp(xp, xp.asarray(case.cotangent), *args, **st)]
    tan = None
    if want_jvp and sources["jvp"] == "autodiff":
        tan = auto_tan
    elif want_jvp and sources["jvp"] is not None:
        tan = f64(spec.jvp(xp, tuple(xp.asarray(t) for t in case.tangents), *args, **st))
    return _Reference(out, cot, tan, missing)


def _sce_draws(case: OpCaseInput, which: str
               ) -> tuple[list[np.ndarray], list[list[np.ndarray]]] | None:
    """The float64 reference's forward, VJP or JVP at the case and at :data:`SCE_DRAWS`
    componentwise perturbations of its inputs (relative size :data:`SCE_EPS`, random
    signs), or ``None`` when the reference cannot run there."""
    from nlaverify.backends import get_namespace

    xp = get_namespace("numpy")
    spec, st = case.spec, case.static
    real = real_indices(spec)
    base_args = [np.asarray(a) for a in case.args]

    def run(args: list[np.ndarray], G: np.ndarray, T: list[np.ndarray]) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            if which == "forward":
                return [np.asarray(spec.forward(xp, *args, **st), dtype=np.float64)]
            if which == "vjp":
                return [np.asarray(c, dtype=np.float64) for c in spec.vjp(xp, G, *args, **st)]
            return [np.asarray(spec.jvp(xp, tuple(T), *args, **st), dtype=np.float64)]

    try:
        f0 = run(base_args, case.cotangent, case.tangents)
    except Exception:
        return None
    rng = np.random.default_rng(len(case.args) * 104_729 + int(np.size(case.cotangent)))
    draws = []
    for _ in range(SCE_DRAWS):
        def pert(x: np.ndarray) -> np.ndarray:
            return x * (1 + SCE_EPS * rng.choice([-1.0, 1.0], np.shape(x)))

        args = [pert(a) if k in real or spec.args[k].kind == "fixed" else a
                for k, a in enumerate(base_args)]
        G = pert(case.cotangent) if which == "vjp" else case.cotangent
        T = [pert(t) for t in case.tangents] if which == "jvp" else case.tangents
        try:
            draws.append(run(args, G, T))
        except Exception:
            continue
    return f0, draws


def _worst_change(f1: np.ndarray, f0: np.ndarray) -> float:
    with np.errstate(invalid="ignore"):
        d = np.abs(f1 - f0)
    d = d[np.isfinite(d)]
    return float(np.max(d)) if d.size else 0.0


def _finite_max(y: np.ndarray) -> float:
    y = y[np.isfinite(y)]
    return float(np.max(np.abs(y))) if y.size else 0.0


def _sce(case: OpCaseInput, which: str) -> float:
    r"""The statistical condition estimate of the forward, the VJP or the JVP at the case
    (see the module docstring), on the float64 NumPy reference: the worst change of any
    output array relative to :math:`\epsilon \max(1, \max|f|)`."""
    got = _sce_draws(case, which)
    if got is None:
        return 1.0
    f0, draws = got
    scale = max([1.0] + [_finite_max(y) for y in f0 if y.size])
    kappa = 1.0
    for f1 in draws:
        worst = max([_worst_change(a, b) for a, b in zip(f1, f0, strict=True) if a.size],
                    default=0.0)
        kappa = max(kappa, worst / (SCE_EPS * scale))
    return kappa


def _sce_per_array(case: OpCaseInput, which: str) -> list[float] | None:
    r"""The statistical condition estimate of each output array of the VJP (or the JVP's
    one) relative to *its own* scale, :math:`\max_r \|\Delta f_a\|_\infty / (\epsilon
    \max|f_a|)` (1 for an array that is 0): what a comparison relative to the array's own
    magnitude needs (:func:`relative_floor`). ``None`` when the reference cannot run."""
    got = _sce_draws(case, which)
    if got is None:
        return None
    f0, draws = got
    out = []
    for k, y in enumerate(f0):
        scale = _finite_max(y) or 1.0
        kappa = 1.0
        for f1 in draws:
            if y.size:
                kappa = max(kappa, _worst_change(f1[k], y) / (SCE_EPS * scale))
        out.append(kappa)
    return out


#: the dtypes whose derivative rows are judged relative to each array's own magnitude
#: (:func:`relative_floor`)
RELATIVE_DTYPES = ("bfloat16", "float16")


def amplified(case: OpCaseInput, name: str) -> bool:
    """The op's a-priori amplification bears on the cotangent of argument ``name``
    (:attr:`~nlaverify.ops.opspec.OpSpec.amplified`)."""
    spec = case.spec
    return spec.amplification is not None and (spec.amplified is None
                                               or name in spec.amplified)


def relative_floor(dtype: str, case: OpCaseInput, name: str | None = None) -> bool:
    r"""Judge the derivative rows of ``case`` relative to each array's own magnitude
    (floor 0 in :func:`~nlaverify.check.report.compare_arrays`, the condition estimated
    per array by :func:`_sce_per_array`) instead of :math:`\max(1, \max|e|)`: below float32
    the unit floor made a bound of :math:`32 \cdot 2 \cdot 2^{-8} = 0.25` absolute, so a
    cross-entropy gradient of size 0.25 off by a factor 2 passed. Drawn and explicit cases
    only: the hostile cases keep the conditions derived for them, which are normwise. Not
    for an op with an a-priori amplification (the normalizations, kernel attention): their
    cotangents cancel terms much larger than themselves (LayerNorm's projection
    :math:`I - \hat x\hat x^\top/d`), whose bfloat16 rounding an input perturbation does
    not see, and a bound relative to the small result false-alarmed on 17 of 20 seeds of
    torch's own LayerNorm; they keep the unit floor. ``name``: one cotangent (a
    normalization's :math:`\bar\gamma`, which does not cancel, is judged relatively);
    ``None``: the op as a whole (the JVP)."""
    if dtype not in RELATIVE_DTYPES or case.origin.startswith("hostile"):
        return False
    if name is None:
        return case.spec.amplification is None
    return not amplified(case, name)


def _size(case: OpCaseInput) -> int:
    r"""The size :math:`k` of the tolerance model at the case: the largest array of one
    sequence. The leading batch axes of the per-token arguments do not count (the batching
    family proves every op acts on each sequence alone, so no entry's rounding involves
    another sequence), except for an op that reduces the batch to a scalar (a loss), whose
    sum runs over every position."""
    nb = len(case.batch)
    if not nb or np.ndim(case.cotangent) == 0:
        return max([int(np.size(a)) for a in case.args] + [int(np.size(case.cotangent)), 1])
    sizes = [int(np.prod(np.shape(x)[nb:] if a.per_sequence else np.shape(x)))
             for a, x in zip(case.spec.args, case.args, strict=True)]
    return max([*sizes, int(np.prod(np.shape(case.cotangent)[nb:])), 1])


# -- the bound of a row ------------------------------------------------------------------


#: ops whose rows take the running error bound (:mod:`nlaverify.precision.running`) instead of
#: the generic stage model: recurrences, :math:`n` stages deep forward and backward, whose
#: rounding errors decay by the products of their own coefficients
RUNNING_ERROR_OPS = frozenset({"selective_scan", "mamba_scan"})


def running_bounds(s: _Settings, case: OpCaseInput, which: str) -> list[np.ndarray] | None:
    r"""The first-order running error bound (:mod:`nlaverify.precision.running`) of each
    result array of the op's forward, VJP or JVP at the case, for a kernel in ``s.dtype``
    accumulating in ``s.accumulation``: the op's own evaluation on the kernel's inputs
    (exact in the dtype), the cotangent and tangents likewise. ``None`` for an op outside
    :data:`RUNNING_ERROR_OPS` or a hostile case (its derived condition stands), except the
    hostile cases of the scans of
    :data:`~nlaverify.cases.hostile_ssm.HOSTILE_RUNNING_OPS` (Mamba-2's trained-like
    decays: the running bound is the condition derived for them)."""
    from nlaverify.cases.hostile_ssm import HOSTILE_RUNNING_OPS

    hostile = case.origin.startswith("hostile")
    if case.spec.name not in (HOSTILE_RUNNING_OPS if hostile else RUNNING_ERROR_OPS):
        return None
    from nlaverify.precision.running import as_arrays, running_namespace
    from nlaverify.tolerance import unit_roundoff

    u = unit_roundoff(s.dtype)
    xp = running_namespace(u, unit_roundoff(s.accumulation) if s.accumulation else u)
    args = _ns_args(xp, case)
    spec, st = case.spec, case.static
    with np.errstate(all="ignore"):
        if which == "forward":
            return as_arrays([spec.forward(xp, *args, **st)])
        if which == "vjp":
            return as_arrays(list(spec.vjp(xp, xp.asarray(case.cotangent), *args, **st)))
        if spec.jvp is None:
            return None
        return as_arrays([spec.jvp(xp, tuple(xp.asarray(t) for t in case.tangents), *args,
                                   **st)])


def running_tol(bound: np.ndarray, expected: np.ndarray, floor: float, dtype: str
                ) -> Tolerance:
    r"""The row's tolerance from the entrywise bound :math:`e_i`: the comparison is
    :math:`\max_i|a_i - r_i| \le \mathrm{rtol}\cdot\max(\text{floor}, \max_i|r_i|)`, so
    :math:`\mathrm{rtol} = \max_i e_i / \max(\text{floor}, \max_i|r_i|)`: the normwise
    check of the entrywise bound, nothing added."""
    e = np.asarray(expected, dtype=np.float64)
    scale = max(floor, float(np.max(np.abs(e))) if e.size else 0.0) or 1.0
    worst = float(np.max(bound)) if np.size(bound) else 0.0
    return Tolerance(worst / scale, f"running error bound in {dtype}: max_i e_i={worst:.3g} "
                     f"over scale {scale:.3g} (first order, /(1 - m u); sums in the "
                     "accumulation precision)")


def _tol(s: _Settings, case: OpCaseInput, kappa: float, depth: int) -> Tolerance:
    return tolerance(s.dtype, size=_size(case), condition=max(1.0, kappa), depth=depth,
                     accumulation=s.accumulation, products=s.products)


def _derived_condition(case: OpCaseInput) -> float:
    r"""The op's own amplification at the case (``OpSpec.amplification``, e.g. LayerNorm's
    cancellation :math:`\max|x|/\sigma` of the mean subtraction; 1 without one): the
    statistical estimate measures the input magnitudes' part. Hostile cases keep their
    derived condition estimates whole."""
    real = [case.args[k] for k in real_indices(case.spec)]
    if case.origin.startswith("hostile"):
        return max(1.0, float(case.condition(real))) if case.condition is not None else 1.0
    amplification = case.spec.amplification
    return 1.0 if amplification is None else max(1.0, float(amplification(real)))


def _case_condition(case: OpCaseInput, which: str) -> float:
    """The condition of ``which`` at the case: the statistical estimate, or for a hostile
    case of the catalogue the condition derived for its inputs; a user's op's hostile case
    (whose condition is only a floor from its arguments' kinds) takes the larger."""
    if case.condition is not None and case.origin.startswith("hostile"):
        real = [case.args[k] for k in real_indices(case.spec)]
        derived = max(1.0, float(case.condition(real)))
        return derived if registered(case.spec) else max(derived, _sce(case, which))
    return _sce(case, which)
