"""LoRA on the running graph, fine-tuning, the random-subspace (intrinsic dimension) trainer
and gradient spectra (Baggag & Saad §3.14, §4.1, §4.2). The op proofs are the registry's
(``lora_linear``, ``lora_affine``); the node-by-node check of a LoRA config is the zoo's
(``lora-r2-all``); the identities are family ``lowrank`` (tests/test_proofs.py)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from nlaverify import finetune as F
from nlaverify.cli import main
from nlaverify.config import preset
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.graph.build import build_transformer
from nlaverify.graph.run import init_params, run_graph, sample_data
from nlaverify.tolerance import tolerance
from nlaverify.train import Corpus, load_corpus, train

TINY = preset("tiny")


@pytest.fixture(scope="session")
def small_corpus() -> Corpus:
    c = load_corpus()
    return load_corpus(c.text[:4000] + c.vocab)  # every character, a short text


def _loss(cfg, params, data) -> float:
    return float(run_graph(build_transformer(cfg), "numpy", params, data).values["loss"])


def test_lora_init_is_the_pretrained_model() -> None:
    base = init_params(build_transformer(TINY), 3)
    data = sample_data(TINY.vocab_size, 6, 0)
    for targets in (("q", "v"), ("q", "k", "v", "o", "mlp")):
        cfg = TINY.replace(lora_rank=2, lora_targets=targets, lora_alpha=8.0)
        p = F.lora_init(cfg, base, seed=1)
        assert set(p) == set(base) | set(F.lora_names(cfg))
        assert all(not np.any(p[n]) for n in p if n.endswith("lora_B"))
        tol = tolerance("float64", size=TINY.d_mlp, depth=12)
        assert abs(_loss(cfg, p, data) - _loss(TINY, base, data)) <= tol.rtol, tol.reason
        # a planted nonzero B changes the function: the check above can fail
        bad = dict(p)
        name = next(n for n in p if n.endswith("lora_B"))
        bad[name] = np.ones_like(p[name])
        assert abs(_loss(cfg, bad, data) - _loss(TINY, base, data)) > 1e3 * tol.rtol
    with pytest.raises(ArgumentError, match="lora_rank"):
        F.lora_init(TINY, base)
    with pytest.raises(ArgumentError, match="no value for parameter node"):
        F.lora_init(TINY.replace(lora_rank=1), {k: v for k, v in base.items()
                                                 if k != "embed.W_E"})


def test_lora_finetune_trains_the_adapters_only(small_corpus) -> None:
    cfg = TINY.replace(vocab_size=small_corpus.vocab_size)
    base = init_params(build_transformer(cfg), 0)
    lcfg = cfg.replace(lora_rank=2, lora_targets=("q", "v"))
    names = F.lora_names(lcfg)
    r = train(lcfg, "adamw", 4, corpus=small_corpus, init=F.lora_init(lcfg, base),
              trainable=names, batch=2, seq_len=8)
    for k, v in base.items():
        np.testing.assert_array_equal(r.params[k], v)         # frozen: bit for bit
    assert all(np.any(r.params[n]) for n in names if n.endswith("lora_B"))  # B moved
    ocfg = cfg.replace(lora_rank=1, lora_targets=("o",))
    assert sum(F.lora_init(ocfg, base)[n].size for n in F.lora_names(ocfg)) == (
        cfg.n_blocks * (cfg.d_model + cfg.d_model))
    with pytest.raises(ArgumentError, match="trainable"):
        train(lcfg, "adamw", 1, corpus=small_corpus, init=F.lora_init(lcfg, base),
              trainable=["no.such.node"])
    for bad in ("q", names[0], 3):  # a string is a name, not a collection of names
        with pytest.raises(ArgumentError, match="collection of parameter node names"):
            train(lcfg, "adamw", 1, corpus=small_corpus, init=F.lora_init(lcfg, base),
                  trainable=bad)
    with pytest.raises(ArgumentError, match="no value for parameter node"):
        train(lcfg, "adamw", 1, corpus=small_corpus, init=base)
    bad = F.lora_init(lcfg, base)
    bad[names[0]] = bad[names[0]].T
    with pytest.raises(ShapeError, match=names[0].replace(".", r"\.")):
        train(lcfg, "adamw", 1, corpus=small_corpus, init=bad)


def test_subspace_finetune_starts_at_the_base_and_moves(small_corpus) -> None:
    from nlaverify.train import heldout_windows

    cfg = TINY.replace(vocab_size=small_corpus.vocab_size, context=8)
    base = init_params(build_transformer(cfg), 0)
    sub = F.subspace_finetune(cfg, base, small_corpus, 6, 8, batch=2)
    # z = 0 is the base model: its held-out loss, from the NumPy graph
    want = _loss(cfg, base, heldout_windows(small_corpus.val, cfg.context))
    tol = tolerance("float64", size=cfg.d_mlp, depth=12)
    assert abs(sub.start_loss - want) <= tol.rtol * abs(want), tol.reason
    assert sub.final_loss < sub.start_loss and sub.trainable == 8
    with pytest.raises(ArgumentError, match="dim"):
        F.subspace_finetune(cfg, base, small_corpus, 1, 0)


def _run(label: str, trainable: int, start: float, final: float) -> F.FinetuneRun:
    return F.FinetuneRun(label, trainable, start, final, np.zeros(1), np.zeros(1))


def test_intrinsic_dimension_and_energy_rank() -> None:
    full = _run("full", 100, 3.0, 2.0)
    runs = [_run("a", 4, 3.0, 2.5), _run("b", 16, 3.0, 2.12), _run("c", 64, 3.0, 2.09)]
    assert F.intrinsic_dimension(runs, full) == 64            # 0.91 >= 0.9; 0.88 is not
    assert F.intrinsic_dimension(runs, full, 0.85) == 16
    assert F.intrinsic_dimension(runs[:1], full) is None
    s = np.array([3.0, 2.0, 1.0, 0.0])                        # energies 9, 4, 1: total 14
    assert [F.energy_rank(s, f) for f in (0.5, 0.92, 0.93, 1.0)] == [1, 2, 3, 3]
    # the threshold is inclusive, decided exactly: energies 4, 4, 4, 4 of 16
    assert [F.energy_rank(np.full(4, 2.0), f) for f in (0.25, 0.5, 0.75, 0.7500001)] == [
        1, 2, 3, 4]
    with pytest.raises(ArgumentError):
        F.energy_rank(np.zeros((2, 2)))


def test_energy_rank_is_exact_and_at_most_the_length() -> None:
    """The share is decided in exact arithmetic: 64 equal values at fraction 1 need all 64
    (the rounded cumsum/total fell short of 1 and gave 65), a tiny last value still counts
    at fraction 1, and the answer never exceeds len(sigma); fraction outside (0, 1] and
    non-finite values are refused."""
    assert F.energy_rank(np.full(64, 0.7), 1.0) == 64
    assert F.energy_rank(np.array([1.0, 1.0, 1.0, 1e-9]), 1.0) == 4
    assert F.energy_rank(np.array([1.0, 1.0, 1.0, 0.0]), 1.0) == 3
    rng = np.random.default_rng(0)
    for _ in range(300):
        s = np.sort(rng.random(int(rng.integers(1, 100))))[::-1]
        assert F.energy_rank(s, 1.0) == s.size
        f = float(rng.random())
        k = F.energy_rank(s, f)
        assert 1 <= k <= s.size
        c = np.cumsum(s**2)
        # energy_rank decides exactly; the float cumsum here rounds (k terms)
        rel = tolerance("float64", size=s.size).rtol
        assert c[k - 1] >= f * c[-1] * (1 - rel) and (k == 1 or c[k - 2] < f * c[-1])
    for bad in (1.5, 0, -0.1, np.nan, True, "0.9"):
        with pytest.raises(ArgumentError, match="fraction"):
            F.energy_rank(np.ones(3), bad)
    with pytest.raises(ArgumentError, match="finite"):
        F.energy_rank(np.array([1.0, np.inf]))


def test_intrinsic_dimension_boundary_and_no_improvement() -> None:
    """A run reaching exactly 90 % of full fine-tuning's improvement counts (>=, Li et al.);
    a full run that did not improve the loss is refused, and the study's lines say so."""
    full = _run("full", 100, 10.0, 0.0)                       # improvement 10; 0.9 * 10 = 9
    runs = [_run("a", 8, 10.0, 1.0), _run("b", 32, 10.0, 0.5)]
    assert F.intrinsic_dimension(runs, full) == 8
    assert F.intrinsic_dimension([_run("c", 4, 10.0, 1.0 + 2**-40)], full) is None
    assert F.intrinsic_dimension([_run("c", 4, 2.0, 0.5)], _run("full", 100, 2.0, 0.0),
                                 0.75) == 4
    for flat in (_run("full", 100, 3.0, 3.0), _run("full", 100, 3.0, 3.5),
                 _run("full", 100, 3.0, float("nan"))):
        with pytest.raises(ArgumentError, match="improve"):
            F.intrinsic_dimension(runs, flat)
        study = F.FinetuneStudy(3.1, flat, [_run("LoRA", 16, 3.0, 2.9)], runs)
        assert study.d90 is None
        lines = study.lines()
        assert "none (full fine-tuning did not improve" in lines[-1]
        assert all("n/a %" in ln for ln in lines[1:-1])
    good = F.FinetuneStudy(3.1, full, [], runs).lines()
    assert good[-1].endswith("d90: 8") and "( 90.0 % of full)" in good[2]


