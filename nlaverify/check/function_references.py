r"""The deterministic references of :func:`~nlaverify.check.function.check_function`: each
a function written once against an array namespace ``xp`` (:data:`REFERENCES`: a closed form,
a Newton–Schulz map, a curvature product), how to draw its inputs, and its bound from the
tolerance model, :math:`\mathrm{rtol} = C\kappa D\sqrt k\,u` (:mod:`nlaverify.tolerance`),
with the size :math:`k`, depth :math:`D` and condition estimate :math:`\kappa` derived from
the inputs (for Newton–Schulz, the rounding term of
:func:`nlaverify.optim.newton_schulz.rounding_bound`, carried through the polynomial map).
Also the input plumbing both kinds of check share (rounding to the user's dtype, handing
arrays to the user's framework). This module imports neither
:mod:`nlaverify.check.function` nor :mod:`nlaverify.check.function_estimators`.

Seed: Baggag & Saad §5.2 (GGN), §5.5 (Newton–Schulz, Muon), §3.4, §3.8 (softmax and
LayerNorm Jacobians); Higham & Mary (2019) for the bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.check.adapters import framework_dtype, to_float64, to_framework
from nlaverify.check.report import CheckError
from nlaverify.tolerance import Tolerance, magnitude_condition, tolerance

__all__ = ["DEFAULT_CASES", "REFERENCES", "Reference", "ggn_vector_product"]

Inputs = tuple[Any, ...]

#: default number of drawn input sets of a deterministic check
DEFAULT_CASES = 3


def _np() -> Any:
    from nlaverify.backends import get_namespace

    return get_namespace("numpy")


def _accumulation(dtype: str, framework: str) -> str | None:
    """bfloat16/float16 matmuls and reductions accumulate in float32 on XLA and in PyTorch
    (the policy of :mod:`nlaverify.precision`); NumPy's ml_dtypes are not assumed to."""
    return "float32" if dtype in ("bfloat16", "float16") and framework in ("jax", "torch") \
        else None


