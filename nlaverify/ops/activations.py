"""Pointwise nonlinearities of the MLP sublayer (forward and VJP).

Baggag & Saad §3.7.2 (input-dependent Jacobians) and §3.7.3 (gated SwiGLU).
Each Jacobian is diagonal, so each VJP is :math:`g \\odot \\sigma'(x)`.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._tangent import jvp_rule, lin, tsum
from nlaverify.ops._validate import check_args

#: the cubic coefficient of the tanh form of GELU, 0.044715, held exactly
GELU_TANH_COEFF = (44715, 1_000_000)


def _check(op: str, xp: Namespace, **arrays: Any) -> None:
    check_args(op, xp, {k: (v, ("*",)) for k, v in arrays.items()})


def relu(xp: Namespace, x: Any) -> Any:
    r""":math:`\operatorname{ReLU}(x) = \max(x, 0)` (Baggag & Saad §3.7.2)."""
    _check("relu", xp, x=x)
    return xp.where(xp.greater(x, 0), x, xp.zeros_like(x))


def relu_vjp(xp: Namespace, G: Any, x: Any) -> tuple[Any]:
    r""":math:`\bar x = g \odot \mathbb 1[x > 0]` (the subgradient 0 is taken at 0)."""
    _check("relu_vjp", xp, x=x, G=G)
    return (xp.where(xp.greater(x, 0), G, xp.zeros_like(G)),)


@jvp_rule("dx",)
def relu_jvp(xp: Namespace, T: tuple[Any], x: Any) -> Any:
    r"""JVP of :func:`relu` (Baggag & Saad §3.7.2):
    :math:`\dot y = \mathbb 1[x > 0] \odot \dot x` (the subgradient 0 at 0, as the VJP)."""
    _check("relu_jvp", xp, x=x, dx=T[0])
    return xp.where(xp.greater(x, 0), T[0], xp.zeros_like(T[0]))


def _sigmoid_pair(xp: Namespace, x: Any) -> tuple[Any, Any]:
    r"""The pair :math:`(\sigma(x), \sigma(-x)) = (\sigma(x), 1 - \sigma(x))`, each to a few
    ulps *relative* for every finite :math:`x` (Baggag & Saad §3.7.3).

    With :math:`e = e^{-|x|} \in (0, 1]`, computed as ``exp(where(x > 0, -x, x))`` so that
    the exponent is never positive (``where`` evaluates both branches; ``-abs(x)`` would
    give the same values, but JAX differentiates :math:`|x|` at 0 as :math:`+1`, the
    slope of the other branch, and autodiff of the forward would get
    :math:`\sigma'(0)` wrong),

    .. math:: \sigma(|x|) = \frac{1}{1+e},\qquad \sigma(-|x|) = \frac{e}{1+e},

    and the sign of :math:`x` picks which is :math:`\sigma(x)`. Nothing overflows, and
    :math:`\sigma(x)` for :math:`x \ll 0` is :math:`e/(1+e)`: relative accuracy down to
    the underflow threshold, whereas in float32 :math:`\tfrac12(1+\tanh(x/2))` has lost
    all relative accuracy at :math:`x \approx -17` (below, it returns :math:`2^{-25}` or
    0, depending on the backend's ``tanh``, while :math:`\sigma(x) \to 0`). The
    complement :math:`\sigma(-x)` is taken from the same two values, never as
    :math:`1 - \sigma(x)` (which cancels for :math:`x \gg 0`). The lemma
    ``sigmoid_stable_branches`` proves that each branch equals :math:`1/(1+e^{-x})`
    (resp. :math:`1/(1+e^{x})`) exactly; on the exact namespace the ``where`` becomes a
    ``Piecewise``.
    """
    pos = xp.greater(x, 0)
    e = xp.exp(xp.where(pos, -x, x))
    hi = 1 / (1 + e)
    lo = e * hi
    return xp.where(pos, hi, lo), xp.where(pos, lo, hi)


def sigmoid(xp: Namespace, x: Any) -> Any:
    r"""Logistic function :math:`\sigma(x) = 1/(1+e^{-x})` in the stable two-branch form
    of :func:`_sigmoid_pair`: :math:`1/(1+e^{-x})` for :math:`x > 0`,
    :math:`e^{x}/(1+e^{x})` for :math:`x \le 0` (Baggag & Saad §3.7.3)."""
    return _sigmoid_pair(xp, x)[0]


def silu(xp: Namespace, x: Any) -> Any:
    r""":math:`\operatorname{SiLU}(x) = x\,\sigma(x)`, relative accuracy for all finite
    :math:`x` (stable :func:`sigmoid`)."""
    _check("silu", xp, x=x)
    return x * sigmoid(xp, x)


def _silu_derivative(xp: Namespace, x: Any) -> Any:
    r""":math:`\operatorname{SiLU}'(x) = \sigma(x)\bigl(1 + x\,\sigma(-x)\bigr)`, with
    :math:`1 - \sigma(x) = \sigma(-x)` taken from the stable pair."""
    s, s_neg = _sigmoid_pair(xp, x)
    return s * (1 + x * s_neg)


def silu_vjp(xp: Namespace, G: Any, x: Any) -> tuple[Any]:
    r""":math:`\bar x = g \odot \sigma(x)\bigl(1 + x(1-\sigma(x))\bigr)`, with
    :math:`1 - \sigma(x)` computed as :math:`\sigma(-x)`."""
    _check("silu_vjp", xp, x=x, G=G)
    return (G * _silu_derivative(xp, x),)


@jvp_rule("dx",)
def silu_jvp(xp: Namespace, T: tuple[Any], x: Any) -> Any:
    r"""JVP of :func:`silu` (Baggag & Saad §3.7.3):
    :math:`\dot y = \sigma(x)\bigl(1 + x\,\sigma(-x)\bigr) \odot \dot x`, from the stable
    pair :func:`_sigmoid_pair`."""
    _check("silu_jvp", xp, x=x, dx=T[0])
    return _silu_derivative(xp, x) * T[0]


def gelu_erf(xp: Namespace, x: Any) -> Any:
    r"""Exact GELU: :math:`x\,\Phi(x) = \tfrac x2\bigl(1 + \operatorname{erf}(x/\sqrt2)\bigr)`."""
    _check("gelu_erf", xp, x=x)
    # halve x first: x (1 + erf) would overflow for x above half the largest float
    return x * xp.rational(1, 2) * (1 + xp.erf(x / xp.const_sqrt(2)))


def gelu_erf_vjp(xp: Namespace, G: Any, x: Any) -> tuple[Any]:
    r""":math:`\bar x = g \odot \bigl(\Phi(x) + x\,\varphi(x)\bigr)`,
    :math:`\varphi(x) = e^{-x^2/2}/\sqrt{2\pi}`."""
    _check("gelu_erf_vjp", xp, x=x, G=G)
    return (G * _gelu_erf_derivative(xp, x),)


def _gelu_erf_derivative(xp: Namespace, x: Any) -> Any:
    r""":math:`\operatorname{GELU}'(x) = \Phi(x) + x\,\varphi(x)`."""
    Phi = (1 + xp.erf(x / xp.const_sqrt(2))) * xp.rational(1, 2)
    phi = xp.exp(-x * x * xp.rational(1, 2)) / xp.const_sqrt(2, pi_power=1)
    return Phi + x * phi


@jvp_rule("dx",)
def gelu_erf_jvp(xp: Namespace, T: tuple[Any], x: Any) -> Any:
    r"""JVP of :func:`gelu_erf` (Baggag & Saad §3.7.2):
    :math:`\dot y = \bigl(\Phi(x) + x\,\varphi(x)\bigr) \odot \dot x`."""
    _check("gelu_erf_jvp", xp, x=x, dx=T[0])
    return _gelu_erf_derivative(xp, x) * T[0]


def _gelu_tanh_constants(xp: Namespace) -> tuple[Any, Any]:
    return xp.const_sqrt(2, pi_power=-1), xp.rational(*GELU_TANH_COEFF)


def gelu_tanh(xp: Namespace, x: Any) -> Any:
    r"""Tanh GELU: :math:`\tfrac x2\bigl(1 + \tanh(u)\bigr)`,
    :math:`u = \sqrt{2/\pi}\,(x + 0.044715\,x^3)`."""
    _check("gelu_tanh", xp, x=x)
    k, a = _gelu_tanh_constants(xp)
    return x * xp.rational(1, 2) * (1 + xp.tanh(k * (x + a * x * x * x)))  # halve x first


def gelu_tanh_vjp(xp: Namespace, G: Any, x: Any) -> tuple[Any]:
    r""":math:`\bar x = g \odot \Bigl(\tfrac12(1+t) + \tfrac x2 (1-t^2)\sqrt{2/\pi}\,
    (1 + 3\cdot 0.044715\, x^2)\Bigr)`, :math:`t = \tanh u`."""
    _check("gelu_tanh_vjp", xp, x=x, G=G)
    return (G * _gelu_tanh_derivative(xp, x),)


def _gelu_tanh_derivative(xp: Namespace, x: Any) -> Any:
    r""":math:`\tfrac12(1+t) + \tfrac x2 (1-t^2)\sqrt{2/\pi}\,(1 + 3a x^2)`,
    :math:`t = \tanh u`."""
    k, a = _gelu_tanh_constants(xp)
    t = xp.tanh(k * (x + a * x * x * x))
    half = xp.rational(1, 2)
    return half * (1 + t) + half * x * (1 - t * t) * k * (1 + 3 * a * x * x)


@jvp_rule("dx",)
def gelu_tanh_jvp(xp: Namespace, T: tuple[Any], x: Any) -> Any:
    r"""JVP of :func:`gelu_tanh` (Baggag & Saad §3.7.2):
    :math:`\dot y = \Bigl(\tfrac12(1+t) + \tfrac x2 (1-t^2)\sqrt{2/\pi}\,
    (1 + 3\cdot 0.044715\, x^2)\Bigr) \odot \dot x`, :math:`t = \tanh u`."""
    _check("gelu_tanh_jvp", xp, x=x, dx=T[0])
    return _gelu_tanh_derivative(xp, x) * T[0]


def swiglu(xp: Namespace, a: Any, b: Any) -> Any:
    r"""SwiGLU gate (Baggag & Saad §3.7.3): :math:`\operatorname{SiLU}(a) \odot b`,
    with :math:`a = X W_1`, :math:`b = X W_3` the two branches."""
    _check("swiglu", xp, a=a, b=b)
    return silu(xp, a) * b


def swiglu_vjp(xp: Namespace, G: Any, a: Any, b: Any) -> tuple[Any, Any]:
    r""":math:`\bar a = g \odot b \odot \operatorname{SiLU}'(a)`,
    :math:`\bar b = g \odot \operatorname{SiLU}(a)`."""
    _check("swiglu_vjp", xp, a=a, b=b, G=G)
    return G * b * _silu_derivative(xp, a), G * silu(xp, a)


@jvp_rule("da", "db")
def swiglu_jvp(xp: Namespace, T: tuple[Any, Any], a: Any, b: Any) -> Any:
    r"""JVP of :func:`swiglu` (Baggag & Saad §3.7.3), the product rule:

    .. math:: \dot y = \operatorname{SiLU}'(a) \odot b \odot \dot a
       + \operatorname{SiLU}(a) \odot \dot b .

    ``T = (da, db)``, an entry ``None`` meaning a zero tangent.
    """
    da, db = T
    _check("swiglu_jvp", xp, a=a, b=b, da=da, db=db)
    return tsum(lin(da, lambda t: b * _silu_derivative(xp, a) * t),
                lin(db, lambda t: silu(xp, a) * t))


def geglu(xp: Namespace, a: Any, b: Any) -> Any:
    r"""GeGLU gate (Shazeer 2020; Gemma's MLP with the tanh GELU):
    :math:`\operatorname{GELU}_{\tanh}(a) \odot b`, with :math:`a = X W_g`, :math:`b = X W_u`
    the two branches (Baggag & Saad §3.7.2-3.7.3)."""
    _check("geglu", xp, a=a, b=b)
    return gelu_tanh(xp, a) * b


def geglu_vjp(xp: Namespace, G: Any, a: Any, b: Any) -> tuple[Any, Any]:
    r""":math:`\bar a = g \odot b \odot \operatorname{GELU}_{\tanh}'(a)`,
    :math:`\bar b = g \odot \operatorname{GELU}_{\tanh}(a)`."""
    _check("geglu_vjp", xp, a=a, b=b, G=G)
    return G * b * _gelu_tanh_derivative(xp, a), G * gelu_tanh(xp, a)


@jvp_rule("da", "db")
def geglu_jvp(xp: Namespace, T: tuple[Any, Any], a: Any, b: Any) -> Any:
    r"""JVP of :func:`geglu`, the product rule:
    :math:`\dot y = \operatorname{GELU}_{\tanh}'(a) \odot b \odot \dot a +
    \operatorname{GELU}_{\tanh}(a) \odot \dot b` (``None``: a zero tangent)."""
    da, db = T
    _check("geglu_jvp", xp, a=a, b=b, da=da, db=db)
    return tsum(lin(da, lambda t: b * _gelu_tanh_derivative(xp, a) * t),
                lin(db, lambda t: gelu_tanh(xp, a) * t))


def tanh(xp: Namespace, x: Any) -> Any:
    r""":math:`\tanh x`, the hidden activation of the seed's MLP (Baggag & Saad §2.1)."""
    _check("tanh", xp, x=x)
    return xp.tanh(x)


def tanh_vjp(xp: Namespace, G: Any, x: Any) -> tuple[Any]:
    r""":math:`\bar x = g \odot (1 - \tanh^2 x)`."""
    _check("tanh_vjp", xp, x=x, G=G)
    t = xp.tanh(x)
    return (G * (1 - t * t),)


@jvp_rule("dx",)
def tanh_jvp(xp: Namespace, T: tuple[Any], x: Any) -> Any:
    r"""JVP of :func:`tanh` (Baggag & Saad §2.1):
    :math:`\dot y = (1 - \tanh^2 x) \odot \dot x`."""
    _check("tanh_jvp", xp, x=x, dx=T[0])
    t = xp.tanh(x)
    return (1 - t * t) * T[0]
