"""Hypothesis strategies for testing Transformer kernels: yours and ours.

* :func:`op_cases`: sizes, inputs and a cotangent for any op of
  :data:`nlaverify.ops.registry.OPS`, the feed of every generic op test;
* matrices with controlled structure: :func:`well_conditioned_matrices`,
  :func:`spd_matrices`, :func:`orthogonal_matrices`;
* :func:`matrices_with_spectrum`: :math:`G = U\\operatorname{diag}(s)V^\\top` of any shape
  with singular values spread across :math:`[\\epsilon, 1]` (both ends, clusters, exact
  zeros), for the Newton–Schulz kernels;
* :func:`token_sequences` for embeddings and losses;
* inputs that break naive kernels (``docs/guide.md``, "Inputs that break naive
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
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from hypothesis import strategies as st

from nlaverify.ops.registry import OPS, OpSpec, fixed_routing_mask

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


def exact_in(values: Any, dtype: str) -> np.ndarray:
    """``values`` rounded to ``dtype`` (``float64``, ``float32``, ``bfloat16`` through
    ml_dtypes, ``float16``) and back to float64: numbers exactly representable in ``dtype``,
    so that a kernel in ``dtype`` and a float64 or mpmath reference see the same inputs."""
    x = np.asarray(values, dtype=np.float64)
    if dtype == "float64":
        return x.copy()
    if dtype == "bfloat16":
        import ml_dtypes

        target: Any = ml_dtypes.bfloat16
    elif dtype in ("float32", "float16"):
        target = np.dtype(dtype)
    else:
        raise ValueError(f"exact_in: argument 'dtype': expected one of float64, float32, "
                         f"bfloat16, float16, got {dtype!r}")
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(target).astype(np.float64)


def make_case(spec: OpSpec, sizes: dict[str, int], seed: int, scale: float = 1.0, *,
              batch: tuple[int, ...] = (), dtype: str = "float64") -> OpCase:
    """Build an :class:`OpCase` deterministically from sizes and a seed.

    ``batch``: leading axes of the arguments with a sequence axis ``n`` (and of the output
    and cotangent), e.g. ``(B,)`` or ``(B, H)``; shared parameters keep their shape (the
    batching family proves the ops on such batches). ``dtype``: real values (arguments and
    cotangent) exactly representable in it (:func:`exact_in`)."""
    from nlaverify.backends import get_namespace

    rng = np.random.default_rng(seed)
    batch = tuple(int(b) for b in batch)
    args: list[Any] = []
    for a in spec.args:
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in a.dims)
        if batch and "n" in a.dims:
            shape = (*batch, *shape)
        if a.kind == "tokens":
            toks = rng.integers(0, sizes["V"], size=shape, dtype=np.int64)
            if a.ignore is not None and shape[-1] > 1:  # pad some targets (never position 0)
                pad = rng.random(shape) < 1 / 3
                pad[..., 0] = False
                toks[pad] = a.ignore
            args.append(toks)
        elif a.kind == "mask":
            args.append(np.broadcast_to(fixed_routing_mask(*shape[-2:]), shape).copy())
        else:  # real and fixed arrays
            args.append(exact_in(scale * rng.standard_normal(shape), dtype))
    static = dict(spec.static)
    out = spec.forward(get_namespace("numpy"), *args, **static)
    G = exact_in(rng.standard_normal(np.shape(out)), dtype)
    return OpCase(spec, dict(sizes), args, static, G)


def _sizes(spec: OpSpec, shapes: dict[str, Any] | None = None
           ) -> st.SearchStrategy[dict[str, int]]:
    ranges = dict(spec.size_ranges)
    for k, v in (shapes or {}).items():
        if k not in ranges:
            raise ValueError(f"op_cases: argument 'shapes': op {spec.name!r} has no dimension "
                             f"{k!r}; expected some of {', '.join(ranges)}")
        ranges[k] = (v, v) if isinstance(v, int) else tuple(v)
    strategies = {k: st.integers(lo, hi) for k, (lo, hi) in ranges.items()}
    sizes = st.fixed_dictionaries(strategies)
    return sizes.map(spec.fix_sizes) if spec.fix_sizes else sizes


#: the leading axes ``op_cases(batch=True)`` draws: none, a batch, a batch and heads
BATCHES = st.one_of(st.just(()), st.tuples(st.integers(1, 3)),
                    st.tuples(st.integers(1, 3), st.integers(1, 3)))


def op_cases(op: str | OpSpec, scale: float = 1.0, *,
             shapes: dict[str, int | tuple[int, int]] | None = None,
             batch: bool | tuple[int, ...] = False,
             dtype: str = "float64") -> st.SearchStrategy[OpCase]:
    """Strategy: an :class:`OpCase` of ``op`` with sizes in its ``size_ranges`` (or
    ``shapes``: a size or a range ``(lo, hi)`` per named dimension), leading batch axes
    (``batch=True`` draws ``()``, ``(B,)`` or ``(B, H)`` with ``B, H <= 3``; a tuple fixes
    them) and values exactly representable in ``dtype``. For a kernel in one call, see
    :func:`nlaverify.check.check_op`, which draws from the same cases. Bad arguments raise
    at once (not at the first draw)."""
    spec = OPS[op] if isinstance(op, str) else op
    sizes = _sizes(spec, shapes)
    exact_in(np.zeros(1), dtype)  # an unknown dtype is named now
    leads = BATCHES if batch is True else st.just(tuple(batch) if batch else ())
    return _op_cases(spec, sizes, leads, scale, dtype)


@st.composite
def _op_cases(draw: st.DrawFn, spec: OpSpec, sizes: st.SearchStrategy[dict[str, int]],
              leads: st.SearchStrategy[tuple[int, ...]], scale: float, dtype: str) -> OpCase:
    return make_case(spec, draw(sizes), draw(seeds), scale, batch=draw(leads), dtype=dtype)


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
    (with a sliding window), QK-norm, the embedding scale, LoRA adapters and temperature."""
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
        lora_targets=targets, name="drawn")


