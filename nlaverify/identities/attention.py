r"""The ``attention`` family: attention as kernel regression, linearised attention and random
features (Baggag & Saad §2.8, §4.3, §4.4; Choromanski et al. 2021, "Rethinking attention with
Performers"), proved with the running functions of :mod:`nlaverify.ops.sdpa`,
:mod:`nlaverify.ops.linear_attention` and :mod:`nlaverify.attention` on the SymPy namespace.

Expectations over the random features are exact. Every estimator met here is a polynomial in
:math:`\cos, \sin, \cosh, \exp` of linear forms in the Gaussian rows :math:`w_r \sim
\mathcal N(0, I_d)` and the phases :math:`b_r \sim U(0, 2\pi)`; rewritten in complex
exponentials it is a sum of terms :math:`c\,e^{s^\top w + i k^\top b}`, and two 1-D facts,
integrated by SymPy, give every expectation: :math:`\mathbb E\,e^{(a+ic)w} = e^{(a+ic)^2/2}`
(:math:`w \sim \mathcal N(0, 1)`) and :math:`\mathbb E\,e^{ikb} = [k = 0]` (integer
:math:`k`); the coordinates being independent, :math:`\mathbb E\,e^{s^\top w} = \prod_j
\mathbb E\,e^{s_j w_j} = e^{s^\top s/2}`. The library is called through its modules
(``_la.favor_attention``, ``_es.positive_mse``, ...), so a test can plant an error and see
the proof fail.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np
import sympy

from nlaverify.attention import estimators as _es
from nlaverify.attention import features as _fe
from nlaverify.errors import NlaverifyError
from nlaverify.identities._expectations import _Checks, _clean, _obj, _xp
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.ops import linear_attention as _la
from nlaverify.ops import sdpa as _sd
from nlaverify.ops import softmaxes as _sm
from nlaverify.symbolic.exact import symbol_array

#: the module (the package re-exports the function under the same name)
_nw = importlib.import_module("nlaverify.attention.nadaraya_watson")

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


# --------------------------------------------------------------------------- §2.8: NW weights


def derive_nadaraya_watson() -> Proof:
    n, d = 3, 2
    chk, root = _Checks(), sympy.sqrt(d)
    Q, K, V = _sym("q", (n, d)), _sym("k", (n, d)), _sym("v", (n, d))
    xp = _xp()
    P = _clean(_sd.attention(xp, Q, K, _eye(n)))
    kappa = sympy.Matrix(n, n, lambda i, j: sympy.exp(sum(Q[i] * K[j]) / root))
    R = _A(_normalised(kappa, sympy.eye(n)))
    chk.zero(P - R, "softmax(QK^T/sqrt d) with V = I minus the kernel weights")
    chk.zero(P.sum(axis=1) - 1, "row sums minus 1")
    out = _clean(_sd.attention(_xp(), Q, K, V))
    chk.zero(out - _A(_M(R) * _M(V)), "attention(Q, K, V) minus sum_j w_ij v_j")
    # equal key norms a^2 + b^2: the keys (a, b), (b, a), (-a, b), symbolic a, b
    a, b = sympy.symbols("a b", real=True)
    Kc = _obj([[a, b], [b, a], [-a, b]])
    sigma = _quarter_root(d)
    nw = _clean(_nw.nadaraya_watson(_xp(), Q, Kc, V, sigma))
    chk.zero(nw - _clean(_sd.attention(_xp(), Q, Kc, V)),
             "nadaraya_watson(sigma = d^(1/4)) minus attention, equal key norms")
    # any keys: attention = NW(omega V) / NW(omega), omega_j = exp(|k_j|^2 / (2 sqrt d))
    Q2, K2, V2 = Q[:2], K[:2], V[:2, :1]  # n = 2, d_v = 1 (the quotient is costly)
    omega = _obj([[sympy.exp(sum(k * k) / (2 * root))] for k in K2])
    both = _clean(_nw.nadaraya_watson(_xp(), Q2, K2, np.concatenate([omega * V2, omega], 1),
                                      sigma))
    chk.zero(both[:, :1] / both[:, 1:] - _clean(_sd.attention(_xp(), Q2, K2, V2)),
             "NW(omega V) / NW(omega) minus attention")
    return chk.proof([
        Step(f"Symbolic $Q, K, V \\in \\mathbb R^{{{n}\\times{d}}}$. The running `attention` "
             "with $V = I$ returns its weights; they are the Nadaraya–Watson weights of the "
             "exponential kernel $\\kappa(q, k) = e^{q^\\top k/\\sqrt d}$ (built here "
             "entrywise), sum to 1 in each row, and the output is the weighted mean of the "
             "values (Baggag & Saad §2.8):",
             r"\operatorname{softmax}\Bigl(\frac{QK^\top}{\sqrt d}\Bigr)_{ij} = "
             r"\frac{\kappa(q_i, k_j)}{\sum_l \kappa(q_i, k_l)},\quad \sum_j w_{ij} = 1,\quad "
             r"o_i = \sum_j w_{ij} v_j"),
        Step("Keys of equal norm ($k = (a, b), (b, a), (-a, b)$, symbolic $a, b$): the "
             "running `nadaraya_watson` with the Gaussian kernel of width $\\sigma = d^{1/4}$ "
             "equals `attention`, because $e^{q^\\top k/\\sqrt d}"
             " = e^{\\|q\\|^2/2\\sqrt d}e^{\\|k\\|^2/2\\sqrt d}e^{-\\|q-k\\|^2/2\\sqrt d}$ and "
             "the first two factors are constant in $j$:",
             r"\operatorname{attention}(Q, K, V) = \operatorname{NW}_{\sigma = d^{1/4}}"
             r"(Q, K, V)\quad (\|k_j\| = \rho)"),
        Step("Any keys ($n = 2$, $d_v = 1$): with $\\omega_j = e^{\\|k_j\\|^2/2\\sqrt d}$, "
             "softmax attention is the ratio of two Gaussian Nadaraya–Watson regressions (the "
             "running "
             "`nadaraya_watson` on the values $[\\omega_j v_j, \\omega_j]$):",
             r"\operatorname{attention}(Q, K, V)_i = \frac{\operatorname{NW}_{\sigma}"
             r"(q_i, K, \omega \odot V)}{\operatorname{NW}_{\sigma}(q_i, K, \omega)}"),
    ])


# --------------------------------------------------------------------------- §4.3: associativity

_n, _d = sympy.symbols("n d", integer=True, positive=True)


def _matmul_cost(a: Any, b: Any, c: Any) -> Any:
    r"""Flops of an :math:`(a\times b)(b\times c)` product: :math:`b` multiplications and
    :math:`b - 1` additions per entry."""
    return (2 * b - 1) * a * c


def derive_associativity() -> Proof:
    chk = _Checks()
    xp = _xp()
    # the cost model, counted on what the namespace's matmul builds from fresh symbols
    for a, b, c in [(1, 1, 1), (2, 3, 1), (3, 2, 4), (4, 4, 2)]:
        prod = xp.matmul(_sym("x", (a, b)), _sym("y", (b, c)))
        ops = sum(sympy.count_ops(e) for e in _obj(prod).ravel())
        chk.holds(ops == _matmul_cost(a, b, c), f"flops of a {a}x{b}x{c} product", ops)
    quad = _matmul_cost(_n, _d, _n) + _matmul_cost(_n, _n, _d)
    lin_ = _matmul_cost(_d, _n, _d) + _matmul_cost(_n, _d, _d)
    gap = sympy.factor(quad - lin_)
    other = sympy.cancel(gap / (_n - _d))
    chk.holds(other.is_polynomial(_n, _d), "the cost gap has the factor n - d", gap)
    chk.zero(sympy.expand(other * (_n - _d) - (quad - lin_)), "cost gap factorisation")
    # other = (2d-1) n + (2n-1) d > 0 for n, d >= 1: every coefficient after n = 1 + u,
    # d = 1 + v is positive
    u, v = sympy.symbols("u v", nonnegative=True)
    shifted = sympy.Poly(sympy.expand(other.subs({_n: 1 + u, _d: 1 + v})), u, v)
    chk.holds(all(c > 0 for c in shifted.coeffs()), "the other factor is positive", other)
    lead = [sympy.LT(sympy.expand(quad), _n, _d), sympy.LT(sympy.expand(lin_), _d, _n)]
    # the running linear form against the quadratic one
    n, m, dv = 3, 2, 2
    Qf, Kf, V = _sym("phi", (n, m)), _sym("psi", (n, m)), _sym("v", (n, dv))
    chk.zero(xp.matmul(xp.matmul(Qf, xp.matrix_transpose(Kf)), V)
             - xp.matmul(Qf, xp.matmul(xp.matrix_transpose(Kf), V)), "(QK^T)V - Q(K^TV)")
    ref = _normalised(_M(Qf) * _M(Kf).T, _M(V))
    chk.zero(_la.kernel_attention(_xp(), Qf, Kf, V) - _A(ref),
             "kernel_attention minus D^-1 (Qf Kf^T) V", rational=True)
    return chk.proof([
        Step("Cost model: an $(a\\times b)(b\\times c)$ product takes $(2b-1)ac$ flops, "
             "counted (`sympy.count_ops`) on what the namespace's `matmul` builds from fresh "
             "symbols for four shapes. With $Q, K, V \\in \\mathbb R^{n\\times d}$:",
             r"\mathrm{cost}\bigl((QK^\top)V\bigr) = " + sympy.latex(sympy.expand(quad))
             + r",\quad \mathrm{cost}\bigl(Q(K^\top V)\bigr) = " + sympy.latex(
                 sympy.expand(lin_))),
        Step("Leading terms (per product $2n^2d$ against $2nd^2$, as in the seed), and the "
             "exact gap, a product of $n - d$ and a factor positive for $n, d \\ge 1$ (its "
             "coefficients in $n - 1, d - 1$ are positive): the linear order wins exactly "
             "when $n > d$, they tie at $n = d$.",
             r"\text{leading: } " + sympy.latex(lead[0]) + r" \text{ vs } "
             + sympy.latex(lead[1]) + r",\qquad \mathrm{cost}_{quad} - \mathrm{cost}_{lin} = "
             + sympy.latex(gap)),
        Step(f"Symbolic features $Q_f, K_f \\in \\mathbb R^{{{n}\\times{m}}}$, $V \\in "
             f"\\mathbb R^{{{n}\\times{dv}}}$: $(Q_fK_f^\\top)V = Q_f(K_f^\\top V)$, and the "
             "running `kernel_attention` ($C = [V, \\mathbb 1]$, $X = K_f^\\top C$, $Y = Q_f "
             "X$) equals the quadratic form built with SymPy matrices:",
             r"Y_{:, :d_v} / Y_{:, d_v} = D^{-1}(Q_fK_f^\top)V,\quad D = "
             r"\operatorname{diag}(Q_fK_f^\top\mathbb 1)"),
    ])


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


# --------------------------------------------------------------------------- causal, FAVOR+


def _positive_reference(X: np.ndarray, W: np.ndarray) -> sympy.Matrix:
    r""":math:`e^{w_r^\top x_i - \|x_i\|^2/2}/\sqrt m`, entrywise (FAVOR+ without shifts)."""
    m = W.shape[0]
    return sympy.Matrix(X.shape[0], m, lambda i, r: sympy.exp(
        sum(X[i] * W[r]) - sum(X[i] * X[i]) / 2) / sympy.sqrt(m))


def _shifts(a: Any) -> list[sympy.Symbol]:
    return sorted({s for e in _obj(a).ravel() if isinstance(e, sympy.Basic)
                   for s in e.free_symbols if s.name.startswith("c_")}, key=str)


def derive_causal_and_shifts() -> Proof:
    chk = _Checks()
    n, m, dv = 3, 2, 2
    Qf, Kf, V = _sym("phi", (n, m)), _sym("psi", (n, m)), _sym("v", (n, dv))
    for causal in (True, False):
        A = _M(Qf) * _M(Kf).T
        ref = _normalised(_tril(A) if causal else A, _M(V))
        chk.zero(_la.kernel_attention(_xp(), Qf, Kf, V, causal=causal) - _A(ref),
                 f"kernel_attention(causal={causal}) minus D^-1 ((Qf Kf^T) o M) V", rational=True)
    # shifts of the features, one per query row and one for all keys, cancel (any features)
    cq, ck = _sym("gamma", (n, 1)), sympy.Symbol("kappa", real=True)
    scaled = Qf * np.vectorize(sympy.exp, otypes=[object])(-cq)
    for causal in (True, False):
        chk.zero(_la.kernel_attention(_xp(), scaled, Kf * sympy.exp(-ck), V, causal=causal)
                 - _la.kernel_attention(_xp(), Qf, Kf, V, causal=causal),
                 f"shifted minus unshifted features (causal={causal})", rational=True)
    # the running FAVOR+: free of its stabilisers, and equal to the unshifted positive form
    n2, d, m2, dv2 = 2, 2, 2, 1
    Q, K, V2 = _sym("q", (n2, d)), _sym("k", (n2, d)), _sym("v", (n2, dv2))
    W = _sym("w", (m2, d))
    r = _quarter_root(d)
    found = 0
    for causal in (True, False):
        out = _obj(_la.favor_plus_attention(_xp(), Q, K, V2, W, causal=causal))
        shifts = _shifts(out)
        found = max(found, len(shifts))
        # identically 0 as a function of every symbol, the stabilisers included
        chk.zero(out - _clean(out), f"out minus out at zero stabilisers (causal={causal})")
        A = _positive_reference(Q / r, W) * _positive_reference(K / r, W).T
        ref = _normalised(_tril(A) if causal else A, _M(V2))
        chk.zero(_clean(out) - _A(ref), f"favor_plus_attention(causal={causal}) minus reference")
    chk.holds(found == n2 + 1, "one stabiliser per query row and one for the keys", found)
    return chk.proof([
        Step(f"Any feature map: symbolic features $Q_f, K_f \\in \\mathbb R^{{{n}\\times{m}}}$ "
             "and values $V$. The running `kernel_attention` with `causal=True` (prefix sums "
             "$S_i = \\sum_{j\\le i}K_{f,j}C_j^\\top$, $C = [V, \\mathbb 1]$) equals the masked "
             "quadratic form built with SymPy matrices, and without `causal` the unmasked one:",
             r"Y_i = Q_{f,i}^\top\sum_{j\le i}K_{f,j}[v_j^\top, 1],\quad "
             r"\frac{Y_{i, :d_v}}{Y_{i, d_v}} = \frac{\sum_{j\le i}(q_{f,i}^\top k_{f,j})v_j}"
             r"{\sum_{j\le i}q_{f,i}^\top k_{f,j}}"),
        Step("Shifts cancel: multiplying query row $i$ of the features by $e^{-\\gamma_i}$ and "
             "all key features by $e^{-\\kappa}$ (symbolic $\\gamma_i, \\kappa$) leaves the "
             "running `kernel_attention` unchanged, causal or not: row $i$ of the numerator "
             "and of $D$ share the factor $e^{-\\gamma_i - \\kappa}$ (a shift per key would "
             "not cancel).",
             r"D^{-1}\bigl((\Gamma Q_fK_f^\top e^{-\kappa})\circ M\bigr)V = "
             r"D^{-1}\bigl((Q_fK_f^\top)\circ M\bigr)V,\quad \Gamma = "
             r"\operatorname{diag}(e^{-\gamma_i})"),
        Step(f"The running `favor_plus_attention` ($n = {n2}$, $d = {d}$, $m = {m2}$, symbolic "
             "$Q, K, V, W$) holds its stabilisers as opaque symbols (one per query row, one for "
             "the keys); it equals, identically in every symbol (the stabilisers included), its "
             "value with the stabilisers set to 0, and that equals "
             "$D^{-1}((\\Phi_+(Q/d^{1/4})\\Phi_+(K/d^{1/4})^\\top)\\circ M)V$ built here, "
             "$\\Phi_+(x) = e^{Wx - \\|x\\|^2/2}/\\sqrt m$, causal or not."),
    ])


# --------------------------------------------------------------------------- elu+1, Shen


def derive_elu1_and_efficient() -> Proof:
    chk = _Checks()
    p, z = sympy.Symbol("p", positive=True), sympy.Symbol("z", nonpositive=True)
    x = sympy.Symbol("x", real=True)
    elu_ref = sympy.Piecewise((x + 1, x > 0), (sympy.exp(x), True))  # elu(x) + 1, alpha = 1
    chk.zero(_obj(_la.elu1(_xp(), _obj([p, z]))) - _obj([elu_ref.subs(x, p),
                                                          elu_ref.subs(x, z)]), "elu1")
    chk.holds(sympy.piecewise_fold(_obj(_la.elu1(_xp(), _obj([x])))[0] - elu_ref) == 0
              or sympy.simplify(_obj(_la.elu1(_xp(), _obj([x])))[0] - elu_ref) == 0,
              "elu1 on a symbol of unknown sign is elu + 1")
    n, d = 3, 2
    # sign patterns fix every branch: entries positive or nonpositive symbols
    for pattern in ([[1, 0], [0, 1], [1, 1]], [[0, 0], [1, 0], [0, 1]]):
        def sym(name: str, pattern: list = pattern) -> np.ndarray:
            return _obj([[sympy.Symbol(f"{name}_{{{i + 1},{j + 1}}}", positive=True)
                          if pattern[i][j] else sympy.Symbol(f"{name}_{{{i + 1},{j + 1}}}",
                                                            nonpositive=True)
                          for j in range(d)] for i in range(n)])
        Q, K = sym("q"), sym("k")
        V = _sym("v", (n, 2))
        fQ = _M(Q).applyfunc(lambda e: elu_ref.subs(x, e))
        fK = _M(K).applyfunc(lambda e: elu_ref.subs(x, e))
        for causal in (False, True):
            A = fQ * fK.T
            ref = _normalised(_tril(A) if causal else A, _M(V))
            chk.zero(_la.elu1_attention(_xp(), Q, K, V, causal=causal) - _A(ref),
                     f"elu1_attention(causal={causal}) minus reference")
            P = _obj(_la.elu1_attention(_xp(), Q, K, _eye(n), causal=causal))
            chk.zero(P.sum(axis=1) - 1, f"elu1 weights: row sums (causal={causal})")
            chk.holds(all(e.is_positive or (e == 0 and causal and j > i)
                          for (i, j), e in np.ndenumerate(P)), "elu1 weights positive", P)
    # Shen et al.: softmax over each query row, over each key column
    Q, K, V = _sym("q", (n, d)), _sym("k", (n, d)), _sym("v", (n, 2))
    rho = sympy.Matrix(n, d, lambda i, c: sympy.exp(Q[i, c]) / sum(sympy.exp(Q[i, t])
                                                                      for t in range(d)))
    sig = sympy.Matrix(n, d, lambda j, c: sympy.exp(K[j, c]) / sum(sympy.exp(K[t, c])
                                                                      for t in range(n)))
    out = _clean(_la.efficient_attention(_xp(), Q, K, V))
    chk.zero(out - _A(rho * (sig.T * _M(V))), "efficient_attention minus rho (sigma^T V)")
    P = _clean(_la.efficient_attention(_xp(), Q, K, _eye(n)))
    chk.zero(P.sum(axis=1) - 1, "efficient attention weights: row sums")
    return chk.proof([
        Step("The running `elu1` is $\\operatorname{elu}(x) + 1$ ($\\alpha = 1$): $x + 1$ for "
             "$x > 0$, $e^x$ for $x \\le 0$; positive everywhere.",
             r"\phi(x) = \begin{cases} x + 1 & x > 0\\ e^{x} & x \le 0\end{cases} > 0"),
        Step(f"Symbolic $Q, K \\in \\mathbb R^{{{n}\\times{d}}}$ with entries of fixed signs "
             "(two patterns, so both branches occur in every product), symbolic $V$: the "
             "running `elu1_attention` equals $D^{-1}((\\phi(Q)\\phi(K)^\\top)\\circ M)V$, "
             "causal and not; with $V = I$ its weights are positive (masked ones 0) and each "
             "row sums to 1: row-stochastic.",
             r"\operatorname{out} = D^{-1}\bigl((\phi(Q)\phi(K)^\top)\circ M\bigr)V,\quad "
             r"w_{ij} > 0,\ \sum_j w_{ij} = 1"),
        Step("Shen et al. (Baggag & Saad §4.3): the running `efficient_attention` equals "
             "$\\operatorname{softmax}_{rows}(Q)\\,(\\operatorname{softmax}_{cols}(K)^\\top V)$ "
             "built here from exponentials, and with $V = I$ its rows sum to 1 "
             "($\\sum_j\\sum_l\\rho_{il}\\sigma_{jl} = \\sum_l\\rho_{il} = 1$).",
             r"\operatorname{out} = \rho\,(\sigma^\top V),\quad \rho_{il} = "
             r"\frac{e^{q_{il}}}{\sum_t e^{q_{it}}},\ \sigma_{jl} = "
             r"\frac{e^{k_{jl}}}{\sum_t e^{k_{tl}}}"),
    ])


# --------------------------------------------------------------------------- Linformer


def derive_linformer() -> Proof:
    chk = _Checks()
    n, d = 3, 2
    Q, K, V = _sym("q", (n, d)), _sym("k", (n, d)), _sym("v", (n, d))
    chk.zero(_clean(_la.linformer_attention(_xp(), Q, K, V, _eye(n), _eye(n)))
             - _clean(_sd.attention(_xp(), Q, K, V)), "E = F = I: linformer minus attention")
    k = 2
    E, F = _sym("e", (k, n)), _sym("f", (k, n))
    EK = _M(E) * _M(K)
    S = sympy.Matrix(n, k, lambda i, c: sympy.exp(sum(Q[i, t] * EK[c, t] for t in range(d))
                                                  / sympy.sqrt(d)))
    Pt = _normalised(S, sympy.eye(k))
    out = _clean(_la.linformer_attention(_xp(), Q, K, V, E, F))
    chk.zero(out - _A(Pt * (_M(F) * _M(V))), "linformer minus softmax(Q (EK)^T/sqrt d) (F V)")
    chk.zero(_A(Pt).sum(axis=1) - 1, "the n x k weights: row sums")
    # the effective n x n matrix M = P~ F (out = M V): rank <= k < n, rows not stochastic
    Meff = _M(_clean(_la.linformer_attention(_xp(), Q, K, _eye(n), E, F)))
    chk.zero(Meff - Pt * _M(F), "out(V = I) minus P~ F")
    chk.zero(Meff.det(method="berkowitz"), "det(P~ F) (rank <= k = 2 < n = 3)")
    chk.nonzero(sum(Meff.row(0)) - 1, "row sum of P~ F minus 1")
    # causality is lost: output row 1 depends on V's last row
    Vs = _sym("u", (n, 1))
    first = _clean(_la.linformer_attention(_xp(), Q, K, Vs, E, F))[0, 0]
    chk.nonzero(sympy.diff(first, Vs[n - 1, 0]), "d out_1 / d v_n")
    causal_first = _clean(_sd.attention(_xp(), Q, K, Vs, causal=True))[0, 0]
    chk.zero(sympy.diff(causal_first, Vs[n - 1, 0]), "causal attention: d out_1 / d v_n")
    try:
        _la.linformer_attention(_xp(), Q, K, V, E, F, causal=True)
        raised = False
    except NlaverifyError:
        raised = True
    chk.holds(raised, "linformer_attention(causal=True) raises")
    return chk.proof([
        Step(f"$E = F = I_n$ ($n = {n}$, symbolic $Q, K, V$): the running "
             "`linformer_attention` is exactly the running `attention`."),
        Step(f"$k = {k} < n$, symbolic $E, F \\in \\mathbb R^{{{k}\\times{n}}}$: it is softmax "
             "attention over the $k$ projected keys $EK$ with the projected values $FV$: "
             "its $n\\times k$ weights $\\tilde P$ are row-stochastic weights over $k$ mixed "
             "tokens, and the output has rank $\\le k$.",
             r"\operatorname{out} = \tilde P(FV),\quad \tilde P = \operatorname{softmax}"
             r"\Bigl(\frac{Q(EK)^\top}{\sqrt d}\Bigr),\quad \tilde P\mathbb 1 = \mathbb 1"),
        Step("What is not preserved: the effective $n\\times n$ matrix $\\tilde PF$ "
             "($\\operatorname{out} = \\tilde PF\\,V$, from the running code at $V = I$) is "
             "singular (its determinant is exactly 0: rank $\\le k$) and its rows do not sum "
             "to 1 (refuted at a rational point): it is not the attention matrix of any $n$ "
             "keys. Causality is lost: $\\partial o_1/\\partial v_n \\ne 0$ (refuted at a "
             "rational point), while for causal softmax attention it is exactly 0; the running "
             "code refuses `causal=True`.",
             r"\frac{\partial o_1}{\partial v_n} = \sum_l\tilde P_{1l}F_{ln} \ne 0"),
    ])


# --------------------------------------------------------------------------- catalogue

_F = "attention"


def _reg(id_: str, title: str, statement: str, seed: str, certifies: tuple,
         derive: Callable[[], Proof]) -> None:
    register(Identity(id_, _F, title, statement, seed, tuple(qualname(f) for f in certifies),
                      guard(derive), tags=("attention",)))


_reg("attention_nadaraya_watson", "Attention rows are Nadaraya–Watson weights",
     r"\operatorname{softmax}\bigl(QK^\top/\sqrt d\bigr)_{ij} = \frac{e^{q_i^\top k_j/\sqrt d}}"
     r"{\sum_l e^{q_i^\top k_l/\sqrt d}},\ \sum_j w_{ij} = 1;\quad \|k_j\| \equiv \rho "
     r"\Rightarrow \operatorname{attention} = \operatorname{NW}_{\sigma = d^{1/4}}", S28,
     (_sd.attention, _sd.attention_scores, _sm.softmax, _nw.nadaraya_watson,
      _nw.nadaraya_watson_weights), derive_nadaraya_watson)
_reg("attention_linear_associativity", "Linear attention: (QK^T)V = Q(K^TV) and its cost",
     r"(QK^\top)V = Q(K^\top V);\ \ 2n^2d \text{ vs } 2nd^2 \text{ per product, the linear "
     r"order cheaper iff } n > d", S43, (_la.kernel_attention,), derive_associativity)
_reg("attention_softmax_kernel_is_gaussian",
     "The softmax kernel is a Gaussian kernel of width d^(1/4) (FAVOR)",
     r"e^{q^\top k/\sqrt d} = e^{\|q\|^2/2\sqrt d}e^{\|k\|^2/2\sqrt d}e^{-\|q-k\|^2/2\sqrt d};"
     r"\ \operatorname{FAVOR} = D^{-1}\hat AV,\ \mathbb E\hat A = e^{QK^\top/\sqrt d}", S44,
     (_la.favor_attention, _la.trig_features, _es.softmax_kernel, _es.gaussian_kernel),
     derive_softmax_kernel_gaussian)
_reg("attention_random_features_unbiased", "Random features are unbiased",
     r"\mathbb E_{w, b}\,\phi_{trig}(x)^\top\phi_{trig}(y) = e^{-\|x-y\|^2/2},\quad "
     r"\mathbb E_w\,\phi_{+}(x)^\top\phi_{+}(y) = \mathbb E_w\,\phi_{hyp}(x)^\top\phi_{hyp}(y)"
     r" = e^{x^\top y}", f"{S44}; {PERFORMER}",
     (_es.kernel_estimate, _la.trig_features, _la.positive_features, _la.hyperbolic_features,
      _es.softmax_kernel, _es.gaussian_kernel), derive_unbiased)
_reg("attention_random_features_mse", "Mean squared errors of the random features",
     r"\mathrm{MSE}_{+} = \tfrac1m e^{\|x+y\|^2}\mathrm{SM}^2(1 - e^{-\|x+y\|^2}),\ "
     r"\mathrm{MSE}_{hyp} = \tfrac12(1 - e^{-\|x+y\|^2})\mathrm{MSE}_{+},\ "
     r"\mathrm{MSE}_{trig} = \tfrac1{2m}\bigl[(1 - e^{-\|x-y\|^2})^2 + 1\bigr]",
     f"{S44}; {PERFORMER}",
     (_es.trig_mse, _es.positive_mse, _es.hyperbolic_mse, _es.mse, _es.kernel_estimate),
     derive_mse)
_reg("attention_orthogonal_features", "Orthogonal random features keep the estimators unbiased",
     r"w = \chi_d\cdot u,\ u \sim \mathrm{Unif}(S^{d-1}) \Rightarrow w \sim \mathcal N(0, I_d);"
     r"\ \text{QR without the sign fix: } \mathbb E\hat K \ne e^{x^\top y}",
     f"{S44}; {PERFORMER}", (_fe.draw_orthogonal, _es.unfixed_qr_positive_mean),
     derive_orthogonal)
_reg("attention_causal_prefix_sums", "Causal prefix sums; FAVOR+'s stabilisers cancel",
     r"Y_i = \phi(q_i)^\top\sum_{j\le i}\phi(k_j)[v_j^\top, 1] \Rightarrow "
     r"\operatorname{out} = D^{-1}\bigl((Q_fK_f^\top)\circ M\bigr)V;\ \ "
     r"\Gamma Q_f,\ e^{-\kappa}K_f \text{ give the same output}", f"{S43}; {S44}",
     (_la.kernel_attention, _la.favor_plus_attention, _la.positive_features),
     derive_causal_and_shifts)
_reg("attention_elu1_and_efficient", "elu+1 linear attention and Shen's efficient attention",
     r"D^{-1}\bigl((\phi(Q)\phi(K)^\top)\circ M\bigr)V,\ \phi = \operatorname{elu} + 1 > 0;"
     r"\ \ \operatorname{softmax}_{rows}(Q)\bigl(\operatorname{softmax}_{cols}(K)^\top V\bigr)"
     r",\ \text{rows sum to } 1", S43,
     (_la.elu1, _la.elu1_attention, _la.efficient_attention), derive_elu1_and_efficient)
_reg("attention_linformer", "Linformer: what the projections preserve and what they do not",
     r"E = F = I \Rightarrow \text{exact};\ \operatorname{out} = \tilde P(FV),\ \tilde P"
     r"\mathbb 1 = \mathbb 1,\ \operatorname{rank} \le k;\ \tilde PF\mathbb 1 \ne \mathbb 1,"
     r"\ \partial o_1/\partial v_n \ne 0", S44, (_la.linformer_attention,), derive_linformer)
