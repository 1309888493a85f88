r"""Shampoo (Gupta, Koren & Singer 2018; Baggag & Saad §5.4, eqs. 5.4.1–5.4.3, Algorithm 5).

For a matrix parameter :math:`W \in \mathbb R^{m\times n}` with gradients :math:`G_t`:

.. math:: L_t = L_{t-1} + G_t G_t^\top,\qquad R_t = R_{t-1} + G_t^\top G_t,\qquad
          W_{t+1} = W_t - \eta\, L_t^{-1/4} G_t R_t^{-1/4}

(:math:`L_0 = \epsilon I_m`, :math:`R_0 = \epsilon I_n`: :func:`shampoo_init`;
:func:`shampoo_statistics`, :func:`shampoo_direction`). A tensor of order :math:`k` uses
the roots :math:`-1/(2k)`: for a vector (:math:`k = 1`) the single statistic is
:math:`L_t = \sum_i g_i g_i^\top` and the direction :math:`L_t^{-1/2} g_t`, full-matrix
Adagrad (Duchi, Hazan & Singer 2011; identity ``shampoo_order_one_is_full_matrix_adagrad``).

The roots are pseudo-inverse roots (:func:`inverse_root`): eigenvalues at or below a
relative threshold are treated as 0, so that with one gradient :math:`G = U\Sigma V^\top`
(thin SVD, rank :math:`r`) and :math:`\epsilon = 0` the direction is exactly the polar
factor :math:`(GG^\top)^{+1/4} G (G^\top G)^{+1/4} = U V^\top` (identity
``shampoo_one_gradient_is_polar_factor``; the matrix Muon approximates by Newton–Schulz).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nlaverify.backends.base import Namespace
from nlaverify.backends.host import dtype_name
from nlaverify.curvature import kronecker as _kr
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.ops._validate import check_args
from nlaverify.tolerance import tolerance

#: ``eigh(xp, M) -> (w, Q)`` with :math:`M = Q \operatorname{diag}(w) Q^\top`
Eigh = Callable[[Namespace, Any], tuple[Any, Any]]


def _default_rtol(xp: Namespace, M: Any, n: int) -> Any:
    r"""0 on the exact namespace (only exact zeros are dropped); otherwise the rounding level
    of the tolerance model for an accumulation of length :math:`n`,
    :math:`C\sqrt n\,u` (:func:`nlaverify.tolerance.tolerance`). The eigenvalues of a
    computed Gram matrix :math:`GG^\top` that are 0 in exact arithmetic come out at about
    :math:`n u \lambda_{\max}`, an order of magnitude below it (measured on random
    rank-deficient :math:`G` up to :math:`24\times 24`)."""
    if xp.exact:
        return 0
    if xp.object_arrays:
        return tolerance("mpmath", size=n, digits=xp.digits).rtol
    return tolerance(dtype_name(M.dtype), size=n).rtol


def inverse_root(xp: Namespace, M: Any, p: int, *, eigh: Eigh | None = None,
                 rtol: Any = None) -> Any:
    r"""The pseudo-inverse :math:`p`-th root :math:`M^{+1/p}` of a symmetric PSD matrix:

    .. math:: M = Q\operatorname{diag}(w)Q^\top \;\Rightarrow\;
              M^{-1/p}_+ = Q \operatorname{diag}(f(w_i)) Q^\top,\quad
              f(w) = \begin{cases} w^{-1/p} & w > \tau \\ 0 & \text{otherwise}\end{cases}

    with :math:`\tau = \mathrm{rtol}\cdot\max_i w_i`.

    Args:
        M: ``(n, n)`` symmetric positive semi-definite.
        p: the root, a positive integer (4 for Shampoo's matrix case, 2 for a vector).
        eigh: the eigen-decomposition used, ``eigh(xp, M) -> (w, Q)``; ``None`` (default):
            :func:`~nlaverify.curvature.kronecker.symmetric_eigh` as the module holds it at
            call time (``xp.linalg.eigh``, or SymPy's exact diagonalization with
            Gram–Schmidt inside each eigenspace on the exact namespace).
        rtol: relative threshold; default the tolerance model's :math:`C\sqrt n\,u` of the
            dtype (:func:`_default_rtol`), and exactly 0 on the exact namespace (which
            accepts no other value: there an eigenvalue is dropped only when it is exactly 0,
            decided by SymPy).
    """
    n = check_args("inverse_root", xp, {"M": (M, ("n", "n"))})["n"]
    if isinstance(p, bool) or not isinstance(p, int | np.integer) or p < 1:
        raise ArgumentError(f"inverse_root: argument 'p': expected a positive integer, got {p!r}")
    if rtol is None:
        rtol = _default_rtol(xp, M, n)
    elif xp.exact and rtol != 0:
        raise ArgumentError(f"inverse_root: argument 'rtol': expected 0 on the exact namespace "
                            f"(exact zeros only), got {rtol!r}")
    if xp.exact and eigh is None:
        roots = _irreducible_roots(M)
        if roots is not None:
            return _sylvester_inverse_root(M, roots, int(p))
    w, Q = (_kr.symmetric_eigh if eigh is None else eigh)(xp, M)
    check_args("inverse_root", xp, {"w": (w, (n,)), "Q": (Q, (n, n))})
    threshold = 0 if xp.exact else rtol * xp.max(w)
    keep = xp.greater(w, threshold)
    safe = xp.where(keep, w, xp.ones_like(w))
    f = xp.where(keep, safe ** xp.rational(-1, int(p)), xp.zeros_like(w))
    return xp.matmul(Q * xp.reshape(f, (1, n)), xp.matrix_transpose(Q))


def _irreducible_roots(M: Any) -> list[Any] | None:
    r"""The eigenvalues of a rational symmetric ``M`` as exact real roots (``CRootOf``) when
    its characteristic polynomial has an irreducible factor of degree :math:`\ge 3`, else
    ``None``. Such roots have no real radical form (*casus irreducibilis*): SymPy's
    diagonalization writes them with complex radicals whose sign it cannot decide (the
    threshold then stays a ``Piecewise`` that ``evalf`` cannot evaluate, after minutes)."""
    import sympy

    entries = [sympy.sympify(v) for v in np.asarray(M).reshape(-1)]
    if not all(v.is_Rational for v in entries):
        return None
    n = int(np.shape(M)[0])
    x = sympy.Symbol("x")
    char = sympy.Matrix(n, n, entries).charpoly(x)
    if all(sympy.degree(f, x) <= 2 for f, _ in sympy.factor_list(char.as_expr())[1]):
        return None
    return list(sympy.Poly(char, x).all_roots())


def _sylvester_inverse_root(M: Any, roots: list[Any], p: int) -> Any:
    r""":math:`M^{+1/p} = \sum_{\lambda_j > 0}\lambda_j^{-1/p} P_j` with the spectral
    projectors :math:`P_j = \prod_{k
e j}(M - \lambda_k I)/(\lambda_j - \lambda_k)` over the
    distinct eigenvalues (Sylvester's formula; :math:`M` symmetric, so diagonalizable). The
    roots are exact real algebraic numbers, so the signs are decided exactly and every
    entry evaluates to any precision."""
    import sympy

    n = int(np.shape(M)[0])
    A = sympy.Matrix(n, n, [sympy.sympify(v) for v in np.asarray(M).reshape(-1)])
    distinct = list(dict.fromkeys(roots))
    if any(r.is_negative for r in distinct):
        raise ArgumentError("inverse_root: argument 'M': expected a positive semi-definite "
                            "matrix, got a negative eigenvalue")
    out = sympy.zeros(n, n)
    eye = sympy.eye(n)
    for j, lam in enumerate(distinct):
        if lam.is_zero:
            continue
        P = eye
        for k, mu in enumerate(distinct):
            if k != j:
                P = P * (A - mu * eye) / (lam - mu)
        out += lam ** sympy.Rational(-1, p) * P
    return np.array(out.tolist(), dtype=object)


def _order(op: str, G: Any) -> int:
    k = len(getattr(G, "shape", np.shape(G)))
    if k not in (1, 2):
        raise ShapeError(f"{op}: argument 'G': expected a vector (n,) or a matrix (m, n), got "
                         f"shape {getattr(G, 'shape', np.shape(G))}")
    return k


def shampoo_init(xp: Namespace, G: Any, epsilon: Any = 0) -> tuple[Any, ...]:
    r"""The initial statistics :math:`L_0 = \epsilon I_m` (and :math:`R_0 = \epsilon I_n`
    for a matrix) for a parameter shaped like ``G`` (Algorithm 5, line 1)."""
    k = _order("shampoo_init", G)
    if isinstance(epsilon, int | float) and epsilon < 0:
        raise ArgumentError(f"shampoo_init: argument 'epsilon': expected >= 0, got {epsilon!r}")
    eps = xp.const(epsilon) if xp.object_arrays else epsilon
    return tuple(eps * _kr.eye(xp, int(G.shape[i]), G) for i in range(k))


def shampoo_statistics(xp: Namespace, G: Any, stats: tuple[Any, ...] | None = None, *,
                       beta: Any = None) -> tuple[Any, ...]:
    r"""One accumulation of the statistics (eqs. 5.4.1–5.4.2):

    .. math:: L \leftarrow \beta L + G G^\top,\qquad R \leftarrow \beta R + G^\top G

    (a vector :math:`g`: :math:`L \leftarrow \beta L + g g^\top` only). ``beta=None`` is the
    plain sum (:math:`\beta = 1`); a number :math:`\beta` gives the exponential moving
    average variant mentioned in §5.4 (without the :math:`1-\beta` factor, which
    Shampoo's direction is invariant to up to a scale). ``stats=None`` starts from 0.
    """
    k = _order("shampoo_statistics", G)
    if k == 1:
        col = xp.reshape(G, (-1, 1))
        new: tuple[Any, ...] = (xp.matmul(col, xp.matrix_transpose(col)),)
    else:
        Gt = xp.matrix_transpose(G)
        new = (xp.matmul(G, Gt), xp.matmul(Gt, G))
    if stats is None:
        return new
    if len(stats) != k:
        raise ShapeError(f"shampoo_statistics: argument 'stats': expected {k} matrices for a "
                         f"parameter of order {k}, got {len(stats)}")
    for i, (S, N) in enumerate(zip(stats, new, strict=True)):
        check_args("shampoo_statistics", xp, {f"stats[{i}]": (S, tuple(N.shape))})
    scale = (lambda S: S) if beta is None else (lambda S: S * beta)
    return tuple(scale(S) + N for S, N in zip(stats, new, strict=True))


def shampoo_direction(xp: Namespace, G: Any, stats: tuple[Any, ...], *,
                      eigh: Eigh | None = None, rtol: Any = None) -> Any:
    r"""The preconditioned direction (eq. 5.4.3):

    .. math:: L^{-1/4}\, G\, R^{-1/4}\quad\text{(matrix)},\qquad L^{-1/2} g\quad\text{(vector:
              full-matrix Adagrad)},

    with the pseudo-inverse roots of :func:`inverse_root` (``eigh`` and ``rtol`` are passed
    to it). ``stats`` is the tuple of :func:`shampoo_statistics` (with :math:`G` already
    accumulated, as in Algorithm 5).
    """
    k = _order("shampoo_direction", G)
    if len(stats) != k:
        raise ShapeError(f"shampoo_direction: argument 'stats': expected {k} matrices for a "
                         f"parameter of order {k}, got {len(stats)}")
    dims = ("m", "n")[:k]
    check_args("shampoo_direction", xp, {"G": (G, dims), **{
        f"stats[{i}]": (S, (dims[i], dims[i])) for i, S in enumerate(stats)}})
    if k == 1:
        L = inverse_root(xp, stats[0], 2, eigh=eigh, rtol=rtol)
        return xp.reshape(xp.matmul(L, xp.reshape(G, (-1, 1))), (-1,))
    L = inverse_root(xp, stats[0], 4, eigh=eigh, rtol=rtol)
    R = inverse_root(xp, stats[1], 4, eigh=eigh, rtol=rtol)
    return xp.matmul(xp.matmul(L, G), R)
