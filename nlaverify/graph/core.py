"""Evaluation, forward-mode (JVP) and reverse-mode back-propagation over a computational
graph.

Baggag & Saad §2.6: evaluate the nodes in topological order, then walk the
reverse order; a node's error is the sum over its consumers of their
cotangents (the chain rule over out-edges),

.. math:: \\delta_k = \\sum_{i \\in \\operatorname{out}(k)} \\delta_i
          \\frac{\\partial a_i}{\\partial a_k}.

Forward mode walks the topological order once more, each op's tangent the sum over its
in-edges of its JVP (:func:`jvp`):

.. math:: \\dot a_i = \\sum_{k \\in \\operatorname{in}(i)} \\frac{\\partial a_i}{\\partial a_k}
          \\dot a_k.

Nodes: ``kind="input"`` or ``"param"`` (values given by the caller) or ``kind="op"`` with
``op`` (a name in :data:`nlaverify.ops.registry.OPS`) and ``static`` keyword
arguments; an edge ``u -> v`` carries ``pos``, the argument position of ``u`` in
``v``'s op.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import networkx as nx
import numpy as np

from nlaverify.backends.base import Namespace
from nlaverify.errors import DTypeError, NlaverifyError, ShapeError, UnknownNameError
from nlaverify.ops.registry import get_op


def add_input(graph: nx.DiGraph, name: str, shape: tuple[int, ...] | None = None) -> str:
    """Add an input (or parameter) node; returns its name."""
    graph.add_node(name, kind="input", shape=shape)
    return name


def add_op(graph: nx.DiGraph, name: str, op: str, inputs: list[str], **static: Any) -> str:
    """Add an op node computing ``op(*inputs, **static)``; returns its name."""
    spec = get_op(op)
    if len(inputs) != len(spec.args):
        raise ShapeError(f"node {name!r}: op {op!r} takes {len(spec.args)} arguments "
                         f"({', '.join(a.name for a in spec.args)}), got {len(inputs)}")
    for src in inputs:
        if src not in graph:
            raise UnknownNameError(f"node {name!r}: unknown input node {src!r}")
    graph.add_node(name, kind="op", op=op, static=dict(static))
    for pos, src in enumerate(inputs):
        graph.add_edge(src, name, pos=pos)
    return name


def _arguments(graph: nx.DiGraph, node: str) -> list[str]:
    preds = sorted(graph.in_edges(node, data="pos"), key=lambda e: e[2])
    return [u for u, _, _ in preds]


def needed_nodes(graph: nx.DiGraph, outputs: Sequence[str] | None,
                 overrides: Mapping[str, Any] = ()) -> list[str]:
    """Nodes to evaluate, in topological order: all, or the ancestors of ``outputs``
    (the walk stops at overridden nodes, whose values are given)."""
    order = list(nx.topological_sort(graph))
    if outputs is None:
        return order
    keep: set[str] = set()
    stack = list(outputs)
    while stack:
        node = stack.pop()
        if node in keep:
            continue
        if node not in graph:
            raise UnknownNameError(f"evaluate: unknown output node {node!r}")
        keep.add(node)
        if node not in overrides:
            stack.extend(graph.predecessors(node))
    return [n for n in order if n in keep]


def check_inputs(graph: nx.DiGraph, inputs: Mapping[str, Any]) -> None:
    """Check the values given for a graph's ``input`` and ``param`` nodes.

    Every key must name such a node (a misspelled or extra key is an error, with the close
    names); a parameter must have exactly its declared shape; an input its declared shape
    after any leading batch dimensions, with the sequence length ``"n"`` the same for all
    inputs. Raises :class:`UnknownNameError` or :class:`ShapeError` naming the node.
    """
    import difflib

    leaves = [n for n, a in graph.nodes(data=True) if a["kind"] in ("input", "param")]
    for key in inputs:
        if key not in graph or graph.nodes[key]["kind"] not in ("input", "param"):
            close = difflib.get_close_matches(str(key), leaves, n=3)
            hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
            raise UnknownNameError(f"evaluate: {key!r} is not an input or parameter node of "
                                   f"the graph{hint}")
    bound: dict[str, tuple[str, int]] = {}
    for node in leaves:
        attrs = graph.nodes[node]
        declared = attrs.get("shape")
        if node not in inputs or declared is None:
            continue
        value = inputs[node]
        try:
            actual = tuple(int(s) for s in getattr(value, "shape", np.shape(value)))
        except (TypeError, ValueError):  # ragged lists, strings, objects without a shape
            raise ShapeError(f"{attrs['kind']} node {node!r}: expected an array of shape "
                             f"{tuple(declared)}, got a {type(value).__name__}") from None
        ok = len(actual) == len(declared) if attrs["kind"] == "param" else \
            len(actual) >= len(declared)
        tail = actual[len(actual) - len(declared):] if ok else ()
        for want, got in zip(declared, tail, strict=True) if ok else ():
            if isinstance(want, str):
                if want in bound and bound[want][1] != got:
                    ok = False
                bound.setdefault(want, (node, got))
            elif want != got:
                ok = False
        if not ok:
            kind = "parameter" if attrs["kind"] == "param" else "input"
            shape = "(" + ", ".join(f"{d}={bound[d][1]}" if isinstance(d, str) and d in bound
                                    else str(d) for d in declared) + ("," if len(declared) == 1
                                                                      else "") + ")"
            batch = "" if attrs["kind"] == "param" else " after any batch dimensions"
            raise ShapeError(f"{kind} node {node!r}: expected shape {shape}{batch}, got "
                             f"{actual}")


def token_arguments(graph: nx.DiGraph) -> list[tuple[str, str, Any, int]]:
    """``(input node, op name, Arg, V)`` for every ``tokens``-kind op argument fed by a node,
    ``V`` read from the declared shape of the op's argument that carries the vocabulary."""
    found = []
    for node, attrs in graph.nodes(data=True):
        if attrs["kind"] != "op":
            continue
        spec = get_op(attrs["op"])
        srcs = _arguments(graph, node)
        for arg, src in zip(spec.args, srcs, strict=True):
            if arg.kind != "tokens":
                continue
            for other, other_src in zip(spec.args, srcs, strict=True):
                shape = graph.nodes[other_src].get("shape")
                if "V" in other.dims and shape:
                    vocab = int(shape[len(shape) - len(other.dims) + other.dims.index("V")])
                    found.append((src, spec.name, arg, vocab))
                    break
    return found


