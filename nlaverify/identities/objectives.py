r"""The ``objectives`` family: the training objectives of an autoregressive model (Baptista,
Stuart & Tran §3–4, §4.1, §4.3–4.4; Rafailov et al. 2023; Williams 1992), proved on the
functions of :mod:`nlaverify.objectives` themselves, run on the exact SymPy namespace with
symbolic distributions, rewards, logits and :math:`\beta`.

* ``sequence_kl_chain_rule``: the KL of two autoregressive laws is the sum of the expected
  conditional KLs (vocabulary 2, length 3 and vocabulary 3, length 2; every conditional row a
  symbolic distribution);
* ``cross_entropy_kl_entropy``: :math:`\mathrm{CE} = \mathrm{KL} + H`, per token and per
  sequence; perplexity and bits per byte;
* ``forward_kl_maximum_likelihood``: the gradient of the expected negative log-likelihood is
  that of the *forward* :math:`\mathrm{KL}(p_\text{data}\|q_\theta)`, and the KL is not
  symmetric (an exact counterexample, §4.1);
* ``kl_regularised_gibbs_optimum``: :math:`J(\pi) = \beta\log Z - \beta\mathrm{KL}(\pi\|\pi^*)`
  (Gibbs variational principle), so :math:`\pi^*` is the unique maximiser, of value
  :math:`\beta\log Z`;
* ``dpo_from_gibbs``: DPO's implicit reward, the Bradley–Terry likelihood of :math:`\pi^*`
  equal to the DPO loss (:math:`Z` cancels), and the DPO gradient;
* ``reinforce_baseline_unbiased``: the score-function estimator with a constant baseline has
  the mean :math:`\nabla_\theta\mathbb E_{\pi_\theta}[r]`.

A row of :math:`V` entries is written :math:`a_i/\sum_j a_j` with positive symbols
:math:`a_i` (a distribution by construction, not by an assumption, and every entry known to be
positive). An expression is shown to be 0 by expanding its logarithms (``force=True``: every
argument is positive) and cancelling the rational coefficient of each logarithm.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import sympy

from nlaverify import objectives as _ob
from nlaverify.backends import get_namespace
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.symbolic.normal_form import rational_zero

SEED = "Baptista, Stuart & Tran §3–4"


def _s(x: Any) -> sympy.Expr:
    """A 0-d object array (or a scalar) as a SymPy expression."""
    return sympy.sympify(np.asarray(x, dtype=object).item())


def _is_zero(e: Any) -> bool:
    r"""``e`` is identically 0: its logarithms expanded (their arguments are positive), the
    rational coefficient of each logarithm and the rest cancel to 0; or, when the expanded
    form is small, its exponential simplifies to 1 (sound: ``e`` is real-valued). A
    ``Piecewise`` is 0 when every branch is."""
    e = sympy.piecewise_fold(sympy.sympify(e))
    if isinstance(e, sympy.Piecewise):
        return all(_is_zero(branch) for branch, _ in e.args)
    # first the rational normal form with each logarithm an opaque generator: numerator 0
    # is what collecting the logarithms and cancelling each coefficient below decides, in
    # polynomial rings (sequence_kl_chain_rule: 3.4 s -> 0.05 s)
    if rational_zero(sympy.expand_log(e, force=True)):
        return True
    flat = sympy.expand(sympy.expand_log(sympy.expand(e), force=True))
    logs = sorted(flat.atoms(sympy.log), key=sympy.default_sort_key)
    parts = sympy.collect(flat, logs, evaluate=False)
    if all(sympy.cancel(sympy.together(c)) == 0 for c in parts.values()):
        return True
    return sympy.count_ops(flat) < 80 and sympy.simplify(
        sympy.powsimp(sympy.expand(sympy.exp(flat)), force=True)) == 1


def _branches(e: Any) -> list[sympy.Expr]:
    """The branch values of a (folded) ``Piecewise``, or ``[e]``."""
    e = sympy.piecewise_fold(sympy.sympify(e))
    if isinstance(e, sympy.Piecewise):
        return [b for branch, _ in e.args for b in _branches(branch)]
    return [e]


def _row(name: str, V: int) -> list[sympy.Expr]:
    r"""A symbolic distribution :math:`a_i/\sum_j a_j` of ``V`` positive symbols."""
    free = sympy.symbols(f"{name}_0:{V}", positive=True)
    return [a / sum(free) for a in free]


def _tables(name: str, V: int, n: int) -> list[np.ndarray]:
    """Symbolic conditional tables ``(V,)*(t+1)`` of an autoregressive law of length ``n``."""
    out = []
    for t in range(n):
        table = np.empty((V,) * (t + 1), dtype=object)
        for prefix in itertools.product(range(V), repeat=t):
            table[prefix] = _row(name + "".join(map(str, prefix)) if prefix else name, V)
        out.append(table)
    return out


def derive_chain_rule() -> Proof:
    xp = get_namespace("sympy")
    steps, ok = [], True
    for V, n in ((2, 3), (3, 2)):
        p, q = _tables("p", V, n), _tables("q", V, n)
        joint = _s(_ob.sequence_kl(xp, p, q))
        chain = _s(_ob.chain_rule_kl(xp, p, q))
        zero = _is_zero(joint - chain)
        ok = ok and zero
        steps.append(Step(
            f"Vocabulary {V}, length {n}: every conditional row of $p$ and $q$ a symbolic "
            f"distribution ({sum(V ** t for t in range(n)) * V} positive symbols each). "
            f"`sequence_kl` (the KL of the two joint laws over the {V ** n} sequences) minus "
            f"`chain_rule_kl` (the expected conditional KLs), logarithms expanded, is "
            + ("0" if zero else "not 0")))
    p, q = _tables("p", 2, 2), _tables("q", 2, 2)
    steps.insert(0, Step(r"The chain rule on the smallest case (vocabulary 2, length 2): "
                         r"`chain_rule_kl` returns",
                         r"\sum_t \mathbb E_{x_{1:t}\sim p}\,\mathrm{KL}\bigl(p(\cdot\mid "
                         r"x_{1:t})\,\|\,q(\cdot\mid x_{1:t})\bigr) = "
                         + sympy.latex(_s(_ob.chain_rule_kl(xp, p, q)))))
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else "sequence KL differs from the chain-rule sum")


def derive_ce_kl_entropy() -> Proof:
    xp = get_namespace("sympy")
    p, q = xp.asarray(_row("p", 3)), xp.asarray(_row("q", 3))
    ce, kl, h = _s(_ob.cross_entropy(xp, p, q)), _s(_ob.kl(xp, p, q)), _s(_ob.entropy(xp, p))
    per_token = _is_zero(ce - kl - h)
    steps = [Step(r"One position, vocabulary 3, symbolic $p$ and $q$: `cross_entropy`, `kl` "
                  r"and `entropy` return",
                  r"\mathrm{CE}(p,q) = " + sympy.latex(ce) + r",\qquad H(p) = "
                  + sympy.latex(h)),
             Step(r"$\mathrm{CE} - \mathrm{KL} - H$, logarithms expanded, is "
                  + ("0" if per_token else "not 0"))]
    P, Q = _tables("p", 2, 2), _tables("q", 2, 2)
    jp = xp.reshape(_ob.joint_distribution(xp, P), (-1,))
    jq = xp.reshape(_ob.joint_distribution(xp, Q), (-1,))
    seq = _is_zero(_s(_ob.cross_entropy(xp, jp, jq)) - _s(_ob.sequence_kl(xp, P, Q))
                   - _s(_ob.entropy(xp, jp)))
    steps.append(Step(r"Per sequence (vocabulary 2, length 2, symbolic conditional tables): "
                      r"the cross-entropy of the joint laws minus `sequence_kl` minus the "
                      r"data's entropy is " + ("0" if seq else "not 0") + r". So the "
                      r"population loss is $\mathrm{KL}(p_\text{data}\|q) + H(p_\text{data})$: "
                      r"at least the data's entropy, with equality only at $q = p_\text{data}$"))
    ell, b = sympy.symbols("ell b", positive=True)
    bpb = _s(_ob.bits_per_byte(xp, ell, b))
    ppl = _s(_ob.perplexity(xp, ell))
    units = _is_zero(bpb - sympy.log(ppl, 2) / b)
    steps.append(Step(r"Perplexity and bits per byte of a mean negative log-likelihood "
                      r"$\ell$ per token (nats) with $b$ bytes per token: "
                      r"$\mathrm{bpb} - \log_2(\mathrm{PPL})/b$ is "
                      + ("0" if units else "not 0"),
                      r"\mathrm{PPL} = " + sympy.latex(ppl) + r",\qquad \mathrm{bpb} = "
                      + sympy.latex(bpb)))
    ok = per_token and seq and units
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else f"per token {per_token}, per sequence {seq}, units {units}")


def derive_forward_kl_ml() -> Proof:
    from nlaverify.ops.softmaxes import softmax

    xp = get_namespace("sympy")
    xp.reset_shifts()
    theta = sympy.symbols("theta_0:3", real=True)
    p = xp.asarray(_row("p", 3))
    q = xp.without_shifts(softmax(xp, xp.asarray(list(theta))))
    nll = _s(_ob.cross_entropy(xp, p, q))
    fwd = _s(_ob.kl(xp, p, q))
    same = all(_is_zero(sympy.diff(nll - fwd, t)) for t in theta)
    grad = [sympy.simplify(sympy.diff(nll, t)) for t in theta]
    moment = all(_is_zero(g - (qi - pi)) for g, qi, pi in zip(grad, q, p, strict=True))
    steps = [Step(r"A softmax model $q_\theta = \operatorname{softmax}(\theta)$ on 3 outcomes "
                  r"and symbolic data $p$: the expected negative log-likelihood "
                  r"$\mathbb E_{p}[-\log q_\theta]$ (`cross_entropy`) minus the forward "
                  r"$\mathrm{KL}(p\|q_\theta)$ (`kl`) has zero gradient in $\theta$: "
                  + ("true" if same else "false") + r" (the difference is $H(p)$). So "
                  r"maximum likelihood minimises the forward KL; its gradient is "
                  r"$q_\theta - p$: " + ("true" if moment else "false"),
                  r"\frac{\partial}{\partial\theta_0}\mathbb E_p[-\log q_\theta] = "
                  + sympy.latex(grad[0]))]
    # the asymmetry (§4.1): p = (1/2, 1/2), q = (1/4, 3/4)
    half, qq = xp.asarray([sympy.Rational(1, 2)] * 2), xp.asarray(
        [sympy.Rational(1, 4), sympy.Rational(3, 4)])
    forward, reverse = _s(_ob.kl(xp, half, qq)), _s(_ob.kl(xp, qq, half))
    gap = sympy.nsimplify(sympy.logcombine(sympy.expand_log(forward - reverse, force=True),
                                           force=True))
    target = sympy.log(sympy.Rational(256, 243)) / 4
    asym = _is_zero(forward - reverse - target) and target != 0
    steps.append(Step(r"The order matters: for $p = (\tfrac12, \tfrac12)$, $q = (\tfrac14, "
                      r"\tfrac34)$ `kl` gives the two values below; their difference is "
                      r"$\tfrac14\log\tfrac{256}{243} \neq 0$ ($4^4 \ne 3^5$): "
                      + ("true" if asym else "false"),
                      r"\mathrm{KL}(p\|q) = " + sympy.latex(forward) + r",\quad "
                      r"\mathrm{KL}(q\|p) = " + sympy.latex(reverse) + r",\quad "
                      r"\text{difference} = " + sympy.latex(gap)))
    ok = same and moment and asym
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else f"same gradient {same}, moment {moment}, asymmetry {asym}")


def _gibbs_setup(xp: Any, V: int = 3) -> tuple[Any, ...]:
    r"""Symbolic :math:`\pi_\text{ref}`, rewards :math:`r`, :math:`\beta > 0`; the shift-free
    :math:`\pi^*` and :math:`\log Z`, with the step that licenses dropping the shift."""
    ref = xp.asarray(_row("rho", V))
    r = xp.asarray(list(sympy.symbols(f"r_0:{V}", real=True)))
    beta = sympy.Symbol("beta", positive=True)
    xp.reset_shifts()
    star_c, logz_c = _ob.gibbs_policy(xp, ref, r, beta), _s(_ob.log_partition(xp, ref, r, beta))
    Z = sum(ref[i] * sympy.exp(r[i] / beta) for i in range(V))
    shift = (all(_is_zero(s - ref[i] * sympy.exp(r[i] / beta) / Z)
                 for i, s in enumerate(star_c))
             and sympy.simplify(sympy.powsimp(sympy.expand(sympy.exp(logz_c)), force=True)
                                - Z) == 0)
    star, logz = xp.without_shifts(star_c), xp.without_shifts(logz_c)
    return ref, r, beta, star, logz, Z, shift


def derive_gibbs_optimum() -> Proof:
    xp = get_namespace("sympy")
    ref, r, beta, star, logz, _, shift = _gibbs_setup(xp)
    pi = xp.asarray(_row("pi", 3))
    J = _s(_ob.kl_regularised_objective(xp, pi, ref, r, beta))
    gibbs = _is_zero(J - (beta * logz - beta * _s(_ob.kl(xp, pi, star))))
    at_star = _is_zero(_s(_ob.kl_regularised_objective(xp, star, ref, r, beta)) - beta * logz)
    x = sympy.Symbol("x", positive=True)
    f = x - 1 - sympy.log(x)  # log x <= x - 1, equality only at x = 1
    lemma = (f.subs(x, 1) == 0 and sympy.diff(f, x).subs(x, 1) == 0
             and sympy.diff(f, x, 2).is_positive)
    steps = [Step(r"With symbolic $\pi_\text{ref}$, $\pi$ (3 outcomes), real rewards $r$ and "
                  r"$\beta > 0$, `gibbs_policy` and `log_partition` (with their symbolic "
                  r"stability shift $c$, which cancels exactly: "
                  + ("true" if shift else "false") + r") give",
                  r"\pi^*_0 = " + sympy.latex(sympy.simplify(star[0])) + r",\qquad \log Z = "
                  + sympy.latex(sympy.simplify(logz))),
             Step(r"`kl_regularised_objective` minus $\beta\log Z - \beta\,\mathrm{KL}(\pi\|"
                  r"\pi^*)$ (`kl` at `gibbs_policy`), logarithms expanded, is "
                  + ("0" if gibbs else "not 0") + r": the Gibbs variational principle",
                  r"J(\pi) = \mathbb E_\pi[r] - \beta\,\mathrm{KL}(\pi\|\pi_\text{ref}) = "
                  r"\beta\log Z - \beta\,\mathrm{KL}(\pi\|\pi^*)"),
             Step(r"Gibbs' inequality: $f(x) = x - 1 - \log x$ has $f(1) = f'(1) = 0$ and "
                  r"$f'' = 1/x^2 > 0$, so $\log x \le x - 1$ with equality only at $x = 1$ ("
                  + ("true" if lemma else "false") + r"), hence $-\mathrm{KL}(\pi\|\pi^*) = "
                  r"\sum_{\pi>0}\pi\log\frac{\pi^*}{\pi} \le \sum_{\pi > 0}\pi^* - 1 \le 0$, "
                  r"0 only at $\pi = \pi^*$. So $\pi^*$ is the unique maximiser"),
             Step(r"At the maximiser, `kl_regularised_objective` of `gibbs_policy` minus "
                  r"$\beta\log Z$ is " + ("0" if at_star else "not 0") + r": "
                  r"$\max_\pi J = \beta\log Z$")]
    ok = shift and gibbs and at_star and bool(lemma)
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else f"shift {shift}, gibbs {gibbs}, value {at_star}, lemma {lemma}")


def derive_dpo() -> Proof:
    xp = get_namespace("sympy")
    ref, r, beta, star, logz, _, shift = _gibbs_setup(xp)
    log_star, log_ref = xp.log(star), xp.log(ref)
    reward = all(_is_zero(_s(_ob.implicit_reward(xp, log_star[i], log_ref[i], beta))
                          + beta * logz - r[i]) for i in range(3))
    loss = _ob.dpo_loss(xp, log_star[0], log_star[1], log_ref[0], log_ref[1], beta)
    margin = sympy.expand(sympy.expand_log(
        _s(_ob.implicit_reward(xp, log_star[0], log_ref[0], beta))
        - _s(_ob.implicit_reward(xp, log_star[1], log_ref[1], beta)), force=True))
    bt = _ob.bradley_terry_nll(xp, r[0], r[1])
    smooth = sympy.log(1 + sympy.exp(r[1] - r[0]))  # -log sigma(r_w - r_l)
    cancels = all(_is_zero(b - smooth) for b in _branches(_s(loss)))
    bt_ok = all(_is_zero(b - smooth) for b in _branches(_s(bt)))
    lw, ll, rw, rl = sympy.symbols("ell_w ell_l rho_w rho_l", real=True)
    m = beta * ((lw - rw) - (ll - rl))
    g_w, g_l = _ob.dpo_loss_grad(xp, lw, ll, rw, rl, beta)
    want = sympy.log(1 + sympy.exp(-m))
    grad = (all(_is_zero(b - sympy.diff(want, lw)) for b in _branches(_s(g_w)))
            and all(_is_zero(b - sympy.diff(want, ll)) for b in _branches(_s(g_l)))
            and all(_is_zero(b - want) for b in _branches(_s(
                _ob.dpo_loss(xp, lw, ll, rw, rl, beta)))))
    steps = [Step(r"With $\pi^*$ and $\log Z$ of `gibbs_policy` and `log_partition` "
                  r"(symbolic $\pi_\text{ref}$, $r$, $\beta$; the shift cancels: "
                  + ("true" if shift else "false") + r"), `implicit_reward` plus "
                  r"$\beta\log Z$ gives back $r(y)$ for every $y$: "
                  + ("true" if reward else "false"),
                  r"r(y) = \beta\log\frac{\pi^*(y)}{\pi_\text{ref}(y)} + \beta\log Z"),
             Step(r"`dpo_loss` at $\pi = \pi^*$ for the pair $(y_w, y_l) = (0, 1)$: each branch "
                  r"of its stable two-branch form equals $\log(1 + e^{r_l - r_w}) = "
                  r"-\log\sigma(r_w - r_l)$, the Bradley–Terry negative log-likelihood of the "
                  r"true rewards, in which $Z$ no longer appears: "
                  + ("true" if cancels else "false") + r" (and `bradley_terry_nll`'s "
                  r"branches too: " + ("true" if bt_ok else "false") + r")",
                  r"\beta\log\frac{\pi^*(y_w)}{\pi_\text{ref}(y_w)} - \beta\log"
                  r"\frac{\pi^*(y_l)}{\pi_\text{ref}(y_l)} = " + sympy.latex(margin)),
             Step(r"On free log-probabilities $\ell_w, \ell_l$ (policy) and $\rho_w, \rho_l$ "
                  r"(reference), every branch of `dpo_loss` is $\log(1 + e^{-m})$, "
                  r"$m = \beta[(\ell_w - \rho_w) - (\ell_l - \rho_l)]$, and every branch of "
                  r"`dpo_loss_grad` its derivative in $\ell_w$, $\ell_l$: "
                  + ("true" if grad else "false"),
                  r"\frac{\partial L}{\partial \ell_w} = " + sympy.latex(
                      sympy.simplify(sympy.diff(want, lw))) + r" = -\beta\,\sigma(-m)")]
    ok = shift and reward and cancels and bt_ok and grad
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else f"shift {shift}, reward {reward}, Z cancels {cancels}, "
                               f"BT {bt_ok}, gradient {grad}")


def derive_reinforce() -> Proof:
    xp = get_namespace("sympy")
    xp.reset_shifts()
    theta = xp.asarray(list(sympy.symbols("theta_0:3", real=True)))
    r = xp.asarray(list(sympy.symbols("r_0:3", real=True)))
    b = sympy.Symbol("b", real=True)
    mean = xp.without_shifts(_ob.reinforce_expectation(xp, theta, r, b))
    value = _s(xp.without_shifts(_ob.expected_reward(xp, theta, r)))
    exact = [sympy.diff(value, t) for t in theta]
    unbiased = all(_is_zero(m - e) for m, e in zip(mean, exact, strict=True))
    closed = xp.without_shifts(_ob.expected_reward_grad(xp, theta, r))
    closed_ok = all(_is_zero(c - e) for c, e in zip(closed, exact, strict=True))
    baseline = xp.without_shifts(_ob.reinforce_expectation(xp, theta, xp.zeros(3), 1))
    score_mean = all(_is_zero(s) for s in baseline)
    steps = [Step(r"A softmax policy $\pi_\theta$ on 3 outcomes, symbolic logits $\theta$, "
                  r"rewards $r$ and baseline $b$: `reinforce_expectation`, the mean over "
                  r"$y \sim \pi_\theta$ of the very terms $(e_y - \pi_\theta)(r(y) - b)$ that "
                  r"`reinforce_estimate` averages, minus `sympy.diff` of `expected_reward`, "
                  r"is 0 in every coordinate: " + ("true" if unbiased else "false"),
                  r"\mathbb E_{y\sim\pi_\theta}\bigl[\nabla_\theta\log\pi_\theta(y)\,"
                  r"(r(y) - b)\bigr]_0 = " + sympy.latex(sympy.simplify(mean[0]))),
             Step(r"The baseline's own term is $-b\,\mathbb E[\nabla\log\pi_\theta] = -b\sum_y"
                  r"\nabla\pi_\theta(y) = 0$: `reinforce_expectation` with $r = 0$, $b = 1$ "
                  r"is 0: " + ("true" if score_mean else "false")),
             Step(r"`expected_reward_grad`, $\pi\odot(r - \langle\pi, r\rangle)$, is the same "
                  r"gradient: " + ("true" if closed_ok else "false"))]
    ok = unbiased and score_mean and closed_ok
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else f"unbiased {unbiased}, score mean {score_mean}, "
                               f"closed form {closed_ok}")


def _q(*fs: Any) -> tuple[str, ...]:
    return tuple(qualname(f) for f in fs)


register(Identity(
    "sequence_kl_chain_rule", "objectives", "The chain rule of the sequence KL",
    r"\mathrm{KL}(p\|q) = \sum_{t=0}^{n-1}\mathbb E_{x_{1:t}\sim p}\,\mathrm{KL}\bigl("
    r"p(\cdot\mid x_{1:t})\,\|\,q(\cdot\mid x_{1:t})\bigr)",
    SEED + " (the autoregressive factorization)",
    _q(_ob.sequence_kl, _ob.chain_rule_kl, _ob.joint_distribution, _ob.kl),
    guard(derive_chain_rule), tags=("objectives", "kl")))

register(Identity(
    "cross_entropy_kl_entropy", "objectives", "Cross-entropy is KL plus entropy",
    r"-\mathbb E_p[\log q] = \mathrm{KL}(p\|q) + H(p),\qquad \mathrm{bpb} = "
    r"\frac{\log_2\mathrm{PPL}}{b}",
    SEED + " and §8", _q(_ob.cross_entropy, _ob.kl, _ob.entropy, _ob.perplexity,
                         _ob.bits_per_byte),
    guard(derive_ce_kl_entropy), tags=("objectives", "kl")))

register(Identity(
    "forward_kl_maximum_likelihood", "objectives",
    "Maximum likelihood minimises the forward KL; the KL is not symmetric",
    r"\nabla_\theta\,\mathbb E_{p}[-\log q_\theta] = \nabla_\theta\,\mathrm{KL}(p\|q_\theta),"
    r"\qquad \mathrm{KL}(p\|q) \ne \mathrm{KL}(q\|p)",
    "Baptista, Stuart & Tran §4.1", _q(_ob.cross_entropy, _ob.kl),
    guard(derive_forward_kl_ml), tags=("objectives", "kl")))

register(Identity(
    "kl_regularised_gibbs_optimum", "objectives",
    "The KL-regularised objective is maximised by the Gibbs policy",
    r"\mathbb E_\pi[r] - \beta\,\mathrm{KL}(\pi\|\pi_\text{ref}) = \beta\log Z - \beta\,"
    r"\mathrm{KL}(\pi\|\pi^*),\quad \pi^* = \frac{\pi_\text{ref}e^{r/\beta}}{Z}",
    "Baptista, Stuart & Tran §4.3–4.4",
    _q(_ob.kl_regularised_objective, _ob.gibbs_policy, _ob.log_partition, _ob.kl),
    guard(derive_gibbs_optimum), tags=("objectives", "rl")))

register(Identity(
    "dpo_from_gibbs", "objectives",
    "DPO: the Bradley–Terry likelihood of the Gibbs policy, and its gradient",
    r"-\log\sigma\bigl(r(y_w) - r(y_l)\bigr) = -\log\sigma\Bigl(\beta\log"
    r"\frac{\pi^*(y_w)}{\pi_\text{ref}(y_w)} - \beta\log\frac{\pi^*(y_l)}{\pi_\text{ref}(y_l)}"
    r"\Bigr)",
    "Rafailov et al. 2023 (eq. 5–7); Baptista, Stuart & Tran §4.4",
    _q(_ob.dpo_loss, _ob.dpo_loss_grad, _ob.implicit_reward, _ob.bradley_terry_nll,
       _ob.gibbs_policy, _ob.log_partition),
    guard(derive_dpo), tags=("objectives", "rl")))

register(Identity(
    "reinforce_baseline_unbiased", "objectives",
    "The score-function gradient with a baseline is unbiased",
    r"\mathbb E_{y\sim\pi_\theta}\bigl[\nabla_\theta\log\pi_\theta(y)\,(r(y) - b)\bigr] = "
    r"\nabla_\theta\,\mathbb E_{\pi_\theta}[r]",
    "Williams 1992; Baptista, Stuart & Tran §4.4",
    _q(_ob.reinforce_expectation, _ob.reinforce_estimate, _ob.score_softmax,
       _ob.expected_reward, _ob.expected_reward_grad),
    guard(derive_reinforce), tags=("objectives", "rl")))
