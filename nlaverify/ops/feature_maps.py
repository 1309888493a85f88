r"""Feature maps of linearized and randomized attention (Baggag & Saad §4.3, §4.4).

A feature map :math:`\phi` with :math:`\kappa(q, k) \approx \phi(q)^\top \phi(k)` turns
softmax attention into the linear form of :func:`~nlaverify.ops.kernel_attention.kernel_attention`:
:func:`elu1` (Katharopoulos et al.), :func:`trig_features` (random Fourier features of the
Gaussian kernel, FAVOR, §4.4), :func:`positive_features` and :func:`hyperbolic_features`
(FAVOR+, Choromanski et al. 2021). Each forward has its VJP ``<name>_vjp`` and JVP
``<name>_jvp`` next to it; rows ``(..., n, d)`` with leading batch/head axes, :math:`W`,
:math:`b` broadcast over them. :mod:`nlaverify.ops.linear_attention` re-exports them (their
public home, the path the proofs name) and builds the attention variants on them.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._tangent import jvp_rule
from nlaverify.ops._validate import check_args
from nlaverify.ops.kernel_attention import _expand

__all__ = [
    "elu1",
    "elu1_jvp",
    "elu1_vjp",
    "hyperbolic_features",
    "hyperbolic_features_jvp",
    "hyperbolic_features_vjp",
    "positive_features",
    "positive_features_jvp",
    "positive_features_vjp",
    "trig_features",
    "trig_features_jvp",
    "trig_features_vjp",
]

# -- helpers ------------------------------------------------------------------------------


def _sqnorm(xp: Namespace, X: Any) -> Any:
    r"""Row norms :math:`\|x_i\|^2`, keepdims ``(..., n, 1)``."""
    return xp.sum(X * X, axis=-1, keepdims=True)

def _check_weights(op: str, xp: Namespace, W: Any, b: Any, d: int) -> int:
    """Check ``W`` ``(..., m, d)`` and ``b`` ``(..., m)`` (batch axes of their own, which
    broadcast over the inputs'); return ``m``."""
    dims = check_args(op, xp, {"W": (W, ("*", "m", "d")), "b": (b, ("*", "m"))},
                      bound={"d": d})
    return dims["m"]

# -- feature maps -------------------------------------------------------------------------


def elu1(xp: Namespace, x: Any) -> Any:
    r""":math:`\operatorname{elu}(x) + 1` (:math:`\alpha = 1`), the feature map of linear
    attention (Baggag & Saad §4.3, Katharopoulos et al.): :math:`x + 1` for :math:`x > 0`,
    :math:`e^{x}` for :math:`x \le 0`; positive, so the normaliser never vanishes. The
    exponent is ``where(x > 0, 0, x)``, never positive (no overflow in the branch not
    taken)."""
    check_args("elu1", xp, {"x": (x, ("*",))})
    pos = xp.greater(x, 0)
    return xp.where(pos, x + 1, xp.exp(xp.where(pos, xp.zeros_like(x), x)))


def _elu1_derivative(xp: Namespace, x: Any) -> Any:
    r""":math:`1` for :math:`x > 0`, :math:`e^{x}` for :math:`x \le 0` (continuous at 0)."""
    pos = xp.greater(x, 0)
    return xp.where(pos, xp.ones_like(x), xp.exp(xp.where(pos, xp.zeros_like(x), x)))


def elu1_vjp(xp: Namespace, G: Any, x: Any) -> tuple[Any]:
    r"""VJP of :func:`elu1`: :math:`\bar x = g \odot (\mathbb 1[x > 0] + e^{x}\mathbb
    1[x \le 0])`."""
    check_args("elu1_vjp", xp, {"x": (x, ("*",)), "G": (G, ("*",))})
    return (G * _elu1_derivative(xp, x),)


@jvp_rule("dx",)
def elu1_jvp(xp: Namespace, T: tuple[Any], x: Any) -> Any:
    r"""JVP of :func:`elu1` (Baggag & Saad §4.3): :math:`\dot y = \operatorname{elu1}'(x)
    \odot \dot x`."""
    check_args("elu1_jvp", xp, {"x": (x, ("*",)), "dx": (T[0], ("*",))})
    return _elu1_derivative(xp, x) * T[0]


def _row(xp: Namespace, b: Any) -> Any:
    """``b`` ``(..., m)`` as ``(..., 1, m)``: one row broadcast over the positions."""
    return _expand(xp, b, -2)


def _trig_phase(xp: Namespace, X: Any, W: Any, b: Any) -> Any:
    r""":math:`Z = X W^\top + b`."""
    return xp.matmul(X, xp.matrix_transpose(W)) + _row(xp, b)


def trig_features(xp: Namespace, X: Any, W: Any, b: Any) -> Any:
    r"""Random Fourier features (Baggag & Saad §4.4, Rahimi & Recht), rows of ``X``:

    .. math:: \phi(x) = \sqrt{2/m}\,\cos(W x + b),\qquad
       \mathbb E\,\phi(x)^\top\phi(y) = e^{-\|x - y\|^2/2}

    for rows :math:`w_r \sim \mathcal N(0, I)`, :math:`b_r \sim U(0, 2\pi)`. ``X``
    ``(..., n, d)``, ``W`` ``(m, d)``, ``b`` ``(m,)``; returns ``(..., n, m)``.
    """
    d = check_args("trig_features", xp, {"X": (X, ("*", "n", "d"))})["d"]
    m = _check_weights("trig_features", xp, W, b, d)
    return xp.const_sqrt(2, m) * xp.cos(_trig_phase(xp, X, W, b))


def trig_features_vjp(xp: Namespace, G: Any, X: Any, W: Any, b: Any) -> tuple[Any]:
    r"""VJP of :func:`trig_features` (``W``, ``b`` fixed):
    :math:`\bar X = -\bigl(G \odot \sqrt{2/m}\,\sin Z\bigr) W`."""
    d = check_args("trig_features_vjp", xp, {"X": (X, ("*", "n", "d")),
                                              "G": (G, ("*", "n", "m"))})["d"]
    m = _check_weights("trig_features_vjp", xp, W, b, d)
    dZ = -G * xp.const_sqrt(2, m) * xp.sin(_trig_phase(xp, X, W, b))
    return (xp.matmul(dZ, W),)


@jvp_rule("dX",)
def trig_features_jvp(xp: Namespace, T: tuple[Any], X: Any, W: Any, b: Any) -> Any:
    r"""JVP of :func:`trig_features` (Baggag & Saad §4.4):
    :math:`\dot\Phi = -\sqrt{2/m}\,\sin Z \odot (\dot X W^\top)`."""
    d = check_args("trig_features_jvp", xp, {"X": (X, ("*", "n", "d")),
                                              "dX": (T[0], ("*", "n", "d"))})["d"]
    m = _check_weights("trig_features_jvp", xp, W, b, d)
    return -xp.const_sqrt(2, m) * xp.sin(_trig_phase(xp, X, W, b)) * xp.matmul(
        T[0], xp.matrix_transpose(W))


def _positive_exponent(xp: Namespace, X: Any, W: Any) -> Any:
    r""":math:`Z = X W^\top - \tfrac12 \|x\|^2 \mathbf 1^\top`."""
    return xp.matmul(X, xp.matrix_transpose(W)) - _sqnorm(xp, X) * xp.rational(1, 2)


def _positive_exponent_vjp(xp: Namespace, dZ: Any, X: Any, W: Any) -> Any:
    r""":math:`\bar X = \bar Z W - \operatorname{rowsum}(\bar Z)\, x`."""
    return xp.matmul(dZ, W) - xp.sum(dZ, axis=-1, keepdims=True) * X


def _positive_exponent_jvp(xp: Namespace, dX: Any, X: Any, W: Any) -> Any:
    r""":math:`\dot Z = \dot X W^\top - \langle x, \dot x\rangle \mathbf 1^\top`."""
    return xp.matmul(dX, xp.matrix_transpose(W)) - xp.sum(X * dX, axis=-1, keepdims=True)


def positive_features(xp: Namespace, X: Any, W: Any) -> Any:
    r"""Positive random features (FAVOR+, Choromanski et al. 2021, Lemma 1), rows of ``X``:

    .. math:: \phi(x) = \frac{1}{\sqrt m}\exp\bigl(W x - \tfrac12\|x\|^2\bigr),\qquad
       \mathbb E\,\phi(x)^\top\phi(y) = e^{x^\top y}

    for rows :math:`w_r \sim \mathcal N(0, I)`. ``X`` ``(..., n, d)``, ``W`` ``(m, d)``.
    Unstabilised: :func:`favor_plus_attention` shifts the exponents.
    """
    d = check_args("positive_features", xp, {"X": (X, ("*", "n", "d"))})["d"]
    m = _check_weights("positive_features", xp, W, None, d)
    return xp.exp(_positive_exponent(xp, X, W)) / xp.const_sqrt(m)


def positive_features_vjp(xp: Namespace, G: Any, X: Any, W: Any) -> tuple[Any]:
    r"""VJP of :func:`positive_features` (``W`` fixed): with :math:`\bar Z = G \odot
    \Phi`, :math:`\bar X = \bar Z W - \operatorname{rowsum}(\bar Z)\, x`."""
    d = check_args("positive_features_vjp", xp, {"X": (X, ("*", "n", "d")),
                                                  "G": (G, ("*", "n", "m"))})["d"]
    _check_weights("positive_features_vjp", xp, W, None, d)
    return (_positive_exponent_vjp(xp, G * positive_features(xp, X, W), X, W),)


@jvp_rule("dX",)
def positive_features_jvp(xp: Namespace, T: tuple[Any], X: Any, W: Any) -> Any:
    r"""JVP of :func:`positive_features`: :math:`\dot\Phi = \Phi \odot (\dot X W^\top -
    \langle x, \dot x\rangle \mathbf 1^\top)`."""
    d = check_args("positive_features_jvp", xp, {"X": (X, ("*", "n", "d")),
                                                  "dX": (T[0], ("*", "n", "d"))})["d"]
    _check_weights("positive_features_jvp", xp, W, None, d)
    return positive_features(xp, X, W) * _positive_exponent_jvp(xp, T[0], X, W)


def _hyperbolic_exponent(xp: Namespace, X: Any, W: Any) -> Any:
    r""":math:`[X W^\top, -X W^\top] - \tfrac12\|x\|^2 \mathbf 1^\top`, ``(..., n, 2m)``."""
    U = xp.matmul(X, xp.matrix_transpose(W))
    return xp.concat([U, -U], axis=-1) - _sqnorm(xp, X) * xp.rational(1, 2)


def hyperbolic_features(xp: Namespace, X: Any, W: Any) -> Any:
    r"""Hyperbolic positive features (Choromanski et al. 2021, Lemma 1), rows of ``X``:

    .. math:: \phi(x) = \frac{e^{-\|x\|^2/2}}{\sqrt{2m}}\bigl[e^{W x}, e^{-W x}\bigr],\qquad
       \mathbb E\,\phi(x)^\top\phi(y) = e^{x^\top y},

    :math:`m` rows of ``W`` give :math:`2m` features (``(..., n, 2m)``).
    """
    d = check_args("hyperbolic_features", xp, {"X": (X, ("*", "n", "d"))})["d"]
    m = _check_weights("hyperbolic_features", xp, W, None, d)
    return xp.exp(_hyperbolic_exponent(xp, X, W)) / xp.const_sqrt(2 * m)


def hyperbolic_features_vjp(xp: Namespace, G: Any, X: Any, W: Any) -> tuple[Any]:
    r"""VJP of :func:`hyperbolic_features`: with :math:`\bar E = G \odot \Phi` split in
    its halves :math:`[\bar E_+, \bar E_-]`, :math:`\bar X = (\bar E_+ - \bar E_-) W -
    \operatorname{rowsum}(\bar E)\, x`."""
    d = check_args("hyperbolic_features_vjp", xp, {"X": (X, ("*", "n", "d")),
                                                    "G": (G, ("*", "n", "m2"))})["d"]
    m = _check_weights("hyperbolic_features_vjp", xp, W, None, d)
    dE = G * hyperbolic_features(xp, X, W)
    return (xp.matmul(dE[..., :m] - dE[..., m:], W)
            - xp.sum(dE, axis=-1, keepdims=True) * X,)


@jvp_rule("dX",)
def hyperbolic_features_jvp(xp: Namespace, T: tuple[Any], X: Any, W: Any) -> Any:
    r"""JVP of :func:`hyperbolic_features`: :math:`\dot\Phi = \Phi \odot \bigl([\dot U,
    -\dot U] - \langle x, \dot x\rangle\mathbf 1^\top\bigr)`, :math:`\dot U = \dot X
    W^\top`."""
    d = check_args("hyperbolic_features_jvp", xp, {"X": (X, ("*", "n", "d")),
                                                    "dX": (T[0], ("*", "n", "d"))})["d"]
    _check_weights("hyperbolic_features_jvp", xp, W, None, d)
    dU = xp.matmul(T[0], xp.matrix_transpose(W))
    dE = xp.concat([dU, -dU], axis=-1) - xp.sum(X * T[0], axis=-1, keepdims=True)
    return hyperbolic_features(xp, X, W) * dE



# The public home of these ops is :mod:`nlaverify.ops.linear_attention`, which re-exports
# them: the proofs, the op registry's ``<forward>_jvp`` lookup and the API reference name
# them there (the convention of NumPy's ``set_module``).
for _op in (elu1, elu1_vjp, elu1_jvp, trig_features, trig_features_vjp, trig_features_jvp,
            positive_features, positive_features_vjp, positive_features_jvp,
            hyperbolic_features, hyperbolic_features_vjp, hyperbolic_features_jvp):
    _op.__module__ = "nlaverify.ops.linear_attention"
del _op
