r"""Sequence (context) parallelism: ring attention (Liu et al. 2023, "Ring Attention with
Blockwise Transformers"), the online softmax of Milakov & Gimelshein 2018 across devices.

Device :math:`i` holds the query block :math:`Q_i` and, in turn, every key/value block
:math:`(K_j, V_j)` as they travel around the ring (device :math:`i` receives block
:math:`j = i - r \bmod S` at step :math:`r`). For each arrival it computes the block
statistics :math:`(m_{ij}, \ell_{ij}, O_{ij})` of
:func:`~nlaverify.ops.online_softmax.block_statistics` (causal masks by *global*
positions) and merges them into its running state with
:func:`~nlaverify.ops.online_softmax.merge_statistics`:

.. math:: m' = \max(m, m_{ij}),\quad \ell' = e^{m - m'}\ell + e^{m_{ij} - m'}\ell_{ij},
   \quad O' = e^{m - m'}O + e^{m_{ij} - m'}O_{ij} ,

and finally :math:`A_i = O/\ell` (Baggag & Saad §3.4.2, §3.4.4). The merge is associative
and commutative (identity ``online_softmax_merge``), so every order of arrival gives the
full (causal) attention: identity ``ring_attention_any_arrival_order``. Dropping the
rescale factors :math:`e^{m - m'}` (:func:`ring_attention_without_rescale`) is wrong as
soon as two blocks' maxima differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.ops import online_softmax as _os
from nlaverify.sharding._shards import _shape, check_same_count, check_shards, offsets


def ring_order(n_shards: int, device: int) -> list[int]:
    r"""The order in which ``device`` receives the key/value blocks on a ring: its own
    first, then :math:`i-1, i-2, \dots \pmod S`."""
    return [(device - r) % n_shards for r in range(n_shards)]


def _merge_without_rescale(xp: Namespace, a: _os.Statistics, b: _os.Statistics
                           ) -> _os.Statistics:
    """The planted bug: the accumulators added at their own shifts, never rescaled."""
    return (a[0], *(x + y for x, y in zip(a[1:], b[1:], strict=True)))


def _merge_stale_accumulators(xp: Namespace, a: _os.Statistics, b: _os.Statistics
                              ) -> _os.Statistics:
    """The common form of the bug: the running maximum kept and the arriving block put at
    it, but the accumulators already held never multiplied by :math:`e^{m - m'}`."""
    (m_a, *acc_a), (m_b, *acc_b) = a, b
    shift = xp.stability_shift(xp.concat([m_a, m_b], axis=-1), -1)
    beta = xp.exp(m_b - shift)
    return (shift, *(x + beta * y for x, y in zip(acc_a, acc_b, strict=True)))


def _check(op: str, Q_shards: Any, K_shards: Any, V_shards: Any,
           orders: Sequence[Sequence[int]] | None) -> tuple[list, list, list, list]:
    Q = check_shards(op, "Q_shards", Q_shards, -2)
    K = check_shards(op, "K_shards", K_shards, -2)
    V = check_shards(op, "V_shards", V_shards, -2)
    n = check_same_count(op, Q_shards=Q, K_shards=K, V_shards=V)
    for s, (q, k, v) in enumerate(zip(Q, K, V, strict=True)):
        if _shape(k)[-2] != _shape(v)[-2] or _shape(q)[-1] != _shape(k)[-1]:
            raise ShapeError(f"{op}: shard {s}: Q {_shape(q)}, K {_shape(k)} and V "
                             f"{_shape(v)} do not match (Q, K share d_k; K, V share n)")
    if orders is None:
        orders = [ring_order(n, i) for i in range(n)]
    orders = [list(o) for o in orders]
    if len(orders) != n or any(sorted(o) != list(range(n)) for o in orders):
        raise ArgumentError(f"{op}: argument 'orders': expected one permutation of "
                            f"0..{n - 1} per query shard, got {orders}")
    return Q, K, V, orders


def ring_attention(xp: Namespace, Q_shards: Sequence[Any], K_shards: Sequence[Any],
                   V_shards: Sequence[Any], *, causal: bool = False,
                   orders: Sequence[Sequence[int]] | None = None,
                   rescale: bool | str = True) -> list[Any]:
    r"""Ring attention (module docstring): each device's output block :math:`A_i`.

    Args:
        xp: the array namespace.
        Q_shards, K_shards, V_shards: the sequence blocks ``(*, n_i, d_k)``,
            ``(*, n_j, d_k)``, ``(*, n_j, d_v)`` of device :math:`i` / :math:`j`, in order.
        causal: query at global position :math:`p` sees keys at positions :math:`\le p`.
        orders: for each query block, the order in which the key/value blocks arrive
            (default :func:`ring_order`).
        rescale: ``False`` plants the bug of :func:`ring_attention_without_rescale`,
            ``"stale"`` that of :func:`ring_attention_stale_accumulators`.
    """
    Q, K, V, orders = _check("ring_attention", Q_shards, K_shards, V_shards, orders)
    q_lo = offsets([_shape(q)[-2] for q in Q])
    k_lo = offsets([_shape(k)[-2] for k in K])
    merges = {True: _os.merge_statistics, False: _merge_without_rescale,
              "stale": _merge_stale_accumulators}
    if rescale not in merges:
        raise ArgumentError(f"ring_attention: argument 'rescale': expected True, False or "
                            f"'stale', got {rescale!r}")
    merge = merges[rescale]
    out = []
    for i, q in enumerate(Q):
        q_hi = q_lo[i] + _shape(q)[-2]  # block_scores places queries at q_hi - n_q + row
        state = None
        for j in orders[i]:
            S = _os.block_scores(xp, q, K[j], k_lo[j], q_hi, causal)
            st = _os.block_statistics(xp, S, V[j])
            state = st if state is None else merge(xp, state, st)
        out.append(_os.finalize_statistics(xp, state))
    return out


def ring_attention_without_rescale(xp: Namespace, Q_shards: Sequence[Any],
                                   K_shards: Sequence[Any], V_shards: Sequence[Any], *,
                                   causal: bool = False,
                                   orders: Sequence[Sequence[int]] | None = None) -> list[Any]:
    r"""A counterexample (the planted bug "no rescale"): the ring step adds
    :math:`\ell_{ij}` and :math:`O_{ij}` at their own shifts, without the factors
    :math:`e^{m - m'}`."""
    return ring_attention(xp, Q_shards, K_shards, V_shards, causal=causal, orders=orders,
                          rescale=False)


def ring_attention_stale_accumulators(xp: Namespace, Q_shards: Sequence[Any],
                                      K_shards: Sequence[Any], V_shards: Sequence[Any], *,
                                      causal: bool = False,
                                      orders: Sequence[Sequence[int]] | None = None
                                      ) -> list[Any]:
    r"""A counterexample (the usual way to forget the rescale): the running maximum
    :math:`m'` kept and each arriving block put at it, but :math:`\ell` and :math:`O` already
    accumulated never multiplied by :math:`e^{m - m'}`."""
    return ring_attention(xp, Q_shards, K_shards, V_shards, causal=causal, orders=orders,
                          rescale="stale")


__all__ = ["ring_attention", "ring_attention_stale_accumulators",
           "ring_attention_without_rescale", "ring_order"]
