r"""Memory of training and inference, and the roofline of each node.

Training holds the parameters :math:`P`, their gradients, the optimizer state and the
activations kept for the backward pass (Baggag & Saad §3.14). Optimizer state per rule
(:data:`OPTIMIZER_RULES`), counted in values of the working dtype:

- SGD: none; momentum SGD: one buffer, :math:`P`;
- Adam / AdamW: first and second moments, :math:`2P`;
- Muon: one momentum buffer per matrix of the blocks (orthogonalised by Newton–Schulz); the
  other parameters (embeddings, logits, vectors) by AdamW, :math:`2` each;
- Shampoo: factors :math:`L \in \mathbb R^{m\times m}`, :math:`R \in \mathbb R^{n\times n}`
  per matrix :math:`W \in \mathbb R^{m\times n}` (leading axes: one pair per slice), a
  diagonal for vectors;
- K-FAC: :math:`A = \mathbb E[a a^\top] \in \mathbb R^{d_{in}\times d_{in}}` and
  :math:`G = \mathbb E[g g^\top] \in \mathbb R^{d_{out}\times d_{out}}` per linear layer.

The KV cache of softmax attention keeps :math:`K` and :math:`V` of every block for the
visible context: :math:`2\,n_\text{layer}\,n_{kv}\,d_h\,\min(n, w)\,B` values (grouped-query
attention: :math:`n_{kv} < h`; multi-query: :math:`n_{kv} = 1`; sliding window :math:`w`).
"""

from __future__ import annotations

import math
from typing import Any

import networkx as nx

from nlaverify.config import TransformerConfig
from nlaverify.config_mla import mla_cache_width
from nlaverify.cost.nodes import NodeCost
from nlaverify.errors import ArgumentError

__all__ = ["H200_EXAMPLE", "OPTIMIZER_RULES", "activation_bytes", "kv_cache_bytes",
           "optimizer_state_values", "roofline"]

OPTIMIZER_RULES = ("sgd", "momentum", "adam", "adamw", "muon", "shampoo", "kfac")

#: an example device for :func:`roofline`, not a measurement: NVIDIA's H200 datasheet
#: figures, dense bf16 peak FLOP/s and HBM bandwidth in bytes/s
H200_EXAMPLE = {"peak_flops": 989e12, "bandwidth": 4.8e12}

_LAYER_OPS = ("linear", "affine", "lora_linear", "lora_affine", "unembed_tied")


def optimizer_state_values(graph: nx.DiGraph, rule: str) -> int:
    r"""Values of optimizer state for ``rule`` (:data:`OPTIMIZER_RULES`) over the graph's
    parameters (see the module docstring for each rule's count)."""
    if rule not in OPTIMIZER_RULES:
        raise ArgumentError(f"optimizer rule: expected one of {', '.join(OPTIMIZER_RULES)}, "
                            f"got {rule!r}")
    params = {n: tuple(int(s) for s in a["shape"]) for n, a in graph.nodes(data=True)
              if a["kind"] == "param"}
    sizes = {n: math.prod(s) for n, s in params.items()}
    total = sum(sizes.values())
    if rule == "sgd":
        return 0
    if rule == "momentum":
        return total
    if rule in ("adam", "adamw"):
        return 2 * total
    if rule == "muon":
        mats = sum(sizes[n] for n, s in params.items()
                   if len(s) >= 2 and graph.nodes[n]["block"] is not None)
        return mats + 2 * (total - mats)
    if rule == "shampoo":
        return sum(math.prod(s[:-2]) * (s[-2] ** 2 + s[-1] ** 2) if len(s) >= 2 else s[0]
                   for s in params.values())
    state = 0  # K-FAC: A and G per linear layer
    for node, attrs in graph.nodes(data=True):
        if attrs["kind"] == "op" and attrs["op"] in _LAYER_OPS:
            W = next(u for u, _, p in graph.in_edges(node, data="pos") if p == 1)
            d_a, d_b = params[W]
            state += d_a**2 + d_b**2
    return state


