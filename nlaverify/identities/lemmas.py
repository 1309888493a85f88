"""Lemmas that let the numerically stable functions be the certified ones.

The stable softmax and log-softmax subtract a per-row shift :math:`c`; the
exact namespace makes :math:`c` an opaque symbol. These lemmas prove that the
result does not depend on :math:`c`, so proving the function with a symbolic
shift proves it for :math:`c = \\max_j z_j`, the value used in floating point.
"""

from __future__ import annotations

import numpy as np
import sympy

from nlaverify.backends import get_namespace
from nlaverify.identities.core import Identity, Proof, Step, qualname, register
from nlaverify.ops.activations import sigmoid
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


def _sigmoid_tanh() -> Proof:
    x = sympy.Symbol("x", real=True)
    xp = get_namespace("sympy")
    val = np.asarray(sigmoid(xp, np.asarray([x], dtype=object)), dtype=object)[0]
    diff = (val - 1 / (1 + sympy.exp(-x))).rewrite(sympy.exp)
    ok = is_zero(diff)
    return Proof("proved" if ok else "failed", (
        Step("Run `sigmoid` on the exact namespace and rewrite $\\tanh$ with exponentials:",
             r"\tfrac12\bigl(1+\tanh\tfrac x2\bigr) = \tfrac12\Bigl(1 + \frac{e^{x/2}-e^{-x/2}}"
             r"{e^{x/2}+e^{-x/2}}\Bigr) = \frac{e^{x/2}}{e^{x/2}+e^{-x/2}} = \frac{1}{1+e^{-x}}."),
        Step("The difference with $1/(1+e^{-x})$ simplifies to exactly $0$."),
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
    "sigmoid_tanh_form", "jacobians", "The overflow-free logistic function",
    r"\tfrac12\bigl(1+\tanh(x/2)\bigr) = \frac{1}{1+e^{-x}}",
    "Baggag & Saad §3.7.3", (qualname(sigmoid),), _sigmoid_tanh, tags=("lemma",)))
