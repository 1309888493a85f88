"""The ``optimizers`` identities (:mod:`nlaverify.identities.optimizers`): each derivation is
"proved", fast, and "failed" once a formula of the running rules is broken."""

from __future__ import annotations

from fractions import Fraction

import pytest

from nlaverify.identities import optimizers as O
from nlaverify.optim import elementwise as E
from nlaverify.optim import muon as _mu
from nlaverify.optim import newton_schulz as _ns
from nlaverify.optim import rules as R

DERIVATIONS = {
    "adam_bias_correction": O.derive_adam_bias_correction,
    "adamw_decay_is_not_l2": O.derive_adamw_decay,
    "adagrad_is_diagonal_shampoo": O.derive_adagrad_shampoo,
    "momentum_moving_sum_and_nesterov": O.derive_momentum,
    "muon_first_step_is_polar": O.derive_muon_polar,
}


def test_registered_in_family() -> None:
    from nlaverify.identities.core import _REGISTRY

    for name in DERIVATIONS:
        assert _REGISTRY[name].family == "optimizers"
        assert _REGISTRY[name].derive is DERIVATIONS[name]


_STEP, _MOMENT = _ns.newton_schulz_step, _mu.muon_moment


def _bias_off_by_one(xp, m, beta, count):
    return m / (1 - R.const(xp, beta) ** (R.count_as(xp, count, m) + 1))


def _ema_swapped(xp, m, g, beta):
    return R.const(xp, beta) * g + (1 - R.const(xp, beta)) * m


@pytest.mark.parametrize("target, attr, bad, names", [
    (E, "bias_correction", _bias_off_by_one, ["adam_bias_correction"]),
    (E, "ema", _ema_swapped, ["adam_bias_correction", "momentum_moving_sum_and_nesterov"]),
    (E, "decoupled_decay", lambda xp, d, w, wd: d - wd * w, ["adamw_decay_is_not_l2"]),
    (E, "adagrad_direction", lambda xp, s, g, eps: g / (s + eps),
     ["adagrad_is_diagonal_shampoo"]),
    (E, "nesterov_trace", lambda xp, v, g, beta: v, ["momentum_moving_sum_and_nesterov"]),
    (E, "heavy_ball", lambda xp, v, g, beta: g + v, ["momentum_moving_sum_and_nesterov"]),
    (_mu, "shape_scale", lambda xp, shape, scaling: xp.const_sqrt(max(shape), shape[-1]),
     ["muon_first_step_is_polar"]),  # Jordan's scale where optax's is claimed
    (_ns, "newton_schulz_step", lambda xp, X, c: _STEP(xp, X, (c[0] + Fraction(1, 1000),
                                                                *c[1:])),
     ["muon_first_step_is_polar"]),  # a wrong coefficient
    (_mu, "muon_moment", lambda xp, m, g, *a, **k: -_MOMENT(xp, m, g, *a, **k),
     ["muon_first_step_is_polar"]),  # a negative multiple of the moment
], ids=lambda v: v if isinstance(v, str) else "")
def test_planted_bug_fails(monkeypatch, target, attr, bad, names) -> None:
    monkeypatch.setattr(target, attr, bad)
    if target is E:  # the rules run it from elementwise, the derivations call it via rules
        monkeypatch.setattr(R, attr, bad)
    for name in names:
        assert DERIVATIONS[name]().verdict == "failed", name
