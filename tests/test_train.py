"""``nlaverify train``: next-character training of the graph-lowered Transformer.

One short run per optimizer (module fixture; every test shares its compilations). The
oracle of the losses is the independent JAX model (:mod:`nlaverify.models.jax_transformer`),
which imports nothing of the graph or the update rules.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nlaverify.cli import main
from nlaverify.config import preset
from nlaverify.errors import ArgumentError, UnknownNameError
from nlaverify.graph.build import build_transformer
from nlaverify.graph.compare import accumulation_length
from nlaverify.graph.run import init_params
from nlaverify.models import jax_transformer as jt
from nlaverify.tolerance import magnitude_condition, tolerance
from nlaverify.train import (
    OPTIMIZERS,
    char_config,
    draw_training,
    entropies,
    extract_passage,
    heldout_windows,
    load_corpus,
    train,
    window_starts,
    windows,
)

SEED_PAPER = Path("/work/shared/seeds/baggag-saad-nla-of-llms.txt")
STEPS = 30
#: standard errors by which the held-out loss must fall (a decrease this large has
#: probability < 3e-7 under "no change" for a normal estimate)
Z = 5.0


@pytest.fixture(scope="session")
def corpus():
    return load_corpus()


@pytest.fixture(scope="session")
def runs(corpus):
    return {o: train("tiny", o, STEPS, seed=0, eval_every=STEPS, corpus=corpus)
            for o in OPTIMIZERS}


@functools.cache
def _logits(cfg):
    return jax.jit(lambda p, t: jt.logits(p, t, cfg))


def _position_nll(params, data, cfg) -> np.ndarray:
    """Per-position negative log-likelihood of the independent JAX model (its logits; the
    log-softmax in NumPy)."""
    z = _logits(cfg)({k: jnp.asarray(v) for k, v in params.items()},
                     jnp.asarray(data["tokens"]))
    logp = np.asarray(z) - np.logaddexp.reduce(np.asarray(z), axis=-1, keepdims=True)
    return -np.take_along_axis(logp, data["targets"][..., None], axis=-1)[..., 0]


def _tol(cfg, n: int, ref):
    """The forward pipeline's tolerance: the longest accumulation, 4 stages per block plus
    the embedding, norms, unembedding and loss, magnitudes of the reference."""
    return tolerance("float64", size=accumulation_length(build_transformer(cfg), n),
                     depth=4 * cfg.n_blocks + 6, condition=magnitude_condition(ref, power=1))


def test_shipped_text_is_the_extraction_of_the_seed(corpus) -> None:
    if not SEED_PAPER.exists():
        pytest.skip("the seed paper is not on this machine")
    assert extract_passage(SEED_PAPER.read_text(encoding="utf-8")) == corpus.text
    assert 50_000 <= len(corpus.text) <= 100_000 and corpus.text.isascii()
    assert corpus.decode(np.concatenate([corpus.train, corpus.val])) == corpus.text
    assert corpus.vocab_size == len(set(corpus.text)) > preset("tiny").vocab_size
    assert char_config("tiny", corpus.vocab_size).vocab_size == corpus.vocab_size


def test_entropies_of_a_known_sequence() -> None:
    # a b a b ...: unigram entropy log 2, and the next symbol is determined (H2 = 0)
    h1, h2 = entropies(np.array([0, 1] * 50), 3)
    assert math.isclose(h1, math.log(2)) and h2 == 0.0


def test_step0_loss_is_the_independent_models_loss(corpus, runs) -> None:
    cfg = char_config("tiny", corpus.vocab_size)
    params = init_params(build_transformer(cfg), 0)
    starts = window_starts(len(corpus.train), STEPS, 16, cfg.context, 0)
    batch0 = windows(corpus.train, starts[0], cfg.context)
    ref = float(jax.jit(lambda p, t, y: jt.loss(p, t, y, cfg))(params, batch0["tokens"],
                                                                 batch0["targets"]))
    for o, r in runs.items():
        assert _tol(cfg, cfg.context, ref).compare(r.losses[0], ref).ok, o


def test_step_gradient_is_jax_grad_of_the_independent_model(corpus, runs) -> None:
    """The jitted training step's gradient (the graph's hand-derived VJPs), recovered from
    one SGD step at learning rate 1 (the runs' compilation) as w_0 - w_1, equals jax.grad of
    the independent JAX model's loss at step 0."""
    from nlaverify.backends import get_namespace
    from nlaverify.train import DEFAULT_LR, _step_function

    cfg = char_config("tiny", corpus.vocab_size)
    params = {k: jnp.asarray(v) for k, v in init_params(build_transformer(cfg), 0).items()}
    batch0 = windows(corpus.train, window_starts(len(corpus.train), STEPS, 16, cfg.context,
                                                 0)[0], cfg.context)
    lr = DEFAULT_LR["sgd"]
    step, rule = _step_function(cfg, "sgd", lr)
    after, _, _ = step(params, {}, rule.init(get_namespace("jax"), params),
                       {k: jnp.asarray(v) for k, v in batch0.items()})
    want = jax.jit(jax.grad(lambda p: jt.loss(p, batch0["tokens"], batch0["targets"], cfg)))(
        params)
    base = tolerance("float64", size=accumulation_length(build_transformer(cfg), cfg.context),
                     depth=2 * (4 * cfg.n_blocks + 6))  # forward and backward
    for k, w0 in params.items():
        got = (np.asarray(w0) - np.asarray(after[k])) / lr
        g = np.asarray(want[k])
        # w_0 - w_1 cancels: its rounding is relative to |w|, not to |g|
        cond = max(1.0, float(np.max(np.abs(w0))) / float(np.max(np.abs(g))))
        tol = replace(base, rtol=base.rtol * cond)
        assert tol.compare(got, g, floor=0.0).ok, (k, tol.compare(got, g, floor=0.0))


def test_muon_orthogonalises_only_the_hidden_matrices(corpus) -> None:
    """Muon's split of the character model: the attention and MLP weight matrices of each
    block go to Newton–Schulz; the embedding, positions, unembedding and every vector (norm
    gains, biases) to the AdamW fallback."""
    from nlaverify.backends import get_namespace
    from nlaverify.train import make_rule

    cfg = char_config("tiny", corpus.vocab_size)
    params = init_params(build_transformer(cfg), 0)
    state = make_rule("muon").init(get_namespace("numpy"), params)
    hidden = {f"blocks.{b}.{w}" for b in range(cfg.n_blocks)
              for w in ("attn.q.W_Q", "attn.k.W_K", "attn.v.W_V", "attn.out.W_O",
                        "mlp.in.W_in", "mlp.out.W_out")}
    assert set(state["mu"]) == hidden
    assert set(state["adam"]["mu"]) == set(params) - hidden
    assert {"embed.W_E", "pos.W_P", "unembed.W_U"} <= set(state["adam"]["mu"])


def _decrease_margins(corpus, runs):
    """Per optimizer: (held-out decrease, its margin, batch-loss decrease, its margin)."""
    cfg = char_config("tiny", corpus.vocab_size)
    params0 = init_params(build_transformer(cfg), 0)
    held = heldout_windows(corpus.val, cfg.context)
    before = _position_nll(params0, held, cfg).ravel()
    batch0 = windows(corpus.train, window_starts(len(corpus.train), STEPS, 16, cfg.context,
                                                 0)[0], cfg.context)
    nll0 = _position_nll(params0, batch0, cfg).ravel()
    out = {}
    for o, r in runs.items():
        after = _position_nll(r.params, held, cfg).ravel()
        assert _tol(cfg, cfg.context, before).compare(r.val_losses[0], before.mean()).ok, o
        assert _tol(cfg, cfg.context, after).compare(r.val_losses[-1], after.mean()).ok, o
        # standard error of the held-out loss as an estimate of the text's loss
        se_held = before.std(ddof=1) / math.sqrt(before.size)
        # one batch loss has standard error se_b; the mean of the last 5 batches, se_b/sqrt 5
        se_b = nll0.std(ddof=1) / math.sqrt(nll0.size)
        out[o] = (before.mean() - after.mean(), Z * se_held,
                  r.losses[0] - r.losses[-5:].mean(), Z * se_b * math.sqrt(1 + 1 / 5))
    return out


def test_each_optimizer_lowers_the_loss(corpus, runs) -> None:
    """In 30 steps, the held-out loss falls by more than Z standard errors of the held-out
    loss itself (a decrease the held-out set resolves), both ends recomputed by the
    independent model; and the mean of the last 5 batch losses lies Z standard errors (of a
    batch loss, from the per-position losses of the first batch) below the first."""
    for o, (held, held_margin, batch, batch_margin) in _decrease_margins(corpus, runs).items():
        assert held > held_margin, f"{o}: held-out decrease {held:.4f} <= {held_margin:.4f}"
        assert batch > batch_margin, f"{o}: batch decrease {batch:.4f} <= {batch_margin:.4f}"


def test_training_is_deterministic(corpus, runs) -> None:
    again = train("tiny", "sgd", STEPS, seed=0, eval_every=STEPS, corpus=corpus)
    np.testing.assert_array_equal(again.losses, runs["sgd"].losses)
    np.testing.assert_array_equal(again.val_losses, runs["sgd"].val_losses)
    other = train("tiny", "sgd", STEPS, seed=1, eval_every=STEPS, corpus=corpus)
    assert not np.array_equal(other.losses, runs["sgd"].losses)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"optimizer": "lion"}, UnknownNameError, "unknown optimizer 'lion'"),
    ({"steps": 0}, ArgumentError, "steps: expected a positive integer, got 0"),
    ({"batch": 0}, ArgumentError, "batch: expected a positive integer"),
    ({"seq_len": 17}, ArgumentError, r"seq_len: expected an integer in \[1, context=16\]"),
    ({"lr": -1.0}, ArgumentError, "lr: expected a finite positive number"),
    ({"config": "no-such-preset"}, UnknownNameError, "unknown preset"),
    ({"config": preset("tiny")}, ArgumentError, "vocab_size=11, expected at least the 76"),
])
def test_bad_arguments(corpus, kwargs, error, match) -> None:
    args = {"config": "tiny", "optimizer": "sgd", "steps": 3, "corpus": corpus, **kwargs}
    with pytest.raises(error, match=match):
        train(args.pop("config"), args.pop("optimizer"), args.pop("steps"), **args)


