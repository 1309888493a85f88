r"""What a failing ``check_optimizer`` run says about the bug: the classic mistakes of Adam
and AdamW (Baggag & Saad §2.4) and of Muon (§5.5: no normalisation before Newton–Schulz),
run on the user's own trajectory, and the one whose update
equals the user's at the failing step within the update rows' bound.

The variants: the second moment's bias correction by :math:`\beta_1` (update
:math:`\sqrt{(1-\beta_1^t)/(1-\beta_2^t)}` times too large: 1.41 at betas (0.9, 0.95)), the
first moment's by :math:`\beta_2`, no bias correction, the decay added to the gradient (L2:
``torch.optim.Adam(weight_decay=...)``, not AdamW's decoupled decay), :math:`\epsilon`
inside the square root, no weight decay. Each is a short recurrence on float64 NumPy, fed
the same gradients and, at each step, the user's parameters (so that a decay acts on what
the user's weights are).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["ADAM_VARIANTS", "RULE_VARIANTS", "adam_variant_updates", "optimizer_diagnosis",
           "rule_variant_updates"]

#: the variants of Adam/AdamW: (key, what it does)
ADAM_VARIANTS: tuple[tuple[str, str], ...] = (
    ("beta1_in_v", "the second moment's bias correction by beta1 (1 - beta1^t for 1 - beta2^t)"),
    ("beta2_in_m", "the first moment's bias correction by beta2"),
    ("no_bias_correction", "no bias correction of either moment"),
    ("coupled", "the decay added to the gradient (L2, torch.optim.Adam's weight_decay), not "
                "decoupled (AdamW)"),
    ("eps_in_root", "eps inside the square root"),
    ("no_decay", "no weight decay"),
)

_DEFAULTS = {"b1": 0.9, "b2": 0.999, "eps": 1e-8, "weight_decay": 1e-4}


def adam_variant_updates(variant: str, hyper: Mapping[str, Any],
                         grads: Sequence[Mapping[str, np.ndarray]],
                         params: Sequence[Mapping[str, np.ndarray]]
                         ) -> list[dict[str, np.ndarray]]:
    r"""The updates :math:`u_1, \dots, u_T` of Adam/AdamW with the mistake ``variant``
    (:data:`ADAM_VARIANTS`) for ``grads`` :math:`g_t`, the decay
    acting on ``params[t-1]`` (:math:`w_{t-1}`):

    .. math:: m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t,\quad v_t = \beta_2 v_{t-1} +
              (1-\beta_2) g_t^2,\quad u_t = -\eta\Bigl(\frac{m_t/(1-\beta_1^t)}
              {\sqrt{v_t/(1-\beta_2^t)} + \epsilon} + \lambda w_{t-1}\Bigr)."""
    h = {**_DEFAULTS, **hyper}
    lr, b1, b2, eps, wd = (float(h[k]) for k in ("lr", "b1", "b2", "eps", "weight_decay"))
    m = {k: np.zeros_like(np.asarray(w, np.float64)) for k, w in params[0].items()}
    v = {k: np.zeros_like(x) for k, x in m.items()}
    out = []
    for t, (g, w) in enumerate(zip(grads, params, strict=False), start=1):
        u = {}
        for k in m:
            wk = np.asarray(w[k], np.float64)
            gk = np.asarray(g[k], np.float64) + (wd * wk if variant == "coupled" else 0.0)
            m[k] = b1 * m[k] + (1 - b1) * gk
            v[k] = b2 * v[k] + (1 - b2) * gk * gk
            c1 = 1.0 if variant == "no_bias_correction" else 1 - (b2 if variant == "beta2_in_m"
                                                                   else b1) ** t
            c2 = 1.0 if variant == "no_bias_correction" else 1 - (b1 if variant == "beta1_in_v"
                                                                   else b2) ** t
            mh, vh = m[k] / c1, v[k] / c2
            denom = np.sqrt(vh + eps) if variant == "eps_in_root" else np.sqrt(vh) + eps
            decay = 0.0 if variant in ("coupled", "no_decay") else wd * wk
            u[k] = -lr * (mh / denom + decay)
        out.append(u)
    return out


#: the classic mistakes of other rules, as options of the reference rule: (what it does,
#: the rule's keyword arguments that make it)
RULE_VARIANTS: dict[str, tuple[tuple[str, dict[str, Any]], ...]] = {
    "muon": (("no Frobenius normalisation before Newton-Schulz (its polynomials converge "
              "only for singular values up to about 1)", {"normalize": False}),),
}


def rule_variant_updates(rule: str, hyper: Mapping[str, Any], options: Mapping[str, Any],
                         grads: Sequence[Mapping[str, np.ndarray]],
                         params: Sequence[Mapping[str, np.ndarray]]
                         ) -> list[dict[str, np.ndarray]]:
    """The updates of the reference ``rule`` built with ``options`` (a mistake of
    :data:`RULE_VARIANTS`) for ``grads``, each step at the user's parameters ``params[t-1]``
    (its state carried along), in float64 NumPy."""
    from nlaverify.backends import get_namespace
    from nlaverify.check.optimizer_run import _rules

    xp = get_namespace("numpy")
    built = _rules()[rule](**{**hyper, **options})
    state = built.init(xp, {k: np.asarray(v, np.float64) for k, v in params[0].items()})
    out = []
    for g, w in zip(grads, params, strict=False):
        u, state = built.update(xp, {k: np.asarray(v, np.float64) for k, v in g.items()},
                                state, {k: np.asarray(v, np.float64) for k, v in w.items()})
        out.append({k: np.asarray(v, np.float64) for k, v in u.items()})
    return out


def optimizer_diagnosis(rule: str, hyper: Mapping[str, Any], step: int,
                        grads: Sequence[Mapping[str, np.ndarray]],
                        trajectory: Sequence[Mapping[str, np.ndarray]], dtype: str,
                        model_of: Any,
                        reference: Sequence[Mapping[str, np.ndarray]] = ()) -> str | None:
    """The one-line diagnosis of a run that failed (first at ``step``): the variant whose
    updates equal the user's, :math:`w_t - w_{t-1}` from ``trajectory`` (the user's
    parameters, ``trajectory[0]`` the initial ones), within the update rows' bound at every
    step and leaf; ``None`` when none does, or for a rule without variants, or a
    learning-rate schedule. ``model_of(key, shape)`` gives the error model of a leaf;
    ``reference`` the reference rule's updates at the user's parameters, one per step (the
    updates ``check_optimizer`` compares with: the plainest other explanation, those times
    one factor, is fitted to them). In a
    narrow dtype distinct mistakes can agree within the bound (a doubled learning rate and
    the first moment's correction by beta2 at betas (0.9, 0.95) differ by 10 % over five
    steps): the line says "within the bound", which is all it claims."""
    from nlaverify.check.optimizer_bound import update_row

    if rule not in ("adam", "adamw", *RULE_VARIANTS) or step < 1 or len(trajectory) <= step:
        return None
    if not isinstance(hyper.get("lr"), int | float):
        return None
    h = dict(hyper)
    if rule == "adam":
        h["weight_decay"] = 0.0
    steps = len(trajectory) - 1  # every step the user's run made, not only the first

    def agrees(us: list[dict[str, np.ndarray]]) -> float | None:
        """The worst ratio of the user's updates against ``us`` at every step and leaf, or
        ``None`` when one row fails."""
        worst = 0.0
        for s in range(1, steps + 1):
            for k, u in us[s - 1].items():
                row = update_row("", s, k, trajectory[s - 1][k], trajectory[s][k], u, dtype,
                                 model_of(k, np.shape(u)))
                if row.verdict != "pass":
                    return None
                worst = max(worst, row.ratio if math.isfinite(row.ratio) else math.inf)
        return worst

    # the plainest other explanation: the rule's own updates times one factor (a learning
    # rate or a scale off); where it agrees too, the dtype cannot tell the two apart
    ref = list(reference)[:steps]
    if len(ref) < steps:
        return None
    # the least-squares factor of the user's updates against the rule's, per step and over
    # all steps; one factor at every step: the per-step ones agree to 2 % (a mistake whose
    # factor drifts, a bias correction off by one step, is not a learning rate)
    nums = [sum(float(np.sum((np.asarray(trajectory[s][k]) - np.asarray(trajectory[s - 1][k]))
                             * u)) for k, u in ref[s - 1].items()) for s in range(1, steps + 1)]
    dens = [sum(float(np.sum(u * u)) for u in ref[s - 1].values()) for s in range(1, steps + 1)]
    alpha = sum(nums) / sum(dens) if sum(dens) > 0 else 1.0
    scaled = [{k: alpha * u for k, u in us.items()} for us in ref]
    per_step = [n / d for n, d in zip(nums, dens, strict=True) if d > 0]
    steady = bool(per_step) and max(abs(a - alpha) for a in per_step) <= 0.02 * abs(alpha)
    lr_fits = abs(alpha - 1) > 1e-3 and steady and agrees(scaled) is not None
    candidates = ([(what, lambda opts=opts: rule_variant_updates(rule, h, opts, grads[:steps],
                                                                  trajectory[:steps]))
                   for what, opts in RULE_VARIANTS.get(rule, ())] +
                  [(what, lambda variant=variant: adam_variant_updates(
                      variant, h, grads[:steps], trajectory[:steps]))
                   for variant, what in ADAM_VARIANTS
                   if rule in ("adam", "adamw")
                   and not (rule == "adam" and variant in ("coupled", "no_decay"))])
    for what, updates in candidates:
        try:
            with np.errstate(all="ignore"):  # a variant may overflow, as the kernel did
                us = updates()
        except Exception:  # a variant that cannot run on these parameters names nothing
            continue
        worst = agrees(us)
        if worst is not None:
            alternative = (f", or equally {rule} with the learning rate x {alpha:.3g} "
                           f"({dtype} cannot tell the two apart over {steps} steps)"
                           if lr_fits else "")
            return (f"diagnosis: your update equals {rule} with {what} at every step "
                    f"(worst ratio {worst:.2g} against that variant, within the update rows' "
                    f"bound for {dtype}){alternative}")
    if lr_fits:
        return (f"diagnosis: your updates equal the reference's times {alpha:.3g} at every "
                f"step (a learning rate or an update scale off by that factor)")
    return None
