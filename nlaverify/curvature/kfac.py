r"""K-FAC for one linear layer (Baggag & Saad §5.3; Martens & Grosse 2015; Eschenhagen et al.
2023 for the weight-shared "expand" and "reduce" variants).

The code's row convention: a layer :math:`s = a W` with :math:`W` of shape
``(d_in, d_out)``, :math:`a` a row of inputs and :math:`g = \partial\ell/\partial s` the output
cotangent. Its gradient is :math:`\partial L/\partial W = \sum a^\top g` (rows:
:math:`\sum a g^\top` for column vectors :math:`a, g`), and the row-major flattening gives
:math:`\operatorname{vec}_r(a g^\top) = a \otimes g`. The seed's column convention
:math:`s = W_c a` (:math:`W_c = W^\top`) has :math:`\partial L/\partial W_c = g a^\top` and
:math:`\operatorname{vec}(g a^\top) = a\otimes g`: the same vector, since
:math:`\operatorname{vec}(W_c) = \operatorname{vec}_r(W)` (identity ``kfac_gradient_vec_order``).

Shapes: ``A`` is ``(N, R, d_in)`` (N sequences of R positions; ``(R, d_in)`` is one
sequence) and ``G`` is ``(S, N, R, d_out)``: ``G[s, n]`` are the output cotangents of the
"sample" :math:`s` of sequence :math:`n` (an MC-sampled target, or the :math:`s`-th column of a
square root of sequence :math:`n`'s loss Hessian: the batch loss is a sum over sequences, so
its Hessian is block diagonal), already scaled by the square roots of the reduction weights
(and :math:`1/\sqrt S` for MC sampling), so that the exact curvature block of
:math:`\operatorname{vec}_r(W)` (GGN or Fisher) is

.. math:: F = \sum_{s,n} \Bigl(\sum_r a_{nr}\otimes g_{snr}\Bigr)
          \Bigl(\sum_r a_{nr}\otimes g_{snr}\Bigr)^\top \qquad (:func:`exact_layer_block`),

and K-FAC approximates it by :math:`A_f \otimes G_f` (:func:`kfac_factors`,
:func:`kfac_block`). Proved exact for one sample, for deep linear networks with squared error
(expand for per-position losses, reduce for a mean-pooled output), and shown inexact with a
nonlinearity (identities ``kfac_exact_*``, ``kfac_not_exact``).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from nlaverify.backends.base import Namespace
from nlaverify.backends.host import to_host
from nlaverify.curvature import kronecker as _kr
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.ops._validate import check_args

Mode = Literal["expand", "reduce"]
MODES: tuple[Mode, ...] = ("expand", "reduce")


def _ones(xp: Namespace, shape: tuple[int, ...], like: Any) -> Any:
    return xp.ones(shape) if xp.object_arrays else xp.ones(shape, dtype=like.dtype)


def _standardize(op: str, xp: Namespace, A: Any, G: Any, mask: Any = None, *,
                 samples: bool = True) -> tuple[Any, Any, Any, dict[str, int]]:
    """``A`` as ``(N, R, d_in)``, ``G`` as ``(S, N, R, d_out)`` (or ``(N, R, d_out)`` without
    ``samples``) and ``mask`` as ``(N, R)``; a 2-D ``A`` is one sequence (N = 1)."""
    one_sequence = len(getattr(A, "shape", np.shape(A))) == 2
    g_dims: tuple[str, ...] = (("S",) if samples else ()) + (("R", "d_out") if one_sequence
                                                             else ("N", "R", "d_out"))
    a_dims = ("R", "d_in") if one_sequence else ("N", "R", "d_in")
    m_dims = ("R",) if one_sequence else ("N", "R")
    d = check_args(op, xp, {"A": (A, a_dims), "G": (G, g_dims)})
    if mask is not None:
        check_args(op, xp, {"mask": (mask, m_dims)}, bound=d, floating=False)
    if one_sequence:
        A = xp.reshape(A, (1, *A.shape))
        G = xp.reshape(G, (G.shape[0], 1, *G.shape[1:]) if samples else (1, *G.shape))
        mask = None if mask is None else xp.reshape(mask, (1, *mask.shape))
        d["N"] = 1
    return A, G, mask, d


def _mask_values(op: str, xp: Namespace, mask: Any, like: Any) -> Any:
    """The 0/1 mask in the namespace and dtype of ``like``; every sequence keeps a position."""
    if xp.is_concrete(mask):
        host = np.asarray(to_host(mask))
        if not np.all((host == 0) | (host == 1)):
            raise ArgumentError(f"{op}: argument 'mask': expected 0/1 (or boolean) entries")
        if not np.all(host.reshape(host.shape[0], -1).sum(axis=1) > 0):
            raise ArgumentError(f"{op}: argument 'mask': expected every sequence to keep at "
                                "least one position, got a sequence fully masked")
    if xp.object_arrays:
        return xp.asarray(np.asarray(mask).astype(np.int64))
    return xp.astype(mask, like.dtype)


def _with_bias(xp: Namespace, A: Any) -> Any:
    """Homogeneous coordinates: a column of ones appended to the inputs (W stacked with b)."""
    return xp.concat([A, _ones(xp, (*A.shape[:-1], 1), A)], axis=-1)


def _gram(xp: Namespace, rows: Any) -> Any:
    r""":math:`\sum_t x_t x_t^\top` of the rows :math:`x_t` of a 2-D array."""
    return xp.matmul(xp.matrix_transpose(rows), rows)


def kfac_factors(xp: Namespace, A: Any, G: Any, *, mode: Mode = "expand", bias: bool = False,
                 mask: Any = None, rows: Any = None) -> tuple[Any, Any]:
    r"""The two Kronecker factors of K-FAC for one linear layer (Baggag & Saad §5.3).

    *expand* (weight sharing over positions treated as more data; per-position losses):

    .. math:: A_f = \frac{1}{NR}\sum_{n,r} a_{nr}a_{nr}^\top,\qquad
              G_f = \sum_{s,n,r} g_{snr}g_{snr}^\top;

    *reduce* (positions aggregated first; a pooled output):

    .. math:: A_f = \frac1N\sum_n \bar a_n\bar a_n^\top,\quad
              \bar a_n = \frac1R\sum_r a_{nr},\qquad
              G_f = \sum_{s,n}\Bigl(\sum_r g_{snr}\Bigr)\Bigl(\sum_r g_{snr}\Bigr)^\top.

    Args:
        A: ``(N, R, d_in)`` layer inputs (``(R, d_in)``: one sequence).
        G: ``(S, N, R, d_out)`` output cotangents per sample (``(S, R, d_out)`` with a 2-D
            ``A``), scaled as described in the module docstring.
        mode: ``"expand"`` or ``"reduce"``.
        bias: append a column of ones to ``A`` (homogeneous coordinates: the block is that
            of :math:`\operatorname{vec}_r` of :math:`W` stacked over :math:`b^\top`).
        mask: ``(N, R)`` 0/1; positions with 0 (padding) are left out of the :math:`A`
            average (expand: divided by the number kept; reduce: :math:`\bar a_n` is the mean
            over the kept positions of sequence :math:`n`). Their cotangents should be 0.
        rows: *expand* only: the statistics from a subset :math:`I` of the :math:`NR`
            positions (indices into the flattened ``(N, R)``, distinct; see
            :func:`subsample_rows`), the cheap factors of amortised K-FAC:

            .. math:: A_f^I = \frac{1}{|I|}\sum_{i\in I} a_i a_i^\top,\qquad
                      G_f^I = \frac{NR}{|I|}\sum_{s}\sum_{i\in I} g_{si}g_{si}^\top,

            each an unbiased estimate of the full factor when :math:`I` is drawn
            uniformly among the subsets of its size (every position is in :math:`I` with
            probability :math:`|I|/NR`); with a mask, :math:`A_f^I` divides by the kept
            positions of :math:`I` (a ratio estimate). The Gram matrices cost
            :math:`2|I|(d_{in}^2 + d_{out}^2)` flops instead of :math:`2NR(\dots)`.

    Returns:
        ``(A_factor (d_in[+1], d_in[+1]), G_factor (d_out, d_out))``.
    """
    if mode not in MODES:
        raise ArgumentError(f"kfac_factors: argument 'mode': expected one of "
                            f"{', '.join(MODES)}, got {mode!r}")
    A, G, mask, d = _standardize("kfac_factors", xp, A, G, mask)
    N, R, S, d_out = d["N"], d["R"], d["S"], d["d_out"]
    if bias:
        A = _with_bias(xp, A)
    d_a = A.shape[-1]
    m = None if mask is None else _mask_values("kfac_factors", xp, mask, A)
    G_scale = None
    if rows is not None:  # the statistics of positions I only: one sequence of |I| rows
        if mode != "expand":
            raise ArgumentError("kfac_factors: argument 'rows': expected mode='expand' (the "
                                f"reduce mode sums each sequence's positions), got {mode!r}")
        idx = _row_indices(rows, N * R)
        at = idx if xp.object_arrays else xp.asarray(idx)
        A = xp.reshape(xp.take(xp.reshape(A, (N * R, d_a)), at, axis=0), (1, len(idx), d_a))
        G = xp.reshape(xp.take(xp.reshape(G, (S, N * R, d_out)), at, axis=1),
                       (S, 1, len(idx), d_out))
        m = None if m is None else xp.reshape(xp.take(xp.reshape(m, (N * R,)), at, axis=0),
                                              (1, len(idx)))
        G_scale = xp.rational(N * R, len(idx))
        N, R = 1, len(idx)
    if mode == "expand":
        rows = A if m is None else A * xp.reshape(m, (N, R, 1))
        A_factor = _gram(xp, xp.reshape(rows, (N * R, d_a)))
        A_factor = A_factor * xp.rational(1, N * R) if m is None else A_factor / xp.sum(m)
        G_factor = _gram(xp, xp.reshape(G, (S * N * R, d_out)))
        return A_factor, G_factor if G_scale is None else G_factor * G_scale
    if m is None:
        mean = xp.sum(A, axis=1) * xp.rational(1, R)
    else:
        mean = xp.sum(A * xp.reshape(m, (N, R, 1)), axis=1) / xp.sum(m, axis=1, keepdims=True)
    A_factor = _gram(xp, mean) * xp.rational(1, N)
    G_factor = _gram(xp, xp.reshape(xp.sum(G, axis=2), (S * N, d_out)))
    return A_factor, G_factor


def _row_indices(rows: Any, total: int) -> np.ndarray:
    """``rows`` as a sorted host array of distinct indices in ``[0, total)``."""
    idx = np.asarray(rows)
    if idx.ndim != 1 or idx.size == 0 or not np.issubdtype(idx.dtype, np.integer):
        raise ArgumentError(f"kfac_factors: argument 'rows': expected a non-empty 1-D array of "
                            f"integer positions, got shape {idx.shape} and dtype {idx.dtype}")
    if idx.min() < 0 or idx.max() >= total or np.unique(idx).size != idx.size:
        raise ArgumentError(f"kfac_factors: argument 'rows': expected distinct positions in "
                            f"[0, {total}), got {idx.size} entries in [{idx.min()}, {idx.max()}]")
    return np.sort(idx)


def subsample_rows(total: int, count: int, seed: int = 0) -> np.ndarray:
    r"""``count`` distinct positions of ``total``, uniformly at random
    (``numpy.random.default_rng(seed)``, sorted): the subset :math:`I` of
    :func:`kfac_factors`' ``rows``, with which its subsampled factors are unbiased.

    Raises:
        ArgumentError: ``count`` not in ``[1, total]``.
    """
    if not 1 <= count <= total:
        raise ArgumentError(f"subsample_rows: argument 'count': expected 1 <= count <= "
                            f"{total} (the positions), got {count}")
    return np.sort(np.random.default_rng(seed).choice(total, size=count, replace=False))


def kfac_block(xp: Namespace, A_factor: Any, G_factor: Any) -> Any:
    r"""The K-FAC curvature block :math:`A_f \otimes G_f` of :math:`\operatorname{vec}_r(W)`
    (Baggag & Saad §5.3: :math:`\mathbb E[\bar a\bar a^\top]\otimes\mathbb E[g g^\top]`)."""
    check_args("kfac_block", xp, {"A_factor": (A_factor, ("d_in", "d_in")),
                                  "G_factor": (G_factor, ("d_out", "d_out"))})
    return _kr.kron(xp, A_factor, G_factor)


def per_sample_gradients(xp: Namespace, A: Any, G: Any, *, bias: bool = False) -> Any:
    r"""The gradients :math:`\sum_r a_{nr} g_{snr}^\top` (``(S, N, d_in[+1], d_out)``) of
    the layer's weights, one per sample :math:`s` and sequence :math:`n`."""
    A, G, _, d = _standardize("per_sample_gradients", xp, A, G)
    if bias:
        A = _with_bias(xp, A)
    At = xp.reshape(xp.permute_dims(A, (0, 2, 1)), (1, d["N"], A.shape[-1], d["R"]))
    return xp.matmul(At, G)


