"""Tangent bookkeeping shared by the ops' JVPs.

A JVP ``op_jvp(xp, T, *args, **static)`` receives ``T``, one tangent per ``real``
argument of the op, in order; an entry may be ``None``, meaning a zero tangent (the
graph's forward mode passes ``None`` for arguments that do not depend on the seeded
nodes, so no zero array is built or multiplied). At least one entry is not ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


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
