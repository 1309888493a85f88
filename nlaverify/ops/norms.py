"""LayerNorm and RMSNorm over the feature axis (forward and VJP).

Baggag & Saad §3.8 and §3.8.1: each token (row) is normalized on its own.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._validate import check_args, check_positive


def _mean(xp: Namespace, x: Any, d: int) -> Any:
    return xp.sum(x, axis=-1, keepdims=True) * xp.rational(1, d)


def layernorm(xp: Namespace, x: Any, gamma: Any, beta: Any, eps: Any) -> Any:
    r"""LayerNorm (Baggag & Saad §3.8):

    .. math:: \mu = \tfrac1d\textstyle\sum_j x_j,\quad
       \sigma = \sqrt{\tfrac1d\textstyle\sum_j (x_j-\mu)^2 + \epsilon},\quad
       y = \gamma \odot \frac{x-\mu}{\sigma} + \beta .
    """
    check_positive("layernorm", "eps", eps)
    d = check_args("layernorm", xp, {"x": (x, ("*", "d")), "gamma": (gamma, ("d",)),
                                     "beta": (beta, ("d",))})["d"]
    c = x - _mean(xp, x, d)
    return gamma * (c / xp.sqrt(_mean(xp, c * c, d) + xp.const(eps))) + beta


def layernorm_vjp(
    xp: Namespace, G: Any, x: Any, gamma: Any, beta: Any, eps: Any
) -> tuple[Any, Any, Any]:
    r"""VJP of :func:`layernorm`. With :math:`\hat x = (x-\mu)/\sigma` and
    :math:`g_{\hat x} = \gamma \odot g`, the row Jacobian is
    :math:`\frac{1}{\sigma}\operatorname{diag}(\gamma)\bigl(I - \tfrac1d \mathbf 1\mathbf 1^\top
    - \tfrac1d \hat x \hat x^\top\bigr)` (symmetric in its bracket), so

    .. math:: \bar x = \frac{1}{\sigma}\Bigl(g_{\hat x} - \overline{g_{\hat x}}
       - \hat x\, \overline{g_{\hat x}\odot\hat x}\Bigr),\quad
       \bar\gamma = \textstyle\sum_{\text{rows}} g\odot\hat x,\quad
       \bar\beta = \textstyle\sum_{\text{rows}} g,

    where :math:`\overline{\,\cdot\,}` is the mean over the feature axis.
    """
    check_positive("layernorm_vjp", "eps", eps)
    d = check_args("layernorm_vjp", xp, {"x": (x, ("*", "d")), "gamma": (gamma, ("d",)),
                                         "beta": (beta, ("d",)), "G": (G, ("*", "d"))})["d"]
    c = x - _mean(xp, x, d)
    sigma = xp.sqrt(_mean(xp, c * c, d) + xp.const(eps))
    xhat = c / sigma
    gx = G * gamma
    dx = (gx - _mean(xp, gx, d) - xhat * _mean(xp, gx * xhat, d)) / sigma
    rows_G, rows_xhat = xp.reshape(G, (-1, d)), xp.reshape(xhat, (-1, d))
    return dx, xp.sum(rows_G * rows_xhat, axis=0), xp.sum(rows_G, axis=0)


def layernorm_jacobian(xp: Namespace, x: Any, gamma: Any, eps: Any) -> Any:
    r"""Explicit Jacobian :math:`\partial y/\partial x` of one row (Baggag & Saad §3.8):

    .. math:: J = \frac{1}{\sigma}\operatorname{diag}(\gamma)
       \Bigl(I - \tfrac1d\mathbf 1\mathbf 1^\top - \tfrac1d \hat x\hat x^\top\Bigr).
    """
    check_positive("layernorm_jacobian", "eps", eps)
    d = check_args("layernorm_jacobian", xp, {"x": (x, ("d",)), "gamma": (gamma, ("d",))})["d"]
    c = x - _mean(xp, x, d)
    sigma = xp.sqrt(_mean(xp, c * c, d) + xp.const(eps))
    xhat = xp.reshape(c / sigma, (-1, 1))
    eye = xp.one_hot(xp.arange(d), d, x.dtype)
    inner = eye - xp.rational(1, d) - xp.matmul(xhat, xp.matrix_transpose(xhat)) * xp.rational(
        1, d)
    return xp.reshape(gamma, (-1, 1)) * inner / sigma


def rmsnorm(xp: Namespace, x: Any, gamma: Any, eps: Any) -> Any:
    r"""RMSNorm (Baggag & Saad §3.8.1):
    :math:`r = \sqrt{\tfrac1d\sum_j x_j^2 + \epsilon}`, :math:`y = \gamma \odot x / r`.
    """
    check_positive("rmsnorm", "eps", eps)
    d = check_args("rmsnorm", xp, {"x": (x, ("*", "d")), "gamma": (gamma, ("d",))})["d"]
    return gamma * (x / xp.sqrt(_mean(xp, x * x, d) + xp.const(eps)))


def rmsnorm_vjp(xp: Namespace, G: Any, x: Any, gamma: Any, eps: Any) -> tuple[Any, Any]:
    r"""VJP of :func:`rmsnorm`. With :math:`\hat x = x/r`, the row Jacobian is
    :math:`\frac1r\operatorname{diag}(\gamma)(I - \tfrac1d\hat x\hat x^\top)`, so

    .. math:: \bar x = \frac1r\bigl(g_{\hat x} - \hat x\,\overline{g_{\hat x}\odot\hat x}\bigr),
       \quad \bar\gamma = \textstyle\sum_{\text{rows}} g\odot \hat x .
    """
    check_positive("rmsnorm_vjp", "eps", eps)
    d = check_args("rmsnorm_vjp", xp, {"x": (x, ("*", "d")), "gamma": (gamma, ("d",)),
                                       "G": (G, ("*", "d"))})["d"]
    r = xp.sqrt(_mean(xp, x * x, d) + xp.const(eps))
    xhat = x / r
    gx = G * gamma
    dx = (gx - xhat * _mean(xp, gx * xhat, d)) / r
    return dx, xp.sum(xp.reshape(G, (-1, d)) * xp.reshape(xhat, (-1, d)), axis=0)


def rmsnorm_jacobian(xp: Namespace, x: Any, gamma: Any, eps: Any) -> Any:
    r"""Explicit Jacobian of one row of :func:`rmsnorm`:
    :math:`J = \frac1r\operatorname{diag}(\gamma)(I - \tfrac1d \hat x\hat x^\top)`."""
    check_positive("rmsnorm_jacobian", "eps", eps)
    d = check_args("rmsnorm_jacobian", xp, {"x": (x, ("d",)), "gamma": (gamma, ("d",))})["d"]
    r = xp.sqrt(_mean(xp, x * x, d) + xp.const(eps))
    xhat = xp.reshape(x / r, (-1, 1))
    eye = xp.one_hot(xp.arange(d), d, x.dtype)
    inner = eye - xp.matmul(xhat, xp.matrix_transpose(xhat)) * xp.rational(1, d)
    return xp.reshape(gamma, (-1, 1)) * inner / r