def activation_bytes(graph: nx.DiGraph, costs: list[NodeCost], seq_len: int, batch: int,
                     itemsize: int) -> dict[str, int]:
    r"""Activation memory of one training step.

    ``stored``: every op's output kept for the backward pass (what the graph's
    back-propagation holds). ``recompute``: full recomputation per block (activation
    checkpointing): the residual stream entering each block, :math:`B n d` each, the
    outputs outside the blocks, and the largest block's outputs while its backward runs.
    """
    del seq_len
    out = {c.name: math.prod(c.shape) * itemsize * batch for c in costs}
    stored = sum(out.values())
    blocks: dict[int, int] = {}
    outside = 0
    for c in costs:
        if c.block is None:
            outside += out[c.name]
        else:
            blocks[c.block] = blocks.get(c.block, 0) + out[c.name]
    cfg = graph.graph["config"]
    stream = next((out[c.name] for c in costs if c.name == "x0"), 0) or \
        next(iter(out.values()))
    recompute = outside + cfg.n_blocks * stream + max(blocks.values(), default=0)
    return {"stored": stored, "recompute": recompute}


def kv_cache_bytes(config: TransformerConfig, context: int, batch: int = 1,
                   itemsize: int = 2) -> int:
    r"""Bytes of the KV cache for ``context`` tokens:
    :math:`2\,n_\text{layer}\,n_{kv}\,d_h\,\min(n_\text{ctx}, w)\,B \cdot s` (``itemsize``
    :math:`s`; :math:`w` the sliding window, :math:`\infty` without), :math:`n_\text{layer}`
    the attention blocks (Mamba's keep a state of fixed size, as the linear attentions do:
    0 for a pure Mamba), each with its own :math:`w` under ``window_layers``. Softmax
    attention only. Multi-head latent attention (``kv_lora_rank`` :math:`r > 0`; DeepSeek-V2
    §2.1.2) caches the latent and the shared rotated key, :math:`(r + d_r)` values per token
    and block in place of :math:`2 n_{kv} d_h` (:func:`~nlaverify.config_mla.mla_cache_width`)."""
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise ArgumentError(f"kv_cache_bytes: context: expected a positive integer, got "
                            f"{context!r}")
    if config.attention != "softmax":
        raise ArgumentError(f"kv_cache_bytes: attention={config.attention!r} keeps no KV "
                            "cache (a fixed-size state); expected softmax attention")
    assert config.n_kv_heads is not None and config.d_head is not None
    # per attention block: the window where it has one (Gemma 2's window_layers), else all
    rows = sum(context if config.sliding_window is None or (
        config.window_layers is not None and b not in config.window_layers)
        else min(context, config.sliding_window) for b in range(config.n_blocks)
        if config.block_mixer(b) == "attention")
    return mla_cache_width(config) * rows * batch * itemsize


def roofline(costs: list[NodeCost], peak_flops: float, bandwidth: float) -> dict[str, Any]:
    r"""The roofline of each node's forward for a device of ``peak_flops`` FLOP/s and
    ``bandwidth`` bytes/s: ridge intensity :math:`I^* = \pi/\beta`; a node of intensity
    :math:`I = F/Q` is memory-bound when :math:`I < I^*`; its time is at least
    :math:`\max(F/\pi, Q/\beta)` (Williams, Waterman & Patterson 2009)."""
    for name, v in (("peak_flops", peak_flops), ("bandwidth", bandwidth)):
        if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
            raise ArgumentError(f"roofline: {name}: expected a positive number, got {v!r}")
    ridge = peak_flops / bandwidth
    rows, total, memory_time = [], 0.0, 0.0
    for c in costs:
        t = max(c.forward.flops / peak_flops, c.forward_bytes / bandwidth)
        bound = "compute" if c.intensity >= ridge else "memory"
        total += t
        memory_time += t if bound == "memory" else 0.0
        rows.append({"name": c.name, "intensity": c.intensity, "bound": bound, "time_s": t})
    return {"peak_flops": peak_flops, "bandwidth": bandwidth, "ridge_intensity": ridge,
            "forward_time_s": total, "memory_bound_time_fraction":
            memory_time / total if total else 0.0, "nodes": rows}
