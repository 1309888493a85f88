r"""Reference update rules of LLM training as pure functions on an array namespace
(Baggag & Saad §2.4: SGD, momentum, Adagrad, RMSprop, Adam, AdamW; §5.4 Shampoo; §5.5 Muon;
§5.1–5.2 the natural gradient).

A rule is two pure functions, as in optax: ``init(xp, params) -> state`` and
``update(xp, grads, state, params) -> (updates, state)``, with the step applied by
:func:`apply_updates` (:math:`w \leftarrow w + u`; the updates carry the minus sign and the
learning rate). Parameters are a flat ``dict[str, array]``; the state is a pytree of dicts of
arrays (the step counter :math:`t` is a 0-d int32 array, an exact integer on the object
namespaces), so a JAX training step can ``jax.jit`` over ``update``. Every formula is one
function below, run unchanged on NumPy, JAX, array-api-strict, mpmath and SymPy (where the
``optimizers`` identities prove it with symbolic gradients and hyperparameters).

The conventions are optax 0.2.8's (the cross-checks compare step by step in float64):
moments are exponential moving averages :math:`m \leftarrow \beta m + (1-\beta) g`, bias
corrections divide by :math:`1 - \beta^t`, weight decay is added to the direction before the
learning rate (:math:`u = -\eta(d + \lambda w)`, "decoupled" in AdamW), and a learning rate
may be a number or a schedule ``lr(t)`` of the step count before the step (0 at the first).
Muon, Shampoo and the natural gradient are in :mod:`nlaverify.optim.muon`, re-exported here.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, ShapeError

#: parameters, gradients and updates: a flat mapping name -> array
Params = dict[str, Any]
#: an optimizer state: a pytree of dicts (and tuples) of arrays
State = Any
#: a learning rate: a number, or a schedule of the step count
LearningRate = Any


@dataclass(frozen=True)
class Rule:
    """An update rule: ``init(xp, params) -> state`` and ``update(xp, grads, state, params)
    -> (updates, state)``, both pure (optax's ``GradientTransformation``, with the namespace
    passed explicitly)."""

    name: str
    init: Callable[[Namespace, Params], State]
    update: Callable[..., tuple[Params, State]]


# --------------------------------------------------------------------------- validation


def _symbolic(v: Any) -> bool:
    return type(v).__module__.startswith("sympy")


def check_hyper(rule: str, name: str, value: Any, *, lo: float | None = None,
                hi: float | None = None, lo_open: bool = False, hi_open: bool = False,
                schedule: bool = False) -> Any:
    """A hyperparameter: a finite real number in the stated range (a SymPy expression or a
    0-d array passes unchecked: symbolic proofs, traced values); a schedule (callable) when
    ``schedule``. Raises :class:`ArgumentError` naming the argument."""
    if schedule and callable(value):
        return value
    if _symbolic(value):
        return value
    expected = f"expected a real number{' or a schedule' if schedule else ''}"
    if getattr(value, "shape", None) == () and not isinstance(value, numbers.Real):
        # a 0-d array: its dtype must be real; a concrete one is range-checked like a number,
        # a traced one (no value yet, inside jax.jit) passes unchecked
        if getattr(getattr(value, "dtype", None), "kind", "f") in "bcOSUV" and \
                "float" not in str(getattr(value, "dtype", "")):
            raise ArgumentError(f"{rule}: argument '{name}': {expected}, got a 0-d array of "
                                f"dtype {value.dtype}")
        try:
            f = float(value)
        except Exception:  # a tracer: checked where it becomes concrete
            return value
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"{rule}: argument '{name}': {expected}, got {value!r}")
    else:
        f = float(value)
    bad = not math.isfinite(f)
    if lo is not None:
        bad |= f <= lo if lo_open else f < lo
    if hi is not None:
        bad |= f >= hi if hi_open else f > hi
    if bad:
        rng = (f"{'(' if lo_open else '['}{'-inf' if lo is None else lo}, "
               f"{'inf' if hi is None else hi}{')' if hi_open or hi is None else ']'}")
        raise ArgumentError(f"{rule}: argument '{name}': expected a finite number in {rng}, "
                            f"got {value!r}")
    return value


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape)


def check_tree(rule: str, what: str, tree: Any, ref: Params, ref_what: str = "params") -> None:
    """``tree`` has the keys of ``ref`` and each leaf its shape; a :class:`ShapeError` names
    the key otherwise."""
    _check_arrays(rule, what, tree)
    if set(tree) != set(ref):
        missing, extra = sorted(set(ref) - set(tree)), sorted(set(tree) - set(ref))
        raise ShapeError(f"{rule}: argument '{what}': keys differ from {ref_what}'s: missing "
                         f"{missing}, unexpected {extra}")
    for k, v in tree.items():
        if _shape(v) != _shape(ref[k]):
            raise ShapeError(f"{rule}: argument '{what}': key {k!r}: expected shape "
                             f"{_shape(ref[k])} (as in {ref_what}), got {_shape(v)}")


def const(xp: Namespace, v: Any) -> Any:
    """A hyperparameter as a scalar of ``xp``: fractions exactly on SymPy, symbols as they
    are, floats as Python floats elsewhere (no dtype promotion of float32/bfloat16)."""
    if isinstance(v, Fraction):
        return xp.rational(v.numerator, v.denominator)
    if _symbolic(v) or not isinstance(v, numbers.Real):
        return v
    return xp.const(v)


def zero_count(xp: Namespace) -> Any:
    """The step counter :math:`t = 0`: a 0-d int32 array (an exact 0 on object namespaces)."""
    if xp.object_arrays:
        return xp.asarray(0)
    return xp.asarray(0, dtype=xp.int32)


def check_flag(rule: str, name: str, value: Any) -> bool:
    """A boolean switch (``nesterov``, ``bias_correction``): ``True`` or ``False`` only (a
    string such as ``"no"`` is truthy); :class:`ArgumentError` naming it otherwise."""
    if not isinstance(value, bool):
        raise ArgumentError(f"{rule}: argument '{name}': expected True or False, got "
                            f"{value!r}")
    return value


def check_state(rule: str, state: Any, keys: tuple[str, ...]) -> None:
    """``state`` is a state of this rule's ``init`` (a dict with exactly ``keys``); an
    :class:`ArgumentError` naming the argument otherwise (e.g. another rule's state)."""
    if not isinstance(state, dict) or set(state) != set(keys):
        got = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise ArgumentError(f"{rule}: argument 'state': expected the state of {rule}'s init "
                            f"(keys {sorted(keys)}), got {got}")


def _power_dtype(xp: Namespace) -> Any:
    r"""The dtype of :math:`\beta^t`: float64 where the backend has it (optax computes
    :math:`1 - \beta^t` in the default float, never in the moment's dtype)."""
    return getattr(xp, "float64", None) or xp.float32


def count_as(xp: Namespace, count: Any, like: Any = None) -> Any:
    r"""The counter :math:`t` (an exact int32 in the state) as the exponent of
    :math:`\beta^t`: a float64 scalar (float32 without float64), *not* in ``like``'s dtype:
    in bfloat16 :math:`\beta_2 = 0.999` rounds to 1 and :math:`1 - \beta_2^t` to 0. Exact on
    the object namespaces. ``like`` is accepted for compatibility and unused."""
    if xp.object_arrays:
        return xp.asarray(count)[()]
    return xp.astype(xp.asarray(count), _power_dtype(xp))


def bias_factor(xp: Namespace, beta: Any, count: Any, like: Any) -> Any:
    r""":math:`1 - \beta^t`, computed in float64 (:func:`count_as`) and only then cast to
    ``like``'s dtype (optax's ``tree_bias_correction``: the power in low precision rounds to
    1), so that the division by it runs in the moment's dtype. Exact on SymPy."""
    f = 1 - const(xp, beta) ** count_as(xp, count)
    return f if xp.object_arrays else xp.astype(f, like.dtype)


def keep_dtypes(xp: Namespace, new: Any, old: Any) -> Any:
    """``new`` with every array leaf cast to the dtype of the matching leaf of ``old`` (same
    tree): NumPy's bfloat16 (ml_dtypes) promotes ``array * python_float`` to float32, JAX
    does not; casting back keeps updates and state in the parameters' dtypes everywhere."""
    if xp.object_arrays:
        return new
    if isinstance(new, dict) and isinstance(old, dict):
        return {k: keep_dtypes(xp, v, old[k]) if k in old else v for k, v in new.items()}
    if isinstance(new, (tuple, list)) and isinstance(old, (tuple, list)) and len(new) == len(
            old):
        items = [keep_dtypes(xp, a, b) for a, b in zip(new, old, strict=True)]
        return type(new)(*items) if hasattr(new, "_fields") else type(new)(items)
    dt = getattr(old, "dtype", None)
    if dt is not None and getattr(new, "dtype", dt) != dt:
        return xp.astype(new, dt)
    return new


def typed(update: Callable[..., tuple[Params, State]]) -> Callable[..., tuple[Params, State]]:
    """``update`` with its updates in the gradients' dtypes and its new state in the old
    state's dtypes (:func:`keep_dtypes`); a no-op where they already agree (JAX)."""

    def wrapped(xp: Namespace, grads: Params, state: State,
                params: Params | None = None) -> tuple[Params, State]:
        out, new = update(xp, grads, state, params)
        return keep_dtypes(xp, out, grads), keep_dtypes(xp, new, state)

    wrapped.__doc__ = update.__doc__
    return wrapped


def learning_rate(xp: Namespace, lr: LearningRate, count: Any) -> Any:
    """:math:`\\eta_t`: ``lr(t)`` for a schedule (``t`` the count before the step), else
    ``lr``."""
    return lr(count) if callable(lr) else const(xp, lr)


def _params_for(rule: str, grads: Params, ref: Params, params: Params | None,
                need: bool, ref_what: str = "the state") -> None:
    check_tree(rule, "grads", grads, ref, ref_what)
    if params is not None:
        check_tree(rule, "params", params, grads, "grads")
    elif need:
        raise ArgumentError(f"{rule}: argument 'params': required (weight decay), got None")


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


def apply_updates(xp: Namespace, params: Params, updates: Params) -> Params:
    r""":math:`w \leftarrow w + u` per key (optax's ``apply_updates``; the result keeps each
    parameter's dtype)."""
    check_tree("apply_updates", "updates", updates, params)
    if xp.object_arrays:
        return {k: params[k] + updates[k] for k in params}
    return {k: xp.astype(params[k] + updates[k], params[k].dtype) for k in params}


# --------------------------------------------------------------------------- constructors


def _zeros(xp: Namespace, params: Params) -> Params:
    return {k: xp.zeros_like(v) for k, v in params.items()}


def _check_arrays(rule: str, what: str, tree: Any) -> Params:
    """``tree`` is a dict name -> array, else a ShapeError naming ``what`` (and the key)."""
    if not isinstance(tree, dict):
        raise ShapeError(f"{rule}: argument '{what}': expected a dict name -> array, got "
                         f"{type(tree).__name__}")
    for k, v in tree.items():
        if not hasattr(v, "shape"):
            raise ShapeError(f"{rule}: argument '{what}': key {k!r}: expected an array, got "
                             f"{type(v).__name__}")
    return tree


def _check_params(rule: str, params: Any) -> Params:
    return _check_arrays(rule, "params", params)


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


def __getattr__(name: str) -> Any:
    """``rules.muon``, ``rules.shampoo`` and ``rules.natural_gradient`` live in
    :mod:`nlaverify.optim.muon`, which builds on this module (imported lazily, so either module
    can be imported first)."""
    if name in ("muon", "shampoo", "natural_gradient"):
        from nlaverify.optim import muon as _muon

        return getattr(_muon, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [  # and, from nlaverify.optim.muon: muon, shampoo, natural_gradient
    "LearningRate",
    "Params",
    "Rule",
    "State",
    "adagrad",
    "adagrad_direction",
    "adam",
    "adam_direction",
    "adamw",
    "apply_updates",
    "bias_correction",
    "bias_factor",
    "check_flag",
    "check_state",
    "decoupled_decay",
    "ema",
    "heavy_ball",
    "keep_dtypes",
    "momentum",
    "nesterov_moment",
    "nesterov_trace",
    "rms_direction",
    "rmsprop",
    "scale",
    "sgd",
    "typed",
]
