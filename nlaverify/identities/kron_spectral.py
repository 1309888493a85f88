r"""The spectral identities of the ``kronecker`` family (Baggag & Saad §5.3): the determinant
and the eigenpairs of :math:`A\otimes B`, and why damping the factors is not damping the
product. Registered, in catalogue order, by :mod:`nlaverify.identities.kronecker`; the library
is called through its modules (``_kr.kron``, ...), so a test can plant an error and see a
proof fail.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import sympy

from nlaverify.curvature import kfac as _kf
from nlaverify.curvature import kronecker as _kr
from nlaverify.identities.core import Proof, Step
from nlaverify.identities.kron_tools import (
    _A,
    _B,
    _I,
    _J,
    _K,
    _L,
    XP,
    _cayley,
    _concrete,
    _equal,
    _general,
    _m,
    _n,
    _oracle_kron,
    _p,
    _sym,
    _verdict,
)
from nlaverify.symbolic.exact import is_zero, zero_test


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

