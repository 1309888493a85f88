"""``position_offset`` (issue 23; OPT, Zhang et al. 2022): a learned table of ``context + o``
rows, position p reading row p + o (Hugging Face ``OPTLearnedPositionalEmbedding``).

Oracles: explicit row indexing in NumPy for the op, JAX autodiff for its VJP (the
cross-check), the token-by-token decoder for the full forward, and the graph for the JAX
model. Each is made non-vacuous by a planted mistake: a VJP that drops the offset, a decoder
that forgets it.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.graph.compare import accumulation_length
from nlaverify.graph.run import init_params, run_graph, sample_data
from nlaverify.ops import embedding
from nlaverify.ops.registry import OPS
from nlaverify.tolerance import tolerance
from nlaverify.zoo import zoo_config

jax.config.update("jax_enable_x64", True)

SIZES = dict(vocab_size=7, d_model=8, n_heads=2, n_blocks=1, d_mlp=6, context=6)


@pytest.mark.parametrize(("changes", "match"), [
    ({"position_offset": -1}, r"expected an integer >= 0, got -1"),
    ({"position_offset": True}, r"expected an integer >= 0, got True"),
    ({"position_offset": 1.5}, r"expected an integer >= 0, got 1.5"),
    ({"position_offset": 2, "positions": "rope"}, r"expected positions='learned'.*'rope'"),
    ({"position_offset": 1, "positions": "sinusoidal"}, r"positions='sinusoidal'"),
    ({"position_offset": 1, "positions": "none"}, r"positions='none'"),
])
def test_bad_offsets_are_refused_by_name(changes: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=r"TransformerConfig\.position_offset: .*" + match):
        TransformerConfig(**{**SIZES, **changes})


def test_op_reads_rows_from_the_offset_and_places_the_cotangent_there() -> None:
    from nlaverify.backends import get_namespace

    xp = get_namespace("numpy")
    rng = np.random.default_rng(0)
    X, W, G = rng.standard_normal((2, 3, 4)), rng.standard_normal((7, 4)), rng.standard_normal(
        (2, 3, 4))
    for o in (0, 1, 2, 4):
        Y = embedding.add_learned_positions(xp, X, W, offset=o)
        assert np.array_equal(Y, X + np.stack([W[t + o] for t in range(3)]))
        gX, gW = embedding.add_learned_positions_vjp(xp, G, X, W, offset=o)
        want = np.zeros_like(W)
        want[o:o + 3] = G.sum(0)
        assert np.array_equal(gX, G) and np.array_equal(gW, want)
        dW = rng.standard_normal(W.shape)
        assert np.array_equal(embedding.add_learned_positions_jvp(xp, (None, dW), X, W,
                                                                  offset=o),
                              np.zeros_like(X) + dW[o:o + 3])
    with pytest.raises(ShapeError, match=r"context - offset=2 rows.*got 3"):
        embedding.add_learned_positions(xp, X, W, offset=5)
    with pytest.raises(ArgumentError, match=r"static 'offset': expected an integer >= 0"):
        embedding.add_learned_positions(xp, X, W, offset=-1)


def test_offset_vjp_cross_checks_and_a_dropped_offset_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from nlaverify.crosscheck import run_crosscheck

    name = "add_learned_positions_offset"
    assert OPS[name].static == {"offset": 2}
    assert run_crosscheck(backends=("numpy", "jax"), ops=[name]).ok

    def dropped(xp, G, X, W_P, offset=0):  # the cotangent left in rows 0 .. n-1
        return embedding.add_learned_positions_vjp(xp, G, X, W_P)

    monkeypatch.setitem(OPS, name, dataclasses.replace(OPS[name], vjp=dropped))
    assert not run_crosscheck(backends=("numpy", "jax"), ops=[name]).ok


def test_graph_counts_and_gradient_of_the_offset_rows() -> None:
    from nlaverify.models import jax_transformer as model

    cfg = zoo_config("post-layernorm")
    assert cfg.position_offset == 2
    g = build_transformer(cfg)
    assert g.nodes["pos.W_P"]["shape"] == (cfg.context + 2, cfg.d_model)
    base = parameter_counts(build_transformer(cfg.replace(position_offset=0))).total
    assert parameter_counts(g).total == base + 2 * cfg.d_model  # the offset rows count
    params = init_params(g, 2)
    data = sample_data(cfg.vocab_size, cfg.context, 2)
    ev = run_graph(g, "numpy", params, data)
    gW = ev.cotangents["pos.W_P"]
    assert np.all(gW[:2] == 0) and np.all(gW[2:] != 0)  # never read: zero gradient
    jW = jax.grad(model.loss)(params, data["tokens"], data["targets"], cfg)["pos.W_P"]
    assert np.all(np.asarray(jW)[:2] == 0)
    # the pipeline's comparison of graph and model: the longest accumulation, forward and
    # backward through every block (pipeline._first_model_divergence's depth)
    tol = tolerance("float64", size=accumulation_length(g, cfg.context),
                    depth=2 * (4 * cfg.n_blocks + 6))
    assert tol.compare(np.asarray(jW), gW).ok, tol.compare(np.asarray(jW), gW)


def test_decoding_reads_the_offset_rows_and_a_forgotten_offset_is_named() -> None:
    from nlaverify.check import check_decode
    from nlaverify.models.jax_transformer import make_mamba_decode_step

    cfg = zoo_config("mamba-rmsnorm").replace(n_blocks=1, placement="post",
                                              positions="learned", position_offset=2)
    params = init_params(build_transformer(cfg), 1)
    tokens = np.array([1, 5, 3, 0, 2])
    report = check_decode(make_mamba_decode_step(cfg, params), cfg, params, tokens, prefill=2)
    assert report.ok, str(report)
    # the decoder reading position p at row p (offset forgotten) departs at once
    wrong = make_mamba_decode_step(cfg.replace(position_offset=0), params)
    report = check_decode(wrong, cfg, params, tokens, prefill=2)
    assert not report.ok
