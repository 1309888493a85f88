"""The selective scan against attention as the sequence grows, in one run (issue 37, item 6).

One layer's sequence mixing at ``d = 64`` channels, ``N = 16`` states, float32, JAX ``jit``,
on this machine, medians of interleaved calls after a warm-up (compilation reported apart):

* the selective scan (Mamba's rule, softplus Delta, skip D) as a plain ``jax.lax.scan`` over
  the tokens (the sequential recurrence);
* the same recurrence by ``jax.lax.associative_scan`` with the scan's combine
  :func:`nlaverify.ops.ssm.scan_combine` (the parallel prefix: ``log2 L`` rounds, ``O(L d N)``
  memory for the per-token ``A-bar``, ``B-bar u``);
* nlaverify's own :func:`~nlaverify.ops.ssm.selective_scan` (the running function of the
  proofs, a Python loop that ``jit`` unrolls: its compile time grows with ``L``, so it is
  timed up to ``--unrolled-max``);
* causal attention, ``jax.nn.dot_product_attention(is_causal=True)``, one head of size ``d``.

The outputs of the three scans are compared (float32 tolerance model) before timing. Run from
the repository root: ``python benchmarks/ssm.py [--lengths 256 1024 4096 16384] [--write]``
(``--write``: ``benchmarks/ssm.md``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from _timing import progress, publish


def functions(d: int, N: int) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from nlaverify.backends import get_namespace
    from nlaverify.ops import ssm

    xp = get_namespace("jax")

    def parts(u: Any, delta: Any, A: Any, B: Any) -> tuple[Any, Any]:
        dt = jax.nn.softplus(delta)                              # (L, d)
        Abar = jnp.exp(dt[..., None] * A)                        # (L, d, N)
        BU = (dt * u)[..., None] * B[:, None, :]                 # (L, d, N)
        return Abar, BU

    def by_scan(u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any) -> Any:
        Abar, BU = parts(u, delta, A, B)

        def step(x: Any, inp: Any) -> tuple[Any, Any]:
            a, bu, c = inp
            x = a * x + bu
            return x, x @ c
        _, y = jax.lax.scan(step, jnp.zeros((d, N), u.dtype), (Abar, BU, C))
        return y + u * D

    def by_associative(u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any) -> Any:
        Abar, BU = parts(u, delta, A, B)
        _, h = jax.lax.associative_scan(
            lambda f, s: ssm.scan_combine(xp, f, s), (Abar, BU), axis=0)
        return jnp.einsum("ldn,ln->ld", h, C) + u * D

    def ours(u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any) -> Any:
        return ssm.selective_scan(xp, u, delta, A, B, C, D=D, delta_softplus=True)

    def attention(q: Any, k: Any, v: Any) -> Any:
        return jax.nn.dot_product_attention(q[None, :, None], k[None, :, None],
                                            v[None, :, None], is_causal=True)[0, :, 0]

    return {"lax.scan": jax.jit(by_scan), "lax.associative_scan": jax.jit(by_associative),
            "nlaverify selective_scan (unrolled)": jax.jit(ours),
            "causal attention": jax.jit(attention)}


def bench(L: int, d: int, N: int, repeats: int, unrolled_max: int) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from nlaverify.tolerance import tolerance

    rng = np.random.default_rng(L)
    f32 = np.float32
    u, delta = rng.standard_normal((L, d)).astype(f32), rng.standard_normal((L, d)).astype(f32)
    A = (-np.exp(rng.standard_normal((d, N)))).astype(f32)
    B, C = rng.standard_normal((L, N)).astype(f32), rng.standard_normal((L, N)).astype(f32)
    D = np.ones(d, f32)
    scan_args = tuple(jnp.asarray(a) for a in (u, delta, A, B, C, D))
    att_args = tuple(jnp.asarray(rng.standard_normal((L, d)).astype(f32)) for _ in range(3))
    fns = functions(d, N)
    if L > unrolled_max:
        fns.pop("nlaverify selective_scan (unrolled)")
    compile_s, outs = {}, {}
    for name, f in fns.items():
        args = att_args if name == "causal attention" else scan_args
        t0 = time.perf_counter()
        outs[name] = np.asarray(jax.block_until_ready(f(*args)), dtype=np.float64)
        compile_s[name] = time.perf_counter() - t0
    ref = outs["lax.scan"]
    tol = tolerance("float32", size=N, depth=L)  # the recurrence: one stage per token
    agree = {name: bool(tol.compare(out, ref).ok) for name, out in outs.items()
             if name != "causal attention"}
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, f in fns.items():
            args = att_args if name == "causal attention" else scan_args
            t0 = time.perf_counter()
            jax.block_until_ready(f(*args))
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"L": L, "seconds": med, "compile_s": compile_s, "agree": agree}


def table(rows: list[dict[str, Any]]) -> str:
    names = ["lax.scan", "lax.associative_scan", "nlaverify selective_scan (unrolled)",
             "causal attention"]
    head = ("| L | " + " | ".join(f"{n} (ms)" for n in names)
            + " | associative / scan | attention / scan | scans agree |\n|"
            + "---|" * (len(names) + 4) + "\n")
    lines = []
    for r in rows:
        t = r["seconds"]
        cells = [f"{1e3 * t[n]:.3f}" if n in t else "not run" for n in names]
        lines.append(f"| {r['L']} | " + " | ".join(cells)
                     + f" | {t['lax.associative_scan'] / t['lax.scan']:.2f} | "
                     f"{t['causal attention'] / t['lax.scan']:.2f} | "
                     f"{'yes' if all(r['agree'].values()) else 'NO: ' + str(r['agree'])} |")
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096, 16384])
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--N", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--unrolled-max", type=int, default=256)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    load = os.getloadavg()[0]
    rows = []
    for L in a.lengths:
        progress(f"L = {L} ...")
        rows.append(bench(L, a.d, a.N, a.repeats, a.unrolled_max))
    compiles = "; ".join(f"L = {r['L']}: " + ", ".join(f"{k} {v:.2f} s"
                                                      for k, v in r["compile_s"].items())
                         for r in rows)
    text = (f"# The selective scan against attention\n\nGenerated by `python benchmarks/ssm.py "
            f"--write` ({date.today()}; load average {load:.2f} when it started; "
            f"{os.cpu_count()} cores, no GPU). d = {a.d} channels, N = {a.N} states, "
            f"float32, medians of {a.repeats} interleaved calls.\n\n" + table(rows)
            + f"\nCompile + first call: {compiles}.\n")
    publish(text, Path(__file__).with_name("ssm.md"), a.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