def check_token_values(graph: nx.DiGraph, inputs: Mapping[str, Any],
                       arguments: list[tuple[str, str, Any, int]] | None = None) -> None:
    """Check, on the host, the values of the integer inputs that feed ``tokens``-kind op
    arguments: ids in ``[0, V)``, or the argument's ignore-index, with at least one target
    left. The ops check the same when their inputs are concrete; under ``jax.jit`` they
    cannot, so the lowered function calls this before the jitted call (an out-of-range id
    would otherwise wrap or gather garbage). ``arguments``: :func:`token_arguments`, when
    already computed."""
    from nlaverify.backends import get_namespace
    from nlaverify.backends.host import to_host
    from nlaverify.ops._validate import check_tokens

    host = get_namespace("numpy")
    for src, op, arg, vocab in token_arguments(graph) if arguments is None else arguments:
        if src not in inputs:
            continue
        values = to_host(inputs[src])
        try:
            check_tokens(op, host, arg.name, values, vocab, ignore=arg.ignore)
        except NlaverifyError as exc:
            raise type(exc)(f"input node {src!r}: {exc}") from exc
        if arg.ignore is not None and not (values != arg.ignore).any():
            raise ShapeError(f"input node {src!r}: expected at least one target that is "
                             f"not the ignore-index {arg.ignore}, got none")


