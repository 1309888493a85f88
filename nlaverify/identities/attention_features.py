r"""The random-feature identities of the ``attention`` family (Baggag & Saad §4.4;
Choromanski et al. 2021): the softmax kernel as a Gaussian kernel (FAVOR), unbiasedness and
mean squared errors of the trigonometric, positive and hyperbolic features, and orthogonal
features. Registered, in catalogue order, by :mod:`nlaverify.identities.attention`; the
library is called through its modules, so a test can plant an error and see a proof fail.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from nlaverify.attention import estimators as _es
from nlaverify.attention import features as _fe
from nlaverify.identities._expectations import _Checks, _obj, _xp
from nlaverify.identities.attention_expect import (
    _A,
    _KINDS,
    _M,
    _cosine_facts,
    _exp_zero,
    _facts_step,
    _normalised,
    _quarter_root,
    _sym,
    _w1,
    expect,
)
from nlaverify.identities.core import Proof, Step
from nlaverify.ops import linear_attention as _la

# --------------------------------------------------------------------------- §4.4: FAVOR


def _trig_reference(X: np.ndarray, W: np.ndarray, b: np.ndarray) -> sympy.Matrix:
    r""":math:`\sqrt{2/m}\cos(w_r^\top x_i + b_r)`, entrywise (Rahimi & Recht)."""
    m = W.shape[0]
    return sympy.Matrix(X.shape[0], m, lambda i, r: sympy.sqrt(sympy.Rational(2, m)) * sympy.cos(
        sum(X[i] * W[r]) + b[r]))


def derive_softmax_kernel_gaussian() -> Proof:
    chk = _Checks()
    for d in (2, 3):
        q, k = _sym("q", (d,)), _sym("k", (d,))
        r = _quarter_root(d)
        sm = _es.softmax_kernel(_xp(), q / r, k / r)
        g = _es.gaussian_kernel(_xp(), q / r, k / r)
        split = (sympy.exp(sum(q * q) / (2 * sympy.sqrt(d)))
                 * sympy.exp(sum(k * k) / (2 * sympy.sqrt(d))))
        _exp_zero(chk, _obj(sm) - split * _obj(g), f"d = {d}: softmax kernel minus the split")
        _exp_zero(chk, _obj(sm) - sympy.exp(sum(q * k) / sympy.sqrt(d)),
                  f"d = {d}: softmax_kernel(q/d^(1/4), k/d^(1/4)) minus exp(q.k/sqrt d)")
    # FAVOR as the seed describes it, against D^-1 A_hat V built from the features
    n, d, m, dv = 2, 2, 2, 1
    Q, K, V = _sym("q", (n, d)), _sym("k", (n, d)), _sym("v", (n, dv))
    W, b = _sym("w", (m, d)), _sym("b", (m,))
    r, root = _quarter_root(d), sympy.sqrt(d)
    DQ = sympy.diag(*[sympy.exp(sum(x * x) / (2 * root)) for x in Q])
    DK = sympy.diag(*[sympy.exp(sum(x * x) / (2 * root)) for x in K])
    Qh, Kh = _trig_reference(Q / r, W, b), _trig_reference(K / r, W, b)
    A_hat = DQ * Qh * Kh.T * DK
    out = _la.favor_attention(_xp(), Q, K, V, W, b)
    chk.zero(_obj(out) - _A(_normalised(A_hat, _M(V))), "favor_attention minus D^-1 A_hat V")
    # the numerator is unbiased: E[D_Q Q_hat K_hat^T D_K] = exp(QK^T/sqrt d), running features
    if chk.bad is None:  # (a failed proof stops here: the expectation is the costly part)
        Qf = _la.trig_features(_xp(), Q / r, W, b)
        Kf = _la.trig_features(_xp(), K / r, W, b)
        num = _A(DQ * _M(Qf) * _M(Kf).T * DK)
        E = np.vectorize(lambda e: expect(e, list(W.ravel()), list(b)), otypes=[object])(num)
        want = _A(sympy.Matrix(n, n, lambda i, j: sympy.exp(sum(Q[i] * K[j]) / root)))
        _exp_zero(chk, E - want, "E[D_Q Q_hat K_hat^T D_K] minus exp(QK^T/sqrt d)")
        chk.holds(_facts_step()[0], "the 1-D integrals")
    return chk.proof([
        Step("Polarisation $q^\\top k = \\frac12(\\|q\\|^2 + \\|k\\|^2 - \\|q - k\\|^2)$: the "
             "running `softmax_kernel` at $q/d^{1/4}, k/d^{1/4}$ equals the two norm factors "
             "times the running `gaussian_kernel` there, i.e. the Gaussian kernel of width "
             "$\\sigma = d^{1/4}$ (cases $d = 2, 3$, symbolic $q, k$):",
             r"e^{q^\top k/\sqrt d} = e^{\|q\|^2/2\sqrt d}\,e^{\|k\|^2/2\sqrt d}\,"
             r"e^{-\|q-k\|^2/2\sqrt d},\qquad \sigma^2 = \sqrt d"),
        Step(f"FAVOR (Baggag & Saad §4.4), symbolic $Q, K \\in \\mathbb R^{{{n}\\times{d}}}$, "
             f"$V$, projections $W \\in \\mathbb R^{{{m}\\times{d}}}$ and phases $b$: the "
             "running `favor_attention` ($C = [V, \\mathbb 1]$, $X = (D_K\\hat K)^\\top C$, "
             "$Y = (D_Q\\hat Q)X$, $D^{-1}Y_{:, :d}$) equals $D^{-1}\\hat AV$ with $\\hat A$ "
             "built here from the features $\\sqrt{2/m}\\cos(Wx/d^{1/4} + b)$:",
             r"\hat A = D_Q\hat Q\hat K^\top D_K,\quad D_Q = \operatorname{diag}"
             r"(e^{\|q_i\|^2/2\sqrt d}),\quad \operatorname{out} = "
             r"\operatorname{diag}(\hat A\mathbb 1)^{-1}\hat A V"),
        _facts_step()[1],
        Step("Hence (expectation over $W, b$ of the running `trig_features`, exactly) the "
             "numerator of FAVOR is unbiased for the attention matrix $A$:",
             r"\mathbb E_{W, b}\bigl[D_Q\hat Q\hat K^\top D_K\bigr] = "
             r"\exp\bigl(QK^\top/\sqrt d\bigr)"),
    ])


# --------------------------------------------------------------------------- random features

_D = 2  # the dimension of x, y in the random-feature identities
_PHASED = ("trig", "favor")  # the estimators with random phases b


def _estimate(kind: str, x: Any, y: Any, m: int, tag: str = "w"
              ) -> tuple[sympy.Expr, list, list]:
    """The running ``kernel_estimate`` at symbolic ``W`` (``m x d``) and phases ``b``."""
    W, b = _sym(tag, (m, _D)), _sym("b", (m,))
    phased = kind in _PHASED
    val = _es.kernel_estimate(_xp(), kind, x, y, W, b if phased else None)
    return sympy.sympify(_obj(val).ravel()[0]), list(W.ravel()), list(b) if phased else []


def _target(kind: str, x: Any, y: Any) -> sympy.Expr:
    f = _es.gaussian_kernel if kind in ("trig", "sincos") else _es.softmax_kernel
    return sympy.sympify(_obj(f(_xp(), x, y)).ravel()[0])


def _xy() -> tuple[np.ndarray, np.ndarray]:
    return _sym("x", (_D,)), _sym("y", (_D,))


def derive_unbiased() -> Proof:
    chk = _Checks()
    ok, facts = _facts_step()
    chk.holds(ok, "the 1-D integrals")
    chk.holds(_cosine_facts(), "E cos(w^T z) = exp(-|z|^2/2) by the real route")
    x, y = _xy()
    for kind in _KINDS:
        for m in (1, 2) if chk.bad is None else ():
            est, ws, bs = _estimate(kind, x, y, m)
            _exp_zero(chk, expect(est, ws, bs) - _target(kind, x, y),
                      f"{kind}, m = {m}: E[estimate] minus the kernel")
    # the reference values of the kernels, independent of the estimators module
    dx = x - y
    _exp_zero(chk, _target("trig", x, y) - sympy.exp(-sum(dx * dx) / 2), "gaussian_kernel")
    _exp_zero(chk, _target("positive", x, y) - sympy.exp(sum(x * y)), "softmax_kernel")
    return chk.proof([
        facts,
        Step("The same by the real route, for $d = 2$ (a cross-check of the complex one): the "
             "1-D integrals $\\mathbb E\\cos(wz) = e^{-z^2/2}$, $\\mathbb E\\sin(wz) = 0$, "
             "the addition formula and independence, and the phase integral:",
             r"\mathbb E\cos(w^\top z) = \mathbb E\cos(w_1z_1)\,\mathbb E\cos(w_2z_2) - "
             r"\mathbb E\sin(w_1z_1)\,\mathbb E\sin(w_2z_2) = e^{-\|z\|^2/2},\quad "
             r"\frac1{2\pi}\int_0^{2\pi}\cos(a + 2b)\,db = 0"),
        Step(f"The running `kernel_estimate` $\\phi(x)^\\top\\phi(y)$ at symbolic $x, y \\in "
             f"\\mathbb R^{_D}$, $W \\in \\mathbb R^{{m\\times {_D}}}$ ($m = 1, 2$) and phases "
             "$b$, its expectation taken exactly: one trigonometric feature is $\\cos(w^\\top"
             "(x-y)) + \\cos(w^\\top(x+y) + 2b)$, whose second term has mean 0 over $b$; a "
             "positive feature's mean is $e^{\\|x+y\\|^2/2 - \\|x\\|^2/2 - \\|y\\|^2/2}$; the "
             "hyperbolic one averages $e^{\\pm w^\\top(x+y)}$:",
             r"\mathbb E\,\phi_{trig}(x)^\top\phi_{trig}(y) = e^{-\|x-y\|^2/2},\quad "
             r"\mathbb E\,\phi_{+}(x)^\top\phi_{+}(y) = \mathbb E\,\phi_{hyp}(x)^\top"
             r"\phi_{hyp}(y) = e^{x^\top y}"),
        Step("The running `gaussian_kernel` and `softmax_kernel` are $e^{-\\|x-y\\|^2/2}$ and "
             "$e^{x^\\top y}$."),
    ])


#: the MSE kinds: every estimator of :data:`nlaverify.attention.estimators.ESTIMATORS`
_MSE_KINDS = ("trig", "sincos", "favor", "positive", "hyperbolic")
_MSE_FN = {"trig": lambda xp, x, y, m: _es.trig_mse(xp, x, y, m),
           "sincos": lambda xp, x, y, m: _es.trig_mse(xp, x, y, m, phases=False),
           "favor": lambda xp, x, y, m: _es.trig_mse(xp, x, y, m, softmax=True),
           "positive": lambda xp, x, y, m: _es.positive_mse(xp, x, y, m),
           "hyperbolic": lambda xp, x, y, m: _es.hyperbolic_mse(xp, x, y, m)}
_mm = sympy.Symbol("m", integer=True, positive=True)


def _closed(kind: str, x: Any, y: Any, m: Any) -> sympy.Expr:
    return sympy.sympify(_obj(_MSE_FN[kind](_xp(), x, y, m)).ravel()[0])


def _mse_exact(kind: str, x: Any, y: Any, m: int) -> sympy.Expr:
    """:math:`\\mathbb E(\\hat K_m - K)^2` of the running estimate, integrated exactly."""
    est, ws, bs = _estimate(kind, x, y, m)
    return expect(sympy.expand((est - _target(kind, x, y)) ** 2), ws, bs)


def derive_mse() -> Proof:
    chk = _Checks()
    ok, facts = _facts_step()
    chk.holds(ok, "the 1-D integrals")
    x, y = _xy()
    for kind in _MSE_KINDS:
        for m in (() if chk.bad else (1,) if kind in _PHASED else (1, 2)):  # m = 2 with
            # phases is costly; a failed proof stops computing
            _exp_zero(chk, _mse_exact(kind, x, y, m) - _closed(kind, x, y, m),
                      f"{kind}, m = {m}: E[(estimate - K)^2] minus the closed form")
            chk.zero(_closed(kind, x, y, m) - sympy.sympify(
                _obj(_es.mse(_xp(), kind, x, y, m)).ravel()[0]), f"{kind}: the mse table")
        # any m: the estimate is the mean of m one-row estimates, and m MSE_m = MSE_1
        est3, _, _ = _estimate(kind, x, y, 3)
        W = _sym("w", (3, _D))
        b = _sym("b", (3,))
        ones = [sympy.sympify(_obj(_es.kernel_estimate(
            _xp(), kind, x, y, W[r:r + 1], b[r:r + 1] if kind in _PHASED else None)
        ).ravel()[0]) for r in range(3)]
        chk.zero(est3 - sum(ones) / 3, f"{kind}: estimate(m = 3) minus the mean of 3 one-row")
        chk.zero(_mm * _closed(kind, x, y, _mm) - _closed(kind, x, y, 1),
                 f"{kind}: m MSE_m minus MSE_1 (symbolic m)")
    # where they vanish, on the closed forms (now proved)
    s2 = sum((x + y) ** 2)
    sm = sympy.exp(sum(x * y))
    chk.zero(_closed("positive", x, -x, _mm), "positive MSE at y = -x")
    chk.zero(_closed("hyperbolic", x, -x, _mm), "hyperbolic MSE at y = -x")
    chk.zero(_closed("sincos", x, x, _mm), "sincos MSE at y = x")
    chk.zero(_closed("trig", x, x, _mm) - 1 / (2 * _mm), "trig MSE at y = x (floor 1/2m)")
    chk.zero(_closed("hyperbolic", x, y, _mm) - (1 - sympy.exp(-s2)) / 2
             * _closed("positive", x, y, _mm), "hyperbolic = (1 - e^-|x+y|^2)/2 positive")
    chk.zero(_closed("positive", x, y, _mm) * _mm / (sm**2 * sympy.exp(s2))
             - (1 - sympy.exp(-s2)), "positive MSE factorisation")
    return chk.proof([
        facts,
        Step(f"For every estimator kind ({', '.join(_MSE_KINDS)}) the mean squared error of the "
             "running `kernel_estimate` ($x, y \\in \\mathbb R^2$ symbolic, $m = 1, 2$ symbolic "
             "rows of $W$; $m = 1$ for the kinds with phases), integrated exactly (second "
             "moments), equals the running closed form (`trig_mse`, `positive_mse`, "
             "`hyperbolic_mse`, `mse`). With $s = x + y$, "
             "$\\delta = x - y$, $\\mathrm{SM} = e^{x^\\top y}$:",
             r"\mathrm{MSE}_{trig} = \tfrac1m\bigl[\tfrac12(1 - e^{-\|\delta\|^2})^2 + "
             r"\tfrac12\bigr],\ \mathrm{MSE}_{+} = \tfrac1m e^{\|s\|^2}\mathrm{SM}^2"
             r"(1 - e^{-\|s\|^2}),\ \mathrm{MSE}_{hyp} = \tfrac1{2m}e^{\|s\|^2}\mathrm{SM}^2"
             r"(1 - e^{-\|s\|^2})^2"),
        Step("Any $m$: the running estimate with $m = 3$ rows is exactly the mean of the three "
             "one-row estimates, i.i.d. and unbiased, so $\\mathrm{MSE}_m = "
             "\\operatorname{Var}_1/m$; the closed forms satisfy $m\\,\\mathrm{MSE}_m = "
             "\\mathrm{MSE}_1$ for a symbolic $m$.",
             r"\mathrm{MSE}_m(x, y) = \frac{\mathrm{MSE}_1(x, y)}{m}"),
        Step("Where each vanishes: the positive and hyperbolic MSEs are positive factors times "
             "$1 - e^{-\\|x+y\\|^2}$ (to the powers 1, 2), so they vanish exactly when $y = "
             "-x$ (checked there); the $[\\sin, \\cos]$ pair (Performer's trigonometric "
             "features, `sincos`) vanishes at $y = x$; the random-phase features "
             "$\\sqrt{2/m}\\cos(Wx + b)$ never do: at $y = x$ the floor is $1/(2m)$, the "
             "variance of the phase term $\\cos(w^\\top s + 2b)$. Hyperbolic never loses to "
             "positive:",
             r"\mathrm{MSE}_{hyp} = \tfrac12\bigl(1 - e^{-\|x+y\|^2}\bigr)\,\mathrm{MSE}_{+}"
             r"\le \tfrac12\,\mathrm{MSE}_{+}"),
    ])


# --------------------------------------------------------------------------- orthogonal features


def derive_orthogonal() -> Proof:
    chk = _Checks()
    r, th, ph = sympy.symbols("r theta varphi", positive=True)
    # a chi_d radius times a uniform direction is N(0, I_d): polar / spherical densities
    for d, (coords, jac, area) in {
        2: ((r * sympy.cos(th), r * sympy.sin(th)), r, 2 * sympy.pi),
        3: ((r * sympy.sin(ph) * sympy.cos(th), r * sympy.sin(ph) * sympy.sin(th),
             r * sympy.cos(ph)), r**2 * sympy.sin(ph), 4 * sympy.pi)}.items():
        chi = r ** (d - 1) * sympy.exp(-r**2 / 2) / (2 ** sympy.Rational(d - 2, 2)
                                                     * sympy.gamma(sympy.Rational(d, 2)))
        chk.holds(sympy.integrate(chi, (r, 0, sympy.oo)) == 1, f"chi_{d} is a density")
        J = sympy.Matrix(coords).jacobian([r, th] if d == 2 else [r, ph, th])
        chk.zero(J.det() - jac, f"d = {d}: the Jacobian")
        gauss = sympy.exp(-sum(c**2 for c in coords) / 2) / (2 * sympy.pi) ** sympy.Rational(d, 2)
        surface = jac / r ** (d - 1)  # the surface element of the unit sphere
        chk.zero(sympy.simplify(chi * surface / area - gauss * jac), f"d = {d}: the densities")
    # d = 2, Q from G = QR with R_kk > 0 (SymPy's Gram-Schmidt): each row of Q is a fixed
    # orthogonal map of the first column u = g_1/|g_1|, uniform on the circle
    G = sympy.Matrix(2, 2, sympy.symbols("g_11 g_12 g_21 g_22", real=True))
    u = G[:, 0] / sympy.sqrt(G[0, 0] ** 2 + G[1, 0] ** 2)
    sig = sympy.Symbol("sigma")
    for sign in (1, -1):
        Q = sympy.Matrix([[u[0], -sign * u[1]], [u[1], sign * u[0]]])
        chk.zero(sympy.simplify(Q.T * Q - sympy.eye(2)), "Q orthogonal")
        chk.zero(Q[:, 0] - u, "first column g_1/|g_1|")
        for i, A in enumerate((sympy.Matrix([[1, 0], [0, -sign]]),
                               sympy.Matrix([[0, 1], [sign, 0]]))):
            chk.zero((A * u).T - Q.row(i), f"row {i + 1} = A u, sign {sign}")
            chk.zero(A.T * A - sympy.eye(2), "A orthogonal")
    del sig
    # the unfixed-sign bug: rows (-|g1|, g2) and (g1, |g2|); the exact mean of the positive
    # estimate, integrated here, against the running closed form
    x, y = _xy()
    s = x + y
    phi = sympy.exp(-_w1**2 / 2) / sympy.sqrt(2 * sympy.pi)
    a = sympy.Symbol("a", real=True)
    neg = sympy.integrate(2 * sympy.exp(a * _w1) * phi, (_w1, -sympy.oo, 0))
    pos = sympy.integrate(2 * sympy.exp(a * _w1) * phi, (_w1, 0, sympy.oo))
    scale = sympy.exp(-(sum(x * x) + sum(y * y)) / 2)
    row1 = scale * neg.subs(a, s[0]) * sympy.exp(s[1] ** 2 / 2)
    row2 = scale * pos.subs(a, s[1]) * sympy.exp(s[0] ** 2 / 2)
    for m in (1, 2, 3):
        want = (-(-m // 2) * row1 + (m // 2) * row2) / m
        got = sympy.sympify(_obj(_es.unfixed_qr_positive_mean(_xp(), x, y, m)).ravel()[0])
        chk.zero(sympy.expand((got - want).rewrite(sympy.erf)),
                 f"unfixed_qr_positive_mean, m = {m}")
    av = sympy.Symbol("alpha", positive=True)
    bias = sympy.simplify(sympy.sympify(_obj(_es.unfixed_qr_positive_mean(
        _xp(), _obj([-av / 2, 0]), _obj([-av / 2, 0]), 1)).ravel()[0]) * sympy.exp(-av**2 / 2))
    chk.nonzero(bias.subs(av, 1) - 1, "the unfixed mean differs from SM at s = (-1, 0)")
    # LAPACK's sign convention, as the library draws it (observed, not proved)
    blocks = [_fe.draw_orthogonal(seed, 2, 2, fix_signs=False) for seed in range(64)]
    fixed = [_fe.draw_orthogonal(seed, 2, 2, fix_signs=True) for seed in range(64)]
    chk.holds(all(B[0, 0] < 0 and B[1, 1] > 0 for B in blocks)
              and {bool(B[0, 0] < 0) for B in fixed} == {True, False},
              "unfixed blocks: first row in {u_1 < 0}, second in {u_2 > 0}; fixed: both signs")
    return chk.proof([
        Step("A $\\chi_d$ radius ($\\int_0^\\infty = 1$) times an independent uniform direction "
             "on the sphere is $\\mathcal N(0, I_d)$: the densities agree after the polar "
             "($d = 2$) and spherical ($d = 3$) changes of variables (Jacobians $r$, "
             "$r^2\\sin\\varphi$):",
             r"\chi_d(r)\,\frac{dS}{|S^{d-1}|} = \frac{e^{-\|w\|^2/2}}{(2\pi)^{d/2}}\,dw"),
        Step("$d = 2$, $G = QR$ with $R_{kk} > 0$ (the sign fix of `draw_orthogonal`): the "
             "first column is $u = g_1/\\|g_1\\|$, uniform on the circle (rotation invariance "
             "of the Gaussian), the second $\\pm u^\\perp$; each row of $Q$ is $Au$ for a "
             "fixed orthogonal $A$ (checked for both signs), so it is uniform too, and times "
             "its independent $\\chi_2$ length it is $\\mathcal N(0, I_2)$: every one-row term "
             "keeps its mean, and the estimators stay unbiased (identity "
             "`attention_random_features_unbiased`), whatever the dependence between rows."),
        Step("Without the sign fix (LAPACK's Householder convention $R_{kk} = "
             "-\\operatorname{sign}(\\alpha_k)\\|\\cdot\\|$; observed on 64 draws of the "
             "running `draw_orthogonal`, $d = 2$, `fix_signs=False`: $w_{11} < 0 < w_{22}$ "
             "always, while with the fix both signs occur) the rows are "
             "distributed as $(-|g_1|, g_2)$ and $(g_1, |g_2|)$; the half-line integrals, "
             "done here, give the exact mean of the positive estimate, which equals the "
             "running `unfixed_qr_positive_mean` ($m = 1, 2, 3$) and is not $e^{x^\\top y}$ "
             "(at $s = x + y = (-1, 0)$ it is $e^{x^\\top y}(1 + \\operatorname{erf}(1/\\sqrt 2))$"
             "): biased.",
             r"2\int_{-\infty}^0 e^{aw}\varphi(w)\,dw = " + sympy.latex(sympy.simplify(neg))),
        Step("Variance (cited, not proved here): Choromanski et al. 2021, Theorem 2 — for the "
             "positive and trigonometric estimators with $m \\le d$ orthogonal rows, "
             "$\\mathrm{MSE}_{ort} \\le \\mathrm{MSE}_{iid}$ minus a nonnegative term of order "
             "$(1 - 1/m)$, because distinct rows are negatively correlated, while each row's "
             "marginal (the exact part above) and hence the mean are unchanged."),
    ])

