"""Hugging Face GPT-NeoX (Pythia) interop (issue 23): config, weights, node-by-node verification.

Oracles: ``transformers``' own ``GPTNeoXConfig`` (its defaults, its legacy ``rotary_pct`` /
``rotary_emb_base`` keys, ``to_dict``), its meta-device parameter count of the published
Pythia-160M config, and a float64 ``GPTNeoXForCausalLM`` run node by node against the graph
(parallel residual with two LayerNorms, partial rotary in the half pairing, the per-head
fused ``query_key_value``). Each claim is made non-vacuous by a planted mistake (the fused
QKV read as blocked) or a left-out exact patch reported at its own node.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nlaverify.config import ConfigError
from nlaverify.errors import ShapeError, UnknownNameError
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.graph.run import init_params
from nlaverify.interop.hf_config import hf_config_dict, load_hf_config
from nlaverify.interop.weights import params_from_hf, params_to_hf

DATA = Path(__file__).resolve().parents[1] / "nlaverify" / "data" / "hf_configs"
#: a tiny Pythia: d = 16, 2 heads of 8, half of each head rotated (4 coordinates)
TINY = dict(model_type="gpt_neox", vocab_size=13, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=20, rotary_pct=0.5,
            max_position_embeddings=16)
N = 5


def test_config_fields_legacy_keys_and_hf_serialisation() -> None:
    c = load_hf_config(TINY).config
    assert (c.norm, c.positions, c.rope_pairing, c.rotary_dim, c.d_head, c.mlp) == (
        "layernorm", "rope", "half", 4, 8, "gelu_erf")
    assert (c.parallel_residual, c.parallel_norms, c.attn_bias, c.mlp_bias) == (
        True, 2, True, True)
    assert not c.tied_embeddings and c.rope_base == 10000 and c.norm_eps == 1e-5
    transformers = pytest.importorskip("transformers")
    full = transformers.AutoConfig.for_model(**TINY).to_dict()  # rope_parameters, v5 keys
    assert "rotary_pct" not in full and full["rope_parameters"]["partial_rotary_factor"] == 0.5
    assert load_hf_config(full).config == c
    d = hf_config_dict(c, "gpt_neox")
    assert load_hf_config(d).config == c
    assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == c
    # the default fraction (0.25) of d_h = 8 is 2 coordinates; the whole head is None
    assert load_hf_config({**TINY, "rotary_pct": 0.25}).config.rotary_dim == 2
    assert load_hf_config({**TINY, "rotary_pct": 1.0}).config.rotary_dim is None


@pytest.mark.parametrize(("change", "match"), [
    ({"rotary_pct": 0.375}, r"int\(8 \* 0.375\) = 3 coordinates.*even"),
    ({"rotary_pct": 0.0}, r"'partial_rotary_factor' \(rotary_pct\)"),
    ({"rotary_pct": 0.5, "rope_parameters": {"partial_rotary_factor": 0.25}}, "contradicts"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0}}, "only 'default'"),
    ({"hidden_act": "swish"}, r"'hidden_act'.*'swish'"),
    ({"hidden_size": 15}, r"'hidden_size'=15: expected a multiple"),
    ({"rope_theta": 5.0}, r"unsupported key 'rope_theta'"),
    ({"router_jitter_noise": 0.1}, r"unsupported key 'router_jitter_noise'"),
])
def test_bad_neox_configs_name_the_key(change: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**TINY, **change})


def test_pythia_160m_counts_as_hf_meta() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    h = load_hf_config(DATA / "pythia-160m.json")
    c = h.config
    assert (c.d_model, c.n_blocks, c.n_heads, c.d_mlp, c.vocab_size, c.context) == (
        768, 12, 12, 3072, 50304, 2048)
    assert (c.rotary_dim, c.parallel_residual, c.tied_embeddings) == (16, True, False)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**h.raw))
    total = parameter_counts(build_transformer(c)).total
    assert total == sum(p.numel() for p in model.parameters()) == 162_322_944


def test_pythia_1_4b_counts_as_hf_meta() -> None:
    """Issue 23's release check: Pythia-1.4B (EleutherAI/pythia-1.4b's config.json)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    h = load_hf_config(DATA / "pythia-1.4b.json")
    c = h.config
    assert (c.d_model, c.n_blocks, c.n_heads, c.d_mlp, c.rotary_dim) == (2048, 24, 16, 8192, 32)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**{k: v for k, v in h.raw.items()
                                                 if not k.startswith("_")}))
    total = parameter_counts(build_transformer(c)).total
    assert total == sum(p.numel() for p in model.parameters()) == 1_414_647_808


def _hf_neox(seed: int = 0, **change):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    raw = {k: v for k, v in {**TINY, **change}.items() if k != "model_type"}
    return transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**raw)).to(torch.float64)


