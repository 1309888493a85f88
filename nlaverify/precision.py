r"""Verification below float64: the Transformer graph run in float32 or bfloat16, node
by node against a float64 reference, each node judged by the tolerance model.

Subject: the graph evaluated and back-propagated (hand-derived VJPs) in ``dtype``,
float32 on NumPy or JAX, bfloat16 on JAX (``jnp.bfloat16``). Reference: JAX autodiff of
the same graph in float64 (:func:`nlaverify.graph.run.autodiff_reference`) with the
*same* parameters: they are drawn in float64, rounded to ``dtype`` and converted back
exactly, so what is measured is the arithmetic error of the run, not the rounding of
the parameters. The reference's own error (:math:`\approx 2^{-53}`) is :math:`2^{-29}`
times below float32's unit roundoff and is neglected.

Measured, per node :math:`v`: the normwise relative error of its value and of its
cotangent, :math:`\max_\iota|a_\iota - e_\iota| / \max_\iota|e_\iota|`.

Bound, per node: :func:`nlaverify.tolerance.tolerance` with

* :math:`k_v`, the longest accumulation of the stages :math:`v` depends on (an op's
  own inner dimension, e.g. :math:`d_{in}` for :math:`XW`, not the graph's largest);
* the stage precisions: bfloat16 storage with float32 accumulation on XLA (matmuls and
  ``jnp.sum`` accumulate in float32), and TF32 products when ``matmul_precision="tf32"``;
* :math:`D_v`, the number of rounding stages :math:`v` depends on, composed at random
  (:math:`\sqrt{D}`, Higham & Mary 2019). Exact ops (gathers, head splits and merges)
  are not stages. At a sum :math:`z = x + y` (the residual stream, Baggag & Saad §3.8)
  independent errors add in variance, so :math:`D_z = 1 + (\|x\|^2 D_x + \|y\|^2 D_y)
  / (\|x\|^2 + \|y\|^2)` (root-mean-square norms); likewise where the cotangents sent by
  several consumers are summed (Baggag & Saad §2.6). A cotangent depends on the forward
  values its VJPs read and on the backward stages from the loss;
* :math:`\kappa_v`, the local condition number of the op computing :math:`v` (of the
  VJPs summed into a cotangent), by small-sample statistical condition estimation
  (Kenney & Laub 1994): its inputs that carry rounding error are perturbed, :math:`w +
  \epsilon\,\mathrm{rms}(w)\,r` with random signs :math:`r`, and :math:`\kappa_v =
  \max(1, \mathrm{rms}(\Delta v) / (\epsilon\,\mathrm{rms}(v)))` over two draws, in
  float64 at the reference point. It multiplies the bound of :math:`v` and is passed on
  through exact ops (a permutation keeps the error it is given), but not through the
  next rounding stage: measured errors do not compound stage by stage, while products
  of local estimates (1.1 to 1.5 for well-conditioned stages, whose random-direction
  gain exceeds the gain along the data) grow geometrically with depth and made every
  bfloat16 cotangent bound exceed 1. Where an amplification is real and local, e.g.
  the cancellation :math:`dP - \operatorname{rowsum}(dP\odot P)` of the attention VJP
  (:math:`\kappa \approx 3` for :math:`\bar Q`), it is counted at that node and in the
  heads split before it; the nodes upstream see it through their own stage count only
  (the worst ratios of the tables, about 0.35, are there). A quantity that is zero up
  to rounding (the cotangent of the key bias: softmax is invariant to a shift of a row
  of scores) gets :math:`\kappa \gg 1/u` and a bound above 1: no digit of it is
  meaningful, and the report counts it apart instead of failing.
* a branch: ReLU's VJP :math:`g \odot \mathbb 1[x > 0]` jumps by :math:`|g_i|` when
  the sign of an :math:`x_i` within its error bound differs from the reference's; the
  largest such jump is added to the cotangent's bound (as the stages it is worth, so
  the nodes upstream inherit it). Routing flips of mixture-of-experts (``topk_mask``)
  are not modelled.

Matmul precision on GPUs: JAX runs float32 matmuls in TF32 by default there. The JAX
run is pinned to ``jax.default_matmul_precision("highest")`` (full float32 products);
``matmul_precision="tf32"`` runs with ``"tensorfloat32"`` instead and models TF32's
unit roundoff :math:`2^{-11}` for the products of matmul stages. CPUs have no TF32:
:func:`emulate_tf32` rounds matmul operands to TF32 in software for the tests.

Run ``python -m nlaverify.precision --preset tiny --dtype bfloat16`` (the same as
``nlaverify verify --preset tiny --dtype bfloat16``), or ``python -m
nlaverify.precision --figure docs/figures/precision_depth.svg`` for the figure of
error growth with depth.

Seed: Baggag & Saad §2.6 (back-propagation), §3.3-§3.9 (the blocks); Higham & Mary,
SIAM J. Sci. Comput. 41(5), 2019 (probabilistic rounding error analysis); Kenney &
Laub, SIAM J. Sci. Comput. 15(1), 1994 (statistical condition estimation).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np

from nlaverify import jsonout
from nlaverify.backends import get_namespace
from nlaverify.config import TransformerConfig
from nlaverify.errors import ArgumentError
from nlaverify.graph.build import build_transformer
from nlaverify.graph.core import _arguments, backprop, evaluate
from nlaverify.graph.run import (
    Evaluation,
    autodiff_reference,
    check_run_size,
    graph_inputs,
    init_params,
    sample_data,
)
from nlaverify.ops.registry import OPS, get_op
from nlaverify.tolerance import Tolerance, tolerance, unit_roundoff

DTYPES = ("float32", "bfloat16")
MATMUL_PRECISIONS = ("highest", "tf32")

#: ops whose forward does no arithmetic (a gather, a reshape, a permutation)
EXACT_FORWARD = frozenset({"split_heads", "merge_heads", "repeat_kv", "embed", "topk_mask"})
#: ops that multiply matrices (their products round to TF32 under ``"tf32"``); the
#: embedding's VJP is the one-hot product :math:`U^\top G`
MATMUL_OPS = frozenset({"affine", "linear", "unembed_tied", "attention", "causal_attention",
                        "multihead_attention", "moe", "moe_swiglu", "embed"})
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

    if op in ("split_heads", "merge_heads", "topk_mask"):
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
    if op in ("gelu_erf", "gelu_tanh", "relu", "silu", "tanh", "swiglu", "mul", "scale"):
        return 1, 1
    if op == "rope":
        return 2, 2
    k = max([1, *dims(node), *(d for a in args for d in dims(a))])
    return k, k


def _graph_depths(graph: nx.DiGraph) -> tuple[dict[str, int], dict[str, int]]:
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


@dataclass(frozen=True)
class PrecisionRow:
    """One node: normwise relative errors against the float64 reference, and bounds."""

    node: str
    op: str
    #: longest path from the inputs (forward depth)
    depth: int
    #: longest path to the output (back-propagation depth)
    height: int
    block: int | None
    value_error: float
    value_bound: float
    value_stages: float
    value_condition: float
    cot_error: float | None = None
    cot_bound: float | None = None
    cot_stages: float | None = None
    cot_condition: float | None = None

    @property
    def value_ratio(self) -> float:
        return _ratio(self.value_error, self.value_bound)

    @property
    def cot_ratio(self) -> float | None:
        if self.cot_error is None or self.cot_bound is None:
            return None
        return _ratio(self.cot_error, self.cot_bound)

    @property
    def value_ok(self) -> bool:
        return self.value_error <= self.value_bound and not self.vacuous("value")

    @property
    def cot_ok(self) -> bool:
        return self.cot_error is None or (self.cot_error <= (self.cot_bound or 0.0)
                                          and not self.vacuous("cotangent"))

    def vacuous(self, what: str) -> bool:
        """A bound of 1 or more on a normwise *relative* error admits any answer of the
        right size (a zeroed VJP included): such a check fails as vacuous rather than
        passing, except for the key biases' cotangents, which are exactly 0 (softmax is
        invariant to a per-row shift of the scores: lemma ``softmax_shift_invariance``), so
        that only rounding is left to measure."""
        bound = self.value_bound if what == "value" else self.cot_bound
        if bound is None or bound < 1.0:
            return False
        return not (what == "cotangent" and self.node.endswith(KNOWN_ZERO_COTANGENTS))

    @property
    def ok(self) -> bool:
        return self.value_ok and self.cot_ok

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(value_ratio=self.value_ratio, cot_ratio=self.cot_ratio, ok=self.ok)
        return d


#: parameter nodes whose cotangent is exactly zero (see :meth:`PrecisionRow.vacuous`)
KNOWN_ZERO_COTANGENTS = (".attn.k.b_K",)


def _ratio(err: float, bound: float) -> float:
    if err == 0.0:
        return 0.0
    return err / bound if bound > 0 else math.inf


@dataclass
class PrecisionReport:
    """The outcome of :func:`verify_precision`."""

    preset: str
    dtype: str
    backend: str
    matmul_precision: str
    accumulation: str
    n: int
    seed: int
    rows: list[PrecisionRow] = field(default_factory=list)
    first_value_divergence: str | None = None
    first_cotangent_divergence: str | None = None
    #: ``node (value|cotangent): dtype`` for every array not held in ``dtype``
    promoted: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> int:
        return sum(r.ok for r in self.rows)

    @property
    def failed(self) -> int:
        return len(self.rows) - self.passed

    @property
    def ok(self) -> bool:
        return self.failed == 0 and not self.promoted

    def ratios(self, what: str = "value", *, meaningful: bool = True) -> list[float]:
        """Error/bound ratios of the computed values (``what="value"``) or of the
        cotangents (``"cotangent"``), exact nodes left out; with ``meaningful`` also the
        nodes whose bound is at least 1 (zero up to rounding, nothing to compare)."""
        out = []
        for r in self.rows:
            e, b = (r.value_error, r.value_bound) if what == "value" else (r.cot_error,
                                                                            r.cot_bound)
            if e is None or b is None or b == 0.0 or (meaningful and b >= 1.0):
                continue
            out.append(e / b)
        return out

    def summary(self) -> dict[str, Any]:
        s: dict[str, Any] = {}
        for what in ("value", "cotangent"):
            r = self.ratios(what)
            s[what] = {"nodes": len(r), "median_ratio": float(np.median(r)) if r else 0.0,
                       "worst_ratio": max(r, default=0.0),
                       "not_meaningful": len(self.ratios(what, meaningful=False)) - len(r)}
        s.update(first_value_divergence=self.first_value_divergence,
                 first_cotangent_divergence=self.first_cotangent_divergence,
                 passed=self.passed, failed=self.failed, promoted=self.promoted, ok=self.ok)
        return s

    def as_dict(self) -> dict[str, Any]:
        return {"preset": self.preset, "dtype": self.dtype, "backend": self.backend,
                "matmul_precision": self.matmul_precision, "accumulation": self.accumulation,
                "n": self.n, "seed": self.seed, "summary": self.summary(),
                "timings": self.timings, "rows": [r.as_dict() for r in self.rows]}


def _np_dtype(dtype: str) -> Any:
    if dtype == "bfloat16":
        import jax.numpy as jnp

        return jnp.bfloat16  # ml_dtypes' bfloat16, a NumPy dtype
    return np.dtype(dtype)


def round_params(params: Mapping[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """Parameters rounded to ``dtype`` and held, exactly, in float64."""
    t = _np_dtype(dtype)
    return {k: np.asarray(v).astype(t).astype(np.float64) for k, v in params.items()}


@dataclass
class PrecisionSetup:
    """Everything of a precision check but the subject run: graph, rounded parameters,
    data, the float64 reference and the per-node bounds."""

    config: TransformerConfig
    graph: nx.DiGraph
    dtype: str
    backend: str
    matmul_precision: str
    accumulation: str
    n: int
    seed: int
    params: dict[str, np.ndarray]
    data: dict[str, np.ndarray]
    reference: Evaluation
    bounds: dict[str, NodeBound]
    timings: dict[str, float] = field(default_factory=dict)


_SETUPS: dict[tuple, PrecisionSetup] = {}
_SETUP_CACHE_SIZE = 4


def prepare(
    config: TransformerConfig, dtype: str, *, backend: str | None = None, seed: int = 0,
    n: int = 6, matmul_precision: str = "highest", accumulation: str | None = None,
    batch: int | None = None,
) -> PrecisionSetup:
    """Build the graph, draw and round the parameters, compute the float64 reference and
    the bounds (see :func:`verify_precision` for the arguments). The last few setups are
    kept: a second check of the same configuration (another backend, a planted node)
    reuses its reference and bounds."""
    if dtype not in DTYPES:
        raise ArgumentError(f"verify_precision: argument 'dtype': expected one of "
                            f"{', '.join(DTYPES)}, got {dtype!r}")
    if matmul_precision not in MATMUL_PRECISIONS:
        raise ArgumentError(f"verify_precision: argument 'matmul_precision': expected one of "
                            f"{', '.join(MATMUL_PRECISIONS)}, got {matmul_precision!r}")
    backend = backend or ("jax" if dtype == "bfloat16" else "numpy")
    if backend not in ("numpy", "jax") or (dtype == "bfloat16" and backend != "jax"):
        raise ArgumentError(f"verify_precision: argument 'backend': {dtype} runs on "
                            f"{'jax' if dtype == 'bfloat16' else 'numpy or jax'}, got "
                            f"{backend!r}")
    accumulation = accumulation or _default_accumulation(dtype, backend)
    check_run_size(config, n, batch)
    key = (config, config.name, dtype, seed, n, batch, matmul_precision, accumulation)
    if key in _SETUPS:
        return dataclasses.replace(_SETUPS[key], backend=backend, timings={
            k: 0.0 for k in _SETUPS[key].timings})
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    graph = build_transformer(config)
    params = round_params(init_params(graph, seed), dtype)
    data = sample_data(config.vocab_size, n, seed, batch=batch)
    reference = autodiff_reference(graph, params, data)
    timings["reference"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    bounds = node_bounds(graph, reference, dtype, n, rows=n * (batch or 1),
                         accumulation=accumulation,
                         products="tfloat32" if matmul_precision == "tf32" else None,
                         seed=seed)
    timings["bounds"] = time.perf_counter() - t0
    setup = PrecisionSetup(config, graph, dtype, backend, matmul_precision, accumulation, n,
                           seed, params, data, reference, bounds, timings)
    while len(_SETUPS) >= _SETUP_CACHE_SIZE:
        _SETUPS.pop(next(iter(_SETUPS)))
    _SETUPS[key] = setup
    return dataclasses.replace(setup, timings=dict(timings))


@contextlib.contextmanager
def matmul_precision_scope(backend: str, matmul_precision: str) -> Iterator[None]:
    """Pin JAX's matmul precision: ``"highest"`` (full float32 products: no TF32 on
    GPUs) or ``"tensorfloat32"``; nothing to pin on NumPy."""
    if backend != "jax":
        yield
        return
    import jax

    with jax.default_matmul_precision("highest" if matmul_precision == "highest"
                                      else "tensorfloat32"):
        yield


def run_subject(setup: PrecisionSetup, graph: nx.DiGraph | None = None, xp: Any = None,
                output: str = "loss") -> Evaluation:
    """Evaluate and back-propagate ``graph`` (default: the setup's) in the setup's dtype,
    on its backend (or on the namespace ``xp``, e.g. :func:`emulate_tf32`), JAX's matmul
    precision pinned by :func:`matmul_precision_scope`."""
    graph = setup.graph if graph is None else graph
    xp = get_namespace(setup.backend) if xp is None else xp
    with matmul_precision_scope(getattr(xp, "name", setup.backend), setup.matmul_precision):
        inputs = graph_inputs(graph, xp, setup.params, setup.data, setup.dtype)
        values = evaluate(graph, xp, inputs)
        cot = backprop(graph, xp, values, output)
    return Evaluation(f"{setup.backend}-{setup.dtype}", setup.dtype, values, cot)


def measure(setup: PrecisionSetup, subject: Evaluation) -> PrecisionReport:
    """Compare ``subject`` with the setup's reference node by node."""
    t0 = time.perf_counter()
    g, ref = setup.graph, setup.reference
    depth, height = _graph_depths(g)
    rep = PrecisionReport(setup.config.name, setup.dtype, setup.backend,
                          setup.matmul_precision, setup.accumulation, setup.n, setup.seed,
                          timings=dict(setup.timings))
    order = list(nx.topological_sort(g))
    for v in order:
        attrs = g.nodes[v]
        if attrs.get("dtype") == "int" or v not in subject.values:
            continue
        for what, arr in (("value", subject.values.get(v)),
                          ("cotangent", subject.cotangents.get(v))):
            dt = getattr(arr, "dtype", None)
            if dt is not None and str(dt) != setup.dtype:
                rep.promoted.append(f"{v} ({what}): {dt}")
        b = setup.bounds[v]
        vc = b.value.compare(subject.values[v], ref.values[v], floor=0.0)
        ce = None
        if b.cotangent is not None and v in subject.cotangents and v in ref.cotangents:
            ce = b.cotangent.compare(subject.cotangents[v], ref.cotangents[v],
                                     floor=0.0).normwise
        row = PrecisionRow(v, attrs.get("op", attrs["kind"]), depth[v], height[v],
                           block_of(g, v),
                           vc.normwise, b.value.rtol, b.value_stages, b.value_condition,
                           ce, None if ce is None else b.cotangent.rtol,  # type: ignore[union-attr]
                           None if ce is None else b.cot_stages,
                           None if ce is None else b.cot_condition)
        rep.rows.append(row)
        if not row.value_ok and rep.first_value_divergence is None:
            rep.first_value_divergence = v
    by_node = {r.node: r for r in rep.rows}
    for v in reversed(order):  # back-propagation order
        r = by_node.get(v)
        if r is not None and not r.cot_ok:
            rep.first_cotangent_divergence = v
            break
    rep.timings["compare"] = time.perf_counter() - t0
    return rep


def verify_precision(
    config: TransformerConfig, dtype: str, backend: str | None = None, seed: int = 0,
    n: int = 6, *, matmul_precision: str = "highest", accumulation: str | None = None,
    plant: str | None = None, batch: int | None = None,
) -> PrecisionReport:
    """Run ``config``'s graph in ``dtype`` and compare every node with float64 autodiff.

    Args:
        dtype: ``"float32"`` or ``"bfloat16"``.
        backend: ``"numpy"`` (float32 only) or ``"jax"``; default numpy for float32, jax
            for bfloat16.
        seed, n: the parameters' seed and the sequence length (``1 <= n <= context``).
        batch: ``batch`` right-padded sequences instead of one (see
            :func:`~nlaverify.graph.run.sample_data`).
        matmul_precision: ``"highest"`` (pinned full-precision float32 products) or
            ``"tf32"`` (JAX's ``"tensorfloat32"``, modelled with :math:`u_p = 2^{-11}`).
        accumulation: the accumulation precision of the model (default: float32 for
            bfloat16 on JAX, else ``dtype``).
        plant: a node whose op is replaced by a float16 version (:func:`planted`): the
            check must name it as the first divergent value.
    """
    setup = prepare(config, dtype, backend=backend, seed=seed, n=n,
                    matmul_precision=matmul_precision, accumulation=accumulation, batch=batch)
    t0 = time.perf_counter()
    if plant is None:
        subject = run_subject(setup)
    else:
        with planted(setup.graph, plant) as g:
            subject = run_subject(setup, g)
    setup.timings["subject"] = time.perf_counter() - t0
    return measure(setup, subject)


@contextlib.contextmanager
def planted(graph: nx.DiGraph, node: str, dtype: str = "float16") -> Iterator[nx.DiGraph]:
    """A copy of ``graph`` whose ``node`` computes in ``dtype``: its op is replaced by one
    (registered under a new name while the context lasts) that casts its floating
    inputs to ``dtype``, computes, and casts the result back. The VJP is unchanged."""
    attrs = graph.nodes[node]
    if attrs.get("kind") != "op":
        raise ArgumentError(f"planted: argument 'node': expected an op node, got {node!r}")
    spec = get_op(attrs["op"])
    name = f"{spec.name}@{dtype}#{node}"

    def forward(xp: Any, *args: Any, **static: Any) -> Any:
        floating = [a for a in args if hasattr(a, "dtype") and xp.isdtype(a.dtype,
                                                                           "real floating")]
        back = floating[0].dtype
        low = getattr(xp, dtype)
        cast = [xp.astype(a, low) if any(a is f for f in floating) else a for a in args]
        return xp.astype(spec.forward(xp, *cast, **static), back)

    OPS[name] = dataclasses.replace(spec, name=name, forward=forward)
    g = graph.copy()
    g.nodes[node]["op"] = name
    try:
        yield g
    finally:
        OPS.pop(name, None)


class _TF32Namespace:
    """A namespace whose ``matmul`` rounds its float32 operands to TF32 (10-bit
    mantissa, round to nearest even) before multiplying: what tensor cores do."""

    def __init__(self, xp: Any) -> None:
        self._xp = xp

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._xp, attr)

    def matmul(self, a: Any, b: Any) -> Any:
        return self._xp.matmul(round_tf32(a), round_tf32(b))


