r"""Kronecker products, ``vec`` and the Kronecker-factored solves of K-FAC (Baggag & Saad §5.3).

Index map (1-based, as in the papers): for :math:`A \in \mathbb R^{m\times n}`,
:math:`B \in \mathbb R^{p\times q}`,

.. math:: (A \otimes B)_{(i-1)p+k,\;(j-1)q+l} = A_{ij} B_{kl}.

Two flattenings of a matrix :math:`X \in \mathbb R^{m\times n}`:

* :func:`vec`, the mathematical convention: the **columns** stacked (column-major),
  :math:`\operatorname{vec}(X)_{(j-1)m+i} = X_{ij}`, so :math:`\operatorname{vec}(u v^\top) =
  v \otimes u` and :math:`\operatorname{vec}(AXB) = (B^\top \otimes A)\operatorname{vec}(X)`;
* :func:`vec_rows`, the code's convention (``reshape(X, (-1,))``): the **rows** stacked,
  :math:`\operatorname{vec}_r(X)_{(i-1)n+j} = X_{ij}`, so :math:`\operatorname{vec}_r(u v^\top)
  = u \otimes v` and :math:`\operatorname{vec}_r(AXB) = (A \otimes B^\top)\operatorname{vec}_r(X)`.

Since :math:`\operatorname{vec}_r(X) = \operatorname{vec}(X^\top)`, the seed's column
convention (:math:`s = W a`) and the code's row convention (:math:`s = a W`, :math:`W` the
transpose) give the same Kronecker order :math:`a \otimes g` for a layer's gradient
(identities ``kron_vec_outer`` and ``kfac_gradient_vec_order``).

Every function is written once against an array namespace ``xp`` (the exact SymPy one
included), so the proofs of the ``kronecker`` family certify these functions. The two
dense linear-algebra primitives the standard does not give object arrays, :func:`solve`
and :func:`symmetric_eigh`, dispatch to ``xp.linalg`` (NumPy, JAX, array-api-strict),
exact :class:`sympy.Matrix` algebra or mpmath.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import sympy

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.ops._validate import check_args


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in (x.shape if hasattr(x, "shape") else np.shape(x)))


def eye(xp: Namespace, n: int, like: Any) -> Any:
    """The :math:`n \\times n` identity in the namespace (and dtype) of ``like``."""
    if xp.object_arrays:
        out = xp.zeros((n, n))
        for i in range(n):
            out[i, i] = xp.const(1)
        return out
    return xp.eye(n, dtype=like.dtype)


def trace(xp: Namespace, M: Any) -> Any:
    r""":math:`\operatorname{tr} M = \sum_i M_{ii}` of a square matrix (a 0-d array)."""
    n = check_args("trace", xp, {"M": (M, ("n", "n"))})["n"]
    return xp.sum(M * eye(xp, n, M))


# --------------------------------------------------------------------------- vec


def vec(xp: Namespace, X: Any) -> Any:
    r"""Column-major flattening :math:`\operatorname{vec}(X)_{(j-1)m+i} = X_{ij}` of an
    :math:`m \times n` matrix (the mathematical ``vec`` of Baggag & Saad §5.3)."""
    check_args("vec", xp, {"X": (X, ("m", "n"))})
    return xp.reshape(xp.matrix_transpose(X), (-1,))


def vec_rows(xp: Namespace, X: Any) -> Any:
    r"""Row-major flattening :math:`\operatorname{vec}_r(X)_{(i-1)n+j} = X_{ij}`, the code's
    ``reshape(X, (-1,))``; :math:`\operatorname{vec}_r(X) = \operatorname{vec}(X^\top)`."""
    check_args("vec_rows", xp, {"X": (X, ("m", "n"))})
    return xp.reshape(X, (-1,))


def _check_vector(op: str, xp: Namespace, v: Any, shape: tuple[int, int]) -> None:
    if len(shape) != 2 or min(shape) < 1:
        raise ShapeError(f"{op}: argument 'shape': expected (m, n) with m, n >= 1, got {shape}")
    check_args(op, xp, {"v": (v, (shape[0] * shape[1],))})


def unvec(xp: Namespace, v: Any, shape: tuple[int, int]) -> Any:
    r"""The inverse of :func:`vec`: the :math:`m \times n` matrix whose columns stacked are
    ``v`` (``shape = (m, n)``)."""
    _check_vector("unvec", xp, v, shape)
    return xp.matrix_transpose(xp.reshape(v, (shape[1], shape[0])))


def unvec_rows(xp: Namespace, v: Any, shape: tuple[int, int]) -> Any:
    r"""The inverse of :func:`vec_rows`: ``reshape(v, shape)``."""
    _check_vector("unvec_rows", xp, v, shape)
    return xp.reshape(v, tuple(shape))


# --------------------------------------------------------------------------- products


def kron(xp: Namespace, A: Any, B: Any) -> Any:
    r"""The Kronecker product :math:`(A\otimes B)_{(i-1)p+k,(j-1)q+l} = A_{ij} B_{kl}`,
    of shape :math:`(mp, nq)` (Baggag & Saad §5.3)."""
    d = check_args("kron", xp, {"A": (A, ("m", "n")), "B": (B, ("p", "q"))})
    m, n, p, q = d["m"], d["n"], d["p"], d["q"]
    blocks = xp.reshape(A, (m, 1, n, 1)) * xp.reshape(B, (1, p, 1, q))
    return xp.reshape(blocks, (m * p, n * q))


def kron_matvec(xp: Namespace, A: Any, B: Any, X: Any) -> Any:
    r""":math:`A \otimes B` applied to :math:`\operatorname{vec}_r(X)` without forming it:

    .. math:: (A \otimes B)\operatorname{vec}_r(X) = \operatorname{vec}_r(A X B^\top),

    returned as the :math:`m \times p` matrix :math:`A X B^\top` (:math:`A` is
    :math:`m\times n`, :math:`B` is :math:`p\times q`, :math:`X` is :math:`n\times q`).
    Cost :math:`O(mnq + mpq)` instead of :math:`O(mnpq)`.
    """
    check_args("kron_matvec", xp, {"A": (A, ("m", "n")), "B": (B, ("p", "q")),
                                   "X": (X, ("n", "q"))})
    return xp.matmul(xp.matmul(A, X), xp.matrix_transpose(B))


# --------------------------------------------------------------------------- dense primitives


def solve(xp: Namespace, A: Any, B: Any) -> Any:
    r""":math:`A^{-1} B` for a square nonsingular :math:`A` (``(n, n)``) and ``B`` of shape
    ``(n, k)``: ``xp.linalg.solve`` on floating namespaces, exact LU on SymPy, mpmath's
    ``lu_solve`` column by column on mpmath."""
    check_args("solve", xp, {"A": (A, ("n", "n")), "B": (B, ("n", "k"))})
    if not xp.object_arrays:
        return xp.linalg.solve(A, B)
    if xp.exact:
        return np.array(sympy.Matrix(A).LUsolve(sympy.Matrix(B)).tolist(), dtype=object)
    ctx = xp.ctx
    LU = ctx.matrix(np.asarray(A).tolist())
    cols = [ctx.lu_solve(LU, ctx.matrix(list(np.asarray(B)[:, c])))
            for c in range(_shape(B)[1])]
    return np.array([[col[r] for col in cols] for r in range(_shape(B)[0])], dtype=object)


def symmetric_eigh(xp: Namespace, M: Any) -> tuple[Any, Any]:
    r"""Eigen-decomposition :math:`M = Q \operatorname{diag}(w) Q^\top` of a symmetric
    matrix, :math:`Q` orthogonal (eigenvectors in its columns).

    Floating namespaces: ``xp.linalg.eigh`` (ascending :math:`w`). SymPy: the exact
    eigenvectors of :meth:`sympy.Matrix.eigenvects` (entries expanded first), each
    eigenspace orthonormalized by Gram–Schmidt (so repeated eigenvalues, the zero
    eigenvalue of a rank-deficient Gram matrix among them, get orthonormal bases); the order
    is SymPy's. mpmath: ``eigsy``.
    """
    n = check_args("symmetric_eigh", xp, {"M": (M, ("n", "n"))})["n"]
    if not xp.object_arrays:
        res = xp.linalg.eigh(M)
        return res[0], res[1]
    if not xp.exact:
        w, Q = xp.ctx.eigsy(xp.ctx.matrix(np.asarray(M).tolist()))
        return (np.array([w[i] for i in range(n)], dtype=object),
                np.array([[Q[i, j] for j in range(n)] for i in range(n)], dtype=object))
    values: list[sympy.Expr] = []
    vectors: list[sympy.Matrix] = []
    for value, mult, basis in sympy.Matrix(M).applyfunc(sympy.expand).eigenvects():
        if len(basis) != mult:
            raise ArgumentError(f"symmetric_eigh: argument 'M': expected a symmetric "
                                f"(diagonalizable) matrix; eigenvalue {value} has multiplicity "
                                f"{mult} but {len(basis)} eigenvectors")
        values += [value] * mult
        vectors += sympy.GramSchmidt(basis, True)
    Q = np.array([[vectors[j][i] for j in range(n)] for i in range(n)], dtype=object)
    return np.array(values, dtype=object), Q


# --------------------------------------------------------------------------- solves, damping


def _square_pair(op: str, xp: Namespace, A: Any, B: Any, X: Any) -> None:
    check_args(op, xp, {"A": (A, ("m", "m")), "B": (B, ("p", "p")), "X": (X, ("m", "p"))})


def kron_solve(xp: Namespace, A: Any, B: Any, X: Any) -> Any:
    r""":math:`(A\otimes B)^{-1}` applied to :math:`\operatorname{vec}_r(X)` from the factors
    (Baggag & Saad §5.3: :math:`(A\otimes B)^{-1} = A^{-1}\otimes B^{-1}`):

    .. math:: (A\otimes B)^{-1}\operatorname{vec}_r(X) = \operatorname{vec}_r(A^{-1} X B^{-\top}),

    returned as the :math:`m \times p` matrix; two solves of sizes :math:`m` and :math:`p`
    instead of one of size :math:`mp`.
    """
    _square_pair("kron_solve", xp, A, B, X)
    Y = solve(xp, A, X)
    return xp.matrix_transpose(solve(xp, B, xp.matrix_transpose(Y)))


def _check_scalar(op: str, name: str, v: Any, *, positive: bool) -> None:
    if len(_shape(v)) != 0:
        raise ShapeError(f"{op}: argument {name!r}: expected a scalar, got shape {_shape(v)}")
    bad = None
    if isinstance(v, numbers.Real) and not isinstance(v, bool):
        bad = not (v > 0 if positive else v >= 0)
    elif isinstance(v, sympy.Basic):
        bad = bool(v.is_nonpositive) if positive else bool(v.is_negative)
    if bad:
        raise ArgumentError(f"{op}: argument {name!r}: expected {'> 0' if positive else '>= 0'}"
                            f", got {v!r}")


def _scalar(xp: Namespace, v: Any) -> Any:
    """A scalar argument as a value of the namespace (exact on SymPy)."""
    return xp.asarray(xp.const(v))[()] if xp.object_arrays else v


def _scalar_sqrt(xp: Namespace, v: Any) -> Any:
    """:math:`\\sqrt v` of a scalar argument; a Python number stays a Python number on the
    floating namespaces, so it takes the factors' dtype (no float32 -> float64 promotion)."""
    if xp.object_arrays:
        return xp.sqrt(xp.asarray(xp.const(v)))[()]
    if isinstance(v, numbers.Real):
        return math.sqrt(v)
    return xp.sqrt(v)


