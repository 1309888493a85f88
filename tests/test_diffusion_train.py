"""The masked-diffusion model on the graph (nlaverify.diffusion_train): its training loss is
the proved Monte-Carlo ELBO term of nlaverify.diffusion (the same draws through the NumPy
denoiser of transformer_log_probs), it learns a context-determined text (the bound falls
far below the unigram level, the sampler writes the pattern), and the command runs."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.cli import main
from nlaverify.corpus import load_corpus
from nlaverify.diffusion import SCHEDULES, nelbo_samples, transformer_log_probs
from nlaverify.diffusion_train import _nelbo, diffusion_config, sample, train_diffusion
from nlaverify.errors import ArgumentError
from nlaverify.graph.build import build_transformer
from nlaverify.graph.run import init_params
from nlaverify.tolerance import tolerance


def test_training_loss_is_the_proved_elbo_term() -> None:
    corpus = load_corpus(text="abcd" * 300)
    V = corpus.vocab_size
    cfg = diffusion_config("tiny", V)
    params = init_params(build_transformer(cfg), 0)
    rng = np.random.default_rng(0)
    x0 = corpus.train[:16 * 3].reshape(3, 16)
    v, u = rng.random(3) * 0.9 + 0.1, rng.random((3, 16))
    ours = float(_nelbo(build_transformer(cfg), get_namespace("jax"),
                        {k: jnp.asarray(p) for k, p in params.items()},
                        jnp.asarray(x0), jnp.asarray(v), jnp.asarray(u), V))
    lp = transformer_log_probs(cfg, params, V, V)
    np_xp = get_namespace("numpy")
    terms = [nelbo_samples(np_xp, x0[b], lp, SCHEDULES["linear"], v[b:b + 1] ** 2,
                           u[b:b + 1], V, V, density=1 / (2 * v[b:b + 1])) for b in range(3)]
    ref = float(np.mean([np.asarray(t)[0] for t in terms])) / 16
    assert tolerance("float64", size=16 * V, depth=8).compare(ours, ref).ok, (ours, ref)


def test_learns_a_context_determined_text() -> None:
    corpus = load_corpus(text="abcd" * 3000)
    r = train_diffusion("tiny", 400, corpus=corpus)
    # unigram level: log 4 = 1.386 nats; the text is determined by any neighbour
    assert r.val_nelbo[0] > 1.0 and r.val_nelbo[-1] < 0.5, r.val_nelbo
    text = corpus.decode(sample(r.config, r.params, corpus.vocab_size, 16, seed=0))
    pairs = sum(text[i + 1] == "abcd"[("abcd".index(text[i]) + 1) % 4] for i in range(15))
    assert pairs >= 12, text


def test_command(capsys) -> None:
    assert main(["train", "--objective", "diffusion", "--steps", "3", "--optimizer", "adamw",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["objective"] == "diffusion" and len(out["heldout_nelbo"]) >= 2
    assert main(["train", "--objective", "diffusion", "--steps", "3", "--optimizer", "sgd"]) == 2
    assert "AdamW only" in capsys.readouterr().err


def test_a_denoiser_without_the_mask_or_with_a_causal_mask_is_refused() -> None:
    """The mask id V must be in the embedding (JAX would clamp it silently to the last row)
    and the denoiser bidirectional; both refused by name, before anything runs."""
    cfg = diffusion_config("tiny", 5)
    params = init_params(build_transformer(cfg), 0)
    with pytest.raises(ArgumentError, match=r"mask token \(id 6\) is missing.*vocab_size >= 7"):
        sample(cfg, params, 6, 4)
    with pytest.raises(ArgumentError, match="bidirectional"):
        sample(cfg.replace(causal=True), params, 5, 4)
    with pytest.raises(ArgumentError, match="argument 'V'"):
        sample(cfg, params, 0, 4)
