r"""The elementwise update rules of LLM training (Baggag & Saad §2.4): SGD, momentum
(heavy ball, Nesterov), Adagrad, RMSprop, Adam and AdamW, on the conventions of
:mod:`nlaverify.optim.base` and re-exported by :mod:`nlaverify.optim.rules`.

Every formula is one function below (moments, bias corrections, directions, decay), run
unchanged on NumPy, JAX, array-api-strict, mpmath and SymPy, and every rule is built from
them: moments are exponential moving averages :math:`m \leftarrow \beta m + (1-\beta) g`,
bias corrections divide by :math:`1 - \beta^t`, weight decay is added to the direction before
the learning rate (:math:`u = -\eta(d + \lambda w)`, "decoupled" in AdamW), optax 0.2.8's
conventions.
"""

from __future__ import annotations

import numbers
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.optim.base import (
    LearningRate,
    Params,
    Rule,
    State,
    _check_params,
    _params_for,
    _zeros,
    bias_factor,
    check_flag,
    check_hyper,
    check_state,
    const,
    learning_rate,
    typed,
    zero_count,
)

# --------------------------------------------------------------------------- the formulas


def ema(xp: Namespace, m: Any, g: Any, beta: Any) -> Any:
    r"""Exponential moving average :math:`m_t = \beta m_{t-1} + (1-\beta) g_t` (Adam's
    moments, Baggag & Saad §2.4; with :math:`m_0 = 0`, :math:`m_t = (1-\beta)\sum_{k\le t}
    \beta^{t-k}g_k`)."""
    b = const(xp, beta)
    return (1 - b) * g + b * m


def bias_correction(xp: Namespace, m: Any, beta: Any, count: Any) -> Any:
    r"""The bias-corrected moment :math:`\hat m_t = m_t / (1 - \beta^t)` (Kingma & Ba 2015;
    Baggag & Saad §2.4): the weights :math:`(1-\beta)\beta^{t-k}/(1-\beta^t)` of the
    gradients sum to 1, so a constant gradient :math:`g` gives :math:`\hat m_t = g`. The
    factor :math:`1 - \beta^t` is computed in float64 (:func:`bias_factor`), the division in
    ``m``'s dtype (optax)."""
    return m / bias_factor(xp, beta, count, m)


def nesterov_moment(xp: Namespace, m: Any, g: Any, beta: Any, count: Any = None) -> Any:
    r"""Nesterov's look-ahead moment (Dozat 2016, optax's NAdam and Muon):

    .. math:: \tilde m_t = \beta\,\frac{m_t}{1-\beta^{t+1}} + (1-\beta)\,\frac{g_t}{1-\beta^t},

    the bias-corrected moment one step ahead with the current gradient as the next one;
    ``count=None``: without the corrections, :math:`\beta m_t + (1-\beta) g_t` (Keller
    Jordan's Muon, ``g.lerp(m, beta)``)."""
    b = const(xp, beta)
    if count is None:
        return b * m + (1 - b) * g
    return b * bias_correction(xp, m, beta, count + 1) + (1 - b) * bias_correction(
        xp, g, beta, count)


def adam_direction(xp: Namespace, m_hat: Any, v_hat: Any, eps: Any, eps_root: Any = 0) -> Any:
    r"""Adam's direction :math:`\hat m_t / (\sqrt{\hat v_t + \epsilon_{\text{root}}} +
    \epsilon)`, entrywise (Baggag & Saad §2.4)."""
    return m_hat / (xp.sqrt(v_hat + const(xp, eps_root)) + const(xp, eps))


def decoupled_decay(xp: Namespace, d: Any, w: Any, weight_decay: Any) -> Any:
    r"""The direction with decoupled weight decay, :math:`d + \lambda w` (Loshchilov & Hutter
    2019; the step is :math:`-\eta(d + \lambda w)`, optax's and PyTorch's convention), as
    opposed to L2 regularisation, which adds :math:`\lambda w` to the *gradient* before the
    adaptive scaling (identity ``adamw_decay_is_not_l2``)."""
    return d + const(xp, weight_decay) * w


def heavy_ball(xp: Namespace, trace: Any, g: Any, beta: Any) -> Any:
    r"""Polyak's heavy-ball trace :math:`v_t = g_t + \beta v_{t-1}` (optax's ``trace``; the
    step is :math:`-\eta v_t`, so :math:`w_{t+1} = w_t - \eta g_t + \beta(w_t - w_{t-1})`),
    Baggag & Saad §2.4."""
    return g + const(xp, beta) * trace