# -- deterministic references ------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """A deterministic reference: ``fn(xp, *inputs)``, how to draw its inputs (float64,
    from a generator and a case number), and its bound from the inputs, the dtype and the
    framework."""

    name: str
    fn: Callable[..., Any]
    argnames: tuple[str, ...]
    draw: Callable[[np.random.Generator, int], Inputs]
    bound: Callable[[Inputs, str, str], Tolerance]
    doc: str


def _ns_fn(xp: Any, G: Any) -> Any:
    from nlaverify.optim.newton_schulz import MUON, newton_schulz

    return newton_schulz(xp, G, MUON, 5)


def _ns_bound(inputs: Inputs, dtype: str, framework: str) -> Tolerance:
    from nlaverify.optim.newton_schulz import MUON, rounding_bound

    G = inputs[0]
    s = np.linalg.svd(G, compute_uv=False)
    norm = float(np.sqrt(np.sum(G * G))) + 1e-7
    rb = rounding_bound(MUON, 5, dtype, max(G.shape), m=min(G.shape),
                        lower=float(s[-1]) / norm, upper=float(s[0]) / norm,
                        accumulation=_accumulation(dtype, framework))
    return Tolerance(rb.delta, f"Newton-Schulz rounding bound (Muon quintic, 5 steps, "
                               f"gains {', '.join(f'{g:.3g}' for g in rb.gains)}): {rb.reason}")


def _matrix_draw(rng: np.random.Generator, case: int) -> Inputs:
    shape = [(8, 8), (6, 10), (12, 5)][case % 3]
    return (rng.standard_normal(shape),)


def _polar_fn(xp: Any, G: Any) -> Any:
    from nlaverify.optim.newton_schulz import polar_svd

    return polar_svd(xp, G)


def _polar_bound(inputs: Inputs, dtype: str, framework: str) -> Tolerance:
    # the polar factor's relative condition number is at most kappa_2(G) (Higham, Functions
    # of Matrices, Thm 8.9); the SVD and the product U V^T are two backward-stable stages
    s = np.linalg.svd(inputs[0], compute_uv=False)
    kappa = float(s[0] / s[-1]) if s[-1] > 0 else math.inf
    return tolerance(dtype, size=max(inputs[0].shape), depth=2, condition=max(1.0, kappa),
                     accumulation=_accumulation(dtype, framework))


def _softmax_jacobian_fn(xp: Any, p: Any) -> Any:
    from nlaverify.ops.softmaxes import softmax_jacobian

    return softmax_jacobian(xp, p)


def _softmax_draw(rng: np.random.Generator, case: int) -> Inputs:
    z = rng.standard_normal([5, 16, 9][case % 3]) * 2.0
    p = np.exp(z - z.max())
    return (p / p.sum(),)


def _layernorm_jacobian_fn(xp: Any, x: Any, gamma: Any, eps: Any) -> Any:
    from nlaverify.ops.norms import layernorm_jacobian

    return layernorm_jacobian(xp, x, gamma, eps)


def _layernorm_draw(rng: np.random.Generator, case: int) -> Inputs:
    d = [8, 16, 5][case % 3]
    return (rng.standard_normal(d) * 2.0 + 0.5, 1.0 + 0.5 * rng.standard_normal(d), 1e-5)


def _layernorm_bound(inputs: Inputs, dtype: str, framework: str) -> Tolerance:
    # centering cancels max|x| down to the spread sigma; gamma scales the rows
    x, gamma = inputs[0], inputs[1]
    sigma = float(np.std(x)) or 1.0
    kappa = max(1.0, float(np.max(np.abs(x))) / sigma) * magnitude_condition(gamma, power=1)
    return tolerance(dtype, size=x.shape[-1], depth=3, condition=kappa,
                     accumulation=_accumulation(dtype, framework))


def ggn_vector_product(xp: Any, J: Any, z: Any, v: Any) -> Any:
    r"""The GGN product of a categorical likelihood from explicit Jacobians (Baggag & Saad
    §5.2, eq. (5.2.5)): :math:`Gv = \sum_i J_i^\top H(z_i) J_i v`, :math:`H =
    \operatorname{diag}(p) - pp^\top`, with ``J`` of shape ``(n, C, P)``, ``z`` ``(n, C)``
    and ``v`` ``(P,)``; :math:`H u` by :meth:`~nlaverify.curvature.likelihoods.Likelihood.
    hvp` (the function the curvature proofs certify)."""
    from nlaverify.curvature.likelihoods import Likelihood

    Jv = xp.sum(J * v, axis=-1)                                   # (n, C)
    HJv = Likelihood("categorical").hvp(xp, z, Jv)
    return xp.sum(xp.reshape(HJv, (-1, 1)) * xp.reshape(J, (-1, J.shape[-1])), axis=0)


def _ggn_draw(rng: np.random.Generator, case: int) -> Inputs:
    n, C, P = [(4, 3, 7), (6, 5, 12), (2, 4, 5)][case % 3]
    return (rng.standard_normal((n, C, P)), rng.standard_normal((n, C)),
            rng.standard_normal(P))


def _ggn_bound(inputs: Inputs, dtype: str, framework: str) -> Tolerance:
    # componentwise condition of the sums: |J|^T |H| |J| |v| against the result's scale
    J, z, v = inputs
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    absJv = np.abs(J) @ np.abs(v)
    absH = np.abs(p)[..., None] * (np.eye(p.shape[-1]) + p[..., None, :])
    bound = np.einsum("ncp,nc->p", np.abs(J), np.einsum("ncd,nd->nc", absH, absJv))
    result = np.abs(ggn_vector_product(_np(), J, z, v))
    kappa = max(1.0, float(bound.max()) / max(1.0, float(result.max())))
    n, C, P = J.shape
    return tolerance(dtype, size=max(P, n * C), depth=3, condition=kappa,
                     accumulation=_accumulation(dtype, framework))


REFERENCES: dict[str, Reference] = {
    "newton_schulz": Reference(
        "newton_schulz", _ns_fn, ("G",), _matrix_draw, _ns_bound,
        "Muon's quintic Newton-Schulz (3.4445, -4.7750, 2.0315), 5 steps from G/(|G|_F+1e-7)"),
    "polar": Reference("polar", _polar_fn, ("G",), _matrix_draw, _polar_bound,
                       "the polar factor U V^T of G = U S V^T (thin SVD)"),
    "softmax_jacobian": Reference(
        "softmax_jacobian", _softmax_jacobian_fn, ("p",), _softmax_draw,
        lambda inp, dt, fw: tolerance(dt, depth=2), "diag(p) - p p^T at probabilities p"),
    "layernorm_jacobian": Reference(
        "layernorm_jacobian", _layernorm_jacobian_fn, ("x", "gamma", "eps"), _layernorm_draw,
        _layernorm_bound, "dy/dx of one LayerNorm row"),
    "ggn_vector_product": Reference(
        "ggn_vector_product", ggn_vector_product, ("J", "z", "v"), _ggn_draw, _ggn_bound,
        "sum_i J_i^T H(z_i) J_i v, categorical likelihood"),
}


# -- the inputs, shared by both kinds of check --------------------------------------------


def _round_to(x: Any, dtype: str, what: str) -> Any:
    """An input as float64 values exactly representable in ``dtype`` (scalars pass)."""
    if isinstance(x, bool | int | float) and not isinstance(x, np.ndarray):
        return x
    a = to_float64(x, what=what)
    return a.astype(framework_dtype("numpy", dtype)).astype(np.float64)


def _to_user(x: Any, framework: str, dtype: str) -> Any:
    return x if isinstance(x, bool | int | float) else to_framework(x, framework, dtype)


def _inputs_list(inputs: Any, spec_names: Sequence[str] | None) -> list[Inputs]:
    """``inputs`` as a list of input tuples: one tuple, or a list of tuples."""
    if isinstance(inputs, list) and inputs and isinstance(inputs[0], tuple):
        cases = inputs
    elif isinstance(inputs, tuple):
        cases = [inputs]
    else:
        raise CheckError(f"argument 'inputs': expected a tuple of arrays (one case) or a list "
                         f"of such tuples, got {type(inputs).__name__}")
    if spec_names is not None:
        for k, c in enumerate(cases):
            if len(c) != len(spec_names):
                raise CheckError(f"argument 'inputs' (case {k}): expected {len(spec_names)} "
                                 f"inputs ({', '.join(spec_names)}), got {len(c)}")
    return cases
