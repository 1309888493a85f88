r"""Pruning in :mod:`nlaverify.lowrank` (Baggag & Saad §4.1): exact sparsity, exact error,
the pruned count of a float fraction, the tie rule and N:M pruning."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from _lowrank_helpers import _FLOATS, NP
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from nlaverify.backends import get_namespace
from nlaverify.lowrank import prune
from nlaverify.tolerance import tolerance

# -- pruning -------------------------------------------------------------------------------


def test_pruned_count_reads_a_float_as_its_decimal() -> None:
    """0.29 * 100 is 28.999999999999996 in binary: the count is 29 (and 0.57 -> 57), for
    every percentage; a ceiling in place of the floor fails (3 at 0.5 -> 1, 10 at 0.25 -> 2)."""
    assert [prune.pruned_count(100, i / 100) for i in range(101)] == list(range(101))
    assert prune.pruned_count(100, np.float32(0.29)) == 29
    assert prune.pruned_count(3, 0.5) == 1 and prune.pruned_count(10, 0.25) == 2
    assert prune.pruned_count(7, 1 / 3) == 2 and prune.pruned_count(6, Fraction(1, 3)) == 2
    W = np.arange(1.0, 101.0)
    assert int(np.sum(prune.magnitude_prune(NP, W, 0.29)[1] == 0)) == 29


def test_pruning_tie_rule() -> None:
    """Equal magnitudes: the lower flat index (row-major) is pruned first, in unstructured
    and N:M pruning (the documented rule; reversing it fails; on SymPy the proof
    ``lowrank_pruning_error`` checks the same masks, and JAX runs the same stable argsort in
    ``test_backends_agree_with_numpy``)."""
    xp = NP
    W = xp.asarray(np.array([[1.0, -1.0, 0.5], [-1.0, 1.0, -0.5]]))
    for s, want in ((Fraction(1, 6), [1, 1, 0, 1, 1, 1]), (Fraction(1, 2), [0, 1, 0, 1, 1, 0]),
                    (Fraction(2, 3), [0, 0, 0, 1, 1, 0])):
        assert np.asarray(prune.magnitude_prune(xp, W, s)[1]).ravel().tolist() == want, s
    M = prune.nm_prune(xp, xp.asarray(np.array([[2.0, 1.0], [-2.0, 1.0], [2.0, 1.0],
                                                [1.0, 1.0]])), 2, 4)[1]
    assert np.asarray(M).T.tolist() == [[0, 1, 1, 0], [0, 0, 1, 1]]



@given(W=arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(1, 6)), elements=_FLOATS),
       s=st.fractions(0, 1, max_denominator=8))
def test_magnitude_pruning_sparsity_and_error_are_exact(W: np.ndarray, s: Fraction) -> None:
    P, M = prune.magnitude_prune(NP, W, s)
    n = prune.pruned_count(W.size, s)
    assert int(np.sum(M == 0)) == n == math.floor(s * W.size)
    assert np.array_equal(P, M * W)
    smallest = np.sort((W * W).ravel())[:n].sum()
    tol = tolerance(np.float64, size=W.size)
    assert tol.compare(prune.pruning_error(NP, W, M), smallest, floor=float(smallest)).ok
    if n < W.size:  # every kept entry at least as large as every pruned one
        assert np.abs(W[M == 1]).min() >= (np.abs(W[M == 0]).max() if n else 0.0)


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_nm_pruning_keeps_n_of_every_m(backend: str) -> None:
    xp = get_namespace(backend)
    W = np.random.default_rng(10).standard_normal((8, 6))
    for axis in (0, 1):
        P, M = prune.nm_prune(xp, xp.asarray(W), 2, 4 if axis == 0 else 3, axis=axis)
        M = np.asarray(M)
        groups = M.reshape(2, 4, 6) if axis == 0 else M.reshape(8, 2, 3)
        assert np.all(groups.sum(axis=1 if axis == 0 else 2) == 2)
        assert np.array_equal(np.asarray(P), M * W)

