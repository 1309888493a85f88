"""Bad input gets an error naming the argument and the expected vs actual value."""

from __future__ import annotations

import numpy as np
import pytest

from nlaverify import ops
from nlaverify.backends import BackendUnavailable, get_namespace
from nlaverify.errors import DTypeError, NonFiniteError, ShapeError, UnknownNameError
from nlaverify.identities import get_identity

xp = get_namespace("numpy")


def test_shape_mismatch_names_argument_and_shapes() -> None:
    X, W = np.ones((2, 3)), np.ones((4, 5))
    with pytest.raises(ShapeError, match=r"affine: argument 'W': expected shape \(d_in=3, d_out\)"
                                         r", got \(4, 5\)"):
        ops.affine(xp, X, W)


def test_wrong_rank() -> None:
    with pytest.raises(ShapeError, match=r"attention: argument 'Q': expected shape \(\*, n, d_k\)"):
        ops.attention(xp, np.ones(3), np.ones((3, 2)), np.ones((3, 2)))


def test_cotangent_shape_checked() -> None:
    with pytest.raises(ShapeError, match="argument 'G'"):
        ops.layernorm_vjp(xp, np.ones((2, 4)), np.ones((2, 3)), np.ones(3), np.ones(3), 1e-5)


def test_integer_weights_rejected() -> None:
    with pytest.raises(DTypeError, match=r"argument 'X': expected a real floating dtype, got int"):
        ops.affine(xp, np.ones((2, 3), dtype=np.int64), np.ones((3, 2)))


def test_mixed_precision_rejected() -> None:
    with pytest.raises(DTypeError, match=r"argument 'W': expected dtype float32 \(the dtype of "
                                         r"'X'\), got float64"):
        ops.affine(xp, np.ones((2, 3), dtype=np.float32), np.ones((3, 2)))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_rejected(bad: float) -> None:
    X = np.ones((2, 3))
    X[1, 2] = bad
    with pytest.raises(NonFiniteError, match="gelu_erf: argument 'x': expected finite values"):
        ops.gelu_erf(xp, X)


def test_masked_scores_may_be_minus_inf_but_not_nan() -> None:
    Z = np.array([[0.0, -np.inf], [1.0, 2.0]])
    assert np.allclose(ops.softmax(xp, Z)[0], [1.0, 0.0])
    Z[1, 0] = np.nan
    with pytest.raises(NonFiniteError, match="softmax: argument 'Z': expected finite values or"):
        ops.softmax(xp, Z)


def test_token_range_and_dtype() -> None:
    W = np.ones((4, 2))
    with pytest.raises(ShapeError, match=r"embed: argument 'tokens': expected token ids in "
                                         r"\[0, 4\), got ids in \[0, 7\]"):
        ops.embed(xp, np.array([0, 7]), W)
    with pytest.raises(DTypeError, match="argument 'tokens': expected an integer dtype"):
        ops.embed(xp, np.array([0.0, 1.0]), W)


def test_heads_must_divide() -> None:
    with pytest.raises(ShapeError, match="divisible by n_heads=2, got 3"):
        ops.split_heads(xp, np.ones((2, 3)), 2)


def test_unknown_names() -> None:
    with pytest.raises(UnknownNameError, match="unknown op 'softmaxx'"):
        ops.get_op("softmaxx")
    with pytest.raises(UnknownNameError, match=r"unknown identity id 'softmax_vjpp'.*softmax_vjp"):
        get_identity("softmax_vjpp")
    with pytest.raises(ValueError, match="unknown backend 'torch'"):
        get_namespace("torch")


def test_cupy_without_gpu_says_why() -> None:
    try:
        get_namespace("cupy")
    except BackendUnavailable as exc:
        assert "cupy" in str(exc)
    else:  # pragma: no cover - only on a GPU machine
        pytest.skip("a GPU is present: nothing to refuse")
