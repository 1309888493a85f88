r"""The sharded run of a Transformer graph, compared node by node with the unsharded one.

The graph is walked once at trace time, as :func:`nlaverify.graph.run.run_graph` does with
``jit=True`` (forward in topological order, backward with the ops' hand-derived VJPs), inside
one ``jax.jit`` over a :class:`jax.sharding.Mesh`; every node's value and cotangent is pinned
to its layout of :mod:`nlaverify.shard.plan` with :func:`jax.lax.with_sharding_constraint`,
so that XLA's SPMD partitioner inserts the collectives (the all-reduce after a row-parallel
matmul, the all-gather of the keys under sequence parallelism, the all-reduce of a
parameter gradient over the batch). The values and cotangents come back gathered and are
compared with the same graph run unsharded (one device), both in float64.

**Tolerances.** Each node is judged by :func:`nlaverify.graph.compare.node_tolerance`, the
tolerance model with the node's depth :math:`D` (its cotangent's :math:`2D_{out} - D + 1`)
and magnitude condition, and the accumulation length :math:`k` of the *pair* of runs: the
unsharded run's longest sum has :math:`k_u` terms (:func:`~nlaverify.graph.compare.
accumulation_length`, and the batch times sequence rows of a weight gradient); sharded over
:math:`s` devices it becomes :math:`\lceil k_u/s\rceil` terms per shard plus the merge of
:math:`s` partial sums, at most :math:`s - 1` additions in a chain (a ring all-reduce; a
tree needs :math:`\lceil\log_2 s\rceil`). The bound takes the longer of the two,
:math:`k = \max(k_u, \lceil k_u/s\rceil + s - 1)` (:func:`sharded_accumulation_length`),
with :math:`s` the whole mesh, the most any one reduction is split.

**Planted bugs** (:data:`PLANTS`) replace one node's forward by a :func:`jax.shard_map`
program on the plan's layouts that omits the collective: the row-parallel matmul without
its all-reduce, the loss averaged per data-parallel shard, attention over each sequence
shard's own keys. A report names the first divergent node and the collective at fault.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import networkx as nx
import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.config import TransformerConfig
from nlaverify.errors import ArgumentError
from nlaverify.graph.build import build_transformer
from nlaverify.graph.compare import accumulation_length, node_depths, node_tolerance
from nlaverify.graph.core import _arguments, check_token_values
from nlaverify.graph.run import graph_inputs, init_params, run_graph, sample_data
from nlaverify.ops.registry import get_op
from nlaverify.shard.plan import MeshPlan, collective, format_layout, layout

#: planted bug -> (the axis it needs, the node it replaces: a suffix, first match)
PLANTS: dict[str, tuple[str, str]] = {
    "missing_all_reduce": ("tp", ".mlp.out"),
    "per_shard_mean": ("dp", "loss"),
    "local_attention": ("sp", ".attn.heads"),
    "unreduced_gradient": ("dp", ".mlp.out"),
}
#: plants of a node's backward (its VJP), not of its forward
BACKWARD_PLANTS = ("unreduced_gradient",)


@dataclass(frozen=True)
class ShardRow:
    """One node: its layout, and its value's and cotangent's errors against their bounds."""

    node: str
    op: str
    layout: str
    value_error: float
    value_bound: float
    cot_error: float | None
    cot_bound: float | None

    @property
    def ok(self) -> bool:
        return self.value_error <= self.value_bound and (
            self.cot_error is None or self.cot_error <= (self.cot_bound or 0.0))


@dataclass
class ShardReport:
    """The sharded run of ``config`` on ``mesh`` against the unsharded one."""

    config: str
    mesh: str
    devices: int
    seq_len: int
    batch: int | None
    vocab_parallel: bool
    accumulation: int
    plants: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: the collectives XLA's partitioner put in the compiled program, by kind
    collectives: dict[str, int] = field(default_factory=dict)
    rows: list[ShardRow] = field(default_factory=list)
    first_value_divergence: str | None = None
    value_collective: str | None = None
    #: the first node, in back-propagation order, whose cotangent diverges
    first_cotangent_divergence: str | None = None
    cotangent_collective: str | None = None

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows)

    def worst(self) -> float:
        """The largest error/bound ratio over every value and cotangent (<= 1 passes)."""
        ratios = [r.value_error / r.value_bound for r in self.rows]
        ratios += [r.cot_error / r.cot_bound for r in self.rows if r.cot_error is not None
                   and r.cot_bound]
        return max(ratios, default=0.0)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        return d


def sharded_accumulation_length(k: int, shards: int) -> int:
    r"""The accumulation length that judges a sum of ``k`` terms computed whole against
    the same sum split over ``shards`` devices: :math:`\max(k, \lceil k/s\rceil + s - 1)`,
    the longer of the unsharded sum and one shard's sum plus the chained merge."""
    return max(k, math.ceil(k / shards) + shards - 1)


