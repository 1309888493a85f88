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
  the logits sharded over the vocabulary);
* ``"attention_heads"``: ``fn(X, W_Q, W_K, W_V, W_O) -> `` causal multi-head attention with
  :data:`HEADS` heads (``X`` ``(6, 8)``, the weights ``(8, 8)``; heads split across devices,
  :math:`W_O` row-parallel);
* ``"ring_attention"``: ``fn(Q, K, V) -> `` causal attention
  :math:`\operatorname{softmax}(QK^\top/\sqrt{d_k} + M)V` (``(8, 4)`` each; the sequence
  split across devices, the blocks' online-softmax statistics merged);
* ``"muon_update"``: ``fn(G) -> `` Muon's orthogonalisation of ``G`` ``(16, 8)``: 5
  normalised Newton–Schulz steps with Muon's coefficients (:func:`~nlaverify.optim.
  newton_schulz.newton_schulz`, ``eps=1e-7``; ``G`` sharded by rows or columns);
* ``"zero_adamw"``: ``fn(W, grads) -> `` the parameters ``(8, 6)`` after ``len(grads)``
  (3) AdamW steps, each gradient first clipped to the global norm ``max_norm``, with the
  hyperparameters :data:`ZERO_ADAMW` (optimizer state and gradients ZeRO-sharded by rows).

Seeds: Shoeybi et al. 2019 (Megatron-LM); Rajbhandari et al. 2020 (ZeRO); Liu et al. 2023
(Ring Attention); Jordan et al. 2024 (Muon).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError
from nlaverify.ops import sdpa as _sd
from nlaverify.ops.loss import IGNORE_INDEX, cross_entropy
from nlaverify.optim import newton_schulz as _ns
from nlaverify.optim import rules as _r
from nlaverify.sharding import data as _da
from nlaverify.sharding import optimizer as _op
from nlaverify.sharding import sequence as _sq
from nlaverify.sharding import tensor as _te
from nlaverify.sharding._shards import split
from nlaverify.sharding.optimizer import shard_sizes
from nlaverify.tolerance import Tolerance, tolerance

__all__ = ["HEADS", "KINDS", "ZERO_ADAMW", "check_sharded"]

Args = tuple[np.ndarray, ...]
#: the heads of ``"attention_heads"``
HEADS = 4
#: the hyperparameters of ``"zero_adamw"`` (``max_norm``: the global-norm clipping)
ZERO_ADAMW = {"lr": 1e-2, "b1": 0.9, "b2": 0.999, "eps": 1e-8, "weight_decay": 0.1,
              "max_norm": 1.0}
#: Newton-Schulz's error amplification, the sum of Muon's |a_i| (as check_optimizer's bound)
_MUON_KAPPA = float(sum(abs(a) for a in _ns.MUON))


@dataclass(frozen=True)
class _Kind:
    inputs: Callable[[np.random.Generator], Args]
    reference: Callable[..., Any]
    #: (label, fn(args, shards) -> value[, axis_len]); shards the number of devices tried,
    #: every divisor of the bug's axis_len (default the kind's) above 1
    bugs: tuple[tuple[Any, ...], ...]
    axis_len: Callable[[Args], int]
    size: Callable[[Args], int]
    #: the tolerance ``tol(dtype, args)``; default two stages of length ``size``
    tol: Callable[[str, Args], Tolerance] | None = None


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


# --------------------------------------------------------------------------- attention, ring


def _heads_split(a: Args, s: int) -> tuple[list, list]:
    """The column widths of ``s`` devices' heads, and their head counts."""
    heads = shard_sizes(HEADS, s)
    d_k = a[1].shape[1] // HEADS
    return [h * d_k for h in heads], heads


def _heads_without_all_reduce(a: Args, s: int) -> Any:
    widths, heads = _heads_split(a, s)
    return _te.tensor_parallel_attention_without_all_reduce(
        _np(), a[0], *(split(_np(), w, widths, -1) for w in a[1:4]),
        split(_np(), a[4], widths, 0), heads, True)


def _ring_without_rescale(a: Args, s: int) -> Any:
    sizes = shard_sizes(a[0].shape[0], s)
    return _np().concat(_sq.ring_attention_without_rescale(
        _np(), *(split(_np(), x, sizes, 0) for x in a), causal=True), axis=0)


def _ring_stale(ascending: bool) -> Callable[[Args, int], Any]:
    """The stale-accumulator bug, the blocks arriving on the ring (own block first) or in
    their natural order (a sequential loop over the key blocks)."""
    def wrong(a: Args, s: int) -> Any:
        sizes = shard_sizes(a[0].shape[0], s)
        orders = [list(range(s))] * s if ascending else None
        return _np().concat(_sq.ring_attention_stale_accumulators(
            _np(), *(split(_np(), x, sizes, 0) for x in a), causal=True, orders=orders),
            axis=0)
    return wrong


def _attention_tol(dtype: str, a: Args) -> Tolerance:
    # three dependent stages (projections or block scores, the softmax sums, the merge or
    # W_O), the longest accumulation the model width or the sequence
    return tolerance(dtype, size=max(a[0].shape), depth=3)


KINDS["attention_heads"] = _Kind(
    lambda rng: (rng.standard_normal((6, 8)), *(rng.standard_normal((8, 8)) for _ in range(4))),
    lambda X, Wq, Wk, Wv, Wo: _sd.multihead_attention(_np(), X, Wq, Wk, Wv, Wo, HEADS, True),
    (("the all-reduce after the row-parallel W_O is missing (one device's heads alone)",
      _heads_without_all_reduce),),
    lambda a: HEADS, lambda a: a[0].shape[1], _attention_tol)
KINDS["ring_attention"] = _Kind(
    lambda rng: (rng.standard_normal((8, 4)) * 3, rng.standard_normal((8, 4)),
                 rng.standard_normal((8, 4))),
    lambda Q, K, V: _sd.attention(_np(), Q, K, V, True, None),
    (("a ring attention step without the rescale (the blocks' sums added at their own "
      "maxima, never multiplied by exp(m - m'))", _ring_without_rescale),
     ("a ring attention step without the rescale (the running maximum kept, but the sums "
      "already held never multiplied by exp(m - m'))", _ring_stale(False)),
     ("a blockwise attention loop without the rescale (the running maximum kept, but the "
      "sums already held never multiplied by exp(m - m'); blocks in their natural order)",
      _ring_stale(True))),
    lambda a: a[0].shape[0], lambda a: a[0].shape[0], _attention_tol)


# --------------------------------------------------------------------------- Muon, ZeRO


def _muon(G: np.ndarray) -> Any:
    return _ns.newton_schulz(_np(), G, _ns.MUON, 5, eps=1e-7)


def _muon_on_shards(axis: int) -> Callable[[Args, int], Any]:
    def wrong(a: Args, s: int) -> Any:
        return _np().concat(_op.newton_schulz_on_shards(
            _np(), split(_np(), a[0], shard_sizes(a[0].shape[axis], s), axis), axis,
            _ns.MUON, 5), axis=axis)
    return wrong


def _muon_global_norm_on_shards(axis: int) -> Callable[[Args, int], Any]:
    def wrong(a: Args, s: int) -> Any:
        G = a[0] / (_np().sqrt(_np().sum(a[0] * a[0])) + 1e-7)
        return _np().concat(_op.newton_schulz_on_shards(
            _np(), split(_np(), G, shard_sizes(G.shape[axis], s), axis), axis,
            _ns.MUON, 5, normalize=False), axis=axis)
    return wrong


def _muon_tol(dtype: str, a: Args) -> Tolerance:
    # check_optimizer's Muon model: 3 x 5 dependent products, normalisation and moment,
    # amplified by sum |a_i| (the quintic's cancelling terms)
    return tolerance(dtype, size=max(a[0].shape), depth=17, condition=_MUON_KAPPA)


KINDS["muon_update"] = _Kind(
    lambda rng: (rng.standard_normal((16, 8)),),
    _muon,
    (("Muon on a shard: needs the Gram all-reduce (each device orthogonalised its own rows "
      "of the long axis, not sum_s G_s^T G_s)", _muon_on_shards(-2)),
     ("Muon on a shard: needs the all-gather (each device orthogonalised its own columns of "
      "the short axis)", _muon_on_shards(-1), lambda a: a[0].shape[1]),
     ("Muon on a shard: needs the Gram all-reduce (G normalised by its global norm, but each "
      "device's Newton-Schulz run on its own rows)", _muon_global_norm_on_shards(-2))),
    lambda a: a[0].shape[0], lambda a: max(a[0].shape), _muon_tol)


def _adamw() -> _r.Rule:
    h = ZERO_ADAMW
    return _r.adamw(h["lr"], h["b1"], h["b2"], h["eps"], h["weight_decay"])


def _zero_adamw(W: np.ndarray, grads: np.ndarray, shards: int = 1,
                clip: Callable[..., Any] = _op.zero_clip_by_global_norm) -> Any:
    """The clipped AdamW steps with state and gradients on ``shards`` devices (the proved
    ZeRO update; one device: the unsharded rule)."""
    xp, rule, params = _np(), _adamw(), {"w": W}
    states = _op.zero_init(xp, rule, params, shards)
    for g in grads:
        pieces = clip(xp, _op.shard_params(xp, {"w": g}, shards), ZERO_ADAMW["max_norm"])
        u, states = _op.zero_update(xp, rule, _op.gather_params(xp, pieces), states, params)
        params = _r.apply_updates(xp, params, u)
    return params["w"]


def _zero_inputs(rng: np.random.Generator) -> Args:
    # per-step and per-row scales, so that the steps' clip factors differ and the shards'
    # norms differ from the global one (Adam is invariant to one constant scale)
    rows = np.linspace(0.3, 3.0, 8)[:, None]
    steps = np.array([0.5, 0.05, 0.3])[:, None, None]
    return rng.standard_normal((8, 6)), rng.standard_normal((3, 8, 6)) * rows * steps


KINDS["zero_adamw"] = _Kind(
    _zero_inputs,
    lambda W, grads: _zero_adamw(W, grads),
    (("the global-norm clipping done with each shard's own norm (not the all-reduced "
      "sum of squares)", lambda a, s: _zero_adamw(*a, s, _op.zero_clip_by_shard_norm)),),
    lambda a: a[0].shape[0], lambda a: a[0].size,
    lambda dtype, a: tolerance(dtype, size=a[0].size, depth=len(a[1])))


def check_sharded(fn: Callable[..., Any], kind: str, *, dtype: str = "float64",
                  seeds: int = 3, seed: int = 0) -> Any:
    r"""Check the user's sharded ``fn`` of ``kind`` (:data:`KINDS`, module docstring) on
    ``seeds`` seeded inputs against the unsharded reference, by the tolerance model of
    ``dtype`` (the accumulation length of the kind and its dependent stages: two for the
    per-shard computation and the merge; three for attention; Muon's 17 products amplified
    by :math:`\sum|a_i|`, as ``check_optimizer``'s bound; one per ZeRO step); where it
    diverges, a note names the counterexample it equals. Returns a
    :class:`~nlaverify.check.report.CheckReport` (one row per seed).

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
        tol = (tolerance(dtype, size=spec.size(args), depth=2) if spec.tol is None else
               spec.tol(dtype, args))
        row = compare_arrays(subject, f"{kind}, seed {k}", got, ref, tol)
        report.rows.append(row)
        if row.ok or bug is not None:
            continue
        bug = "unknown divergence"
        for label, wrong, *axis_len in spec.bugs:
            n_axis = (axis_len[0] if axis_len else spec.axis_len)(args)
            for shards in (s for s in range(2, n_axis + 1) if n_axis % s == 0):
                if tol.compare(got, np.asarray(wrong(args, shards), np.float64)).ok:
                    bug = f"{label}, with {shards} shards"
                    break
            if bug != "unknown divergence":
                break
        report.notes.append(f"your output equals {bug}" if bug != "unknown divergence" else
                            "your output matches none of the known sharding bugs")
    return report
