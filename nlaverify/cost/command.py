r"""The ``nlaverify cost`` command: the report of :func:`nlaverify.cost.report.cost_report`
as a table or ``--json`` (Baggag & Saad §3.14; Kaplan et al. 2020, Table 1). Imports its
work inside the function, so that the command line starts quickly."""

from __future__ import annotations

import argparse
from typing import Any

from nlaverify.errors import ArgumentError


def _load_config(args: argparse.Namespace) -> Any:
    from nlaverify.config import preset

    if (args.preset is None) == (args.config is None):
        raise ArgumentError("cost: expected exactly one of --preset and --config")
    if args.preset is not None:
        return preset(args.preset)
    from nlaverify.interop import config_from_file

    return config_from_file(args.config)


def _fmt(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.3e}"


def _cmd_cost(args: argparse.Namespace) -> int:
    """``nlaverify cost``: print (or ``--json``) :func:`cost_report`."""
    from nlaverify import jsonout
    from nlaverify.cost.report import cost_report, xla_forward_flops

    cfg = _load_config(args)
    rep = cost_report(cfg, args.seq_len, args.batch, args.dtype)
    if args.xla:
        xla = xla_forward_flops(cfg, rep["seq_len"])
        rep["xla"] = {**xla, "ours_over_xla": rep["total"]["forward"] / xla["flops"] / (
            rep["batch"])}
    if args.json:
        jsonout.dump(rep)
        return 0
    t, r, m = rep["total"], rep["rules"], rep["memory"]
    print(f"{cfg.name}: {rep['batch']} x {rep['seq_len']} tokens, {rep['dtype']}")
    print(f"{'component':<14}{'fwd FLOPs':>12}{'fwd matmul':>12}{'bwd FLOPs':>12}"
          f"{'fwd bytes':>12}")
    for k, v in rep["by_component"].items():
        print(f"{k:<14}{_fmt(v['forward']):>12}{_fmt(v['forward_matmul']):>12}"
              f"{_fmt(v['backward']):>12}{_fmt(v['forward_bytes']):>12}")
    blocks = rep["by_block"]
    if blocks:
        b0 = next(iter(blocks.values()))
        print(f"{'per block':<14}{_fmt(b0['forward']):>12}{'':>12}{_fmt(b0['backward']):>12}"
              f"   (x {len(blocks)} blocks)")
    print(f"{'total':<14}{_fmt(t['forward']):>12}{_fmt(t['forward_matmul']):>12}"
          f"{_fmt(t['backward']):>12}{_fmt(t['forward_bytes']):>12}")
    print(f"\ntraining FLOPs per token: code {_fmt(r['code_per_token'])}, ideal (causal) "
          f"{_fmt(r['ideal_per_token'])}")
    print(f"  Kaplan 3 C_forward = 6N + 6 n_layer n_ctx d_attn = "
          f"{_fmt(r['kaplan_training_per_token'])}   (ideal/Kaplan "
          f"{r['ideal_over_kaplan']:.4f}, code/Kaplan {r['code_over_kaplan']:.4f})")
    print(f"  6N = {_fmt(r['six_N'])}   (N = {r['N_nonembedding']:,} non-embedding; code/6N "
          f"{r['code_over_six_N']:.4f})")
    for term in r["terms"]:
        print(f"    {term['name']:<72}{_fmt(term['flops_per_token']):>12}  {term['note']}")
    print(f"\nmemory (bytes): parameters {_fmt(m['parameters'])}, gradients "
          f"{_fmt(m['gradients'])}")
    print("  optimizer state: " + ", ".join(f"{k} {_fmt(v)}"
                                            for k, v in m["optimizer_state"].items()))
    print(f"  activations: stored {_fmt(m['activations']['stored'])}, full recomputation "
          f"{_fmt(m['activations']['recompute'])}")
    if "kv_cache" in m:
        print(f"  KV cache ({rep['seq_len']} tokens, n_kv_heads={cfg.n_kv_heads}, window="
              f"{cfg.sliding_window}): {_fmt(m['kv_cache'])}")
    rf = rep["roofline"]
    print(f"\nroofline (example device: {rf['peak_flops']:.3g} FLOP/s, {rf['bandwidth']:.3g}"
          f" B/s, ridge {rf['ridge_intensity']:.1f} FLOP/B): forward >= "
          f"{rf['forward_time_s']:.3g} s, {100 * rf['memory_bound_time_fraction']:.1f} % of it"
          " in memory-bound nodes")
    if args.xla:
        x = rep["xla"]
        print(f"XLA cost analysis of the forward (one sequence): {_fmt(x['flops'])} FLOPs, "
              f"{_fmt(x['transcendentals'])} transcendentals; ours/XLA "
              f"{x['ours_over_xla']:.4f}")
    return 0
