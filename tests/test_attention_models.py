"""Transformers with linearized and randomized attention (issue 9; Baggag & Saad §4.3-4.4):
the config options, the graph (random features as fixed inputs, Linformer's projections as
parameters), the node-by-node pipeline of every variant against JAX autodiff and the
independent model, and the whole-model check that FAVOR+ logits approach the softmax
logits at the rate 1/m."""

from __future__ import annotations

import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.config import ConfigError, preset
from nlaverify.errors import ShapeError
from nlaverify.graph.build import (
    build_transformer,
    feature_inputs,
    graph_constants,
    parameter_counts,
)
from nlaverify.graph.core import evaluate
from nlaverify.graph.run import graph_inputs, init_params, sample_data
from nlaverify.pipeline import format_report, verify_pipeline

TINY = preset("tiny")
#: each variant as ``tiny`` with one block (the pipeline's cost is its JAX compilations)
#: and the attention changed: bidirectional where it must be; Linformer's projections are
#: ``context = 6`` long, so the pipeline's 4-token sequences use their zero-padded form
_ONE = TINY.replace(n_blocks=1)
VARIANTS = {
    "favor+": _ONE.replace(attention="favor+", random_features=16),
    "favor": _ONE.replace(attention="favor", random_features=16),
    "elu1": _ONE.replace(attention="elu1"),
    "efficient": _ONE.replace(attention="efficient", causal=False),
    "linformer": _ONE.replace(attention="linformer", causal=False, context=6, linformer_k=3),
}


def _logits(cfg, params, data) -> np.ndarray:
    g = build_transformer(cfg)
    xp = get_namespace("numpy")
    data = {**graph_constants(g), **data}
    return evaluate(g, xp, graph_inputs(g, xp, params, data), outputs=["logits"])["logits"]


# ------------------------------------------------------------------------------- config


@pytest.mark.parametrize(("changes", "field"), [
    ({"attention": "performer"}, "attention"),
    ({"attention": "linformer"}, "causal"),  # tiny is causal: no causal Linformer
    ({"attention": "efficient"}, "causal"),
    ({"attention": "favor+", "random_features": 0}, "random_features"),
    ({"random_features": 2.0}, "random_features"),
    ({"linformer_k": 0}, "linformer_k"),
    ({"feature_seed": -1}, "feature_seed"),
    ({"orthogonal_features": 1}, "orthogonal_features"),
])
def test_bad_attention_options_are_refused_naming_the_field(changes, field) -> None:
    with pytest.raises(ConfigError, match=rf"TransformerConfig\.{field}:"):
        TINY.replace(**changes)


def test_default_config_and_graph_are_softmax() -> None:
    assert TINY.attention == "softmax"
    g = build_transformer(TINY)
    assert graph_constants(g) == {} and TINY.feature_draws(0) == {}
    assert {a["op"] for _, a in g.nodes(data=True) if a["kind"] == "op"
            and a["op"].endswith("attention")} == {"attention"}


def test_feature_draws_are_a_pure_function_of_seed_draw_layer_and_head() -> None:
    cfg = TINY.replace(attention="favor", random_features=16)
    a, b = cfg.feature_draws(1), cfg.feature_draws(1)
    assert a["W"].shape == (2, 16, 4) and a["b"].shape == (2, 16)
    assert all(np.array_equal(a[k], b[k]) for k in a)  # reproducible bit for bit
    others = [cfg.feature_draws(0)["W"], cfg.feature_draws(1, draw=1)["W"],
              cfg.replace(feature_seed=1).feature_draws(1)["W"]]
    assert not np.allclose(a["W"][0], a["W"][1])  # heads differ
    assert all(not np.allclose(a["W"], o) for o in others)  # layers, redraws, seeds differ
    # orthogonal blocks of d_h = 4 directions
    w = cfg.feature_draws(0)["W"][0, :4]
    gram = (w / np.linalg.norm(w, axis=1, keepdims=True)) @ (
        w / np.linalg.norm(w, axis=1, keepdims=True)).T
    # QR, then the row norms: a few float64 roundings per entry
    from nlaverify.tolerance import tolerance

    assert tolerance("float64", size=4, depth=2).compare(gram, np.eye(4)).ok
    with pytest.raises(ConfigError, match="'layer'"):
        cfg.feature_draws(2)
    with pytest.raises(ConfigError, match="'draw'"):
        cfg.feature_draws(0, draw=-1)


