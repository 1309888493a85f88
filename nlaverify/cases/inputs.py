"""The cases a check runs: drawn, hostile and explicit, as :class:`OpCaseInput`.

An :class:`OpCaseInput` is what ``check_op`` hands a user's kernel and the reference: the
arguments (float64 values exact in the kernel's dtype, token ids int64), a cotangent for the
VJP, one tangent per real argument for the JVP, the static values, and where the case came
from (``"drawn"``, ``"hostile seed k"``, ``"input i"``). The values come from the builders of
:mod:`nlaverify.cases.drawn` and :mod:`nlaverify.cases.hostile`, the same the test strategies
draw from, so a case ``check_op`` reports is a case ``op_cases`` can draw.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from nlaverify.cases.drawn import make_case
from nlaverify.cases.hostile import (
    HOSTILE_OPS,
    LOGIT_ROWS,
    hostile_logit_array,
    make_hostile_case,
    realistic_norm_rows,
)
from nlaverify.cases.hostile_kinds import hostile_array
from nlaverify.cases.hostile_ssm import HOSTILE_SCAN_OPS, make_hostile_scan_case
from nlaverify.cases.rounding import exact_in
from nlaverify.errors import CheckError
from nlaverify.ops.registry import OPS, OpSpec, op_signature

__all__ = ["OpCaseInput", "drawn_input", "explicit_inputs", "hostile_inputs", "real_indices",
           "registered"]


def _strict(values: Any, dtype: str) -> np.ndarray:
    """:func:`~nlaverify.cases.rounding.exact_in`, a value beyond the range an error."""
    return exact_in(values, dtype, strict=True)


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
    #: the arrays an explicit case was given as (handed to the kernel as they are: their
    #: layout, device and strides kept), or ``None``
    given: list[Any] | None = None


def registered(spec: OpSpec) -> bool:
    """``spec`` is an op of the registry (possibly with other static values)."""
    known = OPS.get(spec.name)
    return known is not None and known.forward is spec.forward and known.args == spec.args


def real_indices(spec: OpSpec) -> list[int]:
    """Positions of the real (differentiable) arguments of ``spec``."""
    return [k for k, a in enumerate(spec.args) if a.kind == "real"]



def drawn_input(spec: OpSpec, sizes: dict[str, int], batch: tuple[int, ...], seed: int,
                dtype: str, static: Mapping[str, Any]) -> OpCaseInput:
    """The drawn case of :func:`~nlaverify.cases.drawn.make_case` (the same cases as
    ``op_cases(op, batch=..., dtype=...)``), with tangents from a stream of their own; values
    beyond the dtype's range are a :class:`~nlaverify.errors.CheckError`."""
    case = make_case(replace(spec, static=dict(static)), sizes, seed, batch=batch, dtype=dtype)
    rng = np.random.default_rng([seed, 1])
    T = [exact_in(rng.standard_normal(np.shape(case.args[k])), dtype, strict=True)
         for k in case.real_indices()]
    return OpCaseInput(spec, case.args, case.cotangent, T, dict(static), "drawn",
                       spec.condition, dict(sizes), tuple(batch))


def hostile_inputs(spec: OpSpec, dtype: str, count: int, static: Mapping[str, Any],
                   extreme: bool = False) -> list[OpCaseInput]:
    """``count`` hostile cases of ``spec`` (seeds 0, 1, ...; none for an op outside
    :data:`~nlaverify.cases.hostile.HOSTILE_OPS` or not of the registry): the cases of
    :func:`~nlaverify.cases.hostile.make_hostile_case` in ``dtype``, with the norm rows a
    model meets (:func:`~nlaverify.cases.hostile.realistic_norm_rows`) and no all-masked
    softmax row unless ``extreme``."""
    from nlaverify.backends import get_namespace

    if dict(getattr(spec, "hostile_kinds", ())):
        return _user_hostile_inputs(spec, dtype, count, static, extreme)
    if spec.name in HOSTILE_SCAN_OPS and _scan_registered(spec):
        return _scan_hostile_inputs(spec, dtype, count)
    if spec.name not in HOSTILE_OPS or not registered(spec):
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
            Z = hostile_logit_array(rng, np.shape(hc.args[0]), base, kinds)
            hc = replace(hc, args=[Z])
        args = [a if np.issubdtype(np.asarray(a).dtype, np.integer) else _strict(a, dtype)
                for a in hc.args]
        out = spec.forward(get_namespace("numpy"), *args, **static)
        rng = np.random.default_rng(10_000 + seed)
        G = _strict(hc.cotangent, dtype)
        if np.shape(G) != np.shape(out):
            G = _strict(rng.standard_normal(np.shape(out)), dtype)
        T = [_strict(rng.standard_normal(np.shape(args[k])), dtype)
             for k in hc.real_indices()]
        cases.append(OpCaseInput(spec, args, G, T, dict(static), f"hostile seed {seed}",
                                 hc.spec.condition, dict(hc.sizes)))
    return cases


#: the hostile kinds whose magnitudes bound a user op's condition from below
#: (:func:`_user_hostile_inputs`)
MAGNITUDE_KINDS = ("scores", "activations")


def _scan_registered(spec: OpSpec) -> bool:
    """``spec`` is a scan of :data:`~nlaverify.ops.ssm_specs.SCAN_OPS` (its forward and
    arguments)."""
    from nlaverify.ops.ssm_specs import SCAN_OPS

    known = SCAN_OPS.get(spec.name)
    return known is not None and known.forward is spec.forward and known.args == spec.args


