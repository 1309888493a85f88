r"""Reading a model as linear algebra (Baggag & Saad §3.15-3.16; Elhage et al. 2021): the
logit lens (every residual-stream state read through the final norm and the unembedding),
the attention patterns as row-stochastic transport matrices and their rollout (Abnar &
Zuidema 2020), and each head's OV and QK circuits as low-rank :math:`d\times d` matrices.

Everything is computed from the graph's own node values and op specs (float64, NumPy): the
lens applies the running ``final_norm`` and ``logits`` ops to an earlier state; the
patterns are the softmax of the running ``attention_scores`` of the very queries and keys
the ``attention`` node received, so that ``pattern @ V`` is that node's value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.config import TransformerConfig
from nlaverify.errors import ArgumentError
from nlaverify.graph.build import build_transformer
from nlaverify.graph.core import _arguments, evaluate
from nlaverify.graph.run import graph_inputs, sample_data
from nlaverify.ops.registry import get_op
from nlaverify.ops.sdpa import attention_scores
from nlaverify.ops.softmaxes import log_softmax, softmax

__all__ = ["LensRow", "attention_patterns", "attention_rollout", "logit_lens", "ov_circuit",
           "qk_circuit"]

_SCORE_STATICS = ("causal", "window", "scale", "align")


def _run(config: TransformerConfig, params: dict[str, Any], data: dict[str, Any] | None,
         seed: int, n: int | None) -> tuple[nx.DiGraph, dict[str, Any]]:
    n = min(config.context, 8) if n is None else n
    data = sample_data(config.vocab_size, n, seed) if data is None else data
    g, xp = build_transformer(config), get_namespace("numpy")
    return g, evaluate(g, xp, graph_inputs(g, xp, params, data, "float64"))


@dataclass(frozen=True)
class LensRow:
    """One residual-stream state read as logits: its KL divergence from the model's own
    next-token distribution (mean over positions, nats) and the share of positions whose
    top token is the model's."""

    node: str
    kl_to_final: float
    top1_agreement: float


def _head_map(g: nx.DiGraph, read: str, values: dict[str, Any], state: Any) -> Any:
    """The ops from the final norm to the logits, applied to ``state`` in place of the last
    stream state (the graph's own op specs and parameters)."""
    xp = get_namespace("numpy")
    order = [n for n in nx.topological_sort(g) if n in nx.descendants(g, read)
             and g.nodes[n]["kind"] == "op" and n != "loss"]
    local = {read: state}
    for node in order:
        args = [local.get(a, values[a]) for a in _arguments(g, node)]
        local[node] = get_op(g.nodes[node]["op"]).forward(xp, *args, **g.nodes[node]["static"])
    return local[order[-1]]


def logit_lens(config: TransformerConfig, params: dict[str, Any], *,
               data: dict[str, Any] | None = None, seed: int = 0,
               n: int | None = None) -> list[LensRow]:
    r"""The logit lens: each residual-stream state :math:`h_\ell` (the embedding and the
    stream after every sublayer, pre-LN models) through the final norm and the unembedding,
    :math:`z_\ell = \operatorname{unembed}(\operatorname{norm}(h_\ell))`, compared with the
    model's logits: :math:`\mathrm{KL}(\operatorname{softmax} z \,\|\, \operatorname{softmax}
    z_\ell)` and the top-1 agreement. The last row is the model itself (KL 0)."""
    if config.placement != "pre":
        raise ArgumentError("logit_lens: needs a pre-LN model (its stream is read by the final "
                            f"norm), got placement={config.placement!r}")
    g, values = _run(config, params, data, seed, n)
    read = _arguments(g, "final_norm")[0]
    states = ["x0"] + [node for node in nx.topological_sort(g)
                       if g.nodes[node].get("op") == "residual_add"]
    npx = get_namespace("numpy")
    final = np.asarray(_head_map(g, read, values, values[read]), dtype=np.float64)
    logp = log_softmax(npx, final)
    rows = []
    for s in states:
        z = np.asarray(_head_map(g, read, values, values[s]), dtype=np.float64)
        kl = float(np.mean(np.sum(np.exp(logp) * (logp - log_softmax(npx, z)), -1)))
        top = float(np.mean(np.argmax(z, -1) == np.argmax(final, -1)))
        rows.append(LensRow(s, kl, top))
    return rows


