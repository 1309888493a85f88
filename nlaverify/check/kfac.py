r"""K-FAC for a **user's** JAX model: the Kronecker factors of the linear layers the user
names, their error against the exact GGN/Fisher block of each layer, the curvature report,
and a check of the user's own K-FAC factor code (Baggag & Saad §5.3; Martens & Grosse 2015;
Eschenhagen et al. 2023 for the "expand" and "reduce" variants).

**Naming the layers.** The model is written ``model_fn(params, inputs, tap) -> z`` and calls
``tap(name, a, s)`` on each linear layer :math:`s = aW (+ b)` it wants covered, with the
layer's input ``a`` and its output ``s`` (``tap`` returns ``s``; the same model runs
unchanged with :func:`plain_model`'s tap, which only records). ``layers`` maps each name to
its parameter leaves, ``{"mlp.in": ("W1", "b1")}`` or ``{"attn.q": "Wq"}``, a leaf named by
its dotted path (``"blocks.0.W1"``) or its ``jax.tree_util.keystr`` (``"['W1']"``); ``W``
is ``(d_in, d_out)``, the code's row convention.

**Capturing** :math:`a` **and** :math:`g`. The inputs ``a`` are what ``tap`` records; the
output cotangents :math:`g = \partial(u^\top z)/\partial s` come from ``jax.vjp`` with respect
to a zero perturbation :math:`\delta` that ``tap`` adds to every named ``s`` (the standard
trick, flax's ``perturb``), one pull-back per logit seed :math:`u` (vmapped). The seeds are
those of :mod:`nlaverify.curvature.kfac_graph` (the functions that run on graphs, called
here on the user's logits): exact, :math:`\sqrt{w_i}\,S(z_i)_{:,c}` per position :math:`i`
and class :math:`c` with :math:`SS^\top = H(z_i)`; or ``samples`` Monte-Carlo draws
:math:`\sqrt{w_i/S}\,\nabla_z\ell(z_i, y_{si})`, :math:`y_{si}\sim p(\cdot\mid z_i)` *from the
model*. The factors are :func:`nlaverify.curvature.kfac.kfac_factors`:

.. math:: \text{expand: } A_f = \frac1{NR}\sum_{n,r} a_{nr}a_{nr}^\top,\quad
          G_f = \sum_{s,n,r} g_{snr}g_{snr}^\top;\qquad
          \text{reduce: } A_f = \frac1N\sum_n \bar a_n\bar a_n^\top,\quad
          G_f = \sum_{s,n}\Bigl(\sum_r g_{snr}\Bigr)\Bigl(\sum_r g_{snr}\Bigr)^\top,

the mean over positions in :math:`A_f`, the reduction's weights :math:`w` (``"mean"``:
:math:`1/N`) in :math:`G_f`, and the block :math:`A_f\otimes G_f` of
:math:`\operatorname{vec}_r(W)` (stacked over :math:`b^\top` with a bias; homogeneous
coordinates). ``a`` of shape ``(n, d_in)`` is ``n`` independent rows (:math:`N = n, R = 1`);
``(B, n, d_in)`` is ``B`` sequences of ``n`` positions sharing the weight; more leading axes
are flattened into :math:`N`.

**The oracle.** The exact block :math:`G_{WW}` is taken from
:func:`nlaverify.check.curvature.model_curvature`'s GGN products with the unit vectors of the
layer's parameters: a route through ``params`` that never sees the taps. The exact block
from the taps (:func:`~nlaverify.curvature.kfac.exact_layer_block`) must equal it, which
certifies the taps (a mis-tapped input, a weight used twice); K-FAC is exact where the
theory says (one position, or one linear layer with a Gaussian likelihood), and elsewhere
its relative error :math:`\lVert A_f\otimes G_f - G_{WW}\rVert_F/\lVert G_{WW}\rVert_F` is
reported, as the graph report does (:mod:`nlaverify.curvature.report`). For these
likelihoods (natural parameters) the Fisher equals the GGN.

:func:`check_kfac` runs the user's factor code ``user_factors_fn(params, batch) -> {name:
(A, G)}`` against these, each factor judged by the tolerance model of the user's dtype; a
user's Monte-Carlo :math:`G` (``samples=S``) against the exact expectation by a z-test whose
variance is that of one draw of the same estimator, measured on ``replicates`` seeded draws
(Bonferroni over the entries at :data:`~nlaverify.check.function.FALSE_ALARM`). A failing
factor that is a scalar multiple of the reference says so (a sum instead of a mean), and a
Monte-Carlo :math:`G` equal to the empirical Fisher's says its targets came from the data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any

import numpy as np

from nlaverify.check.curvature import KINDS
from nlaverify.check.kfac_taps import MAX_BLOCK_ENTRIES as MAX_BLOCK_ENTRIES
from nlaverify.check.kfac_taps import ModelKfac, Tap, _check_mode, _jax, model_kfac, plain_model
from nlaverify.check.kfac_taps import UserLayer as UserLayer
from nlaverify.check.report import CheckError, CheckReport, Row, compare_arrays, error_row
from nlaverify.curvature.kfac import MODES, Mode, kfac_factors
from nlaverify.curvature.report import REPORT_KINDS
from nlaverify.tolerance import Tolerance

__all__ = ["KfacReport", "ModelKfac", "Tap", "check_kfac", "kfac_report", "model_kfac",
           "plain_model"]


# -- the curvature report -------------------------------------------------------------------


@dataclass
class KfacReport:
    """The curvature report of a user's model: top eigenvalues per curvature matrix (with
    certified residuals) and K-FAC's relative error per layer and mode."""

    size: int
    top: int
    eigenvalues: dict[str, list[float]] = field(default_factory=dict)
    residuals: dict[str, list[float]] = field(default_factory=dict)
    kfac: list[dict[str, Any]] = field(default_factory=list)
    taps: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"size": self.size, "top": self.top, "eigenvalues": self.eigenvalues,
                "residuals": self.residuals, "kfac": self.kfac, "taps": self.taps}

    def text(self) -> str:
        """The form of ``nlaverify curvature``'s report (:mod:`nlaverify.curvature.report`)."""
        lines = [f"curvature of the user's model ({self.size} parameters): top {self.top} "
                 "eigenvalues by Lanczos (+- certified residual)"]
        for kind, vals in self.eigenvalues.items():
            pairs = ", ".join(f"{v:.6g} (+-{r:.1e})" for v, r in zip(
                vals, self.residuals[kind], strict=True))
            lines.append(f"  {kind:<17} {pairs}")
        lines.append("  K-FAC vs exact GGN block, ||A (x) G - GGN||_F / ||GGN||_F "
                     "(taps: exact block from a, g vs from params):")
        for layer in dict.fromkeys(e["layer"] for e in self.kfac):
            errs = {e["mode"]: e for e in self.kfac if e["layer"] == layer}
            size = next(iter(errs.values()))["size"]
            modes = "  ".join(f"{m} {e['relative_error']:.3e}" for m, e in errs.items())
            lines.append(f"    {layer:<22} {size:>6}  {modes}  taps {self.taps[layer]:.1e}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def kfac_report(
    model_fn: Callable[[Any, Any, Any], Any], params: Any, batch: Any,
    layers: Mapping[str, Any], *, likelihood: Any = "categorical", reduction: str = "mean",
    top: int = 3, seed: int = 0, modes: tuple[Mode, ...] = MODES,
    kinds: tuple[str, ...] = REPORT_KINDS,
) -> KfacReport:
    """The curvature report of a user's model (:func:`model_kfac`'s arguments): the top
    ``top`` eigenvalues of the Hessian, GGN, Fisher and empirical Fisher, and K-FAC's error
    against the exact GGN block of every named layer, after :meth:`ModelKfac.verify_taps`;
    ``kinds`` the matrices whose eigenvalues are shown (Lanczos: one compile each)."""
    if not isinstance(top, int) or isinstance(top, bool) or top < 1:
        raise CheckError(f"argument 'top': expected an integer >= 1, got {top!r}")
    for m in modes:
        _check_mode(m)
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise CheckError(f"argument 'kinds': expected some of {', '.join(KINDS)}, got "
                         f"{bad[0]!r}")
    mk = model_kfac(model_fn, params, batch, layers, likelihood=likelihood,
                    reduction=reduction)
    mc = mk.curvature
    rep = KfacReport(mc.size, min(top, mc.size))
    for kind in kinds:
        pairs = mc.top_eigenvalues(rep.top, kind)  # type: ignore[arg-type]
        rep.eigenvalues[kind] = [float(v) for v in pairs.values]
        rep.residuals[kind] = [float(r) for r in pairs.residuals]
    rep.taps = mk.verify_taps()
    rep.kfac = mk.kfac_errors(modes)
    return rep


