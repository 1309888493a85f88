r"""Magnitude pruning (unstructured and N:M) and its exact Frobenius error.

Baggag & Saad §4.1 (pruning removes the connections that matter least, then retrains the
rest; Han et al. 2015). Magnitude pruning zeroes the :math:`\lfloor sN\rfloor` entries of
smallest :math:`|w|` (:math:`N` entries, sparsity :math:`s`; a float :math:`s` is read as
the decimal it prints as, so :math:`s = 0.29` prunes 29 of 100, not the 28 that
:math:`\lfloor 0.29 \cdot 100\rfloor` gives in binary), ties broken by index (the lower
index is pruned first). With the 0/1 mask :math:`M`, :math:`P(W) = M \odot W` and

.. math:: \|W - P(W)\|_F^2 = \sum_{M_{ij} = 0} w_{ij}^2,

which is the smallest error of any mask with as many zeros: magnitude pruning is the best
:math:`s`-sparse approximation in the Frobenius norm. N:M (structured) pruning keeps the
:math:`n` largest of every :math:`m` consecutive entries along ``axis`` (2:4 on sparse tensor
cores).
"""

from __future__ import annotations

import numbers
from fractions import Fraction
from typing import Any

import numpy as np

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, NonFiniteError, ShapeError
from nlaverify.lowrank import _xp

__all__ = ["magnitude_prune", "nm_prune", "pruned_count", "pruning_error"]


def pruned_count(size: int, sparsity: Any) -> int:
    r""":math:`\lfloor s N\rfloor`, the number of entries pruned at sparsity ``sparsity``
    :math:`\in [0, 1]`, computed exactly: a ``fractions.Fraction`` (or integer) as it is, a
    float as the decimal it prints as (``Fraction(str(s))``: :math:`0.29 \to 29/100`; its
    binary value is a little below, and the floor of it would prune 28 of 100)."""
    if isinstance(sparsity, bool) or not isinstance(sparsity, numbers.Real) or not (
            0 <= sparsity <= 1):
        raise ArgumentError(f"magnitude_prune: argument 'sparsity': expected a number in "
                            f"[0, 1], got {sparsity!r}")
    exact = sparsity if isinstance(sparsity, numbers.Rational) else Fraction(str(sparsity))
    return int(exact * size // 1)


def _check_finite(fn: str, xp: Namespace, W: Any) -> None:
    if not xp.object_arrays and xp.is_concrete(W) and not bool(xp.all(xp.isfinite(W))):
        raise NonFiniteError(f"{fn}: argument 'W': expected finite values, got inf or nan")


def _ranks(xp: Namespace, a: Any, axis: int = -1) -> Any:
    """The rank of each entry of ``a`` along ``axis`` (0 = smallest; stable)."""
    return _xp.argsort(xp, _xp.argsort(xp, a, axis=axis), axis=axis)


def _as_mask(xp: Namespace, keep: Any, like: Any) -> Any:
    if xp.object_arrays:
        return xp.asarray(np.asarray(keep).astype(np.int64))
    return xp.astype(keep, like.dtype)


def magnitude_prune(xp: Namespace, W: Any, sparsity: Any) -> tuple[Any, Any]:
    r"""Unstructured magnitude pruning of the tensor ``W`` at sparsity ``sparsity``: zero its
    :math:`\lfloor sN\rfloor` smallest entries in absolute value (ties: lower flat index
    first). Returns ``(M * W, M)``, the mask ``M`` in ``W``'s dtype (0 pruned, 1 kept).
    Baggag & Saad §4.1.

    Raises:
        ShapeError: ``W`` not an array.
        ArgumentError: ``sparsity`` not a number in :math:`[0, 1]`.
        NonFiniteError: ``W`` holds inf or nan (a NaN has no magnitude rank).
    """
    if not hasattr(W, "shape"):
        raise ShapeError(f"magnitude_prune: argument 'W': expected an array, got "
                         f"{type(W).__name__}")
    _check_finite("magnitude_prune", xp, W)
    size = int(np.prod(W.shape))
    n_pruned = pruned_count(size, sparsity)
    flat = xp.reshape(_xp.absolute(xp, W), (size,))
    keep = xp.reshape(_ranks(xp, flat) >= n_pruned, tuple(W.shape))
    M = _as_mask(xp, keep, W)
    return M * W, M


def nm_prune(xp: Namespace, W: Any, n: int, m: int, axis: int = 0) -> tuple[Any, Any]:
    r"""N:M structured pruning: in every group of ``m`` consecutive entries along ``axis``
    (the input dimension of :math:`W \in \mathbb R^{d_{in}\times d_{out}}` by default)
    keep the ``n`` largest in absolute value (ties: the lower index is pruned). Sparsity
    :math:`1 - n/m`. Returns ``(M * W, M)``. Baggag & Saad §4.1.

    Raises:
        ArgumentError: ``n``, ``m`` not integers with :math:`1 \le n \le m`; ``axis`` out
            of range.
        ShapeError: ``W`` not an array of at least one dimension, or its ``axis`` not a
            multiple of ``m``.
        NonFiniteError: ``W`` holds inf or nan.
    """
    for name, v in (("n", n), ("m", m)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ArgumentError(f"nm_prune: argument '{name}': expected an integer >= 1, got "
                                f"{v!r}")
    if n > m:
        raise ArgumentError(f"nm_prune: arguments 'n', 'm': expected n <= m, got {n}:{m}")
    if not hasattr(W, "shape") or len(W.shape) < 1:
        raise ShapeError(f"nm_prune: argument 'W': expected an array of at least one "
                         f"dimension, got {type(W).__name__} of shape "
                         f"{tuple(getattr(W, 'shape', ()))}")
    shape = tuple(W.shape)
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) or not (
            -len(shape) <= axis < len(shape)):
        raise ArgumentError(f"nm_prune: argument 'axis': expected an integer in "
                            f"[{-len(shape)}, {len(shape) - 1}] for shape {shape}, got {axis!r}")
    _check_finite("nm_prune", xp, W)
    ax = int(axis) % len(shape)
    if shape[ax] % m:
        raise ShapeError(f"nm_prune: argument 'W': expected its axis {axis} (length "
                         f"{shape[ax]}) to be a multiple of m = {m}")
    moved = xp.permute_dims(W, (*[i for i in range(len(shape)) if i != ax], ax))
    grouped = xp.reshape(moved, (*moved.shape[:-1], shape[ax] // m, m))
    keep = _ranks(xp, _xp.absolute(xp, grouped)) >= m - n
    M = _as_mask(xp, keep, W)
    M = xp.reshape(M, tuple(moved.shape))
    inv = list(range(len(shape) - 1))
    inv.insert(ax, len(shape) - 1)
    M = xp.permute_dims(M, tuple(inv))
    return M * W, M


def pruning_error(xp: Namespace, W: Any, M: Any) -> Any:
    r""":math:`\|W - M\odot W\|_F^2 = \sum_{M_{ij}=0} w_{ij}^2`, the sum of the pruned
    squares (``M`` a 0/1 mask)."""
    R = (1 - M) * W
    return xp.sum(R * R)
