"""Argument checks shared by every op: shapes, dtypes, finiteness, token ranges.

Shapes are checked against *named* dimensions: ``("n", "d_in")`` binds ``n`` and
``d_in`` at their first use and every later use must agree, so an error says
which argument disagrees with which, e.g.
``affine: argument 'W': expected shape (d_in=3, d_out), got (4, 5)``.
A leading ``"*"`` matches any number of batch dimensions.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from nlaverify.backends.base import Namespace
from nlaverify.backends.host import to_host
from nlaverify.errors import ArgumentError, DTypeError, NonFiniteError, ShapeError

Dims = tuple[str | int, ...]
_HOST = np


def _fmt(dims: Dims, bound: dict[str, int]) -> str:
    parts = []
    for d in dims:
        if isinstance(d, str) and d in bound:
            parts.append(f"{d}={bound[d]}")
        else:
            parts.append(str(d))
    return "(" + ", ".join(parts) + (",)" if len(parts) == 1 else ")")


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in np.shape(x)) if not hasattr(x, "shape") else tuple(x.shape)


def check_args(
    op: str,
    xp: Namespace,
    specs: dict[str, tuple[Any, Dims]],
    *,
    bound: dict[str, int] | None = None,
    floating: bool = True,
    neg_inf_ok: tuple[str, ...] = (),
) -> dict[str, int]:
    """Check the shapes, dtypes and finiteness of an op's array arguments.

    Args:
        op: the op's name, used in messages.
        xp: the namespace the op runs on.
        specs: ``{argument name: (array, named dims)}``; ``None`` arrays are skipped.
        bound: dimensions already known (e.g. ``{"n_heads": 2}``).
        floating: require a real floating dtype, the same for all arguments.
        neg_inf_ok: arguments that may hold ``-inf`` (masked scores), never ``nan``/``+inf``.

    Returns:
        The bound dimension sizes.

    Raises:
        ShapeError, DTypeError, NonFiniteError: naming the argument, expected vs actual.
    """
    bound = dict(bound or {})
    dtype_of: tuple[str, Any] | None = None
    prefix: tuple[str, tuple[int, ...]] | None = None  # the batch dims "*" stand for
    for name, (x, dims) in specs.items():
        if x is None:
            continue
        shape = _shape(x)
        core = dims[1:] if dims and dims[0] == "*" else dims
        if (dims and dims[0] == "*" and len(shape) < len(core)) or (
            not (dims and dims[0] == "*") and len(shape) != len(core)
        ):
            raise ShapeError(
                f"{op}: argument {name!r}: expected shape {_fmt(dims, bound)}, got {shape}"
            )
        if dims and dims[0] == "*":
            lead = shape[:len(shape) - len(core)]
            if prefix is None:
                prefix = (name, lead)
            elif lead != prefix[1]:
                want = (f"shape {prefix[1]} (the shape of {prefix[0]!r})" if not core else
                        f"batch dimensions {prefix[1]} (as {prefix[0]!r}) before "
                        f"{_fmt(core, bound)}")
                raise ShapeError(f"{op}: argument {name!r}: expected {want}, got {shape}")
        tail = shape[len(shape) - len(core):]
        for d, s in zip(core, tail, strict=True):
            if isinstance(d, int):
                ok = s == d
            elif d in bound:
                ok = s == bound[d]
            else:
                bound[d] = s
                ok = True
            if not ok:
                raise ShapeError(
                    f"{op}: argument {name!r}: expected shape {_fmt(dims, bound)}, got {shape}"
                )
        if floating:
            dtype_of = _check_dtype(op, xp, name, x, dtype_of)
            _check_finite(op, xp, name, x, name in neg_inf_ok)
    return bound


def _check_dtype(op: str, xp: Namespace, name: str, x: Any, seen: tuple[str, Any] | None):
    if xp.object_arrays:
        # 0-d results of object arrays are bare scalars (SymPy or mpf): accept them
        if hasattr(x, "dtype") and x.dtype.kind != "O":
            raise DTypeError(
                f"{op}: argument {name!r}: expected an object array of {xp.name} scalars "
                f"(use xp.asarray), got dtype {x.dtype}"
            )
        return seen
    dtype = getattr(x, "dtype", None)
    if dtype is None or not xp.isdtype(dtype, "real floating"):
        raise DTypeError(f"{op}: argument {name!r}: expected a real floating dtype, got {dtype}")
    if seen is not None and seen[1] != dtype:
        raise DTypeError(
            f"{op}: argument {name!r}: expected dtype {seen[1]} (the dtype of {seen[0]!r}), "
            f"got {dtype}"
        )
    return seen or (name, dtype)


def _check_finite(op: str, xp: Namespace, name: str, x: Any, neg_inf_ok: bool) -> None:
    if xp.exact or not xp.is_concrete(x):
        return
    if xp.name == "jax":  # a concrete constant inside a trace: inspect it on the host
        x, xp = to_host(x), _HOST
    good = xp.isfinite(x)
    if neg_inf_ok:
        good = good | (x == -xp.inf)
    if not bool(xp.all(good)):
        what = "finite values or -inf" if neg_inf_ok else "finite values"
        raise NonFiniteError(f"{op}: argument {name!r}: expected {what}, got inf or nan")


def check_tokens(op: str, xp: Namespace, name: str, tokens: Any, vocab: int,
                 ignore: int | None = None) -> None:
    """Check that ``tokens`` is an integer array with entries in ``[0, vocab)`` (or equal to
    ``ignore``, the ignore-index of targets that have no next token to predict)."""
    if xp.object_arrays:
        arr = np.asarray(tokens)
        integral = arr.dtype.kind in "iu"
        dtype = arr.dtype
    else:
        dtype = getattr(tokens, "dtype", None)
        integral = dtype is not None and xp.isdtype(dtype, "integral")
    if not integral:
        raise DTypeError(f"{op}: argument {name!r}: expected an integer dtype, got {dtype}")
    if not all(_shape(tokens)):
        raise ShapeError(f"{op}: argument {name!r}: expected at least one token, got shape "
                         f"{_shape(tokens)}")
    if xp.is_concrete(tokens):
        host = arr if xp.object_arrays else to_host(tokens)
        if ignore is not None:
            host = host[host != ignore]
            if host.size == 0:
                return
        lo, hi = int(np.min(host)), int(np.max(host))
        if lo < 0 or hi >= vocab:
            extra = f" or the ignore-index {ignore}" if ignore is not None else ""
            raise ShapeError(
                f"{op}: argument {name!r}: expected token ids in [0, {vocab}){extra}, got ids "
                f"in [{lo}, {hi}]"
            )


def check_length(op: str, name: str, x: Any, lead: tuple[int, ...], of: str) -> None:
    """Check that integer array ``x`` has shape ``lead``: the batch dimensions and the
    sequence length of argument ``of`` (e.g. ``(B, n)`` for logits ``(B, n, V)``)."""
    if _shape(x) != tuple(lead):
        dims = ", ".join(str(s) for s in lead) + ("," if len(lead) == 1 else "")
        raise ShapeError(f"{op}: argument {name!r}: expected shape ({dims}) (the leading "
                         f"dimensions of {of!r}), got {_shape(x)}")


def check_positive(op: str, name: str, value: Any) -> None:
    """Check a static number (e.g. ``eps``, ``n_heads``) is > 0; symbols pass through."""
    if isinstance(value, int | float) and not value > 0:
        raise ArgumentError(f"{op}: argument {name!r}: expected > 0, got {value!r}")


def check_derived_finite(op: str, xp: Namespace, name: str, value: Any, what: str) -> None:
    """Check that ``value``, computed from argument ``name`` (``what`` says how, e.g. ``"A =
    -exp(A_log)"``), is finite: a finite argument can still overflow. Skipped on the exact
    and object namespaces and on JAX tracers, as the finiteness of the arguments is."""
    if xp.exact or xp.object_arrays or not xp.is_concrete(value):
        return
    if xp.name == "jax":  # a concrete value inside a trace: inspect it on the host
        value, xp = to_host(value), _HOST
    if not bool(xp.all(xp.isfinite(value))):
        raise NonFiniteError(f"{op}: argument {name!r}: expected {what} finite, got inf or "
                             f"nan (an overflow: reduce {name!r})")


def check_int(op: str, name: str, value: Any) -> int:
    """Check a static integer argument (``top_k``, ``n_group``) is an ``int`` (not a
    ``bool``, not a float: ``top_k=2.5`` is not truncated to 2); its range is the caller's."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentError(f"{op}: argument {name!r}: expected an integer, got "
                            f"{value!r} ({type(value).__name__})")
    return int(value)


def check_positive_finite(op: str, name: str, value: Any) -> None:
    """Check a static number (e.g. ``routed_scaling_factor``) is finite and > 0; symbols
    (the proofs' ``rho``) pass through."""
    if isinstance(value, bool) or (isinstance(value, numbers.Real) and not (
            math.isfinite(value) and value > 0)):
        raise ArgumentError(f"{op}: argument {name!r}: expected a finite number > 0, got "
                            f"{value!r}")


def check_mask(op: str, xp: Namespace, mask: Any, name: str = "mask") -> None:
    """Check that a concrete numeric routing mask holds only 0 and 1 (one pass over the
    mask); skipped on the exact and object namespaces and on JAX tracers."""
    if xp.exact or xp.object_arrays or not xp.is_concrete(mask):
        return
    host = to_host(mask)
    if host.dtype.kind in "fiu" and not bool(np.all((host == 0) | (host == 1))):
        bad = host[(host != 0) & (host != 1)].reshape(-1)[0]
        raise ArgumentError(f"{op}: argument {name!r}: expected a 0/1 mask, got the value "
                            f"{bad.item()!r}")
