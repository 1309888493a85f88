r"""Exact, linear and FAVOR+ attention: time and peak memory as n grows, in one run.

* CPU, float32, one head, :math:`d = d_v = 64`: exact softmax attention
  (:func:`nlaverify.ops.sdpa.attention`, and JAX's ``jax.nn.dot_product_attention`` as the
  peer), elu+1 linear attention (:func:`nlaverify.ops.linear_attention.elu1_attention`, a
  :func:`~nlaverify.ops.linear_attention.kernel_attention`) and FAVOR+
  (:func:`~nlaverify.ops.linear_attention.favor_plus_attention`, :math:`m = 256` positive
  features), bidirectional and causal, for n = 256 ... 16384 (``--sizes``). The exact
  :math:`O(n^2)` cases are skipped, and said so, where the compiled program's buffers
  would exceed ``--max-gib`` (or a third of the memory now available);
* the fitted exponents: least squares of :math:`\log t` against :math:`\log n` (and of
  :math:`\log \mathrm{bytes}`) over the upper half of the measured sizes (cost
  :math:`2n^2 d` per product for exact, :math:`O(n m d)` for FAVOR+, Baggag & Saad §4.4);
* the crossover n from which FAVOR+ (and elu+1) stays faster than exact attention,
  interpolated log-log between the bracketing sizes;
* GPU (only where JAX has a GPU backend), bfloat16 and float16: FAVOR+
  (:math:`m = 256`, :math:`d = 64`) against the fused ``jax.nn.dot_product_attention``
  (``implementation="cudnn"`` where it compiles, else ``"xla"``) at n = 16k and 32k, with
  the ratio (goal: FAVOR+ :math:`\ge 10\times` faster at 16k). Without a GPU this part
  says so and is skipped.

Time: every case is ``jax.jit``-compiled once (compilation reported apart), then timed
with ``block_until_ready``, the best of ``--repeats`` + 1 calls (of two where one call
takes over a second, of up to 20 where it takes under 30 ms: the best of few short calls
is at the mercy of the machine's other load; the first call after compilation counts).
Peak memory, two measurements: (1) XLA's buffer assignment of the compiled program,
``compile().memory_analysis()``: temp + output + argument bytes (what the program holds
at once, inputs included); (2) the process's resident-set peak during the last call,
minus the resident set just before it (Linux: ``/proc/self/clear_refs`` resets
``VmHWM``; for that call glibc maps every block over 64 KiB afresh, so buffers reused
from earlier calls count): temporaries and output, the inputs being already resident.

Run from the repository root: ``python benchmarks/attention.py [--sizes 256,512]
[--repeats 3] [--quick] [--json out.json] [--figure docs/figures/attention_cost.svg]``;
``--from-json out.json --figure PATH`` redraws without measuring.
Baggag & Saad §2.8, §4.3, §4.4; Choromanski et al. 2021 (Performers).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _measure import (  # noqa: F401  (rss_peak_growth, xla_bytes re-exported)
    measure,
    memory_budget,
    rss_peak_growth,
    xla_bytes,
)

D, M = 64, 256
SIZES = (256, 512, 1024, 2048, 4096, 8192, 16384)
QUICK_SIZES = (256, 512, 1024, 2048)
GPU_SIZES = (16384, 32768)
GPU_GOAL = 10.0
METHODS = {  # key: (label, colour)
    "exact": ("exact softmax (nlaverify sdpa)", "#d62728"),
    "jax_dpa": ("exact softmax (jax.nn.dot_product_attention)", "#ff7f0e"),
    "elu1": ("linear, elu+1 (kernel_attention)", "#2ca02c"),
    "favor+": (f"FAVOR+ (m = {M})", "#1f77b4"),
}
CASES = [(k, c) for k in METHODS for c in (False, True)]
_RC = {"svg.hashsalt": "nlaverify", "svg.fonttype": "none", "font.size": 9}


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def case_name(method: str, causal: bool) -> str:
    return f"{method}{' causal' if causal else ''}"


# --- the functions measured -------------------------------------------------------------

def features(m: int = M, d: int = D, seed: int = 0) -> np.ndarray:
    """FAVOR+'s ``(m, d)`` projection: orthogonal random features where the statistics
    module is present, else i.i.d. Gaussian rows (the cost is the same)."""
    try:
        from nlaverify.attention.features import draw_orthogonal
    except ImportError:
        return np.random.default_rng(seed).standard_normal((m, d))
    return np.asarray(draw_orthogonal(seed, m, d), dtype=np.float64)


def dpa(Q: Any, K: Any, V: Any, causal: bool, implementation: str | None = None) -> Any:
    """``jax.nn.dot_product_attention`` on one ``(n, d)`` head (its layout is B, T, N, H)."""
    import jax

    out = jax.nn.dot_product_attention(Q[None, :, None, :], K[None, :, None, :],
                                       V[None, :, None, :], is_causal=causal,
                                       implementation=implementation)
    return out[0, :, 0, :]


def case_function(method: str, causal: bool, W: Any) -> tuple[Callable, tuple]:
    """``(f, extra)``: ``f(Q, K, V, *extra)`` computes the case on the JAX namespace."""
    from nlaverify.backends import get_namespace
    from nlaverify.ops import linear_attention as la
    from nlaverify.ops.sdpa import attention

    xp = get_namespace("jax")
    if method == "exact":
        return (lambda Q, K, V: attention(xp, Q, K, V, causal=causal)), ()
    if method == "jax_dpa":
        return (lambda Q, K, V: dpa(Q, K, V, causal)), ()
    if method == "elu1":
        return (lambda Q, K, V: la.elu1_attention(xp, Q, K, V, causal=causal)), ()
    if method == "favor+":
        return (lambda Q, K, V, W: la.favor_plus_attention(xp, Q, K, V, W, causal=causal)), (W,)
    raise ValueError(f"unknown method {method!r}")


def inputs(n: int, d: int, dtype: Any, device: Any, seed: int) -> tuple[Any, Any, Any]:
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    return tuple(jax.device_put(jnp.asarray(0.5 * rng.standard_normal((n, d)), dtype=dtype),
                                device) for _ in range(3))


# --- measurements (time and peak memory: :mod:`_measure`) ----------------------------

def cpu_part(sizes: list[int], repeats: int, budget: float) -> dict[str, list[dict]]:
    import jax
    import jax.numpy as jnp

    cpu = jax.devices("cpu")[0]
    W = jax.device_put(jnp.asarray(features(), dtype=jnp.float32), cpu)
    results: dict[str, list[dict]] = {case_name(m, c): [] for m, c in CASES}
    for n in sizes:
        Q, K, V = inputs(n, D, jnp.float32, cpu, seed=n)
        for method, causal in CASES:
            name = case_name(method, causal)
            f, extra = case_function(method, causal, W)
            row = {"n": n, **measure(f, (Q, K, V, *extra), repeats, budget)}
            results[name].append(row)
            msg = row.get("skipped") or f"{1e3 * row['time_s']:.4g} ms"
            _progress(f"  cpu n={n:>6} {name:<16} {msg}")
        del Q, K, V
    return results


# --- analysis ---------------------------------------------------------------------------

def fit_exponent(ns: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log y against log n over the upper half of the points
    (the larger ``ceil(len/2)``; the last two when fewer than four); ``None`` with fewer
    than two."""
    line = fit_line(ns, ys)
    return None if line is None else line[0]


