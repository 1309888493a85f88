"""Node-by-node comparison of two graph evaluations, judged by the tolerance model.

Values are compared in topological order and the first divergent node is
reported. Cotangents are compared too; when some diverge, the faulty VJP is
located exactly: walking the reverse topological order (the order of
back-propagation), it is the first op whose *received* cotangent agrees with the
reference while a cotangent it *sends* to one of its inputs does not, among the ops whose
values (and their arguments') agree: cotangents computed on diverged values are blamed on
the first divergent value, not on a VJP.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field
from typing import Any

import networkx as nx
import numpy as np

from nlaverify.graph.core import _arguments
from nlaverify.graph.run import Evaluation
from nlaverify.ops.registry import get_op
from nlaverify.tolerance import Tolerance, magnitude_condition, tolerance


@dataclass(frozen=True)
class NodeRow:
    """Errors of one node: normwise error and bound, for its value and its cotangent."""

    node: str
    op: str
    value_error: float
    value_bound: float
    cot_error: float | None
    cot_bound: float | None

    @property
    def ok(self) -> bool:
        return self.value_error <= self.value_bound and (
            self.cot_error is None or self.cot_error <= (self.cot_bound or 0.0))


@dataclass
class GraphComparison:
    """The outcome of :func:`compare`."""

    subject: str
    reference: str
    rows: list[NodeRow] = field(default_factory=list)
    first_value_divergence: str | None = None
    #: the first node, in back-propagation (reverse topological) order, whose cotangent diverges
    first_cotangent_divergence: str | None = None
    faulty_vjp: str | None = None
    #: a node whose cotangent is not the sum of the contributions its consumers sent
    faulty_accumulation: str | None = None

    @property
    def ok(self) -> bool:
        return self.faulty_accumulation is None and all(r.ok for r in self.rows)

    def worst(self) -> float:
        """Largest error/bound ratio over all nodes (<= 1 means every check passed)."""
        ratios = [r.value_error / r.value_bound for r in self.rows]
        ratios += [r.cot_error / r.cot_bound for r in self.rows if r.cot_error is not None
                   and r.cot_bound]
        return max(ratios, default=0.0)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        return d


def accumulation_length(graph: nx.DiGraph, n: int) -> int:
    """The longest accumulation in the graph: its largest dimension (or ``n``)."""
    dims = [n]
    for _, a in graph.nodes(data=True):
        dims += [int(s) if s != "n" else n for s in a.get("shape") or ()]
    return max(dims)


def node_depths(graph: nx.DiGraph) -> dict[str, int]:
    """Longest path from an input to each node, in nodes: the depth :math:`D` of the
    tolerance model for the node's value (its cotangent's is :math:`2D_{out} - D + 1`)."""
    depth: dict[str, int] = {}
    for node in nx.topological_sort(graph):
        preds = list(graph.predecessors(node))
        depth[node] = 1 + max((depth[p] for p in preds), default=0)
    return depth


def _dtype(a: Evaluation, b: Evaluation) -> str:
    order = {"float16": 0, "bfloat16": 0, "float32": 1, "float64": 2, "mpmath": 3}
    return min(a.dtype, b.dtype, key=lambda d: order.get(d, 2))


def node_tolerance(dtype: str, k: int, depth: int, ref: Any) -> Tolerance:
    """The tolerance of one node: ``dtype``, accumulation length ``k``, depth ``depth`` and
    the magnitude condition of the reference value ``ref``."""
    return tolerance(dtype, size=k, depth=depth, condition=magnitude_condition(ref, power=1))


def compare(
    graph: nx.DiGraph, subject: Evaluation, reference: Evaluation, *, output: str = "loss",
    local_reference: Callable[[str], dict[str, Any]] | None = None,
) -> GraphComparison:
    """Compare ``subject`` with ``reference`` node by node.

    Args:
        local_reference: for an op node, the reference cotangents it sends to its inputs
            (``{input: cotangent}``); default: ``reference.contributions``, or, when the
            reference recorded none (JAX autodiff), :func:`jax_local_reference`.
    """
    shape = tuple(getattr(subject.values.get("tokens"), "shape", (1,)))
    n = int(shape[-1]) if shape else 1
    rows = int(np.prod(shape)) if shape else 1  # weight gradients sum over batch x sequence
    k = max(accumulation_length(graph, n), rows)
    depth = node_depths(graph)
    d_out = depth.get(output, max(depth.values()))
    dtype = _dtype(subject, reference)
    result = GraphComparison(subject.label, reference.label)
    cot_bad: set[str] = set()
    val_bad: set[str] = set()
    cot_tol: dict[str, Tolerance] = {}
    for node in nx.topological_sort(graph):
        attrs = graph.nodes[node]
        if node not in subject.values or node not in reference.values:
            continue
        if attrs.get("dtype") == "int":
            continue
        vt = node_tolerance(dtype, k, depth[node], reference.values[node])
        vc = vt.compare(subject.values[node], reference.values[node])
        if not vc.ok:
            val_bad.add(node)
            if result.first_value_divergence is None:
                result.first_value_divergence = node
        ce = cb = None
        if node in reference.cotangents and node in subject.cotangents:
            ct = node_tolerance(dtype, k, 2 * d_out - depth[node] + 1, reference.values[node])
            cc = ct.compare(subject.cotangents[node], reference.cotangents[node])
            cot_tol[node] = ct
            ce, cb = cc.normwise, ct.rtol
            if not cc.ok:
                cot_bad.add(node)
                result.first_cotangent_divergence = node  # the last in topological order
        result.rows.append(NodeRow(node, attrs.get("op", attrs["kind"]), vc.normwise, vt.rtol,
                                   ce, cb))
    result.faulty_accumulation = _accumulation_fault(graph, subject, cot_tol)
    if cot_bad:
        if local_reference is None and not reference.contributions:
            # an autodiff reference records no per-edge contributions: ask JAX per node
            local_reference = jax_local_reference(graph, reference)
        result.faulty_vjp = _locate(graph, subject, reference, cot_bad, cot_tol,
                                    local_reference, val_bad)
    return result


def _accumulation_fault(graph: nx.DiGraph, subject: Evaluation,
                        cot_tol: dict[str, Tolerance]) -> str | None:
    r"""The first node, in back-propagation order, whose cotangent is not the sum of what
    its consumers sent, :math:`\delta_k \ne \sum_{i \in \operatorname{out}(k)}
    \bar a_{i \to k}` (Baggag & Saad §2.6): a fault of the chain rule's summation itself,
    not of any op's VJP. Needs no reference: the recorded per-edge contributions suffice."""
    if not subject.contributions:
        return None
    # an edge along which the VJP produced nothing at all (a dropped contribution)
    for u in reversed(list(nx.topological_sort(graph))):
        attrs = graph.nodes[u]
        if attrs["kind"] != "op" or u not in subject.cotangents:
            continue
        spec = get_op(attrs["op"])
        for arg, src in zip(spec.args, _arguments(graph, u), strict=True):
            if arg.kind == "real" and (u, src) not in subject.contributions:
                return src
    received: dict[str, list[Any]] = {}
    for (_, src), g in subject.contributions.items():
        received.setdefault(src, []).append(g)
    for node in reversed(list(nx.topological_sort(graph))):
        if node not in received or node not in subject.cotangents or node not in cot_tol:
            continue
        total = received[node][0]
        for g in received[node][1:]:
            total = total + g
        if not cot_tol[node].compare(subject.cotangents[node], total).ok:
            return node
    return None


