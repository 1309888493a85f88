"""Hugging Face Gemma 2 interop (issue 23): config, weights, node-by-node verification.

Oracles: ``transformers``' own ``Gemma2Config`` (defaults, ``layer_types``, ``to_dict``), its
meta-device parameter count of Gemma-2-2B, and a float64 ``Gemma2ForCausalLM`` run node by
node against the graph: sandwich norms (four ``1 + w`` RMSNorms a block), scores over
:math:`\\sqrt{s}` with ``query_pre_attn_scalar`` :math:`s \\ne d_h`, a window of 3 on
block 0 only (block 1 global) over 5 tokens, both soft caps, GeGLU, √d embedding scale, tied.
Non-vacuous: HF's window moved to the other block is named at block 0's ``attn.heads``, a
transposed ``q_proj`` at ``attn.q``, stock HF's float32 RMSNorm at the first norm.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nlaverify.config import ConfigError
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.interop.hf_config import hf_config_dict, load_hf_config
from nlaverify.interop.weights import params_from_hf, params_to_hf
from nlaverify.tolerance import unit_roundoff

DATA = Path(__file__).resolve().parents[1] / "nlaverify" / "data" / "hf_configs"
#: a tiny Gemma 2: d = 16, 2 query heads of 8 on 1 key/value head, s = 6 != d_h = 8, caps
#: small enough to bend the scores and the logits
TINY = dict(model_type="gemma2", vocab_size=13, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, head_dim=8, intermediate_size=20,
            max_position_embeddings=16, sliding_window=3, query_pre_attn_scalar=6,
            attn_logit_softcapping=2.0, final_logit_softcapping=3.0)
N = 5


def test_config_fields_and_hf_serialisation() -> None:
    c = load_hf_config(TINY).config
    assert (c.post_norms, c.query_pre_attn_scalar, c.sliding_window, c.window_layers) == (
        True, 6, 3, (0,))
    assert (c.attn_softcap, c.final_softcap, c.embed_scale, c.mlp, c.tied_embeddings) == (
        2.0, 3.0, True, "geglu", True)
    transformers = pytest.importorskip("transformers")
    full = transformers.AutoConfig.for_model(**TINY).to_dict()
    assert full["layer_types"] == ["sliding_attention", "full_attention"]
    assert load_hf_config(full).config == c
    d = hf_config_dict(c, "gemma2")
    assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == c
    every = load_hf_config({**TINY, "layer_types": ["sliding_attention"] * 2}).config
    none = load_hf_config({**TINY, "layer_types": ["full_attention"] * 2}).config
    assert (every.window_layers, every.sliding_window, none.sliding_window) == (None, 3, None)
    assert load_hf_config({**TINY, "final_logit_softcapping": None}).config.final_softcap is None


@pytest.mark.parametrize(("change", "match"), [
    ({"use_bidirectional_attention": True}, r"'use_bidirectional_attention'"),
    ({"hidden_activation": "gelu"}, r"'hidden_activation'.*'gelu'"),
    ({"layer_types": ["sliding_attention"]}, r"'layer_types': expected 2 entries"),
    ({"sliding_window": None}, r"'sliding_window': null"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}, r"rope_type"),
])
def test_bad_gemma2_configs_name_the_key(change: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**TINY, **change})


def test_gemma_2_2b_counts_as_hf_meta() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    h = load_hf_config(DATA / "gemma-2-2b.json")
    c = h.config
    assert (c.d_model, c.n_blocks, c.n_heads, c.n_kv_heads, c.d_head, c.d_mlp, c.vocab_size,
            c.query_pre_attn_scalar, c.attn_softcap, c.final_softcap) == (
        2304, 26, 8, 4, 256, 9216, 256000, 256, 50.0, 30.0)
    assert c.window_layers == tuple(range(0, 26, 2)) and c.sliding_window == 4096
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**h.raw))
    total = parameter_counts(build_transformer(c)).total
    assert total == sum(p.numel() for p in model.parameters()) == 2_614_341_888


def test_gemma_2_9b_counts_as_hf_meta() -> None:
    """Issue 23's release check: Gemma-2-9B (google/gemma-2-9b's config.json)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    h = load_hf_config(DATA / "gemma-2-9b.json")
    c = h.config
    assert (c.d_model, c.n_blocks, c.n_heads, c.n_kv_heads, c.d_head, c.d_mlp) == (
        3584, 42, 16, 8, 256, 14336)
    assert c.window_layers == tuple(range(0, 42, 2)) and c.sliding_window == 4096
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**{k: v for k, v in h.raw.items()
                                                 if not k.startswith("_")}))
    total = parameter_counts(build_transformer(c)).total
    assert total == sum(p.numel() for p in model.parameters()) == 9_241_705_984


