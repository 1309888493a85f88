"""The drawn cases of an op: :func:`make_case` for one seed, :func:`op_cases` the strategy.

* :func:`op_cases`: sizes, inputs and a cotangent for any op of
  :data:`nlaverify.ops.registry.OPS`, the feed of every generic op test, as an
  :class:`OpCase` (:func:`make_case` for one seed);
* :data:`seeds`: the integers that seed every strategy's NumPy generator.

Values come from a NumPy generator seeded by a drawn integer: generic (no
accidental ties, no exact zeros at kinks), reproducible, and shrinkable through
sizes and seed. :mod:`nlaverify.strategies` and :mod:`nlaverify.cases` re-export
everything here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from nlaverify.cases.rounding import exact_in
from nlaverify.ops.registry import OPS, OpSpec, fixed_routing_mask

__all__ = ["BATCHES", "OpCase", "make_case", "op_cases", "seeds", "size_strategy"]

#: the integers that seed the NumPy generators of the strategies below
seeds = st.integers(min_value=0, max_value=2**32 - 1)


@dataclass(frozen=True)
class OpCase:
    """One test case of an op: sizes, positional arguments, static keyword arguments,
    and a cotangent ``G`` of the output's shape (all float64 NumPy, tokens int64)."""

    spec: OpSpec
    sizes: dict[str, int]
    args: list[Any]
    static: dict[str, Any]
    cotangent: np.ndarray

    def real_indices(self) -> list[int]:
        return [k for k, a in enumerate(self.spec.args) if a.kind == "real"]

    def __repr__(self) -> str:  # short, for hypothesis' falsifying examples
        return f"OpCase({self.spec.name}, sizes={self.sizes})"


def make_case(spec: OpSpec, sizes: dict[str, int], seed: int, scale: float = 1.0, *,
              batch: tuple[int, ...] = (), dtype: str = "float64") -> OpCase:
    """Build an :class:`OpCase` deterministically from sizes and a seed.

    ``batch``: leading axes of the arguments with a sequence axis ``n`` (and of the output
    and cotangent), e.g. ``(B,)`` or ``(B, H)``; shared parameters keep their shape (the
    batching family proves the ops on such batches). ``dtype``: real values (arguments and
    cotangent) exactly representable in it (:func:`exact_in`)."""
    from nlaverify.backends import get_namespace

    rng = np.random.default_rng(seed)
    batch = tuple(int(b) for b in batch)
    args: list[Any] = []
    for a in spec.args:
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in a.dims)
        if batch and a.per_sequence:
            shape = (*batch, *shape)
        if a.kind == "tokens":
            toks = rng.integers(0, sizes["V"], size=shape, dtype=np.int64)
            if a.ignore is not None and shape[-1] > 1:  # pad some targets (never position 0)
                pad = rng.random(shape) < 1 / 3
                pad[..., 0] = False
                toks[pad] = spec.static.get("ignore_index", a.ignore)  # the op's in force
            args.append(toks)
        elif a.kind == "mask":
            args.append(np.broadcast_to(fixed_routing_mask(*shape[-2:]), shape).copy())
        else:  # real and fixed arrays
            args.append(exact_in(scale * rng.standard_normal(shape), dtype))
    static = dict(spec.static)
    out = spec.forward(get_namespace("numpy"), *args, **static)
    G = exact_in(rng.standard_normal(np.shape(out)), dtype)
    return OpCase(spec, dict(sizes), args, static, G)


def _sizes(spec: OpSpec, shapes: dict[str, Any] | None = None
           ) -> st.SearchStrategy[dict[str, int]]:
    ranges = dict(spec.size_ranges)
    for k, v in (shapes or {}).items():
        if k not in ranges:
            raise ValueError(f"op_cases: argument 'shapes': op {spec.name!r} has no dimension "
                             f"{k!r}; expected some of {', '.join(ranges)}")
        ranges[k] = (v, v) if isinstance(v, int) else tuple(v)
    return size_strategy(spec, ranges)


def size_strategy(spec: OpSpec, ranges: dict[str, tuple[int, int]]
                  ) -> st.SearchStrategy[dict[str, int]]:
    """Strategy: a size per named dimension of ``spec``, each in its range ``(lo, hi)``,
    then made consistent by the op's ``fix_sizes`` (e.g. heads dividing the width)."""
    sizes = st.fixed_dictionaries({k: st.integers(lo, hi) for k, (lo, hi) in ranges.items()})
    return sizes.map(spec.fix_sizes) if spec.fix_sizes else sizes


#: the leading axes ``op_cases(batch=True)`` draws: none, a batch, a batch and heads
BATCHES = st.one_of(st.just(()), st.tuples(st.integers(1, 3)),
                    st.tuples(st.integers(1, 3), st.integers(1, 3)))


def op_cases(op: str | OpSpec, scale: float = 1.0, *,
             shapes: dict[str, int | tuple[int, int]] | None = None,
             batch: bool | tuple[int, ...] = False,
             dtype: str = "float64") -> st.SearchStrategy[OpCase]:
    """Strategy: an :class:`OpCase` of ``op`` with sizes in its ``size_ranges`` (or
    ``shapes``: a size or a range ``(lo, hi)`` per named dimension), leading batch axes
    (``batch=True`` draws ``()``, ``(B,)`` or ``(B, H)`` with ``B, H <= 3``; a tuple fixes
    them) and values exactly representable in ``dtype``. For a kernel in one call, see
    :func:`nlaverify.check.check_op`, which draws from the same cases. Bad arguments raise
    at once (not at the first draw)."""
    spec = OPS[op] if isinstance(op, str) else op
    sizes = _sizes(spec, shapes)
    exact_in(np.zeros(1), dtype)  # an unknown dtype is named now
    leads = BATCHES if batch is True else st.just(tuple(batch) if batch else ())
    return _op_cases(spec, sizes, leads, scale, dtype)


@st.composite
def _op_cases(draw: st.DrawFn, spec: OpSpec, sizes: st.SearchStrategy[dict[str, int]],
              leads: st.SearchStrategy[tuple[int, ...]], scale: float, dtype: str) -> OpCase:
    return make_case(spec, draw(sizes), draw(seeds), scale, batch=draw(leads), dtype=dtype)
