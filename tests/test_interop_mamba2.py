"""Hugging Face Mamba-2 interop (issue 37, item 4): config, weights, node-by-node verification.

Oracles: ``transformers``' own ``Mamba2Config`` (its defaults and ``to_dict``), its
meta-device parameter count of the published configs, and a float64 ``Mamba2ForCausalLM``
(two groups of B, C, chunks of 4 over 6 tokens: a padded last chunk) run node by node against
the graph (:func:`~nlaverify.interop.hf_verify.verify_hf`). Every verdict is the tolerance
model's (``HFVerifyReport``); each claim is made non-vacuous by a planted mistake or the
left-out exact patch reported at its own node.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.errors import ShapeError, UnknownNameError
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.graph.run import init_params
from nlaverify.interop.hf_config import IGNORED, hf_config_dict, load_hf_config
from nlaverify.interop.weights import params_from_hf, params_to_hf

DATA = Path(__file__).resolve().parents[1] / "nlaverify" / "data" / "hf_configs"
#: a tiny Mamba-2 as a user writes it: d = 16, E = 32 in 8 heads of 4, 2 groups of a state
#: of 3, a convolution of 4, chunks of 4 (ignored: the chunked SSD equals the recurrence)
TINY = dict(model_type="mamba2", vocab_size=20, hidden_size=16, num_hidden_layers=2,
            num_heads=8, head_dim=4, n_groups=2, state_size=3, conv_kernel=4, chunk_size=4)
N = 6


def test_config_fields_defaults_and_hf_serialisation() -> None:
    c = load_hf_config(TINY).config
    assert (c.mixer, c.mlp, c.norm, c.positions, c.tied_embeddings) == (
        "mamba2", "none", "rmsnorm", "none", False)
    assert (c.d_model, c.d_inner, c.ssm_heads, c.ssm_groups, c.ssm_state, c.ssm_conv) == (
        16, 32, 8, 2, 3, 4)
    transformers = pytest.importorskip("transformers")
    full = transformers.AutoConfig.for_model(**TINY).to_dict()  # time_step_limit, rank...
    assert load_hf_config(full).config == c
    d = hf_config_dict(c, "mamba2")
    assert load_hf_config(d).config == c
    assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == c
    assert "ssm_ssd_chunked_equals_recurrence" in IGNORED["chunk_size"]
    assert "Mamba2Mixer" in IGNORED["time_step_rank"]


@pytest.mark.parametrize(("change", "match"), [
    ({"time_step_limit": [0.0, 10.0]}, r"'time_step_limit': only \(0.0, inf\)"),
    ({"time_step_limit": [0.001, math.inf]}, r"'time_step_limit'"),
    ({"num_heads": 4}, r"'num_heads'=4: num_heads \* head_dim = 16 must equal .* 32"),
    ({"n_groups": 3}, r"ssm_groups: expected a divisor of ssm_heads = 8"),
    ({"use_bias": True}, r"'use_bias': only False"),
    ({"use_conv_bias": False}, r"'use_conv_bias': only True"),
    ({"hidden_act": "gelu"}, r"'hidden_act': only 'silu'"),
    ({"rope_theta": 10000.0}, r"unsupported key 'rope_theta'")])
def test_inexpressible_keys_are_named(change: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**TINY, **change})


def test_export_refuses_what_mamba2config_cannot_express() -> None:
    c = load_hf_config(TINY).config
    for field, value in (("norm", "layernorm"), ("mlp", "gelu"), ("positions", "learned")):
        bad = TransformerConfig(**{**{f: getattr(c, f) for f in (
            "vocab_size", "d_model", "n_heads", "n_blocks", "d_mlp", "norm", "positions",
            "context", "mlp", "mixer", "ssm_heads", "ssm_groups", "ssm_state", "ssm_conv")},
            field: value, **({"d_mlp": 4} if field == "mlp" else {})})
        with pytest.raises(ConfigError, match=field):
            hf_config_dict(bad, "mamba2")


#: the released state-spaces/mamba2-* sizes and transformers' meta-device counts
PUBLISHED = [("mamba2-130m", 768, 24, 128_989_632), ("mamba2-370m", 1024, 48, 368_346_624),
             ("mamba2-780m", 1536, 48, 780_161_280), ("mamba2-1.3b", 2048, 48, 1_343_757_312),
             ("mamba2-2.7b", 2560, 64, 2_702_599_680)]


@pytest.mark.parametrize(("name", "d", "layers", "total"), PUBLISHED)
def test_published_configs_count_as_hf_meta(name: str, d: int, layers: int,
                                            total: int) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    h = load_hf_config(DATA / f"{name}.json")
    c = h.config
    assert (c.d_model, c.n_blocks, c.ssm_heads, c.ssm_groups, c.ssm_state) == (
        d, layers, 2 * d // 64, 1, 128)
    assert c.tied_embeddings and c.vocab_size == 50288
    counts = parameter_counts(build_transformer(c))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**h.raw))
    assert counts.total == sum(p.numel() for p in model.parameters()) == total
    assert counts.by_component["mamba2.A_log"] == layers * c.ssm_heads
    assert load_hf_config(hf_config_dict(c, "mamba2")).config == c


def _hf_mamba2(seed: int = 0):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    raw = {k: v for k, v in TINY.items() if k != "model_type"}
    model = transformers.Mamba2ForCausalLM(transformers.Mamba2Config(**raw)).to(torch.float64)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # HF's init sets A_log = log(1..H), D = 1, norms 1: draw all
        for _, prm in model.named_parameters():
            prm.copy_(torch.randn(prm.shape, generator=gen, dtype=prm.dtype)
                      * (0.5 if prm.ndim < 2 else 0.3))
    return torch, model


def test_weights_round_trip_and_bad_checkpoints() -> None:
    _, model = _hf_mamba2()
    hf = load_hf_config(TINY)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    params = params_from_hf(hf, state)
    back = params_to_hf(hf.config, "mamba2", params)
    assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)
    m, q = "backbone.layers.1.mixer.", "blocks.1.mamba2."
    W = state[m + "in_proj.weight"]  # rows [z 32 | x 32 | B 6 | C 6 | dt 8]
    assert np.array_equal(params[q + "in_z.W"], W[:32].T)
    assert np.array_equal(params[q + "in_C.W"], W[70:76].T)
    assert np.array_equal(params[q + "in_dt.W"], W[76:].T)
    assert np.array_equal(params[q + "conv_B.w"], state[m + "conv1d.weight"][32:38, 0])
    assert np.array_equal(params[q + "conv_C.b"], state[m + "conv1d.bias"][38:])
    assert np.array_equal(params[q + "dt.b"], state[m + "dt_bias"])
    assert np.array_equal(params[q + "norm.gamma"], state[m + "norm.weight"])
    seeded = init_params(build_transformer(hf.config), 1)
    again = params_from_hf(hf, params_to_hf(hf.config, "mamba2", seeded))
    assert all(np.array_equal(again[k], seeded[k]) for k in seeded)
    base = {k.removeprefix("backbone."): v for k, v in state.items()}  # the base model's keys
    assert all(np.array_equal(params_from_hf(hf, base)[k], params[k]) for k in params)
    bad = [({k: v for k, v in state.items() if k != m + "A_log"}, UnknownNameError,
            rf"missing key '{m}A_log'"),
           ({**state, m + "conv1d.weight": state[m + "conv1d.weight"][:, 0]}, ShapeError,
            rf"'{m}conv1d.weight': expected shape \(44, 1, 4\), got \(44, 4\)")]
    for st, error, match in bad:
        with pytest.raises(error, match=match):
            params_from_hf(hf, st)


def _verify(**kwargs):
    from nlaverify.interop.hf_verify import verify_hf

    return verify_hf(TINY, seq_len=N, **kwargs)


def test_exact_mode_agrees_in_every_node_loss_and_gradient() -> None:
    from nlaverify.interop.hf_patches import needed_patches
    from nlaverify.interop.hf_verify import format_hf_report

    r = _verify(exact=True)
    assert r.ok, format_hf_report(r)
    assert r.unmapped == []  # every graph node has its HF counterpart
    for node in ("blocks.0.mamba2.in_B", "blocks.0.mamba2.conv_C", "blocks.1.mamba2.x_heads",
                 "blocks.1.mamba2.scan", "blocks.1.mamba2.norm", "blocks.1.resid1",
                 "final_norm", "logits", "loss"):
        assert r.row(node).ok, node
    _, model = _hf_mamba2()
    assert {g.name for g in r.gradients} == {k for k, _ in model.named_parameters()}
    assert r.patches == sorted(needed_patches("mamba2", TINY)) == [
        "loss", "mamba2_gated_norm", "mamba2_scan", "mamba_logits", "mamba_residual",
        "rmsnorm"]
    fidelity = [c.name for c in r.checks if c.name.startswith("patch fidelity")]
    for node in ("blocks.0.mamba2.scan", "blocks.1.mamba2.norm", "loss"):
        assert any(f.startswith(f"patch fidelity {node}:") for f in fidelity), node
    assert all(c.ok for c in r.checks)


@pytest.mark.parametrize(("left_out", "node"), [("mamba2_scan", "blocks.0.mamba2.scan"),
                                                ("mamba2_gated_norm", "blocks.0.mamba2.norm")])
def test_a_left_out_float32_island_is_named_at_its_node(left_out: str, node: str) -> None:
    from nlaverify.interop.hf_patches import needed_patches

    r = _verify(exact=set(needed_patches("mamba2", TINY)) - {left_out})
    assert not r.ok and r.first_divergence == node
    assert r.first_beyond_float32 is None  # float32's rounding, nothing more
    assert _verify().first_beyond_float32 is None  # stock HF: within float32's bound


def test_planted_bc_swap_is_named_at_its_node() -> None:
    from nlaverify.interop.hf_verify import format_hf_report

    r = _verify(exact=True, plant="mamba2_bc_swap")
    assert r.first_divergence == "blocks.0.mamba2.in_B" and r.planted, format_hf_report(r)
    nodes = [x.node for x in r.rows]
    assert all(row.ok for row in r.rows[:nodes.index("blocks.0.mamba2.in_B")])


def test_mapping_bug_in_the_weights_table_is_named_at_its_node(monkeypatch) -> None:
    # nlaverify's own table reading block 0's conv taps of B as C's and C's as B's: weights
    # written both ways consistently (the round trip still holds), so only the node-by-node
    # run against HF sees it, at the convolution of B
    from dataclasses import replace

    from nlaverify.interop import weights_layout

    right = weights_layout.mamba2_entries
    swap = {"blocks.0.mamba2.conv_B.w": "blocks.0.mamba2.conv_C.w",
            "blocks.0.mamba2.conv_C.w": "blocks.0.mamba2.conv_B.w"}

    def swapped(c):
        return [replace(e, ours=tuple(swap.get(o, o) for o in e.ours)) for e in right(c)]

    monkeypatch.setattr(weights_layout, "mamba2_entries", swapped)
    hf = load_hf_config(TINY)
    seeded = init_params(build_transformer(hf.config), 1)
    again = params_from_hf(hf, params_to_hf(hf.config, "mamba2", seeded))
    assert all(np.array_equal(again[k], seeded[k]) for k in seeded)
    r = _verify(exact=True)
    assert not r.ok and r.first_divergence == "blocks.0.mamba2.conv_B"
    assert r.row("blocks.0.mamba2.in_C").ok


def test_checkpoint_directory_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from nlaverify.cli import main

    _, model = _hf_mamba2(seed=1)
    model.save_pretrained(tmp_path / "ck")
    assert json.loads((tmp_path / "ck" / "config.json").read_text())["n_groups"] == 2
    assert main(["verify", "--hf", str(tmp_path / "ck"), "--hf-exact"]) == 0
    out = capsys.readouterr().out
    assert "verify --hf mamba2: ok" in out
    assert "weights: HF from_pretrained vs params_to_hf(load_checkpoint)" in out
    assert main(["params", "--config", str(DATA / "mamba2-130m.json")]) == 0
    assert "128,989,632" in capsys.readouterr().out
