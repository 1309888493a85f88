r"""Odd polynomials of the Newton–Schulz iteration (Baggag & Saad §5.5, Muon): coefficient
tuples, per-step schedules and the scalar map.

An odd polynomial :math:`p(x) = a_1 x + a_3 x^3 + a_5 x^5 + \dots` is given by its
coefficients ``(a_1, a_3, a_5, ...)`` (:data:`Coefficients`; exact
:class:`fractions.Fraction` for the published sets); a *schedule* is one such tuple per step
(:func:`schedule`, :func:`is_schedule`). :func:`odd_polynomial` is the scalar map
:math:`x \mapsto p(x)` that every singular value follows. The matrix iteration is in
:mod:`nlaverify.optim.newton_schulz`, the certified ranges of the scalar map in
:mod:`nlaverify.optim.certify`; both build on this module.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

from nlaverify.errors import ArgumentError

#: coefficients ``(a_1, a_3, a_5, ...)`` of an odd polynomial
Coefficients = tuple[Any, ...]


def _is_row(x: Any) -> bool:
    """A coefficient tuple inside a schedule: a list/tuple or a 1-d array (not a string)."""
    if isinstance(x, (str, bytes)):
        return False
    ndim = getattr(x, "ndim", None)
    return ndim == 1 if ndim is not None else isinstance(x, Sequence)


def is_schedule(coeffs: Any) -> bool:
    """Whether ``coeffs`` is a per-step schedule (a sequence of coefficient tuples, or a 2-d
    array with one row per step) rather than one tuple ``(a_1, a_3, ...)``."""
    ndim = getattr(coeffs, "ndim", None)
    if ndim is not None:
        return ndim == 2
    return isinstance(coeffs, Sequence) and not isinstance(coeffs, (str, bytes)) and \
        len(coeffs) > 0 and _is_row(coeffs[0])


def _check_coefficient(c: Any, where: str) -> Any:
    """A real coefficient (int, Fraction, float, a real NumPy scalar, SymPy, mpmath, FLINT);
    NumPy scalars become Python numbers. :class:`ArgumentError` naming it otherwise."""
    if hasattr(c, "ndim") and getattr(c, "ndim", None) == 0 and hasattr(c, "item"):
        kind = getattr(getattr(c, "dtype", None), "kind", "f")
        if kind not in "biuf" and "float" not in str(c.dtype):
            raise ArgumentError(f"{where}: expected a real number, got dtype {c.dtype}")
        if kind == "b":
            raise ArgumentError(f"{where}: expected a real number, got a boolean")
        c = c.item()
    if isinstance(c, bool):
        raise ArgumentError(f"{where}: expected a real number, got {c!r}")
    if isinstance(c, numbers.Real) or type(c).__module__.split(".")[0] in (
            "sympy", "mpmath", "flint"):
        return c
    raise ArgumentError(f"{where}: expected a real number, got {type(c).__name__} {c!r}")


def _check_row(c: Any, where: str) -> Coefficients:
    if not _is_row(c):
        raise ArgumentError(f"{where}: expected a tuple (a_1, a_3, ...) or a 1-d array, got "
                            f"{type(c).__name__} {c!r}")
    row = tuple(_check_coefficient(a, f"{where}[{i}]") for i, a in enumerate(c))
    if not row:
        raise ArgumentError(f"{where}: no coefficients")
    return row


def schedule(coeffs: Coefficients | Sequence[Coefficients], steps: int) -> list[Coefficients]:
    """One coefficient tuple per step: ``coeffs`` (a tuple, list or 1-d array
    ``(a_1, a_3, ...)``) repeated ``steps`` times, or, when ``coeffs`` is a schedule
    (:func:`is_schedule`: a sequence of such tuples, or a 2-d array, one row per step; e.g. a
    designed one), exactly those rows. Raises :class:`ArgumentError` for a schedule of another
    length, an empty tuple or a coefficient that is not a real number (a string, a complex
    number)."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ArgumentError(f"steps: expected an integer >= 0, got {steps!r}")
    if isinstance(coeffs, (str, bytes)) or not (_is_row(coeffs) or is_schedule(coeffs)):
        raise ArgumentError(f"coeffs: expected a tuple (a_1, a_3, ...) or a schedule of "
                            f"tuples, got {type(coeffs).__name__} {coeffs!r}")
    if is_schedule(coeffs):
        if len(coeffs) != steps:
            raise ArgumentError(f"coeffs: a schedule of {len(coeffs)} steps, but steps={steps}")
        return [_check_row(c, f"coeffs[{k}]") for k, c in enumerate(coeffs)]
    return [_check_row(coeffs, "coeffs")] * steps


def odd_polynomial(coeffs: Coefficients, x: Any) -> Any:
    r"""The scalar map :math:`p(x) = \sum_j a_{2j+1} x^{2j+1}` by Horner's rule in
    :math:`x^2`, for any number type that mixes with the coefficients (Fraction, float,
    SymPy, mpmath, flint's arb after conversion by the caller)."""
    x2 = x * x
    q = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        q = c + q * x2
    return q * x



__all__ = ["Coefficients", "is_schedule", "odd_polynomial", "schedule"]
