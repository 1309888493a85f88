r"""The ``diffusion`` family: the absorbing-state (masked) discrete diffusion and the time
reversal of a finite-state Markov chain (Baptista, Stuart & Tran §9 and App. D; Austin et al.
2021 (D3PM); Campbell et al. 2022; Shi et al. 2024 (MD4); Sahoo et al. 2024 (MDLM)), proved on
the functions of :mod:`nlaverify.diffusion` run on the exact SymPy namespace.

* ``masked_forward_chapman_kolmogorov``: :math:`q_{s|r}q_{t|s} = q_{t|r}`, the rows are
  distributions, :math:`e_{x_0}^\top q_{t|0} = \alpha_t e_{x_0} + (1-\alpha_t)e_{\mathrm m}`, and
  :math:`\partial_t q_{t|s} = q_{t|s}Q_t` for the rate matrix of the masked process;
* ``ctmc_time_reversal``: for a 3-state chain of symbolic time-dependent rates whose marginals
  solve the forward equation, :math:`r_s = p_{T-s}` solves the forward equation of the reverse
  rates :math:`\hat Q`; for the masked process the reverse rate from the mask to a token is
  :math:`-\alpha_t'/(1-\alpha_t)` times the token's data probability;
* ``masked_posterior_two_point``: Bayes' rule on the forward transitions gives the two-point
  posterior, a distribution;
* ``masked_elbo_step_kl``: the per-step KL of the discrete-time ELBO is
  :math:`\tfrac{\alpha_s-\alpha_t}{1-\alpha_t}` times the cross-entropy at masked positions, 0
  elsewhere;
* ``masked_elbo_continuous_limit``: the schedules' derivatives; the integral of the
  continuous-time integrand (linear and cosine schedules) is the closed form of
  ``nelbo_exact``; for the linear schedule the discrete ELBO is the right Riemann sum of the
  integrand, whose limit as :math:`T\to\infty` is that integral.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from nlaverify import diffusion as _df
from nlaverify.backends import get_namespace
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register

SEED = "Baptista, Stuart & Tran §9, App. D"
V, MASK = 3, 3  # three tokens, the mask id right after them


def _s(x: Any) -> sympy.Expr:
    return sympy.sympify(np.asarray(x, dtype=object).item())


def _zero(e: Any) -> bool:
    """``e`` is identically 0 (logarithms expanded: their arguments are positive)."""
    e = sympy.expand_log(sympy.sympify(e), force=True)
    return sympy.simplify(e) == 0


def _all_zero(a: Any) -> bool:
    return all(_zero(v) for v in np.asarray(a, dtype=object).flat)


def _row(name: str, n: int) -> list[sympy.Expr]:
    free = sympy.symbols(f"{name}_0:{n}", positive=True)
    return [a / sum(free) for a in free]


def derive_chapman_kolmogorov() -> Proof:
    xp = get_namespace("sympy")
    a_r, a_s, a_t = sympy.symbols("alpha_r alpha_s alpha_t", positive=True)
    K = _df.transition_matrix(xp, a_s, a_t, V)
    steps = [Step(r"Vocabulary 3 and the mask (4 states, the mask last); `transition_matrix` "
                  r"returns", r"q_{t|s} = " + sympy.latex(sympy.Matrix(K)))]
    composed = xp.matmul(_df.transition_matrix(xp, a_r, a_s, V), K)
    ck = _all_zero(composed - _df.transition_matrix(xp, a_r, a_t, V))
    rows = _all_zero(xp.sum(K, axis=1) - 1)
    marg = _df.forward_marginal(xp, np.arange(V), a_t, V, MASK)
    expect = a_t * np.eye(V, V + 1, dtype=object) + (1 - a_t) * np.eye(V + 1, dtype=object)[V]
    marg_ok = _all_zero(marg - expect)
    steps.append(Step(r"$q_{s|r}\,q_{t|s} - q_{t|r}$, each of the 16 entries simplified, is "
                      + ("0" if ck else "not 0") + r"; every row of $q_{t|s}$ sums to 1: "
                      + str(rows) + r"; `forward_marginal` of $x_0 = 0, 1, 2$ is "
                      r"$\alpha_t e_{x_0} + (1-\alpha_t)e_{\mathrm m}$: " + str(marg_ok)))
    t = sympy.Symbol("t", positive=True)
    alpha = sympy.Function("alpha", positive=True)(t)
    Q = _df.masked_rate_matrix(xp, alpha, sympy.diff(alpha, t), V)
    Kt = _df.transition_matrix(xp, a_s, alpha, V)
    dK = np.vectorize(lambda e: sympy.diff(e, t), otypes=[object])(Kt)
    kolm = _all_zero(dK - _df.kolmogorov_forward(xp, Kt, Q))
    steps.append(Step(r"With $\alpha_t$ an unknown function of $t$, `masked_rate_matrix` is",
                      r"Q_t = " + sympy.latex(sympy.Matrix(Q))))
    steps.append(Step(r"and $\partial_t q_{t|s} - q_{t|s}Q_t$ (`kolmogorov_forward`) simplifies "
                      r"to 0 in every entry: " + str(kolm) + r" (the forward equation: the "
                      r"masked process is the chain of rates $Q_t$)"))
    ok = ck and rows and marg_ok and kolm
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else f"CK {ck}, rows {rows}, marginal {marg_ok}, Kolmogorov {kolm}")


def derive_time_reversal() -> Proof:
    xp = get_namespace("sympy")
    n = 3
    t, s, T = sympy.symbols("t s T", positive=True)
    p = [sympy.Function(f"p_{i}", positive=True)(t) for i in range(n)]
    q = [[sympy.Function(f"q_{i}{j}", positive=True)(t) if i != j else None for j in range(n)]
         for i in range(n)]
    Q = np.empty((n, n), dtype=object)
    for i in range(n):
        for j in range(n):
            Q[i, j] = q[i][j] if i != j else -sum(q[i][k] for k in range(n) if k != i)
    rhs = _df.kolmogorov_forward(xp, np.asarray(p, dtype=object), Q)  # dp/dt = p Q
    Qhat = _df.reverse_rates(xp, Q, np.asarray(p, dtype=object))
    steps = [Step(r"A 3-state chain of symbolic positive rates $q_{xy}(t)$ and marginals "
                  r"$p_x(t) > 0$ that solve the forward equation $\dot p = pQ$; "
                  r"`reverse_rates` returns",
                  r"\hat Q_t = " + sympy.latex(sympy.Matrix(Qhat)))]
    rows = _all_zero(xp.sum(Qhat, axis=1))
    offdiag = all(Qhat[i, j].is_positive for i in range(n) for j in range(n) if i != j)
    # the reversed marginals r(s) = p(T - s): their s-derivative, the forward equation
    # substituted for each p_x'(T - s)
    r = [pi.subs(t, T - s) for pi in p]
    dr = [sympy.diff(ri, s) for ri in r]
    sub = {}
    for e in dr:
        for atom in e.atoms(sympy.Subs):
            func = atom.expr.expr.func
            sub[atom] = rhs[[pi.func for pi in p].index(func)].subs(t, atom.point[0])
    dr = [e.xreplace(sub) for e in dr]
    Qhat_rev = np.vectorize(lambda e: e.subs(t, T - s), otypes=[object])(Qhat)
    rev = _df.kolmogorov_forward(xp, np.asarray(r, dtype=object), Qhat_rev)
    reversal = _all_zero(np.asarray(dr, dtype=object) - rev)
    steps.append(Step(r"Its rows sum to 0: " + str(rows) + r"; its off-diagonal entries are "
                      r"positive: " + str(offdiag) + r". With $r_s = p_{T-s}$, the forward "
                      r"equation substituted for $\dot p$,",
                      r"\frac{d r_0}{ds} = " + sympy.latex(dr[0])))
    steps.append(Step(r"and $\frac{dr}{ds} - r_s\hat Q_{T-s}$ simplifies to 0 in each of the 3 "
                      r"states: " + str(reversal) + r": the marginals of the chain of rates "
                      r"$\hat Q$ are those of the forward chain run backward (App. D)"))
    # the masked process: data p0 over the tokens, marginal alpha p0 + (1 - alpha) e_m
    a, da = sympy.Symbol("alpha", positive=True), sympy.Symbol("alpha'", negative=True)
    p0 = _row("d", V)
    pt = xp.matmul(np.asarray([*p0, 0], dtype=object), _df.transition_matrix(xp, 1, a, V))
    Qm = _df.masked_rate_matrix(xp, a, da, V)
    Qm_hat = _df.reverse_rates(xp, Qm, pt)
    sched = _df.Schedule("symbolic", lambda xp_, t_: a, lambda xp_, t_: da)
    weight = _df.masking_weight(xp, sched, t)
    unmask = _all_zero(Qm_hat[V, :V] - weight * np.asarray(p0, dtype=object))
    remask = _all_zero(Qm_hat[:V, :])
    steps.append(Step(r"The masked process (data $d$ over the 3 tokens, marginal $\alpha_t d + "
                      r"(1-\alpha_t)e_{\mathrm m}$): the reverse rate from the mask to token "
                      r"$v$ is",
                      r"\hat Q_t(\mathrm m, v) = " + sympy.latex(sympy.simplify(Qm_hat[V, 0]))
                      + r" = -\frac{\alpha_t'}{1-\alpha_t}\,d_v"))
    steps.append(Step(r"equal to `masking_weight` times $d_v$ for every token: " + str(unmask)
                      + r", and no token is ever re-masked ($\hat Q_t(v, \cdot) = 0$): "
                      + str(remask) + r"; the denoiser the ELBO trains is this rate's $d_v$, "
                      r"the law of the clean token given the masked sequence"))
    ok = rows and offdiag and reversal and unmask and remask
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else f"rows {rows}, positive {offdiag}, reversal {reversal}, "
                               f"masked {unmask}/{remask}")


def derive_posterior() -> Proof:
    xp = get_namespace("sympy")
    a_s, a_t = sympy.symbols("alpha_s alpha_t", positive=True)
    K_s = _df.transition_matrix(xp, 1, a_s, V)
    K_ts = _df.transition_matrix(xp, a_s, a_t, V)
    K_t = _df.transition_matrix(xp, 1, a_t, V)
    ok, shown = True, None
    for x0 in range(V):
        for xt in (x0, MASK):
            j = V if xt == MASK else xt
            bayes = np.asarray([K_s[x0, y] * K_ts[y, j] / K_t[x0, j] for y in range(V + 1)],
                               dtype=object)
            post = _df.masked_posterior(xp, a_s, a_t, xp.one_hot(np.array([x0]), V),
                                        np.array([xt]), V, MASK)[0]
            ok = ok and _all_zero(bayes - post) and _zero(sum(post) - 1)
            if x0 == 0 and xt == MASK:
                shown = post
    steps = [Step(r"For every clean token $x_0 \in \{0, 1, 2\}$ and $x_t \in \{x_0, "
                  r"\mathrm m\}$, Bayes' rule on the forward transitions, "
                  r"$q_{s|0}(x_s\mid x_0)\,q_{t|s}(x_t\mid x_s)/q_{t|0}(x_t\mid x_0)$, minus "
                  r"`masked_posterior`, simplifies to 0 and the posterior sums to 1: " + str(ok)),
             Step(r"For $x_0 = 0$ and a masked $x_t$ (the states $0, 1, 2, \mathrm m$):",
                  r"q(x_s\mid x_t = \mathrm m, x_0 = 0) = "
                  + sympy.latex(sympy.Matrix([list(shown)])))]
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else "the posterior differs from Bayes' rule")


def derive_step_kl() -> Proof:
    xp = get_namespace("sympy")
    a_s, a_t = sympy.symbols("alpha_s alpha_t", positive=True)
    L, x0 = 2, np.array([0, 2])
    mu = np.asarray([_row("mu", V), _row("nu", V)], dtype=object)
    ok, shown = True, []
    for alpha_s in (a_s, sympy.Integer(1)):
        w = (alpha_s - a_t) / (1 - a_t)
        for masks in _df.mask_patterns(L):
            xt = np.where(masks, MASK, x0)
            kls = _df.step_kl(xp, alpha_s, a_t, x0, xt, xp.log(mu), V, MASK)
            for i in range(L):
                expect = -w * sympy.log(mu[i, x0[i]]) if masks[i] else 0
                ok = ok and _zero(kls[i] - expect)
            if alpha_s == a_s and masks.all():
                shown = kls
    steps = [Step(r"Length 2, $x_0 = (0, 2)$, the model's predictions $\mu^1, \mu^2$ symbolic "
                  r"distributions over the 3 tokens; with every position masked, `step_kl` "
                  r"returns", r"\Bigl(" + r",\ ".join(sympy.latex(sympy.factor(
                      sympy.expand(sympy.expand_log(k, force=True))))
                                                       for k in shown) + r"\Bigr)"),
             Step(r"For each of the 4 masks and both $\alpha_s$ symbolic and $\alpha_s = 1$ "
                  r"(the last reverse step), the KL equals $-\frac{\alpha_s - \alpha_t}{1 - "
                  r"\alpha_t}\log\mu^i(x_0^i)$ at a masked position and 0 at a kept one: "
                  + str(ok) + r" (the mask's terms cancel: $q$ and $p_\theta$ give it the same "
                  r"mass $\frac{1-\alpha_s}{1-\alpha_t}$)")]
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else "the per-step KL is not the weighted cross-entropy")


def _symbolic_model(L: int) -> Any:
    r"""A model of length ``L`` whose log-probability of each token at each position is a
    negative symbol :math:`\ell^{M}_{i,v}` that depends on the mask pattern :math:`M` of
    ``x_t`` (the ELBO is linear in them; normalisation plays no part in these identities)."""
    table = {}
    for masks in _df.mask_patterns(L):
        tag = "".join("m" if m else "k" for m in masks)
        table[tuple(masks)] = np.asarray(
            [[sympy.Symbol(f"ell^{tag}_{i}{v}", negative=True) for v in range(V)]
             for i in range(L)],
            dtype=object)

    def log_probs(xt: np.ndarray) -> np.ndarray:
        rows = [table[tuple(r == MASK)] for r in np.asarray(xt).reshape(-1, L)]
        return np.asarray(rows, dtype=object).reshape((*np.shape(xt), V))

    return log_probs


def derive_continuous_limit() -> Proof:
    xp = get_namespace("sympy")
    t, i, T = sympy.symbols("t i T", positive=True)
    L, x0 = 3, np.array([0, 2, 1])
    steps, ok = [], True
    for name, sch in _df.SCHEDULES.items():
        a = _s(sch.alpha(xp, t))
        good = (sympy.simplify(sympy.diff(a, t) - _s(sch.alpha_prime(xp, t))) == 0
                and a.subs(t, 0) == 1 and a.subs(t, 1) == 0)
        ok = ok and good
        steps.append(Step(f"Schedule {name}: $\\alpha_t = {sympy.latex(a)}$; `alpha_prime` is "
                          f"its derivative, $\\alpha_0 = 1$, $\\alpha_1 = 0$: {good}"))
    log_probs = _symbolic_model(L)
    exact = _s(_df.nelbo_exact(xp, x0, log_probs, V, MASK))
    steps.append(Step(r"Length 3, $x_0 = (0, 2, 1)$, the model's log-probabilities symbols "
                      r"$\ell^{M}_{i,v} < 0$ for each mask $M$ of $x_t$ ($k$: kept, $m$: masked), "
                      r"position $i$ and token $v$; `nelbo_exact` (Beta weights "
                      r"$(L-k)!(k-1)!/L!$) returns", r"-\mathrm{ELBO} = "
                      + sympy.latex(exact)))
    for name, sch in _df.SCHEDULES.items():
        f = sympy.factor_terms(sympy.expand(sympy.cancel(
            _s(_df.nelbo_integrand(xp, x0, log_probs, sch, t, V, MASK)))))
        integral = sympy.integrate(f, (t, 0, 1))
        good = _zero(integral - exact)
        ok = ok and good
        steps.append(Step(f"Schedule {name}: the integrand `nelbo_integrand` simplifies to",
                          sympy.latex(f)))
        steps.append(Step(r"and $\int_0^1$ of it minus `nelbo_exact` is 0: " + str(good)
                          + r" (the continuous-time ELBO does not depend on the schedule)"))
    lin = _df.SCHEDULES["linear"]
    w_step = _s(_df.step_weight(xp, lin, (i - 1) / T, i / T))
    w_cont = _s(_df.masking_weight(xp, lin, i / T))
    weights = sympy.simplify(w_step - w_cont / T) == 0
    ok = ok and weights
    steps.append(Step(r"Linear schedule, the step $s = (i-1)/T \to t = i/T$: `step_weight` is "
                      f"${sympy.latex(sympy.simplify(w_step))}$, exactly $\\frac1T$ times "
                      r"`masking_weight` $-\alpha_t'/(1-\alpha_t)$ at $t = i/T$: " + str(weights)))
    g = _s(_df.nelbo_integrand(xp, x0, log_probs, lin, t, V, MASK))
    riemann_ok = True
    for n in (1, 2, 3):
        riemann = sum(_s(_df.nelbo_integrand(xp, x0, log_probs, lin, sympy.Rational(k, n), V,
                                             MASK)) for k in range(1, n + 1)) / n
        riemann_ok = riemann_ok and _zero(_s(_df.discrete_nelbo(xp, x0, log_probs, lin, n, V,
                                                                MASK)) - riemann)
    ok = ok and riemann_ok
    steps.append(Step(r"So `discrete_nelbo` (the sum of `step_kl`) is the right Riemann sum "
                      r"$\frac1T\sum_{i=1}^T g(i/T)$ of the integrand $g$: checked for "
                      r"$T = 1, 2, 3$: " + str(riemann_ok)))
    R = sympy.summation(sympy.expand(sympy.cancel(g.subs(t, i / T))), (i, 1, T)) / T
    limit = sympy.limit(R, T, sympy.oo)
    lim_ok = _zero(limit - exact)
    ok = ok and lim_ok
    steps.append(Step(r"The Riemann sum for symbolic $T$ (SymPy's `summation`) is",
                      r"\frac1T\sum_{i=1}^T g(i/T) = " + sympy.latex(sympy.factor_terms(
                          sympy.expand(R)))))
    steps.append(Step(r"and its limit as $T\to\infty$ minus `nelbo_exact` is 0: " + str(lim_ok)
                      + r": the discrete-time ELBO tends to the continuous-time one, a "
                      r"cross-entropy over the masked positions weighted by "
                      r"$-\alpha_t'/(1-\alpha_t)$"))
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else "a step of the continuous limit failed")


register(Identity(
    "masked_forward_chapman_kolmogorov", "diffusion",
    "The masked forward process: Chapman–Kolmogorov and its rate matrix",
    r"q_{s|r}\,q_{t|s} = q_{t|r},\quad q_{t|s} = \tfrac{\alpha_t}{\alpha_s}I + \bigl(1 - "
    r"\tfrac{\alpha_t}{\alpha_s}\bigr)\mathbf 1e_{\mathrm m}^\top,\quad \partial_t q_{t|s} = "
    r"q_{t|s}Q_t,\ Q_t = -\tfrac{\alpha_t'}{\alpha_t}(\mathbf 1e_{\mathrm m}^\top - I)",
    "Baptista, Stuart & Tran §9; Austin et al. 2021 (D3PM); Shi et al. 2024",
    (qualname(_df.transition_matrix), qualname(_df.forward_marginal),
     qualname(_df.masked_rate_matrix), qualname(_df.kolmogorov_forward)),
    guard(derive_chapman_kolmogorov), tags=("closed-form",)))

register(Identity(
    "ctmc_time_reversal", "diffusion",
    "The time reversal of a finite-state Markov chain",
    r"\hat Q_t(x, y) = Q_t(y, x)\frac{p_t(y)}{p_t(x)}:\quad \dot p = pQ \Rightarrow "
    r"\frac{d}{ds}p_{T-s} = p_{T-s}\hat Q_{T-s}",
    SEED + "; Campbell et al. 2022 (Prop. 1)",
    (qualname(_df.reverse_rates), qualname(_df.kolmogorov_forward),
     qualname(_df.masking_weight)),
    guard(derive_time_reversal), tags=("closed-form",)))

register(Identity(
    "masked_posterior_two_point", "diffusion",
    "The posterior of the masked process is a two-point mixture",
    r"q(x_s\mid x_t = \mathrm m, x_0) = \frac{\alpha_s-\alpha_t}{1-\alpha_t}\delta_{x_0} + "
    r"\frac{1-\alpha_s}{1-\alpha_t}\delta_{\mathrm m},\quad q(x_s\mid x_t\ne\mathrm m, x_0) = "
    r"\delta_{x_t}",
    "Austin et al. 2021 (D3PM); Sahoo et al. 2024 (MDLM §3.2)",
    (qualname(_df.masked_posterior), qualname(_df.transition_matrix)),
    guard(derive_posterior), tags=("closed-form",)))

register(Identity(
    "masked_elbo_step_kl", "diffusion",
    "The per-step KL of the masked ELBO is a weighted cross-entropy",
    r"\mathrm{KL}\bigl(q(x_s^i\mid x_t, x_0)\,\parallel\,p_\theta(x_s^i\mid x_t)\bigr) = "
    r"-\frac{\alpha_s-\alpha_t}{1-\alpha_t}\log\mu_\theta^i(x_0^i)\,[x_t^i = \mathrm m]",
    "Sahoo et al. 2024 (MDLM eq. 8); Shi et al. 2024 (MD4 §4)",
    (qualname(_df.step_kl), qualname(_df.masked_posterior)),
    guard(derive_step_kl), tags=("closed-form",)))

register(Identity(
    "masked_elbo_continuous_limit", "diffusion",
    "The continuous-time masked-diffusion ELBO: the limit of the discrete one",
    r"\lim_{T\to\infty} L_T = \int_0^1\frac{\alpha_t'}{1-\alpha_t}\,\mathbb E_{q_t}\Bigl["
    r"\sum_{i:\,x_t^i=\mathrm m}\log p_\theta(x_0^i\mid x_t)\Bigr]dt = \sum_{M\ne\emptyset}"
    r"\frac{(L-|M|)!\,(|M|-1)!}{L!}\sum_{i\in M}-\log p_\theta(x_0^i\mid x_0^{\setminus M})",
    "Shi et al. 2024 (MD4 eq. 4); Sahoo et al. 2024 (MDLM eq. 10); " + SEED,
    (qualname(_df.nelbo_integrand), qualname(_df.nelbo_exact), qualname(_df.discrete_nelbo),
     qualname(_df.step_weight), qualname(_df.masking_weight), qualname(_df.linear_alpha),
     qualname(_df.linear_alpha_prime), qualname(_df.cosine_alpha),
     qualname(_df.cosine_alpha_prime)),
    guard(derive_continuous_limit), tags=("closed-form",)))
