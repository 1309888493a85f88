r"""Channel views: the reshapes between a row of :math:`hd` channels and :math:`h` heads of
:math:`d` channels **without moving the sequence axis** (Dao & Gu 2024, Mamba-2 §7: the scan
reads ``x`` as ``(n, H, P)`` and ``B``, ``C`` as ``(n, G, N)``; Hugging Face ``Mamba2Mixer``'s
``reshape(batch, seq_len, -1, head_dim)``). :func:`~nlaverify.ops.sdpa.split_heads` puts the
heads *before* the sequence, as attention wants; these keep it first.

.. math:: \operatorname{split}_h : (\ast, n, hd) \to (\ast, n, h, d),\qquad
   \operatorname{merge} = \operatorname{split}_h^{-1},

linear and orthogonal (a reshape), so each one's VJP is the other and its JVP is itself.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ShapeError
from nlaverify.ops._tangent import tangents
from nlaverify.ops._validate import check_args, check_positive
from nlaverify.ops.opspec import Arg, OpSpec

__all__ = ["VIEW_OPS", "merge_channels", "merge_channels_jvp", "merge_channels_vjp",
           "split_channels", "split_channels_jvp", "split_channels_vjp"]


def split_channels(xp: Namespace, X: Any, n_heads: int) -> Any:
    r"""``(*, n, h d) -> (*, n, h, d)``: channel block :math:`k` becomes head :math:`k`, the
    sequence axis stays where it is."""
    check_positive("split_channels", "n_heads", n_heads)
    dims = check_args("split_channels", xp, {"X": (X, ("*", "n", "hd"))})
    if dims["hd"] % n_heads:
        raise ShapeError(f"split_channels: argument 'X': expected a last dimension divisible "
                         f"by n_heads={n_heads}, got {dims['hd']}")
    return xp.reshape(X, (*tuple(X.shape[:-1]), n_heads, dims["hd"] // n_heads))


def merge_channels(xp: Namespace, X: Any) -> Any:
    r"""``(*, n, h, d) -> (*, n, h d)``, the inverse of :func:`split_channels`."""
    dims = check_args("merge_channels", xp, {"X": (X, ("*", "n", "h", "d"))})
    return xp.reshape(X, (*tuple(X.shape[:-2]), dims["h"] * dims["d"]))


def split_channels_vjp(xp: Namespace, G: Any, X: Any, n_heads: int) -> tuple[Any]:
    r"""VJP of :func:`split_channels`: a reshape, so :math:`\bar X = \operatorname{merge}(G)`."""
    return (merge_channels(xp, G),)


def merge_channels_vjp(xp: Namespace, G: Any, X: Any) -> tuple[Any]:
    r"""VJP of :func:`merge_channels`: :math:`\bar X = \operatorname{split}_h(G)`."""
    return (split_channels(xp, G, X.shape[-2]),)


def split_channels_jvp(xp: Namespace, T: tuple[Any], X: Any, n_heads: int) -> Any:
    r"""JVP of :func:`split_channels`: linear, :math:`\dot Y = \operatorname{split}_h(\dot
    X)`."""
    (dX,) = tangents("split_channels_jvp", T, ("dX",))
    return split_channels(xp, dX, n_heads)


def merge_channels_jvp(xp: Namespace, T: tuple[Any], X: Any) -> Any:
    r"""JVP of :func:`merge_channels`: linear, :math:`\dot Y = \operatorname{merge}(\dot X)`."""
    (dX,) = tangents("merge_channels_jvp", T, ("dX",))
    return merge_channels(xp, dX)


#: to be listed in ``nlaverify.ops.registry.OPS`` (proved by ``nlaverify derive`` as every op)
VIEW_OPS: dict[str, OpSpec] = {s.name: s for s in (
    OpSpec("split_channels", split_channels, split_channels_vjp, (Arg("X", ("n", "hd")),),
           "Dao & Gu 2024 (Mamba-2 §7; Hugging Face Mamba2Mixer's reshape to heads)",
           r"\bar X = \operatorname{merge}(G)", {"n": 2, "hd": 4},
           {"n": (1, 4), "hd": (2, 8)}, static={"n_heads": 2},
           fix_sizes=lambda s: {**s, "hd": s["hd"] + s["hd"] % 2}),
    OpSpec("merge_channels", merge_channels, merge_channels_vjp,
           (Arg("X", ("n", "h", "d")),),
           "Dao & Gu 2024 (Mamba-2 §7; Hugging Face Mamba2Mixer's reshape back)",
           r"\bar X = \operatorname{split}_h(G)", {"n": 2, "h": 2, "d": 2},
           {"n": (1, 4), "h": (1, 4), "d": (1, 4)}),
)}
