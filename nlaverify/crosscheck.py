"""Numeric cross-checks of every op's VJP and JVP: NumPy against JAX autodiff, the mpmath
reference, float32, a high-precision finite difference, and CuPy.

The subject is always the hand-derived VJP (reverse mode) or JVP (forward mode), run
through the same function on each namespace; the references are independent
(``jax.vjp`` / ``jax.jvp`` of the forward) or far more precise (mpmath at ``digits``
digits). Every bound comes from :mod:`nlaverify.tolerance`, the same for both modes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nlaverify.backends import BackendUnavailable, dtype_name, get_namespace
from nlaverify.ops.registry import OPS, OpSpec
from nlaverify.tolerance import (
    Tolerance,
    finite_difference_tolerance,
    magnitude_condition,
    tolerance,
)

if TYPE_CHECKING:  # hypothesis (0.2 s) is imported where a case is drawn, not by every command
    from nlaverify.strategies import OpCase


@dataclass(frozen=True)
class CheckRow:
    """One comparison: which op, which check, the error and the bound."""

    op: str
    check: str
    error: float
    rtol: float
    ok: bool
    reason: str
    skipped: str | None = None


@dataclass
class Report:
    """All rows of a cross-check run."""

    rows: list[CheckRow] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every check that ran passed, and at least one ran (an empty run proves nothing)."""
        ran = [r for r in self.rows if r.skipped is None]
        return bool(ran) and all(r.ok for r in ran)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "rows": [asdict(r) for r in self.rows]}


def case_condition(case: OpCase) -> float:
    """The condition estimate of a case: the op's own, else input magnitudes."""
    real = [case.args[k] for k in case.real_indices()]
    if case.spec.condition is not None:
        return max(1.0, case.spec.condition(real))
    return magnitude_condition(*real)


def case_size(case: OpCase) -> int:
    """The longest accumulation bound: the largest number of entries of any array."""
    return max([int(np.size(a)) for a in case.args] + [int(case.cotangent.size), 1])


def _convert(xp, case: OpCase, dtype: Any) -> tuple[list[Any], Any]:
    args = []
    for a, x in zip(case.spec.args, case.args, strict=True):
        if a.kind == "tokens":
            args.append(x if xp.object_arrays else xp.asarray(x))
        elif a.kind in ("mask", "fixed"):
            args.append(xp.asarray(x) if xp.object_arrays else xp.asarray(x, dtype=dtype))
        else:
            args.append(xp.asarray(x) if xp.object_arrays else xp.asarray(x, dtype=dtype))
    G = xp.asarray(case.cotangent) if xp.object_arrays else xp.asarray(case.cotangent, dtype=dtype)
    return args, G


def run_vjp(case: OpCase, backend: str, dtype: str = "float64", digits: int | None = None):
    """``(output, cotangents)`` of the hand-derived VJP on ``backend``."""
    xp = get_namespace(backend, digits=digits)
    dt = None if xp.object_arrays else getattr(xp, dtype)
    args, G = _convert(xp, case, dt)
    out = case.spec.forward(xp, *args, **case.static)
    return out, case.spec.vjp(xp, G, *args, **case.static)


def jax_autodiff_vjp(case: OpCase):
    """``(output, cotangents)`` from ``jax.vjp`` of the forward function (float64)."""
    xp = get_namespace("jax")
    args, G = _convert(xp, case, xp.float64)
    return case.spec.autodiff_vjp(args, G, **case.static)


def _compare_all(name: str, check: str, actual: Sequence[Any], expected: Sequence[Any],
                 tol: Tolerance, labels: Sequence[str] | None = None) -> CheckRow:
    """One row: every array of ``actual`` against ``expected`` (default labels: the output,
    then one cotangent per real argument), the worst normwise error."""
    actual, expected = list(actual), list(expected)
    if len(actual) != len(expected):
        return CheckRow(name, check, math.inf, tol.rtol, False, f"{len(actual) - 1} cotangents, "
                        f"expected {len(expected) - 1} (one per real argument)")
    worst = 0.0
    ok = True
    for k, (a, e) in enumerate(zip(actual, expected, strict=True)):
        sa, se = tuple(getattr(a, "shape", ())), tuple(getattr(e, "shape", ()))
        if sa != se:
            what = labels[k] if labels else "output" if k == 0 else f"cotangent {k - 1}"
            return CheckRow(name, check, math.inf, tol.rtol, False,
                            f"{what}: expected shape {se}, got {sa}")
        c = tol.compare(a, e)
        worst = max(worst, c.normwise)
        ok = ok and c.ok
    return CheckRow(name, check, worst, tol.rtol, ok, tol.reason)


