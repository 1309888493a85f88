r"""The natural gradient, and gradient descent against it on a 2-D Gaussian model.

Baggag & Saad §5.1 (Amari's natural gradient, eq. (5.1.3) and (5.1.9)): with the Fisher
:math:`F(w)` as the metric, steepest descent becomes

.. math:: w_{k+1} = w_k - \eta\, F(w_k)^{-1} \nabla L(w_k),

invariant under an invertible affine reparametrisation :math:`w = A\theta + b` (identity
``natural_gradient_invariance``), while plain (Cauchy) gradient descent is not.

The model of the seed's Figure 30 (a two-dimensional Gaussian model with direction-
dependent geometry): data :math:`y_n \in \mathbb R^2` from :math:`\mathcal N(w, \Sigma)`
with an anisotropic covariance, written as the library's unit-variance Gaussian likelihood
of whitened outputs :math:`z = Mw`, targets :math:`t_n = My_n`, :math:`M^\top M =
\Sigma^{-1}`, and the ``"mean"`` reduction:

.. math:: L(w) = \frac1N \sum_n \tfrac12 \lVert M(w - y_n)\rVert^2,\qquad
   \nabla L = M^\top M (w - \bar y),\qquad F = \textstyle\sum_n \tfrac1N M^\top H M
   = \Sigma^{-1}

(:math:`H = I` from :meth:`Likelihood.hessian`; the GGN is the Fisher, identity
``ggn_equals_fisher_gaussian``). The Fisher is the Hessian here, so a natural step with
:math:`\eta = 1` lands on the optimum :math:`\bar y` and a step :math:`\eta` shrinks the
error by :math:`1 - \eta` whatever the geometry, while gradient descent with its best
fixed step :math:`2/(\lambda_{\max} + \lambda_{\min})` shrinks it by
:math:`(\kappa - 1)/(\kappa + 1)` per step, :math:`\kappa = \lambda_{\max}/\lambda_{\min}`
of :math:`\Sigma^{-1}` (identity ``natural_gradient_gaussian_model``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.backends.base import Namespace
from nlaverify.curvature import kronecker as _kr
from nlaverify.curvature import likelihoods as _lk
from nlaverify.curvature.likelihoods import Likelihood, Reduction
from nlaverify.errors import ArgumentError, ShapeError

#: the likelihood of the whitened model: :math:`\tfrac12\lVert z - t\rVert^2`
LIKELIHOOD = Likelihood("gaussian", 1)


def natural_gradient(xp: Namespace, F: Any, g: Any, damping: Any = 0) -> Any:
    r"""The natural gradient :math:`(F + \lambda I)^{-1} g` (Baggag & Saad §5.1, eq.
    (5.1.9)) for an SPD Fisher ``F`` ``(P, P)``, a gradient ``g`` ``(P,)`` and a damping
    :math:`\lambda \ge 0` (0: the exact natural gradient, affine-invariant; a damping
    :math:`\lambda > 0` breaks the invariance, as plain gradient descent does).

    Solved, not inverted (:func:`nlaverify.curvature.kronecker.solve`: ``linalg.solve`` on
    the array-API namespaces, exact LU on SymPy)."""
    if getattr(F, "ndim", 0) != 2 or F.shape[0] != F.shape[1]:
        raise ShapeError(f"natural_gradient: argument 'F': expected a square (P, P) matrix, "
                         f"got shape {tuple(getattr(F, 'shape', ()))}")
    if tuple(getattr(g, "shape", ())) != (F.shape[0],):
        raise ShapeError(f"natural_gradient: argument 'g': expected shape ({F.shape[0]},), "
                         f"got {tuple(getattr(g, 'shape', ()))}")
    if isinstance(damping, int | float) and not damping >= 0:
        raise ArgumentError(f"natural_gradient: damping: expected >= 0, got {damping!r}")
    P = F.shape[0]
    if not (isinstance(damping, int | float) and damping == 0):
        lam = xp.const(damping) if isinstance(damping, int | float) else damping
        F = F + xp.one_hot(xp.arange(P), P, F.dtype) * lam
    # through the module: the solve that runs is the one the proofs certify (and patch)
    return _kr.solve(xp, F, g[:, None])[:, 0]


# --------------------------------------------------------------------------- the model


def _check_model(what: str, w: Any, M: Any, y: Any) -> None:
    P = getattr(M, "shape", (0,))[-1]
    if getattr(M, "ndim", 0) != 2 or M.shape[0] != P:
        raise ShapeError(f"{what}: argument 'M': expected a square (P, P) whitening matrix, "
                         f"got shape {tuple(getattr(M, 'shape', ()))}")
    if getattr(w, "ndim", 0) < 1 or w.shape[-1] != P:
        raise ShapeError(f"{what}: argument 'w': expected shape (*, {P}), got "
                         f"{tuple(getattr(w, 'shape', ()))}")
    if getattr(y, "ndim", 0) != 2 or y.shape[1] != P or y.shape[0] < 1:
        raise ShapeError(f"{what}: argument 'y': expected data of shape (N, {P}), N >= 1, "
                         f"got {tuple(getattr(y, 'shape', ()))}")


def _whitened(xp: Namespace, w: Any, M: Any, y: Any) -> tuple[Any, Any, Any]:
    z = xp.matmul(w, xp.matrix_transpose(M))[..., None, :]  # (*, 1, P)
    t = xp.matmul(y, xp.matrix_transpose(M))                # (N, P)
    zz, tt = z + xp.zeros_like(t), t + xp.zeros_like(z)     # both (*, N, P)
    weights = Reduction("mean").weights(xp, xp.ones(y.shape[:1], dtype=y.dtype))
    return zz, tt, weights


def model_loss(xp: Namespace, w: Any, M: Any, y: Any) -> Any:
    r""":math:`L(w) = \sum_n \omega_n\,\ell(Mw, My_n)` with the library's Gaussian
    likelihood and ``"mean"`` weights :math:`\omega_n = 1/N`; ``w`` of shape ``(*, P)``
    (a grid of points at once), ``M`` ``(P, P)``, data ``y`` ``(N, P)``; shape ``(*)``."""
    _check_model("model_loss", w, M, y)
    z, t, weights = _whitened(xp, w, M, y)
    return xp.sum(LIKELIHOOD.nll(xp, z, t) * weights, axis=-1)


def model_grad(xp: Namespace, w: Any, M: Any, y: Any) -> Any:
    r""":math:`\nabla L = \sum_n \omega_n M^\top \nabla_z\ell(Mw, My_n)`, shape of ``w``."""
    _check_model("model_grad", w, M, y)
    z, t, weights = _whitened(xp, w, M, y)
    return xp.sum(xp.matmul(LIKELIHOOD.grad(xp, z, t), M) * weights[:, None], axis=-2)


def model_fisher(xp: Namespace, w: Any, M: Any, y: Any) -> Any:
    r"""The Fisher of the model at ``w`` ``(P,)``: the GGN :math:`\sum_n \omega_n M^\top
    H(Mw) M` (:func:`~nlaverify.curvature.likelihoods.ggn_matrix`; equal to the Fisher,
    identity ``ggn_equals_fisher_gaussian``), :math:`= \Sigma^{-1}`; shape ``(P, P)``."""
    _check_model("model_fisher", w, M, y)
    if w.ndim != 1:
        raise ShapeError(f"model_fisher: argument 'w': expected one point ({w.shape[-1]},), "
                         f"got shape {tuple(w.shape)}")
    z, _, weights = _whitened(xp, w, M, y)
    J = M[None, :, :] + xp.zeros_like(z)[..., None]  # the Jacobian dz_n/dw = M, per n
    return _lk.ggn_matrix(xp, LIKELIHOOD, J, z, weights)


# --------------------------------------------------------------------------- descent


@dataclass(frozen=True)
class DescentPaths:
    r"""Iterates ``(T+1, P)`` and objective values ``(T+1,)`` of gradient descent and of
    natural-gradient descent from the same start, with the optimum :math:`\bar y`, the
    optimal value, the step sizes and the condition number :math:`\kappa` of the Fisher
    (= the Hessian)."""

    gd: np.ndarray
    ngd: np.ndarray
    gd_loss: np.ndarray
    ngd_loss: np.ndarray
    optimum: np.ndarray
    loss_min: float
    lr_gd: float
    lr_ngd: float
    condition: float

    @property
    def gd_gap(self) -> np.ndarray:
        """:math:`L(w_t) - L^*` of gradient descent."""
        return self.gd_loss - self.loss_min

    @property
    def ngd_gap(self) -> np.ndarray:
        """:math:`L(w_t) - L^*` of natural-gradient descent."""
        return self.ngd_loss - self.loss_min


def descend(M: Any, y: Any, w0: Any, steps: int, lr_gd: float | None = None,
            lr_ngd: float = 1.0, backend: str = "numpy") -> DescentPaths:
    r"""Run ``steps`` iterations of gradient descent :math:`w \leftarrow w - \eta\nabla L`
    and of natural-gradient descent :math:`w \leftarrow w - \eta F(w)^{-1}\nabla L`
    (:func:`model_grad`, :func:`model_fisher`, :func:`natural_gradient`) on the data ``y``
    ``(N, P)`` from ``w0``. The default ``lr_gd`` is the best fixed step
    :math:`2/(\lambda_{\max} + \lambda_{\min})` of the Fisher (the Hessian), which
    contracts every eigen-direction of the error by :math:`(\kappa-1)/(\kappa+1)`."""
    if steps < 0:
        raise ArgumentError(f"descend: steps: expected >= 0, got {steps}")
    xp = get_namespace(backend)
    Mx, yx = (xp.asarray(np.asarray(a, dtype=np.float64)) for a in (M, y))
    w_opt = np.asarray(y, dtype=np.float64).mean(axis=0)
    lam = np.linalg.eigvalsh(np.asarray(model_fisher(xp, xp.asarray(w_opt), Mx, yx)))
    eta = float(2.0 / (lam[-1] + lam[0])) if lr_gd is None else float(lr_gd)

    def run(natural: bool) -> tuple[np.ndarray, np.ndarray]:
        w = xp.asarray(np.asarray(w0, dtype=np.float64))
        path = [w]
        for _ in range(steps):
            g = model_grad(xp, w, Mx, yx)
            d = natural_gradient(xp, model_fisher(xp, w, Mx, yx), g) if natural else g
            w = w - (lr_ngd if natural else eta) * d
            path.append(w)
        P = xp.stack(path)
        return np.asarray(P), np.asarray(model_loss(xp, P, Mx, yx))

    gd, gd_loss = run(False)
    ngd, ngd_loss = run(True)
    loss_min = float(np.asarray(model_loss(xp, xp.asarray(w_opt), Mx, yx)))
    return DescentPaths(gd, ngd, gd_loss, ngd_loss, w_opt, loss_min, eta, float(lr_ngd),
                        float(lam[-1] / lam[0]))


def figure_model(sigmas: tuple[float, float] = (1.0, 0.2), angle: float = np.pi / 6,
                 n: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""The model of the figure: ``(M, y, w0)`` with :math:`\Sigma = R\,
    \operatorname{diag}(\sigma_1^2, \sigma_2^2) R^\top` (rotation by ``angle``),
    :math:`M = \operatorname{diag}(1/\sigma) R^\top`, ``n`` draws from
    :math:`\mathcal N(0, \Sigma)` (seeded) and a start away from both axes of the
    ellipses; :math:`\kappa = (\sigma_1/\sigma_2)^2`."""
    c, s = np.cos(angle), np.sin(angle)
    R = np.array([[c, -s], [s, c]])
    sig = np.asarray(sigmas, dtype=np.float64)
    M = np.diag(1.0 / sig) @ R.T
    y = np.random.default_rng(seed).standard_normal((n, 2)) * sig @ R.T
    w0 = y.mean(axis=0) + R @ (sig * np.array([-2.4, 1.6]))
    return M, y, w0


