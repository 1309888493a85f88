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
  including the first at which their mass exceeds :math:`\tau`;
* repetition penalty :math:`\theta`: each logit of a token already in the sequence is
  divided by :math:`\theta` when positive and multiplied by it when negative.

Every function takes and returns float64 NumPy (rows along the last axis) and keeps the
masked tokens at probability exactly 0. ``tests/test_decoding.py`` checks them against
Hugging Face's logits processors on the same logits, and their defining properties.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nlaverify.errors import ArgumentError

__all__ = ["min_p", "repetition_penalty", "sample", "softmax_rows", "temperature", "top_k",
           "top_p", "typical"]


def softmax_rows(z: np.ndarray) -> np.ndarray:
    r""":math:`\operatorname{softmax}` along the last axis, shifted by the row maximum
    (:math:`-\infty` entries get 0)."""
    z = np.asarray(z, np.float64)
    e = np.exp(z - np.max(z, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def _positive(name: str, value: float, hi: float | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or (
            hi is not None and value > hi):
        rng = f"in (0, {hi:g}]" if hi is not None else "> 0"
        raise ArgumentError(f"{name}: expected a number {rng}, got {value!r}")


def temperature(z: np.ndarray, T: float) -> np.ndarray:
    r""":math:`\operatorname{softmax}(z/T)`."""
    _positive("temperature: argument 'T'", T)
    return softmax_rows(np.asarray(z, np.float64) / T)


def _keep(p: np.ndarray, keep: np.ndarray) -> np.ndarray:
    q = np.where(keep, p, 0.0)
    return q / np.sum(q, axis=-1, keepdims=True)


def top_k(z: np.ndarray, k: int) -> np.ndarray:
    """Top-:math:`k`: the tokens whose logit is at least the :math:`k`-th largest (ties at
    the boundary kept), renormalised."""
    z = np.asarray(z, np.float64)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k:
        raise ArgumentError(f"top_k: argument 'k': expected an integer >= 1, got {k!r}")
    k = min(k, z.shape[-1])
    kth = -np.sort(-z, axis=-1)[..., k - 1:k]
    return _keep(softmax_rows(z), z >= kth)


def _prefix_keep(order: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """The mask keeping the tokens at positions ``0 .. cut`` of each row's ``order``."""
    rank = np.argsort(order, axis=-1, kind="stable")  # the inverse permutation
    return rank <= cut[:, None]


def top_p(z: np.ndarray, p: float) -> np.ndarray:
    r"""Top-:math:`p`: the smallest set of most probable tokens (decreasing probability, ties
    by token id) whose mass reaches :math:`p`, renormalised."""
    _positive("top_p: argument 'p'", p, 1.0)
    probs = softmax_rows(z)
    flat = probs.reshape(-1, probs.shape[-1])
    order = np.argsort(-flat, axis=-1, kind="stable")
    reach = np.cumsum(np.take_along_axis(flat, order, axis=-1), axis=-1) >= p
    reach[:, -1] = True  # every token together has mass 1 >= p, whatever the rounded sum
    cut = np.argmax(reach, axis=-1)  # the first index reaching p
    keep = _prefix_keep(order, cut)
    return _keep(flat, keep).reshape(probs.shape)


def min_p(z: np.ndarray, p_min: float) -> np.ndarray:
    r"""Min-:math:`p`: the tokens with :math:`p_i \ge p_{\min}\max_j p_j`, renormalised."""
    _positive("min_p: argument 'p_min'", p_min, 1.0)
    probs = softmax_rows(z)
    return _keep(probs, probs >= p_min * np.max(probs, axis=-1, keepdims=True))


def typical(z: np.ndarray, mass: float) -> np.ndarray:
    r"""Locally typical sampling: the tokens ordered by :math:`|-\log p_i - H(p)|` (ties by
    token id), up to and including the first at which their mass exceeds ``mass``,
    renormalised."""
    _positive("typical: argument 'mass'", mass, 1.0)
    logp = np.log(softmax_rows(z))
    flat = logp.reshape(-1, logp.shape[-1])
    p = np.exp(flat)
    entropy = -np.sum(np.where(p > 0, p * flat, 0.0), axis=-1, keepdims=True)
    order = np.argsort(np.abs(-flat - entropy), axis=-1, kind="stable")
    cum = np.cumsum(np.take_along_axis(p, order, axis=-1), axis=-1)
    cut = np.minimum(np.sum(cum < mass, axis=-1), flat.shape[-1] - 1)
    keep = _prefix_keep(order, cut)
    return _keep(p, keep).reshape(logp.shape)


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
