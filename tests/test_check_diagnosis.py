"""The diagnosis line (issue 35, item 1): on a failing check, the classic mistakes of the
op (nlaverify.ops.variants) are evaluated on the same case, and the one the kernel's output
equals within the same bound is named; an unrelated bug gets no diagnosis (never a claim
outside the bound)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from _check_op_kernels import layernorm_function  # noqa: E402

from nlaverify.check import check_op  # noqa: E402


def rms(x, g, *, mean=True, eps_inside=True):
    ms = (x * x).mean(-1, keepdim=True) if mean else (x * x).sum(-1, keepdim=True)
    return g * x / ((ms + 1e-5).sqrt() if eps_inside else ms.sqrt() + 1e-5)


def ln(x, g, b, *, unbiased=False):
    c = x - x.mean(-1, keepdim=True)
    return g * c / (c.var(-1, unbiased=unbiased, keepdim=True) + 1e-5).sqrt() + b


def causal(offset):
    def attn(Q, K, V):
        n = Q.shape[-2]
        S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
        i = torch.arange(n)
        return torch.softmax(S.masked_fill(i[None, :] > i[:, None] + offset, -math.inf),
                             -1) @ V

    return attn


CASES = [
    # (kernel, op, the words of its diagnosis)
    (lambda x, g: rms(x, g, mean=False), "rmsnorm", "the sum of squares for their mean"),
    (lambda x, g: rms(x, g, eps_inside=False), "rmsnorm", "eps outside the square root"),
    (lambda x, g, b: ln(x, g, b, unbiased=True), "layernorm", "the unbiased variance"),
    (causal(1), "causal_attention", "a mask that sees the next token"),
    (lambda Z: torch.exp(Z) / torch.exp(Z).sum(-1, keepdim=True), "softmax", "no max shift"),
    (lambda x: torch.nn.functional.gelu(x, approximate="tanh"), "gelu_erf",
     "GELU's tanh approximation"),
    (lambda X: X.repeat(*([1] * (X.ndim - 3)), 2, 1, 1), "repeat_kv", "tile for repeat"),
    (lambda a, b: torch.nn.functional.silu(b) * a, "swiglu", "SiLU on the wrong branch"),
]


@pytest.mark.parametrize("kernel, op, words", CASES, ids=[c[1] + ": " + c[2] for c in CASES])
def test_the_planted_bug_is_named(kernel, op, words) -> None:
    report = check_op(kernel, op, dtype="float32", framework="torch")
    assert report.failures, report
    diagnosis = [n for n in report.notes if n.startswith("diagnosis:")]
    assert len(diagnosis) == 1 and words in diagnosis[0], report.notes
    assert "(error " in diagnosis[0] and ", bound " in diagnosis[0]


def mad_layernorm(x, g, b):  # the mean absolute deviation for the standard deviation
    c = x - x.mean(-1, keepdim=True)
    return g * c / (c.abs().mean(-1, keepdim=True) + 1e-5) + b


@pytest.mark.parametrize("kernel, op", [
    (lambda x, g: 1.5 * rms(x, g), "rmsnorm"),  # a wrong gain: no classic mistake
    (lambda x, g, b: ln(x, g, b) + 0.1, "layernorm"),
    (lambda x: torch.nn.functional.gelu(x) * 1.01, "gelu_erf"),
    # the review's wrong names: on the shrunk case (n = 2, d = 1 or 2) these equal a
    # classic mistake; a second case at the top of the drawn sizes tells them apart
    (lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v),
     "causal_attention"),  # the mask forgotten, not off by one
    (lambda x, g: x / (x.abs().mean(-1, keepdim=True) + 1e-5) * g, "rmsnorm"),
    (mad_layernorm, "layernorm"),
], ids=["rmsnorm x 1.5", "layernorm + 0.1", "gelu x 1.01", "no causal mask",
        "rmsnorm by mean |x|", "layernorm by mean |x - mu|"])
def test_an_unrelated_bug_gets_no_diagnosis(kernel, op) -> None:
    report = check_op(kernel, op, dtype="float32", framework="torch")
    assert report.failures, report
    assert not [n for n in report.notes if n.startswith("diagnosis:")], report.notes


def test_a_backward_bug_gets_no_forward_diagnosis() -> None:
    """The forward is right (only the VJP is wrong): no forward variant is claimed."""
    class Bad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.nn.functional.silu(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * torch.sigmoid(x)  # the x s (1 - s) term dropped

    report = check_op(Bad.apply, "silu", dtype="float32")
    assert report.failures and not [n for n in report.notes if n.startswith("diagnosis:")]


def _rms_function(mean: bool):
    class RMS(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, g):
            r = ((x * x).mean(-1, keepdim=True) + 1e-5).rsqrt()
            ctx.save_for_backward(x, g, r)
            return x * r * g

        @staticmethod
        def backward(ctx, G):
            x, g, r = ctx.saved_tensors
            gg = G * g
            dot = (gg * x).mean(-1, keepdim=True) if mean else (gg * x).sum(-1, keepdim=True)
            return r * gg - x * r ** 3 * dot, (G * x * r).reshape(-1, x.shape[-1]).sum(0)

    return RMS.apply


BACKWARD = [
    (_rms_function(False), "rmsnorm", "sums g*gamma*x-hat where the mean belongs"),
    (layernorm_function(mean_g=0.0), "layernorm", "misses the mean of g*gamma"),
    (layernorm_function(xhat_term=0.0), "layernorm", "misses the x-hat * mean(g*gamma*x-hat)"),
]


@pytest.mark.parametrize("kernel, op, words", BACKWARD, ids=[c[2] for c in BACKWARD])
def test_a_backward_mistake_is_named(kernel, op, words) -> None:
    """A hand-written backward with a classic mistake (the forward right): the report names
    it from the VJP variants of nlaverify.ops.variants; the correct backward is silent."""
    report = check_op(kernel, op, dtype="float32")
    assert report.failures, report
    diagnosis = [n for n in report.notes if n.startswith("diagnosis:")]
    assert len(diagnosis) == 1 and "your VJP equals" in diagnosis[0], report.notes
    assert words in diagnosis[0], diagnosis


def test_an_unrelated_backward_bug_gets_no_diagnosis() -> None:
    for kernel, op in ((layernorm_function(scale=1.2), "layernorm"),
                       (_rms_function(True), "rmsnorm"), (layernorm_function(), "layernorm")):
        report = check_op(kernel, op, dtype="float32")
        assert not [n for n in report.notes if n.startswith("diagnosis:")], report.notes


def test_a_jax_mask_without_the_diagonal_is_named() -> None:
    """jax.nn.softmax gives NaN on the first row (it sees no key): the NaN variant names it."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    def no_self(Q, K, V):
        n = Q.shape[-2]
        S = Q @ jnp.swapaxes(K, -1, -2) / jnp.sqrt(Q.shape[-1])
        S = jnp.where(jnp.arange(n)[:, None] > jnp.arange(n)[None, :], S, -jnp.inf)
        return jax.nn.softmax(S, axis=-1) @ V

    report = check_op(no_self, "causal_attention", dtype="float32")
    diagnosis = [n for n in report.notes if n.startswith("diagnosis:")]
    assert len(diagnosis) == 1 and "without the diagonal" in diagnosis[0], report.notes


