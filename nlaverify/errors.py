"""Exceptions raised on bad input. Each message names the argument or node,
and the expected versus the actual shape, dtype or value."""

from __future__ import annotations


class NlaverifyError(Exception):
    """Base class of nlaverify's input errors."""


class ShapeError(NlaverifyError, ValueError):
    """An argument of the wrong shape (or the wrong number of dimensions)."""


class DTypeError(NlaverifyError, TypeError):
    """An argument of the wrong dtype (e.g. integer weights, mixed precisions)."""


class NonFiniteError(NlaverifyError, ValueError):
    """An argument that holds ``inf`` or ``nan``."""


class ArgumentError(NlaverifyError, ValueError):
    """A static argument out of its range (e.g. ``eps <= 0``, ``n_heads = 0``)."""


class UnknownNameError(NlaverifyError, KeyError):
    """An unknown op, identity, backend or preset name."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class CheckError(NlaverifyError, ValueError):
    """Bad input to a ``check_*`` call: the message names the argument and the expected
    versus the actual shape, dtype, type or value (also raised by
    :mod:`nlaverify.cases` for a check's values out of a dtype's range)."""


class MissingExtraError(NlaverifyError, ImportError):
    """An optional dependency is not installed; the message names the extra to install
    (``pip install 'nlaverify[hf]'``)."""