# --------------------------------------------------------------------------------------
# Inputs that break naive kernels (docs/guide.md, "Inputs that break naive kernels")
# --------------------------------------------------------------------------------------

#: the magnitude of the hostile logits: :math:`e^{10^4}` overflows every float format
HUGE_LOGIT = 1e4
#: the kinds of rows :func:`hostile_logits` draws
LOGIT_ROWS = ("huge", "spread", "equal", "masked", "all_masked")
#: the kinds of rows :func:`hostile_norm_rows` draws
NORM_ROWS = ("huge", "huge_positive", "tiny", "subnormal", "constant", "zero", "moderate")


def _exact_in(values: Any, dtype: str) -> np.ndarray:
    """``values`` rounded to ``dtype`` and back: float64 numbers exactly representable in
    ``dtype``, so that a float32 kernel and the mpmath reference see the same inputs."""
    if dtype not in ("float32", "float64"):
        raise ValueError(f"hostile strategies: argument 'dtype': expected 'float32' or "
                         f"'float64', got {dtype!r}")
    x = np.asarray(values, dtype=np.float64)
    y = exact_in(x, dtype)
    if np.any(np.isinf(y) & np.isfinite(x)):
        raise FloatingPointError(f"hostile strategies: a value overflows {dtype}")
    return y


def _logit_row(rng: np.random.Generator, kind: str, m: int) -> np.ndarray:
    if kind == "huge":  # all near +1e4 or all near -1e4: overflow, or underflow to 0/0
        return rng.choice([-1.0, 1.0]) * HUGE_LOGIT + rng.uniform(-3.0, 3.0, m)
    if kind == "spread":  # gaps of thousands: one-hot rows, exponents far below -709
        return rng.uniform(-HUGE_LOGIT, HUGE_LOGIT, m)
    if kind == "equal":  # ties everywhere, possibly huge: p = 1/m exactly
        return np.full(m, rng.choice([0.0, HUGE_LOGIT, -HUGE_LOGIT, rng.uniform(-5.0, 5.0)]))
    if kind == "masked":  # -inf entries (attention masks), at least one finite
        row = rng.choice([-1.0, 1.0]) * HUGE_LOGIT + rng.uniform(-3.0, 3.0, m)
        keep = rng.integers(0, m)
        hide = rng.random(m) < 0.5
        hide[keep] = False
        row[hide] = -np.inf
        if m > 1 and not hide.any():
            row[(keep + 1) % m] = -np.inf
        return row
    if kind == "all_masked":  # a query that may see no key (padding): every entry -inf
        return np.full(m, -np.inf)
    raise ValueError(f"hostile_logits: unknown row kind {kind!r}: expected one of "
                     f"{', '.join(LOGIT_ROWS)}")