def test_cli_json_end_to_end(capsys, runs) -> None:
    assert main(["train", "--optimizer", "sgd", "--steps", "3", "--json"]) == 0
    out = capsys.readouterr()
    report = json.loads(out.out)
    (run,) = report["runs"]
    assert run["optimizer"] == "sgd" and len(run["losses"]) == 3
    assert run["losses"][0] == runs["sgd"].losses[0]  # same seed, same first batch
    assert report["levels"]["uniform_log_v"] == pytest.approx(math.log(report["vocab_size"]))
    assert out.err == ""  # --json: no progress bar


def test_cli_bad_arguments(capsys) -> None:
    assert main(["train", "--optimizer", "all", "--lr", "0.1", "--steps", "2"]) == 2
    assert "--lr applies to one optimizer" in capsys.readouterr().err
    for argv in (["--optimizer", "lion"], ["--steps", "0"]):
        with pytest.raises(SystemExit) as exc:
            main(["train", "--steps", "2", *argv])
        assert exc.value.code == 2
    assert "invalid" in capsys.readouterr().err


def test_progress_bar_on_stderr(capsys, corpus) -> None:
    train("tiny", "sgd", 2, corpus=corpus, progress=True)
    assert "2/2" in capsys.readouterr().err


def test_figure_is_reproducible(tmp_path, corpus, runs) -> None:
    paths = [tmp_path / "a.svg", tmp_path / "b.svg"]
    for p in paths:
        draw_training([runs["sgd"], runs["muon"]], p, corpus)
    a, b = (p.read_bytes() for p in paths)
    assert a == b and a.startswith(b"<?xml") and b"held-out" in a
    assert not list(tmp_path.glob(".tmp-*"))
