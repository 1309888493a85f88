"""check_sharded's attention, ring-attention, Muon and ZeRO kinds (nlaverify.sharding.check):
users' sharded code written the way people write it (a loop over devices, NumPy), correct in
float64 and float32 over several seeds, and each classic bug named with its shard count."""

from __future__ import annotations

import numpy as np
import pytest

from nlaverify.sharding.check import HEADS, ZERO_ADAMW, check_sharded


def _f32(fn):
    return lambda *a: fn(*(x.astype(np.float32) if x.dtype.kind == "f" else x for x in a))


def _softmax_rows(S):
    P = np.exp(S - S.max(-1, keepdims=True))
    return P / P.sum(-1, keepdims=True)


# ----------------------------------------------------------------------- users' kernels


def heads_tp(X, Wq, Wk, Wv, Wo, devices=2, all_reduce=True):
    """Megatron attention: device s holds its heads' columns of W_Q, W_K, W_V, rows of W_O."""
    n, d_k = X.shape[0], Wq.shape[1] // HEADS
    mask = np.triu(np.ones((n, n), bool), 1)
    per = HEADS // devices
    parts = []
    for s in range(devices):
        cols = slice(s * per * d_k, (s + 1) * per * d_k)
        q, k, v = X @ Wq[:, cols], X @ Wk[:, cols], X @ Wv[:, cols]
        heads = []
        for h in range(per):
            c = slice(h * d_k, (h + 1) * d_k)
            S = np.where(mask, -np.inf, q[:, c] @ k[:, c].T / np.sqrt(d_k))
            heads.append(_softmax_rows(S) @ v[:, c])
        parts.append(np.concatenate(heads, -1) @ Wo[cols])
    return sum(parts) if all_reduce else parts[0]


def ring(Q, K, V, devices=4, rescale=True):
    """Each device's query block meets every key/value block; online-softmax merge."""
    n, d = Q.shape
    b = n // devices
    out = []
    for i in range(devices):
        q = Q[i * b:(i + 1) * b]
        m = np.full((b, 1), -np.inf)
        ell, acc = np.zeros((b, 1)), np.zeros((b, d))
        for j in [(i - r) % devices for r in range(devices)]:
            S = q @ K[j * b:(j + 1) * b].T / np.sqrt(d)
            qpos, kpos = np.arange(i * b, (i + 1) * b), np.arange(j * b, (j + 1) * b)
            S = np.where(kpos[None] > qpos[:, None], -np.inf, S)
            mj = S.max(-1, keepdims=True)
            if np.all(np.isinf(mj)):
                continue
            P = np.exp(S - mj)
            lj, acc_j = P.sum(-1, keepdims=True), P @ V[j * b:(j + 1) * b]
            if not rescale:
                m, ell, acc = np.maximum(m, mj), ell + lj, acc + acc_j
                continue
            m_new = np.maximum(m, mj)
            a, c = np.exp(m - m_new), np.exp(mj - m_new)
            m, ell, acc = m_new, a * ell + c * lj, a * acc + c * acc_j
        out.append(acc / ell)
    return np.concatenate(out, 0)


MUON = (3.4445, -4.7750, 2.0315)


def muon_zero(G, devices=4, gram=True):
    """Muon's Newton-Schulz on ZeRO row shards of a tall G: all-reduce of G_s^T G_s."""
    X = list(np.split(G, devices, 0))
    if not gram:  # each device on its own: Muon on a shard
        out = []
        for x in X:
            x = x / (np.linalg.norm(x) + 1e-7)
            flip = x.shape[0] < x.shape[1]
            x = x.T if flip else x
            for _ in range(5):
                A = x.T @ x
                x = MUON[0] * x + x @ (MUON[1] * A + MUON[2] * A @ A)
            out.append(x.T if flip else x)
        return np.concatenate(out, 0)
    norm = np.sqrt(sum(np.sum(x * x) for x in X))
    X = [x / (norm + 1e-7) for x in X]
    for _ in range(5):
        A = sum(x.T @ x for x in X)  # the all-reduce (n x n)
        X = [MUON[0] * x + x @ (MUON[1] * A + MUON[2] * A @ A) for x in X]
    return np.concatenate(X, 0)


def zero_adamw(W, grads, devices=2, global_norm=True):
    """ZeRO-1/2: device s holds rows s of W, its Adam moments; clip, then AdamW."""
    h = ZERO_ADAMW
    Ws = list(np.split(W.copy(), devices, 0))
    mu, nu = [np.zeros_like(w) for w in Ws], [np.zeros_like(w) for w in Ws]
    for t, g in enumerate(grads, 1):
        gs = np.split(g, devices, 0)
        sq = [np.sum(x * x) for x in gs]
        for s, x in enumerate(gs):
            norm = np.sqrt(sum(sq)) if global_norm else np.sqrt(sq[s])
            x = x * min(1.0, h["max_norm"] / norm)
            mu[s] = h["b1"] * mu[s] + (1 - h["b1"]) * x
            nu[s] = h["b2"] * nu[s] + (1 - h["b2"]) * x * x
            m_hat, v_hat = mu[s] / (1 - h["b1"] ** t), nu[s] / (1 - h["b2"] ** t)
            Ws[s] = Ws[s] - h["lr"] * (m_hat / (np.sqrt(v_hat) + h["eps"])
                                       + h["weight_decay"] * Ws[s])
    return np.concatenate(Ws, 0)


