"""Evaluation and back-propagation over a networkx graph (Baggag & Saad §2.6)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.errors import ShapeError, UnknownNameError
from nlaverify.graph import add_input, add_op, backprop, evaluate
from nlaverify.identities.backprop import example_graph
from nlaverify.tolerance import tolerance


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_example_values_and_gradient(backend: str) -> None:
    xp = get_namespace(backend)
    x, y, z = 1.5, -0.25, 2.0
    vals = evaluate(example_graph(), xp, {k: xp.asarray(v) for k, v in zip("xyz", (x, y, z),
                                                                          strict=True)})
    cot = backprop(example_graph(), xp, vals, "f")
    tol = tolerance("float64", size=3)
    assert tol.compare(vals["f"], np.asarray((x + y - 2) * (y + 1) + 2 * z)).ok
    for k, want in {"x": y + 1, "y": x + 2 * y - 1, "z": 2.0}.items():
        assert tol.compare(cot[k], np.asarray(want)).ok, k


def test_errors_name_the_node() -> None:
    g = nx.DiGraph()
    add_input(g, "a", (2,))
    with pytest.raises(UnknownNameError, match="node 'b': unknown input node 'nope'"):
        add_op(g, "b", "mul", ["a", "nope"])
    with pytest.raises(ShapeError, match="node 'b': op 'mul' takes 2 arguments"):
        add_op(g, "b", "mul", ["a"])
    add_op(g, "b", "relu", ["a"])
    with pytest.raises(UnknownNameError, match="no value given for input node 'a'"):
        evaluate(g, get_namespace("numpy"), {})
    add_input(g, "c", (3,))
    add_op(g, "d", "mul", ["b", "c"])
    with pytest.raises(ShapeError, match=r"node 'd': mul: argument 'y': expected shape \(2,\) "
                                         r"\(the shape of 'x'\), got \(3,\)"):
        evaluate(g, get_namespace("numpy"), {"a": np.ones(2), "c": np.ones(3)})