def exact_layer_block(xp: Namespace, A: Any, G: Any, *, bias: bool = False) -> Any:
    r"""The exact curvature block of :math:`\operatorname{vec}_r(W)` that K-FAC approximates:

    .. math:: F = \sum_{s,n}\Bigl(\sum_r a_{nr}\otimes g_{snr}\Bigr)
              \Bigl(\sum_r a_{nr}\otimes g_{snr}\Bigr)^\top
              = \sum_{s,n} \operatorname{vec}_r(D_{sn})\operatorname{vec}_r(D_{sn})^\top,

    :math:`D_{sn} = \sum_r a_{nr} g_{snr}^\top` (:func:`per_sample_gradients`): the GGN
    (Fisher) block when ``G`` are the output cotangents of the columns of a square root of
    the loss Hessian (MC samples), the weight shared over the positions :math:`r`. Dense
    ``(d_in d_out, d_in d_out)``: a reference, not for large layers.
    """
    D = per_sample_gradients(xp, A, G, bias=bias)
    S, N, d_a, d_out = D.shape
    return _gram(xp, xp.reshape(D, (S * N, d_a * d_out)))


def kfac_gradient(xp: Namespace, A: Any, G1: Any, *, bias: bool = False) -> Any:
    r"""The layer's gradient from its inputs and output cotangents (Baggag & Saad §5.3,
    :math:`\mathcal D W = g\bar a^\top` in the column convention):

    .. math:: \frac{\partial L}{\partial W} = \sum_{n,r} a_{nr}\, g_{nr}^\top
              \quad(\text{shape } (d_{in}, d_{out})),

    with a last row :math:`\sum_{n,r} g_{nr}^\top` (the bias gradient) when ``bias``.

    Args:
        A: ``(N, R, d_in)`` (or ``(R, d_in)``).
        G1: ``(N, R, d_out)`` (or ``(R, d_out)``): :math:`\partial L/\partial s`.
    """
    A, G1, _, d = _standardize("kfac_gradient", xp, A, G1, samples=False)
    if bias:
        A = _with_bias(xp, A)
    rows = d["N"] * d["R"]
    return xp.matmul(xp.matrix_transpose(xp.reshape(A, (rows, A.shape[-1]))),
                     xp.reshape(G1, (rows, d["d_out"])))


def kfac_precondition(xp: Namespace, A_factor: Any, G_factor: Any, grad: Any, damping: Any,
                      *, pi: Any = None) -> Any:
    r"""The K-FAC direction :math:`\bigl((A_f + \pi\sqrt\lambda I)\otimes(G_f +
    \tfrac{\sqrt\lambda}{\pi} I)\bigr)^{-1}\operatorname{vec}_r(\nabla_W L)` as a
    ``(d_in, d_out)`` matrix (:func:`~nlaverify.curvature.kronecker.damped_kron_solve`;
    factored damping, not :math:`(A_f\otimes G_f + \lambda I)^{-1}`)."""
    if len(getattr(grad, "shape", np.shape(grad))) != 2:
        raise ShapeError(f"kfac_precondition: argument 'grad': expected shape (d_in, d_out), "
                         f"got {getattr(grad, 'shape', np.shape(grad))}")
    return _kr.damped_kron_solve(xp, A_factor, G_factor, grad, damping, pi=pi)
