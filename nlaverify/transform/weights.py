r"""Weight transformations that claim to leave a Transformer's function unchanged.

Each transformation takes a :class:`~nlaverify.config.TransformerConfig` and a parameter
dict of :func:`~nlaverify.graph.build.build_transformer`'s graph and returns a
:class:`Transformed`: the new config (when the graph must change, e.g. an untied
unembedding), the new parameters, and the **claims**: for every op node of the new graph,
how its value relates to the original's (:data:`RELATIONS`), which
:func:`nlaverify.transform.verify.check_transform` verifies node by node.

* :func:`fold_norms` (Elhage et al. 2021; TransformerLens' ``fold_ln``): with
  :math:`\hat x` the normalised row, :math:`(\hat x\odot\gamma + \beta)W + b = \hat x\,
  (\operatorname{diag}(\gamma)W) + (\beta W + b)`; when a reader has no bias the bias
  stays in the norm as :math:`\beta/\gamma`, :math:`(\hat x + \beta/\gamma)
  \operatorname{diag}(\gamma) W`. Gains become 1.
* :func:`center_writers` (LayerNorm only): every matrix that writes to the residual
  stream loses its mean over :math:`d`, :math:`W \leftarrow W(I - \tfrac1d\mathbf 1
  \mathbf 1^\top)`; the stream changes by a per-row constant, which the next LayerNorm
  subtracts.
* :func:`fold_value_bias`: :math:`P(V + \mathbf 1 b_V)W_O + b_O = PVW_O + (b_VW_O + b_O)`
  for a row-stochastic softmax :math:`P` (per head).
* :func:`center_unembedding`: :math:`W_U \leftarrow W_U(I - \tfrac1V\mathbf 1\mathbf
  1^\top)`; the logits change by a per-position constant, the softmax and the loss not.
* :func:`rotate` (RMSNorm, gains folded; Ashkboos et al. 2024, SliceGPT and QuaRot):
  :math:`\operatorname{RMSNorm}(XQ) = \operatorname{RMSNorm}(X)Q` for orthogonal
  :math:`Q`, so the embedding and every residual writer are multiplied by :math:`Q` on the
  right, every reader of the stream by :math:`Q^\top` on the left; :func:`hadamard` and
  :func:`random_orthogonal` give :math:`Q`.

The small algebraic helpers (:func:`fold_gain`, :func:`fold_bias`, :func:`center_last`)
are written on plain array operations so that the ``interpretability`` proofs run them on
SymPy object arrays: the function proved is the function run.

Seed: Baggag & Saad §3.8 (LayerNorm, RMSNorm), §3.15-3.16 (residual stream, unembedding);
Elhage et al. 2021, "A mathematical framework for transformer circuits"; Ashkboos et al.
2024, "SliceGPT" (ICLR) and "QuaRot" (NeurIPS).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import networkx as nx
import numpy as np

from nlaverify.config import TransformerConfig
from nlaverify.errors import ArgumentError
from nlaverify.graph.build import build_transformer
from nlaverify.graph.core import _arguments
from nlaverify.tolerance import tolerance

#: how a node of the transformed model relates to the original: equal; equal up to a
#: per-row constant (:math:`v'P = vP`, :math:`P = I - \tfrac1m\mathbf 1\mathbf 1^\top`);
#: rotated (:math:`v' = vQ`)
RELATIONS = ("equal", "row_shift", "rotated")

#: the projection ops that read a row vector: the argument positions of W, b, LoRA A, B
_PROJECTIONS = {"linear": (1, None, None, None), "affine": (1, 2, None, None),
                "lora_linear": (1, None, 2, 3), "lora_affine": (1, 2, 3, 4)}


@dataclass(frozen=True)
class Claim:
    """The claimed relation (:data:`RELATIONS`) of one node's value to the original's."""

    node: str
    relation: str


@dataclass(frozen=True)
class Transformed:
    """A transformation's result: config, parameters, claims (and the rotation)."""

    name: str
    config: TransformerConfig
    params: dict[str, np.ndarray]
    claims: tuple[Claim, ...]
    rotation: np.ndarray | None = None