def evaluate(
    graph: nx.DiGraph, xp: Namespace, inputs: Mapping[str, Any], *,
    outputs: Sequence[str] | None = None, overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Values of the nodes, computed in ``networkx.topological_sort`` order.

    Args:
        inputs: values of the ``input`` and ``param`` nodes.
        outputs: compute only these nodes and what they need (default: every node).
        overrides: values imposed on nodes (their own inputs are then not needed).
    """
    overrides = dict(overrides or {})
    check_inputs(graph, inputs)
    values: dict[str, Any] = {}
    for node in needed_nodes(graph, outputs, overrides):
        attrs = graph.nodes[node]
        if node in overrides:
            values[node] = overrides[node]
            continue
        if attrs["kind"] in ("input", "param"):
            if node not in inputs:
                raise UnknownNameError(f"evaluate: no value given for {attrs['kind']} node "
                                       f"{node!r}")
            values[node] = inputs[node]
            continue
        spec = get_op(attrs["op"])
        args = [values[u] for u in _arguments(graph, node)]
        try:
            values[node] = spec.forward(xp, *args, **attrs["static"])
        except NlaverifyError as exc:  # say which node, keep the error's type
            raise type(exc)(f"node {node!r}: {exc}") from exc
        except Exception as exc:  # any other failure: keep it as it is, and name the node
            exc.add_note(f"at graph node {node!r} (op {attrs['op']!r}, forward)")
            raise
    return values


def backprop(
    graph: nx.DiGraph, xp: Namespace, values: Mapping[str, Any], output: str, seed: Any = None,
    contributions: dict[tuple[str, str], Any] | None = None,
) -> dict[str, Any]:
    """Cotangents (errors :math:`\\delta`) of every node that ``output`` depends on.

    Args:
        values: the result of :func:`evaluate`.
        output: the root; its cotangent is ``seed`` (default 1, i.e. :math:`\\delta_n = 1`).
        contributions: if given, filled with ``{(consumer, input): cotangent}``, what each
            op's VJP sent along each in-edge (used to locate a faulty VJP).
    """
    ones = xp.ones_like(values[output]) if seed is None else seed
    cot: dict[str, Any] = {output: ones}
    order = needed_nodes(graph, [output])
    for node in reversed(order):
        attrs = graph.nodes[node]
        if attrs["kind"] != "op" or node not in cot:
            continue
        spec = get_op(attrs["op"])
        arg_nodes = _arguments(graph, node)
        args = [values[u] for u in arg_nodes]
        try:
            grads = tuple(spec.vjp(xp, cot[node], *args, **attrs["static"]))
        except NlaverifyError as exc:
            raise type(exc)(f"node {node!r}: {exc}") from exc
        except Exception as exc:
            exc.add_note(f"at graph node {node!r} (op {attrs['op']!r}, VJP)")
            raise
        real = [(arg, src) for arg, src in zip(spec.args, arg_nodes, strict=True)
                if arg.kind == "real"]
        if len(grads) != len(real):
            raise ShapeError(f"node {node!r}: the VJP of {attrs['op']!r} returned {len(grads)} "
                             f"cotangents, expected {len(real)} (one per real argument)")
        for (arg, src), g in zip(real, grads, strict=True):
            if tuple(np.shape(g)) != tuple(np.shape(values[src])):
                raise ShapeError(f"node {node!r}: cotangent for argument {arg.name!r} (node "
                                 f"{src!r}): expected shape {tuple(np.shape(values[src]))}, "
                                 f"got {tuple(np.shape(g))}")
            if contributions is not None:
                contributions[(node, src)] = g
            cot[src] = g if src not in cot else cot[src] + g
    return cot


def jvp(
    graph: nx.DiGraph, xp: Namespace, values: Mapping[str, Any], tangents: Mapping[str, Any],
    *, outputs: Sequence[str] | None = None,
) -> dict[str, Any]:
    r"""Forward mode: the tangent :math:`\dot a_v = \sum_k (\partial a_v/\partial a_k)\,
    \dot a_k` of every node that depends on the seeded nodes, by the ops' proved JVPs.

    Args:
        values: the result of :func:`evaluate` (every node that ``outputs`` needs).
        tangents: ``{node: tangent}``, the seeds (typically parameter directions
            :math:`v`); a node not seeded and not downstream of a seed has tangent 0 and is
            left out of the result (its consumers' JVPs receive ``None``). A seed on an op
            node *replaces* that node's tangent (as an override in :func:`evaluate`
            replaces its value): what flows into it from upstream seeds is not added.
            Integer nodes (token ids) have no tangent: seeding one is an error.
        outputs: propagate only to these nodes and what they need (default: every node).

    Returns:
        ``{node: tangent}`` for the seeds and every node they reach; Jacobian-vector
        products :math:`J v` are read at the output nodes.
    """
    for node, t in tangents.items():
        if node not in graph:
            raise UnknownNameError(f"jvp: unknown tangent node {node!r}")
        if node not in values:
            raise UnknownNameError(f"jvp: tangent node {node!r} has no value (evaluate it)")
        kind = getattr(getattr(values[node], "dtype", None), "kind", None)
        if kind in ("i", "u", "b"):
            raise DTypeError(f"jvp: node {node!r} holds integers ({values[node].dtype}): token "
                             "ids are not differentiated, so they take no tangent")
        if tuple(np.shape(t)) != tuple(np.shape(values[node])):
            raise ShapeError(f"jvp: tangent of node {node!r}: expected shape "
                             f"{tuple(np.shape(values[node]))}, got {tuple(np.shape(t))}")
    tan: dict[str, Any] = dict(tangents)
    for node in needed_nodes(graph, outputs):
        attrs = graph.nodes[node]
        if attrs["kind"] != "op" or node in tangents:
            continue
        spec = get_op(attrs["op"])
        arg_nodes = _arguments(graph, node)
        dargs = tuple(tan.get(src) for arg, src in zip(spec.args, arg_nodes, strict=True)
                      if arg.kind == "real")
        if all(t is None for t in dargs):
            continue
        rule = spec.jvp
        if rule is None:
            raise UnknownNameError(f"node {node!r}: op {attrs['op']!r} has no JVP")
        args = [values[u] for u in arg_nodes]
        try:
            out = rule(xp, dargs, *args, **attrs["static"])
        except NlaverifyError as exc:
            raise type(exc)(f"node {node!r}: {exc}") from exc
        except Exception as exc:
            exc.add_note(f"at graph node {node!r} (op {attrs['op']!r}, JVP)")
            raise
        if tuple(np.shape(out)) != tuple(np.shape(values[node])):
            raise ShapeError(f"node {node!r}: the JVP of {attrs['op']!r} returned shape "
                             f"{tuple(np.shape(out))}, expected {tuple(np.shape(values[node]))}")
        tan[node] = out
    return tan
