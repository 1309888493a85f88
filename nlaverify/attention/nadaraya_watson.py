r"""Nadaraya–Watson kernel regression: attention as a weighted mean of values.

Baggag & Saad §2.8 (Figs. 13–14): for a query :math:`q`, keys :math:`k_j` and values
:math:`v_j`, the weights

.. math:: a(q, k_j) = \frac{K_\sigma(q, k_j)}{\sum_l K_\sigma(q, k_l)},\qquad
   K_\sigma(q, k) = \exp\Bigl(-\frac{\|q - k\|^2}{2\sigma^2}\Bigr),

are positive and sum to one, and the inferred value is :math:`\hat v(q) = \sum_j a(q, k_j)
v_j`. The weights are a softmax of the logits :math:`-\|q - k_j\|^2/(2\sigma^2)`, computed
with :func:`nlaverify.ops.softmaxes.softmax` (its stability shift makes the largest weight's
exponent exactly 0, so nothing underflows to :math:`0/0` as :math:`\sigma \to 0`, where the
estimate tends to the value of the nearest key). Since :math:`-\|q - k\|^2/2 = q^\top k -
\|q\|^2/2 - \|k\|^2/2` and the :math:`\|q\|^2` term is constant along a row, softmax
attention :math:`\operatorname{softmax}(q^\top k_j/\sqrt d)` *is* Nadaraya–Watson with
:math:`\sigma = d^{1/4}` when the keys have equal norms (in general the Gaussian weights are
multiplied by the key factor :math:`e^{\|k_j\|^2/(2\sqrt d)}`).
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, ShapeError

__all__ = ["nadaraya_watson", "nadaraya_watson_weights", "squared_distances"]


def squared_distances(xp: Namespace, Q: Any, K: Any) -> Any:
    r"""The matrix :math:`D_{ij} = \|q_i - k_j\|^2` of rows ``Q`` ``(n_q, d)`` and ``K``
    ``(n_k, d)``, as the exact difference (no :math:`\|q\|^2 + \|k\|^2 - 2q^\top k`
    cancellation): shape ``(n_q, n_k)``."""
    diff = xp.reshape(Q, (Q.shape[0], 1, Q.shape[1])) - xp.reshape(K, (1, *K.shape))
    return xp.sum(diff * diff, axis=-1)


def _rows(name: str, v: Any) -> tuple[int, ...]:
    shape = tuple(v.shape)
    if len(shape) not in (1, 2):
        raise ShapeError(f"nadaraya_watson: argument {name!r}: expected shape (d,) or (n, d), "
                         f"got {shape}")
    return shape


def nadaraya_watson_weights(xp: Namespace, q: Any, keys: Any, sigma: Any) -> Any:
    r"""The Nadaraya–Watson weights :math:`a(q_i, k_j) = \operatorname{softmax}_j\bigl(
    -\|q_i - k_j\|^2/(2\sigma^2)\bigr)` (Baggag & Saad §2.8): rows of ``q`` ``(n_q, d)`` (or a
    single ``(d,)`` query) against ``keys`` ``(n_k, d)`` (or ``(n_k,)`` scalars, ``d = 1``);
    shape ``(n_q, n_k)`` (``(n_k,)`` for a single query). Positive, rows sum to one."""
    from nlaverify.ops.softmaxes import softmax

    if not xp.object_arrays and not float(sigma) > 0.0:
        raise ArgumentError(f"nadaraya_watson: argument 'sigma': expected > 0, got {sigma!r}")
    ks = _rows("keys", keys)
    K = keys if len(ks) == 2 else xp.reshape(keys, (ks[0], 1))
    qs = _rows("q", q)
    single = len(qs) == 1 and len(ks) == 2
    Q = xp.reshape(q, (1, qs[0])) if single else (q if len(qs) == 2 else xp.reshape(q, (qs[0], 1)))
    if Q.shape[-1] != K.shape[-1]:
        raise ShapeError(f"nadaraya_watson: arguments 'q', 'keys': expected the same feature "
                         f"dimension, got {tuple(Q.shape)} and {tuple(K.shape)}")
    logits = -squared_distances(xp, Q, K) / (sigma * sigma * 2)
    A = softmax(xp, logits)
    return A[0] if single else A


def nadaraya_watson(xp: Namespace, q: Any, keys: Any, values: Any, sigma: Any) -> Any:
    r"""Nadaraya–Watson regression (Baggag & Saad §2.8, Fig. 14):

    .. math:: \hat v(q_i) = \sum_j a(q_i, k_j)\, v_j,\qquad
       a(q_i, k_j) = \frac{e^{-\|q_i - k_j\|^2/(2\sigma^2)}}
       {\sum_l e^{-\|q_i - k_l\|^2/(2\sigma^2)}}.

    Args:
        q: queries ``(n_q, d)``, a single query ``(d,)``, or ``(n_q,)`` scalar queries when
            ``keys`` is ``(n_k,)``.
        keys: ``(n_k, d)`` or ``(n_k,)`` (scalar keys).
        values: ``(n_k,)`` or ``(n_k, d_v)``.
        sigma: the bandwidth :math:`\sigma > 0`.

    Returns:
        The weighted means: ``(n_q,)`` / ``(n_q, d_v)`` (no query axis for a single query).
    """
    A = nadaraya_watson_weights(xp, q, keys, sigma)
    vs = tuple(values.shape)
    n_k = A.shape[-1]
    if len(vs) not in (1, 2) or vs[0] != n_k:
        raise ShapeError(f"nadaraya_watson: argument 'values': expected shape (n_k={n_k},) or "
                         f"(n_k={n_k}, d_v), got {vs}")
    if len(vs) == 1:
        return xp.sum(A * values, axis=-1)
    return xp.matmul(A, values)
