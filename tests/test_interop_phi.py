"""Hugging Face Phi (Phi-2) interop (issue 23): config, weights, node-by-node verification.

Oracles: ``transformers``' own ``PhiConfig`` (defaults, legacy top-level
``partial_rotary_factor`` / ``rope_theta``, ``to_dict``), its meta-device parameter count of
Phi-2, and a float64 ``PhiForCausalLM`` with grouped-query attention run node by node against
the graph (one LayerNorm per parallel block, partial rotary in the half pairing, every bias,
a biased ``lm_head``). Non-vacuous: HF's ``rotate_half`` swapped for the interleaved pairing
is named at ``q_rope``, and stock HF's float32 RoPE angles there too.
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
#: a tiny Phi: d = 16, 2 query heads of 8 on 1 key/value head, half of each head rotated (4
#: coordinates: with 2, one pair, the two pairings would coincide)
TINY = dict(model_type="phi", vocab_size=13, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, intermediate_size=20,
            partial_rotary_factor=0.5, max_position_embeddings=16, bos_token_id=0,
            eos_token_id=0)
N = 5


def test_config_fields_and_hf_serialisation() -> None:
    c = load_hf_config(TINY).config
    assert (c.rope_pairing, c.rotary_dim, c.d_head, c.n_kv_heads, c.mlp) == (
        "half", 4, 8, 1, "gelu")
    assert (c.parallel_residual, c.parallel_norms, c.attn_bias, c.mlp_bias, c.unembed_bias) == (
        True, 1, True, True, True)
    transformers = pytest.importorskip("transformers")
    full = transformers.AutoConfig.for_model(**TINY).to_dict()
    assert "partial_rotary_factor" not in full  # moved into rope_parameters
    assert load_hf_config(full).config == c
    d = hf_config_dict(c, "phi")
    assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == c
    minimal = {k: v for k, v in TINY.items() if k != "partial_rotary_factor"}
    assert load_hf_config(minimal).config.rotary_dim == 4  # PhiConfig's default 0.5


@pytest.mark.parametrize(("change", "match"), [
    ({"qk_layernorm": True}, r"'qk_layernorm': only false"),
    ({"tie_word_embeddings": True}, r"'tie_word_embeddings': only false"),
    ({"partial_rotary_factor": 0.375}, r"int\(8 \* 0.375\) = 3 coordinates"),
    ({"rope_theta": 500.0, "rope_parameters": {"rope_theta": 10000.0}}, "contradicts"),
    ({"hidden_act": "silu"}, r"'hidden_act'.*'silu'"),
])
def test_bad_phi_configs_name_the_key(change: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**TINY, **change})


def test_phi_2_counts_as_hf_meta() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    h = load_hf_config(DATA / "phi-2.json")
    c = h.config
    assert (c.d_model, c.n_blocks, c.n_heads, c.d_mlp, c.vocab_size, c.rotary_dim) == (
        2560, 32, 32, 10240, 51200, 32)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**h.raw))
    total = parameter_counts(build_transformer(c)).total
    assert total == sum(p.numel() for p in model.parameters()) == 2_779_683_840


def test_weights_round_trip() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    raw = {k: v for k, v in TINY.items() if k != "model_type"}
    model = transformers.PhiForCausalLM(transformers.PhiConfig(**raw)).to(torch.float64)
    hf = load_hf_config(TINY)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    params = params_from_hf(hf, state)
    assert params["blocks.0.attn.k.W_K"].shape == (16, 8)  # 1 key/value head of 8
    back = params_to_hf(hf.config, "phi", params)
    assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)


def _verify(**kwargs):
    from nlaverify.interop.hf_verify import verify_hf

    return verify_hf(TINY, seq_len=N, **kwargs)


def test_exact_stock_and_planted_pairing(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from transformers.models.phi import modeling_phi

    from nlaverify.interop.hf_verify import format_hf_report

    r = _verify(exact=True)
    assert r.ok, format_hf_report(r)
    assert sorted(r.unmapped) == sorted(f"blocks.{b}.{n}" for b in range(2)
                                        for n in ("resid1", "attn.k_shared", "attn.v_shared"))
    assert r.patches == ["attention_softmax", "loss", "rotary"] and all(c.ok for c in r.checks)
    s = _verify()  # stock: float32 RoPE angles
    assert s.first_divergence == "blocks.0.attn.q_rope" and s.first_beyond_float32 is None

    def rotate_interleaved(x):  # GPT-J's pairing where Phi's tables are in halves
        return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)

    monkeypatch.setattr(modeling_phi, "rotate_half", rotate_interleaved)
    p = _verify(exact=True)
    assert p.first_divergence == "blocks.0.attn.q_rope", format_hf_report(p)
