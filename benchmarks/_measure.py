r"""Time and peak memory of one compiled JAX case, for the benchmark scripts (run as
``python benchmarks/<name>.py``, so this directory is on ``sys.path``).

:func:`measure` compiles once (the compilation timed apart), skips a case whose buffers exceed
the budget, else reports the best of several calls (``block_until_ready``) and the peak memory
two ways: XLA's buffer assignment :math:`\mathrm{temp} + \mathrm{output} + \mathrm{argument} -
\mathrm{alias}` (:func:`xla_bytes`) and the growth of the resident-set peak during one call
(:func:`rss_peak_growth`: Linux ``clear_refs`` / ``VmHWM``, glibc's mmap threshold lowered for
that call). :func:`memory_budget` caps the budget at a third of the memory available now.
"""

from __future__ import annotations

import ctypes
import gc
import time
from collections.abc import Callable
from typing import Any

_LIBC: Any = None
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def rss_peak_growth(call: Callable[[], Any]) -> int | None:
    """Bytes by which the resident set's peak during ``call()`` exceeds the resident set
    just before it; ``None`` where Linux's ``clear_refs`` or glibc is unavailable.

    For this one call glibc serves every block over 64 KiB by a fresh ``mmap`` (freed
    heap pages are trimmed first), so buffers reused from earlier calls count; afterwards
    the mmap threshold is left at 32 MiB, where glibc's own dynamic threshold tops out."""
    global _LIBC
    import jax

    gc.collect()
    try:
        if _LIBC is None:
            _LIBC = ctypes.CDLL("libc.so.6")
        _LIBC.mallopt(_M_MMAP_THRESHOLD, 64 * 1024)
        _LIBC.malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base = _status_kib("VmRSS")
    except (OSError, KeyError, AttributeError):
        return None
    try:
        out = jax.block_until_ready(call())
        peak = _status_kib("VmHWM")
        del out
    finally:
        _LIBC.mallopt(_M_MMAP_THRESHOLD, 32 * 2**20)
    return max(peak - base, 0) * 1024


def xla_bytes(compiled: Any) -> dict[str, int] | None:
    ma = compiled.memory_analysis()
    if ma is None:
        return None
    parts = {k: int(getattr(ma, f"{k}_size_in_bytes")) for k in
             ("temp", "output", "argument", "alias")}
    parts["total"] = parts["temp"] + parts["output"] + parts["argument"] - parts["alias"]
    return parts


def measure(f: Callable, args: tuple, repeats: int, budget: float,
            rss: bool = True) -> dict[str, Any]:
    """Compile ``f`` for ``args``; skip it when its buffers exceed ``budget`` bytes, else
    time it (best of ``repeats``, after a warm-up call) and measure its peak memory."""
    import jax

    t0 = time.perf_counter()
    compiled = jax.jit(f).lower(*args).compile()
    row: dict[str, Any] = {"compile_s": time.perf_counter() - t0}
    mem = xla_bytes(compiled)
    row["xla"] = mem
    if mem is not None and mem["total"] > budget:
        row["skipped"] = (f"XLA buffers {mem['total'] / 2**30:.1f} GiB > budget "
                          f"{budget / 2**30:.1f} GiB")
        return row
    times = []

    def call() -> Any:
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
        return out

    call()  # warm-up, and timed: a call over a second is repeated only once more,
    extra = max(repeats - 1, 0) if times[0] < 1.0 else 0  # one under 30 ms up to 20 times
    if times[0] < 0.03:
        extra = max(extra, min(19, int(0.3 / max(times[0], 1e-6))))
    for _ in range(extra):
        call()
    if rss:
        row["rss_bytes"] = rss_peak_growth(call)
    else:
        call()
        row["rss_bytes"] = None
    row["time_s"], row["calls"] = min(times), len(times)
    return row


def memory_budget(max_gib: float) -> float:
    """``max_gib`` GiB, or a third of the memory available now if that is less."""
    try:
        avail = _status_meminfo("MemAvailable")
    except (OSError, KeyError):
        return max_gib * 2**30
    return min(max_gib * 2**30, avail / 3)


def _status_meminfo(field: str) -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024.0
    raise KeyError(field)
