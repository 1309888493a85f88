r"""Per-node bounds of a run below float64: accumulation lengths, rounding stages and
local condition estimates, composed by the tolerance model (see :mod:`nlaverify.precision`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.graph.core import _arguments
from nlaverify.graph.run import (
    Evaluation,
)
from nlaverify.ops.registry import get_op
from nlaverify.tolerance import Tolerance, tolerance

DTYPES = ("float32", "bfloat16")
MATMUL_PRECISIONS = ("highest", "tf32")

#: ops whose forward does no arithmetic (a gather, a reshape, a permutation)
EXACT_FORWARD = frozenset({"split_heads", "merge_heads", "repeat_kv", "embed", "topk_mask",
                           "concat_last"})
#: ops that multiply matrices (their products round to TF32 under ``"tf32"``); the
#: embedding's VJP is the one-hot product :math:`U^\top G`
MATMUL_OPS = frozenset({"affine", "linear", "unembed_tied", "attention", "causal_attention",
                        "multihead_attention", "moe", "moe_swiglu", "embed", "qwen2_moe",
                        "qwen2_moe_norm", "deepseek_v3_moe"})
#: ops computing a sum of their arguments: their errors add in variance
SUM_OPS = frozenset({"residual_add", "add_learned_positions"})
#: ops whose VJP branches on the sign of an input (argument position): not continuous
BRANCHING_VJP = {"relu": 0}

_EPS = 2.0**-20  # relative perturbation of the condition estimate (float64 at the reference)
_SAMPLES = 2


def accumulations(graph: nx.DiGraph, node: str, n: int,
                  rows: int | None = None) -> tuple[int, int]:
    """The longest accumulation of ``node``'s forward and of its VJP (0: no rounding).

    ``n`` is the sequence length (the keys an attention row sums over) and ``rows`` the
    number of token rows a weight cotangent sums over (``B n`` for a batch; default ``n``).

    Affine maps sum :math:`d_{in}` products forward and :math:`d_{out}` (input cotangent)
    or :math:`n` rows (weight cotangent) backward; attention sums over the head dimension
    and the :math:`n` keys; norms over the :math:`d` features (and :math:`n` rows for
    :math:`\\bar\\gamma, \\bar\\beta`); the loss over the vocabulary. Other ops fall back to
    the largest dimension of their arguments and result.
    """
    attrs = graph.nodes[node]
    op = attrs["op"]
    args = _arguments(graph, node)
    rows = n if rows is None else rows

    def dims(v: str) -> list[int]:
        return [int(s) if s != "n" else n for s in graph.nodes[v].get("shape") or ()]

    if op in ("split_heads", "merge_heads", "topk_mask", "concat_last"):  # no arithmetic
        return 0, 0
    if op == "embed":
        return 0, rows
    if op == "repeat_kv":
        return 0, int(attrs["static"].get("n_rep", 1))
    if op in ("affine", "linear"):
        d_in, d_out = dims(args[1])
        return d_in, max(d_out, rows)
    if op == "unembed_tied":
        V, d = dims(args[1])
        return d, max(V, rows)
    if op in ("attention", "causal_attention"):
        d_k, d_v = dims(args[0])[-1], dims(args[2])[-1]
        return max(d_k, n), max(d_k, d_v, n)
    if op in ("layernorm", "rmsnorm"):
        d = dims(node)[-1]
        return d, max(d, rows)
    if op == "cross_entropy":
        V = dims(args[0])[-1]
        return max(V, rows), V
    if op in ("add_learned_positions", "add_positions", "residual_add", "shift"):
        return 1, 0  # the VJP passes the cotangent on unchanged
    if op in ("softmax", "log_softmax"):
        m = dims(args[0])[-1]
        return m, m
    if op in ("gelu_erf", "gelu_tanh", "relu", "silu", "tanh", "swiglu", "geglu", "mul",
              "scale"):
        return 1, 1
    if op == "rope":
        return 2, 2
    k = max([1, *dims(node), *(d for a in args for d in dims(a))])
    return k, k


def graph_depths(graph: nx.DiGraph) -> tuple[dict[str, int], dict[str, int]]:
    """Longest paths from the inputs (depth) and to a sink (height), in nodes."""
    order = list(nx.topological_sort(graph))
    depth: dict[str, int] = {}
    for node in order:
        depth[node] = 1 + max((depth[p] for p in graph.predecessors(node)), default=0)
    height: dict[str, int] = {}
    for node in reversed(order):
        height[node] = 1 + max((height[c] for c in graph.successors(node)), default=0)
    return depth, height


def block_of(graph: nx.DiGraph, node: str) -> int | None:
    """The block index of ``node`` (``blocks.{l}...``), else ``None``."""
    m = re.match(r"blocks\.(\d+)\.", node)
    if m:
        return int(m.group(1))
    b = graph.nodes[node].get("block")
    return int(b) if isinstance(b, int) else None


def _rms2(x: np.ndarray) -> float:
    return float(np.mean(np.square(x))) if x.size else 0.0


def _maxabs(x: np.ndarray) -> float:
    return float(np.max(np.abs(x))) if x.size else 0.0


def _np(x: Any) -> np.ndarray:
    arr = np.asarray(x.get() if hasattr(x, "get") else x)
    return arr if arr.dtype.kind in "iu" else arr.astype(np.float64)


@dataclass(frozen=True)
class NodeBound:
    """The tolerance of one node's value and cotangent, and what went into it."""

    value: Tolerance
    value_stages: float
    value_condition: float
    cotangent: Tolerance | None
    cot_stages: float | None
    cot_condition: float | None