def finite_difference_row(case: OpCase, digits: int) -> CheckRow:
    r"""Directional check in mpmath:
    :math:`\langle G, (f(x+hv) - f(x-hv))/2h\rangle` against :math:`\sum_k\langle \bar x_k,
    v_k\rangle` from the VJP, with a seeded direction :math:`v` and
    :math:`h = 10^{-\lfloor \text{digits}/3 \rfloor}`."""
    xp = get_namespace("mpmath", digits=digits)
    args, G = _convert(xp, case, None)
    rng = np.random.default_rng(len(case.args) * 7919 + case_size(case))
    real = case.real_indices()
    dirs = {k: xp.asarray(rng.standard_normal(np.shape(case.args[k]))) for k in real}
    h = xp.ctx.mpf(10) ** (-(digits // 3))

    def f_at(sign: int) -> Any:
        moved = list(args)
        for k in real:
            moved[k] = args[k] + dirs[k] * (sign * h)
        return np.asarray(case.spec.forward(xp, *moved, **case.static), dtype=object)

    fd = np.sum(np.asarray(G, dtype=object) * (f_at(1) - f_at(-1))) / (2 * h)
    cot = case.spec.vjp(xp, G, *args, **case.static)
    exact = sum((np.sum(np.asarray(c, dtype=object) * dirs[k]) for k, c in zip(real, cot,
                                                                              strict=True)), 0)
    tol = finite_difference_tolerance(digits, float(h), condition=case_condition(case),
                                      size=case_size(case))
    err = abs(float(fd - exact)) / max(1.0, abs(float(exact)))
    return CheckRow(case.spec.name, f"finite-difference (mpmath {digits} digits)", err, tol.rtol,
                    err <= tol.rtol, tol.reason)


#: backends that run the hand-derived VJP on a device (or its stand-in) against mpmath
DEVICE_BACKENDS = ("cupy", "strict")


def _failed_row(name: str, check: str, exc: Exception) -> CheckRow:
    """A check that raised: it fails on its own row, with the reason, and the run goes on."""
    return CheckRow(name, check, math.inf, math.nan, False, f"{type(exc).__name__}: {exc}")


def case_tolerances(case: OpCase) -> tuple[Tolerance, Tolerance]:
    """The float64 and float32 bounds of a case, the same for its VJP and JVP checks: the
    forward then one derivative stage (depth 2), at the case's size and condition."""
    kappa, k = case_condition(case), case_size(case)
    return (tolerance("float64", size=k, condition=kappa, depth=2),
            tolerance("float32", size=k, condition=kappa, depth=2))


def _judge(name: str, check: str, subject: Any, reference: Any, tol: Tolerance,
           dtype: str | None = None, labels: Sequence[str] | None = None) -> CheckRow:
    """Run ``subject()`` and ``reference()`` (lists of arrays) and compare them on one row.

    A subject that raises fails its row with the exception as its reason (an unavailable
    backend skips it); a subject whose arrays are not in ``dtype`` fails too: a silent
    promotion would look *more* accurate.
    """
    try:
        actual = subject()
        r = _compare_all(name, check, actual, reference(), tol, labels)
        promoted = [dtype_name(x.dtype) for x in actual if dtype is not None
                    and dtype_name(x.dtype) != dtype]
        if promoted:
            r = dataclasses.replace(r, ok=False, reason=f"{dtype} inputs gave dtypes "
                                                        f"{promoted}")
    except BackendUnavailable as exc:
        r = CheckRow(name, check, math.nan, math.nan, True, "", skipped=str(exc))
    except Exception as exc:  # the row reports it, the run goes on
        r = _failed_row(name, check, exc)
    return r


def check_case(case: OpCase, backends: Sequence[str] = ("numpy", "jax", "mpmath"),
               digits: int = 50) -> list[CheckRow]:
    """All VJP checks of one case that the listed backends allow.

    Each check is judged on its own row: one that raises (a VJP returning the wrong
    number or shape of cotangents, a kernel failing on a device backend) fails with the
    exception as its reason, and the other checks still run. The JVP rows of the case
    are :func:`check_case_jvp`.
    """
    name = case.spec.name
    rows: list[CheckRow] = []
    tol64, tol32 = case_tolerances(case)
    cache: dict[str, Any] = {}

    def result(key: str, make: Any) -> Any:
        if key not in cache:
            out, cot = make()
            cache[key] = [out, *cot]
        return cache[key]

    def numpy64() -> list[Any]:
        return result("numpy64", lambda: run_vjp(case, "numpy", "float64"))

    def mp() -> list[Any]:
        return result("mpmath", lambda: run_vjp(case, "mpmath", digits=digits))

    def row(check: str, subject: Any, reference: Any, tol: Tolerance,
            dtype: str | None = None) -> None:
        rows.append(_judge(name, check, subject, reference, tol, dtype))

    if "jax" in backends:
        row("numpy vs jax.vjp (float64)", numpy64, lambda: [*_flat(jax_autodiff_vjp(case))],
            tol64)
    if "mpmath" in backends:
        row(f"numpy float64 vs mpmath {digits}", numpy64, mp, tol64)
        row(f"numpy float32 vs mpmath {digits}",
            lambda: _flat(run_vjp(case, "numpy", "float32")), mp, tol32, "float32")
        try:
            rows.append(finite_difference_row(case, digits))
        except Exception as exc:  # the row reports it
            rows.append(_failed_row(name, f"finite-difference (mpmath {digits} digits)", exc))
    for dev in DEVICE_BACKENDS:
        if dev not in backends:
            continue
        for dt, tol in (("float64", tol64), ("float32", tol32)):
            row(f"{dev} {dt} vs mpmath {digits}",
                lambda dev=dev, dt=dt: _flat(run_vjp(case, dev, dt)), mp, tol, dt)
    return rows


# -- forward mode ------------------------------------------------------------------------


def case_tangents(case: OpCase, seed: int = 0) -> list[np.ndarray]:
    """Seeded standard normal tangents, one per real argument of the case (the scale of
    its inputs), drawn from ``seed`` and the case's cotangent: reproducible, and varied
    across hypothesis-drawn cases."""
    entropy = np.frombuffer(np.ascontiguousarray(case.cotangent, dtype=np.float64).tobytes(),
                            dtype=np.uint32)
    rng = np.random.default_rng([seed, *entropy.tolist()])
    return [rng.standard_normal(np.shape(case.args[k])) for k in case.real_indices()]


def run_jvp(case: OpCase, backend: str, tangents: Sequence[Any | None],
            dtype: str = "float64", digits: int | None = None) -> Any:
    """The output tangent of the hand-derived JVP on ``backend`` along ``tangents`` (one
    per real argument; ``None`` is a zero tangent and is passed on as ``None``)."""
    jvp = case.spec.jvp
    if jvp is None:
        raise NotImplementedError(f"op {case.spec.name!r} has no JVP "
                                  f"({case.spec.forward.__name__}_jvp)")
    xp = get_namespace(backend, digits=digits)
    dt = None if xp.object_arrays else getattr(xp, dtype)
    args, _ = _convert(xp, case, dt)
    T = tuple(None if t is None else xp.asarray(t) if xp.object_arrays else
              xp.asarray(t, dtype=dt) for t in tangents)
    return jvp(xp, T, *args, **case.static)


def jax_autodiff_jvp(case: OpCase, tangents: Sequence[Any | None]) -> Any:
    """The output tangent by ``jax.jvp`` of the forward function (float64); a ``None``
    tangent is a zero array."""
    xp = get_namespace("jax")
    args, _ = _convert(xp, case, xp.float64)
    T = [xp.zeros(np.shape(case.args[k]), dtype=xp.float64) if t is None
         else xp.asarray(t, dtype=xp.float64) for k, t in zip(case.real_indices(), tangents,
                                                               strict=True)]
    return case.spec.autodiff_jvp(args, T, **case.static)


def check_case_jvp(case: OpCase, backends: Sequence[str] = ("numpy", "jax", "mpmath"),
                   digits: int = 50, tangents: Sequence[Any | None] | None = None
                   ) -> list[CheckRow]:
    """The forward-mode rows of one case, next to :func:`check_case`'s: the NumPy float64
    JVP along ``tangents`` (default :func:`case_tangents`) against ``jax.jvp`` of the
    forward and against the same JVP function in mpmath at ``digits`` digits, with the
    bounds of the VJP rows (:func:`case_tolerances`)."""
    name = case.spec.name
    tol64, _ = case_tolerances(case)
    T = case_tangents(case) if tangents is None else list(tangents)
    cache: dict[str, Any] = {}

    def numpy64() -> list[Any]:
        if "numpy" not in cache:
            cache["numpy"] = [run_jvp(case, "numpy", T)]
        return cache["numpy"]

    rows = []
    if "jax" in backends:
        rows.append(_judge(name, "numpy JVP vs jax.jvp (float64)", numpy64,
                           lambda: [jax_autodiff_jvp(case, T)], tol64, labels=["tangent"]))
    if "mpmath" in backends:
        rows.append(_judge(name, f"numpy JVP vs mpmath {digits} JVP", numpy64,
                           lambda: [run_jvp(case, "mpmath", T, digits=digits)], tol64,
                           labels=["tangent"]))
    return rows


def _flat(out_cot: tuple[Any, Sequence[Any]]) -> list[Any]:
    out, cot = out_cot
    return [out, *cot]


def default_case(spec: OpSpec, seed: int) -> OpCase:
    """The case ``verify`` runs: the largest sizes of the op's ranges, seeded."""
    sizes = {k: hi for k, (_, hi) in spec.size_ranges.items()}
    from nlaverify.strategies import make_case

    return make_case(spec, spec.fix_sizes(sizes) if spec.fix_sizes else sizes, seed)


def run_crosscheck(backends: Sequence[str] = ("numpy", "jax", "mpmath"), seed: int = 0,
                   digits: int = 50, ops: Sequence[str] | None = None,
                   progress: Callable[[int, int, str], None] | None = None) -> Report:
    """Cross-check every op (or ``ops``) on one seeded case each, its VJP
    (:func:`check_case`) and its JVP (:func:`check_case_jvp`); ``progress(k, total, op)``
    is called before each op."""
    known = {"numpy", "jax", "mpmath", *DEVICE_BACKENDS}
    for b in backends:
        if b not in known:
            from nlaverify.errors import UnknownNameError

            raise UnknownNameError(f"verify: unknown backend {b!r}: expected some of "
                                   f"{', '.join(sorted(known))}")
    if not set(backends) - {"numpy"}:
        from nlaverify.errors import ArgumentError

        raise ArgumentError(f"verify: --backends {','.join(backends) or '(none)'} compares "
                            "nothing: the NumPy VJP is always the subject; add a reference "
                            "(jax, mpmath) or a device (cupy, strict)")
    report = Report()
    names = list(ops or [k for k, s in OPS.items() if s.differentiable])
    for k, name in enumerate(names, 1):
        if progress is not None:
            progress(k, len(names), name)
        try:
            case = default_case(OPS[name], seed)
        except Exception as exc:  # a forward that raises fails its op's row; the run goes on
            report.rows.append(_failed_row(name, "case construction (numpy forward)", exc))
            continue
        unique = tuple(dict.fromkeys(backends))
        report.rows += check_case(case, unique, digits) + check_case_jvp(case, unique, digits)
    return report


def format_summary(report: Report) -> str:
    """A fixed-width table and a closing line ``N passed, N failed, N skipped``."""
    lines = [f"{'op':<22} {'check':<36} {'error':>10} {'bound':>10}  result"]
    for r in report.rows:
        if r.skipped:
            lines.append(f"{r.op:<22} {r.check:<36} {'':>10} {'':>10}  SKIPPED ({r.skipped})")
        else:
            lines.append(f"{r.op:<22} {r.check:<36} {r.error:10.2e} {r.rtol:10.2e}  "
                         f"{'ok' if r.ok else 'FAIL'}")
    passed = sum(r.ok and not r.skipped for r in report.rows)
    failed = sum(not r.ok and not r.skipped for r in report.rows)
    skipped = sum(bool(r.skipped) for r in report.rows)
    lines.append(f"cross-check: {passed} passed, {failed} failed, {skipped} skipped")
    return "\n".join(lines)
