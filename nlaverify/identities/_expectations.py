r"""Shared machinery of the curvature proofs (:mod:`nlaverify.identities.curvature`,
:mod:`nlaverify.identities.natural_gradient`): exact comparisons that count entries and keep
the first failure, SymPy helpers (gradients, Hessians, Jacobians of object arrays), and the
exact expectations over :math:`y \sim p(\cdot\mid z)` of the library's likelihoods.

Expectations are independent of the formulas they check: sums over the :math:`C` classes or
over :math:`\{0, 1\}^C` weighted by :math:`e^{-\ell(z, y)}` of the running ``nll`` itself,
and for the Gaussian, monomial by monomial with the moments
:math:`\int y^k e^{-\ell}\,dy / \int e^{-\ell}\,dy` integrated by SymPy.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import sympy
import sympy.polys.fields

from nlaverify.backends import get_namespace
from nlaverify.curvature import likelihoods as lk
from nlaverify.identities.core import Proof, Step, qualname
from nlaverify.symbolic.exact import symbol_array, zero_test
from nlaverify.symbolic.normal_form import rational_zero

SIGMA = sympy.Symbol("sigma", positive=True)
_Y = "y"
_L = lk.Likelihood
_S51, _S52 = "Baggag & Saad §5.1", "Baggag & Saad §5.2"


def _q(*fs: Callable[..., Any]) -> tuple[str, ...]:
    """The qualified names of the functions a proof certifies."""
    return tuple(qualname(f) for f in fs)


def _xp() -> Any:
    xp = get_namespace("sympy")
    xp.reset_shifts()
    return xp


def _obj(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=object)


def _clean(x: Any) -> np.ndarray:
    """Drop the opaque softmax shifts (lemma ``softmax_shift_invariance``)."""
    return _obj(get_namespace("sympy").without_shifts(_obj(x)))


def _scalar(x: Any) -> sympy.Expr:
    return _clean(x)[()]


def _hess(f: sympy.Expr, v: Any) -> np.ndarray:
    return _obj(np.array(sympy.hessian(f, list(_obj(v).ravel())).tolist(), dtype=object))


def _grad(f: sympy.Expr, v: Any) -> np.ndarray:
    return _obj([sympy.diff(f, s) for s in _obj(v).ravel()])


def _jac(f: Any, v: Any) -> np.ndarray:
    return _obj(np.array(sympy.Matrix(list(_obj(f).ravel())).jacobian(list(_obj(v).ravel()))
                         .tolist(), dtype=object))


class _Checks:
    """Exact comparisons of a derivation: counts entries, keeps the first failure."""

    def __init__(self) -> None:
        self.n = 0
        self.bad: str | None = None

    def zero(self, diff: Any, what: str, subs: dict | None = None,
             rational: bool = False) -> bool:
        """Every entry of ``diff`` is exactly 0 (after the exact substitution ``subs``;
        ``rational``: a rational function, tested by the numerator of its
        :func:`sympy.together` form, the denominators being positive)."""
        for idx, v in np.ndenumerate(_obj(diff)):
            self.n += 1
            if self.bad is None:
                if subs and isinstance(v, sympy.Basic):
                    v = v.xreplace(subs)
                if rational and isinstance(v, sympy.Basic):
                    # 0 in the rational normal form: its numerator is the zero polynomial,
                    # without SymPy's field cancelling a gcd at every step
                    if rational_zero(v):
                        continue
                    v = _numerator(v)
                t = zero_test(v)
                if not t.proved:
                    self.bad = f"{what}{list(idx) if idx else ''}: {t.reason} {t.detail}".strip()
        return self.bad is None

    def nonzero(self, value: Any, what: str) -> bool:
        """``value`` (free of symbols, or refuted at a rational point) is exactly not 0."""
        self.n += 1
        v = sympy.nsimplify(value) if not isinstance(value, sympy.Basic) else value
        ok = (sympy.simplify(v).is_zero is False) if not v.free_symbols else (
            zero_test(v).verdict == "refuted")
        if not ok and self.bad is None:
            self.bad = f"{what}: expected a nonzero value, got {v}"
        return self.bad is None

    def holds(self, ok: bool, what: str, detail: Any = "") -> bool:
        """A structural fact established by SymPy outside :func:`zero_test` (an index-form
        sum simplified to 0, a matrix expression reduced to a zero matrix, a unique
        solution): ``ok`` is its outcome, ``detail`` what SymPy returned."""
        self.n += 1
        if not ok and self.bad is None:
            self.bad = f"{what}: {detail}".strip().rstrip(":")
        return self.bad is None

    def proof(self, steps: list[Step]) -> Proof:
        if self.bad:
            return Proof("failed", tuple(steps), self.bad)
        return Proof("proved", (*steps, Step(f"All {self.n} comparisons are exact.")),
                     f"{self.n} entries")


def _det(a: Any) -> sympy.Expr:
    """The determinant by the Leibniz formula (small matrices; no simplification on the
    way, which SymPy's ``det`` would attempt)."""
    a = _obj(a)
    n = a.shape[0]
    total = sympy.Integer(0)
    for perm in itertools.permutations(range(n)):
        inversions = sum(perm[i] > perm[j] for i in range(n) for j in range(i + 1, n))
        total += (-1) ** inversions * sympy.Mul(*(a[i, perm[i]] for i in range(n)))
    return total


def _numerator(v: sympy.Expr) -> sympy.Expr:
    """The numerator of a rational function in canonical form (SymPy's field of rational
    functions over QQ: exact, cancelled), or of its :func:`sympy.together` form when it
    is not rational in its symbols. The denominators met here are positive."""
    gens = sorted(v.free_symbols, key=str)
    if not gens:
        return v
    try:
        return sympy.polys.fields.field(gens, sympy.QQ)[0].from_expr(v).numer.as_expr()
    except ValueError:
        return sympy.numer(sympy.together(v))


def _free(a: Any) -> set[sympy.Symbol]:
    return set().union(*(e.free_symbols for e in _obj(a).ravel() if isinstance(e, sympy.Basic)))


def _subs(a: Any, values: dict) -> np.ndarray:
    vals = {k: sympy.sympify(v) for k, v in values.items()}
    return np.vectorize(lambda e: sympy.sympify(e).xreplace(vals), otypes=[object])(_obj(a))


def _latex(x: Any) -> str:
    x = _obj(x)
    return sympy.latex(sympy.Matrix(x.tolist()) if x.ndim else x[()])


# --------------------------------------------------------------------------- expectations


class _Case:
    r"""A likelihood at symbolic outputs ``z`` and the expectation over
    :math:`y \sim p(\cdot\mid z)`, :math:`p = e^{-\ell(z, y)}` (normalized)."""

    def __init__(self, lik: lk.Likelihood, z: np.ndarray, label: str):
        self.lik, self.z, self.label = lik, z, label
        self.C = z.shape[-1]

    def outcomes(self) -> list[Any]:
        if self.lik.family == "categorical":
            return [np.array(c) for c in range(self.C)]
        return [_obj([sympy.Integer(b) for b in bits])
                for bits in itertools.product((0, 1), repeat=self.C)]

    def prob(self, y: Any) -> sympy.Expr:
        return sympy.exp(-_scalar(self.lik.nll(_xp(), self.z, y)))

    def expect(self, f: Callable[[Any], Any]) -> np.ndarray:
        if self.lik.family == "gaussian":
            y = symbol_array(_Y, (self.C,))
            return _gaussian_expect(_clean(f(y)), y, self.z, self.lik)
        return sum((self.prob(y) * _clean(f(y)) for y in self.outcomes()),
                   start=_obj(sympy.Integer(0)))

    def total(self) -> sympy.Expr:
        """:math:`\\sum_y e^{-\\ell}` (1 for a normalized likelihood), or for the Gaussian
        :math:`\\int e^{-\\ell}\\,dy / (2\\pi\\sigma^2)^{C/2}` (integrated by SymPy; the
        constant is the one the Gaussian ``nll`` drops)."""
        if self.lik.family != "gaussian":
            return sum(self.prob(y) for y in self.outcomes())
        y = symbol_array(_Y, (self.C,))
        val = sympy.exp(-_scalar(self.lik.nll(_xp(), self.z, y)))
        for v in y:
            val = sympy.integrate(val, (v, -sympy.oo, sympy.oo))
        return val / (2 * sympy.pi * self.lik.variance) ** sympy.Rational(self.C, 2)

    def independent(self) -> sympy.Expr:
        """For the Gaussian, :math:`\\ell(z, y) - \\sum_c \\ell(z_c, y_c)` (0: independent
        coordinates, which :func:`_gaussian_expect` uses); 0 for the others."""
        if self.lik.family != "gaussian":
            return sympy.Integer(0)
        y, xp = symbol_array(_Y, (self.C,)), _xp()
        return _scalar(self.lik.nll(xp, self.z, y)) - sum(
            _scalar(self.lik.nll(xp, self.z[c:c + 1], y[c:c + 1])) for c in range(self.C))


def _moment(k: int, mean: sympy.Expr, lik: lk.Likelihood) -> sympy.Expr:
    """:math:`E[y^k]` for :math:`y \\sim e^{-\\ell(m, y)}` (1-D), integrated by SymPy, the
    density being the running ``nll``; then :math:`m` = ``mean``."""
    return _moment_generic(k, lik.variance).xreplace({_M: mean})


_M = sympy.Symbol("m", real=True)
_MOMENTS: dict[tuple[int, Any], sympy.Expr] = {}


def _moment_generic(k: int, variance: Any) -> sympy.Expr:
    key = (k, variance)
    if key not in _MOMENTS:
        y = sympy.Symbol("u", real=True)
        lik = lk.Likelihood("gaussian", variance)
        dens = sympy.exp(-_scalar(lik.nll(_xp(), _obj([_M]), _obj([y]))))
        num = sympy.integrate(y**k * dens, (y, -sympy.oo, sympy.oo))
        _MOMENTS[key] = sympy.simplify(num / sympy.integrate(dens, (y, -sympy.oo, sympy.oo)))
    return _MOMENTS[key]


def _gaussian_expect(values: np.ndarray, y: np.ndarray, z: np.ndarray,
                     lik: lk.Likelihood) -> np.ndarray:
    """Expectation over independent coordinates :math:`y_c \\sim \\mathcal N(z_c,
    \\sigma^2)` of polynomials in :math:`y`, monomial by monomial."""
    ys, zs = list(y.ravel()), list(z.ravel())
    out = np.empty(values.shape, dtype=object)
    for idx, v in np.ndenumerate(values):
        total = sympy.Integer(0)
        for monom, coeff in sympy.Poly(sympy.expand(v), *ys).terms():
            term = coeff
            for k, m in zip(monom, zs, strict=True):
                term *= _moment(k, m, lik) if k else 1
            total += term
        out[idx] = total
    return out


def _cases(sizes: tuple[int, ...] = (2, 3, 4)) -> list[_Case]:
    pos = sympy.Symbol("z_{1}", positive=True)
    nonpos = sympy.Symbol("z_{2}", nonpositive=True)
    return ([_Case(lk.Likelihood("categorical"), symbol_array("z", (C,)), f"categorical, C = {C}")
             for C in sizes]
            + [_Case(lk.Likelihood("bernoulli"), _obj([pos]), "bernoulli, z > 0"),
               _Case(lk.Likelihood("bernoulli"), _obj([nonpos]), "bernoulli, z <= 0"),
               _Case(lk.Likelihood("bernoulli"), _obj([pos, nonpos]),
                     "bernoulli, C = 2 (z_1 > 0 >= z_2)")]
            + [_Case(lk.Likelihood("gaussian", SIGMA**2), symbol_array("z", (C,)),
                     f"gaussian, C = {C}, variance sigma^2") for C in (1, 2)])



# --------------------------------------------------------------------------- models


def _w(P: int = 2) -> np.ndarray:
    return symbol_array("w", (P,))



def _model(f: Callable[[np.ndarray, np.ndarray], list], P: int, C: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A model ``f(w, x)`` at two symbolic inputs: its Jacobians ``(2, C, P)`` (``sympy``
    differentiation), its outputs ``(2, C)`` and the ``"mean"`` weights."""
    w = _w(P)
    Z = _obj([f(w, symbol_array(f"x^{{({n})}}", (2,))) for n in (1, 2)])
    J = _obj([_jac(Z[n], w) for n in range(2)])
    weights = _obj(lk.Reduction("mean").weights(_xp(), _obj([sympy.Integer(1)] * 2)))
    return J, Z, weights


def _logits(positions: int, C: int) -> np.ndarray:
    r"""Symbolic logits :math:`z_n = \log p^{(n)}` with :math:`p^{(n)} = (p_{n1}, \dots,
    p_{n,C-1}, 1 - \sum_c p_{nc})` on the simplex: every logit vector up to the shift that
    softmax ignores (lemma ``softmax_shift_invariance``), and softmax is then the
    polynomial :math:`p`, which the zero test handles at once."""
    out = np.empty((positions, C), dtype=object)
    for n in range(positions):
        p = [sympy.Symbol(f"p_{{{n + 1}{c + 1}}}", positive=True) for c in range(C - 1)]
        out[n] = [sympy.log(v) for v in [*p, 1 - sum(p)]]
    return out


def _cat_model(w: np.ndarray, x: np.ndarray) -> list:
    return [w[0] * x[0] + w[1] * x[1], w[1] * w[2] * x[0], w[2]**2 - w[0] * x[1]]


def _ggn_fisher(lik: lk.Likelihood, Z: np.ndarray, J: np.ndarray, weights: np.ndarray,
                chk: _Checks, label: str) -> None:
    xp = _xp()
    G = _clean(lk.ggn_matrix(xp, lik, J, Z, weights))
    if lik.family == "gaussian":
        Y = symbol_array(_Y, Z.shape)
        EF = _clean(lk.empirical_fisher(xp, lik, J, Z, Y, weights))
        F = _gaussian_expect(EF, Y, Z, lik)
    else:
        cases = [_Case(lik, Z[n], label) for n in range(Z.shape[0])]
        F = _obj(sympy.Integer(0))
        for ys in itertools.product(*(c.outcomes() for c in cases)):
            prob = sympy.Mul(*(c.prob(y) for c, y in zip(cases, ys, strict=True)))
            Y = np.stack(ys) if lik.family == "categorical" else _obj(np.stack(ys))
            F = F + prob * _clean(lk.empirical_fisher(xp, lik, J, Z, Y, weights))
    # log-odds z -> log(q/(1-q)), q in (0, 1): an exact change of variables that makes the
    # sigmoids rational, sigma(z) = q (the identity holds on each branch's open set, hence
    # as rational functions)
    subs = None
    if lik.family == "bernoulli":
        q = [sympy.Dummy(positive=True) for _ in Z.ravel()]
        subs = {v: sympy.log(qv / (1 - qv)) for v, qv in zip(Z.ravel(), q, strict=True)}
    chk.zero(F - G, f"{label}: Fisher - GGN", subs, rational=lik.family != "gaussian")


#: N = 2 positions; every likelihood's outputs z_n of size C, parameters of size P
_N = 2


def _jacobians(C: int, P: int) -> np.ndarray:
    r"""Fully symbolic Jacobians :math:`J_n \in \mathbb R^{C\times P}`, one per position:
    an identity for these holds for :math:`J_n = \partial f(w; x^{(n)})/\partial w` of every
    model with these sizes."""
    return symbol_array("J", (_N, C, P))


def _mean_weights() -> np.ndarray:
    return _obj(lk.Reduction("mean").weights(_xp(), _obj([sympy.Integer(1)] * _N)))


def _ggn_fisher_steps(outputs: str, C: int, P: int, how: str) -> list[Step]:
    return [
        Step(f"N = {_N} positions, each with fully symbolic Jacobians $J_n \\in "
             f"\\mathbb R^{{{C}\\times {P}}}$ (C = {C} outputs, P = {P} parameters; every "
             "entry its own symbol, so the identity holds for $J_n = \\partial f(w; x^{(n)})"
             "/\\partial w$ of every model of these sizes), the weights $\\omega_n$ of the "
             f"`\"mean\"` reduction, and {outputs}.",
             r"J_1 = " + _latex(_jacobians(C, P)[0])),
        Step("The Fisher is the expectation of the running `empirical_fisher` over the "
             f"targets drawn from the model, {how}; it equals the running `ggn_matrix` "
             "exactly:",
             r"\sum_n \omega_n J_n^\top\,\mathbb E_{y_n}\bigl[\nabla\ell\,\nabla\ell^\top"
             r"\bigr] J_n = \sum_n \omega_n J_n^\top H(z_n) J_n"),
    ]
