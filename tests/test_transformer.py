"""The whole decoder-only Transformer: graph on every backend, the lowered jit and the
independent JAX model agree; a planted VJP error is located at its node; configs,
parameter counts and generation."""

from __future__ import annotations

import dataclasses
import json
import os

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlaverify.backends import get_namespace
from nlaverify.cli import main
from nlaverify.config import ConfigError, TransformerConfig, preset
from nlaverify.generate import generate_from_graph, generate_from_model
from nlaverify.graph.build import build_mlp, build_transformer, parameter_counts
from nlaverify.graph.compare import compare, jax_local_reference
from nlaverify.graph.core import evaluate
from nlaverify.graph.run import (
    autodiff_reference,
    graph_inputs,
    init_params,
    run_graph,
    sample_data,
)
from nlaverify.ops import registry
from nlaverify.pipeline import format_report, verify_pipeline
from nlaverify.strategies import transformer_configs
from nlaverify.tolerance import tolerance


# each example compiles two jitted functions: keep CI to a handful, nightly to many
@settings(max_examples=3 if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci" else 100)
@given(transformer_configs(), st.sampled_from([None, 1, 3]))
def test_every_subject_agrees_on_random_configs(cfg: TransformerConfig, batch) -> None:
    # graph on NumPy, JAX and mpmath (hand-derived VJPs, node by node) against JAX autodiff;
    # the lowered jit and the independent JAX model on loss, logits and every gradient;
    # one sequence, or a right-padded batch
    report = verify_pipeline(cfg, ("numpy", "jax", "mpmath"), seed=1, n=5, digits=30,
                             batch=batch)
    assert report.ok, format_report(report, per_node=False)
    assert len(report.end_to_end) == 6


def test_tiny_on_every_backend_including_graph_on_jax() -> None:
    report = verify_pipeline(preset("tiny"), ("numpy", "jax", "mpmath", "cupy"), n=6)
    assert report.ok, format_report(report)
    assert {c.subject for c in report.comparisons} >= {"numpy", "jax", "mpmath50"}
    text = format_report(report)
    assert "pipeline tiny:" in text and "error / bound" in text


@pytest.fixture(scope="session")
def tiny_setup():
    g = build_transformer(preset("tiny"))
    params = init_params(g, 2)
    data = sample_data(11, 5, 2)
    ref = autodiff_reference(g, params, data)
    return g, params, data, ref


@pytest.mark.parametrize(("node", "which"), [
    ("blocks.0.norm2", 0), ("blocks.0.norm2", 1), ("blocks.0.norm2", 2),
    ("blocks.1.attn.heads", 0), ("blocks.1.attn.heads", 1), ("blocks.1.attn.heads", 2),
    ("blocks.0.mlp.act", 0), ("blocks.1.attn.q", 0), ("blocks.1.attn.q", 1),
    ("blocks.1.attn.q", 2), ("final_norm", 0), ("logits", 0), ("logits", 1), ("embed", 0),
    ("blocks.0.attn.merged", 0), ("x0", 0), ("x0", 1), ("blocks.1.resid2", 1),
])
def test_planted_vjp_error_is_reported_at_that_node(tiny_setup, node: str, which: int) -> None:
    g, params, data, ref = tiny_setup
    g = g.copy()
    op = g.nodes[node]["op"]
    spec = registry.OPS[op]

    def wrong(xp, G, *args, **static):
        out = list(spec.vjp(xp, G, *args, **static))
        out[which] = out[which] * 1.5  # a wrong factor on one cotangent
        return tuple(out)

    registry.OPS["planted"] = dataclasses.replace(spec, name="planted", vjp=wrong)
    try:
        g.nodes[node]["op"] = "planted"
        local = jax_local_reference(g, ref) if which == 0 else None  # None: the default
        result = compare(g, run_graph(g, "numpy", params, data), ref, local_reference=local)
    finally:
        del registry.OPS["planted"]
    assert not result.ok
    assert result.faulty_vjp == node
    assert result.first_value_divergence is None  # the forward is untouched


def test_planted_forward_error_is_first_value_divergence(tiny_setup) -> None:
    g, params, data, ref = tiny_setup
    g = g.copy()
    spec = registry.OPS["gelu_tanh"]
    registry.OPS["planted"] = dataclasses.replace(
        spec, forward=lambda xp, x: spec.forward(xp, x) * 1.001)
    try:
        g.nodes["blocks.1.mlp.act"]["op"] = "planted"
        result = compare(g, run_graph(g, "numpy", params, data), ref)
    finally:
        del registry.OPS["planted"]
    assert result.first_value_divergence == "blocks.1.mlp.act"


@pytest.mark.parametrize(("changes", "field"), [
    ({"d_model": 10, "n_heads": 4}, "d_model"),
    ({"n_heads": 4, "n_kv_heads": 3}, "n_kv_heads"),
    ({"n_experts": 2, "top_k": 3}, "top_k"),
    ({"norm": "batchnorm"}, "norm"),
    ({"positions": "alibi"}, "positions"),
    ({"mlp": "reglu"}, "mlp"),
    ({"placement": "sandwich"}, "placement"),
    ({"vocab_size": 0}, "vocab_size"),
    ({"temperature": 0.0}, "temperature"),
    ({"n_experts": 2, "mlp_bias": True}, "mlp_bias"),
    ({"positions": "rope", "d_model": 6, "n_heads": 2}, "d_head"),
])
def test_invalid_configs_name_the_field(changes: dict, field: str) -> None:
    base = dict(vocab_size=5, d_model=8, n_heads=2, n_blocks=1, d_mlp=4)
    with pytest.raises(ConfigError, match=rf"TransformerConfig\.{field}:"):
        TransformerConfig(**{**base, **changes})


def test_parameter_counts_match_published_and_seed_figures() -> None:
    counts = {name: parameter_counts(build_transformer(preset(name))) for name in
              ("gpt2-small", "gpt3-175b", "llama3-405b-seed-table", "llama3-405b")}
    assert counts["gpt2-small"].total == 124_439_808
    gpt3 = counts["gpt3-175b"]
    assert gpt3.total == 175_191_908_352  # Baggag & Saad Table 3
    attn = sum(v for k, v in gpt3.by_component.items() if k.startswith("attention"))
    mlp = sum(v for k, v in gpt3.by_component.items() if k.startswith("mlp"))
    assert (attn, mlp) == (57_982_058_496, 115_970_015_232)
    assert gpt3.by_component["embedding"] + gpt3.by_component["unembedding"] == 1_235_116_032
    assert gpt3.by_component["norms.blocks"] == 4_718_592
    assert counts["llama3-405b-seed-table"].total == 405_872_984_064  # Table 4
    llama = counts["llama3-405b"].by_component
    assert llama["attention.W_K"] + llama["attention.W_V"] == 4_227_858_432
    assert llama["norms.final"] == 16_384 and counts["llama3-405b"].norms_per_block[0] == 32_768
    assert parameter_counts(build_mlp([400, 100, 100, 10])).total == 51_210


def test_graph_holds_shapes_not_arrays() -> None:
    g = build_transformer(preset("gpt3-175b"))
    for _, attrs in g.nodes(data=True):
        assert not any(isinstance(v, np.ndarray) for v in attrs.values())
    assert nx.is_directed_acyclic_graph(g)
    assert g.nodes["blocks.95.attn.q.W_Q"]["shape"] == (12288, 12288)


def test_mlp_graph_backprop_matches_seed_recursion() -> None:
    from nlaverify.ops.mlp import mlp_backprop

    sizes = [4, 3, 3, 2]
    g = build_mlp(sizes)
    params = init_params(g, 0)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((1, 4)), rng.standard_normal((1, 2))
    ev = run_graph(g, "numpy", params, {"x": x, "y": y})
    xp = get_namespace("numpy")
    Ws = [params[f"layer{k}.W"] for k in range(1, 4)]
    bs = [params[f"layer{k}.b"] for k in range(1, 4)]
    _, dW, db = mlp_backprop(xp, x[0], y[0], Ws, bs)
    tol = tolerance("float64", size=4, depth=8)
    for k in range(3):
        assert tol.compare(ev.cotangents[f"layer{k + 1}.W"], dW[k]).ok
        assert tol.compare(ev.cotangents[f"layer{k + 1}.b"], db[k]).ok


def test_exact_sympy_evaluation_of_a_tiny_graph() -> None:
    # exact values through embedding, positions, LayerNorm and causal attention; the
    # expressions grow fast, so the check stops after the first residual addition
    cfg = TransformerConfig(vocab_size=3, d_model=2, n_heads=1, n_blocks=1, d_mlp=2,
                            positions="learned", context=2, mlp="relu", norm_eps=2.0**-16,
                            name="exact")
    g = build_transformer(cfg)
    params = {k: np.round(v * 4) / 4 for k, v in init_params(g, 0).items()}
    data = {"tokens": np.array([0, 2]), "targets": np.array([2, 1])}
    xp = get_namespace("sympy")
    node = "blocks.0.resid1"
    exact = np.asarray(xp.without_shifts(evaluate(
        g, xp, graph_inputs(g, xp, params, data, "float64"), outputs=[node])[node]))
    ref = run_graph(g, "mpmath", params, data, digits=40).values[node]
    import sympy

    err = max(abs(float(e.evalf(45) - sympy.Float(str(r), 45)))
              for e, r in zip(exact.reshape(-1), np.asarray(ref).reshape(-1), strict=True))
    assert err <= tolerance("mpmath", size=8, depth=12, digits=40).rtol
    assert all(not sympy.sympify(e).free_symbols for e in exact.reshape(-1))


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_generation_graph_and_model_agree(temperature: float) -> None:
    cfg = preset("tiny")
    g = build_transformer(cfg)
    params = init_params(g, 4)
    a = generate_from_graph(g, params, [1, 5], 6, temperature=temperature, seed=3)
    b = generate_from_model(cfg, params, [1, 5], 6, temperature=temperature, seed=3)
    assert a == b and len(a) == 8
    with pytest.raises(ValueError, match="exceeds the context of 16"):
        generate_from_graph(g, params, [1] * 10, 10)


def test_params_cli(capsys) -> None:
    assert main(["params", "--preset", "gpt3-175b", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total"] == 175_191_908_352
    assert main(["params", "--preset", "nope"]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err


def test_committed_figure_is_current(repo_root) -> None:
    from nlaverify.graph.draw import to_svg

    svg = (repo_root / "docs" / "figures" / "tiny_graph.svg").read_text()
    assert svg == to_svg(build_transformer(preset("tiny")), "nlaverify: the tiny preset")


def test_structural_proofs_refute_planted_violations() -> None:
    from nlaverify.identities import transformer as T

    assert T.derive_permutation_equivariance().verdict == "proved"
    assert T.derive_causality().verdict == "proved"
    # positional ops are (correctly) not permutation equivariant: the negative control
    assert not any(T._equivariant(op) for op in sorted(T.POSITIONAL))
    scale, embed = registry.OPS["scale"], registry.OPS["embed"]

    def by_position(xp, x, c):  # a "scale" that treats row t differently: sees the order
        rows = xp.asarray([[t + 1] for t in range(x.shape[0])]) if not xp.object_arrays \
            else xp.asarray(np.arange(1, x.shape[0] + 1).reshape(-1, 1))
        return scale.forward(xp, x, c) * rows

    def reversed_embed(xp, tokens, W_E):  # reads the tokens back to front: not causal
        return embed.forward(xp, tokens[::-1], W_E)

    try:
        registry.OPS["scale"] = dataclasses.replace(scale, forward=by_position)
        assert T.derive_permutation_equivariance().verdict == "failed"
        registry.OPS["scale"] = scale
        registry.OPS["embed"] = dataclasses.replace(embed, forward=reversed_embed)
        assert T.derive_causality().verdict == "failed"
    finally:
        registry.OPS["scale"], registry.OPS["embed"] = scale, embed


def test_float32_graph_stays_float32_and_agrees() -> None:
    cfg = TransformerConfig(vocab_size=7, d_model=8, n_heads=4, n_kv_heads=2, n_blocks=1,
                            d_mlp=6, norm="rmsnorm", positions="rope", mlp="swiglu",
                            n_experts=3, top_k=2, context=8, name="f32")
    g = build_transformer(cfg)
    params, data = init_params(g, 5), sample_data(7, 6, 5)
    ev32 = run_graph(g, "numpy", params, data, dtype="float32")
    ev64 = run_graph(g, "mpmath", params, data, digits=30)
    for name, v in {**ev32.values, **ev32.cotangents}.items():
        if g.nodes[name].get("dtype") != "int":
            assert np.asarray(v).dtype == np.float32, name
    result = compare(g, ev32, ev64)
    assert result.ok, (result.first_value_divergence, result.first_cotangent_divergence)
