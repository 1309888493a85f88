"""Run a built graph: initial parameters, evaluation with back-propagation on any
backend, and the JAX-autodiff reference every node is compared with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.backends.host import dtype_name, to_host
from nlaverify.errors import ArgumentError, DTypeError, UnknownNameError
from nlaverify.graph.core import _arguments, backprop, evaluate
from nlaverify.ops.registry import get_op


def init_params(graph: nx.DiGraph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded float64 parameters for every ``param`` node, by its ``init`` rule:
    ``("normal", std)``, or ``("one_plus", std)`` for norm gains (:math:`1 + \\text{std}\\,
    \\mathcal N(0,1)`, so a wrong gain is not hidden by :math:`\\gamma = 1`)."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, attrs in graph.nodes(data=True):
        if attrs["kind"] != "param":
            continue
        rule, std = attrs["init"]
        draw = std * rng.standard_normal(tuple(int(s) for s in attrs["shape"]))
        out[name] = 1.0 + draw if rule == "one_plus" else draw
    return out


@dataclass
class Evaluation:
    """Values, cotangents and per-edge VJP contributions of one graph evaluation."""

    label: str
    dtype: str
    values: dict[str, Any]
    cotangents: dict[str, Any]
    contributions: dict[tuple[str, str], Any] = field(default_factory=dict)


def graph_inputs(graph: nx.DiGraph, xp: Any, params: Mapping[str, Any],
                 data: Mapping[str, Any], dtype: str | None = None) -> dict[str, Any]:
    """Check and move parameters and data to the namespace (token ids stay integer).

    Unknown, missing and mis-shaped parameters raise an error naming the node
    (:func:`~nlaverify.graph.core.check_inputs`). Floating values keep their dtype unless
    ``dtype`` asks for a cast (``"float32"``...); the parameters must then share one dtype.
    Constant inputs (input nodes holding a ``value``: the random features of FAVOR and
    FAVOR+) that ``data`` does not give are added, in the parameters' dtype.
    """
    from nlaverify.backends.host import dtype_name
    from nlaverify.graph.core import check_inputs

    clash = set(params) & set(data)
    if clash:
        raise ArgumentError(f"graph_inputs: {sorted(clash)[0]!r} is given both as a parameter "
                            "and as data")
    check_inputs(graph, {**params, **data})
    missing = [n for n, a in graph.nodes(data=True) if a["kind"] == "param" and n not in params]
    if missing:
        raise UnknownNameError(f"graph_inputs: no value for parameter node {missing[0]!r} "
                               f"(shape {graph.nodes[missing[0]]['shape']})"
                               + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
    conv: dict[str, Any] = {}
    seen: tuple[str, str] | None = None
    for name, value in {**params, **data}.items():
        arr = to_host(value)
        if arr.dtype.kind in "iu" and name not in params:  # token ids and targets
            conv[name] = arr if xp.object_arrays else xp.asarray(arr)
            continue
        if arr.dtype.kind != "f" and not (arr.dtype.kind == "V" and "bfloat16" in str(
                arr.dtype)):
            raise DTypeError(f"node {name!r}: expected a real floating dtype, got {arr.dtype}")
        if xp.object_arrays:
            conv[name] = xp.asarray(arr)
        elif dtype is not None:
            conv[name] = xp.asarray(arr, dtype=getattr(xp, dtype))
        else:
            if seen is not None and dtype_name(arr.dtype) != seen[1]:
                raise DTypeError(f"parameter node {name!r}: expected dtype {seen[1]} (the dtype "
                                 f"of {seen[0]!r}), got {dtype_name(arr.dtype)}; pass dtype= "
                                 "to cast")
            seen = seen or (name, dtype_name(arr.dtype))
            conv[name] = xp.asarray(arr)
    for name, attrs in graph.nodes(data=True):
        if attrs.get("constant") and name not in conv:
            arr = np.asarray(attrs["value"])
            conv[name] = xp.asarray(arr) if xp.object_arrays else xp.asarray(
                arr, dtype=getattr(xp, dtype) if dtype is not None else
                conv[seen[0]].dtype if seen is not None else None)
    return conv


def run_graph(
    graph: nx.DiGraph, backend: str, params: Mapping[str, np.ndarray],
    data: Mapping[str, np.ndarray], *, dtype: str | None = None, digits: int | None = None,
    output: str = "loss", jit: bool = False,
) -> Evaluation:
    """Evaluate ``graph`` on ``backend`` and back-propagate from ``output`` with the
    ops' hand-derived VJPs. Parameters keep their dtype unless ``dtype`` casts them.

    With ``jit`` (JAX only), forward and backward run as one ``jax.jit`` program returning
    every node's value, cotangent and per-edge contribution (one compilation instead of one
    per eager primitive; the token ids are checked on the host first, as
    :func:`~nlaverify.graph.lower.lower` does; the ops' other value checks, which need
    concrete arrays, are not made)."""
    xp = get_namespace(backend, digits=digits)
    inputs = graph_inputs(graph, xp, params, data, dtype)
    if jit and backend == "jax":
        values, cot, contributions = _jitted_run(graph, xp, inputs, output)
    else:
        values = evaluate(graph, xp, inputs)
        contributions = {}
        cot = backprop(graph, xp, values, output, contributions=contributions)
    label = backend if backend != "mpmath" else f"mpmath{xp.digits}"
    if backend == "mpmath":
        kept = "mpmath"
    else:
        kept = dtype or next((dtype_name(v.dtype) for k, v in inputs.items()
                              if graph.nodes[k]["kind"] == "param"), "float64")
    return Evaluation(label, kept, values, cot, contributions)


def _jitted_run(graph: nx.DiGraph, xp: Any, inputs: dict[str, Any], output: str
                ) -> tuple[dict[str, Any], dict[str, Any], dict[tuple[str, str], Any]]:
    """Values, cotangents and contributions of the graph in one ``jax.jit``."""
    import jax

    from nlaverify.graph.core import check_token_values

    check_token_values(graph, inputs)

    def run(inp: dict[str, Any]) -> Any:
        values = evaluate(graph, xp, inp)
        contributions: dict[tuple[str, str], Any] = {}
        cot = backprop(graph, xp, values, output, contributions=contributions)
        return values, cot, contributions

    values, cot, contributions = jax.jit(run)(inputs)
    return _in_order(graph, values), cot, contributions


def _in_order(graph: nx.DiGraph, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` in topological order (a jitted function returns its dicts sorted by key;
    :func:`evaluate` returns them in the order it computed them)."""
    return {n: values[n] for n in nx.topological_sort(graph) if n in values}


