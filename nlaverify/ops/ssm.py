r"""Diagonal state-space models: discretization, the LTI and selective scans, the
associative scan and Mamba-2's state-space duality, written once against ``xp``.

Baggag & Saad (Baptista, Stuart & Tran) §5.3.4 (the attention map replaced by a recurrence
:math:`v_{k+1} = f(v_k, h_k)`, :math:`\mathrm{SSM}(h)_{k+1} = g(v_{k+1}, h_{k+1})`) and
Appendix C (the continuous-time view :math:`x' = A x + B u`); Gu, Goel & Ré 2022 (S4),
Gupta et al. 2022 / Gu et al. 2022 (S4D, diagonal :math:`A`); Gu & Dao 2023 (Mamba, the
selective scan); Dao & Gu 2024 (Mamba-2, state-space duality). Every identity of the family
``ssm`` (:mod:`nlaverify.identities.ssm`) runs these functions on the exact SymPy namespace.

**Discretization** of the diagonal system :math:`x'(t) = A x(t) + B u(t)` with step
:math:`\Delta` (elementwise: :math:`A`, :math:`B`, :math:`\Delta` broadcast):

* zero-order hold (:func:`discretize_zoh`, exact for piecewise-constant :math:`u`):
  :math:`\bar A = e^{\Delta A}`, :math:`\bar B = (\Delta A)^{-1}(e^{\Delta A} - 1)\,\Delta B
  = \varphi_1(\Delta A)\,\Delta B`;
* bilinear / Tustin (:func:`discretize_bilinear`): :math:`\bar A = (1 + \Delta A/2)/(1 -
  \Delta A/2)`, :math:`\bar B = \Delta B/(1 - \Delta A/2)`;
* Mamba's rule (:func:`discretize_zoh_euler`): zero-order hold for :math:`A`, Euler for
  :math:`B`: :math:`\bar A = e^{\Delta A}`, :math:`\bar B = \Delta B` (``selective_scan_ref``
  of ``mamba_ssm``: ``deltaB_u = delta * B * u``).

**Numerics.** :math:`\varphi_1(z) = (e^z - 1)/z` is computed as ``expm1(z) / z``: the
difference :math:`e^z - 1` is never formed, so there is no cancellation for small
:math:`|z|` (``(exp(z) - 1)/z`` loses all digits near :math:`|z| \approx u`), and the
relative error is a few ulps for every :math:`z \ne 0`; :math:`\varphi_1(0) = 1`, its limit,
is selected by ``where`` (the exact namespace turns it into a ``Piecewise`` on
:math:`\Delta A = 0`; the lemma of identity ``ssm_zoh_exact`` proves the limit). For
:math:`\Delta A \to -\infty`, :math:`\bar A = e^{\Delta A}` underflows to 0 and
:math:`\varphi_1(z) \to -1/z`: no overflow. The scans are sequential recurrences, the
reference the parallel forms are proved equal to (:func:`associative_scan`,
:func:`chunked_scan`, :func:`ssd_attention`).

**Derivatives.** :func:`selective_scan_vjp` (the backward scan of Mamba's kernel: the state
adjoint run in reverse) and :func:`selective_scan_jvp` (the tangent scan) are written for
Mamba's rule from a zero state, and proved against ``sympy.diff`` of :func:`selective_scan`
itself (identities ``ssm_selective_scan_vjp`` and ``ssm_selective_scan_jvp``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError
from nlaverify.ops._tangent import jvp_rule
from nlaverify.ops._validate import check_args
from nlaverify.ops.activations import _silu_derivative, sigmoid, silu
from nlaverify.ops.online_softmax import block_bounds

__all__ = ["DISCRETIZATIONS", "associative_scan", "causal_convolution", "chunked_scan",
           "discretize_bilinear", "discretize_zoh", "discretize_zoh_euler", "linear_recurrence",
           "lti_scan", "mamba_scan", "mamba_scan_jvp", "mamba_scan_vjp", "phi1", "scan_combine",
           "selective_scan", "selective_scan_jvp",
           "selective_scan_vjp", "softplus",
           "ssd_attention", "ssd_recurrence", "ssm_decay_matrix", "ssm_kernel"]


def phi1(xp: Namespace, z: Any) -> Any:
    r""":math:`\varphi_1(z) = (e^z - 1)/z`, :math:`\varphi_1(0) = 1`, as ``expm1(z)/z``
    (no cancellation for small :math:`|z|`: see the module's docstring). The divisor is
    replaced by 1 where :math:`z = 0`, so neither branch of the ``where`` divides by 0. The
    branch taken at :math:`z = 0` is written :math:`1 + z/2` (its value there is 1): its
    first-order Taylor polynomial, so that autodiff of this function (``jax.grad``) gets
    :math:`\varphi_1'(0) = \tfrac12` at exactly :math:`z = 0` too, where a constant would
    give 0."""
    zero = xp.equal(z, xp.zeros_like(z))
    return xp.where(zero, 1 + z / 2, xp.expm1(z) / xp.where(zero, xp.ones_like(z), z))


def softplus(xp: Namespace, x: Any) -> Any:
    r""":math:`\operatorname{softplus}(x) = \log(1 + e^x)` (Mamba's :math:`\Delta`), in the
    stable form :math:`\max(x, 0) + \log(1 + e^{-|x|})`: the exponent is never positive,
    ``log1p`` keeps the small term's digits, and each branch equals :math:`\log(1+e^x)`
    exactly (identity ``ssm_softplus_branches``). No threshold: PyTorch's
    ``F.softplus`` returns :math:`x` itself above 20, a relative change below
    :math:`10^{-9}`."""
    pos = xp.greater(x, 0)
    e = xp.exp(xp.where(pos, -x, x))
    return xp.where(pos, x, xp.zeros_like(x)) + xp.log1p(e)


def discretize_zoh(xp: Namespace, delta: Any, A: Any, B: Any) -> tuple[Any, Any]:
    r"""Zero-order hold (Appendix C): :math:`\bar A = e^{\Delta A}`, :math:`\bar B =
    \varphi_1(\Delta A)\,\Delta B` (:func:`phi1`; at :math:`A = 0`, :math:`\bar B = \Delta
    B`), elementwise for a diagonal :math:`A`. Exact for an input held constant over each
    step (identity ``ssm_zoh_exact``)."""
    z = delta * A
    return xp.exp(z), phi1(xp, z) * delta * B


def discretize_bilinear(xp: Namespace, delta: Any, A: Any, B: Any) -> tuple[Any, Any]:
    r"""The bilinear (Tustin) rule of S4: :math:`\bar A = (1 + \Delta A/2)/(1 - \Delta A/2)`,
    :math:`\bar B = \Delta B/(1 - \Delta A/2)`, elementwise (a Padé (1,1) approximant of
    :math:`e^{\Delta A}`, :math:`|\bar A| < 1 \iff \operatorname{Re} A < 0`)."""
    half = delta * A / 2
    den = 1 - half
    return (1 + half) / den, delta * B / den


def discretize_zoh_euler(xp: Namespace, delta: Any, A: Any, B: Any) -> tuple[Any, Any]:
    r"""Mamba's rule (Gu & Dao 2023, §2 and ``selective_scan_ref``): zero-order hold for
    :math:`A`, Euler for :math:`B`: :math:`\bar A = e^{\Delta A}`, :math:`\bar B = \Delta B`.
    Its :math:`\bar B` differs from the zero-order hold's by :math:`(\varphi_1(\Delta A) - 1)
    \Delta B = \tfrac12 A B \Delta^2 + O(\Delta^3)`, at most :math:`\tfrac12 |A|\Delta^2 |B|`
    for :math:`A \le 0` (identity ``ssm_euler_b_error``)."""
    return xp.exp(delta * A), delta * B


#: the discretization rules by name (``selective_scan``'s ``discretization``)
DISCRETIZATIONS: dict[str, Callable[..., tuple[Any, Any]]] = {
    "zoh": discretize_zoh, "bilinear": discretize_bilinear, "zoh_euler": discretize_zoh_euler}


def lti_scan(xp: Namespace, Abar: Any, Bbar: Any, C: Any, u: Any) -> Any:
    r"""The LTI (S4/S4D) scan of ``d`` independent channels with diagonal state of size
    ``N``: :math:`x_k = \bar A \odot x_{k-1} + \bar B\, u_k`, :math:`x_{-1} = 0`,
    :math:`y_k = \sum_n C_n x_{k,n}`, sequentially (the state is read *after* the update,
    so :math:`y_k` sees :math:`u_k`).

    Args:
        Abar, Bbar, C: ``(d, N)``; u: ``(..., L, d)``.

    Returns:
        y: ``(..., L, d)``, equal to :func:`causal_convolution` with :func:`ssm_kernel`
        (identity ``ssm_lti_convolution``).
    """
    check_args("lti_scan", xp, {"Abar": (Abar, ("d", "N")), "Bbar": (Bbar, ("d", "N")),
                                "C": (C, ("d", "N")), "u": (u, ("*", "L", "d"))})
    x, ys = None, []
    for k in range(u.shape[-2]):
        drive = Bbar * u[..., k, :, None]
        x = drive if x is None else Abar * x + drive
        ys.append(xp.sum(C * x, axis=-1))
    return xp.stack(ys, axis=-2)


def ssm_kernel(xp: Namespace, Abar: Any, Bbar: Any, C: Any, L: int) -> Any:
    r"""The convolution kernel :math:`K_k = \sum_n C_n \bar A_n^k \bar B_n`,
    :math:`k = 0, \dots, L-1`, of an LTI diagonal SSM: ``(L, d)`` (S4, eq. 5)."""
    check_args("ssm_kernel", xp, {"Abar": (Abar, ("d", "N")), "Bbar": (Bbar, ("d", "N")),
                                  "C": (C, ("d", "N"))})
    rows, power = [], None
    for _ in range(L):
        power = Bbar if power is None else Abar * power
        rows.append(xp.sum(C * power, axis=-1))
    return xp.stack(rows, axis=0)


def causal_convolution(xp: Namespace, K: Any, u: Any) -> Any:
    r"""The causal convolution :math:`y_k = \sum_{j \le k} K_{k-j} \odot u_j` per channel:
    ``K`` ``(L, d)``, ``u`` ``(..., L, d)``."""
    check_args("causal_convolution", xp, {"K": (K, ("L", "d")), "u": (u, ("*", "L", "d"))})
    L = u.shape[-2]
    return xp.stack([sum((K[k - j] * u[..., j, :] for j in range(1, k + 1)),
                         K[k] * u[..., 0, :]) for k in range(L)], axis=-2)


def selective_scan(xp: Namespace, u: Any, delta: Any, A: Any, B: Any, C: Any,
                   D: Any = None, z: Any = None, delta_bias: Any = None,
                   delta_softplus: bool = False, discretization: str = "zoh_euler",
                   state: Any = None, return_state: bool = False) -> Any:
    r"""Mamba's selective scan (Gu & Dao 2023, Algorithm 2; ``selective_scan_ref`` of
    ``mamba_ssm``, tokens as rows): with :math:`\Delta = \operatorname{softplus}(\delta +
    b_\Delta)` (``delta_softplus``) or :math:`\delta + b_\Delta`,
    :math:`(\bar A_k, \bar B_k)` = ``DISCRETIZATIONS[discretization]``
    :math:`(\Delta_k, A, B_k)` (per channel :math:`c` and state :math:`n`),

    .. math:: x_k = \bar A_k \odot x_{k-1} + \bar B_k\, u_k,\qquad
       y_k = C_k x_k + D \odot u_k,\qquad \text{out}_k = y_k \odot \operatorname{silu}(z_k) .

    Args:
        u, delta, z: ``(..., L, d)``; A: ``(d, N)``; B, C: ``(..., L, N)`` (input-dependent,
            shared by the channels); D, delta_bias: ``(d,)``; state: the initial
            :math:`x_{-1}` ``(..., d, N)`` (default 0: decoding carries it step by step).
        return_state: also return the last state :math:`x_{L-1}`.

    Returns:
        out ``(..., L, d)``, or ``(out, x_{L-1})``.
    """
    if discretization not in DISCRETIZATIONS:
        raise ArgumentError(f"selective_scan: argument 'discretization': expected one of "
                            f"{', '.join(DISCRETIZATIONS)}, got {discretization!r}")
    check_args("selective_scan", xp, {
        "u": (u, ("*", "L", "d")), "delta": (delta, ("*", "L", "d")), "A": (A, ("d", "N")),
        "B": (B, ("*", "L", "N")), "C": (C, ("*", "L", "N")), "D": (D, ("d",)),
        "z": (z, ("*", "L", "d")), "delta_bias": (delta_bias, ("d",)),
        "state": (state, ("*", "d", "N"))})
    _at_least_one_token("selective_scan", u)
    if delta_bias is not None:
        delta = delta + delta_bias
    if delta_softplus:
        delta = softplus(xp, delta)
    Abar, Bbar = DISCRETIZATIONS[discretization](xp, delta[..., None], A, B[..., None, :])
    drive = Bbar * u[..., None]
    if state is not None:  # x_0 = Abar_0 x_{-1} + drive_0
        drive = xp.concat([(Abar[..., 0, :, :] * state + drive[..., 0, :, :])[..., None, :, :],
                           drive[..., 1:, :, :]], axis=-3)
    X = xp.linear_recurrence(Abar, drive, axis=-3)
    y = xp.sum(X * C[..., None, :], axis=-1)
    x = X[..., -1, :, :]
    if D is not None:
        y = y + u * D
    if z is not None:
        y = y * silu(xp, z)
    return (y, x) if return_state else y


def _at_least_one_token(op: str, u: Any) -> None:
    """A scan runs over at least one token (``L >= 1``)."""
    if u.shape[-2] == 0:
        raise ArgumentError(f"{op}: argument 'u': expected at least one token (L >= 1), got "
                            f"shape {tuple(u.shape)}")


def _mamba_parts(xp: Namespace, u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any,
                 delta_bias: Any, delta_softplus: bool, discretization: str
                 ) -> tuple[Any, ...]:
    r"""The intermediate values of :func:`selective_scan` (Mamba's rule, zero initial state)
    that its VJP and JVP reuse: the pre-activation :math:`p = \delta + b_\Delta`,
    :math:`\Delta`, :math:`\bar A`, :math:`\bar B` ``(..., L, d, N)``, the states
    :math:`x_k` stacked ``(..., L, d, N)`` and :math:`y` before the gate."""
    if discretization != "zoh_euler":
        raise ArgumentError(f"selective_scan_vjp/jvp: argument 'discretization': the "
                            f"derivatives are written for Mamba's 'zoh_euler', got "
                            f"{discretization!r}")
    _at_least_one_token("selective_scan_vjp/jvp", u)
    pre = delta if delta_bias is None else delta + delta_bias
    Dt = softplus(xp, pre) if delta_softplus else pre
    Abar, Bbar = discretize_zoh_euler(xp, Dt[..., None], A, B[..., None, :])
    X = xp.linear_recurrence(Abar, Bbar * u[..., None], axis=-3)
    y = xp.sum(X * C[..., None, :], axis=-1)
    if D is not None:
        y = y + u * D
    return pre, Dt, Abar, Bbar, X, y


def selective_scan_vjp(xp: Namespace, G: Any, u: Any, delta: Any, A: Any, B: Any, C: Any,
                       D: Any = None, z: Any = None, delta_bias: Any = None,
                       delta_softplus: bool = False, discretization: str = "zoh_euler"
                       ) -> tuple[Any, ...]:
    r"""VJP of :func:`selective_scan` (Mamba's rule, zero initial state): the backward scan
    of Mamba's kernel. With :math:`\bar y = G \odot \operatorname{silu}(z)` and the state
    adjoint :math:`\lambda_k = \bar y_k C_k^\top + \bar A_{k+1} \odot \lambda_{k+1}`
    (run backwards from :math:`\lambda_{L-1} = \bar y_{L-1} C_{L-1}^\top`),

    .. math:: \bar u_k = D\odot\bar y_k + \textstyle\sum_n \lambda_k\odot\bar B_k,\quad
       \bar\Delta_k = \sum_n \lambda_k\odot(x_{k-1}\odot A\odot\bar A_k + u_k B_k),\quad
       \bar A = \sum_k \lambda_k\odot x_{k-1}\odot\Delta_k\odot\bar A_k,

    .. math:: \bar B_k = \textstyle\sum_c \lambda_{k,c}\,u_{k,c}\Delta_{k,c},\quad
       \bar C_k = \sum_c \bar y_{k,c}\, x_{k,c},\quad \bar D = \sum_k \bar y_k\odot u_k,
       \quad \bar z = G\odot y\odot\operatorname{silu}'(z),

    and :math:`\bar\delta = \bar\Delta\odot\sigma(\delta + b_\Delta)` under
    ``delta_softplus``, :math:`\bar b_\Delta = \sum_k \bar\delta_k`. Returns the
    cotangents of ``(u, delta, A, B, C, D, z, delta_bias)`` (``None`` for an absent one)."""
    pre, Dt, Abar, Bbar, X, y = _mamba_parts(xp, u, delta, A, B, C, D, delta_bias,
                                             delta_softplus, discretization)
    Gy, zbar = G, None
    if z is not None:
        Gy, zbar = G * silu(xp, z), G * y * _silu_derivative(xp, z)
    lead = tuple(range(u.ndim - 1))  # the batch axes and L: summed for shared parameters
    # lambda_k = Gy_k C_k^T + Abar_{k+1} lambda_{k+1}: the reverse recurrence with a_k =
    # Abar_{k+1} (a_{L-1}, never read, any value)
    Abar_next = xp.concat([Abar[..., 1:, :, :], Abar[..., -1:, :, :]], axis=-3)
    Lam = xp.linear_recurrence(Abar_next, Gy[..., None] * C[..., None, :], axis=-3,
                               reverse=True)
    Xprev = xp.concat([xp.zeros_like(X[..., :1, :, :]), X[..., :-1, :, :]], axis=-3)
    Abar_bar = Lam * Xprev * Abar
    ubar = xp.sum(Lam * Bbar, axis=-1)
    Dt_bar = xp.sum(Abar_bar * A + Lam * u[..., None] * B[..., None, :], axis=-1)
    pre_bar = Dt_bar * sigmoid(xp, pre) if delta_softplus else Dt_bar
    return (ubar if D is None else ubar + Gy * D,
            pre_bar,
            xp.sum(Abar_bar * Dt[..., None], axis=lead),
            xp.sum(Lam * (u * Dt)[..., None], axis=-2),
            xp.sum(Gy[..., None] * X, axis=-2),
            None if D is None else xp.sum(Gy * u, axis=lead),
            zbar,
            None if delta_bias is None else xp.sum(pre_bar, axis=lead))


@jvp_rule("du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias")
def selective_scan_jvp(xp: Namespace, T: tuple[Any, ...], u: Any, delta: Any, A: Any, B: Any,
                       C: Any, D: Any = None, z: Any = None, delta_bias: Any = None,
                       delta_softplus: bool = False, discretization: str = "zoh_euler") -> Any:
    r"""JVP of :func:`selective_scan` (Mamba's rule, zero initial state): the tangent scan
    :math:`\dot x_k = \dot{\bar A}_k x_{k-1} + \bar A_k \dot x_{k-1} + \dot{\bar B}_k u_k +
    \bar B_k \dot u_k` with :math:`\dot{\bar A}_k = \bar A_k\odot(\dot\Delta_k A +
    \Delta_k\dot A)`, :math:`\dot{\bar B}_k = \dot\Delta_k B_k + \Delta_k \dot B_k`,
    :math:`\dot\Delta = \sigma(\delta + b_\Delta)(\dot\delta + \dot b_\Delta)` under
    ``delta_softplus``; :math:`\dot y_k = C_k\dot x_k + \dot C_k x_k + \dot D u_k +
    D\dot u_k` and :math:`\dot{\text{out}} = \dot y\odot\operatorname{silu}(z) +
    y\odot\operatorname{silu}'(z)\odot\dot z`. A ``None`` tangent is a zero one."""
    pre, Dt, Abar, Bbar, X, y = _mamba_parts(xp, u, delta, A, B, C, D, delta_bias,
                                             delta_softplus, discretization)
    du, dd, dA, dB, dC = (xp.zeros_like(a) if t is None else t
                          for t, a in zip(T[:5], (u, delta, A, B, C), strict=True))
    dpre = dd if T[7] is None else dd + T[7]
    dDt = dpre * sigmoid(xp, pre) if delta_softplus else dpre
    dAbar = Abar * (dDt[..., None] * A + Dt[..., None] * dA)
    dBbar = dDt[..., None] * B[..., None, :] + Dt[..., None] * dB[..., None, :]
    ddrive = dBbar * u[..., None] + Bbar * du[..., None]
    # dx_k = Abar_k dx_{k-1} + (dAbar_k x_{k-1} + ddrive_k), dx_0 = ddrive_0
    forced = xp.concat([ddrive[..., :1, :, :],
                        dAbar[..., 1:, :, :] * X[..., :-1, :, :] + ddrive[..., 1:, :, :]],
                       axis=-3)
    dX = xp.linear_recurrence(Abar, forced, axis=-3)
    dy = xp.sum(dX * C[..., None, :] + X * dC[..., None, :], axis=-1)
    if D is not None:
        dy = dy + du * D if T[5] is None else dy + du * D + u * T[5]
    if z is None:
        return dy
    out = dy * silu(xp, z)
    return out if T[6] is None else out + y * _silu_derivative(xp, z) * T[6]


def mamba_scan(xp: Namespace, u: Any, delta: Any, A_log: Any, B: Any, C: Any, D: Any,
               z: Any, delta_bias: Any) -> Any:
    r"""The selective scan of a Mamba block (Gu & Dao 2023; Hugging Face ``MambaMixer``):
    :func:`selective_scan` with :math:`A = -e^{A_{\log}}` (the stored parameter is
    :math:`A_{\log}`, so :math:`A < 0` and :math:`|\bar A| < 1`, identity ``ssm_stability``),
    :math:`\Delta = \operatorname{softplus}(\delta + b_\Delta)`, skip :math:`D`, gate
    :math:`z`, Mamba's rule, zero initial state.

    Args:
        u, delta, z: ``(..., n, d)``; A_log: ``(d, N)``; B, C: ``(..., n, N)``; D,
            delta_bias: ``(d,)``.
    """
    return selective_scan(xp, u, delta, -xp.exp(A_log), B, C, D, z, delta_bias,
                          delta_softplus=True)


def mamba_scan_vjp(xp: Namespace, G: Any, u: Any, delta: Any, A_log: Any, B: Any, C: Any,
                   D: Any, z: Any, delta_bias: Any) -> tuple[Any, ...]:
    r"""VJP of :func:`mamba_scan`: :func:`selective_scan_vjp` at :math:`A = -e^{A_{\log}}`,
    and the chain rule :math:`\bar A_{\log} = \bar A \odot \partial A/\partial A_{\log} =
    \bar A \odot A`."""
    A = -xp.exp(A_log)
    bars = selective_scan_vjp(xp, G, u, delta, A, B, C, D, z, delta_bias, delta_softplus=True)
    return (*bars[:2], bars[2] * A, *bars[3:])


@jvp_rule("du", "ddelta", "dA_log", "dB", "dC", "dD", "dz", "ddelta_bias")
def mamba_scan_jvp(xp: Namespace, T: tuple[Any, ...], u: Any, delta: Any, A_log: Any, B: Any,
                   C: Any, D: Any, z: Any, delta_bias: Any) -> Any:
    r"""JVP of :func:`mamba_scan`: :func:`selective_scan_jvp` along :math:`\dot A =
    A\odot\dot A_{\log}` (:math:`A = -e^{A_{\log}}`). A ``None`` tangent is a zero one."""
    A = -xp.exp(A_log)
    dA = None if T[2] is None else A * T[2]
    return selective_scan_jvp(xp, (*T[:2], dA, *T[3:]), u, delta, A, B, C, D, z, delta_bias,
                              delta_softplus=True)


# -- the first-order linear recurrence and its associative scan ---------------------------
def scan_combine(xp: Namespace, first: tuple[Any, Any], second: tuple[Any, Any]
                 ) -> tuple[Any, Any]:
    r"""The associative operator of the recurrence :math:`h_k = a_k h_{k-1} + b_k`
    (Blelloch 1990; Martin & Cundy 2018): the affine maps :math:`h \mapsto a h + b`
    composed, ``first`` applied first,

    .. math:: (a_1, b_1) \circ (a_2, b_2) = (a_1 a_2,\ a_2 b_1 + b_2),

    associative (identity ``ssm_scan_combine_associative``), not commutative."""
    (a1, b1), (a2, b2) = first, second
    return a1 * a2, a2 * b1 + b2


def linear_recurrence(xp: Namespace, a: Any, b: Any) -> Any:
    r"""The states :math:`h_k = a_k h_{k-1} + b_k`, :math:`h_{-1} = 0`, sequentially along
    axis 0 (``a``, ``b`` of the same shape): the reference of the parallel scans."""
    h, out = None, []
    for k in range(b.shape[0]):
        h = b[k] if h is None else a[k] * h + b[k]
        out.append(h)
    return xp.stack(out, axis=0)


def associative_scan(xp: Namespace, a: Any, b: Any) -> Any:
    r"""The states of :func:`linear_recurrence` by recursive doubling (Hillis & Steele 1986):
    :math:`\lceil\log_2 L\rceil` rounds, in round :math:`r` every position :math:`k \ge 2^r`
    combines (:func:`scan_combine`) the prefix ending :math:`2^r` earlier with its own;
    what ``jax.lax.associative_scan`` computes with the same operator."""
    elems = [(a[k], b[k]) for k in range(b.shape[0])]
    off = 1
    while off < len(elems):
        elems = [e if k < off else scan_combine(xp, elems[k - off], e)
                 for k, e in enumerate(elems)]
        off *= 2
    return xp.stack([e[1] for e in elems], axis=0)


def chunk_bounds(L: int, chunks: int | Sequence[int], *,
                 op: str = "chunked_scan") -> list[tuple[int, int]]:
    """Contiguous chunks ``[(lo, hi), ...]`` of ``L`` steps: of size ``chunks`` (the last
    ragged) or of the listed sizes (positive, summing to ``L``); an error names ``op`` (the
    caller) and its argument ``chunks``."""
    return block_bounds(L, chunks, op=op, arg="chunks", what="the steps")


def chunked_scan(xp: Namespace, a: Any, b: Any, chunks: int | Sequence[int]) -> Any:
    r"""The states of :func:`linear_recurrence`, chunk by chunk (the structure of Mamba-2's
    chunked kernel): within a chunk, the local prefixes :math:`(\alpha_k, \beta_k)` from a
    zero state; across chunks, a carried state :math:`h` (the previous chunks' combined
    summary); each state is :math:`h_k = \alpha_k h + \beta_k`, and the carry is updated by
    :func:`scan_combine` with the chunk's total."""
    h, out = None, []
    for lo, hi in chunk_bounds(b.shape[0], chunks):
        alpha = beta = None
        for k in range(lo, hi):
            alpha, beta = ((a[k], b[k]) if alpha is None
                           else scan_combine(xp, (alpha, beta), (a[k], b[k])))
            out.append(beta if h is None else alpha * h + beta)
        h = beta if h is None else alpha * h + beta
    return xp.stack(out, axis=0)


# -- Mamba-2: state-space duality ---------------------------------------------------------
def ssm_decay_matrix(xp: Namespace, log_a: Any) -> Any:
    r"""The 1-semiseparable decay matrix of Mamba-2 (Dao & Gu 2024, §3):
    :math:`L_{ij} = \prod_{k=j+1}^{i} a_k = \exp\bigl(\sum_{k=j+1}^{i} \log a_k\bigr)` for
    :math:`i \ge j`, 0 above the diagonal. Each exponent is summed directly over its
    segment (``segsum``), never as a difference of cumulative sums, which would cancel
    for long sequences."""
    T = log_a.shape[0]
    zero = xp.zeros_like(log_a[0])
    rows = []
    for i in range(T):
        rows.append(xp.stack([xp.exp(xp.sum(log_a[j + 1:i + 1])) if i > j else
                              xp.ones_like(zero) if i == j else zero for j in range(T)], axis=0))
    return xp.stack(rows, axis=0)


def ssd_recurrence(xp: Namespace, log_a: Any, B: Any, C: Any, X: Any) -> Any:
    r"""The scalar-decay SSM of Mamba-2 as a recurrence: :math:`H_t = a_t H_{t-1} +
    B_t^\top X_t` (state :math:`N \times d`), :math:`Y_t = C_t H_t`, with
    :math:`a_t = e^{\log a_t}` (``log_a`` ``(T,)``, B, C ``(T, N)``, X ``(T, d)``)."""
    check_args("ssd_recurrence", xp, {"log_a": (log_a, ("T",)), "B": (B, ("T", "N")),
                                      "C": (C, ("T", "N")), "X": (X, ("T", "d"))})
    a = xp.exp(log_a)
    H, ys = None, []
    for t in range(X.shape[0]):
        drive = B[t][:, None] * X[t][None, :]
        H = drive if H is None else a[t] * H + drive
        ys.append(xp.sum(C[t][:, None] * H, axis=0))
    return xp.stack(ys, axis=0)


def ssd_attention(xp: Namespace, log_a: Any, B: Any, C: Any, X: Any) -> Any:
    r"""The same SSM as masked attention (Dao & Gu 2024, eq. (16)): :math:`Y = (L \circ
    C B^\top) X` with :math:`L` the 1-semiseparable :func:`ssm_decay_matrix`: "queries"
    :math:`C`, "keys" :math:`B`, no softmax, the decay as the mask (identity
    ``ssm_state_space_duality``)."""
    check_args("ssd_attention", xp, {"log_a": (log_a, ("T",)), "B": (B, ("T", "N")),
                                     "C": (C, ("T", "N")), "X": (X, ("T", "d"))})
    M = ssm_decay_matrix(xp, log_a) * xp.matmul(C, xp.matrix_transpose(B))
    return xp.matmul(M, X)
