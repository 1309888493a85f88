r"""K-FAC on a graph model: the Kronecker factors of every linear layer of a Transformer or
an MLP, and their error against the exact GGN block (Baggag & Saad §5.3).

For each ``linear`` / ``affine`` node :math:`s = aW (+ b)` whose weight is among the
problem's selected parameters, the layer inputs :math:`a` are read from the forward values
and the output cotangents :math:`g` come from back-propagating *seeds* placed on the logits
node :math:`z` (the ops' hand VJPs, one pass per seed; vectorised over the seeds on JAX):

* exact (``samples=None``): one seed per position :math:`i` and class :math:`c`,
  :math:`\sqrt{w_i}\,S(z_i)_{:,c}` at position :math:`i` and 0 elsewhere, with
  :math:`S S^\top = H(z_i)` (:meth:`Likelihood.hessian_sqrt`), so that
  :math:`\sum_{i,c} J^\top u_{ic} u_{ic}^\top J` is the GGN :math:`\sum_i w_i J_i^\top H_i
  J_i` exactly, cross-position terms included;
* Monte-Carlo (``samples=S``): :math:`y_s \sim p(\cdot\mid z)` at every position at once,
  seed :math:`\sqrt{w_i/S}\,\nabla_z\ell(z_i, y_{s,i})`: one pass per sample (the cross-position
  terms vanish in expectation, the score having mean zero).

The factors are :func:`nlaverify.curvature.kfac.kfac_factors` (``"expand"`` or ``"reduce"``)
of those inputs and cotangents; the exact block of :math:`\operatorname{vec}_r(W)` (stacked
over :math:`b^\top` with a bias) is :func:`nlaverify.curvature.kfac.exact_layer_block` of the
exact seeds' cotangents. :func:`kfac_errors` reports :math:`\lVert A_f\otimes G_f -
G_{WW}\rVert_F / \lVert G_{WW}\rVert_F` per layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.backends.host import to_float64
from nlaverify.curvature.graph import CurvatureProblem, draw_noise, sampled_gradients
from nlaverify.curvature.kfac import (
    MODES,
    Mode,
    exact_layer_block,
    kfac_block,
    kfac_factors,
    subsample_rows,
)
from nlaverify.errors import ArgumentError
from nlaverify.graph.core import _arguments, backprop, needed_nodes


@dataclass(frozen=True)
class LinearLayer:
    """A ``linear`` / ``affine`` node of the graph: its input node, weight and bias params."""

    node: str
    op: str
    input: str
    weight: str
    bias: str | None


@dataclass(frozen=True)
class LayerFactors:
    """The K-FAC factors of one layer: ``A`` (``d_in[+1]`` square) and ``G`` (``d_out``)."""

    layer: LinearLayer
    mode: str
    A: Any
    G: Any


def linear_layers(problem: CurvatureProblem) -> tuple[LinearLayer, ...]:
    """The linear layers whose weight is selected, in topological order (the bias counts
    only when it is selected too). The tied unembedding and the MoE experts are not
    ``linear``/``affine`` nodes and are not covered.

    Raises:
        ArgumentError: a selected weight (or bias) that feeds more than one node: its
            curvature block sums every use, which a one-layer Kronecker factorisation (and
            :func:`exact_blocks`, one use) does not describe.
    """
    graph, selected = problem.graph, set(problem.params)
    out = []
    for node in needed_nodes(graph, [problem.loss]):
        attrs = graph.nodes[node]
        if attrs["kind"] != "op" or attrs["op"] not in ("linear", "affine"):
            continue
        args = _arguments(graph, node)
        if args[1] not in selected or graph.nodes[args[1]]["kind"] != "param":
            continue
        bias = args[2] if attrs["op"] == "affine" and args[2] in selected else None
        for p in (args[1], bias):
            users = sorted(graph.successors(p)) if p is not None else []
            if len(users) > 1:
                raise ArgumentError(
                    f"K-FAC: parameter {p!r} feeds {len(users)} nodes ({', '.join(users)}): "
                    "a weight shared across layers has one curvature block summing every "
                    "use, which per-layer K-FAC does not describe; leave it out of the "
                    "selection")
        out.append(LinearLayer(node, attrs["op"], args[0], args[1], bias))
    return tuple(out)


def output_seeds(problem: CurvatureProblem, *, samples: int | None = None,
                 seed: int = 0) -> Any:
    r"""The logit-space seeds, shape ``(S, *z.shape)`` (see the module docstring): exact,
    :math:`S = (\text{positions}) \times C`; or ``samples`` Monte-Carlo draws."""
    xp, lik = problem.xp, problem.require_likelihood("K-FAC")
    z = problem.values[problem.logits]
    shape = tuple(int(s) for s in np.shape(z))
    root_w = xp.sqrt(problem.weights)
    if samples is not None:
        return sampled_seeds(problem, z, draw_noise(problem, samples, seed))
    P, C = math.prod(shape[:-1]), shape[-1]
    cols = lik.hessian_sqrt(xp, z) * root_w[..., None, None]            # (*pos, a, c)
    cols = xp.permute_dims(xp.reshape(cols, (P, C, C)), (2, 0, 1))      # (c, j, a)
    eye = xp.one_hot(xp.arange(P), P, z.dtype) if not xp.object_arrays else \
        xp.one_hot(xp.arange(P), P, None)
    seeds = xp.reshape(eye, (P, 1, P, 1)) * xp.reshape(cols, (1, C, P, C))
    return xp.reshape(seeds, (P * C, *shape))


def sampled_seeds(problem: CurvatureProblem, z: Any, noise: Any) -> Any:
    r"""Monte-Carlo seeds :math:`\sqrt{w_i/S}\,\nabla_z\ell(z_i, y_{s,i})` from ``noise`` of
    shape ``(S, *z.shape)`` (a pure function: traced under ``jax.jit`` by the benchmark)."""
    S = int(np.shape(noise)[0])
    g = sampled_gradients(problem, z, noise)
    return g * (problem.xp.sqrt(problem.weights)[..., None] / math.sqrt(S))


def layer_cotangents(problem: CurvatureProblem, seeds: Any,
                     layers: tuple[LinearLayer, ...], values: dict[str, Any] | None = None
                     ) -> dict[str, Any]:
    """Back-propagate every seed from the logits node; the cotangent of each layer's output,
    ``(S, *out.shape)`` (0 for a layer the logits do not depend on)."""
    xp, graph = problem.xp, problem.graph
    values = problem.values if values is None else values

    def one(u: Any) -> tuple[Any, ...]:
        cot = backprop(graph, xp, values, problem.logits, seed=u)
        return tuple(cot[layer.node] if layer.node in cot else xp.zeros_like(values[layer.node])
                     for layer in layers)

    if problem.backend == "jax":
        from nlaverify.curvature.operators import chunked_map

        stacked = chunked_map(one, seeds)
    else:
        per_seed = [one(seeds[s]) for s in range(int(np.shape(seeds)[0]))]
        stacked = tuple(xp.stack([p[k] for p in per_seed]) for k in range(len(layers)))
    return {layer.node: g for layer, g in zip(layers, stacked, strict=True)}


def _sequences(xp: Any, a: Any) -> Any:
    """Layer inputs as ``(N, R, d)``: one sequence (or an MLP's rows) is ``N = 1``."""
    return xp.reshape(a, (1, *a.shape)) if len(np.shape(a)) == 2 else a


def _cotangent_rows(xp: Any, g: Any) -> Any:
    return xp.reshape(g, (g.shape[0], 1, *g.shape[1:])) if len(np.shape(g)) == 3 else g


def layer_factors(problem: CurvatureProblem, *, mode: Mode = "expand", samples: int | None = None,
                  seed: int = 0, positions: int | None = None) -> dict[str, LayerFactors]:
    r"""K-FAC factors :math:`(A_f, G_f)` of every selected linear layer (Baggag & Saad §5.3),
    from exact seeds or ``samples`` Monte-Carlo draws; ``mode`` ``"expand"`` or
    ``"reduce"`` (Eschenhagen et al. 2023). With ``positions`` (*expand* only), the
    statistics of ``positions`` positions drawn uniformly (``subsample_rows(P, positions,
    seed)``, :math:`P` the positions): unbiased estimates of the factors at
    ``positions / P`` of the Gram matrices' cost (:func:`~nlaverify.curvature.kfac.kfac_factors`,
    ``rows``); the back-propagation still runs on every position."""
    if mode not in MODES:
        raise ArgumentError(f"layer_factors: argument 'mode': expected one of "
                            f"{', '.join(MODES)}, got {mode!r}")
    layers = linear_layers(problem)
    if not layers:
        raise ArgumentError(f"layer_factors: none of the {len(problem.params)} selected "
                            "parameters is the weight of a linear or affine node")
    seeds = output_seeds(problem, samples=samples, seed=seed)
    rows = None
    if positions is not None:
        shape = np.shape(problem.values[layers[0].input])
        rows = subsample_rows(math.prod(shape[:-1]), positions, seed)
    factors = factors_from_seeds(problem, problem.values, seeds, layers, mode, rows=rows)
    return {layer.node: LayerFactors(layer, mode, *factors[layer.node]) for layer in layers}


def factors_from_seeds(problem: CurvatureProblem, values: dict[str, Any], seeds: Any,
                       layers: tuple[LinearLayer, ...], mode: Mode, *, rows: Any = None
                       ) -> dict[str, tuple[Any, Any]]:
    """``{layer node: (A_factor, G_factor)}`` from forward ``values`` and logit ``seeds``: a
    pure function of its arguments (one ``jax.jit`` covers it on JAX); ``rows``, the
    positions whose statistics are kept (:func:`~nlaverify.curvature.kfac.kfac_factors`)."""
    xp = problem.xp
    cots = layer_cotangents(problem, seeds, layers, values)
    mask = position_mask(problem)
    return {layer.node: kfac_factors(xp, _sequences(xp, values[layer.input]),
                                     _cotangent_rows(xp, cots[layer.node]), mode=mode,
                                     bias=layer.bias is not None, mask=mask, rows=rows)
            for layer in layers}


def position_mask(problem: CurvatureProblem) -> Any:
    r"""The ``(N, R)`` 0/1 mask of positions that have a target (weight :math:`w_i \ne 0`),
    or ``None`` when every position has one: padding positions are left out of the
    :math:`A` factor's average, as their cotangents are 0 (their loss has weight 0 and,
    under causal attention, nothing real depends on them)."""
    w = problem.weights
    if w is None:
        return None
    host = np.asarray(to_float64(w))
    if np.all(host != 0):
        return None
    m = (host != 0).astype(np.float64)
    m = m.reshape(1, *m.shape) if m.ndim == 1 else m
    xp = problem.xp
    return xp.asarray(m.astype(np.int64)) if xp.object_arrays else xp.asarray(m)


@dataclass(frozen=True)
class KfacError:
    """K-FAC against the exact GGN block of one layer: the Frobenius relative error."""

    layer: str
    weight: str
    size: int
    mode: str
    relative_error: float

    def as_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "weight": self.weight, "size": self.size,
                "mode": self.mode, "relative_error": self.relative_error}


