r"""Curvature of a model held as a graph: Jacobian products and the GGN, Fisher and
empirical-Fisher products (Baggag & Saad §5.1–5.2).

A model at a point is a :class:`CurvatureProblem`: the graph evaluated once, the loss node
:math:`L`, and the node :math:`z` whose output the likelihood is placed on, the *logits*
node (the first argument of the loss op: ``logits``, or ``logits_tempered`` under a
temperature). Split there, :math:`L(\theta) = \sum_i w_i\,\ell(z_i(\theta), y_i)` over the
positions :math:`i` (every leading axis of :math:`z`), with the weights :math:`w` of the
loss op's :class:`~nlaverify.curvature.likelihoods.Reduction` (the convention is stated
once, there). With :math:`J_i = \partial z_i/\partial\theta`:

.. math::
    G v &= \sum_i w_i\,J_i^\top H(z_i)\,J_i v  &&\text{(GGN, } H = \nabla_z^2\ell),\\
    F v &= \sum_i w_i\,J_i^\top\,\mathbb E_{y\sim p(\cdot\mid z_i)}
           [\nabla\ell\,\nabla\ell^\top]\,J_i v &&\text{(Fisher)},\\
    \hat F v &= \sum_i w_i\,J_i^\top\,\nabla\ell(z_i, y_i)\nabla\ell(z_i, y_i)^\top J_i v
           &&\text{(empirical Fisher, observed } y_i).

Each product is one forward-mode pass :math:`J v` (:func:`nlaverify.graph.core.jvp`, the
ops' hand JVPs), a map in logit space, and one reverse-mode pass :math:`J^\top u` from the
logits node (:func:`nlaverify.graph.core.backprop`, the ops' hand VJPs), sharing the one
forward evaluation held by the problem. No loop over positions: the logit-space maps act on
the whole ``(*, C)`` array. The likelihoods are canonical (natural parameter :math:`z`), so
:math:`\mathbb E[\nabla\ell\nabla\ell^\top] = H` and the exact Fisher product *is* the GGN
product through :meth:`Likelihood.hvp` (identity ``ggn_equals_fisher_*``); the dense exact
Fisher is assembled along another route, from :meth:`Likelihood.hessian_sqrt` factors
(:func:`nlaverify.curvature.operators.dense`). The Monte-Carlo Fisher draws
:math:`y_s \sim p(\cdot\mid z)` by :meth:`Likelihood.sample` from seeded noise.

*A loss with no likelihood* (an output op not in
:data:`~nlaverify.curvature.likelihoods.LOSS_LIKELIHOODS`): the problem is still built,
since the Hessian and, on JAX, the GGN are defined for any twice-differentiable scalar loss
(:math:`H_L` is then the forward-mode derivative of the loss op's own VJP in its first
argument); the Fisher, Monte-Carlo Fisher and empirical Fisher need a likelihood and raise
an :class:`~nlaverify.errors.ArgumentError` naming the node and op when asked for.

On JAX every product is one ``jax.jit`` per kind, compiled once per problem (cached on it;
the forward values are its arguments, so a call is one JVP, one map and one VJP, and a
caller's own ``jax.jit`` can wrap it); on NumPy and mpmath the products run eagerly on the
namespace. The problem itself is built in :mod:`nlaverify.curvature.problem`, the Hessian
product is in :mod:`nlaverify.curvature.hessian`, flat jitted operators and dense matrices in
:mod:`nlaverify.curvature.operators`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.backends.base import Namespace
from nlaverify.curvature.hessian import hessian_vp
from nlaverify.curvature.problem import (
    KINDS,
    CurvatureProblem,
    Kind,
    cached_jit,
    curvature_problem,
    forward_values,
    logits_tangent,
    params_cotangent,
)
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.graph.core import _arguments
from nlaverify.ops.registry import get_op

__all__ = [
    "KINDS",
    "CurvatureProblem",
    "Kind",
    "cached_jit",
    "curvature_problem",
    "draw_noise",
    "empirical_fisher_vp",
    "fisher_vp",
    "forward_values",
    "ggn_vp",
    "gradient",
    "hessian_vp",
    "jacobian_tvp",
    "jacobian_vp",
    "logits_tangent",
    "loss_hessian_vp",
    "observed_gradients",
    "outer_map",
    "params_cotangent",
    "product",
    "sampled_gradients",
]


def _run(problem: CurvatureProblem, key: str, f: Any, arg: Any, root: str | None = None) -> Any:
    """``f(values, arg)``: jitted once per problem on JAX, eager elsewhere."""
    if problem.backend != "jax":
        return f(problem.values, arg)
    return cached_jit(problem, key, lambda: f)(forward_values(problem, root), arg)


def jacobian_vp(problem: CurvatureProblem, v: Any) -> Any:
    r""":math:`J v = \sum_p (\partial z/\partial\theta_p)\,v_p`, the logits' tangent along
    ``v`` (a dict or a flat vector), by the graph's forward mode (the ops' hand JVPs)."""
    return _run(problem, "jvp", lambda values, t: logits_tangent(problem, values, t),
                problem.direction(v))


def jacobian_tvp(problem: CurvatureProblem, u: Any) -> dict[str, Any]:
    r""":math:`J^\top u` for a cotangent ``u`` of the logits' shape, by reverse mode from the
    logits node (the ops' hand VJPs); a dict over the selected parameters."""
    z = problem.values[problem.logits]
    got = tuple(int(s) for s in np.shape(u))
    if got != tuple(np.shape(z)):
        raise ShapeError(f"jacobian_tvp: argument 'u': expected the shape of the logits node "
                         f"{problem.logits!r}, {tuple(np.shape(z))}, got {got}")
    return _run(problem, "vjp", lambda values, c: params_cotangent(problem, values, c),
                problem._convert(u))


def gradient(problem: CurvatureProblem) -> dict[str, Any]:
    r""":math:`\nabla_\theta L` over the selected parameters by back-propagation from the
    loss with the ops' hand VJPs (Baggag & Saad §2.6)."""
    return _run(problem, "gradient", lambda values, _: params_cotangent(
        problem, values, None, root=problem.loss), None, root=problem.loss)


# ----------------------------------------------------------------------------------------
# The maps in logit space and the products
# ----------------------------------------------------------------------------------------

def loss_hessian_vp(problem: CurvatureProblem, values: Mapping[str, Any], weights: Any,
                    t: Any) -> Any:
    r""":math:`H_L t`, the Hessian of the loss node in the logits applied to ``t`` (shape of
    ``z``): :math:`(H_L t)_i = w_i\,H(z_i)\,t_i` through :meth:`Likelihood.hvp`. A loss op
    without a likelihood: JAX's forward mode of the op's own VJP in its first argument."""
    xp, z = problem.xp, values[problem.logits]
    if problem.likelihood is not None:
        return weights[..., None] * problem.likelihood.hvp(xp, z, t)
    if problem.backend != "jax":
        raise ArgumentError(
            f"GGN: loss node {problem.loss!r} (op {problem.loss_op!r}) has no likelihood, so "
            f"its Hessian in the logits comes from differentiating its VJP, which only the "
            f"'jax' backend does (got {problem.backend!r})")
    import jax

    attrs = problem.graph.nodes[problem.loss]
    spec = get_op(problem.loss_op)
    rest = [values[u] for u in _arguments(problem.graph, problem.loss)[1:]]
    one = xp.ones_like(problem.values[problem.loss])  # a concrete scalar

    def dloss(zz: Any) -> Any:
        return spec.vjp(xp, one, zz, *rest, **attrs["static"])[0]

    return jax.jvp(dloss, (z,), (t,))[1]


def sampled_gradients(problem: CurvatureProblem, z: Any, noise: Any,
                      xp: Namespace | None = None) -> Any:
    r""":math:`\nabla_z\ell(z, y_s)` for :math:`y_s\sim p(\cdot\mid z)` drawn by
    :meth:`Likelihood.sample` from ``noise`` of shape ``(S, *z.shape)``: shape
    ``(S, *z.shape)``. ``xp``: the namespace of ``z`` (default the problem's). Object
    backends (no ``argmax``) draw on the host in float64."""
    xp = xp or problem.xp
    lik = problem.require_likelihood("Monte-Carlo Fisher")
    zb = xp.zeros(np.shape(noise)) + z if xp.object_arrays else xp.zeros_like(noise) + z
    if xp.object_arrays:
        from nlaverify.backends import to_float64

        host = get_namespace("numpy")
        y = lik.sample(host, to_float64(zb), noise)
        y = y if lik.family == "categorical" else xp.asarray(y)
    else:
        y = lik.sample(xp, zb, noise)
    return lik.grad(xp, zb, y)


def observed_gradients(problem: CurvatureProblem, z: Any, xp: Namespace | None = None) -> Any:
    r""":math:`\nabla_z\ell(z_i, y_i)` at the observed targets, shape ``(1, *z.shape)``."""
    from nlaverify.backends import to_host

    lik = problem.require_likelihood("empirical Fisher")
    targets = problem.targets if xp is None else to_host(problem.targets)
    return lik.grad(xp or problem.xp, z, targets)[None]


def outer_map(problem: CurvatureProblem, weights: Any, g: Any, t: Any) -> Any:
    r""":math:`u_i = \tfrac1S \sum_s w_i\,g_{s,i}\,\langle g_{s,i}, t_i\rangle` for gradients
    ``g`` of shape ``(S, *z.shape)``: the logit-space map of the (sampled or empirical)
    Fisher."""
    xp = problem.xp
    a = xp.sum(g * t, axis=-1)
    return xp.sum((weights * a)[..., None] * g, axis=0) / g.shape[0]


def product(problem: CurvatureProblem, kind: Kind, values: Mapping[str, Any], weights: Any,
            v: Mapping[str, Any], noise: Any = None) -> dict[str, Any]:
    r"""The product of curvature ``kind`` (not the Hessian) with ``v`` at ``values``:
    :math:`J^\top M J v` with :math:`M` the logit-space map. ``noise`` (``(S, *z.shape)``)
    makes the Fisher the Monte-Carlo one. A pure function of its arguments: the JAX path
    traces it inside ``jax.jit``."""
    t = logits_tangent(problem, values, v)
    z = values[problem.logits]
    if kind == "ggn" or (kind == "fisher" and noise is None):
        if kind == "fisher":
            problem.require_likelihood("Fisher")
        u = loss_hessian_vp(problem, values, weights, t)
    elif kind == "fisher":
        u = outer_map(problem, weights, sampled_gradients(problem, z, noise), t)
    elif kind == "empirical_fisher":
        u = outer_map(problem, weights, observed_gradients(problem, z), t)
    else:
        raise ArgumentError(f"product: kind {kind!r}: expected one of ggn, fisher, "
                            "empirical_fisher")
    return params_cotangent(problem, values, u)


def draw_noise(problem: CurvatureProblem, samples: int, seed: int) -> Any:
    """The noise of ``samples`` draws of :meth:`Likelihood.sample`, shape
    ``(samples, *z.shape)``: ``jax.random.key(seed)`` on JAX, else NumPy's
    ``default_rng(seed)`` (kept on the host for object backends)."""
    lik = problem.require_likelihood("Monte-Carlo Fisher")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ArgumentError(f"Monte-Carlo Fisher: argument 'samples': expected a positive "
                            f"integer, got {samples!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ArgumentError(f"Monte-Carlo Fisher: argument 'seed': expected an integer, got "
                            f"{seed!r}")
    z = problem.values[problem.logits]
    shape = (samples, *tuple(np.shape(z)))
    normal = lik.noise_kind() == "normal"
    if problem.backend == "jax":
        import jax

        key = jax.random.key(int(seed))
        return (jax.random.normal(key, shape, dtype=z.dtype) if normal else
                jax.random.uniform(key, shape, dtype=z.dtype, minval=np.finfo(np.float64).tiny))
    rng = np.random.default_rng(int(seed))
    host = rng.standard_normal(shape) if normal else rng.random(shape)
    return host if problem.xp.object_arrays else problem.xp.asarray(host, dtype=z.dtype)


def _apply(problem: CurvatureProblem, kind: Kind, v: Any, samples: int | None = None,
           seed: int = 0) -> dict[str, Any]:
    noise = None if samples is None else draw_noise(problem, samples, seed)
    if problem.backend != "jax":
        return product(problem, kind, problem.values, problem.weights, problem.direction(v),
                       noise)
    # one compilation per kind, the direction checked and converted inside (at trace time);
    # the exact Fisher product is the GGN one (canonical likelihoods)
    same = "ggn" if kind == "fisher" and noise is None else kind
    fn = cached_jit(problem, ("apply", same), lambda: lambda values, weights, eps, t: product(
        problem, same, values, weights, problem.direction(t), eps))
    return fn(forward_values(problem), problem.weights, noise, v)


def ggn_vp(problem: CurvatureProblem, v: Any) -> dict[str, Any]:
    r"""The generalized Gauss–Newton product :math:`G v = J^\top H_L J v`,
    :math:`H_L = \sum_i w_i H(z_i)` the Hessian of the loss node in the logits (Baggag &
    Saad §5.2). ``v``: ``{param: array}`` or a flat vector; returns a dict."""
    return _apply(problem, "ggn", v)


def fisher_vp(problem: CurvatureProblem, v: Any, *, samples: int | None = None,
              seed: int = 0) -> dict[str, Any]:
    r"""The Fisher product (Baggag & Saad §5.1). Exact (``samples=None``):
    :math:`F v = \sum_i w_i J_i^\top H(z_i) J_i v`, since
    :math:`\mathbb E_y[\nabla\ell\nabla\ell^\top] = H` in the natural parameter. Monte Carlo
    (``samples=S``): :math:`\tfrac1S\sum_s\sum_i w_i J_i^\top g_{s,i} g_{s,i}^\top J_i v`,
    :math:`g_{s,i} = \nabla\ell(z_i, y_{s,i})`, :math:`y_s \sim p(\cdot\mid z)` from the
    generator seeded by ``seed`` (:func:`draw_noise`). Needs a likelihood."""
    problem.require_likelihood("Fisher")
    return _apply(problem, "fisher", v, samples, seed)


def empirical_fisher_vp(problem: CurvatureProblem, v: Any) -> dict[str, Any]:
    r"""The empirical Fisher product :math:`\sum_i w_i J_i^\top \nabla\ell_i\nabla\ell_i^\top
    J_i v` at the observed targets (Baggag & Saad §5.1; not a curvature in general)."""
    problem.require_likelihood("empirical Fisher")
    return _apply(problem, "empirical_fisher", v)