def _pspec(lay: tuple) -> Any:
    """A :class:`jax.sharding.PartitionSpec` of a :data:`~nlaverify.shard.plan.Layout`."""
    from jax.sharding import PartitionSpec as P

    return P(*(None if d is None else d if len(d) > 1 else d[0] for d in lay))


def _plant_node(graph: nx.DiGraph, plant: str) -> str:
    """The node a plant replaces: the first, in topological order, its suffix names."""
    suffix = PLANTS[plant][1]
    for node in nx.topological_sort(graph):
        if node == suffix or node.endswith(suffix):
            return node
    raise ArgumentError(f"plant {plant!r}: the graph has no node {suffix!r}")


def _planted(graph: nx.DiGraph, plan: MeshPlan, mesh: Any, plant: str, node: str,
             xp: Any) -> Callable[..., Any]:
    """The forward of ``node`` as a ``shard_map`` program without its collective."""
    import jax

    spec = get_op(graph.nodes[node]["op"])
    static = graph.nodes[node]["static"]
    srcs = _arguments(graph, node)

    def program(*args: Any) -> Any:
        lays = [layout(graph, plan, s, a.ndim) for s, a in zip(srcs, args, strict=True)]
        out_lay = layout(graph, plan, node, len(jax.eval_shape(
            lambda *a: spec.forward(xp, *a, **static), *args).shape))
        rows = tuple(a for a in ("dp", "fsdp") if plan.size(a) > 1)
        if plant == "per_shard_mean":  # each shard's mean, then the mean of the means
            lays = [tuple([rows] + [None] * (a.ndim - 1)) for a in args]

            def body(*local: Any) -> Any:
                return jax.lax.pmean(spec.forward(xp, *local, **static), rows)
        else:  # the local result, as if it were the whole (no psum, no all-gather)
            def body(*local: Any) -> Any:
                return spec.forward(xp, *local, **static)
        return jax.shard_map(body, mesh=mesh, in_specs=tuple(_pspec(lay) for lay in lays),
                             out_specs=_pspec(out_lay), check_vma=False)(*args)

    return program


def _unreduced_vjp(plan: MeshPlan, mesh: Any, spec: Any, static: dict[str, Any],
                   xp: Any) -> Callable[..., Any]:
    """The op's VJP on each data-parallel shard, the parameter cotangents (sums over the
    shard's rows) left without their all-reduce over the batch."""
    import jax
    from jax.sharding import PartitionSpec as P

    rows = tuple(a for a in ("dp", "fsdp") if plan.size(a) > 1)

    def program(g: Any, *args: Any) -> Any:
        batched = [P(rows) if np.ndim(a) == np.ndim(g) else P() for a in args]
        outs = tuple(P(rows) if np.ndim(a) == np.ndim(g) else P()
                     for a, arg in zip(args, spec.args, strict=True) if arg.kind == "real")
        return jax.shard_map(lambda gl, *al: tuple(spec.vjp(xp, gl, *al, **static)),
                             mesh=mesh, in_specs=(P(rows), *batched), out_specs=outs,
                             check_vma=False)(g, *args)

    return program


def _sharded_evaluation(graph: nx.DiGraph, plan: MeshPlan, inputs: dict[str, Any],
                        plants: Sequence[str], output: str = "loss"
                        ) -> tuple[dict[str, Any], dict[str, Any], dict[str, int]]:
    """Values and cotangents of every node, the graph run as one ``jax.jit`` on the mesh
    with each value and cotangent constrained to its layout; returned gathered."""
    import jax
    from jax.sharding import Mesh, NamedSharding

    names, sizes = plan.mesh_axes()
    mesh = Mesh(np.array(jax.devices()[: plan.devices]).reshape(sizes), names)
    xp = get_namespace("jax")
    order = list(nx.topological_sort(graph))
    replaced = {_plant_node(graph, p): p for p in plants if p not in BACKWARD_PLANTS}
    replaced_vjp = {_plant_node(graph, p): p for p in plants if p in BACKWARD_PLANTS}

    def sharding(node: str, ndim: int) -> Any:
        return NamedSharding(mesh, _pspec(layout(graph, plan, node, ndim)))

    def pin(node: str, x: Any) -> Any:
        return jax.lax.with_sharding_constraint(x, sharding(node, x.ndim))

    def run(inp: dict[str, Any]) -> Any:
        values: dict[str, Any] = {}
        for node in order:
            attrs = graph.nodes[node]
            if attrs["kind"] != "op":
                values[node] = pin(node, inp[node])
                continue
            spec = get_op(attrs["op"])
            args = [values[u] for u in _arguments(graph, node)]
            if node in replaced:
                out = _planted(graph, plan, mesh, replaced[node], node, xp)(*args)
            else:
                out = spec.forward(xp, *args, **attrs["static"])
            values[node] = pin(node, out)
        cot = {output: xp.ones_like(values[output])}
        for node in reversed(order):  # nlaverify.graph.core.backprop, each cotangent pinned
            attrs = graph.nodes[node]
            if attrs["kind"] != "op" or node not in cot:
                continue
            spec = get_op(attrs["op"])
            srcs = _arguments(graph, node)
            args = [values[u] for u in srcs]
            if replaced_vjp.get(node):
                grads = _unreduced_vjp(plan, mesh, spec, attrs["static"], xp)(cot[node], *args)
            else:
                grads = spec.vjp(xp, cot[node], *args, **attrs["static"])
            real = [s for a, s in zip(spec.args, srcs, strict=True) if a.kind == "real"]
            for src, g in zip(real, grads, strict=True):
                cot[src] = pin(src, g if src not in cot else cot[src] + g)
        return values, cot

    placed = {k: jax.device_put(v, sharding(k, np.ndim(v))) for k, v in inputs.items()}
    compiled = jax.jit(run).lower(placed).compile()
    values, cot = compiled(placed)
    return ({k: np.asarray(v) for k, v in values.items()},
            {k: np.asarray(v) for k, v in cot.items()}, hlo_collectives(compiled.as_text()))


