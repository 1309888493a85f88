r"""The independent model's mixtures of experts (Baggag & Saad §3.12): Mixtral's router, and
the released routers of Qwen-MoE, DeepSeek-V2 and DeepSeek-V3 (:mod:`nlaverify.config_moe`),
written from
the papers and Hugging Face's modules (``MixtralSparseMoeBlock``, ``Qwen2MoeSparseMoeBlock``,
``DeepseekV2Moe``, ``DeepseekV3MoE``) with ``jax.numpy`` only: no :mod:`nlaverify.ops` or
:mod:`nlaverify.graph`. Formulations differ from the ops where the mathematics allows: top-k
by ``jax.lax.top_k`` and gathered gates (the ops: a dense 0/1 mask), DeepSeek-V3's group
limit by reshaping the experts into groups and a :math:`-\infty` fill (Hugging Face's
``masked_fill``; the ops: an allowed-mask count), every expert on every token by ``einsum``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from nlaverify.config import TransformerConfig
from nlaverify.config_moe import routing_bias

__all__ = ["moe_mlp"]


def _swiglu(x: Any, W1: Any, W3: Any, W2: Any) -> Any:
    return (jax.nn.silu(x @ W1) * (x @ W3)) @ W2


def _softmax_gates(scores: Any, cfg: TransformerConfig) -> tuple[Any, Any]:
    """``(weights (n, k), indices (n, k))``: the top-k of the softmax over all experts,
    divided by their sum when renormalised (Hugging Face ``norm_topk_prob``; Mixtral)."""
    probs = jax.nn.softmax(scores, axis=-1)
    w, idx = jax.lax.top_k(probs, cfg.top_k)
    return (w / jnp.sum(w, axis=-1, keepdims=True) if cfg.moe_renormalize else w), idx


def _sigmoid_gates(s: Any, bias: Any, cfg: TransformerConfig) -> tuple[Any, Any]:
    r"""DeepSeek-V3's router on the affinities :math:`s` (Hugging Face
    ``DeepseekV3TopkRouter``): groups scored by the sum of their two best biased scores, the
    ``topk_group`` best kept, the rest filled with :math:`-\infty`, the top-k of the biased
    scores chosen, the gates the *unbiased* :math:`s` there, :math:`\rho\,s/(\sum s +
    10^{-20})`."""
    n, E, G = s.shape[0], cfg.n_experts, cfg.n_group
    biased = s + bias
    grouped = biased.reshape(n, G, E // G)
    group_scores = jnp.sum(jax.lax.top_k(grouped, 2)[0], axis=-1)              # (n, G)
    keep = jax.lax.top_k(group_scores, cfg.topk_group)[1]                       # (n, kg)
    group_mask = jnp.zeros((n, G)).at[jnp.arange(n)[:, None], keep].set(1.0)
    allowed = jnp.repeat(group_mask, E // G, axis=-1) > 0                       # (n, E)
    idx = jax.lax.top_k(jnp.where(allowed, biased, -jnp.inf), cfg.top_k)[1]
    w = jnp.take_along_axis(s, idx, axis=-1)
    if cfg.moe_renormalize:
        w = w / (jnp.sum(w, axis=-1, keepdims=True) + 1e-20)
    return w * cfg.routed_scaling_factor, idx


def _v2_gates(s: Any, cfg: TransformerConfig) -> tuple[Any, Any]:
    r"""DeepSeek-V2's router on the softmax affinities :math:`s` (Hugging Face
    ``DeepseekV2TopkRouter``, report §2.2): each group scored by its largest affinity
    (``jnp.max``), the ``topk_group`` best kept, the others' affinities set to 0 (HF's
    ``masked_fill(0.0)``: a softmax is positive, so they are never among the top-k), the top-k
    chosen, the gates :math:`\rho\, s` there (never renormalised)."""
    n, E, G = s.shape[0], cfg.n_experts, cfg.n_group
    group_scores = jnp.max(s.reshape(n, G, E // G), axis=-1)                   # (n, G)
    keep = jax.lax.top_k(group_scores, cfg.topk_group)[1]
    group_mask = jnp.zeros((n, G)).at[jnp.arange(n)[:, None], keep].set(1.0)
    w, idx = jax.lax.top_k(s * jnp.repeat(group_mask, E // G, axis=-1), cfg.top_k)
    return w * cfg.routed_scaling_factor, idx


def moe_mlp(p: Mapping[str, Any], name: str, x: Any, cfg: TransformerConfig,
            rec: dict[str, Any]) -> Any:
    r"""The mixture of experts at ``name`` (``blocks.{l}.mlp``) on tokens ``x`` ``(n, d)``:
    :math:`y = \sum_{j\le k} w_j E_{i_j}(x) + c\,S(x)` with the router's weights :math:`w` and
    chosen experts :math:`i`, the shared expert :math:`S` (none: 0), :math:`c =
    \sigma(x\cdot w_{sg})` with Qwen's shared gate, else 1. Records ``name.scores``
    (``name.affinity`` for the sigmoid router) and ``name.out``."""
    scores = rec[f"{name}.scores"] = x @ p[f"{name}.W_router"]
    if cfg.moe_router == "softmax_group":
        s = rec[f"{name}.affinity"] = jax.nn.softmax(scores, axis=-1)
        w, idx = _v2_gates(s, cfg)
    elif cfg.moe_router == "sigmoid":
        s = rec[f"{name}.affinity"] = jax.nn.sigmoid(scores)
        layer = int(name.split(".")[1])
        w, idx = _sigmoid_gates(s, jnp.asarray(routing_bias(cfg, layer)), cfg)
    else:
        w, idx = _softmax_gates(scores, cfg)
    gates = jnp.zeros_like(scores).at[jnp.arange(x.shape[0])[:, None], idx].set(w)
    if cfg.mlp == "swiglu":
        h = jax.nn.silu(jnp.einsum("nd,edm->enm", x, p[f"{name}.W1"])) * jnp.einsum(
            "nd,edm->enm", x, p[f"{name}.W3"])
        y = jnp.einsum("enm,emd->end", h, p[f"{name}.W2"])
    else:
        u = jnp.einsum("nd,edm->enm", x, p[f"{name}.W_in"])
        h = jax.nn.relu(u) if cfg.mlp == "relu" else jax.nn.gelu(u, approximate=True)
        y = jnp.einsum("enm,emd->end", h, p[f"{name}.W_out"])
    out = jnp.einsum("ne,end->nd", gates, y)
    if cfg.d_shared_expert:
        out = out + _shared_expert(p, name, x, cfg)
    rec[f"{name}.out"] = out
    return out


def _shared_expert(p: Mapping[str, Any], name: str, x: Any, cfg: TransformerConfig) -> Any:
    r""":math:`c\,S(x)`: the shared SwiGLU expert (Hugging Face ``shared_expert``,
    ``shared_experts``), times :math:`\sigma(x\cdot w_{sg})` with Qwen's gate."""
    shared = _swiglu(x, p[f"{name}.U1"], p[f"{name}.U3"], p[f"{name}.U2"])
    if cfg.shared_expert_gate:
        shared = jax.nn.sigmoid(x @ p[f"{name}.w_sg"])[:, None] * shared
    return shared
