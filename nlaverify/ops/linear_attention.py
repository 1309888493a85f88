r"""Linearized and randomized attention: the kernel view (Baggag & Saad §4.3, §4.4).

Softmax attention :math:`D^{-1} A V`, :math:`A_{ij} = \kappa(q_i, k_j) =
\exp(q_i^\top k_j/\sqrt d)`, costs :math:`O(n^2)`. If the kernel factors through a
feature map, :math:`\kappa(q, k) \approx \phi(q)^\top \phi(k)`, the product can be
re-associated (§4.3.2): with :math:`Q_f = \phi(Q)`, :math:`K_f = \phi(K)` (``(..., n, m)``)
and :math:`C = [V, \mathbf 1]`,

.. math:: X = K_f^\top C,\qquad Y = Q_f X,\qquad
   \operatorname{out} = Y_{:, :d_v} \,/\, Y_{:, d_v},

in :math:`O(n m d_v)` (:func:`kernel_attention`); the ones column carries the normaliser
:math:`D = \operatorname{diag}(Q_f K_f^\top \mathbf 1)`. Causal masking keeps the linear
cost with prefix sums over positions, :math:`Y_i = Q_{f,i}^\top \sum_{j\le i} K_{f,j}
C_j^\top` ("Transformers are RNNs"). Feature maps: :func:`elu1` (Katharopoulos et al.),
:func:`trig_features` (random Fourier features of the Gaussian kernel, FAVOR, §4.4),
:func:`positive_features` and :func:`hyperbolic_features` (FAVOR+, Choromanski et al.
2021). Two other linear forms: :func:`efficient_attention` (Shen et al., §4.3) and
:func:`linformer_attention` (Wang et al., low-rank projections of keys and values, §4.4).

Every forward has its VJP ``<name>_vjp`` and JVP ``<name>_jvp`` next to it; leading
batch/head axes ``(..., n, d)`` are supported throughout (:math:`W`, :math:`b`, :math:`E`,

The linear form itself (the ones column, the prefix sums, the chunked causal form and
:data:`CHUNK`) is :mod:`nlaverify.ops.kernel_attention`, the feature maps
:mod:`nlaverify.ops.feature_maps`; this module builds the attention variants on them and
re-exports both, so every op of the family is importable from here (the path the proofs
and the op registry name).
"""

from __future__ import annotations

import math
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.ops._tangent import lin, tangents, tsum
from nlaverify.ops._validate import check_args
from nlaverify.ops.feature_maps import (  # noqa: F401  (re-exported: see the docstring)
    _check_weights,
    _positive_exponent,
    _positive_exponent_jvp,
    _positive_exponent_vjp,
    _sqnorm,
    elu1,
    elu1_jvp,
    elu1_vjp,
    hyperbolic_features,
    hyperbolic_features_jvp,
    hyperbolic_features_vjp,
    positive_features,
    positive_features_jvp,
    positive_features_vjp,
    trig_features,
    trig_features_jvp,
    trig_features_vjp,
)
from nlaverify.ops.kernel_attention import (  # noqa: F401  (re-exported)
    CHUNK,
    _check_qkv,
    kernel_attention,
    kernel_attention_jvp,
    kernel_attention_vjp,
)
from nlaverify.ops.softmaxes import (
    softmax,
    softmax_jvp_from_output,
    softmax_vjp_from_output,
)

# -- helpers ------------------------------------------------------------------------------


def _root4(xp: Namespace, d: int) -> Any:
    r""":math:`d^{1/4}`: exact on SymPy (:math:`\sqrt{\sqrt d}`), a float elsewhere."""
    if xp.object_arrays:
        return xp.sqrt(xp.asarray([xp.const_sqrt(d)]))[0]
    return math.sqrt(xp.const_sqrt(d))


def _sum_to(xp: Namespace, X: Any, ndim: int) -> Any:
    """Sum the leading axes of ``X`` that an argument of ``ndim`` axes broadcast over."""
    extra = len(X.shape) - ndim
    return xp.sum(X, axis=tuple(range(extra))) if extra > 0 else X