def _hostile_logit_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str,
                         kinds: tuple[str, ...]) -> np.ndarray:
    *lead, m = shape
    n = int(np.prod(lead)) if lead else 1
    order = list(kinds)
    rng.shuffle(order)
    rows = [_logit_row(rng, order[i % len(order)], m) for i in range(n)]
    return _exact_in(np.reshape(rows, shape), dtype)


@st.composite
def hostile_logits(draw: st.DrawFn, shape: tuple[int, ...] = (5, 4), dtype: str = "float64",
                   *, masked: bool = True, all_masked: bool = True) -> np.ndarray:
    r"""Strategy: logits of ``shape`` (rows along the last axis) that break a naive softmax.

    Each row is one of :data:`LOGIT_ROWS`, cycling through them in a drawn order (so a
    shape with at least 5 rows holds every kind): ``huge`` (all near :math:`+10^4` or all
    near :math:`-10^4`: :math:`e^z` overflows, or every :math:`e^z` underflows and the
    softmax is :math:`0/0`, unless the row maximum is subtracted), ``spread`` (entries
    across :math:`[-10^4, 10^4]`: one-hot rows), ``equal`` (ties, possibly huge),
    ``masked`` (some :math:`-\infty` entries, at least one finite) and, unless turned off,
    ``all_masked`` (every entry :math:`-\infty`: the convention of
    :mod:`nlaverify.ops.softmaxes` is a zero row with a zero VJP; log-softmax raises).
    ``masked=False`` draws no :math:`-\infty` at all (for losses, which reject it).
    Values are float64, exactly representable in ``dtype``.
    """
    kinds = tuple(k for k in LOGIT_ROWS if (masked or k not in ("masked", "all_masked"))
                  and (all_masked or k != "all_masked"))
    rng = np.random.default_rng(draw(seeds))
    return _hostile_logit_array(rng, tuple(shape), dtype, kinds)


def _special_activations(dtype: str) -> list[float]:
    tiny = 1e-40 if dtype == "float32" else 1e-310  # subnormal
    deep = -100.0 if dtype == "float32" else -700.0
    return [-17.0, -17.5, -20.0, -30.0, -50.0, -88.0, -100.0, deep, 17.0, 30.0, 100.0,
            1e-30, -1e-30, tiny, -tiny, 0.0]


def _hostile_activation_array(rng: np.random.Generator, shape: tuple[int, ...],
                              dtype: str) -> np.ndarray:
    special = _special_activations(dtype)
    size = int(np.prod(shape))
    pool = np.concatenate([rng.permutation(special),
                           rng.uniform(-100.0, 100.0, max(0, size - len(special)))])
    return _exact_in(rng.permutation(pool[:size]).reshape(shape), dtype)


@st.composite
def hostile_activations(draw: st.DrawFn, dtype: str = "float64",
                        shape: tuple[int, ...] = (2, 8)) -> np.ndarray:
    r"""Strategy: pre-activations of ``shape`` that break naive pointwise nonlinearities.

    Drawn without repetition from :math:`x \lesssim -17` down to :math:`-100`
    (:math:`-700` in float64), where :math:`\tfrac12(1 + \tanh(x/2))` has lost every
    significant digit of :math:`\sigma(x)` in float32 and :math:`e^{-x}` overflows in
    :math:`1/(1+e^{-x})` beyond :math:`-88` (float32) or :math:`-709` (float64);
    :math:`+17, +30, +100`; tiny :math:`\pm 10^{-30}` and subnormal :math:`\pm 10^{-40}`
    (float32) or :math:`\pm 10^{-310}` (float64); :math:`0`; the rest uniform in
    :math:`[-100, 100]` (a shape of at least 16 entries holds every special value).
    Values are float64, exactly representable in ``dtype``.
    """
    rng = np.random.default_rng(draw(seeds))
    return _hostile_activation_array(rng, tuple(shape), dtype)


