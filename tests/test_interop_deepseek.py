"""Hugging Face DeepSeek-V3 and DeepSeek-V2 interop with every layer dense (issue 23): config,
weights, node-by-node verification of multi-head latent attention.

Oracles: ``transformers``' own ``DeepseekV3Config`` (defaults, ``to_dict``) and a float64
``DeepseekV3ForCausalLM`` run node by node against the graph, with a query latent and
interleaved RoPE (``rope_interleave``, HF's default) and with a full-rank ``q_proj`` and
``rotate_half``. Non-vacuous: ``kv_b_proj``'s rows read value-first per head are named at
``attn.k_nope``, ``q_b_proj``'s rotated rows read first at ``attn.q_nope``, HF's RoPE pairing
swapped at the rotated query, stock HF's float32 RMSNorm at ``norm1``, DeepSeek-V2's complex64
rotation at the rotated key.
"""

from __future__ import annotations

import numpy as np
import pytest

from nlaverify.config import ConfigError
from nlaverify.interop.hf_config import hf_config_dict, load_hf_config
from nlaverify.interop.weights import params_from_hf, params_to_hf
from nlaverify.tolerance import tolerance

#: a tiny DeepSeek-V3: d = 16, 2 heads, a key-value latent of 6 and a query latent of 10,
#: heads of d_c = 6 + d_r = 4 for scores and d_v = 5 for values, both layers dense
TINY = dict(model_type="deepseek_v3", vocab_size=32, hidden_size=16, intermediate_size=24,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
            kv_lora_rank=6, q_lora_rank=10, qk_rope_head_dim=4, qk_nope_head_dim=6,
            v_head_dim=5, first_k_dense_replace=2, max_position_embeddings=16)
#: the other options: full-rank queries (q_proj), RoPE by rotate_half
PLAIN = {**TINY, "q_lora_rank": None, "rope_interleave": False}
N = 5


def test_config_fields_and_hf_serialisation() -> None:
    c = load_hf_config(TINY).config
    assert (c.kv_lora_rank, c.q_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim,
            c.v_head_dim, c.d_head) == (6, 10, 6, 4, 5, 10)
    assert (c.norm, c.mlp, c.rope_pairing, c.n_kv_heads, c.attn_bias) == (
        "rmsnorm", "swiglu", "interleaved", 2, False)
    assert load_hf_config(PLAIN).config.rope_pairing == "half"
    transformers = pytest.importorskip("transformers")
    for raw in (TINY, PLAIN):
        c = load_hf_config(raw).config
        full = transformers.AutoConfig.for_model(**raw).to_dict()
        assert load_hf_config(full).config == c
        d = hf_config_dict(c, "deepseek_v3")
        assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == c


@pytest.mark.parametrize(("change", "match"), [
    # first_k_dense_replace=1: MoE layers, tests/test_interop_deepseek_moe.py
    ({"first_k_dense_replace": None}, r"'first_k_dense_replace'"),
    ({"attention_bias": True}, r"'attention_bias'"),
    ({"num_key_value_heads": 1}, r"'num_key_value_heads'=1"),
    ({"head_dim": 6}, r"'head_dim'=6"),
    ({"qk_head_dim": 9}, r"'qk_head_dim'=9"),
    ({"hidden_act": "relu"}, r"'hidden_act'.*'relu'"),
    ({"qk_rope_head_dim": 3}, r"qk_rope_head_dim"),
    # YaRN without mscale: cos and sin scaled by 0.1 ln 40 + 1, not modelled
    ({"rope_parameters": {"rope_type": "yarn", "factor": 40.0, "rope_theta": 10000.0}},
     r"RopeScaling\.mscale: the cos/sin amplitude"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "truncate": False,
                          "rope_theta": 10000.0}}, r"'rope_parameters\.truncate'"),
    ({"scoring_func": "sigmoid"}, r"unsupported key 'scoring_func'"),
])
def test_bad_deepseek_configs_name_the_key(change: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**TINY, **change})


@pytest.mark.parametrize("raw", [TINY, PLAIN], ids=["q-latent", "q-proj"])
def test_weights_round_trip(raw: dict) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.DeepseekV3Config(**{k: v for k, v in raw.items() if k != "model_type"})
    model = transformers.DeepseekV3ForCausalLM(cfg).to(torch.float64)
    hf = load_hf_config(raw)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    params = params_from_hf(hf, state)
    # kv_b_proj's head 1 rows 11..16 are its nope part: W_UK's columns 6..11
    W = state["model.layers.0.self_attn.kv_b_proj.weight"]
    assert np.array_equal(params["blocks.0.attn.k_nope.W_UK"][:, 6:], W[11:17].T)
    assert np.array_equal(params["blocks.0.attn.v.W_UV"][:, :5], W[6:11].T)
    back = params_to_hf(hf.config, "deepseek_v3", params)
    assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)


