r"""Kernelized attention in linear form: the re-association of Baggag & Saad §4.3.2.

If the attention kernel factors through a feature map, :math:`\kappa(q, k) \approx
\phi(q)^\top \phi(k)`, then with :math:`Q_f = \phi(Q)`, :math:`K_f = \phi(K)` (``(..., n, m)``)
and :math:`C = [V, \mathbf 1]`,

.. math:: X = K_f^\top C,\qquad Y = Q_f X,\qquad
   \operatorname{out} = Y_{:, :d_v} \,/\, Y_{:, d_v},

in :math:`O(n m d_v)` (:func:`kernel_attention`); the ones column carries the normaliser
:math:`D = \operatorname{diag}(Q_f K_f^\top \mathbf 1)`. Causal masking keeps the linear
cost with prefix sums over positions, :math:`Y_i = Q_{f,i}^\top \sum_{j\le i} K_{f,j}
C_j^\top` ("Transformers are RNNs"). The feature maps are in
:mod:`nlaverify.ops.feature_maps`, the attention variants built on this form in
:mod:`nlaverify.ops.linear_attention` (which re-exports everything here: the public home of
:func:`kernel_attention` and :data:`CHUNK`, and the path the proofs name).


**Prefix sums.** On the array backends (NumPy, JAX, strict, CuPy) the causal sums are
*chunked*: positions split into blocks of :data:`CHUNK` (the last one zero-padded: zero
features and values contribute nothing); within a block :math:`B` the masked quadratic
form :math:`((Q_{f,B} K_{f,B}^\top) \circ L) C_B`, across blocks the running state
:math:`P_B = \sum_{B' < B} K_{f,B'}^\top C_{B'}` (an exclusive ``cumulative_sum`` over the
:math:`n/c` block states), :math:`Y_B = ((Q_{f,B} K_{f,B}^\top) \circ L) C_B + Q_{f,B}
P_B`: time :math:`O(ncm + nmd_v)`, memory :math:`O(n(m + d_v) + nc + (n/c) m d_v)`, never
the :math:`n \times m \times d_v` tensor of outer products; the VJP is blocked likewise
(exclusive suffix sums of the block cotangents), and the JVP is three blocked readouts.
The object namespaces (SymPy, mpmath) keep the plain form: the prefix sums are the product
with the lower-triangular ones matrix :math:`L` (:math:`O(n^2)`, exact, and the form the
proofs compare with the masked quadratic form); the blocked form is checked numerically
(tests with a small :data:`CHUNK`, :math:`n` over several ragged blocks).
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._tangent import lin, tangents, tsum
from nlaverify.ops._validate import check_args

__all__ = ["CHUNK", "kernel_attention", "kernel_attention_jvp", "kernel_attention_vjp"]

#: Block size :math:`c` of the chunked causal prefix sums on the array backends (see the
#: module docstring): the intra-block product costs :math:`O(c\,m)` per position, the
#: carried states :math:`(n/c)\,m\,(d_v + 1)` numbers. Tests lower it to cover many blocks.
CHUNK = 64

# -- helpers ------------------------------------------------------------------------------


def _expand(xp: Namespace, x: Any, axis: int) -> Any:
    """Insert a length-1 axis at ``axis`` (negative, counted on the result)."""
    shape = list(x.shape)
    pos = len(shape) + axis + 1
    return xp.reshape(x, (*shape[:pos], 1, *shape[pos:]))

def _prefix_sum(xp: Namespace, X: Any, axis: int, reverse: bool = False) -> Any:
    r"""Inclusive prefix sums :math:`S_i = \sum_{j \le i} X_j` along ``axis`` (negative);
    ``reverse``: suffix sums :math:`\sum_{j \ge i} X_j`. ``cumulative_sum`` on the array
    backends; on the object namespaces the product with the lower (upper) triangular ones
    matrix (see the module docstring)."""
    ax = len(X.shape) + axis
    if not xp.object_arrays:
        if reverse:
            return xp.flip(xp.cumulative_sum(xp.flip(X, axis=ax), axis=ax), axis=ax)
        return xp.cumulative_sum(X, axis=ax)
    n = X.shape[ax]
    L = xp.tril(xp.ones((n, n)))
    L = xp.matrix_transpose(L) if reverse else L
    moved = xp.permute_dims(X, (*range(ax), *range(ax + 1, len(X.shape)), ax))
    summed = xp.matmul(moved, xp.matrix_transpose(L))  # row i of L: the j <= i
    back = list(range(len(X.shape) - 1))
    back.insert(ax, len(X.shape) - 1)
    return xp.permute_dims(summed, tuple(back))


def _ones_column(xp: Namespace, V: Any) -> Any:
    r""":math:`C = [V, \mathbf 1]`, ``(..., n, d_v + 1)``."""
    return xp.concat([V, xp.ones((*V.shape[:-1], 1), dtype=V.dtype)], axis=-1)


def _blocks(xp: Namespace, X: Any, c: int) -> Any:
    """``X`` ``(..., n, k)`` as ``(..., n_b, c, k)``, zero-padded to :math:`n_b c` rows."""
    *lead, n, k = X.shape
    nb = -(-n // c)
    if nb * c != n:
        X = xp.concat([X, xp.zeros((*lead, nb * c - n, k), dtype=X.dtype)], axis=-2)
    return xp.reshape(X, (*lead, nb, c, k))


def _unblocks(xp: Namespace, X: Any, n: int) -> Any:
    """Inverse of :func:`_blocks`: ``(..., n_b, c, k)`` to ``(..., n, k)``."""
    *lead, nb, c, k = X.shape
    X = xp.reshape(X, (*lead, nb * c, k))
    return X if nb * c == n else X[..., :n, :]


def _shift(xp: Namespace, S: Any, reverse: bool) -> Any:
    """Inclusive block sums to exclusive ones along axis -3: block :math:`B` gets
    :math:`B - 1`'s (``reverse``: :math:`B + 1`'s), the first (last) block zero."""
    zero = xp.zeros((*S.shape[:-3], 1, *S.shape[-2:]), dtype=S.dtype)
    nb = S.shape[-3]
    if reverse:
        return xp.concat([S[..., 1:, :, :], zero], axis=-3)
    return xp.concat([zero, S[..., :nb - 1, :, :]], axis=-3)


def _block_mask(xp: Namespace, A: Any) -> Any:
    r""":math:`A \circ L` for ``A`` ``(..., c, c)``, :math:`L` the lower triangle (incl.)."""
    idx = xp.arange(A.shape[-1])
    return xp.where(idx[:, None] >= idx[None, :], A, xp.zeros_like(A))


def _chunked_readout(xp: Namespace, Qf: Any, Kf: Any, C: Any) -> Any:
    r"""Causal :func:`_readout` in blocks of :data:`CHUNK` (array backends):
    :math:`Y_B = ((Q_{f,B} K_{f,B}^\top)\circ L) C_B + Q_{f,B} P_B`, :math:`P_B =
    \sum_{B' < B} K_{f,B'}^\top C_{B'}`."""
    n, c = Qf.shape[-2], min(CHUNK, Qf.shape[-2])
    Qb, Kb, Cb = (_blocks(xp, X, c) for X in (Qf, Kf, C))
    A = _block_mask(xp, xp.matmul(Qb, xp.matrix_transpose(Kb)))  # (..., n_b, c, c)
    P = _shift(xp, _prefix_sum(xp, xp.matmul(xp.matrix_transpose(Kb), Cb), axis=-3), False)
    return _unblocks(xp, xp.matmul(A, Cb) + xp.matmul(Qb, P), n)


def _chunked_readout_vjp(xp: Namespace, dY: Any, Qf: Any, Kf: Any, C: Any
                         ) -> tuple[Any, Any, Any]:
    r"""Cotangents of :func:`_chunked_readout`: with :math:`A_B = (Q_{f,B} K_{f,B}^\top)
    \circ L`, :math:`\bar A_B = (\bar Y_B C_B^\top) \circ L` and the exclusive suffix sums
    :math:`R_B = \sum_{B' > B} Q_{f,B'}^\top \bar Y_{B'}`: :math:`\bar Q_{f,B} = \bar A_B
    K_{f,B} + \bar Y_B P_B^\top`, :math:`\bar K_{f,B} = \bar A_B^\top Q_{f,B} + C_B
    R_B^\top`, :math:`\bar C_B = A_B^\top \bar Y_B + K_{f,B} R_B`."""
    n, c = Qf.shape[-2], min(CHUNK, Qf.shape[-2])
    Qb, Kb, Cb, dYb = (_blocks(xp, X, c) for X in (Qf, Kf, C, dY))
    tr = xp.matrix_transpose
    A = _block_mask(xp, xp.matmul(Qb, tr(Kb)))
    dA = _block_mask(xp, xp.matmul(dYb, tr(Cb)))
    P = _shift(xp, _prefix_sum(xp, xp.matmul(tr(Kb), Cb), axis=-3), False)
    R = _shift(xp, _prefix_sum(xp, xp.matmul(tr(Qb), dYb), axis=-3, reverse=True), True)
    dQ = xp.matmul(dA, Kb) + xp.matmul(dYb, tr(P))
    dK = xp.matmul(tr(dA), Qb) + xp.matmul(Cb, tr(R))
    dC = xp.matmul(tr(A), dYb) + xp.matmul(Kb, R)
    return _unblocks(xp, dQ, n), _unblocks(xp, dK, n), _unblocks(xp, dC, n)


def _readout(xp: Namespace, Qf: Any, Kf: Any, C: Any, causal: bool) -> Any:
    r""":math:`Y = Q_f (K_f^\top C)`, or causally :math:`Y_i = Q_{f,i}^\top \sum_{j \le i}
    K_{f,j} C_j^\top` (trilinear in :math:`Q_f, K_f, C`): chunked on the array backends
    (:func:`_chunked_readout`), the triangular-matrix prefix sums on the object ones."""
    if not causal:
        return xp.matmul(Qf, xp.matmul(xp.matrix_transpose(Kf), C))
    if not xp.object_arrays:
        return _chunked_readout(xp, Qf, Kf, C)
    S = _prefix_sum(xp, _expand(xp, Kf, -1) * _expand(xp, C, -2), axis=-3)  # (..., n, m, c)
    return xp.sum(_expand(xp, Qf, -1) * S, axis=-2)


def _readout_vjp(xp: Namespace, dY: Any, Qf: Any, Kf: Any, C: Any, causal: bool
                 ) -> tuple[Any, Any, Any]:
    r"""Cotangents of :func:`_readout`: bidirectional :math:`\bar Q_f = \bar Y X^\top`,
    :math:`\bar X = Q_f^\top \bar Y`, :math:`\bar K_f = C \bar X^\top`, :math:`\bar C = K_f
    \bar X`; causal, with the prefix sums :math:`S_i` and the suffix sums :math:`R_j =
    \sum_{i \ge j} Q_{f,i} \bar Y_i^\top`: :math:`\bar Q_{f,i} = S_i \bar Y_i`,
    :math:`\bar K_{f,j} = R_j C_j`, :math:`\bar C_j = R_j^\top K_{f,j}` (chunked on the
    array backends, :func:`_chunked_readout_vjp`)."""
    if not causal:
        X = xp.matmul(xp.matrix_transpose(Kf), C)
        dX = xp.matmul(xp.matrix_transpose(Qf), dY)
        return (xp.matmul(dY, xp.matrix_transpose(X)), xp.matmul(C, xp.matrix_transpose(dX)),
                xp.matmul(Kf, dX))
    if not xp.object_arrays:
        return _chunked_readout_vjp(xp, dY, Qf, Kf, C)
    S = _prefix_sum(xp, _expand(xp, Kf, -1) * _expand(xp, C, -2), axis=-3)
    R = _prefix_sum(xp, _expand(xp, Qf, -1) * _expand(xp, dY, -2), axis=-3, reverse=True)
    return (xp.sum(S * _expand(xp, dY, -2), axis=-1), xp.sum(R * _expand(xp, C, -2), axis=-1),
            xp.sum(R * _expand(xp, Kf, -1), axis=-2))


def _readout_jvp(xp: Namespace, dQf: Any, dKf: Any, dC: Any, Qf: Any, Kf: Any, C: Any,
                 causal: bool) -> Any:
    r""":math:`\dot Y` of the trilinear :func:`_readout`: one term per tangent."""
    return tsum(lin(dQf, lambda t: _readout(xp, t, Kf, C, causal)),
                lin(dKf, lambda t: _readout(xp, Qf, t, C, causal)),
                lin(dC, lambda t: _readout(xp, Qf, Kf, t, causal)))


def _normalise(xp: Namespace, Y: Any) -> Any:
    r""":math:`D^{-1} Y_{:, :d_v}` with :math:`D = \operatorname{diag}(Y_{:, d_v})`."""
    dv = Y.shape[-1] - 1
    return Y[..., :dv] / Y[..., dv:]


def _normalise_vjp(xp: Namespace, G: Any, Y: Any) -> Any:
    r""":math:`\bar Y = [G, -\operatorname{rowsum}(G \odot O)]\,/\,D`."""
    out, D = _normalise(xp, Y), Y[..., Y.shape[-1] - 1:]
    return xp.concat([G, -xp.sum(G * out, axis=-1, keepdims=True)], axis=-1) / D


def _normalise_jvp(xp: Namespace, dY: Any, Y: Any) -> Any:
    r""":math:`\dot O = (\dot Y_{:, :d_v} - O\, \dot Y_{:, d_v})\,/\,D`."""
    dv = Y.shape[-1] - 1
    return (dY[..., :dv] - _normalise(xp, Y) * dY[..., dv:]) / Y[..., dv:]


def _check_qkv(op: str, xp: Namespace, Q: Any, K: Any, V: Any, *, q: str = "Q", k: str = "K",
               m: str = "d", extra: dict[str, tuple[Any, tuple]] | None = None
               ) -> dict[str, int]:
    return check_args(op, xp, {q: (Q, ("*", "n", m)), k: (K, ("*", "n", m)),
                               "V": (V, ("*", "n", "d_v")), **(extra or {})})


# -- the linear form ----------------------------------------------------------------------


def kernel_attention(xp: Namespace, Qf: Any, Kf: Any, V: Any, *, causal: bool = False) -> Any:
    r"""Kernelized attention in linear form (Baggag & Saad §4.3, §4.4):

    .. math:: \operatorname{out} = D^{-1}\bigl((Q_f K_f^\top) \circ M\bigr) V,\qquad
       D = \operatorname{diag}\bigl(((Q_f K_f^\top) \circ M)\mathbf 1\bigr),

    computed without the :math:`n \times n` matrix: :math:`C = [V, \mathbf 1]`,
    :math:`X = K_f^\top C`, :math:`Y = Q_f X`, output :math:`Y_{:, :d_v} / Y_{:, d_v}`.
    :math:`M = \mathbf 1 \mathbf 1^\top`, or with ``causal`` the lower triangle
    (:math:`j \le i`), then :math:`Y_i = Q_{f,i}^\top S_i` with the prefix sums
    :math:`S_i = \sum_{j \le i} K_{f,j} C_j^\top`. ``Qf``, ``Kf`` ``(..., n, m)`` (any
    features), ``V`` ``(..., n, d_v)``. A zero normaliser gives inf/nan (positive feature
    maps never have one).
    """
    _check_qkv("kernel_attention", xp, Qf, Kf, V, q="Qf", k="Kf", m="m")
    return _normalise(xp, _readout(xp, Qf, Kf, _ones_column(xp, V), causal))


def kernel_attention_vjp(xp: Namespace, G: Any, Qf: Any, Kf: Any, V: Any, *,
                         causal: bool = False) -> tuple[Any, Any, Any]:
    r"""VJP of :func:`kernel_attention`: :math:`\bar Y = [G, -\operatorname{rowsum}(G
    \odot O)]/D`, then through :math:`Y = Q_f(K_f^\top C)`: :math:`\bar Q_f = \bar Y
    X^\top`, :math:`\bar K_f = C (Q_f^\top \bar Y)^\top`, :math:`\bar V = (K_f Q_f^\top
    \bar Y)_{:, :d_v}`; causal: prefix sums for :math:`\bar Q_f`, suffix sums
    :math:`R_j = \sum_{i \ge j} Q_{f,i}\bar Y_i^\top` for :math:`\bar K_f, \bar V`."""
    _check_qkv("kernel_attention_vjp", xp, Qf, Kf, V, q="Qf", k="Kf", m="m",
               extra={"G": (G, ("*", "n", "d_v"))})
    C = _ones_column(xp, V)
    dY = _normalise_vjp(xp, G, _readout(xp, Qf, Kf, C, causal))
    dQf, dKf, dC = _readout_vjp(xp, dY, Qf, Kf, C, causal)
    return dQf, dKf, dC[..., :V.shape[-1]]


def kernel_attention_jvp(xp: Namespace, T: tuple[Any, Any, Any], Qf: Any, Kf: Any, V: Any,
                         *, causal: bool = False) -> Any:
    r"""JVP of :func:`kernel_attention`: :math:`Y` is trilinear in :math:`(Q_f, K_f, C)`,
    so :math:`\dot Y = Y(\dot Q_f, K_f, C) + Y(Q_f, \dot K_f, C) + Y(Q_f, K_f, [\dot V,
    0])`, and :math:`\dot O = (\dot Y_{:, :d_v} - O\,\dot Y_{:, d_v})/D`."""
    dQf, dKf, dV = tangents("kernel_attention_jvp", T, ("dQf", "dKf", "dV"))
    _check_qkv("kernel_attention_jvp", xp, Qf, Kf, V, q="Qf", k="Kf", m="m",
               extra={"dQf": (dQf, ("*", "n", "m")), "dKf": (dKf, ("*", "n", "m")),
                      "dV": (dV, ("*", "n", "d_v"))})
    C = _ones_column(xp, V)
    dC = lin(dV, lambda t: xp.concat([t, xp.zeros((*V.shape[:-1], 1), dtype=V.dtype)],
                                     axis=-1))
    Y = _readout(xp, Qf, Kf, C, causal)
    return _normalise_jvp(xp, _readout_jvp(xp, dQf, dKf, dC, Qf, Kf, C, causal), Y)



# The public home of these ops is :mod:`nlaverify.ops.linear_attention`, which re-exports
# them: the proofs, the op registry's ``<forward>_jvp`` lookup and the API reference name
# them there (the convention of NumPy's ``set_module``).
for _op in (kernel_attention, kernel_attention_vjp, kernel_attention_jvp):
    _op.__module__ = "nlaverify.ops.linear_attention"
del _op
