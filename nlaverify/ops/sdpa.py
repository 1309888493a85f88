"""Scaled dot-product attention, causal masking and multi-head split/merge.

Baggag & Saad §3.4 (single head), §3.4.4 (masking), §3.5 (multi-head);
Baptista, Stuart & Tran §5 (decoder-only Transformer). Heads are a leading
batch axis: ``Q, K, V`` have shape ``(*, n, d_k)``.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError
from nlaverify.ops._tangent import lin, tangents, tsum
from nlaverify.ops._validate import check_args, check_positive
from nlaverify.ops.linear import affine, affine_jvp, affine_vjp
from nlaverify.ops.softmaxes import (
    softmax,
    softmax_jvp_from_output,
    softmax_vjp_from_output,
)


def causal_mask(xp: Namespace, n: int, window: int | None = None, m: int | None = None,
                align: str = "bottom_right") -> Any:
    r"""Boolean ``(n, m)`` mask (``m = n`` by default), ``True`` where query :math:`i` may see
    key :math:`j`: :math:`j \le i + o` with the offset :math:`o = m - n` (``align =
    "bottom_right"``: the last query sees every key, as in decoding with a KV cache and in
    FlashAttention since 2.1) or :math:`o = 0` (``"top_left"``: query :math:`i` sees keys up
    to :math:`i`, as ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``);
    the two agree when :math:`m = n`. With a sliding ``window`` :math:`w`, only
    :math:`i + o - w < j \le i + o`: the last :math:`w` positions, the token itself included
    (Mistral, Jiang et al. 2023).

    Adding :math:`M_{ij} = -\infty` where the mask is ``False`` makes the attention matrix
    lower triangular (Baggag & Saad §3.4.4); the window makes it banded.
    """
    m = n if m is None else m
    if align not in ALIGNS:
        raise ArgumentError(f"causal_mask: argument 'align': expected one of "
                            f"{', '.join(map(repr, ALIGNS))}, got {align!r}")
    offset = m - n if align == "bottom_right" else 0
    rows = xp.arange(n)[:, None] + offset
    cols = xp.arange(m)[None, :]
    seen = rows >= cols
    if window is None:
        return seen
    return seen & (rows - cols < window)


#: the alignments of a causal mask between ``n`` queries and ``m`` keys
#: (:func:`causal_mask`): ``"bottom_right"`` (FlashAttention >= 2.1, KV-cache decoding) and
#: ``"top_left"`` (``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``)
ALIGNS = ("bottom_right", "top_left")


def _check_window(op: str, causal: bool, window: int | None) -> None:
    if window is None:
        return
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ArgumentError(f"{op}: argument 'window': expected a positive integer or None, "
                            f"got {window!r}")
    if not causal:
        raise ArgumentError(f"{op}: argument 'window': a sliding window is a causal mask; "
                            "expected causal=True")


#: the score scales :func:`attention` takes besides a positive number: ``None`` (or
#: ``"sqrt"``) :math:`1/\sqrt{d_k}` (Vaswani et al. 2017), ``"linear"`` :math:`1/d_k`
#: (muP, Yang et al. 2021)
SCALES = (None, "sqrt", "linear")


def scaled(xp: Namespace, X: Any, d_k: int, scale: Any = None) -> Any:
    r""":math:`X` times the score scale: :math:`1/\sqrt{d_k}` (``None``, ``"sqrt"``),
    :math:`1/d_k` (``"linear"``) or a positive number (exact on SymPy: the float's binary
    value as a rational)."""
    if scale is None or scale == "sqrt":
        return X / xp.const_sqrt(d_k)
    if scale == "linear":
        return X / xp.rational(d_k)
    if isinstance(scale, int | float) and not isinstance(scale, bool) and scale > 0:
        from fractions import Fraction

        f = Fraction(scale)
        return X * xp.rational(f.numerator, f.denominator)
    raise ArgumentError(f"attention: argument 'scale': expected None or 'sqrt' (1/sqrt(d_k)), "
                        f"'linear' (1/d_k, muP) or a positive number, got {scale!r}")


def attention_scores(xp: Namespace, Q: Any, K: Any, causal: bool = False,
                     window: int | None = None, scale: Any = None,
                     align: str = "bottom_right") -> Any:
    r"""Scores :math:`S = s\,Q K^\top + M` with :math:`s = 1/\sqrt{d_k}` (or ``scale``,
    :func:`scaled`) and :math:`M` the causal mask (banded by a sliding ``window``, aligned by
    ``align`` when the ``n`` queries and ``m`` keys differ in number: :func:`causal_mask`)."""
    _check_window("attention_scores", causal, window)
    dims = check_args("attention_scores", xp, {"Q": (Q, ("*", "n", "d_k")),
                                               "K": (K, ("*", "n_k", "d_k"))})
    S = scaled(xp, xp.matmul(Q, xp.matrix_transpose(K)), dims["d_k"], scale)
    if causal:
        S = xp.where(causal_mask(xp, dims["n"], window, dims["n_k"], align), S, -xp.inf)
    return S


def attention(xp: Namespace, Q: Any, K: Any, V: Any, causal: bool = False,
              window: int | None = None, scale: Any = None, align: str = "bottom_right") -> Any:
    r"""Scaled dot-product attention (Baggag & Saad §3.4.2):

    .. math:: A = \operatorname{softmax}\!\Bigl(\frac{Q K^\top}{\sqrt{d_k}} + M\Bigr) V,

    :math:`M_{ij} = -\infty` where :func:`causal_mask` hides :math:`j` from :math:`i`
    (``causal``; ``window``: sliding-window attention; ``align``: which queries see which
    keys when there are fewer queries than keys); ``scale`` replaces :math:`1/\sqrt{d_k}`
    (:func:`scaled`: ``"linear"`` for muP's :math:`1/d_k`).
    """
    check_args("attention", xp, {"Q": (Q, ("*", "n", "d_k")), "K": (K, ("*", "n_k", "d_k")),
                                 "V": (V, ("*", "n_k", "d_v"))})
    return xp.matmul(softmax(xp, attention_scores(xp, Q, K, causal, window, scale, align)), V)


def attention_vjp(
    xp: Namespace, G: Any, Q: Any, K: Any, V: Any, causal: bool = False,
    window: int | None = None, scale: Any = None, align: str = "bottom_right",
) -> tuple[Any, Any, Any]:
    r"""VJP of :func:`attention`. With :math:`P = \operatorname{softmax}(S)`:

    .. math::
        \bar V = P^\top G,\quad dP = G V^\top,\quad
        dS = P \odot \bigl(dP - \operatorname{rowsum}(dP \odot P)\bigr),\quad
        \bar Q = \frac{dS\, K}{\sqrt{d_k}},\quad \bar K = \frac{dS^\top Q}{\sqrt{d_k}} .

    Masked entries have :math:`P_{ij} = 0`, hence :math:`dS_{ij} = 0`.
    """
    dims = check_args("attention_vjp", xp, {"Q": (Q, ("*", "n", "d_k")),
                                            "K": (K, ("*", "n_k", "d_k")),
                                            "V": (V, ("*", "n_k", "d_v")),
                                            "G": (G, ("*", "n", "d_v"))})
    P = softmax(xp, attention_scores(xp, Q, K, causal, window, scale, align))
    dV = xp.matmul(xp.matrix_transpose(P), G)
    dS = softmax_vjp_from_output(xp, xp.matmul(G, xp.matrix_transpose(V)), P)
    dQ = scaled(xp, xp.matmul(dS, K), dims["d_k"], scale)
    dK = scaled(xp, xp.matmul(xp.matrix_transpose(dS), Q), dims["d_k"], scale)
    return dQ, dK, dV


def _tsum_or_none(*terms: Any) -> Any:
    """:func:`tsum`, or ``None`` (a zero tangent) when every term is ``None``."""
    return None if all(t is None for t in terms) else tsum(*terms)


def attention_jvp(
    xp: Namespace, T: tuple[Any, Any, Any], Q: Any, K: Any, V: Any, causal: bool = False,
    window: int | None = None, scale: Any = None, align: str = "bottom_right",
) -> Any:
    r"""JVP of :func:`attention` (Baggag & Saad §3.4.2, §3.4.4), the forward-mode dual of
    :func:`attention_vjp`. With :math:`P = \operatorname{softmax}(S)`:

    .. math::
        \dot S = \frac{\dot Q K^\top + Q \dot K^\top}{\sqrt{d_k}},\quad
        \dot P = P \odot \bigl(\dot S - \operatorname{rowsum}(\dot S \odot P)\bigr),\quad
        \dot A = \dot P\, V + P\, \dot V .

    :math:`\dot P` is the softmax Jacobian :math:`\operatorname{diag}(p) - p p^\top`
    applied to each row of :math:`\dot S`
    (:func:`~nlaverify.ops.softmaxes.softmax_jvp_from_output`, from the stable forward's
    output).
    Masked entries (:math:`j > i` under ``causal``) have :math:`P_{ij} = 0`, hence
    :math:`\dot P_{ij} = 0` and no part in the row sums: the mask gets no tangent.
    ``T = (dQ, dK, dV)``, an entry ``None`` meaning a zero tangent.
    """
    dQ, dK, dV = tangents("attention_jvp", T, ("dQ", "dK", "dV"))
    dims = check_args("attention_jvp", xp, {"Q": (Q, ("*", "n", "d_k")),
                                            "K": (K, ("*", "n_k", "d_k")),
                                            "V": (V, ("*", "n_k", "d_v")),
                                            "dQ": (dQ, ("*", "n", "d_k")),
                                            "dK": (dK, ("*", "n_k", "d_k")),
                                            "dV": (dV, ("*", "n_k", "d_v"))})
    P = softmax(xp, attention_scores(xp, Q, K, causal, window, scale, align))
    dS = _tsum_or_none(lin(dQ, lambda t: xp.matmul(t, xp.matrix_transpose(K))),
                       lin(dK, lambda t: xp.matmul(Q, xp.matrix_transpose(t))))
    dP = lin(dS, lambda t: softmax_jvp_from_output(xp, scaled(xp, t, dims["d_k"], scale), P))
    return tsum(lin(dP, lambda t: xp.matmul(t, V)), lin(dV, lambda t: xp.matmul(P, t)))


def _swap_last_but_one(ndim: int) -> tuple[int, ...]:
    """Axes that swap the two axes before the last: ``(*, a, b, c) -> (*, b, a, c)``."""
    return (*range(ndim - 3), ndim - 2, ndim - 3, ndim - 1)


def split_heads(xp: Namespace, X: Any, n_heads: int) -> Any:
    r"""``(*, n, h d_h) -> (*, h, n, d_h)``: column block :math:`k` becomes head :math:`k`
    (Baggag & Saad §3.5.1, headwise projections); ``*`` is a batch of sequences."""
    check_positive("split_heads", "n_heads", n_heads)
    dims = check_args("split_heads", xp, {"X": (X, ("*", "n", "hd"))})
    if dims["hd"] % n_heads:
        from nlaverify.errors import ShapeError

        raise ShapeError(f"split_heads: argument 'X': expected a last dimension divisible by "
                         f"n_heads={n_heads}, got {dims['hd']}")
    d_h = dims["hd"] // n_heads
    lead = tuple(X.shape[:-2])
    heads = xp.reshape(X, (*lead, dims["n"], n_heads, d_h))
    return xp.permute_dims(heads, _swap_last_but_one(len(lead) + 3))


def merge_heads(xp: Namespace, X: Any) -> Any:
    r"""``(*, h, n, d_h) -> (*, n, h d_h)``, the concatenation of Baggag & Saad §3.5.2."""
    dims = check_args("merge_heads", xp, {"X": (X, ("*", "h", "n", "d_h"))})
    lead = tuple(X.shape[:-3])
    return xp.reshape(xp.permute_dims(X, _swap_last_but_one(len(lead) + 3)),
                      (*lead, dims["n"], dims["h"] * dims["d_h"]))


def split_heads_vjp(xp: Namespace, G: Any, X: Any, n_heads: int) -> tuple[Any]:
    r"""VJP of :func:`split_heads`: a permutation, so its transpose (inverse) is
    :func:`merge_heads`."""
    return (merge_heads(xp, G),)


def merge_heads_vjp(xp: Namespace, G: Any, X: Any) -> tuple[Any]:
    r"""VJP of :func:`merge_heads`: :func:`split_heads` of the cotangent."""
    return (split_heads(xp, G, X.shape[-3]),)


def split_heads_jvp(xp: Namespace, T: tuple[Any], X: Any, n_heads: int) -> Any:
    r"""JVP of :func:`split_heads` (Baggag & Saad §3.5.1): a linear map (a reshape and a
    permutation), so :math:`\dot Y = \operatorname{split}(\dot X)`."""
    (dX,) = tangents("split_heads_jvp", T, ("dX",))
    check_args("split_heads_jvp", xp, {"X": (X, ("*", "n", "hd")), "dX": (dX, ("*", "n", "hd"))})
    return split_heads(xp, dX, n_heads)


def merge_heads_jvp(xp: Namespace, T: tuple[Any], X: Any) -> Any:
    r"""JVP of :func:`merge_heads` (Baggag & Saad §3.5.2): linear, so
    :math:`\dot Y = \operatorname{merge}(\dot X)`."""
    (dX,) = tangents("merge_heads_jvp", T, ("dX",))
    check_args("merge_heads_jvp", xp, {"X": (X, ("*", "h", "n", "d_h")),
                                       "dX": (dX, ("*", "h", "n", "d_h"))})
    return merge_heads(xp, dX)


def multihead_attention(
    xp: Namespace, X: Any, W_Q: Any, W_K: Any, W_V: Any, W_O: Any,
    n_heads: int, causal: bool = False,
) -> Any:
    r"""Multi-head self-attention with output projection (Baggag & Saad §3.5):

    .. math:: \operatorname{MHA}(X) = [A_1, \dots, A_h]\, W_O,\qquad
       A_k = \operatorname{attention}(X W_Q^{(k)}, X W_K^{(k)}, X W_V^{(k)}),

    where :math:`W^{(k)}` is column block :math:`k`.
    """
    Q, K, V = (split_heads(xp, affine(xp, X, W), n_heads) for W in (W_Q, W_K, W_V))
    return affine(xp, merge_heads(xp, attention(xp, Q, K, V, causal)), W_O)


def multihead_attention_vjp(
    xp: Namespace, G: Any, X: Any, W_Q: Any, W_K: Any, W_V: Any, W_O: Any,
    n_heads: int, causal: bool = False,
) -> tuple[Any, Any, Any, Any, Any]:
    r"""VJP of :func:`multihead_attention`: the chain rule through
    :func:`affine_vjp`, :func:`merge_heads_vjp`, :func:`attention_vjp` and
    :func:`split_heads_vjp`; the three cotangents reaching :math:`X` are summed.

    Returns:
        ``(dX, dW_Q, dW_K, dW_V, dW_O)``.
    """
    Q, K, V = (split_heads(xp, affine(xp, X, W), n_heads) for W in (W_Q, W_K, W_V))
    A = attention(xp, Q, K, V, causal)
    M = merge_heads(xp, A)
    dM, dW_O = affine_vjp(xp, G, M, W_O)
    (dA,) = merge_heads_vjp(xp, dM, A)
    dQ, dK, dV = attention_vjp(xp, dA, Q, K, V, causal)
    dX = None
    grads = []
    for dH, W in ((dQ, W_Q), (dK, W_K), (dV, W_V)):
        (dP,) = split_heads_vjp(xp, dH, None, n_heads)
        dXi, dWi = affine_vjp(xp, dP, X, W)
        dX = dXi if dX is None else dX + dXi
        grads.append(dWi)
    return (dX, *grads, dW_O)


def multihead_attention_jvp(
    xp: Namespace, T: tuple[Any, Any, Any, Any, Any], X: Any, W_Q: Any, W_K: Any, W_V: Any,
    W_O: Any, n_heads: int, causal: bool = False,
) -> Any:
    r"""JVP of :func:`multihead_attention` (Baggag & Saad §3.5.3): forward mode through the
    same pieces as the forward, for :math:`U \in \{Q, K, V\}`

    .. math::
        \dot U = \operatorname{split}(\dot X W_U + X \dot W_U),\quad
        \dot A = \operatorname{attention\_jvp}(\dot Q, \dot K, \dot V),\quad
        \dot Y = \operatorname{merge}(\dot A)\, W_O + \operatorname{merge}(A)\, \dot W_O,

    by :func:`~nlaverify.ops.linear.affine_jvp`, :func:`split_heads_jvp`,
    :func:`attention_jvp` and :func:`merge_heads_jvp`. ``T = (dX, dW_Q, dW_K, dW_V, dW_O)``,
    an entry ``None`` meaning a zero tangent (a head input with no tangent stays ``None``).
    """
    dX, dW_Q, dW_K, dW_V, dW_O = tangents("multihead_attention_jvp", T,
                                           ("dX", "dW_Q", "dW_K", "dW_V", "dW_O"))
    check_args("multihead_attention_jvp", xp, {
        "X": (X, ("*", "n", "d")), "W_Q": (W_Q, ("d", "hd")), "W_K": (W_K, ("d", "hd")),
        "W_V": (W_V, ("d", "hd")), "W_O": (W_O, ("hd", "d")), "dX": (dX, ("*", "n", "d")),
        "dW_Q": (dW_Q, ("d", "hd")), "dW_K": (dW_K, ("d", "hd")), "dW_V": (dW_V, ("d", "hd")),
        "dW_O": (dW_O, ("hd", "d"))})
    heads, dheads = [], []
    for W, dW in ((W_Q, dW_Q), (W_K, dW_K), (W_V, dW_V)):
        U = affine(xp, X, W)
        heads.append(split_heads(xp, U, n_heads))
        dU = None if dX is None and dW is None else affine_jvp(xp, (dX, dW), X, W)
        dheads.append(lin(dU, lambda t, U=U: split_heads_jvp(xp, (t,), U, n_heads)))
    A = attention(xp, *heads, causal)
    dA = None if all(t is None for t in dheads) else attention_jvp(xp, tuple(dheads),
                                                                   *heads, causal)
    M = merge_heads(xp, A)
    dM = lin(dA, lambda t: merge_heads_jvp(xp, (t,), A))
    return affine_jvp(xp, (dM, dW_O), M, W_O)


def repeat_kv(xp: Namespace, X: Any, n_rep: int) -> Any:
    r"""Grouped-query head sharing: ``(h_kv, n, d) -> (h_kv n_rep, n, d)``, query head
    :math:`k` reads key/value head :math:`\lfloor k / n_{\text{rep}}\rfloor`
    (Baggag & Saad §3.11.2; Ainslie et al.)."""
    check_positive("repeat_kv", "n_rep", n_rep)
    dims = check_args("repeat_kv", xp, {"X": (X, ("*", "h_kv", "n", "d"))})
    if n_rep == 1:
        return X
    idx = xp.asarray([k // n_rep for k in range(dims["h_kv"] * n_rep)]) if not \
        xp.object_arrays else [k // n_rep for k in range(dims["h_kv"] * n_rep)]
    return xp.take(X, idx, axis=len(X.shape) - 3)


def repeat_kv_vjp(xp: Namespace, G: Any, X: Any, n_rep: int) -> tuple[Any]:
    r"""VJP of :func:`repeat_kv`: each shared head receives the sum of the cotangents of
    the :math:`n_{\text{rep}}` query heads that read it."""
    check_positive("repeat_kv_vjp", "n_rep", n_rep)
    dims = check_args("repeat_kv", xp, {"X": (X, ("*", "h_kv", "n", "d"))})
    dims = check_args("repeat_kv_vjp", xp, {"X": (X, ("*", "h_kv", "n", "d")),
                                            "G": (G, ("*", "h", "n", "d"))},
                      bound={"h": dims["h_kv"] * n_rep})
    if n_rep == 1:
        return (G,)
    lead = tuple(G.shape[:-3])
    grouped = xp.reshape(G, (*lead, dims["h_kv"], n_rep, dims["n"], dims["d"]))
    return (xp.sum(grouped, axis=len(lead) + 1),)


def repeat_kv_jvp(xp: Namespace, T: tuple[Any], X: Any, n_rep: int) -> Any:
    r"""JVP of :func:`repeat_kv` (Baggag & Saad §3.11.2): a linear map (each key/value head
    copied :math:`n_{\text{rep}}` times), so :math:`\dot Y_k = \dot X_{\lfloor k /
    n_{\text{rep}}\rfloor}`."""
    (dX,) = tangents("repeat_kv_jvp", T, ("dX",))
    check_args("repeat_kv_jvp", xp, {"X": (X, ("*", "h_kv", "n", "d")),
                                     "dX": (dX, ("*", "h_kv", "n", "d"))})
    return repeat_kv(xp, dX, n_rep)
