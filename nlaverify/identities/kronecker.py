r"""The ``kronecker`` family: Kronecker-product algebra (Baggag & Saad §5.3–5.4), proved with
the running functions of :mod:`nlaverify.curvature.kronecker`; K-FAC and Shampoo continue
in :mod:`nlaverify.identities.kfac`.

Each identity has (where feasible) two parts:

1. **general sizes**: either an entry of either side written with SymPy ``Indexed``
   symbols and finite ``Sum``\ s over symbolic sizes, brought to one normal form
   (:func:`_normal`: products of sums distributed into one iterated sum, the summation
   order sorted, which is Fubini for finite sums) and compared, hypotheses such as
   :math:`\sum_s A_{is}A^{-1}_{sj} = \delta_{ij}` substituted explicitly, the entry of a
   Kronecker product indexed by pairs, :math:`(A\otimes B)_{(i,k),(j,l)} = A_{ij}B_{kl}`;
   or (``kron_vec_outer``, ``kron_transpose``) an entry at symbolic **flat** indices, read
   through the index maps of ``vec``, ``vec_r`` and :math:`\otimes` with ``floor`` and
   ``Mod`` (:func:`_kron_entry`, :func:`_vec_entry`), on each side separately. A step argued
   by hand rather than checked says so ("Argument ... not machine-checked");
2. **the running functions on the exact namespace**, on symbolic matrices of the sizes
   listed, compared with an independent oracle (``sympy.kronecker_product``, ``Matrix.vec``,
   ``Matrix.inv``, ``Matrix.det`` through ``DomainMatrix``, ``Matrix.jacobian`` of a small
   network, a matrix built from a known SVD or eigenbasis, Sylvester's formula), entry by
   entry with the exact zero test.

The library is called through its modules (``_kr.kron``, ``_kf.kfac_factors``, ...), so a
test can plant an error in a library function and see the proof fail.

The shared tools (index forms, concrete-size parts, the exact namespace ``XP``) live in
:mod:`nlaverify.identities.kron_tools` (re-exported here for the families that use them), the
determinant, eigenpair and damping derivations in :mod:`nlaverify.identities.kron_spectral`;
this module registers the whole family, in catalogue order.
"""

from __future__ import annotations

import sympy

from nlaverify.curvature import kfac as _kf
from nlaverify.curvature import kronecker as _kr
from nlaverify.identities.core import Identity, Proof, Step, qualname, register
from nlaverify.identities.kron_spectral import (
    derive_determinant,
    derive_eigenpairs,
    derive_factored_damping,
)
from nlaverify.identities.kron_tools import (  # noqa: F401  (re-exported: kfac, shampoo, ...)
    _A,
    _B,
    _C,
    _D,
    _I,
    _J,
    _K,
    _L,
    _S,
    _T,
    _X,
    SEED_KRON,
    SEED_SHAMPOO,
    XP,
    Part,
    _cayley,
    _col,
    _concrete,
    _entry,
    _equal,
    _general,
    _index_map,
    _kron_entry,
    _m,
    _n,
    _oracle_kron,
    _p,
    _q,
    _sym,
    _vec_entry,
    _vec_rows_entry,
    _verdict,
)

# --------------------------------------------------------------------------- vec, products


