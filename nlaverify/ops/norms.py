r"""LayerNorm and RMSNorm over the feature axis (forward and VJP).

Baggag & Saad §3.8 and §3.8.1: each token (row) is normalized on its own.

**Huge and tiny norms** (``docs/guide/precision.md``, "Inputs that break naive kernels"). The
root mean square :math:`\sqrt{\overline{c^2} + \epsilon}` is never formed from
:math:`c^2`: in float32, :math:`c_j^2` overflows for :math:`|c_j| \gtrsim 1.8\cdot
10^{19}` (the output becomes :math:`0`, or ``nan``) and underflows for tiny
:math:`c_j`. Every row is divided first by a positive scale :math:`s`
(:meth:`~nlaverify.backends.base.Namespace.norm_scale`; :math:`s = \max(\max_j |c_j|,
\sqrt\epsilon)` on floating backends) and :math:`\epsilon` is folded accordingly:

.. math:: \sqrt{\overline{c^2} + \epsilon} = s\,\rho,\qquad
   \rho = \sqrt{\overline{(c/s)^2} + \epsilon/s^2},\qquad
   \frac{c}{\sqrt{\overline{c^2}+\epsilon}} = \frac{c/s}{\rho} .

Then :math:`|c_j/s| \le 1` with equality for the largest entry, so
:math:`\overline{(c/s)^2} \ge 1/d` unless the row is :math:`0`, and
:math:`\epsilon/s^2 \le 1` (it may underflow to 0 only when it is negligible): no
overflow, no harmful underflow, no :math:`0/0`, finite for :math:`|x| \le` half the
largest float. The lemma ``norm_scale_invariance`` proves the identity for every
:math:`s > 0`; the exact namespace makes :math:`s` an opaque positive symbol, so every
proof covers every scale. **Tiny norms**: when :math:`\overline{c^2} \ll \epsilon`,
:math:`\epsilon` dominates and the output is :math:`\gamma \odot c/\sqrt\epsilon`
(:math:`+\beta`): correct mathematics, computed with relative accuracy down to the
subnormal range (:math:`c/s` with :math:`s = \sqrt\epsilon`). The centering
(:func:`_centered`) neither overflows for a huge row nor loses a constant row (which
centers to exactly 0, so LayerNorm returns :math:`\beta`).
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._tangent import jvp_rule, lin, tsum
from nlaverify.ops._validate import check_args, check_positive


def _mean(xp: Namespace, x: Any, d: int) -> Any:
    return xp.sum(x, axis=-1, keepdims=True) * xp.rational(1, d)


def _centered(xp: Namespace, x: Any, d: int) -> Any:
    r""":math:`c = x - \mu`, :math:`\mu = \tfrac1d\sum_j x_j`, computed from the row shifted
    by its first entry, :math:`y = x - x_1` (the shifted-data algorithm of Chan, Golub &
    LeVeque), by the corrected two-pass mean (Björck; Higham, *Accuracy and Stability*,
    §1.9): :math:`c^{(0)} = y - \sum_j (y_j/d)`, then :math:`c = c^{(0)} - \sum_j
    (c^{(0)}_j/d)`.

    The shift makes a constant row center to exactly 0 and, for a row :math:`M + \delta`
    with :math:`|M| \gg |\delta|`, subtracts exactly (Sterbenz), so the error of :math:`c`
    is :math:`O(u \max_j |c_j|)` instead of :math:`O(u \max_j |x_j|)`; dividing by
    :math:`d` before summing keeps every partial sum below :math:`2\max_j |x_j|` (no
    overflow of :math:`\sum_j x_j` for a huge row, whatever :math:`d`). In exact
    arithmetic the shift and the correction cancel: the exact namespace builds the plain
    :math:`x_i - \tfrac1d\sum_j x_j` as it evaluates the expression."""
    y = x - x[..., 0:1]
    c0 = y - xp.sum(y * xp.rational(1, d), axis=-1, keepdims=True)
    return c0 - xp.sum(c0 * xp.rational(1, d), axis=-1, keepdims=True)


def _check_eps(op: str, xp: Namespace, eps: Any, x: Any) -> None:
    """``eps > 0``; on a floating backend also a normal number of ``x``'s dtype whose root
    is normal too (an ``eps`` that rounds to 0 or a subnormal would void the premise
    :math:`s > 0` of ``norm_scale_invariance``), and at most the dtype's largest number."""
    check_positive(op, "eps", eps)
    if xp.object_arrays or not isinstance(eps, int | float) or not hasattr(x, "dtype"):
        return
    import math

    info = xp.finfo(x.dtype)
    lo, hi = float(info.smallest_normal), float(info.max)
    if not (math.sqrt(lo) <= eps <= hi):
        from nlaverify.errors import ArgumentError

        raise ArgumentError(f"{op}: argument 'eps': expected a number in [{math.sqrt(lo):.3g}, "
                            f"{hi:.3g}] for dtype {info.dtype} (its root and itself normal), "
                            f"got {eps!r}")


