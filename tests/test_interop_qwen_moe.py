"""Qwen2-MoE and Qwen3-MoE through the Hugging Face interop (issue 23): the config both ways,
the weights both ways (fused experts, the shared expert and its gate), and ``verify --hf
--hf-exact`` node by node on tiny random models (float64, nothing downloaded); a planted
layout bug (the fused experts' gate and up halves swapped) and a planted router bug in HF's
own class are each named at the MoE block's output."""

from __future__ import annotations

import argparse
import contextlib
import io
import json

import numpy as np
import pytest

from nlaverify.commands_params import _cmd_params
from nlaverify.config import ConfigError
from nlaverify.config_moe import activated_parameters
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.graph.run import init_params
from nlaverify.interop import weights as W
from nlaverify.interop import weights_layout_moe
from nlaverify.interop.hf_config import hf_config_dict, load_hf_config
from nlaverify.interop.hf_patches import needed_patches
from nlaverify.interop.hf_verify import format_hf_report, verify_hf

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

_RMS = dict(vocab_size=13, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
            rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)

#: tiny configs as a user writes them: Qwen2-MoE with its gated shared expert, block 0 dense
#: (mlp_only_layers), gates not renormalised; Qwen3-MoE (no shared expert, QK-norm) with
#: renormalised gates, every block sparse
CONFIGS = {
    "qwen2_moe": dict(_RMS, model_type="qwen2_moe", num_experts=4, num_experts_per_tok=2,
                      moe_intermediate_size=8, shared_expert_intermediate_size=12,
                      norm_topk_prob=False, mlp_only_layers=[0], router_aux_loss_coef=0.01),
    "qwen3_moe": dict(_RMS, model_type="qwen3_moe", num_experts=4, num_experts_per_tok=2,
                      moe_intermediate_size=8, norm_topk_prob=True, head_dim=4),
}
N = 5


def _hf_parameter_names(cfg: dict) -> set[str]:
    raw = {k: v for k, v in cfg.items() if k != "model_type"}
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(cfg["model_type"], **raw))
    return {k for k, _ in model.named_parameters(remove_duplicate=False)}


def test_config_fields() -> None:
    q2 = load_hf_config(CONFIGS["qwen2_moe"]).config
    assert (q2.n_experts, q2.top_k, q2.moe_intermediate_size, q2.d_shared_expert) == (4, 2, 8,
                                                                                      12)
    assert q2.shared_expert_gate and not q2.moe_renormalize and q2.moe_dense_layers == (0,)
    assert q2.attn_bias and not q2.out_bias and not q2.qk_norm
    q3 = load_hf_config(CONFIGS["qwen3_moe"]).config
    assert q3.d_shared_expert == 0 and not q3.shared_expert_gate and q3.moe_renormalize
    assert q3.qk_norm and q3.moe_dense_layers == () and q3.d_head == 4
    step = load_hf_config(dict(CONFIGS["qwen3_moe"], decoder_sparse_step=2)).config
    assert step.moe_dense_layers == (0,)  # (l + 1) % 2 != 0: block 0 dense, block 1 sparse


@pytest.mark.parametrize("mt", list(CONFIGS))
def test_config_round_trip(mt: str) -> None:
    cfg = load_hf_config(CONFIGS[mt]).config
    d = hf_config_dict(cfg, mt)
    back = load_hf_config(d).config
    assert back == cfg
    hf = transformers.AutoConfig.for_model(**d)  # HF builds it and agrees on the layers
    assert [i for i in range(cfg.n_blocks) if i in hf.mlp_only_layers] == list(
        cfg.moe_dense_layers)


@pytest.mark.parametrize(("mt", "change", "key"), [
    ("qwen2_moe", {"use_sliding_window": True}, "use_sliding_window"),
    ("qwen2_moe", {"num_experts": 0}, "num_experts"),
    ("qwen2_moe", {"shared_expert_intermediate_size": 0}, "shared_expert_intermediate_size"),
    ("qwen3_moe", {"num_experts_per_tok": 5}, "num_experts_per_tok"),
    ("qwen3_moe", {"mlp_only_layers": [2]}, "mlp_only_layers"),
    ("qwen3_moe", {"router_jitter_noise": 0.1}, "router_jitter_noise"),
    # review of issue 23: accepted before (HF refuses it, as nlaverify's qwen2/qwen3 do)
    ("qwen2_moe", {"layer_types": ["full_attention"] * 3}, "'layer_types': expected 2"),
])
def test_config_refusals_name_the_key(mt: str, change: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load_hf_config(dict(CONFIGS[mt], **change))


def test_export_refuses_what_qwen_cannot_express() -> None:
    cfg = load_hf_config(CONFIGS["qwen2_moe"]).config
    with pytest.raises(ConfigError, match="d_shared_expert"):
        hf_config_dict(cfg, "qwen3_moe")
    with pytest.raises(ConfigError, match="d_shared_expert"):
        hf_config_dict(cfg.replace(d_shared_expert=0, shared_expert_gate=False), "qwen2_moe")
    with pytest.raises(ConfigError, match="mixtral cannot express"):  # no shared expert
        hf_config_dict(cfg, "mixtral")


@pytest.mark.parametrize("mt", list(CONFIGS))
def test_weights_both_ways(mt: str) -> None:
    import torch

    cfg = load_hf_config(CONFIGS[mt]).config
    params = init_params(build_transformer(cfg), 1)
    state = W.params_to_hf(cfg, mt, params)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(**hf_config_dict(cfg, mt)), dtype=torch.float64)
    sd = model.state_dict()
    assert {k: state[k].shape for k in state} == {k: tuple(v.shape) for k, v in sd.items()}
    back = W.params_from_hf((cfg, mt), state)
    assert set(back) == set(params)
    assert all(np.array_equal(back[k], params[k]) for k in params)
    if mt == "qwen2_moe":  # the gate rows of expert 0 are W1's columns
        gu = state["model.layers.1.mlp.experts.gate_up_proj"]
        assert np.array_equal(gu[0, :8], params["blocks.1.mlp.W1"][0].T)
        assert np.array_equal(state["model.layers.1.mlp.shared_expert_gate.weight"][0],
                              params["blocks.1.mlp.w_sg"])


