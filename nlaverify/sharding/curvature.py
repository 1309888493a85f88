r"""K-FAC factors under data parallelism (Martens & Grosse 2015; Baggag & Saad §5.3; the
distributed K-FAC of Ba, Grosse & Martens 2017): the Kronecker factors of a linear layer are
averages and sums over positions, so with the batch split across devices they are
all-reduced sums.

In the *expand* mode of :func:`~nlaverify.curvature.kfac.kfac_factors`,
:math:`A_f = \frac1{K}\sum_{i} a_ia_i^\top` over the :math:`K` kept positions and
:math:`G_f = \sum_{s,i} g_{si}g_{si}^\top`; in the *reduce* mode :math:`A_f = \frac1N
\sum_n \bar a_n\bar a_n^\top` over the :math:`N` sequences. Device :math:`d` holding
:math:`K_d` of the positions (:math:`N_d` of the sequences) computes its own factors
:math:`(A_d, G_d)`, and

.. math:: A_f = \frac{\sum_d K_d A_d}{\sum_d K_d},\qquad G_f = \sum_d G_d :

the all-reduce of the per-device *sums* :math:`K_dA_d` over the all-reduced count, the
same lesson as the data-parallel gradient (:mod:`nlaverify.sharding.data`); the plain mean
of per-device factors :math:`\frac1D\sum_d A_d` is wrong whenever the counts differ
(uneven padding). The output cotangents :math:`g` are those of the global loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nlaverify.backends.base import Namespace
from nlaverify.curvature import kfac as _kf
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.sharding._shards import _shape, all_reduce_sum, check_same_count, check_shards


def _local(op: str, xp: Namespace, A_shards: Any, G_shards: Any, mask_shards: Any,
           mode: str) -> tuple[list[tuple[Any, Any]], list[int]]:
    A = check_shards(op, "A_shards", A_shards, 0)
    G = check_shards(op, "G_shards", G_shards, 1)
    masks = [None] * len(A) if mask_shards is None else check_shards(op, "mask_shards",
                                                                     mask_shards, 0)
    check_same_count(op, A_shards=A, G_shards=G, mask_shards=masks)
    if len(_shape(A[0])) != 3:
        raise ShapeError(f"{op}: argument 'A_shards': expected (N_d, R, d_in) per device, got "
                         f"shape {_shape(A[0])}")
    if mode not in _kf.MODES:
        raise ArgumentError(f"{op}: argument 'mode': expected one of {', '.join(_kf.MODES)}, "
                            f"got {mode!r}")
    factors = [_kf.kfac_factors(xp, a, g, mode=mode, mask=m)
               for a, g, m in zip(A, G, masks, strict=True)]
    if mode == "reduce":
        counts = [_shape(a)[0] for a in A]
    else:
        counts = [int(np.prod(_shape(a)[:2])) if m is None else int(np.sum(np.asarray(m)))
                  for a, m in zip(A, masks, strict=True)]
    return factors, counts


def data_parallel_kfac_factors(xp: Namespace, A_shards: Sequence[Any], G_shards: Sequence[Any],
                               mask_shards: Sequence[Any] | None = None,
                               mode: str = "expand") -> tuple[Any, Any]:
    r"""The K-FAC factors of the whole batch from each device's (module docstring):
    :math:`(\sum_d K_dA_d/\sum_d K_d,\ \sum_d G_d)`.

    Args:
        xp: the array namespace.
        A_shards: each device's layer inputs ``(N_d, R, d_in)`` (sequences sharded).
        G_shards: each device's output cotangents ``(S, N_d, R, d_out)``.
        mask_shards: each device's 0/1 mask ``(N_d, R)`` (padding), or ``None``.
        mode: ``"expand"`` or ``"reduce"`` (:func:`~nlaverify.curvature.kfac.kfac_factors`).
    """
    factors, counts = _local("data_parallel_kfac_factors", xp, A_shards, G_shards,
                             mask_shards, mode)
    A_f = all_reduce_sum(xp, [f[0] * k for f, k in zip(factors, counts, strict=True)])
    return A_f / sum(counts), all_reduce_sum(xp, [f[1] for f in factors])


def data_parallel_kfac_factors_per_shard_mean(
    xp: Namespace, A_shards: Sequence[Any], G_shards: Sequence[Any],
    mask_shards: Sequence[Any] | None = None, mode: str = "expand",
) -> tuple[Any, Any]:
    r"""A counterexample: :math:`A_f` as the plain mean of the devices' factors,
    :math:`\frac1D\sum_d A_d` (exact only when every :math:`K_d` is the same)."""
    factors, _ = _local("data_parallel_kfac_factors_per_shard_mean", xp, A_shards, G_shards,
                        mask_shards, mode)
    A_f = all_reduce_sum(xp, [f[0] for f in factors]) / len(factors)
    return A_f, all_reduce_sum(xp, [f[1] for f in factors])


__all__ = ["data_parallel_kfac_factors", "data_parallel_kfac_factors_per_shard_mean"]