# -- FAVOR and FAVOR+ (Baggag & Saad §4.4) ------------------------------------------------


def _favor_side(xp: Namespace, X: Any, W: Any, b: Any) -> tuple[Any, Any, Any, Any]:
    r"""``(X̃, D_X, Φ, D_X Φ)``: :math:`\tilde X = X/d^{1/4}`, :math:`D_X =
    \exp(\|\tilde x\|^2/2) = \exp(\|x\|^2/(2\sqrt d))` per row, :math:`\Phi` the trig
    features of :math:`\tilde X`."""
    Xs = X / _root4(xp, X.shape[-1])
    Phi = trig_features(xp, Xs, W, b)
    Dx = xp.exp(_sqnorm(xp, Xs) * xp.rational(1, 2))
    return Xs, Dx, Phi, Dx * Phi


def _favor_side_vjp(xp: Namespace, dXf: Any, side: tuple[Any, Any, Any, Any], W: Any,
                    b: Any) -> Any:
    r""":math:`\bar{\tilde X} = \operatorname{trig\_vjp}(D_X \bar X_f) +
    \operatorname{rowsum}(\bar X_f \odot X_f)\,\tilde x` (as :math:`\partial D_X/\partial
    \tilde x = D_X \tilde x`), then :math:`\bar X = \bar{\tilde X}/d^{1/4}`; ``side`` is
    :func:`_favor_side`'s."""
    Xs, Dx, _, Xf = side
    dXs = trig_features_vjp(xp, dXf * Dx, Xs, W, b)[0] + xp.sum(dXf * Xf, axis=-1,
                                                                keepdims=True) * Xs
    return dXs / _root4(xp, Xs.shape[-1])


def _favor_side_jvp(xp: Namespace, dX: Any, side: tuple[Any, Any, Any, Any], W: Any,
                    b: Any) -> Any:
    r""":math:`\dot X_f = D_X\,\operatorname{trig\_jvp}(\dot{\tilde X}) + \langle \tilde x,
    \dot{\tilde x}\rangle X_f`, :math:`\dot{\tilde X} = \dot X/d^{1/4}`."""
    Xs, Dx, _, Xf = side
    dXs = dX / _root4(xp, Xs.shape[-1])
    return (Dx * trig_features_jvp(xp, (dXs,), Xs, W, b)
            + xp.sum(Xs * dXs, axis=-1, keepdims=True) * Xf)


def _check_favor(op: str, xp: Namespace, Q: Any, K: Any, V: Any, W: Any, b: Any,
                 extra: dict[str, tuple[Any, tuple]] | None = None) -> None:
    d = _check_qkv(op, xp, Q, K, V, extra=extra)["d"]
    _check_weights(op, xp, W, b, d)


def favor_attention(xp: Namespace, Q: Any, K: Any, V: Any, W: Any, b: Any, *,
                    causal: bool = False) -> Any:
    r"""FAVOR exactly as Baggag & Saad §4.4 describe it. Since
    :math:`e^{q^\top k/\sqrt d} = e^{\|q\|^2/2\sqrt d}\, e^{\|k\|^2/2\sqrt d}\,
    e^{-\|q - k\|^2/2\sqrt d}`, :math:`A = D_Q B D_K` with :math:`B` the Gaussian kernel of
    width :math:`\sigma = d^{1/4}`, estimated by trig features :math:`\hat Q =
    \phi(Q/d^{1/4})`, :math:`\hat K = \phi(K/d^{1/4})` (:func:`trig_features`, ``W``
    ``(m, d)`` with :math:`\mathcal N(0, I)` rows, ``b`` ``(m,)`` uniform phases). With
    :math:`D_Q = \operatorname{diag}(e^{\|q_i\|^2/2\sqrt d})`, :math:`D_K` likewise,

    .. math:: C = [V, \mathbf 1],\quad X = (D_K \hat K)^\top C,\quad Y = (D_Q \hat Q) X,
       \quad \operatorname{out} = D^{-1} Y_{:, :d_v},\ D = \operatorname{diag}(Y_{:, d_v}),

    i.e. :math:`D^{-1}\hat A V` with :math:`\hat A = D_Q \hat Q \hat K^\top D_K`
    (:func:`kernel_attention`; ``causal``: its prefix sums). An unbiased estimate of
    :math:`A`, not of the output; :math:`D` may vanish (trig features are not positive)
    and :math:`D_Q` overflows for large :math:`\|q\|` (:math:`\|q\|^2/2\sqrt d` beyond the
    exponent range; then the inner :func:`kernel_attention` refuses its non-finite ``Qf``):
    FAVOR+ (:func:`favor_plus_attention`) fixes both.
    """
    _check_favor("favor_attention", xp, Q, K, V, W, b)
    return kernel_attention(xp, _favor_side(xp, Q, W, b)[3], _favor_side(xp, K, W, b)[3], V,
                            causal=causal)


