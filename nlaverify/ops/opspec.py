r"""The record of one op in :data:`nlaverify.ops.registry.OPS`: :class:`OpSpec` and its
:class:`Arg` s, and the fixed inputs proofs and tests give the non-real arguments.

An :class:`OpSpec` holds a forward :math:`f` next to its VJP :math:`\bar a = (\partial
f/\partial a)^\top G`, the argument shapes, the seed section and the sizes of the exact proof;
its JAX oracles (:meth:`OpSpec.autodiff_vjp`, :meth:`OpSpec.autodiff_jvp`) differentiate
:attr:`OpSpec.forward` with respect to the ``real`` arguments only. :func:`fixed_routing_mask`
and :func:`with_ignored` are the ``mask`` and padded ``tokens`` inputs of the proofs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

ArgKind = Literal["real", "tokens", "mask", "fixed"]


@dataclass(frozen=True)
class Arg:
    """An op argument: its name, named dimensions and kind.

    ``kind="tokens"`` is an integer array with values in ``[0, dims_of["V"])``;
    ``kind="mask"`` a fixed 0/1 routing mask ``(n, E)`` selecting experts
    :math:`t, t+1 \bmod E` for token :math:`t` (see :func:`fixed_routing_mask`); neither
    is differentiated; ``kind="fixed"`` is a real array that is not differentiated
    (the router scores seen by the top-k choice). ``"real"`` arguments are differentiated.
    """

    name: str
    dims: tuple[str | int, ...]
    kind: ArgKind = "real"
    #: for ``kind="tokens"``: the id meaning "no target here" (padding), which proofs and
    #: strategies then use at some positions (see :func:`with_ignored`)
    ignore: int | None = None

    @property
    def per_sequence(self) -> bool:
        """Whether the argument has a position axis (``n``, or ``n_k``: the keys of an
        attention with fewer queries than keys), so a batch of sequences stacks it (a
        parameter without one is shared by every sequence)."""
        return "n" in self.dims or "n_k" in self.dims


@dataclass(frozen=True)
class OpSpec:
    """One op: forward, VJP, arguments, the seed section, and test sizes.

    ``vjp(xp, G, *args, **static)`` returns one cotangent per ``real`` argument,
    in order. ``proof_sizes`` are the concrete sizes of the exact proof;
    ``size_ranges`` bound the sizes hypothesis draws.
    """

    name: str
    forward: Callable[..., Any]
    vjp: Callable[..., tuple[Any, ...]]
    args: tuple[Arg, ...]
    seed: str
    vjp_statement: str
    proof_sizes: Mapping[str, int]
    size_ranges: Mapping[str, tuple[int, int]]
    static: Mapping[str, Any] = field(default_factory=dict)
    #: static values for the exact proof (e.g. a positive symbol for ``eps``)
    proof_static: Mapping[str, str] = field(default_factory=dict)
    #: condition estimate of the op at given real inputs (default: input magnitudes)
    condition: Callable[[list[Any]], float] | None = None
    #: the op's own amplification of relative error, the factor of :attr:`condition` beyond
    #: the input magnitudes (a cancellation: LayerNorm's mean subtraction, a normaliser)
    amplification: Callable[[list[Any]], float] | None = None
    #: the real arguments whose cotangent the :attr:`amplification` bears on (``None``:
    #: all); LayerNorm's :math:`\bar x` cancels, its :math:`\bar\gamma = \sum g\odot\hat x`
    #: does not
    amplified: tuple[str, ...] | None = None
    #: adjusts drawn sizes to the op's constraints (even head dims, divisibility)
    fix_sizes: Callable[[dict[str, int]], dict[str, int]] | None = None

    @property
    def differentiable(self) -> bool:
        """False for ops with no real argument (their derivative is 0 by construction)."""
        return bool(self.real_args)

    @property
    def real_args(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.kind == "real")

    def autodiff_vjp(self, args: list[Any], G: Any, **static: Any) -> tuple[Any, tuple]:
        """``(output, cotangents)`` by ``jax.vjp`` of :attr:`forward` with respect to the
        real arguments (the others held fixed): the independent oracle of :attr:`vjp`.
        ``args`` and ``G`` are JAX arrays."""
        import jax

        f, primals = self._of_reals(args, static)
        out, pullback = jax.vjp(f, *primals)
        return out, pullback(G)

    def _of_reals(self, args: list[Any], static: Mapping[str, Any]
                  ) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        """The forward on the JAX namespace as a function of the real arguments only (the
        others held at ``args``), and those real arguments."""
        from nlaverify.backends import get_namespace

        xp = get_namespace("jax")
        real = [k for k, a in enumerate(self.args) if a.kind == "real"]

        def f(*reals: Any) -> Any:
            full = list(args)
            for k, r in zip(real, reals, strict=True):
                full[k] = r
            return self.forward(xp, *full, **static)

        return f, tuple(args[k] for k in real)

    @property
    def jvp(self) -> Callable[..., Any] | None:
        r"""The forward-mode derivative ``jvp(xp, T, *args, **static)``: the function named
        ``<forward>_jvp`` next to :attr:`forward` in its module (``None`` if there is none).
        ``T`` holds one tangent per real argument (``None`` for a zero tangent); it returns
        the output's tangent :math:`\dot f = \sum_a \partial f/\partial a\,\dot a`."""
        import sys

        return getattr(sys.modules[self.forward.__module__], f"{self.forward.__name__}_jvp",
                       None)

    def autodiff_jvp(self, args: list[Any], tangents: list[Any], **static: Any) -> Any:
        """The output tangent by ``jax.jvp`` of :attr:`forward` along ``tangents`` (one per
        real argument, JAX arrays): the independent oracle of :attr:`jvp`."""
        import jax

        f, primals = self._of_reals(args, static)
        return jax.jvp(f, primals, tuple(tangents))[1]

    @property
    def qualified_names(self) -> tuple[str, str]:
        return (f"{self.forward.__module__}.{self.forward.__qualname__}",
                f"{self.vjp.__module__}.{self.vjp.__qualname__}")


def fixed_routing_mask(n: int, n_experts: int) -> Any:
    """The routing mask of proofs and tests: token t uses experts t and t+1 (mod E)."""
    import numpy as np

    k = min(2, n_experts)
    return np.array([[1.0 if (e - t) % n_experts < k else 0.0 for e in range(n_experts)]
                     for t in range(n)])


def with_ignored(tokens: Any, ignore: int) -> Any:
    r"""Proof and test targets with padding: position :math:`i \equiv 1 \pmod 3` of the last
    axis set to ``ignore`` (position 0 always keeps a real target)."""
    import numpy as np

    out = np.array(tokens, dtype=np.int64, copy=True)
    out[..., 1::3] = ignore
    return out
