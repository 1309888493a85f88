"""The public hypothesis strategies produce what they promise."""

from __future__ import annotations

import numpy as np
from hypothesis import given

from nlaverify.strategies import (
    op_cases,
    orthogonal_matrices,
    spd_matrices,
    token_sequences,
    well_conditioned_matrices,
)
from nlaverify.tolerance import tolerance


@given(well_conditioned_matrices(5, 3, max_condition=20.0))
def test_well_conditioned(A: np.ndarray) -> None:
    s = np.linalg.svd(A, compute_uv=False)
    tol = tolerance("float64", size=5, condition=20.0)
    assert s.max() / s.min() <= 20.0 * (1 + tol.rtol)


@given(spd_matrices(4, max_condition=50.0))
def test_spd(A: np.ndarray) -> None:
    assert np.array_equal(A, A.T)
    assert np.linalg.eigvalsh(A).min() > 0


@given(orthogonal_matrices(4))
def test_orthogonal(Q: np.ndarray) -> None:
    assert tolerance("float64", size=4).compare(Q.T @ Q, np.eye(4)).ok


@given(token_sequences(7, 2, 5))
def test_tokens(t: np.ndarray) -> None:
    assert t.dtype == np.int64 and 2 <= t.size <= 5 and t.min() >= 0 and t.max() < 7


@given(op_cases("multihead_attention"))
def test_op_cases_respect_heads(case) -> None:
    assert case.args[1].shape[1] % case.static["n_heads"] == 0
    assert case.cotangent.shape == case.args[0].shape
