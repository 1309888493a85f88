"""Symbolic arrays and the exact zero test used by every proof."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import sympy


def symbol_array(name: str, shape: tuple[int, ...], **assumptions: Any) -> np.ndarray:
    """Object array of real symbols ``name_{i,j}`` (1-based indices, as in the papers)."""
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        sub = ",".join(str(i + 1) for i in idx)
        out[idx] = sympy.Symbol(f"{name}_{{{sub}}}" if sub else name, real=True, **assumptions)
    return out


def is_zero(expr: sympy.Expr) -> bool:
    """True when ``expr`` simplifies to exactly 0.

    The ladder, cheapest first: expansion, then the numerator of
    :func:`sympy.together` (rational identities), then
    :func:`sympy.piecewise_fold` + :func:`sympy.simplify` (piecewise and
    transcendental ones). Only an exact 0 counts; no numeric sampling.
    """
    expr = sympy.sympify(expr) if not isinstance(expr, sympy.Basic) else expr
    if expr == 0:
        return True
    if expr.has(sympy.Piecewise):
        expr = sympy.piecewise_fold(expr)
        if isinstance(expr, sympy.Piecewise):
            return all(is_zero(branch) for branch, _ in expr.args)
    if sympy.expand(expr) == 0:
        return True
    num, _ = sympy.fraction(sympy.together(expr))
    if sympy.expand(num) == 0:
        return True
    return sympy.simplify(expr) == 0


def all_zero(exprs: Iterable[sympy.Expr]) -> tuple[bool, int, int]:
    """Apply :func:`is_zero` to every entry; return (all zero, how many checked, first failure)."""
    count = 0
    for k, e in enumerate(exprs):
        count += 1
        if not is_zero(e):
            return False, count, k
    return True, count, -1
