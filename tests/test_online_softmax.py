"""Blockwise (online-softmax, FlashAttention) attention: equal to softmax attention for every
block split, masks and batch/head axes, on NumPy and JAX; its VJP and JVP against JAX
autodiff of the *plain* softmax attention (an independent oracle); hostile magnitudes; the
exact identities, and planted mistakes each one refutes. (The generic VJP/JVP proofs,
mpmath/JAX cross-checks, batching and sign-flip mutations run from the op table.)"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError
from nlaverify.identities import online_softmax as ids
from nlaverify.ops import online_softmax as osm
from nlaverify.ops import sdpa
from nlaverify.ops.registry import OPS
from nlaverify.symbolic.vjp_proof import prove_jvp, prove_vjp
from nlaverify.tolerance import tolerance

SPLITS = [1, 2, 3, 7, (2, 3, 2), (1, 5, 1), (6, 1)]
MASKS = [(False, None), (True, None), (True, 3)]


def _qkv(seed: int, n_q: int = 7, n_k: int = 7, lead=(2, 3), scale: float = 1.0):
    rng = np.random.default_rng(seed)
    return (scale * rng.standard_normal((*lead, n_q, 4)),
            scale * rng.standard_normal((*lead, n_k, 4)), rng.standard_normal((*lead, n_k, 3)))


def _reference(Q, K, V, causal, window):
    """Masked softmax attention written directly (queries at the last positions)."""
    n_q, n_k = Q.shape[-2], K.shape[-2]
    S = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if causal:
        lag = (np.arange(n_q)[:, None] + n_k - n_q) - np.arange(n_k)[None, :]
        S = np.where((lag >= 0) & ((lag < window) if window else True), S, -np.inf)
    E = np.exp(S - S.max(-1, keepdims=True))
    return (E / E.sum(-1, keepdims=True)) @ V


@pytest.mark.parametrize("backend", ["numpy", "jax"])
@pytest.mark.parametrize(("causal", "window"), MASKS)
def test_every_split_is_softmax_attention_with_batch_and_head_axes(backend, causal, window):
    xp = get_namespace(backend)
    Q, K, V = _qkv(0)
    want = np.asarray(sdpa.attention(xp, *map(xp.asarray, (Q, K, V)), causal, window))
    tol = tolerance("float64", size=7, depth=3)
    for block in SPLITS:
        got = osm.blockwise_attention(xp, *map(xp.asarray, (Q, K, V)), block=block,
                                      causal=causal, window=window)
        assert tol.compare(got, want).ok, block


@pytest.mark.parametrize(("causal", "window"), MASKS)
def test_fewer_queries_than_keys_is_the_last_rows(causal, window):
    # a decoding step: the last query (or the last 2) against the whole cache
    xp = get_namespace("numpy")
    Q, K, V = _qkv(1, n_q=2, n_k=7)
    tol = tolerance("float64", size=7, depth=3)
    for block in SPLITS:
        got = osm.blockwise_attention(xp, Q, K, V, block=block, causal=causal, window=window)
        assert tol.compare(got, _reference(Q, K, V, causal, window)).ok, block


def _jax_reference_vjp_jvp(Q, K, V, G, T, causal, window):
    import jax

    xp = get_namespace("jax")

    def f(q, k, v):
        return sdpa.attention(xp, q, k, v, causal, window)

    _, pull = jax.vjp(f, Q, K, V)
    return pull(G), jax.jvp(f, (Q, K, V), T)[1]


@pytest.mark.parametrize(("causal", "window"), MASKS)
def test_vjp_and_jvp_equal_autodiff_of_plain_attention(causal, window):
    import jax.numpy as jnp

    Q, K, V = _qkv(2)
    rng = np.random.default_rng(3)
    G = rng.standard_normal((*Q.shape[:-1], 3))
    T = tuple(rng.standard_normal(x.shape) for x in (Q, K, V))
    ref_vjp, ref_jvp = _jax_reference_vjp_jvp(*map(jnp.asarray, (Q, K, V, G)),
                                              tuple(map(jnp.asarray, T)), causal, window)
    xp = get_namespace("numpy")
    tol = tolerance("float64", size=7, depth=6)
    for block in (1, 3, (2, 3, 2)):
        kw = {"block": block, "causal": causal, "window": window}
        for got, want in zip(osm.blockwise_attention_vjp(xp, G, Q, K, V, **kw), ref_vjp,
                             strict=True):
            assert tol.compare(got, want).ok, block
        assert tol.compare(osm.blockwise_attention_jvp(xp, T, Q, K, V, **kw), ref_jvp).ok
        # a None tangent is a zero one
        half = osm.blockwise_attention_jvp(xp, (None, T[1], None), Q, K, V, **kw)
        zeros = osm.blockwise_attention_jvp(xp, (0 * T[0], T[1], 0 * T[2]), Q, K, V, **kw)
        assert tol.compare(half, zeros).ok


def test_hostile_magnitudes_and_fully_masked_blocks():
    """Scores of +-1e4 (float32): no overflow; a causal row whose keys all score about
    -1000 merges with fully masked blocks: the running maximum must stay -inf there, or the
    spurious shift 0 underflows the row's sum to 0 (checked by planting exactly that)."""
    xp = get_namespace("numpy")
    Q, K, V = _qkv(4, lead=(2,), scale=100.0)
    want = sdpa.attention(xp, Q, K, V, True)
    got = osm.blockwise_attention(xp, Q.astype(np.float32), K.astype(np.float32),
                                  V.astype(np.float32), block=2, causal=True)
    assert np.all(np.isfinite(got))
    assert tolerance("float32", size=7, depth=3, condition=1e4).compare(got, want).ok
    # every score about -1000: row 0 sees key 0 only; blocks of one key, merged in order
    q = np.full((3, 1), 10.0)
    k = np.full((3, 1), -100.0)  # every score -1000: e^{-1000} underflows to 0
    v = np.arange(3.0)[:, None] + 1
    right = osm.blockwise_attention(xp, q, k, v, block=1, causal=True)
    assert np.array_equal(right, sdpa.attention(xp, q, k, v, True))  # one-hot rows: exact
    orig = osm._masked_max
    try:
        osm._masked_max = lambda xp, shift, ell: shift  # the planted mistake
        wrong = osm.blockwise_attention(xp, q, k, v, block=1, causal=True)
    finally:
        osm._masked_max = orig
    assert wrong[0, 0] == 0.0 and right[0, 0] == 1.0


