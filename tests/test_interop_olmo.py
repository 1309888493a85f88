"""Hugging Face OLMo (v1) interop (issue 23): config, weights, node-by-node verification.

Oracles: ``transformers``' own ``OlmoConfig`` (defaults, ``to_dict``), its meta-device
parameter count of OLMo-7B, and a float64 ``OlmoForCausalLM`` run node by node against the
graph: LayerNorms with no learned gain or bias (``norm_affine=False``: constant gains 1 and
biases 0, nothing in the state dict), RoPE permuted to the interleaved pairing, grouped-query
attention, every attention bias. Non-vacuous: ``q_proj`` rows loaded without the RoPE
permutation are named at ``attn.q``, HF's half pairing swapped at ``attn.q_rope``, a
transposed ``q_proj`` at ``attn.q``, stock HF's float32 ``OlmoLayerNorm`` at the first norm.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nlaverify.config import ConfigError
from nlaverify.graph.build import build_transformer, graph_constants, parameter_counts
from nlaverify.interop.hf_config import hf_config_dict, load_hf_config
from nlaverify.interop.weights import params_from_hf, params_to_hf

DATA = Path(__file__).resolve().parents[1] / "nlaverify" / "data" / "hf_configs"
#: a tiny OLMo: d = 16, 2 query heads of 8 on 1 key/value head, Q/K/V/O biases, tied
TINY = dict(model_type="olmo", vocab_size=13, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, intermediate_size=20,
            max_position_embeddings=16, attention_bias=True, tie_word_embeddings=True,
            eos_token_id=None)
N = 5


def test_config_fields_and_hf_serialisation() -> None:
    c = load_hf_config(TINY).config
    assert (c.norm, c.norm_affine, c.norm_eps, c.mlp, c.positions) == (
        "layernorm", False, 1e-5, "swiglu", "rope")
    assert (c.attn_bias, c.out_bias, c.n_kv_heads, c.d_head, c.tied_embeddings) == (
        True, True, 1, 8, True)
    g = build_transformer(c)
    assert "blocks.0.norm1.gamma" in graph_constants(g)  # ones, not a parameter
    assert not [n for n, a in g.nodes(data=True) if a["kind"] == "param" and "norm" in n]
    transformers = pytest.importorskip("transformers")
    full = transformers.AutoConfig.for_model(**TINY).to_dict()
    assert load_hf_config(full).config == c
    d = hf_config_dict(c, "olmo")
    assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == c


@pytest.mark.parametrize(("change", "match"), [
    ({"clip_qkv": 8.0}, r"'clip_qkv'=8\.0"),
    ({"head_dim": 4}, r"unsupported key 'head_dim'"),
    ({"rms_norm_eps": 1e-6}, r"unsupported key 'rms_norm_eps'"),
    ({"hidden_act": "relu"}, r"'hidden_act'.*'relu'"),
    ({"hidden_size": 17}, r"'hidden_size'=17"),
])
def test_bad_olmo_configs_name_the_key(change: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**TINY, **change})


def test_olmo_7b_counts_as_hf_meta() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    h = load_hf_config(DATA / "olmo-7b.json")
    c = h.config
    assert (c.d_model, c.n_blocks, c.n_heads, c.d_mlp, c.vocab_size, c.tied_embeddings) == (
        4096, 32, 32, 11008, 50304, False)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**h.raw))
    total = parameter_counts(build_transformer(c)).total
    assert total == sum(p.numel() for p in model.parameters()) == 6_888_095_744


def test_weights_round_trip() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    raw = {k: v for k, v in TINY.items() if k != "model_type"}
    model = transformers.OlmoForCausalLM(transformers.OlmoConfig(**raw)).to(torch.float64)
    hf = load_hf_config(TINY)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    assert not [k for k in state if "norm" in k]  # OlmoLayerNorm has no weight
    params = params_from_hf(hf, state)
    assert "blocks.0.norm1.gamma" not in params and "final_norm.gamma" not in params
    back = params_to_hf(hf.config, "olmo", params)
    assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)


def test_exact_stock_and_planted(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from nlaverify.interop import hf_verify
    from nlaverify.interop.hf_verify import format_hf_report, verify_hf
    from nlaverify.interop.weights_layout import rope_permutation

    r = verify_hf(TINY, seq_len=N, exact=True)
    assert r.ok, format_hf_report(r)
    assert r.patches == ["attention_softmax", "layernorm", "loss", "rotary"]
    assert all(c.ok for c in r.checks)
    s = verify_hf(TINY, seq_len=N)  # stock: OlmoLayerNorm computes in float32
    assert s.first_divergence == "blocks.0.norm1" and s.first_beyond_float32 is None
    t = verify_hf(TINY, seq_len=N, exact=True, plant="transpose_square")
    assert t.first_divergence == "blocks.0.attn.q", format_hf_report(t)
    p = verify_hf(TINY, seq_len=N, exact=True, plant="rope_pairing")
    assert p.first_divergence == "blocks.0.attn.q_rope", format_hf_report(p)
    # block 0's q_proj rows (and bias) left in nlaverify's pairing: a layout that forgets
    # RoPE's per-head permutation, as if OLMo's rotate_half paired (2i, 2i+1)
    stock = hf_verify._load_weights
    perm = np.concatenate([h * 8 + rope_permutation(8) for h in range(2)])

    def unpermuted(model, state):
        keys = ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.bias")
        stock(model, {**state, **{k: state[k][perm] for k in keys}})

    monkeypatch.setattr(hf_verify, "_load_weights", unpermuted)
    u = verify_hf(TINY, seq_len=N, exact=True)
    assert u.first_divergence == "blocks.0.attn.q", format_hf_report(u)
