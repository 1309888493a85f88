"""The exactness identities of linearized attention (Baggag & Saad §4.3, §4.4), on every
backend, against independent NumPy write-ups of the quadratic forms:

* the linear form :math:`Q_f(K_f^\\top[V, 1])` and its causal prefix-sum algorithm equal
  the masked quadratic form :math:`D^{-1}((Q_f K_f^\\top)\\circ M)V` for any features;
* the chunked causal form of the array backends (blocks of ``la.CHUNK``, lowered here so
  that :math:`n` spans several blocks, the last one ragged) equals it too, and its VJP and
  JVP (of ``kernel_attention`` and causal FAVOR, FAVOR+, elu+1) equal JAX's autodiff of
  independent ``jax.numpy`` quadratic forms;
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
from collections.abc import Iterator
from contextlib import contextmanager

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


# -- the chunked causal form (array backends) ---------------------------------------------

CHUNKED = ["numpy", "jax", "strict"]  # the object namespaces keep the triangular-matrix form


@contextmanager
def _chunk(size: int) -> Iterator[None]:
    """``la.CHUNK`` lowered to ``size`` (a context: hypothesis tests take no ``monkeypatch``)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(la, "CHUNK", size)
        yield


@pytest.mark.parametrize("backend", CHUNKED)
@given(data=st.data(), seed=seeds)
def test_chunked_prefix_sums_equal_masked_quadratic_form(backend, data, seed):
    # n over several blocks, not a multiple of the block size (JAX: n = 7, blocks of 3)
    z = _sizes(data, backend, n=(4, 10), m=(1, 4), dv=(1, 3), c=(1, 5))
    with _chunk(z["c"]):
        _check_kernel(backend, True, z["n"], z["m"], z["dv"], z["batch"], seed)


def _j_elu1(x):
    import jax.numpy as jnp
    return jnp.where(x > 0, x + 1, jnp.exp(jnp.minimum(x, 0)))


def _j_features(op: str, X, W, b):
    """The feature maps in ``jax.numpy``, written from the seed (not from the module)."""
    import jax.numpy as jnp
    if op == "elu1":
        return _j_elu1(X)
    Xs, m = X / X.shape[-1] ** 0.25, W.shape[0]
    sq = jnp.sum(Xs * Xs, -1, keepdims=True) / 2
    if op == "favor":
        return jnp.sqrt(2 / m) * jnp.cos(Xs @ W.T + b) * jnp.exp(sq)
    return jnp.exp(Xs @ W.T - sq) / jnp.sqrt(m)  # favor_plus


def _j_quadratic(Qf, Kf, V):
    import jax.numpy as jnp
    A = (Qf @ jnp.swapaxes(Kf, -1, -2)) * jnp.tril(jnp.ones((Qf.shape[-2],) * 2))
    return (A / A.sum(-1, keepdims=True)) @ V


_OPS = {"kernel": (la.kernel_attention_vjp, la.kernel_attention_jvp),
        "favor": (la.favor_attention_vjp, la.favor_attention_jvp),
        "favor_plus": (la.favor_plus_attention_vjp, la.favor_plus_attention_jvp),
        "elu1": (la.elu1_attention_vjp, la.elu1_attention_jvp)}


@pytest.mark.parametrize(("backend", "op"), [*((b, "kernel") for b in CHUNKED),
                                             *(("jax", o) for o in _OPS if o != "kernel")])
@pytest.mark.parametrize("seed", [0, 1])
def test_chunked_vjp_and_jvp_equal_autodiff(backend, op, seed):
    # VJP and JVP of the causal ops, n = 7 in blocks of 3 (the last ragged), against
    # jax.vjp / jax.jvp of the explicit masked quadratic forms in jax.numpy
    import jax

    n, d, dv, m = 7, 3, 2, (3 if op in ("kernel", "elu1") else 64)
    rng = np.random.default_rng(seed)
    if op == "kernel":
        X = [rng.uniform(0.1, 2.0, (2, n, m)) for _ in range(2)]
    else:
        X = [0.5 * rng.standard_normal((2, n, d)) for _ in range(2)]
    X.append(rng.standard_normal((2, n, dv)))
    W, b = rng.standard_normal((m, d)), rng.uniform(0, 2 * np.pi, m)
    G = rng.standard_normal((2, n, dv))
    T = [rng.standard_normal(x.shape) for x in X]
    fixed = {"kernel": [], "favor": [W, b], "favor_plus": [W], "elu1": []}[op]

    def ref(Q, K, V):
        if op == "kernel":
            return _j_quadratic(Q, K, V)
        return _j_quadratic(*(_j_features(op, Y, W, b) for Y in (Q, K)), V)

    jx = get_namespace("jax")
    _, pullback = jax.vjp(ref, *_on(jx, *X))
    want_vjp = [np.asarray(g) for g in pullback(jx.asarray(G, dtype=jx.float64))]
    want_jvp = np.asarray(jax.jvp(ref, tuple(_on(jx, *X)), tuple(_on(jx, *T)))[1])
    Qf, Kf = (np.asarray(_j_features(op, jx.asarray(Y), W, b)) if op != "kernel" else Y
              for Y in X[:2])
    cond = _cancellation(_gram(Qf, Kf), True) ** 2 * magnitude_condition(*X, T[0], T[1])
    vjp, jvp = _OPS[op]
    xp = _ns(backend)
    args = [*_on(xp, *X), *_on(xp, *fixed)]
    with _chunk(3):
        got_vjp = vjp(xp, *_on(xp, G), *args, causal=True)
        got_jvp = jvp(xp, tuple(_on(xp, *T)), *args, causal=True)
    for name, g, w in zip(("dQ", "dK", "dV"), got_vjp, want_vjp, strict=True):
        _assert_close(g, w, size=n * m, condition=cond, what=f"{op} VJP {name} {backend}")
    _assert_close(got_jvp, want_jvp, size=n * m, condition=cond, what=f"{op} JVP {backend}")


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
    monkeypatch.setattr(la, "CHUNK", 2)  # NumPy: the carry over 2 blocks uses _prefix_sum
    # mpmath: row 0 then sums nothing, ZeroDivisionError; NumPy: block 1 misses block 0
    with pytest.raises((AssertionError, ZeroDivisionError)), np.errstate(invalid="ignore",
                                                                         divide="ignore"):
        _check_kernel(backend, True, 4, 3, 2, (), seed=1)


def _inclusive_carry(xp, S, reverse):
    return S  # the state of block B itself carried into B: the diagonal block twice


def _strict_mask(xp, A):
    idx = xp.arange(A.shape[-1])
    return xp.where(idx[:, None] > idx[None, :], A, xp.zeros_like(A))  # j < i: no diagonal


@pytest.mark.parametrize(("name", "mutant"), [("_shift", _inclusive_carry),
                                              ("_block_mask", _strict_mask)])
def test_a_wrong_chunked_form_is_caught(monkeypatch, name, mutant):
    monkeypatch.setattr(la, name, mutant)
    monkeypatch.setattr(la, "CHUNK", 2)
    with pytest.raises(AssertionError), np.errstate(invalid="ignore", divide="ignore"):
        _check_kernel("numpy", True, 5, 3, 2, (2,), seed=1)
    with pytest.raises(AssertionError), np.errstate(invalid="ignore", divide="ignore"):
        test_chunked_vjp_and_jvp_equal_autodiff("numpy", "kernel", seed=1)


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