def nesterov_trace(xp: Namespace, trace: Any, g: Any, beta: Any) -> Any:
    r"""Nesterov's direction in optax's form, :math:`g_t + \beta v_t` with :math:`v_t` the
    new heavy-ball trace (Sutskever et al. 2013). Identity
    ``momentum_moving_sum_and_nesterov``: the same iterates as the classic look-ahead gradient
    :math:`\nabla L(\theta_t + \beta v^{\mathrm{cl}}_t)`, at the look-ahead point."""
    return g + const(xp, beta) * trace


def adagrad_direction(xp: Namespace, s: Any, g: Any, eps: Any) -> Any:
    r"""Adagrad's direction with the accumulated squares :math:`s_t = s_0 + \sum_{k\le t}
    g_k^2` (Duchi et al. 2011; Baggag & Saad §2.4.2, eqs. 2.4.7–2.4.8):
    :math:`g_t/\sqrt{s_t + \epsilon}` entrywise, and :math:`0\cdot g_t` where :math:`s_t`
    is not positive (optax: 0, and NaN for a NaN or infinite gradient, which is not hidden)."""
    pos = xp.greater(s, 0)
    safe = xp.where(pos, s, xp.ones_like(s))
    return xp.where(pos, g / xp.sqrt(safe + const(xp, eps)), xp.zeros_like(g) * g)


def rms_direction(xp: Namespace, nu: Any, g: Any, eps: Any) -> Any:
    r"""RMSprop's direction :math:`g_t/\sqrt{\nu_t + \epsilon}`, :math:`\nu_t` the moving
    average of :math:`g^2` (Tieleman & Hinton 2012; Baggag & Saad §2.4)."""
    return g / xp.sqrt(nu + const(xp, eps))


def scale(xp: Namespace, lr: Any, d: Any) -> Any:
    r"""The update :math:`u = -\eta\, d`."""
    return -lr * d


# --------------------------------------------------------------------------- constructors


def _decays(weight_decay: Any) -> bool:
    return not (isinstance(weight_decay, numbers.Real) and weight_decay == 0)


def sgd(lr: LearningRate, weight_decay: Any = 0.0) -> Rule:
    r"""Stochastic gradient descent :math:`u_t = -\eta_t(g_t + \lambda w_t)` (Baggag & Saad
    §2.4; optax ``sgd``). With :math:`\lambda > 0`, decoupled decay, which for SGD is the same
    as L2 regularisation (identity ``adamw_decay_is_not_l2``). State: the count only (for a
    schedule)."""
    check_hyper("sgd", "lr", lr, lo=0, lo_open=True, schedule=True)
    check_hyper("sgd", "weight_decay", weight_decay, lo=0)
    wd = _decays(weight_decay)

    def init(xp: Namespace, params: Params) -> State:
        _check_params("sgd", params)
        return {"count": zero_count(xp)}

    def update(xp: Namespace, grads: Params, state: State,
               params: Params | None = None) -> tuple[Params, State]:
        _check_params("sgd", grads)
        check_state("sgd", state, ("count",))
        _params_for("sgd", grads, grads if params is None else params, params, wd, "params")
        eta = learning_rate(xp, lr, state["count"])
        out = {k: scale(xp, eta, decoupled_decay(xp, g, params[k], weight_decay) if wd else g)
               for k, g in grads.items()}
        return out, {"count": state["count"] + 1}

    return Rule("sgd", init, typed(update))


def momentum(lr: LearningRate, beta: Any = 0.9, nesterov: bool = False) -> Rule:
    r"""SGD with momentum (optax ``sgd(lr, momentum=beta, nesterov=...)``): the heavy-ball
    trace :math:`v_t = g_t + \beta v_{t-1}` (:func:`heavy_ball`) and the step
    :math:`u_t = -\eta_t v_t`, or with ``nesterov`` :math:`u_t = -\eta_t(g_t + \beta v_t)`
    (:func:`nesterov_trace`). Baggag & Saad §2.4."""
    check_hyper("momentum", "lr", lr, lo=0, lo_open=True, schedule=True)
    check_hyper("momentum", "beta", beta, lo=0, hi=1, hi_open=True)
    check_flag("momentum", "nesterov", nesterov)
    name = "nesterov" if nesterov else "momentum"

    def init(xp: Namespace, params: Params) -> State:
        return {"count": zero_count(xp), "trace": _zeros(xp, _check_params(name, params))}

    def update(xp: Namespace, grads: Params, state: State,
               params: Params | None = None) -> tuple[Params, State]:
        check_state(name, state, ("count", "trace"))
        _params_for(name, grads, state["trace"], params, False)
        eta = learning_rate(xp, lr, state["count"])
        trace = {k: heavy_ball(xp, state["trace"][k], g, beta) for k, g in grads.items()}
        d = {k: nesterov_trace(xp, trace[k], g, beta) for k, g in grads.items()} \
            if nesterov else trace
        return ({k: scale(xp, eta, v) for k, v in d.items()},
                {"count": state["count"] + 1, "trace": trace})

    return Rule(name, init, typed(update))