def _norm_magnitudes(dtype: str) -> dict[str, tuple[float, float]]:
    """Decimal exponent ranges of the huge, tiny and subnormal rows of ``dtype``."""
    if dtype == "float32":  # float32: max 3.4e38, smallest normal 1.2e-38
        return {"huge": (20.0, 37.0), "tiny": (-32.0, -25.0), "subnormal": (-41.0, -39.0)}
    return {"huge": (200.0, 300.0), "tiny": (-300.0, -150.0), "subnormal": (-312.0, -309.0)}


def _norm_row(rng: np.random.Generator, kind: str, d: int, dtype: str) -> np.ndarray:
    mag = _norm_magnitudes(dtype)

    def scale(key: str) -> float:
        return float(10.0 ** rng.uniform(*mag[key]))

    if kind == "huge":  # x*x overflows: a naive RMS is inf, the output 0
        return scale("huge") * rng.uniform(-1.0, 1.0, d)
    if kind == "huge_positive":  # the sum of the row is huge too
        return scale("huge") * rng.uniform(0.25, 1.0, d)
    if kind in ("tiny", "subnormal"):  # x*x underflows: epsilon dominates, y = x/sqrt(eps)
        return scale(kind) * rng.uniform(-1.0, 1.0, d)
    if kind == "constant":  # zero variance: y = beta exactly
        return np.full(d, rng.choice([7.0, -2.5, scale("huge"), scale("tiny")]))
    if kind == "zero":
        return np.zeros(d)
    if kind == "moderate":
        return rng.standard_normal(d)
    raise ValueError(f"hostile_norm_rows: unknown row kind {kind!r}: expected one of "
                     f"{', '.join(NORM_ROWS)}")


def _hostile_norm_array(rng: np.random.Generator, n: int, d: int, dtype: str) -> np.ndarray:
    order = list(NORM_ROWS)
    rng.shuffle(order)
    return _exact_in(np.stack([_norm_row(rng, order[i % len(order)], d, dtype)
                               for i in range(n)]), dtype)


@st.composite
def hostile_norm_rows(draw: st.DrawFn, d: int = 4, dtype: str = "float64",
                      n: int = len(NORM_ROWS)) -> np.ndarray:
    r"""Strategy: ``(n, d)`` rows that break a naive LayerNorm or RMSNorm.

    Each row is one of :data:`NORM_ROWS`, cycling in a drawn order (the default ``n``
    holds every kind): ``huge`` (:math:`10^{20}..10^{37}` in float32,
    :math:`10^{200}..10^{300}` in float64: :math:`x^2` overflows, above
    :math:`1.8\cdot 10^{19}` in float32), ``huge_positive`` (the row sum is huge too),
    ``tiny`` (:math:`10^{-32}..10^{-25}`, resp. :math:`10^{-300}..10^{-150}`: :math:`x^2`
    underflows and :math:`\epsilon` dominates, :math:`y = \gamma x/\sqrt\epsilon`),
    ``subnormal`` (:math:`\approx 10^{-40}`, resp. :math:`10^{-310}`), ``constant`` (zero
    variance, small or huge: LayerNorm gives :math:`\beta`), ``zero`` and ``moderate``
    (standard normal, the control). Values are float64, exactly representable in
    ``dtype``.
    """
    rng = np.random.default_rng(draw(seeds))
    return _hostile_norm_array(rng, n, d, dtype)


# -- condition estimates of hostile cases ------------------------------------------------


