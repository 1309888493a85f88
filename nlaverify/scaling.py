r"""Scaling laws: the Chinchilla parametric loss, its compute-optimal allocation, the
published constants, and the fitter of Hoffmann et al. (Baggag & Saad §3.14; Hoffmann et
al. 2022, *Training Compute-Optimal Large Language Models*; Besiroglu et al. 2024,
*Chinchilla Scaling: A Replication Attempt*; Kaplan et al. 2020).

The law (Hoffmann et al., eq. 2) models the final loss of a model of :math:`N` parameters
trained on :math:`D` tokens:

.. math:: L(N, D) = E + \frac{A}{N^\alpha} + \frac{B}{D^\beta}.

Under a compute budget :math:`C = 6ND` (FLOPs of training: forward 2, backward 4 per
parameter and token) the loss is least at

.. math:: N^*(C) = G\Bigl(\frac C6\Bigr)^{a},\quad D^*(C) = G^{-1}\Bigl(\frac C6\Bigr)^{b},
          \quad G = \Bigl(\frac{\alpha A}{\beta B}\Bigr)^{1/(\alpha+\beta)},\quad
          a = \frac{\beta}{\alpha+\beta},\ b = \frac{\alpha}{\alpha+\beta}

(Hoffmann et al., eq. 4; proved by the identity ``chinchilla_compute_optimal`` of the
family ``scaling``, on :func:`compute_optimal` itself). Every function here is plain
arithmetic on its arguments, so the same code runs on floats, NumPy arrays and SymPy
symbols.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.errors import ArgumentError

__all__ = ["LAWS", "ChinchillaLaw", "FitResult", "compute_optimal", "draw_isoflop",
           "fit_chinchilla", "kaplan_loss_n", "training_flops"]


@dataclass(frozen=True)
class ChinchillaLaw:
    r"""The constants of :math:`L(N, D) = E + A/N^\alpha + B/D^\beta`, with their source."""

    E: Any
    A: Any
    B: Any
    alpha: Any
    beta: Any
    source: str = ""

    def loss(self, N: Any, D: Any) -> Any:
        r""":math:`L(N, D) = E + A N^{-\alpha} + B D^{-\beta}` (Hoffmann et al. 2022, eq. 2)."""
        return self.E + self.A / N ** self.alpha + self.B / D ** self.beta


#: the published fits: Hoffmann et al. 2022 (approach 3, their eq. 10) and the replication of
#: Besiroglu et al. 2024 (their Table 1, fitted to the data of Hoffmann et al.'s Figure 4)
LAWS: dict[str, ChinchillaLaw] = {
    "hoffmann2022": ChinchillaLaw(1.69, 406.4, 410.7, 0.34, 0.28,
                                  "Hoffmann et al. 2022, approach 3 (eq. 10)"),
    "besiroglu2024": ChinchillaLaw(1.82, 482.01, 2085.43, 0.3478, 0.3658,
                                   "Besiroglu et al. 2024, Table 1 (replication)"),
}


def training_flops(N: Any, D: Any) -> Any:
    r""":math:`C = 6ND`: the training FLOPs of :math:`N` parameters on :math:`D` tokens
    (2 per parameter and token forward, 4 backward; Kaplan et al. 2020 §2.1)."""
    return 6 * N * D


def compute_optimal(C: Any, law: ChinchillaLaw) -> tuple[Any, Any]:
    r"""The compute-optimal :math:`(N^*, D^*)` for a budget :math:`C = 6ND` (module
    docstring): :math:`N^* = G (C/6)^{a}`, :math:`D^* = G^{-1}(C/6)^{b}`."""
    s = law.alpha + law.beta
    G = (law.alpha * law.A / (law.beta * law.B)) ** (1 / s)
    N = G * (C / 6) ** (law.beta / s)
    D = (C / 6) ** (law.alpha / s) / G
    return N, D


def kaplan_loss_n(N: Any, N_c: Any = 8.8e13, alpha_N: Any = 0.076) -> Any:
    r"""Kaplan et al. 2020's :math:`L(N) = (N_c/N)^{\alpha_N}` for models trained to
    convergence (their eq. 1.1, :math:`N` without embeddings)."""
    return (N_c / N) ** alpha_N


@dataclass(frozen=True)
class FitResult:
    """A fitted law, the objective at the optimum and the initial point it came from."""

    law: ChinchillaLaw
    objective: float
    start: tuple[float, ...]


def _huber(r: np.ndarray, delta: float) -> np.ndarray:
    a = np.abs(r)
    return np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


def fit_chinchilla(N: Sequence[float], D: Sequence[float], L: Sequence[float], *,
                   delta: float = 1e-3,
                   grid: Sequence[Sequence[float]] | None = None) -> FitResult:
    r"""Fit :math:`L(N, D)` to runs ``(N, D, L)`` as Hoffmann et al. 2022 (§D.2) do: minimise

    .. math:: \sum_i \operatorname{Huber}_\delta\bigl(\operatorname{LSE}(a - \alpha\log N_i,\
              b - \beta\log D_i,\ e) - \log L_i\bigr),\quad A = e^a,\ B = e^b,\ E = e^e,

    with L-BFGS (SciPy) from every point of a grid of initialisations (theirs: :math:`\alpha,
    \beta \in \{0, 0.5, \dots, 2\}`, :math:`e \in \{-1, -0.5, \dots, 1\}`, :math:`a, b \in
    \{0, 5, \dots, 25\}`; a coarser default here), keeping the best. Returns a
    :class:`FitResult`."""
    from scipy.optimize import minimize
    from scipy.special import logsumexp

    n, d, loss = (np.asarray(x, np.float64) for x in (N, D, L))
    if not (n.shape == d.shape == loss.shape and n.ndim == 1 and n.size >= 5):
        raise ArgumentError(f"fit_chinchilla: expected N, D, L of one length >= 5, got shapes "
                            f"{n.shape}, {d.shape}, {loss.shape}")
    if not all(np.all(np.isfinite(x) & (x > 0)) for x in (n, d, loss)):
        raise ArgumentError("fit_chinchilla: N, D and L must be positive and finite")
    if grid is not None and len(grid) == 0:
        raise ArgumentError("fit_chinchilla: argument 'grid': expected at least one initial "
                            "point (a, b, e, alpha, beta)")
    ln, ld, ll = np.log(n), np.log(d), np.log(loss)

    def objective(p: np.ndarray) -> tuple[float, np.ndarray]:
        a, b, e, al, be = p
        terms = np.stack([a - al * ln, b - be * ld, np.full_like(ln, e)])
        lse = logsumexp(terms, axis=0)
        r = lse - ll
        w = np.exp(terms - lse)  # softmax weights: d lse / d term
        g_r = np.where(np.abs(r) <= delta, r, delta * np.sign(r))
        grad = np.array([np.sum(g_r * w[0]), np.sum(g_r * w[1]), np.sum(g_r * w[2]),
                         np.sum(g_r * w[0] * -ln), np.sum(g_r * w[1] * -ld)])
        return float(np.sum(_huber(r, delta))), grad

    starts = grid if grid is not None else [
        (a, b, e, al, be) for a in (0.0, 5.0, 10.0) for b in (0.0, 5.0, 10.0)
        for e in (-1.0, 0.0, 1.0) for al in (0.0, 0.5, 1.0) for be in (0.0, 0.5, 1.0)]
    best = None
    for p0 in starts:
        res = minimize(objective, np.asarray(p0, np.float64), jac=True, method="L-BFGS-B")
        if best is None or res.fun < best[0]:
            best = (float(res.fun), res.x, tuple(float(v) for v in p0))
    if best is None:  # pragma: no cover - the grid is not empty
        raise ArgumentError("fit_chinchilla: no initial point")
    a, b, e, al, be = best[1]
    law = ChinchillaLaw(math.exp(e), math.exp(a), math.exp(b), float(al), float(be),
                        "fitted (Huber on log-loss, Hoffmann et al. 2022 §D.2)")
    return FitResult(law, best[0], best[2])


def draw_isoflop(path: str, budgets: Sequence[float] = (1e19, 1e20, 1e21, 1e22, 1e23, 1e24),
                 laws: Sequence[str] = ("hoffmann2022", "besiroglu2024")) -> str:
    r"""The iso-FLOP curves of the Chinchilla law (Hoffmann et al. 2022, Fig. 3): for each
    budget :math:`C`, the loss :math:`L(N, C/(6N))` against the model size :math:`N`, with
    its minimum at :func:`compute_optimal`'s :math:`N^*` marked; one panel per published
    fit. The SVG is byte-reproducible (fixed ``svg.hashsalt``, text kept as text, no date).
    Returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "nlaverify", "svg.fonttype": "none", "font.size": 9})
    fig, axes = plt.subplots(1, len(laws), figsize=(5.2 * len(laws), 3.8), squeeze=False)
    colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.9, len(budgets)))
    for ax, name in zip(axes[0], laws, strict=True):
        law = LAWS[name]
        for C, color in zip(budgets, colors, strict=True):
            n_opt, d_opt = compute_optimal(C, law)
            N = n_opt * np.geomspace(1e-2, 1e2, 200)
            ax.semilogx(N, law.loss(N, C / (6 * N)), color=color, lw=1.0,
                        label=f"$C = 10^{{{math.log10(C):.0f}}}$")
            ax.plot([n_opt], [law.loss(n_opt, d_opt)], "o", color=color, ms=4)
        ax.set_xlabel("parameters $N$ (tokens $D = C/6N$)")
        ax.set_ylabel("$L(N, D)$")
        ax.set_title(f"{law.source}", fontsize=8)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(r"Iso-FLOP curves of $L = E + A/N^\alpha + B/D^\beta$; dots: the proved "
                 r"$N^*(C)$", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)
    return path