def test_weights_round_trip_fused_qkv_layout_and_bad_checkpoints() -> None:
    hf = load_hf_config(TINY)
    state = {k: v.detach().numpy() for k, v in _hf_neox().state_dict().items()}
    params = params_from_hf(hf, state)
    back = params_to_hf(hf.config, "gpt_neox", params)
    assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)
    # query_key_value's rows per head: (q, k, v) of head 0, then of head 1 (not blocked)
    w = state["gpt_neox.layers.0.attention.query_key_value.weight"]
    assert np.array_equal(params["blocks.0.attn.k.W_K"][:, 8:], w[24 + 8:24 + 16].T)
    assert np.array_equal(params["blocks.0.attn.q.W_Q"][:, :8], w[:8].T)
    seeded = init_params(build_transformer(hf.config), 1)
    again = params_from_hf(hf, params_to_hf(hf.config, "gpt_neox", seeded))
    assert all(np.array_equal(again[k], seeded[k]) for k in seeded)
    # released checkpoints: no gpt_neox. prefix, the head called embed_out
    legacy = {("embed_out.weight" if k == "lm_head.weight" else k.removeprefix("gpt_neox.")): v
              for k, v in state.items()}
    assert all(np.array_equal(params_from_hf(hf, legacy)[k], params[k]) for k in params)
    a = "gpt_neox.layers.1.attention."
    for st, error, match in (
            ({k: v for k, v in state.items() if k != a + "dense.bias"}, UnknownNameError,
             rf"missing key '{a}dense.bias'"),
            ({**state, a + "query_key_value.bias": np.zeros(16)}, ShapeError,
             rf"'{a}query_key_value.bias': expected shape \(48,\), got \(16,\)")):
        with pytest.raises(error, match=match):
            params_from_hf(hf, st)


def _verify(**kwargs):
    from nlaverify.interop.hf_verify import verify_hf

    return verify_hf(kwargs.pop("source", TINY), seq_len=N, **kwargs)


def test_exact_mode_agrees_in_every_node_loss_and_gradient() -> None:
    from nlaverify.interop.hf_patches import needed_patches
    from nlaverify.interop.hf_verify import format_hf_report

    r = _verify(exact=True)
    assert r.ok, format_hf_report(r)
    # HF sums the parallel block as mlp + attn + x in one statement: no x + attn tensor
    assert r.unmapped == ["blocks.0.resid1", "blocks.1.resid1"]
    assert r.row("blocks.1.attn.q_rope").ok and r.row("blocks.0.norm2").ok
    assert {g.name for g in r.gradients} == {k for k, _ in _hf_neox().named_parameters()}
    assert r.patches == sorted(needed_patches("gpt_neox", TINY)) == [
        "attention_softmax", "loss", "rotary"]
    assert any(c.name.startswith("rotary frequencies") and c.ok for c in r.checks)
    assert all(c.ok for c in r.checks)
    # the sequential block, no attention biases, the tanh GELU, tied: every node mapped
    s = _verify(source={**TINY, "use_parallel_residual": False, "attention_bias": False,
                        "hidden_act": "gelu_new", "tie_word_embeddings": True}, exact=True)
    assert s.ok and s.unmapped == [], format_hf_report(s)


def test_stock_mode_and_each_float32_island_at_its_node() -> None:
    from nlaverify.interop.hf_patches import needed_patches

    r = _verify()  # stock: the float32 RoPE angles are the first departure
    assert r.first_divergence == "blocks.0.attn.q_rope" and r.first_beyond_float32 is None
    assert r.verdict
    r = _verify(exact=set(needed_patches("gpt_neox", TINY)) - {"attention_softmax"})
    assert r.first_divergence == "blocks.0.attn.heads" and r.first_beyond_float32 is None


def test_planted_blocked_qkv_is_named_at_its_node() -> None:
    from nlaverify.interop.hf_verify import format_hf_report

    r = _verify(exact=True, plant="qkv_blocked")
    assert r.first_divergence == "blocks.0.attn.q" and r.planted, format_hf_report(r)
    assert all(row.ok for row in r.rows[:[x.node for x in r.rows].index("blocks.0.attn.q")])


def test_checkpoint_directory_cli(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from nlaverify.cli import main

    _hf_neox(seed=1).save_pretrained(tmp_path / "ck")  # float64, HF's own initialisation
    assert json.loads((tmp_path / "ck" / "config.json").read_text())["model_type"] == \
        "gpt_neox"
    assert main(["verify", "--hf", str(tmp_path / "ck"), "--hf-exact"]) == 0
    out = capsys.readouterr().out
    assert "verify --hf gpt_neox: ok" in out
    assert "weights: HF from_pretrained vs params_to_hf(load_checkpoint)" in out
