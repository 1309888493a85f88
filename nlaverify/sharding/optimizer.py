r"""Sharded optimizer state (ZeRO, Rajbhandari et al. 2020, §5: stages 1–3) and what a
matrix rule needs gathered.

**Elementwise rules.** ZeRO-1/2 gives device :math:`s` the slice :math:`w^{(s)}` of every
parameter (here: along its first axis), the matching slice of the (reduce-scattered)
gradient and the optimizer state of that slice only; it updates its slice and the updates
are all-gathered. For SGD, momentum, Adam, AdamW (Baggag & Saad §2.4) every state entry and
every update entry is a function of the same entry of :math:`w` and :math:`g` alone, so

.. math:: \operatorname{gather}_s\bigl(u(g^{(s)}, \sigma^{(s)}, w^{(s)})\bigr)
   = u(g, \sigma, w) :

the sharded update *is* the unsharded one (identity ``zero_elementwise_update``).

**Matrix rules.** Muon and Shampoo (Baggag & Saad §5.5) act on the whole matrix: the polar
factor of a row slice is not the row slice of the polar factor, since
:math:`(GG^\top)_{ij} = g_i g_j^\top` couples rows held by different devices
(:func:`newton_schulz_on_shards`, identity ``muon_on_a_shard_is_not_muon``). What Newton–
Schulz needs is exactly the Gram matrix of the *wide* orientation :math:`X` (:math:`m \le
n`) and the Frobenius norm: if the shards split the long axis, :math:`X = [X_1 \mid \dots
\mid X_S]`, then

.. math:: XX^\top = \sum_s X_sX_s^\top,\qquad \|X\|_F^2 = \sum_s\|X_s\|_F^2,\qquad
   p(X)_s = a_1X_s + \sum_{k\ge1} a_{2k+1}(XX^\top)^kX_s ,

an all-reduce of one :math:`m\times m` matrix per step and of one scalar; if they split the
short axis the rows must be gathered (:func:`newton_schulz_sharded`).

**Shampoo** (Gupta, Koren & Singer 2018; Baggag & Saad §5.4) needs both Kronecker factors
of the whole matrix. With the rows split, :math:`G = [G_1; \dots; G_S]`, the statistic of
the unsplit axis is an all-reduce of each device's own, :math:`R = \epsilon I + \sum_t
\sum_s G_{t,s}^\top G_{t,s}` (exact, no gather), but the split axis' :math:`L` has the
off-diagonal blocks :math:`G_{t,s}G_{t,r}^\top`, which need the other devices' rows: the
all-gather of :math:`G`, after which device :math:`s` forms its rows
:math:`(L^{-1/4})_{s,:}\,[G_rR^{-1/4}]_r` (:func:`shampoo_sharded`; identity
``shampoo_needs_the_gather_of_the_split_axis``). Each device's own factors
(:func:`shampoo_on_shards`), or the all-reduced :math:`R` with the block-diagonal
:math:`L` (blocked Shampoo, a different optimizer), are not the rows of Shampoo's update.

**Global-norm clipping** before any rule (PyTorch ``clip_grad_norm_``, optax
``clip_by_global_norm``) scales by :math:`\min(1, c/\|g\|)` with the norm of *all* the
gradients: under ZeRO, :math:`\|g\|^2 = \sum_s\|g^{(s)}\|^2` is an all-reduce of one
scalar (:func:`zero_clip_by_global_norm`); each device's own norm is the classic bug
(:func:`zero_clip_by_shard_norm`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.curvature import shampoo as _sp
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.optim import newton_schulz as _ns
from nlaverify.optim.base import Params, Rule, State
from nlaverify.sharding._shards import (
    _shape,
    all_gather,
    all_reduce_sum,
    check_shards,
    split,
)


def shard_sizes(n: int, n_shards: int) -> list[int]:
    r"""The sizes of ``n_shards`` nearly equal contiguous shards of ``n`` rows (the first
    :math:`n \bmod S` one larger, as :func:`numpy.array_split`)."""
    if isinstance(n_shards, bool) or not isinstance(n_shards, int) or n_shards < 1:
        raise ArgumentError(f"shard_sizes: argument 'n_shards': expected a positive integer, "
                            f"got {n_shards!r}")
    if n < n_shards:
        raise ShapeError(f"shard_sizes: cannot split {n} rows into {n_shards} nonempty shards")
    q, r = divmod(n, n_shards)
    return [q + 1 if s < r else q for s in range(n_shards)]


def shard_params(xp: Namespace, params: Params, n_shards: int) -> list[Params]:
    """Device :math:`s`'s slice of every parameter, along the first axis."""
    if not isinstance(params, dict) or not params:
        raise ArgumentError(f"shard_params: argument 'params': expected a nonempty dict of "
                            f"arrays, got {type(params).__name__}")
    out: list[Params] = [{} for _ in range(n_shards)]
    for k, w in params.items():
        if not _shape(w):
            raise ShapeError(f"shard_params: argument 'params': {k!r} is a scalar; ZeRO "
                             f"shards arrays along their first axis")
        for s, piece in enumerate(split(xp, w, shard_sizes(_shape(w)[0], n_shards))):
            out[s][k] = piece
    return out


