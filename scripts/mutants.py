"""The planted-bug audit nlaverify runs on itself (issue 24, item 3): each mutant is a small
source edit (a dropped term, a flipped order, a wrong constant) in a throw-away copy of the
checkout (``git worktree``), judged by the command that should kill it. A mutant is
*killed* when that command fails, and *localized* when its output names the place (the
node, block, tensor, estimator, identity or note given as ``where``).

Run nightly, not in CI (each mutant runs its own tests: minutes in all)::

    python scripts/mutants.py [--only NAME ...] [--write]   # --write: scripts/mutants.md

The worktree is created from HEAD, so commit before auditing; the checkout is never edited.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    """One planted bug: ``old`` replaced by ``new`` (once) in ``path``; ``command`` (run in
    the mutated copy) must fail, and its output should contain ``where``."""

    area: str
    name: str
    path: str
    old: str
    new: str
    command: tuple[str, ...]
    where: str


def _pytest(*nodes: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *nodes)


def _derive(*ids: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "nlaverify", "derive", "--check", "--jobs", "1", *ids)


MUTANTS: tuple[Mutant, ...] = (
    Mutant("ops", "rmsnorm VJP: the x-hat projection dropped", "nlaverify/ops/norms.py",
           "dx = (gx - xhat * _mean(xp, gx * xhat, d)) / rho / s", "dx = gx / rho / s",
           _derive("rmsnorm_vjp"), "rmsnorm_vjp"),
    Mutant("pipeline", "tanh GELU's cubic coefficient halved", "nlaverify/ops/activations.py",
           "(1 + xp.tanh(k * (x + a * x * x * x)))", "(1 + xp.tanh(k * (x + a / 2 * x * x * x)))",
           (sys.executable, "-m", "nlaverify", "verify", "--preset", "tiny"), "mlp.act"),
    Mutant("curvature", "Hessian product: Richardson step dropped",
           "nlaverify/curvature/hessian.py",
           "return {p: (4 * fine[p] - coarse[p]) / 3 * s for p in problem.params}",
           "return {p: fine[p] * s for p in problem.params}",
           _pytest("tests/test_curvature_graph.py::"
                   "test_mpmath_hessian_by_extrapolated_differences_matches_jax"), "fd_step"),
    Mutant("curvature", "Hutchinson: normal probes under the name rademacher",
           "nlaverify/curvature/solvers.py",
           'make = {"rademacher": stochtrace.sampler_signs,',
           'make = {"rademacher": stochtrace.sampler_normal,',
           _pytest("tests/test_power.py"), "rademacher"),
    Mutant("curvature", "K-FAC subsampled G without its NR/#I scale",
           "nlaverify/curvature/kfac.py",
           "G_scale = xp.rational(N * R, len(idx))",
           "G_scale = None",
           _pytest("tests/test_kronecker_kfac.py::test_subsampled_factors_are_unbiased_exactly"),
           "G_sum"),
    Mutant("interop", "RoPE permutation: HF's halves taken as pairs",
           "nlaverify/interop/weights_layout.py",
           "return np.stack([np.arange(half), np.arange(half) + half], axis=1).reshape(-1)",
           "return np.arange(2 * half)",
           _pytest("tests/test_interop_weights.py::test_rope_permutation_pairs_hf_halves"),
           "rope_permutation"),
    Mutant("scaling", "Chinchilla: N* with the exponent alpha/(alpha+beta)",
           "nlaverify/scaling.py", "N = G * (C / 6) ** (law.beta / s)",
           "N = G * (C / 6) ** (law.alpha / s)", _derive("chinchilla_compute_optimal"),
           "chinchilla_compute_optimal"),
    Mutant("ssm", "phi1 dropped (Euler for A in ZOH's B)", "nlaverify/ops/ssm.py",
           "return xp.where(zero, 1 + z / 2, xp.expm1(z) / xp.where(zero, xp.ones_like(z), z))",
           "return xp.ones_like(z)", _derive("ssm_zoh_exact"), "ssm_zoh_exact"),
    Mutant("objectives", "KL computed as sum p log q only", "nlaverify/objectives.py",
           "return xp.sum(_p_log_q(\"kl\", xp, p, p) - _p_log_q(\"kl\", xp, p, q), axis=-1)",
           "return xp.sum(_p_log_q(\"kl\", xp, q, q) - _p_log_q(\"kl\", xp, q, p), axis=-1)",
           _derive("cross_entropy_kl_entropy"), "cross_entropy_kl_entropy"),
    Mutant("interpretability", "norm bias folded without the reader's bias",
           "nlaverify/transform/weights.py", "    return beta @ W + b", "    return beta @ W",
           _pytest("tests/test_transform.py"), "blocks.0"),
    Mutant("decoding", "beam search: every candidate may finish, not the first B",
           "nlaverify/beam.py", "just = stops & (np.arange(keep) < B)", "just = stops",
           _pytest("tests/test_beam.py"), "test_equals_hugging_face_generate"),
    Mutant("decoding", "top-p filter before the temperature", "nlaverify/strategy.py",
           "        return dec.top_p(z, p)  # type: ignore[arg-type]",
           "        return dec.renormalise(dec._NP, z, dec.top_p(z * temperature, p) > 0)",
           _pytest("tests/test_strategy.py"), "top-p"),
    Mutant("decoding", "top-p reaching p read as exceeding it", "nlaverify/decoding.py",
           "np.take_along_axis(flat, order, axis=-1), axis=-1) >= p,",
           "np.take_along_axis(flat, order, axis=-1), axis=-1) > p,",
           _derive("decoding_top_p_smallest_set"), "decoding_top_p_smallest_set"),
    Mutant("ssm", "JAX's linear recurrence without the decay", "nlaverify/backends/arrayapi.py",
           "new = ab[0] * x + ab[1]", "new = x + ab[1]",
           _pytest("tests/test_ssm.py::test_selective_scan_vjp_and_jvp_match_jax_autodiff"
                   "_with_batch_axes"), "selective_scan"),
    Mutant("interop", "HF Mamba: x_proj's B and C rows swapped",
           "nlaverify/interop/weights_layout.py",
           '(f"{q}dt_low.W", f"{q}B.W", f"{q}C.W")', '(f"{q}dt_low.W", f"{q}C.W", f"{q}B.W")',
           _pytest("tests/test_interop_mamba.py::test_exact_mode_agrees_in_every_node_loss_and"
                   "_gradient"), "blocks.0.mamba"),
    Mutant("online_softmax", "merge without rescaling the second block",
           "nlaverify/ops/online_softmax.py",
           "acc = [alpha * x + beta * y for x, y in zip(acc_a, acc_b, strict=True)]",
           "acc = [alpha * x + y for x, y in zip(acc_a, acc_b, strict=True)]",
           _derive("online_softmax_merge"), "online_softmax_merge"),
    Mutant("optimizers", "Adam's bias correction inverted", "nlaverify/optim/elementwise.py",
           "    return m / bias_factor(xp, beta, count, m)",
           "    return m * bias_factor(xp, beta, count, m)",
           _derive("adam_bias_correction"), "adam_bias_correction"),
    Mutant("geometry", "cosine density with the exponent (d-1)/2", "nlaverify/geometry/angles.py",
           "    return c * (1 - t * t) ** _exponent(xp, d)",
           "    return c * (1 - t * t) ** (_exponent(xp, d) + 1)",
           _derive("geometry_cosine_density"), "geometry_cosine_density"),
    Mutant("sharding", "data-parallel gradient over the shard count, not the tokens",
           "nlaverify/sharding/data.py",
           "    return all_reduce_sum(xp, grads) / sum(token_count(t, ignore_index) for t in T)",
           "    return all_reduce_sum(xp, grads) / len(T)",
           _derive("data_parallel_gradient_token_weighted"),
           "data_parallel_gradient_token_weighted"),
    Mutant("diffusion", "ELBO weight without 1 - alpha", "nlaverify/diffusion.py",
           "    return -schedule.alpha_prime(xp, t) / (1 - schedule.alpha(xp, t))",
           "    return -schedule.alpha_prime(xp, t)",
           _derive("masked_elbo_continuous_limit"), "masked_elbo_continuous_limit"),
    Mutant("architectures", "MLA absorbed query without the score scale", "nlaverify/ops/mla.py",
           "        Qt = xp.matmul(xp.matmul(X, W_Q[h]), xp.matrix_transpose(W_UK[h])) * scale",
           "        Qt = xp.matmul(xp.matmul(X, W_Q[h]), xp.matrix_transpose(W_UK[h]))",
           _derive("mla_absorption"), "mla_absorption"),
    Mutant("batching", "the mean over the targets off by one", "nlaverify/ops/loss.py",
           '    return count if reduction == "mean" else xp.rational(1)',
           '    return count + 1 if reduction == "mean" else xp.rational(1)',
           _derive("cross_entropy_batch"), "cross_entropy_batch"),
    Mutant("attention", "positive random features without their -(1/2) squared-norm term",
           "nlaverify/ops/feature_maps.py",
           "    return xp.matmul(X, xp.matrix_transpose(W)) - _sqnorm(xp, X) * xp.rational(1, 2)",
           "    return xp.matmul(X, xp.matrix_transpose(W))",
           _derive("attention_random_features_unbiased"), "attention_random_features_unbiased"),
    Mutant("lowrank", "Eckart-Young's Frobenius error without its square root",
           "nlaverify/lowrank/svd.py", "    return tail[0], xp.sqrt(xp.sum(tail * tail))",
           "    return tail[0], xp.sum(tail * tail)", _derive("lowrank_eckart_young"),
           "lowrank_eckart_young"),
    Mutant("check", "check_curvature: a GGN without the loss Hessian goes unnamed",
           "nlaverify/check/curvature_hints.py",
           'out["J^T W J v: the loss Hessian H_l left out (taken as the identity)"]',
           'out["J^T W J v: (unnamed)"]',
           _pytest("tests/test_check_curvature.py::test_failing_product_is_diagnosed"),
           "the loss Hessian H_l left out"),
    Mutant("ssm", "Mamba-2 scan VJP: the skip's cotangent dropped", "nlaverify/ops/ssm2.py",
           "axis=-1) * Dt[..., None] + G * D[:, None],", "axis=-1) * Dt[..., None],",
           _derive("ssm_mamba2_scan_vjp"), "ssm_mamba2_scan_vjp"),
    Mutant("ssm", "Mamba-2 chunks: the carried state read out one decay short",
           "nlaverify/ops/ssm2.py", "xp.exp(xp.sum(log_a[lo:t + 1]))",
           "xp.exp(xp.sum(log_a[lo:t]))", _derive("ssm_ssd_chunked_equals_recurrence"),
           "ssm_ssd_chunked_equals_recurrence"),
    Mutant("architectures", "DeepSeek-V3 gates without the routed scaling factor",
           "nlaverify/ops/moe_routing.py",
           "return rho * a / _normaliser(xp, a, eps) if renormalize else rho * a",
           "return a / _normaliser(xp, a, eps) if renormalize else rho * a",
           _derive("moe_deepseek_v3_gates_sum"), "moe_deepseek_v3_gates_sum"),
    Mutant("pipeline", "RWKV channel mixing without its receptance gate",
           "nlaverify/ops/rwkv_block.py", "    return r * xp.matmul(relu * relu, W_v)",
           "    return xp.matmul(relu * relu, W_v)",
           (sys.executable, "-m", "nlaverify", "verify", "--preset", "tiny-rwkv"),
           "channel_mix"),
    Mutant("architectures", "DeepSeek-V2 groups scored by their best two (V3's), not their max",
           "nlaverify/ops/moe_deepseek_v2.py", "best=1)   # a group scores its maximum",
           "best=2)",
           _derive("moe_group_max_all_groups_is_topk"), "moe_group_max_all_groups_is_topk"),
    Mutant("pipeline", "MLA: the key-value latent's RMSNorm skipped",
           "nlaverify/graph/build_mla.py",
           'ckv = gain("kv_a_norm", b.project(f"{p}.c_kv", x, d, r, False, comp, block, '
           '"W_DKV"), r)',
           'ckv = b.project(f"{p}.c_kv", x, d, r, False, comp, block, "W_DKV")',
           _pytest("tests/test_mla_graph.py::test_mla_graph_agrees_with_autodiff_and_the"
                   "_independent_model"), "kv_a_norm"),
    Mutant("ops", "learned positions read from row 0 (OPT's offset dropped)",
           "nlaverify/ops/embedding.py", 'return X + W_P[offset: offset + dims["n"], ...]',
           'return X + W_P[: dims["n"], ...]', _derive("add_learned_positions_offset_vjp"),
           "add_learned_positions_offset_vjp"),
    Mutant("interop", "HF RWKV: time mixing's key and receptance mixes swapped",
           "nlaverify/interop/weights_layout_rwkv.py",
           '(f"{att}time_mix_{k}",), ((1, 1, d),), (f"{q}mu_{k[0]}",)',
           '(f"{att}time_mix_{k}",), ((1, 1, d),), '
           '(f"{q}mu_{dict(k=\'r\', r=\'k\').get(k[0], k[0])}",)',
           _pytest("tests/test_interop_rwkv.py::test_exact_mode_agrees_in_every_node_loss_and"
                   "_gradient"), "blocks.0.rwkv.time_mix"),
)


def _run(m: Mutant, tree: Path, timeout: int) -> tuple[bool, bool, float, str]:
    target = tree / m.path
    src = target.read_text(encoding="utf-8")
    if src.count(m.old) != 1:
        return (False, False, 0.0,
                f"the mutation site is not unique in {m.path} ({src.count(m.old)})")
    target.write_text(src.replace(m.old, m.new), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(tree), NLAVERIFY_JAX_CACHE="0")
    t0 = time.perf_counter()
    try:
        done = subprocess.run(m.command, cwd=tree, env=env, capture_output=True, text=True,
                              timeout=timeout)
        out, failed = done.stdout + done.stderr, done.returncode != 0
        if m.command[2:4] == ("nlaverify", "derive"):
            # the mutation also leaves the identity's record stale, which fails `derive
            # --check` whatever the proof says: the kill counts only if the proof fails
            failed = failed and f"FAIL {m.where}: failed" in out
    except subprocess.TimeoutExpired:
        out, failed = "timeout", False
    finally:
        target.write_text(src, encoding="utf-8")
    return failed, failed and m.where in out, time.perf_counter() - t0, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", default=None, help="substrings of mutant names")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if not a.only or any(s in m.name for s in a.only)]
    tree = Path(tempfile.mkdtemp(prefix="nlaverify-mutants-")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), "HEAD"], cwd=ROOT,
                   check=True)
    rows = []
    try:
        for m in chosen:
            print(f"{m.area}: {m.name} ...", file=sys.stderr, flush=True)
            killed, localized, seconds, problem = _run(m, tree, a.timeout)
            rows.append((m, killed, localized, seconds, problem))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
        shutil.rmtree(tree.parent, ignore_errors=True)
    lines = ["| area | planted bug | killed | localized (named) | s |", "|---|---|---|---|---|"]
    for m, killed, localized, seconds, problem in rows:
        lines.append(f"| {m.area} | {m.name} | {'yes' if killed else 'NO'} | "
                     f"{('yes: ' + m.where) if localized else 'no'} | {seconds:.0f} |"
                     + (f" {problem}" if problem else ""))
    k = sum(r[1] for r in rows)
    loc = sum(r[2] for r in rows)
    text = ("# The planted-bug audit\n\nGenerated by `python scripts/mutants.py --write` "
            f"({time.strftime('%Y-%m-%d')}).\n\n" + "\n".join(lines)
            + f"\n\nKilled {k}/{len(rows)}, localized {loc}/{len(rows)}.\n")
    print(text)
    if a.write:
        (ROOT / "scripts" / "mutants.md").write_text(text, encoding="utf-8")
    return 0 if k == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
