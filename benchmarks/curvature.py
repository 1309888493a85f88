r"""Curvature products as ratios to the gradient, measured in one run on this machine.

On the ``mid`` preset (4 blocks, d = 256, V = 2048), every function jitted once and timed
from the parameters (each includes its own forward pass, as an optimizer step would):

* gradient: forward + back-propagation with the ops' hand VJPs (the unit);
* GGN-vector product: forward + forward mode (hand JVPs) + the loss Hessian in the logits
  + back-propagation from the logits; goal <= 3;
* Hessian-vector product: forward-over-reverse (``jax.jvp`` of the hand-VJP gradient);
  goal <= 4;
* K-FAC factors of every linear layer: forward + one back-propagation of Monte-Carlo seeds
  (one sample) + the factors' Gram matrices; goal <= 1.5. The Gram matrices cost
  :math:`2T(d_{in}^2 + d_{out}^2)` flops per layer for :math:`T` tokens against
  :math:`6T d_{in} d_{out}` for the layer's share of the gradient, so wide layers (the MLP's
  1:4, the unembedding's 1:8) make the factors dearer than the gradient itself; the same
  ratio without the unembedding's vocabulary-sized factor is reported too;
* the same factors from a quarter of the positions (``rows``: the statistics of ``T/4``
  positions drawn uniformly, unbiased; the back-propagation still runs on every position),
  with their measured error: the relative Frobenius error of :math:`A_f\otimes G_f` per
  layer, of one Monte-Carlo sample on every position and on a quarter of them, against a
  reference of ``--reference-samples`` samples on every position, so the error the
  subsampling adds is read against the sampling error one-sample K-FAC already accepts;

and the largest model whose dense GGN the test suite checks against ``jax.hessian`` /
``jax.jacfwd`` (from ``tests/test_curvature_graph.py``).

Run from the repository root: ``python benchmarks/curvature.py [--repeats 20]``. Timings
are medians over interleaved repeats after a warm-up call (compilation reported apart).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from nlaverify.config import preset
from nlaverify.curvature.graph import curvature_problem, params_cotangent, product
from nlaverify.curvature.kfac import subsample_rows
from nlaverify.curvature.kfac_graph import factors_from_seeds, linear_layers, sampled_seeds
from nlaverify.curvature.operators import _hessian_jax
from nlaverify.graph.build import build_transformer
from nlaverify.graph.core import evaluate
from nlaverify.graph.run import init_params, sample_data


def _block(x: Any) -> Any:
    import jax

    return jax.block_until_ready(x)


def functions(preset_name: str, n: int, batch: int | None) -> tuple[dict[str, Callable], Any]:
    """The jitted functions of the benchmark and their arguments, for one model."""
    import jax
    import jax.numpy as jnp

    cfg = preset(preset_name)
    graph = build_transformer(cfg)
    params = init_params(graph, 0)
    data = sample_data(cfg.vocab_size, n, 0, batch=batch)
    problem = curvature_problem(graph, "jax", params, data)
    xp = problem.xp

    def forward(inputs: dict[str, Any]) -> dict[str, Any]:
        return {**inputs, **evaluate(graph, xp, inputs, outputs=[problem.loss])}

    layers = linear_layers(problem)
    z = problem.values[problem.logits]
    noise = jax.random.uniform(jax.random.key(1), (1, *z.shape), dtype=z.dtype,
                               minval=jnp.finfo(z.dtype).tiny)
    rng = np.random.default_rng(2)
    v = {p: jnp.asarray(rng.standard_normal(problem.shapes[p])) for p in problem.params}
    inner = tuple(ly for ly in layers if ly.weight != "unembed.W_U")
    T = int(np.prod(np.shape(z)[:-1]))
    quarter = subsample_rows(T, max(1, T // 4), 3)
    fns = {
        "gradient": (jax.jit(lambda i: params_cotangent(problem, forward(i), None,
                                                        root=problem.loss)), ()),
        "ggn_vp": (jax.jit(lambda i, v: product(problem, "ggn", forward(i), problem.weights,
                                                v)), (v,)),
        "hessian_vp": (jax.jit(lambda i, v: _hessian_jax(problem, i, v)), (v,)),
        "kfac_factors": (jax.jit(lambda i, e: factors_from_seeds(
            problem, (vals := forward(i)), sampled_seeds(problem, vals[problem.logits], e),
            layers, "expand")), (noise,)),
        "kfac_no_unembed": (jax.jit(lambda i, e: factors_from_seeds(
            problem, (vals := forward(i)), sampled_seeds(problem, vals[problem.logits], e),
            inner, "expand")), (noise,)),
        "kfac_quarter": (jax.jit(lambda i, e: factors_from_seeds(
            problem, (vals := forward(i)), sampled_seeds(problem, vals[problem.logits], e),
            layers, "expand", rows=quarter)), (noise,)),
    }
    return fns, (problem.inputs, problem.size, len(layers))


def bench(preset_name: str, n: int, batch: int | None, repeats: int) -> dict[str, float]:
    fns, (inputs, size, n_layers) = functions(preset_name, n, batch)
    compile_s, times = {}, {k: [] for k in fns}
    for name, (f, extra) in fns.items():
        t0 = time.perf_counter()
        _block(f(inputs, *extra))
        compile_s[name] = time.perf_counter() - t0
    for _ in range(repeats):
        for name, (f, extra) in fns.items():
            t0 = time.perf_counter()
            _block(f(inputs, *extra))
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(t) for k, t in times.items()}
    out = {f"{k}_s": v for k, v in med.items()}
    for k in ("ggn_vp", "hessian_vp", "kfac_factors", "kfac_no_unembed", "kfac_quarter"):
        out[f"{k}/gradient"] = med[k] / med["gradient"]
    out["parameters"] = size
    out["linear_layers"] = n_layers
    out.update({f"compile_{k}_s": v for k, v in compile_s.items()})
    return out


def _kron_error(A: np.ndarray, G: np.ndarray, A0: np.ndarray, G0: np.ndarray) -> float:
    r""":math:`\lVert A\otimes G - A_0\otimes G_0\rVert_F / \lVert A_0\otimes G_0\rVert_F`
    from the factors (:math:`\lVert X\otimes Y\rVert_F = \lVert X\rVert_F\lVert Y\rVert_F`,
    :math:`\langle X\otimes Y, Z\otimes W\rangle = \langle X, Z\rangle\langle Y, W\rangle`)."""
    aa, gg = float(np.sum(A * A)), float(np.sum(G * G))
    a0, g0 = float(np.sum(A0 * A0)), float(np.sum(G0 * G0))
    cross = float(np.sum(A * A0)) * float(np.sum(G * G0))
    return float(np.sqrt(max(aa * gg + a0 * g0 - 2 * cross, 0.0) / (a0 * g0)))


def subsampling_errors(preset_name: str, n: int, batch: int | None,
                       reference_samples: int) -> dict[str, Any]:
    """Per-layer K-FAC block errors of one sample on all positions and on a quarter of them,
    against ``reference_samples`` samples on all positions (float64, JAX)."""
    from nlaverify.curvature.kfac_graph import layer_factors

    cfg = preset(preset_name)
    graph = build_transformer(cfg)
    problem = curvature_problem(graph, "jax", init_params(graph, 0),
                                sample_data(cfg.vocab_size, n, 0, batch=batch))
    T = int(np.prod(np.shape(problem.values[problem.logits])[:-1]))

    def host(f: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return {k: (np.asarray(v.A, dtype=np.float64), np.asarray(v.G, dtype=np.float64))
                for k, v in f.items()}

    ref = host(layer_factors(problem, samples=reference_samples, seed=100))
    one = host(layer_factors(problem, samples=1, seed=7))
    sub = host(layer_factors(problem, samples=1, seed=7, positions=T // 4))
    rows = {k: {"full_positions": _kron_error(*one[k], *ref[k]),
                "quarter_positions": _kron_error(*sub[k], *ref[k]),
                "quarter_vs_full": _kron_error(*sub[k], *one[k])} for k in ref}
    return {"positions": T, "kept": T // 4, "reference_samples": reference_samples,
            "layers": rows}


def dense_checked_in_ci() -> int:
    """The parameter count of the largest model whose dense GGN the test suite checks."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tests" / "test_curvature_graph.py"
    spec = importlib.util.spec_from_file_location("test_curvature_graph", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return int(module.largest_dense_checked())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--preset", default="mid")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--reference-samples", type=int, default=32)
    args = p.parse_args()
    goals = {"ggn_vp/gradient": 3.0, "hessian_vp/gradient": 4.0, "kfac_factors/gradient": 1.5}
    res = bench(args.preset, args.seq_len, args.batch, args.repeats)
    print(f"{args.preset}: batch {args.batch} x {args.seq_len} positions, "
          f"{res['parameters']:,} parameters, {res['linear_layers']} linear layers; "
          f"gradient {1e3 * res['gradient_s']:.2f} ms")
    for k, goal in goals.items():
        verdict = "meets" if res[k] <= goal else "misses"
        print(f"  {k:<22} {res[k]:6.2f}   (goal <= {goal:g}: {verdict})")
    print(f"  {'kfac_no_unembed/gradient':<22} {res['kfac_no_unembed/gradient']:6.2f}   "
          "(every linear layer but the unembedding)")
    print(f"  {'kfac_quarter/gradient':<22} {res['kfac_quarter/gradient']:6.2f}   (goal <= 1.5: "
          f"{'meets' if res['kfac_quarter/gradient'] <= 1.5 else 'misses'}; statistics of a "
          "quarter of the positions, unbiased)")
    err = subsampling_errors(args.preset, args.seq_len, args.batch, args.reference_samples)
    med = {k: float(np.median([r[k] for r in err["layers"].values()]))
           for k in ("full_positions", "quarter_positions", "quarter_vs_full")}
    top = {k: float(np.max([r[k] for r in err["layers"].values()])) for k in med}
    print(f"  K-FAC block error against {err['reference_samples']} samples on all "
          f"{err['positions']} positions, median (max) over {len(err['layers'])} layers: "
          f"one sample, all positions {med['full_positions']:.3f} ({top['full_positions']:.3f});"
          f" one sample, {err['kept']} positions {med['quarter_positions']:.3f} "
          f"({top['quarter_positions']:.3f}); quarter against all, same sample "
          f"{med['quarter_vs_full']:.3f} ({top['quarter_vs_full']:.3f})")
    print("  compile (s): " + ", ".join(f"{k[8:-2]} {v:.1f}" for k, v in res.items()
                                        if k.startswith("compile_")))
    print(f"largest model whose dense GGN is checked in CI: {dense_checked_in_ci():,} "
          "parameters")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