def gather_params(xp: Namespace, pieces: Sequence[Params]) -> Params:
    """The all-gather of per-device slices (the inverse of :func:`shard_params`)."""
    return {k: all_gather(xp, [p[k] for p in pieces], axis=0) for k in pieces[0]}


def zero_init(xp: Namespace, rule: Rule, params: Params, n_shards: int) -> list[State]:
    """Each device's optimizer state: ``rule.init`` of its own slice (ZeRO-1)."""
    return [rule.init(xp, p) for p in shard_params(xp, params, n_shards)]


def zero_update(xp: Namespace, rule: Rule, grads: Params, states: Sequence[State],
                params: Params) -> tuple[Params, list[State]]:
    r"""One ZeRO step (module docstring): device :math:`s` runs ``rule.update`` on its
    slices of ``grads`` and ``params`` with its own state ``states[s]``; the updates are
    all-gathered. Returns the gathered updates and the new per-device states."""
    if isinstance(states, str | bytes) or not isinstance(states, Sequence) or not states:
        raise ArgumentError("zero_update: argument 'states': expected one optimizer state "
                            "per device (see zero_init), got none")
    n = len(states)
    g_pieces, w_pieces = shard_params(xp, grads, n), shard_params(xp, params, n)
    ups, new = [], []
    for g, st, w in zip(g_pieces, states, w_pieces, strict=True):
        u, s = rule.update(xp, g, st, w)
        ups.append(u)
        new.append(s)
    return gather_params(xp, ups), new


# --------------------------------------------------------------------------- Newton–Schulz


def _long_axis(shape: tuple[int, ...]) -> int:
    """The axis of ``G`` that is the columns of its wide orientation."""
    return -2 if shape[-2] > shape[-1] else -1


def newton_schulz_on_shards(xp: Namespace, shards: Sequence[Any], axis: int = -2,
                            coeffs: Any = _ns.MUON, steps: int = 5, *, eps: Any = 1e-7,
                            normalize: bool = True) -> list[Any]:
    r"""A counterexample (the planted bug "Muon on a shard"): every device orthogonalises
    its own slice, :math:`\mathrm{NS}(G_s)` in place of :math:`\mathrm{NS}(G)_s`."""
    pieces = check_shards("newton_schulz_on_shards", "shards", shards, axis)
    return [_ns.newton_schulz(xp, g, coeffs, steps, eps=eps, normalize=normalize)
            for g in pieces]


def _polynomial_of_gram(xp: Namespace, A: Any, X_s: Any, coeffs: Any) -> Any:
    r""":math:`a_1X_s + (a_3A + a_5A^2 + \dots)X_s`, Horner in the all-reduced Gram matrix
    :math:`A = XX^\top` (the step of :func:`~nlaverify.optim.newton_schulz
    .newton_schulz_step`, with :math:`A` given)."""
    a = [_ns._coef(xp, c) for c in coeffs]
    if len(a) == 1:
        return a[0] * X_s
    B = a[-1] * A
    for c in reversed(a[1:-1]):
        B = c * A + xp.matmul(B, A)
    return a[0] * X_s + xp.matmul(B, X_s)


