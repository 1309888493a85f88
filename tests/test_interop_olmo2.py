"""Hugging Face OLMo 2 interop (issue 23): config, weights, node-by-node verification.

Oracles: ``transformers``' own ``Olmo2Config`` (defaults, ``to_dict``), its meta-device
parameter count of OLMo-2-1124-7B, and a float64 ``Olmo2ForCausalLM`` run node by node
against the graph: no norm before the sublayers and one after each, QK-norm over the whole
projection (gains of :math:`h d_h`, permuted per head with RoPE's pairing), grouped-query
attention, every attention bias. Non-vacuous: ``q_norm``'s gains left in HF's pairing are
named at ``attn.q_norm``, a transposed ``q_proj`` at ``attn.q``, stock HF's float32 RMSNorm
at the first ``q_norm``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nlaverify.config import ConfigError
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.interop.hf_config import hf_config_dict, load_hf_config
from nlaverify.interop.weights import params_from_hf, params_to_hf

DATA = Path(__file__).resolve().parents[1] / "nlaverify" / "data" / "hf_configs"
#: a tiny OLMo 2: d = 16, 2 query heads of 8 on 1 key/value head, Q/K/V/O biases
TINY = dict(model_type="olmo2", vocab_size=13, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, intermediate_size=20,
            max_position_embeddings=16, attention_bias=True)
N = 5


def test_config_fields_and_hf_serialisation() -> None:
    c = load_hf_config(TINY).config
    assert (c.pre_norms, c.post_norms, c.qk_norm, c.qk_norm_joint, c.norm, c.mlp) == (
        False, True, True, True, "rmsnorm", "swiglu")
    assert (c.attn_bias, c.out_bias, c.n_kv_heads, c.d_head) == (True, True, 1, 8)
    transformers = pytest.importorskip("transformers")
    full = transformers.AutoConfig.for_model(**TINY).to_dict()
    assert load_hf_config(full).config == c
    d = hf_config_dict(c, "olmo2")
    assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == c


@pytest.mark.parametrize(("change", "match"), [
    ({"head_dim": 4}, r"unsupported key 'head_dim'"),
    ({"hidden_act": "relu"}, r"'hidden_act'.*'relu'"),
    ({"hidden_size": 17}, r"'hidden_size'=17"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}, r"rope_type"),
])
def test_bad_olmo2_configs_name_the_key(change: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**TINY, **change})


def test_olmo_2_7b_counts_as_hf_meta() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    h = load_hf_config(DATA / "olmo-2-1124-7b.json")
    c = h.config
    assert (c.d_model, c.n_blocks, c.n_heads, c.d_mlp, c.vocab_size, c.rope_base) == (
        4096, 32, 32, 11008, 100352, 500000)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**h.raw))
    total = parameter_counts(build_transformer(c)).total
    assert total == sum(p.numel() for p in model.parameters()) == 7_298_617_344


def test_weights_round_trip() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    raw = {k: v for k, v in TINY.items() if k != "model_type"}
    model = transformers.Olmo2ForCausalLM(transformers.Olmo2Config(**raw)).to(torch.float64)
    hf = load_hf_config(TINY)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    params = params_from_hf(hf, state)
    assert params["blocks.0.attn.q_norm.gamma"].shape == (16,)  # h d_h, not d_h
    assert "blocks.0.norm1.gamma" not in params
    back = params_to_hf(hf.config, "olmo2", params)
    assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)


def test_exact_stock_and_planted(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from nlaverify.interop import hf_verify
    from nlaverify.interop.hf_verify import format_hf_report, verify_hf
    from nlaverify.interop.weights_layout import rope_permutation

    r = verify_hf(TINY, seq_len=N, exact=True)
    assert r.ok, format_hf_report(r)
    assert sorted(r.unmapped) == sorted(f"blocks.{b}.attn.{n}_shared" for b in range(2)
                                        for n in "kv")
    assert r.patches == ["attention_softmax", "loss", "rmsnorm", "rotary"]
    assert all(c.ok for c in r.checks)
    s = verify_hf(TINY, seq_len=N)  # stock: Olmo2RMSNorm computes in float32
    assert s.first_divergence == "blocks.0.attn.q_norm" and s.first_beyond_float32 is None
    t = verify_hf(TINY, seq_len=N, exact=True, plant="transpose_square")
    assert t.first_divergence == "blocks.0.attn.q", format_hf_report(t)
    # block 0's q_norm gains written in nlaverify's pairing (the per-head permutation
    # forgotten), as a layout that treats the joint norm like Qwen3's per-head one would
    stock = hf_verify._load_weights
    perm = np.concatenate([h * 8 + rope_permutation(8) for h in range(2)])

    def unpermuted(model, state):
        key = "model.layers.0.self_attn.q_norm.weight"
        stock(model, {**state, key: state[key][perm]})

    monkeypatch.setattr(hf_verify, "_load_weights", unpermuted)
    p = verify_hf(TINY, seq_len=N, exact=True)
    assert p.first_divergence == "blocks.0.attn.q_norm", format_hf_report(p)
