r"""Inputs that break naive kernels (``docs/guide/precision.md``, "Inputs that break naive
kernels").

:func:`hostile_logits` (logits of :math:`\pm 10^4`, equal rows, :math:`-\infty` entries,
all-masked rows), :func:`hostile_activations` (:math:`x \lesssim -17` down to :math:`-100`,
:math:`+100`, tiny, subnormal, 0), :func:`hostile_norm_rows` (huge, tiny, subnormal,
constant and zero rows) and :func:`hostile_op_cases`, an
:class:`~nlaverify.cases.drawn.OpCase` of any op of :data:`HOSTILE_OPS` built from them,
with a condition estimate derived for such inputs (:func:`make_hostile_case` for one seed).
:func:`realistic_norm_rows`: the norm rows a model meets (what ``check_op`` uses unless
asked for ``hostile="extreme"``). :mod:`nlaverify.strategies` and :mod:`nlaverify.cases`
re-export everything here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from hypothesis import strategies as st

from nlaverify.cases.drawn import OpCase, seeds
from nlaverify.cases.rounding import exact_in
from nlaverify.ops.registry import OPS, OpSpec, fixed_routing_mask

__all__ = [
    "HOSTILE_OPS",
    "HUGE_LOGIT",
    "LOGIT_ROWS",
    "NORM_ROWS",
    "hostile_activations",
    "hostile_logit_array",
    "hostile_logits",
    "hostile_norm_rows",
    "hostile_op_cases",
    "make_hostile_case",
    "realistic_norm_rows",
]

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


def hostile_logit_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str,
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
    return hostile_logit_array(rng, tuple(shape), dtype, kinds)


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


def _attention_condition(static: dict[str, Any]) -> Any:
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
        larger of the two regimes, times :math:`|V|`. The scores take the op's statics
        (its mask, window, alignment and scale), so every op of the attention family gets
        the same estimate."""
        from nlaverify.backends import get_namespace
        from nlaverify.ops.sdpa import attention_scores

        xp = get_namespace("numpy")
        Q, K, V = (np.asarray(a, dtype=np.float64) for a in args[:3])
        S = np.asarray(attention_scores(xp, Q, K, **static))
        s_hat = np.asarray(attention_scores(xp, np.abs(Q), np.abs(K),
                                            scale=static.get("scale")))
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
    if op in ATTENTION_OPS:  # fewer queries than keys where the op allows it
        return {"n": 4, "n_k": 6, "d_k": 2, "d_v": 2}
    if op in ("layernorm", "rmsnorm"):
        return {"n": len(NORM_ROWS), "d": 5}
    if op in ("moe", "moe_swiglu"):
        return {"n": 3, "d": 2, "E": 3, "m": 2}
    return {"n": 2, "d": 8}  # pointwise activations: 16 entries, every special value