def favor_attention_vjp(xp: Namespace, G: Any, Q: Any, K: Any, V: Any, W: Any, b: Any, *,
                        causal: bool = False) -> tuple[Any, Any, Any]:
    r"""VJP of :func:`favor_attention` (``W``, ``b`` fixed): :func:`kernel_attention_vjp`
    gives :math:`\bar Q_f, \bar K_f, \bar V`; each side :math:`X_f = D_X \phi(\tilde X)`
    then gives :math:`\bar{\tilde X} = \operatorname{trig\_vjp}(D_X \bar X_f) +
    \operatorname{rowsum}(\bar X_f \odot X_f)\,\tilde x` and :math:`\bar X =
    \bar{\tilde X}/d^{1/4}`."""
    _check_favor("favor_attention_vjp", xp, Q, K, V, W, b, {"G": (G, ("*", "n", "d_v"))})
    sq, sk = _favor_side(xp, Q, W, b), _favor_side(xp, K, W, b)
    dQf, dKf, dV = kernel_attention_vjp(xp, G, sq[3], sk[3], V, causal=causal)
    return _favor_side_vjp(xp, dQf, sq, W, b), _favor_side_vjp(xp, dKf, sk, W, b), dV


def favor_attention_jvp(xp: Namespace, T: tuple[Any, Any, Any], Q: Any, K: Any, V: Any,
                        W: Any, b: Any, *, causal: bool = False) -> Any:
    r"""JVP of :func:`favor_attention`: :math:`\dot X_f = D_X\,\operatorname{trig\_jvp}
    (\dot X/d^{1/4}) + \langle\tilde x, \dot{\tilde x}\rangle X_f` per side, then
    :func:`kernel_attention_jvp`."""
    dQ, dK, dV = tangents("favor_attention_jvp", T, ("dQ", "dK", "dV"))
    _check_favor("favor_attention_jvp", xp, Q, K, V, W, b,
                 {"dQ": (dQ, ("*", "n", "d")), "dK": (dK, ("*", "n", "d")),
                  "dV": (dV, ("*", "n", "d_v"))})
    sq, sk = _favor_side(xp, Q, W, b), _favor_side(xp, K, W, b)
    return kernel_attention_jvp(xp, (lin(dQ, lambda t: _favor_side_jvp(xp, t, sq, W, b)),
                                     lin(dK, lambda t: _favor_side_jvp(xp, t, sk, W, b)), dV),
                                sq[3], sk[3], V, causal=causal)


def _favor_plus_side(xp: Namespace, X: Any, W: Any, per_row: bool) -> tuple[Any, Any]:
    r"""``(X̃, X_f)``: :math:`X_f = \exp(Z - c)/\sqrt m`, :math:`Z = \tilde X W^\top -
    \tfrac12\|\tilde x\|^2`, :math:`\tilde X = X/d^{1/4}`; the shift :math:`c` is one per
    row (queries: a row factor, cancelled by :math:`D^{-1}`) or one over all rows and
    features (keys: a common factor of numerator and normaliser), ``xp.stability_shift``
    (the maximum on floating backends, so the largest exponent is 0; an opaque symbol on
    SymPy, so the proofs hold for every shift)."""
    Xs = X / _root4(xp, X.shape[-1])
    Z = _positive_exponent(xp, Xs, W)
    if per_row:
        c = xp.stability_shift(Z, axis=-1)
    else:
        lead = tuple(Z.shape[:-2])
        flat = xp.reshape(Z, (*lead, Z.shape[-2] * Z.shape[-1]))
        c = xp.reshape(xp.stability_shift(flat, axis=-1), (*lead, 1, 1))
    return Xs, xp.exp(Z - c) / xp.const_sqrt(W.shape[-2])