def autodiff_reference(
    graph: nx.DiGraph, params: Mapping[str, np.ndarray], data: Mapping[str, np.ndarray],
    output: str = "loss",
) -> Evaluation:
    r"""The independent backward reference: JAX autodiff of the graph's forward.

    Every node's cotangent is :math:`\partial L/\partial \epsilon_v` at :math:`\epsilon = 0`
    for :math:`v + \epsilon_v` substituted for the node's value (one jitted
    ``jax.grad``). No hand-derived VJP is used; per-edge contributions are computed on
    demand by :func:`nlaverify.graph.compare.jax_local_reference`.
    """
    import jax

    from nlaverify.graph.core import check_token_values

    xp = get_namespace("jax")
    inputs = graph_inputs(graph, xp, params, data, "float64")
    check_token_values(graph, inputs)
    values = _in_order(graph, jax.jit(lambda inp: evaluate(graph, xp, inp))(inputs))
    ops = [n for n in values if graph.nodes[n]["kind"] == "op" and n != output]
    float_inputs = {k: v for k, v in inputs.items() if graph.nodes[k]["kind"] == "param"}

    def loss(p: dict[str, Any], eps: dict[str, Any]) -> Any:
        vals = dict(inputs, **p)
        for node in values:
            attrs = graph.nodes[node]
            if attrs["kind"] != "op":
                continue
            spec = get_op(attrs["op"])
            out = spec.forward(xp, *[vals[u] for u in _arguments(graph, node)], **attrs["static"])
            vals[node] = out + eps[node] if node in eps else out
        return vals[output]

    zeros = {n: xp.zeros_like(values[n]) for n in ops}
    g_params, g_eps = jax.jit(jax.grad(loss, argnums=(0, 1)))(float_inputs, zeros)
    cot: dict[str, Any] = {output: xp.ones_like(values[output]), **g_eps, **g_params}
    return Evaluation("jax-autodiff", "float64", values, cot)


def check_run_size(config: Any, n: int, batch: int | None) -> None:
    """A sequence length in ``[1, context]`` and a batch size >= 1 (or ``None``), else an
    :class:`~nlaverify.errors.ArgumentError` naming the argument."""
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= config.context:
        raise ArgumentError(f"seq_len: expected an integer in [1, context={config.context}] "
                            f"for {config.name}, got {n!r}")
    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool)
                              or batch < 1):
        raise ArgumentError(f"batch: expected a positive integer (or none), got {batch!r}")


def sample_data(config_vocab: int, n: int, seed: int, batch: int | None = None,
                pad: bool = True) -> dict[str, np.ndarray]:
    r"""Seeded tokens and next-token targets (Baggag & Saad §3.13.1).

    Without ``batch``: one sequence, ``tokens`` and ``targets`` of shape ``(n,)``. With
    ``batch = B``: shape ``(B, n)``; when ``pad``, sequence :math:`b` holds
    :math:`\max(1, n - b)` real tokens and is right-padded with token 0, whose targets are
    :data:`~nlaverify.ops.loss.IGNORE_INDEX` (under causal attention the padding cannot
    reach the real positions; the loss is the mean over the non-ignored targets).
    """
    from nlaverify.ops.loss import IGNORE_INDEX

    rng = np.random.default_rng(seed + 7)
    if batch is None:
        seq = rng.integers(0, config_vocab, size=n + 1, dtype=np.int64)
        return {"tokens": seq[:-1], "targets": seq[1:]}
    seq = rng.integers(0, config_vocab, size=(batch, n + 1), dtype=np.int64)
    tokens, targets = seq[:, :-1].copy(), seq[:, 1:].copy()
    if pad:
        for b in range(batch):
            length = max(1, n - b)
            tokens[b, length:] = 0
            targets[b, length:] = IGNORE_INDEX
    return {"tokens": tokens, "targets": targets}
