"""Shampoo and global-norm clipping under ZeRO (nlaverify.sharding.optimizer, identities in
nlaverify.identities.sharding_shampoo): the sharded functions equal the unsharded ones on
random float64 inputs, their counterexamples do not, and the proofs refute planted bugs."""

from __future__ import annotations

import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.curvature import shampoo as sp
from nlaverify.identities import sharding_shampoo as ids
from nlaverify.sharding import optimizer as op
from nlaverify.tolerance import tolerance

XP = get_namespace("numpy")


def _history(seed: int, m: int = 6, n: int = 4, steps: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((m, n)) for _ in range(steps)]


def _full(Gs: list[np.ndarray], eps: float) -> np.ndarray:
    stats = sp.shampoo_init(XP, Gs[0], eps)
    for G in Gs:
        stats = sp.shampoo_statistics(XP, G, stats)
    return sp.shampoo_direction(XP, Gs[-1], stats)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("axis", "sizes"), [(-2, (2, 4)), (-2, (1, 2, 3)), (-1, (1, 3)),
                                             (-1, (2, 2))])
def test_shampoo_sharded_equals_shampoo(seed: int, axis: int, sizes: tuple[int, ...]) -> None:
    Gs, eps = _history(seed), 1e-3
    ref = _full(Gs, eps)
    h = [op.split(XP, G, list(sizes), axis) for G in Gs]
    got = np.concatenate(op.shampoo_sharded(XP, h, axis, epsilon=eps), axis=axis)
    # eigendecompositions of the 6 x 6 and 4 x 4 statistics, condition up to ~1/eps
    tol = tolerance("float64", size=6, depth=4, condition=1 / eps)
    assert tol.compare(got, ref).ok
    for all_reduce in (False, True):
        bad = np.concatenate(op.shampoo_on_shards(XP, h, axis, epsilon=eps,
                                                  all_reduce=all_reduce), axis=axis)
        assert not tol.compare(bad, ref).ok


@pytest.mark.parametrize("n_shards", [2, 3])
def test_zero_clipping_uses_the_global_norm(n_shards: int) -> None:
    rng = np.random.default_rng(n_shards)
    g = {"w": rng.standard_normal((6, 4)) * 3, "b": rng.standard_normal(6)}
    ref = op.clip_by_global_norm(XP, g, 1.0)
    norm = np.sqrt(sum(np.sum(v * v) for v in ref.values()))  # 30 squares, a root, a scale
    assert tolerance("float64", size=g["w"].size + g["b"].size, depth=3).compare(norm, 1.0).ok
    pieces = op.shard_params(XP, g, n_shards)
    got = op.gather_params(XP, op.zero_clip_by_global_norm(XP, pieces, 1.0))
    bad = op.gather_params(XP, op.zero_clip_by_shard_norm(XP, pieces, 1.0))
    tol = tolerance("float64", size=g["w"].size + g["b"].size)
    assert all(tol.compare(got[k], ref[k]).ok for k in g)
    assert not all(tol.compare(bad[k], ref[k]).ok for k in g)


def test_the_identities_are_proved() -> None:
    assert ids.derive_shampoo_sharded().verdict == "proved"
    assert ids.derive_zero_clip().verdict == "proved"


def test_the_proofs_refute_planted_bugs(monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = op.shampoo_on_shards
    monkeypatch.setattr(op, "shampoo_sharded", lambda xp, h, axis=-2, **k: blocked(
        xp, h, axis, all_reduce=True, **k))
    assert ids.derive_shampoo_sharded().verdict == "failed"
    monkeypatch.setattr(op, "zero_clip_by_global_norm", op.zero_clip_by_shard_norm)
    assert ids.derive_zero_clip().verdict == "failed"