def test_no_wrong_name_for_near_misses() -> None:
    """The review's wrong names, each silent or right now: a kernel returning zeros at n = 1
    (it equals a mask without the diagonal there; the second case refutes it), an RMSNorm
    without eps (named as such, not 'eps outside the root'), a LayerNorm backward with the
    mean term halved in bfloat16 (within a wide bound of both the op and the variant)."""
    def zeros_at_one(Q, K, V):
        if Q.shape[-2] < 2:
            return torch.zeros_like(V)
        return torch.nn.functional.scaled_dot_product_attention(Q, K, V, is_causal=True)

    def diagnosis(report):
        return [n for n in report.notes if n.startswith("diagnosis:")]

    r = check_op(zeros_at_one, "causal_attention", dtype="float32", framework="torch")
    assert r.failures and not diagnosis(r), r.notes
    r = check_op(lambda x, g: g * x / (x * x).mean(-1, keepdim=True).sqrt(), "rmsnorm",
                 dtype="bfloat16", framework="torch", seed=1)
    assert all("eps outside" not in n for n in diagnosis(r)), r.notes
    r = check_op(layernorm_function(mean_g=0.0), "layernorm", dtype="float32")
    assert any("misses the mean of g*gamma" in n for n in diagnosis(r)), r.notes

    # the mean term halved, not dropped
    r = check_op(layernorm_function(mean_g=0.5), "layernorm", dtype="bfloat16", seed=1)
    assert not diagnosis(r), r.notes