CORRECT = ((heads_tp, "attention_heads"), (ring, "ring_attention"), (muon_zero, "muon_update"),
           (zero_adamw, "zero_adamw"))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("fn", "kind"), CORRECT, ids=[k for _, k in CORRECT])
def test_correct_shardings_pass(fn, kind: str, dtype: str) -> None:
    user = fn if dtype == "float64" else _f32(fn)
    rep = check_sharded(user, kind, dtype=dtype, seeds=10)
    assert rep.ok and len(rep.rows) == 10, repr(rep)


def _note(r) -> str:
    return next(n for n in r.notes if n.startswith("your output"))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_classic_bugs_are_named(dtype: str) -> None:
    cast = (lambda f: f) if dtype == "float64" else _f32
    r = check_sharded(cast(lambda *a: heads_tp(*a, all_reduce=False)), "attention_heads",
                      dtype=dtype)
    assert not r.ok and "all-reduce after the row-parallel W_O is missing" in _note(r)
    assert _note(r).endswith("with 2 shards"), r.notes
    r = check_sharded(cast(lambda *a: ring(*a, rescale=False)), "ring_attention", dtype=dtype)
    assert not r.ok and "without the rescale" in _note(r), r.notes
    assert _note(r).endswith("with 2 shards") or _note(r).endswith("with 4 shards"), r.notes
    r = check_sharded(cast(lambda G: muon_zero(G, gram=False)), "muon_update", dtype=dtype)
    assert not r.ok and "Muon on a shard: needs the Gram all-reduce" in _note(r), r.notes
    assert _note(r).endswith("with 4 shards"), r.notes
    r = check_sharded(cast(lambda G: muon_zero(G.T.copy(), gram=False).T), "muon_update",
                      dtype=dtype)
    assert not r.ok and "Muon on a shard: needs the all-gather" in _note(r), r.notes
    r = check_sharded(cast(lambda *a: zero_adamw(*a, global_norm=False)), "zero_adamw",
                      dtype=dtype)
    assert not r.ok and "each shard's own norm" in _note(r) and _note(r).endswith("2 shards")
    r = check_sharded(cast(lambda *a: zero_adamw(*a, devices=4, global_norm=False)),
                      "zero_adamw", dtype=dtype)
    assert _note(r).endswith("with 4 shards"), r.notes


def test_unknown_divergence_is_not_named() -> None:
    r = check_sharded(lambda Q, K, V: ring(Q, K, V) * 1.001, "ring_attention")
    assert not r.ok and "matches none of the known sharding bugs" in _note(r)
    r = check_sharded(lambda G: muon_zero(G) * 1.001, "muon_update")
    assert not r.ok and "matches none" in _note(r), r.notes


def _muon_global_norm_local_ns(G: np.ndarray, shards: int = 4) -> np.ndarray:
    """Normalised by the global norm, but Newton-Schulz per row shard (no Gram all-reduce)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    out = []
    for x in np.split(G / (np.linalg.norm(G) + 1e-7), shards):
        for _ in range(5):
            A = x.T @ x
            x = a * x + x @ (b * A + c * A @ A)
        out.append(x)
    return np.concatenate(out)


def _blockwise_stale_accumulators(Q, K, V, blocks: int = 4) -> np.ndarray:
    """The running maximum kept, the sums already held never multiplied by exp(m - m')."""
    L, d = Q.shape
    b, out = L // blocks, []
    for i in range(blocks):
        q = Q[i * b:(i + 1) * b]
        m, ell, acc = np.full((b, 1), -np.inf), np.zeros((b, 1)), np.zeros((b, d))
        for j in range(i + 1):
            s = q @ K[j * b:(j + 1) * b].T / np.sqrt(d)
            if j == i:
                s = np.where(np.tril(np.ones((b, b), bool)), s, -np.inf)
            m = np.maximum(m, s.max(-1, keepdims=True))
            p = np.exp(s - m)
            ell, acc = ell + p.sum(-1, keepdims=True), acc + p @ V[j * b:(j + 1) * b]
        out.append(acc / ell)
    return np.concatenate(out)


def test_the_common_variants_of_the_bugs_are_named() -> None:
    """The usual ways to write the bugs (a hostile review found them reported as 'matches
    none'): Muon normalised globally but orthogonalised per shard, and a blockwise loop that
    keeps the running maximum but never rescales what it already holds."""
    r = check_sharded(_muon_global_norm_local_ns, "muon_update")
    assert not r.ok and "normalised by its global norm" in r.notes[-1] and "4 shards" in r.notes[-1]
    r = check_sharded(_blockwise_stale_accumulators, "ring_attention")
    assert not r.ok and "never multiplied by exp(m - m')" in r.notes[-1]
    assert "natural order" in r.notes[-1] and "4 shards" in r.notes[-1]