def _shifted_exponential_condition(args: list[Any]) -> float:
    r"""Softmax, log-softmax and the cross-entropy after the max shift: :math:`\kappa = 1`,
    whatever the magnitude of the logits. The inputs are exact in the working precision
    and :math:`z_j - c` is rounded relatively, :math:`(z_j - c)(1+\delta)`; with
    :math:`t = c - z_j \ge 0` the entry :math:`e^{-t}` is perturbed by at most
    :math:`t e^{-t} u \le u/e` (absolutely), and the log-softmax entry
    :math:`(z_j - c) - \log\sum` by :math:`u\,|z_j - c|`, at most :math:`u` times the
    largest output. So the errors are those of a few operations of size :math:`\le 1`
    (the default estimate :math:`\max|z|^2 = 10^8` would make the check vacuous)."""
    return 1.0


def _finite_max(a: Any) -> float:
    arr = np.asarray(a, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    return float(np.max(np.abs(arr))) if arr.size else 0.0


def _attention_condition(causal: bool) -> Any:
    def condition(args: list[Any]) -> float:
        r"""Attention with huge scores: :math:`\kappa = \max(1, |V|)\,\max(1, \kappa_S,
        |Q|, |K|)`. The scores are rounded with absolute errors :math:`|\delta
        s_{ij}| \le u\,\hat s_{ij}`, :math:`\hat s = |Q|\,|K|^\top/\sqrt{d_k}` (the
        :math:`\kappa = 1` of the shifted softmax holds for exact scores only), and
        :math:`\delta p_{ij} = p_{ij}\sum_k p_{ik}(\delta s_{ij} - \delta s_{ik})`, so
        :math:`|\delta p_{ij}| \le 2u\,p_{ij}(1 - p_{ij})\max_k \hat s_{ik}`: that
        factor, maximized, is :math:`\kappa_S` (large only for rows with huge scores *and*
        gaps of order 1; a one-hot row or a row of equal scores is insensitive).
        :math:`A = PV` carries it times :math:`|V|`. In the VJP, :math:`dS = P\odot(dP -
        \operatorname{rowsum}(dP\odot P))` has the relative error :math:`\approx u\hat s`
        where :math:`p_{ij}(1-p_{ij})` is not small, and otherwise cancels to an absolute
        error :math:`u|dP|`, :math:`dP = GV^\top`, which :math:`\bar Q = dS\,K/\sqrt{d_k}`
        and :math:`\bar K = dS^\top Q/\sqrt{d_k}` multiply by :math:`|K|`, :math:`|Q|`: the
        larger of the two regimes, times :math:`|V|`."""
        Q, K, V = (np.asarray(a, dtype=np.float64) for a in args[:3])
        root = np.sqrt(Q.shape[-1])
        S = Q @ np.swapaxes(K, -1, -2) / root
        s_hat = np.abs(Q) @ np.swapaxes(np.abs(K), -1, -2) / root
        if causal:
            n = S.shape[-1]
            S = np.where(np.tril(np.ones((n, n), dtype=bool)), S, -np.inf)
        E = np.exp(S - np.max(S, axis=-1, keepdims=True))
        P = E / np.sum(E, axis=-1, keepdims=True)
        kappa_s = float(np.max(2.0 * P * (1.0 - P) * np.max(s_hat, axis=-1, keepdims=True)))
        return max(1.0, _finite_max(V)) * max(1.0, kappa_s, _finite_max(Q), _finite_max(K))

    return condition


def _scale_free_norm_condition(args: list[Any]) -> float:
    r"""LayerNorm/RMSNorm: :math:`\kappa = \sqrt d\,\max(1, |\gamma|, |\beta|)`, whatever
    the magnitude of the rows. The centering of :mod:`nlaverify.ops.norms` (shifted by the
    first entry, corrected two-pass) errs by :math:`O(u\max_j|c_j|)` on exact inputs, and
    the normalization amplifies it by :math:`\max_j |c_j| / \sqrt{\overline{c^2} +
    \epsilon} \le \sqrt d`; the scaled root mean square and the rest are a few operations
    on numbers of size :math:`|\gamma|, |\beta|`. Scale-free: a row multiplied by
    :math:`10^{30}` has the same :math:`\kappa` (the default :math:`\max|x|^2` would be
    infinite)."""
    d = np.shape(args[0])[-1]
    return float(np.sqrt(d)) * max([1.0] + [_finite_max(a) for a in args[1:]])


def _pointwise_condition(args: list[Any]) -> float:
    r"""Pointwise activations: :math:`\kappa = \max(1, \max|x|)`. The inputs are exact;
    the argument of :math:`\exp`, :math:`\tanh` or :math:`\operatorname{erf}` is formed
    with a relative error of a few :math:`u`, which moves the output by
    :math:`|\arg\, f'|\,u`, at most :math:`\max(1, |x|)` times the output scale for
    SiLU, GELU, tanh and their derivatives (whose :math:`x^3 e^{-x^2}`-like terms are
    bounded). The default :math:`\max|x|^2` is a looser bound of the same kind."""
    return max([1.0] + [_finite_max(a) for a in args])


def _moe_condition(args: list[Any]) -> float:
    r"""MoE with huge router scores: the default magnitude estimate of the expert inputs
    and weights, without the scores (whose gates, a shifted softmax, have
    :math:`\kappa = 1`)."""
    from nlaverify.tolerance import magnitude_condition

    return magnitude_condition(*(a for k, a in enumerate(args) if k != 1))


# -- hostile cases of the registry's ops --------------------------------------------------


def _hostile_sizes(op: str) -> dict[str, int]:
    """Fixed sizes per op (the values are what is hostile; one shape per op also keeps the
    number of JAX compilations down): enough rows for every row kind."""
    if op in ("softmax", "log_softmax"):
        return {"n": len(LOGIT_ROWS), "m": 4}
    if op == "cross_entropy":
        return {"n": 3, "V": 5}
    if op in ("attention", "causal_attention"):
        return {"n": 4, "d_k": 2, "d_v": 2}
    if op in ("layernorm", "rmsnorm"):
        return {"n": len(NORM_ROWS), "d": 5}
    if op in ("moe", "moe_swiglu"):
        return {"n": 3, "d": 2, "E": 3, "m": 2}
    return {"n": 2, "d": 8}  # pointwise activations: 16 entries, every special value


def _hostile_args(spec: OpSpec, sizes: dict[str, int], rng: np.random.Generator,
                  dtype: str) -> list[Any]:
    op = spec.name

    def normal(shape: tuple[int, ...]) -> np.ndarray:
        return _exact_in(rng.standard_normal(shape), dtype)

    args: list[Any] = []
    for k, a in enumerate(spec.args):
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in a.dims)
        if a.kind == "tokens":
            args.append(rng.integers(0, sizes["V"], size=shape, dtype=np.int64))
        elif a.kind == "mask":
            args.append(fixed_routing_mask(*shape))
        elif op == "softmax":
            args.append(_hostile_logit_array(rng, shape, dtype, LOGIT_ROWS))
        elif op == "log_softmax":
            args.append(_hostile_logit_array(rng, shape, dtype, LOGIT_ROWS[:-1]))
        elif op == "cross_entropy" or (op.startswith("moe") and a.name == "scores"):
            args.append(_hostile_logit_array(rng, shape, dtype, LOGIT_ROWS[:3]))
        elif op in ("attention", "causal_attention") and a.name in ("Q", "K"):
            # scores q.k/sqrt(d_k) of order 1e4; a zero query row gives equal scores; keys
            # that share a huge component give scores of order 1e4 a few units apart
            M = 100.0 * rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 1.0, shape) \
                * np.sqrt(np.sqrt(shape[-1]))
            if a.name == "Q":
                M[rng.integers(0, shape[0])] = 0.0
            elif rng.random() < 0.5:
                M = M[:1] + 0.02 * rng.standard_normal(shape)
            args.append(_exact_in(M, dtype))
        elif op in ("layernorm", "rmsnorm") and a.name == "x":
            args.append(_hostile_norm_array(rng, shape[0], shape[1], dtype))
        elif op in ("silu", "gelu_erf", "gelu_tanh", "tanh", "relu") or (
                op == "swiglu" and k == 0):
            x = _hostile_activation_array(rng, shape, dtype)
            if op == "relu":  # a kink at 0: see make_hostile_case
                tiny = float(np.finfo(dtype).tiny)
                x = np.where((x != 0) & (np.abs(x) < tiny), np.sign(x) * tiny, x)
            args.append(x)
        else:
            args.append(normal(shape))
    return args


