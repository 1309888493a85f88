r"""Data parallelism with padding: the gradient of a mean cross-entropy over a batch split
across devices (Baggag & Saad §3.1, §3.13.1; the batch identity of the loss).

The loss is the mean over the :math:`N = \sum_s N_s` targets that are not ignored,
device :math:`s` holding :math:`N_s` of them. For a linear head :math:`Z = XW` its gradient
is

.. math:: \nabla_W L = \frac{1}{\sum_s N_s}\sum_s X_s^\top \bigl(w_s\odot(P_s - Y_s)\bigr)
   = \frac{\sum_s G_s}{\sum_s N_s},

the all-reduce of the per-device *summed* gradients :math:`G_s` divided by the all-reduce
of the counts (two scalars' worth of extra communication). The common shortcut, the mean
over devices of per-device *means* :math:`\frac1S\sum_s G_s/N_s` (each device calling a
``reduction="mean"`` loss), is exact only when every :math:`N_s` is the same: with uneven
padding it weights a token of a sparsely filled shard more (and divides by 0 on a shard of
padding only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nlaverify.backends.base import Namespace
from nlaverify.errors import ShapeError
from nlaverify.ops.loss import IGNORE_INDEX, cross_entropy_vjp
from nlaverify.sharding._shards import _shape, all_reduce_sum, check_same_count, check_shards


def _unit(xp: Namespace, Z: Any) -> Any:
    """The scalar cotangent 1, in the dtype of ``Z``."""
    return xp.sum(xp.zeros_like(Z[..., :1, :1])) + 1


def token_count(targets: Any, ignore_index: int = IGNORE_INDEX) -> int:
    r""":math:`N_s = \#\{i : t_i \ne \varnothing\}`, an integer (targets are concrete)."""
    return int(np.count_nonzero(np.asarray(targets) != ignore_index))


def linear_head_gradient(xp: Namespace, X: Any, W: Any, targets: Any,
                         ignore_index: int = IGNORE_INDEX, reduction: str = "mean") -> Any:
    r""":math:`\nabla_W` of ``cross_entropy(X W, targets)`` for ``X`` ``(n, d)``, ``W``
    ``(d, V)``: :math:`X^\top\bar Z` with :math:`\bar Z` from
    :func:`~nlaverify.ops.loss.cross_entropy_vjp` (the unsharded reference when
    ``reduction="mean"``; one device's summed gradient :math:`G_s` when ``"sum"``)."""
    Z = xp.matmul(X, W)
    (dZ,) = cross_entropy_vjp(xp, _unit(xp, Z), Z, targets, ignore_index, reduction)
    return xp.matmul(xp.matrix_transpose(X), dZ)


def _check(op: str, X_shards: Any, W: Any, target_shards: Any) -> tuple[list, list]:
    X = check_shards(op, "X_shards", X_shards, 0)
    T = check_shards(op, "target_shards", target_shards, 0)
    check_same_count(op, X_shards=X, target_shards=T)
    for s, (x, t) in enumerate(zip(X, T, strict=True)):
        if _shape(t) != _shape(x)[:1]:
            raise ShapeError(f"{op}: argument 'target_shards': shard {s} has shape "
                             f"{_shape(t)}, expected ({_shape(x)[0]},) (one per row of "
                             f"X_shards[{s}])")
    if len(_shape(X[0])) != 2 or _shape(W)[:1] != _shape(X[0])[1:]:
        raise ShapeError(f"{op}: argument 'W': expected shape ({_shape(X[0])[-1]}, V), got "
                         f"{_shape(W)}")
    return X, T


def data_parallel_gradient(xp: Namespace, X_shards: Sequence[Any], W: Any,
                           target_shards: Sequence[Any],
                           ignore_index: int = IGNORE_INDEX) -> Any:
    r"""The data-parallel gradient of the mean cross-entropy (module docstring):
    :math:`\sum_s G_s / \sum_s N_s`, the all-reduce of per-device summed gradients over the
    all-reduce of their token counts.

    Args:
        xp: the array namespace.
        X_shards: each device's inputs ``(n_s, d)`` (batch axis sharded).
        W: the linear head ``(d, V)``, replicated.
        target_shards: each device's targets ``(n_s,)`` (``ignore_index``: padding).
    """
    X, T = _check("data_parallel_gradient", X_shards, W, target_shards)
    grads = [linear_head_gradient(xp, x, W, t, ignore_index, "sum")
             for x, t in zip(X, T, strict=True)]
    return all_reduce_sum(xp, grads) / sum(token_count(t, ignore_index) for t in T)


def data_parallel_gradient_per_shard_mean(xp: Namespace, X_shards: Sequence[Any], W: Any,
                                          target_shards: Sequence[Any],
                                          ignore_index: int = IGNORE_INDEX) -> Any:
    r"""A counterexample (the planted bug "loss averaged per shard"): the mean over the
    :math:`S` devices of each device's mean gradient, :math:`\frac1S\sum_s G_s/N_s`."""
    X, T = _check("data_parallel_gradient_per_shard_mean", X_shards, W, target_shards)
    means = [linear_head_gradient(xp, x, W, t, ignore_index, "mean")
             for x, t in zip(X, T, strict=True)]
    return all_reduce_sum(xp, means) / len(means)


__all__ = [
    "data_parallel_gradient",
    "data_parallel_gradient_per_shard_mean",
    "linear_head_gradient",
    "token_count",
]
