r"""A model at a point, ready for curvature products (Baggag & Saad §5.1–5.2).

:func:`curvature_problem` evaluates the graph once and returns a :class:`CurvatureProblem`:
the forward values, the loss node :math:`L`, the *logits* node :math:`z` the likelihood is
placed on (the loss op's first argument), the per-position weights :math:`w` of the loss's
:class:`~nlaverify.curvature.likelihoods.Reduction` and the selected parameters. Here too are
the two Jacobian passes every product is made of: :func:`logits_tangent` (:math:`J v`, the
graph's forward mode) and :func:`params_cotangent` (:math:`J^\top u`, back-propagation), and
the per-problem caches (:func:`forward_values`, :func:`cached_jit`). The products themselves
are in :mod:`nlaverify.curvature.graph`, the Hessian product in
:mod:`nlaverify.curvature.hessian`, dense matrices and flat operators in
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
