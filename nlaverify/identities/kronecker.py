r"""The ``kronecker`` family: Kronecker-product algebra (Baggag & Saad §5.3–5.4), proved with
the running functions of :mod:`nlaverify.curvature.kronecker`; K-FAC and Shampoo continue
in :mod:`nlaverify.identities.kfac`.

Each identity has (where feasible) two parts:

1. **general sizes, index form**: an entry of either side written with SymPy ``Indexed``
   symbols and finite ``Sum``\ s over symbolic sizes, brought to one normal form
   (:func:`_normal`: products of sums distributed into one iterated sum, the summation
   order sorted, which is Fubini for finite sums) and compared; hypotheses such as
   :math:`\sum_s A_{is}A^{-1}_{sj} = \delta_{ij}` are substituted explicitly. The
   entry of a Kronecker product is indexed by pairs, :math:`(A\otimes B)_{(i,k),(j,l)} =
   A_{ij}B_{kl}`, the pair :math:`(i,k)` standing for the flat index :math:`(i-1)p+k`;
2. **the running functions on the exact namespace**, on symbolic matrices of several sizes,
   compared with an independent oracle (``sympy.kronecker_product``, ``Matrix.vec``,
   ``Matrix.det`` through ``DomainMatrix``, ``Matrix.jacobian`` of a small network, a
   matrix built from a known SVD or eigenbasis), entry by entry with the exact zero test.

The library is called through its modules (``_kr.kron``, ``_kf.kfac_factors``, ...), so a
test can plant an error in a library function and see the proof fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import sympy

from nlaverify.backends import get_namespace
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
    u, v = sympy.IndexedBase("u"), sympy.IndexedBase("v")
    general = _general(u[_I] * v[_J], v[_J] * u[_I],
                       r"$\operatorname{vec}(uv^\top)_{(j,i)} = (uv^\top)_{ij} = u_i v_j$ and "
                       r"$(v\otimes u)_{(j,i)} = v_j u_i$.")

    def check(size: tuple[int, int]) -> bool:
        m, n = size
        uu, vv, X = _sym("u", (m,)), _sym("v", (n,)), _sym("x", (m, n))
        outer = _col(uu) * _col(vv).T
        mat = sympy.Matrix(X.tolist())
        return (_equal(_kr.vec(XP, outer), _kr.kron(XP, _col(vv), _col(uu)).reshape(-1))
                and _equal(_kr.vec_rows(XP, outer), _kr.kron(XP, _col(uu), _col(vv)).reshape(-1))
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
    return _verdict(general, concrete)


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
    general = _general(_A[_J, _I] * _B[_L, _K], _A[_J, _I] * _B[_L, _K],
                       r"$((A\otimes B)^\top)_{(i,k),(j,l)} = (A\otimes B)_{(j,l),(i,k)} = "
                       r"A_{ji}B_{lk} = (A^\top)_{ij}(B^\top)_{kl}$.")

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
        r"The running `kron` of fully symbolic $A$ ($n\times n$), $B$ ($m\times m$): its "
        r"determinant (SymPy's fraction-free `DomainMatrix.det`) minus "
        r"$\det(A)^m\det(B)^n$ is the zero polynomial, cases $(n, m)$",
        [(2, 2), (2, 3), (3, 2)], check)

    def triangular(size: tuple[int, int]) -> bool:
        n, m = size
        T, U = np.triu(_sym("t", (n, n))), np.triu(_sym("u", (m, m)))
        K = _kr.kron(XP, T, U)
        return (_equal(np.tril(K, -1), np.zeros_like(K)) and _equal(
            np.diag(K), [T[i, i] * U[k, k] for i in range(n) for k in range(m)]))

    tri = _concrete(r"Upper triangular factors give an upper triangular `kron` with diagonal "
                    r"$T_{ii}U_{kk}$ in the order $(i,k)$ (entry $T_{ij}U_{kl}$ vanishes when "
                    r"$i > j$ or $k > l$, which covers every $(i,k) > (j,l)$ "
                    r"lexicographically), cases $(n, m)$", [(2, 3), (3, 2)], triangular)
    lam, mu = sympy.IndexedBase("lambda"), sympy.IndexedBase("mu")
    prod = sympy.Product(sympy.Product(lam[_I] * mu[_K], (_K, 1, _m)), (_I, 1, _n)).doit()
    # the one rule applied by hand: a product of constant integer powers is a power of the product
    prod = prod.replace(lambda e: isinstance(e, sympy.Product) and e.function.is_Pow
                        and not e.function.exp.has(*e.variables),
                        lambda e: sympy.Product(e.function.base, *e.limits) ** e.function.exp)
    want = (sympy.Product(lam[_I], (_I, 1, _n)) ** _m * sympy.Product(mu[_K], (_K, 1, _m)) ** _n)
    general = (sympy.expand(prod - want) == 0, Step(
        r"General sizes: by Schur, $A = P T P^{-1}$ and $B = Q U Q^{-1}$ over $\mathbb C$ with "
        r"$T$, $U$ upper triangular (diagonals: the eigenvalues $\lambda_i$, $\mu_k$); the "
        r"mixed-product and inverse rules (identities `kron_mixed_product`, `kron_inverse`) "
        r"give $A\otimes B = (P\otimes Q)(T\otimes U)(P\otimes Q)^{-1}$, and $T\otimes U$ is "
        r"upper triangular with diagonal $\lambda_i\mu_k$ (checked below). So "
        r"$\det(A\otimes B) = \prod_{i,k}\lambda_i\mu_k$, which SymPy evaluates, with "
        r"$\prod_i x_i^m = (\prod_i x_i)^m$, to",
        sympy.latex(sympy.Eq(sympy.Product(lam[_I] * mu[_K], (_K, 1, _m), (_I, 1, _n)), want))
        + r" = \det(A)^m\det(B)^n."))
    return _verdict(concrete, tri, general)


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

    def symmetric(size: tuple[int, int]) -> bool:
        m, p = size
        QA, QB = _cayley(m), _cayley(p, 1)
        A = QA @ np.diag(_sym("lambda", (m,))) @ QA.T
        B = QB @ np.diag(_sym("mu", (p,))) @ QB.T
        w, V = _kr.kron_eigh(XP, A, B)
        return (_equal(_oracle_kron(A, B) @ V, V * w.reshape(1, -1))
                and _equal(V.T @ V, np.eye(m * p, dtype=int)))

    return _verdict(general, _concrete(
        r"The running `kron_eig_from_factors` on $A = X\operatorname{diag}(\lambda)X^{-1}$, "
        r"$B = Y\operatorname{diag}(\mu)Y^{-1}$ (rational non-orthogonal $X$, $Y$; symbolic "
        r"$\lambda$, $\mu$): `kronecker_product(A, B)` $V = V\operatorname{diag}(w)$ with $V$ "
        "nonsingular, cases $(m, p)$", [(2, 2), (2, 3)], general_pairs), _concrete(
        r"The running `kron_eigh` (exact `symmetric_eigh` of each factor) on symmetric "
        r"$A = Q_A\operatorname{diag}(\lambda)Q_A^\top$, $B$ alike: "
        r"$(A\otimes B)V = V\operatorname{diag}(w)$ and $V^\top V = I$, cases $(m, p)$",
        [(2, 2), (3, 2)], symmetric))


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
    return _verdict(expand, counter, default)


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
     r"\det(A_n\otimes B_m) = \det(A)^m\det(B)^n", SEED_KRON, (_kr.kron,), derive_determinant)
_reg("kron_eigenpairs", "Eigenpairs of a Kronecker product",
     r"(A\otimes B)(x_i\otimes y_j) = \lambda_i\mu_j\,(x_i\otimes y_j)", SEED_KRON,
     (_kr.kron_eig_from_factors, _kr.kron_eigh, _kr.symmetric_eigh), derive_eigenpairs)
_reg("kron_factored_damping", "Damping the factors is not damping the product",
     r"(A + \pi\sqrt\lambda I)\otimes(B + \tfrac{\sqrt\lambda}{\pi}I) = A\otimes B + \lambda I"
     r" + \sqrt\lambda\,(\pi I\otimes B + \pi^{-1}A\otimes I) \ne A\otimes B + \lambda I",
     "Baggag & Saad §5.3; Martens & Grosse 2015 §6.3",
     (_kr.damped_factors, _kr.trace_norm_pi, _kr.damped_kron_solve), derive_factored_damping)
