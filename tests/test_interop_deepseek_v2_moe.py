"""DeepSeek-V2's mixture-of-experts layers through the Hugging Face interop (issue 23): the
config both ways (``topk_method`` greedy and group-limited, ``routed_scaling_factor``; the
keys HF does not implement refused by name), the weights both ways (fused experts,
``shared_experts``, no bias buffer), ``verify --hf --hf-exact`` node by node on a tiny random
``DeepseekV2ForCausalLM`` (float64, nothing downloaded) with block 0 dense and block 1
sparse, and planted bugs (the fused gate/up halves swapped; HF's router renormalising) each
named at their node."""

from __future__ import annotations

import numpy as np
import pytest

from nlaverify.config import ConfigError
from nlaverify.graph.build import build_transformer
from nlaverify.graph.run import init_params
from nlaverify.interop import weights as W
from nlaverify.interop import weights_layout_moe
from nlaverify.interop.hf_config import hf_config_dict, load_hf_config
from nlaverify.interop.hf_patches import needed_patches
from nlaverify.interop.hf_verify import format_hf_report, verify_hf

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

#: block 0 dense, block 1 sparse: 8 experts in 4 groups of 2 scored by their max, the best 2
#: groups, top 3, gates rho s with rho = 16 (DeepSeek-V2's), two shared experts
CONFIG = dict(model_type="deepseek_v2", vocab_size=32, hidden_size=16, intermediate_size=24,
              moe_intermediate_size=4, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=2, n_shared_experts=2, n_routed_experts=8,
              num_experts_per_tok=3, n_group=4, topk_group=2, first_k_dense_replace=1,
              kv_lora_rank=8, q_lora_rank=None, qk_nope_head_dim=4, qk_rope_head_dim=4,
              v_head_dim=4, routed_scaling_factor=16.0, norm_topk_prob=False,
              max_position_embeddings=32, rope_theta=10000.0,
              topk_method="group_limited_greedy")
GREEDY = dict(CONFIG, topk_method="greedy", n_group=1, topk_group=1, routed_scaling_factor=1.0)
N = 5


def _hf_model(cfg: dict):
    import torch

    raw = {k: v for k, v in cfg.items() if k != "model_type" and not k.startswith("_")}
    return transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(cfg["model_type"], **raw), dtype=torch.float64)


def test_config_fields_round_trip_and_hf_builds_the_same_layers() -> None:
    c = load_hf_config(CONFIG).config
    assert (c.moe_router, c.n_experts, c.top_k, c.n_group, c.topk_group) == (
        "softmax_group", 8, 3, 4, 2)
    assert (c.routed_scaling_factor, c.moe_renormalize, c.d_shared_expert,
            c.moe_dense_layers) == (16.0, False, 8, (0,))
    g = load_hf_config(GREEDY).config
    assert (g.n_group, g.topk_group, g.routed_scaling_factor) == (1, 1, 1.0)
    # greedy ignores n_group / topk_group, as HF's router does
    assert load_hf_config(dict(GREEDY, n_group=4, topk_group=2)).config == g
    for cfg, c_ in ((CONFIG, c), (GREEDY, g)):
        d = hf_config_dict(c_, "deepseek_v2")
        assert load_hf_config(d).config == c_ and d["topk_method"] == cfg["topk_method"]
    model = _hf_model(hf_config_dict(c, "deepseek_v2"))
    assert [type(layer.mlp).__name__ for layer in model.model.layers] == [
        "DeepseekV2MLP", "DeepseekV2Moe"]
    assert model.model.layers[1].mlp.shared_experts.gate_proj.out_features == c.d_shared_expert


