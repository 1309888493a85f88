"""Hugging Face GPT-J interop (issue 23): config, weights, node-by-node verification.

Oracles: ``transformers``' own ``GPTJConfig`` (defaults, ``attribute_map`` aliases,
``to_dict``), its meta-device parameter count of GPT-J-6B, and a float64 ``GPTJForCausalLM``
run node by node against the graph (one LayerNorm per parallel block, interleaved partial
rotary, unbiased attention, a biased ``lm_head``: ``unembed_bias``). Non-vacuous: HF's
``rotate_every_two`` swapped for the half pairing is named at ``q_rope``, and the float32
island of GPT-J's eager attention at ``heads``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nlaverify.config import ConfigError
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.graph.run import init_params
from nlaverify.interop.hf_config import hf_config_dict, load_hf_config
from nlaverify.interop.weights import params_from_hf, params_to_hf

DATA = Path(__file__).resolve().parents[1] / "nlaverify" / "data" / "hf_configs"
#: a tiny GPT-J: d = 16, 2 heads of 8, 4 coordinates of each rotated
TINY = dict(model_type="gptj", vocab_size=13, n_embd=16, n_layer=2, n_head=2, rotary_dim=4,
            n_positions=16, n_inner=20, bos_token_id=0, eos_token_id=0)
N = 5


def test_config_fields_aliases_and_hf_serialisation() -> None:
    c = load_hf_config(TINY).config
    assert (c.norm, c.positions, c.rope_pairing, c.rotary_dim, c.d_head, c.mlp) == (
        "layernorm", "rope", "interleaved", 4, 8, "gelu")
    assert (c.parallel_residual, c.parallel_norms, c.attn_bias, c.mlp_bias, c.unembed_bias) == (
        True, 1, False, True, True)
    aliased = {k: v for k, v in TINY.items() if k not in ("n_embd", "n_layer")}
    assert load_hf_config({**aliased, "hidden_size": 16, "num_hidden_layers": 2}).config == c
    transformers = pytest.importorskip("transformers")
    assert load_hf_config(transformers.AutoConfig.for_model(**TINY).to_dict()).config == c
    d = hf_config_dict(c, "gptj")
    assert load_hf_config(d).config == c
    assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == c
    assert load_hf_config({**TINY, "rotary_dim": 8}).config.rotary_dim is None  # whole head


@pytest.mark.parametrize(("change", "match"), [
    ({"rotary_dim": None}, r"'rotary_dim': expected an even integer in \[2, head_dim=8\]"),
    ({"rotary_dim": 3}, r"'rotary_dim'.*got 3"),
    ({"rotary_dim": 16}, r"'rotary_dim'.*got 16"),
    ({"tie_word_embeddings": True}, r"'tie_word_embeddings': only false"),
    ({"hidden_size": 32}, r"'hidden_size'=32 contradicts 'n_embd'=16"),
    ({"activation_function": "swish"}, r"'activation_function'.*'swish'"),
    ({"rope_theta": 5.0}, r"unsupported key 'rope_theta'"),
])
def test_bad_gptj_configs_name_the_key(change: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**TINY, **change})


def test_unembed_bias_option() -> None:
    c = load_hf_config(TINY).config
    g = build_transformer(c)
    assert set(g.predecessors("logits")) == {"final_norm", "unembed.W_U", "unembed.b_U"}
    assert parameter_counts(g).total - parameter_counts(
        build_transformer(c.replace(unembed_bias=False))).total == c.vocab_size
    with pytest.raises(ConfigError, match=r"TransformerConfig\.unembed_bias"):
        c.replace(tied_embeddings=True)


def test_gpt_j_6b_counts_as_hf_meta() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    h = load_hf_config(DATA / "gpt-j-6b.json")
    c = h.config
    assert (c.d_model, c.n_blocks, c.n_heads, c.d_mlp, c.vocab_size, c.rotary_dim) == (
        4096, 28, 16, 16384, 50400, 64)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**h.raw))
    total = parameter_counts(build_transformer(c)).total
    assert total == sum(p.numel() for p in model.parameters()) == 6_050_882_784


def _hf_gptj(seed: int = 0):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    raw = {k: v for k, v in TINY.items() if k != "model_type"}
    return transformers.GPTJForCausalLM(transformers.GPTJConfig(**raw)).to(torch.float64)


def test_weights_round_trip() -> None:
    hf = load_hf_config(TINY)
    state = {k: v.detach().numpy() for k, v in _hf_gptj().state_dict().items()}
    params = params_from_hf(hf, state)
    assert np.array_equal(params["unembed.b_U"], state["lm_head.bias"])
    back = params_to_hf(hf.config, "gptj", params)
    assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)
    seeded = init_params(build_transformer(hf.config), 1)
    again = params_from_hf(hf, params_to_hf(hf.config, "gptj", seeded))
    assert all(np.array_equal(again[k], seeded[k]) for k in seeded)
    base = {k.removeprefix("transformer."): v for k, v in state.items()}
    assert all(np.array_equal(params_from_hf(hf, base)[k], params[k]) for k in params)


def _verify(**kwargs):
    from nlaverify.interop.hf_verify import verify_hf

    return verify_hf(TINY, seq_len=N, **kwargs)


def test_exact_mode_agrees_in_every_node_loss_and_gradient() -> None:
    from nlaverify.interop.hf_verify import format_hf_report

    r = _verify(exact=True)
    assert r.ok, format_hf_report(r)
    assert r.unmapped == ["blocks.0.resid1", "blocks.1.resid1"]  # HF: attn + mlp + x at once
    assert r.row("logits").ok and r.row("blocks.1.attn.k_rope").ok
    assert {g.name for g in r.gradients} == {k for k, _ in _hf_gptj().named_parameters()}
    assert r.patches == ["attention_softmax", "loss", "rotary"]
    assert all(c.ok for c in r.checks)
    assert any(c.name.startswith("rotary frequencies") for c in r.checks)


def test_stock_mode_departs_at_the_float32_attention() -> None:
    r = _verify()  # GPT-J's eager attention forms Q K^T in float32
    assert r.first_divergence == "blocks.0.attn.heads" and r.first_beyond_float32 is None
    assert r.verdict


def test_planted_half_pairing_is_named_at_q_rope(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from transformers.models.gptj import modeling_gptj

    def rotate_half(x):  # the NeoX pairing where GPT-J's tables are interleaved
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    monkeypatch.setattr(modeling_gptj, "rotate_every_two", rotate_half)
    r = _verify(exact=True)
    assert r.first_divergence == "blocks.0.attn.q_rope"
    assert all(row.ok for row in r.rows[:[x.node for x in r.rows].index("blocks.0.attn.q_rope")])


def test_checkpoint_directory_cli(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from nlaverify.cli import main

    _hf_gptj(seed=1).save_pretrained(tmp_path / "ck")
    assert json.loads((tmp_path / "ck" / "config.json").read_text())["model_type"] == "gptj"
    assert main(["verify", "--hf", str(tmp_path / "ck"), "--hf-exact"]) == 0
    out = capsys.readouterr().out
    assert "verify --hf gptj: ok" in out
    assert "weights: HF from_pretrained vs params_to_hf(load_checkpoint)" in out