def _favor_plus_side_vjp(xp: Namespace, dXf: Any, Xs: Any, Xf: Any, W: Any) -> Any:
    r""":math:`\bar Z = \bar X_f \odot X_f` (the shift is a constant: the output does not
    depend on it), :math:`\bar{\tilde X} = \bar Z W - \operatorname{rowsum}(\bar Z)\,
    \tilde x`, :math:`\bar X = \bar{\tilde X}/d^{1/4}`. ``X_f`` must be the features the
    forward used (on SymPy each call of ``stability_shift`` is a new symbol)."""
    return _positive_exponent_vjp(xp, dXf * Xf, Xs, W) / _root4(xp, Xs.shape[-1])


def _favor_plus_side_jvp(xp: Namespace, dX: Any, Xs: Any, Xf: Any, W: Any) -> Any:
    r""":math:`\dot X_f = X_f \odot (\dot{\tilde X} W^\top - \langle\tilde x,
    \dot{\tilde x}\rangle)`, :math:`\dot{\tilde X} = \dot X/d^{1/4}`."""
    return Xf * _positive_exponent_jvp(xp, dX / _root4(xp, Xs.shape[-1]), Xs, W)


def favor_plus_attention(xp: Namespace, Q: Any, K: Any, V: Any, W: Any, *,
                         causal: bool = False) -> Any:
    r"""FAVOR+ (Choromanski et al. 2021; Baggag & Saad §4.4): positive features
    (:func:`positive_features`) of :math:`\tilde Q = Q/d^{1/4}`, :math:`\tilde K =
    K/d^{1/4}`, so that :math:`\mathbb E\,\phi(\tilde q)^\top\phi(\tilde k) =
    e^{q^\top k/\sqrt d}`, in the linear form of :func:`kernel_attention`:

    .. math:: Q_f = e^{Z_Q - c_Q \mathbf 1^\top}/\sqrt m,\quad K_f = e^{Z_K - c_K}/\sqrt m,
       \quad \operatorname{out} = D^{-1}\bigl((Q_f K_f^\top)\circ M\bigr) V,

    :math:`Z = \tilde X W^\top - \tfrac12\|\tilde x\|^2`. The stabilisers cancel exactly:
    :math:`c_Q` (one per query row) scales row :math:`i` of the numerator and of
    :math:`D` alike, :math:`c_K` (one over all keys and features) every entry alike. In
    exact arithmetic the normaliser is positive, and nothing overflows for any
    :math:`\|q\|` or :math:`\|k\|`. *Limit (floating point, causal only):* the key shift
    is the maximum over *all* keys, so when a later key's :math:`\|\tilde k\|^2/2`
    exceeds an early one's by more than the exponent range (about 745 in float64, 87 in
    float32), the early prefix's features underflow to 0 and its rows are 0/0; a running
    (prefix) maximum would remove this and is not implemented.
    ``W`` ``(m, d)`` (Gaussian or orthogonal rows).
    """
    d = _check_qkv("favor_plus_attention", xp, Q, K, V)["d"]
    _check_weights("favor_plus_attention", xp, W, None, d)
    return kernel_attention(xp, _favor_plus_side(xp, Q, W, True)[1],
                            _favor_plus_side(xp, K, W, False)[1], V, causal=causal)