def test_features_are_constants_and_linformer_projections_parameters() -> None:
    soft = parameter_counts(build_transformer(TINY)).total
    g = build_transformer(TINY.replace(attention="favor"))
    assert parameter_counts(g).total == soft  # the draws are no parameters
    assert sorted(graph_constants(g)) == [f"blocks.{b}.attn.features.{k}" for b in (0, 1)
                                          for k in ("W", "b")]
    assert all(g.nodes[n]["kind"] == "input" for n in graph_constants(g))
    lin = VARIANTS["linformer"]
    counts = parameter_counts(build_transformer(lin))
    H, k, n = lin.n_heads, lin.linformer_k, lin.context
    assert counts.by_component["attention.E"] == counts.by_component["attention.F"] == \
        lin.n_blocks * H * k * n
    assert counts.total == parameter_counts(build_transformer(lin.replace(
        attention="efficient"))).total + 2 * lin.n_blocks * H * k * n


def test_linformer_sequences_are_at_most_context_long() -> None:
    """Shorter sequences are the zero-padded ones (the pipeline runs 4 of 6 positions
    against the independent model, which pads); a longer one is refused at the node."""
    cfg = VARIANTS["linformer"].replace(positions="sinusoidal")
    g = build_transformer(cfg)
    with pytest.raises(ShapeError, match=r"blocks\.0\.attn\.heads.*at least n=7"):
        _logits(cfg, init_params(g, 0), sample_data(cfg.vocab_size, cfg.context + 1, 0))


# ---------------------------------------------------------------------------- pipeline


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_variant_passes_the_pipeline_node_by_node(variant: str) -> None:
    """Graph on NumPy and JAX, node by node (values and cotangents) against JAX autodiff
    of the graph; the lowered jit and the independent model end to end."""
    cfg = VARIANTS[variant]
    rep = verify_pipeline(cfg, ("numpy", "jax"), n=4)
    assert rep.ok, format_report(rep, per_node=False)
    assert {c.subject for c in rep.comparisons} == {"numpy", "jax"}
    assert len(rep.end_to_end) == 6 and not rep.errors


def test_redrawn_features_are_inputs_of_graph_and_model() -> None:
    """Draw 1 passed as data replaces the graph's constants (draw 0) and matches the model
    run with ``draw=1``; it changes the logits."""
    from nlaverify.models.jax_transformer import logits as model_logits
    from nlaverify.tolerance import tolerance

    cfg = VARIANTS["favor+"]
    params = init_params(build_transformer(cfg), 0)
    data = sample_data(cfg.vocab_size, 4, 0)
    z0 = _logits(cfg, params, data)
    z1 = _logits(cfg, params, {**data, **feature_inputs(cfg, draw=1)})
    tol = tolerance("float64", size=cfg.d_mlp, depth=2 * (4 * cfg.n_blocks + 6))
    assert tol.compare(np.asarray(model_logits(params, data["tokens"], cfg, draw=1)), z1).ok
    assert tol.compare(np.asarray(model_logits(params, data["tokens"], cfg)), z0).ok
    assert not tol.compare(z1, z0).ok


# ------------------------------------------------------- FAVOR+ -> softmax at rate 1/m

M = (16, 64, 256, 1024)
SEEDS = 12


