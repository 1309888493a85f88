r"""The RWKV-4 WKV recurrence (Peng et al. 2023, eq. (14)-(16); Baggag & Saad §5.3.4), naive
and in its numerically stable running-maximum form, written once against ``xp``.

Per channel, with the log-decay :math:`w < 0` (Hugging Face's ``RwkvSelfAttention``:
:math:`w = -e^{\text{time\_decay}}`), the bonus :math:`u` (``time_first``), keys
:math:`k_t` and values :math:`v_t`,

.. math:: \mathrm{wkv}_t = \frac{\sum_{i<t} e^{(t-1-i)w + k_i} v_i + e^{u + k_t} v_t}
                               {\sum_{i<t} e^{(t-1-i)w + k_i} + e^{u + k_t}} .

:func:`wkv_naive` evaluates it as written (it overflows once :math:`k_i` reaches about 88
in float32). :func:`wkv` carries the state :math:`(p, q, m)` with
:math:`p = \sum_{i<t} e^{(t-1-i)w + k_i - m} v_i`, :math:`q` the same without
:math:`v_i`, and rescales to a new shift before each exponential, as ``rwkv_linear_attention
_cpu`` of transformers does with :math:`m' = \max(\cdot,\cdot)`: every exponent is then
:math:`\le 0`. The shift is the namespace's :meth:`~nlaverify.backends.base.Namespace
.stability_shift` (the maximum on floating backends, an opaque real symbol on the exact one),
so identity ``ssm_wkv_stable_equals_naive`` proves the stable form equal to the naive one
for *every* choice of shifts, the maximum included.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._validate import check_args

__all__ = ["wkv", "wkv_naive"]


def _check(op: str, xp: Namespace, w: Any, u: Any, k: Any, v: Any) -> None:
    check_args(op, xp, {"w": (w, ("d",)), "u": (u, ("d",)), "k": (k, ("*", "T", "d")),
                        "v": (v, ("*", "T", "d"))})


def wkv_naive(xp: Namespace, w: Any, u: Any, k: Any, v: Any) -> Any:
    r"""The WKV operator as written (see the module's docstring): ``w``, ``u`` ``(d,)``,
    ``k``, ``v`` ``(..., T, d)``; ``(..., T, d)``. The definition, not a kernel: it
    overflows for large keys."""
    _check("wkv_naive", xp, w, u, k, v)
    out = []
    for t in range(k.shape[-2]):
        bonus = xp.exp(u + k[..., t, :])
        num, den = bonus * v[..., t, :], bonus
        for i in range(t):
            e = xp.exp((t - 1 - i) * w + k[..., i, :])
            num, den = num + e * v[..., i, :], den + e
        out.append(num / den)
    return xp.stack(out, axis=-2)


def _shift(xp: Namespace, a: Any, b: Any) -> Any:
    """The per-entry stability shift of the pair ``(a, b)``: on floating backends
    :math:`\\max(a, b)`."""
    return xp.stability_shift(xp.stack([a, b], axis=-1), axis=-1)[..., 0]


def wkv(xp: Namespace, w: Any, u: Any, k: Any, v: Any, state: Any = None,
        return_state: bool = False) -> Any:
    r"""The WKV operator in the running-maximum form of RWKV-4 (``rwkv_linear_attention_cpu``):
    at step :math:`t`, with the state :math:`(p, q, m)`,

    .. math:: m_o = c(m, u + k_t),\quad \mathrm{wkv}_t = \frac{e^{m - m_o} p + e^{u + k_t -
       m_o} v_t}{e^{m - m_o} q + e^{u + k_t - m_o}},

    .. math:: m' = c(m + w, k_t),\quad p' = e^{m + w - m'} p + e^{k_t - m'} v_t,\quad
       q' = e^{m + w - m'} q + e^{k_t - m'},

    :math:`c` the stability shift (the maximum: every exponent :math:`\le 0`, and the larger
    term of each denominator is 1, so nothing overflows and :math:`q \ge 1`). The initial
    state is :math:`(0, 0, -\infty)` or ``state`` = ``(p, q, m)``, each ``(..., d)``.
    Returns ``(..., T, d)``, or ``(out, (p, q, m))`` with ``return_state``.
    """
    _check("wkv", xp, w, u, k, v)
    if state is None:
        zero = xp.zeros_like(k[..., 0, :])
        p, q, m = zero, zero, zero - xp.inf
    else:
        p, q, m = state
    out = []
    for t in range(k.shape[-2]):
        kt, vt = k[..., t, :], v[..., t, :]
        mo = _shift(xp, m, u + kt)
        e1, e2 = xp.exp(m - mo), xp.exp(u + kt - mo)
        out.append((e1 * p + e2 * vt) / (e1 * q + e2))
        ms = _shift(xp, m + w, kt)
        e1, e2 = xp.exp(m + w - ms), xp.exp(kt - ms)
        p, q, m = e1 * p + e2 * vt, e1 * q + e2, ms
    y = xp.stack(out, axis=-2)
    return (y, (p, q, m)) if return_state else y
