"""DeepSeek-V2's router in the graph (``moe_router="softmax_group"``): the zoo member equal
node by node to the independent JAX model and through the pipeline; planted bugs in the model
(no rho, renormalised gates, V3's sum-of-two group score) named at the MoE output; the
options refused by field where they do not apply."""

from __future__ import annotations

from typing import Any

import pytest

from nlaverify import zoo
from nlaverify.config import ConfigError
from nlaverify.models import jax_moe
from nlaverify.pipeline import verify_pipeline
from tests.test_moe_graph import _first_divergence

_V2 = jax_moe._v2_gates


def test_graph_is_the_independent_model_node_by_node() -> None:
    cfg = zoo.zoo_config("deepseek-v2-like")
    node, seen = _first_divergence(cfg)
    assert node is None, node
    assert {"blocks.1.mlp.scores", "blocks.1.mlp.affinity", "blocks.1.mlp.out"} <= set(seen)


def test_pipeline_passes() -> None:
    report = verify_pipeline(zoo.zoo_config("deepseek-v2-like"), backends=("numpy", "jax"))
    assert report.ok, report.errors or report.model_divergence


def _no_rho(s: Any, cfg: Any) -> Any:
    w, idx = _V2(s, cfg)
    return w / cfg.routed_scaling_factor, idx


def _renormalised(s: Any, cfg: Any) -> Any:
    import jax.numpy as jnp

    w, idx = _V2(s, cfg)
    return cfg.routed_scaling_factor * w / jnp.sum(w, -1, keepdims=True), idx


def _group_sum_of_two(s: Any, cfg: Any) -> Any:
    """V3's group score (the sum of the two best) on V2's affinities."""
    import jax
    import jax.numpy as jnp

    n, E, G = s.shape[0], cfg.n_experts, cfg.n_group
    gs = jnp.sum(jax.lax.top_k(s.reshape(n, G, E // G), 2)[0], axis=-1)
    keep = jax.lax.top_k(gs, cfg.topk_group)[1]
    gm = jnp.zeros((n, G)).at[jnp.arange(n)[:, None], keep].set(1.0)
    w, idx = jax.lax.top_k(s * jnp.repeat(gm, E // G, axis=-1), cfg.top_k)
    return w * cfg.routed_scaling_factor, idx


@pytest.mark.parametrize("plant", [_no_rho, _renormalised, _group_sum_of_two])
def test_planted_bug_is_named_at_the_moe_output(monkeypatch, plant: Any) -> None:
    monkeypatch.setattr(jax_moe, "_v2_gates", plant)
    node, seen = _first_divergence(zoo.zoo_config("deepseek-v2-like"))
    assert node == "blocks.1.mlp.out"
    assert "blocks.1.mlp.affinity" in seen  # the affinities before it still agree


@pytest.mark.parametrize(("change", "field"), [
    ({"moe_renormalize": True}, "moe_renormalize"),
    ({"n_group": 4}, "n_group"),
    ({"topk_group": 4}, "topk_group"),
    ({"top_k": 5}, "top_k"),
    ({"d_shared_expert": 0}, "d_shared_expert"),
    ({"shared_expert_gate": True}, "shared_expert_gate"),
])
def test_options_refused_by_field(change: dict[str, Any], field: str) -> None:
    import dataclasses

    cfg = zoo.zoo_config("deepseek-v2-like")
    with pytest.raises(ConfigError, match=rf"TransformerConfig\.{field}"):
        dataclasses.replace(cfg, **change)


def test_groups_of_one_expert_allowed() -> None:
    """V2's max needs no second expert per group (V3's sum of two does)."""
    import dataclasses

    cfg = dataclasses.replace(zoo.zoo_config("deepseek-v2-like"), n_group=6, topk_group=3)
    assert _first_divergence(cfg)[0] is None
    with pytest.raises(ConfigError, match=r"TransformerConfig\.n_group"):
        dataclasses.replace(cfg, moe_router="sigmoid")
