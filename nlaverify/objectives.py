r"""Training objectives of an autoregressive model, written once against an array namespace
``xp`` (Baptista, Stuart & Tran, *Large Language Models: A Mathematical Formulation*,
§3–4, §4.1, §4.3–4.4; Rafailov et al. 2023, *Direct Preference Optimization*; Williams 1992,
*Simple statistical gradient-following algorithms*).

An autoregressive model of :math:`n` tokens over a vocabulary of :math:`V` is given by its
*conditional tables* ``tables[t]`` of shape ``(V,)*(t+1)``: the entry
``tables[t][x_1, ..., x_t, x_{t+1}]`` is :math:`p(x_{t+1}\mid x_{1:t})` (``tables[0]`` is the
first token's distribution). Its joint law is the product (§3)

.. math:: p(x_{1:n}) = \prod_{t=0}^{n-1} p(x_{t+1}\mid x_{1:t}).

On it:

* :math:`\mathrm{KL}(p\,\|\,q) = \sum_x p(x)\log\frac{p(x)}{q(x)}` (:math:`0\log 0 = 0`), the
  entropy :math:`H(p)` and the cross-entropy :math:`\mathrm{CE}(p, q) = -\sum_x p\log q =
  \mathrm{KL}(p\|q) + H(p)`; maximum likelihood on data :math:`p` minimises the *forward*
  :math:`\mathrm{KL}(p_\text{data}\|q_\theta)` (§4.1);
* the chain rule :math:`\mathrm{KL}(p\|q) = \sum_t \mathbb E_{x_{1:t}\sim p}\,
  \mathrm{KL}(p(\cdot\mid x_{1:t})\,\|\,q(\cdot\mid x_{1:t}))` (:func:`chain_rule_kl`);
* perplexity :math:`e^{\bar\ell}` and bits per byte :math:`\bar\ell/(b\log 2)` of a mean
  negative log-likelihood :math:`\bar\ell` per token (nats) and :math:`b` bytes per token;
* the KL-regularised objective of §4.4, :math:`J(\pi) = \mathbb E_\pi[r] - \beta
  \mathrm{KL}(\pi\|\pi_\text{ref})`, maximised by the Gibbs policy :math:`\pi^* =
  \pi_\text{ref} e^{r/\beta}/Z` with :math:`\max J = \beta\log Z`;
* the DPO loss :math:`-\log\sigma(\beta[(\log\pi(y_w) - \log\pi_\text{ref}(y_w)) -
  (\log\pi(y_l) - \log\pi_\text{ref}(y_l))])` and its gradient;
* the REINFORCE (score-function) estimator :math:`(\nabla_\theta\log\pi_\theta(y))(r(y) - b)`
  of :math:`\nabla_\theta\mathbb E_{\pi_\theta}[r]`, for a softmax policy.

The family ``objectives`` (:mod:`nlaverify.identities.objectives`) proves the identities on
these very functions, run on SymPy symbols; ``tests/test_objectives.py`` runs them on NumPy
and JAX. Bad input (a row that is not a distribution, :math:`\beta \le 0`, mismatched shapes)
raises :class:`~nlaverify.errors.ArgumentError` or :class:`~nlaverify.errors.ShapeError`
naming the argument; the checks run on concrete floating arrays (not on symbols, nor under a
JAX trace).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.ops.activations import sigmoid
from nlaverify.ops.softmaxes import softmax

__all__ = ["bits_per_byte", "bradley_terry_nll", "chain_rule_kl", "cross_entropy",
           "dpo_loss", "dpo_loss_grad", "entropy", "expected_reward", "expected_reward_grad",
           "gibbs_policy", "implicit_reward", "joint_distribution", "kl",
           "kl_regularised_objective", "log_partition", "perplexity", "reinforce_estimate",
           "reinforce_expectation", "score_softmax", "sequence_kl", "sequence_log_prob"]


# -- checks (concrete floating arrays only) ------------------------------------------------
def _numeric(xp: Namespace, x: Any) -> np.ndarray | None:
    """``x`` as float64 NumPy when it is a concrete floating array, else ``None``."""
    if xp.object_arrays or not xp.is_concrete(x):
        return None
    from nlaverify.backends.host import to_float64

    return to_float64(x)


def _check_distribution(op: str, xp: Namespace, name: str, p: Any) -> None:
    """Each row (last axis) of ``p`` is non-negative and sums to 1 to the tolerance model."""
    a = _numeric(xp, p)
    if a is None:
        return
    if a.ndim == 0:
        raise ShapeError(f"{op}: argument {name!r}: expected a distribution along the last "
                         f"axis, got a scalar")
    from nlaverify.tolerance import tolerance

    # the row sum of V rounded entries: a normwise error of the tolerance model
    tol = tolerance(getattr(p, "dtype", np.float64), size=a.shape[-1], depth=2).rtol
    sums = np.sum(a, axis=-1)
    if not (np.all(np.isfinite(a)) and np.all(a >= 0) and np.all(np.abs(sums - 1) <= tol)):
        worst = float(sums.flat[int(np.argmax(np.abs(sums - 1)))]) if sums.size else 0.0
        raise ArgumentError(f"{op}: argument {name!r}: expected non-negative rows summing to "
                            f"1 along the last axis, got min {a.min():.3g}, a row sum "
                            f"{worst:.17g}")


def _check_same_shape(op: str, **arrays: Any) -> None:
    shapes = {k: tuple(np.shape(v)) for k, v in arrays.items()}
    if len(set(shapes.values())) > 1:
        raise ShapeError(f"{op}: arguments {', '.join(map(repr, shapes))}: expected one shape, "
                         f"got {', '.join(f'{k} {s}' for k, s in shapes.items())}")


def _check_beta(op: str, beta: Any) -> None:
    """:math:`\\beta > 0` when it is a number (a SymPy symbol must be declared positive)."""
    try:
        ok = bool(beta > 0)
    except TypeError:  # a symbolic beta without a sign
        ok = False
    if not ok:
        raise ArgumentError(f"{op}: argument 'beta': expected beta > 0, got {beta!r}")


def _check_tables(op: str, xp: Namespace, name: str, tables: Sequence[Any]) -> None:
    if len(tables) == 0:
        raise ShapeError(f"{op}: argument {name!r}: expected at least one conditional table")
    V = np.shape(tables[0])[-1] if np.ndim(tables[0]) else 0
    for t, table in enumerate(tables):
        if tuple(np.shape(table)) != (V,) * (t + 1):
            raise ShapeError(f"{op}: argument {name!r}: expected tables[{t}] of shape "
                             f"{(V,) * (t + 1)} (p(x_{t + 1} | x_1..x_{t})), got "
                             f"{tuple(np.shape(table))}")
        _check_distribution(op, xp, f"{name}[{t}]", table)


# -- distributions -------------------------------------------------------------------------
def _p_log_q(op: str, xp: Namespace, p: Any, q: Any) -> Any:
    r""":math:`p\log q` entrywise, 0 where :math:`p = 0` (the limit :math:`0\log 0 = 0`);
    a :math:`q = 0` where :math:`p > 0` makes the KL infinite and is refused."""
    a, b = _numeric(xp, p), _numeric(xp, q)
    if a is not None and b is not None and np.any((a > 0) & (b <= 0)):
        raise ArgumentError(f"{op}: argument 'q': q = 0 where p > 0 (p is not absolutely "
                            f"continuous with respect to q: the KL is +inf)")
    pos = xp.greater(p, 0)
    return xp.where(pos, p * xp.log(xp.where(pos, q, xp.ones_like(q))), xp.zeros_like(p))


def kl(xp: Namespace, p: Any, q: Any) -> Any:
    r""":math:`\mathrm{KL}(p\,\|\,q) = \sum_i p_i(\log p_i - \log q_i)` along the last axis
    (Baptista, Stuart & Tran §4.1; the order matters: this is the *forward* KL when
    :math:`p` is the data)."""
    _check_same_shape("kl", p=p, q=q)
    _check_distribution("kl", xp, "p", p)
    _check_distribution("kl", xp, "q", q)
    return xp.sum(_p_log_q("kl", xp, p, p) - _p_log_q("kl", xp, p, q), axis=-1)


def entropy(xp: Namespace, p: Any) -> Any:
    r""":math:`H(p) = -\sum_i p_i\log p_i` along the last axis."""
    _check_distribution("entropy", xp, "p", p)
    return -xp.sum(_p_log_q("entropy", xp, p, p), axis=-1)


def cross_entropy(xp: Namespace, p: Any, q: Any) -> Any:
    r""":math:`\mathrm{CE}(p, q) = -\sum_i p_i\log q_i = \mathbb E_{x\sim p}[-\log q(x)]`, the
    population loss of §4 when :math:`p` is the data and :math:`q` the model."""
    _check_same_shape("cross_entropy", p=p, q=q)
    _check_distribution("cross_entropy", xp, "p", p)
    _check_distribution("cross_entropy", xp, "q", q)
    return -xp.sum(_p_log_q("cross_entropy", xp, p, q), axis=-1)


def perplexity(xp: Namespace, nll: Any) -> Any:
    r""":math:`\mathrm{PPL} = e^{\bar\ell}`, :math:`\bar\ell` the mean negative
    log-likelihood per token in nats (Baptista, Stuart & Tran §8)."""
    return xp.exp(nll)


def bits_per_byte(xp: Namespace, nll: Any, bytes_per_token: Any) -> Any:
    r""":math:`\mathrm{bpb} = \bar\ell / (b\log 2) = \log_2(\mathrm{PPL})/b`: the mean
    negative log-likelihood per token :math:`\bar\ell` (nats) in bits, per byte of text, for
    a tokenizer of :math:`b` bytes per token (a measure that does not depend on the
    tokenizer)."""
    if xp.is_concrete(bytes_per_token) and not xp.object_arrays and not bytes_per_token > 0:
        raise ArgumentError(f"bits_per_byte: argument 'bytes_per_token': expected > 0, got "
                            f"{bytes_per_token!r}")
    return nll / (xp.log(xp.const(2)) * bytes_per_token)


# -- autoregressive sequences (§3) ----------------------------------------------------------
def joint_distribution(xp: Namespace, tables: Sequence[Any]) -> Any:
    r"""The joint law :math:`p(x_{1:n}) = \prod_t p(x_{t+1}\mid x_{1:t})`, shape
    ``(V,)*n``, of the conditional tables (module docstring)."""
    _check_tables("joint_distribution", xp, "tables", tables)
    joint = tables[0]
    for table in tables[1:]:
        joint = joint[..., None] * table
    return joint


def sequence_log_prob(xp: Namespace, tables: Sequence[Any], tokens: Sequence[int]) -> Any:
    r""":math:`\log p(x_{1:n}) = \sum_t \log p(x_{t+1}\mid x_{1:t})` of one sequence of ids
    (the autoregressive factorization, §3)."""
    _check_tables("sequence_log_prob", xp, "tables", tables)
    V = np.shape(tables[0])[-1]
    ids = [int(i) for i in tokens]
    if len(ids) != len(tables) or any(not 0 <= i < V for i in ids):
        raise ShapeError(f"sequence_log_prob: argument 'tokens': expected {len(tables)} ids "
                         f"in [0, {V}), got {ids}")
    return sum((xp.log(tables[t][tuple(ids[:t + 1])]) for t in range(len(ids))),
               xp.zeros(()))


def sequence_kl(xp: Namespace, p_tables: Sequence[Any], q_tables: Sequence[Any]) -> Any:
    r""":math:`\mathrm{KL}(p\|q)` of the two joint laws over all :math:`V^n` sequences."""
    p, q = joint_distribution(xp, p_tables), joint_distribution(xp, q_tables)
    _check_same_shape("sequence_kl", p_tables=p, q_tables=q)
    return kl(xp, xp.reshape(p, (-1,)), xp.reshape(q, (-1,)))


def chain_rule_kl(xp: Namespace, p_tables: Sequence[Any], q_tables: Sequence[Any]) -> Any:
    r"""The sum of expected conditional KLs along the factorization,

    .. math:: \sum_{t=0}^{n-1}\sum_{x_{1:t}} p(x_{1:t})\,
              \mathrm{KL}\bigl(p(\cdot\mid x_{1:t})\,\|\,q(\cdot\mid x_{1:t})\bigr),

    which the chain rule of the KL (identity ``sequence_kl_chain_rule``) shows equal to
    :func:`sequence_kl`; it costs :math:`O(V^n)` like the joint, but is the form a
    per-token training loss takes."""
    _check_tables("chain_rule_kl", xp, "p_tables", p_tables)
    _check_tables("chain_rule_kl", xp, "q_tables", q_tables)
    _check_same_shape("chain_rule_kl", p_tables=p_tables[-1], q_tables=q_tables[-1])
    total, prefix = xp.zeros(()), None  # prefix: p(x_{1:t}), shape (V,)*t
    for p_t, q_t in zip(p_tables, q_tables, strict=True):
        conditional = kl(xp, p_t, q_t)
        total = total + xp.sum(conditional if prefix is None else prefix * conditional)
        prefix = p_t if prefix is None else prefix[..., None] * p_t
    return total


# -- KL-regularised reinforcement learning (§4.4) ---------------------------------------------
def gibbs_policy(xp: Namespace, pi_ref: Any, r: Any, beta: Any) -> Any:
    r"""The maximiser :math:`\pi^* = \pi_\text{ref}\,e^{r/\beta}/Z`, :math:`Z =
    \sum_y\pi_\text{ref}(y)e^{r(y)/\beta}`, of :func:`kl_regularised_objective` (the Gibbs
    variational principle, identity ``kl_regularised_gibbs_optimum``). The exponent is
    shifted by :math:`\max r` (``xp.stability_shift``), which cancels in the ratio."""
    _check_beta("gibbs_policy", beta)
    _check_same_shape("gibbs_policy", pi_ref=pi_ref, r=r)
    _check_distribution("gibbs_policy", xp, "pi_ref", pi_ref)
    w = pi_ref * xp.exp((r - xp.stability_shift(r)) / beta)
    return w / xp.sum(w, axis=-1, keepdims=True)


def log_partition(xp: Namespace, pi_ref: Any, r: Any, beta: Any) -> Any:
    r""":math:`\log Z = \log\sum_y \pi_\text{ref}(y)e^{r(y)/\beta}`, computed as
    :math:`c/\beta + \log\sum_y\pi_\text{ref}(y)e^{(r(y)-c)/\beta}`, :math:`c = \max r`
    (no overflow; exact for every :math:`c`). :math:`\beta\log Z` is the maximum of
    :math:`J`."""
    _check_beta("log_partition", beta)
    _check_same_shape("log_partition", pi_ref=pi_ref, r=r)
    _check_distribution("log_partition", xp, "pi_ref", pi_ref)
    c = xp.stability_shift(r)
    w = pi_ref * xp.exp((r - c) / beta)
    return xp.sum(c, axis=-1) / beta + xp.log(xp.sum(w, axis=-1))


def kl_regularised_objective(xp: Namespace, pi: Any, pi_ref: Any, r: Any, beta: Any) -> Any:
    r""":math:`J(\pi) = \sum_y\pi(y)r(y) - \beta\,\mathrm{KL}(\pi\|\pi_\text{ref})` (§4.4:
    the reward, penalised by the divergence from the reference model)."""
    _check_beta("kl_regularised_objective", beta)
    _check_same_shape("kl_regularised_objective", pi=pi, pi_ref=pi_ref, r=r)
    return xp.sum(pi * r, axis=-1) - beta * kl(xp, pi, pi_ref)


# -- direct preference optimization (Rafailov et al. 2023) ----------------------------------
def _softplus(xp: Namespace, x: Any) -> Any:
    r""":math:`\log(1+e^x)` as :math:`\max(x, 0) + \log(1 + e^{-|x|})`: the exponent is never
    positive and ``log1p`` keeps the small term's digits (each branch equals
    :math:`\log(1+e^x)` exactly)."""
    pos = xp.greater(x, 0)
    e = xp.exp(xp.where(pos, -x, x))
    return xp.where(pos, x, xp.zeros_like(x)) + xp.log1p(e)


def implicit_reward(xp: Namespace, logp: Any, logp_ref: Any, beta: Any) -> Any:
    r"""DPO's implicit reward :math:`\beta(\log\pi(y) - \log\pi_\text{ref}(y))`: inverting
    :math:`\pi^* = \pi_\text{ref}e^{r/\beta}/Z` gives :math:`r = \beta\log(\pi^*/
    \pi_\text{ref}) + \beta\log Z`, the last term the same for every :math:`y`."""
    _check_beta("implicit_reward", beta)
    return beta * (logp - logp_ref)


def bradley_terry_nll(xp: Namespace, r_w: Any, r_l: Any) -> Any:
    r""":math:`-\log P(y_w \succ y_l) = -\log\sigma(r_w - r_l)` under the Bradley–Terry model
    :math:`P(y_w\succ y_l) = e^{r_w}/(e^{r_w}+e^{r_l})`, as :math:`\operatorname{softplus}
    (r_l - r_w)`."""
    return _softplus(xp, r_l - r_w)


def _dpo_margin(op: str, xp: Namespace, logp_w: Any, logp_l: Any, logref_w: Any,
                logref_l: Any, beta: Any) -> Any:
    _check_beta(op, beta)
    _check_same_shape(op, logp_w=logp_w, logp_l=logp_l, logref_w=logref_w, logref_l=logref_l)
    return (implicit_reward(xp, logp_w, logref_w, beta)
            - implicit_reward(xp, logp_l, logref_l, beta))


def dpo_loss(xp: Namespace, logp_w: Any, logp_l: Any, logref_w: Any, logref_l: Any,
             beta: Any) -> Any:
    r"""The DPO loss of each preference pair (Rafailov et al. 2023, eq. 7),

    .. math:: -\log\sigma\Bigl(\beta\Bigl[\log\frac{\pi(y_w)}{\pi_\text{ref}(y_w)}
              - \log\frac{\pi(y_l)}{\pi_\text{ref}(y_l)}\Bigr]\Bigr),

    the Bradley–Terry negative log-likelihood of the implicit rewards (the :math:`\beta\log Z`
    cancels in the difference). Arguments: the sequence log-probabilities of the preferred
    (:math:`w`) and rejected (:math:`l`) responses under the policy and the reference, one
    shape; the mean over pairs is the caller's."""
    m = _dpo_margin("dpo_loss", xp, logp_w, logp_l, logref_w, logref_l, beta)
    return _softplus(xp, -m)