def _series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    pts = [(r["n"], _value(r, key)) for r in rows]
    pts = [(n, v) for n, v in pts if v is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def _value(row: dict, key: str) -> float | None:
    if key == "xla":
        return None if row.get("xla") is None or "skipped" in row else row["xla"]["total"]
    return row.get(key)


def crossover(fast: list[dict], slow: list[dict]) -> dict[str, Any]:
    """The n from which ``fast`` stays faster than ``slow`` at every larger measured n,
    interpolated log-log between the bracketing sizes."""
    t_slow = {r["n"]: r["time_s"] for r in slow if "time_s" in r}
    pts = [(r["n"], r["time_s"] / t_slow[r["n"]]) for r in fast
           if "time_s" in r and r["n"] in t_slow]
    if not pts:
        return {"n": None, "note": "no common measured size"}
    i = len(pts)
    while i > 0 and pts[i - 1][1] < 1.0:
        i -= 1
    if i == len(pts):
        return {"n": None, "note": f"not faster at the largest common n = {pts[-1][0]}",
                "ratios": pts}
    if i == 0:
        return {"n": None, "note": f"faster already at the smallest n = {pts[0][0]}",
                "ratios": pts}
    (n0, r0), (n1, r1) = pts[i - 1], pts[i]
    t = math.log(r0) / (math.log(r0) - math.log(r1))
    n_star = math.exp(math.log(n0) + t * (math.log(n1) - math.log(n0)))
    return {"n": n_star, "bracket": [n0, n1], "ratios": pts}


def fit_line(ns: list[float], ys: list[float]) -> tuple[float, float] | None:
    """``(slope, intercept)`` of :func:`fit_exponent`'s least-squares line."""
    pts = sorted((n, y) for n, y in zip(ns, ys, strict=True) if y is not None and y > 0)
    if len(pts) < 2:
        return None
    upper = pts[len(pts) // 2:] if len(pts) >= 4 else pts[-2:]
    slope, icpt = np.polyfit(np.log([p[0] for p in upper]), np.log([p[1] for p in upper]), 1)
    return float(slope), float(icpt)


def extrapolated_crossover(fast: list[dict], slow: list[dict]) -> float | None:
    """Where the two fitted time lines meet, when ``fast`` grows more slowly."""
    a, b = fit_line(*_series(fast, "time_s")), fit_line(*_series(slow, "time_s"))
    if a is None or b is None or a[0] >= b[0]:
        return None
    return math.exp((a[1] - b[1]) / (b[0] - a[0]))


def analyse(results: dict[str, list[dict]]) -> dict[str, Any]:
    fits = {}
    for name, rows in results.items():
        fits[name] = {"time": fit_exponent(*_series(rows, "time_s")),
                      "xla_bytes": fit_exponent(*_series(rows, "xla")),
                      "rss_bytes": fit_exponent(*_series(rows, "rss_bytes"))}
    cross = {}
    for fast in ("favor+", "elu1"):
        for slow in ("exact", "jax_dpa"):
            for causal in (False, True):
                a, b = case_name(fast, causal), case_name(slow, causal)
                if a in results and b in results:
                    c = crossover(results[a], results[b])
                    if c["n"] is None and c.get("note", "").startswith("not faster"):
                        c["extrapolated_n"] = extrapolated_crossover(results[a], results[b])
                    cross[f"{a} vs {b}"] = c
    return {"fits": fits, "crossovers": cross}


# --- GPU --------------------------------------------------------------------------------

def gpu_part(repeats: int, sizes: tuple[int, ...] = GPU_SIZES, device: Any = None,
             dtypes: tuple[str, ...] = ("bfloat16", "float16")) -> dict[str, Any]:
    """FAVOR+ against the fused ``dot_product_attention`` (bidirectional) on ``device``
    (the first GPU by default)."""
    import jax
    import jax.numpy as jnp

    if device is None:
        try:
            device = jax.devices("gpu")[0]
        except RuntimeError as exc:
            return {"skipped": f"no GPU backend in JAX ({exc})"}
    reps = max(repeats, 10)
    rows = []
    for dtype in dtypes:
        W = jax.device_put(jnp.asarray(features(), dtype=dtype), device)
        f_favor, extra = case_function("favor+", False, W)
        for n in sizes:
            Q, K, V = inputs(n, D, dtype, device, seed=n)
            fav = measure(f_favor, (Q, K, V, *extra), reps, math.inf, rss=False)
            row = {"dtype": dtype, "n": n, "favor+_s": fav["time_s"],
                   "favor+_xla": fav["xla"]}
            for impl in ("cudnn", "xla"):
                try:
                    ex = measure(lambda Q, K, V, impl=impl: dpa(Q, K, V, False, impl),
                                 (Q, K, V), reps, math.inf, rss=False)
                except Exception as exc:  # cudnn absent or unsupported shape/dtype
                    row[f"{impl}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                    continue
                row.update({"implementation": impl, "dpa_s": ex["time_s"],
                            "dpa_xla": ex["xla"], "ratio": ex["time_s"] / fav["time_s"]})
                break
            rows.append(row)
            _progress(f"  gpu {dtype} n={n}: FAVOR+ {1e3 * row['favor+_s']:.3g} ms, "
                      f"dpa {1e3 * row.get('dpa_s', math.nan):.3g} ms")
            del Q, K, V
    return {"device": str(device), "rows": rows}


# --- report -----------------------------------------------------------------------------

def _mib(b: float | None) -> str:
    return "-" if b is None else f"{b / 2**20:.4g}"


def print_report(res: dict[str, Any]) -> None:
    cpu, an = res["cpu_float32"], res["analysis"]
    cfg = res["config"]
    print(f"CPU float32, one head, d = d_v = {D}, FAVOR+ m = {M}; best of {cfg['repeats']} + 1 "
          f"calls (2 when one takes > 1 s, up to 20 under 30 ms); load average "
          f"{cfg['load_before']} before, {cfg['load_after']} after ({cfg['cpus']} CPUs); "
          f"memory budget {cfg['budget_gib']:.1f} GiB; wall {cfg['wall_s']:.0f} s")
    print("memory: 'XLA' = compiled memory_analysis() temp + output + arguments; 'RSS' = "
          "measured resident-set peak growth during one call (temps + output: about XLA "
          "less the 3 n d x 4 bytes of inputs; pages reused below ~1 MiB go uncounted)")
    print(f"{'case':<16} {'n':>6} {'time ms':>10} {'XLA MiB':>9} {'RSS MiB':>9} "
          f"{'compile s':>9}")
    for name, rows in cpu.items():
        for r in rows:
            xla = None if r.get("xla") is None else r["xla"]["total"]
            if "skipped" in r:
                print(f"{name:<16} {r['n']:>6} {'skipped':>10} {_mib(xla):>9} "
                      f"{'-':>9} {r['compile_s']:>9.2f}  ({r['skipped']})")
                continue
            print(f"{name:<16} {r['n']:>6} {1e3 * r['time_s']:>10.4g} {_mib(xla):>9} "
                  f"{_mib(r['rss_bytes']):>9} {r['compile_s']:>9.2f}")
    print("fitted exponents (log-log least squares over the upper half of the sizes):")
    print(f"  {'case':<16} {'time':>6} {'XLA mem':>8} {'RSS mem':>8}")
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for name, f in an["fits"].items():
        print(f"  {name:<16} {fmt(f['time']):>6} {fmt(f['xla_bytes']):>8} "
              f"{fmt(f['rss_bytes']):>8}")
    print("crossover (the n from which the first stays faster, log-log interpolated):")
    for k, c in an["crossovers"].items():
        where = (f"n ~ {c['n']:.0f} (between {c['bracket'][0]} and {c['bracket'][1]})"
                 if c["n"] is not None else c["note"])
        if c.get("extrapolated_n"):
            where += f"; the fitted lines meet at n ~ {c['extrapolated_n']:.3g}"
        elif "extrapolated_n" in c:
            where += "; the fitted lines do not meet"
        print(f"  {k:<34} {where}")
    gpu = res["gpu"]
    if "skipped" in gpu:
        print(f"GPU part skipped: {gpu['skipped']}")
        return
    print(f"GPU ({gpu['device']}), bidirectional, FAVOR+ m = {M} vs fused "
          "dot_product_attention:")
    for r in gpu["rows"]:
        if "ratio" not in r:
            print(f"  {r['dtype']:<8} n={r['n']:>6} FAVOR+ {1e3 * r['favor+_s']:.3g} ms; "
                  f"dot_product_attention failed: cudnn: {r.get('cudnn_error')}; "
                  f"xla: {r.get('xla_error')}")
            continue
        goal = ""
        if r["n"] == 16384:
            goal = f"  (goal >= {GPU_GOAL:g}x: {'meets' if r['ratio'] >= GPU_GOAL else 'misses'})"
        print(f"  {r['dtype']:<8} n={r['n']:>6} FAVOR+ {1e3 * r['favor+_s']:8.3f} ms  "
              f"{r['implementation']:<5} {1e3 * r['dpa_s']:8.3f} ms  ratio "
              f"{r['ratio']:6.2f}x{goal}")


# --- figure -----------------------------------------------------------------------------

def draw_figure(res: dict[str, Any], path: Path | str) -> Path:
    """Time and XLA memory against n (log-log) for every case, the fitted slopes in the
    legends; a byte-reproducible SVG (fixed ``svg.hashsalt``, no date), written
    atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from nlaverify.symbolic.document import write_atomically

    cpu, fits = res["cpu_float32"], res["analysis"]["fits"]
    fmt = lambda v: "?" if v is None else f"{v:.2f}"  # noqa: E731
    with plt.rc_context(_RC):
        fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12.0, 7.0))
        for method, causal in CASES:
            name = case_name(method, causal)
            if name not in cpu:
                continue
            label, colour = METHODS[method]
            style = {"color": colour, "ls": "--" if causal else "-", "marker": "o",
                     "ms": 3, "lw": 1.2}
            tag = f"{label}{', causal' if causal else ''}"
            ns, ts = _series(cpu[name], "time_s")
            ax_t.loglog(ns, ts, label=f"{tag}: slope {fmt(fits[name]['time'])}", **style)
            ns, bs = _series(cpu[name], "xla")
            ax_m.loglog(ns, np.divide(bs, 2**20),
                        label=f"{tag}: slope {fmt(fits[name]['xla_bytes'])}", **style)
            ns, rs = _series(cpu[name], "rss_bytes")
            ax_m.loglog(ns, np.divide(rs, 2**20), ls="none", marker="x", ms=4,
                        color=colour)
        handles, labels = ax_m.get_legend_handles_labels()
        handles.append(Line2D([], [], ls="none", marker="x", color="k"))
        labels.append("× measured RSS peak growth (one call)")
        ax_t.set_ylabel("time per call (s), best of repeats")
        ax_m.set_ylabel("MiB: XLA temp + output + arguments")
        for ax in (ax_t, ax_m):
            ax.set_xlabel("sequence length n")
            ax.set_xscale("log", base=2)
            ax.grid(True, which="both", alpha=0.3)
        below = {"fontsize": 7, "loc": "upper center", "bbox_to_anchor": (0.5, -0.13)}
        ax_t.legend(**below)
        ax_m.legend(handles, labels, **below)
        cfg = res["config"]
        fig.suptitle(f"Attention cost on CPU (float32, d = {D}, one head; FAVOR+ m = {M}); "
                     f"slopes fitted over the upper half of n; load {cfg['load_before']} "
                     "(Baggag & Saad §4.4)", fontsize=9)
        fig.tight_layout(rect=(0, 0, 1, 0.96))
        buf = io.StringIO()
        target = Path(path)
        if target.suffix.lower() != ".svg":  # a raster preview, e.g. .png
            fig.savefig(target)
            plt.close(fig)
            return target
        fig.savefig(buf, format="svg", metadata={"Date": None})
        plt.close(fig)
    write_atomically(target.parent, {target.name: buf.getvalue()})
    return target


# --- main -------------------------------------------------------------------------------

def _load() -> str:
    try:
        return "/".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", help="comma-separated n of the CPU part (default: "
                   + ",".join(map(str, SIZES)) + ")")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true",
                   help="n = " + ",".join(map(str, QUICK_SIZES)) + ", 2 repeats, no GPU part")
    p.add_argument("--max-gib", type=float, default=4.0,
                   help="skip cases whose compiled buffers exceed this (default %(default)s)")
    p.add_argument("--no-gpu", action="store_true", help="skip the GPU part")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON ('-': stdout)")
    p.add_argument("--figure", metavar="PATH", help="draw time and memory vs n to this SVG")
    p.add_argument("--from-json", metavar="PATH", help="report/draw saved results, no runs")
    args = p.parse_args(argv)
    if args.from_json:
        res = json.loads(Path(args.from_json).read_text())
    else:
        sizes = ([int(s) for s in args.sizes.split(",") if s] if args.sizes
                 else list(QUICK_SIZES if args.quick else SIZES))
        repeats = 2 if args.quick and args.repeats == 3 else args.repeats
        budget = memory_budget(args.max_gib)
        cfg = {"sizes": sizes, "repeats": repeats, "d": D, "m": M, "cpus": os.cpu_count(),
               "budget_gib": budget / 2**30, "load_before": _load()}
        _progress(f"CPU float32: exact, linear and FAVOR+ attention, n = {sizes}")
        t0 = time.perf_counter()
        cpu = cpu_part(sizes, repeats, budget)
        skip_gpu = args.no_gpu or args.quick
        gpu = {"skipped": "--no-gpu / --quick"} if skip_gpu else gpu_part(repeats)
        cfg.update(load_after=_load(), wall_s=time.perf_counter() - t0)
        res = {"config": cfg, "cpu_float32": cpu, "analysis": analyse(cpu), "gpu": gpu}
    print_report(res)
    if args.figure:
        print(f"figure: {draw_figure(res, args.figure)}")
    if args.json:
        text = json.dumps(res, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
