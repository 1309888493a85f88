"""Hugging Face OPT (OPT-125M's pre-LN block) interop (issue 23): config, weights, node by node.

Oracles: ``transformers``' own ``OPTConfig`` (its defaults, ``to_dict``), its meta-device
parameter count of the published OPT-125M config (exactly: the graph's table holds HF's 2
offset rows, ``position_offset=2``), and a float64 ``OPTForCausalLM`` run node by node against
the graph (learned positions read at HF's offset of 2, ReLU MLP, every bias, query scaled
after ``q_proj``), on nlaverify's seeded weights and on HF's own random checkpoint (rows 0-1
random, as released). Each claim is made non-vacuous by a planted mistake (a transposed
``q_proj``, the offset 0 or 1) or a left-out exact patch reported at its own node.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nlaverify.config import ConfigError
from nlaverify.errors import ShapeError, UnknownNameError
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.graph.run import init_params
from nlaverify.interop.hf_config import hf_config_dict, load_hf_config
from nlaverify.interop.weights import params_from_hf, params_to_hf

DATA = Path(__file__).resolve().parents[1] / "nlaverify" / "data" / "hf_configs"
#: a tiny OPT-125M: d = 16, 4 heads of 4, every bias, tied, 16 positions
TINY = dict(model_type="opt", vocab_size=13, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=4, ffn_dim=20, max_position_embeddings=16)
#: no biases, LayerNorms without gain or bias, the erf GELU, untied
BARE = {**TINY, "enable_bias": False, "layer_norm_elementwise_affine": False,
        "tie_word_embeddings": False, "activation_function": "gelu"}
POS = "model.decoder.embed_positions.weight"
N = 5


def test_config_fields_and_hf_serialisation() -> None:
    c = load_hf_config(TINY).config
    assert (c.norm, c.placement, c.positions, c.context, c.mlp, c.norm_eps,
            c.position_offset) == ("layernorm", "pre", "learned", 16, "relu", 1e-5, 2)
    assert c.attn_bias and c.out_bias and c.mlp_bias and c.tied_embeddings and c.final_norm
    b = load_hf_config(BARE).config
    assert (b.attn_bias, b.out_bias, b.mlp_bias, b.norm_affine, b.tied_embeddings, b.mlp) == (
        False, False, False, False, False, "gelu_erf")
    transformers = pytest.importorskip("transformers")
    for src, cfg in ((TINY, c), (BARE, b)):
        full = transformers.AutoConfig.for_model(**src).to_dict()  # _remove_final_layer_norm
        assert load_hf_config(full).config == cfg
        d = hf_config_dict(cfg, "opt")
        assert load_hf_config(d).config == cfg
        assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == cfg
    # OPT reads its table at offset 2: a config reading it at another cannot be exported
    for o in (0, 1):
        with pytest.raises(ConfigError, match=rf"position_offset={o} \(expected 2\)"):
            hf_config_dict(c.replace(position_offset=o), "opt")


@pytest.mark.parametrize(("change", "match"), [
    ({"do_layer_norm_before": False}, r"'do_layer_norm_before': only true"),
    ({"_remove_final_layer_norm": True}, r"'_remove_final_layer_norm': only false"),
    ({"word_embed_proj_dim": 8}, r"'word_embed_proj_dim'=8: only hidden_size=16"),
    ({"activation_function": "swish"}, r"'activation_function'.*'swish'"),
    ({"hidden_size": 15}, r"'hidden_size'=15: expected a multiple"),
    ({"intermediate_size": 20}, r"unsupported key 'intermediate_size'"),
    ({"rope_theta": 5.0}, r"unsupported key 'rope_theta'"),
])
def test_bad_opt_configs_name_the_key(change: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**TINY, **change})


def test_opt_125m_counts_exactly_as_hf_meta() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    h = load_hf_config(DATA / "opt-125m.json")
    c = h.config
    assert (c.d_model, c.n_blocks, c.n_heads, c.d_mlp, c.vocab_size, c.context) == (
        768, 12, 12, 3072, 50272, 2048)
    assert (c.mlp, c.tied_embeddings, c.attn_bias, c.positions, c.position_offset) == (
        "relu", True, True, "learned", 2)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**h.raw))
    hf_total = sum(p.numel() for p in model.parameters())
    assert model.model.decoder.embed_positions.weight.shape == (2048 + 2, 768)
    g = build_transformer(c)
    assert g.nodes["pos.W_P"]["shape"] == (2048 + 2, 768)
    # the table holds HF's 2 offset rows (never read, still parameters): HF's count exactly
    assert parameter_counts(g).total == hf_total == 125_239_296


def _hf_state(src: dict, seed: int = 0) -> dict[str, np.ndarray]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    raw = {k: v for k, v in src.items() if k != "model_type"}
    model = transformers.OPTForCausalLM(transformers.OPTConfig(**raw)).to(torch.float64)
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def test_weights_round_trip_whole_position_table() -> None:
    for src in (TINY, BARE):
        hf = load_hf_config(src)
        state = _hf_state(src)
        # HF initialises every row, as released checkpoints hold: rows 0 and 1 random
        assert np.all(state[POS][:2] != 0)
        params = params_from_hf(hf, state)
        assert np.array_equal(params["pos.W_P"], state[POS])  # the whole table, offset 2
        back = params_to_hf(hf.config, "opt", params)
        assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)
        seeded = init_params(build_transformer(hf.config), 1)
        again = params_to_hf(hf.config, "opt", seeded)
        assert np.array_equal(again[POS], seeded["pos.W_P"])
        again_p = params_from_hf(hf, again)
        assert all(np.array_equal(again_p[k], seeded[k]) for k in seeded)
    assert not any("norm" in k for k in back)  # BARE: LayerNorms without weight or bias
    hf = load_hf_config(TINY)
    state = _hf_state(TINY)
    # a table without the 2 offset rows (the old layout) is refused by shape, naming the key
    with pytest.raises(ShapeError, match=rf"'{POS}': expected shape \(18, 16\), got \(16, 16\)"):
        params_from_hf(hf, {**state, POS: state[POS][2:]})
    a = "model.decoder.layers.1.self_attn."
    with pytest.raises(UnknownNameError, match=rf"missing key '{a}out_proj.bias'"):
        params_from_hf(hf, {k: v for k, v in state.items() if k != a + "out_proj.bias"})
    # released checkpoints (OPTModel): no model. prefix
    legacy = {k.removeprefix("model."): v for k, v in state.items()}
    assert all(np.array_equal(params_from_hf(hf, legacy)[k], v)
               for k, v in params_from_hf(hf, state).items())


def _verify(**kwargs):
    from nlaverify.interop.hf_verify import verify_hf

    return verify_hf(kwargs.pop("source", TINY), seq_len=N, **kwargs)


def test_exact_mode_agrees_in_every_node_loss_and_gradient() -> None:
    from nlaverify.interop.hf_patches import needed_patches
    from nlaverify.interop.hf_verify import format_hf_report

    r = _verify(exact=True)
    assert r.ok and r.unmapped == [], format_hf_report(r)
    assert r.row("x0").ok and r.row("blocks.1.attn.q_heads").ok and r.row("blocks.0.norm2").ok
    assert "model.decoder.embed_positions.weight" in {g.name for g in r.gradients}
    assert r.patches == sorted(needed_patches("opt", TINY)) == ["attention_softmax", "loss"]
    assert all(c.ok for c in r.checks)
    s = _verify(source=BARE, exact=True)
    assert s.ok and s.unmapped == [], format_hf_report(s)


def test_stock_mode_and_each_float32_island_at_its_node() -> None:
    r = _verify()  # stock: the float32 softmax is the first departure (no RoPE)
    assert r.first_divergence == "blocks.0.attn.heads" and r.first_beyond_float32 is None
    assert r.verdict
    r = _verify(exact={"attention_softmax"})  # the float32 loss alone
    assert r.first_divergence == "loss" and r.first_beyond_float32 is None


def test_planted_transposed_q_proj_is_named_at_its_node() -> None:
    from nlaverify.interop.hf_verify import format_hf_report

    r = _verify(exact=True, plant="transpose_square")
    assert r.first_divergence == "blocks.0.attn.q" and r.planted, format_hf_report(r)
    assert "model.decoder.layers.0.self_attn.q_proj" in r.planted
    assert all(row.ok for row in r.rows[:[x.node for x in r.rows].index("blocks.0.attn.q")])


@pytest.mark.parametrize("offset", [0, 1])
def test_planted_wrong_position_offset_is_named_at_x0(monkeypatch: pytest.MonkeyPatch,
                                                       offset: int) -> None:
    """The mistake the offset invites: the graph reading HF's table (rows 0-1 random, all
    ``context + 2`` rows held) at offset 0 or 1 instead of 2. Named at ``x0``, the first
    node holding positions; ``embed`` (tokens alone) still agrees."""
    import nlaverify.graph.build as build
    from nlaverify.interop.hf_verify import format_hf_report

    real = build.build_transformer

    def wrong_offset(config):
        g = real(config)
        assert g.nodes["x0"]["static"] == {"offset": 2}
        g.nodes["x0"]["static"] = {"offset": offset}
        return g

    monkeypatch.setattr(build, "build_transformer", wrong_offset)
    r = _verify(exact=True)
    assert not r.ok and r.first_divergence == "x0", format_hf_report(r)
    assert r.row("embed").ok


def test_released_style_checkpoint_verifies_node_by_node(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    """A random ``OPTForCausalLM`` saved by ``save_pretrained`` (HF's initialisation: rows 0
    and 1 of the position table random, as in every released checkpoint) loads whole and
    passes ``verify --hf --hf-exact`` node by node."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from nlaverify.cli import main

    torch.manual_seed(3)
    raw = {k: v for k, v in TINY.items() if k != "model_type"}
    model = transformers.OPTForCausalLM(transformers.OPTConfig(**raw)).to(torch.float64)
    assert torch.all(model.model.decoder.embed_positions.weight[:2] != 0)
    model.save_pretrained(tmp_path / "ck")
    assert main(["verify", "--hf", str(tmp_path / "ck"), "--hf-exact"]) == 0
    out = capsys.readouterr().out
    assert "verify --hf opt: ok" in out, out
