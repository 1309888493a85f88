"""Token embedding and sinusoidal positional encoding (forward and VJP).

Baggag & Saad §3.2: a token is a one-hot row :math:`u_t`, its embedding the row
:math:`u_t W_E`; the whole sequence is :math:`X_0 = U W_E + P`.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._tangent import jvp_rule, lin, tsum
from nlaverify.ops._validate import check_args, check_length, check_tokens


def embed(xp: Namespace, tokens: Any, W_E: Any) -> Any:
    r"""One-hot embedding :math:`X = U W_E`, computed as a row gather
    (:math:`U_{ij} = \mathbb 1[t_i = j]`, Baggag & Saad §3.2).

    Args:
        tokens: ``(*, n)`` integer ids in ``[0, V)`` (a leading batch of sequences allowed).
        W_E: ``(V, d)`` embedding matrix.

    Returns:
        ``(*, n, d)``.
    """
    dims = check_args("embed", xp, {"W_E": (W_E, ("V", "d"))})
    check_tokens("embed", xp, "tokens", tokens, dims["V"])
    return _gather_rows(xp, tokens, W_E, dims["d"])


def _gather_rows(xp: Namespace, tokens: Any, W: Any, d: int) -> Any:
    """The rows ``W[tokens]``, ``(*, n, d)``: :math:`U W` for the one-hot :math:`U`."""
    lead = tuple(tokens.shape)
    if len(lead) == 1:
        return xp.take(W, tokens, axis=0)
    # the standard's take wants 1-d indices: gather the flattened batch, then unflatten
    rows = xp.take(W, xp.reshape(tokens, (-1,)), axis=0)
    return xp.reshape(rows, (*lead, d))


def embed_vjp(xp: Namespace, G: Any, tokens: Any, W_E: Any) -> tuple[Any]:
    r"""VJP of :func:`embed` with respect to :math:`W_E`: :math:`\bar W_E = U^\top G`
    (rows of repeated tokens add up, over the sequence and the batch). Tokens are not
    differentiable."""
    dims = check_args("embed_vjp", xp, {"W_E": (W_E, ("V", "d")), "G": (G, ("*", "n", "d"))})
    check_tokens("embed_vjp", xp, "tokens", tokens, dims["V"])
    check_length("embed_vjp", "tokens", tokens, tuple(G.shape[:-1]), "G")
    U = xp.reshape(xp.one_hot(tokens, dims["V"], G.dtype), (-1, dims["V"]))
    return (xp.matmul(xp.matrix_transpose(U), xp.reshape(G, (-1, dims["d"]))),)


@jvp_rule("dW_E",)
def embed_jvp(xp: Namespace, T: tuple[Any], tokens: Any, W_E: Any) -> Any:
    r"""JVP of :func:`embed` (Baggag & Saad §3.2): the map is linear in :math:`W_E`, so
    :math:`\dot X = U \dot W_E`, the same rows gathered from the tangent."""
    dims = check_args("embed_jvp", xp, {"W_E": (W_E, ("V", "d")), "dW_E": (T[0], ("V", "d"))})
    check_tokens("embed_jvp", xp, "tokens", tokens, dims["V"])
    return _gather_rows(xp, tokens, T[0], dims["d"])


def sinusoidal_positions(xp: Namespace, n: int, d: int, base: int = 10000) -> Any:
    r"""Sinusoidal encoding of Vaswani et al. (Baggag & Saad §3.2, §3.6.2):

    .. math:: P_{t,2i} = \sin\bigl(t\,\omega_i\bigr),\quad
       P_{t,2i+1} = \cos\bigl(t\,\omega_i\bigr),\quad \omega_i = b^{-2i/d}.

    Exact on SymPy (:math:`\omega_i` is a rational power of the integer base).
    """
    if n < 1 or d < 1:
        from nlaverify.errors import ShapeError

        raise ShapeError(f"sinusoidal_positions: expected n >= 1 and d >= 1, got n={n}, d={d}")
    exponents = xp.asarray([xp.rational(2 * (k // 2), d) for k in range(d)])
    omega = xp.exp(-exponents * xp.log(xp.asarray([xp.rational(base)])))
    angle = xp.asarray([[xp.rational(t)] for t in range(n)]) * omega
    even = xp.asarray([k % 2 == 0 for k in range(d)])
    return xp.where(even, xp.sin(angle), xp.cos(angle))


def add_positions(xp: Namespace, X: Any, base: int = 10000) -> Any:
    r"""Absolute positions added to the embeddings: :math:`X + P` (Baggag & Saad §3.2),
    ``X`` of shape ``(*, n, d)`` (the same :math:`P` for every sequence of a batch)."""
    dims = check_args("add_positions", xp, {"X": (X, ("*", "n", "d"))})
    P = sinusoidal_positions(xp, dims["n"], dims["d"], base)
    return X + (xp.astype(P, X.dtype) if not xp.object_arrays else P)


def add_positions_vjp(xp: Namespace, G: Any, X: Any, base: int = 10000) -> tuple[Any]:
    r"""VJP of :func:`add_positions`: :math:`P` is constant, so :math:`\bar X = G`."""
    check_args("add_positions_vjp", xp, {"X": (X, ("*", "n", "d")), "G": (G, ("*", "n", "d"))})
    return (G,)


@jvp_rule("dX",)
def add_positions_jvp(xp: Namespace, T: tuple[Any], X: Any, base: int = 10000) -> Any:
    r"""JVP of :func:`add_positions` (Baggag & Saad §3.2, §3.6.2): :math:`P` is constant,
    so :math:`\dot Y = \dot X`."""
    check_args("add_positions_jvp", xp, {"X": (X, ("*", "n", "d")),
                                         "dX": (T[0], ("*", "n", "d"))})
    return T[0]


def add_learned_positions(xp: Namespace, X: Any, W_P: Any, offset: int = 0) -> Any:
    r"""Learned absolute positions (GPT-2/3): :math:`X + W_P[o{:}o+n]`, ``X`` of shape
    ``(*, n, d)``, ``W_P`` of shape ``(context, d)`` (Baggag & Saad §3.2); position :math:`p`
    reads row :math:`p + o`, the static ``offset`` :math:`o \ge 0` (0: GPT-2; 2: OPT,
    Hugging Face ``OPTLearnedPositionalEmbedding``'s ``position_ids + self.offset``)."""
    dims = _learned_dims("add_learned_positions", xp, {"X": (X, ("*", "n", "d")),
                                                       "W_P": (W_P, ("context", "d"))}, offset)
    return X + W_P[offset: offset + dims["n"], ...]


def _learned_dims(op: str, xp: Namespace, specs: dict, offset: int) -> dict[str, int]:
    """:func:`check_args`, a static ``offset`` that is an integer >= 0, and at most
    ``context - offset`` positions."""
    from nlaverify.errors import ArgumentError, ShapeError

    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ArgumentError(f"{op}: static 'offset': expected an integer >= 0, got {offset!r}")
    dims = check_args(op, xp, specs)
    if dims["n"] + offset > dims["context"]:
        raise ShapeError(f"{op}: argument 'X': expected at most context - offset="
                         f"{dims['context'] - offset} rows (context={dims['context']}, "
                         f"offset={offset}), got {dims['n']}")
    return dims


def add_learned_positions_vjp(xp: Namespace, G: Any, X: Any, W_P: Any,
                              offset: int = 0) -> tuple[Any, Any]:
    r"""VJP of :func:`add_learned_positions`: :math:`\bar X = G`; :math:`\bar W_P` is
    :math:`\sum_b G_b` (the sum over the batch) in rows :math:`o \ldots o+n-1` and 0 in the
    others (the ``offset`` :math:`o` rows above, never read, and those below)."""
    dims = _learned_dims("add_learned_positions_vjp", xp, {
        "X": (X, ("*", "n", "d")), "W_P": (W_P, ("context", "d")), "G": (G, ("*", "n", "d"))},
        offset)
    G_seq = G if len(G.shape) == 2 else xp.sum(xp.reshape(G, (-1, dims["n"], dims["d"])),
                                                axis=0)
    above, below = offset, dims["context"] - dims["n"] - offset
    if above == below == 0:
        return G, G_seq

    def zeros(rows: int) -> list[Any]:
        if not rows:
            return []
        return [xp.zeros((rows, dims["d"]), dtype=G.dtype) if not xp.object_arrays else
                xp.zeros((rows, dims["d"]))]

    return G, xp.concat([*zeros(above), G_seq, *zeros(below)], axis=0)


@jvp_rule("dX", "dW_P")
def add_learned_positions_jvp(xp: Namespace, T: tuple[Any, Any], X: Any, W_P: Any,
                              offset: int = 0) -> Any:
    r"""JVP of :func:`add_learned_positions` (Baggag & Saad §3.2):
    :math:`\dot Y = \dot X + \dot W_P[o{:}o+n]` (the same rows for every sequence).

    ``T = (dX, dW_P)``, an entry ``None`` meaning a zero tangent.
    """
    dX, dW_P = T
    dims = _learned_dims("add_learned_positions_jvp", xp, {
        "X": (X, ("*", "n", "d")), "W_P": (W_P, ("context", "d")),
        "dX": (dX, ("*", "n", "d")), "dW_P": (dW_P, ("context", "d"))}, offset)
    rows = lin(dW_P, lambda t: t[offset: offset + dims["n"], ...])
    if dX is None and len(X.shape) > 2:  # broadcast the rows over the batch
        rows = xp.zeros_like(X) + rows
    return tsum(dX, rows)


def learned_position_specs() -> list[Any]:
    r"""The :class:`~nlaverify.ops.opspec.OpSpec` of :func:`add_learned_positions` for
    :data:`nlaverify.ops.registry.OPS`: offset 0 (GPT-2) and offset 2 (OPT, Zhang et al.
    2022; Hugging Face ``OPTLearnedPositionalEmbedding``), :math:`\bar W_P` the cotangent
    placed in rows :math:`o \ldots o+n-1` (Baggag & Saad §3.2)."""
    from nlaverify.ops.opspec import Arg, OpSpec

    args = (Arg("X", ("n", "d"), "real", None), Arg("W_P", ("context", "d"), "real", None))
    fns = (add_learned_positions, add_learned_positions_vjp, args, "Baggag & Saad §3.2")
    return [
        OpSpec("add_learned_positions", *fns,
               r"\bar X = G,\ \bar W_P = \begin{bmatrix} G \\ 0\end{bmatrix}",
               {"n": 2, "context": 3, "d": 2}, {"n": (1, 4), "context": (4, 6), "d": (1, 4)}),
        OpSpec("add_learned_positions_offset", *fns[:3],
               "Baggag & Saad §3.2; Zhang et al. 2022 (OPT, offset 2)",
               r"\bar X = G,\ \bar W_P = \begin{bmatrix} 0_{o\times d} \\ G \\ 0\end{bmatrix}",
               {"n": 2, "context": 5, "d": 2}, {"n": (1, 4), "context": (6, 8), "d": (1, 4)},
               static={"offset": 2}),
    ]