def _scaled_rms(xp: Namespace, c: Any, d: int, eps: Any) -> tuple[Any, Any, Any]:
    r"""``(h, rho, s)`` with :math:`h = c/s`, :math:`\rho = \sqrt{\overline{h^2} +
    \epsilon/s^2}` and :math:`s` = :meth:`~nlaverify.backends.base.Namespace.norm_scale`:
    the root mean square is :math:`s\rho` and the normalized row :math:`c/(s\rho) =
    h/\rho` (see the module docstring)."""
    s = xp.norm_scale(c, eps)
    h = c / s
    # eps/s/s: never s*s, which overflows for s > 1.8e19 in float32
    return h, xp.sqrt(_mean(xp, h * h, d) + xp.const(eps) / s / s), s


def _normalized_jvp(xp: Namespace, xhat: Any, dc: Any, rho: Any, s: Any, d: int) -> Any:
    r"""The tangent of :math:`c \mapsto \hat x = c/\sqrt{\overline{c^2}+\epsilon}` along
    :math:`\dot c`, with :math:`\sigma = s\rho` from :func:`_scaled_rms`:

    .. math:: \dot{\hat x} = \frac1\sigma\bigl(\dot c - \hat x\,
       \overline{\hat x\odot\dot c}\bigr)."""
    return (dc - xhat * _mean(xp, xhat * dc, d)) / rho / s


def layernorm(xp: Namespace, x: Any, gamma: Any, beta: Any, eps: Any) -> Any:
    r"""LayerNorm (Baggag & Saad §3.8):

    .. math:: \mu = \tfrac1d\textstyle\sum_j x_j,\quad
       \sigma = \sqrt{\tfrac1d\textstyle\sum_j (x_j-\mu)^2 + \epsilon},\quad
       y = \gamma \odot \frac{x-\mu}{\sigma} + \beta .
    """
    _check_eps("layernorm", xp, eps, x)
    d = check_args("layernorm", xp, {"x": (x, ("*", "d")), "gamma": (gamma, ("d",)),
                                     "beta": (beta, ("d",))})["d"]
    h, rho, _ = _scaled_rms(xp, _centered(xp, x, d), d, eps)
    return gamma * (h / rho) + beta


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
    _check_eps("layernorm_vjp", xp, eps, x)
    d = check_args("layernorm_vjp", xp, {"x": (x, ("*", "d")), "gamma": (gamma, ("d",)),
                                         "beta": (beta, ("d",)), "G": (G, ("*", "d"))})["d"]
    h, rho, s = _scaled_rms(xp, _centered(xp, x, d), d, eps)
    xhat = h / rho
    gx = G * gamma
    dx = (gx - _mean(xp, gx, d) - xhat * _mean(xp, gx * xhat, d)) / rho / s
    rows_G, rows_xhat = xp.reshape(G, (-1, d)), xp.reshape(xhat, (-1, d))
    return dx, xp.sum(rows_G * rows_xhat, axis=0), xp.sum(rows_G, axis=0)


@jvp_rule("dx", "dgamma", "dbeta")
def layernorm_jvp(xp: Namespace, T: tuple[Any, Any, Any], x: Any, gamma: Any, beta: Any,
                  eps: Any) -> Any:
    r"""JVP of :func:`layernorm` (Baggag & Saad §3.8). The centering is linear, so its
    tangent is :math:`\dot c = \dot x - \overline{\dot x}` (computed by the forward's own
    :func:`_centered`), and

    .. math:: \dot y = \frac{\gamma}{\sigma}\odot\bigl(\dot c - \hat x\,
       \overline{\hat x\odot\dot c}\bigr) + \dot\gamma\odot\hat x + \dot\beta,

    where :math:`\overline{\,\cdot\,}` is the mean over the feature axis. ``T = (dx,
    dgamma, dbeta)``, an entry ``None`` meaning a zero tangent.
    """
    dx, dgamma, dbeta = T
    _check_eps("layernorm_jvp", xp, eps, x)
    d = check_args("layernorm_jvp", xp, {
        "x": (x, ("*", "d")), "gamma": (gamma, ("d",)), "beta": (beta, ("d",)),
        "dx": (dx, ("*", "d")), "dgamma": (dgamma, ("d",)), "dbeta": (dbeta, ("d",))})["d"]
    h, rho, s = _scaled_rms(xp, _centered(xp, x, d), d, eps)
    xhat = h / rho
    if dx is None and dgamma is None:  # only the shift moves: the same row for every row
        dbeta = xp.zeros_like(x) + dbeta
    return tsum(lin(dx, lambda t: gamma * _normalized_jvp(xp, xhat, _centered(xp, t, d), rho,
                                                          s, d)),
                lin(dgamma, lambda t: t * xhat), dbeta)


