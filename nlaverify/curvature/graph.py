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
namespace. Flat jitted operators, dense matrices and the Hessian product are in
:mod:`nlaverify.curvature.operators`.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import networkx as nx
import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.backends.base import Namespace
from nlaverify.curvature.likelihoods import LOSS_LIKELIHOODS, Likelihood, Reduction, likelihood_of
from nlaverify.errors import ArgumentError, ShapeError, UnknownNameError
from nlaverify.graph.core import _arguments, backprop, check_token_values, evaluate, jvp
from nlaverify.ops.registry import get_op

Kind = Literal["ggn", "fisher", "empirical_fisher", "hessian"]
KINDS: tuple[Kind, ...] = ("ggn", "fisher", "empirical_fisher", "hessian")


@dataclass
class CurvatureProblem:
    r"""A model at a point, ready for curvature products.

    Attributes:
        graph, xp, backend: the graph and the namespace it is evaluated on.
        inputs: the values of every ``input`` and ``param`` node, on the namespace.
        values: the forward values (every node the loss needs, and ``inputs``).
        loss, loss_op: the scalar loss node and its op.
        logits: the node :math:`z` the likelihood is placed on (the loss op's first argument).
        likelihood, reduction: what the loss op stands for (``None`` for a loss op without
            a likelihood interpretation).
        weights: the per-position weights :math:`w` (shape ``z.shape[:-1]``; 0 where the
            target is the ignore-index), from :meth:`Reduction.weights`; ``None`` without a
            likelihood.
        targets: the observed targets :math:`y` (the loss op's second argument), or ``None``.
        params: the selected parameter nodes, in order; the curvature is over these only.
        shapes: their shapes.
    """

    graph: nx.DiGraph
    xp: Namespace
    backend: str
    inputs: dict[str, Any]
    values: dict[str, Any]
    loss: str
    loss_op: str
    logits: str
    likelihood: Likelihood | None
    reduction: Reduction | None
    weights: Any
    targets: Any
    params: tuple[str, ...]
    shapes: dict[str, tuple[int, ...]]
    digits: int | None = None
    cache: dict[Any, Any] = field(default_factory=dict, repr=False)

    @property
    def size(self) -> int:
        """The number :math:`P` of selected scalar parameters."""
        return sum(math.prod(s) for s in self.shapes.values())

    def flatten(self, v: Mapping[str, Any]) -> Any:
        """``{param: array}`` (every selected parameter, its own shape) as one 1-D array of
        :attr:`size` entries, in :attr:`params` order."""
        if not isinstance(v, Mapping):
            raise ArgumentError(f"flatten: argument 'v': expected a mapping from parameter "
                                f"names to arrays, got {type(v).__name__}")
        extra = [k for k in v if k not in self.shapes]
        if extra:
            raise UnknownNameError(f"flatten: {extra[0]!r} is not a selected parameter"
                                   f"{_close(extra[0], self.params)}")
        missing = [p for p in self.params if p not in v]
        if missing:
            raise ArgumentError(f"flatten: no entry for the selected parameter {missing[0]!r}"
                                + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
        xp = self.xp
        parts = []
        for p in self.params:
            got = tuple(int(s) for s in np.shape(v[p]))
            if got != self.shapes[p]:
                raise ShapeError(f"flatten: parameter {p!r}: expected shape {self.shapes[p]}, "
                                 f"got {got}")
            parts.append(xp.reshape(self._convert(v[p]), (-1,)))
        return xp.concat(parts)

    def unflatten(self, vec: Any) -> dict[str, Any]:
        """A 1-D array of :attr:`size` entries as ``{param: array}`` (the selected ones)."""
        got = tuple(int(s) for s in np.shape(vec))
        if got != (self.size,):
            raise ShapeError(f"unflatten: expected a vector of shape ({self.size},) (the "
                             f"{len(self.params)} selected parameters), got shape {got}")
        vec = self._convert(vec)
        out, start = {}, 0
        for p in self.params:
            k = math.prod(self.shapes[p])
            out[p] = self.xp.reshape(vec[start:start + k], self.shapes[p])
            start += k
        return out

    def _convert(self, a: Any) -> Any:
        xp = self.xp
        if xp.object_arrays:  # mpf arrays pass through, floats are converted exactly
            arr = a if isinstance(a, np.ndarray) else np.asarray(a)
            return arr if arr.dtype == object else xp.asarray(arr)
        return xp.asarray(a, dtype=self.values[self.logits].dtype)

    def direction(self, v: Any) -> dict[str, Any]:
        """A direction given as ``{param: array}`` or as a flat vector, checked, as a dict."""
        return self.unflatten(self.flatten(v) if isinstance(v, Mapping) else v)

    def require_likelihood(self, what: str) -> Likelihood:
        """The likelihood, or the :class:`ArgumentError` saying that ``what`` needs one."""
        if self.likelihood is None:
            try:
                likelihood_of(self.loss_op)
            except ArgumentError as exc:
                raise ArgumentError(f"{what}: loss node {self.loss!r} (op {self.loss_op!r}): "
                                    f"{exc}") from None
        assert self.likelihood is not None
        return self.likelihood


def curvature_problem(
    graph: nx.DiGraph, backend: str, params: Mapping[str, Any], data: Mapping[str, Any], *,
    block: int | None = None, select: Sequence[str] | None = None, output: str = "loss",
    dtype: str | None = None, digits: int | None = None,
) -> CurvatureProblem:
    r"""Evaluate ``graph`` on ``backend`` and prepare curvature products of ``output``.

    Args:
        params, data: values of the ``param`` and ``input`` nodes (as for
            :func:`nlaverify.graph.run.run_graph`).
        block: select the parameters of Transformer block ``block`` (node attribute
            ``block``); ``select``: an explicit list of parameter names; default: all.
        output: the scalar loss node.
        dtype, digits: a cast of the floating values; the mpmath precision.

    Raises:
        UnknownNameError: an unknown output node or parameter name.
        ArgumentError: a block that does not exist (the message lists those that do), both
            ``block`` and ``select``, an output that is not an op node, a loss op whose
            other differentiated arguments depend on the selected parameters.
        ShapeError: a loss that is not a scalar; mis-shaped parameters or data.
    """
    from nlaverify.graph.run import graph_inputs

    xp = get_namespace(backend, digits=digits)
    if output not in graph:
        raise UnknownNameError(f"curvature_problem: unknown output node {output!r}"
                               f"{_close(output, list(graph.nodes))}")
    attrs = graph.nodes[output]
    if attrs["kind"] != "op":
        raise ArgumentError(f"curvature_problem: output {output!r}: expected an op node "
                            f"(the loss), got a {attrs['kind']} node")
    if attrs.get("shape") not in (None, ()):  # a declared shape (the builders set one)
        raise ShapeError(f"curvature_problem: output {output!r}: expected a scalar loss, got "
                         f"declared shape {tuple(attrs['shape'])}")
    spec = get_op(attrs["op"])
    args = _arguments(graph, output)
    if spec.args[0].kind != "real":
        raise ArgumentError(f"curvature_problem: loss node {output!r} (op {attrs['op']!r}): "
                            "its first argument is not differentiable, so it has no logits")
    names = _selected(graph, block, select)
    for arg, src in zip(spec.args[1:], args[1:], strict=True):
        if arg.kind == "real" and set(nx.ancestors(graph, src) | {src}) & set(names):
            raise ArgumentError(f"curvature_problem: loss node {output!r}: argument "
                                f"{arg.name!r} (node {src!r}) depends on the selected "
                                "parameters; the curvature is split at the first argument only")
    inputs = graph_inputs(graph, xp, params, data, dtype)
    if backend == "jax":  # one compiled forward (token ids checked on the host first)
        import jax

        check_token_values(graph, inputs)
        forward = jax.jit(lambda i: evaluate(graph, xp, i, outputs=[output]))
        values = {**inputs, **forward(inputs)}
    else:
        values = {**inputs, **evaluate(graph, xp, inputs, outputs=[output])}
    if tuple(np.shape(values[output])) != ():
        raise ShapeError(f"curvature_problem: output {output!r}: expected a scalar loss, got "
                         f"shape {tuple(np.shape(values[output]))}")
    likelihood, reduction = LOSS_LIKELIHOODS.get(attrs["op"], (None, None))
    logits = args[0]
    weights = targets = None
    if likelihood is not None:
        assert reduction is not None
        targets = values[args[1]]
        weights = reduction.weights(xp, _mask(xp, spec, attrs, values[logits], targets))
    shapes = {p: tuple(int(s) for s in np.shape(values[p])) for p in names}
    return CurvatureProblem(graph, xp, backend, inputs, values, output, attrs["op"], logits,
                            likelihood, reduction, weights, targets, names, shapes,
                            xp.digits if backend == "mpmath" else None)


def _selected(graph: nx.DiGraph, block: int | None,
              select: Sequence[str] | None) -> tuple[str, ...]:
    params = [n for n, a in graph.nodes(data=True) if a["kind"] == "param"]
    if block is not None and select is not None:
        raise ArgumentError("curvature_problem: give 'block' or 'select', not both")
    if select is not None:
        if isinstance(select, str):
            raise ArgumentError(f"curvature_problem: argument 'select': expected a list of "
                                f"parameter names, got the string {select!r}")
        for name in select:
            if name not in params:
                raise UnknownNameError(f"curvature_problem: {name!r} is not a parameter node "
                                       f"of the graph{_close(str(name), params)}")
        if len(set(select)) != len(select) or not select:
            raise ArgumentError(f"curvature_problem: argument 'select': expected distinct "
                                f"parameter names, at least one, got {list(select)}")
        return tuple(select)
    if block is None:
        if not params:
            raise ArgumentError("curvature_problem: the graph has no parameter nodes")
        return tuple(params)
    blocks = sorted({b for p in params if (b := graph.nodes[p].get("block")) is not None})
    if isinstance(block, bool) or block not in blocks:
        where = (f"expected one of {', '.join(map(str, blocks))} (the blocks of the graph)"
                 if blocks else "the graph has no blocks")
        raise ArgumentError(f"curvature_problem: block {block!r}: {where}")
    return tuple(p for p in params if graph.nodes[p].get("block") == block)


def _mask(xp: Namespace, spec: Any, attrs: Mapping[str, Any], z: Any, targets: Any) -> Any:
    """The 0/1 mask of positions with a target: the loss op's ignore-index where its
    targets are token ids, else every position of ``z.shape[:-1]``."""
    arg = spec.args[1]
    ignore = attrs["static"].get("ignore_index", arg.ignore)
    if arg.kind == "tokens" and ignore is not None:
        hit = targets != ignore
        return xp.asarray(np.asarray(hit).astype(int)) if xp.object_arrays else \
            xp.astype(hit, z.dtype)
    shape = tuple(np.shape(z))[:-1]
    return xp.ones(shape) if xp.object_arrays else xp.ones(shape, dtype=z.dtype)


def _close(name: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(names), n=3)
    return f" (did you mean {', '.join(map(repr, close))}?)" if close else ""


# ----------------------------------------------------------------------------------------
# Jacobian products: forward mode to the logits, reverse mode from them
# ----------------------------------------------------------------------------------------

def logits_tangent(problem: CurvatureProblem, values: Mapping[str, Any],
                   v: Mapping[str, Any]) -> Any:
    """:math:`J v` at ``values`` (the graph's forward mode); 0 where nothing is reached."""
    seeds = {p: t for p, t in v.items() if p in values}
    tan = jvp(problem.graph, problem.xp, values, seeds, outputs=[problem.logits])
    z = values[problem.logits]
    return tan[problem.logits] if problem.logits in tan else problem.xp.zeros_like(z)


def params_cotangent(problem: CurvatureProblem, values: Mapping[str, Any], u: Any,
                     root: str | None = None) -> dict[str, Any]:
    r""":math:`J^\top u` at ``values``: back-propagation from ``root`` (default the logits
    node) seeded with ``u``; 0 for a parameter the root does not depend on."""
    cot = backprop(problem.graph, problem.xp, values, root or problem.logits, seed=u)
    return {p: cot[p] if p in cot else problem.xp.zeros_like(values[p]) for p in problem.params}


def forward_values(problem: CurvatureProblem, root: str | None = None) -> dict[str, Any]:
    """The values a product reads: the ancestors of ``root`` (default the logits node) and
    the selected parameters (passed to the jitted functions as arguments, not constants)."""
    from nlaverify.graph.core import needed_nodes

    key = ("values", root or problem.logits)
    if key not in problem.cache:
        keep = set(needed_nodes(problem.graph, [key[1]])) | set(problem.params)
        problem.cache[key] = {k: v for k, v in problem.values.items() if k in keep}
    return problem.cache[key]


def cached_jit(problem: CurvatureProblem, key: Any, build: Any) -> Any:
    """``jax.jit(build())``, compiled once per problem and ``key``."""
    if key not in problem.cache:
        import jax

        problem.cache[key] = jax.jit(build())
    return problem.cache[key]


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


def hessian_vp(problem: CurvatureProblem, v: Any) -> dict[str, Any]:
    r"""The Hessian product :math:`\nabla^2_\theta L\,v`: see
    :func:`nlaverify.curvature.operators.hessian_vp`."""
    from nlaverify.curvature.operators import hessian_vp as _hvp

    return _hvp(problem, v)
