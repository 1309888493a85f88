r"""The ``lowrank`` family, compression part: truncated and randomized SVD, uniform quantizers,
magnitude pruning and distillation (Baggag & Saad §4.1, Table 6, Fig. 27), proved with the
running functions of :mod:`nlaverify.lowrank` on the SymPy namespace.

The matrices are exact: :math:`A = U\operatorname{diag}(\sigma)V^\top` with rational
orthogonal :math:`U, V` from Cayley transforms :math:`(I - S)(I + S)^{-1}` of rational
skew-symmetric :math:`S`, so every singular value and vector is known in closed form and the
library's exact SVD has rational inputs. Quantizers are checked at every point of a rational
grid that includes the ties and both ends of the covered interval; distillation at symbolic
logits and temperature. The library is called through its modules (``_sv.truncated_svd``,
``_qz.quantize``, ...), so a test can plant an error and see the proof fail.

The quantizer and pruning derivations live in :mod:`nlaverify.identities.lowrank_compression`;
this module holds the SVD and distillation ones and registers the whole family, in catalogue
order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import sympy

from nlaverify.identities._expectations import _Checks, _clean, _obj, _xp
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.identities.lowrank_compression import (
    derive_linear_bound,
    derive_pruning,
    derive_quantizer_bound,
)
from nlaverify.lowrank import distill as _di
from nlaverify.lowrank import prune as _pr
from nlaverify.lowrank import quantization as _qz
from nlaverify.lowrank import svd as _sv
from nlaverify.symbolic.exact import symbol_array

S41 = "Baggag & Saad §4.1"
HMT = "Halko, Martinsson & Tropp 2011, §4, Thm. 10.5–10.6"
R = sympy.Rational

# --------------------------------------------------------------------------- helpers


def _M(a: Any) -> sympy.Matrix:
    return sympy.Matrix(_obj(a).tolist())


def _A(m: sympy.Matrix) -> np.ndarray:
    return _obj(np.array(m.tolist(), dtype=object))


def _cayley(S: sympy.Matrix) -> sympy.Matrix:
    r"""A rational orthogonal matrix :math:`(I - S)(I + S)^{-1}` (``S`` skew-symmetric)."""
    eye = sympy.eye(S.rows)
    return (eye - S) * (eye + S).inv()


def _skew(n: int, entries: list[Any]) -> sympy.Matrix:
    S = sympy.zeros(n, n)
    it = iter(entries)
    for i in range(n):
        for j in range(i + 1, n):
            v = sympy.nsimplify(next(it))
            S[i, j], S[j, i] = v, -v
    return S


def _exact_cases() -> list[tuple[str, sympy.Matrix, list[Any]]]:
    """Exact matrices with known singular values: a 3x3 with distinct ones, a 4x3 with a
    repeated one."""
    U3 = _cayley(_skew(3, [1, 2, R(1, 2)]))
    V3 = _cayley(_skew(3, [R(1, 3), -1, 2]))
    U4 = _cayley(_skew(4, [1, R(1, 2), -1, R(1, 3), 2, R(-1, 4)]))
    s1, s2 = [5, 3, 1], [4, 2, 2]
    A1 = U3 * sympy.diag(*s1) * V3.T
    A2 = U4[:, :3] * sympy.diag(*s2) * V3.T
    return [("3\\times 3", A1, s1), ("4\\times 3", A2, s2)]


# --------------------------------------------------------------------------- SVD


def derive_eckart_young() -> Proof:
    xp = _xp()
    chk = _Checks()
    shown = ""
    for label, A, sig in _exact_cases():
        Aa = _A(A)
        r = len(sig)
        for k in range(r + 1):
            Uk, sk, Vk = _sv.truncated_svd(xp, Aa, k)
            chk.zero(_obj(sk) - _obj(sig[:k]), f"{label}: singular values, k={k}")
            chk.zero(_M(Uk).T * _M(Uk) - sympy.eye(k), f"{label}: U_k^T U_k = I, k={k}")
            chk.zero(_M(Vk) * _M(Vk).T - sympy.eye(k), f"{label}: V_k^T V_k = I, k={k}")
            Ak = _M(_sv.low_rank(xp, Uk, sk, Vk))
            Res = A - Ak
            spec, frob = _sv.truncation_errors(xp, _obj(sig), k)
            tail2 = sum(sympy.Integer(v) ** 2 for v in sig[k:])
            sk1 = sig[k] if k < r else 0
            # Frobenius: trace(R^T R) exactly; spectral: the largest eigenvalue of R^T R
            chk.zero((Res.T * Res).trace() - tail2, f"{label}: ||A - A_k||_F^2, k={k}")
            chk.zero(_obj(frob) ** 2 - tail2, f"{label}: truncation_errors Frobenius, k={k}")
            lam = max((Res.T * Res).eigenvals(), default=0)
            chk.zero(lam - sympy.Integer(sk1) ** 2, f"{label}: ||A - A_k||_2^2, k={k}")
            chk.zero(_obj(spec) - sk1, f"{label}: truncation_errors spectral, k={k}")
            ms, mf = _sv.approximation_errors(xp, Aa, _A(Ak))
            chk.zero(_obj(ms) - sk1, f"{label}: approximation_errors spectral, k={k}")
            chk.zero(_obj(mf) ** 2 - tail2, f"{label}: approximation_errors Frobenius, k={k}")
            if label.startswith("3") and k == 1:
                shown = sympy.latex(Ak)
        # optimality at k = 1: rational rank-1 competitors do no better (Frobenius)
        for u, v in (((1, 0, 0), (1, 1, 0)), ((1, -1, 2), (R(1, 2), 1, 1)),
                     ((2, 1, 1), (1, 0, -1))):
            uu = sympy.Matrix([*u, *([0] * (A.rows - 3))])
            vv = sympy.Matrix(v)
            best_c = (uu.T * A * vv)[0] / ((uu.T * uu)[0] * (vv.T * vv)[0])
            B = best_c * uu * vv.T
            gap = ((A - B).T * (A - B)).trace() - sum(sympy.Integer(x) ** 2 for x in sig[1:])
            chk.holds(bool(gap >= 0), f"{label}: a rank-1 competitor beats A_1", gap)
    return chk.proof([
        Step("Matrices with known SVD, exactly: $A = U\\operatorname{diag}(\\sigma)V^\\top$ with "
             "rational orthogonal $U, V$ (Cayley transforms $(I - S)(I + S)^{-1}$ of rational "
             "skew-symmetric $S$): a $3\\times 3$ with $\\sigma = (5, 3, 1)$ and a $4\\times 3$ "
             "with the repeated $\\sigma = (4, 2, 2)$ (so the truncation at $k = 2$ splits a "
             "two-dimensional singular subspace). `truncated_svd` on the SymPy namespace "
             "(eigenvectors of $A^\\top A$) returns these singular values and orthonormal "
             "factors for every $k = 0..r$; the rank-1 truncation of the $3\\times 3$ is",
             shown),
        Step("For each $k$, the residual $R = A - A_k$ of the library's truncation has "
             "$\\operatorname{tr}(R^\\top R) = \\sum_{i>k}\\sigma_i^2$ and largest eigenvalue of "
             "$R^\\top R$ equal to $\\sigma_{k+1}^2$ (both exact), and `truncation_errors` and "
             "`approximation_errors` return the same numbers.",
             r"\|A - A_k\|_2 = \sigma_{k+1},\qquad \|A - A_k\|_F = \Bigl(\sum_{i>k}"
             r"\sigma_i^2\Bigr)^{1/2}"),
        Step("Optimality (Eckart–Young–Mirsky): for any $B$ of rank $\\le k$, Weyl's inequality "
             "$\\sigma_{i+k}(A) \\le \\sigma_i(A - B) + \\sigma_{k+1}(B) = \\sigma_i(A - B)$ gives "
             "$\\|A - B\\|_2 \\ge \\sigma_{k+1}$ ($i = 1$) and $\\|A - B\\|_F^2 \\ge "
             "\\sum_{i>k}\\sigma_i^2$ (summing over $i$). Checked on rational rank-1 "
             "competitors $c\\,uv^\\top$ with the best $c$: none beats $A_1$."),
    ])


def _rank2() -> tuple[sympy.Matrix, sympy.Matrix]:
    L = sympy.Matrix([[1, 0], [2, 1], [0, -1], [1, 3], [R(1, 2), 1]])
    Rt = sympy.Matrix([[1, -1, 2, 0], [0, 1, 1, -2]])
    omega = sympy.Matrix([[1, 0, -1], [R(1, 2), 2, 1], [-1, 1, 0], [0, R(-1, 3), 2]])
    return L * Rt, omega


def derive_range_finder() -> Proof:
    xp = _xp()
    chk = _Checks()
    A, omega = _rank2()
    Aa = _A(A)
    shown = ""
    for k, p, q in ((1, 2, 0), (2, 0, 0), (1, 2, 1), (2, 1, 1)):
        om = _A(omega[:, : k + p])
        Q = _M(_sv.randomized_range_finder(xp, Aa, k, p, q, omega=om))
        P = (Q * Q.T).applyfunc(sympy.radsimp)
        chk.zero(P * A - A, f"QQ^T A = A (k={k}, p={p}, q={q})")
        chk.zero(P * P - P, f"QQ^T is a projector (k={k}, p={p}, q={q})")
        chk.zero((Q.T * Q).trace() - 2, f"rank Q = rank A (k={k}, p={p}, q={q})")
        if (k, p, q) == (1, 2, 0):
            shown = sympy.latex(Q.T * Q)
    # k + p < rank A: the range misses a direction
    Q1 = _M(_sv.randomized_range_finder(xp, Aa, 1, 0, 0, omega=_A(omega[:, :1])))
    miss = ((A - Q1 * Q1.T * A).T * (A - Q1 * Q1.T * A)).trace()
    chk.nonzero(miss, "k + p = 1 < rank A leaves a residual")
    # almost surely: a 2x2 minor of A Omega is a nonzero polynomial in a symbolic Omega
    Om = sympy.Matrix(symbol_array("omega", (4, 2)).tolist())
    minor = sympy.expand((A * Om)[:2, :2].det())
    chk.holds(minor != 0, "generic rank of A Omega", minor)
    return chk.proof([
        Step("A rank-2 $5\\times 4$ matrix $A = LR$ (rational) and a rational test matrix "
             "$\\Omega$ in place of the Gaussian draw. `randomized_range_finder` on the SymPy "
             "namespace (Gram–Schmidt exact; a column that depends exactly on the previous ones "
             "becomes a zero column) with $l = k + p \\ge 2$ columns, without and with a power "
             "iteration ($q = 1$: $Q \\leftarrow \\operatorname{qr}(A\\operatorname{qr}(A^\\top "
             "Q))$). For $k = 1, p = 2$, $Q^\\top Q$ is",
             shown),
        Step("In every case $QQ^\\top$ is a projector of rank 2 and $QQ^\\top A = A$ exactly; "
             "with $l = 1 < \\operatorname{rank}A$ the residual $\\|A - QQ^\\top A\\|_F^2$ is "
             "not 0.", r"k + p \ge \operatorname{rank}A \Rightarrow QQ^\top A = A"),
        Step("Why (almost surely): $\\operatorname{range}(A\\Omega) \\subseteq "
             "\\operatorname{range}(A)$, with equality iff $\\operatorname{rank}(A\\Omega) = "
             "\\operatorname{rank}A$. A $2\\times 2$ minor of $A\\Omega$ at a symbolic $\\Omega$ "
             "is a nonzero polynomial in its entries, so it vanishes on a Lebesgue-null set: "
             "for Gaussian $\\Omega$ the ranges agree with probability 1, and $QQ^\\top$, the "
             "projector onto $\\operatorname{range}(A)$, fixes $A$. Power iterations keep the "
             "range: $\\operatorname{range}((AA^\\top)^qA\\Omega) = "
             "\\operatorname{range}(A\\Omega)$ "
             "when $\\operatorname{rank}(A\\Omega) = \\operatorname{rank}A$. The expected error "
             "for $k + p < \\operatorname{rank}A$ (HMT Thm. 10.5–10.6) is a statistical claim, "
             "tested in `tests/test_lowrank.py`."),
    ])


# --------------------------------------------------------------------------- distillation


def _logits() -> tuple[np.ndarray, np.ndarray]:
    return symbol_array("s", (2, 3)), symbol_array("t", (2, 3))


def derive_distillation_gradient() -> Proof:
    xp = _xp()
    chk = _Checks()
    zs, zt = _logits()
    T = sympy.Symbol("T", positive=True)
    L = _clean(_di.distillation_loss(xp, zs, zt, T))[()]
    G = _clean(_di.distillation_grad(xp, zs, zt, T))
    dL = _obj([[sympy.diff(L, v) for v in row] for row in zs])
    chk.zero(dL - G, "dL/dz_s = T (p_s - p_t) / N")
    # the loss is zero at z_s = z_t and >= 0 (KL): value at a point
    same = {a: b for a, b in zip(zs.ravel(), zt.ravel(), strict=True)}
    chk.zero(sympy.simplify(L.xreplace(same)), "L(z_t, z_t) = 0")
    return chk.proof([
        Step("The library's `distillation_loss` at symbolic logits ($N = 2$ rows, $V = 3$ "
             "classes) and temperature $T > 0$, after the softmax shifts are set to 0 (lemma "
             "`softmax_shift_invariance`), is $L = \\frac{T^2}{N}\\sum_n "
             "\\mathrm{KL}(p_t^{(n)}\\|p_s^{(n)})$; its derivative by `sympy.diff`, entry "
             "$(1,1)$:", sympy.latex(dL[0, 0])),
        Step("equals `distillation_grad` in every entry: with $\\mathrm{KL} = \\sum_i "
             "p_{t,i}\\log p_{t,i} - \\sum_i p_{t,i}\\log p_{s,i}$ and $\\partial\\log p_{s,i}/"
             "\\partial z_{s,j} = (\\delta_{ij} - p_{s,j})/T$, the $T^2$ leaves one $T$.",
             r"\frac{\partial L}{\partial z_s^{(n)}} = \frac TN\bigl(p_s^{(n)} - p_t^{(n)}"
             r"\bigr)"),
        Step("And $L = 0$ when the student's logits equal the teacher's."),
    ])


def derive_distillation_limit() -> Proof:
    xp = _xp()
    chk = _Checks()
    zs, zt = _logits()
    eps = sympy.Symbol("varepsilon", positive=True)
    G = _clean(_di.distillation_grad(xp, zs, zt, 1 / eps))
    g = _obj(G * eps)  # (p_s - p_t)/N, analytic in eps, 0 at eps = 0
    chk.zero(_obj([v.subs(eps, 0) for v in g.ravel()]), "g(0) = 0")
    lim = _obj([sympy.diff(v, eps).subs(eps, 0) for v in g.ravel()]).reshape(g.shape)
    target = _obj(_di.logit_matching_grad(xp, zs, zt))
    chk.zero(lim - target, "lim T(p_s - p_t)/N = logit_matching_grad")
    K = _clean(_di.distillation_loss(xp, zs, zt, 1 / eps))[()] * eps**2  # KL(eps)/N
    chk.zero(K.subs(eps, 0), "KL(0) = 0")
    chk.zero(sympy.diff(K, eps).subs(eps, 0), "KL'(0) = 0")
    chk.zero(sympy.diff(K, eps, 2).subs(eps, 0) / 2 - _obj(_di.logit_matching_loss(xp, zs, zt))
             [()], "lim T^2 KL / N = logit_matching_loss")
    # and SymPy's own limit on one entry, in T
    T = sympy.Symbol("T", positive=True)
    one = _clean(_di.distillation_grad(xp, zs[:1, :], zt[:1, :], T))[0, 0]
    chk.zero(sympy.limit(one, T, sympy.oo) - _obj(_di.logit_matching_grad(
        xp, zs[:1, :], zt[:1, :]))[0, 0], "sympy.limit, entry (1, 1)")
    return chk.proof([
        Step("Put $\\varepsilon = 1/T$. The library's `distillation_grad` at $T = 1/\\varepsilon$ "
             "times $\\varepsilon$ is $g(\\varepsilon)/N$, $g(\\varepsilon) = "
             "\\operatorname{softmax}(\\varepsilon z_s) - \\operatorname{softmax}(\\varepsilon "
             "z_t)$, analytic with $g(0) = 0$; so $\\lim_{T\\to\\infty} T(p_s - p_t) = g'(0)$, "
             "computed by `sympy.diff` at symbolic logits ($N = 2$, $V = 3$), entry $(1,1)$:",
             sympy.latex(lim[0, 0])),
        Step("It equals `logit_matching_grad` in every entry; SymPy's `limit` in $T$ agrees "
             "on one entry.",
             r"\lim_{T\to\infty} T\,(p_s - p_t) = \frac{(z_s - \bar z_s) - (z_t - \bar z_t)}V"),
        Step("For the loss, $\\varepsilon^2 L(1/\\varepsilon) = \\frac1N\\sum_n "
             "\\mathrm{KL}(\\varepsilon)$ vanishes with its first derivative at 0 (KL is "
             "minimal there), so its limit is $\\mathrm{KL}''(0)/2$, equal to "
             "`logit_matching_loss`: high-temperature distillation is least squares on the "
             "centred logits (Hinton et al. 2015, §2.1).",
             r"\lim_{T\to\infty} T^2\,\mathrm{KL}(p_t\|p_s) = \frac1{2V}\bigl\|(z_s - \bar z_s) "
             r"- (z_t - \bar z_t)\bigr\|^2"),
    ])


# --------------------------------------------------------------------------- catalogue

_F = "lowrank"


def _reg(id_: str, title: str, statement: str, seed: str, certifies: tuple,
         derive: Callable[[], Proof]) -> None:
    register(Identity(id_, _F, title, statement, seed, tuple(qualname(f) for f in certifies),
                      guard(derive), tags=("lowrank", "compression")))


_reg("lowrank_eckart_young", "Truncated SVD: spectral and Frobenius errors (Eckart–Young)",
     r"\|A - A_k\|_2 = \sigma_{k+1},\ \ \|A - A_k\|_F = \Bigl(\sum_{i>k}\sigma_i^2\Bigr)^{1/2}"
     r" = \min_{\operatorname{rank}B\le k}\|A - B\|", S41 + "; Eckart & Young 1936",
     (_sv.truncated_svd, _sv.truncation_errors, _sv.approximation_errors, _sv.low_rank),
     derive_eckart_young)
_reg("lowrank_range_finder_exact", "Randomized range finder is exact when k + p >= rank A",
     r"l = k + p \ge \operatorname{rank}A \Rightarrow QQ^\top A = A\ \text{(a.s.)}",
     f"{S41}; {HMT}", (_sv.randomized_range_finder,), derive_range_finder)
_reg("lowrank_quantizer_error_bound", "Uniform quantizers: |x - Q(x)| <= Delta/2",
     r"x \in \bigl[\Delta(q_{\min} - z) - \tfrac\Delta2, \Delta(q_{\max} - z) + \tfrac\Delta2"
     r"\bigr] \Rightarrow |x - Q(x)| \le \tfrac\Delta2", S41 + "; Jacob et al. 2018",
     (_qz.quantization_params, _qz.quantize, _qz.dequantize, _qz.error_bound,
      _qz.covered_interval), derive_quantizer_bound)
_reg("lowrank_quantized_linear_bound", "Quantized linear layer: output error bound",
     r"|XW - XQ(W)|_{ij} \le \tfrac12\sum_k |X_{ik}|\,\Delta_{kj}", S41,
     (_qz.linear_output_error_bound, _qz.linear_output_error_rms, _qz.fake_quantize),
     derive_linear_bound)
_reg("lowrank_pruning_error", "Magnitude pruning: exact and optimal Frobenius error",
     r"\|W - P(W)\|_F^2 = \sum_{M_{ij}=0} w_{ij}^2 = \min_{\#\{M=0\}=\lfloor sN\rfloor}"
     r"\sum_{M_{ij}=0} w_{ij}^2", S41 + "; Han et al. 2015",
     (_pr.magnitude_prune, _pr.nm_prune, _pr.pruning_error, _pr.pruned_count), derive_pruning)
_reg("lowrank_distillation_gradient", "Distillation loss gradient: T (p_s - p_t)",
     r"\nabla_{z_s}\frac{T^2}N\sum_n\mathrm{KL}\bigl(\operatorname{softmax}(z_t/T)\,\|\,"
     r"\operatorname{softmax}(z_s/T)\bigr) = \frac TN(p_s - p_t)",
     S41 + ", Fig. 27; Hinton et al. 2015",
     (_di.distillation_loss, _di.distillation_grad), derive_distillation_gradient)
_reg("lowrank_distillation_limit", "Distillation at high temperature is logit matching",
     r"\lim_{T\to\infty}T(p_s - p_t) = \frac{(z_s - \bar z_s) - (z_t - \bar z_t)}V",
     S41 + ", Fig. 27; Hinton et al. 2015, §2.1",
     (_di.distillation_grad, _di.distillation_loss, _di.logit_matching_grad,
      _di.logit_matching_loss), derive_distillation_limit)