def test_an_all_masked_row_is_zero_with_zero_cotangents():
    xp = get_namespace("numpy")
    Q, K, V = _qkv(5, n_q=3, n_k=2, lead=())  # bottom-right causal: query 0 sees nothing
    out = osm.blockwise_attention(xp, Q, K, V, block=1, causal=True)
    assert np.all(out[0] == 0) and np.all(np.isfinite(out))
    dQ, dK, dV = osm.blockwise_attention_vjp(xp, np.ones_like(out), Q, K, V, block=1,
                                             causal=True)
    assert np.all(dQ[0] == 0) and all(np.all(np.isfinite(x)) for x in (dQ, dK, dV))


@pytest.mark.parametrize(("block", "match"), [
    (0, "argument 'block'"), (True, "argument 'block'"), ((2, 2), "summing to .* 7"),
    ((3, 0, 4), "argument 'block'"), ("2", "argument 'block'")])
def test_bad_block_is_named(block, match):
    xp = get_namespace("numpy")
    with pytest.raises(ArgumentError, match=match):
        osm.blockwise_attention(xp, *_qkv(6), block=block)


def test_window_without_causal_is_named():
    with pytest.raises(ArgumentError, match="argument 'window'"):
        osm.blockwise_attention(get_namespace("numpy"), *_qkv(6), window=2)


# -- the exact identities and what they refute ----------------------------------------------


def test_enumerations_count_every_split_and_order():
    assert sorted(ids.compositions(4)) == sorted([(4,), (1, 3), (3, 1), (2, 2), (1, 1, 2),
                                                  (1, 2, 1), (2, 1, 1), (1, 1, 1, 1)])
    # (2b - 2)! / (b - 1)! ordered merge trees of b blocks
    assert [len(list(ids.merge_trees(tuple(range(b))))) for b in (1, 2, 3, 4)] == [1, 2, 12,
                                                                                 120]


def test_blockwise_identity_is_proved():
    assert ids.derive_blockwise().verdict == "proved"


def _no_rescale(xp, a, b):
    """The classic mistake: adding the blocks' sums without rescaling to a common max."""
    (m_a, *acc_a), (m_b, *acc_b) = a, b
    shift = xp.stability_shift(xp.concat([m_a, m_b], axis=-1), -1)
    return (shift, *[x + y for x, y in zip(acc_a, acc_b, strict=True)])


