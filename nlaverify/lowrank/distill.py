r"""Knowledge distillation: the softened teacher–student loss, its gradient and its large-T limit.

Baggag & Saad §4.1, Fig. 27 (a student is trained to match the teacher's softened outputs;
Hinton, Vinyals & Dean 2015). With temperature :math:`T > 0`, :math:`p = \operatorname
{softmax}(z/T)` row by row, student logits :math:`z_s` and teacher logits :math:`z_t`
(:math:`N` rows of :math:`V` classes),

.. math:: L(z_s) = \frac{T^2}{N}\sum_{n=1}^N \mathrm{KL}\bigl(p_t^{(n)}\,\|\,p_s^{(n)}\bigr),
          \qquad \frac{\partial L}{\partial z_s^{(n)}} = \frac{T}{N}\bigl(p_s^{(n)} -
          p_t^{(n)}\bigr),

since :math:`\mathrm{KL} = \sum_i p_{t,i}\log p_{t,i} - \sum_i p_{t,i}\log p_{s,i}` and
:math:`\partial(-\sum_i p_{t,i}\log p_{s,i})/\partial z_s = (p_s - p_t)/T`; the factor
:math:`T^2` keeps the gradient's scale independent of :math:`T` (Hinton et al. §2).

**Large T** (logit matching). With :math:`\varepsilon = 1/T`, :math:`g(\varepsilon) =
\operatorname{softmax}(\varepsilon z_s) - \operatorname{softmax}(\varepsilon z_t)` has
:math:`g(0) = 0` and :math:`\frac{d}{d\varepsilon}\operatorname{softmax}(\varepsilon z)_i
\big|_0 = (z_i - \bar z)/V`, so

.. math:: \lim_{T\to\infty} T\,(p_s - p_t) = g'(0) = \frac{(z_s - \bar z_s) - (z_t - \bar
          z_t)}{V},\qquad \lim_{T\to\infty} T^2\,\mathrm{KL}(p_t\|p_s) = \frac1{2V}
          \bigl\|(z_s - \bar z_s) - (z_t - \bar z_t)\bigr\|^2

(the second from :math:`\mathrm{KL}(\varepsilon) = \varepsilon^2\,\mathrm{KL}''(0)/2 +
O(\varepsilon^3)`): distillation at high temperature is least squares on the centred logits.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import sympy

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.ops.softmaxes import log_softmax, softmax

__all__ = [
    "distillation_grad",
    "distillation_loss",
    "logit_matching_grad",
    "logit_matching_loss",
]


def _check(fn: str, xp: Namespace, z_s: Any, z_t: Any, T: Any) -> None:
    s, t = tuple(getattr(z_s, "shape", ())), tuple(getattr(z_t, "shape", ()))
    if len(s) != 2:
        raise ShapeError(f"{fn}: argument 'z_s': expected logits (N, V), got shape {s}")
    if s != t:
        raise ShapeError(f"{fn}: argument 'z_t': expected the shape of z_s {s}, got {t}")
    _check_temperature(fn, xp, T)


def _check_temperature(fn: str, xp: Namespace, T: Any) -> None:
    """``T``: a finite number > 0 (a Python or NumPy number, or a 0-d array; a JAX tracer
    is let through), or, on the exact namespace, a SymPy expression known to be positive."""
    bad = ArgumentError(f"{fn}: argument 'T': expected a finite temperature > 0 (a number "
                        f"or a 0-d array), got {T!r}")
    if isinstance(T, bool):
        raise bad
    if isinstance(T, sympy.Basic):
        if not (xp.object_arrays and T.is_positive and T.is_finite is not False):
            raise bad
        return
    if isinstance(T, numbers.Real):
        if not (math.isfinite(T) and T > 0):
            raise bad
        return
    if tuple(getattr(T, "shape", (None,))) != ():
        raise bad
    if xp.object_arrays or not xp.is_concrete(T):
        return
    try:
        v = float(np.asarray(T))
    except (TypeError, ValueError, RuntimeError):
        v = float(T)
    if not (math.isfinite(v) and v > 0):
        raise bad


def _temp(xp: Namespace, T: Any) -> Any:
    return xp.const(T) if isinstance(T, numbers.Real) else T


def _xlogy_terms(xp: Namespace, pt: Any, log_pt: Any, log_ps: Any) -> Any:
    r""":math:`p_t(\log p_t - \log p_s)` with :math:`0\log 0 = 0`: a class the teacher
    masks (:math:`z_t = -\infty`, :math:`p_t = 0`) contributes nothing, whatever
    :math:`p_s`."""
    if xp.object_arrays:
        return pt * (log_pt - log_ps)
    live = xp.greater(pt, 0)
    return xp.where(live, pt * (xp.where(live, log_pt, 0) - log_ps), 0)


def distillation_loss(xp: Namespace, z_s: Any, z_t: Any, T: Any) -> Any:
    r""":math:`L = \frac{T^2}{N}\sum_n \mathrm{KL}(\operatorname{softmax}(z_t^{(n)}/T)\,\|\,
    \operatorname{softmax}(z_s^{(n)}/T))` for logits ``z_s``, ``z_t`` of shape ``(N, V)``
    (Hinton et al. 2015; Baggag & Saad §4.1, Fig. 27), from stable log-softmaxes.

    Raises:
        ShapeError: logits not ``(N, V)`` or of different shapes.
        ArgumentError: ``T`` not a finite number :math:`> 0` (or a 0-d array holding one).

    A class the teacher masks (:math:`z_t = -\infty`) contributes :math:`0\log 0 = 0`.
    """
    _check("distillation_loss", xp, z_s, z_t, T)
    T = _temp(xp, T)
    log_ps = log_softmax(xp, z_s / T)
    log_pt = log_softmax(xp, z_t / T)
    pt = xp.exp(log_pt)
    kl = xp.sum(_xlogy_terms(xp, pt, log_pt, log_ps))
    return kl * T * T / z_s.shape[0]


def distillation_grad(xp: Namespace, z_s: Any, z_t: Any, T: Any) -> Any:
    r""":math:`\partial L/\partial z_s = \frac TN(p_s - p_t)`, the gradient of
    :func:`distillation_loss` with respect to the student logits."""
    _check("distillation_grad", xp, z_s, z_t, T)
    T = _temp(xp, T)
    return (softmax(xp, z_s / T) - softmax(xp, z_t / T)) * T / z_s.shape[0]


def _centred(xp: Namespace, z: Any) -> Any:
    return z - xp.sum(z, axis=-1, keepdims=True) / z.shape[-1]


def logit_matching_grad(xp: Namespace, z_s: Any, z_t: Any) -> Any:
    r"""The :math:`T\to\infty` limit of :func:`distillation_grad`:
    :math:`\frac1{NV}\bigl((z_s - \bar z_s) - (z_t - \bar z_t)\bigr)` (module docstring)."""
    _check("logit_matching_grad", xp, z_s, z_t, 1)
    return (_centred(xp, z_s) - _centred(xp, z_t)) / (z_s.shape[0] * z_s.shape[1])


def logit_matching_loss(xp: Namespace, z_s: Any, z_t: Any) -> Any:
    r"""The :math:`T\to\infty` limit of :func:`distillation_loss`:
    :math:`\frac1{2NV}\sum_n\|(z_s - \bar z_s) - (z_t - \bar z_t)\|^2`."""
    _check("logit_matching_loss", xp, z_s, z_t, 1)
    D = _centred(xp, z_s) - _centred(xp, z_t)
    return xp.sum(D * D) / (2 * z_s.shape[0] * z_s.shape[1])
