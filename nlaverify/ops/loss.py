"""Next-token cross-entropy of logits (forward and VJP).

Baggag & Saad §3.1 and §3.13.1: the training objective is the negative
log-likelihood of the sequence, the mean over positions of
:math:`-\\log p_{i, t_i}`.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._validate import check_args, check_length, check_tokens
from nlaverify.ops.softmaxes import log_softmax, softmax


def next_token_split(tokens: Any) -> tuple[Any, Any]:
    r"""Inputs and targets of autoregressive training: :math:`(t_{1:n-1}, t_{2:n})`
    (Baggag & Saad §3.13.1)."""
    if len(tokens) < 2:
        from nlaverify.errors import ShapeError

        raise ShapeError(f"next_token_split: argument 'tokens': expected length >= 2, got "
                         f"{len(tokens)}")
    return tokens[:-1], tokens[1:]


def cross_entropy(xp: Namespace, Z: Any, targets: Any) -> Any:
    r"""Mean cross-entropy of logits ``Z`` ``(n, V)`` against ``targets`` ``(n,)``:

    .. math:: L = -\frac1n\sum_{i=1}^n \log\operatorname{softmax}(z_i)_{t_i}
              = -\frac1n \sum_{i} \langle y_i, \log\operatorname{softmax}(z_i)\rangle,

    with :math:`y_i` the one-hot row of :math:`t_i`; log-softmax is the stable
    log-sum-exp form. Returns a 0-d array.
    """
    dims = check_args("cross_entropy", xp, {"Z": (Z, ("n", "V"))})
    check_tokens("cross_entropy", xp, "targets", targets, dims["V"])
    check_length("cross_entropy", "targets", targets, dims["n"], "Z")
    Y = xp.one_hot(targets, dims["V"], Z.dtype)
    return -xp.sum(Y * log_softmax(xp, Z)) * xp.rational(1, dims["n"])


def cross_entropy_vjp(xp: Namespace, G: Any, Z: Any, targets: Any) -> tuple[Any]:
    r"""VJP of :func:`cross_entropy` (softmax and cross-entropy fused):

    .. math:: \bar Z = \frac{g}{n}\,(P - Y),\qquad P = \operatorname{softmax}(Z).
    """
    dims = check_args("cross_entropy_vjp", xp, {"Z": (Z, ("n", "V")), "G": (G, ())})
    check_tokens("cross_entropy_vjp", xp, "targets", targets, dims["V"])
    check_length("cross_entropy_vjp", "targets", targets, dims["n"], "Z")
    Y = xp.one_hot(targets, dims["V"], Z.dtype)
    return ((softmax(xp, Z) - Y) * (G * xp.rational(1, dims["n"])),)


def half_squared_error(xp: Namespace, Yhat: Any, Y: Any) -> Any:
    r"""Regression loss of the seed's MLP: :math:`\eta = \tfrac12\lVert\hat Y - Y\rVert_F^2`
    (Baggag & Saad §2.2). ``Y`` is not differentiated."""
    check_args("half_squared_error", xp, {"Yhat": (Yhat, ("*", "m")), "Y": (Y, ("*", "m"))})
    R = Yhat - Y
    return xp.sum(R * R) * xp.rational(1, 2)


def half_squared_error_vjp(xp: Namespace, G: Any, Yhat: Any, Y: Any) -> tuple[Any]:
    r""":math:`\bar{\hat Y} = g\,(\hat Y - Y)`, the seed's :math:`\delta_L = \hat y - y`."""
    check_args("half_squared_error_vjp", xp, {"Yhat": (Yhat, ("*", "m")), "Y": (Y, ("*", "m"))})
    return ((Yhat - Y) * G,)
