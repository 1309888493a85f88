"""Lowering: the graph becomes one jitted JAX function.

The graph is walked once, at trace time, with the JAX namespace: forward in
topological order, backward with the ops' hand-derived VJPs. ``jax.jit`` then
compiles the traced computation, so no per-node Python runs at call time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import networkx as nx

from nlaverify.backends import get_namespace
from nlaverify.graph.build import graph_constants
from nlaverify.graph.core import backprop, check_token_values, evaluate, token_arguments


def lower(graph: nx.DiGraph, output: str = "loss", *, gradient: bool = True,
          outputs: tuple[str, ...] = ()) -> Callable[..., Any]:
    """Compile ``graph`` to ``f(params, data) -> (value, grads[, extra])``: one ``jax.jit``,
    after a host-side check of the token ids in ``data`` (:func:`check_token_values`).

    Args:
        output: the scalar node differentiated (default ``"loss"``).
        gradient: return the parameter cotangents (hand-derived VJPs) too.
        outputs: further node values to return (e.g. ``("logits",)``).

    The graph's constant inputs (:func:`~nlaverify.graph.build.graph_constants`) are
    supplied unless ``data`` gives them. The returned function's attribute ``jitted`` is the
    compiled program without the host-side token check (for timing, or for ids already
    checked: an out-of-range id is not an error inside the program).
    """
    import jax

    xp = get_namespace("jax")
    params_of = [n for n, a in graph.nodes(data=True) if a["kind"] == "param"]
    constants = graph_constants(graph)

    def run(params: dict[str, Any], data: dict[str, Any]) -> Any:
        # constant inputs (random features) not given in ``data``, in the parameters' dtype
        dtype = next((v.dtype for v in params.values()), xp.float64)
        fixed = {k: xp.asarray(v, dtype=dtype) for k, v in constants.items() if k not in data}
        values = evaluate(graph, xp, {**fixed, **data, **params})
        extra = tuple(values[o] for o in outputs)
        if not gradient:
            return (values[output], *extra)
        cot = backprop(graph, xp, values, output)
        grads = {p: cot[p] if p in cot else xp.zeros_like(params[p]) for p in params_of}
        return (values[output], grads, *extra)

    jitted = jax.jit(run)
    token_args = token_arguments(graph)

    def checked(params: dict[str, Any], data: dict[str, Any]) -> Any:
        # token ids are values, invisible to the trace: check them on the host first
        check_token_values(graph, data, token_args)
        return jitted(params, data)

    checked.jitted = jitted  # type: ignore[attr-defined]
    return checked
