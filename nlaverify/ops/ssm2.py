r"""Mamba-2's ops (Dao & Gu 2024, *Transformers are SSMs*, §7-§8; Hugging Face
``Mamba2Mixer``, ``mamba2_chunk_scan``, ``Mamba2RMSNormGated``), written once against ``xp``
(Baptista, Stuart & Tran §5.3.4: the state-space recurrence in place of attention).

**The scan** (:func:`mamba2_scan`). Mamba-2 restricts Mamba's decay to a *scalar per head*:
:math:`H` heads of :math:`P` channels, a state :math:`h_t \in \mathbb R^{H\times P\times N}`,
:math:`G` groups of :math:`B, C` (head :math:`j` reads group :math:`\lfloor j/(H/G)\rfloor`,
Hugging Face's ``repeat_interleave``), :math:`A = -e^{A_{\log}}` and
:math:`\Delta = \operatorname{softplus}(\delta + b_\Delta)` per head:

.. math:: h_t = e^{\Delta_{t} A}\, h_{t-1} + \Delta_t\, x_t B_t^\top,\qquad
   y_t = h_t C_t + D\odot x_t ,

(Mamba's rule: zero-order hold for :math:`A`, Euler for :math:`B`; zero initial state).
Hugging Face computes it chunk by chunk in the dual, attention-like form (the segment sums
:math:`e^{\sum_{s<r\le t}\Delta_r A}` of the 1-semiseparable mask, identity
``ssm_state_space_duality``); the recurrence here is the same function, run as one
:meth:`~nlaverify.backends.base.Namespace.linear_recurrence` (a ``lax.scan`` on JAX).

**The gated norm** (:func:`gated_rmsnorm`): :math:`v = x\odot\operatorname{silu}(z)`, then
RMSNorm over groups of ``group_size`` consecutive channels, times :math:`\gamma`
(``Mamba2RMSNormGated``; ``group_size`` = :math:`d_{in}/G`).

VJPs and JVPs are proved against ``sympy.diff`` of these very functions (identities
``ssm_mamba2_scan_vjp``, ``ssm_mamba2_scan_jvp``, ``ssm_gated_rmsnorm_vjp``,
``ssm_gated_rmsnorm_jvp``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError
from nlaverify.ops._tangent import jvp_rule
from nlaverify.ops._validate import check_args, check_derived_finite
from nlaverify.ops.activations import _silu_derivative, sigmoid, silu
from nlaverify.ops.norms import _check_eps, _mean, _normalized_jvp, _scaled_rms
from nlaverify.ops.ssm import chunk_bounds, softplus, ssd_attention

__all__ = ["gated_rmsnorm", "gated_rmsnorm_jvp", "gated_rmsnorm_vjp", "mamba2_scan",
           "mamba2_scan_jvp", "mamba2_scan_vjp", "ssd_chunked"]

_SCAN_DIMS = {"x": ("*", "n", "H", "P"), "dt": ("*", "n", "H"), "A_log": ("H",),
              "B": ("*", "n", "G", "N"), "C": ("*", "n", "G", "N"), "D": ("H",),
              "dt_bias": ("H",)}


def _check_scan(op: str, xp: Namespace, args: tuple[Any, ...]) -> dict[str, int]:
    """Shapes of ``(x, dt, A_log, B, C, D, dt_bias)``; the groups divide the heads; at least
    one token."""
    dims = check_args(op, xp, {k: (a, _SCAN_DIMS[k]) for k, a in zip(_SCAN_DIMS, args,
                                                                     strict=True)})
    if dims["H"] % dims["G"]:
        raise ArgumentError(f"{op}: argument 'B': expected a number of groups G dividing the "
                            f"heads H = {dims['H']} (each group serves H/G heads), got "
                            f"G = {dims['G']}")
    if dims["n"] == 0:
        raise ArgumentError(f"{op}: argument 'x': expected at least one token (n >= 1), got "
                            f"shape {tuple(args[0].shape)}")
    return dims


def _heads(xp: Namespace, B: Any, H: int) -> Any:
    r"""``(..., n, G, N) -> (..., n, H, N)``: head :math:`j` reads group
    :math:`\lfloor j/(H/G)\rfloor` (Hugging Face's ``repeat_interleave(H // G, dim=2)``)."""
    G = B.shape[-2]
    if G == H:
        return B
    idx = [j // (H // G) for j in range(H)]
    return xp.take(B, idx if xp.object_arrays else xp.asarray(idx), axis=len(B.shape) - 2)


def _groups(xp: Namespace, Bh: Any, G: int) -> Any:
    """The adjoint of :func:`_heads`: each group receives the sum over the heads it serves."""
    H = Bh.shape[-2]
    if G == H:
        return Bh
    lead = tuple(Bh.shape[:-2])
    return xp.sum(xp.reshape(Bh, (*lead, G, H // G, Bh.shape[-1])), axis=len(lead) + 1)


def _parts(xp: Namespace, op: str, x: Any, dt: Any, A_log: Any, B: Any, C: Any, D: Any,
           dt_bias: Any) -> tuple[Any, ...]:
    r"""The intermediates the forward, VJP and JVP share: :math:`A`, the pre-activation
    :math:`p = \delta + b_\Delta`, :math:`\Delta`, :math:`\bar A = e^{\Delta A}` ``(..., n,
    H)``, :math:`B, C` per head ``(..., n, H, N)``, the states ``(..., n, H, P, N)`` and
    :math:`y`."""
    dims = _check_scan(op, xp, (x, dt, A_log, B, C, D, dt_bias))
    A = -xp.exp(A_log)
    check_derived_finite(op, xp, "A_log", A, "A = -exp(A_log)")
    pre = dt + dt_bias
    Dt = softplus(xp, pre)
    DtA = Dt * A
    check_derived_finite(op, xp, "A_log", DtA, "Delta * A (Delta = softplus(dt + dt_bias))")
    Abar = xp.exp(DtA)
    Bh, Ch = _heads(xp, B, dims["H"]), _heads(xp, C, dims["H"])
    drive = (Dt[..., None] * x)[..., None] * Bh[..., None, :]
    X = xp.linear_recurrence(Abar[..., None, None], drive, axis=-4)
    y = xp.sum(X * Ch[..., None, :], axis=-1) + x * D[:, None]
    return A, pre, Dt, Abar, Bh, Ch, X, y


def mamba2_scan(xp: Namespace, x: Any, dt: Any, A_log: Any, B: Any, C: Any, D: Any,
                dt_bias: Any) -> Any:
    r"""Mamba-2's scan (Dao & Gu 2024, §7; Hugging Face ``mamba2_chunk_scan`` with
    ``dt_softplus=True``, the default ``time_step_limit`` :math:`(0, \infty)`, no initial
    state): the module's docstring.

    Args:
        x: ``(..., n, H, P)``; dt: ``(..., n, H)`` (before the bias and softplus);
            A_log, D, dt_bias: ``(H,)``; B, C: ``(..., n, G, N)``, :math:`G \mid H`.

    Returns:
        ``(..., n, H, P)``, the skip :math:`D\odot x` included.
    """
    return _parts(xp, "mamba2_scan", x, dt, A_log, B, C, D, dt_bias)[-1]


def _previous(xp: Namespace, X: Any) -> Any:
    """The states shifted one step along the sequence axis (-4): :math:`h_{t-1}`, 0 at 0."""
    return xp.concat([xp.zeros_like(X[..., :1, :, :, :]), X[..., :-1, :, :, :]], axis=-4)


def mamba2_scan_vjp(xp: Namespace, G: Any, x: Any, dt: Any, A_log: Any, B: Any, C: Any,
                    D: Any, dt_bias: Any) -> tuple[Any, ...]:
    r"""VJP of :func:`mamba2_scan`. The state adjoint runs backwards,
    :math:`\lambda_t = G_t C_t^\top + \bar A_{t+1}\lambda_{t+1}` (:math:`\lambda_{n-1} =
    G_{n-1}C_{n-1}^\top`); with :math:`a_t = \sum_{p,s}\lambda_t\odot h_{t-1}`,

    .. math:: \bar x_t = \Delta_t\,\lambda_t B_t + D\odot G_t,\quad
       \bar\Delta_t = a_t\bar A_t A + \textstyle\sum_{p,s}\lambda_t\odot x_t B_t^\top,\quad
       \bar A = \sum_t a_t\bar A_t\Delta_t,

    .. math:: \bar B_t = \textstyle\sum_{p}\lambda_t\odot\Delta_t x_t,\quad
       \bar C_t = \sum_p G_t\odot h_t\ \text{(summed over each group's heads)},\quad
       \bar D = \sum_{t,p} G_t\odot x_t,

    :math:`\bar\delta = \bar\Delta\odot\sigma(\delta + b_\Delta)`, :math:`\bar b_\Delta =
    \sum_t\bar\delta_t`, :math:`\bar A_{\log} = \bar A\odot A`. Returns the cotangents of
    ``(x, dt, A_log, B, C, D, dt_bias)``."""
    A, pre, Dt, Abar, Bh, Ch, X, _ = _parts(xp, "mamba2_scan_vjp", x, dt, A_log, B, C, D,
                                            dt_bias)
    check_args("mamba2_scan_vjp", xp, {"x": (x, ("*", "n", "H", "P")),
                                       "G": (G, ("*", "n", "H", "P"))})
    groups = B.shape[-2]
    lead = tuple(range(dt.ndim - 1))  # the batch axes and n: summed for per-head parameters
    # the reverse recurrence with a_t = Abar_{t+1} (a_{n-1} is never read)
    Abar_next = xp.concat([Abar[..., 1:, :], Abar[..., -1:, :]], axis=-2)
    Lam = xp.linear_recurrence(Abar_next[..., None, None], G[..., None] * Ch[..., None, :],
                               axis=-4, reverse=True)
    a = xp.sum(xp.sum(Lam * _previous(xp, X), axis=-1), axis=-1)
    Dt_bar = a * Abar * A + xp.sum(xp.sum(Lam * x[..., None] * Bh[..., None, :], axis=-1),
                                   axis=-1)
    pre_bar = Dt_bar * sigmoid(xp, pre)
    A_bar = xp.sum(a * Abar * Dt, axis=lead)
    return (xp.sum(Lam * Bh[..., None, :], axis=-1) * Dt[..., None] + G * D[:, None],
            pre_bar,
            A_bar * A,
            _groups(xp, xp.sum(Lam * (Dt[..., None] * x)[..., None], axis=-2), groups),
            _groups(xp, xp.sum(G[..., None] * X, axis=-2), groups),
            xp.sum(xp.sum(G * x, axis=-1), axis=lead),
            xp.sum(pre_bar, axis=lead))


@jvp_rule("dx", "ddt", "dA_log", "dB", "dC", "dD", "ddt_bias")
def mamba2_scan_jvp(xp: Namespace, T: tuple[Any, ...], x: Any, dt: Any, A_log: Any, B: Any,
                    C: Any, D: Any, dt_bias: Any) -> Any:
    r"""JVP of :func:`mamba2_scan`: the tangent scan :math:`\dot h_t = \bar A_t\dot h_{t-1} +
    \dot{\bar A}_t h_{t-1} + (\dot\Delta_t x_t + \Delta_t\dot x_t)B_t^\top + \Delta_t x_t
    \dot B_t^\top` with :math:`\dot{\bar A}_t = \bar A_t(\dot\Delta_t A + \Delta_t\dot A)`,
    :math:`\dot A = A\odot\dot A_{\log}`, :math:`\dot\Delta = \sigma(\delta + b_\Delta)
    (\dot\delta + \dot b_\Delta)`; :math:`\dot y_t = \dot h_t C_t + h_t\dot C_t + \dot D x_t
    + D\dot x_t`. A ``None`` tangent is a zero one."""
    A, pre, Dt, Abar, Bh, Ch, X, _ = _parts(xp, "mamba2_scan_jvp", x, dt, A_log, B, C, D,
                                            dt_bias)
    dx, ddt, dA_log, dB, dC, dD, ddb = (xp.zeros_like(a) if t is None else t for t, a in zip(
        T, (x, dt, A_log, B, C, D, dt_bias), strict=True))
    check_args("mamba2_scan_jvp", xp, {k: (t, _SCAN_DIMS[k[1:]]) for k, t in zip(
        ("dx", "ddt", "dA_log", "dB", "dC", "dD", "ddt_bias"),
        (dx, ddt, dA_log, dB, dC, dD, ddb), strict=True)})
    H = A_log.shape[0]
    dDt = (ddt + ddb) * sigmoid(xp, pre)
    dAbar = Abar * (dDt * A + Dt * (A * dA_log))
    ddrive = ((dDt[..., None] * x + Dt[..., None] * dx)[..., None] * Bh[..., None, :]
              + (Dt[..., None] * x)[..., None] * _heads(xp, dB, H)[..., None, :])
    forced = ddrive + dAbar[..., None, None] * _previous(xp, X)
    dX = xp.linear_recurrence(Abar[..., None, None], forced, axis=-4)
    return (xp.sum(dX * Ch[..., None, :] + X * _heads(xp, dC, H)[..., None, :], axis=-1)
            + dx * D[:, None] + x * dD[:, None])


# -- the chunked SSD: Hugging Face's and mamba_ssm's algorithm ------------------------------
def ssd_chunked(xp: Namespace, log_a: Any, B: Any, C: Any, X: Any,
                chunks: int | Sequence[int]) -> Any:
    r"""The scalar-decay SSM of :func:`~nlaverify.ops.ssm.ssd_recurrence` (one head:
    ``log_a`` ``(T,)``, B, C ``(T, N)``, X ``(T, d)``) by Mamba-2's chunked algorithm (Dao &
    Gu 2024, §6, the block decomposition of the semiseparable matrix; Hugging Face
    ``mamba2_chunk_scan`` steps 1-4). For each chunk :math:`[l, h)` with the state
    :math:`H_{l-1}` carried in (0 before the first):

    1. the diagonal block, masked attention inside the chunk:
       :math:`Y^{diag} = (L_{[l,h)}\circ C B^\top) X` (:func:`~nlaverify.ops.ssm.ssd_attention`
       on the chunk);
    2. the chunk's own state from zero, :math:`S = \sum_{s} e^{\sum_{s<r<h}\ell_r}
       B_s^\top X_s`;
    3. the carried state, :math:`H_{h-1} = e^{\sum_{l\le r<h}\ell_r} H_{l-1} + S`;
    4. the carried state read out, :math:`Y^{off}_t = e^{\sum_{l\le r\le t}\ell_r}\,
       C_t H_{l-1}`,

    and :math:`Y = Y^{diag} + Y^{off}`. Each exponent is summed over its own segment (no
    difference of cumulative sums). ``chunks``: a size (the last chunk ragged: Hugging
    Face's zero padding, which the outputs before it never read) or the list of sizes.
    Identity ``ssm_ssd_chunked_equals_recurrence`` proves it equal to the recurrence for
    every chunking."""
    check_args("ssd_chunked", xp, {"log_a": (log_a, ("T",)), "B": (B, ("T", "N")),
                                   "C": (C, ("T", "N")), "X": (X, ("T", "d"))})
    if X.shape[0] == 0:
        raise ArgumentError(f"ssd_chunked: argument 'X': expected at least one step (T >= 1), "
                            f"got shape {tuple(X.shape)}")
    H, out = None, []
    for lo, hi in chunk_bounds(X.shape[0], chunks, op="ssd_chunked"):
        Y = ssd_attention(xp, log_a[lo:hi], B[lo:hi], C[lo:hi], X[lo:hi])
        if H is not None:
            read = xp.stack([xp.exp(xp.sum(log_a[lo:t + 1])) * xp.sum(C[t][:, None] * H, axis=0)
                             for t in range(lo, hi)], axis=0)
            Y = Y + read
        S = sum((xp.exp(xp.sum(log_a[s + 1:hi])) * (B[s][:, None] * X[s][None, :])
                 for s in range(lo, hi)), xp.zeros_like(B[lo][:, None] * X[lo][None, :]))
        H = S if H is None else xp.exp(xp.sum(log_a[lo:hi])) * H + S
        out.append(Y)
    return xp.concat(out, axis=0)


# -- the gated RMSNorm of Mamba-2's output ------------------------------------------------
def _check_norm(op: str, xp: Namespace, x: Any, z: Any, gamma: Any, eps: Any,
                group_size: int | None) -> tuple[int, int]:
    """``(d, g)``: the width and the group size (``None``: one group of ``d``)."""
    _check_eps(op, xp, eps, x)
    d = check_args(op, xp, {"x": (x, ("*", "d")), "z": (z, ("*", "d")),
                            "gamma": (gamma, ("d",))})["d"]
    g = d if group_size is None else group_size
    if isinstance(g, bool) or not isinstance(g, int) or g < 1 or d % g:
        raise ArgumentError(f"{op}: argument 'group_size': expected a positive integer "
                            f"dividing the width d = {d}, got {group_size!r}")
    return d, g


def _grouped(xp: Namespace, v: Any, g: int) -> Any:
    return xp.reshape(v, (*tuple(v.shape[:-1]), v.shape[-1] // g, g))


def gated_rmsnorm(xp: Namespace, x: Any, z: Any, gamma: Any, eps: Any,
                  group_size: int | None = None) -> Any:
    r"""Mamba-2's gated RMSNorm (Hugging Face ``Mamba2RMSNormGated``): :math:`v = x\odot
    \operatorname{silu}(z)`, each group :math:`v_{(k)}` of ``group_size`` consecutive channels
    normalized, :math:`y_{(k)} = \gamma_{(k)}\odot v_{(k)}/\sqrt{\overline{v_{(k)}^2} +
    \epsilon}`. ``x``, ``z``: ``(..., d)``; ``gamma``: ``(d,)``."""
    _, g = _check_norm("gated_rmsnorm", xp, x, z, gamma, eps, group_size)
    v = _grouped(xp, x * silu(xp, z), g)
    h, rho, _ = _scaled_rms(xp, v, g, eps)
    return xp.reshape(h / rho, tuple(x.shape)) * gamma


def gated_rmsnorm_vjp(xp: Namespace, G: Any, x: Any, z: Any, gamma: Any, eps: Any,
                      group_size: int | None = None) -> tuple[Any, Any, Any]:
    r"""VJP of :func:`gated_rmsnorm`: RMSNorm's per group, :math:`\bar v = \frac1r(g -
    \hat v\,\overline{g\odot\hat v})` with :math:`g = G\odot\gamma`, then the gate:
    :math:`\bar x = \bar v\odot\operatorname{silu}(z)`, :math:`\bar z = \bar v\odot x\odot
    \operatorname{silu}'(z)`, :math:`\bar\gamma = \sum_{\text{rows}} G\odot\hat v`."""
    d, g = _check_norm("gated_rmsnorm_vjp", xp, x, z, gamma, eps, group_size)
    check_args("gated_rmsnorm_vjp", xp, {"x": (x, ("*", "d")), "G": (G, ("*", "d"))})
    v = _grouped(xp, x * silu(xp, z), g)
    h, rho, s = _scaled_rms(xp, v, g, eps)
    vhat = h / rho
    gv = _grouped(xp, G * gamma, g)
    vbar = xp.reshape((gv - vhat * _mean(xp, gv * vhat, g)) / rho / s, tuple(x.shape))
    flat = xp.reshape(vhat, tuple(x.shape))
    return (vbar * silu(xp, z), vbar * x * _silu_derivative(xp, z),
            xp.sum(xp.reshape(G * flat, (-1, d)), axis=0))


@jvp_rule("dx", "dz", "dgamma")
def gated_rmsnorm_jvp(xp: Namespace, T: tuple[Any, Any, Any], x: Any, z: Any, gamma: Any,
                      eps: Any, group_size: int | None = None) -> Any:
    r"""JVP of :func:`gated_rmsnorm`: :math:`\dot v = \dot x\odot\operatorname{silu}(z) +
    x\odot\operatorname{silu}'(z)\odot\dot z`, :math:`\dot y = \gamma\odot\frac1r(\dot v -
    \hat v\,\overline{\hat v\odot\dot v}) + \dot\gamma\odot\hat v` per group. A ``None``
    tangent is a zero one."""
    _, g = _check_norm("gated_rmsnorm_jvp", xp, x, z, gamma, eps, group_size)
    dx, dz, dgamma = (xp.zeros_like(a) if t is None else t
                      for t, a in zip(T, (x, z, gamma), strict=True))
    check_args("gated_rmsnorm_jvp", xp, {"x": (x, ("*", "d")), "dx": (dx, ("*", "d")),
                                         "dz": (dz, ("*", "d")), "dgamma": (dgamma, ("d",))})
    v = _grouped(xp, x * silu(xp, z), g)
    h, rho, s = _scaled_rms(xp, v, g, eps)
    vhat = h / rho
    dv = _grouped(xp, dx * silu(xp, z) + x * _silu_derivative(xp, z) * dz, g)
    shape = tuple(x.shape)
    return (gamma * xp.reshape(_normalized_jvp(xp, vhat, dv, rho, s, g), shape)
            + dgamma * xp.reshape(vhat, shape))
