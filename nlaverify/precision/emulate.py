r"""Arithmetic below the run's ``dtype`` on purpose: the TF32 policy and the planted node.

TF32 (tensor cores): the product operands rounded to a 10-bit mantissa, round to nearest even,
so products carry :math:`u_p = 2^{-11}` while sums stay float32. :func:`matmul_precision_scope`
pins JAX's matmul precision (``"highest"``: no TF32, or ``"tensorfloat32"``);
:func:`round_tf32` and :func:`emulate_tf32` reproduce TF32 matmuls on NumPy, to test that
model on a CPU. :func:`planted` swaps one node's op for a float16 version: the mutation the
precision check must find (:func:`nlaverify.precision.check.verify_precision`, ``plant``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import networkx as nx
import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError
from nlaverify.ops.registry import OPS, get_op


@contextlib.contextmanager
def matmul_precision_scope(backend: str, matmul_precision: str) -> Iterator[None]:
    """Pin JAX's matmul precision: ``"highest"`` (full float32 products: no TF32 on
    GPUs) or ``"tensorfloat32"``; nothing to pin on NumPy."""
    if backend != "jax":
        yield
        return
    import jax

    with jax.default_matmul_precision("highest" if matmul_precision == "highest"
                                      else "tensorfloat32"):
        yield


@contextlib.contextmanager
def planted(graph: nx.DiGraph, node: str, dtype: str = "float16") -> Iterator[nx.DiGraph]:
    """A copy of ``graph`` whose ``node`` computes in ``dtype``: its op is replaced by one
    (registered under a new name while the context lasts) that casts its floating
    inputs to ``dtype``, computes, and casts the result back. The VJP is unchanged."""
    attrs = graph.nodes[node]
    if attrs.get("kind") != "op":
        raise ArgumentError(f"planted: argument 'node': expected an op node, got {node!r}")
    spec = get_op(attrs["op"])
    name = f"{spec.name}@{dtype}#{node}"

    def forward(xp: Any, *args: Any, **static: Any) -> Any:
        floating = [a for a in args if hasattr(a, "dtype") and xp.isdtype(a.dtype,
                                                                           "real floating")]
        back = floating[0].dtype
        low = getattr(xp, dtype)
        cast = [xp.astype(a, low) if any(a is f for f in floating) else a for a in args]
        return xp.astype(spec.forward(xp, *cast, **static), back)

    OPS[name] = dataclasses.replace(spec, name=name, forward=forward)
    g = graph.copy()
    g.nodes[node]["op"] = name
    try:
        yield g
    finally:
        OPS.pop(name, None)


class _TF32Namespace:
    """A namespace whose ``matmul`` rounds its float32 operands to TF32 (10-bit
    mantissa, round to nearest even) before multiplying: what tensor cores do."""

    def __init__(self, xp: Any) -> None:
        self._xp = xp

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._xp, attr)

    def matmul(self, a: Any, b: Any) -> Any:
        return self._xp.matmul(round_tf32(a), round_tf32(b))


def round_tf32(x: Any) -> Any:
    """``x`` (float32, NumPy) rounded to TF32, kept in float32."""
    arr = np.asarray(x)
    if arr.dtype != np.float32:
        return x
    bits = arr.view(np.uint32)
    lsb = (bits >> np.uint32(13)) & np.uint32(1)
    out = ((bits + np.uint32(0x0FFF) + lsb) & np.uint32(0xFFFFE000)).view(np.float32)
    return out.reshape(arr.shape)


def emulate_tf32(backend: str = "numpy") -> Any:
    """The NumPy namespace with TF32 matmuls, for testing the TF32 model on a CPU."""
    if backend != "numpy":
        raise ArgumentError(f"emulate_tf32: argument 'backend': expected 'numpy', got "
                            f"{backend!r}")
    return _TF32Namespace(get_namespace("numpy"))