def favor_plus_attention_vjp(xp: Namespace, G: Any, Q: Any, K: Any, V: Any, W: Any, *,
                             causal: bool = False) -> tuple[Any, Any, Any]:
    r"""VJP of :func:`favor_plus_attention` (``W`` fixed): :func:`kernel_attention_vjp`,
    then per side :math:`\bar Z = \bar X_f \odot X_f`, :math:`\bar X = (\bar Z W -
    \operatorname{rowsum}(\bar Z)\,\tilde x)/d^{1/4}` (the shifts get no cotangent: the
    output does not depend on them)."""
    d = _check_qkv("favor_plus_attention_vjp", xp, Q, K, V,
                   extra={"G": (G, ("*", "n", "d_v"))})["d"]
    _check_weights("favor_plus_attention_vjp", xp, W, None, d)
    (Qs, Qf), (Ks, Kf) = _favor_plus_side(xp, Q, W, True), _favor_plus_side(xp, K, W, False)
    dQf, dKf, dV = kernel_attention_vjp(xp, G, Qf, Kf, V, causal=causal)
    return (_favor_plus_side_vjp(xp, dQf, Qs, Qf, W), _favor_plus_side_vjp(xp, dKf, Ks, Kf, W),
            dV)


def favor_plus_attention_jvp(xp: Namespace, T: tuple[Any, Any, Any], Q: Any, K: Any, V: Any,
                             W: Any, *, causal: bool = False) -> Any:
    r"""JVP of :func:`favor_plus_attention`: :math:`\dot X_f = X_f \odot (\dot{\tilde X}
    W^\top - \langle\tilde x, \dot{\tilde x}\rangle)` per side, then
    :func:`kernel_attention_jvp`."""
    dQ, dK, dV = tangents("favor_plus_attention_jvp", T, ("dQ", "dK", "dV"))
    d = _check_qkv("favor_plus_attention_jvp", xp, Q, K, V,
                   extra={"dQ": (dQ, ("*", "n", "d")), "dK": (dK, ("*", "n", "d")),
                          "dV": (dV, ("*", "n", "d_v"))})["d"]
    _check_weights("favor_plus_attention_jvp", xp, W, None, d)
    (Qs, Qf), (Ks, Kf) = _favor_plus_side(xp, Q, W, True), _favor_plus_side(xp, K, W, False)
    return kernel_attention_jvp(xp, (lin(dQ, lambda t: _favor_plus_side_jvp(xp, t, Qs, Qf, W)),
                                     lin(dK, lambda t: _favor_plus_side_jvp(xp, t, Ks, Kf, W)),
                                     dV), Qf, Kf, V, causal=causal)


# -- elu+1, Shen et al., Linformer (Baggag & Saad §4.3, §4.4) -----------------------------


def elu1_attention(xp: Namespace, Q: Any, K: Any, V: Any, *, causal: bool = False) -> Any:
    r"""Linear attention with :math:`\phi = \operatorname{elu} + 1` (Baggag & Saad §4.3,
    Katharopoulos et al.): :func:`kernel_attention` of :math:`\phi(Q), \phi(K)`,

    .. math:: \operatorname{out} = D^{-1}\bigl((\phi(Q)\phi(K)^\top) \circ M\bigr) V,

    causal by prefix sums (the "RNN" form). No :math:`\sqrt d`: :math:`\phi` is not a
    softmax estimator.
    """
    _check_qkv("elu1_attention", xp, Q, K, V)
    return kernel_attention(xp, elu1(xp, Q), elu1(xp, K), V, causal=causal)


def elu1_attention_vjp(xp: Namespace, G: Any, Q: Any, K: Any, V: Any, *,
                       causal: bool = False) -> tuple[Any, Any, Any]:
    r"""VJP of :func:`elu1_attention`: :func:`kernel_attention_vjp`, then
    :math:`\bar Q = \bar Q_f \odot \phi'(Q)`, :math:`\bar K = \bar K_f \odot \phi'(K)`."""
    _check_qkv("elu1_attention_vjp", xp, Q, K, V, extra={"G": (G, ("*", "n", "d_v"))})
    dQf, dKf, dV = kernel_attention_vjp(xp, G, elu1(xp, Q), elu1(xp, K), V, causal=causal)
    return elu1_vjp(xp, dQf, Q)[0], elu1_vjp(xp, dKf, K)[0], dV


