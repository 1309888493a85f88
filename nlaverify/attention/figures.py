r"""Figures of the kernel view of attention: Nadaraya–Watson regression, random-feature MSEs.

* :func:`draw_nadaraya_watson`: the seed's Fig. 14 (Baggag & Saad §2.8): noisy samples of an
  oscillatory function, the Nadaraya–Watson estimate (Gaussian kernel) against a cubic
  least-squares fit and the true function.
* :func:`draw_mse`: MSE against the number of features :math:`m` (log–log) for the
  trigonometric, positive, hyperbolic and orthogonal positive estimators (Baggag & Saad §4.4;
  Choromanski et al. 2021), measured by seeded Monte Carlo against the closed forms of
  :mod:`nlaverify.attention.estimators`.

Matplotlib's Agg backend; the SVGs are byte-reproducible (fixed ``svg.hashsalt``, text kept
as text, no date) and written atomically.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from nlaverify.attention import estimators as est
from nlaverify.attention.nadaraya_watson import nadaraya_watson
from nlaverify.backends import get_namespace
from nlaverify.symbolic.document import save_svg

__all__ = ["draw_all", "draw_mse", "draw_nadaraya_watson", "mse_curves", "oscillatory"]

_RC = {"svg.hashsalt": "nlaverify", "svg.fonttype": "none", "font.size": 9}
_COLOURS = {"trig": "#1f77b4", "positive": "#d62728", "hyperbolic": "#2ca02c",
            "positive, orthogonal": "#9467bd"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def oscillatory(t: np.ndarray) -> np.ndarray:
    r"""The figure's unknown function :math:`f(t) = \sin(3t) + \tfrac12\sin(7t)`, on
    :math:`[0, 5]`: too oscillatory for a cubic."""
    return np.sin(3.0 * t) + 0.5 * np.sin(7.0 * t)


def draw_nadaraya_watson(path: Path | str, *, n: int = 200, noise: float = 0.3,
                         sigma: float = 0.12, seed: int = 0) -> Path:
    r"""Baggag & Saad Fig. 14 (§2.8): ``n`` samples :math:`(k_j, f(k_j) + \varepsilon_j)`,
    :math:`k_j \sim U(0, 5)`, :math:`\varepsilon_j \sim N(0, \text{noise}^2)`; the
    Nadaraya–Watson estimate :math:`\hat f(q) = \sum_j a(q, k_j) v_j` with the Gaussian
    kernel of bandwidth ``sigma`` (:func:`~nlaverify.attention.nadaraya_watson.nadaraya_watson`,
    attention with scalar queries and keys), the cubic least-squares fit
    (:class:`numpy.polynomial.Polynomial`) and :math:`f`; the legend gives each fit's RMS
    error against :math:`f` on the plotting grid."""
    plt = _pyplot()
    rng = np.random.default_rng(seed)
    keys = np.sort(rng.uniform(0.0, 5.0, n))
    values = oscillatory(keys) + noise * rng.standard_normal(n)
    q = np.linspace(0.0, 5.0, 501)
    truth = oscillatory(q)
    nw = np.asarray(nadaraya_watson(get_namespace("numpy"), q, keys, values, sigma))
    cubic = np.polynomial.Polynomial.fit(keys, values, 3)(q)

    def rms(f: np.ndarray) -> float:
        return float(np.sqrt(np.mean((f - truth) ** 2)))

    with plt.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        ax.plot(keys, values, "o", ms=3, color="0.6", mfc="none", mew=0.6,
                label=f"samples (n = {n}, noise σ = {noise:g})")
        ax.plot(q, truth, "k--", lw=1.0, label="true function sin 3t + ½ sin 7t")
        ax.plot(q, nw, color="#d62728", lw=1.6,
                label=f"Nadaraya–Watson, Gaussian kernel σ = {sigma:g} (RMS {rms(nw):.3f})")
        ax.plot(q, cubic, color="#1f77b4", lw=1.4,
                label=f"cubic least squares (RMS {rms(cubic):.3f})")
        ax.set_xlabel("query / key $t$")
        ax.set_ylabel("value")
        ax.set_xlim(0.0, 5.0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2,
                  frameon=False)
        ax.set_title("Attention as kernel regression: Nadaraya–Watson vs a cubic fit "
                     "(Baggag & Saad §2.8, Fig. 14)", fontsize=10)
        fig.tight_layout()
        out = save_svg(fig, path)
        plt.close(fig)
    return out


def _points(d: int = 8, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(d), rng.standard_normal(d)
    return 0.5 * x / np.linalg.norm(x), 0.5 * y / np.linalg.norm(y)


def mse_curves(*, d: int = 8, replicates: int = 2000, max_log2_m: int = 8,
               seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    r"""The data of :func:`draw_mse`: for each estimator (``trig``, ``positive``,
    ``hyperbolic``, and ``positive`` with orthogonal rows in whole blocks, :math:`m = d, 2d,
    \dots`), at the fixed points :math:`\|x\| = \|y\| = 1/2` of :math:`\mathbb R^d`, the
    measured :math:`\widehat{\mathrm{MSE}}_m = \overline{(\hat K_m - K)^2}` over ``replicates``
    seeded replicates, its standard error (fourth moment) and the closed form (for the
    orthogonal rows, the i.i.d. closed form, which Thm 2 bounds it by)."""
    xp = get_namespace("numpy")
    x, y = _points(d)
    out: dict[str, dict[str, np.ndarray]] = {}
    runs = [("trig", "trig", "gaussian", 0), ("positive", "positive", "gaussian", 0),
            ("hyperbolic", "hyperbolic", "gaussian", 0),
            ("positive, orthogonal", "positive", "orthogonal", int(math.log2(d)))]
    for i, (label, kind, draw, start) in enumerate(runs):
        ms = 2 ** np.arange(start, max_log2_m + 1)
        K = float(est.target_kernel(xp, kind, x, y))
        meas, se = [], []
        for j, m in enumerate(ms):
            e = est.monte_carlo(kind, x, y, int(m), replicates, seed=1000 * (seed + i) + j,
                                draw=draw) - K
            e2 = e * e
            meas.append(float(e2.mean()))
            se.append(math.sqrt(float(np.mean(e2 * e2) - e2.mean() ** 2) / replicates))
        out[label] = {"m": ms, "measured": np.array(meas), "se": np.array(se),
                      "predicted": np.asarray(est.mse(xp, kind, x, y, ms.astype(float)))}
    return out


def draw_mse(path: Path | str, *, d: int = 8, replicates: int = 2000, seed: int = 0) -> Path:
    r"""MSE against :math:`m` (log–log), per feature type: markers the seeded Monte-Carlo
    measurement (:func:`mse_curves`, error bars :math:`\pm 2` standard errors), lines the
    closed forms, all :math:`\propto 1/m` (Baggag & Saad §4.4; Choromanski et al. 2021,
    Lemma 2 and Thm 2); right, measured over predicted."""
    plt = _pyplot()
    curves = mse_curves(d=d, replicates=replicates, seed=seed)
    with plt.rc_context(_RC):
        fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.4))
        for label, c in curves.items():
            col = _COLOURS[label]
            orth = "orthogonal" in label
            left.errorbar(c["m"], c["measured"], yerr=2 * c["se"], fmt="s" if orth else "o",
                          ms=4, color=col, mfc="none" if orth else col, lw=0.8, capsize=2,
                          label=f"{label}: measured")
            if not orth:
                left.plot(c["m"], c["predicted"], "-", color=col, lw=1.0,
                          label=f"{label}: closed form")
            right.errorbar(c["m"], c["measured"] / c["predicted"],
                           yerr=2 * c["se"] / c["predicted"], fmt="s-" if orth else "o-",
                           ms=4, lw=0.8, capsize=2, color=col, mfc="none" if orth else col,
                           label=label + (" (vs i.i.d. closed form)" if orth else ""))
        left.set_xscale("log", base=2)
        left.set_yscale("log")
        left.set_xlabel("number of random features $m$")
        left.set_ylabel("MSE of $\\hat K_m$")
        left.set_title(f"MSE vs m, d = {d}, |x| = |y| = 1/2, {replicates} replicates per m",
                       fontsize=9)
        left.grid(True, which="major", alpha=0.3)
        left.legend(fontsize=6.5, loc="lower left", ncol=2)
        right.axhline(1.0, color="k", lw=0.6, ls=":")
        right.set_xscale("log", base=2)
        right.set_xlabel("number of random features $m$")
        right.set_ylabel("measured / predicted")
        right.set_title("ratio (±2 SE); orthogonal rows fall below 1 (Thm 2)", fontsize=9)
        right.grid(True, alpha=0.3)
        right.legend(fontsize=6.5, loc="lower left")
        fig.suptitle("Random-feature estimators of exp(xᵀy) and exp(-|x-y|²/2): measured "
                     "vs closed-form MSE (Baggag & Saad §4.4)", fontsize=10)
        fig.tight_layout(rect=(0, 0, 1, 0.94))
        out = save_svg(fig, path)
        plt.close(fig)
    return out


def draw_all(out_dir: Path | str = "docs/figures") -> list[Path]:
    """Both figures, ``nadaraya_watson.svg`` and ``random_features_mse.svg`` in ``out_dir``;
    returns their paths."""
    out = Path(out_dir)
    return [draw_nadaraya_watson(out / "nadaraya_watson.svg"),
            draw_mse(out / "random_features_mse.svg")]
