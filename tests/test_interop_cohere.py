"""Hugging Face Cohere (Command-R) interop (issue 23): config, weights, node-by-node
verification.

Oracles: ``transformers``' own ``CohereConfig`` (defaults, ``to_dict``), its meta-device
parameter count of c4ai-command-r-v01, and a float64 ``CohereForCausalLM`` run node by node
against the graph: one shared LayerNorm with gains and no bias (``norm_bias=False``) before
parallel attention and MLP, RoPE in the interleaved pairing (nothing permuted), grouped-query
attention with every attention bias, tied embeddings, the logits times ``logit_scale``
(``temperature`` :math:`1/s`, checked through the loss). Non-vacuous: ``q_proj`` rows
permuted as for Llama's half pairing are named at ``attn.q``, Llama's ``rotate_half`` in
Cohere's module at ``attn.q_rope``, a wrong ``logit_scale`` at ``loss``, stock HF's float32
``CohereLayerNorm`` at the first norm.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nlaverify.config import ConfigError
from nlaverify.errors import ArgumentError
from nlaverify.graph.build import build_transformer, graph_constants, parameter_counts
from nlaverify.interop.hf_config import hf_config_dict, load_hf_config
from nlaverify.interop.weights import params_from_hf, params_to_hf

DATA = Path(__file__).resolve().parents[1] / "nlaverify" / "data" / "hf_configs"
#: a tiny Cohere: d = 16, 2 query heads of 8 on 1 key/value head, Q/K/V/O biases, tied,
#: logits times 1/4
TINY = dict(model_type="cohere", vocab_size=13, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, intermediate_size=20,
            max_position_embeddings=16, attention_bias=True, logit_scale=0.25,
            bos_token_id=None, eos_token_id=None, pad_token_id=None)
N = 5


def test_config_fields_and_hf_serialisation() -> None:
    c = load_hf_config(TINY).config
    assert (c.norm, c.norm_bias, c.parallel_residual, c.parallel_norms, c.rope_pairing) == (
        "layernorm", False, True, 1, "interleaved")
    assert (c.temperature, c.tied_embeddings, c.out_bias, c.rope_base) == (
        4.0, True, True, 500000)
    g = build_transformer(c)
    assert "blocks.0.norm1.beta" in graph_constants(g)  # zeros, not a parameter
    assert g.nodes["blocks.0.norm1.gamma"]["kind"] == "param"
    transformers = pytest.importorskip("transformers")
    full = transformers.AutoConfig.for_model(**TINY).to_dict()
    assert load_hf_config(full).config == c
    d = hf_config_dict(c, "cohere")
    assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == c


@pytest.mark.parametrize(("change", "match"), [
    ({"use_qk_norm": True}, r"'use_qk_norm'=True"),
    ({"logit_scale": None}, r"'logit_scale'=None"),
    ({"logit_scale": -1.0}, r"'logit_scale'=-1\.0"),
    ({"head_dim": 4}, r"unsupported key 'head_dim'"),
    ({"hidden_act": "relu"}, r"'hidden_act'.*'relu'"),
])
def test_bad_cohere_configs_name_the_key(change: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**TINY, **change})


def test_command_r_counts_as_hf_meta() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    h = load_hf_config(DATA / "c4ai-command-r-v01.json")
    c = h.config
    assert (c.d_model, c.n_blocks, c.n_heads, c.n_kv_heads, c.d_mlp, c.vocab_size) == (
        8192, 40, 64, 64, 22528, 256000)
    assert (c.temperature, c.rope_base, c.tied_embeddings) == (16.0, 8_000_000, True)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**h.raw))
    total = parameter_counts(build_transformer(c)).total
    assert total == sum(p.numel() for p in model.parameters()) == 34_980_831_232


def test_weights_round_trip() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    raw = {k: v for k, v in TINY.items() if k != "model_type"}
    model = transformers.CohereForCausalLM(transformers.CohereConfig(**raw)).to(torch.float64)
    hf = load_hf_config(TINY)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    assert not [k for k in state if "norm" in k and k.endswith(".bias")]
    params = params_from_hf(hf, state)
    assert "blocks.0.norm1.gamma" in params and "blocks.0.norm1.beta" not in params
    back = params_to_hf(hf.config, "cohere", params)
    assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)


def test_exact_stock_and_planted(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from transformers.models.cohere import modeling_cohere
    from transformers.models.llama import modeling_llama

    from nlaverify.interop import hf_verify
    from nlaverify.interop.hf_verify import format_hf_report, verify_hf
    from nlaverify.interop.weights_layout import rope_permutation

    r = verify_hf(TINY, seq_len=N, exact=True)
    assert r.ok, format_hf_report(r)
    assert r.patches == ["attention_softmax", "cohere_rotary", "layernorm", "loss", "rotary"]
    assert all(c.ok for c in r.checks)
    s = verify_hf(TINY, seq_len=N)  # stock: CohereLayerNorm computes in float32
    assert s.first_divergence == "blocks.0.norm1" and s.first_beyond_float32 is None
    t = verify_hf(TINY, seq_len=N, exact=True, plant="transpose_square")
    assert t.first_divergence == "blocks.0.attn.q", format_hf_report(t)
    with pytest.raises(ArgumentError, match="interleaved"):  # a no-op for Cohere: refused
        verify_hf(TINY, seq_len=N, exact=True, plant="rope_pairing")
    stock = hf_verify._load_weights

    def half_scale(model, state):  # HF's model multiplying by 1/2, the config saying 1/4
        stock(model, state)
        model.logit_scale = 0.5

    with monkeypatch.context() as m:  # only the loss reads the scaled logits
        m.setattr(hf_verify, "_load_weights", half_scale)
        w = verify_hf(TINY, seq_len=N, exact=True)
    assert w.first_divergence == "loss", format_hf_report(w)
    # Llama's half-pairing rotate_half in Cohere's module: named at the rotated query
    with monkeypatch.context() as m:
        m.setattr(modeling_cohere, "rotate_half", modeling_llama.rotate_half)
        h = verify_hf(TINY, seq_len=N, exact=True)
    assert h.first_divergence == "blocks.0.attn.q_rope", format_hf_report(h)
    # block 0's q_proj rows (and bias) permuted as Llama's layout does (half -> interleaved):
    # a loader that treats Cohere's interleaved RoPE as Llama's
    perm = np.concatenate([i * 8 + rope_permutation(8) for i in range(2)])
    inv = np.argsort(perm)

    def llama_layout(model, state):
        keys = ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.bias")
        stock(model, {**state, **{k: state[k][inv] for k in keys}})

    monkeypatch.setattr(hf_verify, "_load_weights", llama_layout)
    u = verify_hf(TINY, seq_len=N, exact=True)
    assert u.first_divergence == "blocks.0.attn.q", format_hf_report(u)
