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


@given(op_cases("causal_attention", batch=True, dtype="bfloat16", shapes={"d_k": (3, 5)}))
def test_op_cases_batch_dtype_and_shapes(case) -> None:
    """Leading batch/head axes on the per-token arguments, sizes from ``shapes``, values
    exact in bfloat16 (rounding them again changes nothing; float64 draws would not be)."""
    from nlaverify.strategies import exact_in

    Q, K, V = case.args
    assert Q.shape[:-2] == K.shape[:-2] == V.shape[:-2] and Q.ndim in (2, 3, 4)
    assert 3 <= Q.shape[-1] <= 5 and case.cotangent.shape == V.shape
    for x in (*case.args, case.cotangent):
        assert np.array_equal(exact_in(x, "bfloat16"), x)
    assert not np.array_equal(exact_in(np.array([1 / 3]), "bfloat16"), np.array([1 / 3]))


def test_op_cases_rejects_an_unknown_dimension() -> None:
    import pytest

    with pytest.raises(ValueError, match=r"op 'rmsnorm' has no dimension 'q'"):
        op_cases("rmsnorm", shapes={"q": 2})
    with pytest.raises(ValueError, match=r"argument 'dtype'.*'int8'"):
        op_cases("rmsnorm", dtype="int8")
