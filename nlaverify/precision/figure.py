r"""The figure of error growth with depth, and ``python -m nlaverify.precision``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence

from nlaverify import jsonout
from nlaverify.precision.bounds import DTYPES, MATMUL_PRECISIONS
from nlaverify.precision.check import (
    PrecisionReport,
    format_precision_report,
    verify_precision,
)
from nlaverify.tolerance import unit_roundoff


def figure(path: str, presets: Sequence[str] = ("tiny", "mid"),
           dtypes: Sequence[str] = DTYPES, n: dict[str, int] | None = None,
           seed: int = 0) -> dict[str, PrecisionReport]:
    """Run the checks of ``presets`` x ``dtypes`` (n: 6 for tiny, 128 for mid) and draw
    :func:`draw_figure` to ``path``. Returns the reports, keyed ``"preset/dtype"``."""
    from nlaverify.config import preset as get_preset

    n = {"tiny": 6, "mid": 128, **(n or {})}
    reports = {f"{p}/{dt}": verify_precision(get_preset(p), dt, seed=seed, n=n.get(p, 6))
               for p in presets for dt in dtypes}
    draw_figure(reports, path)
    return reports


def draw_figure(reports: Mapping[str, PrecisionReport], path: str) -> None:
    """Error and bound against node depth: values above, cotangents below, one column per
    preset, float32 and bfloat16 in each panel. Written with matplotlib's Agg backend;
    an SVG is byte-reproducible (fixed ``svg.hashsalt``, no date), a PNG carries no
    software tag."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    presets = list(dict.fromkeys(k.split("/")[0] for k in reports))
    dtypes = list(dict.fromkeys(k.split("/")[1] for k in reports))
    plt.rcParams.update({"svg.hashsalt": "nlaverify", "svg.fonttype": "none",
                         "font.size": 9})
    fig, axes = plt.subplots(2, len(presets), figsize=(5.2 * len(presets), 7.0),
                             squeeze=False, sharey="row")
    colours = {"float32": "#1f77b4", "bfloat16": "#d62728"}
    for j, p in enumerate(presets):
        for i, what in enumerate(("value", "cotangent")):
            ax = axes[i][j]
            notes = []
            for dt in dtypes:
                rep = reports[f"{p}/{dt}"]
                pts = []
                for r in rep.rows:
                    e, b = (r.value_error, r.value_bound) if what == "value" else (
                        r.cot_error, r.cot_bound)
                    if e is None or b is None or b == 0.0 or b >= 1.0 or e == 0.0:
                        continue
                    pts.append((r.depth if what == "value" else r.height, e, b))
                if not pts:
                    continue
                pts.sort()
                x = [q[0] for q in pts]
                ax.scatter(x, [q[2] for q in pts], marker="_", s=60, lw=1.2,
                           color=colours[dt], label=f"{dt}: bound")
                ax.scatter(x, [q[1] for q in pts], s=9, color=colours[dt], alpha=0.8,
                           label=f"{dt}: measured error")
                u = unit_roundoff(dt)
                ax.axhline(u, color=colours[dt], lw=0.8, ls=":", label=f"{dt}: u")
                med = rep.summary()[what]["median_ratio"]
                worst = rep.summary()[what]["worst_ratio"]
                notes.append(f"{dt}: error/bound median {med:.1e}, worst {worst:.1e}")
            ax.set_yscale("log")
            lo, hi = ax.get_ylim()
            ax.set_ylim(lo, hi * 40)  # room for the notes above the bfloat16 bounds
            ax.grid(True, which="major", alpha=0.3)
            n_p = reports[f"{p}/{dtypes[0]}"].n
            ax.set_title(f"{p} (n={n_p}): {what}s", fontsize=10)
            ax.set_xlabel("node depth (longest path from the inputs)" if what == "value" else
                          "node height (longest path to the loss: back-propagation depth)")
            ax.text(0.02, 0.97, "\n".join(notes), transform=ax.transAxes, fontsize=7,
                    va="top", ha="left",
                    bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"})
            if j == 0:
                ax.set_ylabel(f"normwise relative error of the {what}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=6, frameon=False, fontsize=8)
    fig.suptitle("Rounding error through the depth of the network, against float64 autodiff "
                 "(dots: measured; dashes: tolerance-model bound)", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    meta = {"Date": None} if path.endswith(".svg") else {"Software": None}
    fig.savefig(path, metadata=meta, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """``python -m nlaverify.precision``: one check, or the figure (``--figure PATH``)."""
    ap = argparse.ArgumentParser(prog="python -m nlaverify.precision",
                                 description=sys.modules["nlaverify.precision"].__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--dtype", default="float32", choices=DTYPES)
    ap.add_argument("--backend", default=None, choices=("numpy", "jax"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seq-len", type=int, default=6)
    ap.add_argument("--matmul-precision", default="highest", choices=MATMUL_PRECISIONS)
    ap.add_argument("--plant", default=None, help="a node to run in float16 (a planted bug)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--figure", default=None, help="draw the depth figure to this path")
    ap.add_argument("--mid-seq-len", type=int, default=128, help="n of mid in the figure")
    args = ap.parse_args(argv)
    if args.figure:
        reports = figure(args.figure, n={"mid": args.mid_seq_len}, seed=args.seed)
        for key, rep in reports.items():
            s = rep.summary()
            print(f"{key:<16} n={rep.n:<4} values median {s['value']['median_ratio']:.2e} "
                  f"worst {s['value']['worst_ratio']:.2e}; cotangents median "
                  f"{s['cotangent']['median_ratio']:.2e} worst "
                  f"{s['cotangent']['worst_ratio']:.2e}; {rep.passed} passed, {rep.failed} "
                  f"failed; {sum(rep.timings.values()):.1f} s")
        print(f"wrote {args.figure}")
        return 0 if all(r.ok for r in reports.values()) else 1
    from nlaverify.config import preset

    rep = verify_precision(preset(args.preset), args.dtype, args.backend, args.seed,
                           args.seq_len, matmul_precision=args.matmul_precision,
                           plant=args.plant)
    if args.json:
        jsonout.dump(rep.as_dict())
    else:
        print(format_precision_report(rep))
    return 0 if rep.ok else 1


