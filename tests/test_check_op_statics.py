"""check_op with a user's static values that must divide a dimension (a review finding):
``group_size`` of Mamba-2's gated norm, ``n_heads`` of the head split, DeepSeek-V3's
``n_group`` at its real sizes. The plan draws sizes that are multiples of the user's value and
validates the statics at the sizes it draws (``shapes=`` applied); before, both used the
op's own smallest sizes, so every real setting was refused."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from nlaverify.check import check_op
from nlaverify.check.report import CheckError

jax.config.update("jax_enable_x64", True)


def gated_norm(group_size):
    def fn(x, z, gamma):
        v = x * jax.nn.silu(z)
        g = v.reshape(*v.shape[:-1], v.shape[-1] // group_size, group_size)
        g = g / jnp.sqrt(jnp.mean(g * g, axis=-1, keepdims=True) + 1e-5)
        return g.reshape(v.shape) * gamma
    return fn


def split(n_heads):
    def fn(X):
        *lead, n, hd = X.shape
        return jnp.moveaxis(X.reshape(*lead, n, n_heads, hd // n_heads), -2, -3)
    return fn


@pytest.mark.parametrize("shapes", [None, {"d": 8}])
def test_a_group_size_the_default_sizes_do_not_divide(shapes) -> None:
    report = check_op(gated_norm(4), "gated_rmsnorm", dtype="float32", static={"group_size": 4},
                      shapes=shapes, hostile=False, examples=3)
    assert report.ok, report
    # the groups matter: a kernel normalising groups of 2 is caught at group_size=4
    assert not check_op(gated_norm(2), "gated_rmsnorm", dtype="float32",
                        static={"group_size": 4}, hostile=False, examples=3).ok


def test_four_heads() -> None:
    assert check_op(split(4), "split_heads", dtype="float32", static={"n_heads": 4},
                    hostile=False, examples=3).ok


def test_deepseek_selection_at_real_sizes() -> None:
    def select(scores, bias):
        sc, E, ng = scores + bias, scores.shape[-1], 4
        gs = jax.lax.top_k(sc.reshape(*sc.shape[:-1], ng, E // ng), 2)[0].sum(-1)
        kept = jax.nn.one_hot(jax.lax.top_k(gs, 2)[1], ng).sum(-2)
        allowed = jnp.repeat(kept, E // ng, axis=-1) > 0
        top = jax.lax.top_k(jnp.where(allowed, sc, -jnp.inf), 4)[1]
        return jax.nn.one_hot(top, E).sum(-2).astype(scores.dtype)

    assert check_op(select, "deepseek_v3_select", dtype="float32", shapes={"E": 16},
                    static={"top_k": 4, "n_group": 4, "topk_group": 2}, hostile=False,
                    examples=2).ok


def test_a_static_the_drawn_sizes_cannot_take_is_still_named() -> None:
    with pytest.raises(CheckError, match="argument 'static'"):
        check_op(gated_norm(4), "gated_rmsnorm", static={"eps": -1.0})
