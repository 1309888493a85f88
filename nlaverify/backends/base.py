r"""The interface every array namespace offers to the ops.

It is the subset of the Python array API standard that the Transformer ops
need, plus what the standard lacks: ``erf``, exact constants
(:meth:`Namespace.rational`, :meth:`Namespace.const_sqrt`), one-hot encoding, and
three hooks through which a floating backend guards against overflow, underflow and
``0/0`` while the exact backend keeps the plain formula (each licensed by a lemma of
:mod:`nlaverify.identities.lemmas`, so the function proved is the function run):

* :meth:`Namespace.stability_shift`: the per-row constant :math:`c` subtracted before an
  exponential (lemmas ``softmax_shift_invariance``, ``log_sum_exp_shift``);
* :meth:`Namespace.safe_row_sum`: the denominator :math:`\sum_j e^{z_j-c}` of softmax,
  with the all-masked-row convention (lemma ``softmax_denominator_at_least_one``);
* :meth:`Namespace.norm_scale`: the per-row scale :math:`s` of LayerNorm and RMSNorm
  (lemma ``norm_scale_invariance``).
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
        r"""A per-row constant :math:`c` to subtract before :math:`\exp` (keepdims shape).

        Floating backends return :math:`\max_j z_j` (so that every exponent is
        :math:`\le 0`), and :math:`0` on an all-masked row (every :math:`z_j = -\infty`),
        where the maximum would give :math:`-\infty - (-\infty) = \mathrm{nan}`; the
        exact backend returns an opaque real symbol per row, so a proof holds for *every*
        shift, the maximum included.
        """
        raise NotImplementedError

    def safe_row_sum(self, e: Any, axis: int = -1) -> Any:  # pragma: no cover
        r"""The row sums :math:`\sum_j e_j` (keepdims shape) of the shifted exponentials
        :math:`e_j = e^{z_j - c}`, used as a denominator.

        Floating backends return :math:`1` in place of a zero sum, so an all-masked row
        gives :math:`0/1 = 0` (the "safe softmax" convention) instead of :math:`0/0`. With
        :math:`c = \max_j z_j` the sum of every other row is :math:`\ge 1` (lemma
        ``softmax_denominator_at_least_one``), so the replacement changes nothing else.
        The exact backend returns the plain sum.
        """
        raise NotImplementedError

    def nan_masked_rows(self, p: Any, e: Any, axis: int = -1) -> Any:  # pragma: no cover
        r""":math:`p` with NaN on the rows whose shifted exponentials :math:`e` sum to 0
        (all-masked rows): the masked-row convention of ``torch.softmax`` and
        ``jax.nn.softmax``. The exact backend returns :math:`p` (its rows are symbols,
        never all masked)."""
        raise NotImplementedError

    def norm_scale(self, x: Any, eps: Any, axis: int = -1) -> Any:  # pragma: no cover
        r"""A positive per-row scale :math:`s` (keepdims shape) for a root mean square.

        Normalizations compute :math:`\sqrt{\overline{x^2} + \epsilon}` as
        :math:`s\,\sqrt{\overline{(x/s)^2} + \epsilon/s^2}`, equal for every
        :math:`s > 0` (lemma ``norm_scale_invariance``). Floating backends return
        :math:`m = \max(\max_j |x_j|, \sqrt\epsilon)` rounded up to a power of two
        :math:`s = 2^e` with :math:`e` clipped to the normal range (at most
        :math:`2^{126}` in float32): then :math:`|x_j/s| \le 4`, :math:`x/s` is exact and
        :math:`1/s` normal, so :math:`(x/s)^2` neither overflows nor (for the largest
        entry) underflows, and :math:`\epsilon/s^2 \le 1`. The exact backend returns an
        opaque positive symbol per row (the same one for the same row, so a forward
        function and its VJP share it), so a proof holds for *every* scale; the mpmath
        reference returns :math:`1` (its exponent range is unbounded): the plain formula.
        """
        raise NotImplementedError

    def linear_recurrence(self, a: Any, b: Any, axis: int = -3, reverse: bool = False) -> Any:
        r"""Every state of the first-order linear recurrence along ``axis`` (a negative axis),

        .. math:: x_0 = b_0,\qquad x_k = a_k \odot x_{k-1} + b_k \quad (k \ge 1),

        stacked along ``axis`` (``a_0`` is not read); with ``reverse``,
        :math:`x_{L-1} = b_{L-1}`, :math:`x_k = a_k \odot x_{k+1} + b_k`. The states of
        the selective scan, its adjoint and its tangent are this recurrence
        (:mod:`nlaverify.ops.ssm`). Here the plain loop, term by term in this order: the
        exact and mpmath namespaces and NumPy run it as written; JAX runs the same
        arithmetic as one ``lax.scan`` (its compilation does not grow with the length)."""
        if axis >= 0:
            raise ValueError(f"linear_recurrence: expected a negative axis, got {axis}")
        tail = (slice(None),) * (-axis - 1)
        n = b.shape[axis]
        order = range(n - 1, -1, -1) if reverse else range(n)
        x, xs = None, []
        for k in order:
            bk = b[(Ellipsis, k, *tail)]
            x = bk if x is None else a[(Ellipsis, k, *tail)] * x + bk
            xs.append(x)
        return self.stack(xs[::-1] if reverse else xs, axis=axis)

    def is_concrete(self, x: Any) -> bool:
        """False for values that cannot be inspected (JAX tracers); True otherwise."""
        return True

    def __repr__(self) -> str:
        return f"<nlaverify namespace {self.name}>"