@pytest.mark.parametrize(("change", "key"), [
    ({"topk_method": "noaux_tc"}, "topk_method"),
    ({"norm_topk_prob": True}, "norm_topk_prob"),   # HF's V2 router never renormalises
    ({"scoring_func": "sigmoid"}, "scoring_func"),
    ({"moe_layer_freq": 2}, "moe_layer_freq"),
    ({"moe_layer_freq": True}, "moe_layer_freq"),   # a bool is no number
    ({"moe_layer_freq": 1.0}, "moe_layer_freq"),
    ({"mlp_bias": True}, "mlp_bias"),
    ({"n_group": 3}, "n_group"),
    ({"n_group": None}, "n_group"),
    ({"topk_group": 5}, "topk_group"),
    ({"num_experts_per_tok": 5}, "num_experts_per_tok"),  # > topk_group * E / n_group = 4
    ({"num_experts_per_tok": None}, "num_experts_per_tok"),
    ({"n_shared_experts": 0}, "n_shared_experts"),
])
def test_config_refusals_name_the_key(change: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load_hf_config(dict(CONFIG, **change))


def test_export_refuses_v3_router_as_v2() -> None:
    from tests.test_interop_deepseek_moe import CONFIG as V3

    with pytest.raises(ConfigError, match="moe_router='sigmoid'"):
        hf_config_dict(load_hf_config(V3).config, "deepseek_v2")


def test_weights_both_ways() -> None:
    c = load_hf_config(CONFIG).config
    params = init_params(build_transformer(c), 1)
    state = W.params_to_hf(c, "deepseek_v2", params)
    sd = _hf_model(CONFIG).state_dict()
    assert {k: state[k].shape for k in state} == {k: tuple(v.shape) for k, v in sd.items()}
    back = W.params_from_hf((c, "deepseek_v2"), state)
    assert set(back) == set(params) and all(np.array_equal(back[k], params[k]) for k in params)
    assert np.array_equal(state["model.layers.1.mlp.shared_experts.up_proj.weight"],
                          params["blocks.1.mlp.U3"].T)


@pytest.mark.parametrize("cfg", [CONFIG, GREEDY], ids=["group_limited_greedy", "greedy"])
def test_exact_mode_agrees_in_every_node_loss_and_gradient(cfg: dict) -> None:
    r = verify_hf(cfg, seq_len=N, exact=True)
    assert r.ok, format_hf_report(r)
    assert r.first_divergence is None and r.first_gradient_divergence is None
    for node in ("blocks.0.mlp.out", "blocks.1.mlp.scores", "blocks.1.mlp.route",
                 "blocks.1.mlp.out", "logits", "loss"):
        assert r.row(node).ok, node
    assert r.unmapped == ["blocks.1.mlp.affinity"]  # softmax(x W_r): no HF module output
    names = {k for k, _ in _hf_model(cfg).named_parameters()}
    assert {g.name for g in r.gradients} == names
    assert "router_v2" in r.patches == sorted(needed_patches("deepseek_v2", cfg))
    assert any(c.name.startswith("patch fidelity blocks.1.mlp.out:") for c in r.checks)


def test_planted_gate_up_swap_is_named_at_the_moe_output(monkeypatch) -> None:
    monkeypatch.setattr(weights_layout_moe, "_fuse_gate_up",
                        lambda W1, W3: np.concatenate([W3, W1], axis=-1).transpose(0, 2, 1))
    r = verify_hf(CONFIG, seq_len=N, exact=True)
    assert r.first_divergence == "blocks.1.mlp.out", format_hf_report(r)
    assert r.row("blocks.1.mlp.route").ok  # the routing does not read the experts


def test_planted_router_bug_in_hf_is_named(monkeypatch) -> None:
    """HF's stock router renormalising its gates (the original code's norm_topk_prob): the
    exact replacement agrees with the graph; the fidelity check names the block's output."""
    from transformers.models.deepseek_v2 import modeling_deepseek_v2 as mod

    stock = mod.DeepseekV2TopkRouter.forward

    def renormalised(self, h):
        logits, w, idx = stock(self, h)
        return logits, w / w.sum(dim=-1, keepdim=True), idx

    monkeypatch.setattr(mod.DeepseekV2TopkRouter, "forward", renormalised)
    r = verify_hf(CONFIG, seq_len=N, exact=True)
    assert not r.ok and r.first_patch_divergence == "blocks.1.mlp.out", format_hf_report(r)
    assert r.first_divergence is None


RELEASE = W.__file__.rsplit("/", 2)[0] + "/data/hf_configs/deepseek-v2-lite.json"
#: DeepSeek-V2-Lite as nlaverify counts it: HF's DeepseekV2ForCausalLM has 15,706,484,224
#: parameters (the published "15.7B"); a token activates 2,661,150,208 (6 of 64 routed
#: experts in each of the 26 MoE layers). The published "2.4B activated" is that less one
#: vocabulary table, 102400 * 2048 = 209,715,200 (2,451,435,008): the convention that does
#: not count the embedding lookup, which nlaverify's count (as for DeepSeek-V3's "37B") does
DEEPSEEK_V2_LITE = (15_706_484_224, 2_661_150_208)


def test_release_total_is_hf_meta_count_and_activated_as_hf_routes() -> None:
    import argparse
    import contextlib
    import io
    import json

    import torch

    from nlaverify.commands_params import _cmd_params
    from nlaverify.config_moe import activated_parameters
    from nlaverify.graph.build import parameter_counts

    h = load_hf_config(RELEASE)
    c = h.config
    assert (c.moe_router, c.n_experts, c.top_k, c.n_group, c.d_shared_expert) == (
        "softmax_group", 64, 6, 1, 2816)
    counts = parameter_counts(build_transformer(c))
    raw = {k: v for k, v in h.raw.items() if not k.startswith("_")}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**raw))
    hf_total = sum(p.numel() for p in model.parameters())
    E, k = c.n_experts, c.top_k
    skipped = sum(p.numel() * (E - k) // E for n, p in model.named_parameters()
                  if ".mlp.experts." in n)
    active = activated_parameters(c, counts.total, counts.by_component["moe.experts"])
    assert (counts.total, active) == (hf_total, hf_total - skipped) == DEEPSEEK_V2_LITE
    assert round(counts.total / 1e9, 1) == 15.7
    assert int((active - c.vocab_size * c.d_model) / 1e8) / 10 == 2.4
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _cmd_params(argparse.Namespace(preset=None, config=RELEASE, lora=None, json=True))
    assert json.loads(out.getvalue())["activated_per_token"] == active


