r"""Decoding strategies as exact transformations of the next-token distribution (Baptista,
Stuart & Tran §6; Holtzman et al. 2020 for top-p; Meister et al. 2023 for typical
sampling; Nguyen et al. 2024 for min-p; Keskar et al. 2019 for the repetition penalty).

Each strategy maps the logits :math:`z \in \mathbb R^V` of one position (or a batch of
rows) to a distribution :math:`q` over the vocabulary:

* temperature :math:`T`: :math:`q = \operatorname{softmax}(z/T)`; as :math:`T \to 0`,
  the one-hot of :math:`\arg\max z` (greedy);
* top-:math:`k`: :math:`p = \operatorname{softmax}(z)` restricted to the tokens whose logit
  is at least the :math:`k`-th largest (ties at the boundary kept, as Hugging Face does),
  renormalised;
* top-:math:`p` (nucleus): the tokens of largest probability, in decreasing order, up to and
  including the first at which their mass reaches :math:`p`: the smallest such prefix
  (ties ordered by token id);
* min-:math:`p`: the tokens with :math:`p_i \ge p_{\min}\max_j p_j`;
* typical (mass :math:`\tau`): the tokens ordered by :math:`|-\log p_i - H(p)|`, up to and
  including the first at which their mass reaches :math:`\tau`, and every token tied with
  that one (as Hugging Face keeps them);
* repetition penalty :math:`\theta`: each logit of a token already in the sequence is
  divided by :math:`\theta` when positive and multiplied by it when negative.

Each filter is a kept set (``keep_*``: comparisons only, on floats or exact rationals) and
one renormalisation written against an array namespace (:func:`renormalise`,
:func:`tempered`); the family ``decoding`` (``nlaverify derive``) proves those functions:
the renormalisation equals Hugging Face's :math:`-\infty`-masked softmax, the limits of the
temperature, and each kept set's defining property, exhaustively on exact rationals. The
float64 functions (rows along the last axis) keep the dropped tokens at probability exactly 0;
``tests/test_decoding.py`` checks them against Hugging Face's logits processors.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from nlaverify.backends import Namespace, get_namespace
from nlaverify.errors import ArgumentError
from nlaverify.ops.softmaxes import softmax

__all__ = ["check_logits", "keep_min_p", "keep_top_k", "keep_top_p", "keep_typical", "min_p",
           "renormalise", "repetition_penalty", "sample", "scale_logits", "softmax_rows",
           "temperature", "tempered", "top_k", "top_p", "typical"]

_NP = get_namespace("numpy")


def softmax_rows(z: np.ndarray) -> np.ndarray:
    r""":math:`\operatorname{softmax}` along the last axis (float64,
    :func:`nlaverify.ops.softmaxes.softmax`)."""
    return softmax(_NP, np.asarray(z, np.float64))


def _positive(name: str, value: float, hi: float | None = None) -> None:
    """A finite real number (Python's or NumPy's) in ``(0, hi]`` (or ``> 0``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
            math.isfinite(value) and value > 0) or (hi is not None and value > hi):
        rng = f"in (0, {hi:g}]" if hi is not None else "> 0"
        raise ArgumentError(f"{name}: expected a finite number {rng}, got {value!r}")


def check_logits(op: str, z: Any) -> np.ndarray:
    r"""``z`` as float64 logits, rows along the last axis: every entry finite or
    :math:`-\infty` (a masked token), and no row masked entirely (it is no distribution).

    Raises:
        ArgumentError: NaN or :math:`+\infty`, or a row whose every token is masked, named
            with ``op`` and the row.
    """
    z = np.asarray(z, np.float64)
    if z.ndim == 0 or z.shape[-1] == 0:
        raise ArgumentError(f"{op}: argument 'z': expected logits with a vocabulary axis, got "
                            f"shape {z.shape}")
    bad = np.isnan(z) | (z == np.inf)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ArgumentError(f"{op}: argument 'z': expected finite logits or -inf (masked), got "
                            f"{z[where]} at {where}")
    masked = np.all(z == -np.inf, axis=-1)
    if masked.any():
        row = (f" of row {tuple(int(i) for i in np.argwhere(masked)[0])}" if masked.ndim
               else "")
        raise ArgumentError(f"{op}: argument 'z': every token{row} is masked (-inf): no "
                            f"distribution to draw from")
    return z


def tempered(xp: Namespace, z: Any, T: Any) -> Any:
    r"""The tempered distribution :math:`q = \operatorname{softmax}(z/T)` (written once
    against ``xp``; the family ``decoding`` proves its limits :math:`T \to 0^+` (greedy) and
    :math:`T \to \infty` (uniform) on the exact namespace)."""
    return softmax(xp, z / T)


