"""DeepSeek-V3's mixture-of-experts layers through the Hugging Face interop (issue 23): the
config both ways, the weights both ways (fused experts, shared experts, the router's bias
buffer carried as the graph's constant ``e_bias``), ``verify --hf --hf-exact`` node by node on
a tiny random ``DeepseekV3ForCausalLM`` (float64, nothing downloaded) with a dense block 0,
groups, a bias that changes the choice and :math:`\\rho \\ne 1`; planted bugs (the bias left
out of HF's selection, the fused experts' gate and up halves swapped, HF's router without its
bias) each named at their node; and the release check of DeepSeek-V3 (671B / 37B)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json

import numpy as np
import pytest

from nlaverify.commands_params import _cmd_params
from nlaverify.config import ConfigError
from nlaverify.config_moe import activated_parameters, routing_bias
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.graph.run import init_params, run_graph, sample_data
from nlaverify.interop import weights as W
from nlaverify.interop import weights_layout_moe
from nlaverify.interop.hf_config import hf_config_dict, load_hf_config
from nlaverify.interop.hf_patches import needed_patches
from nlaverify.interop.hf_verify import format_hf_report, verify_hf

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

#: block 0 dense, block 1 sparse: 8 experts in 4 groups of 2, the best 2 groups, top 2,
#: renormalised gates scaled by rho = 2.5, one shared expert
CONFIG = dict(model_type="deepseek_v3", vocab_size=32, hidden_size=16, intermediate_size=24,
              moe_intermediate_size=8, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=2, n_shared_experts=1, n_routed_experts=8,
              num_experts_per_tok=2, n_group=4, topk_group=2, first_k_dense_replace=1,
              kv_lora_rank=8, q_lora_rank=None, qk_nope_head_dim=4, qk_rope_head_dim=4,
              v_head_dim=4, routed_scaling_factor=2.5, norm_topk_prob=True,
              max_position_embeddings=32, rope_theta=10000.0, scoring_func="sigmoid",
              topk_method="noaux_tc")
N = 5
RELEASE = W.__file__.rsplit("/", 2)[0] + "/data/hf_configs/deepseek-v3.json"


def _hf_model(cfg: dict):
    import torch

    raw = {k: v for k, v in cfg.items() if k != "model_type" and not k.startswith("_")}
    return transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(cfg["model_type"], **raw), dtype=torch.float64)


def test_config_fields() -> None:
    c = load_hf_config(CONFIG).config
    assert (c.n_experts, c.top_k, c.n_group, c.topk_group, c.routed_scaling_factor) == (
        8, 2, 4, 2, 2.5)
    assert (c.moe_router, c.moe_intermediate_size, c.d_shared_expert, c.d_mlp) == (
        "sigmoid", 8, 8, 24)
    assert c.moe_renormalize and not c.shared_expert_gate and c.moe_dense_layers == (0,)
    wide = load_hf_config(dict(CONFIG, n_shared_experts=2)).config
    assert wide.d_shared_expert == 16  # one SwiGLU of width n_shared_experts * m


def test_config_round_trip_and_hf_builds_the_same_layers() -> None:
    c = load_hf_config(CONFIG).config
    d = hf_config_dict(c, "deepseek_v3")
    assert load_hf_config(d).config == c
    model = _hf_model(d)
    kinds = [type(layer.mlp).__name__ for layer in model.model.layers]
    assert kinds == ["DeepseekV3MLP", "DeepseekV3MoE"]
    assert model.model.layers[1].mlp.shared_experts.gate_proj.out_features == c.d_shared_expert


@pytest.mark.parametrize(("change", "key"), [
    ({"scoring_func": "softmax"}, "scoring_func"),
    ({"topk_method": "group_limited_greedy"}, "topk_method"),
    ({"moe_layer_freq": 2}, "moe_layer_freq"),
    ({"moe_layer_freq": True}, "moe_layer_freq"),   # a bool is no number
    ({"n_group": 3}, "n_group"),            # 8 experts in 3 groups
    ({"n_group": 8}, "n_group"),            # groups of one: the router sums each group's top 2
    ({"topk_group": 5}, "topk_group"),
    ({"num_experts_per_tok": 5}, "num_experts_per_tok"),  # > topk_group * E / n_group = 4
    ({"n_shared_experts": 0}, "n_shared_experts"),
    ({"num_local_experts": 4}, "num_local_experts"),
    ({"first_k_dense_replace": None}, "first_k_dense_replace"),
])
def test_config_refusals_name_the_key(change: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load_hf_config(dict(CONFIG, **change))


def test_deepseek_v3_router_keys_refused_as_deepseek_v2() -> None:
    """V3's keys under ``deepseek_v2`` (its MoE layers: tests/test_interop_deepseek_v2_moe.py):
    the renormalised gates and the bias-corrected method are refused by key."""
    v2 = {k: v for k, v in CONFIG.items() if k not in ("scoring_func", "topk_method")}
    with pytest.raises(ConfigError, match="norm_topk_prob"):
        load_hf_config(dict(v2, model_type="deepseek_v2"))
    with pytest.raises(ConfigError, match="topk_method"):
        load_hf_config(dict(v2, model_type="deepseek_v2", norm_topk_prob=False,
                            topk_method="noaux_tc"))


def test_export_refuses_what_deepseek_v3_cannot_express() -> None:
    c = load_hf_config(CONFIG).config
    for bad, field in ((c.replace(moe_dense_layers=(1,)), "moe_dense_layers"),
                       (c.replace(d_shared_expert=12), "d_shared_expert")):
        with pytest.raises(ConfigError, match=field):
            hf_config_dict(bad, "deepseek_v3")
    with pytest.raises(ConfigError, match="moe_router='sigmoid'"):  # V2's router: softmax
        hf_config_dict(c, "deepseek_v2")


def test_weights_both_ways_with_the_bias_buffer() -> None:
    c = load_hf_config(CONFIG).config
    params = init_params(build_transformer(c), 1)
    state = W.params_to_hf(c, "deepseek_v3", params)
    sd = _hf_model(CONFIG).state_dict()
    assert {k: state[k].shape for k in state} == {k: tuple(v.shape) for k, v in sd.items()}
    back = W.params_from_hf((c, "deepseek_v3"), state)
    assert set(back) == set(params)
    assert all(np.array_equal(back[k], params[k]) for k in params)
    m = 8  # expert 0's gate rows are W1's columns, the up rows W3's
    gu = state["model.layers.1.mlp.experts.gate_up_proj"]
    assert np.array_equal(gu[0, :m], params["blocks.1.mlp.W1"][0].T)
    assert np.array_equal(gu[0, m:], params["blocks.1.mlp.W3"][0].T)
    assert np.array_equal(state["model.layers.1.mlp.shared_experts.down_proj.weight"],
                          params["blocks.1.mlp.U2"].T)
    bias = state["model.layers.1.mlp.gate.e_score_correction_bias"]
    assert np.array_equal(bias, routing_bias(c, 1)) and np.any(bias != 0)
    assert not np.any(W.params_to_hf(c, "deepseek_v3", params, gradients=True)[
        "model.layers.1.mlp.gate.e_score_correction_bias"])
    # import: HF's buffer is the data entry that replaces the graph's constant
    trained = dict(state, **{"model.layers.1.mlp.gate.e_score_correction_bias": bias + 1})
    assert set(weights_layout_moe.deepseek_v3_constants(c, trained)) == {"blocks.1.mlp.e_bias"}
    assert np.array_equal(weights_layout_moe.deepseek_v3_constants(c, trained)[
        "blocks.1.mlp.e_bias"], bias + 1)


def test_the_bias_changes_the_choice() -> None:
    """Without this the exact agreement of ``mlp.route`` would not test the bias."""
    c = load_hf_config(CONFIG).config
    graph = build_transformer(c)
    params = init_params(graph, 0)
    data = sample_data(c.vocab_size, N, 0)
    with_bias = run_graph(graph, "numpy", params, data).values["blocks.1.mlp.route"]
    zeros = {"blocks.1.mlp.e_bias": np.zeros(c.n_experts)}
    without = run_graph(graph, "numpy", params, {**data, **zeros}).values["blocks.1.mlp.route"]
    assert not np.array_equal(with_bias, without)


def test_exact_mode_agrees_in_every_node_loss_and_gradient() -> None:
    r = verify_hf(CONFIG, seq_len=N, exact=True)
    assert r.ok, format_hf_report(r)
    assert r.first_divergence is None and r.first_gradient_divergence is None
    for node in ("blocks.0.mlp.out", "blocks.1.mlp.scores", "blocks.1.mlp.route",
                 "blocks.1.mlp.out", "logits", "loss"):
        assert r.row(node).ok, node
    assert r.unmapped == ["blocks.1.mlp.affinity"]  # sigma(x W_r): no HF module output
    names = {k for k, _ in _hf_model(CONFIG).named_parameters()}
    assert {g.name for g in r.gradients} == names  # the bias buffer is no parameter
    assert "router_sigmoid" in r.patches == sorted(needed_patches("deepseek_v3", CONFIG))
    assert any(c.name.startswith("patch fidelity blocks.1.mlp.out:") for c in r.checks)


def test_planted_bias_ignored_is_named_at_the_route(monkeypatch) -> None:
    """The export writes a zero bias: HF selects without it, and the first node to differ is
    the selection itself."""
    def zero_bias(c, layer):
        return [e if not e.hf[0].endswith("e_score_correction_bias") else e.__class__(
            e.hf, e.hf_shapes, (), e.to_ours, lambda a, _: [np.zeros(c.n_experts)])
            for e in entries(c, layer)]

    entries = weights_layout_moe.deepseek_v3_moe_entries
    from nlaverify.interop import weights_layout_mla
    monkeypatch.setattr(weights_layout_mla, "deepseek_v3_moe_entries", zero_bias)
    r = verify_hf(CONFIG, seq_len=N, exact=True)
    assert r.first_divergence == "blocks.1.mlp.route", format_hf_report(r)
    assert r.row("blocks.1.mlp.scores").ok


def test_planted_gate_up_swap_is_named_at_the_moe_output(monkeypatch) -> None:
    monkeypatch.setattr(weights_layout_moe, "_fuse_gate_up",
                        lambda W1, W3: np.concatenate([W3, W1], axis=-1).transpose(0, 2, 1))
    r = verify_hf(CONFIG, seq_len=N, exact=True)
    assert r.first_divergence == "blocks.1.mlp.out", format_hf_report(r)
    assert r.row("blocks.1.mlp.route").ok  # the routing does not read the experts


def test_planted_router_bug_in_hf_is_named(monkeypatch) -> None:
    """HF's own router selecting without its bias: the exact replacement agrees with the
    graph, the fidelity check of HF's stock code names the block's output."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as mod

    stock = mod.DeepseekV3TopkRouter.forward

    def no_bias(self, h):
        saved = self.e_score_correction_bias.clone()
        self.e_score_correction_bias.zero_()
        try:
            return stock(self, h)
        finally:
            self.e_score_correction_bias.copy_(saved)

    monkeypatch.setattr(mod.DeepseekV3TopkRouter, "forward", no_bias)
    r = verify_hf(CONFIG, seq_len=N, exact=True)
    assert not r.ok and r.first_patch_divergence == "blocks.1.mlp.out", format_hf_report(r)
    assert r.first_divergence is None


