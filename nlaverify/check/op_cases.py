"""The cases of :func:`nlaverify.check.check_op` and their reference: drawn, hostile and
explicit cases (values exact in the user's dtype), the proved op run on mpmath (or float64
NumPy) at a case, and the statistical condition estimate of the forward, VJP and JVP (see
:mod:`nlaverify.check.op` for the math and the seed sections).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from nlaverify.check.adapters import framework_dtype, to_float64
from nlaverify.check.report import CheckError
from nlaverify.ops.registry import OPS, OpSpec, get_op

#: digits of the mpmath reference (its error, 1e-30, is far below float64's 1.1e-16)
REFERENCE_DIGITS = 30
#: relative perturbation of the statistical condition estimate (in float64: the measured
#: differences keep ~10 significant digits)
SCE_EPS = 2.0**-26
SCE_DRAWS = 3


def exact_in(values: Any, dtype: str) -> np.ndarray:
    """``values`` rounded to ``dtype`` (float64, float32, bfloat16, float16) and back to
    float64: numbers exactly representable in ``dtype``, so the user's kernel and the
    reference see the same inputs. Values beyond the dtype's range are an error."""
    from nlaverify.strategies import exact_in as rounded

    x = np.asarray(values, dtype=np.float64)
    framework_dtype("numpy", dtype)  # an unknown dtype is named as the argument 'dtype'
    y = rounded(x, dtype)
    if np.any(np.isinf(y) & np.isfinite(x)):
        raise CheckError(f"an input value exceeds the range of {dtype} (max "
                         f"{float(np.nanmax(np.abs(x[np.isfinite(x)]))):.3g}): rescale "
                         "the inputs (shapes=) or check in a wider dtype")
    return y


def op_signature(op: str | OpSpec) -> str:
    """How ``check_op`` calls your function for ``op``: the positional arguments with their
    named dimensions and kinds, and the static values the reference uses.

    >>> op_signature("rmsnorm")
    'rmsnorm(x[..., n, d], gamma[d]); static: eps=1e-05'
    """
    spec = get_op(op) if isinstance(op, str) else op
    parts = []
    for a in spec.args:
        dims = ", ".join(str(d) for d in a.dims)
        lead = "..., " if "n" in a.dims else ""
        kind = "" if a.kind == "real" else f" ({a.kind})"
        parts.append(f"{a.name}[{lead}{dims}]{kind}")
    static = ", ".join(f"{k}={v!r}" for k, v in spec.static.items())
    return f"{spec.name}({', '.join(parts)})" + (f"; static: {static}" if static else "")


@dataclass
class OpCaseInput:
    """One case: the arguments (float64 values exact in the dtype; tokens int64), the
    cotangent, the tangents, the static values, where it came from, and the spec."""

    spec: OpSpec
    args: list[np.ndarray]
    cotangent: np.ndarray
    tangents: list[np.ndarray]
    static: dict[str, Any]
    origin: str
    condition: Callable[[list[Any]], float] | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    batch: tuple[int, ...] = ()


# -- cases -------------------------------------------------------------------------------


def _draw_values(spec: OpSpec, sizes: dict[str, int], batch: tuple[int, ...], seed: int,
                 dtype: str, static: Mapping[str, Any]) -> OpCaseInput:
    """The drawn case of ``nlaverify.strategies.make_case`` (the same cases as
    ``op_cases(op, batch=..., dtype=...)``), with tangents from a stream of their own."""
    from nlaverify.strategies import make_case

    case = make_case(replace(spec, static=dict(static)), sizes, seed, batch=batch, dtype=dtype)
    rng = np.random.default_rng([seed, 1])
    T = [exact_in(rng.standard_normal(np.shape(case.args[k])), dtype)
         for k in case.real_indices()]
    return OpCaseInput(spec, case.args, case.cotangent, T, dict(static), "drawn",
                       spec.condition, dict(sizes), tuple(batch))


