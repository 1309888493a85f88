"""Blame goes where the error is (issue 24, item 2): a forward that diverges on one backend
makes every cotangent downstream diverge too; the comparison names the first divergent
value and blames no VJP (it used to blame the VJP at ``loss``), while a wrong VJP on correct
values is still located at its op."""

from __future__ import annotations

import dataclasses

import pytest

from nlaverify.config import preset
from nlaverify.graph.build import build_transformer
from nlaverify.graph.compare import compare
from nlaverify.graph.run import autodiff_reference, init_params, run_graph, sample_data
from nlaverify.ops import registry


@pytest.mark.parametrize("scale", [1e4, 3.0])
def test_a_diverged_value_is_blamed_not_a_vjp(monkeypatch, scale) -> None:
    def plant(spec):
        def forward(xp, x, g, b, eps):  # eps mis-scaled on NumPy only (a backend's bug)
            return spec.forward(xp, x, g, b, eps * (scale if xp.name == "numpy" else 1))
        return {"forward": forward}

    spec = registry.OPS["layernorm"]
    monkeypatch.setitem(registry.OPS, "layernorm",
                        dataclasses.replace(spec, **plant(spec)))
    cfg = preset("tiny")
    g = build_transformer(cfg)
    params, data = init_params(g, 0), sample_data(cfg.vocab_size, 6, 0)
    c = compare(g, run_graph(g, "numpy", params, data), autodiff_reference(g, params, data))
    assert not c.ok and c.first_value_divergence == "blocks.0.norm1"
    assert c.faulty_vjp is None


def test_a_wrong_vjp_on_right_values_is_still_located(monkeypatch) -> None:
    spec = registry.OPS["layernorm"]

    def vjp(xp, G, x, g, b, eps):
        dx, dg, db = spec.vjp(xp, G, x, g, b, eps)
        return (-dx if xp.name == "numpy" else dx), dg, db

    monkeypatch.setitem(registry.OPS, "layernorm", dataclasses.replace(spec, vjp=vjp))
    cfg = preset("tiny")
    g = build_transformer(cfg)
    params, data = init_params(g, 0), sample_data(cfg.vocab_size, 6, 0)
    c = compare(g, run_graph(g, "numpy", params, data), autodiff_reference(g, params, data))
    assert c.first_value_divergence is None and c.faulty_vjp == "final_norm"
