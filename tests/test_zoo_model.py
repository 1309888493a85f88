"""The independent JAX model of the zoo: its intermediates are the graph's values, it takes
a batch and ignored targets, and the first divergence from the graph names a model error."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nlaverify import zoo
from nlaverify.graph.build import build_transformer
from nlaverify.graph.run import init_params, run_graph, sample_data
from nlaverify.models import jax_transformer as model
from nlaverify.tolerance import tolerance

# ------------------------------------------------------------- the independent model


def test_model_intermediates_are_the_graph_values() -> None:
    for cfg in (zoo.zoo_config("moe-swiglu-gqa"), zoo.zoo_config("post-layernorm"),
                zoo.zoo_config("post-rmsnorm-bidirectional")):
        g = build_transformer(cfg)
        params = init_params(g, 3)
        data = sample_data(cfg.vocab_size, min(6, cfg.context), 3)
        ev = run_graph(g, "numpy", params, data)
        jp = {k: np.asarray(v) for k, v in params.items()}
        rec = model.intermediates(jp, data["tokens"], cfg, data["targets"])
        needed = {"x0", "logits", "loss"} | {f"blocks.{layer}.{s}" for layer in
                                             range(cfg.n_blocks) for s in
                                             ("resid1", "resid2", "attn.out", "mlp.out")}
        needed |= {"final_norm"} if cfg.final_norm else set()
        needed |= {"logits_tempered"} if cfg.temperature != 1.0 else set()
        assert needed <= set(rec) and set(rec) <= set(g)
        tol = tolerance("float64", size=16, depth=40, condition=10.0)
        for node, v in rec.items():
            assert tol.compare(v, ev.values[node]).ok, (cfg.name, node)
        assert float(model.loss(jp, data["tokens"], data["targets"], cfg)) == pytest.approx(
            float(rec["loss"]), rel=0, abs=0)


def test_model_accepts_a_batch_and_ignored_targets() -> None:
    import jax

    cfg = zoo.zoo_config("gqa-rope-swiglu")
    params = init_params(build_transformer(cfg), 1)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, cfg.vocab_size, size=(3, 6))
    targets = rng.integers(0, cfg.vocab_size, size=(3, 6))
    logits = jax.jit(model.logits, static_argnums=2)
    z = np.asarray(logits(params, tokens, cfg))
    assert z.shape == (3, 6, cfg.vocab_size)
    for b in range(3):  # eager, one sequence at a time
        assert np.allclose(z[b], np.asarray(model.logits(params, tokens[b], cfg)), rtol=0,
                           atol=tolerance("float64", size=16, depth=40).rtol)
    targets[0, 1] = targets[2, 4] = model.IGNORE_INDEX
    logp = z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))
    kept = [(b, i) for b in range(3) for i in range(6) if targets[b, i] != model.IGNORE_INDEX]
    expected = -sum(logp[b, i, targets[b, i]] for b, i in kept) / len(kept)
    loss = jax.jit(model.loss, static_argnums=3)
    assert float(loss(params, tokens, targets, cfg)) == pytest.approx(expected, rel=1e-13)
    rec = jax.eval_shape(lambda p, t: model.intermediates(p, t, cfg), params, tokens)
    assert rec["blocks.0.attn.k_shared"].shape == (3, 4, 6, 4)  # (B, H, n, d_head)
    assert rec["logits"].shape == (3, 6, cfg.vocab_size)
    with pytest.raises(ValueError, match="targets"):
        model.loss(params, tokens, targets[:, :4], cfg)
    with pytest.raises(ValueError, match="tokens"):
        model.logits(params, tokens[None], cfg)


def test_first_divergence_names_a_model_error(monkeypatch) -> None:
    # the model's RoPE pairs (i, i + d/2) instead of (2i, 2i+1): the first node where the
    # model and the graph part is the rotated query. (The pipeline calls this localisation
    # when its end-to-end model check fails; the planted-bug tests of tests/test_zoo.py run it
    # there.)
    from nlaverify.graph.compare import accumulation_length
    from nlaverify.pipeline import _first_model_divergence

    def half_pairs(x: Any, cfg: Any, local: bool = False) -> Any:
        jnp = model.jnp
        _, n, dh = x.shape
        theta = cfg.rope_base ** (-jnp.arange(0, dh, 2) / dh)
        phase = jnp.exp(1j * jnp.arange(n)[:, None] * theta[None, :])
        z = (x[..., : dh // 2] + 1j * x[..., dh // 2:]) * phase
        return jnp.concatenate([z.real, z.imag], axis=-1)

    cfg = zoo.zoo_config("gqa-rope-swiglu")
    g = build_transformer(cfg)
    params, data = init_params(g, 0), sample_data(cfg.vocab_size, 6, 0)
    ref = run_graph(g, "numpy", params, data)
    k, depth = accumulation_length(g, 6), 2 * (4 * cfg.n_blocks + 6)
    assert _first_model_divergence(g, ref, params, data, cfg, k, depth) is None
    from nlaverify.models import jax_attention  # the model's attention sublayer

    monkeypatch.setattr(jax_attention, "_rope", half_pairs)
    assert _first_model_divergence(g, ref, params, data, cfg, k, depth) == (
        "blocks.0.attn.q_rope")