def test_router_patch_is_needed_and_shows_at_the_moe_output() -> None:
    """Without ``router_v2`` HF's stock float32 router is what runs: its logits (node
    ``mlp.scores``, ``F.linear`` in float32) are the first node to part, within float32
    rounding, not beyond."""
    r = verify_hf(CONFIG, seq_len=N, exact=set(needed_patches("deepseek_v2", CONFIG))
                  - {"router_v2"})
    assert r.first_divergence == "blocks.1.mlp.scores", format_hf_report(r)
    assert r.row("blocks.0.mlp.out").ok
    assert r.first_beyond_float32 is None


def test_the_group_limit_changes_the_choice() -> None:
    """Without this the exact agreement of ``mlp.route`` would not test the max-scored group
    limit: on the verified tokens, keeping every group chooses differently."""
    from nlaverify.backends import get_namespace
    from nlaverify.graph.run import run_graph, sample_data
    from nlaverify.ops.moe_deepseek_v2 import deepseek_v2_select

    c = load_hf_config(CONFIG).config
    graph = build_transformer(c)
    values = run_graph(graph, "numpy", init_params(graph, 0),
                       sample_data(c.vocab_size, N, 0)).values
    s = np.asarray(values["blocks.1.mlp.affinity"])
    route = np.asarray(values["blocks.1.mlp.route"])
    np_ = get_namespace("numpy")
    assert np.array_equal(route, deepseek_v2_select(np_, s, 3, 4, 2))
    assert not np.array_equal(route, deepseek_v2_select(np_, s, 3, 4, 4))


def test_checkpoint_saved_by_hf_loads_and_verifies(tmp_path) -> None:
    """HF's ``save_pretrained`` writes DeepSeek-V2's experts per expert
    (``experts.{e}.{gate,up,down}_proj.weight``, as the released checkpoints): they are fused
    gate first (``gate_up_proj[e] = [W_1^e; W_3^e]^\\top``) and the folder verifies node by
    node."""
    model = _hf_model(CONFIG)
    model.save_pretrained(tmp_path)
    _, params = W.load_checkpoint(str(tmp_path), dtype=np.float64)
    w = model.model.layers[1].mlp.experts.gate_up_proj.detach().numpy()
    m = CONFIG["moe_intermediate_size"]
    np.testing.assert_array_equal(params["blocks.1.mlp.W1"], w[:, :m].transpose(0, 2, 1))
    np.testing.assert_array_equal(params["blocks.1.mlp.W3"], w[:, m:].transpose(0, 2, 1))
    r = verify_hf(str(tmp_path), seq_len=N, exact=True)
    assert r.ok, format_hf_report(r)