def fold_gain(W: Any, gamma: Any) -> Any:
    r""":math:`\operatorname{diag}(\gamma)W`: the gain folded into the rows of a reader."""
    return gamma[:, None] * W


def fold_bias(beta: Any, W: Any, b: Any) -> Any:
    r""":math:`\beta W + b`: the norm's bias folded into the reader's bias."""
    return beta @ W + b


def center_last(W: Any) -> Any:
    r""":math:`W(I - \tfrac1m\mathbf 1\mathbf 1^\top)`: each row minus its mean (last axis)."""
    m = W.shape[-1]
    return W - np.sum(W, axis=-1, keepdims=True) / m  # exact on SymPy object arrays


def hadamard(d: int) -> np.ndarray:
    r"""The normalised Sylvester–Hadamard matrix :math:`H_d/\sqrt d` (orthogonal and
    symmetric; QuaRot), for :math:`d` a power of 2."""
    if isinstance(d, bool) or not isinstance(d, int) or d < 1 or d & (d - 1):
        raise ArgumentError(f"hadamard: argument 'd': expected a power of 2, got {d!r}")
    H = np.ones((1, 1))
    while H.shape[0] < d:
        H = np.block([[H, H], [H, -H]])
    return H / np.sqrt(d)


def random_orthogonal(d: int, seed: int) -> np.ndarray:
    r"""A Haar-distributed orthogonal :math:`d\times d` matrix: the Q factor of a seeded
    Gaussian matrix with the signs of :math:`\operatorname{diag}(R)` made positive
    (Mezzadri 2007)."""
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ArgumentError(f"random_orthogonal: argument 'd': expected a positive integer, "
                            f"got {d!r}")
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return q * np.sign(np.diag(r))


# ----------------------------------------------------------------------------- structure