def layernorm_jacobian(xp: Namespace, x: Any, gamma: Any, eps: Any) -> Any:
    r"""Explicit Jacobian :math:`\partial y/\partial x` of one row (Baggag & Saad §3.8):

    .. math:: J = \frac{1}{\sigma}\operatorname{diag}(\gamma)
       \Bigl(I - \tfrac1d\mathbf 1\mathbf 1^\top - \tfrac1d \hat x\hat x^\top\Bigr).
    """
    _check_eps("layernorm_jacobian", xp, eps, x)
    d = check_args("layernorm_jacobian", xp, {"x": (x, ("d",)), "gamma": (gamma, ("d",))})["d"]
    h, rho, s = _scaled_rms(xp, _centered(xp, x, d), d, eps)
    xhat = xp.reshape(h / rho, (-1, 1))
    eye = xp.one_hot(xp.arange(d), d, x.dtype)
    inner = eye - xp.rational(1, d) - xp.matmul(xhat, xp.matrix_transpose(xhat)) * xp.rational(
        1, d)
    return xp.reshape(gamma, (-1, 1)) * inner / rho / s


def rmsnorm(xp: Namespace, x: Any, gamma: Any, eps: Any) -> Any:
    r"""RMSNorm (Baggag & Saad §3.8.1):
    :math:`r = \sqrt{\tfrac1d\sum_j x_j^2 + \epsilon}`, :math:`y = \gamma \odot x / r`.
    """
    _check_eps("rmsnorm", xp, eps, x)
    d = check_args("rmsnorm", xp, {"x": (x, ("*", "d")), "gamma": (gamma, ("d",))})["d"]
    h, rho, _ = _scaled_rms(xp, x, d, eps)
    return gamma * (h / rho)


def rmsnorm_vjp(xp: Namespace, G: Any, x: Any, gamma: Any, eps: Any) -> tuple[Any, Any]:
    r"""VJP of :func:`rmsnorm`. With :math:`\hat x = x/r`, the row Jacobian is
    :math:`\frac1r\operatorname{diag}(\gamma)(I - \tfrac1d\hat x\hat x^\top)`, so

    .. math:: \bar x = \frac1r\bigl(g_{\hat x} - \hat x\,\overline{g_{\hat x}\odot\hat x}\bigr),
       \quad \bar\gamma = \textstyle\sum_{\text{rows}} g\odot \hat x .
    """
    _check_eps("rmsnorm_vjp", xp, eps, x)
    d = check_args("rmsnorm_vjp", xp, {"x": (x, ("*", "d")), "gamma": (gamma, ("d",)),
                                       "G": (G, ("*", "d"))})["d"]
    h, rho, s = _scaled_rms(xp, x, d, eps)
    xhat = h / rho
    gx = G * gamma
    dx = (gx - xhat * _mean(xp, gx * xhat, d)) / rho / s
    return dx, xp.sum(xp.reshape(G, (-1, d)) * xp.reshape(xhat, (-1, d)), axis=0)


@jvp_rule("dx", "dgamma")
def rmsnorm_jvp(xp: Namespace, T: tuple[Any, Any], x: Any, gamma: Any, eps: Any) -> Any:
    r"""JVP of :func:`rmsnorm` (Baggag & Saad §3.8.1):

    .. math:: \dot y = \frac{\gamma}{r}\odot\bigl(\dot x - \hat x\,
       \overline{\hat x\odot\dot x}\bigr) + \dot\gamma\odot\hat x .

    ``T = (dx, dgamma)``, an entry ``None`` meaning a zero tangent.
    """
    dx, dgamma = T
    _check_eps("rmsnorm_jvp", xp, eps, x)
    d = check_args("rmsnorm_jvp", xp, {"x": (x, ("*", "d")), "gamma": (gamma, ("d",)),
                                       "dx": (dx, ("*", "d")),
                                       "dgamma": (dgamma, ("d",))})["d"]
    h, rho, s = _scaled_rms(xp, x, d, eps)
    xhat = h / rho
    return tsum(lin(dx, lambda t: gamma * _normalized_jvp(xp, xhat, t, rho, s, d)),
                lin(dgamma, lambda t: t * xhat))


def rmsnorm_jacobian(xp: Namespace, x: Any, gamma: Any, eps: Any) -> Any:
    r"""Explicit Jacobian of one row of :func:`rmsnorm`:
    :math:`J = \frac1r\operatorname{diag}(\gamma)(I - \tfrac1d \hat x\hat x^\top)`."""
    _check_eps("rmsnorm_jacobian", xp, eps, x)
    d = check_args("rmsnorm_jacobian", xp, {"x": (x, ("d",)), "gamma": (gamma, ("d",))})["d"]
    h, rho, s = _scaled_rms(xp, x, d, eps)
    xhat = xp.reshape(h / rho, (-1, 1))
    eye = xp.one_hot(xp.arange(d), d, x.dtype)
    inner = eye - xp.matmul(xhat, xp.matrix_transpose(xhat)) * xp.rational(1, d)
    return xp.reshape(gamma, (-1, 1)) * inner / rho / s
