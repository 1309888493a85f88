r"""Shared tools of the ``attention`` family (:mod:`nlaverify.identities.attention`): the
small SymPy-matrix helpers, the canonical form of sums of exponentials, and the exact
expectation :func:`expect` over Gaussian rows and uniform phases (the two 1-D integrals every
random-feature identity rests on).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import sympy

from nlaverify.identities._expectations import _Checks, _obj
from nlaverify.identities.core import Step
from nlaverify.symbolic.exact import symbol_array

S28, S43, S44 = "Baggag & Saad §2.8", "Baggag & Saad §4.3", "Baggag & Saad §4.4"
PERFORMER = "Choromanski et al. 2021 (Performers), Lemma 2 and Theorem 2"
_KINDS = ("trig", "positive", "hyperbolic")

# --------------------------------------------------------------------------- helpers


def _sym(name: str, shape: tuple[int, ...], **assume: Any) -> np.ndarray:
    return symbol_array(name, shape, **assume)


def _M(a: Any) -> sympy.Matrix:
    return sympy.Matrix(_obj(a).tolist())


def _A(m: sympy.Matrix) -> np.ndarray:
    return _obj(np.array(m.tolist(), dtype=object))


def _eye(n: int) -> np.ndarray:
    return _A(sympy.eye(n))


def _normalised(A: sympy.Matrix, V: sympy.Matrix) -> sympy.Matrix:
    r""":math:`D^{-1} A V`, :math:`D = \operatorname{diag}(A\mathbb 1)`: the reference quadratic
    form, built with SymPy matrices."""
    AV = A * V
    return sympy.Matrix(AV.rows, AV.cols, lambda i, j: AV[i, j] / sum(A.row(i)))


def _tril(A: sympy.Matrix) -> sympy.Matrix:
    return sympy.Matrix(A.rows, A.cols, lambda i, j: A[i, j] if j <= i else 0)


def _quarter_root(d: int) -> sympy.Expr:
    return sympy.Integer(d) ** sympy.Rational(1, 4)


def _canon(e: Any) -> sympy.Expr:
    """A canonical form of a sum of terms :math:`c\\,e^{u}` (``c`` rational in the symbols):
    expanded, each term's exponentials merged into one with an expanded exponent."""
    e = sympy.expand(sympy.sympify(e))
    out = []
    for term in sympy.Add.make_args(e):
        coeff, expo = [], sympy.Integer(0)
        for f in sympy.Mul.make_args(term):
            if isinstance(f, sympy.exp):
                expo += f.args[0]
            else:
                coeff.append(f)
        out.append(sympy.Mul(*coeff) * sympy.exp(sympy.expand(expo)))
    return sympy.Add(*out)


def _exp_zero(chk: _Checks, diff: Any, what: str) -> bool:
    """Every entry of ``diff`` (sums of exponentials) is 0: in canonical form, else by the
    exact zero test (which refutes a wrong one at a rational point)."""
    for idx, v in np.ndenumerate(_obj(diff)):
        c = _canon(v)
        if c == 0:
            chk.holds(True, what)
        else:
            chk.zero(c, f"{what}{list(idx) if idx else ''}")
    return chk.bad is None


# --------------------------------------------------------------------------- expectations

_w1, _a1, _c1 = sympy.symbols("w a gamma", real=True)
_b1 = sympy.Symbol("beta", real=True)
_kz = sympy.Symbol("k", integer=True, nonzero=True)


@functools.lru_cache(maxsize=1)
def _one_dimensional_facts() -> tuple[bool, bool, bool]:
    r"""The two 1-D integrals every expectation here rests on, by ``sympy.integrate``:
    :math:`\int e^{(a+i\gamma)w}\varphi(w)\,dw = e^{(a+i\gamma)^2/2}`, and
    :math:`\frac1{2\pi}\int_0^{2\pi} e^{ik\beta}d\beta` is 0 for an integer :math:`k \ne 0`,
    1 for :math:`k = 0`; and the density is normalised."""
    phi = sympy.exp(-_w1**2 / 2) / sympy.sqrt(2 * sympy.pi)
    s = _a1 + sympy.I * _c1
    mgf = sympy.integrate(sympy.exp(s * _w1) * phi, (_w1, -sympy.oo, sympy.oo))
    mgf_ok = sympy.simplify(mgf - sympy.exp(s**2 / 2)) == 0
    norm_ok = sympy.integrate(phi, (_w1, -sympy.oo, sympy.oo)) == 1
    phase = sympy.integrate(sympy.exp(sympy.I * _kz * _b1), (_b1, 0, 2 * sympy.pi))
    phase_ok = sympy.simplify(phase) == 0 and sympy.integrate(1, (_b1, 0, 2 * sympy.pi)) / (
        2 * sympy.pi) == 1
    return mgf_ok, norm_ok, phase_ok