def trace_norm_pi(xp: Namespace, A: Any, B: Any) -> Any:
    r"""The factored-damping split of Martens & Grosse (2015, §6.3):

    .. math:: \pi = \sqrt{\frac{\operatorname{tr}(A)/m}{\operatorname{tr}(B)/p}},

    the :math:`\pi > 0` that minimizes the trace (for PSD factors the trace norm) of the
    error term :math:`\sqrt\lambda\,(\pi\, I \otimes B + \pi^{-1} A \otimes I)` of
    :func:`damped_factors` (identity ``kron_factored_damping``). Requires positive traces.
    """
    d = check_args("trace_norm_pi", xp, {"A": (A, ("m", "m")), "B": (B, ("p", "p"))})
    ratio = (trace(xp, A) * xp.rational(d["p"])) / (trace(xp, B) * xp.rational(d["m"]))
    return xp.sqrt(ratio)


def damped_factors(xp: Namespace, A: Any, B: Any, damping: Any, *,
                   pi: Any = None) -> tuple[Any, Any]:
    r"""Factored Tikhonov damping of Martens & Grosse (2015, §6.3):

    .. math:: (A + \pi\sqrt\lambda\, I) \otimes (B + \tfrac{\sqrt\lambda}{\pi} I)
              = A\otimes B + \lambda I + \sqrt\lambda\,(\pi\, I\otimes B + \pi^{-1} A\otimes I).

    This is **not** :math:`A\otimes B + \lambda I`: the cross term
    :math:`\sqrt\lambda(\pi I\otimes B + \pi^{-1}A\otimes I)` is extra damping along the
    factors' directions (identity ``kron_factored_damping``), and it is what makes the
    damped inverse cheap (:func:`damped_kron_solve`).

    Args:
        A, B: square factors (PSD in K-FAC).
        damping: :math:`\lambda \ge 0`, a scalar.
        pi: :math:`\pi > 0`; default :func:`trace_norm_pi`.

    Returns:
        ``(A + pi sqrt(damping) I, B + sqrt(damping)/pi I)``.
    """
    d = check_args("damped_factors", xp, {"A": (A, ("m", "m")), "B": (B, ("p", "p"))})
    _check_scalar("damped_factors", "damping", damping, positive=False)
    if pi is None:
        pi = trace_norm_pi(xp, A, B)
    else:
        _check_scalar("damped_factors", "pi", pi, positive=True)
        pi = _scalar(xp, pi)
    root = _scalar_sqrt(xp, damping)
    return (A + (pi * root) * eye(xp, d["m"], A), B + (root / pi) * eye(xp, d["p"], B))