def dpo_loss_grad(xp: Namespace, logp_w: Any, logp_l: Any, logref_w: Any, logref_l: Any,
                  beta: Any) -> tuple[Any, Any]:
    r"""The gradient of :func:`dpo_loss` in the policy's log-probabilities:

    .. math:: \frac{\partial L}{\partial\log\pi(y_w)} = -\beta\,\sigma(-m),\qquad
              \frac{\partial L}{\partial\log\pi(y_l)} = \beta\,\sigma(-m),

    :math:`m` the margin inside :math:`\sigma` (Rafailov et al. 2023, §5: pairs whose
    implicit rewards are ordered wrongly weigh more); chain it with
    :math:`\nabla_\theta\log\pi_\theta(y)` for the parameters."""
    m = _dpo_margin("dpo_loss_grad", xp, logp_w, logp_l, logref_w, logref_l, beta)
    s = beta * sigmoid(xp, -m)
    return -s, s


# -- the score-function (REINFORCE) gradient (Williams 1992) ---------------------------------
def score_softmax(xp: Namespace, theta: Any, y: Any) -> Any:
    r""":math:`\nabla_\theta\log\pi_\theta(y) = e_y - \pi_\theta` for :math:`\pi_\theta =
    \operatorname{softmax}(\theta)`, one row per id of ``y`` (shape ``(len(y), V)``)."""
    if np.ndim(theta) != 1:
        raise ShapeError(f"score_softmax: argument 'theta': expected one row of logits (V,), "
                         f"got shape {tuple(np.shape(theta))}")
    ids = np.asarray(y)
    V = np.shape(theta)[0]
    if ids.ndim != 1 or (ids.size and not (0 <= ids.min() and ids.max() < V)):
        raise ShapeError(f"score_softmax: argument 'y': expected a 1-D array of ids in "
                         f"[0, {V}), got {ids.tolist()}")
    pi = softmax(xp, theta)
    return xp.one_hot(xp.asarray(ids), V, getattr(theta, "dtype", None)) - pi[None, :]