def test_exact_and_stock() -> None:
    pytest.importorskip("torch")
    from nlaverify.interop.hf_verify import format_hf_report, verify_hf

    for raw in (TINY, PLAIN):
        r = verify_hf(raw, seq_len=N, exact=True)
        assert r.ok and r.first_divergence is None, format_hf_report(r)
        assert r.unmapped == [] and all(c.ok for c in r.checks)
        assert r.patches == ["attention_softmax", "loss", "rmsnorm", "rotary"]
    s = verify_hf(TINY, seq_len=N)  # stock: DeepseekV3RMSNorm computes in float32
    assert s.first_divergence == "blocks.0.norm1" and s.first_beyond_float32 is None


def _swapped_rows(heads: int, first: int, second: int):
    """Each head's two row blocks read in the other order (a layout bug)."""
    def f(w: np.ndarray) -> np.ndarray:
        w = w.reshape(heads, first + second, -1)
        return np.concatenate([w[:, first:], w[:, :first]], axis=1).reshape(
            heads * (first + second), -1)
    return f


@pytest.mark.parametrize(("key", "swap", "node"), [
    ("kv_b_proj", _swapped_rows(2, 6, 5), "blocks.0.attn.k_nope"),
    ("q_b_proj", _swapped_rows(2, 6, 4), "blocks.0.attn.q_nope"),
])
def test_planted_layout_bugs_are_named(monkeypatch: pytest.MonkeyPatch, key, swap,
                                       node) -> None:
    pytest.importorskip("torch")
    from nlaverify.interop import hf_verify
    from nlaverify.interop.hf_verify import format_hf_report, verify_hf

    stock = hf_verify._load_weights
    name = f"model.layers.0.self_attn.{key}.weight"

    def wrong(model, state):
        stock(model, {**state, name: swap(state[name])})

    monkeypatch.setattr(hf_verify, "_load_weights", wrong)
    r = verify_hf(TINY, seq_len=N, exact=True)
    assert r.first_divergence == node, format_hf_report(r)


def test_planted_rope_pairing_is_named_at_the_rotated_query() -> None:
    pytest.importorskip("torch")
    from nlaverify.interop.hf_verify import format_hf_report, verify_hf

    r = verify_hf(PLAIN, seq_len=N, exact=True, plant="rope_pairing")
    assert r.first_divergence == "blocks.0.attn.q_rope", format_hf_report(r)


def test_released_config_is_refused_and_its_dense_variant_counts_as_hf_meta() -> None:
    from pathlib import Path

    from nlaverify.config_mla import mla_score_scale
    from nlaverify.cost.memory import kv_cache_bytes
    from nlaverify.graph.build import build_transformer, parameter_counts
    from nlaverify.interop.hf_config_reader import read_source

    path = Path(__file__).resolve().parents[1] / "nlaverify/data/hf_configs/deepseek-v3.json"
    assert load_hf_config(path).config.moe_dense_layers == (0, 1, 2)  # its MoE layers:
    raw = read_source(path)[0]
    # (tests/test_interop_deepseek_moe.py); here every layer dense, the router's keys
    # dropped: MLA and YaRN at scale
    dense = {k: v for k, v in raw.items() if k not in (
        "aux_loss_alpha", "ep_size", "moe_layer_freq", "scoring_func", "seq_aux",
        "topk_method")}
    dense["first_k_dense_replace"] = 61
    c = load_hf_config(dense).config
    # its YaRN: factor 40 from 4096 positions, scores times (0.1 ln 40 + 1)^2 / sqrt(192)
    assert (c.rope_scaling.kind, c.rope_scaling.factor, c.rope_scaling.original_context) == (
        "yarn", 40.0, 4096)
    want = (0.1 * np.log(40) + 1) ** 2 / np.sqrt(192)  # a log, a square, a root, a divide
    assert tolerance("float64", depth=4).compare(np.array(mla_score_scale(c)), np.array(want)).ok
    counts = parameter_counts(build_transformer(c))
    mla = sum(v for k, v in counts.by_component.items() if k.startswith("attention"))
    mla += counts.by_component["norms.mla"]
    assert mla == 61 * 187_107_328  # q_a, q_b, kv_a, kv_b, o and the two latent norms
    # the KV cache: 512 + 64 values per token and layer, against 2 * 128 * 192
    assert kv_cache_bytes(c, 4096) == 61 * 4096 * (512 + 64) * 2
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**{k: v for k, v in dense.items()
                                                 if not k.startswith("_")}))
    assert counts.total == sum(p.numel() for p in model.parameters())