def test_lora_init_draws_a_with_variance_one_over_d_in() -> None:
    r"""The entries of every :math:`A` are :math:`N(0, 1/d_{in})`: scaled by
    :math:`\sqrt{d_{in}}` their sample variance is within five standard errors of 1
    (:math:`\operatorname{Var}s^2 = 2/(N-1)` for Gaussian samples) and their mean within
    :math:`5/\sqrt N` of 0; the variance-1 mutant (:math:`d_{in} \ge 8`) fails. (A 10 %
    variance error is below this power; the scale is also fixed by ``lora_init``'s
    docstring and Hu et al. §4.1, not by a proof.)"""
    cfg = TINY.replace(lora_rank=4, lora_targets=("q", "k", "v", "o", "mlp"))
    base = init_params(build_transformer(TINY), 0)
    p = F.lora_init(cfg, base, seed=5)
    z = np.concatenate([p[n].ravel() * np.sqrt(p[n].shape[0]) for n in p
                        if n.endswith("lora_A")])
    N = z.size
    assert abs(float(z.mean())) <= 5 / np.sqrt(N)
    assert abs(float(z.var(ddof=1)) - 1) <= 5 * np.sqrt(2 / (N - 1)), (N, z.var(ddof=1))
    raw = np.concatenate([p[n].ravel() for n in p if n.endswith("lora_A")])
    assert abs(float(raw.var(ddof=1)) - 1) > 5 * np.sqrt(2 / (N - 1))  # what the mutant gives
    assert min(p[n].shape[0] for n in p if n.endswith("lora_A")) >= 8


