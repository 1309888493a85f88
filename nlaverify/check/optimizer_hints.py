r"""What a failing ``check_optimizer`` run says about the bug: the classic mistakes of Adam
and AdamW (Baggag & Saad §2.4), run on the user's own trajectory, and the one whose update
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

__all__ = ["ADAM_VARIANTS", "adam_variant_updates", "optimizer_diagnosis"]

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
    (:data:`ADAM_VARIANTS`; ``"none"``: the rule itself) for ``grads`` :math:`g_t`, the decay
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


def optimizer_diagnosis(rule: str, hyper: Mapping[str, Any], step: int,
                        grads: Sequence[Mapping[str, np.ndarray]],
                        trajectory: Sequence[Mapping[str, np.ndarray]], dtype: str,
                        model_of: Any) -> str | None:
    """The one-line diagnosis of a run that failed (first at ``step``): the variant whose
    updates equal the user's, :math:`w_t - w_{t-1}` from ``trajectory`` (the user's
    parameters, ``trajectory[0]`` the initial ones), within the update rows' bound at every
    step and leaf; ``None`` when none does, or for a rule other than Adam/AdamW, or a
    learning-rate schedule. ``model_of(key, shape)`` gives the error model of a leaf. In a
    narrow dtype distinct mistakes can agree within the bound (a doubled learning rate and
    the first moment's correction by beta2 at betas (0.9, 0.95) differ by 10 % over five
    steps): the line says "within the bound", which is all it claims."""
    from nlaverify.check.optimizer_bound import update_row

    if rule not in ("adam", "adamw") or step < 1 or len(trajectory) <= step:
        return None
    if not isinstance(hyper.get("lr"), int | float):
        return None
    h = dict(hyper)
    if rule == "adam":
        h["weight_decay"] = 0.0
    for variant, what in ADAM_VARIANTS:
        if rule == "adam" and variant in ("coupled", "no_decay"):
            continue
        steps = len(trajectory) - 1  # every step the user's run made, not only the first
        us = adam_variant_updates(variant, h, grads[:steps], trajectory[:steps])
        worst, agrees = 0.0, True
        for s in range(1, steps + 1):
            for k, u in us[s - 1].items():
                w0, w1 = trajectory[s - 1][k], trajectory[s][k]
                row = update_row("", s, k, w0, w1, u, dtype, model_of(k, np.shape(u)))
                if row.verdict != "pass":
                    agrees = False
                    break
                worst = max(worst, row.ratio if math.isfinite(row.ratio) else math.inf)
            if not agrees:
                break
        if agrees:
            return (f"diagnosis: your update equals {rule} with {what} at every step "
                    f"(worst ratio {worst:.2g} against that variant, within the update rows' "
                    f"bound for {dtype})")
    return None