def _checked(cfg: TransformerConfig, params: dict[str, Any], op: str) -> tuple[
        nx.DiGraph, dict[str, np.ndarray]]:
    """The graph of ``cfg`` and a float64 copy of ``params``; an unknown, missing or
    mis-shaped parameter, or an unsupported architecture, is an :class:`ArgumentError`."""
    if not isinstance(cfg, TransformerConfig):
        raise ArgumentError(f"{op}: argument 'config': expected a TransformerConfig, got "
                            f"{type(cfg).__name__}")
    if cfg.placement != "pre":
        raise ArgumentError(f"{op}: needs a pre-LN model (placement='pre'); with post-LN the "
                            "norms sit on the residual stream itself, got placement="
                            f"{cfg.placement!r}")
    if cfg.n_experts:
        raise ArgumentError(f"{op}: mixture-of-experts MLPs (n_experts={cfg.n_experts}) are "
                            "not supported: the router and the experts read the norm inside "
                            "one op")
    if not (cfg.norm_affine and cfg.norm_bias):  # OLMo's, Cohere's: fixed gains or biases
        raise ArgumentError(f"{op}: norms without a learned gain or bias (norm_affine="
                            f"{cfg.norm_affine}, norm_bias={cfg.norm_bias}) are not supported: "
                            "their fixed gains and biases are constants, not parameters")
    g = build_transformer(cfg)
    declared = {n: a["shape"] for n, a in g.nodes(data=True) if a["kind"] == "param"}
    out: dict[str, np.ndarray] = {}
    for name, value in params.items():
        if name not in declared:
            raise ArgumentError(f"{op}: argument 'params': {name!r} is not a parameter of the "
                                f"{cfg.name} graph")
        arr = np.array(value, dtype=np.float64)
        if arr.shape != tuple(declared[name]):
            raise ArgumentError(f"{op}: parameter {name!r}: expected shape "
                                f"{tuple(declared[name])}, got {arr.shape}")
        out[name] = arr
    missing = sorted(set(declared) - set(out))
    if missing:
        raise ArgumentError(f"{op}: argument 'params': no value for {missing[0]!r}"
                            + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
    return g, out


def _stream_norms(g: nx.DiGraph) -> list[str]:
    """The norms of the residual stream (block norms and the final norm, not QK-norms nor
    multi-head latent attention's latent norms)."""
    return [n for n in nx.topological_sort(g) if g.nodes[n].get("op") in (
        "layernorm", "rmsnorm") and g.nodes[f"{n}.gamma"]["component"] not in ("norms.qk",
                                                                             "norms.mla")]


def _projection(g: nx.DiGraph, node: str) -> dict[str, str | None]:
    """The parameters ``W``, ``b``, ``A``, ``B`` of a projection node (None where absent)."""
    args = _arguments(g, node)
    return {k: (args[i] if i is not None else None)
            for k, i in zip("WbAB", _PROJECTIONS[g.nodes[node]["op"]], strict=True)}


def _readers(g: nx.DiGraph, node: str, op: str, allowed: tuple[str, ...] = ()) -> list[str]:
    """The projections reading ``node`` as their row input; any other consumer, unless its
    op is in ``allowed``, is an :class:`ArgumentError` naming it."""
    out = []
    for c in g.successors(node):
        kind = g.nodes[c].get("op")
        if kind in _PROJECTIONS and _arguments(g, c)[0] == node:
            out.append(c)
        elif kind not in allowed:
            raise ArgumentError(f"{op}: node {c!r} ({kind}) reads {node!r} and is not a "
                                "projection whose weights can absorb the transformation")
    return out


def _writers(g: nx.DiGraph) -> list[str]:
    """The projections whose output is added to the residual stream (attention and MLP
    outputs), from the graph's ``residual_add`` nodes."""
    out = []
    for n in nx.topological_sort(g):
        if g.nodes[n].get("op") == "residual_add":
            w = _arguments(g, n)[1]
            if g.nodes[w].get("op") not in _PROJECTIONS:
                raise ArgumentError(f"node {w!r} ({g.nodes[w].get('op')}) writes to the "
                                    "residual stream and is not a projection")
            out.append(w)
    return out


def _stream(g: nx.DiGraph) -> list[str]:
    """The nodes holding the residual stream or a write to it, in topological order."""
    names = {"embed", "embed_scaled", "x0", *_writers(g)}
    return [n for n in nx.topological_sort(g) if n in names
            or g.nodes[n].get("op") == "residual_add"]


def _untie(cfg: TransformerConfig, p: dict[str, np.ndarray]) -> tuple[
        TransformerConfig, nx.DiGraph]:
    """An untied copy of a tied model: ``unembed.W_U`` :math:`= W_E^\\top`, same function."""
    if not cfg.tied_embeddings:
        return cfg, build_transformer(cfg)
    cfg = replace(cfg, tied_embeddings=False)
    p["unembed.W_U"] = p["embed.W_E"].T.copy()
    return cfg, build_transformer(cfg)


def _claims(g: nx.DiGraph, special: dict[str, str | None]) -> tuple[Claim, ...]:
    """Every op node of ``g``: its relation from ``special``, else ``"equal"``; a node
    mapped to ``None`` is not claimed."""
    return tuple(Claim(n, special.get(n, "equal")) for n in nx.topological_sort(g)
                 if g.nodes[n]["kind"] == "op" and special.get(n, "equal") is not None)


# ----------------------------------------------------------------------------- transforms

def _dense(cfg: TransformerConfig, p: dict[str, np.ndarray], q: dict[str, str | None]) -> Any:
    """The projection's effective matrix, :math:`W + sAB` under LoRA."""
    W = p[q["W"]]
    return W if q["A"] is None else W + cfg.lora_scale * (p[q["A"]] @ p[q["B"]])


def _fold_norm_into(cfg: TransformerConfig, g: nx.DiGraph, p: dict[str, np.ndarray],
                    norm: str, readers: list[str]) -> None:
    """Fold ``norm``'s gain (and bias) into ``readers`` in place; see :func:`fold_norms`."""
    gamma, beta = p[f"{norm}.gamma"], p.get(f"{norm}.beta")
    projs = [_projection(g, r) for r in readers]
    into_bias = beta is not None and projs and all(q["b"] is not None for q in projs)
    if beta is not None and not into_bias and np.any(gamma == 0):
        raise ArgumentError(f"fold_norms: {norm}.gamma has a zero entry and a reader without "
                            "a bias: the bias cannot stay in the norm as beta/gamma")
    for q in projs:
        W, A = p[q["W"]], None if q["A"] is None else p[q["A"]]
        if into_bias:
            p[q["b"]] = fold_bias(beta, _dense(cfg, p, q), p[q["b"]])
        p[q["W"]] = fold_gain(W, gamma)
        if A is not None:
            p[q["A"]] = fold_gain(A, gamma)
    if beta is not None:
        p[f"{norm}.beta"] = np.zeros_like(beta) if into_bias else beta / gamma
    p[f"{norm}.gamma"] = np.ones_like(gamma)


def fold_norms(config: TransformerConfig, params: dict[str, Any]) -> Transformed:
    r"""Fold every stream norm's gain :math:`\gamma` (and LayerNorm bias :math:`\beta`)
    into the projections that read it (q/k/v, the MLP's first layer(s), the unembedding).

    .. math:: (\hat x\odot\gamma + \beta)W + b = \hat x\,(\operatorname{diag}(\gamma)W)
       + (\beta W + b)

    When a reader has no bias (bias-free attention, the unembedding), :math:`\beta`
    stays in the norm as :math:`\beta/\gamma`: :math:`(\hat x + \beta/\gamma)
    \operatorname{diag}(\gamma)W`. A tied unembedding is untied first (the config
    returned has ``tied_embeddings=False``). Claims: every op node but the folded norms
    is equal to the original's.
    """
    cfg, (_, p) = config, _checked(config, params, "fold_norms")
    cfg, g = _untie(cfg, p) if cfg.final_norm else (cfg, build_transformer(cfg))
    norms = _stream_norms(g)
    for norm in norms:
        _fold_norm_into(cfg, g, p, norm, _readers(g, norm, "fold_norms"))
    return Transformed("fold_norms", cfg, p, _claims(g, dict.fromkeys(norms)))


def center_writers(config: TransformerConfig, params: dict[str, Any]) -> Transformed:
    r"""Center every weight that writes to the residual stream over :math:`d`: the
    embedding, learned positions, attention and MLP outputs (weights, biases, LoRA
    :math:`B`), :math:`W \leftarrow W(I - \tfrac1d\mathbf 1\mathbf 1^\top)`.

    Every write then has zero row mean, so the stream changes by a per-row constant
    (:math:`x' = x - \bar x\mathbf 1^\top` when all writers are centered), which every
    LayerNorm subtracts: valid for LayerNorm models with a final norm and an untied
    unembedding (a tied :math:`W_E` is also the unembedding; :func:`fold_norms` unties
    it). Claims: stream nodes equal up to a per-row constant, every other op node equal.
    """
    if config.norm != "layernorm":
        raise ArgumentError(f"center_writers: needs LayerNorm (which subtracts the row mean);"
                            f" {config.name} has norm={config.norm!r}, which keeps the mean")
    if not config.final_norm or config.tied_embeddings:
        raise ArgumentError("center_writers: needs a final norm and an untied unembedding "
                            f"(the logits must read the stream through a LayerNorm only); "
                            f"{config.name} has final_norm={config.final_norm}, "
                            f"tied_embeddings={config.tied_embeddings} (fold_norms unties)")
    g, p = _checked(config, params, "center_writers")
    names = ["embed.W_E"] + (["pos.W_P"] if "pos.W_P" in p else [])
    for w in _writers(g):
        names += [v for k, v in _projection(g, w).items() if k in "WbB" and v is not None]
    for name in names:
        p[name] = center_last(p[name])
    return Transformed("center_writers", config, p,
                       _claims(g, dict.fromkeys(_stream(g), "row_shift")))


def center_unembedding(config: TransformerConfig, params: dict[str, Any]) -> Transformed:
    r"""Center the unembedding over the vocabulary, :math:`W_U \leftarrow W_U(I -
    \tfrac1V\mathbf 1\mathbf 1^\top)`: the logits change by the per-position constant
    :math:`x\bar w`, :math:`\bar w = \tfrac1V W_U\mathbf 1`, and softmax and loss are shift
    invariant. A tied unembedding is untied first. Claims: the logits equal up to a
    per-row constant, every other op node equal."""
    cfg, (_, p) = config, _checked(config, params, "center_unembedding")
    if getattr(cfg, "final_softcap", None) is not None:
        raise ArgumentError("center_unembedding: the logits are soft-capped (final_softcap="
                            f"{cfg.final_softcap}): c tanh(z/c) of shifted logits is not a "
                            "shift of the capped ones")
    cfg, g = _untie(cfg, p)
    p["unembed.W_U"] = center_last(p["unembed.W_U"])
    return Transformed("center_unembedding", cfg, p, _claims(
        g, dict.fromkeys(("logits", "logits_tempered"), "row_shift")))


def fold_value_bias(config: TransformerConfig, params: dict[str, Any]) -> Transformed:
    r"""Fold every value bias into the attention output's bias (Elhage et al. 2021): the
    rows of a softmax attention matrix :math:`P` sum to 1, so per head

    .. math:: P(V + \mathbf 1 b_V)W_O + b_O = PVW_O + (b_V W_O + b_O),

    with :math:`b_V` of key/value head :math:`\lfloor h/n_{\text{rep}}\rfloor` read by
    query head :math:`h` under grouped-query attention. Needs softmax attention (the
    kernel and Linformer variants do not have exactly row-stochastic weights on
    :math:`V`), value biases and an output bias. Claims: the value path up to the merged
    heads changes, ``attn.out`` and every other op node are equal.
    """
    if config.attention != "softmax" or not config.attn_bias or not config.out_bias:
        raise ArgumentError(f"fold_value_bias: needs softmax attention with value and output "
                            f"biases; {config.name} has attention={config.attention!r}, "
                            f"attn_bias={config.attn_bias}, out_bias={config.out_bias}")
    g, p = _checked(config, params, "fold_value_bias")
    changed: list[str] = []
    dh, H = config.d_head, config.n_heads
    for layer in range(config.n_blocks):
        a = f"blocks.{layer}.attn"
        v, o = _projection(g, f"{a}.v"), _projection(g, f"{a}.out")
        b_v = p[v["b"]].reshape(config.n_kv_heads, dh)
        per_head = np.concatenate([b_v[h // config.n_rep] for h in range(H)])
        p[o["b"]] = fold_bias(per_head, _dense(config, p, o), p[o["b"]])
        p[v["b"]] = np.zeros_like(p[v["b"]])
        changed += [f"{a}.{s}" for s in ("v", "v_heads", "v_shared", "heads", "merged")]
    return Transformed("fold_value_bias", config, p, _claims(g, dict.fromkeys(changed)))


def _check_orthogonal(Q: Any, d: int) -> np.ndarray:
    """``Q`` as a float64 ``(d, d)`` array with :math:`\\lVert Q^\\top Q - I\\rVert_{\\max}`
    within the float64 tolerance of a length-``d`` inner product, else an ArgumentError."""
    Q = np.asarray(Q)
    if Q.shape != (d, d) or Q.dtype.kind != "f":
        raise ArgumentError(f"rotate: argument 'Q': expected a real ({d}, {d}) matrix, got "
                            f"shape {Q.shape}, dtype {Q.dtype}")
    Q = Q.astype(np.float64)
    err = float(np.max(np.abs(Q.T @ Q - np.eye(d))))
    tol = tolerance("float64", size=d, depth=2)  # Q rounded, then Q^T Q
    if not err <= tol.rtol:
        raise ArgumentError(f"rotate: argument 'Q' is not orthogonal: max|Q^T Q - I| = "
                            f"{err:.3g} > {tol.rtol:.3g} ({tol.reason})")
    return Q


def _rotate(cfg: TransformerConfig, g: nx.DiGraph, p: dict[str, np.ndarray],
            Q: np.ndarray) -> Transformed:
    """Rotate the stream by ``Q`` in place, without checking the premises (the planted
    tests call it on unfolded gains)."""
    for name in ("embed.W_E", "pos.W_P"):
        if name in p:
            p[name] = p[name] @ Q
    for w in _writers(g):
        for k, v in _projection(g, w).items():
            if k in "WbB" and v is not None:
                p[v] = p[v] @ Q
    stream, norms = _stream(g), _stream_norms(g)
    for node in stream + norms:
        for r in _readers(g, node, "rotate", ("residual_add", "rmsnorm", "unembed_tied",
                                                   "add_learned_positions", "scale")):
            q = _projection(g, r)
            p[q["W"]] = Q.T @ p[q["W"]]
            if q["A"] is not None:
                p[q["A"]] = Q.T @ p[q["A"]]
    return Transformed("rotate", cfg, p, _claims(g, dict.fromkeys(stream + norms, "rotated")),
                       Q)


def rotate(config: TransformerConfig, params: dict[str, Any], Q: Any) -> Transformed:
    r"""Rotate the residual stream by an orthogonal :math:`Q` (SliceGPT, QuaRot):
    :math:`W_E, W_P` and every writer (weights, biases, LoRA :math:`B`) times :math:`Q` on
    the right, every reader of the stream or of a norm (q/k/v, the MLP's first layer(s),
    the unembedding; LoRA :math:`A`) times :math:`Q^\top` on the left. A tied unembedding
    follows :math:`W_E` by itself: :math:`xQ\,(W_EQ)^\top = xW_E^\top`.

    Valid for RMSNorm with unit gains (:math:`\lVert xQ\rVert = \lVert x\rVert`, so
    :math:`\operatorname{RMSNorm}(xQ) = \operatorname{RMSNorm}(x)Q`; run
    :func:`fold_norms` first) and no fixed sinusoidal positions. Claims: the stream and
    the norm outputs rotated, every other op node equal.
    """
    if config.norm != "rmsnorm":
        raise ArgumentError(f"rotate: needs RMSNorm (LayerNorm's mean subtraction does not "
                            f"commute with a rotation); {config.name} has norm={config.norm!r}")
    if config.positions == "sinusoidal":
        raise ArgumentError("rotate: fixed sinusoidal positions are added to the stream and "
                            "cannot be rotated; expected positions 'learned' or 'rope'")
    between = [f for f, v in (("post_norms", config.post_norms),
                              ("residual_multiplier", config.residual_multiplier)) if v]
    if between:
        raise ArgumentError(f"rotate: {config.name} sets {between[0]}: the sublayers' outputs "
                            f"pass a norm or a scale before the residual add; rotate handles "
                            f"projections that write to the stream directly")
    g, p = _checked(config, params, "rotate")
    Q = _check_orthogonal(Q, config.d_model)
    for norm in _stream_norms(g):
        if np.any(p[f"{norm}.gamma"] != 1.0):
            raise ArgumentError(f"rotate: {norm}.gamma is not 1: RMSNorm(xQ) = RMSNorm(x)Q "
                                "needs unit gains; run fold_norms first")
    return _rotate(config, g, p, Q)
