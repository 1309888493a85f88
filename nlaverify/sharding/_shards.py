r"""The shard model shared by :mod:`nlaverify.sharding`: a sharded array is a list of its
pieces (one per device, in mesh order), and a collective is a function of that list.

* :func:`all_reduce_sum` — every device ends with :math:`\sum_s x_s` (``psum``);
* :func:`all_gather` — every device ends with the concatenation of the pieces
  (``all_gather(..., tiled=True)``).

On the exact SymPy namespace these are the sums and concatenations a proof sees; on JAX
they are :func:`jax.lax.psum` and :func:`jax.lax.all_gather` inside ``shard_map``
(:mod:`nlaverify.sharding.spmd`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, ShapeError


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in getattr(x, "shape", ()))


def check_shards(op: str, name: str, shards: Any, axis: int | None) -> list[Any]:
    r"""Validate a list of shards: nonempty, every piece an array of the same rank, the same
    shape on every axis but the shard ``axis`` (``None``: the same shape on all axes), and
    no empty piece. Returns the pieces as a list.

    Raises:
        ArgumentError: not a sequence, or no shard at all.
        ShapeError: pieces of mismatched rank or shape, or an empty piece.
    """
    if isinstance(shards, str | bytes) or not isinstance(shards, Sequence):
        raise ArgumentError(f"{op}: argument {name!r}: expected a sequence of arrays, one per "
                            f"shard, got {type(shards).__name__}")
    pieces = list(shards)
    if not pieces:
        raise ArgumentError(f"{op}: argument {name!r}: expected at least one shard, got none")
    ref = _shape(pieces[0])
    if not ref:
        raise ShapeError(f"{op}: argument {name!r}: shard 0 is a scalar; expected arrays")
    ax = None if axis is None else axis % len(ref)
    for s, x in enumerate(pieces):
        shape = _shape(x)
        same = len(shape) == len(ref) and all(
            a == b for i, (a, b) in enumerate(zip(shape, ref, strict=True)) if i != ax)
        if not same:
            where = "on every axis" if ax is None else f"except along axis {axis}"
            raise ShapeError(f"{op}: argument {name!r}: shard {s} has shape {shape}, expected "
                             f"the shape {ref} of shard 0 {where}")
        if 0 in shape:
            raise ShapeError(f"{op}: argument {name!r}: shard {s} is empty (shape {shape})")
    return pieces


def check_same_count(op: str, **named: list[Any]) -> int:
    """The lists of shards ``named`` all have the same number of pieces; returns it."""
    counts = {k: len(v) for k, v in named.items()}
    if len(set(counts.values())) != 1:
        raise ArgumentError(f"{op}: the shard lists must have one piece per device each, got "
                            + ", ".join(f"{k}: {n}" for k, n in counts.items()))
    return next(iter(counts.values()))


def offsets(sizes: Sequence[int]) -> list[int]:
    """The global offset of each shard: the running sum of the sizes before it."""
    out, lo = [], 0
    for s in sizes:
        out.append(lo)
        lo += s
    return out


def all_reduce_sum(xp: Namespace, parts: Sequence[Any]) -> Any:
    r"""The all-reduce: :math:`\sum_s x_s`, summed in device order (``psum``)."""
    total = parts[0]
    for x in parts[1:]:
        total = total + x
    return total


def all_gather(xp: Namespace, shards: Sequence[Any], axis: int = 0) -> Any:
    """The all-gather: the shards concatenated along ``axis`` (``all_gather(tiled=True)``)."""
    return xp.concat(list(shards), axis=axis)


def split(xp: Namespace, x: Any, sizes: Sequence[int], axis: int = 0) -> list[Any]:
    """The shards of ``x`` along ``axis``, of the given sizes (which must sum to its length)."""
    n = _shape(x)[axis]
    if not sizes or any(int(s) < 1 for s in sizes) or sum(sizes) != n:
        raise ArgumentError(f"split: argument 'sizes': expected positive shard sizes summing "
                            f"to {n}, got {tuple(sizes)}")
    index = [slice(None)] * len(_shape(x))
    out = []
    for lo, s in zip(offsets(sizes), sizes, strict=True):
        index[axis] = slice(lo, lo + s)
        out.append(x[tuple(index)])
    return out