def round_tf32(x: Any) -> Any:
    """``x`` (float32, NumPy) rounded to TF32, kept in float32."""
    arr = np.asarray(x)
    if arr.dtype != np.float32:
        return x
    bits = arr.view(np.uint32)
    lsb = (bits >> np.uint32(13)) & np.uint32(1)
    out = ((bits + np.uint32(0x0FFF) + lsb) & np.uint32(0xFFFFE000)).view(np.float32)
    return out.reshape(arr.shape)


def emulate_tf32(backend: str = "numpy") -> Any:
    """The NumPy namespace with TF32 matmuls, for testing the TF32 model on a CPU."""
    if backend != "numpy":
        raise ArgumentError(f"emulate_tf32: argument 'backend': expected 'numpy', got "
                            f"{backend!r}")
    return _TF32Namespace(get_namespace("numpy"))


def precision_command(preset_name: str, dtype: str, backends: Sequence[str], *,
                      seed: int = 0, n: int = 6, as_json: bool = False,
                      batch: int | None = None) -> int:
    """``nlaverify verify --preset NAME --dtype DTYPE``: one check per backend of
    ``backends`` that runs ``dtype`` (float32: numpy, jax; bfloat16: jax), sharing the
    reference and bounds; prints the tables (or JSON); returns the exit status."""
    from nlaverify.config import preset

    runs = [b for b in backends if b in (("jax",) if dtype == "bfloat16" else ("numpy", "jax"))]
    if not runs:
        raise ArgumentError(f"verify: --dtype {dtype} runs on "
                            f"{'jax' if dtype == 'bfloat16' else 'numpy or jax'}; none of "
                            f"--backends {','.join(backends)} does")
    reports: list[PrecisionReport] = []
    for backend in runs:
        setup = prepare(preset(preset_name), dtype, backend=backend, seed=seed, n=n,
                        batch=batch)
        t0 = time.perf_counter()
        subject = run_subject(setup)
        setup.timings["subject"] = time.perf_counter() - t0
        reports.append(measure(setup, subject))
    ok = all(r.ok for r in reports)
    passed, failed = sum(r.passed for r in reports), sum(r.failed for r in reports)
    if as_json:
        jsonout.dump({"ok": ok, "passed": passed, "failed": failed,
                      "reports": [r.as_dict() for r in reports]})
    else:
        for r in reports:
            print(format_precision_report(r, closing=len(reports) == 1))
        if len(reports) > 1:
            print(f"precision {preset_name} {dtype}: {passed} passed, {failed} failed")
    return 0 if ok else 1


