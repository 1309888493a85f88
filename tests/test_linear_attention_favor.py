"""FAVOR and FAVOR+ (Baggag & Saad §4.4), on every backend: FAVOR equals
:math:`D^{-1}\\hat A V`, :math:`\\hat A = D_Q\\hat Q\\hat K^\\top D_K` built entry by entry;
FAVOR+'s stabilisers cancel, and keep it finite where the plain form overflows. Planted
mutants (a dropped or misplaced stabiliser) fail these checks.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy
from _linear_attention_helpers import (
    BACKENDS,
    _assert_close,
    _cancellation,
    _gram,
    _masked_quadratic,
    _ns,
    _on,
    _sizes,
)
from hypothesis import given
from hypothesis import strategies as st

from nlaverify.backends import get_namespace
from nlaverify.backends.host import to_float64
from nlaverify.errors import NonFiniteError
from nlaverify.ops import linear_attention as la
from nlaverify.strategies import seeds
from nlaverify.symbolic.exact import is_zero, symbol_array
from nlaverify.tolerance import magnitude_condition

# -- FAVOR --------------------------------------------------------------------------------


def _favor_reference(Q, K, V, W, b, causal):
    r""":math:`D^{-1}(\hat A \circ M) V`, :math:`\hat A = D_Q \hat Q \hat K^\top D_K` with
    :math:`\hat X = \sqrt{2/m}\cos(X W^\top/d^{1/4} + b)`, :math:`D_X =
    \operatorname{diag}(e^{\|x_i\|^2/2\sqrt d})` (Baggag & Saad (4.4.3)-(4.4.8))."""
    d, m = Q.shape[-1], W.shape[0]

    def hat(X):
        return np.sqrt(2 / m) * np.cos(X @ W.T / d**0.25 + b)

    def diag(X):
        return np.exp(np.sum(X * X, -1) / (2 * np.sqrt(d)))

    A = diag(Q)[..., :, None] * _gram(hat(Q), hat(K)) * diag(K)[..., None, :]
    return A, _masked_quadratic(A, V, causal)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
@given(data=st.data(), seed=seeds)
def test_favor_is_the_explicit_estimate(backend, causal, data, seed):
    z = _sizes(data, backend, n=(1, 4), d=(1, 4))
    n, d, batch = z["n"], z["d"], z["batch"]
    rng = np.random.default_rng(seed)
    m = 64  # enough features that the estimated normaliser stays away from 0
    Q, K = (0.5 * rng.standard_normal((*batch, n, d)) for _ in range(2))
    V = rng.standard_normal((*batch, n, 2))
    W, b = rng.standard_normal((m, d)), rng.uniform(0, 2 * np.pi, m)
    xp = _ns(backend)
    A, want = _favor_reference(Q, K, V, W, b, causal)
    got = la.favor_attention(xp, *_on(xp, Q, K, V, W, b), causal=causal)
    _assert_close(got, want, size=n * m, condition=_cancellation(A, causal)
                  * magnitude_condition(Q, K), what=f"favor_attention {backend}")


# -- FAVOR+ -------------------------------------------------------------------------------


def _plain_favor_plus(xp, Q, K, V, W, causal):
    """FAVOR+ without the stabilisers: kernel attention of the plain positive features."""
    r = math.sqrt(math.sqrt(Q.shape[-1]))
    return la.kernel_attention(xp, la.positive_features(xp, Q / r, W),
                               la.positive_features(xp, K / r, W), V, causal=causal)


def _exponent_condition(Q, K, W) -> float:
    r""":math:`\max |w^\top\tilde x| + \|\tilde x\|^2/2`: the relative error of each
    :math:`e^{z}` is :math:`|z| u`."""
    r = Q.shape[-1] ** 0.25
    return max(float(np.max(np.abs(X / r @ W.T)) + np.max(np.sum((X / r) ** 2, -1)) / 2)
               for X in (Q, K))


def _check_cancels(backend: str, causal: bool, n: int, d: int, m: int, seed: int):
    rng = np.random.default_rng(seed)
    Q, K = (2 * rng.standard_normal((2, n, d)) for _ in range(2))
    V, W = rng.standard_normal((2, n, 2)), rng.standard_normal((m, d))
    xp = _ns(backend)
    args = _on(xp, Q, K, V, W)
    got = la.favor_plus_attention(xp, *args, causal=causal)
    want = to_float64(_plain_favor_plus(xp, *args, causal))
    _assert_close(got, want, size=n * m, condition=_exponent_condition(Q, K, W),
                  what=f"favor_plus_attention with vs without shifts, {backend}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
@given(data=st.data(), seed=seeds)
def test_favor_plus_stabilisers_cancel(backend, causal, data, seed):
    z = _sizes(data, backend, n=(1, 4), d=(1, 4), m=(1, 6))
    _check_cancels(backend, causal, z["n"], z["d"], z["m"], seed)


def test_favor_plus_does_not_depend_on_its_shifts_exactly():
    # on SymPy every shift is an opaque symbol c_k: the output is free of them
    xp = get_namespace("sympy")
    xp.reset_shifts()
    Q, K, V = symbol_array("q", (2, 1)), symbol_array("k", (2, 1)), symbol_array("v", (2, 1))
    W = symbol_array("w", (2, 1))
    out = la.favor_plus_attention(xp, Q, K, V, W, causal=True)
    shifts = {s for v in out.flat for s in v.free_symbols if s.name.startswith("c_")}
    assert len(shifts) == 3  # one per query row, one over all keys
    assert all(is_zero(sympy.diff(v, c)) for v in out.flat for c in shifts)


def _hostile(side: str, seed: int = 0):
    r"""A case where the plain positive features overflow: row 0 of ``side`` is
    :math:`\tilde x = 40 u` and feature 0 is :math:`w = 40 u`, so :math:`w^\top\tilde x -
    \|\tilde x\|^2/2 = 800 > 709`."""
    rng = np.random.default_rng(seed)
    n, d, m = 3, 4, 5
    Q, K = (0.5 * rng.standard_normal((n, d)) for _ in range(2))
    V, W = rng.standard_normal((n, 2)), rng.standard_normal((m, d))
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    (Q if side == "Q" else K)[0] = 40 * d**0.25 * u
    W[0] = 40 * u
    return Q, K, V, W


@pytest.mark.parametrize("side", ["Q", "K"])
@pytest.mark.parametrize("causal", [False, True])
def test_favor_plus_is_finite_where_the_plain_form_overflows(side, causal):
    Q, K, V, W = _hostile(side)
    xp = get_namespace("numpy")
    with np.errstate(over="ignore", invalid="ignore"), pytest.raises(NonFiniteError):
        _plain_favor_plus(xp, Q, K, V, W, causal)  # the hazard is real: e^{800} = inf
    got = la.favor_plus_attention(xp, Q, K, V, W, causal=causal)
    mp = _ns("mpmath")  # exponent range unbounded: the plain form is the reference
    want = to_float64(_plain_favor_plus(mp, *_on(mp, Q, K, V, W), causal))
    _assert_close(got, want, size=15, condition=_exponent_condition(Q, K, W),
                  what=f"favor_plus_attention, huge {side}")


# -- planted mutants ----------------------------------------------------------------------


def _side(shift_keys: str, shift_queries: bool = True):
    """A FAVOR+ side with its stabiliser dropped (``"none"``) or taken per row
    (``"row"``, which does not cancel for keys)."""
    def side(xp, X, W, per_row):
        Xs = X / la._root4(xp, X.shape[-1])
        Z = la._positive_exponent(xp, Xs, W)
        mode = ("row" if shift_queries else "none") if per_row else shift_keys
        if mode == "none":
            return Xs, xp.exp(Z) / xp.const_sqrt(W.shape[-2])
        if mode == "row":
            return Xs, xp.exp(Z - xp.stability_shift(Z, -1)) / xp.const_sqrt(W.shape[-2])
        return _SIDE(xp, X, W, per_row)

    return side


_SIDE = la._favor_plus_side


@pytest.mark.parametrize(("mutant", "side"), [(_side("none"), "K"),
                                              (_side("all", shift_queries=False), "Q")])
def test_a_dropped_stabiliser_is_caught(monkeypatch, mutant, side):
    monkeypatch.setattr(la, "_favor_plus_side", mutant)
    with pytest.raises((AssertionError, NonFiniteError)), np.errstate(over="ignore",
                                                                      invalid="ignore"):
        test_favor_plus_is_finite_where_the_plain_form_overflows(side, causal=False)


def test_a_key_shift_per_row_does_not_cancel(monkeypatch):
    monkeypatch.setattr(la, "_favor_plus_side", _side("row"))
    with pytest.raises(AssertionError):
        _check_cancels("numpy", False, 3, 2, 4, seed=1)

