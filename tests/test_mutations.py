"""A wrong VJP must be caught: by the exact proof and by the numeric checks.

Two kinds of planted errors: a sign flip of one cotangent (every op), and a
dropped term in the formula (the ops whose VJP has more than one term).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from nlaverify.crosscheck import check_case, default_case
from nlaverify.ops import activations, loss, norms, sdpa, softmaxes
from nlaverify.ops.registry import OPS, OpSpec
from nlaverify.symbolic.vjp_proof import prove_vjp


def _sign_flip(spec: OpSpec, which: int) -> OpSpec:
    def vjp(xp, G, *args, **static):
        out = list(spec.vjp(xp, G, *args, **static))
        out[which] = -out[which]
        return tuple(out)

    return dataclasses.replace(spec, vjp=vjp)


def _drop_term(spec: OpSpec, vjp) -> OpSpec:
    return dataclasses.replace(spec, vjp=vjp)


def _softmax_no_subtraction(xp, G, Z, axis=-1, masked_row="zero"):
    return (softmaxes.softmax(xp, Z, axis, masked_row) * G,)


def _layernorm_no_xhat_term(xp, G, x, gamma, beta, eps):
    _, dg, db = norms.layernorm_vjp(xp, G, x, gamma, beta, eps)
    d = x.shape[-1]
    c = x - xp.sum(x, axis=-1, keepdims=True) * xp.rational(1, d)
    sigma = xp.sqrt(xp.sum(c * c, axis=-1, keepdims=True) * xp.rational(1, d) + eps)
    gx = G * gamma
    return (gx - xp.sum(gx, axis=-1, keepdims=True) * xp.rational(1, d)) / sigma, dg, db


def _rmsnorm_no_projection(xp, G, x, gamma, eps):
    _, dg = norms.rmsnorm_vjp(xp, G, x, gamma, eps)
    r = xp.sqrt(xp.sum(x * x, axis=-1, keepdims=True) * xp.rational(1, x.shape[-1]) + eps)
    return G * gamma / r, dg


def _attention_no_scale(xp, G, Q, K, V, causal=False, scale=None):
    dQ, dK, dV = sdpa.attention_vjp(xp, G, Q, K, V, causal, scale=scale)
    root = xp.const_sqrt(Q.shape[-1])
    return dQ * root, dK, dV


def _gelu_no_density(xp, G, x):
    return (G * (1 + xp.erf(x / xp.const_sqrt(2))) * xp.rational(1, 2),)


def _cross_entropy_no_mean(xp, G, Z, t, ignore_index=loss.IGNORE_INDEX, reduction="mean"):
    (dZ,) = loss.cross_entropy_vjp(xp, G, Z, t, ignore_index, reduction)
    return (dZ * Z.shape[0],)


def _silu_no_second_term(xp, G, x):
    return (G * activations.sigmoid(xp, x),)


DROPPED = {
    "softmax": _softmax_no_subtraction,
    "layernorm": _layernorm_no_xhat_term,
    "rmsnorm": _rmsnorm_no_projection,
    "attention": _attention_no_scale,
    "gelu_erf": _gelu_no_density,
    "cross_entropy": _cross_entropy_no_mean,
    "silu": _silu_no_second_term,
}


def _numeric_catches(spec: OpSpec) -> bool:
    case = default_case(spec, seed=1)
    rows = check_case(case, ("numpy", "jax", "mpmath"), digits=30)
    by_check = {r.check.split(" (")[0].split(" vs ")[-1]: r.ok for r in rows}
    # JAX autodiff and the finite difference are independent of the VJP formula
    return not by_check["jax.vjp"] and not rows[-1].ok


SIGN_FLIPS = [(op, k) for op, s in OPS.items() if s.differentiable
              for k in range(len(s.real_args))]


@pytest.mark.parametrize(("op", "which"), SIGN_FLIPS)
def test_sign_flip_is_caught(op: str, which: int) -> None:
    # every cotangent of every op: dQ, dK and dV of attention, the router's of MoE, ...
    mutant = _sign_flip(OPS[op], which)
    assert prove_vjp(mutant).verdict == "failed"
    assert _numeric_catches(mutant)


@pytest.mark.parametrize("op", list(DROPPED))
def test_dropped_term_is_caught(op: str) -> None:
    mutant = _drop_term(OPS[op], DROPPED[op])
    assert prove_vjp(mutant).verdict == "failed"
    assert _numeric_catches(mutant)


def test_unmutated_pass_the_same_checks() -> None:
    # the control: the same machinery accepts the real VJPs
    for op in DROPPED:
        assert prove_vjp(OPS[op]).verdict == "proved"
        case = default_case(OPS[op], seed=1)
        assert all(r.ok for r in check_case(case, ("numpy", "jax", "mpmath"), digits=30))
    assert np.isfinite(0.0)
