r"""The classic bugs of the catalogue's ops, written once against ``xp`` like the ops: what a
failing kernel most often computes instead.

Each :class:`Variant` is the op's forward with one well-known mistake (the sum of squares
for their mean in RMSNorm, the unbiased variance in LayerNorm, :math:`\epsilon` outside the
root, a softmax without its max shift, a causal mask that sees the next token or not the
token itself, a cross-entropy averaged over the ignored positions too, GELU's tanh form for
its erf form, ``tile`` for ``repeat_interleave`` of the key/value heads, SiLU on the wrong
branch of SwiGLU). :func:`nlaverify.check.check_op` evaluates them on a failing case, and
where the user's output equals one within the same bound as the reference, its report says
so in one line ("your output equals rmsnorm with the sum of squares for their mean"). The
conventions that are options (:data:`nlaverify.ops.conventions.CONVENTIONS`: RoPE's layout,
the attention scale, the loss reduction) are named the same way, from the op itself.

Seeds: Baggag & Saad §3 (the ops); the mistakes are those of the benchmark
``benchmarks/user_bugs.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops import activations, loss, sdpa, softmaxes

__all__ = ["VARIANTS", "Variant", "variants_of"]


@dataclass(frozen=True)
class Variant:
    """One classic mistake of ``op``: ``what`` it does, and its forward ``forward(xp, *args,
    **static)`` (the op's arguments and statics); for a mistake in a hand-written backward
    only, ``forward`` is ``None`` and ``vjp(xp, G, *args, **static)`` gives the cotangents
    it computes (one per real argument)."""

    op: str
    what: str
    forward: Callable[..., Any] | None
    vjp: Callable[..., Any] | None = None


def _mean_rows(xp: Namespace, x: Any) -> Any:
    return xp.sum(x, axis=-1, keepdims=True) / x.shape[-1]


def _rms_sum(xp: Namespace, x: Any, gamma: Any, eps: Any) -> Any:
    return gamma * x / xp.sqrt(xp.sum(x * x, axis=-1, keepdims=True) + eps)


def _rms_eps_outside(xp: Namespace, x: Any, gamma: Any, eps: Any) -> Any:
    return gamma * x / (xp.sqrt(_mean_rows(xp, x * x)) + eps)


def _rms_no_eps(xp: Namespace, x: Any, gamma: Any, eps: Any) -> Any:
    return gamma * x / xp.sqrt(_mean_rows(xp, x * x))


def _ln_no_eps(xp: Namespace, x: Any, gamma: Any, beta: Any, eps: Any) -> Any:
    return _ln(xp, x, gamma, beta, 0.0)


def _ln(xp: Namespace, x: Any, gamma: Any, beta: Any, eps: Any, *, ddof: int = 0,
        eps_outside: bool = False) -> Any:
    c = x - _mean_rows(xp, x)
    var = xp.sum(c * c, axis=-1, keepdims=True) / (x.shape[-1] - ddof)
    sigma = xp.sqrt(var) + eps if eps_outside else xp.sqrt(var + eps)
    return gamma * c / sigma + beta


def _ln_unbiased(xp: Namespace, x: Any, gamma: Any, beta: Any, eps: Any) -> Any:
    return _ln(xp, x, gamma, beta, eps, ddof=1)


def _ln_eps_outside(xp: Namespace, x: Any, gamma: Any, beta: Any, eps: Any) -> Any:
    return _ln(xp, x, gamma, beta, eps, eps_outside=True)


def _softmax_no_shift(xp: Namespace, Z: Any, axis: int = -1, masked_row: str = "zero") -> Any:
    E = xp.exp(Z)
    return E / xp.sum(E, axis=axis, keepdims=True)


def _log_softmax_no_shift(xp: Namespace, Z: Any, axis: int = -1) -> Any:
    return Z - xp.log(xp.sum(xp.exp(Z), axis=axis, keepdims=True))


def _causal_with_offset(offset: int) -> Callable[..., Any]:
    """Causal attention whose mask lets token :math:`i` see keys :math:`j \\le i + o`."""
    def forward(xp: Namespace, Q: Any, K: Any, V: Any, causal: bool = True,
                window: int | None = None, scale: Any = None) -> Any:
        n = Q.shape[-2]
        S = sdpa.scaled(xp, xp.matmul(Q, xp.matrix_transpose(K)), Q.shape[-1], scale)
        idx = xp.arange(n)
        seen = idx[None, :] <= idx[:, None] + offset
        return xp.matmul(softmaxes.softmax(xp, xp.where(seen, S, -xp.inf)), V)

    return forward


def _ce_mean_over_all(xp: Namespace, Z: Any, targets: Any,
                      ignore_index: int = loss.IGNORE_INDEX, reduction: str = "mean") -> Any:
    total = loss.cross_entropy(xp, Z, targets, ignore_index, "sum")
    positions = 1
    for s in targets.shape:
        positions *= int(s)
    return total / positions


def _causal_no_diagonal_nan(xp: Namespace, Q: Any, K: Any, V: Any, causal: bool = True,
                            window: int | None = None, scale: Any = None) -> Any:
    """A mask without the diagonal whose first query, seeing no key, gets NaN (as
    ``torch.softmax`` and ``jax.nn.softmax`` give an all-masked row)."""
    n = Q.shape[-2]
    S = sdpa.scaled(xp, xp.matmul(Q, xp.matrix_transpose(K)), Q.shape[-1], scale)
    idx = xp.arange(n)
    seen = idx[None, :] < idx[:, None]
    return xp.matmul(softmaxes.softmax(xp, xp.where(seen, S, -xp.inf), masked_row="nan"), V)


def _rms_vjp_sum(xp: Namespace, G: Any, x: Any, gamma: Any, eps: Any) -> tuple[Any, Any]:
    r"""RMSNorm's VJP with :math:`\sum_j` where :math:`\tfrac1d\sum_j` belongs in
    :math:`\bar x = \tfrac1r(g_{\hat x} - \hat x\,\overline{g_{\hat x}\odot\hat x})`."""
    d = x.shape[-1]
    r = xp.sqrt(xp.sum(x * x, axis=-1, keepdims=True) / d + eps)
    xhat, gx = x / r, G * gamma
    dx = (gx - xhat * xp.sum(gx * xhat, axis=-1, keepdims=True)) / r
    return dx, xp.sum(xp.reshape(G * xhat, (-1, d)), axis=0)


def _ln_vjp(xp: Namespace, G: Any, x: Any, gamma: Any, beta: Any, eps: Any, *,
            mean_g: bool = True, xhat_term: bool = True) -> tuple[Any, Any, Any]:
    d = x.shape[-1]
    c = x - xp.sum(x, axis=-1, keepdims=True) / d
    sigma = xp.sqrt(xp.sum(c * c, axis=-1, keepdims=True) / d + eps)
    xhat, gx = c / sigma, G * gamma
    dx = gx
    if mean_g:
        dx = dx - xp.sum(gx, axis=-1, keepdims=True) / d
    if xhat_term:
        dx = dx - xhat * xp.sum(gx * xhat, axis=-1, keepdims=True) / d
    return (dx / sigma, xp.sum(xp.reshape(G * xhat, (-1, d)), axis=0),
            xp.sum(xp.reshape(G, (-1, d)), axis=0))


def _softmax_vjp_all_axes(xp: Namespace, G: Any, Z: Any, axis: int = -1,
                          masked_row: str = "zero") -> tuple[Any]:
    r"""Softmax's VJP with :math:`\langle g, p\rangle` summed over every axis, not per row."""
    P = softmaxes.softmax(xp, Z, axis, masked_row)
    return (P * (G - xp.sum(G * P)),)


def _repeat_kv_tile(xp: Namespace, X: Any, n_rep: int) -> Any:
    h = X.shape[-3]
    idx = xp.asarray([k % h for k in range(h * n_rep)])
    return xp.take(X, idx, axis=-3)


def _swiglu_swapped(xp: Namespace, a: Any, b: Any) -> Any:
    return activations.silu(xp, b) * a


VARIANTS: dict[str, tuple[Variant, ...]] = {
    "rmsnorm": (Variant("rmsnorm", "the sum of squares for their mean (no 1/d)", _rms_sum),
                Variant("rmsnorm", "eps outside the square root", _rms_eps_outside),
                Variant("rmsnorm", "no eps at all", _rms_no_eps),
                Variant("rmsnorm", "a backward whose x-bar sums g*gamma*x-hat where the mean "
                                   "belongs (the 1/d dropped)", None, _rms_vjp_sum)),
    "layernorm": (Variant("layernorm", "the unbiased variance (1/(d-1), torch.var's default)",
                          _ln_unbiased),
                  Variant("layernorm", "eps outside the square root", _ln_eps_outside),
                  Variant("layernorm", "no eps at all", _ln_no_eps),
                  Variant("layernorm", "a backward whose x-bar misses the mean of g*gamma "
                                       "(the mean subtraction's term)", None,
                          lambda *a, **k: _ln_vjp(*a, **k, mean_g=False)),
                  Variant("layernorm", "a backward whose x-bar misses the x-hat * "
                                       "mean(g*gamma*x-hat) term (the variance's)", None,
                          lambda *a, **k: _ln_vjp(*a, **k, xhat_term=False)),
                  Variant("layernorm", "a backward whose x-bar misses both terms "
                                       "(x-bar = g*gamma/sigma)", None,
                          lambda *a, **k: _ln_vjp(*a, **k, mean_g=False, xhat_term=False))),
    "softmax": (Variant("softmax", "no max shift (exp overflows)", _softmax_no_shift),
                Variant("softmax", "a backward whose <g, p> is summed over every axis, not "
                                   "per row", None, _softmax_vjp_all_axes)),
    "log_softmax": (Variant("log_softmax", "no max shift (exp overflows)",
                            _log_softmax_no_shift),),
    "causal_attention": (
        Variant("causal_attention", "a mask that sees the next token (j <= i + 1)",
                _causal_with_offset(1)),
        Variant("causal_attention", "a mask without the diagonal (j < i: a token does not "
                                    "see itself)", _causal_with_offset(-1)),
        Variant("causal_attention", "a mask without the diagonal (j < i: a token does not "
                                    "see itself; the first, seeing nothing, gets NaN)",
                _causal_no_diagonal_nan)),
    "cross_entropy": (Variant("cross_entropy", "the mean over every position, the ignored "
                                               "targets counted in the denominator",
                              _ce_mean_over_all),),
    "gelu_erf": (Variant("gelu_erf", "GELU's tanh approximation",
                         lambda xp, x: activations.gelu_tanh(xp, x)),),
    "gelu_tanh": (Variant("gelu_tanh", "GELU's erf form",
                          lambda xp, x: activations.gelu_erf(xp, x)),),
    "repeat_kv": (Variant("repeat_kv", "tile for repeat (query head k reads key/value head "
                                       "k mod h_kv, not k // n_rep)", _repeat_kv_tile),),
    "swiglu": (Variant("swiglu", "SiLU on the wrong branch (SiLU(b) * a)", _swiglu_swapped),),
}


def variants_of(name: str) -> tuple[Variant, ...]:
    """The classic mistakes known for the op ``name`` (empty for the others)."""
    return VARIANTS.get(name, ())
