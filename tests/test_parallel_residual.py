r"""Issue 23 (item 1): the parallel attention + MLP block (``parallel_residual``),
:math:`x \leftarrow x + \operatorname{Attn}(N_1(x)) + \operatorname{MLP}(N(x))`, with one
shared norm (GPT-J, Wang & Komatsuzaki 2021; Falcon-7B; Cohere) or GPT-NeoX's two (Black et
al. 2022): the graph node by node against the independent JAX model, the planted bug (the MLP
on the updated stream, the sequential block) named at its node, the parameter count.

No new op: the block is a rewiring of proved ones (norms, attention, MLP, ``residual_add``);
the independent oracle is the JAX model, which sums :math:`x + (a + m)` where the graph sums
:math:`(x + a) + m`.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import pytest

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.graph.compare import accumulation_length
from nlaverify.graph.run import init_params, run_graph, sample_data
from nlaverify.models import jax_transformer as model
from nlaverify.tolerance import magnitude_condition, tolerance
from nlaverify.zoo import zoo_config

NEOX = zoo_config("parallel-neox")
GPTJ = NEOX.replace(parallel_norms=1, name="parallel-gptj")


@pytest.mark.parametrize("cfg", [NEOX, GPTJ], ids=["neox", "gptj"])
def test_graph_wiring(cfg: TransformerConfig) -> None:
    g = build_transformer(cfg)
    # the MLP reads the shared norm1 (GPT-J) or NeoX's norm2, and that norm the block's input
    mlp_norm = "blocks.0.norm1" if cfg.parallel_norms == 1 else "blocks.0.norm2"
    assert "blocks.0.mlp.in" in g.successors(mlp_norm)
    assert ("blocks.0.norm2" in g) == (cfg.parallel_norms == 2)
    assert "x0" in g.predecessors(mlp_norm)
    # both sublayers write into one sum: resid2 = (x + a) + m, with x the block's input
    assert set(g.predecessors("blocks.0.resid2")) == {"blocks.0.resid1", "blocks.0.mlp.out"}


@pytest.mark.parametrize("cfg", [NEOX, GPTJ], ids=["neox", "gptj"])
def test_verified_node_by_node(cfg: TransformerConfig) -> None:
    from nlaverify.pipeline import verify_pipeline

    report = verify_pipeline(cfg, ("numpy", "jax"))
    assert report.ok, report.errors
    assert {label for label, *_ in report.end_to_end} >= {"independent JAX model"}


@pytest.mark.parametrize("cfg", [NEOX, GPTJ], ids=["neox", "gptj"])
def test_independent_model_equals_every_block_node(cfg: TransformerConfig) -> None:
    g = build_transformer(cfg)
    params, data = init_params(g, 5), sample_data(cfg.vocab_size, 6, 5)
    ev = run_graph(g, "numpy", params, data)
    rec = model.intermediates({k: jnp.asarray(v) for k, v in params.items()}, data["tokens"],
                              cfg)
    nodes = [f"blocks.{b}.{s}" for b in range(cfg.n_blocks)
             for s in ("norm1", "attn.out", "mlp.out", "resid1", "resid2")]
    nodes += [f"blocks.{b}.norm2" for b in range(cfg.n_blocks)] if cfg.parallel_norms == 2 \
        else []
    for node in nodes:
        ref = ev.values[node]
        tol = tolerance("float64", size=16, depth=30, condition=magnitude_condition(ref))
        assert tol.compare(rec[node], ref).ok, node


def _first_divergence(cfg: TransformerConfig) -> str | None:
    from nlaverify.pipeline import _first_model_divergence

    g = build_transformer(cfg)
    params, data = init_params(g, 0), sample_data(cfg.vocab_size, 6, 0)
    ref = run_graph(g, "numpy", params, data)
    jp = {k: jnp.asarray(v) for k, v in params.items()}
    return _first_model_divergence(g, ref, jp, data, cfg, accumulation_length(g, 6),
                                   2 * (4 * cfg.n_blocks + 6))


def _stream_in(rec: dict[str, Any], b: str) -> Any:
    """The stream entering block ``b`` (``x0`` or the previous block's ``resid2``)."""
    layer = int(b.split(".")[1])
    return rec["x0"] if layer == 0 else rec[f"blocks.{layer - 1}.resid2"]


@pytest.mark.parametrize("cfg", [NEOX, GPTJ], ids=["neox", "gptj"])
def test_planted_mlp_on_the_updated_stream_is_named(monkeypatch, cfg: TransformerConfig
                                                    ) -> None:
    # the planted bug: the model's MLP reads N(x + Attn(N1(x))), the stream already updated
    # by attention (the sequential block), not N(x); every other node is untouched, and the
    # first node where model and graph part is the MLP's input projection
    assert _first_divergence(cfg) is None
    real_mlp = model._mlp

    def late_mlp(p: Any, name: str, x: Any, c: TransformerConfig, rec: Any) -> Any:
        b = name.rsplit(".", 1)[0]
        updated = _stream_in(rec, b) + model._mix(p, b, rec[f"{b}.norm1"], c, {},
                                                  int(b.split(".")[1]), 0)
        norm = f"{b}.norm2" if c.parallel_norms == 2 else f"{b}.norm1"
        return real_mlp(p, name, model._norm(p, norm, updated, c), c, rec)

    monkeypatch.setattr(model, "_mlp", late_mlp)
    assert _first_divergence(cfg) == "blocks.0.mlp.in"


def test_parameter_count_of_a_parallel_block() -> None:
    # one LayerNorm fewer per block with the shared norm (GPT-J); NeoX keeps two
    counts = {c.parallel_norms: parameter_counts(build_transformer(c)) for c in (NEOX, GPTJ)}
    d = NEOX.d_model
    assert counts[2].total - counts[1].total == NEOX.n_blocks * 2 * d
    seq = parameter_counts(build_transformer(NEOX.replace(parallel_residual=False)))
    assert seq.total == counts[2].total


@pytest.mark.parametrize(("changes", "field"), [
    ({"parallel_residual": True, "placement": "post"}, "parallel_residual"),
    ({"parallel_residual": 1}, "parallel_residual"),
    ({"parallel_residual": True, "parallel_norms": 3}, "parallel_norms"),
    ({"parallel_norms": True}, "parallel_norms")])
def test_bad_parallel_options_are_named(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=f"TransformerConfig.{field}"):
        TransformerConfig(vocab_size=5, d_model=4, n_heads=1, n_blocks=1, d_mlp=4, **changes)


def test_parallel_fields_change_graph_and_model_alike() -> None:
    from nlaverify.zoo import check_field_effects

    for effect in check_field_effects(["parallel_residual", "parallel_norms"]):
        assert effect.ok, effect