#: decimal exponent ranges of the "realistic" hostile norm rows per dtype: large
#: activations a model meets (x^2 stays in range), and tiny rows whose mean square is
#: below eps (where the position of eps shows)
_REALISTIC_NORM = {"float64": (2.0, 4.0), "float32": (2.0, 4.0), "bfloat16": (2.0, 4.0),
                   "float16": (1.0, 2.0)}


def realistic_norm_rows(rng: np.random.Generator, n: int, d: int, dtype: str) -> np.ndarray:
    r"""Rows for LayerNorm/RMSNorm that a model meets: large
    (:math:`10^{2}..10^{4}`, :math:`10^{1}..10^{2}` in float16, so :math:`x^2` stays in
    range), large with a common offset, tiny (:math:`10^{-3.5}..10^{-2.5}`: the mean
    square is comparable to :math:`\epsilon`, where a misplaced :math:`\epsilon` shows),
    constant, zero and standard normal rows, cycling in a drawn order."""
    lo, hi = _REALISTIC_NORM[dtype]
    kinds = ["large", "offset", "tiny", "constant", "zero", "moderate"]
    rng.shuffle(kinds)
    rows = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        if kind == "large":
            rows.append(10.0 ** rng.uniform(lo, hi) * rng.uniform(-1.0, 1.0, d))
        elif kind == "offset":
            rows.append(10.0 ** rng.uniform(lo, hi) * (1.0 + 0.1 * rng.standard_normal(d)))
        elif kind == "tiny":
            rows.append(10.0 ** rng.uniform(-3.5, -2.5) * rng.standard_normal(d))
        elif kind == "constant":
            rows.append(np.full(d, rng.choice([7.0, -2.5])))
        elif kind == "zero":
            rows.append(np.zeros(d))
        else:
            rows.append(rng.standard_normal(d))
    return exact_in(np.stack(rows), dtype)


def _hostile_cases(spec: OpSpec, dtype: str, count: int, static: Mapping[str, Any],
                   extreme: bool = False) -> list[OpCaseInput]:
    from nlaverify.backends import get_namespace
    from nlaverify.strategies import (
        HOSTILE_OPS,
        LOGIT_ROWS,
        _hostile_logit_array,
        make_hostile_case,
    )

    if spec.name not in HOSTILE_OPS or not _registered(spec):
        return []
    base = "float32" if dtype != "float64" else "float64"
    cases = []
    for seed in range(count):
        hc = make_hostile_case(spec.name, base, seed)
        if not extreme and spec.name in ("layernorm", "rmsnorm"):
            rows = realistic_norm_rows(np.random.default_rng(seed), 7, hc.sizes["d"], dtype)
            hc = replace(hc, args=[rows, *hc.args[1:]])
        elif not extreme and spec.name == "softmax":
            # a row with every entry masked: the reference's convention is a zero row, most
            # libraries' (torch, jax.nn) is nan: a convention, checked only when "extreme"
            rng = np.random.default_rng(seed)
            kinds = tuple(k for k in LOGIT_ROWS if k != "all_masked")
            Z = _hostile_logit_array(rng, np.shape(hc.args[0]), base, kinds)
            hc = replace(hc, args=[Z])
        args = [a if np.issubdtype(np.asarray(a).dtype, np.integer) else exact_in(a, dtype)
                for a in hc.args]
        out = spec.forward(get_namespace("numpy"), *args, **static)
        rng = np.random.default_rng(10_000 + seed)
        G = exact_in(hc.cotangent, dtype)
        if np.shape(G) != np.shape(out):
            G = exact_in(rng.standard_normal(np.shape(out)), dtype)
        T = [exact_in(rng.standard_normal(np.shape(args[k])), dtype)
             for k in hc.real_indices()]
        cases.append(OpCaseInput(spec, args, G, T, dict(static), f"hostile seed {seed}",
                                 hc.spec.condition, dict(hc.sizes)))
    return cases