def _rate(**draw) -> tuple[float, float, np.ndarray]:
    r"""The mean squared logit difference between FAVOR+ with ``m`` features and softmax,
    on ``tiny`` with fixed weights and tokens, over :data:`SEEDS` feature seeds, for each
    ``m`` in :data:`M`; and the least-squares slope of its logarithm against
    :math:`\log m` with its standard error (each mean's relative standard error across
    seeds, propagated through the fit).

    Prediction: with :math:`\hat A` unbiased for the unnormalised attention and of variance
    :math:`O(1/m)`, the logits move by :math:`J\,\delta + O(\delta^2)` with
    :math:`\mathbb E\,\delta = O(1/m)` (the ratio :math:`D^{-1}\hat A V`), so the mean
    squared difference is :math:`c/m + O(1/m^2)`: slope :math:`-1`. The query/key weights
    are halved so that :math:`\|\tilde q + \tilde k\|^2` is :math:`O(1)` and the positive
    features' relative variance :math:`e^{\|\tilde q + \tilde k\|^2} - 1` small: for
    :math:`m \ge 16` the estimator is then in its asymptotic regime (unscaled, the
    bounded attention output saturates the error at small :math:`m` and flattens the
    slope to about :math:`-0.4`).
    """
    g = build_transformer(TINY)
    params = init_params(g, 0)
    for k in params:
        if k.rsplit(".", 1)[-1] in ("W_Q", "W_K", "b_Q", "b_K"):
            params[k] = 0.5 * params[k]
    data = sample_data(TINY.vocab_size, 8, 0)
    z = _logits(TINY, params, data)
    means, ses = [], []
    for m in M:
        errs = []
        for s in range(SEEDS):
            cfg = TINY.replace(attention="favor+", random_features=m, feature_seed=s)
            zm = _logits(cfg, params, {**data, **feature_inputs(cfg, **draw)})
            errs.append(np.mean((zm - z) ** 2))
        means.append(np.mean(errs))
        ses.append(np.std(errs, ddof=1) / np.sqrt(SEEDS))
    x = np.log(M) - np.mean(np.log(M))
    y, sig = np.log(means), np.array(ses) / np.array(means)
    slope = float(x @ y / (x @ x))
    return slope, float(np.sqrt((x**2) @ sig**2) / (x @ x)), np.array(means)


def test_favor_plus_logits_approach_softmax_at_rate_one_over_m() -> None:
    slope, se, means = _rate()
    assert np.all(np.diff(means) < 0), means
    assert abs(slope + 1) <= 4 * se, (slope, se, means)
    assert se < 0.15  # not vacuous: the bound excludes slopes -1/2 (Monte Carlo 1/sqrt m)


def test_unfixed_qr_signs_are_detected_by_the_rate() -> None:
    """The classic bug (orthogonal features from QR without sign(diag R)) biases the
    positive estimator: the error stops decaying at the squared bias."""
    slope, se, means = _rate(fix_signs=False)
    assert abs(slope + 1) > 4 * se, (slope, se, means)


def test_a_misapplied_stabiliser_is_detected_by_the_rate(monkeypatch) -> None:
    """Shifting each *key* row by its own maximum (a per-row stabiliser on the keys does
    not cancel: it reweights the keys) biases the attention: the rate check fails."""
    from nlaverify.ops import linear_attention as la

    side = la._favor_plus_side
    monkeypatch.setattr(la, "_favor_plus_side",
                        lambda xp, X, W, per_row: side(xp, X, W, True))
    slope, se, means = _rate()
    assert abs(slope + 1) > 4 * se, (slope, se, means)


@pytest.mark.parametrize("variant", ["favor", "favor+"])
def test_each_block_uses_its_own_draws(variant: str) -> None:
    """Two blocks: the graph's logits equal the independent model's, which draws each
    block's features itself (a graph giving every block layer 0's draws differs by 0.03 to
    0.9); the blocks' draws differ."""
    from nlaverify.models.jax_transformer import logits as model_logits
    from nlaverify.tolerance import tolerance

    cfg = TINY.replace(attention=variant, random_features=16)
    assert cfg.n_blocks == 2
    params = init_params(build_transformer(cfg), 0)
    data = sample_data(cfg.vocab_size, 4, 0)
    z = _logits(cfg, params, data)
    tol = tolerance("float64", size=cfg.d_mlp, depth=2 * (4 * cfg.n_blocks + 6))
    assert tol.compare(np.asarray(model_logits(params, data["tokens"], cfg)), z).ok
    assert not np.array_equal(cfg.feature_draws(0)["W"], cfg.feature_draws(1)["W"])
