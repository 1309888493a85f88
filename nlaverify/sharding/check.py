r"""The front door for a user's sharded code (issue 22, item 3): ``check_sharded(fn, kind)``
runs the user's function — written however they shard it (``jax.shard_map`` on their mesh,
``pjit``, a loop over shards) but called on the *global* arrays — on seeded inputs, compares
its output with the unsharded reference of :mod:`nlaverify.sharding` by the tolerance
model of its dtype, and, where it diverges, names the classic sharding bug it equals: the
named counterexamples of the module (a missing all-reduce, a loss averaged per shard, a
vocabulary-parallel softmax without the global max), each evaluated for every shard count
that divides the sharded axis.

Kinds (the call signature ``fn`` must have, all arrays global):

* ``"tensor_parallel_mlp"``: ``fn(X, W1, W2) -> X W1 W2`` (the identity activation;
  Megatron's column-parallel then row-parallel MLP);
* ``"data_parallel_gradient"``: ``fn(X, W, targets) -> grad_W`` of the mean cross-entropy of
  ``X W`` over the targets that are not ``-100`` (data-parallel over the rows of ``X``);
* ``"vocab_parallel_cross_entropy"``: ``fn(Z, targets) -> loss`` (the mean cross-entropy,
  the logits sharded over the vocabulary).

Seeds: Shoeybi et al. 2019 (Megatron-LM); Rajbhandari et al. 2020 (ZeRO).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError
from nlaverify.ops.loss import IGNORE_INDEX, cross_entropy
from nlaverify.sharding import data as _da
from nlaverify.sharding import tensor as _te
from nlaverify.sharding._shards import split
from nlaverify.sharding.optimizer import shard_sizes
from nlaverify.tolerance import tolerance

__all__ = ["KINDS", "check_sharded"]


@dataclass(frozen=True)
class _Kind:
    inputs: Callable[[np.random.Generator], tuple[np.ndarray, ...]]
    reference: Callable[..., Any]
    #: (label, fn(args, shards) -> value); shards the number of devices tried
    bugs: tuple[tuple[str, Callable[[tuple[np.ndarray, ...], int], Any]], ...]
    axis_len: Callable[[tuple[np.ndarray, ...]], int]
    size: Callable[[tuple[np.ndarray, ...]], int]


def _np() -> Any:
    return get_namespace("numpy")


def _targets(rng: np.random.Generator, n: int, V: int) -> np.ndarray:
    t = rng.integers(0, V, size=n)
    t[rng.random(n) < 0.25] = IGNORE_INDEX  # padding, unevenly spread over the shards
    t[0] = 1
    return t


KINDS: dict[str, _Kind] = {
    "tensor_parallel_mlp": _Kind(
        lambda rng: (rng.standard_normal((6, 8)), rng.standard_normal((8, 12)) / 3,
                     rng.standard_normal((12, 8)) / 3),
        lambda X, W1, W2: _te.mlp(_np(), X, W1, W2),
        (("the all-reduce after the row-parallel matmul is missing (one device's partial "
          "product)",
          lambda a, s: _te.tensor_parallel_mlp_without_all_reduce(
              _np(), a[0], split(_np(), a[1], shard_sizes(a[1].shape[1], s), -1),
              split(_np(), a[2], shard_sizes(a[2].shape[0], s), 0))),),
        lambda a: a[1].shape[1], lambda a: a[1].shape[0] * a[1].shape[1]),
    "data_parallel_gradient": _Kind(
        lambda rng: (rng.standard_normal((12, 5)), rng.standard_normal((5, 7)) / 2,
                     _targets(rng, 12, 7)),
        lambda X, W, t: _da.linear_head_gradient(_np(), X, W, t),
        (("the loss averaged per shard and the shards' means averaged (not weighted by their "
          "token counts)",
          lambda a, s: _da.data_parallel_gradient_per_shard_mean(
              _np(), split(_np(), a[0], shard_sizes(a[0].shape[0], s), 0), a[1],
              split(_np(), a[2], shard_sizes(a[2].shape[0], s), 0))),),
        lambda a: a[0].shape[0], lambda a: a[0].shape[0]),
    "vocab_parallel_cross_entropy": _Kind(
        lambda rng: (rng.standard_normal((6, 12)) * 8, _targets(rng, 6, 12)),
        lambda Z, t: cross_entropy(_np(), Z, t),
        (("the vocabulary-parallel log-sum-exp without the global max (each shard's sum at "
          "its own shift)",
          lambda a, s: _te.vocab_parallel_cross_entropy(
              _np(), split(_np(), a[0], shard_sizes(a[0].shape[1], s), -1), a[1],
              lse=lambda xp, Zs: _te.vocab_parallel_logsumexp_without_global_max(xp, Zs))),),
        lambda a: a[0].shape[1], lambda a: a[0].shape[1]),
}


def check_sharded(fn: Callable[..., Any], kind: str, *, dtype: str = "float64",
                  seeds: int = 3, seed: int = 0) -> Any:
    r"""Check the user's sharded ``fn`` of ``kind`` (:data:`KINDS`, module docstring) on
    ``seeds`` seeded inputs against the unsharded reference, by the tolerance model of
    ``dtype`` (the accumulation length of the kind, two rounding stages: the per-shard
    computation and the merge); where it diverges, a note names the counterexample it
    equals. Returns a :class:`~nlaverify.check.report.CheckReport` (one row per seed).

    Raises:
        ArgumentError: an unknown ``kind``, ``fn`` not callable, ``seeds < 1``, or an
            output of the wrong shape.
    """
    if kind not in KINDS:
        raise ArgumentError(f"check_sharded: argument 'kind': expected one of "
                            f"{', '.join(KINDS)}, got {kind!r}")
    if not callable(fn):
        raise ArgumentError(f"check_sharded: argument 'fn': expected a callable, got "
                            f"{type(fn).__name__}")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ArgumentError(f"check_sharded: argument 'seeds': expected an integer >= 1, got "
                            f"{seeds!r}")
    from nlaverify.check.report import CheckReport, compare_arrays

    spec = KINDS[kind]
    subject = getattr(fn, "__name__", "fn")
    report = CheckReport(subject, "check_sharded", notes=[
        f"reference: the unsharded {kind} (nlaverify.sharding), {seeds} seeded inputs"])
    bug = None
    for k in range(seeds):
        args = spec.inputs(np.random.default_rng([seed, k]))
        ref = np.asarray(spec.reference(*args), dtype=np.float64)
        got = np.asarray(fn(*args), dtype=np.float64)
        if got.shape != ref.shape:
            raise ArgumentError(f"check_sharded: output of fn: expected shape {ref.shape} (the "
                                f"unsharded {kind}), got {got.shape}")
        tol = tolerance(dtype, size=spec.size(args), depth=2)
        row = compare_arrays(subject, f"{kind}, seed {k}", got, ref, tol)
        report.rows.append(row)
        if row.ok or bug is not None:
            continue
        bug = "unknown divergence"
        n_axis = spec.axis_len(args)
        for label, wrong in spec.bugs:
            for shards in (s for s in range(2, n_axis + 1) if n_axis % s == 0):
                if tol.compare(got, np.asarray(wrong(args, shards), np.float64)).ok:
                    bug = f"{label}, with {shards} shards"
                    break
            if bug != "unknown divergence":
                break
        report.notes.append(f"your output equals {bug}" if bug != "unknown divergence" else
                            "your output matches none of the known sharding bugs")
    return report
