"""K-FAC on graph models against the dense GGN of :mod:`nlaverify.curvature.operators`
(forward-mode Jacobian and the loss Hessian: a route that shares nothing with the K-FAC
seeds): exact where the theory says so (one sample; deep linear networks with squared error,
any batch; expand with weights shared over positions), reported as not exact elsewhere (a
tanh network, the Transformer)."""

from __future__ import annotations

import jax
import networkx as nx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nlaverify.backends import to_float64
from nlaverify.config import preset
from nlaverify.curvature.graph import curvature_problem
from nlaverify.curvature.kfac import kfac_block
from nlaverify.curvature.kfac_graph import (
    exact_blocks,
    kfac_errors,
    layer_factors,
    linear_layers,
    output_seeds,
)
from nlaverify.curvature.operators import dense
from nlaverify.errors import ArgumentError
from nlaverify.graph.build import build_mlp, build_transformer
from nlaverify.graph.core import add_input, add_op
from nlaverify.graph.run import init_params, sample_data
from nlaverify.tolerance import tolerance

jax.config.update("jax_enable_x64", True)
#: small graphs run eagerly on NumPy (no compilation); the JAX path is the same code, traced
BACKEND = "numpy"


def deep_linear(sizes: list[int], *, bias: bool = False) -> nx.DiGraph:
    r"""A deep linear network :math:`x W_1 W_2 \cdots` (optional biases) with the loss
    :math:`\tfrac12\lVert\hat y - y\rVert^2`. Inputs ``(n, d)`` rows, or ``(B, R, d)``:
    every position its own loss, the weights shared over positions (the expand setting)."""
    g = nx.DiGraph(config=None)
    add_input(g, "x", ("n", sizes[0]))
    add_input(g, "y", ("n", sizes[-1]))
    z = "x"
    for k in range(1, len(sizes)):
        W = f"layer{k}.W"
        g.add_node(W, kind="param", shape=(sizes[k - 1], sizes[k]), component="mlp",
                   init=("normal", 0.7), block=None)
        if bias:
            b = f"layer{k}.b"
            g.add_node(b, kind="param", shape=(sizes[k],), component="mlp",
                       init=("normal", 0.3), block=None)
            z = add_op(g, f"layer{k}", "affine", [z, W, b])
        else:
            z = add_op(g, f"layer{k}", "linear", [z, W])
    add_op(g, "loss", "half_squared_error", [z, "y"])
    return g


def _layer_block(problem_args: tuple, layer) -> np.ndarray:
    graph, params, data = problem_args
    select = [layer.weight] + ([layer.bias] if layer.bias else [])
    return to_float64(dense(curvature_problem(graph, BACKEND, params, data, select=select), "ggn"))


def _compare(graph: nx.DiGraph, params: dict, data: dict, mode: str = "expand"
             ) -> list[tuple[str, bool, float, float]]:
    problem = curvature_problem(graph, BACKEND, params, data)
    out = []
    for node, f in layer_factors(problem, mode=mode).items():
        K = to_float64(kfac_block(problem.xp, f.A, f.G))
        E = _layer_block((graph, params, data), f.layer)
        tol = tolerance("float64", size=int(E.shape[0]), depth=4,
                        condition=max(1.0, float(np.abs(E).max())))
        c = tol.compare(K, E)
        out.append((node, c.ok, c.normwise, tol.rtol))
    return out


@given(sizes=st.lists(st.integers(1, 3), min_size=3, max_size=4), rows=st.integers(1, 4),
       bias=st.booleans(), seed=st.integers(0, 2**16))
def test_deep_linear_squared_error_exact_any_batch(sizes, rows, bias, seed) -> None:
    g = deep_linear(sizes, bias=bias)
    rng = np.random.default_rng(seed)
    params = init_params(g, seed)
    data = {"x": rng.standard_normal((rows, sizes[0])),
            "y": rng.standard_normal((rows, sizes[-1]))}
    for node, ok, err, rtol in _compare(g, params, data):
        assert ok, f"{node}: K-FAC vs exact GGN block {err:.3e} > {rtol:.3e}"


@given(B=st.integers(1, 3), R=st.integers(2, 4), seed=st.integers(0, 2**16))
def test_expand_exact_for_shared_weights_over_positions(B, R, seed) -> None:
    sizes = [2, 3, 2]
    g = deep_linear(sizes)
    rng = np.random.default_rng(seed)
    params = init_params(g, seed)
    data = {"x": rng.standard_normal((B, R, sizes[0])),
            "y": rng.standard_normal((B, R, sizes[-1]))}
    for node, ok, err, rtol in _compare(g, params, data, "expand"):
        assert ok, f"{node}: K-FAC-expand vs exact GGN block {err:.3e} > {rtol:.3e}"