def draw_figure(paths: DescentPaths, M: Any, y: Any, path: str) -> None:
    r"""The seed's Figure 30 from ``paths``: left, :math:`L(w_t) - L^*` against the
    iteration (log scale) with the rates predicted by :math:`\kappa` and :math:`\eta`;
    right, the two trajectories over the contours of :math:`L`; gradient descent blue
    ``+``, natural gradient red ``o``. Matplotlib's Agg backend; an SVG is
    byte-reproducible (fixed ``svg.hashsalt``, text kept as text, no date)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xp = get_namespace("numpy")
    M, y = np.asarray(M, dtype=np.float64), np.asarray(y, dtype=np.float64)
    plt.rcParams.update({"svg.hashsalt": "nlaverify", "svg.fonttype": "none",
                         "font.size": 9})
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 4.2))
    kappa, rho = paths.condition, (paths.condition - 1) / (paths.condition + 1)
    t = np.arange(len(paths.gd_loss))
    floor = np.finfo(np.float64).eps * max(1.0, abs(paths.loss_min))
    for gap, style, label in (
            (paths.gd_gap, {"color": "tab:blue", "marker": "+", "ms": 7},
             "gradient descent, $\\eta = 2/(\\lambda_{\\max}+\\lambda_{\\min})$"),
            (paths.ngd_gap, {"color": "tab:red", "marker": "o", "ms": 4, "mfc": "none"},
             f"natural gradient, $\\eta = {paths.lr_ngd:g}$ ($\\eta = 1$: one step)")):
        keep = gap > floor  # below: rounding of L(w) - L*, not progress
        left.semilogy(t[keep], gap[keep], lw=0.8, label=label, **style)
    left.semilogy(t, paths.gd_gap[0] * rho ** (2 * t), "b:", lw=0.8,
                  label=f"$((\\kappa-1)/(\\kappa+1))^{{2t}}$, $\\kappa = {kappa:.3g}$")
    left.semilogy(t, paths.ngd_gap[0] * (1 - paths.lr_ngd) ** (2 * t), "r:", lw=0.8,
                  label="$(1-\\eta)^{2t}$")
    left.set_ylim(max(floor, 1e-12), 2 * paths.gd_gap[0])
    left.set_xlabel("iteration $t$")
    left.set_ylabel("$L(w_t) - L^*$")
    left.set_title("Objective decay", fontsize=10)
    left.grid(True, which="major", alpha=0.3)
    left.legend(fontsize=7, loc="lower right")  # empty: the natural gradient is done by t = 21

    pts = np.concatenate([paths.gd, paths.ngd, paths.optimum[None]])
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    pad = 0.15 * (hi - lo).max()
    g0, g1 = np.meshgrid(np.linspace(lo[0] - pad, hi[0] + pad, 161),
                         np.linspace(lo[1] - pad, hi[1] + pad, 161))
    grid = np.stack([g0, g1], axis=-1)
    gap = np.asarray(model_loss(xp, grid, M, y)) - paths.loss_min
    levels = paths.gd_gap[0] * np.geomspace(1e-3, 4, 12)
    right.contour(g0, g1, gap, levels=levels, colors="0.6", linewidths=0.6)
    right.plot(paths.gd[:, 0], paths.gd[:, 1], color="tab:blue", marker="+", ms=7, lw=0.6,
               label="gradient descent")
    right.plot(paths.ngd[:, 0], paths.ngd[:, 1], color="tab:red", marker="o", ms=4,
               mfc="none", lw=0.6, label="natural gradient")
    right.plot(*paths.optimum, marker="*", color="k", ms=9, ls="none",
               label="optimum $\\bar y$")
    right.set_aspect("equal")
    right.set_xlabel("$w_1$")
    right.set_ylabel("$w_2$")
    right.set_title("Trajectories on the loss surface", fontsize=10)
    right.legend(fontsize=7, loc="lower right")
    fig.suptitle("Gradient descent vs natural gradient on a 2-D Gaussian model "
                 "$N(w, \\Sigma)$ with anisotropic $\\Sigma$ "
                 "(Baggag & Saad §5.1, Fig. 30)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    meta = {"Date": None} if path.endswith(".svg") else {"Software": None}
    fig.savefig(path, metadata=meta, dpi=110)
    plt.close(fig)


def figure(path: str, steps: int = 60, lr_ngd: float = 0.5) -> DescentPaths:
    r"""Run :func:`descend` on :func:`figure_model` and draw :func:`draw_figure` to
    ``path``. The figure's natural step is :math:`\eta = 1/2` so that its iterates show
    (with :math:`\eta = 1` the first step lands on the optimum)."""
    M, y, w0 = figure_model()
    paths = descend(M, y, w0, steps, lr_ngd=lr_ngd)
    draw_figure(paths, M, y, path)
    return paths
