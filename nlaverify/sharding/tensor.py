r"""Tensor parallelism (Shoeybi et al. 2019, Megatron-LM §3): the column-parallel then
row-parallel MLP, attention with its heads split across devices, and the
vocabulary-parallel softmax, log-sum-exp and cross-entropy.

**Column then row.** With :math:`W_1 = [W_1^{(1)} \mid \dots \mid W_1^{(S)}]` split by
columns and :math:`W_2` by the matching rows, an elementwise activation :math:`f` acts on
each device's own columns, so

.. math:: f(XW_1)\,W_2 = \sum_{s=1}^S f\bigl(XW_1^{(s)}\bigr)\,W_2^{(s)} :

one all-reduce (sum of the partial products) after the row-parallel matmul and none in
between (Megatron-LM, Fig. 3a).

**Vocabulary parallel.** With the logits split by vocabulary, :math:`z = [z^{(1)}, \dots,
z^{(S)}]`, each device computes :math:`m_s = \max_j z^{(s)}_j` and :math:`\ell_s = \sum_j
e^{z^{(s)}_j - m_s}`; the log-sum-exp merge (the online softmax's, Milakov & Gimelshein
2018) with the *global* max :math:`m = \max_s m_s` is

.. math:: \ell = \sum_s e^{m_s - m}\ell_s = \sum_j e^{z_j - m},\qquad
   \log\sum_j e^{z_j} = m + \log\ell ,

one all-reduce-max and one all-reduce-sum, and the cross-entropy needs one more for the
target logit (held by one device, zeros elsewhere; Megatron-LM §3, the parallel
cross-entropy). Baggag & Saad §3.1 (softmax, cross-entropy).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ShapeError
from nlaverify.ops import online_softmax as _os
from nlaverify.ops import sdpa as _sd
from nlaverify.ops.loss import IGNORE_INDEX, _divisor
from nlaverify.sharding._shards import (
    _shape,
    all_reduce_sum,
    check_same_count,
    check_shards,
    offsets,
)

#: an elementwise activation ``f(xp, H)`` (``None``: the identity)
Activation = Callable[[Namespace, Any], Any] | None


def _check_mlp(op: str, X: Any, W1_shards: Any, W2_shards: Any) -> tuple[list, list]:
    W1 = check_shards(op, "W1_shards", W1_shards, -1)
    W2 = check_shards(op, "W2_shards", W2_shards, 0)
    check_same_count(op, W1_shards=W1, W2_shards=W2)
    for s, (a, b) in enumerate(zip(W1, W2, strict=True)):
        if _shape(a)[-1] != _shape(b)[0]:
            raise ShapeError(f"{op}: argument 'W2_shards': shard {s} has {_shape(b)[0]} rows, "
                             f"expected the {_shape(a)[-1]} columns of W1_shards[{s}]")
    if _shape(X)[-1] != _shape(W1[0])[0]:
        raise ShapeError(f"{op}: argument 'X': expected {_shape(W1[0])[0]} columns (the rows "
                         f"of W1), got shape {_shape(X)}")
    return W1, W2


def mlp(xp: Namespace, X: Any, W1: Any, W2: Any, activation: Activation = None) -> Any:
    r"""The unsharded two-layer MLP :math:`f(XW_1)W_2` (the reference)."""
    H = xp.matmul(X, W1)
    return xp.matmul(H if activation is None else activation(xp, H), W2)


def column_row_partial(xp: Namespace, X: Any, W1_s: Any, W2_s: Any,
                       activation: Activation = None) -> Any:
    r"""One device's partial product :math:`f(XW_1^{(s)})W_2^{(s)}` (column-parallel, then
    row-parallel; no communication)."""
    return mlp(xp, X, W1_s, W2_s, activation)


def tensor_parallel_mlp(xp: Namespace, X: Any, W1_shards: Sequence[Any],
                        W2_shards: Sequence[Any], activation: Activation = None) -> Any:
    r"""The Megatron MLP: :math:`\sum_s f(XW_1^{(s)})W_2^{(s)}`, the all-reduce of the
    partial products (module docstring).

    Args:
        xp: the array namespace.
        X: the input ``(*, n, d)``, replicated on every device.
        W1_shards: the column shards of :math:`W_1` ``(d, h_s)``.
        W2_shards: the row shards of :math:`W_2` ``(h_s, d_out)``, one per column shard.
        activation: an elementwise ``f(xp, H)``, or ``None``.
    """
    W1, W2 = _check_mlp("tensor_parallel_mlp", X, W1_shards, W2_shards)
    return all_reduce_sum(xp, [column_row_partial(xp, X, a, b, activation)
                               for a, b in zip(W1, W2, strict=True)])


def tensor_parallel_mlp_without_all_reduce(
    xp: Namespace, X: Any, W1_shards: Sequence[Any], W2_shards: Sequence[Any],
    activation: Activation = None, device: int = 0,
) -> Any:
    r"""A counterexample (the planted bug "missing all-reduce"): what ``device`` holds when
    the all-reduce after the row-parallel matmul is dropped, its partial product alone."""
    W1, W2 = _check_mlp("tensor_parallel_mlp_without_all_reduce", X, W1_shards, W2_shards)
    return column_row_partial(xp, X, W1[device], W2[device], activation)


# --------------------------------------------------------------------------- attention heads


def _check_heads(op: str, X: Any, W_Q_shards: Any, W_K_shards: Any, W_V_shards: Any,
                 W_O_shards: Any, heads: Any) -> tuple[list, ...]:
    W = [check_shards(op, name, w, ax) for name, w, ax in (
        ("W_Q_shards", W_Q_shards, -1), ("W_K_shards", W_K_shards, -1),
        ("W_V_shards", W_V_shards, -1), ("W_O_shards", W_O_shards, 0))]
    n = check_same_count(op, W_Q_shards=W[0], W_K_shards=W[1], W_V_shards=W[2],
                         W_O_shards=W[3])
    if isinstance(heads, int) and not isinstance(heads, bool):
        heads = [heads] * n
    if (isinstance(heads, str | bytes) or not isinstance(heads, Sequence) or len(heads) != n
            or any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in heads)):
        raise ShapeError(f"{op}: argument 'heads': expected a positive number of heads per "
                         f"shard, one per device ({n}), got {heads!r}")
    for s, (q, k, v, o, h) in enumerate(zip(*W, heads, strict=True)):
        widths = (_shape(q)[-1], _shape(k)[-1], _shape(v)[-1], _shape(o)[0])
        if len(set(widths)) != 1 or widths[0] % h:
            raise ShapeError(f"{op}: shard {s}: the columns of W_Q, W_K, W_V and the rows of "
                             f"W_O {widths} must agree and be divisible by its {h} heads")
    if _shape(X)[-1] != _shape(W[0][0])[0]:
        raise ShapeError(f"{op}: argument 'X': expected {_shape(W[0][0])[0]} columns (the "
                         f"rows of W_Q), got shape {_shape(X)}")
    return (*W, list(heads))


def tensor_parallel_attention(xp: Namespace, X: Any, W_Q_shards: Sequence[Any],
                              W_K_shards: Sequence[Any], W_V_shards: Sequence[Any],
                              W_O_shards: Sequence[Any], heads: int | Sequence[int],
                              causal: bool = False) -> Any:
    r"""Multi-head attention with the heads split across devices (Megatron-LM §3, Fig. 3b;
    Baggag & Saad §3.5): device :math:`s` holds the column blocks of :math:`W_Q, W_K, W_V`
    of its heads and the matching rows of :math:`W_O`, and computes its heads' attention
    times its rows of :math:`W_O` (:func:`~nlaverify.ops.sdpa.multihead_attention` on its
    slices); one all-reduce sums them:

    .. math:: [A_1, \dots, A_h]\,W_O = \sum_s [A_k]_{k \in s}\,W_O^{(s)} .

    Args:
        xp: the array namespace.
        X: the input ``(*, n, d)``, replicated.
        W_Q_shards, W_K_shards, W_V_shards: each device's column blocks ``(d, h_s d_k)``.
        W_O_shards: each device's row block of :math:`W_O` ``(h_s d_k, d_out)``.
        heads: the number of heads :math:`h_s` of each device (one number: all alike).
        causal: a causal mask.
    """
    Wq, Wk, Wv, Wo, hs = _check_heads("tensor_parallel_attention", X, W_Q_shards, W_K_shards,
                                      W_V_shards, W_O_shards, heads)
    return all_reduce_sum(xp, [_sd.multihead_attention(xp, X, q, k, v, o, h, causal)
                               for q, k, v, o, h in zip(Wq, Wk, Wv, Wo, hs, strict=True)])


def tensor_parallel_attention_without_all_reduce(
    xp: Namespace, X: Any, W_Q_shards: Sequence[Any], W_K_shards: Sequence[Any],
    W_V_shards: Sequence[Any], W_O_shards: Sequence[Any], heads: int | Sequence[int],
    causal: bool = False, device: int = 0,
) -> Any:
    r"""A counterexample (the planted bug "missing all-reduce"): what ``device`` holds when
    the all-reduce after the row-parallel :math:`W_O` is dropped, its heads' share
    :math:`[A_k]_{k \in s}W_O^{(s)}` alone."""
    Wq, Wk, Wv, Wo, hs = _check_heads("tensor_parallel_attention_without_all_reduce", X,
                                      W_Q_shards, W_K_shards, W_V_shards, W_O_shards, heads)
    return _sd.multihead_attention(xp, X, Wq[device], Wk[device], Wv[device], Wo[device],
                                   hs[device], causal)


# --------------------------------------------------------------------------- vocabulary


def vocab_shard_statistics(xp: Namespace, Z_s: Any) -> tuple[Any, Any]:
    r"""One device's :math:`(m_s, \ell_s)`: :math:`\ell_s = \sum_j e^{z^{(s)}_j - m_s}` at
    its own shift :math:`m_s` (the row max on floating backends; shape ``(*, n, 1)``)."""
    shift = xp.stability_shift(Z_s, -1)
    ell = xp.sum(xp.exp(Z_s - shift), axis=-1, keepdims=True)
    return _os._masked_max(xp, shift, ell), ell


def merge_vocab_statistics(xp: Namespace, stats: Sequence[tuple[Any, Any]]) -> tuple[Any, Any]:
    r"""The log-sum-exp merge: rescale every :math:`\ell_s` to the global shift,
    :math:`\ell = \sum_s e^{m_s - m}\ell_s` (:func:`~nlaverify.ops.online_softmax
    .merge_statistics`, associative and commutative; an all-reduce-max then -sum)."""
    total = stats[0]
    for st in stats[1:]:
        total = _os.merge_statistics(xp, total, st)
    return total[0], total[1]


def _vocab(op: str, xp: Namespace, Z_shards: Any) -> tuple[list[Any], Any, Any]:
    Z = check_shards(op, "Z_shards", Z_shards, -1)
    m, ell = merge_vocab_statistics(xp, [vocab_shard_statistics(xp, z) for z in Z])
    return Z, m, ell


def vocab_parallel_logsumexp(xp: Namespace, Z_shards: Sequence[Any]) -> Any:
    r""":math:`\log\sum_j e^{z_j} = m + \log\ell` from the vocabulary shards ``(*, n, V_s)``
    (module docstring); shape ``(*, n, 1)``."""
    _, m, ell = _vocab("vocab_parallel_logsumexp", xp, Z_shards)
    return m + xp.log(ell)


def vocab_parallel_softmax(xp: Namespace, Z_shards: Sequence[Any]) -> list[Any]:
    r"""Each device's piece of :math:`\operatorname{softmax}(z)`: :math:`e^{z^{(s)} - m}/
    \ell` with the global :math:`(m, \ell)` (module docstring)."""
    Z, m, ell = _vocab("vocab_parallel_softmax", xp, Z_shards)
    return [xp.exp(z - m) / ell for z in Z]


def vocab_parallel_softmax_without_global_max(xp: Namespace,
                                              Z_shards: Sequence[Any]) -> list[Any]:
    r"""A counterexample (the planted bug "no global max"): the local sums are added at
    their own shifts, :math:`\ell' = \sum_s \ell_s`, and each device divides
    :math:`e^{z^{(s)} - m_s}` by it. Wrong unless every :math:`m_s` is the same."""
    Z = check_shards("vocab_parallel_softmax_without_global_max", "Z_shards", Z_shards, -1)
    stats = [vocab_shard_statistics(xp, z) for z in Z]
    ell = all_reduce_sum(xp, [st[1] for st in stats])
    return [xp.exp(z - m) / ell for z, (m, _) in zip(Z, stats, strict=True)]


def vocab_parallel_logsumexp_without_global_max(xp: Namespace, Z_shards: Sequence[Any],
                                                device: int = 0) -> Any:
    r"""A counterexample: ``device``'s log-sum-exp when the local sums are added at their
    own shifts, :math:`m_{\text{device}} + \log\sum_s \ell_s`."""
    Z = check_shards("vocab_parallel_logsumexp_without_global_max", "Z_shards", Z_shards, -1)
    stats = [vocab_shard_statistics(xp, z) for z in Z]
    return stats[device][0] + xp.log(all_reduce_sum(xp, [st[1] for st in stats]))


def target_logit(xp: Namespace, Z_s: Any, targets: Any, lo: int) -> Any:
    r"""One device's share of the target logit :math:`z_{t_i}`: the logit where the target
    falls in its vocabulary range :math:`[lo, lo + V_s)`, else 0 (an ignored target falls
    in no range); shape ``(*, n)``. Their all-reduce is :math:`z_{t_i}`."""
    Y = xp.one_hot(targets - lo, _shape(Z_s)[-1], Z_s.dtype)
    return xp.sum(Y * Z_s, axis=-1)


def vocab_parallel_cross_entropy(xp: Namespace, Z_shards: Sequence[Any], targets: Any,
                                 ignore_index: int = IGNORE_INDEX, reduction: str = "mean",
                                 lse: Callable[..., Any] | None = None) -> Any:
    r"""The cross-entropy of :func:`~nlaverify.ops.loss.cross_entropy` from the vocabulary
    shards of the logits (Megatron-LM §3):

    .. math:: L = \frac1N\sum_{i:\,t_i\ne\varnothing}\Bigl(m_i + \log\ell_i -
       \sum_s z^{(s)}_{i,t_i}\Bigr) ,

    the target logit an all-reduce of :func:`target_logit`. ``targets`` ``(*, n)`` are
    global vocabulary ids (``ignore_index``: no target); ``lse`` replaces
    :func:`vocab_parallel_logsumexp` (to plant a bug).
    """
    op = "vocab_parallel_cross_entropy"
    Z = check_shards(op, "Z_shards", Z_shards, -1)
    if _shape(targets) != _shape(Z[0])[:-1]:
        raise ShapeError(f"{op}: argument 'targets': expected shape {_shape(Z[0])[:-1]} (the "
                         f"logits' without the vocabulary axis), got {_shape(targets)}")
    los = offsets([_shape(z)[-1] for z in Z])
    picked = all_reduce_sum(xp, [target_logit(xp, z, targets, lo)
                                 for z, lo in zip(Z, los, strict=True)])
    keep = targets != ignore_index
    w = xp.asarray(keep.astype(int)) if xp.object_arrays else xp.astype(keep, Z[0].dtype)
    log_z = (lse or vocab_parallel_logsumexp)(xp, Z)[..., 0]
    count = xp.sum(w)
    return xp.sum(w * (log_z - picked)) / _divisor(op, xp, count, reduction)


__all__ = [
    "Activation",
    "column_row_partial",
    "merge_vocab_statistics",
    "mlp",
    "target_logit",
    "tensor_parallel_attention",
    "tensor_parallel_attention_without_all_reduce",
    "tensor_parallel_mlp",
    "tensor_parallel_mlp_without_all_reduce",
    "vocab_parallel_cross_entropy",
    "vocab_parallel_logsumexp",
    "vocab_parallel_logsumexp_without_global_max",
    "vocab_parallel_softmax",
    "vocab_parallel_softmax_without_global_max",
    "vocab_shard_statistics",
]
