r"""Curvature of likelihood losses (Baggag & Saad §5.1–5.2): the score, the Fisher, the
Gauss–Newton and generalized Gauss–Newton matrices and the empirical Fisher (the reduction
conventions and the natural gradient continue in
:mod:`nlaverify.identities.natural_gradient`).

Every proof runs the library's functions of :mod:`nlaverify.curvature.likelihoods` and
:mod:`nlaverify.curvature.natural` on the exact SymPy namespace (symbolic logits, means,
log-odds, parameters, inputs) and compares them with an independent derivation:
``sympy.diff``/``sympy.hessian`` of the running negative log-likelihood, expectations
written out as sums over the :math:`C` classes or over :math:`\{0, 1\}^C` with the
probabilities :math:`e^{-\ell(z, y)}` of the running ``nll`` itself, Gaussian expectations
from the moments :math:`\int y^k e^{-\ell}\,dy / \int e^{-\ell}\,dy` integrated by SymPy.
The stable sigmoid's two branches are proved separately (a positive and a non-positive
log-odds symbol; lemma ``sigmoid_stable_branches``), the softmax shift is set to 0
(lemma ``softmax_shift_invariance``).
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
from nlaverify.identities.core import Identity, Proof, Step, qualname, register
from nlaverify.symbolic.exact import symbol_array, zero_test

SIGMA = sympy.Symbol("sigma", positive=True)
_Y = "y"


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


# --------------------------------------------------------------------------- 1, 2: score, Fisher


def derive_score_zero_mean() -> Proof:
    chk, xp = _Checks(), _xp()
    for case in _cases():
        lik, z = case.lik, case.z
        chk.zero(case.total() - 1, f"{case.label}: sum of e^(-nll)")
        chk.zero(case.independent(), f"{case.label}: independent coordinates")
        y0 = case.outcomes()[-1] if lik.family != "gaussian" else symbol_array(_Y, (case.C,))
        chk.zero(_clean(lik.grad(xp, z, y0)) - _grad(_scalar(lik.nll(xp, z, y0)), z),
                 f"{case.label}: grad vs d nll/dz")
        chk.zero(case.expect(lambda y, lik=lik, z=z: lik.grad(xp, z, y)),
                 f"{case.label}: E[grad]")
    return chk.proof([
        Step("For categorical (C = 2, 3, 4), Bernoulli (each branch of the stable sigmoid, "
             "C = 1, 2) and Gaussian (C = 1, 2, variance $\\sigma^2$) likelihoods: the "
             "running `nll` is a negative log-likelihood ($\\sum_y e^{-\\ell(z,y)} = 1$; the "
             "Gaussian's $\\int e^{-\\ell}dy = (2\\pi\\sigma^2)^{C/2}$, integrated by SymPy, "
             "is its dropped constant, and its coordinates are independent), and `grad` is "
             "`sympy.diff` of `nll`."),
        Step("The expectation of the score $-\\nabla_z\\ell$ under $y \\sim e^{-\\ell(z, y)}$ "
             "(a sum over the outcomes; for the Gaussian, monomial by monomial with the "
             "moments integrated by SymPy) is exactly 0:",
             r"\mathbb E_{y}[\nabla_z \ell(z,y)] = \sum_y e^{-\ell(z,y)}\nabla_z\ell(z,y)"
             r" = -\nabla_z \sum_y e^{-\ell(z,y)} = 0"),
    ])


def derive_fisher_is_expected_hessian() -> Proof:
    chk, xp = _Checks(), _xp()
    shown = None
    for case in _cases():
        lik, z = case.lik, case.z
        H = _clean(lik.hessian(xp, z))
        F = case.expect(lambda y, lik=lik, z=z: np.multiply.outer(*(2 * [lik.grad(xp, z, y)])))
        EH = case.expect(lambda y, lik=lik, z=z: _hess(_scalar(lik.nll(xp, z, y)), z))
        chk.zero(F - H, f"{case.label}: E[g g^T] - hessian")
        chk.zero(EH - H, f"{case.label}: E[hess nll] - hessian")
        if case.label.startswith("categorical, C = 2"):
            shown = _latex(sympy.simplify(_obj(F)[0, 0]))
    return chk.proof([
        Step("Same likelihoods as `score_zero_mean`. The Fisher $E[\\nabla\\ell\\nabla\\ell^"
             "\\top]$ from the running `grad`, and $E[\\nabla^2\\ell] = -E[\\nabla^2\\log p]$ "
             "from `sympy.hessian` of the running `nll`, both as exact expectations, are "
             "compared with `Likelihood.hessian`."),
        Step("For instance (C = 2), the (1,1) entry of the Fisher:", f"F_{{11}} = {shown}"),
    ])


# --------------------------------------------------------------------------- 3: Hessians


def derive_categorical_hessian() -> Proof:
    chk, lik = _Checks(), lk.Likelihood("categorical")
    for C in (2, 3, 4):
        xp, z = _xp(), symbol_array("z", (C,))
        e = [sympy.exp(v) for v in z]
        p = _obj([v / sum(e) for v in e])
        H = _clean(lik.hessian(xp, z))
        chk.zero(H - (np.diag(p) - np.multiply.outer(p, p)), f"C={C}: hessian vs diag(p)-pp^T")
        for y in (0, C - 1):
            chk.zero(H - _hess(_scalar(lik.nll(xp, z, np.array(y))), z),
                     f"C={C}: hessian vs sympy.hessian(nll(z, {y}))")
        chk.zero(H.sum(axis=1), f"C={C}: H 1")
        minor = _det(H[:C - 1, :C - 1])
        chk.zero(minor - sympy.Mul(*p), f"C={C}: leading (C-1)-minor vs prod p")
        S = _clean(lik.hessian_sqrt(xp, z))
        chk.zero(S.dot(S.T) - H, f"C={C}: S S^T - H")
        v = symbol_array("v", (C,))
        chk.zero(_clean(lik.hvp(xp, z, v)) - H.dot(v), f"C={C}: hvp - H v")
    return chk.proof([
        Step("C = 2, 3, 4 symbolic logits. `Likelihood.hessian` equals "
             "$\\operatorname{diag}(p) - pp^\\top$ with $p_i = e^{z_i}/\\sum_j e^{z_j}$ written "
             "out, and `sympy.hessian` of the running `nll` for the first and last class."),
        Step("Rank exactly C - 1: $H\\mathbf 1 = 0$ (rank < C), and the leading "
             "$(C-1)\\times(C-1)$ minor is $\\prod_{i=1}^{C} p_i > 0$ (rank >= C - 1):",
             r"\det\bigl(\operatorname{diag}(p) - pp^\top\bigr)_{[1:C-1]} = \prod_{i<C} p_i"
             r"\Bigl(1 - \sum_{i<C} p_i\Bigr) = \prod_{i=1}^C p_i"),
        Step("`hessian_sqrt` $S$ has $SS^\\top = H$ and `hvp` is $Hv$ for symbolic $v$."),
    ])


def derive_gaussian_bernoulli_hessian() -> Proof:
    chk = _Checks()
    for case in _cases(sizes=()):
        xp, lik, z = _xp(), case.lik, case.z
        H = _clean(lik.hessian(xp, z))
        if lik.family == "gaussian":
            ref = np.eye(case.C, dtype=int).astype(object) / SIGMA**2
            ys = [symbol_array(_Y, (case.C,))]
        else:
            s = [1 / (1 + sympy.exp(-v)) for v in z]
            ref = np.diag(_obj([si * (1 - si) for si in s]))
            ys = case.outcomes()
        chk.zero(H - ref, f"{case.label}: hessian vs closed form")
        for y in ys:
            chk.zero(H - _hess(_scalar(lik.nll(xp, z, y)), z),
                     f"{case.label}: hessian vs sympy.hessian(nll)")
        S = _clean(lik.hessian_sqrt(xp, z))
        chk.zero(S.dot(S.T) - H, f"{case.label}: S S^T - H")
        v = symbol_array("v", (case.C,))
        chk.zero(_clean(lik.hvp(xp, z, v)) - H.dot(v), f"{case.label}: hvp - H v")
    return chk.proof([
        Step("Gaussian, C = 1, 2, symbolic variance $\\sigma^2 > 0$: `Likelihood.hessian` is "
             "$I/\\sigma^2$ and `sympy.hessian` of the running `nll` at symbolic targets."),
        Step("Bernoulli, each branch of the stable sigmoid: `Likelihood.hessian` is "
             "$\\operatorname{diag}(\\sigma(z)(1 - \\sigma(z)))$ with $\\sigma(z) = 1/(1 + "
             "e^{-z})$ written out, and `sympy.hessian` of `nll` for every $y \\in \\{0,1\\}^C$."),
        Step("For both, `hessian_sqrt` $S$ has $SS^\\top = H$ and `hvp` is $Hv$."),
    ])


# --------------------------------------------------------------------------- 4, 5: GN, GGN


def _w(P: int = 2) -> np.ndarray:
    return symbol_array("w", (P,))


def derive_gauss_newton() -> Proof:
    chk, xp = _Checks(), _xp()
    lik = lk.Likelihood.squared_error(half=True)
    w, x = _w(), symbol_array("x", (3,))
    r = _obj([w[0]**2 * w[1] - x[0], sympy.sin(w[0]) + x[1] * w[1], sympy.exp(w[0] * w[1]) - x[2]])
    zero_t = _obj([sympy.Integer(0)] * 3)
    phi = _scalar(lik.nll(xp, r, zero_t))
    J = _jac(r, w)
    gauss_newton = _clean(lk.ggn_matrix(xp, lik, J[None], r[None]))
    dl = _clean(lik.grad(xp, r, zero_t))
    rest = sum((dl[k] * _hess(r[k], w) for k in range(3)), start=_obj(sympy.Integer(0)))
    chk.zero(_grad(phi, w) - J.T.dot(dl), "gradient J^T r")
    chk.zero(_hess(phi, w) - gauss_newton - rest, "Hessian - (J^T J + sum r_i hess r_i)")
    chk.zero(gauss_newton - J.T.dot(J), "ggn_matrix - J^T J")
    chk.nonzero(rest[0, 0].subs({w[0]: 0, w[1]: 1, x[0]: 0, x[1]: 0, x[2]: 0}),
                "the residual term at w = (0, 1), x = 0")
    A, b = symbol_array("a", (3, 2)), symbol_array("b", (3,))
    r_lin = b - A.dot(w)
    chk.zero(_hess(_scalar(lik.nll(xp, r_lin, zero_t)), w) - A.T.dot(A), "linear r: A^T A")
    return chk.proof([
        Step("A residual $r : \\mathbb R^2 \\to \\mathbb R^3$ with polynomial and transcendental "
             "components and symbolic data $x$:", f"r(w) = {_latex(r)}"),
        Step("$\\phi = \\tfrac12\\lVert r\\rVert^2$ is the running `nll` of "
             "`Likelihood.squared_error()` at target 0; its gradient is $J^\\top r$ with "
             "$r$ = the running `grad`; its `sympy.hessian` equals the Gauss–Newton matrix "
             "(`ggn_matrix`, $H = I$) plus the residual term:",
             r"\nabla^2\phi = J^\top J + \sum_i r_i \nabla^2 r_i"),
        Step("The residual term is not 0 in general (its (1,1) entry at $w = (0, 1)$, "
             "$x = 0$ is exactly nonzero); for an affine $r = b - Aw$ it vanishes and "
             "$\\nabla^2\\phi = A^\\top A$ (the normal equations)."),
    ])


def derive_ggn_decomposition() -> Proof:
    chk, xp = _Checks(), _xp()
    w, x = _w(), symbol_array("x", (3,))
    models = [
        (lk.Likelihood("categorical"), np.array(2),
         _obj([w[0] * x[0] + w[1]**2, sympy.tanh(w[0]) * x[1], w[0] * w[1] * x[2]])),
        (lk.Likelihood("gaussian", SIGMA**2), symbol_array(_Y, (2,)),
         _obj([sympy.sin(w[0] * x[0]) + w[1], w[0] * w[1]**2 - x[1]])),
        (lk.Likelihood("bernoulli"), _obj([sympy.Integer(1)]), _obj([w[0]**2 + w[1]**2 + 1])),
    ]
    for lik, y, f in models:
        L = _scalar(lik.nll(xp, f, y))
        J = _jac(f, w)
        G = _clean(lk.ggn_matrix(xp, lik, J[None], f[None]))
        dl = _clean(lik.grad(xp, f, y))
        rest = sum((dl[k] * _hess(f[k], w) for k in range(len(f))), start=_obj(sympy.Integer(0)))
        chk.zero(_hess(L, w) - G - rest, f"{lik.family}: hessian of L(f(w)) - GGN - rest")
    return chk.proof([
        Step("Small models $f(w)$, $w \\in \\mathbb R^2$, symbolic inputs $x$: logits "
             f"${_latex(models[0][2])}$ (categorical, target 3), means "
             f"${_latex(models[1][2])}$ (Gaussian, symbolic targets and variance) and a "
             "positive log-odds $w_1^2 + w_2^2 + 1$ (Bernoulli, target 1)."),
        Step("`sympy.hessian` of the running `nll` of $f(w)$ equals the running `ggn_matrix` "
             "($J_f^\\top H_L J_f$, $H_L$ = `Likelihood.hessian`) plus the term of the "
             "model's curvature weighted by the running `grad`:",
             r"\nabla_w^2 L(f(w)) = J_f^\top H_L J_f + \sum_k \frac{\partial L}{\partial f_k}"
             r"\nabla_w^2 f_k"),
    ])


# --------------------------------------------------------------------------- 6: GGN = Fisher


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


def _ggn_fisher_steps(model: str, how: str) -> list[Step]:
    return [
        Step(f"{model} Two positions (inputs $x^{{(1)}}, x^{{(2)}}$ symbolic), weights of "
             "the `\"mean\"` reduction, Jacobians $J_n = \\partial f(w; x^{(n)})/\\partial w$ "
             "by `sympy`."),
        Step(f"The Fisher is the expectation of the running `empirical_fisher` over the "
             f"targets drawn from the model, {how}; it equals the running `ggn_matrix`:",
             r"\sum_n \omega_n J_n^\top\,\mathbb E_{y_n}\bigl[\nabla\ell\,\nabla\ell^\top"
             r"\bigr] J_n = \sum_n \omega_n J_n^\top H(z_n) J_n"),
    ]


def derive_ggn_fisher_categorical() -> Proof:
    chk = _Checks()
    J, f, weights = _model(_cat_model, 3, 3)
    Z = _logits(2, 3)
    _ggn_fisher(lk.Likelihood("categorical"), Z, J, weights, chk, "softmax cross-entropy")
    return chk.proof(_ggn_fisher_steps(
        f"Softmax cross-entropy: the Jacobians of the logits $f(w; x) = {_latex(f[0])}$ "
        "($x = x^{(1)}$, $w \\in \\mathbb R^3$), and the logits as independent symbols "
        "$z_n = \\log p^{(n)}$, $p^{(n)}$ on the simplex (every logit vector up to the shift "
        "softmax ignores; the identity holds for every $z$ and $J$, so for $z = f(w)$ of any "
        "model).",
        "a sum over the $3^2$ pairs of classes weighted by $e^{-\\ell}$"))


def derive_ggn_fisher_gaussian() -> Proof:
    chk = _Checks()
    J, Z, weights = _model(
        lambda w, x: [w[0] * sympy.exp(w[1] * x[0]), w[0] * w[1] + sympy.sin(x[1])], 2, 2)
    _ggn_fisher(lk.Likelihood("gaussian", SIGMA**2), Z, J, weights, chk, "Gaussian MSE")
    return chk.proof(_ggn_fisher_steps(
        f"Gaussian squared error with symbolic variance $\\sigma^2$, means "
        f"$f(w; x) = {_latex(Z[0])}$ ($x = x^{{(1)}}$).",
        "with the Gaussian moments $E[y] = z$, $E[y^2] = z^2 + \\sigma^2$ integrated by "
        "SymPy"))


def derive_ggn_fisher_bernoulli() -> Proof:
    chk = _Checks()
    J, f, weights = _model(lambda w, x: [w[0] * w[1] * x[0], w[1] ** 2 - w[0] * x[1]], 2, 2)
    signs = {True: {"positive": True}, False: {"nonpositive": True}}
    for pattern in (True, False):  # every symbol on both branches of the stable sigmoid
        Z = _obj([[sympy.Symbol(f"z_{{{n}{c}}}", **signs[pattern ^ bool((n + c) % 2)])
                   for c in range(2)] for n in range(2)])
        _ggn_fisher(lk.Likelihood("bernoulli"), Z, J, weights, chk,
                    f"sigmoid BCE, sign pattern {int(pattern)}")
    return chk.proof(_ggn_fisher_steps(
        "Sigmoid binary cross-entropy, C = 2 independent bits: the Jacobians of "
        f"$f(w; x) = {_latex(f[0])}$, and the log-odds as independent symbols $z_{{nc}}$, "
        "each taken positive in one pass and non-positive in the other (both branches of the "
        "stable sigmoid).", "a sum over the $4^2$ target configurations weighted by "
        "$e^{-\\ell}$"))


def derive_ggn_not_fisher_noncanonical() -> Proof:
    chk, xp = _Checks(), _xp()
    z, y = sympy.Symbol("z", real=True), sympy.Symbol(_Y, real=True)
    gauss = lk.Likelihood("gaussian", 1)
    ell = _scalar(gauss.nll(xp, _obj([sympy.exp(z)]), _obj([y])))
    ggn = sympy.diff(ell, z, 2)
    fisher = _gaussian_expect(_obj(sympy.diff(ell, z) ** 2), _obj([y]), _obj([sympy.exp(z)]),
                              gauss)[()]
    chk.zero(fisher - sympy.exp(2 * z), "Gaussian, mean e^z: Fisher = e^{2z}")
    chk.zero(ggn - fisher - (sympy.exp(z) - y) * sympy.exp(z), "GGN - Fisher")
    at0 = (ggn - fisher).subs({z: 0, y: 0})
    chk.nonzero(at0, "GGN - Fisher at z = 0, y = 0")
    chk.zero(_gaussian_expect(_obj(ggn), _obj([y]), _obj([sympy.exp(z)]), gauss)[()] - fisher,
             "E_y[GGN] - Fisher")
    p = sympy.Symbol("p", positive=True)
    bern = lk.Likelihood("bernoulli")
    ellp = {b: _scalar(bern.nll(xp, _obj([sympy.log(p / (1 - p))]), _obj([sympy.Integer(b)])))
            for b in (0, 1)}
    third = {p: sympy.Rational(1, 3)}
    ggn_b = sympy.diff(ellp[1], p, 2).subs(third)
    fisher_b = sum(sympy.exp(-ellp[b]) * sympy.diff(ellp[b], p) ** 2 for b in (0, 1)).subs(third)
    chk.zero(ggn_b - 9, "Bernoulli in p: GGN at y = 1, p = 1/3")
    chk.zero(fisher_b - sympy.Rational(9, 2), "Bernoulli in p: Fisher at p = 1/3")
    chk.nonzero(ggn_b - fisher_b, "Bernoulli in p: GGN - Fisher")
    return chk.proof([
        Step("A Gaussian whose mean is $e^{z}$, the loss taken in $z$ (the running "
             "`nll` of $e^z$): the GGN in $z$ is $\\partial_z^2\\ell$, which depends on $y$; "
             "the Fisher (moments integrated by SymPy) does not:",
             r"\partial_z^2 \ell = e^{2z} + (e^z - y)e^z,\qquad F = \mathbb E_y"
             r"[(\partial_z\ell)^2] = e^{2z},\qquad \partial_z^2\ell - F = (e^z - y)\,e^z"),
        Step(f"At $z = 0$, $y = 0$ the difference is exactly ${sympy.latex(at0)} \\ne 0$: the "
             "GGN is not the Fisher (only its expectation over $y$ is)."),
        Step("A Bernoulli in its mean $p$ (the running `nll` at log-odds $\\log(p/(1-p))$): "
             f"at $p = 1/3$, $y = 1$ the GGN $\\partial_p^2\\ell = 1/p^2 = {ggn_b}$ while the "
             f"Fisher is $1/(p(1-p)) = {sympy.latex(fisher_b)}$."),
        Step("In the natural parameters (identities `ggn_equals_fisher_*`) the Hessian of "
             "the loss does not depend on $y$ and the two agree."),
    ])


# --------------------------------------------------------------------------- 7: empirical Fisher


def derive_empirical_fisher() -> Proof:
    chk, xp = _Checks(), _xp()
    cat = lk.Likelihood("categorical")
    z = _obj([0, sympy.log(2), 0])
    eye = np.eye(3, dtype=int).astype(object)
    F = _clean(lk.ggn_matrix(xp, cat, eye[None], z[None]))
    EF = _clean(lk.empirical_fisher(xp, cat, eye[None], z[None], np.array([0])))
    chk.nonzero((EF - F)[0, 0], "EF - F at p = (1/4, 1/2, 1/4), y = 1")
    J, _, _ = _model(_cat_model, 3, 3)
    J_at = _subs(J, dict(zip(sorted(_free(J), key=str), itertools.cycle((1, 2, -1)))))
    Z = _logits(2, 3)
    EF2 = _clean(lk.empirical_fisher(xp, cat, J_at, Z, np.array([0, 2])))
    G2 = _clean(lk.ggn_matrix(xp, cat, J_at, Z))
    chk.zero(_det(EF2), "det of the empirical Fisher of N = 2 (P = 3)")
    probs = dict(zip(sorted(_free(Z), key=str), [sympy.Rational(1, 4), sympy.Rational(1, 2),
                                                 sympy.Rational(1, 6), sympy.Rational(1, 3)],
                     strict=True))
    chk.nonzero(_det(_subs(EF2, probs)[:2, :2]), "a 2x2 minor of the empirical Fisher")
    chk.nonzero(_det(_subs(G2, probs)), "det of the Fisher (GGN)")
    gauss = lk.Likelihood("gaussian", SIGMA**2)
    Jg, Zg, _ = _model(lambda w, x: [w[0] * x[0] + w[1]**2, sympy.exp(w[0] * x[1])], 2, 2)
    chk.zero(_clean(lk.empirical_fisher(xp, gauss, Jg, Zg, Zg)), "EF at a perfect fit")
    Gg = _clean(lk.ggn_matrix(xp, gauss, Jg, Zg))
    chk.zero(Gg - np.einsum("ncp,ncq->pq", Jg, Jg) / SIGMA**2, "GGN = sum J^T J / sigma^2")
    chk.nonzero(np.trace(_subs(Gg, {s: 1 for s in _free(Gg) - {SIGMA}})),
                "trace of the GGN at a perfect fit")
    return chk.proof([
        Step("Softmax cross-entropy at $z = (0, \\log 2, 0)$, $p = (1/4, 1/2, 1/4)$, target "
             "class 1: the running `empirical_fisher` $(p - e_y)(p - e_y)^\\top$ and the "
             "Fisher $\\operatorname{diag}(p) - pp^\\top$ (`ggn_matrix`, = Fisher) differ:",
             f"\\hat F = {_latex(EF)} \\ne F = {_latex(F)}"),
        Step("N = 2 positions of the 3-parameter model of `ggn_equals_fisher_categorical` "
             "(Jacobians at an integer point, targets 1 and 3, symbolic probabilities): the "
             "empirical Fisher is a sum of two outer products, its determinant is exactly 0 "
             "for every $p^{(1)}, p^{(2)}$ (rank <= N); at $p^{(1)} = (1/4, 1/2, 1/4)$, "
             "$p^{(2)} = (1/6, 1/3, 1/2)$ a 2x2 minor is nonzero (rank exactly 2) and the "
             "Fisher's determinant is nonzero (rank 3 > N)."),
        Step("A perfect fit of a Gaussian model (targets equal to the means, residual 0): the "
             "empirical Fisher is exactly 0, the GGN $\\sum_n J_n^\\top J_n/\\sigma^2$ is not "
             "(its trace, a sum of squares, is nonzero at $w = x = 1$)."),
    ])


# --------------------------------------------------------------------------- the catalogue

_L = lk.Likelihood


def _q(*fs: Callable[..., Any]) -> tuple[str, ...]:
    return tuple(qualname(f) for f in fs)


_S51, _S52 = "Baggag & Saad §5.1", "Baggag & Saad §5.2"
#: the family, in document order (registered below)
IDENTITIES: tuple[Identity, ...] = (
    Identity("score_zero_mean", "curvature", "The score has zero mean",
             r"\mathbb E_{y\sim p(\cdot\mid z)}\bigl[\nabla_z \log p(y\mid z)\bigr] = 0",
             _S51 + " (the score's expectation, [100, Lemma 3.3.1])",
             _q(_L.nll, _L.grad), derive_score_zero_mean),
    Identity("fisher_is_expected_hessian", "curvature",
             "The Fisher is the expected outer product of scores and the expected Hessian",
             r"F = \mathbb E[\nabla\log p\,\nabla\log p^\top] = -\mathbb E[\nabla^2\log p]"
             r" = H(z)", _S51 + " (the two expressions of the Fisher)",
             _q(_L.nll, _L.grad, _L.hessian), derive_fisher_is_expected_hessian),
    Identity("categorical_hessian", "curvature",
             "Softmax cross-entropy Hessian: diag(p) - pp^T, rank C - 1",
             r"\nabla_z^2\ell = \operatorname{diag}(p) - pp^\top,\quad "
             r"\operatorname{rank} = C - 1,\quad SS^\top = H", _S52 + " ($H_L$ of the GGN)",
             _q(_L.hessian, _L.hessian_sqrt, _L.hvp, _L.nll), derive_categorical_hessian),
    Identity("gaussian_bernoulli_hessian", "curvature",
             "Gaussian and Bernoulli Hessians: I/sigma^2 and sigma(z)(1 - sigma(z))",
             r"\nabla_z^2 \tfrac{\lVert z - y\rVert^2}{2\sigma^2} = \tfrac{I}{\sigma^2},\quad "
             r"\nabla_z^2\ell_{\mathrm{BCE}} = \operatorname{diag}(\sigma(z)(1 - \sigma(z)))",
             _S52 + " ($H_L$ of the GGN)", _q(_L.hessian, _L.hessian_sqrt, _L.hvp, _L.nll),
             derive_gaussian_bernoulli_hessian),
    Identity("gauss_newton_hessian", "curvature",
             "The Hessian of a least-squares objective is Gauss–Newton plus residual curvature",
             r"\nabla^2 \tfrac12\lVert r(w)\rVert^2 = J^\top J + \sum_i r_i\nabla^2 r_i",
             _S52 + ", eq. (5.2.2)–(5.2.4)",
             _q(_L.nll, _L.grad, lk.ggn_matrix), derive_gauss_newton),
    Identity("ggn_hessian_decomposition", "curvature",
             "The Hessian of a composite loss is the GGN plus the model-curvature term",
             r"\nabla_w^2 L(f(w)) = J_f^\top H_L J_f + \sum_k \tfrac{\partial L}{\partial f_k}"
             r"\nabla_w^2 f_k", _S52 + ", eq. (5.2.5)",
             _q(_L.nll, _L.grad, _L.hessian, lk.ggn_matrix), derive_ggn_decomposition),
    Identity("ggn_equals_fisher_categorical", "curvature",
             "GGN = Fisher for softmax cross-entropy",
             r"\mathbb E_y[J^\top\nabla\ell\,\nabla\ell^\top J] = J^\top(\operatorname{diag}(p)"
             r" - pp^\top)J", _S52 + " (GGN = Fisher for exponential families)",
             _q(lk.empirical_fisher, lk.ggn_matrix, _L.nll, _L.grad, _L.hessian,
                lk.Reduction.weights), derive_ggn_fisher_categorical),
    Identity("ggn_equals_fisher_gaussian", "curvature", "GGN = Fisher for Gaussian MSE",
             r"\mathbb E_y[J^\top\nabla\ell\,\nabla\ell^\top J] = J^\top J/\sigma^2",
             _S52 + " (GGN = Fisher for exponential families)",
             _q(lk.empirical_fisher, lk.ggn_matrix, _L.nll, _L.grad, _L.hessian,
                lk.Reduction.weights), derive_ggn_fisher_gaussian),
    Identity("ggn_equals_fisher_bernoulli", "curvature", "GGN = Fisher for sigmoid BCE",
             r"\mathbb E_y[J^\top\nabla\ell\,\nabla\ell^\top J] = J^\top "
             r"\operatorname{diag}(\sigma(z)(1-\sigma(z)))J",
             _S52 + " (GGN = Fisher for exponential families)",
             _q(lk.empirical_fisher, lk.ggn_matrix, _L.nll, _L.grad, _L.hessian,
                lk.Reduction.weights), derive_ggn_fisher_bernoulli),
    Identity("ggn_not_fisher_noncanonical", "curvature",
             "GGN is not the Fisher outside the natural parameters (counterexamples)",
             r"\ell(z, y) = \tfrac12(e^z - y)^2:\quad \partial_z^2\ell - F = (e^z - y)e^z "
             r"\ne 0", _S52 + " (“the GGN matrix is not always equal to the Fisher”)",
             _q(_L.nll), derive_ggn_not_fisher_noncanonical),
    Identity("empirical_fisher_is_not_fisher", "curvature",
             "The empirical Fisher is not the Fisher",
             r"\hat F = \sum_n J_n^\top\nabla\ell_n\nabla\ell_n^\top J_n \ne F,\quad "
             r"\operatorname{rank}\hat F \le N,\quad \hat F = 0 \text{ at a perfect fit}",
             _S51 + " (the Fisher as a mean of $gg^\\top$)",
             _q(lk.empirical_fisher, lk.ggn_matrix, _L.grad, _L.hessian),
             derive_empirical_fisher),
)
for _identity in IDENTITIES:
    register(_identity)