def _default_accumulation(dtype: str, backend: str) -> str:
    # XLA accumulates bfloat16 dots and jnp.sum in float32
    return "float32" if (dtype == "bfloat16" and backend == "jax") else dtype


def _fmt(x: float | None) -> str:
    return f"{'':>9}" if x is None else f"{x:9.2e}"


def format_precision_report(rep: PrecisionReport, per_node: bool = True,
                            closing: bool = True) -> str:
    """Per-node table, summary, and the closing line ``precision NAME DTYPE: ...``."""
    lines = []
    if per_node:
        lines.append(f"{'node':<28} {'op':<21} {'val err':>9} {'bound':>9} {'ratio':>9}   "
                     f"{'cot err':>9} {'bound':>9} {'ratio':>9}")
        for r in rep.rows:
            flag = "" if r.ok else "  FAIL"
            lines.append(f"{r.node:<28} {r.op:<21} {_fmt(r.value_error)} {_fmt(r.value_bound)} "
                         f"{_fmt(r.value_ratio)}   {_fmt(r.cot_error)} {_fmt(r.cot_bound)} "
                         f"{_fmt(r.cot_ratio)}{flag}")
        lines.append("(normwise relative errors against float64 JAX autodiff; a check "
                     "passes when error <= bound)")
    s = rep.summary()
    pin = ("matmuls pinned to full float32 ('highest', no TF32)" if rep.matmul_precision ==
           "highest" else "TF32 matmuls, modelled with u_prod = 2^-11")
    lines.append(f"{rep.preset} in {rep.dtype} on {rep.backend} (n={rep.n}, seed={rep.seed}, "
                 f"accumulation {rep.accumulation}; {pin})")
    for what in ("value", "cotangent"):
        w = s[what]
        extra = (f"; {w['not_meaningful']} zero up to rounding (bound >= 1) left out"
                 if w["not_meaningful"] else "")
        lines.append(f"  {what + 's':<10} error/bound over {w['nodes']} nodes: median "
                     f"{w['median_ratio']:.2e}, worst {w['worst_ratio']:.2e}{extra}")
    if rep.first_value_divergence or rep.first_cotangent_divergence:
        lines.append(f"  first value over its bound: {rep.first_value_divergence}; first "
                     f"cotangent over its bound (back-propagation order): "
                     f"{rep.first_cotangent_divergence}")
    if rep.promoted:
        lines.append(f"  dtype not kept ({len(rep.promoted)}): " + ", ".join(rep.promoted[:8]))
    if closing:
        lines.append(f"precision {rep.preset} {rep.dtype}: {rep.passed} passed, {rep.failed} "
                     f"failed")
    else:
        lines.append(f"  {rep.backend}: {rep.passed} passed, {rep.failed} failed")
    return "\n".join(lines)


