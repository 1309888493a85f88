"""How ``check_op`` draws its cases: hypothesis searches the sizes, batch axes and values
for a failing case and shrinks it; a kernel compiled per shape (JAX) draws them in a few
fixed shapes (:func:`shape_buckets`) so that it compiles a handful of programs, not one per
case. Seed: Baggag & Saad §3 (the ops whose cases these are).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from nlaverify.cases.inputs import OpCaseInput, drawn_input
from nlaverify.check.op_subject import _Settings
from nlaverify.check.report import CheckError, Row
from nlaverify.ops.registry import OpSpec

__all__ = ["COMPILED", "SHAPE_BUCKETS", "search", "shape_buckets"]


#: frameworks that compile a kernel once per shape (JAX's jit): their drawn cases come in
#: :data:`SHAPE_BUCKETS` fixed shapes
COMPILED = ("jax",)
#: the shapes of a compiled kernel's drawn cases: the smallest sizes, the largest with the
#: deepest batch, and two drawn between (each case still draws its own values)
SHAPE_BUCKETS = 4


def shape_buckets(spec: OpSpec, ranges: Mapping[str, tuple[int, int]],
                  choices: list[tuple[int, ...]] | None, seed: int,
                  count: int = SHAPE_BUCKETS) -> list[tuple[dict[str, int], tuple[int, ...]]]:
    """The ``count`` shapes (sizes, batch) the drawn cases of a compiled kernel take: the
    smallest sizes without a batch (where shrinking ends), the largest with the deepest
    batch, and the rest drawn from the ranges with ``seed``. A kernel compiled per shape
    then compiles ``count`` times per derivative instead of once per case: a JAX check
    drew 13 shapes in 12 cases and spent 3.2 s of its 4.7 s compiling them."""
    rng = random.Random(seed)
    fix = spec.fix_sizes or (lambda z: z)
    batches = choices or [(), (2,), (3, 2)]
    out = [(fix({k: lo for k, (lo, _) in ranges.items()}), min(batches, key=len)),
           (fix({k: hi for k, (_, hi) in ranges.items()}), max(batches, key=len))]
    tries = 0
    while len(out) < count and tries < 8 * count:
        tries += 1
        pick = (fix({k: rng.randint(lo, hi) for k, (lo, hi) in ranges.items()}),
                rng.choice(batches))
        if pick not in out:
            out.append(pick)
    return out


def search(s: _Settings, spec: OpSpec, ranges: Mapping[str, tuple[int, int]],
           choices: list[tuple[int, ...]] | None, examples: int, seed: int, dtype: str,
           keep: Callable[[list[Row]], None],
           run_case: Callable[[_Settings, OpCaseInput], list[Row]]) -> OpCaseInput | None:
    """Draw ``examples`` cases with hypothesis; return the minimal failing one (shrunk), or
    ``None`` when every case passed (their rows go to ``keep``); ``run_case`` gives a case's
    rows. A compiled kernel
    (:data:`COMPILED`) draws its cases in :func:`shape_buckets`; a failure found there is
    shrunk again over every size up to the failing one (compiling only on a failure)."""
    from hypothesis import strategies as st

    from nlaverify.cases.drawn import BATCHES, size_strategy

    errors: list[BaseException] = []
    if s.framework in COMPILED:
        buckets = shape_buckets(spec, ranges, choices, seed)
        strategy = st.tuples(st.sampled_from(buckets), st.integers(0, 2**31 - 1)).map(
            lambda t: (t[0][0], t[0][1], t[1]))
        found = _find(s, spec, strategy, examples, seed, dtype, keep, errors, run_case)
        if found is None:
            return None
        sz, b, _ = found
        capped = {k: (lo, max(lo, min(hi, sz.get(k, hi)))) for k, (lo, hi) in ranges.items()}
        smaller = st.tuples(size_strategy(spec, capped),
                            st.sampled_from(sorted({(), b}, key=len)),
                            st.integers(0, 2**31 - 1))
        again = _find(s, spec, smaller, examples, seed, dtype, lambda rows: None, errors,
                      run_case)
        found = again if again is not None else found
    else:
        batches = BATCHES if choices is None else st.sampled_from(choices)
        strategy = st.tuples(size_strategy(spec, dict(ranges)), batches,
                             st.integers(0, 2**31 - 1))
        found = _find(s, spec, strategy, examples, seed, dtype, keep, errors, run_case)
        if found is None:
            return None
    sz, b, value_seed = found
    return drawn_input(spec, sz, b, value_seed ^ seed, dtype, spec.static)


def _find(s: _Settings, spec: OpSpec, strategy: Any, examples: int, seed: int, dtype: str,
          keep: Callable[[list[Row]], None], errors: list[BaseException],
          run_case: Callable[[_Settings, OpCaseInput], list[Row]]
          ) -> tuple[dict[str, int], tuple[int, ...], int] | None:
    """The minimal draw of ``strategy`` (sizes, batch, value seed) whose case fails, or
    ``None``; a bad output of the user's function stops the search and is raised."""
    from hypothesis import HealthCheck, Phase, find, settings
    from hypothesis.errors import NoSuchExample

    def fails(draw: tuple[dict[str, int], tuple[int, ...], int]) -> bool:
        sz, b, value_seed = draw
        try:
            case = drawn_input(spec, sz, b, value_seed ^ seed, dtype, spec.static)
        except CheckError:
            return False  # a value beyond the dtype's range: not a case of this dtype
        try:
            rows = run_case(s, case)
        except CheckError as exc:  # bad output of the user's function: stop and say so
            errors.append(exc)
            return True
        bad = any(r.verdict == "fail" for r in rows)
        if not bad:
            keep(rows)
        return bad

    cfg = settings(max_examples=examples, deadline=None, database=None,
                   phases=[Phase.generate, Phase.shrink],
                   suppress_health_check=list(HealthCheck))
    try:
        found = find(strategy, fails, settings=cfg, random=random.Random(seed))
    except NoSuchExample:
        return None
    if errors:
        raise errors[-1]
    return found