def _reinforce_terms(xp: Namespace, theta: Any, y: Any, rewards: Any, baseline: Any) -> Any:
    r"""The per-sample estimates :math:`(e_{y_i} - \pi_\theta)(r_i - b)`."""
    _check_same_shape("reinforce", y=np.asarray(y), rewards=rewards)
    return score_softmax(xp, theta, y) * (rewards - baseline)[:, None]


def reinforce_estimate(xp: Namespace, theta: Any, y: Any, rewards: Any,
                       baseline: Any = 0) -> Any:
    r"""The REINFORCE estimate of :math:`\nabla_\theta\mathbb E_{\pi_\theta}[r]` from samples
    :math:`y_i\sim\pi_\theta` with rewards :math:`r_i` (Williams 1992):

    .. math:: \hat g = \frac1N\sum_i \nabla_\theta\log\pi_\theta(y_i)\,(r_i - b),

    unbiased for every constant baseline :math:`b`, because
    :math:`\mathbb E_\pi[\nabla\log\pi] = \sum_y\nabla\pi(y) = 0` (identity
    ``reinforce_baseline_unbiased``)."""
    terms = _reinforce_terms(xp, theta, y, rewards, baseline)
    return xp.sum(terms, axis=0) / np.shape(terms)[0]


def reinforce_expectation(xp: Namespace, theta: Any, r: Any, baseline: Any = 0) -> Any:
    r""":math:`\mathbb E_{y\sim\pi_\theta}[(e_y - \pi_\theta)(r(y) - b)]` by enumeration of
    the :math:`V` outcomes (``r`` holds :math:`r(y)` for every :math:`y`): the mean of the
    very terms :func:`reinforce_estimate` averages."""
    V = np.shape(theta)[0]
    pi = softmax(xp, theta)
    terms = _reinforce_terms(xp, theta, np.arange(V), r, baseline)
    return xp.sum(pi[:, None] * terms, axis=0)


def expected_reward(xp: Namespace, theta: Any, r: Any) -> Any:
    r""":math:`\mathbb E_{\pi_\theta}[r] = \sum_y\operatorname{softmax}(\theta)_y\,r(y)`."""
    _check_same_shape("expected_reward", theta=theta, r=r)
    return xp.sum(softmax(xp, theta) * r, axis=-1)


def expected_reward_grad(xp: Namespace, theta: Any, r: Any) -> Any:
    r""":math:`\nabla_\theta\mathbb E_{\pi_\theta}[r] = \pi\odot(r - \langle\pi, r\rangle)`
    (the softmax Jacobian :math:`\operatorname{diag}\pi - \pi\pi^\top` applied to
    :math:`r`), the exact gradient the estimator targets."""
    _check_same_shape("expected_reward_grad", theta=theta, r=r)
    pi = softmax(xp, theta)
    return pi * (r - xp.sum(pi * r, axis=-1))