def test_latent_norm_fidelity_is_named_and_sized() -> None:
    from nlaverify.interop.hf_checks import _fidelity_node

    assert _fidelity_node("model.layers.1.self_attn.kv_a_layernorm") == "blocks.1.attn.kv_a_norm"
    assert _fidelity_node("model.layers.0.self_attn.q_a_layernorm") == "blocks.0.attn.q_a_norm"


#: a tiny DeepSeek-V2: as TINY, with MLP biases and V2's complex (interleaved) RoPE
V2 = {**{k: v for k, v in TINY.items() if k != "num_key_value_heads"},
      "model_type": "deepseek_v2", "mlp_bias": True}


def test_v2_config_and_weights() -> None:
    c = load_hf_config(V2).config
    assert (c.mlp_bias, c.rope_pairing, c.n_kv_heads, c.kv_lora_rank) == (
        True, "interleaved", 2, 6)
    for change, match in (({"rope_interleave": False}, "unsupported key 'rope_interleave'"),
                          ({"first_k_dense_replace": 1}, "'mlp_bias'"),  # MoE layers: biases
                          ({"num_key_value_heads": 1}, "'num_key_value_heads'=1")):
        with pytest.raises(ConfigError, match=match):
            load_hf_config({**V2, **change})
    with pytest.raises(ConfigError, match="missing required field 'first_k_dense_replace'"):
        load_hf_config({k: v for k, v in V2.items() if k != "first_k_dense_replace"})
    with pytest.raises(ConfigError, match="rope_pairing"):  # V2 rotates interleaved pairs
        hf_config_dict(c.replace(rope_pairing="half"), "deepseek_v2")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    assert load_hf_config(transformers.AutoConfig.for_model(**V2).to_dict()).config == c
    torch.manual_seed(0)
    model = transformers.DeepseekV2ForCausalLM(transformers.DeepseekV2Config(
        **{k: v for k, v in V2.items() if k != "model_type"})).to(torch.float64)
    hf = load_hf_config(V2)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    params = params_from_hf(hf, state)
    assert params["blocks.1.mlp.gate.b_gate"].shape == (24,)
    back = params_to_hf(hf.config, "deepseek_v2", params)
    assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)


def test_v2_exact_stock_and_its_complex_rope_patch() -> None:
    pytest.importorskip("torch")
    from nlaverify.interop.hf_patches import needed_patches
    from nlaverify.interop.hf_verify import format_hf_report, verify_hf

    r = verify_hf(V2, seq_len=N, exact=True)
    assert r.ok and r.first_divergence is None and r.unmapped == [], format_hf_report(r)
    assert r.patches == ["attention_softmax", "deepseek_rotary", "loss", "rmsnorm", "rotary"]
    assert verify_hf(V2, seq_len=N).first_divergence == "blocks.0.norm1"
    # V2's complex rotation left in complex64 (every other step exact): named at the first
    # rotated node, the shared key, within float32's bound
    parts = needed_patches("deepseek_v2", V2) - {"deepseek_rotary"}
    p = verify_hf(V2, seq_len=N, exact=parts)
    assert p.first_divergence == "blocks.0.attn.k_rope", format_hf_report(p)
    assert p.first_beyond_float32 is None


def test_null_rope_interleave_is_rotate_half() -> None:
    """``rope_interleave: null`` is false in Hugging Face (``DeepseekV3Attention``: ``if
    self.config.rope_interleave``), so ``rotate_half``'s pairs (review of issue 23: it was
    read as interleaved, and ``verify --hf --hf-exact`` parted at ``blocks.0.attn.k_rope``)."""
    pytest.importorskip("torch")
    from nlaverify.interop.hf_verify import format_hf_report, verify_hf

    raw = {**TINY, "rope_interleave": None}
    assert load_hf_config(raw).config.rope_pairing == "half"
    assert load_hf_config(TINY).config.rope_pairing == "interleaved"  # absent: true
    r = verify_hf(raw, seq_len=N, exact=True)
    assert r.ok and r.first_divergence is None, format_hf_report(r)
