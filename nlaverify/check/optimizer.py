r"""``check_optimizer``: a user's optimizer step against the reference update rules, step by
step (Baggag & Saad §2.4: SGD, momentum, Adagrad, RMSprop, Adam, AdamW; §5.4 Shampoo;
§5.5 Muon).

Both sides start from the same parameters :math:`w_0` and see the same gradients
:math:`g_1, \dots, g_T` (drawn once with ``seed``, exactly representable in ``dtype``). The
reference rule (:mod:`nlaverify.optim.rules`, :mod:`nlaverify.optim.muon`) runs on NumPy in
float64; the user's step runs in ``dtype`` in its own framework; after every step ``t`` each
parameter leaf is compared (row ``step t``, where ``params['W'][2, 1]``).

**The bound after t steps.** The gradients are fixed (they do not depend on :math:`w`), so
the two trajectories differ only by what each step adds: the rounding of the stored
parameters (one per step) and the error of each update :math:`u_s`, relative to the
update. With :math:`\tau(\cdot)` the tolerance model (:func:`nlaverify.tolerance.tolerance`),

.. math:: \frac{\max_\iota |w^{\text{yours}}_{t,\iota} - w^{\text{ref}}_{t,\iota}|}
          {\max(1, \|w^{\text{ref}}_t\|_\infty)} \le
          \tau(u, D{=}t) + \tau(u, k, \kappa, D{=}t\,S)\,
          \frac{\sum_{s\le t}\|u^{\text{ref}}_s\|_\infty}{\max(1, \|w^{\text{ref}}_t\|_\infty)},

with :math:`S` the dependent rounding stages of one step of the rule, :math:`k` its longest
accumulation and :math:`\kappa` its condition (:data:`ERROR_MODELS`: the state carries the
roundings of all :math:`t` steps, hence the depth :math:`tS`). The update magnitudes come
from the reference run, so the bound needs no learning rate. The terms compose linearly
(the worst case) in float64 and float32; in bfloat16 and float16 the linear worst case is
vacuous (:math:`C D u > 1` from :math:`D = 8`) and independent roundings add in quadrature
(``composition="random"``, Higham & Mary 2019, as :mod:`nlaverify.precision` does). The
check resolves a direction error :math:`\delta` where :math:`\eta\,\delta` exceeds the
bound (a note of the report gives the bound at the last step): in bfloat16 only gross bugs
at large learning rates.

**What ``update`` may be** (detected in this order):

1. an optax ``GradientTransformation`` (anything with callable ``init`` and ``update``):
   ``state = update.init(params)``; ``u, state = update.update(grads, state, params)``;
   ``params = optax.apply_updates(params, u)``, JAX arrays (``update.update`` is jitted
   unless ``jit=False``);
2. a ``torch.optim.Optimizer`` subclass, built as ``cls(list_of_params, **options)``, or a
   factory of one argument, ``lambda params: torch.optim.AdamW(params, ...)``, called with the
   list of ``torch.nn.Parameter`` (in the order of ``params``' keys): each step sets every
   ``p.grad`` and calls ``optimizer.step()``;
3. a plain function ``step(params, grads, state) -> (params, state)`` of three arguments on
   flat dicts name -> array of ``framework`` (detected from the function, or given), with
   ``init(params) -> state`` passed as ``init=`` (default: the state starts as ``None``).

Anything else is a :class:`~nlaverify.check.report.CheckError` naming ``update``; an
exception raised by the user's code, or an output of the wrong structure, fails the step's
row with the message (later steps are skipped).

**Conventions** (checked by ``tests/test_check_optimizer.py``).
``torch.optim.AdamW(lr=η, betas=(β1, β2), eps=ε, weight_decay=λ)`` is
``("adamw", dict(lr=η, b1=β1, b2=β2, eps=ε, weight_decay=λ))`` exactly: torch first decays
:math:`w \leftarrow w(1 - \eta\lambda)` and then subtracts
:math:`\eta\,\hat m_t/(\sqrt{v_t}/\sqrt{1-\beta_2^t} + \epsilon)`, which is optax's
:math:`w - \eta(\hat m_t/(\sqrt{\hat v_t} + \epsilon) + \lambda w)` (``eps_root = 0``: both
add :math:`\epsilon` outside the root of the *corrected* moment, both multiply the decay by
the learning rate). Only the defaults differ (torch :math:`\lambda = 10^{-2}`, optax
:math:`10^{-4}`), so pass every hyper-parameter on both sides. ``torch.optim.Adam(...,
weight_decay=λ)`` is L2 regularisation (coupled), not ``adamw``.
``torch.optim.SGD(lr, momentum=β, nesterov=...)`` with ``dampening=0`` is
``("momentum", dict(lr=lr, beta=β, nesterov=...))`` (torch's buffer starts at :math:`g_1`,
optax's trace at 0: the same :math:`v_1`). ``torch.optim.RMSprop`` and
``torch.optim.Adagrad`` add :math:`\epsilon` *outside* the root, optax's rules inside, so
they differ (Adagrad's initial accumulator too: torch 0, optax 0.1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.check.adapters import framework_dtype
from nlaverify.check.optimizer_bound import (  # ERROR_MODELS...update_row: re-exported
    ERROR_MODELS,
    STORE_ROUNDINGS,
    ErrorModel,
    _leaf_model,
    _leaf_state,
    step_bound,
    update_row,
)
from nlaverify.check.optimizer_run import (
    DEFAULT_SHAPES,
    DEFAULT_STEPS,
    RULES,
    _check_dtype,
    _draw,
    _OptaxRunner,
    _Protocol,
    _reference,
    _resolve_rule,
    _resolve_update,
    _Runner,
    _StepRunner,
    _take,
    _TorchRunner,
)
from nlaverify.check.optimizer_run import MIN_TOP_SINGULAR_VALUE as MIN_TOP_SINGULAR_VALUE
from nlaverify.check.report import (
    CheckError,
    CheckReport,
    Row,
    compare_arrays,
    error_row,
    skip_row,
    with_reproducer,
)
from nlaverify.optim import rules as _r

__all__ = ["DEFAULT_SHAPES", "ERROR_MODELS", "RULES", "STORE_ROUNDINGS", "ErrorModel",
           "check_optimizer", "draw_case", "reference_trajectory", "step_bound", "update_row"]


# ------------------------------------------------------------------------------ cases


def draw_case(shapes: Mapping[str, tuple[int, ...]] | None = None, *, steps: int = DEFAULT_STEPS,
              dtype: str = "float64", seed: int = 0
              ) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """The parameters and the ``steps`` gradients :func:`check_optimizer` draws (float64
    arrays holding values of ``dtype``; the first ``t`` gradients do not depend on
    ``steps``): parameters standard normal, half of them scaled down by up to three decades,
    gradients standard normal, each gradient matrix scaled to a top singular value of at
    least :data:`MIN_TOP_SINGULAR_VALUE`."""
    return _draw(DEFAULT_SHAPES if shapes is None else shapes, steps, _check_dtype(dtype), seed)


def reference_trajectory(rule: Any, params: Mapping[str, np.ndarray],
                         grads: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The reference parameters after each step (float64 NumPy), ``rule`` as in
    :func:`check_optimizer`."""
    ref_rule, _ = _resolve_rule(rule)
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    return _reference(ref_rule, p, [{k: np.asarray(v, np.float64) for k, v in g.items()}
                                    for g in grads])[0]


