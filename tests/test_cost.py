"""Cost from the graph (issue 20, item 1): the closed-form matmul FLOPs of every op against
an operation count of the op's own code (its jaxpr), hand-derived totals on ``tiny``,
Kaplan et al.'s :math:`C_\\text{forward}` reproduced where its assumptions hold, memory and
the KV cache, XLA's own cost analysis, and ``nlaverify cost``.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest

from nlaverify.backends import get_namespace
from nlaverify.cli import main
from nlaverify.config import TransformerConfig, preset
from nlaverify.cost.count import count_jaxpr
from nlaverify.cost.memory import (
    H200_EXAMPLE,
    kv_cache_bytes,
    optimizer_state_values,
    roofline,
)
from nlaverify.cost.nodes import graph_costs
from nlaverify.cost.report import cost_report, xla_forward_flops
from nlaverify.errors import NlaverifyError
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.ops.registry import get_op

TINY = preset("tiny")  # V=11, d=8, h=2 (d_h=4), 2 blocks, d_mlp=16, n=16, biases

#: configurations whose every node with a closed form is checked against its code
VARIANTS = {
    "tiny": TINY,
    "gqa_rope_swiglu_rms": TransformerConfig(
        vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2, n_blocks=1, d_mlp=24,
        norm="rmsnorm", positions="rope", mlp="swiglu", context=12, sliding_window=5),
    "mqa_tied_postln": TransformerConfig(
        vocab_size=9, d_model=12, n_heads=3, n_kv_heads=1, n_blocks=1, d_mlp=20,
        placement="post", tied_embeddings=True, context=10, attn_bias=True),
    "lora": TransformerConfig(vocab_size=9, d_model=8, n_heads=2, n_blocks=1, d_mlp=16,
                              context=8, lora_rank=2, lora_targets=("q", "v", "mlp"),
                              mlp_bias=True),
}


def test_the_jaxpr_count_of_a_batched_product_and_a_transcendental() -> None:
    """A batched product of (b, m, k) by (b, k, n) costs 2bmnk; exp counts once in both the
    elementwise and the transcendental total, a sum once per input element."""
    f = lambda a, b: jnp.exp(a @ b).sum()  # noqa: E731
    a, b = jax.ShapeDtypeStruct((3, 5, 7), jnp.float32), jax.ShapeDtypeStruct((3, 7, 2),
                                                                               jnp.float32)
    c = count_jaxpr(jax.make_jaxpr(f)(a, b))
    assert c.matmul == 2 * 3 * 5 * 2 * 7
    assert c.transcendental == 3 * 5 * 2
    assert c.elementwise == 2 * 3 * 5 * 2  # exp, then the sum over its 30 entries


@pytest.mark.parametrize("name", list(VARIANTS))
def test_closed_forms_equal_the_count_of_the_ops_code(name: str) -> None:
    cfg = VARIANTS[name]
    costs = graph_costs(build_transformer(cfg), cfg.context, batch=3)
    declared = [c for c in costs if c.forward_matmul_form is not None]
    assert len(declared) == len(costs), [c.op for c in costs if c.forward_matmul_form is None]
    for c in declared:
        assert (c.forward.matmul, c.backward.matmul) == (
            c.forward_matmul_form, c.backward_matmul_form), c.name


def test_tiny_matmul_flops_by_hand() -> None:
    """n = 16, d = 8, h = 2, d_h = 4, d_mlp = 16, V = 11, 2 blocks. Forward, per block:
    Q, K, V, O 4 (2 n d d) = 8192; scores and values 2 h n n (d_h + d_h) = 8192; MLP
    2 (2 n d d_mlp) = 8192; logits 2 n d V = 2816. Backward: every product twice its
    forward (16384 + 16384 per block), attention 2 h n^2 (3 d_h + 2 d_h) = 20480 (the scores
    recomputed), logits 5632, the embedding's one-hot product 2 n V d = 2816."""
    total = cost_report(TINY)["total"]
    assert total["forward_matmul"] == 2 * 24576 + 2816 == 51968
    assert total["backward_matmul"] == 2 * (32768 + 20480) + 5632 + 2816 == 114944


