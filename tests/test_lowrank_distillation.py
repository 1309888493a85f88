r"""Distillation in :mod:`nlaverify.lowrank` (Baggag & Saad §4.1): the hand gradient against
``jax.grad``, the large-T limit, a masked teacher class and the forms of the temperature."""

from __future__ import annotations

import numpy as np
import pytest
from _lowrank_helpers import NP

from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError
from nlaverify.lowrank import distill
from nlaverify.tolerance import tolerance

# -- distillation --------------------------------------------------------------------------


@pytest.mark.parametrize(("dtype", "T"), [(np.float64, 0.5), (np.float32, 4.0)])
def test_distillation_gradient_matches_jax_grad(dtype: type, T: float) -> None:
    import jax

    jx = get_namespace("jax")
    rng = np.random.default_rng(8)
    zs, zt = (jx.asarray(rng.standard_normal((5, 7)).astype(dtype)) for _ in range(2))
    auto = jax.grad(lambda z: distill.distillation_loss(jx, z, zt, T))(zs)
    hand = distill.distillation_grad(jx, zs, zt, T)
    cond = max(1.0, 1.0 / T) ** 2 * T  # the logits enter as z/T; the loss carries T^2
    assert tolerance(dtype, size=7, depth=3, condition=cond).compare(hand, auto).ok


def test_distillation_tends_to_logit_matching() -> None:
    r"""The gap to the limit is :math:`O(1/T)`: halving it at every doubling of :math:`T`."""
    rng = np.random.default_rng(9)
    zs, zt = rng.standard_normal((4, 6)), rng.standard_normal((4, 6))
    limit = distill.logit_matching_grad(NP, zs, zt)
    gaps = [float(np.abs(distill.distillation_grad(NP, zs, zt, T) - limit).max())
            for T in (10.0, 20.0, 40.0, 80.0)]
    ratios = np.array(gaps[1:]) / np.array(gaps[:-1])
    assert np.all(np.abs(ratios - 0.5) < 0.05), ratios
    loss_gap = abs(distill.distillation_loss(NP, zs, zt, 1e3) - distill.logit_matching_loss(
        NP, zs, zt))
    assert loss_gap < 1e-2 * distill.logit_matching_loss(NP, zs, zt)
    # KL(p || p) = 0 up to the rounding of T^2 times a sum of V log-ratios
    tol = tolerance("float64", size=zs.shape[-1], depth=3)
    assert distill.distillation_loss(NP, zs, zs, 2.0) == pytest.approx(0.0, abs=tol.rtol)


def test_distillation_with_a_masked_teacher_class() -> None:
    r"""A teacher logit :math:`-\infty` (masked vocabulary) has :math:`p_t = 0` and
    contributes :math:`0\log 0 = 0`: the loss is the KL over the live classes (computed here
    from the renormalised teacher), not NaN; the gradient stays finite and equals
    ``jax.grad``."""
    import jax

    zs = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
    zt = np.array([[0.0, -np.inf, 1.0], [1.0, 2.0, -np.inf]])
    T = 2.0
    want = 0.0
    for s_row, t_row in zip(zs, zt, strict=True):
        live = np.isfinite(t_row)
        pt = np.exp(t_row[live] / T) / np.exp(t_row[live] / T).sum()
        log_ps = s_row / T - np.log(np.exp(s_row / T).sum())
        want += float(np.sum(pt * (np.log(pt) - log_ps[live])))
    want *= T * T / zs.shape[0]
    tol = tolerance(np.float64, size=3, depth=3)
    assert tol.compare(distill.distillation_loss(NP, zs, zt, T), want).ok
    assert tol.compare(distill.distillation_loss(NP, zs[:1], zt[:1], T), 1.5798520834428023).ok
    jx = get_namespace("jax")
    auto = jax.grad(lambda z: distill.distillation_loss(jx, z, jx.asarray(zt), T))(
        jx.asarray(zs))
    hand = distill.distillation_grad(jx, jx.asarray(zs), jx.asarray(zt), T)
    assert np.all(np.isfinite(np.asarray(auto))) and tol.compare(hand, auto).ok


def test_distillation_temperature_forms() -> None:
    """T as a 0-d NumPy or JAX array is accepted (the same value); inf, nan, a vector or
    a string are refused."""
    jx = get_namespace("jax")
    rng = np.random.default_rng(14)
    zs, zt = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    ref = distill.distillation_loss(NP, zs, zt, 2.0)
    tol = tolerance(np.float64, size=4, depth=3)
    assert tol.compare(distill.distillation_loss(NP, zs, zt, np.array(2.0)), ref).ok
    assert tol.compare(distill.distillation_loss(jx, jx.asarray(zs), jx.asarray(zt),
                                                 jx.asarray(2.0)), ref).ok
    for T in (np.inf, np.nan, -np.inf, np.array([2.0]), "2", True, np.array(-1.0)):
        with pytest.raises(ArgumentError, match="'T'"):
            distill.distillation_loss(NP, zs, zt, T)