def _reproducer(rule: Any, row: Row, t: int, dtype: str, seed: int) -> str:
    return (f"from nlaverify.check.optimizer import draw_case, reference_trajectory\n"
            f"rule = {rule!r}\n"
            f"params, grads = draw_case(steps={t}, dtype={dtype!r}, seed={seed})\n"
            f"ref = reference_trajectory(rule, params, grads)\n"
            f"print(ref[-1]{row.where[len('params'):]})  # reference {row.expected!r}, "
            f"yours {row.actual!r}\n"
            f"# yours on the same inputs: check_optimizer(your_update, rule, params=params, "
            f"grads=grads, dtype={dtype!r})\n")


# ------------------------------------------------------------------------------ the call


def _without_decay(rule: Any) -> _r.Rule | None:
    """The reference rule named by ``rule`` (a name or ``(name, hyper-parameters)``) with
    ``weight_decay=0``, for the decay's part of each update; ``None`` for a rule without a
    weight decay or one given as a Rule object."""
    import inspect

    from nlaverify.check.optimizer_run import _rules

    if isinstance(rule, str):
        name, hyper = rule, {}
    elif isinstance(rule, Sequence) and len(rule) == 2 and isinstance(rule[0], str):
        name, hyper = rule[0], dict(rule[1])
    else:
        return None
    factory = _rules().get(name)
    if factory is None or "weight_decay" not in inspect.signature(factory).parameters:
        return None
    return _resolve_rule((name, {**hyper, "weight_decay": 0.0}))[0]


