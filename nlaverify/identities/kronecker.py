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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import sympy

from nlaverify.backends import get_namespace
from nlaverify.curvature import kfac as _kf
from nlaverify.curvature import kronecker as _kr
from nlaverify.errors import NlaverifyError
from nlaverify.identities.core import Identity, Proof, Step, qualname, register
from nlaverify.symbolic.exact import is_zero, symbol_array, zero_test

XP = get_namespace("sympy")
SEED_KRON = "Baggag & Saad §5.3"
SEED_SHAMPOO = "Baggag & Saad §5.4, eqs. 5.4.1–5.4.3, Algorithm 5"
Part = tuple[bool, Step]

# --------------------------------------------------------------------------- helpers

_I, _J, _K, _L = sympy.symbols("i j k l", integer=True, positive=True)
_S, _T = sympy.symbols("s t", integer=True, positive=True)
_n, _m, _p, _q = sympy.symbols("n m p q", integer=True, positive=True)
_A, _B, _C, _D, _X = (sympy.IndexedBase(c) for c in "ABCDX")


def _flat(e: sympy.Expr) -> tuple[sympy.Expr, list[tuple]]:
    """``(body, limits)`` of a product of finite sums: :math:`\\prod_a \\sum_{s_a} f_a =
    \\sum_{s_1}\\cdots\\sum_{s_r} \\prod_a f_a` (distinct dummies)."""
    if isinstance(e, sympy.Sum):
        body, lims = _flat(e.function)
        return body, lims + list(e.limits)
    if isinstance(e, sympy.Mul):
        body, lims = sympy.Integer(1), []
        for f in e.args:
            b, lim = _flat(f)
            body, lims = body * b, lims + lim
        return body, lims
    return e, []


def _normal(e: sympy.Expr) -> sympy.Expr:
    """One normal form for sums of products of finite sums with constant limits: each term
    as one iterated sum of an expanded monomial, its limits sorted by dummy name."""
    out = sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(e)):
        body, lims = _flat(term)
        if len({lim[0] for lim in lims}) != len(lims):
            raise ValueError("_normal: a dummy index is used twice")
        for mono in sympy.Add.make_args(sympy.expand(body)):
            kept = [lim for lim in lims if mono.has(lim[0])]
            for lim in lims:
                if not mono.has(lim[0]):
                    mono = mono * (lim[2] - lim[1] + 1)
            coeff, mono = mono.as_coeff_Mul()
            out += coeff * (sympy.Sum(mono, *sorted(kept, key=lambda lim: str(lim[0])))
                            if kept else mono)
    return out


def _general(lhs: sympy.Expr, rhs: sympy.Expr, text: str) -> Part:
    ok = _normal(lhs) - _normal(rhs) == 0
    return ok, Step(f"General sizes, index form: {text} " + (
        "Both sides have the same normal form (one iterated finite sum of the same monomial)."
        if ok else "The normal forms differ."), f"{sympy.latex(lhs)} = {sympy.latex(rhs)}")


def _entry(M: sympy.IndexedBase, transposed: bool = False) -> Callable[..., sympy.Expr]:
    """The entry function :math:`(i, j) \\mapsto M_{ij}` (of :math:`M^\\top` if
    ``transposed``)."""
    return (lambda i, j: M[j, i]) if transposed else (lambda i, j: M[i, j])


def _kron_entry(A: Callable[..., sympy.Expr], B: Callable[..., sympy.Expr], p: sympy.Expr,
                q: sympy.Expr, u: sympy.Expr, v: sympy.Expr) -> sympy.Expr:
    r"""Entry :math:`(u, v)` (1-based flat indices) of :math:`A\otimes B`, :math:`B` of size
    :math:`p\times q`, from the index map :math:`(A\otimes B)_{(i-1)p+k,(j-1)q+l} =
    A_{ij}B_{kl}` read backwards: :math:`i = \lfloor (u-1)/p\rfloor + 1`,
    :math:`k = ((u-1) \bmod p) + 1` (and :math:`j`, :math:`l` from :math:`v` and :math:`q`)."""
    return (A(sympy.floor((u - 1) / p) + 1, sympy.floor((v - 1) / q) + 1)
            * B(sympy.Mod(u - 1, p) + 1, sympy.Mod(v - 1, q) + 1))