#: DeepSeek-V3 as nlaverify counts it: HF's DeepseekV3ForCausalLM (no multi-token-prediction
#: module) has 671,026,404,352 parameters, the published "671B"; a token activates
#: 37,552,282,624, the published "37B" (8 of 256 routed experts in each of the 58 MoE layers)
DEEPSEEK_V3 = (671_026_404_352, 37_552_282_624)


def test_release_total_is_hf_meta_count_and_activated_as_hf_routes() -> None:
    import torch

    h = load_hf_config(RELEASE)
    c = h.config
    counts = parameter_counts(build_transformer(c))
    raw = {k: v for k, v in h.raw.items() if not k.startswith("_")}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**raw))
    hf_total = sum(p.numel() for p in model.parameters())  # buffers (the biases) excluded
    E, k = c.n_experts, c.top_k
    skipped = sum(p.numel() * (E - k) // E for n, p in model.named_parameters()
                  if ".mlp.experts." in n)
    active = activated_parameters(c, counts.total, counts.by_component["moe.experts"])
    assert (counts.total, active) == (hf_total, hf_total - skipped) == DEEPSEEK_V3
    assert sum(".mlp.gate.e_score_correction_bias" in n for n, _ in model.named_buffers()) == 58
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _cmd_params(argparse.Namespace(preset=None, config=RELEASE, lora=None, json=True))
    got = json.loads(out.getvalue())
    assert got["activated_per_token"] == active


