"""The first stage of :func:`nlaverify.check.check_op`: its arguments checked and turned into
an :class:`OpPlan` (the op's spec with the static values, the size ranges and batch axes to
draw, the settings of the user's side, the report's notes and the reproducer's options).
Every bad argument is a :class:`~nlaverify.check.report.CheckError` naming it, raised
before any case runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from nlaverify.cases.inputs import real_indices, registered
from nlaverify.check.adapters import DTYPES, detect_framework, framework_dtype, require_framework
from nlaverify.check.op_reference import REFERENCE_DIGITS, REFERENCES
from nlaverify.check.op_subject import _Settings
from nlaverify.check.report import CheckError
from nlaverify.ops.registry import OpSpec, get_op, op_signature

__all__ = ["DEFAULT_MAX_SIZE", "WIDENED", "OpPlan", "plan_op_check"]


def _spec_of(op: str | OpSpec) -> OpSpec:
    if isinstance(op, OpSpec):
        return op
    if not isinstance(op, str):
        raise CheckError(f"argument 'op': expected an op name or an OpSpec, got "
                         f"{type(op).__name__}")
    try:
        return get_op(op)
    except KeyError as exc:
        raise CheckError(f"argument 'op': {exc}") from None


#: dimensions whose default range check_op widens to realistic sizes (up to
#: :data:`DEFAULT_MAX_SIZE`): well-conditioned normalizations, and bugs that scale with
#: the size (a missing 1/d, 1/sqrt(d_k)) show clearly even in bfloat16
WIDENED = ("n", "n_k", "d", "d_k", "d_v", "d_in", "d_out", "hd", "d_h", "V", "m")
DEFAULT_MAX_SIZE = 16


def _size_ranges(spec: OpSpec, shapes: Mapping[str, Any] | None) -> dict[str, tuple[int, int]]:
    ranges = {k: (lo, max(hi, DEFAULT_MAX_SIZE) if k in WIDENED and registered(spec)
                  else hi) for k, (lo, hi) in spec.size_ranges.items()}
    for k, v in (shapes or {}).items():
        if k not in ranges:
            raise CheckError(f"argument 'shapes': {op_signature(spec)} has no dimension "
                             f"{k!r}; expected some of {', '.join(ranges)}")
        if isinstance(v, int | np.integer) and not isinstance(v, bool) and v >= 1:
            ranges[k] = (int(v), int(v))
        elif (isinstance(v, tuple | list) and len(v) == 2
              and all(isinstance(t, int | np.integer) for t in v) and 1 <= v[0] <= v[1]):
            ranges[k] = (int(v[0]), int(v[1]))
        else:
            raise CheckError(f"argument 'shapes': dimension {k!r}: expected a size >= 1 or "
                             f"a range (lo, hi) with 1 <= lo <= hi, got {v!r}")
    return ranges


def _check_consistent(spec: OpSpec, ranges: Mapping[str, tuple[int, int]],
                      shapes: Mapping[str, Any] | None) -> None:
    """A ``shapes=`` range the op's own constraints (``fix_sizes``: heads dividing the
    width, no more queries than keys) move every drawn size out of is refused, instead of
    being overridden without a word."""
    if not shapes or spec.fix_sizes is None:
        return
    for corner in ({k: lo for k, (lo, _) in ranges.items()},
                   {k: hi for k, (_, hi) in ranges.items()}):
        fixed = spec.fix_sizes(dict(corner))
        for k in shapes:
            lo, hi = ranges[k]
            if not lo <= fixed[k] <= hi:
                raise CheckError(
                    f"argument 'shapes': {op_signature(spec)} needs {k} = {fixed[k]} where the "
                    f"other sizes are {', '.join(f'{d}={v}' for d, v in corner.items() if d != k)}"
                    f", outside the range ({lo}, {hi}) given for {k}: the op's sizes must be "
                    f"consistent (heads dividing the width, no more queries than keys)")


def _batch_choices(batch: bool | Sequence[int]) -> list[tuple[int, ...]] | None:
    if batch is True:
        return None
    if batch is False:
        return [()]
    try:
        b = tuple(int(v) for v in batch)
    except (TypeError, ValueError):
        raise CheckError(f"argument 'batch': expected True, False or a tuple of leading "
                         f"sizes, got {batch!r}") from None
    if any(v < 1 for v in b):
        raise CheckError(f"argument 'batch': expected sizes >= 1, got {b}")
    return [b]


#: statics that must divide a dimension of the op (a group size the width, a number of heads
#: or groups the channels or experts): the drawn sizes are rounded up to a multiple of the
#: user's value, so ``static={"group_size": 4}`` draws widths 4, 8, ... (were: the op's own
#: sizes, which it then refused)
DIVIDES = {"group_size": "d", "n_heads": "hd", "n_group": "E"}


def _sizes_for_statics(spec: OpSpec, static: Mapping[str, Any]) -> OpSpec:
    """``spec`` whose ``fix_sizes`` also makes every dimension of :data:`DIVIDES` a multiple
    of its static (after the op's own constraints)."""
    dims = {d for a in spec.args for d in a.dims if isinstance(d, str)}
    pairs = [(int(static[k]), dim) for k, dim in DIVIDES.items() if k in static and dim in dims
             and isinstance(static[k], int | np.integer) and not isinstance(static[k], bool)
             and static[k] >= 1]
    if not pairs:
        return spec
    base = spec.fix_sizes

    def fix(sizes: dict[str, int]) -> dict[str, int]:
        out = dict(base(sizes) if base else sizes)
        for m, dim in pairs:
            out[dim] = -(-out[dim] // m) * m
        return out

    return replace(spec, fix_sizes=fix)


def _check_statics(spec: OpSpec, given: dict[str, Any],
                   ranges: Mapping[str, tuple[int, int]]) -> None:
    """The reference op runs with the statics ``given`` (on a float64 case of the smallest
    sizes the check draws: ``shapes=`` applied) and gives finite values: a bad static is
    named now, not by a failure blamed on the kernel (``base=0`` made the reference NaN)."""
    from nlaverify.backends import get_namespace
    from nlaverify.cases.drawn import make_case

    sizes = {k: lo for k, (lo, _) in ranges.items()}
    if spec.fix_sizes:
        sizes = spec.fix_sizes(sizes)
    try:
        with np.errstate(all="ignore"):
            case = make_case(spec, sizes, 0)
            out = np.asarray(spec.forward(get_namespace("numpy"), *case.args, **spec.static),
                             dtype=np.float64)
    except Exception as exc:
        raise CheckError(f"argument 'static': {op_signature(spec)} rejects {given!r}: "
                         f"{type(exc).__name__}: {exc}") from None
    if not np.all(np.isfinite(out)):
        raise CheckError(f"argument 'static': with {given!r} the reference op "
                         f"{op_signature(spec)} gives non-finite values on ordinary inputs")


def _statics_by_keyword(what: str, f: Callable[..., Any], n_args: int,
                        static: Mapping[str, Any], spec: OpSpec) -> dict[str, Any]:
    """The static values ``f``'s signature names as keyword parameters (``eps``, ``base``):
    ``check_op`` passes them by keyword. A signature that cannot take the call check_op
    makes (``n_args`` positional arrays and those keywords) is a CheckError restating the
    op's signature (was: a TypeError row for every case)."""
    import inspect

    try:
        sig = inspect.signature(f)
    except (TypeError, ValueError):  # a builtin or extension function: call it as it is
        return {}
    from nlaverify.ops.conventions import CONVENTIONS

    params = sig.parameters
    conventions = set(CONVENTIONS.get(spec.name, {}))
    # numeric statics only (eps, base, n_rep, ignore_index): a convention's value ('half',
    # 'linear') names nlaverify's option, not what a kernel's parameter of that name takes
    kw = {k: v for k, v in static.items() if k in params and k not in conventions
          and isinstance(v, int | float) and not isinstance(v, bool) and params[k].kind in (
              inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    try:
        sig.bind(*range(n_args), **kw)
    except TypeError as exc:
        lead = {"fn": "fn(*args)", "vjp": "vjp(G, *args)", "jvp": "jvp(tangents, *args)"}[what]
        name = getattr(f, "__name__", type(f).__name__)
        raise CheckError(f"argument {what!r}: {name}{sig} cannot be called as check_op calls "
                         f"it, {lead} with {op_signature(spec)} ({exc}); statics go in as "
                         f"keyword parameters named like them (or baked in)") from None
    return kw


def _reference_note(spec: OpSpec, where: str, dtype: str, framework: str) -> str:
    """What the reference is and how far it is proved: the catalogue's ops by ``nlaverify
    derive``; a user op's derivatives only if :func:`~nlaverify.check.prove` ran on this
    spec (or from JAX autodiff of its forward, not proved)."""
    from nlaverify.check.op_reference import reference_sources
    from nlaverify.check.proof import proved_parts

    tail = f"run in {where} on your inputs rounded to {dtype}; framework {framework}"
    if registered(spec):
        return f"reference: {op_signature(spec)}, proved (nlaverify derive), {tail}"
    sources, proved = reference_sources(spec), proved_parts(spec)
    parts = []
    for kind in ("vjp", "jvp"):
        source = sources[kind]
        if source == "given":
            parts.append(f"its {kind.upper()} yours, " + (
                "proved exactly (prove)" if kind in proved else
                "NOT proved (run nlaverify.check.prove on this spec)"))
        elif source == "autodiff":
            parts.append(f"its {kind.upper()} by JAX autodiff of your forward in float64 "
                         "(not proved)")
        elif source == "proved":
            parts.append(f"its {kind.upper()} proved (nlaverify derive)")
    return (f"reference: your op {op_signature(spec)} (the forward is its definition; "
            + "; ".join(parts or ["not differentiable"]) + f"), {tail}")


@dataclass(frozen=True)
class OpPlan:
    """What :func:`~nlaverify.check.check_op` runs: ``spec`` (with the static values),
    ``settings`` (the user's side), the sizes and batch axes to draw, the notes of the
    report, and ``op_text``/``options``, the reproducer's spelling of the call."""

    spec: OpSpec
    settings: _Settings
    ranges: dict[str, tuple[int, int]]
    choices: list[tuple[int, ...]] | None
    notes: list[str]
    op_text: str
    options: str


def plan_op_check(fn: Callable[..., Any], op: str | OpSpec, *, vjp: Callable[..., Any] | None,
                  jvp: Callable[..., Any] | None, dtype: str, framework: str | None,
                  static: Mapping[str, Any] | None,
                  shapes: Mapping[str, int | tuple[int, int]] | None,
                  batch: bool | Sequence[int], examples: int, hostile: bool | int | str,
                  check_jvp: bool,
                  accumulation: str | None, products: str | None, reference: str,
                  name: str | None, layouts: bool = True) -> OpPlan:
    """Check the arguments of ``check_op`` (same names, same meaning) and plan the run."""
    if not callable(fn):
        raise CheckError(f"argument 'fn': expected a callable, got {type(fn).__name__}")
    for what, f in (("vjp", vjp), ("jvp", jvp)):
        if f is not None and not callable(f):
            raise CheckError(f"argument {what!r}: expected a callable, got {type(f).__name__}")
    spec = _spec_of(op)
    if dtype not in DTYPES:
        raise CheckError(f"argument 'dtype': expected one of {', '.join(DTYPES)}, got "
                         f"{dtype!r}")
    fw = framework or detect_framework(fn)
    require_framework(fw)
    framework_dtype(fw, dtype)  # e.g. CuPy has no bfloat16
    if static:
        unknown = set(static) - set(spec.static)
        if unknown:
            raise CheckError(f"argument 'static': {op_signature(spec)} has no static "
                             f"{', '.join(sorted(unknown))}")
    st = {**spec.static, **(static or {})}
    ranges = _size_ranges(spec, shapes)
    if st != dict(spec.static):
        spec = _sizes_for_statics(replace(spec, static=st), st)
        _check_statics(spec, dict(static or {}), ranges)
    if not isinstance(examples, int) or examples < 0:
        raise CheckError(f"argument 'examples': expected an int >= 0, got {examples!r}")
    if not (hostile in (True, False, None, "extreme") or (
            isinstance(hostile, int) and not isinstance(hostile, bool) and hostile >= 0)):
        raise CheckError(f"argument 'hostile': expected True, False, 'extreme' or an int >= 0 "
                         f"(the number of hostile seeds), got {hostile!r}")
    _check_consistent(spec, ranges, shapes)
    choices = _batch_choices(batch)
    acc = accumulation if accumulation is not None else (
        "float32" if dtype in ("bfloat16", "float16") else None)
    subject = name or getattr(fn, "__name__", None) or type(fn).__name__
    if reference not in REFERENCES:
        raise CheckError(f"argument 'reference': expected one of {', '.join(REFERENCES)}, "
                         f"got {reference!r}")
    if reference == "float64" and dtype == "float64":
        raise CheckError("argument 'reference': a float64 reference cannot judge a float64 "
                         "subject to float64's bound; use reference='mpmath'")
    settings = _Settings(fn, vjp, jvp, fw, dtype, acc, products, subject, check_jvp,
                         real_indices(spec), reference, bool(layouts))
    n = len(spec.args)
    for what, f, extra in (("fn", fn, 0), ("vjp", vjp, 1), ("jvp", jvp, 1)):
        if f is not None:
            kw = _statics_by_keyword(what, f, n + extra, st, spec)
            if kw:
                settings.static_kw[what] = kw
    where = (f"mpmath at {REFERENCE_DIGITS} digits" if reference == "mpmath"
             else "float64 NumPy")
    notes = [_reference_note(spec, where, dtype, fw)]
    if fw in ("torch", "jax", "cupy") and dtype == "float32" and products is None:
        notes.append("on a GPU, float32 matmuls may run in TF32 (torch allow_tf32, JAX "
                     "default precision): pass products='tfloat32' there")
    options = f", dtype={dtype!r}" + (f", framework={fw!r}" if framework else "") + (
        f", static={dict(static)!r}" if static else "") + (
        f", accumulation={accumulation!r}" if accumulation else "") + (
        f", products={products!r}" if products else "") + (
        f", reference={reference!r}" if reference != "mpmath" else "") + (
        "" if check_jvp else ", check_jvp=False")
    op_text = repr(op) if isinstance(op, str) else "spec"
    return OpPlan(spec, settings, ranges, choices, notes, op_text, options)
