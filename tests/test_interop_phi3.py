"""Hugging Face Phi-3 interop (issue 23): config, weights, node-by-node verification.

Oracles: ``transformers``' own ``Phi3Config`` (defaults, ``rope_parameters``, ``to_dict``),
its meta-device parameter count of Phi-3-mini, and a float64 ``Phi3ForCausalLM`` run node by
node against the graph: the fused ``qkv_proj`` and ``gate_up_proj`` split row-wise,
grouped-query attention, half of each head rotated in the half pairing, a window of 3 over 5
tokens. Non-vacuous: ``gate_up_proj``'s halves swapped is named at ``mlp.gate``, a fused
``qkv_proj`` whose key and value rows are swapped at ``attn.k``, stock HF's float32 RMSNorm
at the first norm.
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
#: a tiny Phi-3: d = 16, 2 query heads of 8 on 1 key/value head, 4 coordinates rotated
TINY = dict(model_type="phi3", vocab_size=13, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, intermediate_size=20,
            max_position_embeddings=16, sliding_window=3, partial_rotary_factor=0.5,
            pad_token_id=0, bos_token_id=0, eos_token_id=0)
N = 5


def test_config_fields_and_hf_serialisation() -> None:
    c = load_hf_config(TINY).config
    assert (c.rope_pairing, c.rotary_dim, c.n_kv_heads, c.sliding_window, c.mlp) == (
        "half", 4, 1, 3, "swiglu")
    assert (c.attn_bias, c.mlp_bias, c.norm) == (False, False, "rmsnorm")
    transformers = pytest.importorskip("transformers")
    full = transformers.AutoConfig.for_model(**TINY).to_dict()
    assert load_hf_config(full).config == c
    d = hf_config_dict(c, "phi3")
    assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == c
    whole = {k: v for k, v in TINY.items() if k != "partial_rotary_factor"}
    assert load_hf_config(whole).config.rotary_dim is None  # Phi3Config's default 1.0


@pytest.mark.parametrize(("change", "match"), [
    ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0],
                          "long_factor": [1.0]}}, r"rope_type"),
    ({"attention_bias": False}, r"unsupported key 'attention_bias'"),
    ({"partial_rotary_factor": 0.375}, r"int\(8 \* 0.375\) = 3 coordinates"),
    ({"hidden_act": "relu"}, r"'hidden_act'.*'relu'"),
])
def test_bad_phi3_configs_name_the_key(change: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**TINY, **change})


def test_phi_3_mini_counts_as_hf_meta() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    h = load_hf_config(DATA / "phi-3-mini-4k.json")
    c = h.config
    assert (c.d_model, c.n_blocks, c.n_heads, c.d_mlp, c.vocab_size, c.sliding_window) == (
        3072, 32, 32, 8192, 32064, 2047)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**h.raw))
    total = parameter_counts(build_transformer(c)).total
    assert total == sum(p.numel() for p in model.parameters()) == 3_821_079_552


def test_weights_round_trip() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    raw = {k: v for k, v in TINY.items() if k != "model_type"}
    model = transformers.Phi3ForCausalLM(transformers.Phi3Config(**raw)).to(torch.float64)
    hf = load_hf_config(TINY)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    params = params_from_hf(hf, state)
    assert params["blocks.0.attn.k.W_K"].shape == (16, 8)
    q = state["model.layers.0.self_attn.qkv_proj.weight"]
    assert np.array_equal(params["blocks.0.attn.v.W_V"], q[24:].T)  # rows [Q | K | V]
    back = params_to_hf(hf.config, "phi3", params)
    assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)


def test_exact_stock_and_planted(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from nlaverify.interop import hf_verify
    from nlaverify.interop.hf_verify import format_hf_report, verify_hf

    r = verify_hf(TINY, seq_len=N, exact=True)
    assert r.ok, format_hf_report(r)
    assert sorted(r.unmapped) == sorted(f"blocks.{b}.attn.{n}_shared" for b in range(2)
                                        for n in "kv")
    assert r.patches == ["attention_softmax", "loss", "rmsnorm", "rotary"]
    assert all(c.ok for c in r.checks)
    s = verify_hf(TINY, seq_len=N)  # stock: Phi3RMSNorm computes in float32
    assert s.first_divergence == "blocks.0.norm1" and s.first_beyond_float32 is None
    stock = hf_verify._load_weights

    def planted(rows):  # block 0's fused weight with two row blocks exchanged
        def load(model, state):
            key, (a, b, c) = rows
            w = state[key]
            stock(model, {**state, key: np.concatenate([w[a], w[c], w[b]])})
        return load

    for rows, node in ((("model.layers.0.mlp.gate_up_proj.weight",
                         (slice(0, 0), slice(0, 20), slice(20, 40))), "blocks.0.mlp.gate"),
                       (("model.layers.0.self_attn.qkv_proj.weight",
                         (slice(0, 16), slice(16, 24), slice(24, 32))), "blocks.0.attn.k")):
        monkeypatch.setattr(hf_verify, "_load_weights", planted(rows))
        p = verify_hf(TINY, seq_len=N, exact=True)
        assert p.first_divergence == node, format_hf_report(p)