def test_flops_scale_with_the_batch_and_bytes_read_parameters_once() -> None:
    one, three = (cost_report(TINY, batch=b) for b in (1, 3))
    assert three["total"]["forward"] == 3 * one["total"]["forward"]
    W = 11 * 8 * 4  # the unembedding, read once per batch
    logits = [next(n for n in r["nodes"] if n["name"] == "logits") for r in (one, three)]
    assert logits[1]["forward_bytes"] - W == 3 * (logits[0]["forward_bytes"] - W)


def test_kaplan_reproduced_where_its_assumptions_hold() -> None:
    r"""Kaplan et al. count 6 FLOPs per non-embedding weight and :math:`2n_\text{ctx}
    d_\text{attn}` per layer and token forward for attention. The graph's block products are
    exactly 6 per matrix weight per token, and causal attention over its :math:`n(n+1)/2`
    pairs with a backward of twice the forward is exactly :math:`6L(n+1)d_\text{attn}`
    per token: Kaplan's term up to :math:`(n+1)/n`."""
    cfg = preset("mid")
    rules = cost_report(cfg)["rules"]
    terms = {t["name"]: t["flops_per_token"] for t in rules["terms"]}
    n, L, d_attn = cfg.context, cfg.n_blocks, cfg.n_heads * cfg.d_head
    counts = parameter_counts(build_transformer(cfg))
    matrices = 4 * cfg.d_model ** 2 + 2 * cfg.d_model * cfg.d_mlp
    assert terms["block weight products"] == 6 * L * matrices
    assert rules["N_nonembedding"] == sum(counts.per_block.values()) + 2 * cfg.d_model
    ideal = "attention QK^T and PV (ideal: causal pairs, backward = 2x forward)"
    assert terms[ideal] == 6 * L * (n + 1) * d_attn
    assert rules["kaplan_forward_per_token"] == 2 * rules["N_nonembedding"] + 2 * L * n * d_attn


def test_gpt3_training_flops_within_one_percent_of_kaplan() -> None:
    """The issue's bar: GPT-3 175B at n_ctx = 2048, the ideal count within 1 % of
    6N + 6 n_layer n_ctx d_attn, the gap named (logits 0.35 %, the rest below 0.1 %)."""
    rules = cost_report(preset("gpt3-175b"))["rules"]
    assert abs(rules["ideal_over_kaplan"] - 1) < 0.01
    terms = {t["name"]: t["flops_per_token"] for t in rules["terms"]}
    assert terms["unembedding (logits)"] == 6 * 12288 * 50257


def test_kv_cache_bytes_with_grouped_and_multi_query_attention_and_a_window() -> None:
    gqa = TransformerConfig(vocab_size=10, d_model=64, n_heads=8, n_kv_heads=2, n_blocks=3,
                            d_mlp=32, context=100)
    # 2 (K and V) x 3 blocks x 2 kv heads x d_h 8 x 100 tokens x batch 2 x 2 bytes
    assert kv_cache_bytes(gqa, 100, batch=2, itemsize=2) == 2 * 3 * 2 * 8 * 100 * 2 * 2
    assert kv_cache_bytes(gqa.replace(n_kv_heads=1), 100, 2, 2) * 2 == kv_cache_bytes(
        gqa, 100, 2, 2)
    assert kv_cache_bytes(gqa.replace(sliding_window=32), 100, 2, 2) == 2 * 3 * 2 * 8 * 32 * 4
    # the graph's own K and V projections hold the same values
    costs = graph_costs(build_transformer(gqa), 100, batch=2, itemsize=2)
    kv = sum(2 * c.shape[0] * c.shape[1] * 2 for c in costs
             if c.name.endswith((".attn.k", ".attn.v")))
    assert kv == kv_cache_bytes(gqa, 100, batch=2, itemsize=2)


def test_optimizer_state_per_rule_on_tiny() -> None:
    g = build_transformer(TINY)
    P = parameter_counts(g).total
    assert optimizer_state_values(g, "adamw") == 2 * P
    assert optimizer_state_values(g, "sgd") == 0
    # K-FAC: per block Q, K, V, O (8x8: 64 + 64 each), MLP in (8x16) and out (16x8):
    # 64 + 256 each; the logits (8x11): 64 + 121
    assert optimizer_state_values(g, "kfac") == 2 * (4 * 128 + 2 * 320) + 185
    with pytest.raises(NlaverifyError, match="lion"):
        optimizer_state_values(g, "lion")


def test_recomputation_stores_less_than_keeping_every_activation() -> None:
    act = cost_report(preset("mid"))["memory"]["activations"]
    assert act["recompute"] < act["stored"]