def renormalise(xp: Namespace, z: Any, keep: Any) -> Any:
    r"""The softmax of ``z`` restricted to the tokens ``keep`` and renormalised,

    .. math:: q_i = \frac{[i \in K]\,p_i}{\sum_{j \in K} p_j}
       = \frac{[i \in K]\,e^{z_i}}{\sum_{j \in K} e^{z_j}},
       \qquad p = \operatorname{softmax}(z),

    the second form being Hugging Face's (the dropped logits set to :math:`-\infty`, then the
    softmax); the family ``decoding`` proves the two equal for every kept set. Every filter of
    this module is this function of its own kept set."""
    p = softmax(xp, z)
    q = xp.where(keep, p, xp.zeros_like(p))
    return q / xp.sum(q, axis=-1, keepdims=True)


def keep_top_k(z: Any, k: int) -> np.ndarray:
    r"""The kept set of top-:math:`k`: :math:`i \in K \iff |\{j : z_j > z_i\}| < k`, the tokens
    whose logit is at least the :math:`k`-th largest (ties at the boundary kept, as Hugging
    Face does, so :math:`|K| \ge \min(k, V)`). Works on any ordered scalars (floats or exact
    rationals), rows along the last axis."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k:
        raise ArgumentError(f"top_k: argument 'k': expected an integer >= 1, got {k!r}")
    z = np.asarray(z)
    k = min(int(k), z.shape[-1])
    kth = -np.sort(-z, axis=-1)[..., k - 1:k]
    return np.asarray(z >= kth, dtype=bool)


def _prefix_keep(order: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """The mask keeping the tokens at positions ``0 .. cut`` of each row's ``order``."""
    rank = np.argsort(order, axis=-1, kind="stable")  # the inverse permutation
    return rank <= cut[:, None]


def keep_top_p(probs: Any, p: Any) -> np.ndarray:
    r"""The kept set of top-:math:`p` (nucleus): the tokens in decreasing probability (ties by
    token id), up to and including the first at which their cumulative mass reaches
    :math:`p`. The family ``decoding`` proves it, exhaustively on exact rationals, the
    smallest set of mass :math:`\ge p`. Works on floats or exact rationals."""
    probs = np.asarray(probs)
    flat = probs.reshape(-1, probs.shape[-1])
    order = np.argsort(-flat, axis=-1, kind="stable")
    reach = np.asarray(np.cumsum(np.take_along_axis(flat, order, axis=-1), axis=-1) >= p,
                       dtype=bool)
    reach[:, -1] = True  # every token together has mass 1 >= p, whatever the rounded sum
    cut = np.argmax(reach, axis=-1)  # the first index reaching p
    return _prefix_keep(order, cut).reshape(probs.shape)


def keep_min_p(probs: Any, p_min: Any) -> np.ndarray:
    r"""The kept set of min-:math:`p`: :math:`p_i \ge p_{\min}\max_j p_j` (equivalently
    :math:`z_i \ge \max_j z_j + \log p_{\min}`, proved by the family ``decoding``)."""
    probs = np.asarray(probs)
    return np.asarray(probs >= p_min * np.max(probs, axis=-1, keepdims=True), dtype=bool)


def keep_typical(probs: Any, logp: Any, mass: Any) -> np.ndarray:
    r"""The kept set of locally typical sampling (Hugging Face's ``TypicalLogitsWarper``):
    with the distances :math:`\delta_i = |-\log p_i - H(p)|`, :math:`H(p) = -\sum_j
    p_j\log p_j`, the tokens in increasing :math:`\delta` up to the first at which their
    cumulative mass reaches ``mass``, at distance :math:`\delta^*`; kept:
    :math:`\{i : \delta_i \le \delta^*\}` (every token tied with the cut is kept, as
    Hugging Face does; :math:`\delta^*` does not depend on the order within a tie).
    ``logp`` is :math:`\log p` (given, so that exact rationals and their SymPy logarithms
    work as floats do)."""
    probs, logp = np.asarray(probs), np.asarray(logp)
    flat_p = probs.reshape(-1, probs.shape[-1])
    flat = logp.reshape(flat_p.shape)
    plogp = np.where(flat_p > 0, flat_p * np.where(flat_p > 0, flat, 0), 0)
    entropy = -np.sum(plogp, axis=-1, keepdims=True)
    dist = np.abs(-flat - entropy)
    order = np.argsort(dist, axis=-1, kind="stable")
    cum = np.cumsum(np.take_along_axis(flat_p, order, axis=-1), axis=-1)
    cut = np.minimum(np.sum(np.asarray(cum < mass, dtype=bool), axis=-1),
                     flat_p.shape[-1] - 1)
    dstar = np.take_along_axis(np.take_along_axis(dist, order, axis=-1), cut[:, None], axis=-1)
    return np.asarray(dist <= dstar, dtype=bool).reshape(probs.shape)