def test_weights_round_trip() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    raw = {k: v for k, v in TINY.items() if k != "model_type"}
    model = transformers.Gemma2ForCausalLM(transformers.Gemma2Config(**raw)).to(torch.float64)
    with torch.no_grad():  # norm weights away from 0 (HF initialises them to 0)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(torch.randn_like(p) / 4)
    hf = load_hf_config(TINY)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    params = params_from_hf(hf, state)
    w = state["model.layers.0.post_feedforward_layernorm.weight"]
    assert np.array_equal(params["blocks.0.post_norm2.gamma"], 1 + w)  # Gemma's 1 + w
    back = params_to_hf(hf.config, "gemma2", params)
    state["lm_head.weight"] = state["model.embed_tokens.weight"]  # tied
    assert set(back) == set(state)
    # every tensor copied exactly, but Gemma's w -> 1 + w -> w rounds twice: by at most
    # u|1 + w| + u|w| <= u(1 + 2|w|) (u the unit roundoff)
    u = unit_roundoff("float64")
    assert all(np.all(np.abs(back[k] - state[k]) <= u * (1 + 2 * np.abs(state[k])))
               for k in state)


def _verify(**kwargs):
    from nlaverify.interop.hf_verify import verify_hf

    return verify_hf(TINY, seq_len=N, **kwargs)


def test_exact_stock_and_planted() -> None:
    pytest.importorskip("torch")
    from nlaverify.interop.hf_verify import format_hf_report

    r = _verify(exact=True)
    assert r.ok, format_hf_report(r)
    assert sorted(r.unmapped) == sorted(["embed"] + [f"blocks.{b}.attn.{n}" for b in range(2)
                                                     for n in ("k_shared", "v_shared",
                                                               "q_scaled")])
    assert r.patches == ["attention_softmax", "loss", "rmsnorm", "rotary"]
    assert all(c.ok for c in r.checks)
    s = _verify()  # stock: Gemma2RMSNorm computes in float32
    assert s.first_divergence == "blocks.0.norm1" and s.first_beyond_float32 is None
    t = _verify(exact=True, plant="transpose_square")  # q_proj (16 x 16) transposed
    assert t.first_divergence == "blocks.0.attn.q", format_hf_report(t)


def test_planted_window_and_norm_order_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from transformers.models.gemma2 import modeling_gemma2

    from nlaverify.interop import hf_verify
    from nlaverify.interop.hf_verify import format_hf_report

    # Gemma 1's reading of post_attention_layernorm (the MLP's pre-norm): block 0's two
    # weights loaded into each other's place
    stock = hf_verify._load_weights

    def swapped(model, state):
        a, b = (f"model.layers.0.{n}.weight" for n in ("post_attention_layernorm",
                                                         "pre_feedforward_layernorm"))
        stock(model, {**state, a: state[b], b: state[a]})

    monkeypatch.setattr(hf_verify, "_load_weights", swapped)
    n = _verify(exact=True)
    assert n.first_divergence == "blocks.0.post_norm1", format_hf_report(n)
    monkeypatch.setattr(hf_verify, "_load_weights", stock)
    # HF's full causal mask on the sliding layers (block 0's window of 3 over 5 tokens)
    monkeypatch.setattr(modeling_gemma2, "create_sliding_window_causal_mask",
                        modeling_gemma2.create_causal_mask)
    w = _verify(exact=True)
    assert w.first_divergence == "blocks.0.attn.heads", format_hf_report(w)


# --- the TransformerConfig options Gemma 2 needed -------------------------------------------


@pytest.mark.parametrize(("change", "match"), [
    ({"post_norms": True, "placement": "post"}, r"post_norms"),
    ({"post_norms": True, "parallel_residual": True}, r"post_norms"),
    ({"query_pre_attn_scalar": 0}, r"query_pre_attn_scalar: expected a finite number > 0"),
    ({"query_pre_attn_scalar": 4.0, "attention": "elu1"}, r"query_pre_attn_scalar"),
    ({"window_layers": (0,)}, r"window_layers: .*expected a sliding_window"),
    ({"window_layers": (1, 0), "sliding_window": 2}, r"increasing order"),
    ({"window_layers": (2,), "sliding_window": 2}, r"\[0, n_blocks=2\)"),
])
def test_new_options_are_checked(change: dict, match: str) -> None:
    from nlaverify.config import TransformerConfig

    base = dict(vocab_size=11, d_model=8, n_heads=2, n_blocks=2, d_mlp=16)
    with pytest.raises(ConfigError, match=match):
        TransformerConfig(**{**base, **change})
    assert TransformerConfig(**base, sliding_window=2, window_layers=[1]).window_layers == (1,)


def test_kv_cache_counts_each_blocks_window() -> None:
    from nlaverify.cost.memory import kv_cache_bytes

    c = load_hf_config({**TINY, "sliding_window": 2}).config  # window 2 on block 0 only
    one = kv_cache_bytes(c.replace(sliding_window=None, window_layers=None), 8) // 2
    assert kv_cache_bytes(c, 8) == one + one * 2 // 8  # block 1: 8 rows, block 0: 2