def derive_vec_outer() -> Proof:
    u, v = sympy.IndexedBase("u"), sympy.IndexedBase("v")  # m x 1 and n x 1 matrices
    t, one = sympy.Symbol("t", integer=True, positive=True), sympy.Integer(1)

    def outer(i: sympy.Expr, j: sympy.Expr) -> sympy.Expr:  # (u v^T)_{ij} = u_{i1} v_{j1}
        return u[i, 1] * v[j, 1]

    col = _index_map(_vec_entry(outer, _m, t), _kron_entry(_entry(v), _entry(u), _m, one, t, one),
                     r"entry $t$ of $\operatorname{vec}(uv^\top)$ by the column-stacking map "
                     r"($uv^\top$ has $m$ rows) and entry $(t, 1)$ of $v\otimes u$ by the "
                     r"Kronecker index map ($u$ is $m\times 1$).",
                     r"\operatorname{vec}(uv^\top)_t = (v\otimes u)_{t,1}")
    row = _index_map(_vec_rows_entry(outer, _n, t),
                     _kron_entry(_entry(u), _entry(v), _n, one, t, one),
                     r"entry $t$ of $\operatorname{vec}_r(uv^\top)$ by the row-stacking map "
                     r"($uv^\top$ has $n$ columns) and entry $(t, 1)$ of $u\otimes v$ ($v$ is "
                     r"$n\times 1$).", r"\operatorname{vec}_r(uv^\top)_t = (u\otimes v)_{t,1}")

    def check(size: tuple[int, int]) -> bool:
        m, n = size
        uu, vv, X = _sym("u", (m,)), _sym("v", (n,)), _sym("x", (m, n))
        uvT = _col(uu) * _col(vv).T
        mat = sympy.Matrix(X.tolist())
        return (_equal(_kr.vec(XP, uvT), _kr.kron(XP, _col(vv), _col(uu)).reshape(-1))
                and _equal(_kr.vec_rows(XP, uvT), _kr.kron(XP, _col(uu), _col(vv)).reshape(-1))
                and _equal(_kr.vec(XP, X), list(mat.vec()))
                and _equal(_kr.vec_rows(XP, X), list(mat.T.vec()))
                and _equal(_kr.unvec(XP, _kr.vec(XP, X), (m, n)), X)
                and _equal(_kr.unvec_rows(XP, _kr.vec_rows(XP, X), (m, n)), X)
                and _equal(_kr.kron(XP, X, _sym("y", (n, m))), _oracle_kron(X, _sym("y", (n, m)))))

    concrete = _concrete(
        "The running `vec`, `vec_rows`, `unvec`, `unvec_rows` and `kron`: "
        r"$\operatorname{vec}(uv^\top) = v\otimes u$, "
        r"$\operatorname{vec}_r(uv^\top) = u\otimes v$; "
        "`vec` against SymPy's `Matrix.vec()` (column-major), `vec_rows` against `vec` of the "
        "transpose, the inverses round-trip, `kron` against `sympy.kronecker_product`",
        [(1, 1), (1, 3), (2, 3), (3, 2), (3, 3)], check)
    return _verdict(col, row, concrete)


def derive_vec_product() -> Proof:
    lhs = sympy.Sum(sympy.Sum(_A[_I, _K] * _X[_K, _L] * _B[_L, _J], (_L, 1, _p)), (_K, 1, _n))
    col = _general(lhs, sympy.Sum(sympy.Sum(_B[_L, _J] * _A[_I, _K] * _X[_K, _L], (_K, 1, _n)),
                                  (_L, 1, _p)),
                   r"$\operatorname{vec}(AXB)_{(j,i)} = \sum_{k,l} A_{ik}X_{kl}B_{lj}$ and "
                   r"$\bigl((B^\top\otimes A)\operatorname{vec}X\bigr)_{(j,i)} = \sum_{l,k} "
                   r"(B^\top)_{jl}A_{ik}X_{kl}$.")
    row = _general(lhs, sympy.Sum(sympy.Sum(_A[_I, _K] * _B[_L, _J] * _X[_K, _L], (_L, 1, _p)),
                                  (_K, 1, _n)),
                   r"row-major, $\operatorname{vec}_r(AXB)_{(i,j)}$ and "
                   r"$\bigl((A\otimes B^\top)\operatorname{vec}_r X\bigr)_{(i,j)} = \sum_{k,l} "
                   r"A_{ik}(B^\top)_{jl}X_{kl}$.")

    def check(size: tuple[int, int, int, int]) -> bool:
        m, n, p, q = size
        A, X, B, C = _sym("a", (m, n)), _sym("x", (n, p)), _sym("b", (p, q)), _sym("c", (q, p))
        AXB = A @ X @ B
        return (_equal(_kr.vec(XP, AXB), _kr.kron(XP, B.T, A) @ _kr.vec(XP, X))
                and _equal(_kr.vec_rows(XP, AXB), _kr.kron(XP, A, B.T) @ _kr.vec_rows(XP, X))
                and _equal(_kr.vec_rows(XP, _kr.kron_matvec(XP, A, C, X)),
                           _oracle_kron(A, C) @ _kr.vec_rows(XP, X)))

    concrete = _concrete(
        r"The running `vec`, `vec_rows`, `kron` and `kron_matvec` ($A$ is $m\times n$, $X$ is "
        r"$n\times p$, $B$ is $p\times q$, $C$ is $q\times p$; `kron_matvec(A, C, X)` against "
        r"`sympy.kronecker_product(A, C)` times $\operatorname{vec}_r X$), cases $(m, n, p, q)$",
        [(2, 2, 2, 2), (2, 3, 2, 1), (3, 2, 1, 2), (1, 3, 3, 2)], check)
    return _verdict(col, row, concrete)


