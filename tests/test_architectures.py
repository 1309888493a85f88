"""The options of released architectures (issue 10): validation, the RoPE frequency
rescaling against an independent transcription, the sliding-window mask, presets and the
``params`` command on a config file. The node-by-node checks of every option are the zoo's
(``rope-scaled-window-qknorm``, ``gemma-like``, ``moe-swiglu-gqa``: tests/test_zoo.py)
and their proofs the registry's (``rope_scaled``, ``sliding_window_attention``, ``geglu``,
``moe_topk``: tests/test_proofs.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.cli import main
from nlaverify.config import ConfigError, RopeScaling, TransformerConfig, preset
from nlaverify.errors import ArgumentError
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.ops.rotary import rope_frequencies
from nlaverify.ops.sdpa import attention, causal_mask
from nlaverify.tolerance import tolerance

SIZES = dict(vocab_size=11, d_model=8, n_heads=2, n_blocks=1, d_mlp=6, context=16)


def _llama3_reference(d: int, base: float, sc: RopeScaling) -> np.ndarray:
    """Meta's ``apply_scaling`` (llama-models, Llama-3.1), transcribed loop by loop."""
    out = []
    for i in range(d // 2):
        freq = 1.0 / base ** (2 * i / d)
        wavelen = 2 * math.pi / freq
        if wavelen < sc.original_context / sc.high_freq_factor:
            out.append(freq)
        elif wavelen > sc.original_context / sc.low_freq_factor:
            out.append(freq / sc.factor)
        else:
            smooth = (sc.original_context / wavelen - sc.low_freq_factor) / (
                sc.high_freq_factor - sc.low_freq_factor)
            out.append((1 - smooth) * freq / sc.factor + smooth * freq)
    return np.array(out)


@pytest.mark.parametrize("d,base,sc", [
    (128, 500000, RopeScaling("llama3", 8.0, 1.0, 4.0, 8192)),    # Llama-3.1
    (64, 500000, RopeScaling("llama3", 32.0, 1.0, 4.0, 8192)),    # Llama-3.2-1B
    (6, 10000, RopeScaling("llama3", 8.0, 1.0, 4.0, 512)),        # all three bands
    (16, 10000, RopeScaling("linear", 4.0)),
])
def test_rope_frequencies_match_the_reference(d, base, sc) -> None:
    ref = (_llama3_reference(d, base, sc) if sc.kind == "llama3"
           else base ** (-np.arange(0, d, 2) / d) / sc.factor)
    got = np.asarray(rope_frequencies(get_namespace("numpy"), d, base, sc))
    tol = tolerance("float64", size=d, depth=2)
    assert np.max(np.abs(got - ref) / ref) <= tol.rtol, tol.reason
    exact = rope_frequencies(get_namespace("sympy"), d, base, sc)
    assert np.max(np.abs(np.array([float(v) for v in exact]) - ref) / ref) <= tol.rtol
    # scaling changes what it should: the lowest frequency is divided by the factor
    plain = np.asarray(rope_frequencies(get_namespace("numpy"), d, base))
    assert got[-1] == pytest.approx(plain[-1] / sc.factor, rel=tol.rtol)


def test_rope_frequencies_blended_band_is_between() -> None:
    sc = RopeScaling("llama3", 8.0, 1.0, 4.0, 512)
    got = np.asarray(rope_frequencies(get_namespace("numpy"), 6, 10000, sc))
    plain = np.asarray(rope_frequencies(get_namespace("numpy"), 6, 10000))
    assert got[0] == plain[0]                            # kept
    assert plain[1] / 8 < got[1] < plain[1]              # blended, strictly
    assert got[2] == pytest.approx(plain[2] / 8, rel=tolerance("float64", size=6, depth=2).rtol)


def test_sliding_window_mask_and_attention() -> None:
    xp = get_namespace("numpy")
    m = causal_mask(xp, 5, window=2)
    i, j = np.indices((5, 5))
    assert np.array_equal(m, (j <= i) & (i - j < 2))
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((5, 3)) for _ in range(3))
    # a window as long as the sequence is plain causal attention; window 1 returns V
    np.testing.assert_array_equal(attention(xp, Q, K, V, causal=True, window=5),
                                  attention(xp, Q, K, V, causal=True))
    np.testing.assert_allclose(attention(xp, Q, K, V, causal=True, window=1), V,
                               rtol=tolerance("float64", size=5).rtol)
    with pytest.raises(ArgumentError, match="window"):
        attention(xp, Q, K, V, causal=False, window=2)
    with pytest.raises(ArgumentError, match="window"):
        attention(xp, Q, K, V, causal=True, window=0)