def node_bounds(
    graph: nx.DiGraph, reference: Evaluation, dtype: str, n: int, *,
    accumulation: str | None = None, products: str | None = None, output: str = "loss",
    seed: int = 0, rows: int | None = None,
) -> dict[str, NodeBound]:
    r"""Per-node tolerances for a run in ``dtype`` (see the module docstring).

    Node :math:`v` gets ``tolerance(dtype, size=K_v, depth=D_v, condition=kappa_v,
    accumulation=..., products=..., composition="random")``: :math:`K_v` the longest
    accumulation it depends on, :math:`D_v` its rounding stages (averaged in variance at
    sums), :math:`\kappa_v` its local condition estimate; ``products`` applies when a
    matmul is on its path.

    Args:
        reference: float64 values and cotangents (condition numbers and the weights of
            sums are taken there).
        accumulation: the precision sums accumulate in (default ``dtype``).
        products: the precision matmul operands are rounded to (``"tfloat32"``).
        seed: seeds the random signs of the condition estimates.
    """
    rng = np.random.default_rng(seed + 1009)
    xp = get_namespace("numpy")
    vals = {k: _np(v) for k, v in reference.values.items()}
    cots = {k: _np(v) for k, v in reference.cotangents.items()}
    order = list(nx.topological_sort(graph))
    real = {v for v in order if graph.nodes[v].get("dtype") != "int"}

    def tol(k: int, stages: float, kappa: float, matmul: bool) -> Tolerance:
        return tolerance(dtype, size=max(1, k), depth=max(1.0, stages), condition=kappa,
                         accumulation=accumulation,
                         products=products if matmul else None, composition="random")

    def signs(shape: tuple[int, ...]) -> np.ndarray:
        return rng.choice(np.array([-1.0, 1.0]), size=shape)

    # forward: stages D, variance V, longest accumulation K, matmul on the path, kappa
    D: dict[str, float] = {}
    K: dict[str, int] = {}
    mm: dict[str, bool] = {}
    kappa: dict[str, float] = {}
    for v in order:
        attrs = graph.nodes[v]
        if v not in real:
            continue
        if attrs["kind"] != "op":
            D[v], K[v], mm[v], kappa[v] = 0.0, 1, False, 1.0
            continue
        args = [a for a in _arguments(graph, v) if a in real]
        k_f, _ = accumulations(graph, v, n, rows)
        rounds = attrs["op"] not in EXACT_FORWARD and k_f > 0
        K[v] = max([K[a] for a in args] + [max(k_f, 1)])
        mm[v] = any(mm[a] for a in args) or (rounds and attrs["op"] in MATMUL_OPS)
        inherited = _weighted([(_rms2(vals[a]), D[a]) for a in args]) \
            if attrs["op"] in SUM_OPS else max((D[a] for a in args), default=0.0)
        D[v] = inherited + (1.0 if rounds else 0.0)
        kappa[v] = _forward_condition(graph, v, vals, D, xp, signs)
        if not rounds:  # an exact op passes its input's error on as it is, amplified or not
            kappa[v] = max([kappa[v]] + [kappa[a] for a in args if D[a] > 0])
    # backward: from the output, in back-propagation order
    DC: dict[str, float] = {output: 0.0}
    KC: dict[str, int] = {output: 1}
    mmc: dict[str, bool] = {output: mm.get(output, False)}
    kc: dict[str, float] = {output: 1.0}
    for v in reversed(order):
        if v == output or v not in real or v not in cots:
            continue
        consumers = [c for c in graph.successors(v) if c in DC]
        if not consumers:
            continue
        terms, ks, mms = [], [], []
        base, kc[v] = _cotangent_condition(graph, v, consumers, vals, cots, D, DC, xp, signs)
        for c, contrib in zip(consumers, base, strict=True):
            _, k_b = accumulations(graph, c, n, rows)
            reads = [a for a in _arguments(graph, c) if a in D]
            if k_b == 0:  # the VJP passes the cotangent on as it is
                terms.append((_rms2(contrib), DC[c]))
                kc[v] = max(kc[v], kc[c])
            else:
                terms.append((_rms2(contrib), max([DC[c]] + [D[a] for a in reads]) + 1.0))
            ks.append(max([KC[c], k_b, 1] + [K[a] for a in reads]))
            mms.append(mmc[c] or any(mm[a] for a in reads)
                       or (k_b > 0 and graph.nodes[c]["op"] in MATMUL_OPS))
        DC[v] = _weighted(terms) + (1.0 if len(terms) > 1 else 0.0)
        KC[v], mmc[v] = max(ks), any(mms)
        beta = _branch_error(graph, v, consumers, vals, cots, {
            w: tol(K[w], D[w], kappa[w], mm[w]).rtol for w in D if D[w] > 0})
        if beta > 0.0:  # as many stages as the branch error is worth
            DC[v] += (beta / (kc[v] * tol(KC[v], 1.0, 1.0, mmc[v]).rtol)) ** 2
    out: dict[str, NodeBound] = {}
    for v in order:
        if v not in real:
            continue
        vt = tol(K[v], D[v], kappa[v], mm[v]) if D[v] > 0 else Tolerance(
            0.0, "exact: an input, or computed without rounding")
        ct = None
        if v in DC:
            ct = tol(KC[v], DC[v], kc[v], mmc[v]) if DC[v] > 0 else Tolerance(
                0.0, "exact: the seed of back-propagation")
        out[v] = NodeBound(vt, D[v], kappa[v], ct, DC.get(v), kc.get(v))
    return out


