"""Row-wise softmax and log-softmax, numerically stable (forward and VJP).

The stable form subtracts a per-row constant :math:`c` before :math:`\\exp`;
the lemma ``softmax_shift_invariance`` proves
:math:`\\operatorname{softmax}(z - c\\mathbf 1) = \\operatorname{softmax}(z)` for every
real :math:`c`, so the function proved on the exact namespace (symbolic
:math:`c`) and the one run in floating point (:math:`c = \\max_j z_j`) are the
same function.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._validate import check_args


def softmax(xp: Namespace, Z: Any, axis: int = -1) -> Any:
    r"""Softmax along ``axis`` (Baggag & Saad §3.4.2, Baptista–Stuart–Tran §2):

    .. math:: p_i = \frac{e^{z_i - c}}{\sum_j e^{z_j - c}},\qquad c = \max_j z_j .
    """
    check_args("softmax", xp, {"Z": (Z, ("*", "m"))}, neg_inf_ok=("Z",))
    E = xp.exp(Z - xp.stability_shift(Z, axis))
    return E / xp.sum(E, axis=axis, keepdims=True)


def softmax_vjp_from_output(xp: Namespace, G: Any, P: Any, axis: int = -1) -> Any:
    r"""Softmax VJP from its output :math:`P` (Baggag & Saad §3.4.2):

    .. math:: \bar z = J^\top g = p \odot \bigl(g - (g^\top p)\mathbf 1\bigr),
       \qquad J = \operatorname{diag}(p) - p p^\top .

    Applied to attention scores this is :math:`dS = P \odot (dP - \operatorname{rowsum}(dP
    \odot P))`.
    """
    return P * (G - xp.sum(G * P, axis=axis, keepdims=True))


def softmax_vjp(xp: Namespace, G: Any, Z: Any, axis: int = -1) -> tuple[Any]:
    r"""VJP of :func:`softmax`: :math:`\bar z = p \odot (g - \langle g, p\rangle)`."""
    check_args("softmax_vjp", xp, {"Z": (Z, ("*", "m")), "G": (G, ("*", "m"))},
               neg_inf_ok=("Z",))
    return (softmax_vjp_from_output(xp, G, softmax(xp, Z, axis), axis),)


def softmax_jacobian(xp: Namespace, p: Any) -> Any:
    r"""Explicit Jacobian of softmax at a probability vector ``p`` of length ``m``:
    :math:`J = \operatorname{diag}(p) - p p^\top` (Baggag & Saad §3.4.2)."""
    check_args("softmax_jacobian", xp, {"p": (p, ("m",))})
    col = xp.reshape(p, (-1, 1))
    eye = xp.one_hot(xp.arange(p.shape[0]), p.shape[0], p.dtype)
    return eye * col - xp.matmul(col, xp.matrix_transpose(col))


def log_softmax(xp: Namespace, Z: Any, axis: int = -1) -> Any:
    r"""Stable log-softmax (log-sum-exp with the same shift :math:`c`):

    .. math:: \log p_i = (z_i - c) - \log\sum_j e^{z_j - c}.
    """
    check_args("log_softmax", xp, {"Z": (Z, ("*", "m"))}, neg_inf_ok=("Z",))
    S = Z - xp.stability_shift(Z, axis)
    return S - xp.log(xp.sum(xp.exp(S), axis=axis, keepdims=True))


def log_softmax_vjp(xp: Namespace, G: Any, Z: Any, axis: int = -1) -> tuple[Any]:
    r"""VJP of :func:`log_softmax`: :math:`\bar z = g - p\,(\mathbf 1^\top g)`."""
    check_args("log_softmax_vjp", xp, {"Z": (Z, ("*", "m")), "G": (G, ("*", "m"))},
               neg_inf_ok=("Z",))
    return (G - softmax(xp, Z, axis) * xp.sum(G, axis=axis, keepdims=True),)