# -- the user's K-FAC factors ---------------------------------------------------------------


def _scalar_hint(actual: np.ndarray, expected: np.ndarray, tol: float, counts: dict[str, int]
                 ) -> tuple[float | None, str]:
    """``(c, text)`` when ``actual`` is ``c`` times ``expected`` (c != 1) within ``tol``."""
    den = float(np.sum(expected * expected))
    if actual.shape != expected.shape or den == 0:
        return None, ""
    c = float(np.sum(actual * expected)) / den
    if not np.isfinite(c) or c == 0:
        return None, ""
    res = float(np.max(np.abs(actual - c * expected))) / max(1.0, float(np.max(np.abs(
        c * expected))))
    if res > tol or abs(c - 1) <= tol:
        return None, ""
    named = [f"{k} = {v}" for k, v in counts.items() if v > 1 and (
        abs(c - v) <= 1e-6 * v or abs(1 / c - v) <= 1e-6 * v)]
    text = f"yours is {c:.6g} x the reference"
    if named:
        text += f" ({', '.join(named)}): a sum instead of a mean, or a missing / extra 1/N?"
    return c, text


def check_kfac(
    user_factors_fn: Callable[[Any, Any], Any], model_fn: Callable[[Any, Any, Any], Any],
    params: Any, batch: Any, layers: Mapping[str, Any], *, likelihood: Any = "categorical",
    reduction: str = "mean", mode: Mode = "expand", samples: int | None = None,
    dtype: str = "float64", replicates: int = 2048, seed: int = 0,
) -> CheckReport:
    r"""Check a user's K-FAC factors ``user_factors_fn(params, batch) -> {name: (A, G)}``
    (``A`` of shape ``(d_in[+1], d_in[+1])`` with the bias row, ``G`` ``(d_out, d_out)``)
    against :func:`model_kfac`'s of ``mode`` (module docstring).

    ``samples=None``: the user claims the exact factors (GGN = Fisher), judged by
    :meth:`ModelKfac.bound` of ``dtype``. ``samples=S``: the user's :math:`G` is a
    Monte-Carlo Fisher of ``S`` draws of targets from the model, judged entrywise by
    :math:`z_\alpha\hat\sigma/\sqrt S` plus the rounding bound, :math:`\hat\sigma` the
    standard deviation of one draw over ``replicates`` seeded draws. ``params`` are rounded
    to ``dtype`` for the user and the reference runs in float64 on the rounded values. A
    factor pair off by reciprocal scalars (:math:`cA \otimes G/c`, the same block) passes,
    with a note.
    """
    jax, jnp = _jax()
    from nlaverify.backends import get_namespace
    from nlaverify.check.adapters import framework_dtype
    from nlaverify.check.function import FALSE_ALARM

    if not callable(user_factors_fn):
        raise CheckError(f"argument 'user_factors_fn': expected a callable, got "
                         f"{type(user_factors_fn).__name__}")
    _check_mode(mode)
    for arg, v, lo in (("samples", samples, 1), ("replicates", replicates, 16)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < lo):
            raise CheckError(f"argument {arg!r}: expected an integer >= {lo}, got {v!r}")
    jdt = framework_dtype("jax", dtype)
    rounded = jax.tree.map(lambda x: jnp.asarray(x).astype(jdt).astype(jnp.float64), params)
    mk = model_kfac(model_fn, rounded, batch, layers, likelihood=likelihood,
                    reduction=reduction)
    mk.verify_taps()
    tol = mk.bound(dtype)
    ref = mk.factors(mode)
    subject = getattr(user_factors_fn, "__name__", "user_factors_fn")
    how = "exact seeds" if samples is None else f"a Monte-Carlo G of {samples} draws"
    report = CheckReport(subject, "check_kfac", notes=[
        f"reference: K-FAC ({mode}) factors of model_kfac from {how}, "
        f"{len(mk.layers)} layers, the reduction {reduction!r}"])
    user_params = jax.tree.map(lambda x: x.astype(jdt), mk.curvature.unravel(mk.curvature.flat))
    try:
        out = user_factors_fn(user_params, batch)
    except Exception as exc:
        report.rows.append(error_row(subject, "K-FAC factors", exc, where="user_factors_fn"))
        return report
    if not isinstance(out, Mapping):
        raise CheckError(f"output of user_factors_fn: expected a mapping {{layer: (A, G)}}, "
                         f"got {type(out).__name__}")
    N = int(mk.A[next(iter(mk.A))].shape[0])
    counts = {"positions": mk.positions, "sequences": N}
    sigma = emp = None
    if samples is not None:
        M = replicates
        cots = mk.cotangents(mk.seeds(M, seed + 1))
        xp = get_namespace("numpy")
        sigma, emp = {}, mk.factors_from(mk.cotangents(mk.empirical_seeds()), mode)
        for n, layer in mk.layers.items():
            A_np, g = np.asarray(mk.A[n]), np.asarray(cots[n]) * math.sqrt(M)
            m_np = None if mk.mask is None else np.asarray(mk.mask)
            draws = np.stack([kfac_factors(xp, A_np, g[s:s + 1], mode=mode,
                                           bias=layer.bias is not None, mask=m_np)[1]
                              for s in range(M)])
            # one draw's standard deviation, widened by its own standard error (~1/sqrt(2M))
            sigma[n] = draws.std(axis=0, ddof=1) * (1 + 4 / math.sqrt(2 * M))
    for n, layer in mk.layers.items():
        if n not in out:
            raise CheckError(f"output of user_factors_fn: missing layer {n!r} (expected keys "
                             f"{', '.join(map(repr, mk.layers))})")
        pair = out[n]
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise CheckError(f"output of user_factors_fn: layer {n!r}: expected a pair (A, G), "
                             f"got {type(pair).__name__}")
        rows = []
        for which, user, expected in (("A", pair[0], ref[n][0]), ("G", pair[1], ref[n][1])):
            actual = np.asarray(jnp.asarray(user, jnp.float64))
            label = f"{n}.{which}"
            check = f"layer {n!r} factor {which}"
            if which == "G" and sigma is not None:
                row = _statistical_row(subject, check, label, actual, expected, sigma[n],
                                       samples, tol, FALSE_ALARM)
                if not row.ok and np.max(np.abs(actual - emp[n][1])) <= tol.rtol * max(
                        1.0, float(np.max(np.abs(emp[n][1])))):
                    row = replace(row, reason=row.reason + "; yours equals the empirical "
                                  "Fisher's G: its targets came from the data, not from the "
                                  "model")
            else:
                row = compare_arrays(subject, check, actual, expected, tol, label=label)
                if not row.ok and actual.shape != expected.shape and which == "A" and \
                        layer.bias is not None:
                    row = replace(row, reason=row.reason + " (the bias row: homogeneous "
                                  "coordinates [a, 1])")
            rows.append(row)
        rows = _accept_split(rows, [np.asarray(jnp.asarray(x, jnp.float64)) for x in pair],
                             ref[n], tol, counts, report, n, sigma is not None)
        report.rows.extend(rows)
    return report