def test_one_sample_exact_even_with_a_nonlinearity() -> None:
    g = build_mlp([3, 4, 2])
    rng = np.random.default_rng(0)
    params = init_params(g, 0)
    data = {"x": rng.standard_normal((1, 3)), "y": rng.standard_normal((1, 2))}
    assert all(ok for _, ok, _, _ in _compare(g, params, data))


def test_one_position_cross_entropy_exact() -> None:
    cfg = preset("tiny")
    g = build_transformer(cfg)
    params = init_params(g, 1)
    data = sample_data(cfg.vocab_size, 1, 1)
    problem = curvature_problem(g, BACKEND, params, data, select=["unembed.W_U"])
    f = layer_factors(problem)["logits"]
    K = to_float64(kfac_block(problem.xp, f.A, f.G))
    E = to_float64(dense(problem, "ggn"))
    tol = tolerance("float64", size=K.shape[0], depth=4)
    assert tol.compare(K, E).ok


def test_not_exact_is_reported_as_not_exact() -> None:
    # a tanh network with a batch: the hidden layer's K-FAC block misses the exact one
    g = build_mlp([3, 4, 2])
    rng = np.random.default_rng(0)
    params = init_params(g, 0)
    data = {"x": rng.standard_normal((5, 3)), "y": rng.standard_normal((5, 2))}
    rows = {node: (ok, err, rtol) for node, ok, err, rtol in _compare(g, params, data)}
    ok, err, rtol = rows["layer1"]
    assert not ok and err > 1e6 * rtol, (err, rtol)
    # the last layer of a squared-error MLP is exact (its output Hessian is the identity)
    assert rows["layer2"][0]


def test_transformer_blocks_exact_reference_and_errors() -> None:
    cfg = preset("tiny")
    g = build_transformer(cfg)
    params = init_params(g, 0)
    data = sample_data(cfg.vocab_size, 3, 0, batch=2)
    problem = curvature_problem(g, BACKEND, params, data, block=1)
    layers = linear_layers(problem)
    assert [ly.node for ly in layers] == [f"blocks.1.{n}" for n in
                                          ("attn.q", "attn.k", "attn.v", "attn.out", "mlp.in",
                                           "mlp.out")]
    exact = exact_blocks(problem)
    for layer in layers[:3]:  # the exact seeds' block is the dense GGN block
        E = _layer_block((g, params, data), layer)
        tol = tolerance("float64", size=E.shape[0], depth=4)
        assert tol.compare(to_float64(exact[layer.node]), E).ok, layer.node
    errors = kfac_errors(problem)
    assert {e.mode for e in errors} == {"expand", "reduce"}
    assert all(e.relative_error > 1e-3 for e in errors)  # attention mixes positions


def test_monte_carlo_factors_converge_to_exact() -> None:
    g = build_mlp([2, 3, 3])
    rng = np.random.default_rng(4)
    params = init_params(g, 4)
    data = {"x": rng.standard_normal((3, 2)), "y": rng.standard_normal((3, 3))}
    problem = curvature_problem(g, BACKEND, params, data)
    exact = layer_factors(problem)
    errs = []
    for S in (64, 1024):
        mc = layer_factors(problem, samples=S, seed=S)
        errs.append(max(float(np.abs(to_float64(mc[n].G) - to_float64(exact[n].G)).max())
                        / float(np.abs(to_float64(exact[n].G)).max()) for n in exact))
    # relative error of a mean of S i.i.d. terms ~ c / sqrt(S): 16x the samples, 4x smaller
    assert errs[1] < errs[0] / 2, errs


def test_bad_input() -> None:
    g = build_mlp([2, 2])
    params = init_params(g, 0)
    data = {"x": np.ones((2, 2)), "y": np.zeros((2, 2))}
    problem = curvature_problem(g, BACKEND, params, data, select=["layer1.b"])
    with pytest.raises(ArgumentError, match="none of the 1 selected parameters"):
        layer_factors(problem)
    problem = curvature_problem(g, BACKEND, params, data)
    with pytest.raises(ArgumentError, match="mode"):
        layer_factors(problem, mode="both")
    with pytest.raises(ArgumentError, match="modes"):
        kfac_errors(problem, modes=("expand", "sideways"))
    assert output_seeds(problem).shape == (2 * 2, 2, 2)