def _vec_entry(X: Callable[..., sympy.Expr], m: sympy.Expr, t: sympy.Expr) -> sympy.Expr:
    r"""Entry :math:`t` of :math:`\operatorname{vec}(X)`, :math:`X` with :math:`m` rows:
    :math:`X_{((t-1) \bmod m)+1,\ \lfloor (t-1)/m\rfloor+1}` (columns stacked)."""
    return X(sympy.Mod(t - 1, m) + 1, sympy.floor((t - 1) / m) + 1)


def _vec_rows_entry(X: Callable[..., sympy.Expr], n: sympy.Expr, t: sympy.Expr) -> sympy.Expr:
    r"""Entry :math:`t` of :math:`\operatorname{vec}_r(X)`, :math:`X` with :math:`n` columns:
    :math:`X_{\lfloor (t-1)/n\rfloor+1,\ ((t-1) \bmod n)+1}` (rows stacked)."""
    return X(sympy.floor((t - 1) / n) + 1, sympy.Mod(t - 1, n) + 1)


def _index_map(lhs: sympy.Expr, rhs: sympy.Expr, text: str, shown: str) -> Part:
    ok = sympy.expand(lhs - rhs) == 0
    return ok, Step(f"General sizes, flat indices: {text} " + (
        "The two entries, each obtained from the index maps, are the same expression:"
        if ok else "The two entries differ:"),
        f"{shown} = {sympy.latex(lhs)}" if ok else
        f"{sympy.latex(lhs)} \\ne {sympy.latex(rhs)}")


def _sym(name: str, shape: tuple[int, ...]) -> np.ndarray:
    return symbol_array(name, shape)


def _oracle_kron(A: Any, B: Any) -> np.ndarray:
    """SymPy's own ``kronecker_product`` (the independent oracle)."""
    K = sympy.kronecker_product(sympy.Matrix(np.asarray(A).tolist()),
                                sympy.Matrix(np.asarray(B).tolist()))
    return np.array(K.tolist(), dtype=object)


def _equal(a: Any, b: Any) -> bool:
    a, b = np.asarray(a, dtype=object), np.asarray(b, dtype=object)
    return a.shape == b.shape and all(is_zero(v) for v in np.asarray(a - b, dtype=object).flat)


def _concrete(what: str, cases: Iterable[Any], check: Callable[[Any], bool]) -> Part:
    cases = list(cases)
    for case in cases:
        try:
            ok = check(case)
        except (NlaverifyError, ValueError, TypeError, IndexError) as exc:  # a planted error
            # may break the shapes: that is a failure of the identity, not a crash
            return False, Step(f"{what}: raised at {case}: {exc}")
        if not ok:
            return False, Step(f"{what}: fails at {case}.")
    return True, Step(f"{what}: the difference is exactly $0$ in every entry, for "
                      f"{', '.join(map(str, cases))}.")


def _verdict(*parts: Part) -> Proof:
    ok = all(p[0] for p in parts)
    return Proof("proved" if ok else "failed", tuple(p[1] for p in parts))


def _col(v: np.ndarray) -> np.ndarray:
    return np.asarray(v, dtype=object).reshape(-1, 1)


def _cayley(n: int, shift: int = 0) -> np.ndarray:
    r"""A rational orthogonal matrix :math:`(I - S)(I + S)^{-1}`, :math:`S` a rational skew
    matrix (the Cayley transform): exact orthogonal factors for exact SVDs."""
    S = sympy.zeros(n, n)
    for a in range(n):
        for b in range(a + 1, n):
            S[a, b] = sympy.Rational((-1) ** (a + b + shift) * (a + 2 * b + shift + 1), 5)
            S[b, a] = -S[a, b]
    Q = (sympy.eye(n) - S) * (sympy.eye(n) + S).inv()
    assert Q.T * Q == sympy.eye(n)
    return np.array(Q.tolist(), dtype=object)


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


