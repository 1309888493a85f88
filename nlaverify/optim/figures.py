r"""Figures of the Newton–Schulz iteration: the scalar maps :math:`p^k` and the spectra.

Both figures compare Muon's quintic, the classic cubic, the Newton–Schulz quintic and a
designed schedule (:func:`nlaverify.optim.designer.design`, :math:`k = 5`,
:math:`\varepsilon = 10^{-3}`), each with the certified interval
(:func:`nlaverify.optim.certify.certified_interval`) that every singular value from
:math:`[\varepsilon, 1]` lands in after :math:`k` steps. Matplotlib's Agg backend; the SVGs
are byte-reproducible (fixed ``svg.hashsalt``, text kept as text, no date) and written
atomically. Baggag & Saad §5.5.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from nlaverify.optim.newton_schulz import CUBIC, MUON, QUINTIC, newton_schulz, odd_polynomial
from nlaverify.symbolic.document import save_svg

#: the figures' number of steps and lower end of the singular values
STEPS, LOWER = 5, Fraction(1, 1000)
_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")
_RC = {"svg.hashsalt": "nlaverify", "svg.fonttype": "none", "font.size": 9}


def coefficient_sets(steps: int = STEPS, lower: Any = LOWER) -> dict[str, list[tuple]]:
    """The four schedules of the figures, ``steps`` tuples each: Muon, cubic, quintic and
    the designed quintic schedule for ``steps`` and ``lower``."""
    from nlaverify.optim.designer import design

    d = design(steps, lower, 5)
    return {"Muon (3.4445, -4.7750, 2.0315)": [MUON] * steps,
            "cubic (3x - x³)/2": [CUBIC] * steps,
            "quintic (15x - 10x³ + 3x⁵)/8": [QUINTIC] * steps,
            f"designed, degree 5 (k = {steps}, ε = {float(lower):g})": d.schedule}


def _compose(plan: list[tuple], x: np.ndarray, k: int) -> np.ndarray:
    r""":math:`p_k \circ \dots \circ p_1` on float64 ``x``; values past 10 (off the
    plot) become NaN rather than overflow."""
    y = x.copy()
    for c in plan[:k]:
        with np.errstate(over="ignore", invalid="ignore"):
            y = odd_polynomial(tuple(float(a) for a in c), y)
        y[~(np.abs(y) <= 10.0)] = np.nan
    return y


def draw_maps(path: Path | str, steps: int = STEPS, lower: Any = LOWER) -> Path:
    r"""The scalar maps :math:`p^k = p_k \circ \dots \circ p_1`, :math:`k = 1, \dots,`
    ``steps``, on :math:`[0, 1.3]`, one panel per coefficient set, with the certified
    interval after ``steps`` steps from :math:`[\varepsilon, 1]` shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nlaverify.optim.certify import certified_interval

    sets = coefficient_sets(steps, lower)
    x = np.linspace(0.0, 1.3, 1301)
    with plt.rc_context(_RC):
        fig, axes = plt.subplots(2, 2, figsize=(10.0, 7.0), sharex=True, sharey=True)
        for ax, (name, plan) in zip(axes.flat, sets.items(), strict=True):
            cert = certified_interval(plan, steps, lower, 1)
            ax.axhspan(cert.lo, cert.hi, color="0.85", zorder=0,
                       label=f"certified after {steps} steps")
            ax.axvspan(float(lower), 1.0, color="#fff3cd", zorder=0, alpha=0.6,
                       label=f"inputs [ε, 1], ε = {float(lower):g}")
            for k in range(1, steps + 1):
                ax.plot(x, _compose(plan, x, k), lw=1.0, color=_COLOURS[(k - 1) % 5],
                        label=f"$p^{{{k}}}$")
            ax.axhline(1.0, color="k", lw=0.5, ls=":")
            ax.set_title(f"{name}: certified [{cert.lo:.4g}, {cert.hi:.4g}], worst error "
                         f"{cert.error:.3g}", fontsize=8)
            ax.set_xlim(0.0, 1.3)
            ax.set_ylim(-0.1, 2.1)
            ax.grid(True, alpha=0.3)
        # one legend for the four panels, below them: none covers a curve
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8,
                   frameon=False)
        for ax in axes[1]:
            ax.set_xlabel("singular value $x$")
        for ax in axes[:, 0]:
            ax.set_ylabel("$p_k \\circ \\dots \\circ p_1(x)$")
        fig.suptitle("Newton–Schulz scalar maps and their certified intervals "
                     "(Baggag & Saad §5.5)", fontsize=10)
        fig.tight_layout(rect=(0, 0.05, 1, 0.96))
        out = save_svg(fig, path)
        plt.close(fig)
    return out