def derive_mixed_product() -> Proof:
    general = _general(
        sympy.Sum(sympy.Sum(_A[_I, _S] * _B[_K, _T] * _C[_S, _J] * _D[_T, _L], (_T, 1, _q)),
                  (_S, 1, _n)),
        sympy.Sum(_A[_I, _S] * _C[_S, _J], (_S, 1, _n))
        * sympy.Sum(_B[_K, _T] * _D[_T, _L], (_T, 1, _q)),
        r"$\bigl((A\otimes B)(C\otimes D)\bigr)_{(i,k),(j,l)} = \sum_{s,t} A_{is}B_{kt}"
        r"C_{sj}D_{tl}$ and $(AC\otimes BD)_{(i,k),(j,l)} = (AC)_{ij}(BD)_{kl}$.")

    def check(size: tuple[int, ...]) -> bool:
        m, n, r, p, q, s = size
        A, C, B, D = _sym("a", (m, n)), _sym("c", (n, r)), _sym("b", (p, q)), _sym("d", (q, s))
        return _equal(_kr.kron(XP, A, B) @ _kr.kron(XP, C, D), _kr.kron(XP, A @ C, B @ D))

    concrete = _concrete(r"The running `kron` ($A: m\times n$, $C: n\times r$, $B: p\times q$, "
                         r"$D: q\times s$), cases $(m, n, r, p, q, s)$",
                         [(2, 2, 2, 2, 2, 2), (2, 3, 1, 1, 2, 3), (1, 2, 3, 3, 1, 2)], check)
    return _verdict(general, concrete)


