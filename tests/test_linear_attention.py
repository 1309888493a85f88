"""The exactness identities of linearized attention (Baggag & Saad §4.3, §4.4), on every
backend, against independent NumPy write-ups of the quadratic forms:

* the linear form :math:`Q_f(K_f^\\top[V, 1])` and its causal prefix-sum algorithm equal
  the masked quadratic form :math:`D^{-1}((Q_f K_f^\\top)\\circ M)V` for any features.

Planted mutants (a wrong normaliser, an exclusive prefix sum) fail these checks; bad input
gets errors naming the argument. Bounds from :mod:`nlaverify.tolerance`. The chunked causal
form: tests/test_linear_attention_chunked.py; FAVOR and FAVOR+:
tests/test_linear_attention_favor.py; elu+1, Shen et al. and Linformer:
tests/test_linear_attention_variants.py; the shared quadratic forms:
tests/_linear_attention_helpers.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy
from _linear_attention_helpers import BACKENDS, _check_kernel, _sizes
from hypothesis import given
from hypothesis import strategies as st

from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.ops import kernel_attention as ka
from nlaverify.ops import linear_attention as la
from nlaverify.strategies import seeds
from nlaverify.symbolic.exact import is_zero, symbol_array


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
@given(data=st.data(), seed=seeds)
def test_linear_form_equals_masked_quadratic_form(backend, causal, data, seed):
    # the prefix-sum algorithm (causal) and K_f^T [V, 1] (bidirectional), any features
    z = _sizes(data, backend, n=(1, 5), m=(1, 4), dv=(1, 3))
    _check_kernel(backend, causal, z["n"], z["m"], z["dv"], z["batch"], seed)


def test_prefix_sums_equal_masked_quadratic_form_exactly():
    # on SymPy (the triangular-matrix prefix sums): exact, symbolic features
    xp = get_namespace("sympy")
    Qf, Kf, V = symbol_array("q", (3, 2)), symbol_array("k", (3, 2)), symbol_array("v", (3, 1))
    got = la.kernel_attention(xp, Qf, Kf, V, causal=True)
    A = np.tril(np.ones((3, 3), dtype=int)) * (Qf @ Kf.T)
    want = (A @ V) / A.sum(-1, keepdims=True)
    assert all(is_zero(sympy.together(g - w)) for g, w in zip(got.flat, want.flat,
                                                                 strict=True))


# -- planted mutants ----------------------------------------------------------------------


def _wrong_normaliser(xp, V):
    return xp.concat([V, 2 * xp.ones((*V.shape[:-1], 1), dtype=V.dtype)], axis=-1)


def _no_ones_column(xp, V):
    return xp.concat([V, V[..., -1:]], axis=-1)


def _exclusive_prefix(xp, X, axis, reverse=False):
    inclusive = _INCLUSIVE(xp, X, axis, reverse)
    return inclusive - X if not reverse else inclusive


_INCLUSIVE = ka._prefix_sum


@pytest.mark.parametrize("mutant", [_wrong_normaliser, _no_ones_column])
@pytest.mark.parametrize("causal", [False, True])
def test_a_wrong_normaliser_is_caught(monkeypatch, mutant, causal):
    monkeypatch.setattr(ka, "_ones_column", mutant)
    with pytest.raises(AssertionError):
        _check_kernel("numpy", causal, 4, 3, 2, (2,), seed=1)


@pytest.mark.parametrize("backend", ["numpy", "mpmath"])
def test_an_exclusive_prefix_sum_is_caught(monkeypatch, backend):
    monkeypatch.setattr(ka, "_prefix_sum", _exclusive_prefix)
    monkeypatch.setattr(ka, "CHUNK", 2)  # NumPy: the carry over 2 blocks uses _prefix_sum
    # mpmath: row 0 then sums nothing, ZeroDivisionError; NumPy: block 1 misses block 0
    with pytest.raises((AssertionError, ZeroDivisionError)), np.errstate(invalid="ignore",
                                                                         divide="ignore"):
        _check_kernel(backend, True, 4, 3, 2, (), seed=1)


# -- bad input ----------------------------------------------------------------------------


def test_bad_input_names_the_argument():
    xp = get_namespace("numpy")
    rng = np.random.default_rng(0)
    Q, K, V = rng.standard_normal((3, 2)), rng.standard_normal((3, 2)), rng.standard_normal((3, 1))
    W, b = rng.standard_normal((4, 2)), rng.standard_normal(4)
    E = rng.standard_normal((2, 3))
    with pytest.raises(ShapeError, match="'K'"):
        la.favor_plus_attention(xp, Q, K[:2], V, W)
    with pytest.raises(ShapeError, match="'K'"):
        la.elu1_attention(xp, Q, rng.standard_normal((3, 3)), V)
    with pytest.raises(ShapeError, match="'V'"):
        la.efficient_attention(xp, Q, K, V[:2])
    with pytest.raises(ShapeError, match=r"'W'.*d=2"):
        la.favor_attention(xp, Q, K, V, rng.standard_normal((4, 3)), b)
    with pytest.raises(ShapeError, match=r"'b'.*m=4"):
        la.favor_attention(xp, Q, K, V, W, b[:3])
    with pytest.raises(ShapeError, match="'Kf'"):
        la.kernel_attention(xp, Q, rng.standard_normal((3, 5)), V)
    with pytest.raises(ShapeError, match=r"'E'.*at least n=3"):
        la.linformer_attention(xp, Q, K, V, E[:, :2], E[:, :2])
    with pytest.raises(ShapeError, match=r"'F'.*N=2"):
        la.linformer_attention(xp, Q, K, V, E[:, :2], E)
    with pytest.raises(ArgumentError, match="'causal'"):
        la.linformer_attention(xp, Q, K, V, E, E, causal=True)
