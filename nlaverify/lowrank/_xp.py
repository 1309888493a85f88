r"""The few array operations of :mod:`nlaverify.lowrank` that the object namespaces lack.

On NumPy, JAX, CuPy and array-api-strict each helper is the namespace's own function
(``abs``, ``max``, ``round``, ``linalg.qr``, ``linalg.svd``, ``argsort``); on the SymPy and
mpmath namespaces (object arrays) it is the same operation done exactly, entry by entry:

* :func:`round_half_even` rounds ties to the even integer, as ``numpy.round`` and
  ``jax.numpy.round`` do (IEEE 754 ``roundTiesToEven``);
* :func:`orthonormal_basis` is classical Gram–Schmidt with re-orthogonalisation; an exactly
  dependent column becomes a zero column (exact arithmetic knows the rank), so
  :math:`QQ^\top` is still the orthogonal projector onto the range;
* :func:`svd` on SymPy takes the eigenvectors of :math:`A^\top A` (exact for matrices with
  rational entries whose singular values are rational, as in the proofs), on mpmath the
  context's ``svd_r``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from nlaverify.backends.base import Namespace


def _obj(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=object)


def _map(f: Any, x: Any) -> np.ndarray:
    arr = _obj(x)
    out = np.empty(arr.shape, dtype=object)
    for idx, v in np.ndenumerate(arr):
        out[idx] = f(v)
    return out


def absolute(xp: Namespace, x: Any) -> Any:
    """:math:`|x|` elementwise."""
    return _map(abs, x) if xp.object_arrays else xp.abs(x)


def amax(xp: Namespace, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """The maximum over ``axis`` (exact comparisons on the object namespaces)."""
    if xp.object_arrays:
        out = np.max(_obj(x), axis=axis, keepdims=keepdims)
        return out if isinstance(out, np.ndarray) else _obj(out)
    return xp.max(x, axis=axis, keepdims=keepdims)


def amin(xp: Namespace, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """The minimum over ``axis``."""
    if xp.object_arrays:
        out = np.min(_obj(x), axis=axis, keepdims=keepdims)
        return out if isinstance(out, np.ndarray) else _obj(out)
    return xp.min(x, axis=axis, keepdims=keepdims)


def maximum(xp: Namespace, a: Any, b: Any) -> Any:
    """Elementwise maximum."""
    if xp.object_arrays:
        a, b = np.broadcast_arrays(_obj(a), _obj(b))
        return _obj([max(u, v) for u, v in zip(a.ravel(), b.ravel(), strict=True)]).reshape(
            a.shape)
    return xp.maximum(a, b)


def minimum(xp: Namespace, a: Any, b: Any) -> Any:
    """Elementwise minimum."""
    if xp.object_arrays:
        a, b = np.broadcast_arrays(_obj(a), _obj(b))
        return _obj([min(u, v) for u, v in zip(a.ravel(), b.ravel(), strict=True)]).reshape(
            a.shape)
    return xp.minimum(a, b)


def _round_scalar(v: Any) -> Any:
    n = sympy.floor(v)
    f = v - n
    half = sympy.Rational(1, 2)
    if f > half:
        return n + 1
    if f < half:
        return n
    return n + (n % 2)


def round_half_even(xp: Namespace, x: Any) -> Any:
    r"""Round to the nearest integer, ties to even (:math:`\tfrac52 \to 2`,
    :math:`\tfrac72 \to 4`), as ``numpy.round``/``jax.numpy.round``; the result is an
    integer-valued array of ``x``'s dtype."""
    if xp.name == "mpmath":
        ctx = xp.ctx  # type: ignore[attr-defined]
        return _map(lambda v: ctx.mpf(_round_scalar(sympy.Rational(str(v)))), x)
    if xp.object_arrays:
        return _map(_round_scalar, x)
    return xp.round(x)


def floor(xp: Namespace, x: Any) -> Any:
    """:math:`\\lfloor x\\rfloor` elementwise."""
    if xp.object_arrays:
        return _map(sympy.floor, x)
    return xp.floor(x)


def clip(xp: Namespace, x: Any, lo: Any, hi: Any) -> Any:
    """:math:`\\min(\\max(x, lo), hi)` elementwise."""
    return minimum(xp, maximum(xp, x, lo), hi)