def attention_patterns(config: TransformerConfig, params: dict[str, Any], *,
                       data: dict[str, Any] | None = None, seed: int = 0,
                       n: int | None = None) -> dict[str, np.ndarray]:
    r"""Every softmax attention node's patterns :math:`A_h = \operatorname{softmax}(S_h)`,
    ``(h, n, n)`` (row-stochastic: token-to-token transport, Baggag & Saad §3.15), from the
    queries and keys the node received and its own statics."""
    g, values = _run(config, params, data, seed, n)
    xp = get_namespace("numpy")
    out = {}
    for node in nx.topological_sort(g):
        if g.nodes[node].get("op") != "attention":
            continue
        Q, K, _ = (values[a] for a in _arguments(g, node))
        static = {k: v for k, v in g.nodes[node]["static"].items() if k in _SCORE_STATICS}
        out[node] = np.asarray(softmax(xp, attention_scores(xp, Q, K, **static)))
    if not out:
        raise ArgumentError("attention_patterns: the model has no softmax attention node "
                            f"(attention={config.attention!r})")
    return out


def attention_rollout(patterns: dict[str, np.ndarray], residual: bool = True) -> np.ndarray:
    r"""Attention rollout (Abnar & Zuidema 2020): the product over the layers, first to last,
    of the head-averaged patterns, each mixed with the identity for the residual path,
    :math:`R = \prod_\ell \bigl(\tfrac12\bar A_\ell + \tfrac12 I\bigr)` (``residual``; else
    :math:`\prod_\ell \bar A_\ell`). A product of row-stochastic matrices is row-stochastic:
    row :math:`i` of :math:`R` is a distribution of token :math:`i`'s flow over the inputs."""
    if not patterns:
        raise ArgumentError("attention_rollout: argument 'patterns': expected at least one layer")
    R = None
    for name, A in patterns.items():
        A = np.asarray(A, dtype=np.float64)
        if A.ndim != 3 or A.shape[-1] != A.shape[-2]:
            raise ArgumentError(f"attention_rollout: pattern {name!r}: expected (h, n, n), got "
                                f"{A.shape}")
        M = A.mean(axis=0)
        if residual:
            M = 0.5 * M + 0.5 * np.eye(M.shape[0])
        R = M if R is None else M @ R
    assert R is not None
    return R


def _head_columns(config: TransformerConfig, head: int, kv: bool) -> slice:
    if not 0 <= head < config.n_heads:
        raise ArgumentError(f"argument 'head': expected 0 <= head < {config.n_heads}, got {head}")
    d_h = config.d_head
    h = head // (config.n_heads // config.n_kv_heads) if kv else head
    return slice(h * d_h, (h + 1) * d_h)


def _block_param(params: dict[str, Any], config: TransformerConfig, block: int,
                 name: str) -> np.ndarray:
    if not 0 <= block < config.n_blocks:
        raise ArgumentError(f"argument 'block': expected 0 <= block < {config.n_blocks}, got "
                            f"{block}")
    key = f"blocks.{block}.attn.{name}"
    if key not in params:
        raise ArgumentError(f"no parameter {key!r}: the circuits need separate Q, K, V, O "
                            "projections")
    return np.asarray(params[key], dtype=np.float64)


def ov_circuit(config: TransformerConfig, params: dict[str, Any], block: int,
               head: int) -> np.ndarray:
    r"""The OV circuit of a head, :math:`W^{OV}_h = W^V_{:,h} W^O_{h,:}` (``(d, d)``, rank at
    most :math:`d_h`): what the head writes to the stream for what it reads, given its
    pattern, :math:`A_h X W^{OV}_h` (plus the value bias's constant row :math:`b^V_h W^O_h`,
    the pattern's rows summing to 1)."""
    WV = _block_param(params, config, block, "v.W_V")[:, _head_columns(config, head, True)]
    WO = _block_param(params, config, block, "out.W_O")[_head_columns(config, head, False), :]
    return WV @ WO


def qk_circuit(config: TransformerConfig, params: dict[str, Any], block: int,
               head: int) -> np.ndarray:
    r"""The QK circuit of a head, :math:`W^{QK}_h = W^Q_{:,h} {W^K_{:,h}}^\top` (``(d, d)``,
    rank at most :math:`d_h`): the bilinear form of its scores, :math:`S_h = X W^{QK}_h
    X^\top/\sqrt{d_h}` (without biases). Refused for RoPE, whose rotation depends on the
    positions (no single matrix)."""
    if config.positions == "rope":
        raise ArgumentError("qk_circuit: with RoPE the scores depend on the positions through "
                            "the rotation: there is no single QK matrix")
    WQ = _block_param(params, config, block, "q.W_Q")[:, _head_columns(config, head, False)]
    WK = _block_param(params, config, block, "k.W_K")[:, _head_columns(config, head, True)]
    return WQ @ WK.T