def _scan_hostile_inputs(spec: OpSpec, dtype: str, count: int) -> list[OpCaseInput]:
    """The hostile cases of a scan (:mod:`nlaverify.cases.hostile_ssm`: trained-like
    decays, a long constant run), values exact in ``dtype``, standard normal tangents; the
    rows take the running error bound (``check_op``)."""
    cases = []
    for seed in range(count):
        hc = make_hostile_scan_case(spec.name, dtype, seed)
        rng = np.random.default_rng(10_000 + seed)
        T = [_strict(rng.standard_normal(np.shape(hc.args[k])), dtype)
             for k in hc.real_indices()]
        cases.append(OpCaseInput(spec, list(hc.args), hc.cotangent, T, {},
                                 f"hostile seed {seed}", hc.spec.condition, dict(hc.sizes)))
    return cases


def _user_hostile_inputs(spec: OpSpec, dtype: str, count: int, static: Mapping[str, Any],
                         extreme: bool) -> list[OpCaseInput]:
    r"""The hostile cases of a user's op (``user_op(hostile=...)``): the drawn case at the
    op's sizes with each named argument replaced by hostile values of its kind
    (:func:`~nlaverify.cases.hostile_kinds.hostile_array`). Their condition is the statistical
    estimate at the case (``check_op``) and at least the magnitude :math:`\max(1,
    \max|x|)` of the arguments of a kind whose large values cancel in a later sum
    (:data:`MAGNITUDE_KINDS`: attention's :math:`\bar Q = dS\,K/\sqrt d` sums terms of
    size :math:`|K|` to a small result, an error an input perturbation does not see; the
    pointwise activations' arguments of :math:`\exp` and :math:`\operatorname{erf}`), as
    in the conditions derived for the catalogue's attention and activations."""
    from nlaverify.backends import get_namespace

    kinds = dict(spec.hostile_kinds)  # type: ignore[attr-defined]
    sizes = dict(spec.proof_sizes)
    real = [a.name for a in spec.args if a.kind == "real"]
    big = [real.index(k) for k, v in kinds.items() if v in MAGNITUDE_KINDS]

    def magnitude(args: list[Any]) -> float:
        vals = [np.abs(np.asarray(args[i], dtype=np.float64)) for i in big]
        return max([1.0] + [float(np.max(v[np.isfinite(v)], initial=0.0)) for v in vals])

    cases = []
    for seed in range(count):
        base = drawn_input(spec, sizes, (), 50_000 + seed, dtype, static)
        rng = np.random.default_rng([seed, 34])
        args = [hostile_array(kinds[a.name], rng, np.shape(x), dtype, extreme)
                if a.name in kinds else x for a, x in zip(spec.args, base.args, strict=True)]
        out = spec.forward(get_namespace("numpy"), *args, **static)
        G = base.cotangent
        if np.shape(G) != np.shape(out):
            G = _strict(rng.standard_normal(np.shape(out)), dtype)
        cases.append(OpCaseInput(spec, args, G, base.tangents, dict(static),
                                 f"hostile seed {seed}", magnitude, sizes))
    return cases


def explicit_inputs(spec: OpSpec, inputs: Sequence[Any], dtype: str, static: Mapping[str, Any],
                    *, convert: Callable[..., np.ndarray]) -> list[OpCaseInput]:
    """The cases ``inputs`` spells out: argument lists, ``(args, cotangent)`` pairs or
    ``(args, cotangent, tangents)`` triples (cotangent and tangents drawn when missing),
    rounded to ``dtype``. ``convert(x, what=...)`` turns a user's array (any framework) into
    float64 NumPy, naming ``what`` when it cannot (``check_op`` passes
    :func:`nlaverify.check.adapters.to_float64`). Every malformed item is a
    :class:`~nlaverify.errors.CheckError` naming ``inputs[i]`` and the argument."""
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
            x = convert(x, what=f"inputs[{i}] argument {a.name!r}") \
                if a.kind != "tokens" else np.asarray(x, dtype=np.int64)
            args.append(x if a.kind == "tokens" else _strict(x, dtype))
        try:
            out = spec.forward(get_namespace("numpy"), *args, **static)
        except Exception as exc:
            raise CheckError(f"argument 'inputs'[{i}]: the reference op rejects these "
                             f"arrays: {exc}") from exc
        rng = np.random.default_rng(i)
        if G is None:
            G = rng.standard_normal(np.shape(out))
        G = _strict(convert(G, what=f"inputs[{i}] cotangent"), dtype)
        if G.shape != np.shape(out):
            raise CheckError(f"argument 'inputs'[{i}]: cotangent: expected shape "
                             f"{np.shape(out)} (the output's), got {G.shape}")
        real = real_indices(spec)
        if tangents is None:
            T = [_strict(rng.standard_normal(np.shape(args[k])), dtype) for k in real]
        else:
            if not isinstance(tangents, list | tuple) or len(tangents) != len(real):
                raise CheckError(f"argument 'inputs'[{i}]: tangents: expected a list of "
                                 f"{len(real)} arrays (one per real argument)")
            T = [_strict(convert(t, what=f"inputs[{i}] tangent {spec.args[k].name!r}"),
                          dtype) for k, t in zip(real, tangents, strict=True)]
            for k, t in zip(real, T, strict=True):
                if t.shape != np.shape(args[k]):
                    raise CheckError(f"argument 'inputs'[{i}]: tangent of "
                                     f"{spec.args[k].name!r}: expected shape "
                                     f"{np.shape(args[k])}, got {t.shape}")
        cases.append(OpCaseInput(spec, args, G, T, dict(static), f"input {i}", spec.condition,
                                 given=list(arrs)))
    return cases