def spread_matrix(m: int = 512, n: int = 256, lower: Any = LOWER, seed: int = 0) -> np.ndarray:
    r"""A seeded float64 :math:`m \times n` matrix :math:`U\,\mathrm{diag}(\sigma)\,V^\top`
    with random orthonormal factors and :math:`\min(m, n)` singular values spread
    geometrically over :math:`[\varepsilon, 1]` (both ends included)."""
    rng = np.random.default_rng(seed)
    r = min(m, n)
    U, _ = np.linalg.qr(rng.standard_normal((m, r)))
    V, _ = np.linalg.qr(rng.standard_normal((n, r)))
    sigma = np.geomspace(float(lower), 1.0, r)
    return (U * sigma) @ V.T


def draw_spectra(path: Path | str, steps: int = STEPS, lower: Any = LOWER,
                 shape: tuple[int, int] = (512, 256), seed: int = 0) -> Path:
    r"""Sorted singular values of :func:`spread_matrix` (tall, so the transpose trick of
    :func:`~nlaverify.optim.newton_schulz.newton_schulz` iterates on its wide
    :math:`256 \times 512` side) before and after ``steps`` float64 steps of each set
    (no Frobenius normalisation: the inputs are already in :math:`[\varepsilon, 1]`), with
    the certified band; each panel notes the observed and certified worst errors."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nlaverify.backends import get_namespace
    from nlaverify.optim.certify import certified_interval

    xp = get_namespace("numpy")
    sets = coefficient_sets(steps, lower)
    G = spread_matrix(*shape, lower=lower, seed=seed)
    before = np.linalg.svd(G, compute_uv=False)
    idx = np.arange(1, before.size + 1)
    with plt.rc_context(_RC):
        fig, axes = plt.subplots(1, 1 + len(sets), figsize=(16.0, 3.8))
        axes[0].semilogy(idx, before, ".", ms=2, color="k")
        axes[0].set_title(f"input {shape[0]}×{shape[1]}: σ in [{float(lower):g}, 1]",
                          fontsize=9)
        axes[0].set_ylabel("singular value")
        for j, (ax, (name, plan)) in enumerate(zip(axes[1:], sets.items(), strict=True)):
            cert = certified_interval(plan, steps, lower, 1)
            X = np.asarray(newton_schulz(xp, G, plan, steps, normalize=False))
            after = np.linalg.svd(X, compute_uv=False)
            ax.axhspan(cert.lo, cert.hi, color="0.85", zorder=0, label="certified band")
            ax.plot(idx, after, ".", ms=2, color=_COLOURS[j], label=f"after {steps} steps")
            ax.axhline(1.0, color="k", lw=0.5, ls=":")
            ax.set_title(name, fontsize=8)
            worst = float(np.max(np.abs(1.0 - after)))
            ax.text(0.03, 0.04, f"observed max|1-σ| = {worst:.3g}\n"
                    f"certified = {cert.error:.3g}", transform=ax.transAxes, fontsize=7,
                    bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"})
            pad = 0.05 * (cert.hi - cert.lo) + 1e-3
            ax.set_ylim(cert.lo - pad, cert.hi + pad)
        for ax in axes:
            ax.set_xlabel("index (sorted)")
            ax.grid(True, alpha=0.3)
        fig.suptitle(f"Spectra before and after {steps} Newton–Schulz steps (float64, dots), "
                     "with the certified interval (grey band; Baggag & Saad §5.5)",
                     fontsize=10)
        fig.tight_layout(rect=(0, 0, 1, 0.93))
        out = save_svg(fig, path)
        plt.close(fig)
    return out


def draw_all(out_dir: Path | str = "docs/figures") -> list[Path]:
    """Both figures, ``newton_schulz_maps.svg`` and ``newton_schulz_spectra.svg`` in
    ``out_dir``; returns their paths."""
    out = Path(out_dir)
    return [draw_maps(out / "newton_schulz_maps.svg"),
            draw_spectra(out / "newton_schulz_spectra.svg")]