@pytest.mark.parametrize("changes,field", [
    ({"rope_scaling": RopeScaling("linear", 2.0)}, "rope_scaling"),   # without RoPE
    ({"positions": "rope", "rope_scaling": {"kind": "yarn", "factor": 2.0}}, "kind"),
    ({"positions": "rope", "rope_scaling": {"kind": "llama3", "factor": 0.0}}, "factor"),
    ({"positions": "rope", "rope_scaling": {"kind": "llama3", "factor": 8.0,
                                            "low_freq_factor": 4.0}}, "high_freq_factor"),
    ({"positions": "rope", "rope_scaling": {"kind": "linear", "scale": 2.0}}, "rope_scaling"),
    ({"sliding_window": 0}, "sliding_window"),
    ({"sliding_window": 2, "causal": False}, "sliding_window"),
    ({"sliding_window": 2, "attention": "favor+"}, "sliding_window"),
    ({"qk_norm": 1}, "qk_norm"),
    ({"attn_out_bias": "yes"}, "attn_out_bias"),
    ({"moe_renormalize": None}, "moe_renormalize"),
    ({"embed_scale": 1.0}, "embed_scale"),
    ({"mlp": "geglu", "n_experts": 2}, "mlp"),
    ({"d_model": 9}, "d_model"),                       # 9 heads of 2 needs an explicit d_head
])
def test_new_options_are_validated(changes, field) -> None:
    with pytest.raises(ConfigError, match=field):
        TransformerConfig(**{**SIZES, **changes})


def test_free_head_size_and_output_bias() -> None:
    cfg = TransformerConfig(**{**SIZES, "d_model": 9, "d_head": 4, "attn_bias": True,
                               "attn_out_bias": False})
    g = build_transformer(cfg)
    assert g.nodes["blocks.0.attn.q.W_Q"]["shape"] == (9, 8)
    assert g.nodes["blocks.0.attn.out.W_O"]["shape"] == (8, 9)
    assert "blocks.0.attn.q.b_Q" in g and "blocks.0.attn.out.b_O" not in g
    # None follows attn_bias, also after replace()
    assert cfg.replace(attn_out_bias=None).out_bias and not cfg.replace(
        attn_out_bias=None, attn_bias=False).out_bias


def test_gemma_presets_count_the_published_parameters() -> None:
    # Gemma Team 2024, Table 2 (embedding + non-embedding), with 256,128 embedding rows;
    # the released vocabulary is 256,000, 128 rows fewer
    for name, paper in (("gemma-2b", 524_550_144 + 1_981_884_416),
                        ("gemma-7b", 786_825_216 + 7_751_248_896)):
        cfg = preset(name)
        counts = parameter_counts(build_transformer(cfg))
        assert counts.total == paper - 128 * cfg.d_model
        assert counts.by_component["embedding"] == 256_000 * cfg.d_model


def test_params_from_a_config_file(tmp_path, capsys) -> None:
    assert main(["params", "--config", "nlaverify/data/hf_configs/gemma-2b.json",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total"] == parameter_counts(build_transformer(preset("gemma-2b"))).total
    own = tmp_path / "mine.json"
    own.write_text(json.dumps(preset("tiny").as_dict()))
    assert main(["params", "--config", str(own), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == parameter_counts(
        build_transformer(preset("tiny"))).total
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"d_model": 8}))
    assert main(["params", "--config", str(bad)]) == 2
    assert "model_type" in capsys.readouterr().err
    assert main(["params", "--config", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["params", "--preset", "tiny", "--config", str(own)]) == 2
    assert "exactly one" in capsys.readouterr().err


def test_verify_hf_arguments(capsys) -> None:
    assert main(["verify", "--hf-exact"]) == 2
    assert "apply to --hf" in capsys.readouterr().err
    assert main(["verify", "--hf", "x.json", "--preset", "tiny"]) == 2
    assert "drop --zoo" in capsys.readouterr().err
