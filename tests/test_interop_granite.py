"""Hugging Face Granite interop (issue 23): config, weights, node-by-node verification.

Oracles: ``transformers``' own ``GraniteConfig`` (defaults, ``to_dict``), its meta-device
parameter count of Granite-3.0-2B, and a float64 ``GraniteForCausalLM`` run node by node
against the graph: the embedding times 3, each sublayer's output times 0.25 before the
residual add, scores times ``attention_multiplier`` 1/2 (:math:`s = 4 \\ne d_h`), logits over
2, Q/K/V/O biases, grouped-query attention. Non-vacuous: HF's residual multiplier dropped is
named at block 0's ``resid1``, a transposed ``q_proj`` at ``attn.q``, stock HF's float32
RMSNorm at the first norm.
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
#: a tiny Granite: d = 16, 4 query heads of 4 on 2 key/value heads, every multiplier away from 1
TINY = dict(model_type="granite", vocab_size=13, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, intermediate_size=20,
            max_position_embeddings=16, embedding_multiplier=3.0, residual_multiplier=0.25,
            attention_multiplier=0.5, logits_scaling=2.0, attention_bias=True)
N = 5


def test_config_fields_and_hf_serialisation() -> None:
    c = load_hf_config(TINY).config
    assert (c.embed_multiplier, c.residual_multiplier, c.query_pre_attn_scalar,
            c.temperature) == (3.0, 0.25, 4.0, 2.0)
    assert (c.attn_bias, c.out_bias, c.mlp_bias, c.mlp, c.n_kv_heads) == (
        True, True, False, "swiglu", 2)
    transformers = pytest.importorskip("transformers")
    full = transformers.AutoConfig.for_model(**TINY).to_dict()
    assert load_hf_config(full).config == c
    d = hf_config_dict(c, "granite")
    assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == c
    ones = load_hf_config({**TINY, "embedding_multiplier": 1.0, "residual_multiplier": 1})
    assert (ones.config.embed_multiplier, ones.config.residual_multiplier) == (None, None)


@pytest.mark.parametrize(("change", "match"), [
    ({"residual_multiplier": 0.0}, r"'residual_multiplier': expected a number > 0"),
    ({"attention_multiplier": -1.0}, r"'attention_multiplier'"),
    ({"logits_scaling": "2"}, r"'logits_scaling': expected a finite number"),
    ({"hidden_act": "relu"}, r"'hidden_act'.*'relu'"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}, r"rope_type"),
])
def test_bad_granite_configs_name_the_key(change: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**TINY, **change})


def test_granite_3_0_2b_counts_as_hf_meta() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    h = load_hf_config(DATA / "granite-3.0-2b.json")
    c = h.config
    assert (c.d_model, c.n_blocks, c.n_heads, c.n_kv_heads, c.d_mlp, c.vocab_size) == (
        2048, 40, 32, 8, 8192, 49155)
    assert (c.embed_multiplier, c.residual_multiplier, c.query_pre_attn_scalar,
            c.temperature, c.tied_embeddings) == (12.0, 0.22, 4096.0, 8.0, True)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**h.raw))
    total = parameter_counts(build_transformer(c)).total
    assert total == sum(p.numel() for p in model.parameters()) == 2_533_531_648


def test_weights_round_trip() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    raw = {k: v for k, v in TINY.items() if k != "model_type"}
    model = transformers.GraniteForCausalLM(transformers.GraniteConfig(**raw)).to(torch.float64)
    hf = load_hf_config(TINY)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    params = params_from_hf(hf, state)
    back = params_to_hf(hf.config, "granite", params)
    assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)


def test_exact_stock_and_planted(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from nlaverify.interop.hf_verify import format_hf_report, verify_hf

    r = verify_hf(TINY, seq_len=N, exact=True)
    assert r.ok, format_hf_report(r)
    assert sorted(r.unmapped) == sorted(["logits_tempered"] + [
        f"blocks.{b}.{n}" for b in range(2) for n in (
            "attn.k_shared", "attn.v_shared", "attn.q_scaled", "scaled1", "scaled2")])
    assert r.patches == ["attention_softmax", "loss", "rmsnorm", "rotary"]
    assert all(c.ok for c in r.checks)
    s = verify_hf(TINY, seq_len=N)  # stock: GraniteRMSNorm computes in float32
    assert s.first_divergence == "blocks.0.norm1" and s.first_beyond_float32 is None
    t = verify_hf(TINY, seq_len=N, exact=True, plant="transpose_square")
    assert t.first_divergence == "blocks.0.attn.q", format_hf_report(t)
    # HF's layers built without the residual multiplier (Llama's block)
    from transformers.models.granite import modeling_granite

    init = modeling_granite.GraniteDecoderLayer.__init__

    def plain(self, config, layer_idx):
        init(self, config, layer_idx)
        self.residual_multiplier = 1.0

    monkeypatch.setattr(modeling_granite.GraniteDecoderLayer, "__init__", plain)
    p = verify_hf(TINY, seq_len=N, exact=True)
    assert p.first_divergence == "blocks.0.resid1", format_hf_report(p)