def _hostile_scores(rng: np.random.Generator, shape: tuple[int, ...],
                   role: str = "either") -> np.ndarray:
    r"""Queries or keys of attention whose scores :math:`q\cdot k/\sqrt{d}` reach
    :math:`\pm 10^4` (entries :math:`\pm 100\,d^{1/4}` times :math:`U[0.5, 1]`): for a
    ``"query"``, one zero row (its scores all equal); for a ``"key"``, half the time rows
    sharing one huge component (scores of order :math:`10^4` a few units apart);
    ``"either"`` (a user's op, whose argument's role is not known) one or the other."""
    M = 100.0 * rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 1.0, shape) \
        * np.sqrt(np.sqrt(shape[-1]))
    if len(shape) < 2:
        return M
    zero_row = role == "query" or (role == "either" and rng.random() < 0.5)
    if zero_row:
        M[..., rng.integers(0, shape[-2]), :] = 0.0
    elif role == "either" or rng.random() < 0.5:
        M = M[..., :1, :] + 0.02 * rng.standard_normal(shape)
    return M


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
            args.append(hostile_logit_array(rng, shape, dtype, LOGIT_ROWS))
        elif op == "log_softmax":
            args.append(hostile_logit_array(rng, shape, dtype, LOGIT_ROWS[:-1]))
        elif op == "cross_entropy" or (op.startswith("moe") and a.name == "scores"):
            args.append(hostile_logit_array(rng, shape, dtype, LOGIT_ROWS[:3]))
        elif op in ATTENTION_OPS and a.name in ("Q", "K"):
            role = "query" if a.name == "Q" else "key"
            args.append(_exact_in(_hostile_scores(rng, shape, role), dtype))
        elif op in ("layernorm", "rmsnorm") and a.name == "x":
            args.append(_hostile_norm_array(rng, shape[0], shape[1], dtype))
        elif op in ("silu", "gelu_erf", "gelu_tanh", "tanh", "relu", "softcap") or (
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
                                           "relu", "softcap")},
    "layernorm": _scale_free_norm_condition,
    "rmsnorm": _scale_free_norm_condition,
    "moe": _moe_condition,
    "moe_swiglu": _moe_condition,
}

#: the ops of scaled dot-product attention (one forward, with its mask, window, alignment
#: and scale as statics), which share the hostile queries and keys and their condition
ATTENTION_OPS: tuple[str, ...] = ("attention", "causal_attention", "attention_mup",
                                  "causal_attention_kv", "sliding_window_attention")
#: the ops :func:`hostile_op_cases` knows hostile inputs for
HOSTILE_OPS: tuple[str, ...] = (
    "softmax", "log_softmax", "cross_entropy", *ATTENTION_OPS, "silu",
    "swiglu", "gelu_erf", "gelu_tanh", "tanh", "relu", "layernorm", "rmsnorm", "moe",
    "moe_swiglu", "softcap",
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
    condition = (_attention_condition({k: v for k, v in static.items()
                                       if k in ("causal", "window", "scale", "align")})
                 if spec.name in ATTENTION_OPS
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


#: decimal exponent ranges of the "realistic" hostile norm rows per dtype: large
#: activations a model meets (x^2 stays in range), and tiny rows whose mean square is
#: below eps (where the position of eps shows)
_REALISTIC_NORM = {"float64": (2.0, 4.0), "float32": (2.0, 4.0), "bfloat16": (2.0, 4.0),
                   "float16": (1.0, 2.0)}


def realistic_norm_rows(rng: np.random.Generator, n: int, d: int, dtype: str) -> np.ndarray:
    r"""Rows for LayerNorm/RMSNorm that a model meets: large
    (:math:`10^{2}..10^{4}`, :math:`10^{1}..10^{2}` in float16, so :math:`x^2` stays in
    range), large with a common offset, tiny (:math:`10^{-3.5}..10^{-2.5}`: the mean
    square is comparable to :math:`\epsilon`, where a misplaced :math:`\epsilon` shows),
    constant, zero and standard normal rows, cycling in a drawn order."""
    lo, hi = _REALISTIC_NORM[dtype]
    kinds = ["large", "offset", "tiny", "constant", "zero", "moderate"]
    rng.shuffle(kinds)
    rows = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        if kind == "large":
            rows.append(10.0 ** rng.uniform(lo, hi) * rng.uniform(-1.0, 1.0, d))
        elif kind == "offset":
            rows.append(10.0 ** rng.uniform(lo, hi) * (1.0 + 0.1 * rng.standard_normal(d)))
        elif kind == "tiny":
            rows.append(10.0 ** rng.uniform(-3.5, -2.5) * rng.standard_normal(d))
        elif kind == "constant":
            rows.append(np.full(d, rng.choice([7.0, -2.5])))
        elif kind == "zero":
            rows.append(np.zeros(d))
        else:
            rows.append(rng.standard_normal(d))
    return exact_in(np.stack(rows), dtype, strict=True)

