r"""FLOPs and bytes of every node of the Transformer graph, as functions of its shapes.

Each op with matrix products declares its forward and backward ``dot_general`` FLOPs in
closed form (:data:`MATMUL_FORMS`, a multiply–add counting 2: :math:`X W` with
:math:`X \in \mathbb R^{n\times d_{in}}`, :math:`W \in \mathbb R^{d_{in}\times d_{out}}`
costs :math:`2 n d_{in} d_{out}`); :func:`graph_costs` also counts the op's own code
(:func:`nlaverify.cost.count.count_op`) and records both, so a closed form that disagrees
with the code is visible (and tested exactly). The elementwise FLOPs (norms, softmax,
activations, the loss) are taken from that count of the code: a closed form for them would
only restate the implementation's choices.

Bytes follow the unfused model: each op reads its inputs from memory once and writes its
output once; its VJP reads the cotangent and the inputs and writes one cotangent per real
argument. Parameters are read once per batch, activations once per sequence (Baggag & Saad
§3.14; Kaplan et al. 2020, Table 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import networkx as nx

from nlaverify.cost.count import OpCount, count_op

__all__ = ["MATMUL_FORMS", "NodeCost", "component_of", "graph_costs", "matmul_form"]

Shapes = list[tuple[int, ...]]


def _linear(s: Shapes, static: dict[str, Any]) -> tuple[int, int]:
    r""":math:`Y = XW`: forward :math:`2nd_{in}d_{out}`; VJP :math:`\bar X = GW^\top`,
    :math:`\bar W = X^\top G`: :math:`4nd_{in}d_{out}`."""
    n = math.prod(s[0][:-1])
    d_in, d_out = s[1]
    return 2 * n * d_in * d_out, 4 * n * d_in * d_out


def _unembed_tied(s: Shapes, static: dict[str, Any]) -> tuple[int, int]:
    r""":math:`Z = XW_E^\top`: :math:`2ndV` forward, :math:`4ndV` backward."""
    n = math.prod(s[0][:-1])
    V, d = s[1]
    return 2 * n * d * V, 4 * n * d * V


def _embed(s: Shapes, static: dict[str, Any]) -> tuple[int, int]:
    r"""A gather forward (no product); the VJP is written as the one-hot product
    :math:`\bar W_E = U^\top G`, :math:`U \in \{0,1\}^{n\times V}`: :math:`2nVd`."""
    n = math.prod(s[0])
    V, d = s[1]
    return 0, 2 * n * V * d


def _lora(s: Shapes, static: dict[str, Any]) -> tuple[int, int]:
    r""":math:`XW + sXAB`: forward :math:`2n(d_{in}d_{out} + d_{in}r + rd_{out})`; VJP
    :math:`GW^\top, X^\top G` (:math:`4nd_{in}d_{out}`), :math:`GB^\top, (GB^\top)A^\top,
    X^\top(GB^\top), XA, (XA)^\top G`: :math:`2n(3d_{in}r + 2rd_{out})`."""
    n = math.prod(s[0][:-1])
    d_in, d_out = s[1]
    r = s[-1][0]
    return (2 * n * (d_in * d_out + d_in * r + r * d_out),
            4 * n * d_in * d_out + 2 * n * (3 * d_in * r + 2 * r * d_out))


def _attention(s: Shapes, static: dict[str, Any]) -> tuple[int, int]:
    r"""Softmax attention as the code computes it, every score of the :math:`n\times n_k`
    matrix (masked ones too): :math:`S = QK^\top`, :math:`PV`:
    :math:`2hn n_k(d_k + d_v)` forward; the VJP recomputes :math:`S`
    (:math:`2hnn_kd_k`) and forms :math:`P^\top G, GV^\top, dS\,K, dS^\top Q`:
    :math:`2hnn_k(3d_k + 2d_v)`."""
    *lead, n, d_k = s[0]
    n_k, d_v = s[2][-2], s[2][-1]
    h = math.prod(lead)
    return 2 * h * n * n_k * (d_k + d_v), 2 * h * n * n_k * (3 * d_k + 2 * d_v)


def _rwkv_time_mix(s: Shapes, static: dict[str, Any]) -> tuple[int, int]:
    r"""RWKV's time mixing: :math:`k, v, z_r = x_\mu W` and :math:`hW_o`: :math:`8nda`
    forward; the VJP recomputes the three projections (:math:`6nda`) and takes four
    :math:`(\bar X, \bar W)` pairs (:math:`16nda`): :math:`22nda`."""
    n = math.prod(s[0][:-1])
    d, a = s[6]
    return 8 * n * d * a, 22 * n * d * a


def _rwkv_channel_mix(s: Shapes, static: dict[str, Any]) -> tuple[int, int]:
    r"""RWKV's channel mixing: :math:`x_\mu W_k`, :math:`x_\mu W_r`, :math:`kW_v`:
    :math:`2n(2df + d^2)` forward; the VJP recomputes them and takes three
    :math:`(\bar X, \bar W)` pairs: :math:`6n(2df + d^2)`."""
    n = math.prod(s[0][:-1])
    d, f = s[3]
    return 2 * n * (2 * d * f + d * d), 6 * n * (2 * d * f + d * d)


#: op name -> ``form(arg_shapes, static) -> (forward, backward)`` matmul FLOPs
MATMUL_FORMS: dict[str, Callable[[Shapes, dict[str, Any]], tuple[int, int]]] = {
    "linear": _linear, "affine": _linear, "unembed_tied": _unembed_tied, "embed": _embed,
    "lora_linear": _lora, "lora_affine": _lora, "attention": _attention,
    "rwkv_time_mix": _rwkv_time_mix, "rwkv_channel_mix": _rwkv_channel_mix,
}

#: ops without a product (elementwise, reshapes): zero matmul FLOPs both ways
NO_MATMUL = frozenset({
    "add_learned_positions", "add_positions", "scale", "layernorm", "rmsnorm", "split_heads",
    "merge_heads", "repeat_kv", "rope", "residual_add", "gelu_tanh", "gelu_erf", "relu",
    "swiglu", "geglu", "cross_entropy", "topk_mask", "split_channels", "merge_channels",
    "concat_last"})


def matmul_form(op: str, arg_shapes: Shapes, static: dict[str, Any]) -> tuple[int, int] | None:
    r"""The closed-form ``(forward, backward)`` matmul FLOPs of ``op`` at ``arg_shapes``
    (:data:`MATMUL_FORMS`; ``(0, 0)`` for ops without products), or ``None`` when the op
    declares none (its count of the code stands alone)."""
    if op in MATMUL_FORMS:
        return MATMUL_FORMS[op](arg_shapes, static)
    return (0, 0) if op in NO_MATMUL else None


def component_of(node: str) -> str:
    """The component a node's cost is summed into: ``embedding``, ``attention``, ``mamba``
    (Mamba's mixer), ``mamba2`` (Mamba-2's), ``rwkv`` (RWKV's time mixing), ``mlp``,
    ``channel_mix`` (RWKV's, in place of the MLP), ``norms``, ``residual``, ``unembedding``
    or ``loss``."""
    parts = node.split(".")
    if parts[0] == "blocks":
        part = parts[2]
        return {"attn": "attention", "mamba": "mamba", "mamba2": "mamba2", "rwkv": "rwkv",
                "mlp": "mlp", "ffn": "channel_mix", "resid1": "residual",
                "resid2": "residual"}.get(part, "norms")
    if node in ("embed", "embed_scaled", "x0"):
        return "embedding"
    if node == "final_norm":
        return "norms"
    return "loss" if node == "loss" else "unembedding"


@dataclass(frozen=True)
class NodeCost:
    r"""The cost of one op node for a batch: ``forward`` and ``backward``
    (:class:`~nlaverify.cost.count.OpCount` of the op's code, times the batch),
    ``forward_matmul_form`` / ``backward_matmul_form`` (the closed forms, ``None`` when the
    op declares none), and bytes read and written forward and backward. Its arithmetic
    intensity is :math:`I = \text{FLOPs}/\text{bytes}`."""

    name: str
    op: str
    component: str
    block: int | None
    shape: tuple[int, ...]
    forward: OpCount
    backward: OpCount
    forward_matmul_form: int | None
    backward_matmul_form: int | None
    forward_bytes: int
    backward_bytes: int

    @property
    def intensity(self) -> float:
        r"""Forward arithmetic intensity, FLOPs per byte moved."""
        return self.forward.flops / self.forward_bytes if self.forward_bytes else math.inf

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "op": self.op, "component": self.component,
                "block": self.block, "shape": list(self.shape),
                "forward_flops": self.forward.flops, "forward_matmul": self.forward.matmul,
                "forward_transcendental": self.forward.transcendental,
                "backward_flops": self.backward.flops, "backward_matmul": self.backward.matmul,
                "forward_matmul_form": self.forward_matmul_form,
                "backward_matmul_form": self.backward_matmul_form,
                "forward_bytes": self.forward_bytes, "backward_bytes": self.backward_bytes,
                "intensity": self.intensity}


def _bind(shape: tuple[Any, ...], n: int) -> tuple[int, ...]:
    return tuple(n if isinstance(s, str) else int(s) for s in shape)


def graph_costs(graph: nx.DiGraph, seq_len: int, batch: int = 1,
                itemsize: int = 4) -> list[NodeCost]:
    r"""The :class:`NodeCost` of every op node of ``graph`` for ``batch`` sequences of
    ``seq_len`` tokens, values of ``itemsize`` bytes (token ids 4 bytes), in topological
    order. FLOPs are counted per sequence and multiplied by the batch (a parameter
    gradient summed over the batch costs the same products); parameters are read once."""
    import jax.numpy as jnp

    from nlaverify.ops.registry import get_op

    out = []
    for node in nx.topological_sort(graph):
        attrs = graph.nodes[node]
        if attrs["kind"] != "op":
            continue
        srcs = [u for u, _, _ in sorted(graph.in_edges(node, data="pos"), key=lambda e: e[2])]
        shapes = [_bind(graph.nodes[u]["shape"], seq_len) for u in srcs]
        ints = [graph.nodes[u].get("dtype") == "int" for u in srcs]
        dtypes = [jnp.int32 if i else jnp.float32 for i in ints]
        oshape = _bind(attrs["shape"], seq_len)
        static = dict(attrs.get("static", {}))
        fwd, bwd = count_op(attrs["op"], shapes, dtypes, static, oshape, jnp.float32)
        form = matmul_form(attrs["op"], shapes, static)
        spec = get_op(attrs["op"])

        def nbytes(u: str, shape: tuple[int, ...], is_int: bool) -> int:
            per_seq = graph.nodes[u]["kind"] != "param"
            return math.prod(shape) * (4 if is_int else itemsize) * (batch if per_seq else 1)

        reads = sum(nbytes(u, s, i) for u, s, i in zip(srcs, shapes, ints, strict=True))
        written = math.prod(oshape) * itemsize * batch
        grads = sum(nbytes(u, s, i) for u, s, i, a in zip(srcs, shapes, ints, spec.args,
                                                          strict=True) if a.kind == "real")
        bwd_bytes = (reads + written + grads) if spec.differentiable else 0
        out.append(NodeCost(node, attrs["op"], component_of(node), _block_of(node), oshape,
                            fwd * batch, bwd * batch,
                            None if form is None else form[0] * batch,
                            None if form is None else form[1] * batch,
                            reads + written, bwd_bytes))
    return out


def _block_of(node: str) -> int | None:
    parts = node.split(".")
    return int(parts[1]) if parts[0] == "blocks" else None
