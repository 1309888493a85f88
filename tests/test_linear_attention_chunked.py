"""The chunked causal form of linearized attention on the array backends (Baggag & Saad
§4.3): blocks of ``ka.CHUNK``, lowered here so that :math:`n` spans several blocks, the last
one ragged, equal the masked quadratic form, and its VJP and JVP (of ``kernel_attention`` and
causal FAVOR, FAVOR+, elu+1) equal JAX's autodiff of independent ``jax.numpy`` quadratic
forms. Planted mutants (the diagonal block carried twice, a strict mask) fail these checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from _linear_attention_helpers import (
    _assert_close,
    _cancellation,
    _check_kernel,
    _gram,
    _ns,
    _on,
    _sizes,
)
from hypothesis import given
from hypothesis import strategies as st

from nlaverify.backends import get_namespace
from nlaverify.ops import kernel_attention as ka
from nlaverify.ops import linear_attention as la
from nlaverify.strategies import seeds
from nlaverify.tolerance import magnitude_condition

# -- the chunked causal form (array backends) ---------------------------------------------

CHUNKED = ["numpy", "jax", "strict"]  # the object namespaces keep the triangular-matrix form


@contextmanager
def _chunk(size: int) -> Iterator[None]:
    """``ka.CHUNK`` lowered to ``size`` (a context: hypothesis tests take no ``monkeypatch``)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ka, "CHUNK", size)
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


# -- planted mutants ----------------------------------------------------------------------


def _inclusive_carry(xp, S, reverse):
    return S  # the state of block B itself carried into B: the diagonal block twice


def _strict_mask(xp, A):
    idx = xp.arange(A.shape[-1])
    return xp.where(idx[:, None] > idx[None, :], A, xp.zeros_like(A))  # j < i: no diagonal


@pytest.mark.parametrize(("name", "mutant"), [("_shift", _inclusive_carry),
                                              ("_block_mask", _strict_mask)])
def test_a_wrong_chunked_form_is_caught(monkeypatch, name, mutant):
    monkeypatch.setattr(ka, name, mutant)
    monkeypatch.setattr(ka, "CHUNK", 2)
    with pytest.raises(AssertionError), np.errstate(invalid="ignore", divide="ignore"):
        _check_kernel("numpy", True, 5, 3, 2, (2,), seed=1)
    with pytest.raises(AssertionError), np.errstate(invalid="ignore", divide="ignore"):
        test_chunked_vjp_and_jvp_equal_autodiff("numpy", "kernel", seed=1)

