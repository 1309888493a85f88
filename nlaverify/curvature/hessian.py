r"""The Hessian product :math:`\nabla^2_\theta L\,v` of a graph model (Baggag & Saad §5.2).

The gradient is the graph's back-propagation with the ops' *hand* VJPs
(:func:`~nlaverify.curvature.problem.params_cotangent` from the loss node); the Hessian
product differentiates that gradient once more:

* JAX: forward-over-reverse, ``jax.jvp`` of the hand gradient along :math:`v`
  (:func:`hessian_vp`, one ``jax.jit`` per problem);
* mpmath: Richardson-extrapolated central differences of the same hand gradient, step
  :func:`fd_step` from the digits, error bounded by :func:`hessian_fd_tolerance`;
* NumPy has no second-order mode and raises.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nlaverify.curvature.problem import CurvatureProblem, cached_jit, params_cotangent
from nlaverify.errors import ArgumentError
from nlaverify.graph.core import evaluate
from nlaverify.tolerance import Tolerance, extrapolated_difference_tolerance, unit_roundoff


def _hessian_jax(problem: CurvatureProblem, inputs: dict[str, Any],
                 v: dict[str, Any]) -> dict[str, Any]:
    """Forward-over-reverse: ``jax.jvp`` of the hand-VJP gradient along ``v``."""
    import jax

    def grad(sel: dict[str, Any]) -> dict[str, Any]:
        full = {**inputs, **sel}
        values = {**full, **evaluate(problem.graph, problem.xp, full, outputs=[problem.loss])}
        return params_cotangent(problem, values, None, root=problem.loss)

    primal = {p: inputs[p] for p in problem.params}
    return jax.jvp(grad, (primal,), (v,))[1]


def fd_step(digits: int) -> float:
    r"""The step :math:`h = u^{1/5}` of the Richardson-extrapolated central difference in
    ``digits``-digit arithmetic: it balances the extrapolated truncation :math:`h^4` and the
    rounding :math:`u/h` (:func:`~nlaverify.tolerance.extrapolated_difference_tolerance`)."""
    return unit_roundoff("mpmath", digits) ** (1 / 5)


def hessian_fd_tolerance(problem: CurvatureProblem, condition: float = 1.0) -> Tolerance:
    r"""The error bound of the mpmath :func:`hessian_vp` (relative to :math:`\lVert
    v\rVert_\infty`): :func:`~nlaverify.tolerance.extrapolated_difference_tolerance` at the
    step :func:`fd_step`, :math:`O(u^{4/5})`: the error model of the extrapolated
    differences (without the extrapolation the :math:`h^2 = u^{2/5}` truncation would
    exceed it by about :math:`u^{-2/5}`)."""
    if problem.digits is None:
        raise ArgumentError("hessian_fd_tolerance: the problem is not on the mpmath backend")
    from nlaverify.graph.compare import accumulation_length

    n = int(np.shape(problem.values[problem.logits])[-2]) if len(
        np.shape(problem.values[problem.logits])) > 1 else 1
    return extrapolated_difference_tolerance(problem.digits, fd_step(problem.digits),
                                             condition=condition,
                                             size=accumulation_length(problem.graph, n))


def _hessian_fd(problem: CurvatureProblem, v: dict[str, Any]) -> dict[str, Any]:
    r"""Richardson-extrapolated central differences of the hand gradient along
    :math:`\hat v = v/\lVert v\rVert_\infty`: :math:`D(h) = (g(\theta + h\hat v) -
    g(\theta - h\hat v))/2h`, :math:`(4D(h/2) - D(h))/3 = H\hat v + O(h^4)`."""
    xp = problem.xp
    scale = max((abs(float(x)) for p in problem.params for x in np.reshape(v[p], -1)),
                default=0.0)
    if scale == 0.0:
        return {p: xp.zeros(problem.shapes[p]) for p in problem.params}
    s = xp.scalar(scale)
    vhat = {p: v[p] / s for p in problem.params}
    h = xp.scalar(fd_step(problem.digits or 50))

    def grad_at(t: Any) -> dict[str, Any]:
        full = {**problem.inputs, **{p: problem.inputs[p] + t * vhat[p] for p in problem.params}}
        values = {**full, **evaluate(problem.graph, xp, full, outputs=[problem.loss])}
        return params_cotangent(problem, values, None, root=problem.loss)

    def central(step: Any) -> dict[str, Any]:
        up, down = grad_at(step), grad_at(-step)
        return {p: (up[p] - down[p]) / (2 * step) for p in problem.params}

    coarse, fine = central(h), central(h / 2)
    return {p: (4 * fine[p] - coarse[p]) / 3 * s for p in problem.params}


def hessian_vp(problem: CurvatureProblem, v: Any) -> dict[str, Any]:
    r"""The Hessian product :math:`\nabla^2_\theta L\,v` over the selected parameters.

    JAX: forward-over-reverse, ``jax.jvp`` of the gradient computed by back-propagation
    with the ops' hand VJPs (so the hand VJPs are differentiated, not JAX's own). mpmath:
    Richardson-extrapolated central differences of the same hand gradient, step
    :func:`fd_step` from the digits, error bounded by :func:`hessian_fd_tolerance`. NumPy
    (float64 differences would lose half the digits): an :class:`ArgumentError`.
    """
    if problem.backend == "jax":
        fn = cached_jit(problem, ("apply", "hessian"), lambda: lambda inputs, t: _hessian_jax(
            problem, inputs, problem.direction(t)))
        return fn(problem.inputs, v)
    if problem.backend == "mpmath":
        return _hessian_fd(problem, problem.direction(v))
    raise ArgumentError(f"hessian_vp: backend {problem.backend!r} has no second-order mode: "
                        "use 'jax' (forward-over-reverse of the hand gradient) or 'mpmath' "
                        "(extrapolated differences of it)")
