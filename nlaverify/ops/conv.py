r"""The depthwise causal convolution of Mamba's block, forward next to its VJP and JVP,
written once against ``xp``.

Gu & Dao 2023 (Mamba, §3.4 and Figure 3: the short convolution before the selective scan;
``MambaMixer.conv1d`` of Hugging Face, ``groups = d_inner``, ``padding = d_conv - 1``, the
first :math:`n` outputs kept); Baptista, Stuart & Tran §5.3.4 (a recurrence reading the past
only). Channel :math:`c` of token :math:`t` (tokens as rows, kernel width :math:`k`,
weight ``w`` ``(d, k)`` as PyTorch's ``(d, 1, k)`` without its middle axis):

.. math:: y_{t,c} = b_c + \sum_{j=0}^{k-1} w_{c,j}\, x_{t-(k-1)+j,\,c},
   \qquad x_{s} = 0 \text{ for } s < 0,

a cross-correlation (PyTorch's ``conv1d``, no kernel flip) whose last tap :math:`w_{c,k-1}`
reads the current token. Each tap is one shifted copy of :math:`x` (:func:`_shift_down`):
:math:`k` multiply-adds per entry, no cancellation beyond the sum's.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._tangent import jvp_rule, lin, tsum
from nlaverify.ops._validate import check_args

__all__ = ["causal_conv1d", "causal_conv1d_jvp", "causal_conv1d_vjp"]


def _shift_down(xp: Namespace, x: Any, s: int) -> Any:
    """Rows moved ``s`` later along axis -2, zeros entering at the top: row ``t`` holds
    ``x[t - s]`` (0 for ``t < s``)."""
    n = x.shape[-2]
    if s == 0:
        return x
    if s >= n:
        return xp.zeros_like(x)
    return xp.concat([xp.zeros_like(x[..., :s, :]), x[..., :n - s, :]], axis=-2)


def _shift_up(xp: Namespace, g: Any, s: int) -> Any:
    """The adjoint of :func:`_shift_down`: row ``t`` holds ``g[t + s]`` (0 past the end)."""
    n = g.shape[-2]
    if s == 0:
        return g
    if s >= n:
        return xp.zeros_like(g)
    return xp.concat([g[..., s:, :], xp.zeros_like(g[..., :s, :])], axis=-2)


def _check(op: str, xp: Namespace, x: Any, w: Any, b: Any, G: Any = None) -> int:
    dims = check_args(op, xp, {"x": (x, ("*", "n", "d")), "w": (w, ("d", "k")),
                               "b": (b, ("d",)), "G": (G, ("*", "n", "d"))})
    return dims["k"]


def causal_conv1d(xp: Namespace, x: Any, w: Any, b: Any = None) -> Any:
    r"""The depthwise causal convolution :math:`y_{t,c} = b_c + \sum_j w_{c,j}
    x_{t-(k-1)+j,c}` (see the module's docstring; Gu & Dao 2023, §3.4).

    Args:
        x: ``(..., n, d)``; w: ``(d, k)``; b: ``(d,)`` or ``None``.

    Returns:
        ``(..., n, d)``.
    """
    k = _check("causal_conv1d", xp, x, w, b)
    taps = [w[:, j] * _shift_down(xp, x, k - 1 - j) for j in range(k)]
    y = tsum(*taps)
    return y if b is None else y + b


def causal_conv1d_vjp(xp: Namespace, G: Any, x: Any, w: Any, b: Any = None
                      ) -> tuple[Any, ...]:
    r"""VJP of :func:`causal_conv1d`: the correlation run backwards in time,

    .. math:: \bar x_{s,c} = \sum_j w_{c,j}\, G_{s+(k-1)-j,\,c},\qquad
       \bar w_{c,j} = \sum_t G_{t,c}\, x_{t-(k-1)+j,\,c},\qquad \bar b_c = \sum_t G_{t,c},

    the sums over :math:`t` also over any batch axes (the weight is shared). Returns
    ``(dx, dw)`` or ``(dx, dw, db)`` when ``b`` is given."""
    k = _check("causal_conv1d_vjp", xp, x, w, b, G)
    lead = tuple(range(x.ndim - 1))
    dx = tsum(*[w[:, j] * _shift_up(xp, G, k - 1 - j) for j in range(k)])
    dw = xp.stack([xp.sum(G * _shift_down(xp, x, k - 1 - j), axis=lead) for j in range(k)],
                  axis=-1)
    return (dx, dw) if b is None else (dx, dw, xp.sum(G, axis=lead))


@jvp_rule("dx", "dw", "db")
def causal_conv1d_jvp(xp: Namespace, T: tuple[Any, ...], x: Any, w: Any, b: Any = None
                      ) -> Any:
    r"""JVP of :func:`causal_conv1d`, bilinear in :math:`(x, w)`: :math:`\dot y =
    \operatorname{conv}(\dot x; w) + \operatorname{conv}(x; \dot w) + \dot b`. ``T = (dx, dw,
    db)``, an entry ``None`` meaning a zero tangent."""
    dx, dw, db = T
    _check("causal_conv1d_jvp", xp, x, w, b)
    return tsum(lin(dx, lambda t: causal_conv1d(xp, t, w)),
                lin(dw, lambda t: causal_conv1d(xp, x, t)),
                lin(db, lambda t: xp.zeros_like(x) + t))