#: a trained-looking bias (multiples of 1/8, exact in float32) unlike routing_bias's draw
TRAINED_BIAS = np.array([0.5, -0.25, 0.0, 0.375, -0.5, 0.125, 0.25, -0.125])


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    """A tiny DeepSeek-V3 checkpoint folder: HF's own init, the bias buffer set after init."""
    import torch

    model = _hf_model(CONFIG)
    with torch.no_grad():
        model.model.layers[1].mlp.gate.e_score_correction_bias.copy_(
            torch.from_numpy(TRAINED_BIAS))
    path = tmp_path_factory.mktemp("deepseek_v3_moe")
    model.save_pretrained(path)
    return str(path)


def test_checkpoint_bias_is_passed_to_the_graph_as_data(checkpoint: str) -> None:
    r = verify_hf(checkpoint, seq_len=N, exact=True)
    assert r.ok, format_hf_report(r)
    assert r.row("blocks.1.mlp.route").ok
    # the checkpoint's bias, not the graph's default, decided HF's choice
    hf, params = W.load_checkpoint(checkpoint, dtype=np.float64)
    graph = build_transformer(hf.config)
    data = sample_data(hf.config.vocab_size, N, 0)
    trained = {"blocks.1.mlp.e_bias": TRAINED_BIAS}
    route = [run_graph(graph, "numpy", params, {**data, **extra}).values["blocks.1.mlp.route"]
             for extra in ({}, trained)]
    assert not np.array_equal(*route)


def test_planted_checkpoint_bias_dropped_is_named(checkpoint: str, monkeypatch) -> None:
    """Not passing HF's buffer as data: the weights check names the bias, the route
    differs."""
    from nlaverify.interop import hf_verify

    monkeypatch.setattr(hf_verify, "_hf_constants", lambda *a: None)
    r = verify_hf(checkpoint, seq_len=N, exact=True)
    assert r.first_divergence == "blocks.1.mlp.route", format_hf_report(r)
    weights = next(c for c in r.checks if c.name.startswith("weights:"))
    assert not weights.ok and "e_score_correction_bias" in weights.note