# -- reference and condition ---------------------------------------------------------------


def _ns_args(xp: Any, case: OpCaseInput) -> list[Any]:
    out = []
    for a, x in zip(case.spec.args, case.args, strict=True):
        if a.kind == "tokens":
            out.append(x)
        else:
            out.append(xp.asarray(x) if xp.object_arrays else xp.asarray(x, dtype=xp.float64))
    return out


def _registered(spec: OpSpec) -> bool:
    """``spec`` is an op of the registry (possibly with other static values)."""
    known = OPS.get(spec.name)
    return known is not None and known.forward is spec.forward and known.args == spec.args


def _real_idx(spec: OpSpec) -> list[int]:
    return [k for k, a in enumerate(spec.args) if a.kind == "real"]


@dataclass
class _Reference:
    out: np.ndarray
    cotangents: list[np.ndarray]
    tangent: np.ndarray | None


#: the references ``check_op`` can run the proved op on
REFERENCES = ("mpmath", "float64")


def _reference(case: OpCaseInput, want_jvp: bool, reference: str = "mpmath") -> _Reference:
    r"""The proved op, its VJP and JVP at the case: in mpmath at :data:`REFERENCE_DIGITS`
    digits, or (``"float64"``) on NumPy in float64, whose error (:math:`\approx 2^{-53}
    \kappa`) is :math:`2^{-29}` below float32's unit roundoff: a reference for float32 and
    narrower subjects that costs a NumPy call instead of an mpmath loop per entry."""
    from nlaverify.backends import get_namespace
    from nlaverify.backends.host import to_float64 as f64

    xp = (get_namespace("mpmath", digits=REFERENCE_DIGITS) if reference == "mpmath"
          else get_namespace("numpy"))
    args = _ns_args(xp, case)
    spec, st = case.spec, case.static
    out = f64(spec.forward(xp, *args, **st))
    cot = [f64(c) for c in spec.vjp(xp, xp.asarray(case.cotangent), *args, **st)] \
        if spec.differentiable else []
    tan = None
    if want_jvp and spec.jvp is not None and spec.differentiable:
        tan = f64(spec.jvp(xp, tuple(xp.asarray(t) for t in case.tangents), *args, **st))
    return _Reference(out, cot, tan)


def _sce(case: OpCaseInput, which: str) -> float:
    """The statistical condition estimate of the forward, the VJP or the JVP at the case
    (see the module docstring), on the float64 NumPy reference."""
    from nlaverify.backends import get_namespace

    xp = get_namespace("numpy")
    spec, st = case.spec, case.static
    real = _real_idx(spec)
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
        return 1.0
    scale = max([1.0] + [float(np.max(np.abs(y[np.isfinite(y)]))) if np.isfinite(y).any()
                         else 0.0 for y in f0 if y.size])
    rng = np.random.default_rng(len(case.args) * 104_729 + int(np.size(case.cotangent)))
    kappa = 1.0
    for _ in range(SCE_DRAWS):
        def pert(x: np.ndarray) -> np.ndarray:
            return x * (1 + SCE_EPS * rng.choice([-1.0, 1.0], np.shape(x)))

        args = [pert(a) if k in real or spec.args[k].kind == "fixed" else a
                for k, a in enumerate(base_args)]
        G = pert(case.cotangent) if which == "vjp" else case.cotangent
        T = [pert(t) for t in case.tangents] if which == "jvp" else case.tangents
        try:
            f1 = run(args, G, T)
        except Exception:
            continue
        with np.errstate(invalid="ignore"):
            diffs = [np.abs(a - b) for a, b in zip(f1, f0, strict=True) if a.size]
        finite = [d[np.isfinite(d)] for d in diffs]
        worst = max([float(np.max(d)) if d.size else 0.0 for d in finite], default=0.0)
        kappa = max(kappa, worst / (SCE_EPS * scale))
    return kappa


