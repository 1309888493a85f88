r"""Totals of the node costs: per component, per block, per token; Kaplan et al.'s rules
and every term they drop.

Kaplan et al. (2020, Table 1) count a forward pass per token as

.. math:: C_\text{forward} = 2N + 2 n_\text{layer} n_\text{ctx} d_\text{attn},

:math:`N` the non-embedding parameters, and training as :math:`3C_\text{forward}`, whence
the rule :math:`C \approx 6N` per token (Baggag & Saad §3.14). The rules drop the logits
(:math:`6dV` per token trained), the elementwise work (norms, softmax, activations, the loss),
and count every parameter, biases and norm gains too, as a weight of a product (6 FLOPs per
token). :func:`rule_comparison` sizes each of these terms against the graph's own count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from nlaverify.config import TransformerConfig
from nlaverify.config_mla import uses_mla
from nlaverify.cost.nodes import NodeCost
from nlaverify.graph.build import parameter_counts

__all__ = ["COMPONENTS", "Term", "attention_pairs", "by_block", "by_component",
           "rule_comparison"]

COMPONENTS = ("embedding", "attention", "mamba", "mamba2", "rwkv", "mlp", "channel_mix",
              "norms", "residual", "unembedding", "loss")

#: parameter components outside Kaplan et al.'s N (vocabulary and positional embeddings)
EMBEDDING_COMPONENTS = ("embedding", "positions", "unembedding")

#: ops whose matrix products are the block's weight products (RWKV's mixers hold their
#: projections inside the op: :math:`XW_k, XW_v, XW_r, hW_o`; :math:`XW_k, XW_r, kW_v`; their
#: VJPs recompute the forward products, so the code does more than 6 per weight there)
_PRODUCT_OPS = ("linear", "affine", "lora_linear", "lora_affine", "rwkv_time_mix",
                "rwkv_channel_mix")


def by_component(costs: list[NodeCost]) -> dict[str, dict[str, int]]:
    r"""Forward and backward FLOPs (all, and matmul) and bytes summed per component."""
    out: dict[str, dict[str, int]] = {}
    for c in costs:
        row = out.setdefault(c.component, dict.fromkeys(
            ("forward", "forward_matmul", "backward", "backward_matmul", "forward_bytes",
             "backward_bytes"), 0))
        row["forward"] += c.forward.flops
        row["forward_matmul"] += c.forward.matmul
        row["backward"] += c.backward.flops
        row["backward_matmul"] += c.backward.matmul
        row["forward_bytes"] += c.forward_bytes
        row["backward_bytes"] += c.backward_bytes
    return {k: out[k] for k in COMPONENTS if k in out}


def by_block(costs: list[NodeCost]) -> dict[int, dict[str, int]]:
    r"""Forward and backward FLOPs summed per block (nodes outside blocks left out)."""
    out: dict[int, dict[str, int]] = {}
    for c in costs:
        if c.block is not None:
            row = out.setdefault(c.block, {"forward": 0, "backward": 0})
            row["forward"] += c.forward.flops
            row["backward"] += c.backward.flops
    return out


def attention_pairs(n: int, causal: bool, window: int | None) -> int:
    r"""Query–key pairs a head attends to: :math:`n^2` without a mask,
    :math:`\sum_{i=1}^{n}\min(i, w) = n(n+1)/2` causally (:math:`w = n` without a sliding
    window)."""
    if not causal:
        return n * n
    w = n if window is None else min(window, n)
    return w * (w + 1) // 2 + (n - w) * w


@dataclass(frozen=True)
class Term:
    """One term of the training FLOPs per token: its name, value and what the rules do
    with it."""

    name: str
    flops: float
    note: str = field(default="")

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "flops_per_token": self.flops, "note": self.note}


def rule_comparison(config: TransformerConfig, graph: Any, costs: list[NodeCost],
                    seq_len: int, batch: int) -> dict[str, Any]:
    r"""Training FLOPs per token: the graph's count (forward + VJP of the code) against
    Kaplan et al.'s :math:`3C_\text{forward} = 6N + 6n_\text{layer}n_\text{ctx}d_\text{attn}`
    and the :math:`6N` rule, with the terms that make up the difference.

    ``ideal`` is the count a causal kernel with a conventional backward does: the block
    products (:math:`6` per weight), attention on the :math:`n(n+1)/2` unmasked pairs only
    with backward :math:`= 2\times` forward, the logits, the elementwise work; it is what the
    rules approximate. ``code`` is what the graph's ops compute: every masked score, the
    scores recomputed in the VJP, the embedding gradient as a one-hot product.
    """
    tokens = seq_len * batch
    counts = parameter_counts(graph)
    n_total = counts.total
    N = n_total - sum(counts.by_component.get(k, 0) for k in EMBEDDING_COMPONENTS)
    L, d_attn = config.n_blocks, config.n_heads * config.d_head
    dk = dv = config.d_head
    if uses_mla(config):  # DeepSeek-V2: scores over d_c + d_r, values of d_v
        dk, dv = config.qk_nope_head_dim + config.qk_rope_head_dim, config.v_head_dim
        d_attn = config.n_heads * (dk + dv) / 2  # QK^T and PV as Kaplan's two d_attn terms
    per = 1.0 / tokens
    mm = {k: 0 for k in ("block_products", "attention", "unembedding", "embedding", "other")}
    elementwise: dict[str, float] = {}
    weights = 0
    for c in costs:
        total_mm = c.forward.matmul + c.backward.matmul
        if c.block is not None and c.op in _PRODUCT_OPS:
            mm["block_products"] += total_mm
        elif c.op == "attention":
            mm["attention"] += total_mm
        elif c.component in mm:
            mm[c.component] += total_mm
        else:
            mm["other"] += total_mm
        comp = "attention (softmax, scale, mask)" if c.component == "attention" else c.component
        elementwise[comp] = elementwise.get(comp, 0) + c.forward.elementwise + \
            c.backward.elementwise
    for _, attrs in graph.nodes(data=True):
        if attrs["kind"] == "param" and attrs["block"] is not None and len(attrs["shape"]) == 2:
            weights += math.prod(attrs["shape"])
    # the attention terms count attention blocks only (Mamba's, Mamba-2's and RWKV's mixers
    # have no QK^T, PV),
    # each with its window (Gemma 2's window_layers: the others see the whole prefix)
    attn = [b for b in range(L) if config.block_mixer(b) == "attention"]
    La = len(attn)
    pairs = sum(attention_pairs(seq_len, config.causal, None if config.window_layers is not None
                                and b not in config.window_layers else config.sliding_window)
                for b in attn)
    attn_fwd_ideal = 2 * pairs * (dk + dv) * config.n_heads * batch if \
        config.attention == "softmax" else mm["attention"] / 3
    code = sum(c.forward.flops + c.backward.flops for c in costs) * per
    non_matmul = sum(elementwise.values()) * per
    ideal = (mm["block_products"] + 3 * attn_fwd_ideal + mm["unembedding"]) * per + non_matmul
    kaplan_fwd = 2 * N + 2 * La * seq_len * d_attn
    terms = [
        Term("block weight products", mm["block_products"] * per,
             "6 per matrix weight per token: the 6N rule proper"),
        Term("6N on biases and norm gains", 6.0 * (N - weights),
             "counted by 6N as products, never multiplied (subtract)"),
        Term("attention QK^T and PV (code: dense, masked, scores recomputed in VJP)",
             mm["attention"] * per, "Kaplan: 6 n_layer n_ctx d_attn; 6N: dropped"),
        Term("attention QK^T and PV (ideal: causal pairs, backward = 2x forward)",
             3 * attn_fwd_ideal * per, "n(n+1)/2 pairs per head"),
        Term("unembedding (logits)", mm["unembedding"] * per,
             "6 d V per token; dropped by both rules"),
        Term("embedding backward (one-hot product as written)", mm["embedding"] * per,
             "a scatter-add would need n d additions; dropped by both rules"),
    ] + [Term(f"elementwise: {k}", v * per, "dropped by both rules")
         for k, v in elementwise.items() if v]
    return {"tokens": tokens, "N_nonembedding": N, "N_total": n_total,
            "n_layer": L, "n_ctx": seq_len, "d_attn": d_attn,
            "code_per_token": code, "ideal_per_token": ideal,
            "kaplan_forward_per_token": kaplan_fwd, "kaplan_training_per_token": 3 * kaplan_fwd,
            "six_N": 6 * N, "ideal_over_kaplan": ideal / (3 * kaplan_fwd),
            "code_over_kaplan": code / (3 * kaplan_fwd), "code_over_six_N": code / (6 * N),
            "forward_per_token": sum(c.forward.flops for c in costs) * per,
            "terms": [t.as_dict() for t in terms]}