def newton_schulz_sharded(xp: Namespace, shards: Sequence[Any], axis: int = -1,
                          coeffs: Any = _ns.MUON, steps: int = 5, *, eps: Any = 1e-7,
                          normalize: bool = True) -> list[Any]:
    r"""Each device's slice of :math:`\mathrm{NS}(G)` (:func:`~nlaverify.optim.
    newton_schulz.newton_schulz`, same arguments) from the slices of :math:`G` along
    ``axis`` (module docstring): along the long axis by all-reducing the Gram matrix and the
    squared norm, with no gather; along the short axis by the all-gather of :math:`G`.

    Args:
        xp: the array namespace.
        shards: the slices :math:`G_s` ``(..., m_s, n)`` (``axis=-2``) or ``(..., m, n_s)``
            (``axis=-1``).
        axis: the sharded axis, ``-2`` (rows) or ``-1`` (columns).
    """
    op = "newton_schulz_sharded"
    if axis not in (-2, -1):
        raise ArgumentError(f"{op}: argument 'axis': expected -2 or -1, got {axis!r}")
    pieces = check_shards(op, "shards", shards, axis)
    if len(_shape(pieces[0])) < 2:
        raise ShapeError(f"{op}: argument 'shards': expected matrices (..., m, n), got shape "
                         f"{_shape(pieces[0])}")
    full = list(_shape(pieces[0]))
    full[axis] = sum(_shape(g)[axis] for g in pieces)
    if _long_axis(tuple(full)) != axis:  # rows of the wide orientation: gather them
        G = all_gather(xp, pieces, axis=axis)
        return split(xp, _ns.newton_schulz(xp, G, coeffs, steps, eps=eps, normalize=normalize),
                     [_shape(g)[axis] for g in pieces], axis=axis)
    plan = _ns.schedule(coeffs, steps)
    X = list(pieces)
    if normalize:
        _ns._check_eps(eps)
        norm = xp.sqrt(all_reduce_sum(xp, [xp.sum(g * g, axis=(-2, -1), keepdims=True)
                                           for g in X]))
        X = [g / (norm + _ns._coef(xp, eps)) for g in X]
    if axis == -2:  # tall: the wide orientation is the transpose
        X = [xp.matrix_transpose(x) for x in X]
    for c in plan:
        A = all_reduce_sum(xp, [xp.matmul(x, xp.matrix_transpose(x)) for x in X])
        X = [_polynomial_of_gram(xp, A, x, c) for x in X]
    return [xp.matrix_transpose(x) for x in X] if axis == -2 else X


# --------------------------------------------------------------------------- clipping


def _squared_norm(xp: Namespace, grads: Params) -> Any:
    return all_reduce_sum(xp, [xp.sum(g * g) for g in grads.values()])


def _clip_scale(xp: Namespace, sq: Any, max_norm: Any) -> Any:
    r""":math:`\min(1, c/\|g\|)`, written as a selection so that it is exact on SymPy."""
    norm = xp.sqrt(xp.reshape(sq, (1,)))
    return xp.where(xp.greater(norm, max_norm), max_norm / norm, xp.ones_like(norm))[0]


def clip_by_global_norm(xp: Namespace, grads: Params, max_norm: Any) -> Params:
    r"""The unsharded clipping: every gradient times :math:`\min(1, c/\|g\|)`,
    :math:`\|g\|^2` summed over every entry of every leaf (PyTorch ``clip_grad_norm_``)."""
    scale = _clip_scale(xp, _squared_norm(xp, grads), max_norm)
    return {k: g * scale for k, g in grads.items()}


def zero_clip_by_global_norm(xp: Namespace, pieces: Sequence[Params], max_norm: Any
                             ) -> list[Params]:
    r"""ZeRO's clipping: each device's slices times :math:`\min(1, c/\|g\|)`, the squared
    norm the all-reduce of the devices' own (module docstring)."""
    sq = all_reduce_sum(xp, [_squared_norm(xp, p) for p in pieces])
    scale = _clip_scale(xp, sq, max_norm)
    return [{k: g * scale for k, g in p.items()} for p in pieces]


def zero_clip_by_shard_norm(xp: Namespace, pieces: Sequence[Params], max_norm: Any
                            ) -> list[Params]:
    r"""A counterexample (the planted bug "clipping by the shard's norm"): each device
    clips its slices by their own norm, :math:`\min(1, c/\|g^{(s)}\|)`."""
    return [clip_by_global_norm(xp, p, max_norm) for p in pieces]


# --------------------------------------------------------------------------- Shampoo