def derive_determinant() -> Proof:
    def check(size: tuple[int, int]) -> bool:
        n, m = size
        A, B = _sym("a", (n, n)), _sym("b", (m, m))
        gens = [*A.flat, *B.flat]
        K = sympy.Matrix(_kr.kron(XP, A, B).tolist()).to_DM().det()
        dA, dB = sympy.Matrix(A.tolist()).det(), sympy.Matrix(B.tolist()).det()
        return (sympy.Poly(K.as_expr() if hasattr(K, "as_expr") else K, *gens)
                - sympy.Poly(dA**m * dB**n, *gens)).is_zero

    concrete = _concrete(
        r"Checked by machine, for the sizes listed only: the running `kron` of fully symbolic "
        r"$A$ ($n\times n$), $B$ ($m\times m$); its determinant (SymPy's fraction-free "
        r"`DomainMatrix.det`) minus $\det(A)^m\det(B)^n$ is the zero polynomial, cases $(n, m)$",
        _DET_SIZES, check)

    def triangular(size: tuple[int, int]) -> bool:
        n, m = size
        T, U = np.triu(_sym("t", (n, n))), np.triu(_sym("u", (m, m)))
        K = _kr.kron(XP, T, U)
        return (_equal(np.tril(K, -1), np.zeros_like(K)) and _equal(
            np.diag(K), [T[i, i] * U[k, k] for i in range(n) for k in range(m)]))

    tri = _concrete(r"Checked by machine, for the sizes listed only: upper triangular $T$, $U$ "
                    r"give an upper triangular running `kron` with diagonal $T_{ii}U_{kk}$ in "
                    r"the order $(i,k)$, cases $(n, m)$", [*_DET_SIZES, (3, 3)], triangular)
    lam, mu = sympy.IndexedBase("lambda"), sympy.IndexedBase("mu")
    prod = sympy.Product(sympy.Product(lam[_I] * mu[_K], (_K, 1, _m)), (_I, 1, _n)).doit()
    # the one rule applied by hand: a product of constant integer powers is a power of the product
    prod = prod.replace(lambda e: isinstance(e, sympy.Product) and e.function.is_Pow
                        and not e.function.exp.has(*e.variables),
                        lambda e: sympy.Product(e.function.base, *e.limits) ** e.function.exp)
    want = (sympy.Product(lam[_I], (_I, 1, _n)) ** _m * sympy.Product(mu[_K], (_K, 1, _m)) ** _n)
    general = (sympy.expand(prod - want) == 0, Step(
        r"Argument for general sizes $n$, $m$ (by hand, not machine-checked, except its last "
        r"equality): by Schur, $A = P T P^{-1}$ and $B = Q U Q^{-1}$ over $\mathbb C$ with "
        r"$T$, $U$ upper triangular (diagonals: the eigenvalues $\lambda_i$, $\mu_k$); the "
        r"mixed-product and inverse rules (identities `kron_mixed_product`, `kron_inverse`, "
        r"whose index-form parts hold for general sizes) give $A\otimes B = (P\otimes Q)"
        r"(T\otimes U)(P\otimes Q)^{-1}$. $T\otimes U$ is upper triangular with diagonal "
        r"$\lambda_i\mu_k$: its entry in row $(i-1)m+k$ and column $(j-1)m+l$ "
        r"($1\le k, l\le m$) is $T_{ij}U_{kl}$, and row $>$ column forces $i > j$, or $i = j$ "
        r"and $k > l$, so $T_{ij} = 0$ or $U_{kl} = 0$ (the step checked by machine above "
        r"only for the sizes listed). So $\det(A\otimes B) = \prod_{i,k}\lambda_i\mu_k$, "
        r"which SymPy evaluates for symbolic $n$, $m$, with $\prod_i x_i^m = "
        r"(\prod_i x_i)^m$ (machine-checked), to",
        sympy.latex(sympy.Eq(sympy.Product(lam[_I] * mu[_K], (_K, 1, _m), (_I, 1, _n)), want))
        + r" = \det(A)^m\det(B)^n."))
    return _verdict(concrete, tri, general)


_DET_SIZES = [(1, 3), (3, 1), (2, 2), (2, 3), (3, 2)]


def _diag(n: int) -> np.ndarray:
    return np.diag([sympy.Rational(k + 1, 3) for k in range(n)]).astype(object)