def elu1_attention_jvp(xp: Namespace, T: tuple[Any, Any, Any], Q: Any, K: Any, V: Any, *,
                       causal: bool = False) -> Any:
    r"""JVP of :func:`elu1_attention`: :math:`\dot Q_f = \phi'(Q) \odot \dot Q`, likewise
    for :math:`K`, then :func:`kernel_attention_jvp`."""
    dQ, dK, dV = tangents("elu1_attention_jvp", T, ("dQ", "dK", "dV"))
    _check_qkv("elu1_attention_jvp", xp, Q, K, V,
               extra={"dQ": (dQ, ("*", "n", "d")), "dK": (dK, ("*", "n", "d")),
                      "dV": (dV, ("*", "n", "d_v"))})
    return kernel_attention_jvp(xp, (lin(dQ, lambda t: elu1_jvp(xp, (t,), Q)),
                                     lin(dK, lambda t: elu1_jvp(xp, (t,), K)), dV),
                                elu1(xp, Q), elu1(xp, K), V, causal=causal)


def efficient_attention(xp: Namespace, Q: Any, K: Any, V: Any) -> Any:
    r"""Efficient attention (Shen et al.; Baggag & Saad §4.3): softmax over the features of
    each query row and over the positions of each key column, then the linear order,

    .. math:: \operatorname{out} = \operatorname{softmax}_{\mathrm{rows}}(Q)\,
       \bigl(\operatorname{softmax}_{\mathrm{cols}}(K)^\top V\bigr),

    no :math:`\sqrt d`, bidirectional only (the column softmax sees every key).
    """
    _check_qkv("efficient_attention", xp, Q, K, V)
    PK = softmax(xp, K, axis=-2)
    return xp.matmul(softmax(xp, Q, axis=-1), xp.matmul(xp.matrix_transpose(PK), V))


def efficient_attention_vjp(xp: Namespace, G: Any, Q: Any, K: Any, V: Any
                            ) -> tuple[Any, Any, Any]:
    r"""VJP of :func:`efficient_attention`: with :math:`P_Q, P_K` the two softmaxes and
    :math:`X = P_K^\top V`: :math:`\bar X = P_Q^\top G`, :math:`\bar V = P_K \bar X`, and
    the softmax VJPs of :math:`\bar P_Q = G X^\top` (rows) and :math:`\bar P_K = V \bar
    X^\top` (columns)."""
    _check_qkv("efficient_attention_vjp", xp, Q, K, V, extra={"G": (G, ("*", "n", "d_v"))})
    PQ, PK = softmax(xp, Q, axis=-1), softmax(xp, K, axis=-2)
    X = xp.matmul(xp.matrix_transpose(PK), V)
    dX = xp.matmul(xp.matrix_transpose(PQ), G)
    dQ = softmax_vjp_from_output(xp, xp.matmul(G, xp.matrix_transpose(X)), PQ, axis=-1)
    dK = softmax_vjp_from_output(xp, xp.matmul(V, xp.matrix_transpose(dX)), PK, axis=-2)
    return dQ, dK, xp.matmul(PK, dX)


def efficient_attention_jvp(xp: Namespace, T: tuple[Any, Any, Any], Q: Any, K: Any, V: Any
                            ) -> Any:
    r"""JVP of :func:`efficient_attention`: :math:`\dot P_Q, \dot P_K` by the softmax JVPs
    (rows, columns), :math:`\dot X = \dot P_K^\top V + P_K^\top \dot V`,
    :math:`\dot O = \dot P_Q X + P_Q \dot X`."""
    dQ, dK, dV = tangents("efficient_attention_jvp", T, ("dQ", "dK", "dV"))
    _check_qkv("efficient_attention_jvp", xp, Q, K, V,
               extra={"dQ": (dQ, ("*", "n", "d")), "dK": (dK, ("*", "n", "d")),
                      "dV": (dV, ("*", "n", "d_v"))})
    PQ, PK = softmax(xp, Q, axis=-1), softmax(xp, K, axis=-2)
    X = xp.matmul(xp.matrix_transpose(PK), V)
    dPK = lin(dK, lambda t: softmax_jvp_from_output(xp, t, PK, axis=-2))
    dX = None if dK is None and dV is None else tsum(
        lin(dPK, lambda t: xp.matmul(xp.matrix_transpose(t), V)),
        lin(dV, lambda t: xp.matmul(xp.matrix_transpose(PK), t)))
    return tsum(lin(dQ, lambda t: xp.matmul(softmax_jvp_from_output(xp, t, PQ, axis=-1), X)),
                lin(dX, lambda t: xp.matmul(PQ, t)))