@pytest.mark.parametrize("mt", list(CONFIGS))
def test_exact_mode_agrees_in_every_node_loss_and_gradient(mt: str) -> None:
    r = verify_hf(CONFIGS[mt], seq_len=N, exact=True)
    assert r.ok, format_hf_report(r)
    assert r.first_divergence is None and r.first_gradient_divergence is None
    for node in ("blocks.1.mlp.scores", "blocks.1.mlp.route", "blocks.1.mlp.out", "logits",
                 "loss"):
        assert r.row(node).ok, node
    assert {g.name for g in r.gradients} == _hf_parameter_names(CONFIGS[mt])
    assert "router_softmax" in r.patches == sorted(needed_patches(mt, CONFIGS[mt]))
    assert any(c.name.startswith("patch fidelity blocks.1.mlp.out:") for c in r.checks)


def test_planted_gate_up_swap_is_named_at_the_moe_output(monkeypatch) -> None:
    monkeypatch.setattr(weights_layout_moe, "_fuse_gate_up",
                        lambda W1, W3: np.concatenate([W3, W1], axis=-1).transpose(0, 2, 1))
    r = verify_hf(CONFIGS["qwen2_moe"], seq_len=N, exact=True)
    assert r.first_divergence == "blocks.1.mlp.out", format_hf_report(r)
    assert r.row("blocks.1.mlp.route").ok  # the routing does not read the experts


def test_planted_router_bug_in_hf_is_named(monkeypatch) -> None:
    """Qwen3-MoE's router without its renormalisation, planted in HF's class: the exact
    replacement agrees, the fidelity check of HF's own code names the block's output."""
    from transformers.models.qwen3_moe import modeling_qwen3_moe as mod

    from nlaverify.interop.hf_patches import _router_forward

    monkeypatch.setattr(mod.Qwen3MoeTopKRouter, "forward", lambda self, h: _router_forward(
        self, h, exact=False, renormalize=False))
    r = verify_hf(CONFIGS["qwen3_moe"], seq_len=N, exact=True)
    assert not r.ok and r.first_patch_divergence == "blocks.0.mlp.out", format_hf_report(r)
    assert r.first_divergence is None


#: the released Qwen MoE configs: (total, activated per token) as nlaverify counts them,
#: the totals the published 14.3B, 57B and 30.5B, the activated the names' A2.7B, A14B, A3B
PUBLISHED_MOE = {"qwen1.5-moe-a2.7b": (14_315_784_192, 2_689_173_504),
                 "qwen2-57b-a14b": (57_408_658_944, 14_249_270_784),
                 "qwen3-30b-a3b": (30_532_122_624, 3_353_032_704)}


@pytest.mark.parametrize("name", list(PUBLISHED_MOE))
def test_published_totals_are_hf_meta_counts_and_activated_as_hf_routes(name: str) -> None:
    """The total is transformers' meta-device count; the activated count is HF's parameters
    less, in every sparse layer, the (E - k)/E share of its fused experts a token skips."""
    import torch

    path = W.__file__.rsplit("/", 2)[0] + f"/data/hf_configs/{name}.json"
    h = load_hf_config(path)
    counts = parameter_counts(build_transformer(h.config))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**h.raw))
    hf_total = sum(p.numel() for p in model.parameters())
    E, k = h.config.n_experts, h.config.top_k
    skipped = sum(p.numel() * (E - k) // E for n, p in model.named_parameters()
                  if ".mlp.experts." in n)
    active = activated_parameters(h.config, counts.total, counts.by_component["moe.experts"])
    assert (counts.total, active) == (hf_total, hf_total - skipped) == PUBLISHED_MOE[name]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _cmd_params(argparse.Namespace(preset=None, config=path, lora=None, json=True))
    assert json.loads(out.getvalue())["activated_per_token"] == active


def test_auxiliary_loss_is_left_out() -> None:
    """``output_router_logits: true`` (ignored: a training setting) made HF add
    ``router_aux_loss_coef`` times its load-balancing loss to the loss even in eval mode, and
    stock ``verify --hf`` reported the loss beyond float32 (review of issue 23: 0.51 with a
    coefficient 0.5); HF's model is now built without it, as for ``false``."""
    cfg = dict(CONFIGS["qwen2_moe"], output_router_logits=True, router_aux_loss_coef=0.5)
    r, plain = verify_hf(cfg, seq_len=N), verify_hf(CONFIGS["qwen2_moe"], seq_len=N)
    assert r.first_beyond_float32 is None, format_hf_report(r)
    assert r.row("loss").error == plain.row("loss").error


@pytest.mark.parametrize("mt", sorted(CONFIGS))
def test_checkpoint_saved_by_hf_loads_and_verifies(mt: str, tmp_path) -> None:
    """HF's ``save_pretrained`` writes the experts per expert (``experts.{e}.{gate,up,down}
    _proj.weight``, as the released checkpoints): they are fused and the folder verifies."""
    import torch

    raw = {k: v for k, v in CONFIGS[mt].items() if k != "model_type"}
    transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(
        mt, **raw), dtype=torch.float64).save_pretrained(tmp_path)
    r = verify_hf(str(tmp_path), seq_len=N, exact=True)
    assert r.ok, format_hf_report(r)
