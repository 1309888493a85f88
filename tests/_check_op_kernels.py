"""Kernels written the way users write them, shared by the ``check_op`` tests: the correct
RMSNorm and causal attention, and two planted bugs (softmax without the max shift, attention
scaled by 1/d) that more than one test file runs.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w


def softmax_unshifted(z):  # exp overflows for logits beyond ~88 (float32)
    e = torch.exp(z)
    return e / e.sum(-1, keepdim=True)


def causal_attention(q, k, v):
    n = q.shape[-2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


def causal_attention_scaled_by_d(q, k, v):  # 1/d instead of 1/sqrt(d)
    n = q.shape[-2]
    s = q @ k.transpose(-1, -2) / q.shape[-1]
    s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v



def layernorm_function(mean_g: float = 1.0, xhat_term: float = 1.0, scale: float = 1.0):
    """A fused LayerNorm with a hand-written backward, x̄ = scale · (g γ − mean_g · mean(g γ)
    − xhat_term · x̂ mean(g γ x̂)) / σ: the defaults are right; 0 drops a term, 0.5 halves it,
    scale ≠ 1 scales x̄ (the planted backward bugs of the diagnosis and resolution tests)."""

    class LayerNormFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, g, b):
            mu = x.mean(-1, keepdim=True)
            rs = torch.rsqrt(((x - mu) ** 2).mean(-1, keepdim=True) + 1e-5)
            xh = (x - mu) * rs
            ctx.save_for_backward(xh, rs, g)
            return xh * g + b

        @staticmethod
        def backward(ctx, G):
            xh, rs, g = ctx.saved_tensors
            gx = G * g
            dx = gx - mean_g * gx.mean(-1, keepdim=True) - xhat_term * xh * (gx * xh).mean(
                -1, keepdim=True)
            lead = tuple(range(G.dim() - 1))
            return scale * rs * dx, (G * xh).sum(lead), G.sum(lead)

    return LayerNormFunction.apply