def _check_linformer(op: str, xp: Namespace, Q: Any, K: Any, V: Any, E: Any, F: Any,
                     causal: bool, extra: dict[str, tuple[Any, tuple]] | None = None) -> int:
    if causal:
        raise ArgumentError(f"{op}: argument 'causal': expected False (Linformer's projections "
                            "E K, F V mix every position, so no causal mask applies), got True")
    dims = _check_qkv(op, xp, Q, K, V, extra=extra)
    check_args(op, xp, {"E": (E, ("*", "k", "N")), "F": (F, ("*", "k", "N"))})
    if int(E.shape[-1]) < dims["n"]:
        raise ShapeError(f"{op}: argument 'E': expected at least n={dims['n']} columns (one "
                         f"per position; a longer E is the maximum length), got shape "
                         f"{tuple(int(s) for s in E.shape)}")
    return dims["d"]


def _first(X: Any, n: int) -> Any:
    """The first ``n`` columns of a projection (the positions present: a sequence shorter
    than the projection's length is the zero-padded one, :math:`E[K; 0] = E_{:, :n}K`)."""
    return X if int(X.shape[-1]) == n else X[..., :n]


def _padded(xp: Namespace, bar: Any, X: Any) -> Any:
    """A cotangent of the first ``n`` columns of ``X``, extended by zeros to ``X``'s width."""
    n = int(bar.shape[-1])
    return bar if int(X.shape[-1]) == n else xp.concat([bar, xp.zeros_like(X[..., n:])],
                                                       axis=-1)


def _linformer_parts(xp: Namespace, Q: Any, K: Any, V: Any, E: Any, F: Any, d: int
                     ) -> tuple[Any, Any, Any]:
    """``(EK, FV, P)`` with :math:`P = \\operatorname{softmax}(Q (EK)^\\top/\\sqrt d)`."""
    n = int(K.shape[-2])
    Kp, Vp = xp.matmul(_first(E, n), K), xp.matmul(_first(F, n), V)
    P = softmax(xp, xp.matmul(Q, xp.matrix_transpose(Kp)) / xp.const_sqrt(d))
    return Kp, Vp, P


def linformer_attention(xp: Namespace, Q: Any, K: Any, V: Any, E: Any, F: Any, *,
                        causal: bool = False) -> Any:
    r"""Linformer (Wang et al.; Baggag & Saad §4.4): keys and values projected to
    :math:`k` rows by ``E``, ``F`` ``(k, N)`` (trained parameters; :math:`N \ge n` the
    maximum length: a shorter sequence uses the first :math:`n` columns, which is the
    zero-padded sequence's result),

    .. math:: \operatorname{out} = \operatorname{softmax}\Bigl(\frac{Q (E K)^\top}{\sqrt d}
       \Bigr) (F V),

    an :math:`n \times k` attention matrix. With :math:`E = F = I_n` it is softmax
    attention. Bidirectional only.

    Raises:
        ArgumentError: ``causal=True`` (the projections mix every position).
    """
    d = _check_linformer("linformer_attention", xp, Q, K, V, E, F, causal)
    _, Vp, P = _linformer_parts(xp, Q, K, V, E, F, d)
    return xp.matmul(P, Vp)


