"""Lemmas that let the numerically stable functions be the certified ones.

Each floating-point safeguard of the ops is either run on the exact namespace as
well (then a lemma shows it changes nothing), or hidden behind a namespace hook that
the exact namespace implements as the plain formula or an opaque symbol (then a lemma
shows the result does not depend on it):

* ``softmax_shift_invariance``, ``log_sum_exp_shift``: the per-row shift :math:`c` of
  softmax and log-softmax (:meth:`~nlaverify.backends.base.Namespace.stability_shift`,
  an opaque symbol on the exact side) cancels, so the proof with a symbolic shift
  holds for :math:`c = \\max_j z_j`, the value used in floating point;
* ``softmax_denominator_at_least_one``: after that shift the denominator is
  :math:`\\ge 1`, so the floating backends' all-masked-row guard
  (:meth:`~nlaverify.backends.base.Namespace.safe_row_sum`) never fires on a row with a
  finite entry;
* ``sigmoid_stable_branches``: both branches of the overflow-free sigmoid are the
  logistic function;
* ``norm_scale_invariance``: the per-row scale :math:`s` of LayerNorm and RMSNorm
  (:meth:`~nlaverify.backends.base.Namespace.norm_scale`, an opaque positive symbol on
  the exact side) cancels exactly, for every :math:`s > 0`.
"""

from __future__ import annotations

import numpy as np
import sympy

from nlaverify.backends import get_namespace
from nlaverify.identities.core import Identity, Proof, Step, qualname, register
from nlaverify.ops import norms
from nlaverify.ops.activations import _sigmoid_pair, sigmoid
from nlaverify.ops.softmaxes import log_softmax, softmax
from nlaverify.symbolic.exact import is_zero, symbol_array

_SIZES = range(1, 6)


def _shift_invariance(f, unshifted) -> Proof:
    xp = get_namespace("sympy")
    steps = []
    for m in _SIZES:
        xp.reset_shifts()
        z = symbol_array("z", (1, m))
        shifted = np.asarray(f(xp, z), dtype=object)
        c = sympy.Symbol("c_0", real=True)
        if xp._shift_count == 0 or (m > 1 and not shifted[0, 0].has(c)):
            return Proof("failed", (), "the exact namespace did not insert the shift symbol")
        plain = unshifted(z[0])
        for j in range(m):
            if not is_zero(shifted[0, j] - plain[j]):
                return Proof("failed", (), f"m={m}, entry {j}: shift does not cancel")
    steps.append(Step("Run the function on the exact namespace, whose `stability_shift` "
                      "returns an opaque real symbol $c_0$ for the row."))
    steps.append(Step("Compare with the unshifted definition; the difference is exactly $0$ "
                      f"for every entry, for row lengths m = {_SIZES.start}..{_SIZES.stop - 1}, "
                      "for every real $c_0$, hence for $c_0 = \\max_j z_j$."))
    return Proof("proved", tuple(steps))


def _softmax_plain(z):
    e = [sympy.exp(v) for v in z]
    s = sympy.Add(*e)
    return [v / s for v in e]


def _log_softmax_plain(z):
    s = sympy.log(sympy.Add(*[sympy.exp(v) for v in z]))
    return [v - s for v in z]


def _denominator_at_least_one() -> Proof:
    xp = get_namespace("sympy")
    checked = 0
    for m in _SIZES:
        z = symbol_array("z", (1, m))
        for k in range(m):
            terms = np.asarray(xp.exp(z - z[0, k]), dtype=object)[0]
            den = np.asarray(xp.safe_row_sum(xp.exp(z - z[0, k])), dtype=object)[0, 0]
            if terms[k] != 1 or not is_zero(den - sympy.Add(*terms)):
                return Proof("failed", (), f"m={m}, k={k}: the term of z_k is not 1")
            for j in range(m):
                if j == k:
                    continue
                masked = terms[j].xreplace({z[0, j]: -sympy.oo})
                if not (terms[j].is_positive and masked == 0):
                    return Proof("failed", (), f"m={m}, k={k}: term {j} is not >= 0")
            checked += 1
    return Proof("proved", (
        Step("On the exact namespace `safe_row_sum` is the plain row sum. Take the shift "
             "$c = z_k$, any finite entry of the row (the maximum is one)."),
        Step("The term of $z_k$ is $e^{z_k - z_k} = e^0 = 1$ exactly, and every other term "
             "$e^{z_j - z_k}$ is positive for real $z_j$ and exactly $0$ for a masked "
             f"$z_j = -\\infty$; checked for every $k$ and row lengths m = "
             f"{_SIZES.start}..{_SIZES.stop - 1} ({checked} cases). Hence",
             r"\sum_j e^{z_j - c} = 1 + \sum_{j \ne k} e^{z_j - z_k} \ge 1 ."),
        Step("In floating point the same holds: $z_k - c = 0$ and $e^0 = 1$ are exact, and a "
             "sum of non-negative terms rounded to nearest never drops below its largest "
             "term. So the floating backends' `safe_row_sum`, which replaces a zero sum by "
             "$1$, changes only all-masked rows (every $z_j = -\\infty$, where `stability_shift` "
             "gives $c = 0$ and the softmax would be $0/0$): there the convention is the safe "
             "softmax $p = 0$, with a zero VJP."),
    ))