def derive_inverse() -> Proof:
    Ai, Bi = sympy.IndexedBase("A^{-1}"), sympy.IndexedBase("B^{-1}")
    lhs = sympy.Sum(sympy.Sum(_A[_I, _S] * _B[_K, _T] * Ai[_S, _J] * Bi[_T, _L], (_T, 1, _p)),
                    (_S, 1, _m))
    left, right = (sympy.Sum(_A[_I, _S] * Ai[_S, _J], (_S, 1, _m)),
                   sympy.Sum(_B[_K, _T] * Bi[_T, _L], (_T, 1, _p)))
    ok, step = _general(lhs, left * right, r"$\bigl((A\otimes B)(A^{-1}\otimes B^{-1})"
                        r"\bigr)_{(i,k),(j,l)} = \sum_{s,t}A_{is}B_{kt}A^{-1}_{sj}B^{-1}_{tl}$ "
                        r"factors into two sums.")
    delta = (left * right).xreplace({left: sympy.KroneckerDelta(_I, _J),
                                     right: sympy.KroneckerDelta(_K, _L)})
    general = (ok and delta == sympy.KroneckerDelta(_I, _J) * sympy.KroneckerDelta(_K, _L), Step(
        step.text + r" With the hypotheses $\sum_s A_{is}A^{-1}_{sj} = \delta_{ij}$, "
        r"$\sum_t B_{kt}B^{-1}_{tl} = \delta_{kl}$ it is $\delta_{ij}\delta_{kl}$, the entry "
        r"$((i,k),(j,l))$ of $I_{mp}$ (pairs are equal iff both components are).",
        r"(A\otimes B)(A^{-1}\otimes B^{-1}) = AA^{-1}\otimes BB^{-1} = I_m\otimes I_p = I_{mp}"))

    def check(size: tuple[int, int]) -> bool:
        m, p = size
        A, B, X = _sym("a", (m, m)), _sym("b", (p, p)), _sym("x", (m, p))
        Z = _kr.kron_solve(XP, A, B, X)
        return _equal(_oracle_kron(A, B) @ _kr.vec_rows(XP, Z), _kr.vec_rows(XP, X))

    concrete = _concrete(
        r"The running `kron_solve(A, B, X)` (two exact LU solves with the factors) is the "
        r"solution: `sympy.kronecker_product(A, B)` times $\operatorname{vec}_r$ of it minus "
        r"$\operatorname{vec}_r X$, for symbolic $A$ ($m\times m$), $B$ ($p\times p$), $X$; "
        "cases $(m, p)$", [(1, 2), (2, 1), (2, 2), (1, 3)], check)
    return _verdict(general, concrete)


def derive_transpose() -> Proof:
    u, v = sympy.symbols("u v", integer=True, positive=True)
    general = _index_map(
        _kron_entry(_entry(_A), _entry(_B), _p, _q, v, u),
        _kron_entry(_entry(_A, True), _entry(_B, True), _q, _p, u, v),
        r"$A$ is $m\times n$, $B$ is $p\times q$. Entry $(u, v)$ of $(A\otimes B)^\top$ is "
        r"entry $(v, u)$ of $A\otimes B$, read through the index map with $B$'s sizes "
        r"$(p, q)$; entry $(u, v)$ of $A^\top\otimes B^\top$ is read through the same map with "
        r"$B^\top$'s sizes $(q, p)$ and the entries $(A^\top)_{ij} = A_{ji}$, "
        r"$(B^\top)_{kl} = B_{lk}$.", r"((A\otimes B)^\top)_{u,v} = (A^\top\otimes B^\top)_{u,v}")

    def check(size: tuple[int, ...]) -> bool:
        m, n, p, q = size
        A, B = _sym("a", (m, n)), _sym("b", (p, q))
        return _equal(_kr.kron(XP, A, B).T, _kr.kron(XP, A.T, B.T))

    return _verdict(general, _concrete("The running `kron`, cases $(m, n, p, q)$",
                                       [(2, 3, 3, 1), (1, 2, 2, 2), (3, 2, 2, 3)], check))


def derive_trace() -> Proof:
    general = _general(sympy.Sum(sympy.Sum(_A[_I, _I] * _B[_K, _K], (_K, 1, _p)), (_I, 1, _m)),
                       sympy.Sum(_A[_I, _I], (_I, 1, _m)) * sympy.Sum(_B[_K, _K], (_K, 1, _p)),
                       r"$\operatorname{tr}(A\otimes B) = \sum_{i,k}(A\otimes B)_{(i,k),(i,k)}"
                       r" = \sum_{i,k}A_{ii}B_{kk}$.")

    def check(size: tuple[int, int]) -> bool:
        m, p = size
        A, B = _sym("a", (m, m)), _sym("b", (p, p))
        t = _kr.trace(XP, _kr.kron(XP, A, B))
        return (_equal(t, _kr.trace(XP, A) * _kr.trace(XP, B))
                and _equal(t, sympy.Matrix(_oracle_kron(A, B).tolist()).trace()))

    return _verdict(general, _concrete(
        "The running `trace` of the running `kron` against the product of the traces and "
        "against SymPy's `Matrix.trace` of `kronecker_product`, cases $(m, p)$",
        [(1, 3), (2, 2), (3, 2)], check))


