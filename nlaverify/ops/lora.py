r"""Low-rank adaptation, LoRA (Baggag & Saad §4.2; Hu et al. 2022).

A frozen projection :math:`W_0 \in \mathbb R^{d_{in}\times d_{out}}` is adapted by a rank-
:math:`r` product, :math:`A \in \mathbb R^{d_{in}\times r}`, :math:`B \in \mathbb
R^{r\times d_{out}}`, scaled by :math:`s = \alpha/r`:

.. math:: Y = X(W_0 + s\,AB) + \mathbf 1 b^\top = XW_0 + s\,(XA)B + \mathbf 1 b^\top,

computed in the unmerged order (two thin products, never the :math:`d_{in}\times d_{out}`
update). Row-vector convention (tokens are rows). "Frozen" is the optimiser's choice (only
:math:`A, B` are updated): the VJP gives every cotangent, :math:`\bar W_0` included, so the
graph stays a function of all its parameters and the checks treat it like any other op.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._tangent import jvp_rule, lin, tsum
from nlaverify.ops._validate import check_args

_SPECS = {"X": ("*", "d_in"), "W": ("d_in", "d_out"), "A": ("d_in", "r"), "B": ("r", "d_out")}


def _check(op: str, xp: Namespace, X: Any, W: Any, A: Any, B: Any, b: Any = None,
           **more: tuple[Any, tuple[str, ...]]) -> dict[str, int]:
    specs = {k: (v, _SPECS[k]) for k, v in (("X", X), ("W", W), ("A", A), ("B", B))}
    if b is not None:
        specs["b"] = (b, ("d_out",))
    return check_args(op, xp, {**specs, **more})


def _rows(xp: Namespace, M: Any, d: int) -> Any:
    return xp.reshape(M, (-1, d))


def lora_linear(xp: Namespace, X: Any, W: Any, A: Any, B: Any, scale: Any = 1) -> Any:
    r"""LoRA projection :math:`Y = XW + s\,(XA)B` (``scale`` :math:`s = \alpha/r`).

    Args:
        X: ``(*, d_in)``; W: ``(d_in, d_out)`` the frozen weight; A: ``(d_in, r)``;
        B: ``(r, d_out)``.
    """
    _check("lora_linear", xp, X, W, A, B)
    return xp.matmul(X, W) + xp.const(scale) * xp.matmul(xp.matmul(X, A), B)


def lora_affine(xp: Namespace, X: Any, W: Any, b: Any, A: Any, B: Any, scale: Any = 1) -> Any:
    r"""LoRA projection with a bias, :math:`Y = XW + s\,(XA)B + \mathbf 1 b^\top`."""
    _check("lora_affine", xp, X, W, A, B, b)
    return xp.matmul(X, W) + xp.const(scale) * xp.matmul(xp.matmul(X, A), B) + b


def _vjp(xp: Namespace, G: Any, X: Any, W: Any, A: Any, B: Any, scale: Any,
         dims: dict[str, int]) -> tuple[Any, Any, Any, Any]:
    s = xp.const(scale)
    GB = xp.matmul(G, xp.matrix_transpose(B))                       # (*, r)
    dX = xp.matmul(G, xp.matrix_transpose(W)) + s * xp.matmul(GB, xp.matrix_transpose(A))
    rX, rG = _rows(xp, X, dims["d_in"]), _rows(xp, G, dims["d_out"])
    XtG = xp.matmul(xp.matrix_transpose(rX), rG)                    # (d_in, d_out)
    dA = s * xp.matmul(xp.matrix_transpose(rX), _rows(xp, GB, dims["r"]))
    dB = s * xp.matmul(xp.matrix_transpose(_rows(xp, xp.matmul(X, A), dims["r"])), rG)
    return dX, XtG, dA, dB


def lora_linear_vjp(xp: Namespace, G: Any, X: Any, W: Any, A: Any, B: Any, scale: Any = 1
                    ) -> tuple[Any, Any, Any, Any]:
    r"""VJP of :func:`lora_linear` (batch dimensions flattened into rows):

    .. math:: \bar X = GW^\top + s\,(GB^\top)A^\top,\quad \bar W = X^\top G,\quad
       \bar A = s\,X^\top (GB^\top),\quad \bar B = s\,(XA)^\top G .

    Returns ``(dX, dW, dA, dB)``; with :math:`W_0` frozen only :math:`\bar A, \bar B` are
    used by the optimiser.
    """
    dims = _check("lora_linear_vjp", xp, X, W, A, B, G=(G, ("*", "d_out")))
    return _vjp(xp, G, X, W, A, B, scale, dims)


def lora_affine_vjp(xp: Namespace, G: Any, X: Any, W: Any, b: Any, A: Any, B: Any,
                    scale: Any = 1) -> tuple[Any, Any, Any, Any, Any]:
    r"""VJP of :func:`lora_affine`: as :func:`lora_linear_vjp`, and
    :math:`\bar b = G^\top\mathbf 1`. Returns ``(dX, dW, db, dA, dB)``."""
    dims = _check("lora_affine_vjp", xp, X, W, A, B, b, G=(G, ("*", "d_out")))
    dX, dW, dA, dB = _vjp(xp, G, X, W, A, B, scale, dims)
    return dX, dW, xp.sum(_rows(xp, G, dims["d_out"]), axis=0), dA, dB


def _jvp(xp: Namespace, dX: Any, dW: Any, dA: Any, dB: Any, X: Any, W: Any, A: Any, B: Any,
         scale: Any) -> Any:
    s = xp.const(scale)
    XA = xp.matmul(X, A)
    low = [lin(dX, lambda t: xp.matmul(xp.matmul(t, A), B)),
           lin(dA, lambda t: xp.matmul(xp.matmul(X, t), B)),
           lin(dB, lambda t: xp.matmul(XA, t))]
    adapter = None if all(t is None for t in low) else s * tsum(*low)
    return [lin(dX, lambda t: xp.matmul(t, W)), lin(dW, lambda t: xp.matmul(X, t)), adapter]


@jvp_rule("dX", "dW", "dA", "dB")
def lora_linear_jvp(xp: Namespace, T: tuple[Any, Any, Any, Any], X: Any, W: Any, A: Any,
                    B: Any, scale: Any = 1) -> Any:
    r"""JVP of :func:`lora_linear` (product rule; trilinear in :math:`X, A, B`):

    .. math:: \dot Y = \dot X W + X\dot W + s\,(\dot X A B + X\dot A B + XA\dot B).

    ``T = (dX, dW, dA, dB)``, an entry ``None`` meaning a zero tangent."""
    dX, dW, dA, dB = T
    _check("lora_linear_jvp", xp, X, W, A, B, dX=(dX, _SPECS["X"]), dW=(dW, _SPECS["W"]),
           dA=(dA, _SPECS["A"]), dB=(dB, _SPECS["B"]))
    return tsum(*_jvp(xp, dX, dW, dA, dB, X, W, A, B, scale))


@jvp_rule("dX", "dW", "db", "dA", "dB")
def lora_affine_jvp(xp: Namespace, T: tuple[Any, Any, Any, Any, Any], X: Any, W: Any, b: Any,
                    A: Any, B: Any, scale: Any = 1) -> Any:
    r"""JVP of :func:`lora_affine`: :func:`lora_linear_jvp` plus :math:`\mathbf 1\dot b^\top`.
    ``T = (dX, dW, db, dA, dB)``."""
    dX, dW, db, dA, dB = T
    dims = _check("lora_affine_jvp", xp, X, W, A, B, b, dX=(dX, _SPECS["X"]),
                  dW=(dW, _SPECS["W"]), db=(db, ("d_out",)), dA=(dA, _SPECS["A"]),
                  dB=(dB, _SPECS["B"]))
    terms = _jvp(xp, dX, dW, dA, dB, X, W, A, B, scale)
    if db is not None and all(t is None for t in terms):  # only the bias moves
        db = xp.zeros((*X.shape[:-1], dims["d_out"]), dtype=X.dtype) + db
    return tsum(*terms, db)
