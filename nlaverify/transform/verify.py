r"""Node-by-node verification of a weight transformation's claims.

:func:`check_transform` evaluates the original and the transformed graph in float64 on
the same data and checks, for every node the transformation claims something about
(:class:`~nlaverify.transform.weights.Claim`), that claim:

* ``equal``: :math:`v' = v`;
* ``row_shift``: :math:`v' - v` is constant along each row, checked as :math:`v'P = vP`
  with :math:`P = I - \tfrac1m\mathbf 1\mathbf 1^\top` (the centered parts agree);
* ``rotated``: :math:`v' = vQ`.

Each node's error is normwise (:meth:`nlaverify.tolerance.Tolerance.compare`) against the
bound of :func:`nlaverify.graph.compare.node_tolerance`, the same model as the backend
comparison: accumulation length :math:`k` the graph's largest dimension, magnitude
condition of the reference value, and depth :math:`D + 2`: the node's depth :math:`D` in
the graph, one stage for the rounding of the transformed weights and one for the map
applied to the reference (:math:`vQ` or :math:`vP`). The first node, in topological order,
whose claim fails is named.

Seed: Baggag & Saad §3.15-3.16; Elhage et al. 2021; Ashkboos et al. 2024 (SliceGPT,
QuaRot).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.config import TransformerConfig
from nlaverify.errors import ArgumentError
from nlaverify.graph.build import build_transformer
from nlaverify.graph.compare import accumulation_length, node_depths, node_tolerance
from nlaverify.graph.core import evaluate
from nlaverify.graph.run import graph_inputs, sample_data
from nlaverify.transform.weights import RELATIONS, Transformed, center_last


@dataclass(frozen=True)
class InvarianceRow:
    """One claimed node: its relation, normwise error and bound."""

    node: str
    op: str
    relation: str
    error: float
    bound: float

    @property
    def ok(self) -> bool:
        return self.error <= self.bound

    @property
    def ratio(self) -> float:
        return self.error / self.bound


@dataclass
class TransformCheck:
    """The outcome of :func:`check_transform`."""

    transform: str
    rows: list[InvarianceRow] = field(default_factory=list)
    #: the first claimed node, in topological order, whose claim fails
    first_failure: str | None = None

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows)

    def worst(self) -> InvarianceRow:
        """The row with the largest error/bound ratio."""
        return max(self.rows, key=lambda r: r.ratio)

    def row(self, node: str) -> InvarianceRow:
        """The row of ``node``."""
        return next(r for r in self.rows if r.node == node)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        return d


def _values(cfg: TransformerConfig, params: dict[str, Any], data: dict[str, Any]) -> tuple[
        Any, dict[str, Any]]:
    g = build_transformer(cfg)
    xp = get_namespace("numpy")
    return g, evaluate(g, xp, graph_inputs(g, xp, params, data, "float64"))


def check_transform(config: TransformerConfig, params: dict[str, Any],
                    transformed: Transformed, *, data: dict[str, Any] | None = None,
                    seed: int = 0, n: int | None = None) -> TransformCheck:
    r"""Check every claim of ``transformed`` against the original model ``(config,
    params)``, node by node, in float64 (see the module docstring).

    Args:
        data: tokens and targets (default: :func:`~nlaverify.graph.run.sample_data` with
            ``seed``, ``n`` tokens, ``n`` default ``min(context, 8)``).

    Returns:
        a :class:`TransformCheck` with one row per claimed node and the first failure.
    """
    if not isinstance(transformed, Transformed):
        raise ArgumentError(f"check_transform: argument 'transformed': expected a "
                            f"Transformed, got {type(transformed).__name__}")
    n = min(config.context, 8) if n is None else n
    data = sample_data(config.vocab_size, n, seed) if data is None else data
    g0, before = _values(config, params, data)
    g1, after = _values(transformed.config, transformed.params, data)
    k = accumulation_length(g1, int(np.shape(data["tokens"])[-1]))
    depth = node_depths(g0)
    out = TransformCheck(transformed.name)
    Q = transformed.rotation
    for claim in transformed.claims:
        if claim.relation not in RELATIONS:
            raise ArgumentError(f"check_transform: node {claim.node!r}: unknown relation "
                                f"{claim.relation!r}; expected one of {', '.join(RELATIONS)}")
        if claim.node not in before or claim.node not in after:
            raise ArgumentError(f"check_transform: claimed node {claim.node!r} is not in both "
                                "graphs")
        v, w = np.asarray(before[claim.node]), np.asarray(after[claim.node])
        if claim.relation == "row_shift":
            v, w = center_last(v), center_last(w)
        elif claim.relation == "rotated":
            if Q is None:
                raise ArgumentError(f"check_transform: node {claim.node!r} is claimed "
                                    "rotated but the transformation holds no rotation")
            v = v @ Q
        tol = node_tolerance("float64", k, depth[claim.node] + 2, v)
        c = tol.compare(w, v)
        out.rows.append(InvarianceRow(claim.node, g1.nodes[claim.node]["op"], claim.relation,
                                      c.normwise, tol.rtol))
        if not c.ok and out.first_failure is None:
            out.first_failure = claim.node
    return out


def check_residual_decomposition(config: TransformerConfig, params: dict[str, Any], *,
                                 data: dict[str, Any] | None = None, seed: int = 0,
                                 n: int | None = None) -> InvarianceRow:
    r"""The additive decomposition of the residual stream (Elhage et al. 2021) on the
    graph: the last ``residual_add`` node against :math:`x_0 + \sum_k a^{(k)}`, the stream
    entry plus every writer's value (pre-LN only; proved as ``residual_stream_additive``),
    judged by :func:`~nlaverify.graph.compare.node_tolerance` at the node's depth."""
    from nlaverify.transform.weights import _writers

    if config.placement != "pre":
        raise ArgumentError("check_residual_decomposition: the stream of a post-LN model "
                            "passes through every norm and is not a sum of writes; got "
                            f"placement={config.placement!r}")
    n = min(config.context, 8) if n is None else n
    data = sample_data(config.vocab_size, n, seed) if data is None else data
    g, values = _values(config, params, data)
    last = [v for v in g if g.nodes[v].get("op") == "residual_add"][-1]
    total = np.asarray(values["x0"])
    for w in _writers(g):
        total = total + np.asarray(values[w])
    k = accumulation_length(g, int(np.shape(data["tokens"])[-1]))
    tol = node_tolerance("float64", k, node_depths(g)[last], total)
    c = tol.compare(values[last], total)
    return InvarianceRow(last, "residual_add", "equal", c.normwise, tol.rtol)
