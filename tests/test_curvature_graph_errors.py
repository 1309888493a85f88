"""Curvature of a graph model: bad input is a clear error naming the node, parameter or
argument at fault, and a loss that is no likelihood has a GGN and a Hessian but no Fisher
(the reference of the Hessian written out: :math:`3 X^\\top X` per column)."""

from __future__ import annotations

import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest
from test_curvature_graph import flat, transformer_case

from nlaverify.config import preset
from nlaverify.curvature.graph import (
    curvature_problem,
    empirical_fisher_vp,
    fisher_vp,
    ggn_vp,
    jacobian_tvp,
)
from nlaverify.curvature.operators import curvature_tolerance, dense, linear_operator
from nlaverify.errors import ArgumentError, ShapeError, UnknownNameError
from nlaverify.graph.core import add_input, add_op


def scaled_loss_graph() -> nx.DiGraph:
    """A loss that is no likelihood: 3 x (1/2 squared error), output a ``scale`` node."""
    g = nx.DiGraph()
    add_input(g, "x", ("n", 2))
    add_input(g, "y", ("n", 2))
    g.add_node("W", kind="param", shape=(2, 2), block=None, component="w",
               init=("normal", 1.0))
    add_op(g, "z", "linear", ["x", "W"])
    add_op(g, "sq", "half_squared_error", ["z", "y"])
    add_op(g, "loss", "scale", ["sq"], c=3.0)
    return g


def test_a_loss_without_likelihood_has_no_fisher() -> None:
    g = scaled_loss_graph()
    rng = np.random.default_rng(0)
    params = {"W": rng.standard_normal((2, 2))}
    data = {"x": rng.standard_normal((3, 2)), "y": rng.standard_normal((3, 2))}
    problem = curvature_problem(g, "jax", params, data)
    assert problem.likelihood is None and problem.logits == "sq"
    v = rng.standard_normal(problem.size)
    for call in (lambda: fisher_vp(problem, v), lambda: fisher_vp(problem, v, samples=4),
                 lambda: empirical_fisher_vp(problem, v), lambda: dense(problem, "fisher")):
        with pytest.raises(ArgumentError, match=r"loss node 'loss' \(op 'scale'\).*likelihood"):
            call()
    # the GGN is still defined: split at 'sq', the last op (scale) is linear, so H_L = 0
    assert np.all(flat(problem, ggn_vp(problem, v)) == 0)
    # the Hessian is: 3 x the Gauss-Newton matrix of the linear model, 3 X^T X per column
    H = dense(problem, "hessian")
    X = data["x"]
    assert curvature_tolerance(problem).compare(H, 3 * np.kron(X.T @ X, np.eye(2))).ok
    with pytest.raises(ArgumentError, match="only the 'jax' backend"):
        ggn_vp(curvature_problem(g, "numpy", params, data), v)


def test_bad_selections_and_vectors_are_clear_errors() -> None:
    g, params, data = transformer_case(preset("tiny"), 2, None, 0)
    with pytest.raises(ArgumentError, match=r"block 5: expected one of 0, 1"):
        curvature_problem(g, "numpy", params, data, block=5)
    with pytest.raises(UnknownNameError, match=r"did you mean 'blocks\.0\.attn\.q\.W_Q'"):
        curvature_problem(g, "numpy", params, data, select=["blocks.0.attn.q.W_q"])
    with pytest.raises(ArgumentError, match="not both"):
        curvature_problem(g, "numpy", params, data, block=0, select=["embed.W_E"])
    with pytest.raises(UnknownNameError, match="unknown output node"):
        curvature_problem(g, "numpy", params, data, output="los")
    with pytest.raises(ArgumentError, match="expected an op node"):
        curvature_problem(g, "numpy", params, data, output="tokens")
    with pytest.raises(ShapeError, match="expected a scalar loss"):
        curvature_problem(g, "numpy", params, data, output="logits")
    problem = curvature_problem(g, "numpy", params, data, select=["unembed.W_U"])
    assert problem.size == 8 * 11
    with pytest.raises(ShapeError, match=r"expected a vector of shape \(88,\)"):
        ggn_vp(problem, np.ones(87))
    with pytest.raises(ShapeError, match=r"parameter 'unembed.W_U': expected shape \(8, 11\)"):
        ggn_vp(problem, {"unembed.W_U": np.ones((11, 8))})
    with pytest.raises(UnknownNameError, match="not a selected parameter"):
        ggn_vp(problem, {"unembed.W_U": np.ones((8, 11)), "embed.W_E": np.ones((11, 8))})
    with pytest.raises(ShapeError, match="expected the shape of the logits node"):
        jacobian_tvp(problem, np.ones(3))
    with pytest.raises(ArgumentError, match="curvature kind 'gnn'"):
        dense(problem, "gnn")
    with pytest.raises(ArgumentError, match="'samples' is for the Monte-Carlo Fisher"):
        dense(problem, "ggn", samples=4)
    with pytest.raises(ArgumentError, match="positive integer"):
        fisher_vp(problem, np.ones(88), samples=0)
    with pytest.raises(ArgumentError, match="needs the 'jax' backend"):
        linear_operator(problem, "ggn")
    op = linear_operator(curvature_problem(g, "jax", params, data, select=["unembed.W_U"]))
    with pytest.raises(ShapeError, match=r"ggn operator: expected a vector of shape \(88,\)"):
        op(jnp.ones(89))