def test_gradient_rank_is_bounded_by_the_tokens() -> None:
    # dW = X^T G sums one outer product per token: rank <= n tokens (n = 3 < d = 8)
    cfg = TINY
    params = init_params(build_transformer(cfg), 0)
    spectra = F.gradient_spectra(cfg, params, sample_data(cfg.vocab_size, 3, 0))
    assert spectra and all(len(s) == min(build_transformer(cfg).nodes[k]["shape"])
                           for k, s in spectra.items())
    tol = tolerance("float64", size=cfg.d_mlp, depth=12)
    for name, s in spectra.items():
        assert np.all(s[3:] <= tol.rtol * s[0]), name
        assert s[0] > 0, name


def test_params_lora_command(capsys) -> None:
    assert main(["params", "--preset", "gpt3-175b", "--lora", "r=4,targets=q,v", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["lora_trainable"] == 18_874_368                # Hu et al. 2022, Table 5: 18M
    assert main(["params", "--preset", "gpt3-175b", "--lora", "r=4,targets=q,v"]) == 0
    assert "LoRA trainable            18,874,368" in capsys.readouterr().out
    for bad, msg in (("r=0", "r=RANK"), ("r=two", "not a number"), ("r=2,rank=3", "unknown key"),
                     ("r=2,targets=q,z", "lora_targets"), ("4", "key=value"),
                     ("r=2,targets=q,,v", "empty item"), ("r=2,r=4", "given twice"),
                     ("r=2,targets=", "empty item")):
        assert main(["params", "--preset", "tiny", "--lora", bad]) == 2
        assert msg in capsys.readouterr().err


@pytest.mark.skipif(os.environ.get("HYPOTHESIS_PROFILE") != "nightly",
                    reason="the LoRA graph on strict and mpmath: nightly only (in CI each LoRA "
                           "op is cross-checked on both by test_ops_crosscheck and "
                           "test_device_clean, and the LoRA zoo member runs on numpy and jax)")
@pytest.mark.parametrize("backend", ["strict", "mpmath"])
def test_lora_graph_on_the_strict_and_exact_backends(backend: str) -> None:
    # numpy and jax run the LoRA zoo member in tests/test_zoo.py; here the device-strict
    # (array-api-strict) and high-precision (mpmath) backends, node by node against JAX
    from nlaverify.pipeline import format_report, verify_pipeline
    from nlaverify.zoo import zoo_config

    rep = verify_pipeline(zoo_config("lora-r2-all"), [backend], seed=2, n=2, digits=30)
    assert rep.ok, format_report(rep)


def test_merge_lora_gives_the_same_function() -> None:
    cfg = TINY.replace(lora_rank=2, lora_alpha=6.0, lora_targets=("q", "o", "mlp"))
    params = init_params(build_transformer(cfg), 4)          # B drawn: the adapters matter
    plain, merged = F.merge_lora(cfg, params)
    assert plain.lora_rank == 0 and set(merged) == set(init_params(build_transformer(plain)))
    data = sample_data(cfg.vocab_size, 6, 1)
    tol = tolerance("float64", size=cfg.d_mlp, depth=12)
    assert abs(_loss(plain, merged, data) - _loss(cfg, params, data)) <= tol.rtol, tol.reason
    # the adapters are not a no-op: dropping them changes the function
    dropped = {k: v for k, v in params.items() if "lora" not in k}
    assert abs(_loss(plain, dropped, data) - _loss(cfg, params, data)) > 1e3 * tol.rtol
    with pytest.raises(ArgumentError, match="lora_rank"):
        F.merge_lora(plain, merged)
    with pytest.raises(ArgumentError, match="missing"):
        F.merge_lora(cfg, dropped)