def adagrad(lr: LearningRate, initial_accumulator_value: Any = 0.1, eps: Any = 1e-7) -> Rule:
    r"""Adagrad (Duchi, Hazan & Singer 2011; Baggag & Saad §2.4.2, eqs. 2.4.7–2.4.8; optax's
    defaults): :math:`s_t = s_{t-1} + g_t^2` from :math:`s_0` =
    ``initial_accumulator_value``, :math:`u_t = -\eta_t\,g_t/\sqrt{s_t + \epsilon}`
    (:func:`adagrad_direction`): the diagonal of full-matrix Adagrad, i.e. Shampoo of order
    one with diagonal statistics (identity ``adagrad_is_diagonal_shampoo``)."""
    check_hyper("adagrad", "lr", lr, lo=0, lo_open=True, schedule=True)
    check_hyper("adagrad", "initial_accumulator_value", initial_accumulator_value, lo=0)
    check_hyper("adagrad", "eps", eps, lo=0)

    def init(xp: Namespace, params: Params) -> State:
        s0 = const(xp, initial_accumulator_value)
        return {"count": zero_count(xp), "sum_of_squares": {
            k: xp.zeros_like(v) + s0 for k, v in _check_params("adagrad", params).items()}}

    def update(xp: Namespace, grads: Params, state: State,
               params: Params | None = None) -> tuple[Params, State]:
        check_state("adagrad", state, ("count", "sum_of_squares"))
        _params_for("adagrad", grads, state["sum_of_squares"], params, False)
        eta = learning_rate(xp, lr, state["count"])
        s = {k: g * g + state["sum_of_squares"][k] for k, g in grads.items()}
        out = {k: scale(xp, eta, adagrad_direction(xp, s[k], g, eps)) for k, g in grads.items()}
        return out, {"count": state["count"] + 1, "sum_of_squares": s}

    return Rule("adagrad", init, typed(update))


def rmsprop(lr: LearningRate, decay: Any = 0.9, eps: Any = 1e-8, initial_scale: Any = 0.0,
            momentum: Any = None, nesterov: bool = False) -> Rule:
    r"""RMSprop (Tieleman & Hinton 2012; Baggag & Saad §2.4; optax ``rmsprop`` with
    ``eps_in_sqrt``): :math:`\nu_t = \rho\nu_{t-1} + (1-\rho)g_t^2` (:func:`ema`) from
    :math:`\nu_0` = ``initial_scale``, :math:`d_t = -\eta_t g_t/\sqrt{\nu_t+\epsilon}`
    (:func:`rms_direction`), and with ``momentum`` :math:`\beta` the heavy-ball trace of
    :math:`d_t` (optax applies it after the learning rate): :math:`u_t = d_t + \beta
    u_{t-1}` (``nesterov``: :math:`d_t + \beta(d_t + \beta u_{t-1})`)."""
    check_hyper("rmsprop", "lr", lr, lo=0, lo_open=True, schedule=True)
    check_hyper("rmsprop", "decay", decay, lo=0, hi=1, hi_open=True)
    check_hyper("rmsprop", "eps", eps, lo=0)
    check_hyper("rmsprop", "initial_scale", initial_scale, lo=0)
    check_flag("rmsprop", "nesterov", nesterov)
    if momentum is not None:
        check_hyper("rmsprop", "momentum", momentum, lo=0, hi=1, hi_open=True)

    def init(xp: Namespace, params: Params) -> State:
        nu0 = const(xp, initial_scale)
        _check_params("rmsprop", params)
        state = {"count": zero_count(xp), "nu": {k: xp.zeros_like(v) + nu0
                                                 for k, v in params.items()}}
        if momentum is not None:
            state["trace"] = _zeros(xp, params)
        return state

    def update(xp: Namespace, grads: Params, state: State,
               params: Params | None = None) -> tuple[Params, State]:
        check_state("rmsprop", state, ("count", "nu", "trace") if momentum is not None
                    else ("count", "nu"))
        _params_for("rmsprop", grads, state["nu"], params, False)
        eta = learning_rate(xp, lr, state["count"])
        nu = {k: ema(xp, state["nu"][k], g * g, decay) for k, g in grads.items()}
        out = {k: scale(xp, eta, rms_direction(xp, nu[k], g, eps)) for k, g in grads.items()}
        new = {"count": state["count"] + 1, "nu": nu}
        if momentum is not None:
            trace = {k: heavy_ball(xp, state["trace"][k], d, momentum) for k, d in out.items()}
            new["trace"] = trace
            out = {k: nesterov_trace(xp, trace[k], d, momentum) for k, d in out.items()} \
                if nesterov else trace
        return out, new

    return Rule("rmsprop", init, typed(update))


