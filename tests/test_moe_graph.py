"""The released routers in the graph (issue 23): Qwen2-MoE's gated shared expert and dense
layer, DeepSeek-V3's sigmoid router with groups, load-balancing bias and rho, and an ungated
shared expert, each equal node by node to the independent JAX model (:mod:`nlaverify.models.
jax_moe`) and through the whole pipeline; planted bugs are named at the node where they act;
the bias is a constant, not a parameter; the options are refused where they do not apply."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nlaverify import zoo
from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.config_moe import activated_parameters, routing_bias
from nlaverify.graph.build import build_transformer, graph_constants, parameter_counts
from nlaverify.graph.run import init_params, run_graph, sample_data
from nlaverify.models import jax_moe
from nlaverify.models import jax_transformer as model
from nlaverify.pipeline import verify_pipeline
from nlaverify.tolerance import magnitude_condition, tolerance

MEMBERS = ("qwen2-moe-like", "deepseek-v3-like", "moe-shared-ungated")


def _first_divergence(cfg: TransformerConfig) -> tuple[str | None, list[str]]:
    """The first node (graph order) where the model's intermediates and the graph's NumPy
    values part, and the nodes compared."""
    import networkx as nx

    g = build_transformer(cfg)
    params = init_params(g, 3)
    data = sample_data(cfg.vocab_size, min(6, cfg.context), 3)
    ev = run_graph(g, "numpy", params, {**graph_constants(g), **data})
    rec = model.intermediates({k: np.asarray(v) for k, v in params.items()}, data["tokens"],
                              cfg, data["targets"])
    assert set(rec) <= set(g)
    seen = []
    for node in nx.topological_sort(g):
        if node not in rec:
            continue
        seen.append(node)
        e = np.asarray(ev.values[node], dtype=np.float64)
        tol = tolerance("float64", size=16, depth=40,
                        condition=magnitude_condition(e, power=1))
        if np.shape(rec[node]) != e.shape or not tol.compare(rec[node], e).ok:
            return node, seen
    return None, seen


@pytest.mark.parametrize("name", MEMBERS)
def test_graph_is_the_independent_model_node_by_node(name: str) -> None:
    cfg = zoo.zoo_config(name)
    node, seen = _first_divergence(cfg)
    assert node is None, node
    sparse = f"blocks.{cfg.n_blocks - 1}.mlp"
    assert {f"{sparse}.scores", f"{sparse}.out"} <= set(seen)
    if cfg.moe_router == "sigmoid":
        assert f"{sparse}.affinity" in seen


@pytest.mark.parametrize("name", MEMBERS[:2])
def test_pipeline_passes(name: str) -> None:
    report = verify_pipeline(zoo.zoo_config(name), backends=("numpy", "jax"))
    assert report.ok, report.errors or report.model_divergence


def _dropped_gate(p: Any, name: str, x: Any, cfg: TransformerConfig) -> Any:
    return jax_moe._swiglu(x, p[f"{name}.U1"], p[f"{name}.U3"], p[f"{name}.U2"])


def _no_rho(s: Any, bias: Any, cfg: TransformerConfig) -> Any:
    w, idx = _SIGMOID(s, bias, cfg)
    return w / cfg.routed_scaling_factor, idx


def _bias_weighs(s: Any, bias: Any, cfg: TransformerConfig) -> Any:
    w, idx = _SIGMOID(s, bias, cfg)
    import jax.numpy as jnp

    b = jnp.take_along_axis(jnp.broadcast_to(bias, s.shape), idx, axis=-1)
    s_at = w / cfg.routed_scaling_factor * jnp.sum(jnp.take_along_axis(s, idx, axis=-1), -1,
                                                   keepdims=True)
    biased = s_at + b
    return cfg.routed_scaling_factor * biased / jnp.sum(biased, -1, keepdims=True), idx


_SIGMOID = jax_moe._sigmoid_gates


@pytest.mark.parametrize(("member", "attr", "plant"), [
    ("qwen2-moe-like", "_shared_expert", _dropped_gate),
    ("deepseek-v3-like", "_sigmoid_gates", _no_rho),
    ("deepseek-v3-like", "_sigmoid_gates", _bias_weighs),
])
def test_planted_bug_is_named_at_the_moe_output(monkeypatch, member: str, attr: str,
                                                plant: Any) -> None:
    monkeypatch.setattr(jax_moe, attr, plant)
    cfg = zoo.zoo_config(member)
    node, seen = _first_divergence(cfg)
    assert node == "blocks.1.mlp.out"
    assert "blocks.1.mlp.scores" in seen  # the router logits before it still agree


def test_bias_ignored_by_the_selection_is_named(monkeypatch) -> None:
    """The graph's selection without the bias: the model parts at the block's output."""
    import nlaverify.graph.build_moe as build_moe

    monkeypatch.setattr(build_moe, "routing_bias", lambda cfg, layer: np.zeros(
        cfg.n_experts))
    node, _ = _first_divergence(zoo.zoo_config("deepseek-v3-like"))
    assert node == "blocks.1.mlp.out"


def test_bias_is_a_constant_not_a_parameter() -> None:
    cfg = zoo.zoo_config("deepseek-v3-like")
    g = build_transformer(cfg)
    consts = graph_constants(g)
    assert set(consts) == {"blocks.1.mlp.e_bias"}
    assert np.array_equal(consts["blocks.1.mlp.e_bias"], routing_bias(cfg, 1))
    assert "blocks.1.mlp.e_bias" not in init_params(g, 0)
    counts = parameter_counts(g)
    d, E, m, f = cfg.d_model, cfg.n_experts, cfg.moe_intermediate_size, cfg.d_shared_expert
    assert counts.by_component["moe.router"] == d * E
    assert counts.by_component["moe.experts"] == 3 * E * d * m
    assert counts.by_component["moe.shared_expert"] == 3 * d * f
    dense = sum(v for k, v in counts.by_component.items() if k.startswith("mlp."))
    assert dense == 3 * d * cfg.d_mlp  # block 0
    act = activated_parameters(cfg, counts.total, counts.by_component["moe.experts"])
    assert counts.total - act == (E - cfg.top_k) * 3 * d * m


def test_qwen_shared_gate_is_counted() -> None:
    cfg = zoo.zoo_config("qwen2-moe-like")
    counts = parameter_counts(build_transformer(cfg))
    assert counts.by_component["moe.shared_expert_gate"] == cfg.d_model
    assert not graph_constants(build_transformer(cfg))


@pytest.mark.parametrize(("changes", "field"), [
    ({"d_shared_expert": 4}, "d_shared_expert"),  # no experts
    ({"n_experts": 4, "top_k": 2, "routed_scaling_factor": 2.0}, "routed_scaling_factor"),
    ({"n_experts": 4, "top_k": 2, "mlp": "swiglu", "moe_router": "sigmoid"},
     "d_shared_expert"),
    ({"n_experts": 4, "top_k": 2, "mlp": "swiglu", "moe_router": "sigmoid",
      "d_shared_expert": 2, "n_group": 3}, "n_group"),
    ({"n_experts": 4, "top_k": 3, "mlp": "swiglu", "moe_router": "sigmoid",
      "d_shared_expert": 2, "n_group": 2}, "top_k"),
    ({"n_experts": 4, "top_k": 2, "mlp": "relu", "d_shared_expert": 2}, "mlp"),
    ({"n_experts": 4, "top_k": 2, "mlp": "swiglu", "shared_expert_gate": True},
     "shared_expert_gate"),
    ({"n_experts": 4, "top_k": 2, "moe_dense_layers": (1,)}, "moe_dense_layers"),
    # review of issue 23: accepted before, and (1, 0) != (0, 1) though the same model (an HF
    # round trip, mlp_only_layers read back in order, gave a config unequal to its source)
    ({"n_experts": 4, "top_k": 2, "n_blocks": 2, "moe_dense_layers": (1, 0)},
     "moe_dense_layers"),
    ({"n_experts": 4, "top_k": 2, "moe_router": "top1"}, "moe_router"),
])
def test_options_are_refused_where_they_do_not_apply(changes: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=f"TransformerConfig.{field}"):
        TransformerConfig(**{**dict(vocab_size=11, d_model=8, n_heads=2, n_blocks=1, d_mlp=8),
                             **changes})


@pytest.mark.parametrize(("name", "renormalize"), [("deepseek-v3-like", False),
                                                   ("qwen2-moe-like", True)])
def test_renormalisation_under_the_released_routers(name: str, renormalize: bool) -> None:
    """``moe_renormalize`` flipped from the member's (DeepSeek-V3's ``norm_topk_prob=False``:
    gates :math:`\\rho s_e`; Qwen2-MoE's ``True``: ``qwen2_moe_norm``): graph and model agree
    node by node, and the flag changes the block's output. Review of issue 23: the graph
    passing ``renormalize=True`` to ``deepseek_v3_moe`` whatever the flag, or the model
    always renormalising the sigmoid gates, passed every other test (no member has the sigmoid
    router unrenormalised)."""
    cfg = zoo.zoo_config(name)
    flipped = cfg.replace(moe_renormalize=renormalize)
    node, seen = _first_divergence(flipped)
    assert node is None, node
    assert f"blocks.{cfg.n_blocks - 1}.mlp.out" in seen
    outs = []
    for c in (cfg, flipped):
        g = build_transformer(c)
        data = sample_data(c.vocab_size, min(6, c.context), 3)
        ev = run_graph(g, "numpy", init_params(g, 3), {**graph_constants(g), **data})
        outs.append(np.asarray(ev.values[f"blocks.{c.n_blocks - 1}.mlp.out"]))
    assert not np.allclose(*outs)


def test_low_precision_run_is_within_the_tolerance_model() -> None:
    """bfloat16 against float64 node by node (the MoE blocks keep the stage model: routing
    ops); the routing bias is exact in bfloat16, so the run holds the reference's bias."""
    from nlaverify.precision import measure, prepare, run_subject

    setup = prepare(zoo.zoo_config("deepseek-v3-like"), "bfloat16", seed=1)
    rep = measure(setup, run_subject(setup))
    assert rep.ok, (rep.first_value_divergence, rep.first_cotangent_divergence)


def test_an_unrepresentable_bias_would_show_at_its_constant(monkeypatch) -> None:
    import nlaverify.graph.build_moe as build_moe
    from nlaverify.precision import measure, prepare, run_subject

    monkeypatch.setattr(build_moe, "routing_bias", lambda cfg, layer: routing_bias(
        cfg, layer) + 0.01)
    setup = prepare(zoo.zoo_config("deepseek-v3-like"), "bfloat16", seed=2)  # not cached
    assert measure(setup, run_subject(setup)).first_value_divergence == "blocks.1.mlp.e_bias"
