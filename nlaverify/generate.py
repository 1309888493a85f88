"""Autoregressive generation, greedy or seeded temperature sampling (Baggag & Saad
§3.13.1, Figure 23): from the graph and from the independent JAX model.

Sampling uses the Gumbel-max trick with noise drawn from one seeded NumPy
generator, so both sources, given the same logits, emit the same tokens:
:math:`t = \\arg\\max_v (z_v/\\tau + \\gamma_v)`, :math:`\\gamma_v = -\\log(-\\log U_v)`,
which samples :math:`\\operatorname{softmax}(z/\\tau)` exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import networkx as nx
import numpy as np

from nlaverify.backends.host import to_host
from nlaverify.config import TransformerConfig
from nlaverify.errors import ShapeError


def _pick(z: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    if temperature == 0:
        return int(np.argmax(z))
    u = rng.random(z.shape[0])
    return int(np.argmax(z / temperature - np.log(-np.log(u))))


def _generate(last_logits: Callable[[np.ndarray], np.ndarray], prompt: Sequence[int],
              steps: int, temperature: float, seed: int, context: int) -> list[int]:
    if temperature < 0:
        raise ShapeError(f"generate: argument 'temperature': expected >= 0, got {temperature}")
    if not prompt:
        raise ShapeError("generate: argument 'prompt': expected at least one token, got none")
    if len(prompt) + steps - 1 > context:
        raise ShapeError(f"generate: prompt of {len(prompt)} tokens plus {steps} steps exceeds "
                         f"the context of {context}")
    rng = np.random.default_rng(seed)
    tokens = list(prompt)
    for _ in range(steps):
        z = last_logits(np.asarray(tokens, dtype=np.int64))
        tokens.append(_pick(np.asarray(z, dtype=np.float64), temperature, rng))
    return tokens


def generate_from_graph(graph: nx.DiGraph, params: Mapping[str, np.ndarray],
                        prompt: Sequence[int], steps: int, *, temperature: float = 0.0,
                        seed: int = 0, backend: str = "numpy") -> list[int]:
    """Extend ``prompt`` by ``steps`` tokens, evaluating the graph up to its logits."""
    from nlaverify.backends import get_namespace
    from nlaverify.graph.core import evaluate
    from nlaverify.graph.run import graph_inputs

    xp = get_namespace(backend)
    out = "logits_tempered" if "logits_tempered" in graph else "logits"
    cfg: TransformerConfig = graph.graph["config"]

    def last(tokens: np.ndarray) -> np.ndarray:
        inputs = graph_inputs(graph, xp, params, {"tokens": tokens}, "float64")
        z = evaluate(graph, xp, inputs, outputs=[out])[out]
        return to_host(z)[-1]

    return _generate(last, prompt, steps, temperature, seed, cfg.context)


def graph_next_logits(graph: nx.DiGraph, params: Mapping[str, np.ndarray], *,
                      backend: str = "numpy") -> Callable[[np.ndarray], np.ndarray]:
    """``(B, t)`` token ids to the ``(B, V)`` logits of the next token, from the graph (one
    sequence at a time, float64): the ``next_logits`` of :func:`nlaverify.beam.beam_search`."""
    from nlaverify.backends import get_namespace
    from nlaverify.graph.core import evaluate
    from nlaverify.graph.run import graph_inputs

    xp = get_namespace(backend)
    out = "logits_tempered" if "logits_tempered" in graph else "logits"

    def next_logits(tokens: np.ndarray) -> np.ndarray:
        rows = []
        for seq in np.asarray(tokens, dtype=np.int64):
            inputs = graph_inputs(graph, xp, params, {"tokens": seq}, "float64")
            rows.append(to_host(evaluate(graph, xp, inputs, outputs=[out])[out])[-1])
        return np.stack(rows).astype(np.float64)

    return next_logits


def generate_from_model(config: TransformerConfig, params: Mapping[str, Any],
                        prompt: Sequence[int], steps: int, *, temperature: float = 0.0,
                        seed: int = 0) -> list[int]:
    """The same, from the independent JAX model."""
    import jax.numpy as jnp

    from nlaverify.models.jax_transformer import logits

    jp = {k: jnp.asarray(v) for k, v in params.items()}
    return _generate(lambda t: to_host(logits(jp, jnp.asarray(t), config))[-1], prompt,
                     steps, temperature, seed, config.context)