def _inv(X: np.ndarray) -> np.ndarray:
    return np.array(sympy.Matrix(X.tolist()).inv().tolist(), dtype=object)


def derive_eigenpairs() -> Proof:
    x, y, lam, mu = (sympy.IndexedBase(c) for c in ("x", "y", "lambda", "mu"))
    lhs = sympy.Sum(sympy.Sum(_A[_I, _J] * _B[_K, _L] * x[_J] * y[_L], (_L, 1, _p)), (_J, 1, _m))
    left, right = sympy.Sum(_A[_I, _J] * x[_J], (_J, 1, _m)), sympy.Sum(_B[_K, _L] * y[_L],
                                                                        (_L, 1, _p))
    ok, step = _general(lhs, left * right, r"$\bigl((A\otimes B)(x\otimes y)\bigr)_{(i,k)} = "
                        r"\sum_{j,l}A_{ij}B_{kl}x_jy_l$ factors into two sums.")
    used = (left * right).xreplace({left: lam * x[_I], right: mu * y[_K]})
    general = (ok and used == lam * mu * x[_I] * y[_K], Step(
        step.text + r" With $Ax = \lambda x$ and $By = \mu y$ it is $\lambda\mu\,x_iy_k = "
        r"\lambda\mu\,(x\otimes y)_{(i,k)}$.",
        r"(A\otimes B)(x\otimes y) = \lambda\mu\,(x\otimes y)"))

    def general_pairs(size: tuple[int, int]) -> bool:
        m, p = size
        X, Y = _cayley(m) + _diag(m), _cayley(p, 1) + 2 * _diag(p)
        la, mu_ = _sym("lambda", (m,)), _sym("mu", (p,))
        A = X @ np.diag(la) @ _inv(X)
        B = Y @ np.diag(mu_) @ _inv(Y)
        w, V = _kr.kron_eig_from_factors(XP, (la, X), (mu_, Y))
        full = sympy.Matrix(V.tolist()).det() != 0
        return full and _equal(_oracle_kron(A, B) @ V, V * w.reshape(1, -1))

    def symmetric(case: str) -> bool:
        A, B = _SYMMETRIC[case]()
        w, V = _kr.kron_eigh(XP, A, B)
        n = A.shape[0] * B.shape[0]
        return (_equal(_oracle_kron(A, B) @ V, V * w.reshape(1, -1))
                and _equal(V.T @ V, np.eye(n, dtype=int)))

    return _verdict(general, _concrete(
        r"The running `kron_eig_from_factors` on $A = X\operatorname{diag}(\lambda)X^{-1}$, "
        r"$B = Y\operatorname{diag}(\mu)Y^{-1}$ (rational non-orthogonal $X$, $Y$; symbolic "
        r"$\lambda$, $\mu$): `kronecker_product(A, B)` $V = V\operatorname{diag}(w)$ with $V$ "
        "nonsingular, cases $(m, p)$", [(2, 2), (2, 3)], general_pairs), _concrete(
        r"The running `kron_eigh` (exact `symmetric_eigh` of each factor: SymPy's eigenvectors, "
        r"Gram–Schmidt inside each eigenspace) on symmetric $A = Q_A\operatorname{diag}(\lambda)"
        r"Q_A^\top$, $B = Q_B\operatorname{diag}(\mu)Q_B^\top$ ($Q$ rational Cayley orthogonal, "
        r"$\lambda$, $\mu$ positive symbols, some of them repeated, so that an eigenspace has "
        r"dimension 2 and per-vector normalization without Gram–Schmidt would not give an "
        r"orthonormal basis) and on $A = I_3 + \mathbb 1\mathbb 1^\top$ (eigenvalues $4, 1, 1$): "
        r"$(A\otimes B)V = V\operatorname{diag}(w)$ and $V^\top V = I$, cases "
        r"(eigenvalues of $A$; of $B$)", list(_SYMMETRIC), symmetric))


def _spectral(Q: np.ndarray, values: list) -> np.ndarray:
    return Q @ np.diag(values) @ Q.T


