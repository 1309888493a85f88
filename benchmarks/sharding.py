"""The sharded tiny and mid models on 1, 2, 4, 8 simulated CPU devices against the unsharded
``jit``, in one run (issue 22, item 4): step time and memory per device.

**What this measures, and what it does not.** The simulated devices of
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` are threads of one process on this
machine's CPU cores (2 here, shared): they run the partitioned program and its collectives
for real, but they share the cores, so a mesh cannot be faster than one device. The ratios
are a check of the *overhead* of the partitioned program (collectives, resharding, smaller
per-device kernels), not of a speed-up; the memory per device is what XLA's compiled
program says it needs on one device, which does shrink with the mesh.

**The step.** The training step of ``verify --mesh`` (:mod:`nlaverify.shard`): the
Transformer graph's forward and hand-derived backward in one ``jax.jit``, in float32, every
node's value and cotangent pinned to its layout of :func:`nlaverify.shard.plan.layout` (data
parallel over the batch, Megatron tensor parallel over heads and MLP units, sequence
parallel over the positions), returning the loss and every parameter's gradient. The
unsharded reference is the same graph jitted on one device, without the pins. Times are
medians of ``--repeats`` warm calls, interleaved in rounds (compilation reported apart);
memory is
``compiled.memory_analysis()`` of the program one device runs (arguments + outputs +
temporaries - aliased), with the bytes of the sharded inputs on device 0 beside it.

Run from the repository root: ``python benchmarks/sharding.py [--write]`` (``--write``:
``benchmarks/sharding.md``). The measurement runs in a subprocess with 8 simulated devices,
started as :func:`nlaverify.shard.command.run_shard_verify` starts its own.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from _timing import progress, publish

ROOT = Path(__file__).resolve().parent.parent
MESHES = ("dp=1", "dp=2", "dp=2,tp=2", "dp=2,tp=2,sp=2")
#: preset -> (sequence length, batch): the batch divisible by dp, the length by sp
SIZES = {"tiny": (16, 2), "mid": (128, 2)}
DEVICES = 8


def _step(graph: Any, plan: Any, mesh: Any) -> Any:
    """The graph's forward and backward, each node pinned to its layout (``mesh`` None: no
    pins, the unsharded program): returns the loss and the parameters' gradients."""
    import jax
    import networkx as nx
    from jax.sharding import NamedSharding

    from nlaverify.backends import get_namespace
    from nlaverify.graph.core import _arguments
    from nlaverify.ops.registry import get_op
    from nlaverify.shard.plan import layout
    from nlaverify.shard.run import _pspec

    xp = get_namespace("jax")
    order = list(nx.topological_sort(graph))
    params = [n for n in order if graph.nodes[n]["kind"] == "param"]

    def pin(node: str, x: Any) -> Any:
        if mesh is None:
            return x
        spec = _pspec(layout(graph, plan, node, x.ndim))
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))

    def run(inp: dict[str, Any]) -> Any:
        values: dict[str, Any] = {}
        for node in order:
            attrs = graph.nodes[node]
            if attrs["kind"] != "op":
                values[node] = pin(node, inp[node])
                continue
            spec = get_op(attrs["op"])
            args = [values[u] for u in _arguments(graph, node)]
            values[node] = pin(node, spec.forward(xp, *args, **attrs["static"]))
        cot = {"loss": xp.ones_like(values["loss"])}
        for node in reversed(order):
            attrs = graph.nodes[node]
            if attrs["kind"] != "op" or node not in cot:
                continue
            spec = get_op(attrs["op"])
            srcs = _arguments(graph, node)
            grads = spec.vjp(xp, cot[node], *[values[u] for u in srcs], **attrs["static"])
            real = [s for a, s in zip(spec.args, srcs, strict=True) if a.kind == "real"]
            for src, g in zip(real, grads, strict=True):
                cot[src] = pin(src, g if src not in cot else cot[src] + g)
        return values["loss"], {p: cot[p] for p in params if p in cot}

    return run


def _memory(compiled: Any) -> int | None:
    try:
        m = compiled.memory_analysis()
    except Exception:  # a backend without the analysis: reported as absent
        return None
    if m is None:
        return None
    return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
               - m.alias_size_in_bytes)


