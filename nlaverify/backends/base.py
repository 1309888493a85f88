"""The interface every array namespace offers to the ops.

It is the subset of the Python array API standard that the Transformer ops
need, plus four things the standard lacks: ``erf``, exact constants
(:meth:`Namespace.rational`, :meth:`Namespace.const_sqrt`), one-hot encoding,
and :meth:`Namespace.stability_shift` (the per-row constant subtracted before an
exponential; see the lemma ``softmax_shift_invariance``).
"""

from __future__ import annotations

from typing import Any


class BackendUnavailable(RuntimeError):
    """A backend that cannot run on this machine (the message says why)."""


class Namespace:
    """Base class of the array namespaces; see :mod:`nlaverify.backends`."""

    #: backend name, e.g. ``"numpy"``
    name: str = "abstract"
    #: True for the exact SymPy namespace (no rounding at all)
    exact: bool = False
    #: True when arrays hold Python objects (SymPy, mpmath)
    object_arrays: bool = False

    # The methods below are implemented by the subclasses; they are listed here
    # so that a reader sees the whole interface the ops rely on in one place.
    def asarray(self, x: Any, dtype: Any = None) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def const(self, v: Any) -> Any:  # pragma: no cover - interface
        """A Python number as this namespace's scalar: exact (the binary value of a float)
        on SymPy, an ``mpf`` on mpmath, unchanged elsewhere. Static constants of the ops
        (``eps``, a scale ``c``) go through it, so no 15-digit float enters an exact result."""
        raise NotImplementedError

    def rational(self, p: int, q: int = 1) -> Any:  # pragma: no cover - interface
        """The number ``p/q``: exact on SymPy, correctly rounded elsewhere."""
        raise NotImplementedError

    def const_sqrt(self, p: int, q: int = 1, pi_power: int = 0) -> Any:  # pragma: no cover
        r"""The number :math:`\sqrt{(p/q)\,\pi^{k}}`, :math:`k` = ``pi_power`` (exact on SymPy)."""
        raise NotImplementedError

    def stability_shift(self, z: Any, axis: int = -1) -> Any:  # pragma: no cover
        r"""A per-row constant :math:`c` to subtract before :math:`\exp`.

        Floating backends return :math:`\max_j z_j` (so that every exponent is
        :math:`\le 0`); the exact backend returns an opaque real symbol per row,
        so a proof holds for *every* shift, the maximum included.
        """
        raise NotImplementedError

    def is_concrete(self, x: Any) -> bool:
        """False for values that cannot be inspected (JAX tracers); True otherwise."""
        return True

    def __repr__(self) -> str:
        return f"<nlaverify namespace {self.name}>"
