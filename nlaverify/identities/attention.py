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

The family is split by concept: the shared helpers and :func:`expect` live in
:mod:`nlaverify.identities.attention_expect`, the random-feature derivations in
:mod:`nlaverify.identities.attention_features`; this module holds the rest and registers the
whole family, in catalogue order (and re-exports :func:`expect`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np
import sympy

from nlaverify.attention import estimators as _es
from nlaverify.attention import features as _fe
from nlaverify.errors import NlaverifyError
from nlaverify.identities._expectations import _Checks, _clean, _obj, _xp
from nlaverify.identities.attention_expect import (
    _A,
    _M,
    PERFORMER,
    S28,
    S43,
    S44,
    _canon,  # noqa: F401  (re-exported: online_softmax)
    _eye,
    _normalised,
    _quarter_root,
    _sym,
    _tril,
    expect,  # noqa: F401  (re-exported)
)
from nlaverify.identities.attention_features import (
    derive_mse,
    derive_orthogonal,
    derive_softmax_kernel_gaussian,
    derive_unbiased,
)
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.ops import linear_attention as _la
from nlaverify.ops import sdpa as _sd
from nlaverify.ops import softmaxes as _sm

#: the module (the package re-exports the function under the same name)
_nw = importlib.import_module("nlaverify.attention.nadaraya_watson")


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
