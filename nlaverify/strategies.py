"""Hypothesis strategies for testing Transformer kernels: yours and ours.

* :func:`op_cases`: sizes, inputs and a cotangent for any op of
  :data:`nlaverify.ops.registry.OPS`, the feed of every generic op test;
* matrices with controlled structure: :func:`well_conditioned_matrices`,
  :func:`spd_matrices`, :func:`orthogonal_matrices`;
* :func:`token_sequences` for embeddings and losses.

Values come from a NumPy generator seeded by a drawn integer: generic (no
accidental ties, no exact zeros at kinks), reproducible, and shrinkable through
sizes and seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from nlaverify.ops.registry import OPS, OpSpec, fixed_routing_mask

__all__ = [
    "OpCase",
    "make_case",
    "op_cases",
    "orthogonal_matrices",
    "seeds",
    "spd_matrices",
    "token_sequences",
    "transformer_configs",
    "well_conditioned_matrices",
]

#: the integers that seed the NumPy generators of the strategies below
seeds = st.integers(min_value=0, max_value=2**32 - 1)


@dataclass(frozen=True)
class OpCase:
    """One test case of an op: sizes, positional arguments, static keyword arguments,
    and a cotangent ``G`` of the output's shape (all float64 NumPy, tokens int64)."""

    spec: OpSpec
    sizes: dict[str, int]
    args: list[Any]
    static: dict[str, Any]
    cotangent: np.ndarray

    def real_indices(self) -> list[int]:
        return [k for k, a in enumerate(self.spec.args) if a.kind == "real"]

    def __repr__(self) -> str:  # short, for hypothesis' falsifying examples
        return f"OpCase({self.spec.name}, sizes={self.sizes})"


def make_case(spec: OpSpec, sizes: dict[str, int], seed: int, scale: float = 1.0) -> OpCase:
    """Build an :class:`OpCase` deterministically from sizes and a seed."""
    from nlaverify.backends import get_namespace

    rng = np.random.default_rng(seed)
    args: list[Any] = []
    for a in spec.args:
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in a.dims)
        if a.kind == "tokens":
            args.append(rng.integers(0, sizes["V"], size=shape, dtype=np.int64))
        elif a.kind == "fixed":
            args.append(scale * rng.standard_normal(shape))
        elif a.kind == "mask":
            args.append(fixed_routing_mask(*shape))
        else:
            args.append(scale * rng.standard_normal(shape))
    static = dict(spec.static)
    out = spec.forward(get_namespace("numpy"), *args, **static)
    G = rng.standard_normal(np.shape(out))
    return OpCase(spec, dict(sizes), args, static, np.asarray(G, dtype=np.float64))


def _sizes(spec: OpSpec) -> st.SearchStrategy[dict[str, int]]:
    strategies = {k: st.integers(lo, hi) for k, (lo, hi) in spec.size_ranges.items()}
    sizes = st.fixed_dictionaries(strategies)
    return sizes.map(spec.fix_sizes) if spec.fix_sizes else sizes


@st.composite
def op_cases(draw: st.DrawFn, op: str | OpSpec, scale: float = 1.0) -> OpCase:
    """Strategy: an :class:`OpCase` of ``op`` with sizes in its ``size_ranges``."""
    spec = OPS[op] if isinstance(op, str) else op
    return make_case(spec, draw(_sizes(spec)), draw(seeds), scale)


@st.composite
def well_conditioned_matrices(
    draw: st.DrawFn, n: int, m: int | None = None, max_condition: float = 10.0
) -> np.ndarray:
    r"""An ``n x m`` matrix :math:`U \Sigma V^\top` with singular values in
    :math:`[1, \kappa_{\max}]`, so :math:`\kappa_2 \le \kappa_{\max}`."""
    m = n if m is None else m
    rng = np.random.default_rng(draw(seeds))
    k = min(n, m)
    U = _haar(rng, n)[:, :k]
    V = _haar(rng, m)[:, :k]
    s = np.exp(rng.uniform(0.0, np.log(max_condition), size=k))
    s[0], s[-1] = 1.0, max_condition if k > 1 else 1.0
    return (U * s) @ V.T


@st.composite
def spd_matrices(draw: st.DrawFn, n: int, max_condition: float = 10.0) -> np.ndarray:
    r"""A symmetric positive definite :math:`Q \Lambda Q^\top`,
    :math:`\lambda \in [1, \kappa_{\max}]`."""
    rng = np.random.default_rng(draw(seeds))
    Q = _haar(rng, n)
    lam = np.exp(rng.uniform(0.0, np.log(max_condition), size=n))
    A = (Q * lam) @ Q.T
    return (A + A.T) / 2


@st.composite
def orthogonal_matrices(draw: st.DrawFn, n: int) -> np.ndarray:
    """A Haar-distributed orthogonal ``n x n`` matrix (QR of a Gaussian, signs fixed)."""
    return _haar(np.random.default_rng(draw(seeds)), n)


def _haar(rng: np.random.Generator, n: int) -> np.ndarray:
    Q, R = np.linalg.qr(rng.standard_normal((n, n)))
    return Q * np.sign(np.diag(R))


def token_sequences(vocab: int, min_len: int = 1, max_len: int = 8) -> st.SearchStrategy:
    """Integer token ids in ``[0, vocab)`` as an int64 array."""
    return st.lists(st.integers(0, vocab - 1), min_size=min_len, max_size=max_len).map(
        lambda t: np.asarray(t, dtype=np.int64))


@st.composite
def transformer_configs(draw: st.DrawFn, max_d_model: int = 8) -> Any:
    """A small valid :class:`~nlaverify.config.TransformerConfig` exercising every option:
    norm, placement, positions, MLP kind, experts, grouped-query heads, biases, tying,
    final norm, masking and temperature."""
    from nlaverify.config import MLPS, NORMS, PLACEMENTS, POSITIONS, TransformerConfig

    n_heads = draw(st.sampled_from([1, 2, 4]))
    n_kv = draw(st.sampled_from([h for h in (1, 2, 4) if n_heads % h == 0]))
    d_model = draw(st.sampled_from([d for d in range(n_heads, max_d_model + 1, n_heads)
                                    if (d // n_heads) % 2 == 0] or [2 * n_heads]))
    n_experts = draw(st.sampled_from([0, 0, 2, 3]))
    mlp = draw(st.sampled_from(MLPS))
    return TransformerConfig(
        vocab_size=draw(st.integers(2, 9)), d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv,
        n_blocks=draw(st.integers(1, 2)), d_mlp=draw(st.integers(2, 6)),
        norm=draw(st.sampled_from(NORMS)), placement=draw(st.sampled_from(PLACEMENTS)),
        positions=draw(st.sampled_from(POSITIONS)), context=8, mlp=mlp, n_experts=n_experts,
        top_k=draw(st.integers(1, n_experts)) if n_experts else 1,
        attn_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()) and not n_experts,
        tied_embeddings=draw(st.booleans()), final_norm=draw(st.booleans()),
        causal=draw(st.booleans()),
        temperature=draw(st.sampled_from([1.0, 0.5, 2.0])), name="drawn")