_l1, _l2, _m1, _m2 = sympy.symbols("lambda_1 lambda_2 mu_1 mu_2", positive=True)
#: symmetric factors with known spectra for ``kron_eigenpairs``
_SYMMETRIC: dict[str, Callable[[], tuple[np.ndarray, np.ndarray]]] = {
    r"$(\lambda_1, \lambda_2;\ \mu_1, \mu_2)$": lambda: (
        _spectral(_cayley(2), [_l1, _l2]), _spectral(_cayley(2, 1), [_m1, _m2])),
    r"$(\lambda_1, \lambda_1, \lambda_2;\ \mu_1, \mu_2)$": lambda: (
        _spectral(_cayley(3), [_l1, _l1, _l2]), _spectral(_cayley(2, 1), [_m1, _m2])),
    r"$(4, 1, 1;\ \mu_1, \mu_1, \mu_2)$": lambda: (
        np.eye(3, dtype=int).astype(object) + 1, _spectral(_cayley(3, 1), [_m1, _m1, _m2])),
}


def _rational_pair(m: int, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Fixed rational factors with a trace ratio that is not a square (so the default
    :math:`\\pi` is irrational)."""
    A = [[sympy.Rational(i * m + j + 2 if i == j else i + j + 1, 3) for j in range(m)]
         for i in range(m)]
    B = [[sympy.Rational(5 if i == j else 1, 2) for j in range(p)] for i in range(p)]
    return np.array(A, dtype=object), np.array(B, dtype=object)


def _damped_solve_oracle(A: np.ndarray, B: np.ndarray, X: np.ndarray, lam: sympy.Expr,
                         pi: sympy.Expr | None) -> np.ndarray:
    r""":math:`(A_d\otimes B_d)^{-1}\operatorname{vec}_r(X)` from SymPy alone: the damped
    factors :math:`A_d = A + \pi\sqrt\lambda I`, :math:`B_d = B + \frac{\sqrt\lambda}{\pi}I`
    (:math:`\pi` by Martens & Grosse's trace formula when ``None``), ``Matrix.inv`` of each,
    ``sympy.kronecker_product`` of the inverses times :math:`\operatorname{vec}_r(X)`."""
    m, p = A.shape[0], B.shape[0]
    Am, Bm = sympy.Matrix(A.tolist()), sympy.Matrix(B.tolist())
    if pi is None:
        pi = sympy.sqrt((Am.trace() / m) / (Bm.trace() / p))
    root = sympy.sqrt(lam)
    inv = sympy.kronecker_product((Am + pi * root * sympy.eye(m)).inv(),
                                  (Bm + root / pi * sympy.eye(p)).inv())
    out = inv * sympy.Matrix(list(np.asarray(X).reshape(-1)))
    return np.array(list(out), dtype=object).reshape(m, p)


def derive_factored_damping() -> Proof:
    lam, pi = sympy.Symbol("lambda", positive=True), sympy.Symbol("pi", positive=True)

    def expansion(size: tuple[int, int]) -> bool:
        m, p = size
        A, B = _sym("a", (m, m)), _sym("b", (p, p))
        Ad, Bd = _kr.damped_factors(XP, A, B, lam, pi=pi)
        al, be = pi * sympy.sqrt(lam), sympy.sqrt(lam) / pi
        Im, Ip = np.eye(m, dtype=int).astype(object), np.eye(p, dtype=int).astype(object)
        want = (_oracle_kron(A, B) + al * _oracle_kron(Im, B) + be * _oracle_kron(A, Ip)
                + al * be * np.eye(m * p, dtype=int))
        return _equal(_oracle_kron(Ad, Bd), want)

    expand = _concrete(
        r"The running `damped_factors` with symbolic $A$, $B$, $\lambda$, $\pi$: "
        r"`kronecker_product` of the damped factors minus $A\otimes B + \alpha I\otimes B + "
        r"\beta A\otimes I + \alpha\beta I$ ($\alpha = \pi\sqrt\lambda$, "
        r"$\beta = \sqrt\lambda/\pi$, so $\alpha\beta = \lambda$), cases $(m, p)$",
        [(1, 2), (2, 2), (2, 3)], expansion)
    # lambda = rho^2 (rho > 0 symbolic): every lambda > 0, and sqrt(lambda) = rho stays a
    # rational function, which keeps the exact zero test fast
    rho = sympy.Symbol("rho", positive=True)

    def solve(case: tuple[int, int, str]) -> bool:
        m, p, kind = case
        A, B = (_sym("a", (m, m)), _sym("b", (p, p))) if kind == "symbolic" else \
            _rational_pair(m, p)
        X, given = _sym("x", (m, p)), (pi if kind == "symbolic" else None)
        Z = _kr.damped_kron_solve(XP, A, B, X, rho**2, pi=given)
        ok = _equal(Z, _damped_solve_oracle(A, B, X, rho**2, given))
        if ok and m * p <= 2:  # the K-FAC step is the same solve, with the layer's factors
            ok = _equal(_kf.kfac_precondition(XP, A, B, X, rho**2, pi=given), Z)
        return ok

    solves = _concrete(
        r"The running `damped_kron_solve(A, B, X, lam, pi)` against SymPy alone: "
        r"$\bigl((A + \pi\sqrt\lambda I)^{-1}\otimes(B + \tfrac{\sqrt\lambda}{\pi}I)^{-1}\bigr)"
        r"\operatorname{vec}_r(X)$ (`Matrix.inv` of each damped factor, "
        r"`sympy.kronecker_product`; the inverse rule is identity `kron_inverse`), for "
        r"$\lambda = \rho^2$ with $\rho > 0$, symbolic $X$, and either symbolic $A$, $B$, $\pi$ "
        r"or fixed rational $A$, $B$ with the default $\pi$ (the oracle computing "
        r"$\pi = \sqrt{(\operatorname{tr}A/m)/(\operatorname{tr}B/p)}$ itself; here "
        r"$\pi = \sqrt{7/15}$); `kfac_precondition` equals it on the two smallest cases. "
        "Cases $(m, p, \\text{kind})$",
        [(1, 2, "symbolic"), (2, 1, "symbolic"), (2, 2, "symbolic"), (2, 2, "default pi")],
        solve)
    one = np.eye(2, dtype=int).astype(object)
    Ad, Bd = _kr.damped_factors(XP, XP.asarray(one), XP.asarray(one), 1, pi=1)
    diff = _oracle_kron(Ad, Bd) - (_oracle_kron(one, one) + np.eye(4, dtype=int))
    counter = (bool(diff[0, 0] != 0 and diff[0, 0].is_Rational), Step(
        r"Not $A\otimes B + \lambda I$: at $A = B = I_2$, $\lambda = \pi = 1$ the running "
        r"`damped_factors` give $(2I)\otimes(2I) = 4I_4$, while $A\otimes B + \lambda I = 2I_4$: "
        f"the difference is ${sympy.latex(sympy.Matrix(diff.tolist()))}$, exactly nonzero. In "
        r"general the extra term is $\sqrt\lambda\,(\pi I\otimes B + \pi^{-1}A\otimes I)$."))
    A, B, x = _sym("a", (2, 2)), _sym("b", (3, 3)), pi
    extra = sympy.Matrix((x * _oracle_kron(np.eye(2, dtype=int), B)
                          + _oracle_kron(A, np.eye(3, dtype=int)) / x).tolist()).trace()
    chosen = np.asarray(_kr.trace_norm_pi(XP, A, B), dtype=object)[()]
    first = zero_test(sympy.diff(extra, x).subs(x, chosen))
    second = sympy.diff(extra, x, 2)
    trA = sum(A[i, i] for i in range(2))
    default = (first.proved and is_zero(second - 2 * 3 * trA / x**3), Step(
        r"The default $\pi$ of the running `trace_norm_pi` ($A$: $2\times 2$, $B$: $3\times 3$ "
        r"symbolic) is a stationary point of the trace of the extra term, "
        r"$\frac{d}{d\pi}\operatorname{tr}(\pi I\otimes B + \pi^{-1}A\otimes I) = 0$ "
        f"({first.reason}), and the second derivative is "
        f"${sympy.latex(second)} > 0$ for PSD factors (positive traces): the trace-norm "
        r"minimizer of Martens & Grosse (2015, §6.3).",
        r"\pi = " + sympy.latex(chosen)))
    return _verdict(expand, solves, counter, default)


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