def adamw(lr: LearningRate, b1: Any = 0.9, b2: Any = 0.999, eps: Any = 1e-8,
          weight_decay: Any = 1e-4, *, eps_root: Any = 0.0, nesterov: bool = False) -> Rule:
    r"""AdamW (Loshchilov & Hutter 2019; Baggag & Saad §2.4; optax ``adamw``):

    .. math:: m_t = \beta_1 m_{t-1} + (1-\beta_1)g_t,\quad v_t = \beta_2 v_{t-1} +
              (1-\beta_2)g_t^2,\quad \hat m_t = \frac{m_t}{1-\beta_1^t},\quad
              \hat v_t = \frac{v_t}{1-\beta_2^t},

    .. math:: u_t = -\eta_t\Bigl(\frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{\text{root}}}
              + \epsilon} + \lambda w_t\Bigr)

    (:func:`ema`, :func:`bias_correction`, :func:`adam_direction`, :func:`decoupled_decay`);
    ``nesterov``: :math:`\hat m_t` replaced by :func:`nesterov_moment` (NAdamW).
    ``weight_decay = 0`` is Adam."""
    name = "adamw"
    check_hyper(name, "lr", lr, lo=0, lo_open=True, schedule=True)
    check_hyper(name, "b1", b1, lo=0, hi=1, hi_open=True)
    check_hyper(name, "b2", b2, lo=0, hi=1, hi_open=True)
    check_hyper(name, "eps", eps, lo=0)
    check_hyper(name, "eps_root", eps_root, lo=0)
    check_hyper(name, "weight_decay", weight_decay, lo=0)
    check_flag(name, "nesterov", nesterov)
    wd = _decays(weight_decay)

    def init(xp: Namespace, params: Params) -> State:
        _check_params(name, params)
        return {"count": zero_count(xp), "mu": _zeros(xp, params), "nu": _zeros(xp, params)}

    def update(xp: Namespace, grads: Params, state: State,
               params: Params | None = None) -> tuple[Params, State]:
        check_state(name, state, ("count", "mu", "nu"))
        _params_for(name, grads, state["mu"], params, wd)
        t0 = state["count"]
        eta, t = learning_rate(xp, lr, t0), t0 + 1
        mu = {k: ema(xp, state["mu"][k], g, b1) for k, g in grads.items()}
        nu = {k: ema(xp, state["nu"][k], g * g, b2) for k, g in grads.items()}
        out = {}
        for k, g in grads.items():
            m_hat = nesterov_moment(xp, mu[k], g, b1, t) if nesterov else bias_correction(
                xp, mu[k], b1, t)
            d = adam_direction(xp, m_hat, bias_correction(xp, nu[k], b2, t), eps, eps_root)
            out[k] = scale(xp, eta, decoupled_decay(xp, d, params[k], weight_decay) if wd else d)
        return out, {"count": t, "mu": mu, "nu": nu}

    return Rule("nadamw" if nesterov else name, init, typed(update))


def adam(lr: LearningRate, b1: Any = 0.9, b2: Any = 0.999, eps: Any = 1e-8, *,
         eps_root: Any = 0.0, nesterov: bool = False) -> Rule:
    r"""Adam (Kingma & Ba 2015; Baggag & Saad §2.4; optax ``adam``): :func:`adamw` without
    weight decay, :math:`u_t = -\eta_t\hat m_t/(\sqrt{\hat v_t + \epsilon_{\text{root}}} +
    \epsilon)`."""
    rule = adamw(lr, b1, b2, eps, 0.0, eps_root=eps_root, nesterov=nesterov)
    return Rule("nadam" if nesterov else "adam", rule.init, rule.update)


__all__ = [
    "adagrad",
    "adagrad_direction",
    "adam",
    "adam_direction",
    "adamw",
    "bias_correction",
    "decoupled_decay",
    "ema",
    "heavy_ball",
    "momentum",
    "nesterov_moment",
    "nesterov_trace",
    "rms_direction",
    "rmsprop",
    "scale",
    "sgd",
]