def _branch_error(graph, v, consumers, vals, cots, value_rtol) -> float:
    r"""The error a branch decided within the error band can put in :math:`\bar v`.

    ReLU's VJP sends :math:`g_i\,\mathbb 1[x_i > 0]`: where :math:`|x_i|` is within the
    bound of :math:`x`'s error the sign, hence the entry, may differ from the reference
    by :math:`|g_i|`, a jump no linearization sees (bfloat16 through Post-LN ReLU blocks
    meets it). Returns the largest such :math:`|g_i|` relative to :math:`\max|\bar v|`.
    """
    scale = 0.0
    worst = 0.0
    for c in consumers:
        pos = BRANCHING_VJP.get(graph.nodes[c].get("op"))
        if pos is None:
            continue
        x = _arguments(graph, c)[pos]
        if x != v or x not in value_rtol:
            continue
        band = value_rtol[x] * _maxabs(vals[x])
        undecided = np.abs(vals[x]) <= band
        if np.any(undecided):
            worst = max(worst, float(np.max(np.abs(cots[c])[undecided])))
        scale = _maxabs(cots[v]) if v in cots else 0.0
    return worst / scale if scale > 0 else 0.0


def _weighted(terms: list[tuple[float, float]]) -> float:
    """:math:`\\sum_w m_w D_w / \\sum_w m_w` (the plain maximum when all weights vanish)."""
    total = sum(m for m, _ in terms)
    if total <= 0.0:
        return max((x for _, x in terms), default=0.0)
    return sum(m * x for m, x in terms) / total