def _interleaved(programs: list[tuple[Any, Any]], repeats: int) -> list[float]:
    """The median of ``repeats`` warm calls of each program, timed in rounds (one call of
    each per round), so that the load of the shared cores drifts over all alike."""
    import jax

    for f, arg in programs:
        jax.block_until_ready(f(arg))
    times: list[list[float]] = [[] for _ in programs]
    for _ in range(repeats):
        for i, (f, arg) in enumerate(programs):
            t0 = time.perf_counter()
            jax.block_until_ready(f(arg))
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def measure(preset_name: str, repeats: int) -> list[dict[str, Any]]:
    """In the subprocess: the unsharded jit, then every mesh, on the same inputs."""
    import jax
    from jax.sharding import Mesh, NamedSharding

    from nlaverify.backends import get_namespace
    from nlaverify.config import preset
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import graph_inputs, init_params, sample_data
    from nlaverify.shard.plan import layout, plan_mesh
    from nlaverify.shard.run import _pspec

    config = preset(preset_name)
    seq_len, batch = SIZES[preset_name]
    graph = build_transformer(config)
    data = sample_data(config.vocab_size, seq_len, 0, batch=batch, pad=config.causal)
    inputs = {k: np.asarray(v) for k, v in graph_inputs(
        graph, get_namespace("jax"), init_params(graph, 0), data, dtype="float32").items()}
    rows = []
    dev0 = jax.devices()[0]
    placed = {k: jax.device_put(v, dev0) for k, v in inputs.items()}
    t0 = time.perf_counter()
    compiled = jax.jit(_step(graph, None, None)).lower(placed).compile()
    programs = [(compiled, placed)]
    rows.append({"mesh": "unsharded jit", "devices": 1, "compile_s": time.perf_counter() - t0,
                 "memory": _memory(compiled),
                 "input_bytes": int(sum(v.nbytes for v in inputs.values()))})
    for spec in MESHES:
        plan = plan_mesh(config, spec, seq_len=seq_len, batch=batch)
        names, sizes = plan.mesh_axes()
        mesh = Mesh(np.array(jax.devices()[: plan.devices]).reshape(sizes), names)
        placed = {k: jax.device_put(v, NamedSharding(mesh, _pspec(layout(
            graph, plan, k, np.ndim(v))))) for k, v in inputs.items()}
        t0 = time.perf_counter()
        compiled = jax.jit(_step(graph, plan, mesh)).lower(placed).compile()
        compile_s = time.perf_counter() - t0
        on0 = sum(s.data.nbytes for v in placed.values() for s in v.addressable_shards
                  if s.device == mesh.devices.flat[0])
        hlo = compiled.as_text()
        collectives = len(re.findall(r" (?:all-reduce|all-gather|reduce-scatter|all-to-all|"
                                     r"collective-permute)(?:-start)?\(", hlo))
        rows.append({"mesh": plan.describe() + ("" if plan.vocab_parallel or plan.size("tp")
                                                == 1 else " (vocab replicated)"),
                     "devices": plan.devices, "compile_s": compile_s,
                     "memory": _memory(compiled), "input_bytes": int(on0),
                     "collectives": collectives})
        programs.append((compiled, placed))
    for row, t in zip(rows, _interleaved(programs, repeats), strict=True):
        row["step_s"] = t
    return rows


def _subprocess(presets: list[str], repeats: int) -> dict[str, list[dict[str, Any]]]:
    from nlaverify.shard.command import _FLAG

    flags = re.sub(_FLAG + r"=\d+", "", os.environ.get("XLA_FLAGS", ""))
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"{flags} {_FLAG}={DEVICES}".strip(),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "benchmarks"),
                                           os.environ.get("PYTHONPATH", "")]))
    code = ("import json, sys; import sharding as b; print(json.dumps({p: b.measure(p, "
            f"{repeats}) for p in {presets!r}}}))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=False, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"the measuring subprocess failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def _mib(b: int | None) -> str:
    return "n/a" if b is None else f"{b / 2**20:.2f}"


def table(results: dict[str, list[dict[str, Any]]], repeats: int, wall: float) -> str:
    lines = [
        "# Sharded step time and memory per device (simulated CPU devices)",
        "",
        f"`python benchmarks/sharding.py --write`, {date.today().isoformat()}, "
        f"{os.cpu_count()} CPU cores, JAX CPU, {DEVICES} simulated devices "
        f"(`XLA_FLAGS=--xla_force_host_platform_device_count={DEVICES}`), float32, "
        f"whole run {wall:.0f} s.",
        "",
        "**An overhead check, not a speed-up.** The simulated devices are threads sharing "
        f"this machine's {os.cpu_count()} cores: a mesh of 8 does the work of one device "
        "on the same cores, plus its collectives and resharding. A step-time ratio above 1 "
        "is that overhead; below 1 would only mean XLA's CPU threads used the cores better. "
        "The memory per device (XLA's `memory_analysis()` of the program one device runs: "
        "arguments + outputs + temporaries - aliased) is what a real mesh would need per "
        "device.",
        "",
        "The step: the graph's forward and hand-derived backward (loss and every parameter "
        "gradient) in one `jax.jit`, each node pinned to its `verify --mesh` layout; the "
        "reference is the same graph jitted on one device without pins. Step time: median "
        f"of {repeats} warm calls, interleaved (one call of each program per round); the "
        "unsharded jit against `dp=1` (the same work) shows the noise of the shared cores "
        "(other jobs run on them too).",
        "",
        "Reading: a tiny step is under a millisecond, so its ratios are mostly the fixed cost "
        "of dispatching one program to more device threads; mid's are the overhead on real "
        "work. Under `dp` the parameters and their gradients stay replicated, so only the "
        "activations shrink; `tp` halves the weights "
        "each device holds; `sp` splits the activations along the sequence but all-gathers "
        "the keys and values.",
        "",
    ]
    for preset_name, rows in results.items():
        seq_len, batch = SIZES[preset_name]
        base = rows[0]
        lines += [f"## {preset_name} (batch {batch}, sequence {seq_len})", "",
                  "| mesh | devices | step (ms) | step / unsharded | memory per device (MiB) "
                  "| memory / unsharded | inputs on device 0 (MiB) | collectives in HLO "
                  "| compile (s) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in rows:
            mem_ratio = ("n/a" if r["memory"] is None or not base["memory"]
                         else f"{r['memory'] / base['memory']:.2f}")
            lines.append(
                f"| {r['mesh']} | {r['devices']} | {1e3 * r['step_s']:.2f} | "
                f"{r['step_s'] / base['step_s']:.2f} | {_mib(r['memory'])} | {mem_ratio} | "
                f"{_mib(r['input_bytes'])} | {r.get('collectives', '-')} | "
                f"{r['compile_s']:.1f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", nargs="+", default=list(SIZES))
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    progress(f"measuring {', '.join(args.presets)} on {', '.join(MESHES)} ...")
    results = _subprocess(args.presets, args.repeats)
    publish(table(results, args.repeats, time.perf_counter() - t0),
            ROOT / "benchmarks" / "sharding.md", args.write)


if __name__ == "__main__":
    main()
