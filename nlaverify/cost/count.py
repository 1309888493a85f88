r"""An operation count of an op's own code: its forward and VJP traced to a jaxpr.

The closed forms of :mod:`nlaverify.cost.nodes` are checked against this count, not
against a second copy of the formula: the function that runs (written once against
``xp``) is traced on the JAX namespace with abstract arguments
(:class:`jax.ShapeDtypeStruct`, nothing allocated) by :func:`jax.make_jaxpr`, and each
primitive of the jaxpr is counted (Baggag & Saad §3.14: the cost of a model is the sum of
the costs of its operations):

- ``dot_general``: :math:`2\,|\text{out}|\,\prod_k c_k` (a multiply–add counts as 2;
  :math:`c_k` the contracted sizes), i.e. :math:`2\,b\,M N K` for a batched product;
- arithmetic elementwise primitives: one FLOP per output element, transcendental ones
  (``exp``, ``log``, ``tanh``, ``erf``, ``sqrt`` ...) also counted apart, as XLA does;
- reductions: one FLOP per input element;
- data movement (broadcast, reshape, transpose, gather, select, compare, convert): none.

Nested jaxprs (``jit``, ``custom_jvp_call``) are counted once per call; a ``scan`` its
body times its length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["OpCount", "count_jaxpr", "count_op"]

#: elementwise primitives counted as transcendental (one FLOP and one transcendental each)
TRANSCENDENTAL = frozenset({
    "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "erf", "erfc", "erf_inv",
    "sqrt", "rsqrt", "cbrt", "pow", "sin", "cos", "tan", "atan2", "asin", "acos", "atan",
    "sinh", "cosh", "asinh", "acosh", "atanh", "lgamma", "digamma"})
#: arithmetic elementwise primitives, one FLOP per output element
ARITHMETIC = frozenset({
    "add", "add_any", "sub", "mul", "div", "neg", "max", "min", "abs", "sign", "integer_pow",
    "square", "reciprocal", "rem", "floor", "ceil", "round", "nextafter"})
#: reductions, one FLOP per input element
REDUCTIONS = frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax",
                        "argmin", "cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"})


@dataclass(frozen=True)
class OpCount:
    """FLOPs of a traced computation: ``matmul`` (``dot_general``), ``elementwise`` (every
    other arithmetic FLOP, reductions included) and ``transcendental`` (the subset of
    ``elementwise`` that are transcendental functions)."""

    matmul: int = 0
    elementwise: int = 0
    transcendental: int = 0

    @property
    def flops(self) -> int:
        """All FLOPs, :math:`\\text{matmul} + \\text{elementwise}`."""
        return self.matmul + self.elementwise

    def __add__(self, other: OpCount) -> OpCount:
        return OpCount(self.matmul + other.matmul, self.elementwise + other.elementwise,
                       self.transcendental + other.transcendental)

    def __mul__(self, k: int) -> OpCount:
        return OpCount(self.matmul * k, self.elementwise * k, self.transcendental * k)


def _size(aval: Any) -> int:
    return math.prod(int(s) for s in getattr(aval, "shape", ()))


def _sub_jaxprs(params: dict[str, Any]) -> list[Any]:
    found = []
    for v in params.values():
        for item in v if isinstance(v, tuple | list) else (v,):
            inner = getattr(item, "jaxpr", None)
            if inner is not None and hasattr(inner, "eqns"):
                found.append(inner)
            elif hasattr(item, "eqns"):
                found.append(item)
    return found


def count_jaxpr(jaxpr: Any) -> OpCount:
    r"""The :class:`OpCount` of a jaxpr (a ``Jaxpr`` or ``ClosedJaxpr``), recursively."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total = OpCount()
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            (contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            k = math.prod(int(lhs[i]) for i in contract)
            total += OpCount(matmul=2 * _size(eqn.outvars[0].aval) * k)
        elif name in TRANSCENDENTAL:
            n = _size(eqn.outvars[0].aval)
            total += OpCount(elementwise=n, transcendental=n)
        elif name in ARITHMETIC:
            total += OpCount(elementwise=_size(eqn.outvars[0].aval))
        elif name in REDUCTIONS:
            total += OpCount(elementwise=_size(eqn.invars[0].aval))
        else:
            inner = _sub_jaxprs(eqn.params)
            times = int(eqn.params.get("length", 1)) if name == "scan" else 1
            for sub in inner:
                total += count_jaxpr(sub) * times
    return total


_CACHE: dict[tuple[Any, ...], tuple[OpCount, OpCount]] = {}


def count_op(op: str, arg_shapes: list[tuple[int, ...]], arg_dtypes: list[Any],
             static: dict[str, Any], out_shape: tuple[int, ...], dtype: Any
             ) -> tuple[OpCount, OpCount]:
    r"""``(forward, backward)`` :class:`OpCount` of op ``op`` of the registry at these
    argument shapes: its forward and its hand-derived VJP (``spec.vjp``, with a cotangent of
    ``out_shape``) traced on the JAX namespace. Cached by shapes, dtypes and statics."""
    key = (op, tuple(arg_shapes), tuple(map(str, arg_dtypes)), repr(sorted(static.items())),
           tuple(out_shape), str(dtype))
    if key in _CACHE:
        return _CACHE[key]
    import jax

    from nlaverify.backends import get_namespace
    from nlaverify.ops.registry import get_op

    xp = get_namespace("jax")
    spec = get_op(op)
    args = [jax.ShapeDtypeStruct(s, d) for s, d in zip(arg_shapes, arg_dtypes, strict=True)]
    fwd = count_jaxpr(jax.make_jaxpr(lambda *a: spec.forward(xp, *a, **static))(*args))
    if spec.differentiable:
        G = jax.ShapeDtypeStruct(tuple(out_shape), dtype)
        bwd = count_jaxpr(jax.make_jaxpr(lambda g, *a: spec.vjp(xp, g, *a, **static))(G, *args))
    else:
        bwd = OpCount()
    _CACHE[key] = (fwd, bwd)
    return fwd, bwd
