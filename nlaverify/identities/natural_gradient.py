r"""Curvature of likelihood losses, continued (Baggag & Saad §5.1–5.2): the loss-reduction
conventions and the natural gradient (its affine invariance, and the 2-D Gaussian model of
the seed's Figure 30). Same method as :mod:`nlaverify.identities.curvature`, with the shared
helpers of :mod:`nlaverify.identities._expectations`. The natural gradient's solve is
certified through :mod:`nlaverify.curvature.kronecker` (which ``natural_gradient`` calls
through the module, so the solve that runs is the one proved).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from nlaverify.curvature import kronecker as kr
from nlaverify.curvature import likelihoods as lk
from nlaverify.curvature import natural as nat
from nlaverify.identities._expectations import (
    _L,
    _S51,
    _S52,
    _Y,
    _Checks,
    _clean,
    _free,
    _grad,
    _hess,
    _jac,
    _obj,
    _q,
    _scalar,
    _subs,
    _w,
    _xp,
)
from nlaverify.identities.core import Identity, Proof, Step, register
from nlaverify.ops import loss as loss_ops
from nlaverify.symbolic.exact import symbol_array

# --------------------------------------------------------------------------- 8: reductions

#: a (B, n) = (2, 3) mask with one ignored position; N = 5, N_b = (2, 3), B = 2
_MASK = np.array([[1, 1, 0], [1, 1, 1]])


def _expected_factors(name: str, mask: np.ndarray) -> np.ndarray:
    """The factor of each position, from counting (not from ``Reduction.weights``)."""
    B, N, Nb = mask.shape[0], int(mask.sum()), mask.sum(axis=1)
    per = {"sum": np.full(mask.shape, sympy.Integer(1), dtype=object),
           "mean": np.full(mask.shape, sympy.Rational(1, N), dtype=object),
           "batch_mean": np.full(mask.shape, sympy.Rational(1, B), dtype=object),
           "sequence_mean": np.array([[sympy.Rational(1, B * int(Nb[b]))] * mask.shape[1]
                                      for b in range(B)], dtype=object)}[name]
    return per * mask


def derive_reductions() -> Proof:
    chk, xp = _Checks(), _xp()
    mask = xp.asarray(_MASK)
    w, lik = _w(), lk.Likelihood.squared_error(half=True)
    X, T = symbol_array("x", (*_MASK.shape, 2)), symbol_array("t", (*_MASK.shape, 1))
    Z = _obj(np.einsum("bnp,p->bn", X, _obj([w[0], w[1] ** 2])))[..., None]  # (B, n, 1)
    ell = _obj(lik.nll(xp, Z, T))                                            # (B, n)
    J = _obj([[_jac(Z[b, i], w) for i in range(_MASK.shape[1])] for b in range(2)])
    loss_sum = sum(_MASK.ravel() * ell.ravel())
    G_sum = _clean(lk.ggn_matrix(xp, lik, J, Z, mask))
    for name in lk.REDUCTIONS:
        wts = _obj(lk.Reduction(name).weights(xp, mask))
        c = _expected_factors(name, _MASK)
        chk.zero(wts - c, f"{name}: weights vs counted factors")
        L = sum(wts.ravel() * ell.ravel())
        L_ref = sum(c.ravel() * ell.ravel())
        chk.zero(L - L_ref, f"{name}: loss")
        chk.zero(_grad(L, w) - _grad(L_ref, w), f"{name}: gradient")
        chk.zero(_hess(L, w) - _hess(L_ref, w), f"{name}: Hessian")
        chk.zero(sympy.diff(L, T[0, 2, 0]), f"{name}: the ignored position")
        G = _clean(lk.ggn_matrix(xp, lik, J, Z, wts))
        chk.zero(G - np.einsum("bi,bicp,bicq->pq", c, J, J), f"{name}: GGN = sum c J^T J")
        if name in ("sum", "mean", "batch_mean"):  # one factor for every position
            k = c[_MASK.astype(bool)][0]
            chk.zero(L - k * loss_sum, f"{name}: loss = factor x sum")
            chk.zero(G - k * G_sum, f"{name}: GGN = factor x sum")
            chk.zero(_hess(L, w) - k * _hess(loss_sum, w), f"{name}: Hessian = factor x sum")
    mean = sum(_obj(lk.Reduction("mean").weights(xp, mask)).ravel() * ell.ravel())
    seq = sum(_obj(lk.Reduction("sequence_mean").weights(xp, mask)).ravel() * ell.ravel())
    chk.nonzero(_subs(_obj(mean - seq), {s: 1 for s in _free(mean - seq)} | {T[0, 0, 0]: 0})[()],
                "mean - sequence_mean at x = w = t = 1, t_11 = 0")
    full = xp.asarray(np.ones_like(_MASK))
    chk.zero(lk.Reduction("mean").weights(xp, full) -
             lk.Reduction("sequence_mean").weights(xp, full), "equal lengths: mean = seq mean")
    full_lik = lk.Likelihood.squared_error(half=False)
    z1, y1 = symbol_array("z", (2,)), symbol_array(_Y, (2,))
    chk.zero(_obj(full_lik.nll(xp, z1, y1)) - 2 * _obj(lik.nll(xp, z1, y1)), "|r|^2 = 2 x half")
    chk.zero(full_lik.grad(xp, z1, y1) - 2 * lik.grad(xp, z1, y1), "gradient x 2")
    chk.zero(full_lik.hessian(xp, z1) - 2 * lik.hessian(xp, z1), "Hessian x 2")
    chk.zero(_expected_ops(xp), "graph loss ops = likelihood + reduction")
    return chk.proof([
        Step("A batch of B = 2 sequences of 3 positions, the last position of the first "
             "sequence ignored: $N = 5$, $N_b = (2, 3)$. `Reduction.weights` on this mask is "
             "compared with the factors counted independently:",
             r"\text{mean: } \tfrac1N,\quad \text{sum: } 1,\quad \text{sequence\_mean: } "
             r"\tfrac{1}{B N_b},\quad \text{batch\_mean: } \tfrac1B,\quad 0 \text{ where "
             r"ignored}"),
        Step("With a model $z_{bi} = x_{bi,1} w_1 + x_{bi,2} w_2^2$ and the squared error, "
             "the weighted loss, its gradient, its Hessian (`sympy`) and its GGN "
             "(`ggn_matrix` with the weights) scale by exactly these factors relative to the "
             "sum (uniformly for mean, batch_mean); the ignored target does not enter."),
        Step("`mean` and `sequence_mean` differ when lengths differ (exactly nonzero at an "
             "integer point), and coincide when every sequence has the same length."),
        Step("$\\lVert r\\rVert^2$ (`squared_error(half=False)`, $\\sigma^2 = 1/2$) has twice "
             "the loss, gradient and Hessian of $\\tfrac12\\lVert r\\rVert^2$."),
        Step("The graph's loss ops are what `likelihood_of` says: `cross_entropy` on the "
             "batch (ignore-index targets) is $\\sum w\\,\\ell$ with the categorical `nll` and "
             "the `\"mean\"` weights; `half_squared_error` is the Gaussian `nll` "
             "($\\sigma^2 = 1$) with the `\"sum\"` weights."),
    ])


def _expected_ops(xp: Any) -> np.ndarray:
    Zc = symbol_array("z", (*_MASK.shape, 3))
    targets = np.where(_MASK.astype(bool), np.array([[0, 2, 0], [1, 1, 2]]),
                       loss_ops.IGNORE_INDEX)
    lik, red = lk.likelihood_of("cross_entropy")
    ell = _obj(lik.nll(xp, Zc, np.where(targets < 0, 0, targets)))
    ce = _scalar(loss_ops.cross_entropy(xp, Zc, targets))
    d1 = ce - _scalar(xp.sum(red.weights(xp, xp.asarray(_MASK)) * ell))
    Yh, Y = symbol_array("a", (3, 2)), symbol_array("b", (3, 2))
    lik2, red2 = lk.likelihood_of("half_squared_error")
    d2 = _scalar(loss_ops.half_squared_error(xp, Yh, Y)) - _scalar(
        xp.sum(red2.weights(xp, xp.asarray(np.ones(3, dtype=int))) * lik2.nll(xp, Yh, Y)))
    return _clean(_obj([d1, d2]))


# --------------------------------------------------------------------------- 9: natural gradient


def _spd(n: int) -> np.ndarray:
    """A symmetric matrix of symbols (SPD for an open set of values: the pivots that the
    elimination divides by are then positive)."""
    f = symbol_array("f", (n, n))
    return _obj([[f[min(i, j), max(i, j)] for j in range(n)] for i in range(n)])


def _generators(n: int) -> dict[str, np.ndarray]:
    """Invertible matrices that generate :math:`GL_n`: a scaling and a shear by a symbol,
    and the permutations (conjugating by them moves the scaling and the shear anywhere)."""
    s = sympy.Symbol("s", real=True)
    eye = np.eye(n, dtype=int).astype(object)
    scale, shear = eye.copy(), eye.copy()
    scale[0, 0], shear[0, 1] = s, s
    out = {"scaling D_1(s)": scale, "shear E_12(s)": shear, "swap (1 2)": eye[[1, 0, *range(2, n)]]}
    if n > 2:
        out["cycle (1 2 ... n)"] = eye[[*range(1, n), 0]]
    return out


def _chain_rule(n: int) -> sympy.Matrix:
    r""":math:`\nabla_\theta\ell(A\theta + b) - A^\top(\nabla_w\ell)(A\theta + b)` for an
    undefined SymPy function :math:`\ell` and symbolic :math:`A`, :math:`b` (``sympy.diff``)."""
    a = sympy.Matrix(n, n, list(symbol_array("a", (n, n)).ravel()))
    b, th, w = (sympy.Matrix(list(symbol_array(k, (n,)))) for k in ("b", "theta", "w"))
    ell = sympy.Function("ell")
    g_theta = sympy.Matrix([sympy.diff(ell(*(a * th + b)), t) for t in th])
    g_w = sympy.Matrix([sympy.diff(ell(*w), v) for v in w]).subs(
        dict(zip(w, a * th + b, strict=True)))
    return sympy.simplify(g_theta - a.T * g_w)


def _matrix_algebra() -> tuple[Any, Any, Any]:
    r"""Every :math:`n`: SymPy's matrix-expression algebra on square ``MatrixSymbol``\ s
    :math:`A`, :math:`F` (invertible, :math:`n \times n`) and :math:`g` (:math:`n \times 1`):
    :math:`(A^\top F A)^{-1} = A^{-1}F^{-1}A^{-\top}`, then
    :math:`A (A^\top F A)^{-1} A^\top g - F^{-1} g` reduces to the zero matrix."""
    n = sympy.Symbol("n", integer=True, positive=True)
    A, F = sympy.MatrixSymbol("A", n, n), sympy.MatrixSymbol("F", n, n)
    g = sympy.MatrixSymbol("g", n, 1)
    inverse = sympy.Inverse(A.T * F * A)
    lhs = sympy.MatMul(A, inverse, A.T, g)
    return inverse.doit(), lhs.doit(), sympy.MatAdd(lhs, -sympy.MatMul(F.I, g)).doit()


def derive_natural_gradient_invariance() -> Proof:
    chk, xp = _Checks(), _xp()
    for n in (2, 3):
        chain = _chain_rule(n)
        chk.holds(chain == sympy.zeros(n, 1), f"n={n}: chain rule", chain)
    inverse, lhs, diff = _matrix_algebra()
    chk.holds(diff.is_ZeroMatrix is True, "every n: A (A^T F A)^-1 A^T g - F^-1 g", diff)
    lam = sympy.Symbol("lambda", positive=True)
    # the running code against an independent oracle, the adjugate inverse: a general
    # (nonsymmetric) 2 x 2 F, where solving with F^T would show, and a symmetric 3 x 3 F
    for n, F in ((2, symbol_array("f", (2, 2))), (3, _spd(3))):
        g = symbol_array("g", (n,))
        oracle = (sympy.Matrix(F.tolist()) + lam * sympy.eye(n)).inv(method="ADJ")
        d = _obj(nat.natural_gradient(xp, F, g, damping=lam))
        chk.zero(d - _obj(list(oracle * sympy.Matrix(list(g)))),
                 f"n={n}: natural_gradient(F, g, lambda) - adj(F + lambda I) g / det",
                 rational=True)
    cases = [(2, "general A", symbol_array("a", (2, 2)))]
    cases += [(3, k, A) for k, A in _generators(3).items()]
    for n, label, A in cases:
        F, g = _spd(n), symbol_array("g", (n,))
        d_w = _obj(nat.natural_gradient(xp, F, g))
        chk.zero(F.dot(d_w) - g, f"n={n}: F d - g", rational=True)
        d_theta = _obj(nat.natural_gradient(xp, A.T.dot(F).dot(A), A.T.dot(g)))
        chk.zero(A.dot(d_theta) - d_w, f"n={n}, {label}: A F_theta^-1 g_theta - F_w^-1 g_w",
                 rational=True)
    g2 = symbol_array("g", (2,))
    A2 = _obj([[2, 0], [0, 1]])
    chk.nonzero((A2.dot(A2.T.dot(g2)) - g2)[0].subs(g2[0], 1), "gradient descent, A = diag(2,1)")
    eye2 = np.eye(2, dtype=int).astype(object)
    damped_w = _obj(nat.natural_gradient(xp, eye2, g2, damping=1))
    damped_t = A2.dot(_obj(nat.natural_gradient(xp, A2.T.dot(A2), A2.T.dot(g2), damping=1)))
    chk.nonzero((damped_t - damped_w)[0].subs(g2[0], 1), "damped natural gradient")
    return chk.proof([
        Step("Chain rule (`sympy.diff`, n = 2, 3), for an arbitrary loss $\\ell$ (an undefined "
             "SymPy function) and $w = A\\theta + b$ with symbolic $A$, $b$: "
             "$\\nabla_\\theta \\ell = A^\\top\\nabla_w\\ell$. Applied to the score "
             "$\\nabla\\log p$ it gives, by linearity of the expectation, "
             "$F_\\theta = A^\\top F_w A$:",
             r"\nabla_\theta L = A^\top\nabla_w L,\qquad F_\theta = \mathbb E[A^\top"
             r"\nabla_w\log p\,\nabla_w\log p^\top A] = A^\top F_w A"),
        Step("The invariance for every $n$, in SymPy's matrix-expression algebra on "
             "$n\\times n$ `MatrixSymbol`s $A$, $F$ (invertible) and $g$: the inverse of the "
             "product expands and the product reduces to $F^{-1}g$:",
             f"(A^\\top F A)^{{-1}} = {sympy.latex(inverse)},\\qquad "
             f"A (A^\\top F A)^{{-1}} A^\\top g = {sympy.latex(lhs)}"),
        Step("The running `natural_gradient` (an exact LU solve through "
             "`kronecker.solve` on the SymPy namespace), for a general symbolic $F$ "
             "(n = 2; symmetric for n = 3) and a symbolic damping $\\lambda > 0$, equals "
             "the independent oracle $(F + \\lambda I)^{-1} g$ computed from the adjugate and "
             "the determinant "
             "(`Matrix.inv(method=\"ADJ\")`); undamped it solves $Fd = g$ exactly:",
             r"\mathtt{natural\_gradient}(F, g, \lambda) = \frac{\operatorname{adj}(F + "
             r"\lambda I)}{\det(F + \lambda I)}\,g,\qquad F\,\mathtt{natural\_gradient}(F, g)"
             r" = g"),
        Step("The running code is invariant for a general symbolic $2\\times 2$ $A$, and for "
             "$3 \\times 3$ on generators of $GL_3$ (a scaling and a shear by a symbol $s$, a "
             "swap, a cycle; every invertible matrix is a product of these and their "
             "conjugates by permutations, and the invariance composes: $w = A_1 u$, "
             "$u = A_2\\theta$ pulls $F$ and $\\nabla L$ back twice):",
             r"A\,F_\theta^{-1}\nabla_\theta L = A (A^\top F_w A)^{-1} A^\top\nabla_w L = "
             r"F_w^{-1}\nabla_w L"),
        Step("Gradient descent is not invariant: with $A = \\operatorname{diag}(2, 1)$, "
             "$A\\nabla_\\theta L = AA^\\top\\nabla_w L = (4 g_1, g_2) \\ne (g_1, g_2)$; nor "
             "is a damped natural gradient ($F = I$, $\\lambda = 1$: $4g_1/5$ against "
             "$g_1/2$)."),
    ])


def derive_natural_gradient_model() -> Proof:
    chk, xp = _Checks(), _xp()
    M, y, w = symbol_array("m", (2, 2)), symbol_array(_Y, (2, 2)), _w()
    ybar = y.mean(axis=0)
    loss = _scalar(nat.model_loss(xp, w, M, y))
    ref = sum(r * r for n in range(2) for r in M.dot(w - y[n])) / 4
    chk.zero(loss - ref, "model_loss vs 1/N sum |M(w-y)|^2/2")
    g = _obj(nat.model_grad(xp, w, M, y))
    F = _clean(nat.model_fisher(xp, w, M, y))
    chk.zero(g - _grad(loss, w), "model_grad vs sympy gradient")
    chk.zero(F - _hess(loss, w), "model_fisher vs sympy Hessian")
    chk.zero(F - M.T.dot(M), "model_fisher = M^T M")
    d = _obj(nat.natural_gradient(xp, F, g))
    eta = sympy.Symbol("eta", positive=True)
    chk.zero(w - d - ybar, "one natural step lands on the optimum")
    chk.zero(w - eta * d - ybar - (1 - eta) * (w - ybar), "natural step eta: error x (1-eta)")
    chk.zero(w - eta * g - ybar - (np.eye(2, dtype=int) - eta * F).dot(w - ybar),
             "gradient step: error x (I - eta F)")
    lam = sympy.Symbol("lambda", positive=True)
    F_lam = F + lam * np.eye(2, dtype=int)
    d_lam = _obj(nat.natural_gradient(xp, F, g, damping=lam))
    chk.zero(F_lam.dot(w - d_lam - ybar) - lam * (w - ybar),
             "damped step: (F + lambda I) (error after) - lambda (error before)", rational=True)
    lo, hi = sympy.symbols("lambda_min lambda_max", positive=True)
    kappa, best = hi / lo, 2 / (hi + lo)
    chk.zero(1 - best * lo - (kappa - 1) / (kappa + 1), "1 - eta lambda_min")
    chk.zero(1 - best * hi + (kappa - 1) / (kappa + 1), "1 - eta lambda_max")
    return chk.proof([
        Step("The model of the seed's Figure 30 (`nlaverify.curvature.natural`): "
             "$y_n \\sim \\mathcal N(w, \\Sigma)$, $\\Sigma^{-1} = M^\\top M$, with a "
             "symbolic $2\\times 2$ $M$, two symbolic data points and symbolic $w$."),
        Step("`model_loss` is $\\frac1N\\sum_n \\tfrac12\\lVert M(w - y_n)\\rVert^2$; "
             "`model_grad` is its `sympy` gradient; `model_fisher` (the GGN of the "
             "Gaussian likelihood, the Fisher by `ggn_equals_fisher_gaussian`) is its "
             "`sympy` Hessian $M^\\top M$."),
        Step("One natural step (the running `natural_gradient`) with $\\eta = 1$ lands on the "
             "optimum $\\bar y$; with step $\\eta$ the error is multiplied by $1 - \\eta$; a "
             "gradient step multiplies it by $I - \\eta M^\\top M$:",
             r"w - F^{-1}\nabla L = \bar y,\qquad w - \eta\nabla L - \bar y = (I - \eta F)"
             r"(w - \bar y)"),
        Step("A damped natural step (the running `natural_gradient` with a symbolic damping "
             "$\\lambda > 0$) multiplies the error by $\\lambda(F + \\lambda I)^{-1}$ (checked "
             "exactly as: $F + \\lambda I$ times the new error is $\\lambda$ times the old):",
             r"w - (F + \lambda I)^{-1}\nabla L - \bar y = \lambda (F + \lambda I)^{-1}"
             r"(w - \bar y)"),
        Step("With the best fixed step $\\eta = 2/(\\lambda_{\\max} + \\lambda_{\\min})$ both "
             "eigen-directions contract by $(\\kappa - 1)/(\\kappa + 1)$, "
             "$\\kappa = \\lambda_{\\max}/\\lambda_{\\min}$ (the rate in the figure):",
             r"1 - \eta\lambda_{\min} = -(1 - \eta\lambda_{\max}) = \frac{\kappa - 1}"
             r"{\kappa + 1}"),
    ])


IDENTITIES: tuple[Identity, ...] = (
    Identity("reduction_conventions", "curvature",
             "Loss reductions scale the loss, gradient, Hessian and GGN by exact factors",
             r"L = \sum_{b,i} w_{bi}\ell_{bi},\ w \in \bigl\{\tfrac{m}{N},\ m,\ "
             r"\tfrac{m}{B N_b},\ \tfrac{m}{B}\bigr\};\quad \lVert r\rVert^2 = "
             r"2\cdot\tfrac12\lVert r\rVert^2", _S52 + " (the empirical expectation over $S$)",
             _q(lk.Reduction.weights, lk.ggn_matrix, lk.likelihood_of, _L.nll, _L.grad,
                _L.hessian, _L.squared_error), derive_reductions),
    Identity("natural_gradient_invariance", "curvature",
             "The natural gradient is invariant under affine reparametrisation",
             r"w = A\theta + b:\quad A\,F_\theta^{-1}\nabla_\theta L = F_w^{-1}\nabla_w L\ "
             r"(\text{code: } n = 2, 3;\ \text{matrix algebra: every } n),\qquad "
             r"A\nabla_\theta L \ne \nabla_w L;\qquad \text{damping } \lambda > 0\text{: } "
             r"(F + \lambda I)^{-1} g",
             _S51 + ", eq. (5.1.3), (5.1.9)", _q(nat.natural_gradient, kr.solve),
             derive_natural_gradient_invariance),
    Identity("natural_gradient_gaussian_model", "curvature",
             "Natural gradient vs gradient descent on the 2-D Gaussian model (Fig. 30)",
             r"w - F^{-1}\nabla L = \bar y,\qquad w - \eta\nabla L - \bar y = (I - \eta F)"
             r"(w - \bar y),\qquad w - (F + \lambda I)^{-1}\nabla L - \bar y = "
             r"\lambda (F + \lambda I)^{-1}(w - \bar y)", _S51 + ", Figure 30",
             _q(nat.model_loss, nat.model_grad, nat.model_fisher, nat.natural_gradient),
             derive_natural_gradient_model),
)
for _identity in IDENTITIES:
    register(_identity)
