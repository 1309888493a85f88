"""Hugging Face Ministral interop (issue 23): config, weights, node-by-node verification.

Oracles: ``transformers``' own ``MinistralConfig`` (defaults, ``layer_types``, ``to_dict``),
its meta-device parameter count of Ministral-8B, and a float64 ``MinistralForCausalLM`` run
node by node against the graph: a window of 3 over 5 tokens on block 1 only, grouped-query
attention, ``head_dim`` 6 (4 heads on d = 16). Non-vacuous: HF's window dropped is named at
block 1's ``attn.heads`` (block 0, global, agreeing), stock HF's float32 RMSNorm at the
first norm.
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
TINY = dict(model_type="ministral", vocab_size=13, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=6, intermediate_size=20,
            max_position_embeddings=16, sliding_window=3,
            layer_types=["full_attention", "sliding_attention"])
N = 5


def test_config_fields_and_hf_serialisation() -> None:
    c = load_hf_config(TINY).config
    assert (c.sliding_window, c.window_layers, c.d_head, c.n_kv_heads, c.attn_bias) == (
        3, (1,), 6, 2, False)
    transformers = pytest.importorskip("transformers")
    full = transformers.AutoConfig.for_model(**TINY).to_dict()
    assert load_hf_config(full).config == c
    d = hf_config_dict(c, "ministral")
    assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == c
    every = {k: v for k, v in TINY.items() if k != "layer_types"}  # the class default: all
    assert (load_hf_config(every).config.window_layers,
            load_hf_config(every).config.sliding_window) == (None, 3)


@pytest.mark.parametrize(("change", "match"), [
    ({"layer_types": ["full_attention"]}, r"'layer_types': expected 2 entries"),
    ({"sliding_window": None}, r"'sliding_window': null"),
    ({"attention_bias": True}, r"unsupported key 'attention_bias'"),
    ({"hidden_act": "relu"}, r"'hidden_act'.*'relu'"),
])
def test_bad_ministral_configs_name_the_key(change: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**TINY, **change})


def test_ministral_8b_counts_as_hf_meta() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    h = load_hf_config(DATA / "ministral-8b.json")
    c = h.config
    assert (c.d_model, c.n_blocks, c.n_heads, c.n_kv_heads, c.d_head, c.d_mlp,
            c.vocab_size, c.rope_base) == (4096, 36, 32, 8, 128, 12288, 131072, 100_000_000)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**h.raw))
    total = parameter_counts(build_transformer(c)).total
    assert total == sum(p.numel() for p in model.parameters()) == 8_019_808_256


def test_weights_round_trip() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    raw = {k: v for k, v in TINY.items() if k != "model_type"}
    model = transformers.MinistralForCausalLM(transformers.MinistralConfig(**raw))
    model = model.to(torch.float64)
    hf = load_hf_config(TINY)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    params = params_from_hf(hf, state)
    back = params_to_hf(hf.config, "ministral", params)
    assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)


def test_exact_stock_and_planted(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from transformers.models.ministral import modeling_ministral

    from nlaverify.interop.hf_verify import format_hf_report, verify_hf

    r = verify_hf(TINY, seq_len=N, exact=True)
    assert r.ok, format_hf_report(r)
    assert r.patches == ["attention_softmax", "loss", "rmsnorm", "rotary"]
    assert all(c.ok for c in r.checks)
    s = verify_hf(TINY, seq_len=N)
    assert s.first_divergence == "blocks.0.norm1" and s.first_beyond_float32 is None
    monkeypatch.setattr(modeling_ministral, "create_sliding_window_causal_mask",
                        modeling_ministral.create_causal_mask)
    w = verify_hf(TINY, seq_len=N, exact=True)
    assert w.first_divergence == "blocks.1.attn.heads", format_hf_report(w)
