"""Hypothesis strategies for testing Transformer kernels: yours and ours.

* :func:`op_cases`: sizes, inputs and a cotangent for any op of
  :data:`nlaverify.ops.registry.OPS`, the feed of every generic op test;
* matrices with controlled structure: :func:`well_conditioned_matrices`,
  :func:`spd_matrices`, :func:`orthogonal_matrices`;
* :func:`matrices_with_spectrum`: :math:`G = U\\operatorname{diag}(s)V^\\top` of any shape
  with singular values spread across :math:`[\\epsilon, 1]` (both ends, clusters, exact
  zeros), for the Newton–Schulz kernels;
* :func:`token_sequences` for embeddings and losses;
* inputs that break naive kernels (``docs/guide/precision.md``, "Inputs that break naive
  kernels"): :func:`hostile_logits` (logits of :math:`\\pm 10^4`, equal rows,
  :math:`-\\infty` entries, all-masked rows), :func:`hostile_activations`
  (:math:`x \\lesssim -17` down to :math:`-100`, :math:`+100`, tiny, subnormal, 0),
  :func:`hostile_norm_rows` (huge, tiny, subnormal, constant and zero rows) and
  :func:`hostile_op_cases`, an :class:`OpCase` of any op of :data:`HOSTILE_OPS` built
  from them, with a condition estimate derived for such inputs
  (:func:`make_hostile_case` for one seed).

Values come from a NumPy generator seeded by a drawn integer: generic (no
accidental ties, no exact zeros at kinks), reproducible, and shrinkable through
sizes and seed.

This module is the front door of the test strategies: the cases of an op (drawn, hostile,
rounded to a dtype) live in :mod:`nlaverify.cases`, the one home ``check_op`` draws from
too; the structured matrices, token sequences and configs here; every public name is
importable from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from nlaverify.cases import (
    BATCHES,  # noqa: F401  (re-exported)
    HOSTILE_OPS,
    HUGE_LOGIT,
    LOGIT_ROWS,
    NORM_ROWS,
    OpCase,
    exact_in,
    hostile_activations,
    hostile_logits,
    hostile_norm_rows,
    hostile_op_cases,
    make_case,
    make_hostile_case,
    op_cases,
    seeds,
)

__all__ = [
    "HOSTILE_OPS",
    "HUGE_LOGIT",
    "LOGIT_ROWS",
    "NORM_ROWS",
    "OpCase",
    "SpectralMatrix",
    "exact_in",
    "hostile_activations",
    "hostile_logits",
    "hostile_norm_rows",
    "hostile_op_cases",
    "make_case",
    "make_hostile_case",
    "make_spectral_matrix",
    "matrices_with_spectrum",
    "op_cases",
    "orthogonal_matrices",
    "seeds",
    "spd_matrices",
    "token_sequences",
    "transformer_configs",
    "well_conditioned_matrices",
]

# -- matrices with controlled structure ---------------------------------------------------


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


@dataclass(frozen=True)
class SpectralMatrix:
    """A test matrix with a known spectrum: ``matrix`` :math:`= U\\operatorname{diag}(s)
    V^\\top` (float64), ``singular_values`` :math:`s` (descending, length
    :math:`\\min(m, n)`, exact zeros included), ``lower`` the smallest non-zero one."""

    matrix: np.ndarray
    singular_values: np.ndarray
    lower: float

    @property
    def zeros(self) -> int:
        """The number of exactly zero singular values."""
        return int(np.sum(self.singular_values == 0))

    def __repr__(self) -> str:  # short, for hypothesis' falsifying examples
        s = self.singular_values
        return (f"SpectralMatrix(shape={self.matrix.shape}, lower={self.lower:.3g}, "
                f"zeros={self.zeros}, s={np.array2string(s, precision=3)})")


def make_spectral_matrix(m: int, n: int, lower: float, seed: int, *,
                         rank_deficient: bool = True) -> SpectralMatrix:
    r"""The :class:`SpectralMatrix` of :func:`matrices_with_spectrum` for one seed: Haar
    :math:`U` (:math:`m \times k`), :math:`V` (:math:`n \times k`), :math:`k = \min(m, n)`;
    :math:`s_1 = 1`, the smallest non-zero :math:`s = \epsilon` (when :math:`k \ge 2`), the
    others log-uniform in :math:`[\epsilon, 1]`, some in a cluster (within :math:`10^{-6}`
    relative of each other or equal), and, with ``rank_deficient``, half the time
    between 1 and :math:`k - 1` exact zeros (never all: :math:`s_1 = 1`)."""
    if not 0 < lower <= 1:
        raise ValueError(f"make_spectral_matrix: argument 'lower': expected 0 < lower <= 1, "
                         f"got {lower!r}")
    rng = np.random.default_rng(seed)
    k = min(m, n)
    s = np.exp(rng.uniform(np.log(lower), 0.0, size=k))
    if k >= 3 and rng.random() < 0.5:  # a cluster of near-equal (or equal) values
        c = int(rng.integers(2, k))
        start = int(rng.integers(0, k - c + 1))
        centre = s[start]
        s[start:start + c] = centre * (1 + rng.choice([0.0, 1e-6], size=c)
                                       * rng.uniform(-1.0, 1.0, size=c))
    s = np.sort(np.clip(s, lower, 1.0))[::-1].copy()
    zeros = int(rng.integers(1, k)) if rank_deficient and k >= 2 and rng.random() < 0.5 else 0
    s[0] = 1.0
    if k - 1 - zeros >= 1:  # both ends of [lower, 1] among the non-zero values
        s[k - 1 - zeros] = lower
    s[k - zeros:] = 0.0
    U = _haar(rng, m)[:, :k]
    V = _haar(rng, n)[:, :k]
    nonzero = s[s > 0]
    return SpectralMatrix((U * s) @ V.T, s, float(nonzero.min()))


@st.composite
def matrices_with_spectrum(draw: st.DrawFn, shapes: st.SearchStrategy | None = None,
                           lower: float | st.SearchStrategy = 1e-3, *,
                           rank_deficient: bool = True, max_dim: int = 10) -> SpectralMatrix:
    r"""Strategy: a :class:`SpectralMatrix` :math:`G = U\operatorname{diag}(s)V^\top`,
    orthogonal :math:`U, V` from a drawn seed, singular values spread across
    :math:`[\epsilon, 1]` (:math:`\epsilon` = ``lower``, a float or a strategy of floats):
    both ends included, a cluster half the time, exact zeros (rank deficiency) unless
    ``rank_deficient=False`` (see :func:`make_spectral_matrix`). ``shapes`` draws
    ``(m, n)``; by default tall, wide and square shapes alike, sides in
    ``[1, max_dim]`` (small ones included). Baggag & Saad §5.5 (Muon's inputs)."""
    if shapes is None:
        kind = draw(st.sampled_from(["tall", "wide", "square"]))
        a = draw(st.integers(1, max_dim))
        b = draw(st.integers(1, max_dim))
        m, n = {"tall": (max(a, b), min(a, b)), "wide": (min(a, b), max(a, b)),
                "square": (a, a)}[kind]
    else:
        m, n = draw(shapes)
    eps = draw(lower) if isinstance(lower, st.SearchStrategy) else lower
    return make_spectral_matrix(int(m), int(n), float(eps), draw(seeds),
                                rank_deficient=rank_deficient)


def token_sequences(vocab: int, min_len: int = 1, max_len: int = 8) -> st.SearchStrategy:
    """Integer token ids in ``[0, vocab)`` as an int64 array."""
    return st.lists(st.integers(0, vocab - 1), min_size=min_len, max_size=max_len).map(
        lambda t: np.asarray(t, dtype=np.int64))


@st.composite
def transformer_configs(draw: st.DrawFn, max_d_model: int = 8) -> Any:
    """A small valid :class:`~nlaverify.config.TransformerConfig` exercising every option:
    norm, placement, positions (with RoPE scaling), MLP kind, experts (renormalised or not),
    grouped-query heads, biases (the output projection's apart), tying, final norm, masking
    (with a sliding window), QK-norm, OPT's position offset, the embedding scale, LoRA
    adapters and temperature."""
    from nlaverify.config import (
        LORA_TARGETS,
        MLPS,
        NORMS,
        PLACEMENTS,
        POSITIONS,
        RopeScaling,
        TransformerConfig,
    )

    n_heads = draw(st.sampled_from([1, 2, 4]))
    n_kv = draw(st.sampled_from([h for h in (1, 2, 4) if n_heads % h == 0]))
    d_model = draw(st.sampled_from([d for d in range(n_heads, max_d_model + 1, n_heads)
                                    if (d // n_heads) % 2 == 0] or [2 * n_heads]))
    n_experts = draw(st.sampled_from([0, 0, 2, 3]))
    mlp = draw(st.sampled_from([m for m in MLPS if not n_experts
                                or m in ("relu", "gelu", "swiglu")]))
    positions = draw(st.sampled_from(POSITIONS))
    causal = draw(st.booleans())
    scaling = None
    if positions == "rope" and draw(st.booleans()):
        scaling = draw(st.sampled_from([RopeScaling("linear", 2.0),
                                        RopeScaling("llama3", 8.0, 1.0, 4.0, 16)]))
    lora_rank = draw(st.sampled_from([0, 0, 1, 2]))
    targets = tuple(t for t in LORA_TARGETS if draw(st.booleans()) and not (
        t == "mlp" and n_experts)) or ("q",)
    return TransformerConfig(
        vocab_size=draw(st.integers(2, 9)), d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv,
        n_blocks=draw(st.integers(1, 2)), d_mlp=draw(st.integers(2, 6)),
        norm=draw(st.sampled_from(NORMS)), placement=draw(st.sampled_from(PLACEMENTS)),
        positions=positions, context=8, mlp=mlp, n_experts=n_experts,
        top_k=draw(st.integers(1, n_experts)) if n_experts else 1,
        attn_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()) and not n_experts,
        tied_embeddings=draw(st.booleans()), final_norm=draw(st.booleans()),
        causal=causal,
        temperature=draw(st.sampled_from([1.0, 0.5, 2.0])), rope_scaling=scaling,
        sliding_window=draw(st.sampled_from([None, None, 1, 3])) if causal else None,
        qk_norm=draw(st.booleans()), attn_out_bias=draw(st.sampled_from([None, True, False])),
        moe_renormalize=draw(st.booleans()), embed_scale=draw(st.booleans()),
        lora_rank=lora_rank, lora_alpha=draw(st.sampled_from([None, 3.0])),
        lora_targets=targets, name="drawn",
        position_offset=draw(st.sampled_from([2, 0])) if positions == "learned" else 0)