def test_jax_path_matches_numpy() -> None:
    g = build_mlp([2, 3, 2])
    rng = np.random.default_rng(5)
    params = init_params(g, 5)
    data = {"x": rng.standard_normal((3, 2)), "y": rng.standard_normal((3, 2))}
    ref = layer_factors(curvature_problem(g, "numpy", params, data))
    got = layer_factors(curvature_problem(g, "jax", params, data))
    for node, f in ref.items():
        for a, b in ((got[node].A, f.A), (got[node].G, f.G)):
            tol = tolerance("float64", size=int(np.shape(b)[0]), depth=3)
            assert tol.compare(a, b).ok, node


def test_planted_missing_average_is_caught(monkeypatch) -> None:
    import nlaverify.curvature.kfac_graph as kg

    real = kg.kfac_factors

    def summed(xp, A, G, **kw):  # A factor summed, not averaged over the N R positions
        Af, Gf = real(xp, A, G, **kw)
        return Af * (A.shape[0] * A.shape[1]), Gf

    monkeypatch.setattr(kg, "kfac_factors", summed)
    g = deep_linear([2, 2, 2])
    rng = np.random.default_rng(0)
    data = {"x": rng.standard_normal((3, 2)), "y": rng.standard_normal((3, 2))}
    assert not all(ok for _, ok, _, _ in _compare(g, init_params(g, 0), data))


def test_shared_weight_is_refused() -> None:
    g = nx.DiGraph(config=None)
    add_input(g, "x", ("n", 2))
    add_input(g, "y", ("n", 2))
    g.add_node("W", kind="param", shape=(2, 2), component="mlp", init=("normal", 0.7),
               block=None)
    add_op(g, "l1", "linear", ["x", "W"])
    add_op(g, "l2", "linear", ["l1", "W"])
    add_op(g, "loss", "half_squared_error", ["l2", "y"])
    rng = np.random.default_rng(0)
    data = {"x": rng.standard_normal((3, 2)), "y": rng.standard_normal((3, 2))}
    problem = curvature_problem(g, BACKEND, init_params(g, 0), data)
    with pytest.raises(ArgumentError, match=r"'W' feeds 2 nodes \(l1, l2\)"):
        layer_factors(problem)


def test_padding_is_left_out_of_the_input_factor() -> None:
    from nlaverify.curvature.kfac import kfac_factors
    from nlaverify.ops.loss import IGNORE_INDEX

    cfg = preset("tiny")
    g = build_transformer(cfg)
    data = sample_data(cfg.vocab_size, 4, 2, batch=3)  # right-padded: rows 1, 2 shorter
    assert (data["targets"] == IGNORE_INDEX).any()
    problem = curvature_problem(g, BACKEND, init_params(g, 2), data, block=0)
    f = layer_factors(problem)["blocks.0.attn.q"]
    a = to_float64(problem.values["blocks.0.norm1"])                    # (B, n, d)
    keep = data["targets"] != IGNORE_INDEX
    rows = np.concatenate([a[keep], np.ones((int(keep.sum()), 1))], axis=1)  # with bias
    tol = tolerance("float64", size=int(keep.sum()))
    assert tol.compare(to_float64(f.A), rows.T @ rows / keep.sum()).ok
    unmasked, _ = kfac_factors(problem.xp, problem.values["blocks.0.norm1"],
                               np.zeros((1, *a.shape[:-1], 1)), bias=True)
    assert not tol.compare(to_float64(unmasked), to_float64(f.A)).ok


def test_subsampled_positions_on_a_transformer() -> None:
    """``positions`` = every position is the full factors; fewer keep the shapes and are
    refused in the reduce mode (the subsampling is tested exactly in test_kronecker_kfac)."""
    cfg = preset("tiny")
    g = build_transformer(cfg)
    problem = curvature_problem(g, BACKEND, init_params(g, 0), sample_data(cfg.vocab_size, 5, 0))
    full = layer_factors(problem, samples=2, seed=1)
    same = layer_factors(problem, samples=2, seed=1, positions=5)
    some = layer_factors(problem, samples=2, seed=1, positions=2)
    for node, f in full.items():
        tol = tolerance("float64", size=int(np.shape(f.G)[0]), depth=3)
        assert tol.compare(to_float64(same[node].G), to_float64(f.G)).ok, node
        assert tol.compare(to_float64(same[node].A), to_float64(f.A)).ok, node
        assert np.shape(some[node].G) == np.shape(f.G)
        assert not tol.compare(to_float64(some[node].A), to_float64(f.A)).ok, node
    with pytest.raises(ArgumentError, match="mode='expand'"):
        layer_factors(problem, mode="reduce", positions=2)