# --------------------------------------------------------------------------- catalogue

_F = "kronecker"


def _reg(id_: str, title: str, statement: str, seed: str, certifies: tuple, derive) -> None:
    register(Identity(id_, _F, title, statement, seed, tuple(qualname(f) for f in certifies),
                      derive, tags=("closed-form",)))


_reg("kron_vec_outer", "vec of an outer product",
     r"\operatorname{vec}(uv^\top) = v\otimes u,\qquad \operatorname{vec}_r(uv^\top) = u\otimes v",
     SEED_KRON, (_kr.vec, _kr.vec_rows, _kr.unvec, _kr.unvec_rows, _kr.kron), derive_vec_outer)
_reg("kron_vec_product", "vec of a matrix product",
     r"\operatorname{vec}(AXB) = (B^\top\otimes A)\operatorname{vec}X,\qquad "
     r"\operatorname{vec}_r(AXB) = (A\otimes B^\top)\operatorname{vec}_r X",
     SEED_KRON, (_kr.vec, _kr.vec_rows, _kr.kron, _kr.kron_matvec), derive_vec_product)
_reg("kron_mixed_product", "Mixed-product rule", r"(A\otimes B)(C\otimes D) = AC\otimes BD",
     SEED_KRON, (_kr.kron,), derive_mixed_product)
_reg("kron_inverse", "Inverse of a Kronecker product",
     r"(A\otimes B)^{-1} = A^{-1}\otimes B^{-1},\qquad (A\otimes B)^{-1}\operatorname{vec}_r X "
     r"= \operatorname{vec}_r(A^{-1}XB^{-\top})", SEED_KRON, (_kr.kron_solve, _kr.solve),
     derive_inverse)
_reg("kron_transpose", "Transpose of a Kronecker product",
     r"(A\otimes B)^\top = A^\top\otimes B^\top", SEED_KRON, (_kr.kron,), derive_transpose)
_reg("kron_trace", "Trace of a Kronecker product",
     r"\operatorname{tr}(A\otimes B) = \operatorname{tr}A\,\operatorname{tr}B", SEED_KRON,
     (_kr.kron, _kr.trace), derive_trace)
_reg("kron_determinant", "Determinant of a Kronecker product",
     r"\det(A_n\otimes B_m) = \det(A)^m\det(B)^n\quad(\text{exact for the sizes } n + m "
     r"\le 5\text{ by machine; general } n, m \text{ by a Schur argument})", SEED_KRON,
     (_kr.kron,), derive_determinant)
_reg("kron_eigenpairs", "Eigenpairs of a Kronecker product",
     r"(A\otimes B)(x_i\otimes y_j) = \lambda_i\mu_j\,(x_i\otimes y_j)", SEED_KRON,
     (_kr.kron_eig_from_factors, _kr.kron_eigh, _kr.symmetric_eigh), derive_eigenpairs)
_reg("kron_factored_damping", "Damping the factors is not damping the product",
     r"(A + \pi\sqrt\lambda I)\otimes(B + \tfrac{\sqrt\lambda}{\pi}I) = A\otimes B + \lambda I"
     r" + \sqrt\lambda\,(\pi I\otimes B + \pi^{-1}A\otimes I) \ne A\otimes B + \lambda I,"
     r"\quad (A_d\otimes B_d)^{-1}\operatorname{vec}_r X = \operatorname{vec}_r"
     r"(A_d^{-1}XB_d^{-\top})",
     "Baggag & Saad §5.3; Martens & Grosse 2015 §6.3",
     (_kr.damped_factors, _kr.trace_norm_pi, _kr.damped_kron_solve, _kf.kfac_precondition),
     derive_factored_damping)
