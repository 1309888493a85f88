r"""The preconditioned update rules: Muon (Jordan et al. 2024; Baggag & Saad §5.5), Shampoo
(Gupta, Koren & Singer 2018; Baggag & Saad §5.4) and the damped natural gradient (§5.1–5.2),
on the conventions of :mod:`nlaverify.optim.base` (re-exported by
:mod:`nlaverify.optim.rules`).

Muon, for a matrix parameter :math:`W \in \mathbb R^{m\times n}` with gradient :math:`G_t`
(optax 0.2.8's ``optax.contrib.muon``, whose conventions are the default here):

.. math:: M_t = \beta M_{t-1} + (1-\beta)G_t,\qquad
          \tilde M_t = \beta\frac{M_t}{1-\beta^{t+1}} + (1-\beta)\frac{G_t}{1-\beta^t}
          \ \ (\text{Nesterov; else } M_t/(1-\beta^t)),

.. math:: U_t = -\eta_t\bigl(s(m, n)\,\mathrm{NS}_k(\tilde M_t) + \lambda W_t\bigr),

with :math:`\mathrm{NS}_k` the Newton–Schulz polar iteration of
:func:`nlaverify.optim.newton_schulz.newton_schulz` (Frobenius normalisation with
:math:`\epsilon`, the transpose trick, Muon's quintic by default) and the shape scale
:math:`s(m, n)`:

* ``"optax"`` (default): :math:`\sqrt{\max(1, n/m)}`; optax's weights act as
  :math:`y = xW`, so :math:`m` is fan-in and :math:`n` fan-out;
* ``"jordan"``: :math:`\sqrt{\max(1, m/n)}`, Keller Jordan's ``max(1, rows/cols)**0.5`` for
  PyTorch's ``(out, in)`` weights. It is the same rule (fan-out over fan-in) for the
  other layout;
* ``"none"``: 1; a number :math:`c` (optax's ``consistent_rms``): :math:`c\sqrt{\max(m,n)}`.

Keller Jordan's reference applies no bias correction (``bias_correction=False``: then
:math:`\tilde M_t = \beta M_t + (1-\beta)G_t`). Without Nesterov the correction only
rescales :math:`M_t` by :math:`1/(1-\beta^t)` before the normalisation, so with
:math:`\epsilon = 0` it does not change the update; with Nesterov (the default) it does:
:math:`M_t` and :math:`G_t` are divided by different factors, :math:`1-\beta^{t+1}` and
:math:`1-\beta^t`, which changes the direction of :math:`\tilde M_t` (most at the first
steps; ``tests/test_optim_rules.py`` checks both statements).
Parameters that are not matrices (``is_matrix(name, shape)`` false; by default
``len(shape) != 2``) go to a fallback rule, by default optax's: AdamW with Muon's
:math:`\epsilon`, no weight decay and Nesterov when Muon has it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.curvature import shampoo as _sh
from nlaverify.errors import ArgumentError, DTypeError, ShapeError
from nlaverify.optim import base as _b
from nlaverify.optim import elementwise as _el
from nlaverify.optim import newton_schulz as _ns
from nlaverify.optim.base import Params, Rule, State

#: ``is_matrix(name, shape)``: which parameters Muon orthogonalises
MatrixPredicate = Callable[[str, tuple[int, ...]], bool]
SCALINGS = ("optax", "jordan", "none")


def default_is_matrix(name: str, shape: tuple[int, ...]) -> bool:
    """A parameter is a matrix when it has two axes (optax's default)."""
    return len(shape) == 2


def shape_scale(xp: Namespace, shape: tuple[int, ...], scaling: Any = "optax") -> Any:
    r"""Muon's shape scale :math:`s(m, n)` of a ``(..., m, n)`` update (module docstring):
    ``"optax"`` :math:`\sqrt{\max(1, n/m)}`, ``"jordan"`` :math:`\sqrt{\max(1, m/n)}`,
    ``"none"`` 1, a number :math:`c`: :math:`c\sqrt{\max(m, n)}`; exact on SymPy. An
    empty matrix (:math:`m = 0` or :math:`n = 0`) has scale 1 (its update is empty)."""
    m, n = int(shape[-2]), int(shape[-1])
    if m == 0 or n == 0:  # an empty matrix: its update is empty, any scale will do
        return 1
    if scaling == "optax":
        return xp.const_sqrt(max(m, n), m)
    if scaling == "jordan":
        return xp.const_sqrt(max(m, n), n)
    if scaling == "none":
        return 1
    return _b.const(xp, scaling) * xp.const_sqrt(max(m, n))


def muon_moment(xp: Namespace, m: Any, g: Any, beta: Any, count: Any, *, nesterov: bool,
                bias_correction: bool) -> Any:
    r"""The matrix Newton–Schulz orthogonalises: :math:`\tilde M_t` of the module docstring
    (:func:`~nlaverify.optim.rules.nesterov_moment` or
    :func:`~nlaverify.optim.rules.bias_correction`; ``count`` is :math:`t`, after the
    step's increment)."""
    if nesterov:
        return _el.nesterov_moment(xp, m, g, beta, count if bias_correction else None)
    return _el.bias_correction(xp, m, beta, count) if bias_correction else m


def muon_direction(xp: Namespace, M: Any, coeffs: Any, steps: int, eps: Any,
                   scaling: Any = "optax", normalize: bool = True) -> Any:
    r""":math:`s(m, n)\,\mathrm{NS}_k(M)`: Newton–Schulz (:func:`~nlaverify.optim.
    newton_schulz.newton_schulz`, through its module so a proof sees a planted error) times
    the shape scale (:func:`shape_scale`). With one gradient, zero momentum and the exact
    polar factor this is :math:`s\,UV^\top`, Shampoo's direction (identity
    ``muon_first_step_is_polar``). ``normalize=False`` skips the Frobenius normalisation
    before the iteration (a classic mistake: the polynomials converge only for singular
    values in their basin, :math:`\sigma \le 1` after normalising)."""
    polar = _ns.newton_schulz(xp, M, coeffs, steps, eps=_b.const(xp, eps), normalize=normalize)
    s = shape_scale(xp, tuple(M.shape), scaling)
    return polar if isinstance(s, int) and s == 1 else s * polar


def muon(lr: _b.LearningRate, beta: Any = 0.95, nesterov: bool = True,
         ns_coeffs: Any = _ns.MUON, ns_steps: int = 5, *, eps: Any = 1e-8,
         weight_decay: Any = 0.0, scaling: Any = "optax", bias_correction: bool = True,
         adam: Rule | None = None, is_matrix: MatrixPredicate = default_is_matrix,
         normalize: bool = True) -> Rule:
    r"""Muon (module docstring; Baggag & Saad §5.5): momentum, Nesterov, Newton–Schulz with
    ``ns_coeffs`` (one tuple or a per-step schedule) for ``ns_steps`` steps, the shape scale
    ``scaling``, decoupled ``weight_decay``, and the ``adam`` rule (default
    ``adamw(lr, 0.9, 0.999, eps, 0, nesterov=nesterov)``, optax's) for the parameters that
    ``is_matrix(name, shape)`` rejects. The defaults are ``optax.contrib.muon``'s;
    ``normalize=False`` (no normalisation before Newton–Schulz) is the classic mistake
    ``check_optimizer``'s diagnosis tries."""
    check = _b.check_hyper
    check("muon", "lr", lr, lo=0, lo_open=True, schedule=True)
    check("muon", "beta", beta, lo=0, hi=1, hi_open=True)
    check("muon", "eps", eps, lo=0)
    check("muon", "weight_decay", weight_decay, lo=0)
    _b.check_flag("muon", "nesterov", nesterov)
    _b.check_flag("muon", "bias_correction", bias_correction)
    _b.check_flag("muon", "normalize", normalize)
    if isinstance(ns_steps, bool) or not isinstance(ns_steps, int) or ns_steps < 0:
        raise ArgumentError(f"muon: argument 'ns_steps': expected an integer >= 0, got "
                            f"{ns_steps!r}")
    try:  # validates the coefficients against the steps
        _ns.schedule(ns_coeffs, ns_steps)
    except (ArgumentError, DTypeError) as exc:
        raise ArgumentError(f"muon: argument 'ns_coeffs': {exc}") from exc
    if scaling not in SCALINGS:
        if isinstance(scaling, str):
            raise ArgumentError(f"muon: argument 'scaling': expected one of {SCALINGS} or a "
                                f"number (consistent RMS), got {scaling!r}")
        check("muon", "scaling", scaling, lo=0, lo_open=True)
    if not callable(is_matrix):
        raise ArgumentError(f"muon: argument 'is_matrix': expected a predicate (name, shape) "
                            f"-> bool, got {is_matrix!r}")
    fallback = adam if adam is not None else _el.adamw(lr, 0.9, 0.999, eps, 0.0,
                                                      nesterov=nesterov)
    if not isinstance(fallback, Rule):
        raise ArgumentError(f"muon: argument 'adam': expected a Rule, got {fallback!r}")
    wd = not (isinstance(weight_decay, numbers.Real) and weight_decay == 0)

    def split(params: Params) -> tuple[Params, Params]:
        mats = {k: v for k, v in params.items() if is_matrix(k, _b._shape(v))}
        for k, v in mats.items():
            if len(v.shape) < 2:
                raise ShapeError(f"muon: parameter {k!r}: is_matrix accepted shape "
                                 f"{_b._shape(v)}, but Muon needs (..., m, n)")
        return mats, {k: v for k, v in params.items() if k not in mats}

    def init(xp: Namespace, params: Params) -> State:
        mats, rest = split(_b._check_params("muon", params))
        return {"count": _b.zero_count(xp), "mu": {k: xp.zeros_like(v) for k, v in mats.items()},
                "adam": fallback.init(xp, rest)}

    def update(xp: Namespace, grads: Params, state: State,
               params: Params | None = None) -> tuple[Params, State]:
        _b.check_state("muon", state, ("count", "mu", "adam"))
        _b.check_tree("muon", "grads", grads, params if params is not None else grads)
        mats, rest = split(grads)
        _b.check_tree("muon", "grads", mats, state["mu"], "the state's matrices")
        if wd and params is None:
            raise ArgumentError("muon: argument 'params': required (weight decay), got None")
        t0 = state["count"]
        eta, t = _b.learning_rate(xp, lr, t0), t0 + 1
        mu = {k: _el.ema(xp, state["mu"][k], g, beta) for k, g in mats.items()}
        out = {}
        for k, g in mats.items():
            M = muon_moment(xp, mu[k], g, beta, t, nesterov=nesterov,
                            bias_correction=bias_correction)
            d = muon_direction(xp, M, ns_coeffs, ns_steps, eps, scaling, normalize)
            out[k] = _el.scale(xp, eta, _el.decoupled_decay(xp, d, params[k], weight_decay)
                              if wd else d)
        rest_params = None if params is None else {k: params[k] for k in rest}
        rest_out, adam_state = fallback.update(xp, rest, state["adam"], rest_params)
        out.update(rest_out)
        return {k: out[k] for k in grads}, {"count": t, "mu": mu, "adam": adam_state}

    return Rule("muon", init, _b.typed(update))


def shampoo(lr: _b.LearningRate, epsilon: Any = 1e-6, beta: Any = None, *,
            eigh: _sh.Eigh | None = None, rtol: Any = None) -> Rule:
    r"""Shampoo (Gupta, Koren & Singer 2018; Baggag & Saad §5.4, eqs. 5.4.1–5.4.3,
    Algorithm 5) per parameter, with the running functions of
    :mod:`nlaverify.curvature.shampoo`:

    .. math:: L_t = \beta L_{t-1} + G_tG_t^\top,\quad R_t = \beta R_{t-1} + G_t^\top G_t,
              \quad U_t = -\eta_t\,L_t^{-1/4}G_tR_t^{-1/4}

    from :math:`L_0 = \epsilon I`, :math:`R_0 = \epsilon I` (``beta=None``: plain sums); a
    vector uses :math:`L_t^{-1/2}g_t` (full-matrix Adagrad). Pseudo-inverse roots
    (``eigh``, ``rtol``: see :func:`~nlaverify.curvature.shampoo.inverse_root`)."""
    _b.check_hyper("shampoo", "lr", lr, lo=0, lo_open=True, schedule=True)
    _b.check_hyper("shampoo", "epsilon", epsilon, lo=0)
    if beta is not None:
        _b.check_hyper("shampoo", "beta", beta, lo=0, hi=1)

    def init(xp: Namespace, params: Params) -> State:
        eps = _b.const(xp, epsilon)
        return {"count": _b.zero_count(xp), "stats": {
            k: _sh.shampoo_init(xp, v, eps) for k, v in _b._check_params("shampoo",
                                                                          params).items()}}

    def update(xp: Namespace, grads: Params, state: State,
               params: Params | None = None) -> tuple[Params, State]:
        _b.check_state("shampoo", state, ("count", "stats"))
        _b.check_tree("shampoo", "grads", grads, {k: _Shaped(tuple(
            int(S.shape[0]) for S in v)) for k, v in state["stats"].items()}, "the state")
        eta = _b.learning_rate(xp, lr, state["count"])
        b = None if beta is None else _b.const(xp, beta)
        stats = {k: _sh.shampoo_statistics(xp, g, state["stats"][k], beta=b)
                 for k, g in grads.items()}
        out = {k: _el.scale(xp, eta, _sh.shampoo_direction(xp, g, stats[k], eigh=eigh,
                                                           rtol=rtol))
               for k, g in grads.items()}
        return out, {"count": state["count"] + 1, "stats": stats}

    return Rule("shampoo", init, _b.typed(update))


def natural_gradient(lr: _b.LearningRate, curvature: Callable[..., Any], damping: Any = 1e-3
                     ) -> Rule:
    r"""Damped natural-gradient descent (Amari 1998; Baggag & Saad §5.1, eq. 5.1.9, and §5.2
    for the Gauss–Newton/Fisher curvature):

    .. math:: u_t = -\eta_t\,(F_t + \lambda I)^{-1}\,\mathrm{vec}(g_t),

    on the parameters flattened in sorted key order (row-major per array). ``curvature(xp,
    params, grads)`` returns the dense curvature :math:`F_t` ``(P, P)`` (a Fisher, GGN or
    Hessian, e.g. from :mod:`nlaverify.curvature.operators`), solved by
    :func:`nlaverify.curvature.natural.natural_gradient` (exact LU on SymPy), or a
    matrix-vector product ``v -> F v``, solved by conjugate gradients
    (:func:`nlaverify.curvature.solvers.damped_solve`, JAX only and not under ``jit``;
    requires :math:`\lambda > 0`)."""
    _b.check_hyper("natural_gradient", "lr", lr, lo=0, lo_open=True, schedule=True)
    _b.check_hyper("natural_gradient", "damping", damping, lo=0)
    if not callable(curvature):
        raise ArgumentError(f"natural_gradient: argument 'curvature': expected a callable "
                            f"(xp, params, grads) -> F or matvec, got {curvature!r}")

    def init(xp: Namespace, params: Params) -> State:
        _b._check_params("natural_gradient", params)
        return {"count": _b.zero_count(xp)}

    def update(xp: Namespace, grads: Params, state: State,
               params: Params | None = None) -> tuple[Params, State]:
        from nlaverify.curvature import natural as _nat
        from nlaverify.curvature import solvers as _sol

        _b.check_state("natural_gradient", state, ("count",))
        if params is None:
            raise ArgumentError("natural_gradient: argument 'params': required (the "
                                "curvature is evaluated there), got None")
        _b._params_for("natural_gradient", grads, params, params, True, "params")
        keys = sorted(grads)
        g = xp.concat([xp.reshape(grads[k], (-1,)) for k in keys])
        F = curvature(xp, params, grads)
        P = int(g.shape[0])
        if callable(F):
            x = _sol.damped_solve(F, g, damping).x
        else:
            if _b._shape(F) != (P, P):
                raise ShapeError(f"natural_gradient: the curvature: expected shape ({P}, {P}) "
                                 f"for {P} parameters, got {_b._shape(F)}")
            x = _nat.natural_gradient(xp, F, g, _b.const(xp, damping))
        eta = _b.learning_rate(xp, lr, state["count"])
        out, i = {}, 0
        for k in keys:
            n = math.prod(_b._shape(grads[k]))
            out[k] = _el.scale(xp, eta, xp.reshape(x[i:i + n], _b._shape(grads[k])))
            i += n
        return out, {"count": state["count"] + 1}

    return Rule("natural_gradient", init, _b.typed(update))


class _Shaped:
    """A stand-in with only a shape (to compare a gradient's rows with its statistics)."""

    def __init__(self, shape: Sequence[int]) -> None:
        self.shape = tuple(shape)


__all__ = ["SCALINGS", "default_is_matrix", "muon", "muon_direction", "muon_moment",
           "natural_gradient", "shampoo", "shape_scale"]
