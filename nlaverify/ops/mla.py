r"""Multi-head latent attention (DeepSeek-V2/V3; DeepSeek-AI 2024, §2.1), written once against
``xp``: the keys and values of every head come from one low-rank latent
:math:`C = X W^{DKV}` (``(n, r)``, what the KV cache stores), with a decoupled RoPE key
:math:`K^R = \operatorname{RoPE}(X W^{KR})` shared by the heads (``(n, d_r)``):

.. math:: K^C_h = C W^{UK}_h,\quad V_h = C W^{UV}_h,\quad
          Q^C_h = X W^{Q}_h,\quad Q^R_h = \operatorname{RoPE}(X W^{QR}_h),

.. math:: S_h = \frac{Q^C_h {K^C_h}^\top + Q^R_h {K^R}^\top}{\sqrt{d_c + d_r}} + M,\qquad
          Y = \sum_h \operatorname{softmax}(S_h)\, V_h W^O_h .

:func:`mla_attention` computes this form (training); :func:`mla_attention_absorbed` the
inference form, with :math:`W^{UK}` absorbed into the query and :math:`W^{UV}` into the
output, attending over the latent itself:

.. math:: \tilde Q_h = Q^C_h {W^{UK}_h}^\top\ (n, r),\quad
          S_h = \frac{\tilde Q_h C^\top + Q^R_h {K^R}^\top}{\sqrt{d_c + d_r}} + M,\quad
          Y = \sum_h \operatorname{softmax}(S_h)\, C\,(W^{UV}_h W^O_h),

since :math:`Q^C_h (C W^{UK}_h)^\top = (Q^C_h {W^{UK}_h}^\top) C^\top` and
:math:`\operatorname{softmax}(S_h)(C W^{UV}_h) W^O_h = \operatorname{softmax}(S_h) C
(W^{UV}_h W^O_h)`: associativity only, which is why the decoupled RoPE key is needed (a
rotation between :math:`W^{UK}` and the query, depending on the position, could not be
absorbed). Identity ``mla_absorption`` proves the two functions equal on the exact namespace.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._validate import check_args
from nlaverify.ops.rotary import rope
from nlaverify.ops.sdpa import attention

__all__ = ["mla_attention", "mla_attention_absorbed", "mla_cache_entries"]


def _check(op: str, xp: Namespace, X: Any, W_DKV: Any, W_UK: Any, W_UV: Any, W_Q: Any,
           W_QR: Any, W_KR: Any, W_O: Any) -> dict[str, int]:
    return check_args(op, xp, {
        "X": (X, ("n", "d")), "W_DKV": (W_DKV, ("d", "r")), "W_UK": (W_UK, ("h", "r", "d_c")),
        "W_UV": (W_UV, ("h", "r", "d_v")), "W_Q": (W_Q, ("h", "d", "d_c")),
        "W_QR": (W_QR, ("h", "d", "d_r")), "W_KR": (W_KR, ("d", "d_r")),
        "W_O": (W_O, ("h", "d_v", "d"))})


def _rope_parts(xp: Namespace, X: Any, W_QR: Any, W_KR: Any, base: int, scale: Any
                ) -> tuple[Any, Any]:
    """The scaled rotated queries ``(h, n, d_r)`` and the shared rotated key ``(n, d_r)``."""
    QR = rope(xp, xp.matmul(X, W_QR), base) * scale
    return QR, rope(xp, xp.matmul(X, W_KR), base)


def mla_attention(xp: Namespace, X: Any, W_DKV: Any, W_UK: Any, W_UV: Any, W_Q: Any,
                  W_QR: Any, W_KR: Any, W_O: Any, causal: bool = True,
                  base: int = 10000) -> Any:
    r"""Multi-head latent attention in its training form (module docstring): per head the
    keys :math:`[K^C_h, K^R]` and values :math:`V_h` are materialised from the latent.

    Args:
        X: ``(n, d)``; W_DKV: ``(d, r)``; W_UK: ``(h, r, d_c)``; W_UV: ``(h, r, d_v)``;
            W_Q: ``(h, d, d_c)``; W_QR: ``(h, d, d_r)``; W_KR: ``(d, d_r)``;
            W_O: ``(h, d_v, d)``.
    """
    dims = _check("mla_attention", xp, X, W_DKV, W_UK, W_UV, W_Q, W_QR, W_KR, W_O)
    scale = xp.const_sqrt(1, dims["d_c"] + dims["d_r"])
    C = xp.matmul(X, W_DKV)
    QR, KR = _rope_parts(xp, X, W_QR, W_KR, base, scale)
    out = None
    for h in range(dims["h"]):
        Q = xp.concat([xp.matmul(X, W_Q[h]) * scale, QR[h]], axis=-1)
        K = xp.concat([xp.matmul(C, W_UK[h]), KR], axis=-1)
        head = attention(xp, Q, K, xp.matmul(C, W_UV[h]), causal=causal, scale=1)
        term = xp.matmul(head, W_O[h])
        out = term if out is None else out + term
    return out


def mla_attention_absorbed(xp: Namespace, X: Any, W_DKV: Any, W_UK: Any, W_UV: Any, W_Q: Any,
                           W_QR: Any, W_KR: Any, W_O: Any, causal: bool = True,
                           base: int = 10000) -> Any:
    r"""Multi-head latent attention in its inference form (module docstring): the queries
    :math:`\tilde Q_h = Q^C_h {W^{UK}_h}^\top` attend over the latent :math:`C` itself
    (with the shared :math:`K^R`), and each head's output map is :math:`W^{UV}_h W^O_h`
    (``(r, d)``): nothing per head is materialised over the sequence."""
    dims = _check("mla_attention_absorbed", xp, X, W_DKV, W_UK, W_UV, W_Q, W_QR, W_KR, W_O)
    scale = xp.const_sqrt(1, dims["d_c"] + dims["d_r"])
    C = xp.matmul(X, W_DKV)
    QR, KR = _rope_parts(xp, X, W_QR, W_KR, base, scale)
    keys = xp.concat([C, KR], axis=-1)
    out = None
    for h in range(dims["h"]):
        Qt = xp.matmul(xp.matmul(X, W_Q[h]), xp.matrix_transpose(W_UK[h])) * scale
        head = attention(xp, xp.concat([Qt, QR[h]], axis=-1), keys, C, causal=causal, scale=1)
        term = xp.matmul(head, xp.matmul(W_UV[h], W_O[h]))
        out = term if out is None else out + term
    return out


def mla_cache_entries(n: int, r: int, d_r: int, h: int, d_c: int, d_v: int) -> dict[str, int]:
    r"""Values cached per layer for ``n`` tokens: MLA's latent and shared RoPE key,
    :math:`n(r + d_r)`, against the :math:`n h (d_c + d_r + d_v)` of the same attention
    with its keys and values materialised per head (DeepSeek-V2's KV-cache saving)."""
    return {"mla": n * (r + d_r), "materialised": n * h * (d_c + d_r + d_v)}
