r"""Mean pooling and the :math:`\ell_2` normalization of the set transformer (Baggag & Saad
§5.2, the pooling operator :math:`P`; §5.1, the normalization :math:`N(u) = u/|u|_2`),
forward, VJP and JVP side by side, written once against ``xp``."""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._tangent import jvp_rule
from nlaverify.ops._validate import check_args

__all__ = ["l2_normalize", "l2_normalize_jvp", "l2_normalize_vjp", "mean_pool",
           "mean_pool_jvp", "mean_pool_vjp"]


def mean_pool(xp: Namespace, X: Any) -> Any:
    r"""The pooling operator of §5.2: :math:`P(X) = \frac1n \sum_{i=1}^n X_i`, ``(..., n, d)``
    to ``(..., d)``; invariant under a permutation of the rows (identity
    ``ssm_set_permutation``)."""
    dims = check_args("mean_pool", xp, {"X": (X, ("*", "n", "d"))})
    return xp.sum(X, axis=-2) * xp.rational(1, dims["n"])


def mean_pool_vjp(xp: Namespace, G: Any, X: Any) -> tuple[Any]:
    r""":math:`\bar X_i = g/n` for every row :math:`i`."""
    dims = check_args("mean_pool_vjp", xp, {"X": (X, ("*", "n", "d")), "G": (G, ("*", "d"))})
    return (xp.stack([G * xp.rational(1, dims["n"])] * dims["n"], axis=-2),)


@jvp_rule("dX",)
def mean_pool_jvp(xp: Namespace, T: tuple[Any], X: Any) -> Any:
    r""":math:`\dot P = \frac1n \sum_i \dot X_i` (the map is linear)."""
    return mean_pool(xp, T[0])


def _unit(xp: Namespace, u: Any) -> tuple[Any, Any]:
    r"""``(N(u), |u|)``. The row is first divided by the namespace's
    :meth:`~nlaverify.backends.base.Namespace.norm_scale` :math:`s` (a power of two on
    floating backends: :math:`u/s` is exact and :math:`\sum (u_j/s)^2` neither overflows
    nor underflows; an opaque positive symbol on the exact one, which cancels: lemma
    ``norm_scale_invariance``), then :math:`N(u) = (u/s)/|u/s|`, :math:`|u| = s|u/s|`."""
    s = xp.norm_scale(u, 0)
    us = u / s
    r = xp.sqrt(xp.sum(us * us, axis=-1, keepdims=True))
    return us / r, s * r


def l2_normalize(xp: Namespace, u: Any) -> Any:
    r""":math:`N(u) = u/|u|_2` along the last axis (§5.1), undefined at :math:`u = 0`
    (the floating result there is NaN: no :math:`\epsilon` is added, unlike
    ``F.normalize``, whose :math:`\max(|u|, \epsilon)` changes nothing else)."""
    check_args("l2_normalize", xp, {"u": (u, ("*", "d"))})
    return _unit(xp, u)[0]


def l2_normalize_vjp(xp: Namespace, G: Any, u: Any) -> tuple[Any]:
    r""":math:`\bar u = \bigl(g - N\,(N^\top g)\bigr)/|u|`: the Jacobian
    :math:`(I - N N^\top)/|u|` is symmetric."""
    check_args("l2_normalize_vjp", xp, {"u": (u, ("*", "d")), "G": (G, ("*", "d"))})
    n, r = _unit(xp, u)
    return ((G - n * xp.sum(n * G, axis=-1, keepdims=True)) / r,)


@jvp_rule("du",)
def l2_normalize_jvp(xp: Namespace, T: tuple[Any], u: Any) -> Any:
    r""":math:`\dot N = \bigl(\dot u - N\,(N^\top \dot u)\bigr)/|u|`."""
    check_args("l2_normalize_jvp", xp, {"u": (u, ("*", "d")), "du": (T[0], ("*", "d"))})
    n, r = _unit(xp, u)
    return (T[0] - n * xp.sum(n * T[0], axis=-1, keepdims=True)) / r
