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

**Derivatives** (:func:`wkv_vjp`, :func:`wkv_jvp`). With :math:`\alpha_{ti} = e^{(t-1-i)w +
k_i}/\mathrm{den}_t` (:math:`i < t`) and :math:`\beta_t = e^{u + k_t}/\mathrm{den}_t`,
:math:`\mathrm{wkv}_t = \sum_{i<t}\alpha_{ti}v_i + \beta_t v_t`, so
:math:`\partial\mathrm{wkv}_t/\partial v_i = \alpha_{ti}`, :math:`\partial\mathrm{wkv}_t/
\partial k_i = \alpha_{ti}(v_i - \mathrm{wkv}_t)` (and :math:`\beta_t`, :math:`\beta_t(v_t -
\mathrm{wkv}_t)` at :math:`i = t`). The JVP differentiates the stable recurrence itself (the
tangent states :math:`(\dot p, \dot q)` share the forward's shifts); the VJP runs the
adjoint sums :math:`S_i = \sum_{t>i} \bar y_t e^{(t-1-i)w}/\mathrm{den}_t` (and
:math:`R_i` with :math:`\bar y_t\,\mathrm{wkv}_t`) backwards, :math:`S_i = \bar
y_{i+1}/\mathrm{den}_{i+1} + e^w S_{i+1}`, with a running shift of their own, so every
exponent is again :math:`\le 0`; :math:`\bar w` is the forward tangent along
:math:`\dot w = 1` paired with :math:`\bar y` (each channel has one :math:`w`). Both are
proved against ``sympy.diff`` of :func:`wkv` (identities ``ssm_rwkv_wkv_vjp``/``_jvp``).
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._tangent import jvp_rule
from nlaverify.ops._validate import check_args

__all__ = ["wkv", "wkv_jvp", "wkv_naive", "wkv_vjp"]


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


def _wkv_steps(xp: Namespace, w: Any, u: Any, k: Any, v: Any) -> list[tuple[Any, ...]]:
    r"""The forward of :func:`wkv` from the zero state, step by step: per step :math:`t` the
    state before it :math:`(p, q, m)`, the output shift :math:`m_o`, the two output weights
    :math:`(e^{m-m_o}, e^{u+k_t-m_o})`, the scaled denominator :math:`D_t \ge 1`, the output,
    the state shift :math:`m'` and the state weights :math:`(e^{m+w-m'}, e^{k_t-m'})`."""
    zero = xp.zeros_like(k[..., 0, :])
    p, q, m = zero, zero, zero - xp.inf
    steps = []
    for t in range(k.shape[-2]):
        kt, vt = k[..., t, :], v[..., t, :]
        mo = _shift(xp, m, u + kt)
        e1, e2 = xp.exp(m - mo), xp.exp(u + kt - mo)
        D = e1 * q + e2
        y = (e1 * p + e2 * vt) / D
        ms = _shift(xp, m + w, kt)
        f1, f2 = xp.exp(m + w - ms), xp.exp(kt - ms)
        steps.append((p, q, m, mo, e1, e2, D, y, ms, f1, f2))
        p, q, m = f1 * p + f2 * vt, f1 * q + f2, ms
    return steps


def _wkv_tangent(xp: Namespace, steps: list[tuple[Any, ...]], v: Any, dw: Any, du: Any,
                 dk: Any, dv: Any) -> Any:
    r"""The tangent of :func:`wkv` along :math:`(\dot w, \dot u, \dot k, \dot v)` (``None``:
    zero), the stable recurrence differentiated with its shifts held: :math:`\dot p' =
    e^{m+w-m'}(\dot p + \dot w p) + e^{k_t-m'}(\dot k_t v_t + \dot v_t)`, :math:`\dot q'` the
    same without :math:`v`, :math:`\dot y_t = (\dot N - y_t\dot D)/D` with :math:`\dot N =
    e^{m-m_o}\dot p + e^{u+k_t-m_o}((\dot u + \dot k_t)v_t + \dot v_t)`."""
    dp = dq = None
    out = []
    for t, (p, q, _m, _mo, e1, e2, D, y, _ms, f1, f2) in enumerate(steps):
        vt = v[..., t, :]
        dkt = None if dk is None else dk[..., t, :]
        dvt = None if dv is None else dv[..., t, :]
        dex = dkt if du is None else (du if dkt is None else du + dkt)  # d(u + k_t)
        dN = e1 * dp if dp is not None else xp.zeros_like(y)
        dD = e1 * dq if dq is not None else xp.zeros_like(y)
        if dex is not None:
            dN, dD = dN + e2 * dex * vt, dD + e2 * dex
        if dvt is not None:
            dN = dN + e2 * dvt
        out.append((dN - y * dD) / D)
        gp = dp if dw is None else (dw * p if dp is None else dp + dw * p)
        gq = dq if dw is None else (dw * q if dq is None else dq + dw * q)
        dp = f1 * gp if gp is not None else xp.zeros_like(y)
        dq = f1 * gq if gq is not None else xp.zeros_like(y)
        if dkt is not None:
            dp, dq = dp + f2 * dkt * vt, dq + f2 * dkt
        if dvt is not None:
            dp = dp + f2 * dvt
    return xp.stack(out, axis=-2)


@jvp_rule("dw", "du", "dk", "dv")
def wkv_jvp(xp: Namespace, T: tuple[Any, ...], w: Any, u: Any, k: Any, v: Any) -> Any:
    r"""JVP of :func:`wkv` (zero initial state): the tangent recurrence of the module's
    docstring, on the forward's own shifts. A ``None`` tangent is a zero one."""
    _check("wkv_jvp", xp, w, u, k, v)
    return _wkv_tangent(xp, _wkv_steps(xp, w, u, k, v), v, *T)


def wkv_vjp(xp: Namespace, G: Any, w: Any, u: Any, k: Any, v: Any) -> tuple[Any, ...]:
    r"""VJP of :func:`wkv` (zero initial state): with :math:`g_t = \bar y_t/D_t` and the
    adjoint sums :math:`S_i = \sum_{t>i} g_t e^{(t-1-i)w - m_{o,t}}`, :math:`R_i` the same
    with :math:`g_t y_t` (run backwards, :math:`S_i = g_{i+1}e^{-m_{o,i+1}} + e^w S_{i+1}`,
    scaled by a running shift :math:`n_i`: :math:`S_i = e^{n_i} s_i`),

    .. math:: \bar v_i = e^{k_i} S_i + g_i e^{u+k_i-m_{o,i}},\quad
       \bar k_i = e^{k_i}(v_i S_i - R_i) + g_i e^{u+k_i-m_{o,i}}(v_i - y_i),

    :math:`\bar u = \sum g_t e^{u+k_t-m_{o,t}}(v_t - y_t)` and :math:`\bar w = \sum_t \bar
    y_t\,\dot y_t|_{\dot w = 1}`, summed over the leading axes. :math:`k_i + n_i \le 0`
    (:math:`m_{o,t} \ge k_i + (t-1-i)w`), so nothing overflows. Returns
    :math:`(\bar w, \bar u, \bar k, \bar v)`."""
    _check("wkv_vjp", xp, w, u, k, v)
    steps = _wkv_steps(xp, w, u, k, v)
    T = k.shape[-2]
    lead = tuple(range(k.ndim - 1))
    zero = xp.zeros_like(k[..., 0, :])
    s, r, n = zero, zero, zero - xp.inf
    kbar, vbar = [None] * T, [None] * T
    for i in range(T - 1, -1, -1):
        _p, _q, _m, mo, _e1, e2, D, y, *_ = steps[i]
        ki, vi, gi = k[..., i, :], v[..., i, :], G[..., i, :] / D
        # e^{u + k_i - m_o} = e2 of step i: the bonus term
        a = xp.exp(ki + n)
        vbar[i] = a * s + gi * e2
        kbar[i] = a * (vi * s - r) + gi * e2 * (vi - y)
        # S_{i-1} = g_i e^{-m_{o,i}} + e^w S_i, rescaled to n' = c(-m_{o,i}, w + n)
        nn = _shift(xp, -mo, w + n)
        h1, h2 = xp.exp(-mo - nn), xp.exp(w + n - nn)
        s, r, n = h1 * gi + h2 * s, h1 * gi * y + h2 * r, nn
    ubar = xp.sum(xp.stack([G[..., t, :] / st[6] * st[5] * (v[..., t, :] - st[7])
                            for t, st in enumerate(steps)], axis=-2), axis=lead)
    dy = _wkv_tangent(xp, steps, v, xp.ones_like(w), None, None, None)
    wbar = xp.sum(G * dy, axis=lead)
    return wbar, ubar, xp.stack(kbar, axis=-2), xp.stack(vbar, axis=-2)
