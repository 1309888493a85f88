r"""Discrete (masked) diffusion over token sequences, written once against an array namespace
``xp`` (Baptista, Stuart & Tran §9 and App. D; Austin et al. 2021, D3PM; Campbell et al. 2022;
Shi et al. 2024, MD4; Sahoo et al. 2024, MDLM).

States. A token is one of the :math:`V` ids :math:`0,\dots,V-1` or the mask, whose id
``mask_id`` lies outside the vocabulary (:math:`\ge V`). Distributions over the :math:`V+1`
states are rows whose *last* column is the mask.

Forward (absorbing-state) process. Each token is masked independently and stays masked; with a
schedule :math:`\alpha_t` decreasing from :math:`\alpha_0 = 1` to :math:`\alpha_1 = 0`,

.. math:: q_t(x_t\mid x_0) = \alpha_t\,\delta_{x_0} + (1-\alpha_t)\,\delta_{\mathrm m},\qquad
          q_{t|s} = \tfrac{\alpha_t}{\alpha_s} I + \bigl(1-\tfrac{\alpha_t}{\alpha_s}\bigr)
          \mathbf 1 e_{\mathrm m}^\top\ (s<t),

the transitions of the Markov chain of rates :math:`Q_t = -\tfrac{\alpha_t'}{\alpha_t}
(\mathbf 1 e_{\mathrm m}^\top - I)`. Time reversal (App. D; Campbell et al. 2022, Prop. 1): a
chain of rates :math:`Q_t(x, y)` and marginals :math:`p_t`, run backward, is the chain of rates
:math:`\hat Q_t(x, y) = Q_t(y, x)\,p_t(y)/p_t(x)` (:math:`x\ne y`).

Objective. The reverse model :math:`p_\theta(x_s\mid x_t)` is the posterior
:math:`q(x_s\mid x_t, x_0)` with the model's prediction :math:`\mu_\theta(x_t)` for
:math:`x_0`; the continuous-time negative ELBO (MD4 eq. 4, MDLM eq. 10) is a weighted
cross-entropy over the masked positions,

.. math:: -\log p_\theta(x_0) \le \int_0^1 \frac{\alpha_t'}{1-\alpha_t}\,
          \mathbb E_{q_t(x_t\mid x_0)}\Bigl[\sum_{i:\,x_t^i = \mathrm m}
          \log p_\theta(x_0^i\mid x_t)\Bigr]dt.

The family ``diffusion`` (:mod:`nlaverify.identities.diffusion`) proves these facts on the
functions below run with SymPy symbols; ``tests/test_diffusion.py`` runs them on NumPy.
A model is a callable ``log_probs(x_t)``: ids ``(..., L)`` to the log-probabilities
``(..., L, V)`` of the clean tokens. Bad input (a schedule value outside [0, 1], a mask id in
the vocabulary, a rate matrix whose rows do not sum to 0) raises
:class:`~nlaverify.errors.ArgumentError` naming the argument (values: concrete arrays only).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, ShapeError

__all__ = ["SCHEDULES", "Schedule", "cosine_alpha", "cosine_alpha_prime", "discrete_nelbo",
           "forward_marginal", "kolmogorov_forward", "linear_alpha", "linear_alpha_prime",
           "mask_patterns", "masked_posterior", "masked_rate_matrix", "masking_weight",
           "nelbo_exact", "nelbo_integrand", "nelbo_samples", "reverse_process_marginal",
           "reverse_rates", "step_kl", "step_weight", "transformer_log_probs",
           "transition_matrix"]

LogProbs = Callable[[np.ndarray], Any]


# -- checks (concrete floating values only) ------------------------------------------------
def _numeric(xp: Namespace, x: Any) -> np.ndarray | None:  # None: symbolic or traced
    if xp.object_arrays or not xp.is_concrete(x):
        return None
    return np.asarray(x, dtype=np.float64)


def _check_alpha(op: str, xp: Namespace, name: str, a: Any) -> None:
    v = _numeric(xp, a)
    if v is not None and not (np.all(np.isfinite(v)) and np.all((v >= 0) & (v <= 1))):
        raise ArgumentError(f"{op}: argument {name!r}: expected a schedule value alpha in "
                            f"[0, 1], got {v.tolist()}")


def _check_mask(op: str, V: int, mask_id: int) -> None:
    if not (isinstance(V, int | np.integer) and V >= 1):
        raise ArgumentError(f"{op}: argument 'V': expected a vocabulary size >= 1, got {V!r}")
    if not isinstance(mask_id, int | np.integer) or mask_id < V:
        raise ArgumentError(f"{op}: argument 'mask_id': expected an id outside the vocabulary "
                            f"[0, {V}) (the mask must not clash with a token), got {mask_id!r}")


def _check_ids(op: str, name: str, ids: Any, V: int, mask_id: int | None) -> np.ndarray:
    a = np.asarray(ids)
    if not (a.dtype.kind in "iu" and np.all(((a >= 0) & (a < V)) | (a == mask_id))):
        allowed = f"[0, {V})" + ("" if mask_id is None else f" or the mask {mask_id}")
        raise ArgumentError(f"{op}: argument {name!r}: expected integer ids in {allowed}, got "
                            f"{a.tolist()}")
    return a


def _states(ids: np.ndarray, V: int, mask_id: int) -> np.ndarray:
    """Ids as state indices: the mask is the last state, ``V``."""
    return np.where(ids == mask_id, V, ids)


# -- schedules -------------------------------------------------------------------------------
def linear_alpha(xp: Namespace, t: Any) -> Any:
    r""":math:`\alpha_t = 1 - t` (MD4 Table 1; MDLM's log-linear schedule)."""
    return 1 - t


def linear_alpha_prime(xp: Namespace, t: Any) -> Any:
    r""":math:`\alpha_t' = -1`."""
    return 0 * t - 1


def cosine_alpha(xp: Namespace, t: Any) -> Any:
    r""":math:`\alpha_t = 1 - \cos\bigl(\tfrac\pi2(1-t)\bigr)` (MD4 Table 1)."""
    return 1 - xp.cos(xp.const_sqrt(1, 4, pi_power=2) * (1 - t))


def cosine_alpha_prime(xp: Namespace, t: Any) -> Any:
    r""":math:`\alpha_t' = -\tfrac\pi2\sin\bigl(\tfrac\pi2(1-t)\bigr)`."""
    return -xp.const_sqrt(1, 4, pi_power=2) * xp.sin(xp.const_sqrt(1, 4, pi_power=2) * (1 - t))


@dataclass(frozen=True)
class Schedule:
    r"""A schedule :math:`\alpha_t` on :math:`[0, 1]` and :math:`\alpha_t'` (identity
    ``masked_elbo_continuous_limit``: derivative, :math:`\alpha_0 = 1`, :math:`\alpha_1 = 0`)."""

    name: str
    alpha: Callable[[Namespace, Any], Any]
    alpha_prime: Callable[[Namespace, Any], Any]


SCHEDULES: dict[str, Schedule] = {
    "linear": Schedule("linear", linear_alpha, linear_alpha_prime),
    "cosine": Schedule("cosine", cosine_alpha, cosine_alpha_prime),
}


# -- the forward process ---------------------------------------------------------------------
def _identity_and_to_mask(xp: Namespace, V: int) -> tuple[Any, Any]:
    r""":math:`I` and :math:`\mathbf 1 e_{\mathrm m}^\top` over the :math:`V+1` states."""
    eye = np.eye(V + 1, dtype=np.int64)
    return xp.asarray(eye), xp.asarray(np.outer(np.ones(V + 1, np.int64), eye[V]))


def transition_matrix(xp: Namespace, alpha_s: Any, alpha_t: Any, V: int) -> Any:
    r""":math:`q_{t|s}(y\mid x) = \tfrac{\alpha_t}{\alpha_s}\delta_{xy} + \bigl(1 -
    \tfrac{\alpha_t}{\alpha_s}\bigr)\delta_{y\mathrm m}`, shape ``(V+1, V+1)`` (the mask last):
    a token survives from :math:`s` to :math:`t > s` with probability
    :math:`\alpha_t/\alpha_s`, the mask stays (identity ``masked_forward_chapman_kolmogorov``).
    ``alpha_s = 1`` gives :math:`q_{t|0}`."""
    _check_alpha("transition_matrix", xp, "alpha_s", alpha_s)
    _check_alpha("transition_matrix", xp, "alpha_t", alpha_t)
    a_s, a_t = _numeric(xp, alpha_s), _numeric(xp, alpha_t)
    if a_s is not None and a_t is not None and not np.all((a_s > 0) & (a_t <= a_s)):
        raise ArgumentError(f"transition_matrix: arguments 'alpha_s', 'alpha_t': expected "
                            f"0 < alpha_t <= alpha_s (s < t), got {float(a_s)}, {float(a_t)}")
    r = alpha_t / alpha_s
    eye, to_mask = _identity_and_to_mask(xp, V)
    return r * eye + (1 - r) * to_mask


def forward_marginal(xp: Namespace, x0: Any, alpha_t: Any, V: int, mask_id: int) -> Any:
    r""":math:`q_t(\cdot\mid x_0) = \alpha_t e_{x_0} + (1-\alpha_t)e_{\mathrm m}` for each
    token of ``x0`` (shape ``(..., V+1)``), the rows :math:`e_{x_0}^\top q_{t|0}` of
    :func:`transition_matrix`."""
    _check_mask("forward_marginal", V, mask_id)
    ids = _check_ids("forward_marginal", "x0", x0, V, None)
    onehot = xp.one_hot(xp.asarray(ids, dtype=np.int64), V + 1, None)
    return xp.matmul(onehot, transition_matrix(xp, xp.const(1), alpha_t, V))


def masked_rate_matrix(xp: Namespace, alpha: Any, alpha_prime: Any, V: int) -> Any:
    r"""The generator :math:`Q_t = -\tfrac{\alpha_t'}{\alpha_t}(\mathbf 1 e_{\mathrm m}^\top - I)`
    of the masked process: a token jumps to the mask at rate :math:`-\alpha_t'/\alpha_t`
    (so :math:`\partial_t q_{t|s} = q_{t|s}Q_t`, identity
    ``masked_forward_chapman_kolmogorov``)."""
    eye, to_mask = _identity_and_to_mask(xp, V)
    return (-alpha_prime / alpha) * (to_mask - eye)


def _check_rates(op: str, xp: Namespace, Q: Any) -> None:
    if np.ndim(Q) != 2 or np.shape(Q)[0] != np.shape(Q)[1]:
        raise ShapeError(f"{op}: argument 'Q': expected a square rate matrix, got shape "
                         f"{tuple(np.shape(Q))}")
    a = _numeric(xp, Q)
    if a is None:
        return
    from nlaverify.tolerance import tolerance

    n = a.shape[0]
    off = a[~np.eye(n, dtype=bool)]
    # a row sum of n rounded rates: relative to the row's largest rate
    tol = tolerance(getattr(Q, "dtype", np.float64), size=n).rtol
    scale = np.maximum(np.max(np.abs(a), axis=1), np.finfo(np.float64).tiny)
    sums = np.abs(np.sum(a, axis=1)) / scale
    if not (np.all(np.isfinite(a)) and np.all(off >= 0) and np.all(sums <= tol)):
        raise ArgumentError(f"{op}: argument 'Q': expected non-negative off-diagonal rates and "
                            f"rows summing to 0, got row sums {np.sum(a, axis=1).tolist()}, "
                            f"least off-diagonal {off.min() if off.size else 0:.3g}")


def kolmogorov_forward(xp: Namespace, p: Any, Q: Any) -> Any:
    r"""The right side of the forward (Kolmogorov) equation :math:`\partial_t p_t = p_t Q_t`,
    :math:`p` a row (or rows) over the states."""
    _check_rates("kolmogorov_forward", xp, Q)
    return xp.matmul(p, Q)


def reverse_rates(xp: Namespace, Q: Any, p: Any) -> Any:
    r"""The rates of the time-reversed chain (App. D; Campbell et al. 2022, Prop. 1):

    .. math:: \hat Q_t(x, y) = Q_t(y, x)\,\frac{p_t(y)}{p_t(x)}\ (x\ne y),\qquad
              \hat Q_t(x, x) = -\sum_{y\ne x}\hat Q_t(x, y),

    for marginals :math:`p_t > 0`: then :math:`r_s = p_{T-s}` solves
    :math:`\partial_s r_s = r_s\hat Q_{T-s}` (identity ``ctmc_time_reversal``)."""
    _check_rates("reverse_rates", xp, Q)
    v = _numeric(xp, p)
    if v is not None and not (v.shape == (np.shape(Q)[0],) and np.all(v > 0)):
        raise ArgumentError(f"reverse_rates: argument 'p': expected positive marginals of "
                            f"shape {(np.shape(Q)[0],)}, got {v.tolist()}")
    n = np.shape(Q)[0]
    off = xp.asarray(1 - np.eye(n, dtype=np.int64))
    pp = xp.asarray(p)
    R = off * xp.matrix_transpose(Q) * pp[None, :] / pp[:, None]
    return R - xp.asarray(np.eye(n, dtype=np.int64)) * xp.sum(R, axis=1)[:, None]


# -- the posterior and the per-step KL -------------------------------------------------------
def masked_posterior(xp: Namespace, alpha_s: Any, alpha_t: Any, x0_probs: Any, xt: Any,
                     V: int, mask_id: int) -> Any:
    r""":math:`q(x_s\mid x_t, x_0)` for :math:`s < t`, one row per position (shape
    ``(..., V+1)``): :math:`\delta_{x_t}` where :math:`x_t` is a token, and where it is masked

    .. math:: \frac{\alpha_s-\alpha_t}{1-\alpha_t}\,x_0 + \frac{1-\alpha_s}{1-\alpha_t}\,
              e_{\mathrm m},

    ``x0_probs`` (shape ``(..., V)``) the clean token as a one-hot row, or the model's
    prediction :math:`\mu_\theta(x_t)`, which gives the reverse model :math:`p_\theta(x_s\mid
    x_t)` (identity ``masked_posterior_two_point``)."""
    _check_mask("masked_posterior", V, mask_id)
    _check_alpha("masked_posterior", xp, "alpha_s", alpha_s)
    _check_alpha("masked_posterior", xp, "alpha_t", alpha_t)
    ids = _check_ids("masked_posterior", "xt", xt, V, mask_id)
    if tuple(np.shape(x0_probs)) != (*ids.shape, V):
        raise ShapeError(f"masked_posterior: argument 'x0_probs': expected shape "
                         f"{(*ids.shape, V)}, got {tuple(np.shape(x0_probs))}")
    unmask = (alpha_s - alpha_t) / (1 - alpha_t)
    stay = (1 - alpha_s) / (1 - alpha_t)
    x0_row = xp.concat([xp.asarray(x0_probs), xp.zeros((*ids.shape, 1))], axis=-1)
    masked_row = unmask * x0_row + stay * xp.asarray(np.eye(V + 1, dtype=np.int64)[V])
    kept = xp.one_hot(xp.asarray(_states(ids, V, mask_id), dtype=np.int64), V + 1, None)
    return xp.where((ids == mask_id)[..., None], masked_row, kept)


def step_kl(xp: Namespace, alpha_s: Any, alpha_t: Any, x0: Any, xt: Any, log_probs: Any,
            V: int, mask_id: int) -> Any:
    r""":math:`\mathrm{KL}\bigl(q(x_s^i\mid x_t, x_0)\,\|\,p_\theta(x_s^i\mid x_t)\bigr)` at
    each position :math:`i` (shape ``(..., L)``), the reverse model the posterior with the
    prediction :math:`\mu_\theta = e^{\text{log\_probs}}` for the clean token. The sum runs over
    the support of :math:`q` (known from the ids: :math:`\{x_0, \mathrm m\}` where
    :math:`x_t` is masked, without the mask when :math:`\alpha_s = 1`; :math:`\{x_t\}` else).
    Identity ``masked_elbo_step_kl``: it is :math:`-\tfrac{\alpha_s-\alpha_t}{1-\alpha_t}
    \log\mu_\theta(x_0)` at masked positions, 0 at the others."""
    ids0 = _check_ids("step_kl", "x0", x0, V, None)
    ids = _check_ids("step_kl", "xt", xt, V, mask_id)
    onehot0 = xp.one_hot(xp.asarray(ids0, dtype=np.int64), V, None)
    q = masked_posterior(xp, alpha_s, alpha_t, onehot0, ids, V, mask_id)
    p = masked_posterior(xp, alpha_s, alpha_t, xp.exp(log_probs), ids, V, mask_id)
    states, a = np.arange(V + 1), _numeric(xp, alpha_s)
    alpha_s_is_one = bool(np.all(a == 1)) if a is not None else bool(alpha_s == 1)
    support = np.where((ids == mask_id)[..., None],
                       (states == ids0[..., None]) | ((states == V) & (not alpha_s_is_one)),
                       states == _states(ids, V, mask_id)[..., None])
    one = xp.ones_like(q)
    log_ratio = xp.log(xp.where(support, q, one)) - xp.log(xp.where(support, p, one))
    return xp.sum(xp.where(support, q * log_ratio, xp.zeros_like(q)), axis=-1)


def step_weight(xp: Namespace, schedule: Schedule, s: Any, t: Any) -> Any:
    r"""The weight :math:`(\alpha_s-\alpha_t)/(1-\alpha_t)` of a masked position's
    cross-entropy in the step :math:`s\to t` of the discrete-time ELBO."""
    a_s, a_t = schedule.alpha(xp, s), schedule.alpha(xp, t)
    return (a_s - a_t) / (1 - a_t)


def masking_weight(xp: Namespace, schedule: Schedule, t: Any) -> Any:
    r"""The weight :math:`-\alpha_t'/(1-\alpha_t)` of the continuous-time ELBO (MD4 eq. 4), the
    limit of :func:`step_weight` over the step length; also the reverse rate from the mask to
    a token, per unit of the denoiser's probability (identity ``ctmc_time_reversal``)."""
    return -schedule.alpha_prime(xp, t) / (1 - schedule.alpha(xp, t))


# -- the ELBO ----------------------------------------------------------------------------------
def mask_patterns(L: int) -> np.ndarray:
    """All :math:`2^L` masks of ``L`` positions, shape ``(2**L, L)`` (True: masked)."""
    return np.array(list(itertools.product((False, True), repeat=L)), dtype=bool).reshape(-1, L)


def _masked_ce(xp: Namespace, x0: np.ndarray, masks: np.ndarray, log_probs: LogProbs,
               mask_id: int) -> Any:
    r""":math:`\sum_{i\ \text{masked}} -\log p_\theta(x_0^i\mid x_t)` for each mask (rows)."""
    xt = np.where(masks, mask_id, x0[None, :])
    lp = log_probs(xt)
    picked = xp.sum(lp * xp.one_hot(xp.asarray(np.broadcast_to(x0, masks.shape),
                                               dtype=np.int64), np.shape(lp)[-1], None), axis=-1)
    return -xp.sum(xp.where(masks, picked, xp.zeros_like(picked)), axis=-1)


def nelbo_integrand(xp: Namespace, x0: Any, log_probs: LogProbs, schedule: Schedule, t: Any,
                    V: int, mask_id: int) -> Any:
    r"""The integrand of the continuous-time negative ELBO at a time :math:`0 < t \le 1`,

    .. math:: -\frac{\alpha_t'}{1-\alpha_t}\,\mathbb E_{q_t(x_t\mid x_0)}\Bigl[\sum_{i\
              \text{masked}} -\log p_\theta(x_0^i\mid x_t)\Bigr],

    the expectation by enumeration of the :math:`2^L` masks (probability
    :math:`\alpha_t^{L-k}(1-\alpha_t)^k` for :math:`k` masked)."""
    _check_mask("nelbo_integrand", V, mask_id)
    ids = _check_ids("nelbo_integrand", "x0", x0, V, None)
    masks = mask_patterns(ids.shape[-1])
    a = schedule.alpha(xp, t)
    k = masks.sum(axis=1)
    prob = xp.asarray([a ** int(ids.shape[-1] - j) * (1 - a) ** int(j) for j in k])
    return masking_weight(xp, schedule, t) * xp.sum(prob * _masked_ce(xp, ids, masks,
                                                                      log_probs, mask_id))


def nelbo_exact(xp: Namespace, x0: Any, log_probs: LogProbs, V: int, mask_id: int) -> Any:
    r"""The continuous-time negative ELBO in closed form: with :math:`u = \alpha_t` the integral
    does not depend on the schedule, and a mask of :math:`k` of the :math:`L` positions weighs
    :math:`\int_0^1 u^{L-k}(1-u)^{k-1}du = \frac{(L-k)!\,(k-1)!}{L!}`,

    .. math:: \sum_{M\ne\emptyset}\frac{(L-|M|)!\,(|M|-1)!}{L!}\sum_{i\in M}
              -\log p_\theta(x_0^i\mid x_0 \text{ masked on } M)

    (identity ``masked_elbo_continuous_limit`` proves it the integral of
    :func:`nelbo_integrand` for the linear and the cosine schedule)."""
    import math

    _check_mask("nelbo_exact", V, mask_id)
    ids = _check_ids("nelbo_exact", "x0", x0, V, None)
    L, masks = ids.shape[-1], mask_patterns(ids.shape[-1])[1:]
    w = xp.asarray([xp.rational(math.factorial(L - int(k)) * math.factorial(int(k) - 1),
                                math.factorial(L)) for k in masks.sum(axis=1)])
    return xp.sum(w * _masked_ce(xp, ids, masks, log_probs, mask_id))


def discrete_nelbo(xp: Namespace, x0: Any, log_probs: LogProbs, schedule: Schedule, T: int,
                   V: int, mask_id: int) -> Any:
    r"""The negative ELBO of the :math:`T`-step reverse model (D3PM's :math:`L_T`), steps
    :math:`s = (i-1)/T \to t = i/T`:

    .. math:: \sum_{i=1}^T \mathbb E_{q_{t}(x_t\mid x_0)}\sum_{\ell}\mathrm{KL}\bigl(
              q(x_s^\ell\mid x_t, x_0)\,\|\,p_\theta(x_s^\ell\mid x_t)\bigr)

    (:func:`step_kl`); the prior term vanishes (:math:`\alpha_1 = 0`: all masked) and the
    reconstruction term is the step :math:`i = 1` (:math:`\alpha_0 = 1`)."""
    _check_mask("discrete_nelbo", V, mask_id)
    ids = _check_ids("discrete_nelbo", "x0", x0, V, None)
    if not (isinstance(T, int) and T >= 1):
        raise ArgumentError(f"discrete_nelbo: argument 'T': expected an integer >= 1, got {T!r}")
    L, masks = ids.shape[-1], mask_patterns(ids.shape[-1])
    xt = np.where(masks, mask_id, ids[None, :])
    lp = log_probs(xt)
    total = xp.zeros(())
    for i in range(1, T + 1):
        a_s, a_t = (schedule.alpha(xp, xp.rational(k, T)) for k in (i - 1, i))
        prob = xp.asarray([a_t ** int(L - k) * (1 - a_t) ** int(k) for k in masks.sum(axis=1)])
        kls = step_kl(xp, a_s, a_t, np.broadcast_to(ids, masks.shape), xt, lp, V, mask_id)
        total = total + xp.sum(prob * xp.sum(kls, axis=-1))
    return total


def nelbo_samples(xp: Namespace, x0: Any, log_probs: LogProbs, schedule: Schedule, t: Any,
                  u: Any, V: int, mask_id: int, density: Any = None) -> Any:
    r"""One Monte-Carlo term of the continuous-time negative ELBO per draw (MD4 / MDLM):
    for times :math:`t_j` drawn from a density :math:`g` on :math:`(0, 1]` (``density`` its
    values at ``t``; uniform when ``None``) and uniforms :math:`u_{j\ell}` (shape
    ``(N, L)``), position :math:`\ell` is masked when :math:`u_{j\ell} < 1-\alpha_{t_j}` and

    .. math:: Y_j = \frac{1}{g(t_j)}\,\frac{-\alpha_{t_j}'}{1-\alpha_{t_j}}\sum_{\ell\
              \text{masked}} -\log p_\theta(x_0^\ell\mid x_{t_j}),

    unbiased for :func:`nelbo_exact`. Uniform times give an infinite variance (weight
    :math:`\sim 1/t`, a mask with probability :math:`\sim t`: :math:`\mathbb E Y^2 \sim
    \int dt/t`); :math:`t = v^2`, :math:`g(t) = 1/(2\sqrt t)` gives a finite one."""
    _check_mask("nelbo_samples", V, mask_id)
    ids = _check_ids("nelbo_samples", "x0", x0, V, None)
    tt, uu = np.asarray(t, dtype=np.float64), np.asarray(u, dtype=np.float64)
    if tt.ndim != 1 or uu.shape != tt.shape + ids.shape or not np.all((tt > 0) & (tt <= 1)):
        raise ArgumentError(f"nelbo_samples: arguments 't', 'u': expected times in (0, 1] of "
                            f"shape (N,) and uniforms of shape (N, {ids.shape[-1]}), got "
                            f"shapes {tt.shape}, {uu.shape}")
    from nlaverify.backends import get_namespace

    a = np.asarray(schedule.alpha(get_namespace("numpy"), tt))
    masks = uu < (1 - a)[:, None]
    ce = _masked_ce(xp, ids, masks, log_probs, mask_id)
    w = masking_weight(xp, schedule, xp.asarray(tt))
    return w * ce if density is None else w * ce / xp.asarray(density)


def reverse_process_marginal(xp: Namespace, log_probs: LogProbs, schedule: Schedule, T: int,
                             V: int, L: int, mask_id: int) -> Any:
    r"""The law :math:`p_\theta(x_0)` of the :math:`T`-step reverse model started all masked
    at :math:`t = 1`, each step :math:`p_\theta(x_s\mid x_t) = \prod_\ell
    q(x_s^\ell\mid x_t, \mu_\theta^\ell(x_t))` (:func:`masked_posterior`), by enumeration of
    the :math:`(V+1)^L` sequences; returns shape ``(V,)*L``: the mass on clean sequences."""
    _check_mask("reverse_process_marginal", V, mask_id)
    seqs = np.array(list(itertools.product(range(V + 1), repeat=L)), dtype=np.int64)
    ids = np.where(seqs == V, mask_id, seqs)
    lp = log_probs(ids)
    dist = xp.asarray((seqs == V).all(axis=1).astype(np.int64))
    for i in range(T, 0, -1):
        a_s, a_t = (schedule.alpha(xp, xp.rational(k, T)) for k in (i - 1, i))
        rows = masked_posterior(xp, a_s, a_t, xp.exp(lp), ids, V, mask_id)  # (S, L, V+1)
        trans = xp.ones((seqs.shape[0], seqs.shape[0]))
        for ell in range(L):
            trans = trans * xp.take(rows[:, ell, :], seqs[:, ell], axis=1)
        dist = xp.matmul(dist, trans)
    return xp.reshape(dist[(seqs < V).all(axis=1)], (V,) * L)


def transformer_log_probs(config: Any, params: dict[str, Any], V: int, mask_id: int) -> LogProbs:
    r"""A model of the graph engine as a denoiser: ``config`` must be bidirectional
    (``causal=False``: every position sees the whole noisy sequence) with the mask among its
    ids (``V <= mask_id < vocab_size``); its logits of the :math:`V` clean tokens, normalised
    (the mask is never predicted: MDLM's zero masking probabilities). Evaluated on NumPy, once
    per distinct noisy sequence of a batch."""
    from scipy.special import log_softmax

    from nlaverify.backends import get_namespace
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.core import evaluate

    _check_mask("transformer_log_probs", V, mask_id)
    if getattr(config, "causal", True):
        raise ArgumentError("transformer_log_probs: argument 'config': a denoiser needs "
                            "bidirectional attention, got causal=True")
    if not mask_id < config.vocab_size:
        raise ArgumentError(f"transformer_log_probs: argument 'mask_id': the mask {mask_id} "
                            f"is missing from the config (vocab_size={config.vocab_size})")
    graph, npx = build_transformer(config), get_namespace("numpy")

    def log_probs(xt: np.ndarray) -> np.ndarray:
        ids = np.asarray(xt)
        rows, inverse = np.unique(ids.reshape(-1, ids.shape[-1]), axis=0, return_inverse=True)
        out = log_softmax(np.stack([evaluate(graph, npx, {**params, "tokens": r, "targets": r},
                                             outputs=["logits"])["logits"][:, :V]
                                    for r in rows]), axis=-1)
        return out[inverse.reshape(-1)].reshape((*ids.shape, V))

    return log_probs
