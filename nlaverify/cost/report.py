r"""The cost report of a model (:func:`cost_report`), XLA's own count of the same forward
(:func:`xla_forward_flops`), and the ``nlaverify cost`` command.

Baggag & Saad §3.14 (scaling and cost); Kaplan et al. 2020, Table 1.
"""

from __future__ import annotations

from typing import Any

from nlaverify.config import TransformerConfig
from nlaverify.cost.memory import (
    H200_EXAMPLE,
    OPTIMIZER_RULES,
    activation_bytes,
    kv_cache_bytes,
    optimizer_state_values,
    roofline,
)
from nlaverify.cost.nodes import graph_costs
from nlaverify.cost.summary import by_block, by_component, rule_comparison
from nlaverify.errors import ArgumentError

__all__ = ["DTYPE_BYTES", "cost_report", "xla_forward_flops"]

#: bytes per value of each working dtype
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"cost: {name}: expected a positive integer, got {value!r}")
    return value


def cost_report(config: TransformerConfig, seq_len: int | None = None, batch: int = 1,
                dtype: str = "float32", *, peak_flops: float = H200_EXAMPLE["peak_flops"],
                bandwidth: float = H200_EXAMPLE["bandwidth"]) -> dict[str, Any]:
    r"""Everything ``nlaverify cost`` prints, as a dict: per node, per component, per block
    and total FLOPs and bytes (forward and backward, counted from the ops' code and checked
    against their closed forms), the training FLOPs per token against
    :math:`3C_\text{forward} = 6N + 6n_\text{layer}n_\text{ctx}d_\text{attn}` and
    :math:`6N` with the dropped terms, memory (parameters, gradients, optimizer state per
    rule, activations with and without recomputation, the KV cache for ``seq_len`` tokens)
    and the roofline for ``peak_flops`` / ``bandwidth`` (default: the H200 example figures,
    :data:`~nlaverify.cost.memory.H200_EXAMPLE`).

    ``seq_len`` defaults to the config's context and may not exceed it for learned
    positions.
    """
    from nlaverify.graph.build import build_transformer, parameter_counts

    n = config.context if seq_len is None else _positive("seq_len", seq_len)
    _positive("batch", batch)
    if dtype not in DTYPE_BYTES:
        raise ArgumentError(f"cost: dtype: expected one of {', '.join(DTYPE_BYTES)}, got "
                            f"{dtype!r}")
    if n > config.context and config.positions == "learned":
        raise ArgumentError(f"cost: seq_len: expected at most the context {config.context} "
                            f"(learned positions), got {n}")
    s = DTYPE_BYTES[dtype]
    graph = build_transformer(config)
    costs = graph_costs(graph, n, batch, s)
    P = parameter_counts(graph).total
    fwd = sum(c.forward.flops for c in costs)
    bwd = sum(c.backward.flops for c in costs)
    memory = {"parameters": P * s, "gradients": P * s,
              "optimizer_state": {r: optimizer_state_values(graph, r) * s
                                  for r in OPTIMIZER_RULES},
              "activations": activation_bytes(graph, costs, n, batch, s)}
    if config.attention == "softmax":
        memory["kv_cache"] = kv_cache_bytes(config, n, batch, s)
    return {"config": config.name, "seq_len": n, "batch": batch, "dtype": dtype,
            "itemsize": s,
            "total": {"forward": fwd, "backward": bwd, "training": fwd + bwd,
                      "forward_matmul": sum(c.forward.matmul for c in costs),
                      "backward_matmul": sum(c.backward.matmul for c in costs),
                      "forward_transcendental": sum(c.forward.transcendental for c in costs),
                      "forward_bytes": sum(c.forward_bytes for c in costs),
                      "backward_bytes": sum(c.backward_bytes for c in costs)},
            "by_component": by_component(costs), "by_block": by_block(costs),
            "rules": rule_comparison(config, graph, costs, n, batch),
            "memory": memory, "roofline": roofline(costs, peak_flops, bandwidth),
            "nodes": [c.as_dict() for c in costs]}


def xla_forward_flops(config: TransformerConfig, seq_len: int | None = None
                      ) -> dict[str, float]:
    r"""XLA's cost analysis of the graph's forward (the loss), jitted as
    :func:`nlaverify.graph.lower.lower` jits it (``evaluate`` on the JAX namespace), on
    abstract float32 arguments: ``{"flops", "transcendentals", "bytes accessed"}`` as XLA
    reports them after its optimisations (fusion, simplification)."""
    import jax
    import jax.numpy as jnp

    from nlaverify.backends import get_namespace
    from nlaverify.graph.build import build_transformer, graph_constants
    from nlaverify.graph.core import evaluate

    n = config.context if seq_len is None else _positive("seq_len", seq_len)
    graph = build_transformer(config)
    xp = get_namespace("jax")
    params = {k: jax.ShapeDtypeStruct(tuple(int(s) for s in a["shape"]), jnp.float32)
              for k, a in graph.nodes(data=True) if a["kind"] == "param"}
    data = {k: jax.ShapeDtypeStruct((n,), jnp.int32) for k in ("tokens", "targets")}
    constants = graph_constants(graph)

    def forward(p: dict[str, Any], d: dict[str, Any]) -> Any:
        fixed = {k: jnp.asarray(v, dtype=jnp.float32) for k, v in constants.items()}
        return evaluate(graph, xp, {**fixed, **d, **p}, outputs=["loss"])["loss"]

    analysis = jax.jit(forward).lower(params, data).compile().cost_analysis()
    if isinstance(analysis, list | tuple):  # older JAX: one dict per computation
        analysis = analysis[0]
    return {k: float(analysis.get(k, 0.0)) for k in ("flops", "transcendentals",
                                                     "bytes accessed")}
