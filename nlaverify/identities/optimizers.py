r"""The ``optimizers`` family: what the reference update rules of
:mod:`nlaverify.optim.rules` and :mod:`nlaverify.optim.muon` do, proved with those running
rules on the SymPy namespace (symbolic gradients :math:`g_1, \dots, g_t` and symbolic
hyperparameters), against independent derivations: explicit and general sums
(``sympy.summation``), the classic formulation of a method run beside optax's on a quadratic
whose gradient ``sympy.diff`` takes, a matrix built from a known SVD.

Baggag & Saad §2.4 (SGD, momentum, Adagrad, Adam, AdamW), §5.4 (Shampoo), §5.5 (Muon). The
rules are called through their modules (``_r.adam``, ``_mu.muon``, ...), so a test can plant
an error in a formula and see the proof fail.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import sympy

from nlaverify.curvature import shampoo as _sh
from nlaverify.identities.core import Identity, Proof, Step, qualname, register
from nlaverify.identities.kronecker import XP, _cayley, _concrete, _equal, _sym, _verdict
from nlaverify.optim import muon as _mu
from nlaverify.optim import newton_schulz as _ns
from nlaverify.optim import rules as _r
from nlaverify.symbolic.exact import is_zero

SEED_24 = "Baggag & Saad §2.4"
_b1, _b2, _beta = sympy.symbols("beta_1 beta_2 beta", positive=True)
_eta, _eps, _lam = sympy.symbols("eta epsilon lambda", positive=True)
_t, _k = sympy.symbols("t k", integer=True, positive=True)


def _run(rule: _r.Rule, params: dict[str, Any], grads: list[dict[str, Any]],
         grad_fn: Any = None) -> tuple[list[dict[str, Any]], list[Any], list[dict[str, Any]]]:
    """Run ``rule`` on SymPy: the iterates :math:`w_0..w_T`, the states and the updates. The
    gradients are the list ``grads``, or ``grad_fn(w)`` at each iterate."""
    ws, states, ups = [params], [rule.init(XP, params)], []
    for step in range(len(grads) if grad_fn is None else grads):
        g = grads[step] if grad_fn is None else grad_fn(ws[-1])
        u, s = rule.update(XP, g, states[-1], ws[-1])
        ups.append(u)
        states.append(s)
        ws.append(_r.apply_updates(XP, ws[-1], u))
    return ws, states, ups


def _grads(n: int, T: int, name: str = "g", **assume: Any) -> list[dict[str, Any]]:
    """``T`` symbolic gradients of a parameter ``w`` of shape ``(n,)``: :math:`g_{k,i}`."""
    return [{"w": np.array([sympy.Symbol(f"{name}_{{{k},{i}}}", real=True, **assume)
                            for i in range(1, n + 1)], dtype=object)} for k in range(1, T + 1)]


# --------------------------------------------------------------------------- Adam


def derive_adam_bias_correction() -> Proof:
    T = 4

    def constant(n: int) -> bool:
        g = _sym("g", (n,))
        _, states, _ = _run(_r.adam(_eta, _b1, _b2, _eps), {"w": _sym("w", (n,))},
                            [{"w": g}] * T)
        return all(_equal(_r.bias_correction(XP, s["mu"]["w"], _b1, s["count"]), g)
                   and _equal(_r.bias_correction(XP, s["nu"]["w"], _b2, s["count"]), g * g)
                   for s in states[1:])

    def weights(t: int) -> bool:
        grads = _grads(1, t)
        _, states, _ = _run(_r.adam(_eta, _b1, _b2, _eps), {"w": _sym("w", (1,))}, grads)
        m_hat = _r.bias_correction(XP, states[-1]["mu"]["w"], _b1, states[-1]["count"])[0]
        # the coefficient of g_k (m_hat is linear in the g_k), from the closed form
        want = [(1 - _b1) * _b1 ** (t - k) / (1 - _b1**t) for k in range(1, t + 1)]
        got = [sympy.diff(m_hat, g["w"][0]) for g in grads]
        return (is_zero(m_hat - sum(c * g["w"][0] for c, g in zip(got, grads, strict=True)))
                and all(is_zero(a - b) for a, b in zip(got, want, strict=True)))

    total = sympy.summation((1 - _b1) * _b1 ** (_t - _k), (_k, 1, _t)) / (1 - _b1**_t)
    general = is_zero(sympy.simplify(total - 1))
    grads = _grads(1, 2)
    _, states, _ = _run(_r.adam(_eta, _b1, _b2, _eps), {"w": _sym("w", (1,))}, grads)
    shown = sympy.factor(_r.bias_correction(XP, states[-1]["mu"]["w"], _b1,
                                            states[-1]["count"])[0])
    return _verdict(
        (True, Step(r"What the running `adam` computes after two steps, factored:",
                    r"\hat m_2 = " + sympy.latex(shown))),
        _concrete(r"Constant gradient $g$ (a symbolic vector), symbolic $\beta_1, \beta_2, "
                  r"\eta, \epsilon$: the running `adam` for $t = 1..4$ steps, its moments "
                  r"through the running `bias_correction`, minus $g$ and $g\odot g$, cases: "
                  r"the parameter's size", [1, 3], constant),
        _concrete(r"Any gradients $g_1..g_t$: the bias-corrected first moment of the running "
                  r"`adam` is linear in the $g_k$ (it equals $\sum_k "
                  r"\partial\hat m_t/\partial g_k\, g_k$) with the coefficients "
                  r"$w_k = (1-\beta_1)\beta_1^{t-k}/(1-\beta_1^t)$, cases $t$", [1, 2, 3, 4],
                  weights),
        (general, Step(r"For every $t$ (`sympy.summation` over a symbolic $t$): the weights "
                       r"sum to one, so $\hat m_t$ is an affine (for $0 < \beta_1 < 1$, convex) "
                       r"combination of the gradients:", sympy.latex(sympy.Eq(
                           sympy.Sum((1 - _b1) * _b1 ** (_t - _k), (_k, 1, _t))
                           / (1 - _b1**_t), 1)))))


def derive_adamw_decay() -> Proof:
    T, n = 3, 2
    w0 = _sym("w", (n,))
    grads = _grads(n, T)

    def l2(g: dict[str, Any], w: dict[str, Any]) -> dict[str, Any]:
        return {"w": g["w"] + _lam * w["w"]}  # the gradient of L + (lambda/2)|w|^2

    def sgd_same(_: Any) -> bool:
        it = iter(grads)
        ws_l2, _, _ = _run(_r.sgd(_eta), {"w": w0}, T, lambda w: l2(next(it), w))
        ws_dec, _, _ = _run(_r.sgd(_eta, _lam), {"w": w0}, grads)
        return all(_equal(a["w"], b["w"]) for a, b in zip(ws_l2, ws_dec, strict=True))

    def decoupled(_: Any) -> bool:
        _, _, u_w = _run(_r.adamw(_eta, _b1, _b2, _eps, _lam), {"w": w0}, grads)
        _, _, u_a = _run(_r.adam(_eta, _b1, _b2, _eps), {"w": w0}, grads)
        # same gradients, same iterates' gradients: AdamW = Adam - eta*lambda*w_t; the
        # decay bypasses the moments. (The iterates differ, so compare step by step.)
        ok = True
        w = w0
        for uw, ua in zip(u_w, u_a, strict=True):
            ok &= _equal(uw["w"] - ua["w"], -_eta * _lam * w)
            w = w + uw["w"]
        return ok

    point = {_eta: 1, _b1: sympy.Rational(9, 10), _b2: sympy.Rational(999, 1000), _eps: 0,
             _lam: sympy.Rational(1, 10)}
    g1, w1 = sympy.Symbol("g", positive=True), sympy.Symbol("w", positive=True)
    at = {g1: 1, w1: 1}
    one = {"w": np.array([w1], dtype=object)}
    _, _, u_l2 = _run(_r.adam(_eta, _b1, _b2, _eps), one, [{"w": np.array([g1 + _lam * w1],
                                                                          dtype=object)}])
    _, _, u_dec = _run(_r.adamw(_eta, _b1, _b2, _eps, _lam), one,
                       [{"w": np.array([g1], dtype=object)}])
    gap = sympy.simplify((u_l2[0]["w"][0] - u_dec[0]["w"][0]).subs(point).subs(at))
    return _verdict(
        _concrete(r"SGD: the running `sgd` on the L2-regularised gradients $g_k + \lambda w_k$ "
                  r"and the running `sgd` with decoupled decay $\lambda$ (the step "
                  r"$-\eta(g_k + \lambda w_k)$) from the same symbolic $w_0$, $T = 3$ steps: "
                  r"the iterates minus each other", ["sgd"], sgd_same),
        _concrete(r"AdamW: the running `adamw` minus the running `adam` on the same gradients, "
                  r"step by step, minus $-\eta\lambda w_t$ (the decay is added after the "
                  r"moments and the bias correction, so it never meets $\sqrt{\hat v_t}$)",
                  ["adamw"], decoupled),
        (gap != 0, Step(r"They differ for Adam: the first step of the running `adam` on the "
                        r"L2 gradient $g + \lambda w$ minus that of `adamw` with decay "
                        r"$\lambda$ is $-\eta(g+\lambda w)/(|g+\lambda w|+\epsilon) + "
                        r"\eta(g/(|g|+\epsilon) + \lambda w)$; exactly at $g = w = \eta = 1$, "
                        r"$\lambda = 1/10$, $\epsilon = 0$:", rf"\Delta = {sympy.latex(gap)} "
                        r"\ne 0")))


# --------------------------------------------------------------------------- Adagrad


def derive_adagrad_shampoo() -> Proof:
    def diagonal(case: tuple[int, int]) -> bool:
        n, T = case
        grads = _grads(n, T, nonzero=True)
        _, _, ups = _run(_r.adagrad(_eta, 0, 0), {"w": _sym("w", (n,))}, grads)
        stats = None
        for k, g in enumerate(grads):
            stats = _sh.shampoo_statistics(XP, g["w"], stats)  # L_t = sum g g^T
            D = np.array([sympy.sqrt(stats[0][i, i]) for i in range(n)], dtype=object)
            if not _equal(ups[k]["w"], -_eta * g["w"] / D):  # diag(L_t)^{-1/2} g_t
                return False
        return True

    def axes(case: tuple[int, tuple[int, ...]]) -> bool:
        n, where = case
        sig = [sympy.Symbol(f"sigma_{k + 1}", positive=True) for k in range(len(where))]
        grads = [{"w": np.array([sig[k] if i == j else 0 for i in range(n)], dtype=object)}
                 for k, j in enumerate(where)]
        _, _, a = _run(_r.adagrad(_eta, 0, 0), {"w": _sym("w", (n,))}, grads)
        _, _, s = _run(_mu.shampoo(_eta, 0), {"w": _sym("w", (n,))}, grads)
        return all(_equal(x["w"], y["w"]) for x, y in zip(a, s, strict=True))

    return _verdict(
        _concrete(r"Any nonzero symbolic gradients $g_1..g_T$ of a vector parameter: the "
                  r"running `adagrad` ($s_0 = 0$, $\epsilon = 0$) against $-\eta\,"
                  r"\operatorname{diag}(L_t)^{-1/2}g_t$, where $L_t = \sum_{k\le t}g_kg_k^\top$ "
                  r"is the running `shampoo_statistics` of order one (full-matrix Adagrad's "
                  r"matrix) and only its diagonal is kept, at every step, cases $(n, T)$",
                  [(2, 3), (3, 2)], diagonal),
        _concrete(r"When the statistics are diagonal (each gradient along a coordinate axis, "
                  r"$g_k = \sigma_k e_{j_k}$, some axes repeated, some never hit): the running "
                  r"`adagrad` and the running `shampoo` rule (order one, $\epsilon = 0$, "
                  r"pseudo-inverse root) give the same updates at every step, cases "
                  r"$(n, (j_k))$", [(3, (0, 1, 0)), (2, (1, 1))], axes))


# --------------------------------------------------------------------------- momentum


def _quadratic(n: int) -> tuple[Any, list[sympy.Symbol]]:
    """A quadratic :math:`f(x) = \\tfrac12 x^\\top A x + b^\\top x` with a symbolic symmetric
    :math:`A` and :math:`b`, and its gradient by ``sympy.diff`` (no formula of ours)."""
    x = list(sympy.symbols(f"x_1:{n + 1}", real=True))
    A = sympy.Matrix(n, n, lambda i, j: sympy.Symbol(f"a_{{{min(i, j) + 1}{max(i, j) + 1}}}",
                                                     real=True))
    b = sympy.Matrix([sympy.Symbol(f"b_{i + 1}", real=True) for i in range(n)])
    X = sympy.Matrix(x)
    f = (X.T * A * X)[0] / 2 + (b.T * X)[0]
    grad = [sympy.diff(f, xi) for xi in x]

    def at(w: Any) -> np.ndarray:
        sub = dict(zip(x, list(w), strict=True))
        return np.array([sympy.expand(gi.xreplace(sub)) for gi in grad], dtype=object)

    return at, x


def derive_momentum() -> Proof:
    T = 4

    def moving_sum(n: int) -> bool:
        grads = _grads(n, T)
        _, states, ups = _run(_r.momentum(_eta, _beta), {"w": _sym("w", (n,))}, grads)
        m = XP.zeros((n,))
        for t in range(1, T + 1):
            v = sum(_beta ** (t - k) * grads[k - 1]["w"] for k in range(1, t + 1))
            m = _r.ema(XP, m, grads[t - 1]["w"], _beta)  # the EMA: (1 - beta) times it
            if not (_equal(states[t]["trace"]["w"], v) and _equal(ups[t - 1]["w"], -_eta * v)
                    and _equal(m, (1 - _beta) * v)):
                return False
        return True

    def classic(case: tuple[str, int]) -> bool:
        kind, n = case
        grad, _ = _quadratic(n)
        theta = _sym("w", (n,))
        rule = _r.momentum(_eta, _beta, nesterov=kind == "nesterov")
        ws, _, _ = _run(rule, {"w": theta}, 3, lambda w: {"w": grad(w["w"])})
        # the classic forms, written out: Polyak's heavy ball
        #   theta_{t+1} = theta_t - eta grad(theta_t) + beta (theta_t - theta_{t-1}),
        # and Sutskever et al.'s Nesterov (2013, eq. 3-4), v_0 = 0:
        #   v_{t+1} = beta v_t - eta grad(theta_t + beta v_t), theta_{t+1} = theta_t + v_{t+1},
        # whose look-ahead point phi_t = theta_t + beta v_t is optax's iterate
        v, prev = np.zeros(n, dtype=object), theta
        for t in range(1, 4):
            if kind == "heavy_ball":
                theta, prev = theta - _eta * grad(theta) + _beta * (theta - prev), theta
                point = theta
            else:
                v = _beta * v - _eta * grad(theta + _beta * v)
                theta = theta + v
                point = theta + _beta * v
            if not _equal(ws[t]["w"], point):
                return False
        return True

    return _verdict(
        _concrete(r"The running `momentum` (heavy ball) over $T = 4$ symbolic gradients: its "
                  r"trace minus $v_t = \sum_{k\le t}\beta^{t-k}g_k$, its update minus "
                  r"$-\eta v_t$, and the running `ema` from $m_0 = 0$ minus $(1-\beta)v_t$, "
                  r"cases: the parameter's size", [1, 2], moving_sum),
        _concrete(r"On $f(x) = \tfrac12x^\top Ax + b^\top x$ (symbolic symmetric $A$, $b$; "
                  r"$\nabla f$ by `sympy.diff`), three steps from a symbolic $w_0$: the "
                  r"running `momentum` against Polyak's $\theta_{t+1} = \theta_t - "
                  r"\eta\nabla f(\theta_t) + \beta(\theta_t - \theta_{t-1})$, and the running "
                  r"Nesterov form of optax ($u_t = -\eta(g_t + \beta v_t)$) against Sutskever "
                  r"et al.'s look-ahead $v_{t+1} = \beta v_t - \eta\nabla f(\theta_t + \beta "
                  r"v_t)$, $\theta_{t+1} = \theta_t + v_{t+1}$, whose look-ahead point "
                  r"$\theta_t + \beta v_t$ is optax's iterate, cases (form, $n$)",
                  [("heavy_ball", 2), ("nesterov", 1), ("nesterov", 2)], classic))


# --------------------------------------------------------------------------- Muon


def _rational(coeffs: tuple[Any, ...]) -> tuple[sympy.Rational, ...]:
    return tuple(sympy.Rational(c.numerator, c.denominator) if isinstance(c, Fraction)
                 else sympy.nsimplify(c) for c in coeffs)


#: spectra with :math:`\lVert\sigma\rVert_2 = 1` (Pythagorean), so every iterate stays rational
_SPECTRA = {"3/5, 4/5": (Fraction(3, 5), Fraction(4, 5)), "5/13, 12/13": (Fraction(5, 13),
            Fraction(12, 13)), "2/3, 2/3, 1/3": (Fraction(2, 3), Fraction(2, 3), Fraction(1, 3)),
            "1": (Fraction(1),)}


def derive_muon_polar() -> Proof:
    c = sympy.Symbol("c", positive=True)  # an overall scale of the gradient

    def check(case: tuple[int, int, str, int, bool]) -> bool:
        m, n, spectrum, steps, nesterov = case
        sigma = [sympy.Rational(x.numerator, x.denominator) for x in _SPECTRA[spectrum]]
        r = len(sigma)
        U, V = _cayley(m)[:, :r], _cayley(n, 1)[:, :r]
        G = c * (U @ np.diag(sigma) @ V.T)
        rule = _mu.muon(_eta, sympy.Rational(19, 20), nesterov, _ns.MUON, steps, eps=0)
        _, _, ups = _run(rule, {"W": _sym("w", (m, n))}, [{"W": G}])
        # the independent side: Newton-Schulz acts on the singular values of G/|G|_F by the
        # scalar map p (the newton_schulz family's first identity), so after `steps` steps
        # U diag(p^k(sigma_i / |sigma|)) V^T (|sigma| = 1 here); Shampoo's direction is U V^T
        coeffs = _rational(_ns.MUON)
        mapped = []
        for x in sigma:
            for _ in range(steps):
                x = _ns.odd_polynomial(coeffs, x)
            mapped.append(x)
        scale = sympy.sqrt(sympy.Rational(max(m, n), m))  # optax: sqrt(max(1, fan_out/fan_in))
        shampoo = _sh.shampoo_direction(XP, G, _sh.shampoo_statistics(XP, G))
        return (_equal(ups[0]["W"], -_eta * scale * (U @ np.diag(mapped) @ V.T))
                and _equal(shampoo, U @ V.T)
                and _equal(ups[0]["W"] + _eta * scale * shampoo,
                           -_eta * scale * (U @ np.diag([x - 1 for x in mapped]) @ V.T)))

    coeffs = _rational(_ns.MUON)
    after = []
    for x0 in (sympy.Rational(3, 5), sympy.Rational(4, 5)):
        x = x0
        for _ in range(5):
            x = _ns.odd_polynomial(coeffs, x)
        after.append(sympy.N(x, 6))
    return _verdict((True, Step(
        r"The singular values Muon's five steps make of $\sigma = (3/5, 4/5)$ (exact rationals, "
        r"shown to 6 digits): not 1, the gap $p^{(k)} - 1$ below is what separates Muon from "
        r"Shampoo's exact polar factor (the `newton_schulz` family bounds it):",
        rf"p^{{(5)}}(3/5) = {after[0]},\quad p^{{(5)}}(4/5) = {after[1]}")), _concrete(
        r"One step of the running `muon` (zero momentum, $\beta = 19/20$, $\epsilon = 0$, "
        r"optax's shape scale $s = \sqrt{\max(1, n/m)}$, Muon's coefficients, $k$ steps) on "
        r"$G = c\,U_r\operatorname{diag}(\sigma)V_r^\top$ ($U$, $V$ exact Cayley orthogonal "
        r"matrices, $c > 0$ a symbol, $\lVert\sigma\rVert = 1$): the moment $\tilde M_1$ is a "
        r"positive multiple of $G$ (Nesterov or not), which the Frobenius normalisation "
        r"removes, so the update is $-\eta s\,U\operatorname{diag}(p^{(k)}(\sigma_i))"
        r"V_r^\top$ with $p^{(k)}$ the scalar map iterated (`odd_polynomial`, not the matrix "
        r"code); the running `shampoo_direction` for $G$ is $UV^\top$ (identity "
        r"`shampoo_one_gradient_is_polar_factor`); hence Muon minus $-\eta s$ times Shampoo's "
        r"direction is $-\eta s\,U\operatorname{diag}(p^{(k)}(\sigma_i) - 1)V^\top$, zero for "
        r"the exact polar factor ($p^{(k)} \equiv 1$). Cases $(m, n, \sigma, k, "
        r"\text{Nesterov})$",
        [(2, 3, "3/5, 4/5", 5, True), (3, 2, "5/13, 12/13", 5, False),
         (3, 3, "2/3, 2/3, 1/3", 2, True), (3, 1, "1", 5, True)], check))


# --------------------------------------------------------------------------- catalogue

_F = "optimizers"


def _reg(id_: str, title: str, statement: str, seed: str, certifies: tuple, derive) -> None:
    register(Identity(id_, _F, title, statement, seed, tuple(qualname(f) for f in certifies),
                      derive, tags=("closed-form",)))


_reg("adam_bias_correction", "Adam's bias correction",
     r"\hat m_t = \frac{m_t}{1-\beta_1^t} = \sum_{k\le t}\frac{(1-\beta_1)\beta_1^{t-k}}"
     r"{1-\beta_1^t}\,g_k,\ \ \sum_k\frac{(1-\beta_1)\beta_1^{t-k}}{1-\beta_1^t} = 1;\quad "
     r"g_k \equiv g \Rightarrow \hat m_t = g,\ \hat v_t = g^2", SEED_24,
     (_r.adamw, _r.adam, _r.ema, _r.bias_correction), derive_adam_bias_correction)
_reg("adamw_decay_is_not_l2", "AdamW's decoupled decay is not L2 regularisation",
     r"\mathrm{SGD}(g + \lambda w) = \mathrm{SGD}_\lambda(g);\quad \mathrm{AdamW}_\lambda(g) = "
     r"\mathrm{Adam}(g) - \eta\lambda w \ne \mathrm{Adam}(g + \lambda w)", SEED_24,
     (_r.adamw, _r.adam, _r.sgd, _r.decoupled_decay, _r.apply_updates), derive_adamw_decay)
_reg("adagrad_is_diagonal_shampoo", "Adagrad is diagonal full-matrix Adagrad (Shampoo of order "
     "one)", r"-\eta\,\frac{g_t}{\sqrt{\textstyle\sum_{k\le t}g_k^2}} = -\eta\,"
     r"\operatorname{diag}(L_t)^{-1/2}g_t,\quad L_t = \sum_{k\le t}g_kg_k^\top",
     "Baggag & Saad §2.4.2, eqs. 2.4.7–2.4.8, and §5.4, eq. 5.4.4",
     (_r.adagrad, _r.adagrad_direction, _sh.shampoo_statistics, _mu.shampoo),
     derive_adagrad_shampoo)
_reg("momentum_moving_sum_and_nesterov", "Heavy-ball momentum and Nesterov's look-ahead",
     r"v_t = \sum_{k\le t}\beta^{t-k}g_k;\quad w_{t+1} = w_t - \eta(g_t + \beta v_t),\ "
     r"g_t = \nabla f(w_t)\ \Longleftrightarrow\ w_t = \theta_t + \beta v^{\mathrm{cl}}_t",
     SEED_24, (_r.momentum, _r.heavy_ball, _r.nesterov_trace, _r.ema), derive_momentum)
_reg("muon_first_step_is_polar", "Muon's first step is Newton–Schulz of the gradient, "
     "Shampoo's direction in the limit",
     r"U_1 = -\eta\,s(m,n)\,\mathrm{NS}_k(G) = -\eta\,s\,U p^{(k)}(\Sigma/\lVert G\rVert_F)"
     r"V^\top \xrightarrow{p^{(k)}\to 1} -\eta\,s\,UV^\top = -\eta\,s\,L^{-1/4}GR^{-1/4}",
     "Baggag & Saad §5.5 (and §5.4)",
     (_mu.muon, _mu.muon_moment, _mu.muon_direction, _mu.shape_scale, _ns.newton_schulz,
      _sh.shampoo_direction), derive_muon_polar)
