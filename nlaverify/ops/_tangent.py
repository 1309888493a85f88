"""Tangent bookkeeping shared by the ops' JVPs.

A JVP ``op_jvp(xp, T, *args, **static)`` receives ``T``, one tangent per ``real``
argument of the op, in order; an entry may be ``None``, meaning a zero tangent (the
graph's forward mode passes ``None`` for arguments that do not depend on the seeded
nodes, so no zero array is built or multiplied). At least one entry is not ``None``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from nlaverify.errors import ArgumentError


def tsum(*terms: Any) -> Any:
    """The sum of the terms that are not ``None`` (at least one must be)."""
    out = None
    for t in terms:
        if t is not None:
            out = t if out is None else out + t
    if out is None:
        raise ValueError("tsum: every tangent term is None (a JVP needs one nonzero tangent)")
    return out


def lin(t: Any, f: Callable[[Any], Any]) -> Any:
    """``f(t)`` for a tangent ``t``, ``None`` (zero) when ``t`` is ``None``: the image of
    a tangent under a linear map."""
    return None if t is None else f(t)


def tangents(op: str, T: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    """``T`` as a tuple of one tangent per real argument (``names``), not all ``None``; else
    an :class:`~nlaverify.errors.ArgumentError` naming ``op``."""
    if not isinstance(T, tuple | list) or len(T) != len(names):
        got = f"{len(T)}" if isinstance(T, tuple | list) else f"a {type(T).__name__}"
        raise ArgumentError(f"{op}: argument 'T': expected a tuple of {len(names)} tangents "
                            f"({', '.join(names)}), got {got}")
    if all(t is None for t in T):
        raise ArgumentError(f"{op}: argument 'T': expected at least one tangent that is not "
                            f"None (a zero direction has a zero JVP), got {len(T)} None")
    return tuple(T)


def jvp_rule(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate ``op_jvp(xp, T, *args, **static)`` so that ``T`` is checked by
    :func:`tangents` against the tangent names ``names`` before the rule runs."""
    def decorate(rule: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(rule)
        def checked(xp: Any, T: Any, *args: Any, **static: Any) -> Any:
            return rule(xp, tangents(rule.__name__, T, names), *args, **static)

        return checked

    return decorate
