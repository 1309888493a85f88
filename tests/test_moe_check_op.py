"""Issue 23: ``check_op(fn, "qwen2_moe")`` and ``check_op(fn, "deepseek_v3_moe")`` on a user's
JAX kernel of the MoE blocks (einsum experts over any leading batch axes, the chosen experts
given as the 0/1 ``mask``), float32: the correct kernels pass every row (forward, VJP and
JVP by JAX autodiff of the kernel), and each planted bug fails, on every seed.

The reference is the op of :data:`nlaverify.ops.moe_specs.MOE_OPS` (VJP and JVP proved by
:mod:`nlaverify.identities.moe_routing`), at 30 digits on the kernel's inputs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from nlaverify.check import check_op

jax.config.update("jax_enable_x64", True)

SEEDS = range(3)
DS_BUGS = ("no_routed_scaling", "softmax_for_sigmoid", "no_renormalisation",
           "gated_shared_experts")
QWEN_BUGS = ("renormalised", "ungated_shared_expert", "sigmoid_router", "gate_sign")


def _experts(X, W1, W3, W2):
    h = (jax.nn.silu(jnp.einsum("...nd,edm->...enm", X, W1))
         * jnp.einsum("...nd,edm->...enm", X, W3))
    return jnp.einsum("...enm,emd->...end", h, W2)          # (..., E, n, d)


def _mlp(X, U1, U3, U2):
    return (jax.nn.silu(X @ U1) * (X @ U3)) @ U2


def deepseek_v3_kernel(bug: str | None = None, rho: float = 2.5):
    """DeepSeek-V3's block: sigmoid affinities, gates rho s / (sum_S s + 1e-20), shared
    experts ungated."""
    def fn(X, mask, W_r, W1, W3, W2, U1, U3, U2):
        logits = X @ W_r
        if bug == "softmax_for_sigmoid":
            s = jax.nn.softmax(logits, axis=-1)
        else:
            s = jax.nn.sigmoid(logits)
        a = jnp.where(mask > 0, s, 0.0)
        if bug == "no_renormalisation":
            g = rho * a
        else:
            g = (1.0 if bug == "no_routed_scaling" else rho) * a / (
                a.sum(-1, keepdims=True) + 1e-20)
        shared = _mlp(X, U1, U3, U2)
        if bug == "gated_shared_experts":
            shared = jax.nn.sigmoid(X.sum(-1, keepdims=True)) * shared
        return jnp.einsum("...ne,...end->...nd", g, _experts(X, W1, W3, W2)) + shared

    fn.__name__ = f"deepseek_v3_{bug or 'correct'}"
    return fn


def qwen2_moe_kernel(bug: str | None = None):
    """Qwen2-MoE's block (``norm_topk_prob=False``): the chosen entries of the softmax, a
    sigmoid-gated shared expert."""
    def fn(X, mask, W_r, W1, W3, W2, U1, U3, U2, w_sg):
        logits = X @ W_r
        p = jax.nn.sigmoid(logits) if bug == "sigmoid_router" else jax.nn.softmax(logits, -1)
        g = jnp.where(mask > 0, p, 0.0)
        if bug == "renormalised":
            g = g / g.sum(-1, keepdims=True)
        z = X @ w_sg
        gate = 1.0 if bug == "ungated_shared_expert" else jax.nn.sigmoid(
            -z if bug == "gate_sign" else z)[..., None]
        return (jnp.einsum("...ne,...end->...nd", g, _experts(X, W1, W3, W2))
                + gate * _mlp(X, U1, U3, U2))

    fn.__name__ = f"qwen2_moe_{bug or 'correct'}"
    return fn


#: E >= 3: the fixed routing chooses two experts a token, so one is left out and a wrongly
#: renormalised gate differs (at E = 2 every expert is chosen and renormalising is exact)
SHAPES = {"n": (1, 3), "d": (1, 3), "E": (3, 4), "m": (1, 2), "f": (1, 2)}


def _check(fn, op: str, seed: int):
    return check_op(fn, op, dtype="float32", seed=seed, examples=3, hostile=False,
                    shapes=SHAPES)


@pytest.mark.parametrize("op, kernel", [("deepseek_v3_moe", deepseek_v3_kernel),
                                        ("qwen2_moe", qwen2_moe_kernel)])
def test_correct_kernel_passes_every_row(op: str, kernel) -> None:
    for seed in SEEDS:
        report = _check(kernel(), op, seed)
        assert report.ok, (seed, str(report))
        checked = {r.check.split(" (")[0] for r in report.rows if r.verdict == "pass"}
        assert {"forward", "jvp"} <= checked and any(c.startswith("vjp") for c in checked)


@pytest.mark.parametrize("bug", DS_BUGS)
def test_deepseek_v3_planted_bug_fails(bug: str) -> None:
    for seed in SEEDS:
        report = _check(deepseek_v3_kernel(bug), "deepseek_v3_moe", seed)
        assert report.failures, (bug, seed, str(report))


@pytest.mark.parametrize("bug", QWEN_BUGS)
def test_qwen2_moe_planted_bug_fails(bug: str) -> None:
    for seed in SEEDS:
        report = _check(qwen2_moe_kernel(bug), "qwen2_moe", seed)
        assert report.failures, (bug, seed, str(report))