def hlo_collectives(hlo: str) -> dict[str, int]:
    """How many of each collective the compiled (partitioned) program holds."""
    found: dict[str, int] = {}
    for m in re.finditer(r"= \S+ (all-reduce|all-gather|reduce-scatter|all-to-all|"
                         r"collective-permute)(?:-start)?\(", hlo):
        found[m.group(1)] = found.get(m.group(1), 0) + 1
    return dict(sorted(found.items()))


def shard_verify(config: TransformerConfig, plan: MeshPlan, *, seed: int = 0,
                 plants: Sequence[str] = ()) -> ShardReport:
    """Run ``config``'s graph sharded by ``plan`` and unsharded, in float64, on seeded
    parameters and data, and compare every node's value and cotangent (in this process:
    JAX must already see ``plan.devices`` devices; :func:`run_shard_verify` arranges it)."""
    import jax

    for p in plants:
        if p not in PLANTS:
            raise ArgumentError(f"shard_verify: unknown plant {p!r}: expected some of "
                                f"{', '.join(PLANTS)}")
        if plan.size(PLANTS[p][0]) == 1:
            raise ArgumentError(f"shard_verify: plant {p!r} needs a {PLANTS[p][0]} axis "
                                "larger than 1")
    have = len(jax.devices())
    if plan.devices > have:
        raise ArgumentError(f"mesh: {plan.spec!r} needs {plan.devices} devices, JAX has {have} "
                            "(set XLA_FLAGS=--xla_force_host_platform_device_count=N before "
                            "JAX starts, as run_shard_verify does)")
    graph = build_transformer(config)
    params = init_params(graph, seed)
    data = sample_data(config.vocab_size, plan.seq_len, seed, batch=plan.batch,
                       pad=config.causal)
    reference = run_graph(graph, "jax", params, data, jit=True)
    xp = get_namespace("jax")
    inputs = graph_inputs(graph, xp, params, data)
    check_token_values(graph, inputs)
    values, cot, collectives = _sharded_evaluation(graph, plan, {k: np.asarray(v) for k, v in
                                                    inputs.items()}, plants)
    shape = np.shape(data["tokens"])
    k_u = max(accumulation_length(graph, plan.seq_len), int(np.prod(shape)))
    k = sharded_accumulation_length(k_u, plan.shards)
    report = ShardReport(config.name, plan.describe(), plan.devices, plan.seq_len, plan.batch,
                         plan.vocab_parallel, k, list(plants), list(plan.notes), collectives)
    depth = node_depths(graph)
    d_out = depth["loss"]
    for node in nx.topological_sort(graph):
        attrs = graph.nodes[node]
        if attrs.get("dtype") == "int" or node not in values:
            continue
        ref = reference.values[node]
        vt = node_tolerance("float64", k, depth[node], ref)
        vc = vt.compare(values[node], ref)
        if not vc.ok and report.first_value_divergence is None:
            report.first_value_divergence = node
            report.value_collective = collective(graph, plan, node)
        ce = cb = None
        if node in cot and node in reference.cotangents:
            ct = node_tolerance("float64", k, 2 * d_out - depth[node] + 1, ref)
            cc = ct.compare(cot[node], reference.cotangents[node])
            ce, cb = cc.normwise, ct.rtol
            if not cc.ok:  # the last in topological order: the first in back-propagation
                report.first_cotangent_divergence = node
                report.cotangent_collective = collective(graph, plan, node, cotangent=True)
        report.rows.append(ShardRow(node, attrs.get("op", attrs["kind"]), format_layout(
            layout(graph, plan, node, np.ndim(values[node]))), vc.normwise, vt.rtol, ce, cb))
    return report


__all__ = ["PLANTS", "ShardReport", "ShardRow", "shard_verify", "sharded_accumulation_length"]
