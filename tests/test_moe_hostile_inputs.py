"""Hostile static arguments and masks to the MoE ops (nlaverify.ops.moe, moe_routing,
moe_shared): a float or bool ``top_k``/``n_group``/``topk_group`` is not truncated, a mask
of other values than 0/1 is not read as one, a non-finite or non-positive
``routed_scaling_factor`` is not a silent NaN: each is refused naming the argument."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.ops import moe
from nlaverify.ops import moe_routing as mr
from nlaverify.ops import moe_shared as ms

jax.config.update("jax_enable_x64", True)
NP = get_namespace("numpy")
XP = get_namespace("jax")
S = np.random.default_rng(0).normal(size=(2, 8))
MASK = np.zeros((2, 8))
MASK[:, :2] = 1


@pytest.mark.parametrize("top_k", [2.5, 2.0, True, "2", None])
def test_top_k_must_be_an_int(top_k) -> None:
    with pytest.raises(ArgumentError, match=r"topk_mask: argument 'top_k': expected an integer"):
        mr.qwen_moe_router(NP, S, top_k=top_k)
    with pytest.raises(ArgumentError, match=r"topk_mask: argument 'top_k'"):
        moe.topk_mask(NP, S, top_k)
    with pytest.raises(ArgumentError, match=r"group_limited_topk_mask: argument 'top_k'"):
        mr.deepseek_v3_select(NP, S, S[0], top_k, 4, 2)
    with pytest.raises(ArgumentError, match=r"masked_topk_mask: argument 'top_k'"):
        mr.masked_topk_mask(NP, S, np.ones_like(S), top_k)


@pytest.mark.parametrize(("name", "args"), [("n_group", (2, 4.0, 2)), ("n_group", (2, True, 1)),
                                             ("topk_group", (2, 4, 2.5)),
                                             ("topk_group", (2, 4, True))])
def test_group_arguments_must_be_ints(name, args) -> None:
    with pytest.raises(ArgumentError, match=rf"group_limited_topk_mask: argument '{name}'"):
        mr.deepseek_v3_select(NP, S, S[0], *args)


def test_top_k_range_names_the_argument_and_numpy_ints_pass() -> None:
    for k in (0, 9):
        with pytest.raises(ShapeError, match=r"topk_mask: argument 'top_k': expected 1 <= "
                                             r"top_k <= E=8"):
            mr.qwen_moe_router(NP, S, top_k=k)
    assert np.array_equal(moe.topk_mask(NP, S, np.int64(2)), moe.topk_mask(NP, S, 2))
    assert np.array_equal(mr.deepseek_v3_select(NP, S, S[0], np.int32(2), 4, 2),
                          mr.deepseek_v3_select(NP, S, S[0], 2, 4, 2))


@pytest.mark.parametrize("scale", [0.5, 2.0, -1.0])
def test_masks_other_than_0_1_are_refused(scale) -> None:
    bad = scale * MASK
    for op, call in (("deepseek_v3_gates", lambda m: mr.deepseek_v3_gates(NP, S, m)),
                     ("deepseek_v3_gates_vjp",
                      lambda m: mr.deepseek_v3_gates_vjp(NP, np.ones_like(S), S, m)),
                     ("deepseek_v3_gates_jvp",
                      lambda m: mr.deepseek_v3_gates_jvp(NP, (np.ones_like(S),), S, m))):
        with pytest.raises(ArgumentError, match=rf"{op}: argument 'mask': expected a 0/1 mask, "
                                                rf"got the value {scale}"):
            call(bad)
    X = np.random.default_rng(1).normal(size=(2, 4))
    W = [np.ones((4, 8)), *(np.ones((8, 4, 1)),) * 2, np.ones((8, 1, 4)),
         *(np.ones((4, 2)),) * 2, np.ones((2, 4))]
    with pytest.raises(ArgumentError, match=r"deepseek_v3_moe: argument 'mask'"):
        ms.deepseek_v3_moe(NP, X, bad, *W)
    with pytest.raises(ArgumentError, match=r"moe: argument 'mask'"):
        moe.moe(NP, X, S, bad, np.ones((8, 4, 3)), np.ones((8, 3, 4)))


def test_valid_masks_pass_and_traced_masks_are_not_inspected() -> None:
    """0/1 masks of any dtype pass; under ``jax.jit`` the mask is a tracer: no check."""
    ref = mr.deepseek_v3_gates(NP, S, MASK)
    assert np.array_equal(mr.deepseek_v3_gates(NP, S, MASK.astype(bool)), ref)
    f = jax.jit(lambda s, m: mr.deepseek_v3_gates(XP, s, m))
    assert np.allclose(np.asarray(f(jnp.asarray(S), jnp.asarray(MASK))), ref)


@pytest.mark.parametrize("rho", [float("nan"), float("inf"), 0.0, -2.5, True])
def test_routed_scaling_factor_must_be_finite_and_positive(rho) -> None:
    for op, call in (("deepseek_v3_gates",
                      lambda: mr.deepseek_v3_gates(NP, S, MASK, routed_scaling_factor=rho)),
                     ("deepseek_v3_gates_vjp",
                      lambda: mr.deepseek_v3_gates_vjp(NP, np.ones_like(S), S, MASK,
                                                       routed_scaling_factor=rho)),
                     ("deepseek_v3_gates", lambda: mr.deepseek_v3_route(
                         NP, S, S[0], top_k=2, n_group=4, topk_group=2,
                         routed_scaling_factor=rho))):
        with pytest.raises(ArgumentError, match=rf"{op}: argument 'routed_scaling_factor': "
                                                r"expected a finite number > 0"):
            call()