# --- the figure -------------------------------------------------------------------


def figure(path: str, presets: Sequence[str] = ("tiny", "mid"),
           dtypes: Sequence[str] = DTYPES, n: dict[str, int] | None = None,
           seed: int = 0) -> dict[str, PrecisionReport]:
    """Run the checks of ``presets`` x ``dtypes`` (n: 6 for tiny, 128 for mid) and draw
    :func:`draw_figure` to ``path``. Returns the reports, keyed ``"preset/dtype"``."""
    from nlaverify.config import preset as get_preset

    n = {"tiny": 6, "mid": 128, **(n or {})}
    reports = {f"{p}/{dt}": verify_precision(get_preset(p), dt, seed=seed, n=n.get(p, 6))
               for p in presets for dt in dtypes}
    draw_figure(reports, path)
    return reports


def draw_figure(reports: Mapping[str, PrecisionReport], path: str) -> None:
    """Error and bound against node depth: values above, cotangents below, one column per
    preset, float32 and bfloat16 in each panel. Written with matplotlib's Agg backend;
    an SVG is byte-reproducible (fixed ``svg.hashsalt``, no date), a PNG carries no
    software tag."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    presets = list(dict.fromkeys(k.split("/")[0] for k in reports))
    dtypes = list(dict.fromkeys(k.split("/")[1] for k in reports))
    plt.rcParams.update({"svg.hashsalt": "nlaverify", "svg.fonttype": "none",
                         "font.size": 9})
    fig, axes = plt.subplots(2, len(presets), figsize=(5.2 * len(presets), 7.0),
                             squeeze=False, sharey="row")
    colours = {"float32": "#1f77b4", "bfloat16": "#d62728"}
    for j, p in enumerate(presets):
        for i, what in enumerate(("value", "cotangent")):
            ax = axes[i][j]
            notes = []
            for dt in dtypes:
                rep = reports[f"{p}/{dt}"]
                pts = []
                for r in rep.rows:
                    e, b = (r.value_error, r.value_bound) if what == "value" else (
                        r.cot_error, r.cot_bound)
                    if e is None or b is None or b == 0.0 or b >= 1.0 or e == 0.0:
                        continue
                    pts.append((r.depth if what == "value" else r.height, e, b))
                if not pts:
                    continue
                pts.sort()
                x = [q[0] for q in pts]
                ax.scatter(x, [q[2] for q in pts], marker="_", s=60, lw=1.2,
                           color=colours[dt], label=f"{dt}: bound")
                ax.scatter(x, [q[1] for q in pts], s=9, color=colours[dt], alpha=0.8,
                           label=f"{dt}: measured error")
                u = unit_roundoff(dt)
                ax.axhline(u, color=colours[dt], lw=0.8, ls=":", label=f"{dt}: u")
                med = rep.summary()[what]["median_ratio"]
                worst = rep.summary()[what]["worst_ratio"]
                notes.append(f"{dt}: error/bound median {med:.1e}, worst {worst:.1e}")
            ax.set_yscale("log")
            lo, hi = ax.get_ylim()
            ax.set_ylim(lo, hi * 40)  # room for the notes above the bfloat16 bounds
            ax.grid(True, which="major", alpha=0.3)
            n_p = reports[f"{p}/{dtypes[0]}"].n
            ax.set_title(f"{p} (n={n_p}): {what}s", fontsize=10)
            ax.set_xlabel("node depth (longest path from the inputs)" if what == "value" else
                          "node height (longest path to the loss: back-propagation depth)")
            ax.text(0.02, 0.97, "\n".join(notes), transform=ax.transAxes, fontsize=7,
                    va="top", ha="left",
                    bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"})
            if j == 0:
                ax.set_ylabel(f"normwise relative error of the {what}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=6, frameon=False, fontsize=8)
    fig.suptitle("Rounding error through the depth of the network, against float64 autodiff "
                 "(dots: measured; dashes: tolerance-model bound)", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    meta = {"Date": None} if path.endswith(".svg") else {"Software": None}
    fig.savefig(path, metadata=meta, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """``python -m nlaverify.precision``: one check, or the figure (``--figure PATH``)."""
    ap = argparse.ArgumentParser(prog="python -m nlaverify.precision", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--dtype", default="float32", choices=DTYPES)
    ap.add_argument("--backend", default=None, choices=("numpy", "jax"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seq-len", type=int, default=6)
    ap.add_argument("--matmul-precision", default="highest", choices=MATMUL_PRECISIONS)
    ap.add_argument("--plant", default=None, help="a node to run in float16 (a planted bug)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--figure", default=None, help="draw the depth figure to this path")
    ap.add_argument("--mid-seq-len", type=int, default=128, help="n of mid in the figure")
    args = ap.parse_args(argv)
    if args.figure:
        reports = figure(args.figure, n={"mid": args.mid_seq_len}, seed=args.seed)
        for key, rep in reports.items():
            s = rep.summary()
            print(f"{key:<16} n={rep.n:<4} values median {s['value']['median_ratio']:.2e} "
                  f"worst {s['value']['worst_ratio']:.2e}; cotangents median "
                  f"{s['cotangent']['median_ratio']:.2e} worst "
                  f"{s['cotangent']['worst_ratio']:.2e}; {rep.passed} passed, {rep.failed} "
                  f"failed; {sum(rep.timings.values()):.1f} s")
        print(f"wrote {args.figure}")
        return 0 if all(r.ok for r in reports.values()) else 1
    from nlaverify.config import preset

    rep = verify_precision(preset(args.preset), args.dtype, args.backend, args.seed,
                           args.seq_len, matmul_precision=args.matmul_precision,
                           plant=args.plant)
    if args.json:
        jsonout.dump(rep.as_dict())
    else:
        print(format_precision_report(rep))
    return 0 if rep.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
