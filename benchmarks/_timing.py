"""Timing shared by the benchmark scripts (run as ``python benchmarks/<name>.py``, so this
directory is on ``sys.path``): a jitted call timed with ``block_until_ready``."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any


def progress(msg: str) -> None:
    """A progress line on stderr (the results go to stdout)."""
    print(msg, file=sys.stderr, flush=True)


def publish(text: str, out: Any, write: bool) -> None:
    """A benchmark's result: ``text`` on stdout and, with ``write``, in the file ``out``."""
    print(text)
    if write:
        out.write_text(text)
        progress(f"wrote {out}")


def best_time(f: Callable, *args: Any, repeats: int) -> tuple[float, float]:
    """(compile + first call, best of ``repeats`` later calls), in seconds."""
    import jax

    t0 = time.perf_counter()
    jax.block_until_ready(f(*args))
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        best = min(best, time.perf_counter() - t0)
    return first, best
