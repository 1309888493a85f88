r"""``check_function``: any user function against an nlaverify reference, deterministic or
statistical.

**Deterministic references** (a closed form, a Newton–Schulz map, a curvature product) are
functions written once against an array namespace ``xp`` (:data:`REFERENCES`, or any
callable ``reference(xp, *inputs)`` of nlaverify; the entries and their bounds are in
:mod:`nlaverify.check.function_references`). The reference runs in float64 NumPy (or on
mpmath with ``digits=``) on the very inputs the user's function gets, rounded first to the
user's ``dtype``, and each output is judged normwise by the tolerance model of that dtype,
:math:`\mathrm{rtol} = C\kappa D\sqrt k\,u` (:mod:`nlaverify.tolerance`), with the size
:math:`k`, depth :math:`D` and condition estimate :math:`\kappa` that the reference's entry
derives from its inputs (for Newton–Schulz, the rounding term of
:func:`nlaverify.optim.newton_schulz.rounding_bound`, carried through the polynomial map).

**Statistical references** (:data:`ESTIMATORS`: the Performer's random-feature estimators
of :mod:`nlaverify.attention.estimators`, Hutchinson's trace estimator, the Monte-Carlo
Fisher of a categorical likelihood) give the exact mean :math:`\mu` and variance
:math:`\sigma^2` of one estimate; the user's estimator is sampled :math:`R` times and its
sample moments are tested against them (the tests, their power and the orthogonal-feature
option: :mod:`nlaverify.check.function_estimators`).

Imports flow one way: this module imports :mod:`~nlaverify.check.function_estimators`, which
imports :mod:`~nlaverify.check.function_references`; every public name of both is importable
from here.

Seed: Baggag & Saad §4.4 (Performer, FAVOR+), §5.1–5.2 (Fisher, GGN), §5.5 (Newton–Schulz,
Muon), §3.4, §3.8 (softmax and LayerNorm Jacobians); Higham & Mary (2019) for the bound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from nlaverify.check.adapters import (
    detect_framework,
    framework_dtype,
    require_framework,
    to_float64,
)
from nlaverify.check.function_estimators import (
    DEFAULT_REPLICATES,
    ESTIMATORS,
    FALSE_ALARM,
    ORTHOGONAL_KINDS,
    Estimator,
    _check_statistical,
    lognormal_fourth_moment,
    mc_fisher_fourth_moment,
)
from nlaverify.check.function_estimators import POWER_Z as POWER_Z
from nlaverify.check.function_estimators import mc_fisher_moments as mc_fisher_moments
from nlaverify.check.function_references import (
    DEFAULT_CASES,
    REFERENCES,
    Inputs,
    Reference,
    _accumulation,
    _inputs_list,
    _round_to,
    _to_user,
)
from nlaverify.check.function_references import ggn_vector_product as ggn_vector_product
from nlaverify.check.report import (
    CheckError,
    CheckReport,
    compare_arrays,
    error_row,
    factor_note,
)
from nlaverify.tolerance import magnitude_condition, tolerance

__all__ = [
    "DEFAULT_REPLICATES",
    "ESTIMATORS",
    "FALSE_ALARM",
    "ORTHOGONAL_KINDS",
    "REFERENCES",
    "Estimator",
    "Reference",
    "check_function",
    "lognormal_fourth_moment",
    "mc_fisher_fourth_moment",
]


def _reference_of(reference: Any) -> Reference | None:
    """The registry entry of a name or of the nlaverify function it wraps (``None`` for an
    unregistered callable)."""
    from nlaverify.ops.norms import layernorm_jacobian
    from nlaverify.ops.softmaxes import softmax_jacobian
    from nlaverify.optim.newton_schulz import newton_schulz, polar_svd

    if isinstance(reference, str):
        if reference in REFERENCES:
            return REFERENCES[reference]
        if reference in ESTIMATORS:
            return None
        raise CheckError(f"argument 'reference': unknown reference {reference!r}: expected a "
                         f"callable reference(xp, *inputs) or one of "
                         f"{', '.join([*REFERENCES, *ESTIMATORS])}")
    known = {newton_schulz: "newton_schulz", polar_svd: "polar",
             softmax_jacobian: "softmax_jacobian", layernorm_jacobian: "layernorm_jacobian"}
    for spec in REFERENCES.values():
        if reference is spec.fn:
            return spec
    name = known.get(reference)
    return REFERENCES[name] if name else None


def _reproducer(name: str, ref: str, inputs: Inputs, dtype: str) -> str:
    arrays = ", ".join(f"np.array({np.asarray(x).tolist()!r})" if not isinstance(x, float)
                       else repr(x) for x in inputs)
    return (f"import numpy as np\nfrom nlaverify.check import check_function\n"
            f"inputs = ({arrays},)\nprint(check_function({name}, {ref!r}, inputs=inputs, "
            f"dtype={dtype!r}))")


def check_function(
    fn: Callable[..., Any], reference: str | Callable[..., Any], *,
    inputs: Any = None, dtype: str = "float64", framework: str | None = None,
    samples: int | None = None, seed: int = 0, options: Mapping[str, Any] | None = None,
    batched: bool = False, digits: int | None = None, size: int | None = None,
    depth: int | None = None, condition: float | None = None,
) -> CheckReport:
    r"""Check ``fn`` against the nlaverify ``reference``.

    Args:
        fn: the user's function (NumPy, JAX, PyTorch or CuPy), called with the inputs in
            ``framework`` and ``dtype`` (statistical references: the inputs, then the
            noise arrays of the :class:`Estimator`).
        reference: a name of :data:`REFERENCES` (deterministic) or :data:`ESTIMATORS`
            (statistical), or a callable ``reference(xp, *inputs)`` of nlaverify (a
            registered one, e.g. :func:`nlaverify.ops.norms.layernorm_jacobian`, draws its
            own inputs; any other needs ``inputs``).
        inputs: a tuple of arrays (one case) or a list of tuples. Default: drawn from
            ``seed`` by the reference's entry: ``samples`` cases (default 3) of fixed
            shapes cycling through a square, a wide and a tall one (Newton–Schulz, polar:
            standard normal :math:`8\times 8`, :math:`6\times 10`, :math:`12\times 5`;
            softmax: :math:`p = \operatorname{softmax}(2g)`; LayerNorm: :math:`x = 2g +
            0.5`, :math:`\gamma = 1 + g/2`, :math:`\epsilon = 10^{-5}`); the statistical
            ones: one input set of ``options`` (``d``, ``m``, ``n``, ``C``).
        dtype: the user's precision (``float64``, ``float32``, ``bfloat16``, ``float16``).
        samples: deterministic: the number of drawn cases; statistical: the replicates
            :math:`R` (default :data:`DEFAULT_REPLICATES`).
        batched: statistical only: ``fn`` takes the noise with its leading replicate axis
            and returns ``(R, ...)`` (else it is called per replicate; ``jax.vmap`` for JAX).
        digits: run the deterministic reference on mpmath at these digits (default float64
            NumPy, whose error the tolerance model's factor 2 already covers).
        size, depth, condition: override the tolerance model's :math:`k`, :math:`D`,
            :math:`\kappa` (required sense for unregistered callables: default the largest
            input dimension, 1 and the magnitude condition of the inputs).

    Returns:
        A :class:`~nlaverify.check.report.CheckReport` (kind ``check_function``): one row
        per case (deterministic) or per moment (statistical: ``mean`` and ``variance``),
        each naming the entry where the error is worst.
    """
    if not callable(fn):
        raise CheckError(f"argument 'fn': expected a callable, got {type(fn).__name__}")
    framework = framework or detect_framework(fn)
    require_framework(framework)
    framework_dtype(framework, dtype)  # the dtype exists in the framework
    opt = dict(options or {})
    name = getattr(fn, "__name__", type(fn).__name__)
    if isinstance(reference, str) and reference in ESTIMATORS:
        return _check_statistical(fn, name, ESTIMATORS[reference](), inputs, dtype,
                                  framework, samples, seed, opt, batched)
    if not callable(reference) and not isinstance(reference, str):
        raise CheckError(f"argument 'reference': expected a name or a callable "
                         f"reference(xp, *inputs), got {type(reference).__name__}")
    spec = _reference_of(reference)
    ref_fn = spec.fn if spec is not None else reference
    ref_name = spec.name if spec is not None else getattr(reference, "__name__", "reference")
    if inputs is None:
        if spec is None:
            raise CheckError(f"argument 'inputs': the reference {ref_name!r} is not in the "
                             f"registry ({', '.join(REFERENCES)}), so its inputs cannot be "
                             "drawn: pass inputs=(...)")
        n = DEFAULT_CASES if samples is None else samples
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise CheckError(f"argument 'samples': expected an integer >= 1, got {n!r}")
        cases = [spec.draw(np.random.default_rng([seed, k]), k) for k in range(n)]
    else:
        cases = _inputs_list(inputs, spec.argnames if spec is not None else None)
    from nlaverify.backends import get_namespace

    xp = get_namespace("mpmath" if digits else "numpy", digits=digits)
    report = CheckReport(name, "check_function",
                         notes=[f"reference {ref_name}" + (f": {spec.doc}" if spec else "")])
    for k, case in enumerate(cases):
        args = [_round_to(x, dtype, f"inputs[{k}][{j}]") for j, x in enumerate(case)]
        check = f"{ref_name} case {k}"
        try:
            expected = to_float64(ref_fn(xp, *[xp.asarray(a) if isinstance(a, np.ndarray)
                                               else a for a in args]), what="reference")
        except CheckError:
            raise
        except Exception as exc:
            raise CheckError(f"argument 'inputs' (case {k}): the reference {ref_name} "
                             f"rejects them: {type(exc).__name__}: {exc}") from exc
        try:
            out = fn(*[_to_user(a, framework, dtype) for a in args])
        except Exception as exc:
            report.rows.append(error_row(name, check, exc, where="fn"))
            continue
        actual = to_float64(out, what="output of fn")
        arrays = [a for a in args if isinstance(a, np.ndarray)]
        if spec is not None and size is None and depth is None and condition is None:
            tol = spec.bound(tuple(args), dtype, framework)
        else:
            tol = tolerance(dtype, size=size or max([1, *(max(a.shape, default=1)
                                                          for a in arrays)]),
                            depth=depth or 1,
                            condition=condition or magnitude_condition(*arrays, power=1),
                            accumulation=_accumulation(dtype, framework))
        row = compare_arrays(name, check, actual, expected, tol, label="output")
        if row.verdict == "fail":
            from dataclasses import replace

            row = replace(row, reproducer=_reproducer(name, ref_name, tuple(args), dtype))
            note = factor_note(actual, expected, tol)
            if note and not any(n.startswith("diagnosis:") for n in report.notes):
                report.notes.append(note)
        report.rows.append(row)
    return report
