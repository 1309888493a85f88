"""Low rank in one run: randomized SVD against the full SVD, LoRA against full fine-tuning.

* Randomized SVD (:func:`nlaverify.lowrank.randomized_svd`, rank ``k = 64``, oversampling
  ``p = 10``, ``q`` power iterations, JAX float32 ``jit``) against the full SVD of the same
  matrix (``jnp.linalg.svd``, LAPACK, float32, the peer), on an ``n x n`` matrix with a
  decaying spectrum :math:`\\sigma_j = 1/j`, built as :math:`U\\operatorname{diag}(\\sigma)
  V^\\top` with random orthogonal factors: the time ratio (full over randomized), and the
  randomized error in the spectral norm over :math:`\\sigma_{k+1}` (1 is Eckart–Young's
  optimum; HMT's expected-error bound is printed next to it).
* The same randomized SVD against scikit-learn's ``randomized_svd`` (the peer a user would
  otherwise pick; NumPy + LAPACK, float32 in, same ``k``, ``p``, ``q``), with its power
  iterations normalised by QR (the same algorithm: HMT Alg. 4.4) and with its default
  (LU normalisation): medians of interleaved calls, and the spectral error of each over
  :math:`\\sigma_{k+1}`, at ``--sizes`` (2048 and 4096). Needs ``pip install scikit-learn``
  (the ``bench`` extra); without it that table says so and is skipped.
* LoRA: one forward + backward of the ``mid`` config (float32, JAX ``jit``, the graph's
  hand-derived VJPs) returning the gradients of the LoRA adapters only (rank ``r`` on
  ``q, v``; the frozen weights' gradients are dead code that XLA removes) over the same
  returning every parameter's gradient (full fine-tuning).

Every function is compiled once (reported apart) and timed with ``block_until_ready``,
best of ``--repeats``. Run from the repository root:
``python benchmarks/lowrank.py [--size 4096] [--sizes 2048 4096] [--repeats 3] [--json out.json]
[--write]`` (``--write`` writes ``benchmarks/lowrank.md``).
Baggag & Saad §4.1, §4.2; Halko, Martinsson & Tropp 2011; Hu et al. 2022.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np
from _timing import best_time, progress, publish


def test_matrix(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    r""":math:`U\operatorname{diag}(1/j)V^\top` (float32) and its singular values."""
    rng = np.random.default_rng(seed)
    U, _ = np.linalg.qr(rng.standard_normal((n, n)))
    V, _ = np.linalg.qr(rng.standard_normal((n, n)))
    s = 1.0 / np.arange(1, n + 1)
    return ((U * s) @ V.T).astype(np.float32), s


def randomized_vs_full(n: int, k: int, p: int, q: int, repeats: int) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from nlaverify.backends import get_namespace
    from nlaverify.lowrank import expected_error_bound, randomized_svd

    xp = get_namespace("jax")
    A_host, s = test_matrix(n)
    A = jnp.asarray(A_host)
    rand = jax.jit(lambda M: randomized_svd(xp, M, k, p, q, seed=0))
    full = jax.jit(lambda M: jnp.linalg.svd(M, full_matrices=False))
    progress(f"randomized SVD k={k} p={p} q={q} on {n}x{n} ...")
    c_rand, t_rand = best_time(rand, A, repeats=repeats)
    progress(f"full SVD on {n}x{n} (LAPACK) ...")
    c_full, t_full = best_time(full, A, repeats=max(1, repeats // 3))
    U, sk, Vh = (np.asarray(a, dtype=np.float64) for a in rand(A))
    E = A_host.astype(np.float64) - (U * sk) @ Vh
    # the spectral norm of the residual (LAPACK, float64)
    err = float(np.linalg.norm(E, 2))
    _, spectral_bound = expected_error_bound(s, k, p, q)
    return {"n": n, "k": k, "p": p, "q": q, "randomized_s": t_rand, "full_s": t_full,
            "compile_randomized_s": c_rand, "compile_full_s": c_full,
            "full_over_randomized": t_full / t_rand, "error_spectral": err,
            "sigma_k_plus_1": float(s[k]), "error_over_sigma_k_plus_1": err / s[k],
            "hmt_expected_bound_over_sigma_k_plus_1": spectral_bound / s[k]}


def spectral_error(A64: np.ndarray, U: Any, s: Any, Vh: Any) -> float:
    r""":math:`\|A - U\operatorname{diag}(s)V^\top\|_2` in float64 (LAPACK)."""
    U, s, Vh = (np.asarray(a, dtype=np.float64) for a in (U, s, Vh))
    return float(np.linalg.norm(A64 - (U * s) @ Vh, 2))


def randomized_vs_sklearn(n: int, k: int, p: int, q: int, repeats: int) -> dict[str, Any]:
    """nlaverify's randomized SVD under ``jax.jit`` against scikit-learn's on the same
    float32 matrix: medians of ``repeats`` interleaved calls after a warm-up each."""
    import time

    import jax
    import jax.numpy as jnp

    from nlaverify.backends import get_namespace
    from nlaverify.lowrank import randomized_svd

    try:
        from sklearn.utils.extmath import randomized_svd as sk_svd
    except ImportError:
        return {"n": n, "skipped": "scikit-learn is not installed (pip install scikit-learn)"}
    xp = get_namespace("jax")
    A_host, s = test_matrix(n)
    A64 = A_host.astype(np.float64)
    A = jnp.asarray(A_host)
    ours = jax.jit(lambda M: randomized_svd(xp, M, k, p, q, seed=0))
    calls = {
        "nlaverify_jax": lambda: jax.block_until_ready(ours(A)),
        "sklearn_qr": lambda: sk_svd(A_host, k, n_oversamples=p, n_iter=q,
                                     power_iteration_normalizer="QR", random_state=0),
        "sklearn_default": lambda: sk_svd(A_host, k, n_oversamples=p, n_iter=q,
                                          random_state=0),
    }
    progress(f"randomized SVD on {n}x{n}: nlaverify (JAX jit) vs scikit-learn ...")
    out = {name: f() for name, f in calls.items()}  # warm-up (and compilation)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, f in calls.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    med = {name: float(np.median(v)) for name, v in times.items()}
    err = {name: spectral_error(A64, *res) / s[k] for name, res in out.items()}
    return {"n": n, "k": k, "p": p, "q": q, "seconds": med,
            "error_over_sigma_k_plus_1": err,
            "ours_over_sklearn_qr": med["nlaverify_jax"] / med["sklearn_qr"],
            "ours_over_sklearn_default": med["nlaverify_jax"] / med["sklearn_default"]}


def sklearn_table(rows: list[dict[str, Any]], load: float) -> str:
    """The Markdown table of :func:`randomized_vs_sklearn` over sizes."""
    head = ("| n | nlaverify JAX jit (s) | scikit-learn QR (s) | ratio | scikit-learn default "
            "(s) | ratio | error / sigma_(k+1): ours, sklearn QR, sklearn default |\n"
            "|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['n']} | skipped: {r['skipped']} | | | | | |")
            continue
        t, e = r["seconds"], r["error_over_sigma_k_plus_1"]
        lines.append(f"| {r['n']} | {t['nlaverify_jax']:.3f} | {t['sklearn_qr']:.3f} | "
                     f"{r['ours_over_sklearn_qr']:.2f} | {t['sklearn_default']:.3f} | "
                     f"{r['ours_over_sklearn_default']:.2f} | {e['nlaverify_jax']:.3f}, "
                     f"{e['sklearn_qr']:.3f}, {e['sklearn_default']:.3f} |")
    return head + "\n".join(lines) + "\n"


def lora_vs_full(rank: int, batch: int, seq_len: int, repeats: int) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from nlaverify.backends import get_namespace
    from nlaverify.config import preset
    from nlaverify.finetune import lora_init, lora_names
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.core import backprop, evaluate
    from nlaverify.graph.run import init_params, sample_data

    xp = get_namespace("jax")
    base_cfg = preset("mid")
    cfg = base_cfg.replace(lora_rank=rank, lora_targets=("q", "v"))
    graph, base_graph = build_transformer(cfg), build_transformer(base_cfg)
    base = init_params(base_graph, 0)
    lora = lora_init(cfg, base, 0)
    names = set(lora_names(cfg))
    f32 = {k: jnp.asarray(v, dtype=jnp.float32) for k, v in lora.items()}
    train_p = {k: v for k, v in f32.items() if k in names}
    frozen = {k: v for k, v in f32.items() if k not in names}
    full_p = {k: jnp.asarray(v, dtype=jnp.float32) for k, v in base.items()}
    data = {k: jnp.asarray(v) for k, v in sample_data(cfg.vocab_size, seq_len, 0,
                                                      batch=batch, pad=False).items()}

    def grads(g: Any, wanted: dict[str, Any], fixed: dict[str, Any], d: dict[str, Any]):
        values = evaluate(g, xp, {**d, **fixed, **wanted})
        cot = backprop(g, xp, values, "loss")
        return values["loss"], {k: cot[k] for k in wanted}

    f_lora = jax.jit(lambda w, fx, d: grads(graph, w, fx, d))
    f_full = jax.jit(lambda w, d: grads(base_graph, w, {}, d))
    progress(f"mid: forward + LoRA gradients (r={rank} on q, v), batch {batch}x{seq_len} ...")
    c_lora, t_lora = best_time(f_lora, train_p, frozen, data, repeats=repeats)
    progress("mid: forward + every gradient (full fine-tuning) ...")
    c_full, t_full = best_time(f_full, full_p, data, repeats=repeats)
    n_lora = sum(int(np.size(v)) for v in train_p.values())
    n_full = sum(int(np.size(v)) for v in full_p.values())
    return {"config": "mid", "rank": rank, "targets": ["q", "v"], "batch": batch,
            "seq_len": seq_len, "lora_s": t_lora, "full_s": t_full,
            "compile_lora_s": c_lora, "compile_full_s": c_full,
            "lora_over_full": t_lora / t_full, "trainable_lora": n_lora,
            "trainable_full": n_full}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096])
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--oversampling", type=int, default=10)
    ap.add_argument("--power", type=int, default=2)
    ap.add_argument("--lora-rank", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    import os
    from datetime import date
    from pathlib import Path

    load = os.getloadavg()[0]
    peer = [randomized_vs_sklearn(n, a.rank, a.oversampling, a.power, max(5, a.repeats))
            for n in a.sizes]
    svd = randomized_vs_full(a.size, a.rank, a.oversampling, a.power, a.repeats)
    lora = lora_vs_full(a.lora_rank, a.batch, a.seq_len, a.repeats)
    print(f"randomized SVD (k={svd['k']}, p={svd['p']}, q={svd['q']}) on {svd['n']}^2 float32:"
          f" {svd['randomized_s']:.3f} s; full SVD {svd['full_s']:.2f} s; full/randomized = "
          f"{svd['full_over_randomized']:.1f}x; error/sigma_(k+1) = "
          f"{svd['error_over_sigma_k_plus_1']:.3f} (HMT expected bound "
          f"{svd['hmt_expected_bound_over_sigma_k_plus_1']:.3f})")
    print(f"LoRA forward+grad (mid, r={lora['rank']} on q,v, {lora['trainable_lora']:,} of "
          f"{lora['trainable_full']:,} parameters): {1e3 * lora['lora_s']:.1f} ms; full "
          f"{1e3 * lora['full_s']:.1f} ms; LoRA/full = {lora['lora_over_full']:.3f}")
    text = (f"# Randomized SVD: nlaverify (JAX jit) against scikit-learn\n\nGenerated by "
            f"`python benchmarks/lowrank.py --write` ({date.today()}; load average {load:.2f} "
            f"when it started; {os.cpu_count()} cores, no GPU). Rank k = {a.rank}, "
            f"oversampling p = {a.oversampling}, q = {a.power} power iterations, float32, "
            f"the matrix U diag(1/j) V^T; medians of interleaved calls.\n\n"
            + sklearn_table(peer, load)
            + f"\nAgainst LAPACK's full SVD at {svd['n']}^2: full/randomized = "
            f"{svd['full_over_randomized']:.1f}x. LoRA forward+grad over full fine-tuning "
            f"(mid): {lora['lora_over_full']:.3f}.\n")
    publish(text, Path(__file__).with_name("lowrank.md"), a.write)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"randomized_svd": svd, "sklearn": peer, "lora": lora}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