@functools.lru_cache(maxsize=1)
def _cosine_facts() -> bool:
    r"""The real route, independent of :func:`expect`: :math:`\mathbb E\cos(wz) =
    e^{-z^2/2}`, :math:`\mathbb E\sin(wz) = 0` (1-D integrals), hence for :math:`d = 2`, by
    :math:`\cos(a + b) = \cos a\cos b - \sin a\sin b` and independence,
    :math:`\mathbb E\cos(w^\top z) = e^{-\|z\|^2/2}`; and :math:`\mathbb E_b\cos(a + 2b)
    = 0`; each compared with what :func:`expect` returns."""
    phi = sympy.exp(-_w1**2 / 2) / sympy.sqrt(2 * sympy.pi)
    z1, z2 = sympy.symbols("z_1 z_2", real=True)
    ecos = {z: sympy.integrate(sympy.cos(_w1 * z) * phi, (_w1, -sympy.oo, sympy.oo))
            for z in (z1, z2)}
    esin = sympy.integrate(sympy.sin(_w1 * z1) * phi, (_w1, -sympy.oo, sympy.oo))
    two_d = ecos[z1] * ecos[z2] - esin * esin.subs(z1, z2)  # E cos(w1 z1 + w2 z2)
    w = sympy.symbols("u_1 u_2", real=True)
    via = expect(sympy.cos(w[0] * z1 + w[1] * z2), list(w), [])
    phase = sympy.integrate(sympy.cos(_a1 + 2 * _b1), (_b1, 0, 2 * sympy.pi))
    return (sympy.simplify(two_d - sympy.exp(-(z1**2 + z2**2) / 2)) == 0
            and _canon(via - two_d) == 0 and sympy.simplify(phase) == 0
            and expect(sympy.cos(_a1 + 2 * _b1), [], [_b1]) == 0)


def _facts_step() -> tuple[bool, Step]:
    ok = all(_one_dimensional_facts())
    return ok, Step(
        "Two 1-D integrals (`sympy.integrate`, symbolic real $a, \\gamma$ and integer $k$), "
        "and independence of the coordinates of $w \\sim \\mathcal N(0, I_d)$ and of the "
        "phases $b_r \\sim U(0, 2\\pi)$, give the expectation of every term "
        "$c\\,e^{s^\\top w + i k^\\top b}$ ($s \\in \\mathbb C^d$) of the estimators, "
        "rewritten in complex exponentials:",
        r"\int_{\mathbb R} e^{(a+i\gamma)w}\frac{e^{-w^2/2}}{\sqrt{2\pi}}dw = "
        r"e^{(a+i\gamma)^2/2},\quad \frac1{2\pi}\int_0^{2\pi}e^{ik\beta}d\beta = [k=0],\quad "
        r"\mathbb E\,e^{s^\top w + ik^\top b} = e^{s^\top s/2}\,[k = 0]")


def expect(expr: Any, gauss: list[sympy.Symbol], phases: list[sympy.Symbol]) -> sympy.Expr:
    r""":math:`\mathbb E` of ``expr`` over independent :math:`w_j \sim \mathcal N(0, 1)`
    (``gauss``) and :math:`b_r \sim U(0, 2\pi)` (``phases``), exactly: ``expr`` rewritten in
    exponentials and expanded is a sum of :math:`c\,e^{u + s^\top w + i k^\top b}`, whose
    expectation is :math:`c\,e^{u + s^\top s/2}[k = 0]` (:func:`_one_dimensional_facts`)."""
    e = sympy.expand(sympy.sympify(expr).rewrite(sympy.exp))
    gs, ps = set(gauss), set(phases)
    total = []
    for term in sympy.Add.make_args(e):
        coeff, expo = [], sympy.Integer(0)
        for f in sympy.Mul.make_args(term):
            if isinstance(f, sympy.exp):
                expo += f.args[0]
            elif f.free_symbols & (gs | ps):
                raise ValueError(f"expect: a factor {f} is not an exponential of a linear form")
            else:
                coeff.append(f)
        expo = sympy.expand(expo)
        P = sympy.Poly(expo, *gauss, *phases)
        if P.total_degree() > 1:
            raise ValueError(f"expect: exponent {expo} is not linear in w, b")
        s = [expo.coeff(g) for g in gauss]
        k = [expo.coeff(p) / sympy.I for p in phases]
        if any(not (kv.is_integer) for kv in k):
            raise ValueError(f"expect: phase frequency {k} is not an integer")
        if any(kv != 0 for kv in k):
            continue
        rest = sympy.expand(expo - sum(sv * g for sv, g in zip(s, gauss, strict=True)))
        total.append(sympy.Mul(*coeff) * sympy.exp(rest + sum(sv**2 for sv in s) / 2))
    return sympy.Add(*total)
