"""check_sharded, the front door for a user's sharded code (nlaverify.sharding.check): the
user's function, sharded its own way, against the unsharded reference; correct shardings pass
in float64 and float32 and the classic bugs are named with their shard count."""

from __future__ import annotations

import numpy as np
import pytest

from nlaverify.errors import ArgumentError
from nlaverify.sharding.check import KINDS, check_sharded


def _shards(x: np.ndarray, s: int, axis: int) -> list[np.ndarray]:
    return np.split(x, s, axis=axis)


def tp_mlp(X, W1, W2, s=4, all_reduce=True):
    parts = [X @ a @ b for a, b in zip(_shards(W1, s, 1), _shards(W2, s, 0), strict=True)]
    return sum(parts) if all_reduce else parts[0]


def _ce_grad(X, W, t):
    Z = X @ W
    P = np.exp(Z - Z.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    keep = t != -100
    P[keep, t[keep]] -= 1
    P[~keep] = 0
    return X.T @ P, int(keep.sum())


def dp_grad(X, W, t, s=3, weighted=True):
    parts = [_ce_grad(x, W, tt) for x, tt in zip(_shards(X, s, 0), _shards(t, s, 0),
                                                  strict=True)]
    if weighted:
        return sum(g for g, _ in parts) / sum(n for _, n in parts)
    return sum(g / max(n, 1) for g, n in parts) / s


def vp_ce(Z, t, s=2, global_max=True):
    Zs = _shards(Z, s, 1)
    m = [z.max(-1, keepdims=True) for z in Zs]
    M = np.maximum.reduce(m) if global_max else m[0]
    ell = sum(np.exp(z - (M if global_max else mi)).sum(-1, keepdims=True)
              for z, mi in zip(Zs, m, strict=True))
    lse = (M + np.log(ell))[:, 0]
    keep = t != -100
    picked = Z[np.arange(len(t)), np.where(keep, t, 0)]
    return np.sum((lse - picked)[keep]) / keep.sum()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_correct_shardings_pass(dtype: str) -> None:
    cast = (lambda f: f) if dtype == "float64" else (
        lambda f: lambda *a: f(*(x.astype(np.float32) if x.dtype.kind == "f" else x
                                for x in a)))
    for fn, kind in ((tp_mlp, "tensor_parallel_mlp"), (dp_grad, "data_parallel_gradient"),
                     (vp_ce, "vocab_parallel_cross_entropy")):
        rep = check_sharded(cast(fn), kind, dtype=dtype)
        assert rep.ok and len(rep.rows) == 3, repr(rep)


def _note(r) -> str:
    return next(n for n in r.notes if n.startswith("your output"))


def test_classic_bugs_are_named() -> None:
    r = check_sharded(lambda *a: tp_mlp(*a, s=2, all_reduce=False), "tensor_parallel_mlp")
    assert not r.ok and "the all-reduce after the row-parallel matmul is missing" in _note(r)
    assert _note(r).endswith("with 2 shards"), r.notes
    r = check_sharded(lambda *a: dp_grad(*a, weighted=False), "data_parallel_gradient")
    assert not r.ok and "averaged per shard" in _note(r) and _note(r).endswith("3 shards")
    r = check_sharded(lambda *a: vp_ce(*a, global_max=False), "vocab_parallel_cross_entropy")
    assert not r.ok and "without the global max" in _note(r) and _note(r).endswith("2 shards")
    r = check_sharded(lambda *a: 1.01 * tp_mlp(*a), "tensor_parallel_mlp")
    assert not r.ok and "matches none of the known sharding bugs" in _note(r)
    assert r.first_failure.check == "tensor_parallel_mlp, seed 0"


def test_bad_input() -> None:
    with pytest.raises(ArgumentError, match="argument 'kind'"):
        check_sharded(tp_mlp, "pipeline_parallel")
    with pytest.raises(ArgumentError, match="argument 'fn'"):
        check_sharded(3, "tensor_parallel_mlp")
    with pytest.raises(ArgumentError, match="seeds"):
        check_sharded(tp_mlp, "tensor_parallel_mlp", seeds=0)
    with pytest.raises(ArgumentError, match=r"expected shape \(6, 8\)"):
        check_sharded(lambda X, W1, W2: X @ W1, "tensor_parallel_mlp")
    assert set(KINDS) == {"tensor_parallel_mlp", "data_parallel_gradient",
                          "vocab_parallel_cross_entropy", "attention_heads", "ring_attention",
                          "muon_update", "zero_adamw"}