def exact_blocks(problem: CurvatureProblem) -> dict[str, Any]:
    r"""The exact GGN block of :math:`\operatorname{vec}_r(W)` (stacked over :math:`b^\top`)
    of every selected linear layer, from the exact seeds' cotangents (dense: small layers)."""
    xp = problem.xp
    layers = linear_layers(problem)
    cots = layer_cotangents(problem, output_seeds(problem), layers)
    return {layer.node: exact_layer_block(xp, _sequences(xp, problem.values[layer.input]),
                                          _cotangent_rows(xp, cots[layer.node]),
                                          bias=layer.bias is not None)
            for layer in layers}


def kfac_errors(problem: CurvatureProblem, *, modes: tuple[Mode, ...] = ("expand", "reduce")
                ) -> list[KfacError]:
    r""":math:`\lVert A_f \otimes G_f - G_{WW}\rVert_F / \lVert G_{WW}\rVert_F` for every
    selected linear layer and every mode, the factors and the exact block :math:`G_{WW}`
    (:func:`~nlaverify.curvature.kfac.exact_layer_block`) from the same exact seeds' cotangents
    (one back-propagation per seed, shared)."""
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ArgumentError(f"kfac_errors: argument 'modes': expected some of "
                            f"{', '.join(MODES)}, got {list(modes)}")
    xp = problem.xp
    layers = linear_layers(problem)
    cots = layer_cotangents(problem, output_seeds(problem), layers)
    mask = position_mask(problem)
    rows = []
    for layer in layers:
        A = _sequences(xp, problem.values[layer.input])
        G = _cotangent_rows(xp, cots[layer.node])
        bias = layer.bias is not None
        E = to_float64(exact_layer_block(xp, A, G, bias=bias))
        norm = max(float(np.linalg.norm(E)), np.finfo(float).tiny)
        for mode in modes:
            K = to_float64(kfac_block(xp, *kfac_factors(xp, A, G, mode=mode, bias=bias,
                                                        mask=mask)))
            rows.append(KfacError(layer.node, layer.weight, int(E.shape[0]), mode,
                                  float(np.linalg.norm(K - E)) / norm))
    return rows