def _statistical_row(subject: str, check: str, label: str, actual: np.ndarray,
                     expected: np.ndarray, sigma: np.ndarray, samples: int, tol: Tolerance,
                     false_alarm: float) -> Row:
    """A Monte-Carlo factor against its expectation: the entry with the largest ratio of
    the error to :math:`z_\\alpha\\sigma/\\sqrt S` plus the rounding bound at the scale."""
    if actual.shape != expected.shape:
        return Row(subject, check, math.inf, tol.rtol, "fail", label,
                   reason=f"{label}: expected shape {expected.shape}, got {actual.shape}")
    z = NormalDist().inv_cdf(1 - false_alarm / (2 * expected.size))
    scale = max(1.0, float(np.max(np.abs(expected))))
    allowed = z * sigma / math.sqrt(samples) + tol.rtol * scale
    diff = np.abs(actual - expected)
    diff = np.where(np.isfinite(diff), diff, np.inf)
    idx = np.unravel_index(int(np.argmax(diff / allowed)), expected.shape)
    ok = bool(diff[idx] <= allowed[idx])
    reason = (f"z={z:.3g} standard errors of {samples} draws + {tol.reason}")
    return Row(subject, check, float(diff[idx]) / scale, float(allowed[idx]) / scale,
               "pass" if ok else "fail", f"{label}[{', '.join(str(int(i)) for i in idx)}]",
               float(actual[idx]), float(expected[idx]), reason if ok else
               f"bound at this entry {allowed[idx]:.3g} = {reason}")


def _accept_split(rows: list[Row], user: list[np.ndarray], ref: tuple[np.ndarray, np.ndarray],
                  tol: Tolerance, counts: dict[str, int], report: CheckReport, name: str,
                  statistical: bool) -> list[Row]:
    """Name a scalar multiple on a failing factor; pass a pair :math:`(cA, G/c)` (the same
    block :math:`A\\otimes G`, another convention for where the 1/N sits) with a note."""
    hints = [_scalar_hint(u, r, tol.rtol, counts) for u, r in zip(user, ref, strict=True)]
    (ca, ta), (cg, tg) = hints
    if not statistical and ca is not None and cg is not None and \
            abs(ca * cg - 1) <= tol.rtol and not rows[0].ok and not rows[1].ok:
        report.notes.append(f"layer {name!r}: your factors are ({ca:.6g} A, G / {ca:.6g}): the "
                            "same block A (x) G with the scalar elsewhere; accepted (factored "
                            "damping and pi-heuristics depend on the split)")
        return [replace(r, verdict="pass", reason=f"same block, factor split by {ca:.6g}")
                for r in rows]
    return [replace(r, reason=f"{t}; {r.reason}") if not r.ok and t else r
            for r, t in zip(rows, (ta, tg), strict=True)]
