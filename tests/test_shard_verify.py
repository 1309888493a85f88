"""The sharded pipeline (:mod:`nlaverify.shard`, ``nlaverify verify --preset NAME --mesh``):
the tiny Transformer sharded dp x tp, sp, and with GQA, a gated MLP and a vocabulary-parallel
head, passes node by node on simulated CPU devices; each planted bug (a dropped collective)
is named at its node with the collective at fault; a bad mesh is refused before anything
runs."""

from __future__ import annotations

import subprocess
from dataclasses import replace

import pytest

from nlaverify.cli import main
from nlaverify.config import preset
from nlaverify.errors import ArgumentError
from nlaverify.shard import parse_mesh, plan_mesh, run_shard_verify
from nlaverify.shard.run import sharded_accumulation_length

TINY = preset("tiny")


@pytest.mark.parametrize("mesh, collective", [("dp=2,tp=2", "all-reduce"),
                                              ("sp=4", "all-gather")])
def test_the_cli_passes_node_by_node(mesh, collective, capsys):
    assert main(["verify", "--preset", "tiny", "--mesh", mesh]) == 0
    out = capsys.readouterr().out
    assert f"sharded tiny ({mesh}) vs unsharded: 74 nodes" in out and out.endswith(": ok\n")
    assert collective in out.splitlines()[-2]  # XLA partitioned the program: not replicated


def test_gqa_gated_mlp_and_a_vocabulary_parallel_head_pass():
    cfg = replace(TINY, vocab_size=12, mlp="swiglu", n_heads=4, n_kv_heads=2, positions="rope",
                  norm="rmsnorm", name="tiny-gqa")
    rep = run_shard_verify(cfg, "dp=2,tp=2,sp=2")
    assert rep.ok and rep.vocab_parallel and rep.devices == 8, rep.worst()
    lay = {r.node: r.layout for r in rep.rows}
    assert lay["unembed.W_U"] == "[None, tp]" and lay["logits"] == "[dp, sp, tp]"
    assert lay["blocks.0.attn.k_heads"] == "[dp, tp, sp, None]"
    assert lay["blocks.0.mlp.out.W_down"] == "[tp, None]"


@pytest.mark.parametrize("mesh, plant, node, words", [
    ("dp=2,tp=2", "missing_all_reduce", "blocks.0.mlp.out",
     "row-parallel matmul over tp=2 (all-reduce"),
    ("dp=2", "per_shard_mean", "loss", "tokens sharded dp=2 (all-reduce of the summed loss"),
    ("sp=4", "local_attention", "blocks.0.attn.heads", "sharded sp=4 (all-gather of the keys"),
])
def test_a_dropped_collective_is_named_at_its_node(mesh, plant, node, words):
    rep = run_shard_verify(TINY, mesh, plants=[plant])
    assert not rep.ok
    assert rep.first_value_divergence == node and words in rep.value_collective


def test_an_unreduced_gradient_is_named_in_the_backward():
    rep = run_shard_verify(TINY, "dp=2", plants=["unreduced_gradient"])
    assert not rep.ok and rep.first_value_divergence is None
    bad = [r.node for r in rep.rows if not r.ok]
    assert bad == ["blocks.0.mlp.out.W_out", "blocks.0.mlp.out.b_out"]
    assert rep.first_cotangent_divergence == "blocks.0.mlp.out.b_out"
    assert "all-reduce of the parameter gradient over dp=2" in rep.cotangent_collective


def test_the_accumulation_length_is_the_longer_of_the_whole_and_the_split_sum():
    assert sharded_accumulation_length(16, 4) == 16  # 4 per shard + 3 merges < 16
    assert sharded_accumulation_length(4, 8) == 8  # 1 per shard + 7 merges > 4
    assert sharded_accumulation_length(1, 1) == 1


@pytest.mark.parametrize("mesh, kw, words", [
    ("tp=3", {}, "tp=3 does not divide the query heads n_heads (2)"),
    ("tp=2,vocab=tp", {}, "tp=2 does not divide the vocabulary vocab_size (11)"),
    ("sp=4", {"seq_len": 6}, "sp=4 does not divide the sequence length seq_len (6)"),
    ("dp=3", {"batch": 2}, "dp=3 does not divide the batch (2)"),
    ("dp=2,fsdp=2", {"batch": 2}, "dp*fsdp=4 does not divide the batch (2)"),
    ("fsdp=3", {"batch": 3}, "fsdp=3 does not divide the model dimension d_model (8)"),
    ("dp=2,tp=2", {"devices": 2}, "needs 4 devices, more than the 2 devices available"),
    ("dp=128", {}, "needs 128 devices, more than the 64 simulated"),
    ("tp=2,tp=2", {}, "axis 'tp' given twice"),
    ("pp=2", {}, "unknown axis 'pp'"),
    ("dp=0", {}, "dp=0: expected a positive integer"),
    ("dp", {}, "'dp' is not AXIS=SIZE"),
    ("tp=-1", {}, "tp=-1: expected a positive integer size"),
    ("dp=2.5", {}, "dp=2.5: expected a positive integer size"),
    ("sp=64", {}, "sp=64 needs a sequence of at least 64 tokens (one per shard), more than "
                  "the context of tiny (16)"),
])
def test_a_bad_mesh_is_refused_before_anything_runs(mesh, kw, words, monkeypatch):
    def no_run(*a, **k):
        raise AssertionError("the subprocess ran")

    monkeypatch.setattr(subprocess, "run", no_run)
    with pytest.raises(ArgumentError, match="mesh: ") as err:
        run_shard_verify(TINY, mesh, **kw)
    assert words in str(err.value)


def test_the_devices_xla_flags_fixes_are_the_ones_that_exist(monkeypatch, capsys):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    assert main(["verify", "--preset", "tiny", "--mesh", "dp=2,tp=2"]) == 2
    assert "needs 4 devices, more than the 2 devices available" in capsys.readouterr().err


def test_a_malformed_device_count_in_xla_flags_is_named(monkeypatch, capsys):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=abc")
    assert main(["verify", "--preset", "tiny", "--mesh", "dp=2"]) == 2
    assert "expected a positive integer count of devices" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--mesh", "dp=2"],
                                  ["--preset", "tiny", "--dtype", "float32", "--mesh", "dp=2"],
                                  ["--zoo", "--mesh", "dp=2"],
                                  ["--preset", "tiny", "--mesh", "dp=2", "--backends", "numpy"],
                                  ["--hf", "config.json", "--mesh", "dp=2"]])
def test_mesh_needs_a_float64_preset(argv, capsys):
    assert main(["verify", *argv]) == 2
    assert "--mesh" in capsys.readouterr().err


def test_the_plan_without_a_dividing_vocabulary_replicates_it_and_says_so():
    plan = plan_mesh(TINY, "tp=2", seq_len=6, batch=None)
    assert not plan.vocab_parallel and "vocabulary (11) is replicated" in plan.notes[0]
    assert parse_mesh("dp=2, tp=1,vocab=none") == {"dp": 2, "tp": 1, "vocab": 0}
