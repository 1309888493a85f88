"""The exactness identities of linearized attention (Baggag & Saad §4.3, §4.4), on every
backend, against independent NumPy write-ups of the quadratic forms:

* the linear form :math:`Q_f(K_f^\\top[V, 1])` and its causal prefix-sum algorithm equal
  the masked quadratic form :math:`D^{-1}((Q_f K_f^\\top)\\circ M)V` for any features;
* FAVOR equals :math:`D^{-1}\\hat A V`, :math:`\\hat A = D_Q\\hat Q\\hat K^\\top D_K` built
  entry by entry; FAVOR+'s stabilisers cancel, and keep it finite where the plain form
  overflows;
* elu+1, Shen et al.'s efficient attention and Linformer equal their quadratic forms, and
  Linformer with :math:`E = F = I_n` is softmax attention.

Planted mutants (a wrong normaliser, an exclusive prefix sum, a dropped or misplaced
stabiliser) fail these checks; bad input gets errors naming the argument. Bounds from
:mod:`nlaverify.tolerance`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import softmax as np_softmax

from nlaverify.backends import get_namespace
from nlaverify.backends.host import to_float64
from nlaverify.errors import ArgumentError, NonFiniteError, ShapeError
from nlaverify.ops import linear_attention as la
from nlaverify.ops.sdpa import attention
from nlaverify.strategies import seeds
from nlaverify.symbolic.exact import is_zero, symbol_array
from nlaverify.tolerance import magnitude_condition, tolerance

BACKENDS = ["numpy", "jax", "strict", "mpmath"]
BATCHES = st.sampled_from([(), (2,), (2, 2)])


def _ns(name: str):
    return get_namespace(name, digits=30) if name == "mpmath" else get_namespace(name)


def _on(xp, *arrays):
    return [xp.asarray(a) if xp.object_arrays else xp.asarray(a, dtype=xp.float64)
            for a in arrays]


def _sizes(data, backend: str, **ranges: tuple[int, int]) -> dict:
    """Sizes drawn in ``ranges`` and a batch shape; on JAX one fixed shape (each range's
    middle, batch ``(2,)``), so that its per-shape compilation runs once, not per example."""
    if backend == "jax":
        return {**{k: (lo + hi + 1) // 2 for k, (lo, hi) in ranges.items()}, "batch": (2,)}
    drawn = {k: data.draw(st.integers(lo, hi), label=k) for k, (lo, hi) in ranges.items()}
    return {**drawn, "batch": data.draw(BATCHES, label="batch")}


def _assert_close(actual, expected, *, size: int, condition: float = 1.0, what: str = ""):
    # float64 on both sides (the reference is NumPy float64): forward then normalise
    tol = tolerance("float64", size=size, condition=max(1.0, condition), depth=2)
    c = tol.compare(to_float64(actual), expected)
    assert c.ok, f"{what}: error {c.normwise:.3e} > {tol.rtol:.3e} ({tol.reason})"


# -- independent quadratic forms (NumPy) --------------------------------------------------


def _masked_quadratic(A: np.ndarray, V: np.ndarray, causal: bool) -> np.ndarray:
    r""":math:`D^{-1}(A \circ M) V` with the :math:`n \times n` matrix built explicitly."""
    if causal:
        A = A * np.tril(np.ones(A.shape[-2:]))
    return (A / A.sum(-1, keepdims=True)) @ V


def _cancellation(A: np.ndarray, causal: bool) -> float:
    r"""Condition of the normaliser: :math:`\max_i \sum_j |a_{ij}| / |\sum_j a_{ij}|`."""
    if causal:
        A = A * np.tril(np.ones(A.shape[-2:]))
    return float(np.max(np.abs(A).sum(-1) / np.abs(A.sum(-1))))


def _gram(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    return X @ np.swapaxes(Y, -1, -2)


def _check_kernel(backend: str, causal: bool, n: int, m: int, dv: int, batch, seed: int):
    rng = np.random.default_rng(seed)
    Qf, Kf = (rng.uniform(0.1, 2.0, (*batch, n, m)) for _ in range(2))  # any positive map
    V = rng.standard_normal((*batch, n, dv))
    xp = _ns(backend)
    got = la.kernel_attention(xp, *_on(xp, Qf, Kf, V), causal=causal)
    A = _gram(Qf, Kf)
    _assert_close(got, _masked_quadratic(A, V, causal), size=n * m,
                  condition=_cancellation(A, causal), what=f"kernel_attention {backend}")


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


# -- elu+1, Shen et al., Linformer --------------------------------------------------------


def _elu1_np(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x + 1, np.exp(np.minimum(x, 0)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
@given(data=st.data(), seed=seeds)
def test_elu1_attention_equals_its_quadratic_form(backend, causal, data, seed):
    z = _sizes(data, backend, n=(1, 5), d=(1, 3))
    n, d, batch = z["n"], z["d"], z["batch"]
    rng = np.random.default_rng(seed)
    Q, K, V = (rng.standard_normal((*batch, n, k)) for k in (d, d, 2))
    xp = _ns(backend)
    got = la.elu1_attention(xp, *_on(xp, Q, K, V), causal=causal)
    A = _gram(_elu1_np(Q), _elu1_np(K))
    _assert_close(got, _masked_quadratic(A, V, causal), size=n * d,
                  condition=magnitude_condition(Q, K), what=f"elu1_attention {backend}")


@pytest.mark.parametrize("backend", BACKENDS)
@given(data=st.data(), seed=seeds)
def test_efficient_attention_equals_its_quadratic_form(backend, data, seed):
    z = _sizes(data, backend, n=(1, 5), d=(1, 3))
    n, d, batch = z["n"], z["d"], z["batch"]
    rng = np.random.default_rng(seed)
    Q, K, V = (rng.standard_normal((*batch, n, k)) for k in (d, d, 2))
    xp = _ns(backend)
    got = la.efficient_attention(xp, *_on(xp, Q, K, V))
    A = _gram(np_softmax(Q, axis=-1), np_softmax(K, axis=-2))  # the n x n matrix
    _assert_close(got, A @ V, size=n * d, condition=magnitude_condition(Q, K),
                  what=f"efficient_attention {backend}")


@pytest.mark.parametrize("backend", BACKENDS)
@given(data=st.data(), seed=seeds)
def test_linformer_equals_the_seed_formula(backend, data, seed):
    z = _sizes(data, backend, n=(1, 5), d=(1, 3), k=(1, 4))
    n, d, k, batch = z["n"], z["d"], z["k"], z["batch"]
    rng = np.random.default_rng(seed)
    Q, K, V = (rng.standard_normal((*batch, n, c)) for c in (d, d, 2))
    E, F = (rng.standard_normal((k, n)) / np.sqrt(n) for _ in range(2))
    xp = _ns(backend)
    got = la.linformer_attention(xp, *_on(xp, Q, K, V, E, F))
    P = np_softmax(Q @ np.swapaxes(E @ K, -1, -2) / np.sqrt(d), axis=-1)  # n x k
    assert P.shape[-2:] == (n, k)
    _assert_close(got, P @ (F @ V), size=n * d, condition=magnitude_condition(Q, K, E),
                  what=f"linformer_attention {backend}")
    eye = np.eye(n)  # E = F = I_n: exact softmax attention
    _assert_close(la.linformer_attention(xp, *_on(xp, Q, K, V, eye, eye)),
                  to_float64(attention(xp, *_on(xp, Q, K, V), causal=False)), size=n * d,
                  condition=magnitude_condition(Q, K), what=f"linformer, E = F = I, {backend}")


# -- planted mutants ----------------------------------------------------------------------


def _wrong_normaliser(xp, V):
    return xp.concat([V, 2 * xp.ones((*V.shape[:-1], 1), dtype=V.dtype)], axis=-1)


def _no_ones_column(xp, V):
    return xp.concat([V, V[..., -1:]], axis=-1)


def _exclusive_prefix(xp, X, axis, reverse=False):
    inclusive = _INCLUSIVE(xp, X, axis, reverse)
    return inclusive - X if not reverse else inclusive


_INCLUSIVE = la._prefix_sum


@pytest.mark.parametrize("mutant", [_wrong_normaliser, _no_ones_column])
@pytest.mark.parametrize("causal", [False, True])
def test_a_wrong_normaliser_is_caught(monkeypatch, mutant, causal):
    monkeypatch.setattr(la, "_ones_column", mutant)
    with pytest.raises(AssertionError):
        _check_kernel("numpy", causal, 4, 3, 2, (2,), seed=1)


@pytest.mark.parametrize("backend", ["numpy", "mpmath"])
def test_an_exclusive_prefix_sum_is_caught(monkeypatch, backend):
    monkeypatch.setattr(la, "_prefix_sum", _exclusive_prefix)
    # row 0 then sums nothing: 0/0, nan on NumPy, ZeroDivisionError on mpmath
    with pytest.raises((AssertionError, ZeroDivisionError)), np.errstate(invalid="ignore",
                                                                         divide="ignore"):
        _check_kernel(backend, True, 4, 3, 2, (), seed=1)


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
