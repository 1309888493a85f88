r"""The RWKV-4 block's two mixers (Peng et al. 2023, §3-4; Baptista, Stuart & Tran §5.3.4;
Hugging Face ``RwkvSelfAttention``, ``RwkvFeedForward``), written once against ``xp``, each
forward next to its VJP and JVP.

* **Token shift** (:func:`token_shift`): :math:`x_{t-1}` for every position, :math:`0` at
  :math:`t = 0` (``nn.ZeroPad2d((0, 0, 1, -1))``); its **interpolation**
  (:func:`token_mix`) :math:`\operatorname{mix}(x, \mu) = \mu\odot x + (1-\mu)\odot x_{t-1}`.
* **Time mixing** (:func:`time_mix`): :math:`k = \operatorname{mix}(x,\mu_k)W_k`,
  :math:`v = \operatorname{mix}(x,\mu_v)W_v`, :math:`r = \sigma(\operatorname{mix}(x,\mu_r)
  W_r)`, :math:`\mathrm{out} = (r\odot\operatorname{WKV}(w, u, k, v))W_o` with the log-decay
  :math:`w = -e^{\text{time\_decay}}` (``rwkv_linear_attention_cpu``: ``time_decay =
  -torch.exp(time_decay)``) and the bonus :math:`u` = ``time_first``; the WKV is the stable
  running-maximum :func:`nlaverify.ops.rwkv.wkv`.
* **Channel mixing** (:func:`channel_mix`): :math:`k = \operatorname{relu}(\operatorname{mix}
  (x,\mu_k)W_k)^2`, :math:`\mathrm{out} = \sigma(\operatorname{mix}(x,\mu_r)W_r)\odot(kW_v)`.

Weights are ``(d_in, d_out)`` (:math:`Y = XW`; Hugging Face's ``nn.Linear.weight`` is the
transpose). :func:`time_mix_recurrent` is the same time mixing one token at a time, the state
:math:`(x_{t-1}, a, b, p)` carried (RWKV's "RNN mode", the basis of recurrent decoding;
identity ``ssm_rwkv_time_mix_recurrent``); :func:`channel_mix_recurrent` likewise, its state
the previous token only (identity ``ssm_rwkv_channel_mix_recurrent``).
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops import rwkv
from nlaverify.ops._tangent import jvp_rule
from nlaverify.ops._validate import check_args
from nlaverify.ops.activations import _sigmoid_pair
from nlaverify.ops.linear import linear_vjp

__all__ = ["channel_mix", "channel_mix_jvp", "channel_mix_recurrent", "channel_mix_step",
           "channel_mix_vjp", "time_mix", "time_mix_jvp",
           "time_mix_recurrent", "time_mix_step", "time_mix_vjp", "token_mix", "token_mix_jvp",
           "token_mix_vjp", "token_shift", "token_shift_jvp", "token_shift_vjp"]


def token_shift(xp: Namespace, x: Any) -> Any:
    r"""The previous token :math:`x_{t-1}` at every position ``(..., n, d)``, 0 at
    :math:`t = 0`."""
    check_args("token_shift", xp, {"x": (x, ("*", "n", "d"))})
    return xp.concat([xp.zeros_like(x[..., :1, :]), x[..., :-1, :]], axis=-2)


def token_shift_vjp(xp: Namespace, G: Any, x: Any) -> tuple[Any]:
    r"""VJP of :func:`token_shift`, the shift's transpose: :math:`\bar x_t = G_{t+1}`,
    :math:`\bar x_{n-1} = 0`."""
    return (xp.concat([G[..., 1:, :], xp.zeros_like(G[..., :1, :])], axis=-2),)


@jvp_rule("dx")
def token_shift_jvp(xp: Namespace, T: tuple[Any], x: Any) -> Any:
    r"""JVP of :func:`token_shift` (linear): the shifted tangent."""
    return token_shift(xp, T[0])


def token_mix(xp: Namespace, x: Any, mu: Any) -> Any:
    r""":math:`\operatorname{mix}(x, \mu) = \mu\odot x + (1-\mu)\odot x_{t-1}` (``x``
    ``(..., n, d)``, ``mu`` ``(d,)``), written :math:`x_{t-1} + \mu\odot(x - x_{t-1})`."""
    check_args("token_mix", xp, {"x": (x, ("*", "n", "d")), "mu": (mu, ("d",))})
    prev = token_shift(xp, x)
    return prev + mu * (x - prev)


def token_mix_vjp(xp: Namespace, G: Any, x: Any, mu: Any) -> tuple[Any, Any]:
    r"""VJP of :func:`token_mix`: :math:`\bar x = \mu\odot G + S^\top((1-\mu)\odot G)`
    (:math:`S` the shift), :math:`\bar\mu = \sum G\odot(x - x_{t-1})`."""
    lead = tuple(range(x.ndim - 1))
    xbar = mu * G + token_shift_vjp(xp, (1 - mu) * G, x)[0]
    return xbar, xp.sum(G * (x - token_shift(xp, x)), axis=lead)


@jvp_rule("dx", "dmu")
def token_mix_jvp(xp: Namespace, T: tuple[Any, Any], x: Any, mu: Any) -> Any:
    r"""JVP of :func:`token_mix`: :math:`\operatorname{mix}(\dot x, \mu) + \dot\mu\odot(x -
    x_{t-1})`."""
    return _mix_dot(xp, x, mu, *T)


def _mix_dot(xp: Namespace, x: Any, mu: Any, dx: Any, dmu: Any) -> Any:
    out = xp.zeros_like(x) if dx is None else token_mix(xp, dx, mu)
    return out if dmu is None else out + dmu * (x - token_shift(xp, x))


def _zeros(xp: Namespace, T: tuple[Any, ...], args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(xp.zeros_like(a) if t is None else t for t, a in zip(T, args, strict=True))


def _check_time(op: str, xp: Namespace, args: tuple[Any, ...]) -> None:
    x, mk, mv, mr, td, tf, Wk, Wv, Wr, Wo = args
    check_args(op, xp, {"x": (x, ("*", "n", "d")), "mu_k": (mk, ("d",)), "mu_v": (mv, ("d",)),
                        "mu_r": (mr, ("d",)), "time_decay": (td, ("a",)),
                        "time_first": (tf, ("a",)), "W_k": (Wk, ("d", "a")),
                        "W_v": (Wv, ("d", "a")), "W_r": (Wr, ("d", "a")),
                        "W_o": (Wo, ("a", "d"))})


def _time_parts(xp: Namespace, args: tuple[Any, ...]) -> tuple[Any, ...]:
    x, mk, mv, mr, td, tf, Wk, Wv, Wr, _ = args
    xk, xv, xr = (token_mix(xp, x, m) for m in (mk, mv, mr))
    k, v, zr = xp.matmul(xk, Wk), xp.matmul(xv, Wv), xp.matmul(xr, Wr)
    r, r_c = _sigmoid_pair(xp, zr)  # sigma and 1 - sigma
    w = -xp.exp(td)
    y = rwkv.wkv(xp, w, tf, k, v)
    return xk, xv, xr, k, v, r, r_c, w, y


def time_mix(xp: Namespace, x: Any, mu_k: Any, mu_v: Any, mu_r: Any, time_decay: Any,
             time_first: Any, W_k: Any, W_v: Any, W_r: Any, W_o: Any) -> Any:
    r"""RWKV-4 time mixing (the module's docstring), zero initial state.

    Args:
        x: ``(..., n, d)``; mu_k, mu_v, mu_r: ``(d,)``; time_decay, time_first: ``(a,)``;
            W_k, W_v, W_r: ``(d, a)``; W_o: ``(a, d)``.

    Returns:
        ``(..., n, d)``.
    """
    args = (x, mu_k, mu_v, mu_r, time_decay, time_first, W_k, W_v, W_r, W_o)
    _check_time("time_mix", xp, args)
    *_, r, _rc, _w, y = _time_parts(xp, args)
    return xp.matmul(r * y, W_o)


def time_mix_vjp(xp: Namespace, G: Any, x: Any, mu_k: Any, mu_v: Any, mu_r: Any,
                 time_decay: Any, time_first: Any, W_k: Any, W_v: Any, W_r: Any, W_o: Any
                 ) -> tuple[Any, ...]:
    r"""VJP of :func:`time_mix`: :math:`\bar h = G W_o^\top`, :math:`\bar W_o = h^\top G`
    (:math:`h = r\odot\mathrm{wkv}`), :math:`\bar z_r = \bar h\odot\mathrm{wkv}\odot\sigma
    (1-\sigma)`, the WKV's VJP at :math:`\bar{\mathrm{wkv}} = \bar h\odot r`,
    :math:`\overline{\text{time\_decay}} = \bar w\odot w` (:math:`\partial w/\partial
    \text{time\_decay} = w`), each projection's :math:`(\bar X, \bar W)` and each mix's
    VJP, the three :math:`\bar x` summed. Returns the cotangents in argument order."""
    args = (x, mu_k, mu_v, mu_r, time_decay, time_first, W_k, W_v, W_r, W_o)
    _check_time("time_mix_vjp", xp, args)
    xk, xv, xr, k, v, r, rc, w, y = _time_parts(xp, args)
    hbar, Wo_bar = linear_vjp(xp, G, r * y, W_o)
    zr_bar = hbar * y * r * rc
    wbar, ubar, kbar, vbar = rwkv.wkv_vjp(xp, hbar * r, w, time_first, k, v)
    xbar = None
    out = []
    for xm, mu, gm, W in ((xk, mu_k, kbar, W_k), (xv, mu_v, vbar, W_v), (xr, mu_r, zr_bar, W_r)):
        xm_bar, W_bar = linear_vjp(xp, gm, xm, W)
        x_part, mu_bar = token_mix_vjp(xp, xm_bar, x, mu)
        xbar = x_part if xbar is None else xbar + x_part
        out.append((mu_bar, W_bar))
    return (xbar, out[0][0], out[1][0], out[2][0], wbar * w, ubar, out[0][1], out[1][1],
            out[2][1], Wo_bar)


@jvp_rule("dx", "dmu_k", "dmu_v", "dmu_r", "dtime_decay", "dtime_first", "dW_k", "dW_v",
          "dW_r", "dW_o")
def time_mix_jvp(xp: Namespace, T: tuple[Any, ...], x: Any, mu_k: Any, mu_v: Any, mu_r: Any,
                 time_decay: Any, time_first: Any, W_k: Any, W_v: Any, W_r: Any, W_o: Any
                 ) -> Any:
    r"""JVP of :func:`time_mix`: :math:`\dot k = \dot x_k W_k + x_k\dot W_k` (likewise
    :math:`v`, :math:`z_r`) with :math:`\dot x_k = \operatorname{mix}(\dot x, \mu_k) +
    \dot\mu_k\odot(x - x_{t-1})`, :math:`\dot r = \sigma(1-\sigma)\dot z_r`, :math:`\dot w =
    w\odot\dot{\text{time\_decay}}`, the WKV's JVP, :math:`\dot h = \dot r\odot\mathrm{wkv} +
    r\odot\dot{\mathrm{wkv}}`, :math:`\dot{\mathrm{out}} = \dot h W_o + h\dot W_o`. A
    ``None`` tangent is a zero one."""
    args = (x, mu_k, mu_v, mu_r, time_decay, time_first, W_k, W_v, W_r, W_o)
    _check_time("time_mix_jvp", xp, args)
    dx, dmk, dmv, dmr, dtd, dtf, dWk, dWv, dWr, dWo = _zeros(xp, T, args)
    xk, xv, xr, k, v, r, rc, w, y = _time_parts(xp, args)
    dk, dv, dzr = (xp.matmul(_mix_dot(xp, x, mu, dx, dm), W) + xp.matmul(xm, dW)
                   for xm, mu, dm, W, dW in ((xk, mu_k, dmk, W_k, dWk), (xv, mu_v, dmv, W_v, dWv),
                                             (xr, mu_r, dmr, W_r, dWr)))
    dy = rwkv.wkv_jvp(xp, (w * dtd, dtf, dk, dv), w, time_first, k, v)
    dh = r * rc * dzr * y + r * dy
    return xp.matmul(dh, W_o) + xp.matmul(r * y, dWo)


def _pair_shift(xp: Namespace, a: Any, b: Any) -> Any:
    return xp.stability_shift(xp.stack([a, b], axis=-1), axis=-1)[..., 0]


def time_mix_step(xp: Namespace, x_t: Any, state: tuple[Any, Any, Any, Any], mu_k: Any,
                  mu_v: Any, mu_r: Any, time_decay: Any, time_first: Any, W_k: Any, W_v: Any,
                  W_r: Any, W_o: Any) -> tuple[Any, tuple[Any, Any, Any, Any]]:
    r"""One token of RWKV-4 time mixing in recurrent form (the RNN mode of the RWKV
    reference code): ``x_t`` ``(..., d)``, ``state`` = :math:`(x_{t-1}, a, b, p)` (the
    previous token, the WKV's scaled numerator and denominator and their shift, each
    ``(..., a)`` but the first), and

    .. math:: q = c(p, u+k),\ \mathrm{wkv} = \frac{e^{p-q}a + e^{u+k-q}v}{e^{p-q}b +
       e^{u+k-q}},\quad q' = c(p+w, k),\ a' = e^{p+w-q'}a + e^{k-q'}v,\ b' = e^{p+w-q'}b +
       e^{k-q'},\ p' = q' .

    Returns ``(out_t, (x_t, a', b', p'))``."""
    x_prev, a, b, p = state
    kk, vv, rr = (xp.matmul(x_prev + mu * (x_t - x_prev), W)
                  for mu, W in ((mu_k, W_k), (mu_v, W_v), (mu_r, W_r)))
    w = -xp.exp(time_decay)
    q = _pair_shift(xp, p, time_first + kk)
    e1, e2 = xp.exp(p - q), xp.exp(time_first + kk - q)
    out = xp.matmul(_sigmoid_pair(xp, rr)[0] * (e1 * a + e2 * vv) / (e1 * b + e2), W_o)
    q2 = _pair_shift(xp, p + w, kk)
    e1, e2 = xp.exp(p + w - q2), xp.exp(kk - q2)
    return out, (x_t, e1 * a + e2 * vv, e1 * b + e2, q2)


def time_mix_recurrent(xp: Namespace, x: Any, mu_k: Any, mu_v: Any, mu_r: Any,
                       time_decay: Any, time_first: Any, W_k: Any, W_v: Any, W_r: Any,
                       W_o: Any) -> Any:
    r""":func:`time_mix` one token at a time by :func:`time_mix_step`, from the state
    :math:`(0, 0, 0, -\infty)`: equal to :func:`time_mix` (identity
    ``ssm_rwkv_time_mix_recurrent``)."""
    args = (x, mu_k, mu_v, mu_r, time_decay, time_first, W_k, W_v, W_r, W_o)
    _check_time("time_mix_recurrent", xp, args)
    zero = xp.zeros_like(xp.matmul(x[..., 0, :], W_k))
    state = (xp.zeros_like(x[..., 0, :]), zero, zero, zero - xp.inf)
    outs = []
    for t in range(x.shape[-2]):
        o, state = time_mix_step(xp, x[..., t, :], state, *args[1:])
        outs.append(o)
    return xp.stack(outs, axis=-2)


def _channel_parts(xp: Namespace, x: Any, mu_k: Any, mu_r: Any, W_k: Any, W_r: Any
                   ) -> tuple[Any, ...]:
    xk, xr = token_mix(xp, x, mu_k), token_mix(xp, x, mu_r)
    zk = xp.matmul(xk, W_k)
    relu = xp.where(xp.greater(zk, 0), zk, xp.zeros_like(zk))
    r, rc = _sigmoid_pair(xp, xp.matmul(xr, W_r))
    return xk, xr, relu, r, rc


def channel_mix(xp: Namespace, x: Any, mu_k: Any, mu_r: Any, W_k: Any, W_r: Any, W_v: Any
                ) -> Any:
    r"""RWKV-4 channel mixing: :math:`\sigma(\operatorname{mix}(x,\mu_r)W_r)\odot
    (\operatorname{relu}(\operatorname{mix}(x,\mu_k)W_k)^2 W_v)`.

    Args:
        x: ``(..., n, d)``; mu_k, mu_r: ``(d,)``; W_k: ``(d, f)``; W_r: ``(d, d)``;
            W_v: ``(f, d)``.
    """
    check_args("channel_mix", xp, {"x": (x, ("*", "n", "d")), "mu_k": (mu_k, ("d",)),
                                   "mu_r": (mu_r, ("d",)), "W_k": (W_k, ("d", "f")),
                                   "W_r": (W_r, ("d", "d")), "W_v": (W_v, ("f", "d"))})
    _, _, relu, r, _ = _channel_parts(xp, x, mu_k, mu_r, W_k, W_r)
    return r * xp.matmul(relu * relu, W_v)


def channel_mix_vjp(xp: Namespace, G: Any, x: Any, mu_k: Any, mu_r: Any, W_k: Any, W_r: Any,
                    W_v: Any) -> tuple[Any, ...]:
    r"""VJP of :func:`channel_mix`: with :math:`s = \operatorname{relu}(z_k)^2 W_v`,
    :math:`\bar s = G\odot r`, :math:`\bar z_r = G\odot s\odot\sigma(1-\sigma)`,
    :math:`\bar z_k = 2\operatorname{relu}(z_k)\odot\bar s W_v^\top` (0 where :math:`z_k \le
    0`), then each projection's and each mix's VJP."""
    xk, xr, relu, r, rc = _channel_parts(xp, x, mu_k, mu_r, W_k, W_r)
    kk = relu * relu
    s = xp.matmul(kk, W_v)
    kk_bar, Wv_bar = linear_vjp(xp, G * r, kk, W_v)
    xk_bar, Wk_bar = linear_vjp(xp, 2 * relu * kk_bar, xk, W_k)
    xr_bar, Wr_bar = linear_vjp(xp, G * s * r * rc, xr, W_r)
    xa, mk_bar = token_mix_vjp(xp, xk_bar, x, mu_k)
    xb, mr_bar = token_mix_vjp(xp, xr_bar, x, mu_r)
    return xa + xb, mk_bar, mr_bar, Wk_bar, Wr_bar, Wv_bar


@jvp_rule("dx", "dmu_k", "dmu_r", "dW_k", "dW_r", "dW_v")
def channel_mix_jvp(xp: Namespace, T: tuple[Any, ...], x: Any, mu_k: Any, mu_r: Any, W_k: Any,
                    W_r: Any, W_v: Any) -> Any:
    r"""JVP of :func:`channel_mix`: :math:`\dot z_k = \dot x_k W_k + x_k\dot W_k`,
    :math:`\dot{(\operatorname{relu}^2)} = 2\operatorname{relu}(z_k)\dot z_k`, :math:`\dot r =
    \sigma(1-\sigma)\dot z_r`, :math:`\dot{\mathrm{out}} = \dot r\odot s + r\odot(\dot{
    (\operatorname{relu}^2)}W_v + \operatorname{relu}^2\dot W_v)`. A ``None`` tangent is a
    zero one."""
    args = (x, mu_k, mu_r, W_k, W_r, W_v)
    dx, dmk, dmr, dWk, dWr, dWv = _zeros(xp, T, args)
    xk, xr, relu, r, rc = _channel_parts(xp, x, mu_k, mu_r, W_k, W_r)
    kk = relu * relu
    dzk = xp.matmul(_mix_dot(xp, x, mu_k, dx, dmk), W_k) + xp.matmul(xk, dWk)
    dzr = xp.matmul(_mix_dot(xp, x, mu_r, dx, dmr), W_r) + xp.matmul(xr, dWr)
    dkk = 2 * relu * dzk
    s = xp.matmul(kk, W_v)
    return r * rc * dzr * s + r * (xp.matmul(dkk, W_v) + xp.matmul(kk, dWv))


def channel_mix_step(xp: Namespace, x_t: Any, x_prev: Any, mu_k: Any, mu_r: Any, W_k: Any,
                     W_r: Any, W_v: Any) -> tuple[Any, Any]:
    r"""One token of RWKV-4 channel mixing in recurrent form: ``x_t``, ``x_prev``
    ``(..., d)`` (the previous token, the whole state); returns ``(out_t, x_t)``."""
    zk = xp.matmul(x_prev + mu_k * (x_t - x_prev), W_k)
    kk = xp.where(xp.greater(zk, 0), zk * zk, xp.zeros_like(zk))
    r = _sigmoid_pair(xp, xp.matmul(x_prev + mu_r * (x_t - x_prev), W_r))[0]
    return r * xp.matmul(kk, W_v), x_t


def channel_mix_recurrent(xp: Namespace, x: Any, mu_k: Any, mu_r: Any, W_k: Any, W_r: Any,
                          W_v: Any) -> Any:
    r""":func:`channel_mix` one token at a time by :func:`channel_mix_step`, from
    :math:`x_{-1} = 0` (identity ``ssm_rwkv_channel_mix_recurrent``)."""
    prev, outs = xp.zeros_like(x[..., 0, :]), []
    for t in range(x.shape[-2]):
        o, prev = channel_mix_step(xp, x[..., t, :], prev, mu_k, mu_r, W_k, W_r, W_v)
        outs.append(o)
    return xp.stack(outs, axis=-2)