def damped_kron_solve(xp: Namespace, A: Any, B: Any, X: Any, damping: Any, *,
                      pi: Any = None) -> Any:
    r""":math:`\bigl((A + \pi\sqrt\lambda I)\otimes(B + \tfrac{\sqrt\lambda}{\pi}I)\bigr)^{-1}
    \operatorname{vec}_r(X)` as an :math:`m\times p` matrix: :func:`kron_solve` of the
    :func:`damped_factors` (note: the factored damping, not :math:`(A\otimes B +
    \lambda I)^{-1}`, whose inverse has no Kronecker form)."""
    _square_pair("damped_kron_solve", xp, A, B, X)
    Ad, Bd = damped_factors(xp, A, B, damping, pi=pi)
    return kron_solve(xp, Ad, Bd, X)


# --------------------------------------------------------------------------- eigenpairs


def kron_eig_from_factors(xp: Namespace, eig_A: tuple[Any, Any],
                          eig_B: tuple[Any, Any]) -> tuple[Any, Any]:
    r"""Eigenpairs of :math:`A\otimes B` from those of the factors: if :math:`A x_i =
    \lambda_i x_i` and :math:`B y_j = \mu_j y_j` then

    .. math:: (A\otimes B)(x_i\otimes y_j) = \lambda_i\mu_j\,(x_i\otimes y_j).

    Args:
        eig_A: ``(lambda (m,), X (m, m))``, eigenvectors in the columns of ``X``.
        eig_B: ``(mu (p,), Y (p, p))``.

    Returns:
        ``(w (mp,), V (mp, mp))`` with :math:`w_{(i-1)p+j} = \lambda_i\mu_j` and
        :math:`V = X\otimes Y` (column :math:`(i-1)p+j` is :math:`x_i\otimes y_j`).
    """
    (lam, X), (mu, Y) = eig_A, eig_B
    d = check_args("kron_eig_from_factors", xp, {"lambda": (lam, ("m",)), "X": (X, ("m", "m")),
                                                 "mu": (mu, ("p",)), "Y": (Y, ("p", "p"))})
    w = xp.reshape(xp.reshape(lam, (d["m"], 1)) * xp.reshape(mu, (1, d["p"])), (-1,))
    return w, kron(xp, X, Y)


def kron_eigh(xp: Namespace, A: Any, B: Any) -> tuple[Any, Any]:
    r"""Eigen-decomposition of :math:`A\otimes B` for symmetric factors, from
    :func:`symmetric_eigh` of each factor (:func:`kron_eig_from_factors`); the eigenvalues
    are in the factors' order, not sorted."""
    check_args("kron_eigh", xp, {"A": (A, ("m", "m")), "B": (B, ("p", "p"))})
    return kron_eig_from_factors(xp, symmetric_eigh(xp, A), symmetric_eigh(xp, B))
