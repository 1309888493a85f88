r"""The ``scaling`` family: the compute-optimal allocation of the Chinchilla law (Hoffmann et
al. 2022, eq. 4; Baggag & Saad §3.14), proved on :func:`nlaverify.scaling.compute_optimal`
itself, run with symbolic constants.

The derivation substitutes a law of positive symbols :math:`E, A, B, \alpha, \beta` and a
positive budget :math:`C` into ``compute_optimal`` and ``training_flops`` and shows with
SymPy that the returned :math:`(N^*, D^*)` spends the budget exactly (:math:`6N^*D^* = C`),
is a stationary point of :math:`N \mapsto L(N, C/(6N))` (the derivative, simplified, is 0),
and the global minimum (in :math:`u = \log N` the loss along the budget is a sum of
exponentials, whose second derivative is a sum of positive terms); that the exponents
are :math:`a = \beta/(\alpha+\beta)`, :math:`b = \alpha/(\alpha+\beta)`; and, on the
published constants, the tokens per parameter at a budget of Chinchilla's
:math:`5.76\cdot10^{23}` FLOPs.
"""

from __future__ import annotations

import sympy

from nlaverify import scaling as _sc
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register

SEED = "Hoffmann et al. 2022 (eq. 4); Baggag & Saad §3.14"


def derive_compute_optimal() -> Proof:
    E, A, B, al, be, C, N = sympy.symbols("E A B alpha beta C N", positive=True)
    law = _sc.ChinchillaLaw(E, A, B, al, be)
    n_star, d_star = _sc.compute_optimal(C, law)
    steps = [Step(r"With positive symbols for the constants and the budget, "
                  r"`compute_optimal` returns",
                  r"N^* = " + sympy.latex(n_star) + r",\qquad D^* = " + sympy.latex(d_star))]
    spent = sympy.simplify(sympy.powsimp(_sc.training_flops(n_star, d_star) - C, force=True))
    steps.append(Step(r"It spends the budget: $6N^*D^* - C$ simplifies to " + sympy.latex(spent)))
    along = law.loss(N, C / (6 * N))
    slope = sympy.diff(along, N)
    at_star = sympy.simplify(sympy.powsimp(sympy.expand_power_base(
        slope.subs(N, n_star), force=True), force=True))
    steps.append(Step(r"Along the budget, $L(N, C/(6N))$ has the derivative",
                      r"\frac{d}{dN} L\Bigl(N, \frac{C}{6N}\Bigr) = " + sympy.latex(slope)))
    steps.append(Step(r"which at $N = N^*$ simplifies to " + sympy.latex(at_star)))
    # in u = log N the loss along the budget is A e^{-alpha u} + B (6/C)^beta e^{beta u}: a
    # sum of exponentials, strictly convex, so the stationary point is the global minimum
    u = sympy.Symbol("u", real=True)
    in_log = law.loss(sympy.exp(u), C / (6 * sympy.exp(u)))
    curvature = sympy.expand(sympy.powsimp(sympy.expand_power_base(
        sympy.diff(in_log, u, 2), force=True), force=True))
    terms = sympy.Add.make_args(curvature)
    convex = all(t.is_positive for t in terms)
    steps.append(Step(r"In $u = \log N$ the loss along the budget is a sum of exponentials "
                      r"whose second derivative is a sum of positive terms, so it is strictly "
                      r"convex and $N^*$ is its global minimum",
                      r"\frac{d^2}{du^2} L\Bigl(e^u, \frac{C}{6e^u}\Bigr) = "
                      + sympy.latex(curvature)))
    a_exp = sympy.simplify(sympy.log(n_star.subs(C, 6 * sympy.Symbol("K", positive=True)))
                           .diff(sympy.Symbol("K", positive=True))
                           * sympy.Symbol("K", positive=True))
    b_exp = sympy.simplify(sympy.log(d_star.subs(C, 6 * sympy.Symbol("K", positive=True)))
                           .diff(sympy.Symbol("K", positive=True))
                           * sympy.Symbol("K", positive=True))
    exps = (sympy.simplify(a_exp - be / (al + be)) == 0
            and sympy.simplify(b_exp - al / (al + be)) == 0)
    steps.append(Step(r"The exponents: $d\log N^*/d\log(C/6) = " + sympy.latex(a_exp)
                      + r"$, $d\log D^*/d\log(C/6) = " + sympy.latex(b_exp) + r"$"))
    budget = 5.76e23  # Chinchilla's training budget (Hoffmann et al. 2022, Table 3)
    ratios = []
    for key, published in _sc.LAWS.items():
        n_opt, d_opt = _sc.compute_optimal(budget, published)
        ratios.append(f"{key}: N* = {n_opt:.3g}, D* = {d_opt:.3g}, D*/N* = {d_opt / n_opt:.3g}")
    steps.append(Step(r"On the published constants, at Chinchilla's $C = 5.76\cdot10^{23}$: "
                      + "; ".join(ratios) + r" (Hoffmann et al.'s approach 3 gives fewer "
                      r"tokens per parameter than their approaches 1 and 2, about 20; the "
                      r"replication's constants move it towards 20)"))
    ok = spent == 0 and at_star == 0 and convex and exps
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else f"budget {spent}, slope {at_star}, convex {convex}, "
                               f"exponents {exps}")


register(Identity(
    "chinchilla_compute_optimal", "scaling",
    "The compute-optimal allocation of the Chinchilla law",
    r"\min_{6ND = C} E + \frac{A}{N^\alpha} + \frac{B}{D^\beta}:\ N^* = G\Bigl(\frac C6"
    r"\Bigr)^{\frac{\beta}{\alpha+\beta}},\ D^* = G^{-1}\Bigl(\frac C6\Bigr)^{\frac{\alpha}"
    r"{\alpha+\beta}},\ G = \Bigl(\frac{\alpha A}{\beta B}\Bigr)^{\frac1{\alpha+\beta}}",
    SEED, (qualname(_sc.compute_optimal), qualname(_sc.training_flops),
           qualname(_sc.ChinchillaLaw.loss)),
    guard(derive_compute_optimal), tags=("closed-form",)))