def _perturb(x: np.ndarray, signs: Any) -> np.ndarray:
    """``x`` plus a random normwise perturbation :math:`\\epsilon\\,\\mathrm{rms}(x)\\, r`."""
    return x + _EPS * math.sqrt(_rms2(x)) * signs(np.shape(x))


def _forward_condition(graph, v, vals, D, xp, signs) -> float:
    """:math:`\\kappa_v` of the op computing ``v``: the root-mean-square amplification of
    random normwise perturbations of its inputs that carry error."""
    attrs = graph.nodes[v]
    spec = get_op(attrs["op"])
    args = _arguments(graph, v)
    noisy = [i for i, (a, s) in enumerate(zip(args, spec.args, strict=True))
             if s.kind in ("real", "fixed") and D.get(a, 0.0) > 0]
    y = vals[v]
    scale = _rms2(y)
    if not noisy or scale == 0.0:
        return 1.0
    worst = 0.0
    for _ in range(_SAMPLES):
        pert = [_perturb(vals[a], signs) if i in noisy else vals[a] for i, a in enumerate(args)]
        y2 = _np(spec.forward(xp, *pert, **attrs["static"]))
        worst = max(worst, _rms2(y2 - y))
    return max(1.0, math.sqrt(worst / scale) / _EPS)


def _cotangent_condition(graph, v, consumers, vals, cots, D, DC, xp, signs):
    """The contributions each consumer sends to ``v``, and :math:`\\kappa` of their sum:
    the root-mean-square amplification of random normwise perturbations of the
    consumers' cotangents and of their inputs that carry error (hand-derived VJPs in
    float64, used only to estimate the conditioning of the exact map: the cotangents
    themselves are judged against JAX autodiff)."""

    def sent(c: str, perturb: bool) -> np.ndarray:
        attrs = graph.nodes[c]
        spec = get_op(attrs["op"])
        srcs = _arguments(graph, c)
        args = [_perturb(vals[s], signs) if (
                    perturb and a.kind in ("real", "fixed") and D.get(s, 0.0) > 0)
                else vals[s] for s, a in zip(srcs, spec.args, strict=True)]
        G = _perturb(cots[c], signs) if perturb and DC[c] > 0 else cots[c]
        grads = spec.vjp(xp, G, *args, **attrs["static"])
        real_srcs = [s for s, a in zip(srcs, spec.args, strict=True) if a.kind == "real"]
        total: Any = 0.0
        for s, g in zip(real_srcs, grads, strict=True):
            if s == v:
                total = total + _np(g)
        return np.asarray(total, dtype=np.float64)

    base = [sent(c, False) for c in consumers]
    ref = sum(base[1:], base[0])
    scale = _rms2(ref)
    if scale == 0.0:
        return base, 1.0
    worst = 0.0
    for _ in range(_SAMPLES):
        pert = [sent(c, True) for c in consumers]
        worst = max(worst, _rms2(sum(pert[1:], pert[0]) - ref))
    return base, max(1.0, math.sqrt(worst / scale) / _EPS)


