"""Next-token cross-entropy of logits (forward and VJP).

Baggag & Saad §3.1 and §3.13.1: the training objective is the negative
log-likelihood of the sequence, the mean over positions of
:math:`-\\log p_{i, t_i}`.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ShapeError
from nlaverify.ops._tangent import jvp_rule
from nlaverify.ops._validate import check_args, check_length, check_tokens
from nlaverify.ops.softmaxes import log_softmax, softmax


def next_token_split(tokens: Any) -> tuple[Any, Any]:
    r"""Inputs and targets of autoregressive training: :math:`(t_{1:n-1}, t_{2:n})`
    (Baggag & Saad §3.13.1)."""
    if len(tokens) < 2:
        raise ShapeError(f"next_token_split: argument 'tokens': expected length >= 2, got "
                         f"{len(tokens)}")
    return tokens[:-1], tokens[1:]


#: the target id meaning "no target here" (padding), as in PyTorch and Hugging Face
IGNORE_INDEX = -100


def _targets(op: str, xp: Namespace, Z: Any, targets: Any, ignore_index: int,
             G: Any = None) -> tuple[Any, Any, Any]:
    r"""Checks; the one-hot rows :math:`Y` (zero rows where ignored), the 0/1 weights
    :math:`w_i = \mathbb 1[t_i \ne \text{ignore}]` (shape ``(*, n, 1)``) and
    :math:`N = \sum_i w_i`."""
    specs = {"Z": (Z, ("*", "n", "V"))}
    if G is not None:
        specs["G"] = (G, ())
    dims = check_args(op, xp, specs)
    check_tokens(op, xp, "targets", targets, dims["V"], ignore=ignore_index)
    check_length(op, "targets", targets, tuple(Z.shape[:-1]), "Z")
    Y = xp.one_hot(targets, dims["V"], Z.dtype)  # an ignored id matches no column: a zero row
    w = xp.astype(targets != ignore_index, Z.dtype) if not xp.object_arrays else xp.asarray(
        (targets != ignore_index).astype(int))
    count = xp.sum(w)
    if xp.is_concrete(count) and not xp.exact and not float(count) > 0:
        raise ShapeError(f"{op}: argument 'targets': expected at least one target that is not "
                         f"the ignore-index {ignore_index}, got none")
    return Y, w[..., None], count


#: the reductions of :func:`cross_entropy` over the positions
REDUCTIONS = ("mean", "sum")


def _divisor(op: str, xp: Namespace, count: Any, reduction: str) -> Any:
    r""":math:`N` (``"mean"``, over the targets that are not ignored) or 1 (``"sum"``)."""
    if reduction not in REDUCTIONS:
        from nlaverify.errors import ArgumentError

        raise ArgumentError(f"{op}: argument 'reduction': expected one of "
                            f"{', '.join(REDUCTIONS)}, got {reduction!r}")
    return count if reduction == "mean" else xp.rational(1)


def cross_entropy(xp: Namespace, Z: Any, targets: Any, ignore_index: int = IGNORE_INDEX,
                  reduction: str = "mean") -> Any:
    r"""Cross-entropy of logits ``Z`` ``(*, n, V)`` against ``targets`` ``(*, n)``, the mean
    over the positions that have a target (Baggag & Saad §3.1, §3.13.1):

    .. math:: L = -\frac1N\sum_{i:\,t_i\ne\varnothing}\log\operatorname{softmax}(z_i)_{t_i}
              = -\frac1N \sum_{i} \langle y_i, \log\operatorname{softmax}(z_i)\rangle,
              \qquad N = \#\{i : t_i \ne \varnothing\},

    the sum running over every position of every sequence of the batch; a target equal
    to ``ignore_index`` (:math:`\varnothing`, padding) contributes nothing to the sum nor
    to :math:`N`, and its one-hot row :math:`y_i` is 0. Without ignored targets this is the
    plain mean over the :math:`B n` positions. ``reduction="sum"``: the sum, :math:`N`
    replaced by 1 (PyTorch's ``reduction="sum"``). Log-softmax is the stable log-sum-exp
    form. Returns a 0-d array.
    """
    Y, _, count = _targets("cross_entropy", xp, Z, targets, ignore_index)
    return -xp.sum(Y * log_softmax(xp, Z)) / _divisor("cross_entropy", xp, count, reduction)


def cross_entropy_vjp(xp: Namespace, G: Any, Z: Any, targets: Any,
                      ignore_index: int = IGNORE_INDEX, reduction: str = "mean") -> tuple[Any]:
    r"""VJP of :func:`cross_entropy` (softmax and cross-entropy fused):

    .. math:: \bar Z_i = \frac{g}{N}\,w_i\,(p_i - y_i),\qquad
       p_i = \operatorname{softmax}(z_i),\quad w_i = \mathbb 1[t_i \ne \varnothing];

    ignored rows receive no cotangent.
    """
    Y, w, count = _targets("cross_entropy_vjp", xp, Z, targets, ignore_index, G)
    return ((softmax(xp, Z) - Y) * w * (G / _divisor("cross_entropy_vjp", xp, count,
                                                        reduction)),)


@jvp_rule("dZ",)
def cross_entropy_jvp(xp: Namespace, T: tuple[Any], Z: Any, targets: Any,
                      ignore_index: int = IGNORE_INDEX, reduction: str = "mean") -> Any:
    r"""JVP of :func:`cross_entropy`, a scalar:

    .. math:: \dot L = \frac1N \sum_i w_i\,\langle p_i - y_i, \dot z_i\rangle.
    """
    Y, w, count = _targets("cross_entropy_jvp", xp, Z, targets, ignore_index)
    _tangent_like("cross_entropy_jvp", "dZ", T[0], "Z", Z)
    return xp.sum((softmax(xp, Z) - Y) * w * T[0]) / _divisor("cross_entropy_jvp", xp, count,
                                                              reduction)


def _tangent_like(op: str, name: str, t: Any, of: str, x: Any) -> None:
    """A tangent has exactly the shape of its argument (no broadcasting)."""
    got, want = tuple(getattr(t, "shape", ())), tuple(getattr(x, "shape", ()))
    if got != want:
        raise ShapeError(f"{op}: argument {name!r}: expected shape {want} (the shape of "
                         f"{of!r}), got {got}")


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


@jvp_rule("dYhat",)
def half_squared_error_jvp(xp: Namespace, T: tuple[Any], Yhat: Any, Y: Any) -> Any:
    r"""JVP of :func:`half_squared_error`: :math:`\dot\eta = \langle \hat Y - Y,
    \dot{\hat Y}\rangle_F`."""
    check_args("half_squared_error_jvp", xp, {"Yhat": (Yhat, ("*", "m")),
                                              "Y": (Y, ("*", "m"))})
    _tangent_like("half_squared_error_jvp", "dYhat", T[0], "Yhat", Yhat)
    return xp.sum((Yhat - Y) * T[0])
