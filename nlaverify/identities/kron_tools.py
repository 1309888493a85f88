r"""Shared tools of the Kronecker families (:mod:`nlaverify.identities.kronecker`,
:mod:`~nlaverify.identities.kfac`, :mod:`~nlaverify.identities.shampoo` and the optimizer and
Newton–Schulz families): the general-size normal form of iterated finite sums over ``Indexed``
entries (:func:`_normal`), the flat index maps of :math:`\otimes`, ``vec`` and ``vec_r``, and the
concrete-size parts (:func:`_concrete`, :func:`_verdict`) with the exact namespace ``XP``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import sympy

from nlaverify.backends import get_namespace
from nlaverify.errors import NlaverifyError
from nlaverify.identities.core import Proof, Step
from nlaverify.symbolic.exact import is_zero, symbol_array

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

