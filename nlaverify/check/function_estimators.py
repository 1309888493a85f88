r"""The statistical references of :func:`~nlaverify.check.function.check_function` and
their check.

**Statistical references** (:data:`ESTIMATORS`: the Performer's random-feature estimators
of :mod:`nlaverify.attention.estimators`, Hutchinson's trace estimator, the Monte-Carlo
Fisher of a categorical likelihood) give the exact mean :math:`\mu` and variance
:math:`\sigma^2` of one estimate. The user's estimator is sampled :math:`R` times with noise
drawn from fixed seeds and its sample mean :math:`\bar Z` and variance :math:`s^2` are tested
entry by entry against the closed forms:

.. math:: |\bar Z - \mu| \le z_\alpha \sqrt{\sigma^2 / R} + r\,s_\mu,\qquad
          |s^2 - \sigma^2| \le z_\alpha \sqrt{(\hat\mu_4 - s^4)/R} + (2 r s_\mu\sigma
          + r^2 s_\mu^2),

the first a z-test with the *derived* variance, the second the fourth-moment standard error
of :math:`s^2` with the *derived* :math:`\mu_4` where the estimator has one (positive and
hyperbolic features: :func:`lognormal_fourth_moment`; the Monte-Carlo Fisher:
:func:`mc_fisher_fourth_moment`), else the plug-in :math:`\hat\mu_4` (bounded estimators:
trig, sincos, FAVOR, Hutchinson's quadratic forms). The plug-in is biased low for heavy tails:
the lognormal positive features at :math:`\|x\|, \|y\| \approx 1` raised false alarms at
ratio 85 with it. Both are widened by the rounding :math:`r` of the tolerance model in the
user's dtype at the scale :math:`s_\mu = \max(1, |\mu|)`. :math:`z_\alpha` is the two-sided
normal quantile at :data:`FALSE_ALARM` split over the entries (Bonferroni), 4.9 for one
entry. A relative error :math:`\varepsilon` of the variance is detected with probability
:math:`\ge 97.7\%` once :math:`\varepsilon \ge (z_\alpha + 2)\,\mathrm{se}(s^2)/\sigma^2`;
for an estimate with kurtosis 3 (a mean of many features) :math:`\mathrm{se}(s^2)/\sigma^2
= \sqrt{2/R}`, so the default :data:`DEFAULT_REPLICATES` :math:`R = 30\,000` detects a
variance off by 5.6 % (and the mean off by :math:`6.9\,\sigma/\sqrt R`, 0.04 standard
deviations); each report row states the error it could detect, and a note says when
``samples`` is too small to detect a 10 % variance error (heavy tails: the derived
:math:`\mu_4` makes the test honest, and its power small).

**Orthogonal features** (``options={"draw": "orthogonal"}``, positive features only): the
noise :math:`W` is drawn in blocks of :math:`d` orthonormal rows with :math:`\chi_d` lengths
(:func:`~nlaverify.attention.features.draw_orthogonal`; a function that orthogonalises
i.i.d. rows itself, with the sign fix, has the same law). The rows stay marginally
:math:`N(0, I_d)`, so the mean test is unchanged, but the closed-form variance is the
i.i.d. one, an *upper* bound of the orthogonal variance (Choromanski et al. 2021, Thm 2;
independent blocks keep the order), so the variance test is one-sided. Without the option,
an orthogonal estimator fails the variance row (it is a different estimator).

Seed: Baggag & Saad §4.4 (Performer, FAVOR+), §5.1 (Fisher); Higham & Mary (2019) for the
rounding term. This module imports :mod:`nlaverify.check.function_references` (never
:mod:`nlaverify.check.function`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from nlaverify.check.adapters import to_float64, to_framework
from nlaverify.check.function_references import (
    Inputs,
    _accumulation,
    _inputs_list,
    _np,
    _round_to,
    _to_user,
)
from nlaverify.check.report import CheckError, CheckReport, Row, error_row
from nlaverify.tolerance import magnitude_condition, tolerance

__all__ = [
    "DEFAULT_REPLICATES",
    "ESTIMATORS",
    "FALSE_ALARM",
    "ORTHOGONAL_KINDS",
    "POWER_Z",
    "Estimator",
    "lognormal_fourth_moment",
    "mc_fisher_fourth_moment",
    "mc_fisher_moments",
]

#: the probability that a correct estimator fails one moment's row (split over its entries)
FALSE_ALARM = 1e-6
#: standard deviations of power: an error this far beyond the critical value is caught
#: with probability Phi(2) = 97.7 %
POWER_Z = 2.0
#: default number of replicates of a statistical check (module docstring: detects 5.6 %)
DEFAULT_REPLICATES = 30_000


@dataclass(frozen=True)
class Estimator:
    r"""A statistical reference: inputs drawn as for
    :class:`~nlaverify.check.function_references.Reference`, ``noise(rng, R, inputs)`` the
    replicates' noise (a tuple of arrays with a leading axis ``R``, passed after the inputs),
    and the closed forms ``mean(inputs)``, ``variance(inputs)`` of one estimate (float64,
    shape of the estimate)."""

    name: str
    argnames: tuple[str, ...]
    noise_names: tuple[str, ...]
    draw: Callable[[np.random.Generator, Mapping[str, Any]], Inputs]
    noise: Callable[[np.random.Generator, int, Inputs, Mapping[str, Any]], Inputs]
    mean: Callable[[Inputs, Mapping[str, Any]], np.ndarray]
    variance: Callable[[Inputs, Mapping[str, Any]], np.ndarray]
    size: Callable[[Inputs, Mapping[str, Any]], int]
    doc: str
    #: the exact central fourth moment :math:`\mu_4` of one estimate, where derived (else the
    #: plug-in :math:`\hat\mu_4`, biased low for heavy tails)
    fourth: Callable[[Inputs, Mapping[str, Any]], np.ndarray] | None = None
    #: the closed-form variance is an upper bound only (orthogonal features), not the value
    variance_is_upper: Callable[[Mapping[str, Any]], bool] = lambda opt: False


def lognormal_fourth_moment(xp: Any, kind: str, x: Any, y: Any, m: int) -> Any:
    r"""The exact central fourth moment of the positive / hyperbolic random-feature estimate
    :math:`\hat K = \frac1m\sum_i f_i` (Baggag & Saad §4.4). With :math:`u = w^\top(x + y)
    \sim N(0, s)`, :math:`s = \|x + y\|^2`, one term is :math:`f = e^{-c}e^{u}` (positive) or
    :math:`e^{-c}\cosh u` (hyperbolic), :math:`c = (\|x\|^2 + \|y\|^2)/2`, of mean
    :math:`\mu = e^{-c + s/2}`; with :math:`E e^{au} = e^{a^2 s/2}`,

    .. math:: E(f/\mu)^i = 1 + \delta_i,\quad \delta_i = \operatorname{expm1}\bigl(
              \tfrac{i(i-1)}2 s\bigr)\ \text{(positive)},\quad 2^{-i}\sum_j\tbinom ij
              \operatorname{expm1}\bigl(\tfrac{(i-2j)^2 - i}2 s\bigr)\ \text{(hyperbolic)},

    :math:`\mu_r(f) = \mu^r\sum_i\binom ri(-1)^{r-i}\delta_i` (the binomial sum of the ones
    vanishes: no cancellation at small :math:`s`), and for the mean of :math:`m` i.i.d. terms
    the cumulants :math:`\kappa_2 = \mu_2/m`, :math:`\kappa_4 = (\mu_4 - 3\mu_2^2)/m^3`,
    :math:`\mu_4(\hat K) = \kappa_4 + 3\kappa_2^2`. Lognormal tails make the plug-in
    :math:`\hat\mu_4` of a finite sample badly biased low; this is the derived one."""
    s = xp.sum((x + y) * (x + y), axis=-1)
    c = (xp.sum(x * x, axis=-1) + xp.sum(y * y, axis=-1)) / 2
    mu = xp.exp(s / 2 - c)

    def delta(i: int) -> Any:
        if kind == "positive":
            return xp.expm1(i * (i - 1) / 2 * s)
        return sum(math.comb(i, j) * xp.expm1(((i - 2 * j) ** 2 - i) / 2 * s)
                   for j in range(i + 1)) / 2 ** i

    def central(r: int) -> Any:
        return mu ** r * sum(math.comb(r, i) * (-1) ** (r - i) * delta(i) for i in range(1, r + 1))

    m2, m4 = central(2), central(4)
    return (m4 - 3 * m2 * m2) / m ** 3 + 3 * (m2 / m) ** 2


#: the random-feature kinds whose orthogonal-row variance is at most the i.i.d. one
#: (Choromanski et al. 2021, Thm 2: positive features; independent blocks keep the order)
ORTHOGONAL_KINDS = ("positive",)


def _rf_estimator(kind: str) -> Estimator:
    from nlaverify.attention import estimators as est
    from nlaverify.attention.features import draw_orthogonal

    spec = est.ESTIMATORS[kind]

    def draw(rng: np.random.Generator, opt: Mapping[str, Any]) -> Inputs:
        d = int(opt.get("d", 4))
        # |x + y|^2 near 0.3: the estimators' tails stay light (kurtosis near 3)
        x, y = (rng.standard_normal(d) * float(opt.get("scale", 0.2)) for _ in range(2))
        return (x, y)

    def orthogonal(opt: Mapping[str, Any]) -> bool:
        how = opt.get("draw", "gaussian")
        if how not in ("gaussian", "orthogonal"):
            raise CheckError(f"argument 'options': draw={how!r}: expected 'gaussian' or "
                             f"'orthogonal'")
        if how == "orthogonal" and kind not in ORTHOGONAL_KINDS:
            raise CheckError(f"argument 'options': draw='orthogonal' for {kind}_features: "
                             f"no closed form bounds its variance (only "
                             f"{', '.join(ORTHOGONAL_KINDS)}: Choromanski et al. 2021, Thm 2)")
        return how == "orthogonal"

    def noise(rng: np.random.Generator, R: int, inputs: Inputs, opt: Mapping[str, Any]
              ) -> Inputs:
        m, d = int(opt.get("m", 16)), inputs[0].shape[-1]
        if orthogonal(opt):  # blocks of d orthonormal rows with chi_d lengths (Haar)
            W = draw_orthogonal(int(rng.integers(2**63 - 1)), m, d, replicates=R)
        else:
            W = rng.standard_normal((R, m, d))
        return (W, rng.uniform(0.0, 2 * np.pi, (R, m))) if spec.phases else (W,)

    fourth = None
    if kind in ("positive", "hyperbolic"):
        def fourth(inp: Inputs, opt: Mapping[str, Any]) -> np.ndarray:
            return np.asarray(lognormal_fourth_moment(_np(), kind, *inp,
                                                      int(opt.get("m", 16))), dtype=float)

    return Estimator(
        f"{kind}_features", ("x", "y"), ("W", "b") if spec.phases else ("W",), draw, noise,
        lambda inp, opt: np.asarray(est.target_kernel(_np(), kind, *inp), dtype=float),
        lambda inp, opt: np.asarray(est.mse(_np(), kind, *inp, int(opt.get("m", 16))),
                                    dtype=float),
        lambda inp, opt: int(opt.get("m", 16)) * inp[0].shape[-1],
        f"{spec.doc}; W rows N(0, I_d) (m = options['m'], default 16"
        + ("; options['draw'] = 'orthogonal': orthogonal blocks, variance <= the i.i.d. one)"
           if kind in ORTHOGONAL_KINDS else ")")
        + ("; phases b ~ U(0, 2 pi)" if spec.phases else ""),
        fourth=fourth if kind in ("positive", "hyperbolic") else None,
        variance_is_upper=orthogonal)


def _hutchinson() -> Estimator:
    from nlaverify.curvature.solvers import hutchinson_variance

    def draw(rng: np.random.Generator, opt: Mapping[str, Any]) -> Inputs:
        n = int(opt.get("n", 6))
        A = rng.standard_normal((n, n))
        return ((A + A.T) / 2,)

    def noise(rng: np.random.Generator, R: int, inputs: Inputs, opt: Mapping[str, Any]
              ) -> Inputs:
        n = inputs[0].shape[0]
        if opt.get("sampler", "rademacher") == "normal":
            return (rng.standard_normal((R, n)),)
        return (rng.choice(np.array([-1.0, 1.0]), size=(R, n)),)

    return Estimator(
        "hutchinson_trace", ("M",), ("v",), draw, noise,
        lambda inp, opt: np.asarray(np.trace(inp[0])),
        lambda inp, opt: np.asarray(hutchinson_variance(inp[0], opt.get("sampler",
                                                                        "rademacher"))),
        lambda inp, opt: inp[0].size, "one probe v^T M v of tr M (Rademacher, or "
        "options['sampler'] = 'normal')")


def mc_fisher_moments(xp: Any, z: Any) -> tuple[Any, Any]:
    r"""Mean and entrywise variance of the one-sample Monte-Carlo Fisher :math:`gg^\top`,
    :math:`g = p - e_y`, :math:`y \sim \operatorname{Cat}(p)`, :math:`p =
    \operatorname{softmax}(z)` (Baggag & Saad §5.1). With :math:`G_{yi} = p_i -
    \delta_{iy}` (row :math:`y`: the gradient when the target is :math:`y`):

    .. math:: \mathbb E[gg^\top] = G^\top\operatorname{diag}(p)\,G = \operatorname{diag}(p)
              - pp^\top,\qquad \mathbb E[(g_ig_j)^2] = \bigl((G\odot G)^\top
              \operatorname{diag}(p)(G\odot G)\bigr)_{ij}."""
    from nlaverify.ops.softmaxes import softmax

    p = softmax(xp, z)
    C = z.shape[-1]
    G = xp.reshape(p, (1, C)) - xp.one_hot(xp.arange(C), C, z.dtype)
    mean = xp.matmul(xp.matrix_transpose(G) * p, G)
    G2 = G * G
    return mean, xp.matmul(xp.matrix_transpose(G2) * p, G2) - mean * mean


def mc_fisher_fourth_moment(xp: Any, z: Any) -> Any:
    r"""The exact central fourth moment of each entry of the one-sample Fisher
    :math:`gg^\top` (the law of :math:`y` is discrete): :math:`\sum_y p_y\,(G_{yi}G_{yj} -
    F_{ij})^4`, :math:`F = \mathbb E[gg^\top]` (:func:`mc_fisher_moments`)."""
    from nlaverify.ops.softmaxes import softmax

    p = softmax(xp, z)
    C = z.shape[-1]
    G = xp.reshape(p, (1, C)) - xp.one_hot(xp.arange(C), C, z.dtype)
    F = mc_fisher_moments(xp, z)[0]
    dev = xp.reshape(G, (C, C, 1)) * xp.reshape(G, (C, 1, C)) - xp.reshape(F, (1, C, C))
    return xp.sum(xp.reshape(p, (C, 1, 1)) * dev ** 4, axis=0)


def _mc_fisher() -> Estimator:
    def draw(rng: np.random.Generator, opt: Mapping[str, Any]) -> Inputs:
        return (rng.standard_normal(int(opt.get("C", 4))),)

    def noise(rng: np.random.Generator, R: int, inputs: Inputs, opt: Mapping[str, Any]
              ) -> Inputs:
        return (rng.uniform(np.finfo(float).tiny, 1.0, (R, inputs[0].shape[-1])),)

    return Estimator(
        "mc_fisher", ("z",), ("u",), draw, noise,
        lambda inp, opt: np.asarray(mc_fisher_moments(_np(), inp[0])[0]),
        lambda inp, opt: np.asarray(mc_fisher_moments(_np(), inp[0])[1]),
        lambda inp, opt: inp[0].shape[-1],
        "one-sample Fisher g g^T in logit space, g = softmax(z) - e_y, y ~ Cat(softmax z) "
        "drawn from uniform noise u (Gumbel-max: y = argmax(z - log(-log u)))",
        fourth=lambda inp, opt: np.asarray(mc_fisher_fourth_moment(_np(), inp[0])))


ESTIMATORS: dict[str, Callable[[], Estimator]] = {
    **{f"{k}_features": (lambda k=k: _rf_estimator(k))
       for k in ("positive", "trig", "sincos", "favor", "hyperbolic")},
    "hutchinson_trace": _hutchinson,
    "mc_fisher": _mc_fisher,
}


# -- statistical checks ------------------------------------------------------------------


def _z_critical(entries: int) -> float:
    """The two-sided normal quantile at :data:`FALSE_ALARM` split over ``entries``."""
    return NormalDist().inv_cdf(1 - FALSE_ALARM / (2 * max(1, entries)))


def _replicates(fn: Callable[..., Any], framework: str, dtype: str, args: Sequence[Any],
                noise: Inputs, batched: bool) -> np.ndarray:
    user_args = [_to_user(a, framework, dtype) for a in args]
    user_noise = [to_framework(z, framework, dtype) for z in noise]
    if batched:
        return to_float64(fn(*user_args, *user_noise), what="output of fn")
    if framework == "jax":
        import jax

        mapped = jax.vmap(fn, in_axes=(None,) * len(args) + (0,) * len(noise))
        return to_float64(mapped(*user_args, *user_noise), what="output of fn")
    R = int(np.shape(noise[0])[0])
    return np.stack([to_float64(fn(*user_args, *[z[r] for z in user_noise]),
                                what="output of fn") for r in range(R)])


def _where(label: str, shape: tuple[int, ...], flat: int) -> str:
    if not shape:
        return label
    idx = np.unravel_index(flat, shape)
    return f"{label}[{', '.join(str(int(i)) for i in idx)}]"


def _check_statistical(fn: Callable[..., Any], name: str, est: Estimator, inputs: Any,
                       dtype: str, framework: str, samples: int | None, seed: int,
                       opt: Mapping[str, Any], batched: bool) -> CheckReport:
    R = DEFAULT_REPLICATES if samples is None else samples
    if not isinstance(R, int) or isinstance(R, bool) or R < 100:
        raise CheckError(f"argument 'samples': expected an integer >= 100 (the replicates of "
                         f"a statistical check), got {R!r}")
    s_in, s_noise = (np.random.default_rng(c) for c in np.random.SeedSequence(seed).spawn(2))
    case = est.draw(s_in, opt) if inputs is None else _inputs_list(inputs, est.argnames)[0]
    args = tuple(_round_to(x, dtype, f"inputs[{j}]") for j, x in enumerate(case))
    noise = tuple(_round_to(z, dtype, f"noise {n}") for z, n in
                  zip(est.noise(s_noise, R, args, opt), est.noise_names, strict=True))
    report = CheckReport(name, "check_function", notes=[
        f"reference {est.name}: {est.doc}; {R} replicates from seed {seed}, noise "
        f"{', '.join(est.noise_names)} passed after the inputs {', '.join(est.argnames)}"])
    try:
        Z = _replicates(fn, framework, dtype, args, noise, batched)
    except CheckError:
        raise
    except Exception as exc:
        report.rows.append(error_row(name, f"{est.name} estimate", exc, where="fn"))
        return report
    mu, var = est.mean(args, opt), est.variance(args, opt)
    if Z.shape != (R, *mu.shape):
        raise CheckError(f"output of fn: expected shape {(R, *mu.shape)} over the {R} "
                         f"replicates (one estimate of shape {mu.shape} each), got {Z.shape}"
                         + ("" if batched else " (batched=False: fn gets one replicate)"))
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    rnd = tolerance(dtype, size=est.size(args, opt), depth=2,
                    condition=magnitude_condition(*arrays, power=1),
                    accumulation=_accumulation(dtype, framework))
    scale = np.maximum(1.0, np.abs(mu))
    zc = _z_critical(mu.size)
    sd = np.sqrt(np.maximum(var, 0.0))
    # the mean: a z-test with the derived variance, widened by the rounding
    mean = Z.mean(axis=0)
    allow_mean = zc * sd / math.sqrt(R) + rnd.rtol * scale
    report.rows.append(_moment_row(name, est.name, "mean", mean, mu, allow_mean, scale,
                                   f"z-test, z={zc:.2f} x sqrt(Var/R) with the closed-form "
                                   f"Var, R={R}; + rounding {rnd.rtol:.2g} ({rnd.reason})",
                                   zc))
    # the variance: the fourth-moment standard error of s^2
    c = Z - mean
    s2 = np.sum(c * c, axis=0) / (R - 1)
    if est.fourth is not None:
        # the derived mu4 and the exact Var s^2 = (mu4 - sigma^4 (R-3)/(R-1))/R
        m4, how = np.asarray(est.fourth(args, opt), dtype=float), "exact mu4"
        se = np.sqrt(np.maximum(m4 - var * var * (R - 3) / (R - 1), 0.0) / R)
    else:
        m4, how = np.mean(c**4, axis=0), "plug-in mu4"
        se = np.sqrt(np.maximum(m4 - s2 * s2, 0.0) / R)
    r_abs = rnd.rtol * scale
    allow_var = zc * se + 2 * r_abs * sd + r_abs**2
    vscale = np.where(var > 0, var, 1.0)
    detect = float(np.max((zc + POWER_Z) * se / vscale))
    upper = est.variance_is_upper(opt)
    got_var = np.maximum(s2, var) if upper else s2  # one-sided: only s^2 above is an error
    report.rows.append(_moment_row(
        name, est.name, "variance", got_var, var, allow_var, vscale,
        f"fourth-moment bound, z={zc:.2f} x sqrt((mu4 - s^4)/R) ({how}), R={R}"
        + ("; one-sided: the i.i.d. variance bounds the orthogonal one from above, "
           f"s^2 = {float(np.max(s2)):.4g}" if upper else "")
        + f"; detects a relative variance error of {detect:.1%} (power 97.7%)", zc))
    if detect > 0.10:
        report.notes.append(f"samples={R} detects only a {detect:.1%} error in the variance "
                            f"(the project's rule asks for 10 %): raise samples to about "
                            f"{int(R * (detect / 0.1) ** 2) + 1}")
    return report


def _moment_row(subject: str, ref: str, moment: Literal["mean", "variance"], got: np.ndarray,
                want: np.ndarray, allow: np.ndarray, scale: np.ndarray, why: str,
                z_crit: float = 1.0) -> Row:
    """One moment's row: the worst entry by error over its allowance; ``error`` and
    ``bound`` are relative to ``scale`` at that entry, so ``ratio`` is error/allowance."""
    got, want = np.atleast_1d(got), np.atleast_1d(want)
    allow, scale = np.broadcast_to(allow, want.shape), np.broadcast_to(scale, want.shape)
    diff = np.abs(got - want)
    diff = np.where(np.isfinite(diff), diff, np.inf)
    ratio = diff / np.where(allow > 0, allow, np.finfo(float).tiny)
    flat = int(np.argmax(ratio))
    shape = np.shape(want) if np.ndim(want) and want.size > 1 else ()
    where = _where(moment, shape, flat)
    err = float(diff.flat[flat] / scale.flat[flat])
    bound = float(allow.flat[flat] / scale.flat[flat])
    ok = bool(np.all(diff <= allow))
    # the z-score of the worst entry: its deviation in units of the allowance per unit z
    z_obs = float(ratio.flat[flat]) * z_crit if np.isfinite(ratio.flat[flat]) else math.inf
    reason = why if ok else (f"estimator {ref}, {moment}: z = {z_obs:.1f} against the critical "
                             f"{z_crit:.2f}; the {moment} of the estimates differs from the "
                             f"closed form beyond the bound ({why})")
    return Row(subject, f"{ref} {moment}", err, bound, "pass" if ok else "fail", where,
               float(got.flat[flat]), float(want.flat[flat]), reason)
