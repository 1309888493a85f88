"""elu+1, Shen et al.'s efficient attention and Linformer (Baggag & Saad §4.3) equal their
quadratic forms on every backend, and Linformer with :math:`E = F = I_n` is softmax
attention."""

from __future__ import annotations

import numpy as np
import pytest
from _linear_attention_helpers import (
    BACKENDS,
    _assert_close,
    _gram,
    _masked_quadratic,
    _ns,
    _on,
    _sizes,
)
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import softmax as np_softmax

from nlaverify.backends.host import to_float64
from nlaverify.ops import linear_attention as la
from nlaverify.ops.sdpa import attention
from nlaverify.strategies import seeds
from nlaverify.tolerance import magnitude_condition

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