def _size(case: OpCaseInput) -> int:
    return max([int(np.size(a)) for a in case.args] + [int(np.size(case.cotangent)), 1])


# -- the user's side ---------------------------------------------------------------------


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
WIDENED = ("n", "d", "d_k", "d_v", "d_in", "d_out", "hd", "d_h", "V", "m")
DEFAULT_MAX_SIZE = 16


def _size_ranges(spec: OpSpec, shapes: Mapping[str, Any] | None) -> dict[str, tuple[int, int]]:
    ranges = {k: (lo, max(hi, DEFAULT_MAX_SIZE) if k in WIDENED and _registered(spec)
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


def _batch_choices(batch: bool | Sequence[int]) -> list[tuple[int, ...]] | None:
    if batch is True:
        return None
    if batch is False:
        return [()]
    try:
        b = tuple(int(v) for v in batch)
    except TypeError:
        raise CheckError(f"argument 'batch': expected True, False or a tuple of leading "
                         f"sizes, got {batch!r}") from None
    if any(v < 1 for v in b):
        raise CheckError(f"argument 'batch': expected sizes >= 1, got {b}")
    return [b]


def _explicit_cases(spec: OpSpec, inputs: Sequence[Any], dtype: str,
                    static: Mapping[str, Any]) -> list[OpCaseInput]:
    from nlaverify.backends import get_namespace

    cases = []
    for i, item in enumerate(inputs):
        tangents = None
        if (isinstance(item, tuple) and len(item) in (2, 3)
                and isinstance(item[0], list | tuple)):
            arrs, G = list(item[0]), item[1]
            tangents = item[2] if len(item) == 3 else None
        else:
            arrs, G = list(item), None
        if len(arrs) != len(spec.args):
            raise CheckError(f"argument 'inputs'[{i}]: expected {len(spec.args)} arrays for "
                             f"{op_signature(spec)}, got {len(arrs)}")
        args = []
        for a, x in zip(spec.args, arrs, strict=True):
            x = to_float64(x, what=f"inputs[{i}] argument {a.name!r}") \
                if a.kind != "tokens" else np.asarray(x, dtype=np.int64)
            args.append(x if a.kind == "tokens" else exact_in(x, dtype))
        try:
            out = spec.forward(get_namespace("numpy"), *args, **static)
        except Exception as exc:
            raise CheckError(f"argument 'inputs'[{i}]: the reference op rejects these "
                             f"arrays: {exc}") from exc
        rng = np.random.default_rng(i)
        if G is None:
            G = rng.standard_normal(np.shape(out))
        G = exact_in(to_float64(G, what=f"inputs[{i}] cotangent"), dtype)
        if G.shape != np.shape(out):
            raise CheckError(f"argument 'inputs'[{i}]: cotangent: expected shape "
                             f"{np.shape(out)} (the output's), got {G.shape}")
        real = _real_idx(spec)
        if tangents is None:
            T = [exact_in(rng.standard_normal(np.shape(args[k])), dtype) for k in real]
        else:
            if not isinstance(tangents, list | tuple) or len(tangents) != len(real):
                raise CheckError(f"argument 'inputs'[{i}]: tangents: expected a list of "
                                 f"{len(real)} arrays (one per real argument)")
            T = [exact_in(to_float64(t, what=f"inputs[{i}] tangent {spec.args[k].name!r}"),
                          dtype) for k, t in zip(real, tangents, strict=True)]
            for k, t in zip(real, T, strict=True):
                if t.shape != np.shape(args[k]):
                    raise CheckError(f"argument 'inputs'[{i}]: tangent of "
                                     f"{spec.args[k].name!r}: expected shape "
                                     f"{np.shape(args[k])}, got {t.shape}")
        cases.append(OpCaseInput(spec, args, G, T, dict(static), f"input {i}", spec.condition))
    return cases
