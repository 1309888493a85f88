r"""The bounds of :func:`nlaverify.check.check_optimizer`: the rounding model of one step of
each rule (:class:`ErrorModel`, :data:`ERROR_MODELS`), the bound of a parameter after
:math:`t` steps (:func:`step_bound`) and the entrywise bound of one update
(:func:`update_row`). See :mod:`nlaverify.check.optimizer` for the math and the seed
sections (Baggag & Saad §2.4, §5.4, §5.5; Higham & Mary 2019).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.check.report import Row, inconclusive_row
from nlaverify.tolerance import Tolerance, tolerance, unit_roundoff

__all__ = ["ERROR_MODELS", "STORE_ROUNDINGS", "ErrorModel", "step_bound", "update_row"]


@dataclass(frozen=True)
class ErrorModel:
    r"""The rounding model of one step of a rule on one parameter: ``stages`` dependent
    rounding stages :math:`S`, the longest accumulation :math:`k` (``size``, from the
    parameter's shape) and the condition :math:`\kappa` (``condition(t, shape, state)``,
    ``state`` the reference's state of that parameter after step :math:`t`, or ``None``)."""

    stages: int
    size: Callable[[tuple[int, ...]], int]
    condition: Callable[[int, tuple[int, ...], Any], float]
    why: str
    #: the update's error is componentwise (elementwise rules), not normwise (Muon, Shampoo)
    elementwise: bool = True


def _one(shape: tuple[int, ...]) -> int:
    return 1


def _root_condition(stats: Any) -> float:
    r"""Shampoo's amplification of rounding: the statistics :math:`S` of a parameter of order
    :math:`o` enter as :math:`S^{-1/p}`, :math:`p = 2o`, so a rounding of the gradient along
    an eigenvector of :math:`\lambda_{\min}` (where the exact gradient has no component: the
    :math:`\epsilon I` directions) is amplified by :math:`(\lambda_{\max}/\lambda_{\min})^{1/p}`
    relative to the direction's scale."""
    if not stats:
        return 1.0
    p, worst = 2 * len(stats), 1.0
    for S in stats:
        w = np.linalg.eigvalsh(np.asarray(S, np.float64))
        if w.size and w[-1] > 0:
            worst = max(worst, (w[-1] / max(w[0], w[-1] * np.finfo(np.float64).eps)) ** (1 / p))
    return float(worst)
_MUON_KAPPA = float(sum(abs(a) for a in (3.4445, -4.7750, 2.0315)))

#: per rule name (a matrix leaf of Muon uses ``"muon"``, its other leaves ``"adam"``)
ERROR_MODELS: dict[str, ErrorModel] = {
    "sgd": ErrorModel(2, _one, lambda t, s, st: 1.0, "SGD: scale and decay, S=2"),
    # the trace sums up to t gradients: its cancellation is bounded by t
    "momentum": ErrorModel(3, _one, lambda t, s, st: float(t),
                           "momentum: trace, look-ahead, scale, S=3, kappa=t (a sum of t "
                           "gradients)"),
    "adagrad": ErrorModel(4, _one, lambda t, s, st: 1.0,
                          "Adagrad: square, sum, root, division, S=4"),
    "rmsprop": ErrorModel(6, _one, lambda t, s, st: float(t),
                          "RMSprop: moment, root, division, scale, trace, S=6, kappa=t"),
    # two moments, their corrections, root, epsilon, division, scale (tests/test_optim_rules)
    "adam": ErrorModel(8, _one, lambda t, s, st: 1.0,
                       "Adam: two moments, corrections, root, eps, division, scale, S=8"),
    # Newton–Schulz: three dependent products per step (5 steps), normalisation and moment;
    # the cancelling terms of Muon's quintic: kappa = sum |a_i|
    "muon": ErrorModel(17, lambda s: max(s[-2:]), lambda t, s, st: _MUON_KAPPA,
                       f"Muon: Newton-Schulz 3 x 5 products + normalisation + moment, S=17, "
                       f"k=max(m, n), kappa=sum|a_i|={_MUON_KAPPA:g}", elementwise=False),
    # two Gram products, two eigendecompositions and inverse roots, two products
    "shampoo": ErrorModel(8, lambda s: max(s), lambda t, s, st: _root_condition(st),
                          "Shampoo: statistics, eigh and inverse roots, products, S=8, "
                          "kappa=max (lambda_max/lambda_min)^(1/p) of the statistics",
                          elementwise=False),
}
ERROR_MODELS["nesterov"] = ERROR_MODELS["momentum"]
ERROR_MODELS["nadam"] = ERROR_MODELS["adamw"] = ERROR_MODELS["nadamw"] = ERROR_MODELS["adam"]


def _leaf_model(rule_name: str, shape: tuple[int, ...], is_matrix: Callable[..., bool],
                key: str) -> ErrorModel:
    if rule_name == "muon":
        return ERROR_MODELS["muon" if is_matrix(key, shape) else "adam"]
    return ERROR_MODELS.get(rule_name, ERROR_MODELS["muon"])


# ------------------------------------------------------------------------------ the bound


def _composition(dtype: str) -> str:
    return "linear" if dtype in ("float64", "float32") else "random"


def step_bound(dtype: str, t: int, model: ErrorModel, shape: tuple[int, ...], mass: float,
               scale: float, state: Any = None) -> Tolerance:
    r"""The bound of one leaf after step ``t`` (module docstring):
    :math:`\tau(u, D{=}t) + \tau(u, k, \kappa, D{=}tS)\cdot\mathrm{mass}/\mathrm{scale}`."""
    comp = _composition(dtype)
    tw = tolerance(dtype, depth=t, composition=comp)  # type: ignore[arg-type]
    td = tolerance(dtype, size=max(1, model.size(shape)), depth=t * model.stages,
                   condition=model.condition(t, shape, state), composition=comp)  # type: ignore[arg-type]
    rtol = tw.rtol + td.rtol * mass / scale
    return Tolerance(rtol, f"after {t} steps: storage of w, {t} roundings ({tw.reason}) + "
                           f"sum_s<=t max|u_s| = {mass:.3g} over scale {scale:.3g} x the "
                           f"update's error, {t} steps of {model.why} ({td.reason})")


def _leaf_state(state: Any, key: str) -> Any:
    """The part of a reference state that the error model reads (Shampoo's statistics)."""
    if isinstance(state, dict) and isinstance(state.get("stats"), dict):
        return state["stats"].get(key)
    return None


#: roundings of the stored weight per step a user's optimizer may make, each at most
#: :math:`u|w|`: the decay factor :math:`1-\eta\lambda` rounded to the dtype, the decay
#: product :math:`w(1-\eta\lambda)` and the addition of the update (``torch.optim.AdamW``)
STORE_ROUNDINGS = 3


def update_row(subject: str, t: int, key: str, w_prev: np.ndarray, w_now: np.ndarray,
               u_ref: np.ndarray, dtype: str, model: ErrorModel, state: Any = None,
               magnitude: np.ndarray | None = None, parts: dict[str, np.ndarray] | None = None,
               seen: set[str] | None = None) -> Row:
    r"""The user's update of leaf ``key`` at step ``t``, :math:`d = w_t - w_{t-1}` (exact in
    float64 from the stored values), against the reference update :math:`u` at the user's
    :math:`w_{t-1}`, entry by entry:

    .. math:: |d_\iota - u_\iota| \le u_{\text{dtype}}\,S_w\,\max(|w_{t-1,\iota}|,
              |w_{t,\iota}|) + \tau(u, k, \kappa, D{=}tS)\,U_\iota,

    the storage of :math:`w` (:data:`STORE_ROUNDINGS` roundings of at most :math:`u|w|`
    each) plus the update's own error (the tolerance model with the rule's
    :class:`ErrorModel`). For the elementwise rules the error is componentwise and
    :math:`U_\iota` is ``magnitude``: the rule run on :math:`|g|` and :math:`|w|`, whose
    sums have no cancellation (a running-error bound: a rounding of a moment is at most
    :math:`u` times the sum of the magnitudes it adds, which may exceed the moment where the
    gradients cancel), :math:`|u_\iota|` when not given; for Muon and Shampoo, which mix
    the entries, :math:`U_\iota = \max|u|` (normwise). The row names the entry of the
    largest ratio; its ``error`` and ``bound`` are that entry's, relative to
    :math:`\max|u|`. Its resolution is :math:`\min_\iota \mathrm{bound}_\iota/|u_\iota|`,
    the smallest relative error of the update it could see (at the best-resolved entry): at
    1 or more (an update below half an ulp of every stored weight, as a bfloat16 weight of
    size 1 under a learning rate of :math:`10^{-3}`) the row is inconclusive.

    ``parts``: named parts of :math:`u` (AdamW's decay :math:`-\eta\lambda w`); the name of
    each part that exceeds the bound at some entry, where an error in that part alone would
    show, is added to ``seen``."""
    d = np.asarray(w_now, np.float64) - np.asarray(w_prev, np.float64)
    u = np.asarray(u_ref, np.float64)
    shape = tuple(u.shape)
    umax = float(np.max(np.abs(u))) if u.size else 0.0
    label = f"update[{key!r}]"
    if d.shape != u.shape:
        return Row(subject, f"update {t}", math.inf, math.nan, "fail", label,
                   reason=f"{label}: expected shape {u.shape}, got {d.shape}")
    bad = ~np.isfinite(u)
    if bad.any():  # the rule itself overflowed: the user's update must be the same there
        with np.errstate(invalid="ignore"):
            same_bad = (d == u) | (np.isnan(d) & np.isnan(u))
        if not np.all(same_bad[bad]):
            idx = tuple(int(i) for i in np.argwhere(bad & ~same_bad)[0])
            return Row(subject, f"update {t}", math.inf, 0.0, "fail",
                       f"{label}[{', '.join(map(str, idx))}]", float(d[idx]), float(u[idx]),
                       "the reference update is not finite here and yours differs")
        if bad.all():
            return Row(subject, f"update {t}", 0.0, 0.0, "pass", label, reason="the same "
                       "non-finite update as the reference at every entry")
        d, u = np.where(bad, 0.0, d), np.where(bad, 0.0, u)
        umax = float(np.max(np.abs(u))) if u.size else 0.0
    tau = tolerance(dtype, size=max(1, model.size(shape)), depth=t * model.stages,
                    condition=model.condition(t, shape, state),
                    composition=_composition(dtype))  # type: ignore[arg-type]
    store = STORE_ROUNDINGS * unit_roundoff(dtype) * np.maximum(np.abs(w_prev), np.abs(w_now))
    store = np.maximum(store, STORE_ROUNDINGS * _smallest_subnormal(dtype))
    if not model.elementwise:
        scale_u = np.full(u.shape, umax)
    else:
        scale_u = np.abs(u) if magnitude is None else np.maximum(
            np.abs(u), np.abs(np.asarray(magnitude, np.float64)))
    bound = store + tau.rtol * scale_u
    if seen is not None:
        seen.update(name for name, part in (parts or {}).items()
                    if np.any(np.abs(np.asarray(part, np.float64)) > bound))
    moved = np.abs(u) > 0
    resolution = float(np.min(bound[moved] / np.abs(u[moved]))) if moved.any() else math.inf
    why = (f"|dw - u| <= {STORE_ROUNDINGS} x u({dtype}) x |w| (storage) + tau x "
           f"{'max|u|' if (not model.elementwise) else '|u|'} (tau = {tau.rtol:.3g}: {tau.reason})")
    if resolution >= 1:
        if not moved.any():
            why_not = f"the reference update of {key!r} is 0: nothing to check"
        elif np.all(store[moved] >= np.abs(u[moved])):
            why_not = (f"the update of {key!r} (max|u| = {umax:.3g}) is below the resolution "
                       f"of {dtype} weights at every entry (half an ulp of |w|): nothing "
                       f"distinguishes it from no update; a larger learning rate, smaller "
                       f"weights or float32 master weights resolve it")
        elif np.all(tau.rtol * scale_u[moved] >= np.abs(u[moved])):
            why_not = (f"the rule's own rounding bound in {dtype} ({tau.rtol:.3g} x the "
                       f"magnitudes it adds; {tau.reason}) reaches |u| at every entry of "
                       f"{key!r}: the tolerance model cannot resolve this rule's update in "
                       f"{dtype}")
        else:
            why_not = (f"no entry of {key!r} resolves its update (max|u| = {umax:.3g}) in "
                       f"{dtype}: at each, the storage of the weight (half an ulp of |w|) or "
                       f"the rule's own rounding ({tau.rtol:.3g} x the magnitudes it adds) "
                       f"reaches |u|")
        return inconclusive_row(subject, f"update {t}", why_not, resolution=resolution,
                                where=label)
    with np.errstate(invalid="ignore"):  # inf - inf: judged by `same`
        err = np.abs(d - u)
    same = (d == u) | (np.isnan(d) & np.isnan(u))  # the same overflow on both sides
    err = np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, err / bound, np.where(err > 0, np.inf, 0.0))
    idx = np.unravel_index(int(np.argmax(ratio)), u.shape) if u.ndim else ()
    unit = umax if umax > 0 else 1.0
    error, b = float(err[idx]) / unit, float(bound[idx]) / unit
    where = f"{label}[{', '.join(str(int(i)) for i in idx)}]" if u.ndim else label
    ok = bool(ratio[idx] <= 1)
    reason = (f"{why}; resolves relative update errors >= {resolution:.3g} (best entry)")
    return Row(subject, f"update {t}", error, b, "pass" if ok else "fail", where,
               float(d[idx]), float(u[idx]), reason)


def _smallest_subnormal(dtype: str) -> float:
    """Half the smallest positive subnormal of ``dtype``: the storage error of a weight at 0."""
    if dtype == "bfloat16":
        import ml_dtypes

        return float(ml_dtypes.finfo(ml_dtypes.bfloat16).smallest_subnormal) / 2
    return float(np.finfo(np.dtype(dtype)).smallest_subnormal) / 2
