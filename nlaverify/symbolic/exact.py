"""Symbolic arrays and the exact zero test used by every proof."""

from __future__ import annotations

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
    transcendental ones). Only an exact 0 counts as proved.

    Before the expensive :func:`sympy.simplify`, the expression is evaluated
    at a rational point: a value that is clearly nonzero *disproves* the
    identity at once (sound: a nonzero value is a counterexample). Sampling
    never proves anything; it only makes refutation fast.
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
    if _refuted_at_a_point(expr):
        return False
    return sympy.simplify(expr) == 0


def _refuted_at_a_point(expr: sympy.Expr) -> bool:
    """True when ``expr`` is clearly nonzero at a deterministic rational point."""
    point = {}
    for k, sym in enumerate(sorted(expr.free_symbols, key=lambda s: s.name)):
        value = sympy.Rational(3 + (7 * k) % 11, 7 + (5 * k) % 13)
        point[sym] = value if sym.is_positive else value * (-1) ** k
    try:
        value = sympy.N(expr.xreplace(point), 30)
    except (TypeError, ValueError):  # pragma: no cover - exotic expressions
        return False
    return bool(value.is_number and value.is_finite and abs(value) > sympy.Float("1e-20"))
