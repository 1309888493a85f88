r"""Figures of high-dimensional geometry: the seed's Fig. 24 and JL distortion against the bound.

* :func:`draw_angles`: Baggag & Saad Fig. 24 (§3.14.1, Table 5): the histogram of the
  :math:`\binom{10^4}2` pairwise angles of 10,000 random directions in :math:`\mathbb
  R^{12{,}288}` against the exact density :math:`c_d\sin^{d-2}\theta`, and the fraction in the
  88°–92° band measured against the exact probability
  :math:`I_{\sin^2 2°}(\tfrac12, \tfrac{d-1}2)`.
* :func:`draw_jl`: the measured distortion :math:`\max_{i<j}|\|P(x_i - x_j)\|^2/\|x_i -
  x_j\|^2 - 1|` of Gaussian and sparse Achlioptas projections of :math:`n` points, against
  the target dimension :math:`k`, with the Dasgupta–Gupta :math:`\varepsilon(k)` and the
  :math:`\chi^2_k` union-bound prediction.

Matplotlib's Agg backend; the SVGs are byte-reproducible (fixed ``svg.hashsalt``, text kept
as text, no date) and written atomically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.geometry import angles as an
from nlaverify.geometry import jl
from nlaverify.symbolic.document import save_svg

__all__ = ["JLCurves", "draw_all", "draw_angles", "draw_jl", "jl_curves"]

_RC = {"svg.hashsalt": "nlaverify", "svg.fonttype": "none", "font.size": 9}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw_angles(path: Path | str, *, count: int = 10_000, d: int = 12_288,
                delta_degrees: float = 2.0, seed: int = 0, half_width: float = 4.0,
                bins_per_degree: int = 20) -> tuple[Path, an.AngleStatistics, float]:
    r"""Baggag & Saad Fig. 24: ``count`` seeded uniform directions in :math:`\mathbb R^d`
    (``float32``, :func:`~nlaverify.geometry.angles.random_unit_vectors`), the histogram of
    all pairwise angles (:func:`~nlaverify.geometry.angles.angle_statistics`, streamed) on
    :math:`90° \pm` ``half_width`` against the exact density in degrees, linear and
    logarithmic; the band fraction measured (with its exact standard error, the indicators
    being pairwise independent) against :func:`~nlaverify.geometry.angles.
    angle_band_probability` and the normal approximation. Returns the path, the statistics
    and the exact probability."""
    plt = _pyplot()
    X = an.random_unit_vectors(seed, count, d, dtype=np.float32)
    edges = np.linspace(90.0 - half_width, 90.0 + half_width,
                        int(2 * half_width * bins_per_degree) + 1)
    st = an.angle_statistics(X, delta_degrees=delta_degrees, edges_degrees=edges)
    del X
    p = float(an.angle_band_probability(d, delta_degrees))
    normal = an.angle_band_normal_approximation(d, delta_degrees)
    se = st.fraction_se(p)
    width = edges[1] - edges[0]
    hist = st.counts / (st.pairs * width)
    grid = np.linspace(edges[0], edges[-1], 801)
    dens = np.asarray(an.angle_density(get_namespace("numpy"), np.radians(grid), d)) * (
        math.pi / 180.0)
    lo, hi = 90.0 - delta_degrees, 90.0 + delta_degrees
    with plt.rc_context(_RC):
        fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.4))
        for ax, log in ((left, False), (right, True)):
            ax.axvspan(lo, hi, color="#ffd27f", alpha=0.35, lw=0,
                       label=f"{lo:g}°–{hi:g}° band")
            ax.stairs(hist, edges, color="#1f77b4", lw=1.0, fill=not log, alpha=0.55 if not log
                      else 1.0, label=f"measured, {st.pairs:,} pairs")
            ax.plot(grid, dens, color="#d62728", lw=1.2,
                    label=r"exact $c_d\,\sin^{d-2}\theta$ (per degree)")
            ax.set_xlabel("angle θ between two random vectors (degrees)")
            ax.set_xlim(edges[0], edges[-1])
            ax.grid(True, alpha=0.3)
            if log:
                ax.set_yscale("log")
                ax.set_ylim(0.5 / (st.pairs * width), 2 * float(dens.max()))
                ax.set_title("log scale: the tails follow the exact law", fontsize=9)
            else:
                ax.set_ylabel("density (per degree)")
                ax.set_title(f"{count:,} random vectors in d = {d:,} (GPT-3's d_model, "
                             "Table 5)", fontsize=9)
        left.legend(fontsize=7, loc="upper left")
        z = (st.fraction - p) / se
        text = (f"fraction in {lo:g}°–{hi:g}°:\n"
                f"measured {st.fraction:.7f}\n  (SE {se:.1e}, z = {z:+.2f})\n"
                f"exact    {p:.7f}\n  I_sin²δ(1/2, (d−1)/2)\n"
                f"normal   {normal:.7f}\n  erf(sin δ √(d/2))\n"
                f"mean cos²θ·d = {st.mean_c2 * d:.5f}\n  (z = "
                f"{(st.mean_c2 - 1 / d) / st.mean_c2_se:+.2f})")
        if st.below + st.above:
            text += f"\n{st.below + st.above} pairs off the plot"
        left.text(0.985, 0.97, text, transform=left.transAxes, fontsize=6.5, va="top",
                  ha="right", multialignment="left", family="monospace",
                  bbox={"boxstyle": "round", "fc": "white", "alpha": 0.85})
        fig.suptitle("Near-orthogonality of random directions: pairwise angles against the "
                     "exact density (Baggag & Saad §3.14, Fig. 24)", fontsize=10)
        fig.tight_layout(rect=(0, 0, 1, 0.94))
        out = save_svg(fig, path)
        plt.close(fig)
    return out, st, p


@dataclass(frozen=True)
class JLCurves:
    """The data of :func:`draw_jl`: per law, the measured distortions ``(len(ks), reps)``."""

    n: int
    d: int
    ks: np.ndarray
    measured: dict[str, np.ndarray]
    dg_eps: np.ndarray
    chi2_median: np.ndarray


def _chi2_union_median(n: int, k: int) -> float:
    r"""The :math:`\varepsilon` at which the expected number of :math:`\varepsilon`-distorted
    pairs, :math:`\binom n2 P(|\chi^2_k/k - 1| > \varepsilon)`, is :math:`\ln 2` (the median
    of the maximum if the pairs were independent: :math:`1 - e^{-\ln 2} = 1/2`)."""
    from scipy.optimize import brentq

    pairs = n * (n - 1) / 2

    def excess(e: float) -> float:
        return pairs * jl.chi2_distortion_probability(k, e) - math.log(2.0)

    if excess(1.0 - 1e-12) > 0:
        return math.nan
    return float(brentq(excess, 1e-9, 1.0 - 1e-12, xtol=1e-12))


def jl_curves(*, n: int = 200, d: int = 4096, ks: Any = None, reps: int = 3,
              seed: int = 0) -> JLCurves:
    r"""Measured distortion (:func:`~nlaverify.geometry.jl.distortion`) of ``reps`` seeded
    Gaussian and sparse Achlioptas projections of ``n`` Gaussian points in
    :math:`\mathbb R^d`, for each target dimension in ``ks``; the Dasgupta–Gupta
    :math:`\varepsilon(k)` (:func:`~nlaverify.geometry.jl.jl_epsilon`) and the
    :math:`\chi^2_k` union prediction."""
    ks = np.asarray([16, 32, 64, 128, 256, 512, 1024, 2048] if ks is None else ks)
    X = np.random.default_rng(seed).standard_normal((n, d))
    laws = {"Gaussian": jl.GAUSSIAN, "Achlioptas (sparse)": jl.ACHLIOPTAS}
    measured = {name: np.empty((ks.size, reps)) for name in laws}
    den = jl.pairwise_sq_distances(X)
    for li, (name, law) in enumerate(laws.items()):
        for i, k in enumerate(ks):
            for r in range(reps):
                P = jl.random_projection(10_000 * (seed + 1) + 1000 * li + 10 * i + r, int(k),
                                         d, law)
                measured[name][i, r] = jl.distortion(X, P, sq_distances=den)
    dg = np.array([jl.jl_epsilon(n, int(k)) for k in ks])
    chi = np.array([_chi2_union_median(n, int(k)) for k in ks])
    return JLCurves(n, d, ks, measured, dg, chi)


def draw_jl(path: Path | str, **kwargs: Any) -> tuple[Path, JLCurves]:
    r"""JL distortion against :math:`k` (log–log): the median over seeds of the measured
    maximum distortion for Gaussian and sparse Achlioptas projections (bars: min–max), the
    Dasgupta–Gupta guarantee :math:`\varepsilon(k)` (:math:`k = 4\ln n/(\varepsilon^2/2 -
    \varepsilon^3/3)`, defined from :math:`k > 24\ln n`) and the :math:`\chi^2_k` union
    prediction (Baggag & Saad §3.14.1)."""
    plt = _pyplot()
    c = jl_curves(**kwargs)
    cols = {"Gaussian": "#1f77b4", "Achlioptas (sparse)": "#2ca02c"}
    with plt.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        for j, (name, m) in enumerate(c.measured.items()):
            med = np.median(m, axis=1)
            shift = 1.0 + 0.04 * (j - 0.5)  # side by side
            ax.errorbar(c.ks * shift, med, yerr=[med - m.min(axis=1), m.max(axis=1) - med],
                        fmt="o" if j == 0 else "s", ms=4, capsize=2, lw=0.8, color=cols[name],
                        label=f"{name}: measured max distortion ({m.shape[1]} seeds)")
        ok = np.isfinite(c.dg_eps)
        ax.plot(c.ks[ok], c.dg_eps[ok], "k-", lw=1.2,
                label="Dasgupta–Gupta bound ε(k): k = 4 ln n / (ε²/2 − ε³/3)")
        okc = np.isfinite(c.chi2_median)
        ax.plot(c.ks[okc], c.chi2_median[okc], "k--", lw=0.9,
                label="χ²_k union prediction (median of the max)")
        ax.plot(c.ks, np.sqrt(2.0 / c.ks), ":", color="0.5", lw=0.9,
                label="one pair's standard deviation √(2/k)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("target dimension k")
        ax.set_ylabel(r"max over pairs of $|\,\|Px_i - Px_j\|^2 / \|x_i - x_j\|^2 - 1\,|$")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
        ax.set_title(f"Johnson–Lindenstrauss: n = {c.n} points in d = {c.d}, "
                     f"{c.n * (c.n - 1) // 2:,} pairs (Baggag & Saad §3.14.1)", fontsize=10)
        fig.tight_layout()
        out = save_svg(fig, path)
        plt.close(fig)
    return out, c


def draw_all(out_dir: Path | str = "docs/figures") -> list[Path]:
    """Both figures, ``angles.svg`` and ``jl_distortion.svg`` in ``out_dir``."""
    out = Path(out_dir)
    return [draw_angles(out / "angles.svg")[0], draw_jl(out / "jl_distortion.svg")[0]]
