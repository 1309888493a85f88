"""YaRN's RoPE scaling (Peng et al. 2023; DeepSeek-V2/V3's rope_scaling; issue 23): the
frequencies against transformers' ``_compute_yarn_parameters``, the proof of their bands, the
config's checks, and a tiny DeepSeek-V3 with YaRN verified node by node against Hugging Face,
with its score scale and its ramp planted wrong and named."""

from __future__ import annotations

import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.config import ConfigError, RopeScaling
from nlaverify.ops import rotary
from nlaverify.tolerance import tolerance

#: a tiny DeepSeek-V3 with YaRN: 4 rotated frequencies, the first kept, the others / 4,
#: scores times (0.1 ln 4 + 1)^2
YARN = dict(model_type="deepseek_v3", vocab_size=32, hidden_size=16, intermediate_size=24,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
            kv_lora_rank=6, q_lora_rank=10, qk_rope_head_dim=8, qk_nope_head_dim=6,
            v_head_dim=5, first_k_dense_replace=2, max_position_embeddings=32,
            rope_parameters=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=8,
                                 beta_fast=32, beta_slow=1, mscale=1.0, mscale_all_dim=1.0,
                                 rope_theta=10000.0))
N = 6


@pytest.mark.parametrize(("d", "base", "factor", "orig", "fast", "slow"), [
    (64, 10000, 40.0, 4096, 32.0, 1.0),     # DeepSeek-V3's release: a ramp over 10..23
    (8, 10000, 4.0, 8, 32.0, 1.0),          # the tiny model's: 1 kept, 3 interpolated
    (128, 500000, 8.0, 8192, 16.0, 2.0),    # other betas, a larger base
    (4, 10000, 2.0, 2, 32.0, 1.0),          # the zero-width ramp (h = l + 1/1000)
])
def test_frequencies_are_transformers(d, base, factor, orig, fast, slow) -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    sc = RopeScaling("yarn", factor, original_context=orig, beta_fast=fast, beta_slow=slow,
                     mscale=1.0, mscale_all_dim=1.0)
    hf = transformers.LlamaConfig(hidden_size=d, num_attention_heads=1, head_dim=d,
                                  rope_parameters=dict(
                                      rope_type="yarn", factor=factor, rope_theta=float(base),
                                      original_max_position_embeddings=orig, beta_fast=fast,
                                      beta_slow=slow, mscale=1.0, mscale_all_dim=1.0))
    theirs, amplitude = ROPE_INIT_FUNCTIONS["yarn"](hf)
    ours = np.asarray(rotary.rope_frequencies(get_namespace("numpy"), d, base, sc))
    assert amplitude == 1.0
    # HF computes in float32: b^(2i/d) (condition ln b), 1/(s b^(2i/d)), the blend
    tol = tolerance("float32", size=2, depth=4, condition=np.log(base))
    assert tol.compare(theirs.double().numpy(), ours).ok
    assert not np.allclose(ours, rotary.rope_frequencies(get_namespace("numpy"), d, base))


def test_the_bands_are_proved_and_a_shifted_ramp_is_not(monkeypatch) -> None:
    from fractions import Fraction

    from nlaverify.identities.rope_yarn import derive_rope_yarn

    assert derive_rope_yarn().verdict == "proved"
    right = rotary.yarn_ramp
    # the ramp one dimension late (l + 1): the first blended frequency is kept
    monkeypatch.setattr(rotary, "yarn_ramp", lambda d, b, s: [
        max(g - Fraction(1, 13), Fraction(0)) * Fraction(13, 12) for g in right(d, b, s)])
    assert derive_rope_yarn().verdict == "failed"


@pytest.mark.parametrize(("kw", "field"), [
    ({"mscale": 0.707, "mscale_all_dim": 1.0}, "mscale"),
    ({}, "mscale"),  # no mscale: amplitude 0.1 ln s + 1
    ({"mscale": 1.0, "mscale_all_dim": 1.0, "beta_slow": 40.0}, "beta_slow"),
    ({"mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": float("inf")}, "beta_fast"),
])
def test_yarn_options_are_checked(kw, field) -> None:
    with pytest.raises(ConfigError, match=rf"RopeScaling\.{field}:"):
        RopeScaling("yarn", 4.0, original_context=8, **kw)
    with pytest.raises(ConfigError, match=r"RopeScaling\.beta_fast: applies to kind='yarn'"):
        RopeScaling("linear", 2.0, beta_fast=16.0)
    assert RopeScaling("yarn", 1.0, original_context=8).factor == 1.0  # s <= 1: amplitude 1


def test_yarn_config_round_trip_and_mla_pipeline() -> None:
    from nlaverify.interop.hf_config import hf_config_dict, load_hf_config
    from nlaverify.pipeline import verify_pipeline

    c = load_hf_config(YARN).config
    assert c.rope_scaling == RopeScaling("yarn", 4.0, original_context=8, mscale=1.0,
                                         mscale_all_dim=1.0)
    d = hf_config_dict(c, "deepseek_v3")
    assert load_hf_config(d).config == c
    transformers = pytest.importorskip("transformers")
    assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == c
    # the graph (yarn frequencies, scores times m^2) against the independent JAX model
    r = verify_pipeline(c.replace(vocab_size=11, n_blocks=1, context=8), ("numpy",))
    assert r.ok and r.model_divergence is None


def test_deepseek_v3_with_yarn_against_hugging_face(monkeypatch) -> None:
    pytest.importorskip("torch")
    from nlaverify.interop.hf_verify import format_hf_report, verify_hf

    r = verify_hf(YARN, seq_len=N, exact=True)
    assert r.ok and r.first_divergence is None and r.unmapped == [], format_hf_report(r)
    # the graph without DeepSeek's m^2 on the scores: named at the attention
    import nlaverify.graph.build_mla as build_mla

    monkeypatch.setattr(build_mla, "mla_score_scale", lambda cfg: None)
    p = verify_hf(YARN, seq_len=N, exact=True)
    assert p.first_divergence == "blocks.0.attn.heads", format_hf_report(p)
    monkeypatch.undo()
    # the ramp ignored (every frequency kept): exact mode runs HF on nlaverify's frequencies,
    # so the nodes agree, but HF's stock rotation parts from the exact one at the rotated
    # query and HF's own float32 frequencies no longer match nlaverify's
    monkeypatch.setattr(rotary, "yarn_ramp", lambda d, b, s: [0] * (d // 2))
    q = verify_hf(YARN, seq_len=N, exact=True)
    assert not q.ok and q.first_patch_divergence == "blocks.0.attn.q_rope"
    assert not next(c for c in q.checks if c.name.startswith("rotary frequencies")).ok