def _locate(graph, subject, reference, cot_bad, cot_tol, local_reference,
            val_bad: Collection[str] = ()) -> str | None:
    """The first op, in back-propagation order, whose received cotangent agrees while one it
    sends does not. An op computed on diverged values (its own or an argument's) is not
    blamed: its VJP ran on other inputs than the reference's, and the divergence is the
    forward's (``first_value_divergence``), not its VJP's."""
    def sent_by_reference(u: str) -> dict[str, Any]:
        if local_reference is not None:
            return local_reference(u)
        return {src: g for (c, src), g in reference.contributions.items() if c == u}

    for u in reversed(list(nx.topological_sort(graph))):
        if graph.nodes[u]["kind"] != "op" or u in cot_bad or u not in subject.cotangents:
            continue
        if not any(src in cot_bad for src in graph.predecessors(u)):
            continue
        if u in val_bad or any(src in val_bad for src in graph.predecessors(u)):
            continue
        ref_sent = sent_by_reference(u)
        for src, g_ref in ref_sent.items():
            g_sub = subject.contributions.get((u, src))
            if g_sub is None:
                continue
            if not cot_tol[src].compare(g_sub, g_ref).ok:
                return u
    return None


def jax_local_reference(graph: nx.DiGraph, reference: Evaluation) -> Callable[[str], dict]:
    """Reference cotangents an op sends to its inputs: ``jax.vjp`` of its forward at the
    reference values, applied to its reference cotangent (computed on demand)."""
    from nlaverify.graph.core import _arguments
    from nlaverify.ops.registry import get_op

    def sent(u: str) -> dict[str, Any]:
        attrs = graph.nodes[u]
        spec = get_op(attrs["op"])
        srcs = _arguments(graph, u)
        real = [k for k, a in enumerate(spec.args) if a.kind == "real"]
        _, grads = spec.autodiff_vjp([reference.values[s] for s in srcs],
                                     reference.cotangents[u], **attrs["static"])
        return {srcs[k]: g for k, g in zip(real, grads, strict=True)}

    return sent
