"""The multi-layer perceptron of Baggag & Saad §2.1 and its back-propagation (§2.6).

Row-vector form of the seed's layer update: :math:`s_l = z_{l-1} W_l + b_l`,
:math:`z_l = \\sigma(s_l)` for hidden layers, the last layer affine, and the
regression loss :math:`\\eta = \\tfrac12\\lVert \\hat y - y\\rVert^2`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops.linear import affine


def mlp_forward(
    xp: Namespace, x: Any, weights: Sequence[Any], biases: Sequence[Any]
) -> tuple[list[Any], list[Any]]:
    r"""Forward pass with :math:`\sigma = \tanh` on hidden layers.

    Returns:
        ``(s, z)``: pre-activations :math:`s_1..s_L` and activations
        :math:`z_0 = x, z_1, \dots, z_L = \hat y` (last layer linear).
    """
    s: list[Any] = []
    z: list[Any] = [x]
    for layer, (W, b) in enumerate(zip(weights, biases, strict=True)):
        s.append(affine(xp, z[-1], W, b))
        z.append(xp.tanh(s[-1]) if layer < len(weights) - 1 else s[-1])
    return s, z


def mlp_loss(xp: Namespace, x: Any, y: Any, weights: Sequence[Any], biases: Sequence[Any]):
    r""":math:`\eta(y, \hat y) = \tfrac12\sum_i (\hat y_i - y_i)^2` (Baggag & Saad §2.2)."""
    _, z = mlp_forward(xp, x, weights, biases)
    r = z[-1] - y
    return xp.sum(r * r) * xp.rational(1, 2)


def layer_jacobian(xp: Namespace, W: Any, s_prev: Any) -> Any:
    r"""Jacobian :math:`J_l = \partial s_l/\partial s_{l-1}
    = W_l^\top \operatorname{diag}(\sigma'(s_{l-1}))` in column form
    (:math:`\sigma = \tanh`, :math:`\sigma' = 1 - \tanh^2`)."""
    t = xp.tanh(s_prev)
    return xp.matrix_transpose(W) * (1 - t * t)


def mlp_backprop(
    xp: Namespace, x: Any, y: Any, weights: Sequence[Any], biases: Sequence[Any]
) -> tuple[list[Any], list[Any], list[Any]]:
    r"""Algorithm 2 of Baggag & Saad §2.6, the recursion on the errors
    :math:`\delta_l = \partial\eta/\partial s_l`:

    .. math::
        \delta_L = \hat y - y,\qquad \delta_{l-1} = J_l^\top \delta_l,\qquad
        \frac{\partial\eta}{\partial W_l} = z_{l-1}\,\delta_l^\top,\qquad
        \frac{\partial\eta}{\partial b_l} = \delta_l .

    Args:
        x: ``(d_0,)`` input; y: ``(d_L,)`` target.

    Returns:
        ``(deltas, dW, db)``, each a list over layers ``1..L``.
    """
    s, z = mlp_forward(xp, x, weights, biases)
    L = len(weights)
    deltas: list[Any] = [None] * L
    deltas[L - 1] = z[-1] - y
    for layer in range(L - 1, 0, -1):
        J = layer_jacobian(xp, weights[layer], s[layer - 1])
        deltas[layer - 1] = xp.matmul(xp.matrix_transpose(J), deltas[layer])
    dW = [xp.reshape(z[layer], (-1, 1)) * xp.reshape(deltas[layer], (1, -1))
          for layer in range(L)]
    return deltas, dW, list(deltas)