def _history(op: str, history: Any, axis: int) -> list[list[Any]]:
    if axis not in (-2, -1):
        raise ArgumentError(f"{op}: argument 'axis': expected -2 or -1, got {axis!r}")
    if isinstance(history, str | bytes) or not isinstance(history, Sequence) or not history:
        raise ArgumentError(f"{op}: argument 'history': expected the gradient shards of at "
                            f"least one step")
    steps = [check_shards(op, f"history[{t}]", h, axis) for t, h in enumerate(history)]
    sizes = [[_shape(g) for g in h] for h in steps]
    if any(s != sizes[0] for s in sizes) or len(_shape(steps[0][0])) != 2:
        raise ShapeError(f"{op}: argument 'history': expected matrices (m, n) split alike "
                         f"at every step, got shapes {sizes}")
    return steps


def shampoo_sharded(xp: Namespace, history: Sequence[Sequence[Any]], axis: int = -2, *,
                    epsilon: Any = 0) -> list[Any]:
    r"""Each device's slice of Shampoo's direction :math:`L^{-1/4}G_TR^{-1/4}`
    (:func:`~nlaverify.curvature.shampoo.shampoo_direction`, statistics accumulated from
    :math:`\epsilon I` over the steps of ``history``) from the slices of the gradients along
    ``axis`` (module docstring): the statistic of the unsplit axis by the all-reduce of the
    devices' own, that of the split axis from the all-gather of the slices.

    Args:
        xp: the array namespace.
        history: for each step :math:`t`, the slices :math:`G_{t,s}` of its gradient, split
            alike at every step.
        axis: the split axis, ``-2`` (rows) or ``-1`` (columns).
        epsilon: the statistics' initial :math:`\epsilon I`.
    """
    steps = _history("shampoo_sharded", history, axis)
    split_k, kept_k = (0, 1) if axis == -2 else (1, 0)
    stats = list(_sp.shampoo_init(xp, all_gather(xp, steps[0], axis), epsilon))
    for pieces in steps:
        own = [_sp.shampoo_statistics(xp, g) for g in pieces]
        stats[kept_k] = stats[kept_k] + all_reduce_sum(xp, [o[kept_k] for o in own])
        gathered = _sp.shampoo_statistics(xp, all_gather(xp, pieces, axis))  # the gather
        stats[split_k] = stats[split_k] + gathered[split_k]
    roots = [_sp.inverse_root(xp, S, 4) for S in stats]
    sizes = [_shape(g)[axis] for g in steps[-1]]
    if axis == -2:  # device s: its rows of L^{-1/4} times the gathered G_r R^{-1/4}
        H = all_gather(xp, [xp.matmul(g, roots[1]) for g in steps[-1]], axis=-2)
        return [xp.matmul(rows, H) for rows in split(xp, roots[0], sizes, axis=-2)]
    H = all_gather(xp, [xp.matmul(roots[0], g) for g in steps[-1]], axis=-1)
    return [xp.matmul(H, cols) for cols in split(xp, roots[1], sizes, axis=-1)]


def shampoo_on_shards(xp: Namespace, history: Sequence[Sequence[Any]], axis: int = -2, *,
                      epsilon: Any = 0, all_reduce: bool = False) -> list[Any]:
    r"""A counterexample (the planted bug "Shampoo on a shard"): each device runs Shampoo on
    its own slices, :math:`L_s^{-1/4}G_{T,s}R_s^{-1/4}` with its own statistics;
    ``all_reduce=True``: the statistic of the unsplit axis all-reduced (exact) but that of
    the split axis the device's own diagonal block (blocked Shampoo)."""
    steps = _history("shampoo_on_shards", history, axis)
    kept_k = 1 if axis == -2 else 0
    stats = [list(_sp.shampoo_init(xp, g, epsilon)) for g in steps[0]]
    for pieces in steps:
        own = [_sp.shampoo_statistics(xp, g) for g in pieces]
        total = all_reduce_sum(xp, [o[kept_k] for o in own])
        for st, o in zip(stats, own, strict=True):
            st[1 - kept_k] = st[1 - kept_k] + o[1 - kept_k]
            st[kept_k] = st[kept_k] + (total if all_reduce else o[kept_k])
    return [_sp.shampoo_direction(xp, g, tuple(st))
            for g, st in zip(steps[-1], stats, strict=True)]


__all__ = [
    "clip_by_global_norm",
    "gather_params",
    "newton_schulz_on_shards",
    "newton_schulz_sharded",
    "shampoo_on_shards",
    "shampoo_sharded",
    "shard_params",
    "shard_sizes",
    "zero_clip_by_global_norm",
    "zero_clip_by_shard_norm",
    "zero_init",
    "zero_update",
]
