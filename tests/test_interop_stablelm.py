"""Hugging Face StableLM-2 interop (issue 23): config, weights, node-by-node verification.

Oracles: ``transformers``' own ``StableLmConfig`` (defaults, legacy top-level
``partial_rotary_factor`` / ``rope_theta``, ``to_dict``), its meta-device parameter count of
StableLM-2-1.6B, and float64 ``StableLmForCausalLM``\\ s run node by node against the graph:
sequential with Q/K/V biases and grouped-query attention, and parallel (one LayerNorm) with
tied embeddings; LayerNorm with bias, SwiGLU, half of each head rotated in the half pairing.
Non-vacuous: HF's ``rotate_half`` swapped for the interleaved pairing is named at ``q_rope``,
a transposed ``q_proj`` at ``attn.q``, stock HF's float32 RoPE angles at ``q_rope``.
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
#: a tiny StableLM-2: d = 16, 2 query heads of 8 on 1 key/value head, 4 coordinates of each
#: head rotated (with 2, one pair, the two pairings would coincide), Q/K/V biases
TINY = dict(model_type="stablelm", vocab_size=13, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, intermediate_size=20,
            max_position_embeddings=16, partial_rotary_factor=0.5, use_qkv_bias=True,
            bos_token_id=0, eos_token_id=0)
PARALLEL = {**TINY, "use_parallel_residual": True, "tie_word_embeddings": True}
N = 5


def test_config_fields_and_hf_serialisation() -> None:
    c = load_hf_config(TINY).config
    assert (c.norm, c.rope_pairing, c.rotary_dim, c.d_head, c.n_kv_heads, c.mlp) == (
        "layernorm", "half", 4, 8, 1, "swiglu")
    assert (c.attn_bias, c.out_bias, c.mlp_bias, c.parallel_residual) == (
        True, False, False, False)
    p = load_hf_config(PARALLEL).config
    assert (p.parallel_residual, p.parallel_norms, p.tied_embeddings) == (True, 1, True)
    transformers = pytest.importorskip("transformers")
    for spec, cfg in ((TINY, c), (PARALLEL, p)):
        full = transformers.AutoConfig.for_model(**spec).to_dict()
        assert "partial_rotary_factor" not in full  # moved into rope_parameters
        assert load_hf_config(full).config == cfg
        d = hf_config_dict(cfg, "stablelm")
        assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == cfg
    minimal = {k: v for k, v in TINY.items() if k not in ("partial_rotary_factor",
                                                          "use_qkv_bias")}
    m = load_hf_config(minimal).config  # StableLmConfig's defaults: 0.25, no biases
    assert (m.rotary_dim, m.attn_bias, m.out_bias) == (2, False, False)


@pytest.mark.parametrize(("change", "match"), [
    ({"qk_layernorm": True}, r"'qk_layernorm': only false"),
    ({"partial_rotary_factor": 0.375}, r"int\(8 \* 0.375\) = 3 coordinates"),
    ({"rope_theta": 500.0, "rope_parameters": {"rope_theta": 10000.0}}, "contradicts"),
    ({"hidden_act": "relu"}, r"'hidden_act'.*'relu'"),
    ({"use_bias": True}, r"unsupported key 'use_bias'"),
])
def test_bad_stablelm_configs_name_the_key(change: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**TINY, **change})


def test_stablelm_2_1_6b_counts_as_hf_meta() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    h = load_hf_config(DATA / "stablelm-2-1_6b.json")
    c = h.config
    assert (c.d_model, c.n_blocks, c.n_heads, c.d_mlp, c.vocab_size, c.rotary_dim,
            c.attn_bias, c.out_bias) == (2048, 24, 32, 5632, 100352, 16, True, False)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**h.raw))
    total = parameter_counts(build_transformer(c)).total
    assert total == sum(p.numel() for p in model.parameters()) == 1_644_515_328


@pytest.mark.parametrize("spec", [TINY, PARALLEL], ids=["sequential", "parallel"])
def test_weights_round_trip(spec: dict) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    raw = {k: v for k, v in spec.items() if k != "model_type"}
    model = transformers.StableLmForCausalLM(transformers.StableLmConfig(**raw))
    model = model.to(torch.float64)
    hf = load_hf_config(spec)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    params = params_from_hf(hf, state)
    assert params["blocks.0.attn.k.W_K"].shape == (16, 8)  # 1 key/value head of 8
    assert ("blocks.0.norm2.beta" in params) is not spec.get("use_parallel_residual", False)
    back = params_to_hf(hf.config, "stablelm", params)
    if hf.config.tied_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)


def test_exact_stock_and_planted() -> None:
    pytest.importorskip("torch")
    from nlaverify.interop.hf_verify import format_hf_report, verify_hf

    shared = [f"blocks.{b}.attn.{n}_shared" for b in range(2) for n in "kv"]
    r = verify_hf(TINY, seq_len=N, exact=True)
    assert r.ok, format_hf_report(r)
    assert sorted(r.unmapped) == sorted(shared)
    assert r.patches == ["attention_softmax", "loss", "rotary"] and all(c.ok for c in r.checks)
    q = verify_hf(PARALLEL, seq_len=N, exact=True)
    assert q.ok, format_hf_report(q)
    assert sorted(q.unmapped) == sorted([*shared, "blocks.0.resid1", "blocks.1.resid1"])
    s = verify_hf(TINY, seq_len=N)  # stock: float32 RoPE angles
    assert s.first_divergence == "blocks.0.attn.q_rope" and s.first_beyond_float32 is None
    t = verify_hf(TINY, seq_len=N, exact=True, plant="transpose_square")
    assert t.first_divergence == "blocks.0.attn.q", format_hf_report(t)
    p = verify_hf(PARALLEL, seq_len=N, exact=True, plant="rope_pairing")
    assert p.first_divergence == "blocks.0.attn.q_rope", format_hf_report(p)
