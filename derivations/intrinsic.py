"""Representation geometry of a real run (Baggag & Saad §3.15–3.16; issue 20 item 4): the
intrinsic dimension (TwoNN, Levina–Bickel k = 20, PCA at 90 % energy) of the residual stream
of the ``tiny`` Transformer at every layer, and its anisotropy (mean pairwise cosine,
Ethayarajh 2019), at initialisation and after training — the figure
``docs/figures/intrinsic_dimension.svg``.

The run is ``nlaverify train --preset tiny --optimizer adamw --steps 500`` (seed 0, batch 16 x
16 characters, the defaults of ``docs/figures/training.svg``). The points are the hidden
states of every token of the held-out split (389 windows of 16 characters, 6,224 tokens),
from :func:`nlaverify.graph.core.evaluate` on NumPy in float64, duplicate rows removed
(identical prefixes give identical states: TwoNN's r2/r1 needs distinct points). The
estimators are :mod:`nlaverify.geometry.intrinsic`; one neighbour search per layer serves
TwoNN and Levina–Bickel. There is no proof family: the script only draws. Run from the
repository root: ``python derivations/intrinsic.py [--figure-only]`` (both draw; about 20 s).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FIGURE = Path("docs/figures/intrinsic_dimension.svg")
STEPS, SEED, LB_K = 500, 0, 20


@dataclass(frozen=True)
class Layer:
    """The estimates at one node: unique points, TwoNN (MLE, SE), Levina–Bickel, PCA-90,
    anisotropy (all rows)."""

    node: str
    n_unique: int
    twonn: float
    twonn_se: float
    lb: float
    pca90: int
    cos: float


def layer_nodes(n_blocks: int) -> list[str]:
    """The residual stream: the embedding sum, after each attention and MLP write, and the
    final norm."""
    inner = [f"blocks.{i}.resid{j}" for i in range(n_blocks) for j in (1, 2)]
    return ["x0", *inner, "final_norm"]


def measure(values: dict[str, np.ndarray], nodes: list[str]) -> list[Layer]:
    from nlaverify.geometry import intrinsic as gi

    out = []
    for node in nodes:
        X = np.asarray(values[node]).reshape(-1, np.shape(values[node])[-1])
        U = np.unique(X, axis=0)
        r = gi.knn_distances(U, LB_K)
        tw = gi.twonn_from_ratios(gi.neighbour_ratios(r))
        lb = gi.levina_bickel_from_distances(r)
        out.append(Layer(node, len(U), tw.dimension, tw.se, lb.dimension,
                         gi.pca_dimension(U, 0.9), gi.anisotropy(X)))
    return out


def run() -> tuple[dict[str, list[Layer]], dict[str, float], object, float]:
    """Train, evaluate the held-out hidden states before and after, measure."""
    from nlaverify.backends import get_namespace
    from nlaverify.geometry.intrinsic import anisotropy
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.core import evaluate
    from nlaverify.graph.run import init_params
    from nlaverify.train import heldout_windows, load_corpus, train

    corpus = load_corpus()
    result = train("tiny", "adamw", STEPS, seed=SEED, eval_every=STEPS)
    graph = build_transformer(result.config)
    held = heldout_windows(corpus.val, result.seq_len)
    nodes = layer_nodes(result.config.n_blocks)
    layers, embed_cos = {}, {}
    for label, params in (("initialisation", init_params(graph, SEED)),
                          ("trained", result.params)):
        values = evaluate(graph, get_namespace("numpy"), {**held, **params}, outputs=nodes)
        layers[label] = measure(values, nodes)
        embed_cos[label] = anisotropy(params["embed.W_E"])
    return layers, embed_cos, result.config, float(result.val_losses[-1])


def draw(layers: dict[str, list[Layer]], embed_cos: dict[str, float], config: object,
         val_loss: float, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nlaverify.symbolic.document import save_svg

    rc = {"svg.hashsalt": "nlaverify", "svg.fonttype": "none", "font.size": 9}
    styles = {0: ("--", "o", 0.55), 1: ("-", "s", 1.0)}
    with plt.rc_context(rc):
        fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.8),
                                          gridspec_kw={"width_ratios": [1.6, 1.0]})
        for s, (label, rows) in enumerate(layers.items()):
            ls, mk, alpha = styles[s]
            x = np.arange(len(rows))
            tw = np.array([r.twonn for r in rows])
            left.errorbar(x - 0.06 + 0.12 * s, tw, yerr=2 * np.array([r.twonn_se for r in rows]),
                          color="tab:blue", ls=ls, marker=mk, ms=4, capsize=2, alpha=alpha,
                          label=f"TwoNN MLE ± 2 SE, {label}")
            left.plot(x, [r.lb for r in rows], color="tab:orange", ls=ls, marker=mk, ms=4,
                      alpha=alpha, label=f"Levina–Bickel k = {LB_K}, {label}")
            left.plot(x, [r.pca90 for r in rows], color="tab:green", ls=ls, marker=mk, ms=4,
                      alpha=alpha, drawstyle="default", label=f"PCA at 90 % energy, {label}")
            right.plot(x, [r.cos for r in rows], color="tab:purple", ls=ls, marker=mk, ms=4,
                       alpha=alpha, label=f"hidden states, {label}")
            right.axhline(embed_cos[label], color="tab:brown", ls=ls, lw=1.0, alpha=alpha,
                          label=f"rows of W_E, {label}: {embed_cos[label]:+.3f}")
        d = config.d_model  # type: ignore[attr-defined]
        left.axhline(d, color="0.4", lw=0.8, ls=":")
        left.annotate(f"d_model = {d}", (1.0, d), xytext=(-2, 2), textcoords="offset points",
                      xycoords=("axes fraction", "data"), fontsize=7, color="0.3", ha="right")
        names = [r.node.replace("blocks.", "b") for r in next(iter(layers.values()))]
        for ax in (left, right):
            ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
            ax.grid(True, alpha=0.3)
            ax.set_xlabel("node of the residual stream (held-out tokens)")
        top = max(r.twonn + 2 * r.twonn_se for rows in layers.values() for r in rows)
        left.set_ylim(0, max(d, top) + 0.8)
        left.set_ylabel("intrinsic dimension")
        right.set_ylabel("mean pairwise cosine (anisotropy)")
        handles, labels = left.get_legend_handles_labels()  # one column per estimator
        order = sorted(range(len(labels)), key=lambda i: (
            [labels[i].startswith(e) for e in ("TwoNN", "Levina", "PCA")].index(True),
            "initialisation" not in labels[i]))
        left.legend([handles[i] for i in order], [labels[i] for i in order], fontsize=6.5,
                    loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3)
        right.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=1)
        n = next(iter(layers.values()))[-1].n_unique
        blocks = config.n_blocks  # type: ignore[attr-defined]
        fig.suptitle(f"Representation geometry of the tiny Transformer (d = {d}, {blocks} "
                     f"blocks) on the held-out Baggag & Saad passage, before and after "
                     f"{STEPS} AdamW steps (held-out loss {val_loss:.3f})\n{n:,} distinct "
                     "hidden states per node (x0: distinct character-position pairs); "
                     "intrinsic dimension left, mean pairwise cosine right", fontsize=9)
        fig.tight_layout(rect=(0, 0, 1, 0.93))
        out = save_svg(fig, path)
        plt.close(fig)
    return out


def main(argv: list[str]) -> int:
    if "--help" in argv or "-h" in argv:
        print(__doc__)
        return 0
    unknown = [a for a in argv if a != "--figure-only"]
    if unknown:
        print(f"derivations/intrinsic.py: unknown argument {unknown[0]!r} (expected "
              "--figure-only or --help)", file=sys.stderr)
        return 2
    from nlaverify.reproducible import pin_process

    pin_process()  # the figure's data must not depend on the machine's kernels
    start = time.perf_counter()
    layers, embed_cos, config, val_loss = run()
    for label, rows in layers.items():
        print(f"{label}: mean cosine of the rows of W_E {embed_cos[label]:+.4f}",
              file=sys.stderr)
        for r in rows:
            print(f"  {r.node:<16} N={r.n_unique:5d}  TwoNN {r.twonn:5.2f} ± {r.twonn_se:.2f}"
                  f"  LB(k={LB_K}) {r.lb:5.2f}  PCA-90 {r.pca90}  mean cos {r.cos:+.4f}",
                  file=sys.stderr)
    path = draw(layers, embed_cos, config, val_loss, FIGURE)
    print(f"wrote {path} (held-out loss {val_loss:.3f}; {time.perf_counter() - start:.1f} s)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