def check_optimizer(update: Any, rule: Any, *, params: Mapping[str, Any] | None = None,
                    grads: Sequence[Mapping[str, Any]] | None = None, steps: int | None = None,
                    dtype: str = "float64", framework: str | None = None, seed: int = 0,
                    init: Callable[[Any], Any] | None = None,
                    options: Mapping[str, Any] | None = None, jit: bool = True
                    ) -> CheckReport:
    r"""Check a user's optimizer against a reference update rule, step by step.

    After every step :math:`t` each parameter leaf of the user's run in ``dtype`` is compared
    with the float64 reference run by the normwise criterion of
    :func:`~nlaverify.check.report.compare_arrays`, with the bound (module docstring)

    .. math:: \tau(u, D{=}t) + \tau(u, k, \kappa, D{=}tS)\,
              \frac{\sum_{s\le t}\|u^{\text{ref}}_s\|_\infty}{\max(1,\|w^{\text{ref}}_t\|_\infty)}

    (Baggag & Saad §2.4 for the rules, §5.4 Shampoo, §5.5 Muon; Higham & Mary 2019 for
    :math:`\tau`).

    Args:
        update: an optax ``GradientTransformation``, a ``torch.optim.Optimizer`` class or a
            factory ``params -> optimizer``, or a plain ``step(params, grads, state) ->
            (params, state)`` (module docstring).
        rule: the reference: a name of :data:`RULES`, ``(name, hyper-parameters)`` such as
            ``("adamw", dict(lr=1e-3, weight_decay=0.1))`` (the keywords of
            :mod:`nlaverify.optim.rules`' constructors), or a
            :class:`~nlaverify.optim.rules.Rule`.
        params: the initial parameters, a flat dict name -> array; default
            :data:`DEFAULT_SHAPES`, standard normal, half of the entries times 10^-U, U
            uniform on [0, 3] (magnitudes over three decades). Values are rounded to
            ``dtype``.
        grads: one dict of gradients per step (with ``params``); default drawn with ``seed``
            (standard normal, matrices scaled to a top singular value >= 2).
        steps: the number of steps (default 5, or ``len(grads)``).
        dtype: the user's precision: float64, float32, bfloat16 or float16.
        framework: the arrays a plain step function takes (numpy, jax, torch, cupy; default
            detected from it); optax is jax, torch.optim is torch.
        seed: the seed of the drawn parameters and gradients.
        init: ``init(params) -> state`` of a plain step function (default: state ``None``).
        options: keyword arguments for a ``torch.optim.Optimizer`` class.
        jit: jit an optax ``update`` (default ``True``).

    Returns:
        A :class:`~nlaverify.check.report.CheckReport` with one row per step and leaf
        (check ``"step t"``, where ``"params['W'][i, j]"``, the worst entry).

    Raises:
        CheckError: bad input, naming the argument (``update``, ``rule``, ``params``,
            ``grads``, ``steps``, ``dtype``, ``framework``, ``init``, ``options``).
    """
    dtype = _check_dtype(dtype)
    ref_rule, hyper = _resolve_rule(rule)
    kind, fw = _resolve_update(update, framework, init)
    if options is not None and (kind != "torch" or not isinstance(update, type)):
        raise CheckError("argument 'options': only for a torch.optim.Optimizer class (a "
                         "factory or a step function takes its own hyper-parameters)")
    if options is not None and not isinstance(options, Mapping):
        raise CheckError(f"argument 'options': expected a dict of keyword arguments, got "
                         f"{type(options).__name__}")
    if fw == "cupy" and dtype == "bfloat16":
        framework_dtype("cupy", dtype)  # CheckError naming dtype
    p0, gs = _take(params, grads, steps, dtype, seed)
    traj, mags, states = _reference(ref_rule, p0, gs)

    runner: _Runner
    if kind == "optax":
        runner = _OptaxRunner(update, dtype, jit)
    elif kind == "torch":
        runner = _TorchRunner(update, dtype, options or {})
    else:
        runner = _StepRunner(update, init, fw, dtype)
    spec = ref_rule.name if not hyper else f"({ref_rule.name!r}, {hyper!r})"
    report = CheckReport(runner.subject, "optimizer",
                         notes=[f"reference: nlaverify.optim rule {spec}, float64 NumPy; "
                                f"yours: {kind} on {fw} in {dtype}; {len(gs)} steps, seed "
                                f"{seed}"])
    is_matrix = hyper.get("is_matrix", lambda k, s: len(s) == 2)
    try:
        runner.start(p0)
    except CheckError:
        raise
    except Exception as exc:
        report.subject = runner.subject
        report.rows.append(error_row(report.subject, "init", exc, where="update"))
        return report
    report.subject = runner.subject
    mass = dict.fromkeys(p0, 0.0)
    xp = get_namespace("numpy")
    prev, state_prev = dict(p0), ref_rule.init(xp, dict(p0))
    user_traj, ref_updates = [dict(p0)], []
    state_abs = ref_rule.init(xp, {k: np.abs(v) for k, v in p0.items()})
    vacuous: list[str] = []
    no_decay, decay_seen, decay_max = _without_decay(rule), set(), 0.0
    for t, g in enumerate(gs, start=1):
        try:
            got = runner.step({k: v.copy() for k, v in g.items()}, t)
        except _Protocol as exc:
            report.rows.append(Row(report.subject, f"step {t}", math.inf, math.nan, "fail",
                                   "params", reason=str(exc)))
            got = None
        except Exception as exc:
            report.rows.append(error_row(report.subject, f"step {t}", exc, where="update"))
            got = None
        if got is None:
            report.rows.extend(skip_row(report.subject, f"step {s}", f"step {t} failed")
                               for s in range(t + 1, len(gs) + 1))
            break
        u_ref, _ = ref_rule.update(xp, g, state_prev, prev)
        ref_updates.append(u_ref)
        # the rule on |g| and |w|: the componentwise magnitudes of the elementwise rules
        u_abs, state_abs = ref_rule.update(xp, {k: np.abs(v) for k, v in g.items()}, state_abs,
                                           {k: np.abs(v) for k, v in prev.items()})
        decay = ({k: u_ref[k] - v for k, v in no_decay.update(xp, g, state_prev, prev)[0].items()}
                 if no_decay is not None else {})
        decay_max = max([decay_max] + [float(np.max(np.abs(v), initial=0.0))
                                       for v in decay.values()])
        for k, w_ref in traj[t - 1].items():
            mass[k] += mags[t - 1][k]
            scale = max(1.0, float(np.max(np.abs(w_ref))) if w_ref.size else 0.0)
            model = _leaf_model(ref_rule.name, w_ref.shape, is_matrix, k)
            leaf_state = _leaf_state(states[t - 1], k)
            tol = step_bound(dtype, t, model, w_ref.shape, mass[k], scale, leaf_state)
            row = compare_arrays(report.subject, f"step {t}", got[k], w_ref, tol,
                                 label=f"params[{k!r}]")
            if (row.verdict == "fail" and report.first_failure is None and params is None
                    and grads is None and not isinstance(rule, _r.Rule)
                    and row.where.startswith("params[")):
                row = with_reproducer(row, _reproducer(rule, row, t, dtype, seed))
            if row.verdict == "pass" and tol.rtol * scale >= mass[k]:
                vacuous.append(f"{k!r} at step {t}")  # the update rows carry the check
            else:
                report.rows.append(row)
            report.rows.append(update_row(report.subject, t, k, prev[k], got[k], u_ref[k],
                                          dtype, model, leaf_state, magnitude=u_abs[k],
                                          parts={"decay": decay[k]} if decay else None,
                                          seen=decay_seen))
        prev, state_prev = got, states[t - 1]
        user_traj.append(got)
    first = report.first_failure
    if first is not None and first.check.split()[0] in ("step", "update"):
        from nlaverify.check.optimizer_hints import optimizer_diagnosis

        line = optimizer_diagnosis(
            ref_rule.name, hyper, int(first.check.split()[1]), gs, user_traj, dtype,
            lambda key, shape: _leaf_model(ref_rule.name, shape, is_matrix, key),
            reference=ref_updates)
        if line:
            report.notes.append(line)
    if decay_max > 0 and "decay" not in decay_seen and any(
            r.check.startswith("update") and r.verdict == "pass" for r in report.rows):
        report.notes.append(f"the weight decay's part of the updates (lr x lambda x |w| <= "
                            f"{decay_max:.3g}) is below the update rows' bound at every entry "
                            f"and step in {dtype}: a bug in the decay alone (missing, coupled "
                            f"to the gradient, doubled) would pass here; a larger lr x lambda, "
                            f"float32 master weights or dtype='float32' resolve it")
    if vacuous:
        report.notes.append(f"trajectory rows dropped where their bound covers the whole "
                            f"movement of the weights ({', '.join(vacuous[:4])}"
                            f"{', ...' if len(vacuous) > 4 else ''}): in {dtype} they could not "
                            f"tell the update from no update; the update rows check it")
    last = [r for r in report.rows if r.verdict != "skip" and math.isfinite(r.bound)
            and r.check.startswith("step")]
    if last:
        report.notes.append(f"resolution: the largest bound is {max(r.bound for r in last):.3g}"
                            f" (relative to max(1, |w|)); a direction error d shows where "
                            f"lr x d x steps exceeds it")
    if ref_rule.name not in ERROR_MODELS:
        report.notes.append(f"rule {ref_rule.name!r} has no error model: Muon's (the most "
                            f"conservative) is used")
    return report
