"""Affine maps, residual addition and elementwise arithmetic (forward and VJP).

Row-vector convention (Baggag & Saad §3.4.1): tokens are rows, ``Y = X W + b``.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ShapeError
from nlaverify.ops._tangent import jvp_rule, lin, tangents, tsum
from nlaverify.ops._validate import check_args


def affine(xp: Namespace, X: Any, W: Any, b: Any | None = None) -> Any:
    r"""Affine map :math:`Y = X W + \mathbf{1} b^\top` (Baggag & Saad §2.1, §3.4.1).

    Args:
        X: ``(*, d_in)`` rows of inputs.
        W: ``(d_in, d_out)`` weights.
        b: ``(d_out,)`` bias, or ``None``.

    Returns:
        ``(*, d_out)``.
    """
    check_args("affine", xp, {"X": (X, ("*", "d_in")), "W": (W, ("d_in", "d_out")),
                              "b": (b, ("d_out",))})
    Y = xp.matmul(X, W)
    return Y if b is None else Y + b


def affine_vjp(xp: Namespace, G: Any, X: Any, W: Any, b: Any | None = None) -> tuple[Any, ...]:
    r"""VJP of :func:`affine` (Baggag & Saad §2.6, eq. for :math:`\partial\eta/\partial W_l`).

    .. math::
        \bar X = G W^\top,\qquad \bar W = X^\top G,\qquad \bar b = G^\top \mathbf{1},

    with the batch dimensions of ``X`` and ``G`` flattened into rows.

    Returns:
        ``(dX, dW)`` or ``(dX, dW, db)`` when ``b`` is given.
    """
    dims = check_args("affine_vjp", xp, {"X": (X, ("*", "d_in")), "W": (W, ("d_in", "d_out")),
                                         "b": (b, ("d_out",)), "G": (G, ("*", "d_out"))})
    rows_X = xp.reshape(X, (-1, dims["d_in"]))
    rows_G = xp.reshape(G, (-1, dims["d_out"]))
    dX = xp.matmul(G, xp.matrix_transpose(W))
    dW = xp.matmul(xp.matrix_transpose(rows_X), rows_G)
    if b is None:
        return dX, dW
    return dX, dW, xp.sum(rows_G, axis=0)


def affine_jvp(xp: Namespace, T: tuple[Any, ...], X: Any, W: Any, b: Any | None = None) -> Any:
    r"""JVP of :func:`affine` (Baggag & Saad §2.6, §3.4.1; product rule, the map being
    bilinear in :math:`(X, W)`):

    .. math:: \dot Y = \dot X W + X \dot W + \mathbf 1 \dot b^\top.

    ``T = (dX, dW[, db])`` (``db`` exactly when ``b`` is given), an entry ``None`` meaning
    a zero tangent.
    """
    names = ("dX", "dW") if b is None else ("dX", "dW", "db")
    dX, dW, db = (*tangents("affine_jvp", T, names), None)[:3]
    dims = check_args("affine_jvp", xp, {
        "X": (X, ("*", "d_in")), "W": (W, ("d_in", "d_out")), "b": (b, ("d_out",)),
        "dX": (dX, ("*", "d_in")), "dW": (dW, ("d_in", "d_out")), "db": (db, ("d_out",))})
    if dX is None and dW is None:  # only the bias moves: the same row for every input row
        db = xp.zeros((*X.shape[:-1], dims["d_out"]), dtype=X.dtype) + db
    return tsum(lin(dX, lambda t: xp.matmul(t, W)), lin(dW, lambda t: xp.matmul(X, t)), db)


def add(xp: Namespace, x: Any, y: Any) -> Any:
    r"""Sum :math:`x + y`; with equal shapes it is the residual addition
    :math:`X + F(X)` of Baggag & Saad §3.8."""
    _same_shape("add", xp, x, y)
    return x + y


def add_vjp(xp: Namespace, G: Any, x: Any, y: Any) -> tuple[Any, Any]:
    r"""VJP of :func:`add`: :math:`(\bar x, \bar y) = (G, G)` (the residual stream
    passes the cotangent unchanged, Baggag & Saad §3.13.1)."""
    _same_shape("add_vjp", xp, x, y)
    return G, G


@jvp_rule("dx", "dy")
def add_jvp(xp: Namespace, T: tuple[Any, Any], x: Any, y: Any) -> Any:
    r"""JVP of :func:`add` (Baggag & Saad §3.8, §3.9): :math:`\dot z = \dot x + \dot y`.

    ``T = (dx, dy)``, an entry ``None`` meaning a zero tangent.
    """
    dx, dy = T
    _same_shape("add_jvp", xp, x, y, dx, dy)
    return tsum(dx, dy)


def mul(xp: Namespace, x: Any, y: Any) -> Any:
    r"""Elementwise product :math:`x \odot y`."""
    _same_shape("mul", xp, x, y)
    return x * y


def mul_vjp(xp: Namespace, G: Any, x: Any, y: Any) -> tuple[Any, Any]:
    r"""VJP of :func:`mul`: :math:`(\bar x, \bar y) = (G \odot y, G \odot x)`."""
    _same_shape("mul_vjp", xp, x, y)
    return G * y, G * x


@jvp_rule("dx", "dy")
def mul_jvp(xp: Namespace, T: tuple[Any, Any], x: Any, y: Any) -> Any:
    r"""JVP of :func:`mul` (Baggag & Saad §2.6), the product rule:
    :math:`\dot z = \dot x \odot y + x \odot \dot y`.

    ``T = (dx, dy)``, an entry ``None`` meaning a zero tangent.
    """
    dx, dy = T
    _same_shape("mul_jvp", xp, x, y, dx, dy)
    return tsum(lin(dx, lambda t: t * y), lin(dy, lambda t: x * t))


def scale(xp: Namespace, x: Any, c: Any) -> Any:
    r"""Multiplication by a constant, :math:`c x` (``c`` is not differentiated)."""
    check_args("scale", xp, {"x": (x, ("*",))})
    return xp.const(c) * x


def scale_vjp(xp: Namespace, G: Any, x: Any, c: Any) -> tuple[Any]:
    r"""VJP of :func:`scale`: :math:`\bar x = c G`."""
    return (xp.const(c) * G,)


@jvp_rule("dx",)
def scale_jvp(xp: Namespace, T: tuple[Any], x: Any, c: Any) -> Any:
    r"""JVP of :func:`scale` (Baggag & Saad §2.6): :math:`\dot y = c\,\dot x`."""
    check_args("scale_jvp", xp, {"x": (x, ("*",)), "dx": (T[0], ("*",))})
    return xp.const(c) * T[0]


def shift(xp: Namespace, x: Any, c: Any) -> Any:
    r"""Addition of a constant, :math:`x + c` (``c`` is not differentiated)."""
    check_args("shift", xp, {"x": (x, ("*",))})
    return x + xp.const(c)


def shift_vjp(xp: Namespace, G: Any, x: Any, c: Any) -> tuple[Any]:
    r"""VJP of :func:`shift`: :math:`\bar x = G`."""
    return (G,)


@jvp_rule("dx",)
def shift_jvp(xp: Namespace, T: tuple[Any], x: Any, c: Any) -> Any:
    r"""JVP of :func:`shift` (Baggag & Saad §2.6): :math:`\dot y = \dot x`."""
    check_args("shift_jvp", xp, {"x": (x, ("*",)), "dx": (T[0], ("*",))})
    return T[0]


def _same_shape(op: str, xp: Namespace, x: Any, y: Any, dx: Any = None, dy: Any = None) -> None:
    check_args(op, xp, {"x": (x, ("*",)), "y": (y, ("*",)), "dx": (dx, ("*",)),
                        "dy": (dy, ("*",))})
    sx, sy = tuple(getattr(x, "shape", ())), tuple(getattr(y, "shape", ()))
    if sx != sy:
        raise ShapeError(f"{op}: argument 'y': expected shape {sx} (the shape of 'x'), got {sy}")


def linear(xp: Namespace, X: Any, W: Any) -> Any:
    r"""Bias-free projection :math:`Y = X W` (Baggag & Saad §3.4.1)."""
    return affine(xp, X, W)


def linear_jvp(xp: Namespace, T: tuple[Any, ...], X: Any, W: Any) -> Any:
    r"""JVP of :func:`linear` (Baggag & Saad §3.4.1): :math:`\dot Y = \dot X W + X \dot W`."""
    return affine_jvp(xp, T, X, W)


def linear_vjp(xp: Namespace, G: Any, X: Any, W: Any) -> tuple[Any, Any]:
    r"""VJP of :func:`linear`: :math:`\bar X = G W^\top`, :math:`\bar W = X^\top G`."""
    dX, dW = affine_vjp(xp, G, X, W)
    return dX, dW


def unembed_tied(xp: Namespace, X: Any, W_E: Any) -> Any:
    r"""Logits with the unembedding tied to the embedding: :math:`Z = X W_E^\top`
    (Baggag & Saad §3.3.3)."""
    check_args("unembed_tied", xp, {"X": (X, ("*", "n", "d")), "W_E": (W_E, ("V", "d"))})
    return xp.matmul(X, xp.matrix_transpose(W_E))


def unembed_tied_vjp(xp: Namespace, G: Any, X: Any, W_E: Any) -> tuple[Any, Any]:
    r"""VJP of :func:`unembed_tied`: :math:`\bar X = G W_E`, :math:`\bar W_E = G^\top X`
    (batch rows flattened; added, by the graph, to the embedding's own cotangent of
    :math:`W_E`)."""
    dims = check_args("unembed_tied_vjp", xp, {"X": (X, ("*", "n", "d")),
                                               "W_E": (W_E, ("V", "d")),
                                               "G": (G, ("*", "n", "V"))})
    rows_G = xp.reshape(G, (-1, dims["V"]))
    return xp.matmul(G, W_E), xp.matmul(xp.matrix_transpose(rows_G),
                                        xp.reshape(X, (-1, dims["d"])))


@jvp_rule("dX", "dW_E")
def unembed_tied_jvp(xp: Namespace, T: tuple[Any, Any], X: Any, W_E: Any) -> Any:
    r"""JVP of :func:`unembed_tied` (Baggag & Saad §3.3.3), the map being bilinear:
    :math:`\dot Z = \dot X W_E^\top + X \dot W_E^\top`.

    ``T = (dX, dW_E)``, an entry ``None`` meaning a zero tangent.
    """
    dX, dW_E = T
    check_args("unembed_tied_jvp", xp, {"X": (X, ("*", "n", "d")), "W_E": (W_E, ("V", "d")),
                                        "dX": (dX, ("*", "n", "d")), "dW_E": (dW_E, ("V", "d"))})
    return tsum(lin(dX, lambda t: xp.matmul(t, xp.matrix_transpose(W_E))),
                lin(dW_E, lambda t: xp.matmul(X, xp.matrix_transpose(t))))
