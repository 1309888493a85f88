r"""Logit soft-capping, forward next to its VJP and JVP, written once against ``xp``.

Gemma Team 2024 (Gemma 2, §2: "we cap logits in each attention layer and the final layer
such that the value of the logits stays between :math:`-\text{soft\_cap}` and
:math:`+\text{soft\_cap}`"; Hugging Face ``Gemma2Attention``: ``attn_logit_softcapping``
50, ``final_logit_softcapping`` 30):

.. math:: \operatorname{softcap}_c(x) = c\,\tanh(x/c),\qquad
   \frac{\partial}{\partial x}\operatorname{softcap}_c(x) = 1 - \tanh^2(x/c),

smooth, odd, slope 1 at 0, :math:`|y| < c`. Its relative condition number
:math:`(x/c)(1-t^2)/t \le 1` (:math:`t = \tanh(x/c)`): the cap amplifies no rounding error.
The derivative is formed as :math:`(1-t)(1+t)`, not :math:`1-t^2`: for
:math:`t \ge \tfrac12` the difference :math:`1-t` is exact (Sterbenz), so a saturated
logit keeps the relative accuracy of its small gradient.

On the attention scores the cap sits between the scaling and the causal mask
(:func:`softcap_attention`): :math:`P = \operatorname{softmax}(\operatorname{softcap}_c(s\,
QK^\top) + M)`. Capping after the mask would turn each hidden score :math:`-\infty` into
:math:`-c`, a finite score: every masked key would leak into the softmax.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError
from nlaverify.ops._tangent import jvp_rule, lin, tsum
from nlaverify.ops._validate import check_args, check_positive
from nlaverify.ops.sdpa import causal_mask, scaled
from nlaverify.ops.softmaxes import softmax, softmax_jvp_from_output, softmax_vjp_from_output

__all__ = ["SOFTCAP_OPS", "softcap", "softcap_attention", "softcap_attention_jvp",
           "softcap_attention_vjp", "softcap_jvp", "softcap_vjp"]


def _slope(xp: Namespace, x: Any, cap: Any) -> Any:
    r""":math:`1 - \tanh^2(x/c)` as :math:`(1-t)(1+t)` (see the module's docstring)."""
    t = xp.tanh(x / xp.const(cap))
    return (1 - t) * (1 + t)


def softcap(xp: Namespace, x: Any, cap: Any) -> Any:
    r""":math:`\operatorname{softcap}_c(x) = c\,\tanh(x/c)`, entry by entry (Gemma Team 2024).

    Args:
        x: any shape; cap: the cap :math:`c > 0` (static, not differentiated).

    Returns:
        ``x``'s shape, every entry in :math:`(-c, c)`.
    """
    check_positive("softcap", "cap", cap)
    check_args("softcap", xp, {"x": (x, ("*",))})
    c = xp.const(cap)
    return c * xp.tanh(x / c)


def softcap_vjp(xp: Namespace, G: Any, x: Any, cap: Any) -> tuple[Any]:
    r"""VJP of :func:`softcap`: :math:`\bar x = G\odot(1-\tanh^2(x/c))`."""
    check_args("softcap_vjp", xp, {"x": (x, ("*",)), "G": (G, ("*",))})
    return (G * _slope(xp, x, cap),)


@jvp_rule("dx",)
def softcap_jvp(xp: Namespace, T: tuple[Any], x: Any, cap: Any) -> Any:
    r"""JVP of :func:`softcap`: :math:`\dot y = (1-\tanh^2(x/c))\odot\dot x`."""
    check_args("softcap_jvp", xp, {"x": (x, ("*",)), "dx": (T[0], ("*",))})
    return _slope(xp, x, cap) * T[0]


def _capped_scores(op: str, xp: Namespace, Q: Any, K: Any, cap: Any, causal: bool,
                   window: int | None, scale: Any) -> tuple[Any, Any, dict[str, int]]:
    """The raw scores :math:`S = s\\,QK^\\top` and the masked probabilities
    :math:`P = \\operatorname{softmax}(\\operatorname{softcap}_c(S) + M)`."""
    check_positive(op, "cap", cap)
    if window is not None and not causal:
        raise ArgumentError(f"{op}: argument 'window': a sliding window is a causal mask; "
                            "expected causal=True")
    dims = check_args(op, xp, {"Q": (Q, ("*", "n", "d_k")), "K": (K, ("*", "n_k", "d_k"))})
    S = scaled(xp, xp.matmul(Q, xp.matrix_transpose(K)), dims["d_k"], scale)
    C = softcap(xp, S, cap)
    if causal:  # the mask after the cap: a hidden key stays at -inf
        C = xp.where(causal_mask(xp, dims["n"], window, dims["n_k"]), C, -xp.inf)
    return S, softmax(xp, C), dims


def softcap_attention(xp: Namespace, Q: Any, K: Any, V: Any, cap: Any, causal: bool = False,
                      window: int | None = None, scale: Any = None) -> Any:
    r"""Attention with soft-capped scores (Gemma Team 2024; Baggag & Saad §3.4.2, §3.4.4):

    .. math:: A = \operatorname{softmax}\bigl(\operatorname{softcap}_c(s\,QK^\top) + M\bigr)V,

    :math:`s = 1/\sqrt{d_k}` (or ``scale``), :math:`M` the causal mask (banded by
    ``window``), applied *after* the cap. Shapes as :func:`~nlaverify.ops.sdpa.attention`.
    """
    check_args("softcap_attention", xp, {"V": (V, ("*", "n_k", "d_v"))})
    _, P, _ = _capped_scores("softcap_attention", xp, Q, K, cap, causal, window, scale)
    return xp.matmul(P, V)


def softcap_attention_vjp(xp: Namespace, G: Any, Q: Any, K: Any, V: Any, cap: Any,
                          causal: bool = False, window: int | None = None, scale: Any = None
                          ) -> tuple[Any, Any, Any]:
    r"""VJP of :func:`softcap_attention`: the attention VJP with the cap's slope between the
    softmax and the scores,

    .. math:: \bar V = P^\top G,\quad dC = P\odot(GV^\top - \operatorname{rowsum}(GV^\top
       \odot P)),\quad dS = dC\odot(1-\tanh^2(S/c)),\quad \bar Q = s\,dS\,K,\quad
       \bar K = s\,dS^\top Q .

    Masked entries have :math:`P_{ij} = 0`, hence :math:`dS_{ij} = 0`."""
    check_args("softcap_attention_vjp", xp, {"V": (V, ("*", "n_k", "d_v")),
                                             "G": (G, ("*", "n", "d_v"))})
    S, P, dims = _capped_scores("softcap_attention_vjp", xp, Q, K, cap, causal, window, scale)
    dV = xp.matmul(xp.matrix_transpose(P), G)
    dS = softmax_vjp_from_output(xp, xp.matmul(G, xp.matrix_transpose(V)), P) * _slope(
        xp, S, cap)
    dQ = scaled(xp, xp.matmul(dS, K), dims["d_k"], scale)
    dK = scaled(xp, xp.matmul(xp.matrix_transpose(dS), Q), dims["d_k"], scale)
    return dQ, dK, dV


@jvp_rule("dQ", "dK", "dV")
def softcap_attention_jvp(xp: Namespace, T: tuple[Any, Any, Any], Q: Any, K: Any, V: Any,
                          cap: Any, causal: bool = False, window: int | None = None,
                          scale: Any = None) -> Any:
    r"""JVP of :func:`softcap_attention`:

    .. math:: \dot S = s(\dot QK^\top + Q\dot K^\top),\quad \dot C = (1-\tanh^2(S/c))\odot
       \dot S,\quad \dot P = P\odot(\dot C - \operatorname{rowsum}(\dot C\odot P)),\quad
       \dot A = \dot P V + P\dot V .

    ``T = (dQ, dK, dV)``, an entry ``None`` meaning a zero tangent."""
    dQ, dK, dV = T
    check_args("softcap_attention_jvp", xp, {"V": (V, ("*", "n_k", "d_v"))})
    S, P, dims = _capped_scores("softcap_attention_jvp", xp, Q, K, cap, causal, window, scale)
    raw = None if dQ is None and dK is None else tsum(
        lin(dQ, lambda t: xp.matmul(t, xp.matrix_transpose(K))),
        lin(dK, lambda t: xp.matmul(Q, xp.matrix_transpose(t))))
    dP = lin(raw, lambda t: softmax_jvp_from_output(
        xp, scaled(xp, t, dims["d_k"], scale) * _slope(xp, S, cap), P))
    return tsum(lin(dP, lambda t: xp.matmul(t, V)), lin(dV, lambda t: xp.matmul(P, t)))


def _specs() -> dict[str, Any]:
    """The entries of :data:`nlaverify.ops.registry.OPS` (proved by ``nlaverify derive`` like
    every op of the table): the cap alone, for every :math:`c > 0` (the proof's :math:`c` a
    positive symbol), and causal attention with capped scores at :math:`c = 2`."""
    from nlaverify.ops.opspec import Arg, OpSpec

    seed = "Gemma Team 2024 (Gemma 2, §2: logit soft-capping)"
    qkv = (Arg("Q", ("n", "d_k")), Arg("K", ("n", "d_k")), Arg("V", ("n", "d_v")))
    return {s.name: s for s in (
        OpSpec("softcap", softcap, softcap_vjp, (Arg("x", ("n", "d")),), seed,
               r"\bar x = g\odot(1-\tanh^2(x/c))", {"n": 1, "d": 2},
               {"n": (1, 4), "d": (1, 4)}, static={"cap": 2}, proof_static={"cap": "c"}),
        OpSpec("softcap_attention", softcap_attention, softcap_attention_vjp, qkv,
               seed + "; Baggag & Saad §3.4.2, §3.4.4",
               r"\bar V = P^\top G,\ dS = P\odot(dP - \operatorname{rowsum}(dP\odot P))\odot"
               r"(1-\tanh^2(S/c)),\ \bar Q = dS\,K/\sqrt{d_k},\ \bar K = dS^\top Q/\sqrt{d_k}",
               # n = 2, causal: one hidden key, which a cap after the mask would reveal
               {"n": 2, "d_k": 1, "d_v": 1}, {"n": (1, 4), "d_k": (1, 4), "d_v": (1, 4)},
               static={"cap": 2, "causal": True}),
    )}


#: the soft-capping ops of :data:`nlaverify.ops.registry.OPS`
SOFTCAP_OPS = _specs()