def argsort(xp: Namespace, x: Any, axis: int = -1) -> Any:
    """Stable ascending argsort along ``axis`` (ties keep index order)."""
    if xp.object_arrays:
        return np.argsort(_obj(x), axis=axis, kind="stable")
    return xp.argsort(x, axis=axis, stable=True)


def _dot(u: np.ndarray, v: np.ndarray) -> Any:
    return sympy.Add(*[a * b for a, b in zip(u, v, strict=True)]) if u.size else 0


def orthonormal_basis(xp: Namespace, Y: Any) -> Any:
    r"""An orthonormal basis :math:`Q` (same shape as the tall ``Y``, :math:`m\times l`,
    :math:`l \le m`) of the range of ``Y``: the reduced QR factor on the floating backends;
    on the object namespaces Gram–Schmidt, twice (exact on SymPy, and "twice is enough"
    in mpmath), with a zero column where a column of ``Y`` depends exactly on the previous
    ones. In every case :math:`QQ^\top` is the orthogonal projector onto
    :math:`\operatorname{range}(Y)` when :math:`Y` has full column rank, and on the object
    namespaces also when it does not."""
    if not xp.object_arrays:
        return xp.linalg.qr(Y)[0]
    Y = _obj(Y)
    m, cols_in = Y.shape
    cols: list[np.ndarray] = []
    for j in range(cols_in):
        w = Y[:, j].copy()
        for _ in range(2):
            for q in cols:
                c = _dot(q, w)
                if c != 0:
                    w = w - q * c
        if xp.exact:
            w = _obj([sympy.expand(v) for v in w])
        nrm2 = _dot(w, w)
        if nrm2 == 0:
            cols.append(xp.zeros((m,)))
            continue
        cols.append(w / xp.sqrt(xp.asarray(nrm2))[()])
    return np.stack(cols, axis=1) if cols else xp.zeros((m, 0))


def svd(xp: Namespace, A: Any) -> tuple[Any, Any, Any]:
    r"""The thin SVD :math:`A = U\operatorname{diag}(s)V^\top` (:math:`s` descending):
    ``linalg.svd(full_matrices=False)`` on the floating backends; exact on SymPy (see the
    module docstring), ``svd_r`` on mpmath. Returns ``(U, s, Vh)``."""
    if not xp.object_arrays:
        return xp.linalg.svd(A, full_matrices=False)
    A = _obj(A)
    if xp.name == "mpmath":
        ctx = xp.ctx  # type: ignore[attr-defined]
        U, s, V = ctx.svd_r(ctx.matrix(A.tolist()))
        r = min(A.shape)
        Ua = _obj([[U[i, j] for j in range(r)] for i in range(A.shape[0])])
        sa = _obj([s[j] for j in range(r)])
        Va = _obj([[V[i, j] for j in range(A.shape[1])] for i in range(r)])
        return Ua, sa, Va
    return _exact_svd(xp, A)


def _exact_svd(xp: Namespace, A: np.ndarray) -> tuple[Any, Any, Any]:
    """Exact thin SVD from the eigen-decomposition of :math:`A^\\top A` (``n <= m``) or of
    :math:`AA^\\top` (wide ``A``, by transposition)."""
    m, n = A.shape
    if n > m:
        U, s, Vh = _exact_svd(xp, A.T)
        return Vh.T, s, U.T
    M = sympy.Matrix(A.tolist())
    G = M.T * M
    pairs = []
    for lam, _, vecs in G.eigenvects():
        basis = sympy.GramSchmidt(vecs, orthonormal=True)
        pairs += [(lam, v) for v in basis]
    pairs.sort(key=lambda p: -p[0])
    s = [sympy.sqrt(lam) for lam, _ in pairs]
    V = sympy.Matrix.hstack(*[v for _, v in pairs])
    cols = [M * V[:, j] / s[j] for j in range(n) if s[j] != 0]
    U = sympy.Matrix.hstack(*cols) if cols else sympy.zeros(m, 0)
    if U.shape[1] < n:  # complete with an orthonormal basis of the rest of range(A)^perp
        extra = (U.T).nullspace() if U.shape[1] else [sympy.eye(m)[:, i] for i in range(m)]
        extra = sympy.GramSchmidt(extra, orthonormal=True)
        U = sympy.Matrix.hstack(U, *extra[: n - U.shape[1]])
    return np.array(U.tolist(), dtype=object), _obj(s), np.array(V.T.tolist(), dtype=object)