def linformer_attention_vjp(xp: Namespace, G: Any, Q: Any, K: Any, V: Any, E: Any, F: Any, *,
                            causal: bool = False) -> tuple[Any, Any, Any, Any, Any]:
    r"""VJP of :func:`linformer_attention`: with :math:`\tilde K = EK`, :math:`\tilde V =
    FV`, :math:`\bar{\tilde V} = P^\top G`, :math:`dS = P \odot (dP - \operatorname{rowsum}
    (dP \odot P))/\sqrt d` (:math:`dP = G\tilde V^\top`), :math:`\bar Q = dS\,\tilde K`,
    :math:`\bar{\tilde K} = dS^\top Q`; then :math:`\bar K = E^\top \bar{\tilde K}`,
    :math:`\bar E = \bar{\tilde K} K^\top`, :math:`\bar V = F^\top \bar{\tilde V}`,
    :math:`\bar F = \bar{\tilde V} V^\top` (``E``, ``F`` cotangents summed over the batch
    axes they broadcast over)."""
    d = _check_linformer("linformer_attention_vjp", xp, Q, K, V, E, F, causal,
                         {"G": (G, ("*", "n", "d_v"))})
    Kp, Vp, P = _linformer_parts(xp, Q, K, V, E, F, d)
    n = int(K.shape[-2])
    En, Fn = _first(E, n), _first(F, n)
    dVp = xp.matmul(xp.matrix_transpose(P), G)
    dS = softmax_vjp_from_output(xp, xp.matmul(G, xp.matrix_transpose(Vp)), P) \
        / xp.const_sqrt(d)
    dKp = xp.matmul(xp.matrix_transpose(dS), Q)
    return (xp.matmul(dS, Kp), xp.matmul(xp.matrix_transpose(En), dKp),
            xp.matmul(xp.matrix_transpose(Fn), dVp),
            _padded(xp, _sum_to(xp, xp.matmul(dKp, xp.matrix_transpose(K)), len(E.shape)), E),
            _padded(xp, _sum_to(xp, xp.matmul(dVp, xp.matrix_transpose(V)), len(F.shape)), F))


def linformer_attention_jvp(xp: Namespace, T: tuple[Any, Any, Any, Any, Any], Q: Any, K: Any,
                            V: Any, E: Any, F: Any, *, causal: bool = False) -> Any:
    r"""JVP of :func:`linformer_attention`: :math:`\dot{\tilde K} = \dot E K + E \dot K`,
    :math:`\dot{\tilde V} = \dot F V + F \dot V`, :math:`\dot S = (\dot Q \tilde K^\top +
    Q \dot{\tilde K}^\top)/\sqrt d`, :math:`\dot P = P \odot (\dot S -
    \operatorname{rowsum}(\dot S \odot P))`, :math:`\dot O = \dot P \tilde V + P
    \dot{\tilde V}`."""
    dQ, dK, dV, dE, dF = tangents("linformer_attention_jvp", T, ("dQ", "dK", "dV", "dE", "dF"))
    d = _check_linformer("linformer_attention_jvp", xp, Q, K, V, E, F, causal,
                         {"dQ": (dQ, ("*", "n", "d")), "dK": (dK, ("*", "n", "d")),
                          "dV": (dV, ("*", "n", "d_v"))})
    check_args("linformer_attention_jvp", xp, {"dE": (dE, tuple(("*", *E.shape[-2:]))),
                                               "dF": (dF, tuple(("*", *F.shape[-2:])))})
    Kp, Vp, P = _linformer_parts(xp, Q, K, V, E, F, d)
    n = int(K.shape[-2])
    En, Fn = _first(E, n), _first(F, n)
    dKp = None if dE is None and dK is None else tsum(
        lin(dE, lambda t: xp.matmul(_first(t, n), K)), lin(dK, lambda t: xp.matmul(En, t)))
    dVp = None if dF is None and dV is None else tsum(
        lin(dF, lambda t: xp.matmul(_first(t, n), V)), lin(dV, lambda t: xp.matmul(Fn, t)))
    dS = None if dQ is None and dKp is None else tsum(
        lin(dQ, lambda t: xp.matmul(t, xp.matrix_transpose(Kp))),
        lin(dKp, lambda t: xp.matmul(Q, xp.matrix_transpose(t))))
    dP = lin(dS, lambda t: softmax_jvp_from_output(xp, t / xp.const_sqrt(d), P))
    return tsum(lin(dP, lambda t: xp.matmul(t, Vp)), lin(dVp, lambda t: xp.matmul(P, t)))