def scale_logits(op: str, z: Any, T: float, name: str = "T") -> np.ndarray:
    r""":math:`z/T` of checked logits (:func:`check_logits`), refused when the division
    overflows float64 (finite logits and a small :math:`T`); ``name`` is the caller's name
    of :math:`T`."""
    _positive(f"{op}: argument {name!r}", T)
    z = check_logits(op, z)
    with np.errstate(over="ignore"):
        out = z / T
    big = np.isinf(out) & np.isfinite(z)
    if big.any():
        raise ArgumentError(f"{op}: z / T overflows float64 (T = {T!r}, the largest |z| = "
                            f"{np.max(np.abs(z[np.isfinite(z)])):.3g}): a temperature this "
                            f"small is greedy decoding")
    return out


def temperature(z: np.ndarray, T: float) -> np.ndarray:
    r""":math:`\operatorname{softmax}(z/T)` (:func:`tempered` in float64, on
    :func:`scale_logits`)."""
    scale_logits("temperature", z, T)  # checked: finite, and z / T does not overflow
    return tempered(_NP, np.asarray(z, np.float64), T)


def top_k(z: np.ndarray, k: int) -> np.ndarray:
    """Top-:math:`k`: :func:`renormalise` on :func:`keep_top_k`."""
    z = check_logits("top_k", z)
    return renormalise(_NP, z, keep_top_k(z, k))


def top_p(z: np.ndarray, p: float) -> np.ndarray:
    r"""Top-:math:`p`: :func:`renormalise` on :func:`keep_top_p` (the smallest set of most
    probable tokens, ties by token id, whose mass reaches :math:`p`)."""
    _positive("top_p: argument 'p'", p, 1.0)
    z = check_logits("top_p", z)
    return renormalise(_NP, z, keep_top_p(softmax_rows(z), p))


def min_p(z: np.ndarray, p_min: float) -> np.ndarray:
    r"""Min-:math:`p`: :func:`renormalise` on :func:`keep_min_p`."""
    _positive("min_p: argument 'p_min'", p_min, 1.0)
    z = check_logits("min_p", z)
    return renormalise(_NP, z, keep_min_p(softmax_rows(z), p_min))


def typical(z: np.ndarray, mass: float) -> np.ndarray:
    r"""Locally typical sampling: :func:`renormalise` on :func:`keep_typical`."""
    _positive("typical: argument 'mass'", mass, 1.0)
    z = check_logits("typical", z)
    p = softmax_rows(z)
    with np.errstate(divide="ignore"):
        logp = np.log(p)
    return renormalise(_NP, z, keep_typical(p, logp, mass))


def repetition_penalty(z: np.ndarray, previous: Sequence[int], theta: float) -> np.ndarray:
    r"""The logits with each token of ``previous`` penalised: :math:`z_i/\theta` for
    :math:`z_i > 0`, :math:`z_i\theta` otherwise (a 1-D row of logits)."""
    _positive("repetition_penalty: argument 'theta'", theta)
    z = np.array(z, np.float64)
    if z.ndim != 1:
        raise ArgumentError(f"repetition_penalty: argument 'z': expected one row of logits "
                            f"(V,), got shape {z.shape}")
    seen = sorted({int(i) for i in previous})
    if any(not 0 <= i < z.shape[0] for i in seen):
        raise ArgumentError(f"repetition_penalty: argument 'previous': ids must be in "
                            f"[0, {z.shape[0]}), got {seen}")
    z[seen] = np.where(z[seen] > 0, z[seen] / theta, z[seen] * theta)
    return z


def sample(q: np.ndarray, seed: int | np.random.Generator, n: int = 1) -> np.ndarray:
    r"""``n`` token ids drawn from the distribution ``q`` (one row, ``(V,)``) by inversion:
    :math:`u \sim U[0, 1)` (NumPy's PCG64 from ``seed``), the id :math:`i` with
    :math:`F_{i-1} \le u < F_i`, :math:`F` the cumulative sums. The same seed gives the same
    ids; a token of probability 0 is never drawn (its interval is empty)."""
    q = np.asarray(q, np.float64)
    if q.ndim != 1 or not np.all(q >= 0) or not abs(q.sum() - 1.0) <= 1e-9:
        raise ArgumentError(f"sample: argument 'q': expected one row of probabilities "
                            f"summing to 1, got shape {q.shape}, sum {q.sum() if q.size else 0}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ArgumentError(f"sample: argument 'n': expected an integer >= 1, got {n!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    cdf = np.cumsum(q)
    cdf[-1] = 1.0 if cdf[-1] > 0 else cdf[-1]
    u = rng.random(n)
    idx = np.searchsorted(cdf, u, side="right")
    # the last token of positive probability takes u beyond a rounded total
    last = int(np.flatnonzero(q > 0)[-1])
    return np.minimum(idx, last)
