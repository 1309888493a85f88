"""Rotary position embedding, RoPE (Baggag & Saad §3.6.2; Su et al., RoFormer).

Pairs of coordinates :math:`(x_{2i}, x_{2i+1})` of the query/key of the token at
position :math:`t` are rotated by the angle :math:`t\\,\\theta_i`,
:math:`\\theta_i = b^{-2i/d_h}` (the interleaved convention of RoFormer). Since
rotations compose, :math:`\\langle R_s q, R_t k\\rangle = \\langle q, R_{t-s} k\\rangle`:
scores depend on relative positions only (identity ``rope_relative_position``).
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._tangent import jvp_rule
from nlaverify.ops._validate import check_args


def rope_tables(xp: Namespace, n: int, d: int, base: int = 10000) -> tuple[Any, Any]:
    r"""``(C, S)``, each ``(n, d)``: :math:`C_{t,2i} = C_{t,2i+1} = \cos(t\theta_i)` and
    likewise :math:`S` with :math:`\sin`. Exact on SymPy."""
    exponents = xp.asarray([xp.rational(2 * (k // 2), d) for k in range(d)])
    theta = xp.exp(-exponents * xp.log(xp.asarray([xp.rational(base)])))
    angle = xp.asarray([[xp.rational(t)] for t in range(n)]) * theta
    return xp.cos(angle), xp.sin(angle)


def rotate_half(xp: Namespace, x: Any) -> Any:
    r"""The skew map :math:`R`: :math:`(x_{2i}, x_{2i+1}) \mapsto (-x_{2i+1}, x_{2i})`;
    :math:`R^\top = -R`."""
    shape = tuple(x.shape)
    pairs = xp.reshape(x, (*shape[:-1], shape[-1] // 2, 2))
    return xp.reshape(xp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1), shape)


def _check(op: str, xp: Namespace, specs: dict) -> dict[str, int]:
    dims = check_args(op, xp, specs)
    if dims["d_h"] % 2:
        from nlaverify.errors import ShapeError

        raise ShapeError(f"{op}: argument 'X': expected an even head dimension, got {dims['d_h']}")
    return dims


def rope(xp: Namespace, X: Any, base: int = 10000) -> Any:
    r"""RoPE of ``X`` ``(*, n, d_h)``: :math:`X \odot C + R(X) \odot S`."""
    dims = _check("rope", xp, {"X": (X, ("*", "n", "d_h"))})
    return _rotate(xp, X, dims, base)


def _rotate(xp: Namespace, X: Any, dims: dict[str, int], base: int) -> Any:
    r""":math:`X \odot C + R(X) \odot S`, the tables in ``X``'s dtype."""
    C, S = rope_tables(xp, dims["n"], dims["d_h"], base)
    if not xp.object_arrays:
        C, S = xp.astype(C, X.dtype), xp.astype(S, X.dtype)
    return X * C + rotate_half(xp, X) * S


def rope_vjp(xp: Namespace, G: Any, X: Any, base: int = 10000) -> tuple[Any]:
    r"""VJP of :func:`rope`: the transpose rotation,
    :math:`\bar X = G \odot C + R^\top(G \odot S) = G\odot C - R(G \odot S)`."""
    dims = _check("rope_vjp", xp, {"X": (X, ("*", "n", "d_h")), "G": (G, ("*", "n", "d_h"))})
    C, S = rope_tables(xp, dims["n"], dims["d_h"], base)
    if not xp.object_arrays:
        C, S = xp.astype(C, G.dtype), xp.astype(S, G.dtype)
    return (G * C - rotate_half(xp, G * S),)


@jvp_rule("dX",)
def rope_jvp(xp: Namespace, T: tuple[Any], X: Any, base: int = 10000) -> Any:
    r"""JVP of :func:`rope` (Baggag & Saad §3.6.2): RoPE is linear in :math:`X`, so the
    tangent is rotated alike, :math:`\dot Y = \dot X \odot C + R(\dot X) \odot S`."""
    dims = _check("rope_jvp", xp, {"X": (X, ("*", "n", "d_h")),
                                   "dX": (T[0], ("*", "n", "d_h"))})
    return _rotate(xp, T[0], dims, base)