def _rescale_one_side(xp, a, b):
    """Only the running state is rescaled, not the new block."""
    (m_a, *acc_a), (m_b, *acc_b) = a, b
    shift = xp.stability_shift(xp.concat([m_a, m_b], axis=-1), -1)
    alpha = xp.exp(m_a - shift)
    return (shift, *[alpha * x + y for x, y in zip(acc_a, acc_b, strict=True)])


@pytest.mark.parametrize("mutant", [_no_rescale, _rescale_one_side])
def test_a_wrong_merge_is_refuted_by_both_identities(monkeypatch, mutant):
    monkeypatch.setattr(osm, "merge_statistics", mutant)
    assert ids.derive_merge().verdict == "failed"
    assert ids.derive_blockwise().verdict == "failed"


def _vjp_without_D(xp, G, Q, K, V, *, block=2, causal=False, window=None):
    """FlashAttention's backward without the row term D = rowsum(G * A) in dS."""
    n_k, root = K.shape[-2], xp.const_sqrt(Q.shape[-1])
    bounds = osm.block_bounds(n_k, block)
    m, ell, _ = osm._fold(xp, Q, K, V, bounds, causal, window)
    dQ, dK, dV = 0, [], []
    for lo, hi in bounds:
        K_b, V_b = K[..., lo:hi, :], V[..., lo:hi, :]
        P = xp.exp(osm.block_scores(xp, Q, K_b, lo, n_k, causal, window) - m) / ell
        dS = P * xp.matmul(G, xp.matrix_transpose(V_b))
        dQ = dQ + xp.matmul(dS, K_b) / root
        dK.append(xp.matmul(xp.matrix_transpose(dS), Q) / root)
        dV.append(xp.matmul(xp.matrix_transpose(P), G))
    return dQ, xp.concat(dK, axis=-2), xp.concat(dV, axis=-2)


def _jvp_without_scores(orig):
    """The JVP with the score tangents (dQ, dK) dropped: only P dV is left."""
    def jvp(xp, T, Q, K, V, **kw):
        return orig(xp, (None, None, T[2]), Q, K, V, **kw)

    return jvp


@pytest.mark.parametrize("op", ["blockwise_attention", "causal_blockwise_attention"])
def test_wrong_backward_and_forward_modes_are_refuted(op):
    spec = OPS[op]
    assert prove_vjp(dataclasses.replace(spec, vjp=_vjp_without_D)).verdict == "failed"
    import sys

    mod = sys.modules[spec.forward.__module__]
    orig = mod.blockwise_attention_jvp
    try:
        mod.blockwise_attention_jvp = _jvp_without_scores(orig)
        assert prove_jvp(spec).verdict == "failed"
    finally:
        mod.blockwise_attention_jvp = orig
    assert prove_jvp(spec).verdict == "proved"


def _user_flash(rescale: bool):
    """A user's FlashAttention-style NumPy kernel (causal, key blocks of 2), as people write
    it; ``rescale=False`` forgets to rescale the running sums when the maximum grows."""
    def flash(Q, K, V):
        n, d = Q.shape[-2], Q.shape[-1]
        m = np.full((*Q.shape[:-1], 1), -np.inf)
        ell = np.zeros_like(m)
        acc = np.zeros((*Q.shape[:-1], V.shape[-1]))
        for lo in range(0, n, 2):
            S = Q @ np.swapaxes(K[..., lo:lo + 2, :], -1, -2) / np.sqrt(d)
            S = np.where(np.arange(n)[:, None] >= np.arange(lo, min(lo + 2, n))[None, :], S,
                         -np.inf)
            m_new = np.maximum(m, S.max(-1, keepdims=True))
            P = np.exp(S - np.where(np.isinf(m_new), 0, m_new))
            alpha = np.exp(np.where(np.isinf(m), -np.inf, m - m_new)) if rescale else 1.0
            ell = alpha * ell + P.sum(-1, keepdims=True)
            acc = alpha * acc + P @ V[..., lo:lo + 2, :]
            m = m_new
        return acc / ell

    return flash


@pytest.mark.parametrize("rescale", [True, False])
def test_a_users_flash_kernel_is_checked_against_the_op(rescale):
    from nlaverify.check import check_op

    report = check_op(_user_flash(rescale), "causal_blockwise_attention", dtype="float64",
                      examples=4, hostile=False, check_jvp=False)
    assert report.ok is rescale, report
    if not rescale:
        assert report.first_failure.where.startswith("out[")
