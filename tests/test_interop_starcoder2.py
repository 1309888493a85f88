"""Hugging Face StarCoder 2 interop (issue 23): config, weights, node-by-node verification.

Oracles: ``transformers``' own ``Starcoder2Config`` (defaults, legacy top-level
``rope_theta``, ``to_dict``), its meta-device parameter count of StarCoder2-3B, and a float64
``Starcoder2ForCausalLM`` (LayerNorm with bias, grouped-query attention with every bias, RoPE
in the half pairing, a sliding window of 3 on 5 tokens, the non-gated tanh-GELU MLP, tied
embeddings) run node by node against the graph. Non-vacuous: a transposed ``q_proj`` is named
at ``attn.q``, HF's window dropped at ``attn.heads``, stock HF's float32 RoPE angles at
``q_rope``.
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
#: a tiny StarCoder 2: d = 16, 2 query heads of 8 on 1 key/value head, a window of 3 tokens
TINY = dict(model_type="starcoder2", vocab_size=13, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, intermediate_size=20,
            max_position_embeddings=16, sliding_window=3, bos_token_id=0, eos_token_id=0)
N = 5


def test_config_fields_and_hf_serialisation() -> None:
    c = load_hf_config(TINY).config
    assert (c.norm, c.rope_pairing, c.rotary_dim, c.d_head, c.n_kv_heads, c.mlp) == (
        "layernorm", "half", None, 8, 1, "gelu")
    assert (c.attn_bias, c.out_bias, c.mlp_bias, c.tied_embeddings, c.sliding_window) == (
        True, True, True, True, 3)
    transformers = pytest.importorskip("transformers")
    full = transformers.AutoConfig.for_model(**TINY).to_dict()
    assert load_hf_config(full).config == c
    d = hf_config_dict(c, "starcoder2")
    assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == c
    legacy = load_hf_config({**TINY, "rope_theta": 100000.0, "use_bias": False}).config
    assert (legacy.rope_base, legacy.attn_bias, legacy.mlp_bias) == (100000, False, False)


@pytest.mark.parametrize(("change", "match"), [
    ({"hidden_act": "silu"}, r"'hidden_act'.*'silu'"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}},
     r"'rope_parameters.rope_type': only 'default'"),
    ({"rope_theta": 500.5}, r"'rope_theta'.*integral base"),
    ({"hidden_size": 17}, r"'hidden_size'=17"),
    ({"mlp_type": "default"}, r"unsupported key 'mlp_type'"),
])
def test_bad_starcoder2_configs_name_the_key(change: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**TINY, **change})


def test_starcoder2_3b_counts_as_hf_meta() -> None:
    """The published file's ``rope_theta`` (999999.44...) is refused by that key; the count
    does not depend on the base, so it is taken with the base 10**6."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path = DATA / "starcoder2-3b.json"
    with pytest.raises(ConfigError, match=r"'rope_parameters\.rope_theta'.*999999\.44"):
        load_hf_config(path)
    import json

    raw = json.loads(path.read_text())
    c = load_hf_config({**raw, "rope_parameters": {"rope_type": "default",
                                                   "rope_theta": 1e6}}).config
    assert (c.d_model, c.n_blocks, c.n_heads, c.n_kv_heads, c.d_mlp, c.vocab_size,
            c.sliding_window, c.context, c.tied_embeddings) == (
        3072, 30, 24, 2, 12288, 49152, 4096, 16384, True)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**raw))
    total = parameter_counts(build_transformer(c)).total
    assert total == sum(p.numel() for p in model.parameters()) == 3_030_371_328


def test_weights_round_trip_untied() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    spec = {**TINY, "tie_word_embeddings": False}
    raw = {k: v for k, v in spec.items() if k != "model_type"}
    model = transformers.Starcoder2ForCausalLM(transformers.Starcoder2Config(**raw))
    model = model.to(torch.float64)
    hf = load_hf_config(spec)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    params = params_from_hf(hf, state)
    assert params["blocks.0.attn.k.W_K"].shape == (16, 8)  # 1 key/value head of 8
    assert params["blocks.0.mlp.in.W_in"].shape == (16, 20)
    back = params_to_hf(hf.config, "starcoder2", params)
    assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)


def _verify(**kwargs):
    from nlaverify.interop.hf_verify import verify_hf

    return verify_hf(TINY, seq_len=N, **kwargs)


def test_exact_stock_and_planted(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from transformers.models.starcoder2 import modeling_starcoder2

    from nlaverify.interop.hf_verify import format_hf_report

    r = _verify(exact=True)
    assert r.ok, format_hf_report(r)
    assert sorted(r.unmapped) == sorted(f"blocks.{b}.attn.{n}_shared" for b in range(2)
                                        for n in "kv")
    assert r.patches == ["attention_softmax", "loss", "rotary"] and all(c.ok for c in r.checks)
    s = _verify()  # stock: float32 RoPE angles
    assert s.first_divergence == "blocks.0.attn.q_rope" and s.first_beyond_float32 is None
    t = _verify(exact=True, plant="transpose_square")  # q_proj (16 x 16) transposed
    assert t.first_divergence == "blocks.0.attn.q", format_hf_report(t)
    # HF's full causal mask where the config asks for a window of 3 (on 5 tokens)
    monkeypatch.setattr(modeling_starcoder2, "create_sliding_window_causal_mask",
                        modeling_starcoder2.create_causal_mask)
    w = _verify(exact=True)
    assert w.first_divergence == "blocks.0.attn.heads", format_hf_report(w)
