"""Newton–Schulz (Muon's five quintic steps) against the SVD polar factor, in one run.

* CPU, float32: the time of NS(5) (:func:`nlaverify.optim.newton_schulz.newton_schulz`,
  Muon's coefficients, Frobenius normalisation) over the time of the SVD polar factor
  :math:`UV^\\top` (:func:`~nlaverify.optim.newton_schulz.polar_svd`) for square
  :math:`n \\times n` matrices, n = 256 ... 4096 (``--sizes`` to shorten), with NS(5)'s
  achieved GFLOP/s (:func:`~nlaverify.optim.newton_schulz.matmul_flops`: :math:`30n^3`);
* GPU (only where JAX has a GPU backend), bfloat16: NS(5)'s achieved TFLOP/s as a fraction
  of the same run's plain bfloat16 matmul rate (:math:`2n^3` per product; goal
  :math:`\\ge 0.9`), and the float32 SVD polar factor's time over bfloat16 NS(5)'s at
  :math:`4096^2` (goal :math:`\\ge 100\\times`). Without a GPU this part says so and is
  skipped.

Every function is ``jax.jit``-compiled once (compilation reported apart) and timed with
``block_until_ready``, best of ``--repeats`` calls. Run from the repository root:
``python benchmarks/newton_schulz.py [--sizes 256,512] [--repeats 3] [--json out.json]``.
Baggag & Saad §5.5 (Muon); Jordan et al. 2024.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import numpy as np
from _timing import best_time, progress

from nlaverify.backends import get_namespace
from nlaverify.optim.newton_schulz import MUON, matmul_flops, newton_schulz, polar_svd

STEPS = 5
GPU_SIZE = 4096
GOALS = {"ns5_fraction_of_matmul": 0.9, "svd_over_ns5": 100.0}


def kernels() -> tuple[Callable, Callable, Callable]:
    """NS(5), the SVD polar factor and a plain matmul, jitted (they run on the device of
    their inputs)."""
    import jax

    xp = get_namespace("jax")
    ns5 = jax.jit(lambda G: newton_schulz(xp, G, MUON, STEPS))
    svd = jax.jit(lambda G: polar_svd(xp, G))
    mm = jax.jit(lambda A, B: A @ B)
    return ns5, svd, mm


def cpu_ratios(sizes: list[int], repeats: int) -> list[dict[str, float]]:
    import jax
    import jax.numpy as jnp

    cpu = jax.devices("cpu")[0]
    ns5, svd, _ = kernels()
    rows = []
    for n in sizes:
        G = jax.device_put(jnp.asarray(np.random.default_rng(n).standard_normal((n, n)),
                                       dtype=jnp.float32), cpu)
        reps = repeats if n <= 1024 else max(1, min(repeats, 2))
        progress(f"  cpu n={n}: NS(5) ...")
        c_ns, t_ns = best_time(ns5, G, repeats=reps)
        progress(f"  cpu n={n}: NS(5) {t_ns:.3g} s; SVD polar ({reps + 1} calls) ...")
        c_svd, t_svd = best_time(svd, G, repeats=reps)
        flops = matmul_flops(n, n, MUON, STEPS)
        rows.append({"n": n, "ns5_s": t_ns, "svd_s": t_svd, "ns5/svd": t_ns / t_svd,
                     "ns5_gflops": flops / t_ns / 1e9, "compile_ns5_s": c_ns - t_ns,
                     "compile_svd_s": c_svd - t_svd})
        progress(f"  cpu n={n}: SVD polar {t_svd:.3g} s")
    return rows


def gpu_part(repeats: int, n: int = GPU_SIZE) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError as exc:
        return {"skipped": f"no GPU backend in JAX ({exc})"}
    ns5, svd, mm = kernels()
    rng = np.random.default_rng(0)
    G = jax.device_put(jnp.asarray(rng.standard_normal((n, n)), dtype=jnp.bfloat16), gpu)
    B = jax.device_put(jnp.asarray(rng.standard_normal((n, n)), dtype=jnp.bfloat16), gpu)
    _, t_mm = best_time(mm, G, B, repeats=max(repeats, 10))
    _, t_ns = best_time(ns5, G, repeats=max(repeats, 10))
    _, t_svd = best_time(svd, G.astype(jnp.float32), repeats=repeats)
    mm_rate = 2 * n**3 / t_mm
    ns_rate = matmul_flops(n, n, MUON, STEPS) / t_ns
    return {"device": str(gpu), "n": n, "matmul_bf16_tflops": mm_rate / 1e12,
            "ns5_bf16_tflops": ns_rate / 1e12, "ns5_fraction_of_matmul": ns_rate / mm_rate,
            "ns5_bf16_s": t_ns, "svd_f32_s": t_svd, "svd_over_ns5": t_svd / t_ns}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="256,512,1024,2048,4096",
                   help="comma-separated n of the CPU part (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-gpu", action="store_true", help="skip the GPU part")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON ('-': stdout)")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    progress(f"CPU float32, NS({STEPS}) with Muon's coefficients vs the SVD polar factor")
    rows = cpu_ratios(sizes, args.repeats)
    print(f"{'n':>6} {'NS(5) s':>10} {'SVD s':>10} {'NS/SVD':>8} {'NS GFLOP/s':>11}")
    for r in rows:
        print(f"{r['n']:>6} {r['ns5_s']:>10.4g} {r['svd_s']:>10.4g} {r['ns5/svd']:>8.3f} "
              f"{r['ns5_gflops']:>11.1f}")
    gpu = {"skipped": "--no-gpu"} if args.no_gpu else gpu_part(args.repeats)
    if "skipped" in gpu:
        print(f"GPU part skipped: {gpu['skipped']}")
    else:
        for k, goal in GOALS.items():
            verdict = "meets" if gpu[k] >= goal else "misses"
            print(f"  {k:<24} {gpu[k]:8.3f}   (goal >= {goal:g}: {verdict})")
        print(f"  bfloat16 matmul {gpu['matmul_bf16_tflops']:.1f} TFLOP/s, NS(5) "
              f"{gpu['ns5_bf16_tflops']:.1f} TFLOP/s on {gpu['device']} at n={gpu['n']}")
    if args.json:
        text = json.dumps({"cpu_float32": rows, "gpu_bfloat16": gpu}, indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
