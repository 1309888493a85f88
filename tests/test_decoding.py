"""Decoding strategies (issue 21, item 2, part): nlaverify.decoding's temperature, top-k,
top-p, min-p, typical and repetition penalty as exact transformations of the next-token
distribution, against Hugging Face's logits processors on the same logits (float64, under
the tolerance model) and against their defining properties (hypothesis).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlaverify import decoding as D
from nlaverify.errors import ArgumentError
from nlaverify.tolerance import tolerance

LOGITS = st.tuples(st.integers(1, 3), st.integers(2, 30)).flatmap(
    lambda shape: st.lists(st.floats(-30, 30, allow_nan=False), min_size=shape[0] * shape[1],
                           max_size=shape[0] * shape[1]).map(
        lambda v: np.array(v, dtype=np.float64).reshape(shape)))


def _distribution(q: np.ndarray) -> None:
    """Non-negative rows summing to 1 within the float64 rounding of a V-term sum."""
    assert np.all(q >= 0)
    tol = tolerance("float64", size=q.shape[-1], depth=2)
    assert tol.compare(q.sum(-1), np.ones(q.shape[:-1])).ok, tol.compare(q.sum(-1), 1.0)


@settings(max_examples=150, deadline=None)
@given(LOGITS, st.floats(0.05, 1.0))
def test_top_p_keeps_the_smallest_prefix_reaching_p(z, p) -> None:
    q = D.top_p(z, p)
    _distribution(q)
    probs = D.softmax_rows(z)
    for row, kept in zip(probs, q > 0, strict=True):
        mass = row[kept].sum()
        rounding = tolerance("float64", size=row.size, depth=2).rtol  # of a V-term sum
        # reaches p up to the rounding of the sum (the whole vocabulary always reaches it)
        assert mass >= p - rounding or kept.all()
        # the least probable kept token is needed: without it the mass is below p
        least = row[kept].min()
        assert mass - least < p + rounding or np.sum(kept) == 1
        # every dropped token is at most as probable as every kept one
        assert row[~kept].max(initial=0.0) <= least


@settings(max_examples=150, deadline=None)
@given(LOGITS, st.integers(1, 40), st.floats(0.01, 1.0))
def test_every_strategy_renormalises_the_kept_tokens(z, k, p) -> None:
    """Each truncation is the softmax restricted to its kept tokens and renormalised: on
    every row, the kept probabilities are proportional to the original ones."""
    probs = D.softmax_rows(z)
    for q in (D.top_k(z, k), D.min_p(z, p), D.typical(z, p), D.top_p(z, p)):
        _distribution(q)
        for row_q, row_p in zip(q, probs, strict=True):
            kept = row_q > 0
            assert kept.any()
            tol = tolerance("float64", size=row_p.size, depth=3)
            assert tol.compare(row_q[kept], row_p[kept] / row_p[kept].sum(), floor=0).ok
    _distribution(D.temperature(z, 0.5))


def test_the_limits_are_greedy() -> None:
    z = np.array([[0.3, 2.0, -1.0, 1.9]])
    greedy = np.array([[0.0, 1.0, 0.0, 0.0]])
    assert np.array_equal(D.top_k(z, 1), greedy)
    assert np.array_equal(D.min_p(z, 1.0), greedy)
    # T = 1e-4: every other exponential is exp(-1000) or less, 0 in float64: exactly greedy
    assert np.array_equal(D.temperature(z, 1e-4), greedy)
    assert np.array_equal(D.top_p(z, 1e-9), greedy)
    # top-k keeps ties at its boundary, as Hugging Face does; top-p orders ties by id
    tied = np.array([[1.0, 1.0, 0.0]])
    assert np.count_nonzero(D.top_k(tied, 1)) == 2
    assert np.array_equal(D.top_p(tied, 0.3) > 0, [[True, False, False]])


def test_repetition_penalty() -> None:
    z = np.array([2.0, -1.0, 0.5, -3.0])
    out = D.repetition_penalty(z, [0, 1, 1], 2.0)
    assert np.array_equal(out, [1.0, -2.0, 0.5, -3.0])
    with pytest.raises(ArgumentError, match="previous"):
        D.repetition_penalty(z, [4], 2.0)
    with pytest.raises(ArgumentError, match="'p'"):
        D.top_p(z, 1.5)
    with pytest.raises(ArgumentError, match="'k'"):
        D.top_k(z, 0)


#: continuous logits (standard normal times a scale, drawn from a seed): no ties
CONTINUOUS = st.tuples(st.integers(1, 3), st.integers(2, 30), st.integers(0, 2**32 - 1),
                       st.floats(0.1, 10.0)).map(
    lambda t: np.random.default_rng(t[2]).standard_normal((t[0], t[1])) * t[3])


@settings(max_examples=60, deadline=None)
@given(CONTINUOUS, st.integers(1, 40), st.floats(0.05, 0.95), st.floats(0.1, 3.0))
def test_hugging_face_logits_processors_agree(z, k, p, T) -> None:
    """The distributions after Hugging Face's warpers (float64 torch) equal ours under the
    float64 tolerance model; continuous logits (ties have probability 0 here: the two order
    ties differently at a top-p boundary)."""
    torch = pytest.importorskip("torch")
    lp = pytest.importorskip("transformers.generation.logits_process")
    zt = torch.tensor(z)
    ids = torch.zeros((z.shape[0], 1), dtype=torch.long)
    tol = tolerance("float64", size=z.shape[-1], depth=4)

    def hf(warper) -> np.ndarray:
        return torch.softmax(warper(ids, zt.clone()), -1).numpy()

    for ours, theirs in ((D.temperature(z, T), lp.TemperatureLogitsWarper(T)),
                         (D.top_k(z, k), lp.TopKLogitsWarper(k)),
                         (D.top_p(z, p), lp.TopPLogitsWarper(p)),
                         (D.min_p(z, p), lp.MinPLogitsWarper(p)),
                         (D.typical(z, p), lp.TypicalLogitsWarper(p))):
        got = hf(theirs)
        assert np.array_equal(got > 0, ours > 0), (theirs, got, ours)
        assert tol.compare(got, ours).ok, (theirs, tol.compare(got, ours))
    prev = torch.tensor([[0, 1, 1]])
    assert np.array_equal(lp.RepetitionPenaltyLogitsProcessor(1.3)(prev, zt[:1].clone())
                          .numpy()[0], D.repetition_penalty(z[0], [0, 1, 1], 1.3))


def test_typical_keeps_every_token_tied_with_the_cut_as_hugging_face() -> None:
    """Ties in |-log p - H| at the cut are kept whole (Hugging Face's rule); a prefix cut by
    token id would keep [.5 .5 0 0] on the uniform row and [1 0 0 0] on the second."""
    torch = pytest.importorskip("torch")
    lp = pytest.importorskip("transformers.generation.logits_process")
    for z, mass in ((np.zeros(4), 0.5), (np.array([5.0, 5.0, 0.0, -3.0]), 0.3),
                    (np.log([0.4, 0.2, 0.2, 0.2]), 0.5)):
        got = torch.softmax(lp.TypicalLogitsWarper(mass)(torch.zeros((1, 1), dtype=torch.long),
                                                         torch.tensor(z[None])), -1).numpy()[0]
        ours = D.typical(z, mass)
        assert np.array_equal(got > 0, ours > 0), (z, got, ours)
        assert tolerance("float64", size=4, depth=4).compare(got, ours).ok


def test_hostile_logits_and_numpy_scalars() -> None:
    z = np.array([0.0, 1.0, 2.0])
    assert D.top_p(z, np.float32(0.5))[2] > 0 and np.sum(D.top_k(z, np.int64(2)) > 0) == 2
    with pytest.raises(ArgumentError, match="overflows float64"):
        D.temperature(np.array([1e308, 0.0]), 0.5)
    with pytest.raises(ArgumentError, match="expected a finite number > 0"):
        D.temperature(z, float("inf"))
    for f in (lambda v: D.temperature(v, 1.0), lambda v: D.top_k(v, 1),
              lambda v: D.top_p(v, 0.5)):
        with pytest.raises(ArgumentError, match="every token is masked"):
            f(np.array([-np.inf, -np.inf]))
        with pytest.raises(ArgumentError, match="expected finite logits or -inf"):
            f(np.array([0.0, np.nan, 1.0]))
    with pytest.raises(ArgumentError, match=r"every token of row \(1,\) is masked"):
        D.min_p(np.array([[0.0, 1.0], [-np.inf, -np.inf]]), 0.5)


def _chi2(counts: np.ndarray, q: np.ndarray) -> tuple[float, int]:
    kept = q > 0
    n = counts.sum()
    return float(np.sum((counts[kept] - n * q[kept]) ** 2 / (n * q[kept]))), int(kept.sum())


def test_sampling_is_reproducible_and_has_the_exact_frequencies() -> None:
    """Sampled frequencies of a top-p distribution against the exact one: Pearson's X^2 over
    the kept tokens has mean k - 1 and variance 2(k - 1) (k kept tokens); the bound is the
    mean plus 5 standard deviations, at N = 20000 with a fixed seed (here k = 9: X^2 = 10.2,
    bound 28). The same test against a distribution 10 % off in its top token (mass 0.036
    moved to the next) gives X^2 = 216: it can see that error. Masked tokens are never
    drawn."""
    z = np.random.default_rng(3).standard_normal(12) * 0.5
    q = D.top_p(z[None], 0.9)[0]
    draws = D.sample(q, seed=7, n=20_000)
    assert np.array_equal(draws, D.sample(q, seed=7, n=20_000))  # reproducible
    assert np.all(q[draws] > 0)  # never a masked token
    counts = np.bincount(draws, minlength=q.size).astype(np.float64)
    x2, k = _chi2(counts, q)
    assert k >= 5  # a flat enough distribution for the test to mean something
    bound = (k - 1) + 5 * np.sqrt(2 * (k - 1))
    assert x2 <= bound, (x2, bound)
    top = int(np.argmax(q))
    off = q.copy()
    off[top] *= 1.1
    other = int(np.argsort(q)[-2])
    off[other] -= off[top] - q[top]
    x2_off, _ = _chi2(counts, off)
    assert x2_off > bound, (x2_off, bound)
    with pytest.raises(ArgumentError, match="summing to 1"):
        D.sample(np.array([0.5, 0.2]), seed=0)