_CONDITIONS: dict[str, Any] = {
    "softmax": _shifted_exponential_condition,
    "log_softmax": _shifted_exponential_condition,
    "cross_entropy": _shifted_exponential_condition,
    **{op: _pointwise_condition for op in ("silu", "swiglu", "gelu_erf", "gelu_tanh", "tanh",
                                           "relu")},
    "layernorm": _scale_free_norm_condition,
    "rmsnorm": _scale_free_norm_condition,
    "moe": _moe_condition,
    "moe_swiglu": _moe_condition,
}

#: the ops :func:`hostile_op_cases` knows hostile inputs for
HOSTILE_OPS: tuple[str, ...] = (
    "softmax", "log_softmax", "cross_entropy", "attention", "causal_attention", "silu",
    "swiglu", "gelu_erf", "gelu_tanh", "tanh", "relu", "layernorm", "rmsnorm", "moe",
    "moe_swiglu",
)


def make_hostile_case(op: str | OpSpec, dtype: str, seed: int) -> OpCase:
    """The :class:`OpCase` of :func:`hostile_op_cases` for one seed (deterministic).

    ReLU gets no subnormal input (the smallest normal number instead): its VJP jumps at
    0, and XLA on the CPU treats subnormal inputs as 0 (denormals-are-zero), so JAX
    takes the subgradient at 0 there: a test of the backend's flush, not of the kernel.
    """
    from nlaverify.backends import get_namespace

    spec = OPS[op] if isinstance(op, str) else op
    if spec.name not in HOSTILE_OPS:
        raise ValueError(f"hostile_op_cases: argument 'op': expected one of "
                         f"{', '.join(HOSTILE_OPS)}, got {spec.name!r}")
    rng = np.random.default_rng(seed)
    sizes = _hostile_sizes(spec.name)
    args = _hostile_args(spec, sizes, rng, dtype)
    static = dict(spec.static)
    condition = (_attention_condition(bool(static.get("causal")))
                 if spec.name in ("attention", "causal_attention")
                 else _CONDITIONS.get(spec.name, spec.condition))
    spec = replace(spec, condition=condition)
    out = spec.forward(get_namespace("numpy"), *args, **static)
    G = _exact_in(rng.standard_normal(np.shape(out)), dtype)
    return OpCase(spec, sizes, args, static, G)


