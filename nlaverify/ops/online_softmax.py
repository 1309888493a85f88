r"""Blockwise attention by the online softmax (FlashAttention's forward), its VJP and JVP.

Baggag & Saad §3.4.2 (softmax attention), §3.4.4 (causal masks); the online softmax of
Milakov & Gimelshein 2018 ("Online normalizer calculation for softmax") and the tiled
forward and backward of FlashAttention (Dao et al. 2022, Algorithms 1 and 2).

The keys and values are split into contiguous blocks :math:`B_1, \dots, B_T` (a fixed
``block`` size, the last block ragged, or an explicit list of block sizes). Block
:math:`b` of the scores :math:`S_b = Q K_b^\top/\sqrt{d_k} + M_b` gives the *statistics*

.. math:: m_b = c(S_b),\quad P_b = e^{S_b - m_b},\quad \ell_b = P_b\mathbf 1,\quad
   O_b = P_b V_b ,

with :math:`c` the namespace's :meth:`~nlaverify.backends.base.Namespace.stability_shift`
(the row maximum on floating backends, an opaque real symbol on the exact one). Two
statistics merge by rescaling both to a common shift :math:`m'`:

.. math:: m' = c([m_a, m_b]),\quad \ell' = e^{m_a - m'}\ell_a + e^{m_b - m'}\ell_b,\quad
   O' = e^{m_a - m'} O_a + e^{m_b - m'} O_b ,

and the output is :math:`O/\ell`. For *any* shifts, :math:`\ell = \sum_{j} e^{s_j - m}`
and :math:`O = \sum_j e^{s_j - m} v_j^\top` over the keys merged so far, so the merge is
associative and commutative and the result is softmax attention for every split and every
merge order (identities ``online_softmax_merge`` and ``blockwise_attention_equals_softmax
_attention``, proved exactly on these functions).

**Numerics.** With :math:`m' = \max(m_a, m_b)` both rescale factors are :math:`\le 1` and
one is exactly :math:`1`, so nothing overflows for any finite score magnitude, and
:math:`\ell \ge 1` on every row that sees a key (lemma
``softmax_denominator_at_least_one``). A block in which a row sees no key (causal or
sliding-window masks) has :math:`\ell_b = 0`; its running maximum is kept at
:math:`-\infty` (not the stability shift's :math:`0`), so a later block of very negative
scores is not rescaled by a spurious :math:`e^{-|s|}` that would underflow. A row that
sees no key at all gives a row of zeros, the "safe softmax" convention of
:mod:`nlaverify.ops.softmaxes`.

**Causal alignment.** Under ``causal`` the :math:`n_q` queries are the *last* :math:`n_q`
positions of the :math:`n_k` keys (query :math:`i` sits at position
:math:`i + n_k - n_q`, FlashAttention-2's bottom-right alignment), so a decoding step's
query attends to the whole cache; with :math:`n_q = n_k` it is the mask of
:func:`~nlaverify.ops.sdpa.causal_mask`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError
from nlaverify.ops._tangent import lin, tangents, tsum
from nlaverify.ops._validate import check_args
from nlaverify.ops.sdpa import _check_window

#: a block split: a block size (the last block ragged) or the list of block sizes
Block = int | Sequence[int]
#: the statistics of a set of keys: ``(m, l, O, *more)``, every entry after m rescaled alike
Statistics = tuple[Any, ...]


def block_bounds(n_k: int, block: Block, *, op: str = "blockwise_attention",
                 arg: str = "block", what: str = "the number of keys"
                 ) -> list[tuple[int, int]]:
    r"""The contiguous blocks ``[(lo, hi), ...]`` of :math:`n_k` keys (or steps): of size
    ``block`` (the last one ragged), or of the sizes listed in ``block`` (which must sum to
    :math:`n_k`, ``what``); an error names ``op`` and its argument ``arg``."""
    if isinstance(block, bool) or not isinstance(block, int | Sequence):
        raise ArgumentError(f"{op}: argument {arg!r}: expected a positive "
                            f"integer or a sequence of them, got {block!r}")
    if isinstance(block, int):
        if block < 1:
            raise ArgumentError(f"{op}: argument {arg!r}: expected a positive "
                                f"integer, got {block}")
        sizes = [min(block, n_k - lo) for lo in range(0, n_k, block)]
    else:
        sizes = list(block)
        if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 1
                            for s in sizes) or sum(sizes) != n_k:
            raise ArgumentError(f"{op}: argument {arg!r}: expected positive sizes "
                                f"summing to {what} {n_k}, got {tuple(sizes)}")
    bounds, lo = [], 0
    for s in sizes:
        bounds.append((lo, lo + s))
        lo += s
    return bounds


def block_scores(xp: Namespace, Q: Any, K_b: Any, lo: int, n_k: int, causal: bool = False,
                 window: int | None = None) -> Any:
    r"""Scores of one key block, :math:`S_b = Q K_b^\top/\sqrt{d_k}`, with
    :math:`-\infty` where query :math:`i` (at position :math:`p_i = i + n_k - n_q`) may not
    see key :math:`j \in [lo, lo + |B_b|)`: :math:`j > p_i` (``causal``), or
    :math:`p_i - j \ge w` (``window``)."""
    S = xp.matmul(Q, xp.matrix_transpose(K_b)) / xp.const_sqrt(Q.shape[-1])
    if not causal:
        return S
    n_q, width = Q.shape[-2], K_b.shape[-2]
    pos = xp.arange(n_q)[:, None] + (n_k - n_q)
    key = xp.arange(width)[None, :] + lo
    seen = pos >= key
    if window is not None:
        seen = seen & (pos - key < window)
    return xp.where(seen, S, -xp.inf)


def _masked_max(xp: Namespace, shift: Any, ell: Any) -> Any:
    r"""The running maximum: the shift, or :math:`-\infty` on a row that has seen no key
    yet (:math:`\ell = 0`; otherwise :math:`\ell \ge 1`). On the exact namespace
    :math:`\ell` is a nonzero expression unless every entry is masked."""
    return xp.where(ell == 0, -xp.inf, shift)


def block_statistics(xp: Namespace, S_b: Any, V_b: Any) -> Statistics:
    r"""The statistics :math:`(m_b, \ell_b, O_b)` of one key block (module docstring):
    :math:`P_b = e^{S_b - m_b}`, :math:`\ell_b = P_b\mathbf 1`, :math:`O_b = P_b V_b`."""
    shift = xp.stability_shift(S_b, -1)
    P = xp.exp(S_b - shift)
    ell = xp.sum(P, axis=-1, keepdims=True)
    return _masked_max(xp, shift, ell), ell, xp.matmul(P, V_b)


def merge_statistics(xp: Namespace, a: Statistics, b: Statistics) -> Statistics:
    r"""Merge the statistics of two disjoint key sets (Milakov & Gimelshein 2018, eq. 4;
    Dao et al. 2022, Alg. 1 lines 10-12):

    .. math:: m' = c([m_a, m_b]),\quad x' = e^{m_a - m'} x_a + e^{m_b - m'} x_b
       \ \text{for every accumulated } x \in \{\ell, O, \dots\}.

    The rescale factors are computed with the finite shift :math:`c` (0 when both are
    :math:`-\infty`), never :math:`-\infty - (-\infty)`.
    """
    (m_a, *acc_a), (m_b, *acc_b) = a, b
    shift = xp.stability_shift(xp.concat([m_a, m_b], axis=-1), -1)
    alpha, beta = xp.exp(m_a - shift), xp.exp(m_b - shift)
    acc = [alpha * x + beta * y for x, y in zip(acc_a, acc_b, strict=True)]
    return (_masked_max(xp, shift, acc[0]), *acc)


def finalize_statistics(xp: Namespace, stats: Statistics) -> Any:
    r"""The attention output :math:`O/\ell` (a row of zeros where :math:`\ell = 0`: the
    floating backends' :meth:`~nlaverify.backends.base.Namespace.safe_row_sum`)."""
    _, ell, acc, *_ = stats
    return acc / xp.safe_row_sum(ell, -1)


def _check(op: str, xp: Namespace, Q: Any, K: Any, V: Any, causal: bool,
           window: int | None, block: Block, more: dict[str, tuple[Any, tuple]] | None = None
           ) -> list[tuple[int, int]]:
    _check_window(op, causal, window)
    dims = check_args(op, xp, {"Q": (Q, ("*", "n_q", "d_k")), "K": (K, ("*", "n_k", "d_k")),
                               "V": (V, ("*", "n_k", "d_v")), **(more or {})})
    return block_bounds(dims["n_k"], block)


def _fold(xp: Namespace, Q: Any, K: Any, V: Any, bounds: list[tuple[int, int]],
          causal: bool, window: int | None,
          per_block: Callable[[Any, int, int], Statistics] | None = None) -> Statistics:
    """Left fold of :func:`merge_statistics` over the blocks, in key order (FlashAttention's
    loop); ``per_block(S_b, lo, hi)`` gives a block's statistics (default:
    :func:`block_statistics`)."""
    n_k = K.shape[-2]
    stats = None
    for lo, hi in bounds:
        S_b = block_scores(xp, Q, K[..., lo:hi, :], lo, n_k, causal, window)
        st = (per_block(S_b, lo, hi) if per_block else
              block_statistics(xp, S_b, V[..., lo:hi, :]))
        stats = st if stats is None else merge_statistics(xp, stats, st)
    assert stats is not None
    return stats


def blockwise_attention(xp: Namespace, Q: Any, K: Any, V: Any, *, block: Block = 2,
                        causal: bool = False, window: int | None = None) -> Any:
    r"""Softmax attention computed block by block with the online softmax
    (FlashAttention's forward; Baggag & Saad §3.4.2, §3.4.4):

    .. math:: A = \frac{\sum_b e^{m_b - m} P_b V_b}{\sum_b e^{m_b - m} P_b \mathbf 1}
       = \operatorname{softmax}\!\Bigl(\frac{QK^\top}{\sqrt{d_k}} + M\Bigr) V .

    Args:
        xp: the array namespace.
        Q: queries ``(*, n_q, d_k)``; K: keys ``(*, n_k, d_k)``; V: values ``(*, n_k, d_v)``;
            ``*`` are batch and head axes.
        block: the key block size (the last block ragged) or the list of block sizes.
        causal: query :math:`i` sees keys :math:`j \le i + n_k - n_q` (module docstring).
        window: with ``causal``, a sliding window of :math:`w` keys, the query's own
            position included (as :func:`~nlaverify.ops.sdpa.causal_mask`).
    """
    bounds = _check("blockwise_attention", xp, Q, K, V, causal, window, block)
    return finalize_statistics(xp, _fold(xp, Q, K, V, bounds, causal, window))


def blockwise_attention_vjp(
    xp: Namespace, G: Any, Q: Any, K: Any, V: Any, *, block: Block = 2, causal: bool = False,
    window: int | None = None,
) -> tuple[Any, Any, Any]:
    r"""VJP of :func:`blockwise_attention`: FlashAttention's backward (Dao et al. 2022,
    Alg. 2). From the forward's final statistics :math:`(m, \ell)` and output :math:`A`,
    each block's probabilities are *recomputed*, never stored whole:

    .. math::
        P_b = e^{S_b - m}/\ell,\quad D = \operatorname{rowsum}(G\odot A),\quad
        \bar V_b = P_b^\top G,\quad dS_b = P_b\odot(G V_b^\top - D),\\
        \bar Q = \textstyle\sum_b dS_b K_b/\sqrt{d_k},\quad
        \bar K_b = dS_b^\top Q/\sqrt{d_k} .

    :math:`D = \operatorname{rowsum}(dP\odot P)` summed over all blocks, since
    :math:`\sum_j P_{ij} v_j = A_i`. A row that sees no key has :math:`\ell = 0` and gets
    :math:`m = 0, \ell = 1` here, so :math:`P_b = 0` (no cotangent) rather than ``nan``.
    """
    bounds = _check("blockwise_attention_vjp", xp, Q, K, V, causal, window, block,
                    {"G": (G, ("*", "n_q", "d_v"))})
    stats = _fold(xp, Q, K, V, bounds, causal, window)
    m, ell = stats[0], stats[1]
    A = finalize_statistics(xp, stats)
    m = xp.where(ell == 0, 0, m)
    ell = xp.safe_row_sum(ell, -1)
    D = xp.sum(G * A, axis=-1, keepdims=True)
    root = xp.const_sqrt(Q.shape[-1])
    n_k = K.shape[-2]
    dQ, dK, dV = None, [], []
    for lo, hi in bounds:
        K_b, V_b = K[..., lo:hi, :], V[..., lo:hi, :]
        P = xp.exp(block_scores(xp, Q, K_b, lo, n_k, causal, window) - m) / ell
        dV.append(xp.matmul(xp.matrix_transpose(P), G))
        dS = P * (xp.matmul(G, xp.matrix_transpose(V_b)) - D)
        dQ_b = xp.matmul(dS, K_b) / root
        dQ = dQ_b if dQ is None else dQ + dQ_b
        dK.append(xp.matmul(xp.matrix_transpose(dS), Q) / root)
    return dQ, xp.concat(dK, axis=-2), xp.concat(dV, axis=-2)


def blockwise_attention_jvp(
    xp: Namespace, T: tuple[Any, Any, Any], Q: Any, K: Any, V: Any, *, block: Block = 2,
    causal: bool = False, window: int | None = None,
) -> Any:
    r"""JVP of :func:`blockwise_attention`, itself an online softmax: each block adds the
    tangent statistics

    .. math:: \dot S_b = \frac{\dot Q K_b^\top + Q\dot K_b^\top}{\sqrt{d_k}},\quad
       \dot\ell_b = \operatorname{rowsum}(P_b\odot\dot S_b),\quad
       \dot O_b = (P_b\odot\dot S_b) V_b + P_b\dot V_b ,

    merged with the same rescale factors as :math:`(\ell, O)` (the shifts are constants:
    the output does not depend on them); then :math:`\dot A = (\dot O - A\odot\dot\ell)/
    \ell`, the quotient rule of :math:`A = O/\ell`. Masked entries have :math:`P = 0` and no
    tangent. ``T = (dQ, dK, dV)``, an entry ``None`` meaning a zero tangent.
    """
    dQ, dK, dV = tangents("blockwise_attention_jvp", T, ("dQ", "dK", "dV"))
    bounds = _check("blockwise_attention_jvp", xp, Q, K, V, causal, window, block,
                    {"dQ": (dQ, ("*", "n_q", "d_k")), "dK": (dK, ("*", "n_k", "d_k")),
                     "dV": (dV, ("*", "n_k", "d_v"))})
    root = xp.const_sqrt(Q.shape[-1])

    def per_block(S_b: Any, lo: int, hi: int) -> Statistics:
        V_b = V[..., lo:hi, :]
        m_b, l_b, O_b = block_statistics(xp, S_b, V_b)
        P = xp.exp(S_b - xp.where(l_b == 0, 0, m_b))
        dS = None if dQ is None and dK is None else tsum(
            lin(dQ, lambda t: xp.matmul(t, xp.matrix_transpose(K[..., lo:hi, :]))),
            lin(dK, lambda t: xp.matmul(Q, xp.matrix_transpose(t[..., lo:hi, :])))) / root
        PdS = lin(dS, lambda t: P * t)
        dl = xp.zeros_like(l_b) if PdS is None else xp.sum(PdS, axis=-1, keepdims=True)
        dO = tsum(lin(PdS, lambda t: xp.matmul(t, V_b)),
                  lin(dV, lambda t: xp.matmul(P, t[..., lo:hi, :])))
        return m_b, l_b, O_b, dl, dO

    stats = _fold(xp, Q, K, V, bounds, causal, window, per_block)
    _, ell, _, dl, dO = stats
    A = finalize_statistics(xp, stats)
    return (dO - A * dl) / xp.safe_row_sum(ell, -1)