def test_roofline_classifies_by_the_ridge_intensity() -> None:
    costs = graph_costs(build_transformer(TINY), 16)
    rf = roofline(costs, **H200_EXAMPLE)
    assert rf["ridge_intensity"] == H200_EXAMPLE["peak_flops"] / H200_EXAMPLE["bandwidth"]
    fast_memory = roofline(costs, peak_flops=1.0, bandwidth=1e9)
    assert {r["bound"] for r in fast_memory["nodes"] if r["intensity"] > 1e-9} == {"compute"}
    with pytest.raises(NlaverifyError, match="bandwidth"):
        roofline(costs, 1e12, -1.0)


@pytest.mark.parametrize("name", ["tiny", "mid"])
def test_xla_agrees_on_the_products_and_differs_only_in_elementwise_work(name: str) -> None:
    """XLA counts a dot as 2MNK like we do (checked exactly on one product below), and every
    elementwise HLO (compares, selects of the mask, the layernorm's steps) as one FLOP per
    element where we count arithmetic only: its total lies between our matmul FLOPs and our
    matmul FLOPs plus twice our elementwise ones (measured: ours/XLA 0.885 on tiny, 0.998
    on mid, where products dominate)."""
    cfg = preset(name)
    ours = cost_report(cfg)["total"]
    xla = xla_forward_flops(cfg)
    elementwise = ours["forward"] - ours["forward_matmul"]
    assert ours["forward_matmul"] <= xla["flops"] <= ours["forward_matmul"] + 2 * elementwise


def test_xla_counts_one_product_exactly_as_the_closed_form() -> None:
    xp = get_namespace("jax")
    spec = get_op("linear")
    X, W = jax.ShapeDtypeStruct((5, 6), jnp.float32), jax.ShapeDtypeStruct((6, 7), jnp.float32)
    analysis = jax.jit(lambda x, w: spec.forward(xp, x, w)).lower(X, W).compile().cost_analysis()
    if isinstance(analysis, list | tuple):
        analysis = analysis[0]
    assert analysis["flops"] == 2 * 5 * 6 * 7


@pytest.mark.parametrize(("kwargs", "word"), [({"seq_len": -1}, "seq_len"),
                                              ({"batch": 0}, "batch"),
                                              ({"dtype": "int8"}, "dtype"),
                                              ({"seq_len": 17}, "seq_len")])
def test_bad_arguments_name_the_argument(kwargs: dict, word: str) -> None:
    with pytest.raises(NlaverifyError, match=word):
        cost_report(TINY, **kwargs)


def test_cli_errors_name_the_argument(capsys) -> None:
    assert main(["cost", "--preset", "no_such_model"]) == 2
    assert "no_such_model" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["cost", "--preset", "tiny", "--seq-len", "-3"])
    assert "--seq-len" in capsys.readouterr().err
    assert main(["cost"]) == 2
    assert "--preset" in capsys.readouterr().err


def test_cli_table_and_json(capsys) -> None:
    assert main(["cost", "--preset", "tiny", "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    for word in ("attention", "Kaplan", "6N", "KV cache", "roofline", "shampoo"):
        assert word in out
    assert main(["cost", "--preset", "tiny", "--json", "--seq-len", "8"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["seq_len"] == 8 and rep["itemsize"] == 4
    assert rep["total"]["training"] == rep["total"]["forward"] + rep["total"]["backward"]
    assert {t["name"] for t in rep["rules"]["terms"]} >= {"unembedding (logits)"}


def test_a_config_file_and_the_ops_without_a_closed_form(tmp_path, capsys) -> None:
    """``--config`` reads a JSON file of TransformerConfig fields; the mixture of experts has
    no closed form (its cost is the count of its code), and says so per node."""
    path = tmp_path / "moe.json"
    path.write_text(json.dumps({"vocab_size": 13, "d_model": 16, "n_heads": 4, "n_blocks": 1,
                                "d_mlp": 24, "context": 12, "n_experts": 4, "top_k": 2}))
    assert main(["cost", "--config", str(path), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert [n["op"] for n in rep["nodes"] if n["forward_matmul_form"] is None] == ["moe"]
    moe = next(n for n in rep["nodes"] if n["op"] == "moe")
    assert moe["forward_matmul"] > 0
