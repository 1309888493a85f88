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
(lemma ``softmax_shift_invariance``). The shared machinery (exact comparisons,
expectations, small models) is :mod:`nlaverify.identities._expectations`.
"""

from __future__ import annotations

import itertools

import numpy as np
import sympy

from nlaverify.curvature import likelihoods as lk
from nlaverify.identities._expectations import (
    _L,
    _N,
    _S51,
    _S52,
    _Y,
    SIGMA,
    _cases,
    _cat_model,
    _Checks,
    _clean,
    _det,
    _free,
    _gaussian_expect,
    _ggn_fisher,
    _ggn_fisher_steps,
    _grad,
    _hess,
    _jac,
    _jacobians,
    _latex,
    _logits,
    _mean_weights,
    _model,
    _obj,
    _q,
    _scalar,
    _subs,
    _w,
    _xp,
)
from nlaverify.identities.core import Identity, Proof, Step, register
from nlaverify.symbolic.exact import symbol_array

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


def _categorical_null_space(chk: _Checks) -> None:
    r"""Rank :math:`C - 1` of :math:`\operatorname{diag}(p) - pp^\top` for every :math:`C`,
    in index form (symbolic :math:`C`, indices :math:`i, j`, :math:`p_i > 0`,
    :math:`\sum_j p_j = 1`): :math:`(Hv)_i = p_i(v_i - s)` with :math:`s = p^\top v`
    independent of :math:`i`, so :math:`Hv = 0` forces :math:`v = s\mathbf 1`, and
    :math:`H\mathbf 1 = 0`: the null space is the line of :math:`\mathbf 1`."""
    C = sympy.Symbol("C", integer=True, positive=True)
    i, j = sympy.symbols("i j", integer=True, positive=True)
    p, v = sympy.IndexedBase("p", positive=True), sympy.IndexedBase("v", real=True)
    S = sympy.Symbol("s", real=True)
    s = sympy.Sum(p[j] * v[j], (j, 1, C))

    def row(vj: sympy.Expr) -> sympy.Expr:  # (H v)_i, 1 <= i <= C, from H_ij = d_ij p_i - p_i p_j
        Hv = sympy.Sum((sympy.KroneckerDelta(i, j) * p[i] - p[i] * p[j]) * vj, (j, 1, C))
        return sympy.refine(Hv.expand().doit(), sympy.Q.le(i, C))

    diff = sympy.simplify(row(v[j]) - p[i] * (v[i] - s))
    chk.holds(diff == 0, "general C: (Hv)_i - p_i (v_i - p^T v)", diff)
    chk.holds(i not in s.free_symbols, "general C: p^T v independent of i", s)
    sol = sympy.solve(p[i] * (v[i] - S), v[i])
    chk.holds(sol == [S], "general C: p_i (v_i - s) = 0 has the one solution v_i = s", sol)
    ones = sympy.simplify(row(S)).subs(sympy.Sum(p[j], (j, 1, C)), 1)
    chk.holds(sympy.simplify(ones) == 0, "general C: H (s 1) with sum p = 1", ones)


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
    _categorical_null_space(chk)
    return chk.proof([
        Step("The running code, C = 2, 3, 4 symbolic logits: `Likelihood.hessian` equals "
             "$\\operatorname{diag}(p) - pp^\\top$ with $p_i = e^{z_i}/\\sum_j e^{z_j}$ written "
             "out, and `sympy.hessian` of the running `nll` for the first and last class; "
             "$H\\mathbf 1 = 0$ and the leading $(C-1)\\times(C-1)$ minor (Leibniz formula) "
             "is $\\prod_{i=1}^{C} p_i > 0$, so the running Hessian has rank C - 1:",
             r"\det\bigl(\operatorname{diag}(p) - pp^\top\bigr)_{[1:C-1]} = \prod_{i<C} p_i"
             r"\Bigl(1 - \sum_{i<C} p_i\Bigr) = \prod_{i=1}^C p_i"),
        Step("The closed form has rank C - 1 for every C (SymPy on index expressions: symbolic "
             "$C$, `Sum` over $j$, `KroneckerDelta`; $p_i > 0$, $\\sum_j p_j = 1$): row $i$ of "
             "$Hv$ is $p_i(v_i - s)$ with $s = p^\\top v$ the same for every row, and "
             "$p_i(v_i - s) = 0$ has the one solution $v_i = s$; so $Hv = 0$ only for "
             "$v = s\\mathbf 1$, and $H\\mathbf 1 = 0$: the null space is the line of "
             "$\\mathbf 1$.",
             r"(Hv)_i = \sum_{j=1}^C (\delta_{ij}p_i - p_ip_j)v_j = p_i\Bigl(v_i - "
             r"\sum_{j=1}^C p_jv_j\Bigr),\qquad \ker H = \operatorname{span}\{\mathbf 1\}"),
        Step("`hessian_sqrt` $S$ has $SS^\\top = H$ and `hvp` is $Hv$ for symbolic $v$ "
             "(C = 2, 3, 4)."),
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


def derive_ggn_fisher_categorical() -> Proof:
    chk = _Checks()
    _ggn_fisher(lk.Likelihood("categorical"), _logits(_N, 3), _jacobians(3, 3),
                _mean_weights(), chk, "softmax cross-entropy")
    return chk.proof(_ggn_fisher_steps(
        "softmax cross-entropy logits as independent symbols $z_n = \\log p^{(n)}$, "
        "$p^{(n)}$ on the simplex (every logit vector, up to the shift softmax ignores)", 3, 3,
        "a sum over the $3^2$ pairs of classes weighted by $e^{-\\ell}$"))


def derive_ggn_fisher_gaussian() -> Proof:
    chk = _Checks()
    _ggn_fisher(lk.Likelihood("gaussian", SIGMA**2), symbol_array("z", (_N, 2)),
                _jacobians(2, 3), _mean_weights(), chk, "Gaussian MSE")
    return chk.proof(_ggn_fisher_steps(
        "Gaussian squared error with symbolic variance $\\sigma^2$ and symbolic means $z_n$",
        2, 3, "with the Gaussian moments $E[y] = z$, $E[y^2] = z^2 + \\sigma^2$ integrated "
        "by SymPy"))


def derive_ggn_fisher_bernoulli() -> Proof:
    chk, J, weights = _Checks(), _jacobians(2, 2), _mean_weights()
    signs = {True: {"positive": True}, False: {"nonpositive": True}}
    for pattern in (True, False):  # every symbol on both branches of the stable sigmoid
        Z = _obj([[sympy.Symbol(f"z_{{{n}{c}}}", **signs[pattern ^ bool((n + c) % 2)])
                   for c in range(2)] for n in range(_N)])
        _ggn_fisher(lk.Likelihood("bernoulli"), Z, J, weights, chk,
                    f"sigmoid BCE, sign pattern {int(pattern)}")
    return chk.proof(_ggn_fisher_steps(
        "sigmoid binary cross-entropy, C = 2 independent bits, the log-odds as independent "
        "symbols $z_{nc}$ in two sign patterns, a checkerboard over $(n, c)$ and its "
        "complement (every $z_{nc}$ on both branches of the stable sigmoid, each pass exact "
        "on its open set after $z = \\log(q/(1-q))$)", 2, 2,
        "a sum over the $4^2$ target configurations weighted by $e^{-\\ell}$"))


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
    J, f, _ = _model(_cat_model, 3, 3)
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
        Step("N = 2 positions of the 3-parameter model of logits "
             f"$f(w; x) = {_latex(f[0])}$ ($x = x^{{(1)}}$; Jacobians $\\partial f/\\partial w$ "
             "at an integer point, targets 1 and 3, symbolic probabilities): the "
             "empirical Fisher is a sum of two outer products, its determinant is exactly 0 "
             "for every $p^{(1)}, p^{(2)}$ (rank <= N); at $p^{(1)} = (1/4, 1/2, 1/4)$, "
             "$p^{(2)} = (1/6, 1/3, 1/2)$ a 2x2 minor is nonzero (rank exactly 2) and the "
             "Fisher's determinant is nonzero (rank 3 > N)."),
        Step("A perfect fit of a Gaussian model (targets equal to the means, residual 0): the "
             "empirical Fisher is exactly 0, the GGN $\\sum_n J_n^\\top J_n/\\sigma^2$ is not "
             "(its trace, a sum of squares, is nonzero at $w = x = 1$)."),
    ])


# --------------------------------------------------------------------------- the catalogue

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
             r"\operatorname{rank} = C - 1,\quad SS^\top = H\quad (\text{code: } C = 2, 3, 4;"
             r"\ \text{rank of the closed form: every } C)", _S52 + " ($H_L$ of the GGN)",
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
             r" - pp^\top)J\quad (\text{every } J \in \mathbb R^{3\times 3},\ "
             r"N = 2\ \text{positions})",
             _S52 + " (GGN = Fisher for exponential families)",
             _q(lk.empirical_fisher, lk.ggn_matrix, _L.nll, _L.grad, _L.hessian,
                lk.Reduction.weights), derive_ggn_fisher_categorical),
    Identity("ggn_equals_fisher_gaussian", "curvature", "GGN = Fisher for Gaussian MSE",
             r"\mathbb E_y[J^\top\nabla\ell\,\nabla\ell^\top J] = J^\top J/\sigma^2\quad "
             r"(\text{every } J \in \mathbb R^{2\times 3},\ N = 2\ \text{positions})",
             _S52 + " (GGN = Fisher for exponential families)",
             _q(lk.empirical_fisher, lk.ggn_matrix, _L.nll, _L.grad, _L.hessian,
                lk.Reduction.weights), derive_ggn_fisher_gaussian),
    Identity("ggn_equals_fisher_bernoulli", "curvature", "GGN = Fisher for sigmoid BCE",
             r"\mathbb E_y[J^\top\nabla\ell\,\nabla\ell^\top J] = J^\top "
             r"\operatorname{diag}(\sigma(z)(1-\sigma(z)))J\quad (\text{every } J \in "
             r"\mathbb R^{2\times 2},\ N = 2\ \text{positions})",
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
