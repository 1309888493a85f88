"""Multi-head latent attention (nlaverify.ops.mla): the training and the absorbed inference
forms agree on NumPy and JAX (float64, the tolerance model), both equal an independent
per-head implementation (JAX, written from DeepSeek-V2's equations), the cache counts, and
bad shapes are refused by name. The exact proof is identity mla_absorption."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.errors import ShapeError
from nlaverify.ops import mla
from nlaverify.tolerance import tolerance

get_namespace("jax")  # float64 for the reference too

SHAPES = dict(n=7, d=8, r=3, h=2, d_c=4, d_r=2, d_v=3)


def _args(seed: int, n: int = 7, d: int = 8, r: int = 3, h: int = 2, d_c: int = 4,
          d_r: int = 2, d_v: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = [(n, d), (d, r), (h, r, d_c), (h, r, d_v), (h, d, d_c), (h, d, d_r), (d, d_r),
              (h, d_v, d)]
    return [rng.standard_normal(s) / np.sqrt(s[-2] if len(s) > 1 else 1) for s in shapes]


def _reference(X, W_DKV, W_UK, W_UV, W_Q, W_QR, W_KR, W_O, causal=True, base=10000):
    """DeepSeek-V2 eqs. 9-19 in plain JAX (rotate_half pairs would differ: interleaved pairs
    (2i, 2i+1) here, as nlaverify's RoPE)."""
    n, d_r = X.shape[0], W_KR.shape[1]
    theta = base ** (-jnp.arange(0, d_r, 2) / d_r)
    ang = jnp.arange(n)[:, None] * theta[None, :]
    cos, sin = jnp.cos(ang), jnp.sin(ang)

    def rot(Y):
        a, b = Y[..., 0::2], Y[..., 1::2]
        return jnp.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(Y.shape)
    c = X @ W_DKV
    k_r = rot(X @ W_KR)
    out = 0
    for h in range(W_UK.shape[0]):
        q = jnp.concatenate([X @ W_Q[h], rot(X @ W_QR[h])], -1)
        k = jnp.concatenate([c @ W_UK[h], k_r], -1)
        s = q @ k.T / jnp.sqrt(q.shape[-1])
        if causal:
            s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -jnp.inf)
        out = out + jax.nn.softmax(s, -1) @ (c @ W_UV[h]) @ W_O[h]
    return np.asarray(out)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_forms_agree_with_an_independent_implementation(backend: str, causal: bool) -> None:
    xp = get_namespace(backend)
    for seed in range(3):
        args = _args(seed)
        ref = _reference(*(jnp.asarray(a) for a in args), causal=causal)
        tol = tolerance("float64", size=SHAPES["d"] * SHAPES["n"], depth=6)
        for f in (mla.mla_attention, mla.mla_attention_absorbed):
            got = np.asarray(f(xp, *(xp.asarray(a) for a in args), causal=causal))
            assert tol.compare(got, ref).ok, (f.__name__, tol.compare(got, ref))


def test_absorbing_without_the_decoupled_key_would_fail() -> None:
    """Not vacuous: a wrong absorption (W^UK not transposed back, i.e. the query multiplied
    by W^UK itself on a square latent) gives other outputs."""
    xp = get_namespace("numpy")
    args = _args(0, r=4, d_c=4)
    good = mla.mla_attention(xp, *args)
    bad = list(args)
    bad[2] = np.swapaxes(args[2], -1, -2)
    assert not tolerance("float64", size=56, depth=6).compare(
        mla.mla_attention_absorbed(xp, *bad), good).ok


def test_cache_entries_and_bad_shapes() -> None:
    c = mla.mla_cache_entries(4096, 512, 64, 128, 128, 128)  # DeepSeek-V2's sizes
    assert c == {"mla": 4096 * 576, "materialised": 4096 * 128 * 320}
    assert c["materialised"] / c["mla"] > 70
    xp = get_namespace("numpy")
    args = _args(0)
    args[3] = args[3][:, :2]  # W_UV with r = 2 against the latent's r = 3
    with pytest.raises(ShapeError, match="W_UV"):
        mla.mla_attention(xp, *args)
