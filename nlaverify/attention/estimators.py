r"""Random-feature estimators of the softmax and Gaussian kernels: targets, estimates, exact MSEs.

Baggag & Saad §4.4 (Performer, FAVOR / FAVOR+; Choromanski et al. 2021, Lemma 1–2, Thm 2).
With :math:`w \sim N(0, I_d)`, :math:`b \sim U(0, 2\pi)`, :math:`s = x + y`,
:math:`\delta = x - y`, :math:`\mathrm{SM}(x, y) = e^{x^\top y}` and
:math:`K_G(x, y) = e^{-\|\delta\|^2/2}`, the one-sample terms :math:`Z` below have mean the
kernel (unbiasedness, from :math:`\mathbb E\, e^{w^\top u} = e^{\|u\|^2/2}` and
:math:`\mathbb E \cos(w^\top u) = e^{-\|u\|^2/2}`), and the :math:`m`-sample estimate
:math:`\hat K_m = \phi(x)^\top\phi(y)` is the mean of :math:`m` i.i.d. copies, so
:math:`\mathrm{MSE}_m = \operatorname{Var} Z / m`:

* ``trig`` (target :math:`K_G`): :math:`Z = 2\cos(w^\top x + b)\cos(w^\top y + b)`,
  :math:`\operatorname{Var} Z = \tfrac12 + \tfrac12(1 - e^{-\|\delta\|^2})^2`; floor
  :math:`\tfrac12` at :math:`x = y` (the phase term :math:`\cos(w^\top s + 2b)` has variance
  :math:`\tfrac12`), so the MSE does **not** vanish as :math:`x \to y`.
* ``sincos`` (:math:`K_G`): :math:`Z = \cos(w^\top\delta)`,
  :math:`\operatorname{Var} Z = \tfrac12(1 - e^{-\|\delta\|^2})^2`, zero iff :math:`x = y`.
* ``favor`` (:math:`\mathrm{SM}`): ``trig`` times :math:`e^{(\|x\|^2 + \|y\|^2)/2}`; variance
  ``trig``'s times :math:`e^{\|x\|^2 + \|y\|^2}`.
* ``positive`` (:math:`\mathrm{SM}`): :math:`Z = e^{w^\top s - (\|x\|^2 + \|y\|^2)/2}`,
  :math:`\operatorname{Var} Z = \mathrm{SM}^2 e^{\|s\|^2}(1 - e^{-\|s\|^2})`, zero iff
  :math:`s = 0`.
* ``hyperbolic`` (:math:`\mathrm{SM}`): :math:`Z = e^{-(\|x\|^2 + \|y\|^2)/2}\cosh(w^\top s)`,
  :math:`\operatorname{Var} Z = \tfrac12\mathrm{SM}^2 e^{\|s\|^2}(1 - e^{-\|s\|^2})^2`, zero iff
  :math:`s = 0` (to second order in :math:`\|s\|^2`).

Derivations (the proofs of :mod:`nlaverify.identities.attention` redo them symbolically):
``positive``: :math:`\mathbb E Z^2 = e^{2\|s\|^2 - \|x\|^2 - \|y\|^2} = e^{\|s\|^2}\mathrm{SM}^2`.
``hyperbolic``: :math:`\mathbb E\cosh^2(w^\top s) = (1 + e^{2\|s\|^2})/2`, so
:math:`\operatorname{Var} Z = e^{-\|x\|^2-\|y\|^2}(e^{\|s\|^2} - 1)^2/2`.
``trig``: :math:`Z = \cos(w^\top\delta) + \cos(w^\top s + 2b)`; the cross term has
:math:`b`-mean zero, :math:`\mathbb E\cos^2(w^\top s + 2b) = \tfrac12` and
:math:`\mathbb E\cos^2(w^\top\delta) = (1 + e^{-2\|\delta\|^2})/2`. The Performer's Lemma 2
trigonometric MSE (which vanishes at :math:`x = y`) is the ``sincos`` pair
:math:`m^{-1/2}[\sin(Wx), \cos(Wx)]`, not the phase features of
:func:`~nlaverify.ops.linear_attention.trig_features`; ``sincos`` is built from those same
features with :math:`[W; W]` and phases :math:`[0, -\pi/2]` (:math:`\cos(\theta - \pi/2) =
\sin\theta`). ``hyperbolic``'s :math:`m` counts the rows of :math:`W` (features: :math:`2m`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, ShapeError, UnknownNameError

__all__ = [
    "DRAWS",
    "ESTIMATORS",
    "EstimatorSpec",
    "VarianceComparison",
    "gaussian_kernel",
    "hyperbolic_mse",
    "kernel_estimate",
    "monte_carlo",
    "mse",
    "orthogonal_variance_comparison",
    "positive_mse",
    "softmax_kernel",
    "target_kernel",
    "trig_mse",
    "unfixed_qr_positive_mean",
    "variance_with_se",
]


def _sq(xp: Namespace, v: Any) -> Any:
    return xp.sum(v * v, axis=-1)


def softmax_kernel(xp: Namespace, x: Any, y: Any) -> Any:
    r"""The softmax (exponential) kernel :math:`\mathrm{SM}(x, y) = e^{x^\top y}` of rows
    ``x``, ``y`` of shape ``(..., d)`` (broadcast pairwise; Baggag & Saad §4.4): attention
    scores are :math:`\mathrm{SM}(q/d^{1/4}, k/d^{1/4})`."""
    return xp.exp(xp.sum(x * y, axis=-1))


def gaussian_kernel(xp: Namespace, x: Any, y: Any) -> Any:
    r"""The Gaussian kernel :math:`K_G(x, y) = e^{-\|x - y\|^2/2}` of rows ``x``, ``y``
    (``(..., d)``, broadcast pairwise; Baggag & Saad §4.4)."""
    return xp.exp(-_sq(xp, x - y) * xp.rational(1, 2))


def _one_minus_exp(xp: Namespace, a: Any) -> Any:
    return 1 - xp.exp(-a)


def trig_mse(xp: Namespace, x: Any, y: Any, m: Any, *, phases: bool = True,
             softmax: bool = False) -> Any:
    r"""Exact MSE of the trigonometric estimate with ``m`` features (Baggag & Saad §4.4;
    Rahimi & Recht 2007; Choromanski et al. 2021, Lemma 2):

    .. math:: \mathrm{MSE}_m = \frac1m\Bigl[\tfrac12\bigl(1 - e^{-\|x - y\|^2}\bigr)^2
       + \tfrac12\,[\text{phases}]\Bigr]\; \bigl(e^{\|x\|^2 + \|y\|^2}\bigr)^{[\text{softmax}]}.

    ``phases=True``: :math:`\sqrt{2/m}\cos(Wx + b)` (kind ``trig``; floor :math:`1/(2m)` at
    :math:`x = y`); ``phases=False``: the :math:`[\sin, \cos]` pair (kind ``sincos``; vanishes as
    :math:`x \to y`). ``softmax=True``: the estimate of :math:`e^{x^\top y}` multiplied by
    :math:`e^{\|x\|^2/2} e^{\|y\|^2/2}` (FAVOR: kind ``favor`` with the phases; the
    :math:`[\sin, \cos]` pair with that factor, ``phases=False, softmax=True``, has a closed
    form here but no estimator kind of its own in :data:`ESTIMATORS`).
    """
    half = xp.rational(1, 2)
    var = _one_minus_exp(xp, _sq(xp, x - y)) ** 2 * half
    if phases:
        var = var + half
    if softmax:
        var = var * xp.exp(_sq(xp, x) + _sq(xp, y))
    return var / m


def positive_mse(xp: Namespace, x: Any, y: Any, m: Any) -> Any:
    r"""Exact MSE of the positive estimate :math:`\phi(x)^\top\phi(y)` of
    :math:`e^{x^\top y}`, :math:`\phi(x) = e^{Wx - \|x\|^2/2}/\sqrt m` (FAVOR+; Baggag & Saad
    §4.4; Choromanski et al. 2021, Lemma 2):

    .. math:: \mathrm{MSE}_m = \frac1m\, e^{\|x + y\|^2}\,\mathrm{SM}(x, y)^2
       \bigl(1 - e^{-\|x + y\|^2}\bigr),

    zero exactly when :math:`x + y = 0`."""
    s2 = _sq(xp, x + y)
    return xp.exp(s2) * softmax_kernel(xp, x, y) ** 2 * _one_minus_exp(xp, s2) / m


def hyperbolic_mse(xp: Namespace, x: Any, y: Any, m: Any) -> Any:
    r"""Exact MSE of the hyperbolic estimate, :math:`\phi(x) = e^{-\|x\|^2/2}(2m)^{-1/2}
    [e^{Wx}, e^{-Wx}]` with ``m`` rows of :math:`W` (Choromanski et al. 2021, Lemma 2;
    Baggag & Saad §4.4):

    .. math:: \mathrm{MSE}_m = \frac1{2m}\, e^{\|x + y\|^2}\,\mathrm{SM}(x, y)^2
       \bigl(1 - e^{-\|x + y\|^2}\bigr)^2,

    :math:`\tfrac12(1 - e^{-\|x+y\|^2}) \le \tfrac12` times :func:`positive_mse`."""
    s2 = _sq(xp, x + y)
    return (xp.exp(s2) * softmax_kernel(xp, x, y) ** 2 * _one_minus_exp(xp, s2) ** 2
            * xp.rational(1, 2) / m)


@dataclass(frozen=True)
class EstimatorSpec:
    """One random-feature estimator: its target kernel, exact MSE and whether it needs phases."""

    kind: str
    target: Callable[..., Any]
    mse: Callable[..., Any]
    phases: bool
    doc: str


ESTIMATORS: dict[str, EstimatorSpec] = {
    "trig": EstimatorSpec("trig", gaussian_kernel, trig_mse, True,
                          "sqrt(2/m) cos(Wx + b) of the Gaussian kernel"),
    "sincos": EstimatorSpec("sincos", gaussian_kernel,
                            lambda xp, x, y, m: trig_mse(xp, x, y, m, phases=False), False,
                            "m^{-1/2}[sin Wx, cos Wx] of the Gaussian kernel"),
    "favor": EstimatorSpec("favor", softmax_kernel,
                           lambda xp, x, y, m: trig_mse(xp, x, y, m, softmax=True), True,
                           "FAVOR: e^{|x|^2/2} e^{|y|^2/2} trig, of exp(x.y)"),
    "positive": EstimatorSpec("positive", softmax_kernel, positive_mse, False,
                              "FAVOR+: exp(Wx - |x|^2/2)/sqrt(m), of exp(x.y)"),
    "hyperbolic": EstimatorSpec("hyperbolic", softmax_kernel, hyperbolic_mse, False,
                                "exp(-|x|^2/2)/sqrt(2m)[exp(Wx), exp(-Wx)], of exp(x.y)"),
}


def _spec(kind: str) -> EstimatorSpec:
    if kind not in ESTIMATORS:
        raise UnknownNameError(f"unknown estimator kind {kind!r}: expected one of "
                               f"{', '.join(ESTIMATORS)}")
    return ESTIMATORS[kind]


def target_kernel(xp: Namespace, kind: str, x: Any, y: Any) -> Any:
    """The kernel that the estimator ``kind`` is unbiased for (:data:`ESTIMATORS`)."""
    return _spec(kind).target(xp, x, y)


def mse(xp: Namespace, kind: str, x: Any, y: Any, m: Any) -> Any:
    """The exact MSE (= variance) of the estimator ``kind`` with ``m`` rows of :math:`W`."""
    return _spec(kind).mse(xp, x, y, m)


def _features(xp: Namespace, kind: str, X: Any, W: Any, b: Any) -> Any:
    from nlaverify.ops import linear_attention as la

    if kind in ("trig", "favor"):
        return la.trig_features(xp, X, W, b)
    if kind == "sincos":
        m = W.shape[0]
        zero = xp.zeros((m,), dtype=W.dtype) if not xp.object_arrays else xp.zeros((m,))
        return la.trig_features(xp, X, xp.concat([W, W], axis=0),
                                xp.concat([zero, zero - xp.pi / 2], axis=0))
    if kind == "positive":
        return la.positive_features(xp, X, W)
    return la.hyperbolic_features(xp, X, W)


def kernel_estimate(xp: Namespace, kind: str, x: Any, y: Any, W: Any, b: Any = None) -> Any:
    r"""The random-feature estimate :math:`\phi(x)^\top\phi(y)` of the kernel of ``kind``
    (Baggag & Saad §4.4), with the feature maps of :mod:`nlaverify.ops.linear_attention`:
    ``trig`` / ``favor`` (``trig_features``, phases ``b``; ``favor`` multiplies by
    :math:`e^{\|x\|^2/2}e^{\|y\|^2/2}`), ``sincos`` (``trig_features`` with :math:`[W; W]`,
    phases :math:`[0, -\pi/2]`), ``positive`` (``positive_features``), ``hyperbolic``
    (``hyperbolic_features``).

    Args:
        x, y: rows of the same shape, ``(d,)`` or ``(n, d)`` (``n`` pairs, row by row).
        W: ``(m, d)``, or ``(R, m, d)`` for ``R`` independent replicates (the estimates of the
            replicates come out along a new leading axis of length ``R``).
        b: phases ``(m,)`` / ``(R, m)``, for ``trig`` and ``favor`` only.

    Returns:
        The estimates, shape ``x.shape[:-1]`` (with ``(R,)`` in front for a 3-d ``W``).
    """
    spec = _spec(kind)
    xs, ys, ws = tuple(x.shape), tuple(y.shape), tuple(W.shape)
    if xs != ys or len(xs) not in (1, 2):
        raise ShapeError(f"kernel_estimate: arguments 'x', 'y': expected equal shapes (d,) or "
                         f"(n, d), got {xs} and {ys}")
    d = xs[-1]
    if len(ws) not in (2, 3) or ws[-1] != d:
        raise ShapeError(f"kernel_estimate: argument 'W': expected shape (m, d={d}) or "
                         f"(R, m, d={d}), got {ws}")
    if spec.phases != (b is not None):
        need = "needs phases 'b'" if spec.phases else "takes no phases 'b'"
        raise ArgumentError(f"kernel_estimate: kind {kind!r} {need}")
    if b is not None and tuple(b.shape) != ws[:-1]:
        raise ShapeError(f"kernel_estimate: argument 'b': expected shape {ws[:-1]}, "
                         f"got {tuple(b.shape)}")
    R = ws[0] if len(ws) == 3 else 1
    m = ws[-2]
    # R replicates at once: features with all R*m rows are those with m rows times R^{-1/2}
    # (every map is normalised by the square root of its number of rows), so the product of
    # one row's features times R is that row's term of its replicate's estimate.
    Wf = xp.reshape(W, (R * m, d))
    bf = None if b is None else xp.reshape(b, (R * m,))
    X = xp.concat([xp.reshape(x, (-1, d)), xp.reshape(y, (-1, d))], axis=0)
    n = X.shape[0] // 2
    F = _features(xp, kind, X, Wf, bf)
    terms = F[:n] * F[n:]
    if F.shape[-1] != R * m:  # sincos, hyperbolic: two columns per row of W
        terms = xp.reshape(terms, (n, 2, R * m))
        terms = terms[:, 0, :] + terms[:, 1, :]
    est = xp.sum(xp.reshape(terms, (n, R, m)), axis=-1)
    if R > 1:
        est = est * R
    if kind == "favor":
        half = xp.rational(1, 2)
        est = est * xp.reshape(xp.exp((_sq(xp, X[:n]) + _sq(xp, X[n:])) * half), (n, 1))
    est = xp.permute_dims(est, (1, 0))  # (R, n)
    out_shape = ((R,) if len(ws) == 3 else ()) + xs[:-1]
    return xp.reshape(est, out_shape)


def unfixed_qr_positive_mean(xp: Namespace, x: Any, y: Any, m: int) -> Any:
    r"""Exact mean of the positive estimate with ``m`` rows of
    ``draw_orthogonal(seed, m, 2, fix_signs=False)`` (:math:`d = 2`, the planted bug).

    Row :math:`2j+1` of the draw is :math:`\overset{d}{=} (-|g_1|, g_2)` and row :math:`2j+2`
    is :math:`\overset{d}{=} (g_1, |g_2|)` (module :mod:`nlaverify.attention.features`), and
    :math:`\mathbb E\, e^{-t|g|} = 2e^{t^2/2}\Phi(-t)`, so with :math:`s = x + y`, only the
    marginals mattering for a mean:

    .. math:: \mathbb E\hat K = \mathrm{SM}(x, y)\,\frac{\lceil m/2\rceil\,2\Phi(-s_1)
       + \lfloor m/2\rfloor\,2\Phi(s_2)}{m}, \qquad 2\Phi(t) = 1 + \operatorname{erf}(t/\sqrt2).

    For :math:`s = (-a, a)`, :math:`a > 0`: bias :math:`\mathrm{SM}\operatorname{erf}(a/\sqrt2)`.
    """
    if tuple(x.shape) != (2,) or tuple(y.shape) != (2,):
        raise ShapeError(f"unfixed_qr_positive_mean: arguments 'x', 'y': expected shape (2,), "
                         f"got {tuple(x.shape)} and {tuple(y.shape)}")
    s = x + y
    r2 = xp.const_sqrt(1, 2)
    first = 1 - xp.erf(s[..., 0:1] * r2)
    second = 1 + xp.erf(s[..., 1:2] * r2)
    n1, n2 = -(-m // 2), m // 2
    return softmax_kernel(xp, x, y) * xp.reshape((first * n1 + second * n2) / m, ())


# -- Monte Carlo (numpy, seeded) ------------------------------------------------------------

DRAWS = ("gaussian", "orthogonal", "orthogonal_unfixed")


def monte_carlo(kind: str, x: Any, y: Any, m: int, replicates: int, seed: int, *,
                draw: str = "gaussian") -> np.ndarray:
    r"""``replicates`` independent estimates :math:`\hat K_m` (float64, numpy) of the kernel of
    ``kind`` at the rows ``x``, ``y`` (``(d,)``), each with ``m`` fresh rows of :math:`W`:
    i.i.d. Gaussian (``draw="gaussian"``), orthogonal blocks (``"orthogonal"``,
    :func:`~nlaverify.attention.features.draw_orthogonal`) or orthogonal blocks from a QR
    without the sign fix (``"orthogonal_unfixed"``, the planted bias). Phases, when the kind
    needs them, come from an independent child seed. Returns shape ``(replicates,)``."""
    from nlaverify.attention.features import draw_gaussian, draw_orthogonal, draw_phases
    from nlaverify.backends import get_namespace

    if draw not in DRAWS:
        raise UnknownNameError(f"monte_carlo: unknown draw {draw!r}: expected one of "
                               f"{', '.join(DRAWS)}")
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    d = x.shape[-1]
    s_w, s_b = (int(c.generate_state(1)[0]) for c in np.random.SeedSequence(seed).spawn(2))
    if draw == "gaussian":
        W = draw_gaussian(s_w, m, d, replicates=replicates)
    else:
        W = draw_orthogonal(s_w, m, d, replicates=replicates,
                            fix_signs=draw == "orthogonal")
    b = draw_phases(s_b, m, replicates=replicates) if _spec(kind).phases else None
    return np.asarray(kernel_estimate(get_namespace("numpy"), kind, x, y, W, b))


def variance_with_se(samples: np.ndarray) -> tuple[float, float]:
    r"""The sample variance :math:`s^2` of ``samples`` and its standard error from the fourth
    central moment, :math:`\operatorname{Var} s^2 = (\mu_4 - \sigma^4)/R + O(R^{-2})`
    (plug-in :math:`\hat\mu_4`, :math:`s^4`)."""
    e = np.asarray(samples, dtype=np.float64)
    R = e.size
    c = e - e.mean()
    s2 = float(c @ c) / (R - 1)
    m4 = float(np.mean(c ** 4))
    return s2, math.sqrt(max(m4 - s2 * s2, 0.0) / R)


@dataclass(frozen=True)
class VarianceComparison:
    """Monte-Carlo variances of an estimator with i.i.d. and with orthogonal rows."""

    kind: str
    m: int
    d: int
    var_iid: float
    se_iid: float
    var_ort: float
    se_ort: float
    exact_iid: float

    @property
    def gap_in_se(self) -> float:
        r""":math:`(\hat\sigma^2_\text{iid} - \hat\sigma^2_\text{ort})` in standard errors of
        the difference (the two samples are independent)."""
        return (self.var_iid - self.var_ort) / math.hypot(self.se_iid, self.se_ort)


def orthogonal_variance_comparison(kind: str, x: Any, y: Any, m: int, *, replicates: int,
                                   seed: int) -> VarianceComparison:
    r"""Variance of the ``kind`` estimate with i.i.d. rows versus orthogonal rows (fixed
    signs), both by seeded Monte Carlo (independent child seeds), with standard errors
    (:func:`variance_with_se`) and the exact i.i.d. MSE. Choromanski et al. 2021, Thm 2:
    for positive features and :math:`m \le d` the orthogonal variance is smaller,
    :math:`\mathrm{MSE}^{\text{ort}}_m \le \mathrm{MSE}_m` (Baggag & Saad §4.4)."""
    s_iid, s_ort = (int(c.generate_state(1)[0]) for c in np.random.SeedSequence(seed).spawn(2))
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    v_iid, se_iid = variance_with_se(monte_carlo(kind, x, y, m, replicates, s_iid))
    v_ort, se_ort = variance_with_se(monte_carlo(kind, x, y, m, replicates, s_ort,
                                                 draw="orthogonal"))
    exact = float(np.asarray(mse(_np(), kind, x, y, m)))
    return VarianceComparison(kind, m, int(x.shape[-1]), v_iid, se_iid, v_ort, se_ort, exact)


def _np() -> Namespace:
    from nlaverify.backends import get_namespace

    return get_namespace("numpy")