@st.composite
def hostile_op_cases(draw: st.DrawFn, op: str | OpSpec, dtype: str = "float64") -> OpCase:
    r"""Strategy: an :class:`OpCase` of ``op`` (one of :data:`HOSTILE_OPS`) with inputs that
    break naive kernels, exactly representable in ``dtype``: logits from
    :func:`hostile_logits` for softmax (every row kind), log-softmax (no all-masked row:
    it raises) and the router scores of MoE and the cross-entropy logits (no
    :math:`-\infty`: they reject it); queries and keys of attention whose scores reach
    :math:`\pm 10^4`, with a zero query row (equal scores); :func:`hostile_activations`
    for the pointwise ops (the first argument of SwiGLU); :func:`hostile_norm_rows` for
    LayerNorm and RMSNorm; standard normal values elsewhere and for the cotangent.

    The case's ``spec`` is the op's, with a ``condition`` estimate derived for such
    inputs (the default estimate grows with :math:`\max|x|^2`, which would make any
    comparison vacuous at :math:`10^4` or :math:`10^{30}`): :math:`\kappa = 1` for the
    shifted exponentials (softmax, log-softmax, cross-entropy, MoE gates), the bound on
    the scores for attention, a scale-free :math:`\sqrt d` for the normalizations,
    :math:`\max(1, |x|)` for the pointwise ops. Run it through
    :func:`nlaverify.crosscheck.run_vjp` and compare with the mpmath reference under
    :func:`nlaverify.tolerance.tolerance` with :func:`nlaverify.crosscheck.case_condition`.
    """
    return make_hostile_case(op, dtype, draw(seeds))
