"""Pipeline speed as ratios measured in one run, on this machine.

* lowered graph (one ``jax.jit`` of forward + hand-derived VJPs) / independent JAX
  model (``jit(value_and_grad)``): the goal is <= 1.05; reported with and without the
  lowered function's host-side check of the token ids (``lower(...).jitted``: the compiled
  program alone), which the independent model does not do (JAX clamps an out-of-range
  id silently) and which costs a fixed ~20-30 microseconds a call, visible on ``tiny`` only;
* graph on NumPy (forward + backward, per-node Python) / the lowered jit;
* time to build GPT-3 175B and Llama-3 405B graphs (shapes only).

Run from the repository root: ``python benchmarks/pipeline.py [--repeats 30]``.
Timings are medians over interleaved repeats after a warm-up call (compilation
excluded and reported separately).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from nlaverify.config import TransformerConfig, preset
from nlaverify.graph.build import build_transformer
from nlaverify.graph.lower import lower
from nlaverify.graph.run import init_params, run_graph, sample_data
from nlaverify.models.jax_transformer import make_value_and_grad

MID = preset("mid")


def _block(x):
    import jax

    return jax.block_until_ready(x)


def bench(cfg: TransformerConfig, n: int, repeats: int) -> dict[str, float]:
    import jax.numpy as jnp

    g = build_transformer(cfg)
    params = init_params(g, 0)
    data = sample_data(cfg.vocab_size, n, 0)
    jp = {k: jnp.asarray(v) for k, v in params.items()}
    jd = {k: jnp.asarray(v) for k, v in data.items()}
    lowered = lower(g)
    model = make_value_and_grad(cfg)
    t0 = time.perf_counter()
    _block(lowered(jp, jd))
    compile_lowered = time.perf_counter() - t0
    t0 = time.perf_counter()
    _block(model(jp, jd["tokens"], jd["targets"]))
    compile_model = time.perf_counter() - t0
    program = lowered.jitted
    t_low, t_mod, t_np, t_prog = [], [], [], []
    np_repeats = max(3, repeats // 5)
    for k in range(repeats):
        t0 = time.perf_counter()
        _block(lowered(jp, jd))
        t_low.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        _block(program(jp, jd))
        t_prog.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        _block(model(jp, jd["tokens"], jd["targets"]))
        t_mod.append(time.perf_counter() - t0)
        if k < np_repeats:
            t0 = time.perf_counter()
            run_graph(g, "numpy", params, data)
            t_np.append(time.perf_counter() - t0)
    low, mod, npy, prog = (statistics.median(t) for t in (t_low, t_mod, t_np, t_prog))
    return {"lowered_s": low, "model_s": mod, "numpy_s": npy, "lowered/model": low / mod,
            "program_s": prog, "program/model": prog / mod,
            "numpy/lowered": npy / low, "compile_lowered_s": compile_lowered,
            "compile_model_s": compile_model}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=30)
    args = p.parse_args()
    for name in ("gpt3-175b", "llama3-405b"):
        t0 = time.perf_counter()
        g = build_transformer(preset(name))
        print(f"build {name}: {1e3 * (time.perf_counter() - t0):.1f} ms, "
              f"{g.number_of_nodes()} nodes, no weights allocated")
    for cfg, n in ((preset("tiny"), 8), (MID, 128)):
        r = bench(cfg, n, args.repeats)
        print(f"{cfg.name}: lowered jit {1e3 * r['lowered_s']:.3f} ms, independent model "
              f"{1e3 * r['model_s']:.3f} ms -> lowered/model = {r['lowered/model']:.3f} "
              f"(goal <= 1.05); the compiled program alone (without the host check of the "
              f"token ids) {1e3 * r['program_s']:.3f} ms -> program/model = "
              f"{r['program/model']:.3f}; graph on NumPy {1e3 * r['numpy_s']:.2f} ms -> "
              f"numpy/lowered = {r['numpy/lowered']:.1f}; compile {r['compile_lowered_s']:.2f} s"
              f" vs {r['compile_model_s']:.2f} s")
    print(f"(numpy {np.__version__}; medians of {args.repeats} interleaved repeats)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
