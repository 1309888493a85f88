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
The rules live by concept, all re-exported here: the :class:`Rule` type and the shared checks
in :mod:`nlaverify.optim.base`, the formulas and the elementwise rules (SGD to AdamW) in
:mod:`nlaverify.optim.elementwise`, Muon, Shampoo and the natural gradient in
:mod:`nlaverify.optim.muon`; :func:`apply_updates` is here.
"""

from __future__ import annotations

from nlaverify.backends.base import Namespace
from nlaverify.optim.base import (  # noqa: F401  (re-exported)
    LearningRate,
    Params,
    Rule,
    State,
    bias_factor,
    check_flag,
    check_hyper,
    check_state,
    check_tree,
    const,
    count_as,
    keep_dtypes,
    learning_rate,
    typed,
    zero_count,
)
from nlaverify.optim.elementwise import (
    adagrad,
    adagrad_direction,
    adam,
    adam_direction,
    adamw,
    bias_correction,
    decoupled_decay,
    ema,
    heavy_ball,
    momentum,
    nesterov_moment,
    nesterov_trace,
    rms_direction,
    rmsprop,
    scale,
    sgd,
)
from nlaverify.optim.muon import (  # noqa: F401  (re-exported)
    muon,
    natural_gradient,
    shampoo,
)


def apply_updates(xp: Namespace, params: Params, updates: Params) -> Params:
    r""":math:`w \leftarrow w + u` per key (optax's ``apply_updates``; the result keeps each
    parameter's dtype)."""
    check_tree("apply_updates", "updates", updates, params)
    if xp.object_arrays:
        return {k: params[k] + updates[k] for k in params}
    return {k: xp.astype(params[k] + updates[k], params[k].dtype) for k in params}


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