def _logistic(t: sympy.Expr) -> sympy.Expr:
    return 1 / (1 + sympy.exp(-t))


def _sigmoid_branches() -> Proof:
    xp = get_namespace("sympy")

    def pair(v: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
        s, s_neg = _sigmoid_pair(xp, np.asarray([v], dtype=object))
        return s[0], s_neg[0]

    x = sympy.Symbol("x", real=True)
    s, s_neg = pair(x)
    for val, want in ((s, _logistic(x)), (s_neg, _logistic(-x))):
        if not (isinstance(val, sympy.Piecewise) and len(val.args) == 2
                and val.args[0][1] == (x > 0)):
            return Proof("failed", (), f"expected a two-branch Piecewise on x > 0, got {val}")
        for branch, _ in val.args:
            if not is_zero(branch - want):
                return Proof("failed", (), f"branch {branch} differs from {want}")
    p, q = sympy.Symbol("p", positive=True), sympy.Symbol("q", negative=True)
    for v in (p, q, sympy.Integer(0)):
        sv, sv_neg = pair(v)
        if sv.has(sympy.Piecewise) or not (is_zero(sv - _logistic(v))
                                           and is_zero(sv_neg - _logistic(-v))):
            return Proof("failed", (), f"x = {v}: not 1/(1+e^-x) and 1/(1+e^x)")
    return Proof("proved", (
        Step("Run `_sigmoid_pair` (used by `sigmoid`, `silu`, `silu_vjp`, `swiglu` and "
             "`swiglu_vjp`) on the exact namespace at a real symbol $x$. Its `where` "
             "becomes a `Piecewise` on $x > 0$; inside each branch the inner selection "
             "$e = \\exp(\\text{where}(x > 0, -x, x))$ is resolved, so",
             r"\sigma(x) = " + sympy.latex(s) + r",\qquad \sigma(-x) = "
             + sympy.latex(s_neg) + "."),
        Step("Every branch minus $1/(1+e^{-x})$ (resp. $1/(1+e^{x})$) simplifies to exactly "
             "$0$: both branches are the logistic function for every real $x$, so the "
             "function run is the function proved whichever branch the sign selects."),
        Step("At a positive symbol, a negative symbol and at $x = 0$ the selection resolves "
             "to a single branch, again exactly $1/(1+e^{-x})$ and $1/(1+e^{x})$. In floating "
             "point the exponent of $e = e^{-|x|}$ is never positive, so neither branch "
             "overflows, and $\\sigma(x) = e/(1+e)$ keeps its relative accuracy for "
             "$x \\ll 0$ (in float32 the tanh form $\\tfrac12(1+\\tanh(x/2))$ has lost all "
             "relative accuracy at $x \\approx -17$; below, it returns $2^{-25}$ or $0$, "
             "depending on the backend's $\\tanh$)."),
    ))


def _mean(v: np.ndarray) -> sympy.Expr:
    return sympy.Add(*v) / len(v)


def _norm_scale_invariance() -> Proof:
    xp = get_namespace("sympy")
    eps = sympy.Symbol("epsilon", positive=True)
    checked = 0
    for d in range(1, 5):
        xp.reset_shifts()
        x = symbol_array("x", (1, d))
        gamma, beta, G = symbol_array("gamma", (d,)), symbol_array("beta", (d,)), \
            symbol_array("g", (1, d))
        c = x[0] - _mean(x[0])
        plain = {"layernorm": gamma * c / sympy.sqrt(_mean(c * c) + eps) + beta,
                 "rmsnorm": gamma * x[0] / sympy.sqrt(_mean(x[0] * x[0]) + eps)}
        runs = {
            "layernorm": [norms.layernorm(xp, x, gamma, beta, eps)],
            "rmsnorm": [norms.rmsnorm(xp, x, gamma, eps)],
            "layernorm_vjp": list(norms.layernorm_vjp(xp, G, x, gamma, beta, eps)),
            "rmsnorm_vjp": list(norms.rmsnorm_vjp(xp, G, x, gamma, eps)),
            "layernorm_jacobian": [norms.layernorm_jacobian(xp, x[0], gamma, eps)],
            "rmsnorm_jacobian": [norms.rmsnorm_jacobian(xp, x[0], gamma, eps)],
        }
        scales = set(xp._scales.values())
        if len(scales) != 2:  # one per distinct row: the centered row and the raw row
            return Proof("failed", (), f"d={d}: expected 2 opaque scales, got {len(scales)}")
        for name, outs in runs.items():
            for out in outs:
                for v in np.asarray(out, dtype=object).reshape(-1):
                    if sympy.sympify(v).free_symbols & scales:
                        return Proof("failed", (), f"d={d}: the scale remains in {name}")
        for name, ref in plain.items():
            got = np.asarray(runs[name][0], dtype=object)[0]
            for j in range(d):
                if not is_zero(got[j] - ref[j]):
                    return Proof("failed", (), f"d={d}, {name} entry {j}: not the definition")
                checked += 1
    return Proof("proved", (
        Step("Run `layernorm`, `rmsnorm`, their VJPs and their Jacobians on the exact "
             "namespace, whose `norm_scale` returns an opaque positive symbol $s$ per row "
             "(one for the centered row $c = x - \\mu$ of LayerNorm, one for the row $x$ of "
             "RMSNorm). They compute, with $h = c/s$,",
             r"\rho = \sqrt{\tfrac1d\textstyle\sum_j h_j^2 + \epsilon/s^2},\qquad "
             r"\frac{c}{\sqrt{\tfrac1d\sum_j c_j^2 + \epsilon}} = \frac{h}{\rho},\qquad "
             r"\sqrt{\tfrac1d\textstyle\sum_j c_j^2 + \epsilon} = s\rho ."),
        Step("The exact square root takes the common factor $s^{-2}$ out of its argument "
             "(`sympy.factor_terms`, an exact rewriting) and, $s$ being positive, out of the "
             "root: $\\rho = \\sqrt{\\tfrac1d\\sum_j c_j^2 + \\epsilon}\\,/\\,s$. Every output "
             "of the six functions is then free of $s$, for d = 1..4: the scale cancels "
             "exactly, for every $s > 0$.",
             r"s\,\sqrt{\tfrac1d\textstyle\sum_j (c_j/s)^2 + \epsilon/s^2} = "
             r"\sqrt{\tfrac1d\textstyle\sum_j c_j^2 + \epsilon}\qquad\forall s > 0 ."),
        Step(f"The forward outputs equal the unscaled definitions $\\gamma\\odot c/\\sqrt{{"
             f"\\overline{{c^2}} + \\epsilon}} + \\beta$ and $\\gamma\\odot x/\\sqrt{{"
             f"\\overline{{x^2}} + \\epsilon}}$ exactly ({checked} entries). So the VJP "
             "proofs, run with the opaque $s$, hold for the floating backends' "
             "$s = \\max(\\max_j |c_j|, \\sqrt\\epsilon)$ and for the reference's $s = 1$: "
             "the function proved is the function run."),
    ))


register(Identity(
    "softmax_shift_invariance", "jacobians", "Softmax is invariant under a row shift",
    r"\operatorname{softmax}(z - c\mathbf 1) = \operatorname{softmax}(z)\quad\forall c\in\mathbb R",
    "Baggag & Saad §3.4.2", (qualname(softmax),),
    lambda: _shift_invariance(softmax, _softmax_plain), tags=("lemma",)))
register(Identity(
    "log_sum_exp_shift", "jacobians", "Log-softmax (log-sum-exp) is invariant under a row shift",
    r"(z_i - c) - \log\sum_j e^{z_j - c} = z_i - \log\sum_j e^{z_j}\quad\forall c\in\mathbb R",
    "Baggag & Saad §3.1", (qualname(log_softmax),),
    lambda: _shift_invariance(log_softmax, _log_softmax_plain), tags=("lemma",)))
register(Identity(
    "softmax_denominator_at_least_one", "jacobians",
    "The shifted softmax denominator is at least 1 (the all-masked-row guard is inert)",
    r"\sum_j e^{z_j - z_k} \ge 1\quad \forall k: z_k > -\infty,\ "
    r"z \in (\mathbb R \cup \{-\infty\})^m",
    "Baggag & Saad §3.4.2, §3.4.4", (qualname(softmax), qualname(log_softmax)),
    _denominator_at_least_one, tags=("lemma",)))
register(Identity(
    "sigmoid_stable_branches", "jacobians", "Both branches of the overflow-free sigmoid",
    r"\sigma(x) = \begin{cases} \dfrac{1}{1+e^{-x}} & x > 0 \\[1ex] "
    r"\dfrac{e^{x}}{1+e^{x}} & x \le 0 \end{cases} = \frac{1}{1+e^{-x}}\quad "
    r"\forall x\in\mathbb R",
    "Baggag & Saad §3.7.3", (qualname(sigmoid), qualname(_sigmoid_pair)), _sigmoid_branches,
    tags=("lemma",)))
register(Identity(
    "norm_scale_invariance", "jacobians", "LayerNorm and RMSNorm do not depend on the row scale",
    r"s\,\sqrt{\tfrac1d\textstyle\sum_j (x_j/s)^2 + \epsilon/s^2} = "
    r"\sqrt{\tfrac1d\textstyle\sum_j x_j^2 + \epsilon}\quad\forall s > 0",
    "Baggag & Saad §3.8, §3.8.1",
    tuple(qualname(f) for f in (norms.layernorm, norms.layernorm_vjp, norms.layernorm_jacobian,
                                norms.rmsnorm, norms.rmsnorm_vjp, norms.rmsnorm_jacobian)),
    _norm_scale_invariance, tags=("lemma",)))
