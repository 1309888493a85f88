"""Hugging Face Mamba interop (issue 37, item 4): config, weights, node-by-node verification.

Oracles: ``transformers``' own ``MambaConfig`` (its defaults and ``to_dict``), its meta-device
parameter count of the published configs, and a float64 ``MambaForCausalLM`` run node by node
against the graph. Every verdict is the tolerance model's (``HFVerifyReport``); each claim is
made non-vacuous by a planted mistake or a left-out exact patch reported at its own node.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nlaverify.config import ConfigError, TransformerConfig, preset
from nlaverify.errors import ArgumentError, ShapeError, UnknownNameError
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.graph.run import init_params, run_graph, sample_data
from nlaverify.interop.hf_config import hf_config_dict, load_hf_config
from nlaverify.interop.weights import params_from_hf, params_to_hf
from nlaverify.tolerance import magnitude_condition, tolerance

DATA = Path(__file__).resolve().parents[1] / "nlaverify" / "data" / "hf_configs"
#: a tiny Mamba as a user writes it: d = 8, E = 16, N = 4, k = 3, an explicit rank R = 3
TINY = dict(model_type="mamba", vocab_size=13, hidden_size=8, num_hidden_layers=2,
            state_size=4, conv_kernel=3, expand=2, time_step_rank=3)
N = 5


def test_config_fields_defaults_and_hf_serialisation() -> None:
    c = load_hf_config(TINY).config
    assert (c.mixer, c.mlp, c.norm, c.placement, c.positions, c.final_norm) == (
        "mamba", "none", "rmsnorm", "pre", "none", True)
    assert (c.d_model, c.d_inner, c.ssm_state, c.ssm_conv, c.dt_rank, c.n_blocks) == (
        8, 16, 4, 3, 3, 2)
    assert c.tied_embeddings and c.norm_eps == 1e-5  # MambaConfig's defaults
    transformers = pytest.importorskip("transformers")
    minimal = {k: v for k, v in TINY.items() if k != "time_step_rank"}
    full = transformers.AutoConfig.for_model(**minimal).to_dict()  # writes the rank, 1
    assert full["time_step_rank"] == 1
    assert load_hf_config(full).config == load_hf_config(minimal).config
    assert load_hf_config(minimal).config.ssm_dt_rank is None  # "auto": ceil(8/16)
    # HF builds what hf_config_dict writes, and serialises it back to the same config
    d = hf_config_dict(c, "mamba")
    assert load_hf_config(d).config == c
    assert load_hf_config(transformers.AutoConfig.for_model(**d).to_dict()).config == c


@pytest.mark.parametrize(("change", "match"), [
    ({"use_bias": True}, r"'use_bias': only False"),
    ({"use_conv_bias": False}, r"'use_conv_bias': only True"),
    ({"hidden_act": "gelu"}, r"'hidden_act': only 'silu'"),
    ({"intermediate_size": 24}, r"'intermediate_size'=24 contradicts.* 16"),
    ({"time_step_rank": "half"}, r"'time_step_rank'.*'half'"),
    ({"num_attention_heads": 4}, r"unsupported key 'num_attention_heads'"),
    ({"pretraining_tp": 1}, r"unsupported key 'pretraining_tp'"),  # Llama's, not Mamba's
])
def test_bad_mamba_configs_name_the_key(change: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_hf_config({**TINY, **change})


def test_hf_config_dict_refuses_what_mamba_cannot_express() -> None:
    c = load_hf_config(TINY).config
    for change, field in (({"mlp": "swiglu"}, "mlp"), ({"positions": "learned"}, "positions"),
                          ({"mixer": ("mamba", "attention")}, "mixer"),
                          ({"norm": "layernorm"}, "norm"), ({"context": 16}, "context")):
        with pytest.raises(ConfigError, match=rf"mamba cannot express TransformerConfig\.{field}"):
            hf_config_dict(c.replace(**change), "mamba")


@pytest.mark.parametrize(("name", "d", "layers", "total"), [
    ("mamba-130m", 768, 24, 129_135_360), ("mamba-1.4b", 2048, 48, 1_372_178_432)])
def test_published_configs_count_as_hf_meta(name: str, d: int, layers: int,
                                            total: int) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    h = load_hf_config(DATA / f"{name}.json")
    c = h.config
    assert (c.d_model, c.n_blocks, c.vocab_size, c.ssm_state, c.ssm_expand, c.ssm_conv,
            c.dt_rank, c.tied_embeddings) == (d, layers, 50280, 16, 2, 4, d // 16, True)
    counts = parameter_counts(build_transformer(c))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**h.raw))
    assert counts.total == sum(p.numel() for p in model.parameters()) == total
    assert "mlp" not in counts.by_component and counts.by_component["norms.blocks"] == d * layers


def test_mlp_less_block_graph_jax_and_config() -> None:
    import jax

    from nlaverify.models import jax_transformer as jt

    jax.config.update("jax_enable_x64", True)
    base = preset("tiny-mamba")
    for placement in ("pre", "post"):
        c = base.replace(mlp="none", placement=placement)
        g = build_transformer(c)
        assert not [n for n in g.nodes if ".mlp." in n or n.endswith(("norm2", "resid2"))]
        with_mlp = parameter_counts(build_transformer(base.replace(placement=placement)))
        counts = parameter_counts(g)
        mlp = sum(v for k, v in with_mlp.by_component.items() if k.startswith("mlp."))
        # no MLP and no second RMSNorm gain (d) per block
        assert mlp and counts.total == with_mlp.total - mlp - c.d_model * c.n_blocks
        p, data = init_params(g, 0), sample_data(c.vocab_size, 6, 0)
        ev = run_graph(g, "numpy", p, data)
        rec = jt.intermediates(p, data["tokens"], c)
        assert "blocks.0.resid2" not in rec
        # the independent JAX model, node by node, at the float64 bound of
        # tests/test_ssm_pipeline.py (accumulations over d_in, a dozen dependent stages)
        for node in ("blocks.1.mamba.scan", "blocks.1.resid1", "final_norm", "logits"):
            ref = ev.values[node]
            tol = tolerance("float64", size=c.d_inner, depth=12,
                            condition=magnitude_condition(ref))
            assert tol.compare(np.asarray(rec[node]), ref).ok, node
        # recurrent decoding (two chunks, the carried states) equals the full forward
        step = jt.make_mamba_decode_step(c, p)
        z1, cache, _ = step(data["tokens"][:3], 0, None)
        z2, _, _ = step(data["tokens"][3:], 3, cache)
        ref = np.asarray(rec["logits"])
        tol = tolerance("float64", size=c.d_inner, depth=12, condition=magnitude_condition(ref))
        assert tol.compare(np.concatenate([np.asarray(z1), np.asarray(z2)]), ref).ok
    for change, field in (({"mlp_bias": True}, "mlp_bias"),
                          ({"parallel_residual": True}, "parallel_residual"),
                          ({"lora_rank": 1, "lora_targets": ("mlp",)}, "lora_targets")):
        with pytest.raises(ConfigError, match=rf"TransformerConfig\.{field}: .*mlp='none'"):
            base.replace(mlp="none", **change)


def _hf_mamba(seed: int = 0):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    raw = {k: v for k, v in TINY.items() if k != "model_type"}
    model = transformers.MambaForCausalLM(transformers.MambaConfig(**raw)).to(torch.float64)
    return torch, model


def test_weights_round_trip_and_bad_checkpoints() -> None:
    _, model = _hf_mamba()
    hf = load_hf_config(TINY)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    assert "lm_head.weight" in state  # tied: listed, equal to the embedding
    params = params_from_hf(hf, state)
    back = params_to_hf(hf.config, "mamba", params)
    assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)
    # in_proj's rows: the convolved branch x first, the gate z second; x_proj: dt, B, C
    w = state["backbone.layers.0.mixer.in_proj.weight"]
    assert np.array_equal(params["blocks.0.mamba.in_z.W"], w[16:].T)
    assert np.array_equal(params["blocks.0.mamba.C.W"],
                          state["backbone.layers.0.mixer.x_proj.weight"][3 + 4:].T)
    seeded = init_params(build_transformer(hf.config), 1)
    again = params_from_hf(hf, params_to_hf(hf.config, "mamba", seeded))
    assert all(np.array_equal(again[k], seeded[k]) for k in seeded)
    # the base model's keys (no backbone.) are read too
    base = {k.removeprefix("backbone."): v for k, v in state.items()}
    assert all(np.array_equal(params_from_hf(hf, base)[k], params[k]) for k in params)
    m = "backbone.layers.1.mixer."
    bad = [({k: v for k, v in state.items() if k != m + "A_log"}, UnknownNameError,
            rf"missing key '{m}A_log'"),
           ({**state, m + "dt_proj.weight": state[m + "dt_proj.weight"].T}, ShapeError,
            rf"'{m}dt_proj.weight': expected shape \(16, 3\), got \(3, 16\)"),
           ({**state, m + "in_proj.bias": np.zeros(32)}, UnknownNameError,
            rf"unknown key '{m}in_proj.bias'"),
           ({**state, "lm_head.weight": state["lm_head.weight"] + 1}, ArgumentError,
            "lm_head.weight differs")]
    for st, error, match in bad:
        with pytest.raises(error, match=match):
            params_from_hf(hf, st)


def _verify(**kwargs):
    from nlaverify.interop.hf_verify import verify_hf

    return verify_hf(TINY, seq_len=N, **kwargs)


def test_exact_mode_agrees_in_every_node_loss_and_gradient() -> None:
    from nlaverify.interop.hf_patches import needed_patches
    from nlaverify.interop.hf_verify import format_hf_report

    r = _verify(exact=True)
    assert r.ok, format_hf_report(r)
    assert r.unmapped == []  # every graph node, the convolution and the time step included
    assert r.row("blocks.1.mamba.scan").ok and r.row("blocks.0.mamba.conv").ok
    _, model = _hf_mamba()
    assert {g.name for g in r.gradients} == {k for k, _ in model.named_parameters(
        remove_duplicate=False)}
    assert r.patches == sorted(needed_patches("mamba", TINY)) == [
        "loss", "mamba_logits", "mamba_residual", "mamba_scan", "rmsnorm"]
    fidelity = [c.name for c in r.checks if c.name.startswith("patch fidelity")]
    for node in ("blocks.0.norm1", "blocks.1.mamba.scan", "final_norm", "logits", "loss"):
        assert any(f.startswith(f"patch fidelity {node}:") for f in fidelity), node
    assert all(c.ok for c in r.checks)


def test_stock_mode_departs_at_float32_rounding_only() -> None:
    r = _verify()
    assert not r.ok and r.first_divergence == "blocks.0.norm1"  # MambaRMSNorm in float32
    assert r.first_beyond_float32 is None and r.verdict


@pytest.mark.parametrize(("patch", "node"), [
    ("mamba_scan", "blocks.0.mamba.scan"), ("mamba_residual", "blocks.0.resid1"),
    ("mamba_logits", "loss")])
def test_each_mamba_float32_island_shows_at_its_node(patch: str, node: str) -> None:
    from nlaverify.interop.hf_patches import needed_patches

    r = _verify(exact=set(needed_patches("mamba", TINY)) - {patch})
    assert r.first_divergence == node and r.first_beyond_float32 is None


def test_residual_in_fp32_false_needs_no_residual_patch() -> None:
    from nlaverify.interop.hf_patches import needed_patches

    assert "mamba_residual" not in needed_patches("mamba", {**TINY, "residual_in_fp32": False})


def test_planted_in_proj_swap_is_named_at_its_node() -> None:
    from nlaverify.interop.hf_verify import format_hf_report

    r = _verify(exact=True, plant="mamba_in_proj_swap")
    assert r.first_divergence == "blocks.0.mamba.in_x" and r.planted, format_hf_report(r)
    assert all(row.ok for row in r.rows[:[x.node for x in r.rows].index("blocks.0.mamba.in_x")])
    s = _verify(plant="mamba_in_proj_swap")
    assert s.first_beyond_float32 == "blocks.0.mamba.in_x" and not s.verdict


def test_checkpoint_directory_cli_and_refusal(tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    from nlaverify.cli import main
    from nlaverify.interop.weights import load_checkpoint, load_safetensors, save_safetensors

    _, model = _hf_mamba(seed=1)
    model.save_pretrained(tmp_path / "ck")  # float64, HF's own initialisation
    assert json.loads((tmp_path / "ck" / "config.json").read_text())["model_type"] == "mamba"
    assert main(["verify", "--hf", str(tmp_path / "ck"), "--hf-exact"]) == 0
    out = capsys.readouterr().out
    assert "verify --hf mamba: ok" in out
    assert "weights: HF from_pretrained vs params_to_hf(load_checkpoint)" in out
    tensors = load_safetensors(tmp_path / "ck")
    del tensors["backbone.layers.0.mixer.D"]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text((tmp_path / "ck" / "config.json").read_text())
    save_safetensors(tmp_path / "bad" / "model.safetensors", tensors)
    with pytest.raises(UnknownNameError, match=r"missing key 'backbone\.layers\.0\.mixer\.D'"):
        load_checkpoint(tmp_path / "bad")


def test_transformer_config_of_published_mamba_is_a_graph() -> None:
    c = load_hf_config(DATA / "mamba-130m.json").config
    assert c == TransformerConfig(vocab_size=50280, d_model=768, n_heads=1, n_blocks=24,
                                  d_mlp=1, norm="rmsnorm", positions="none", context=2048,
                                  mlp="none", mixer="mamba", tied_embeddings=True)
