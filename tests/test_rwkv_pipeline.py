"""Issue 37, item 3: RWKV-4's block in the pipeline (Peng et al. 2023; Baptista, Stuart & Tran
§5.3.4): the ``mixer="rwkv"`` option (alone and per block in a hybrid) in the graph and in
the independent JAX model, node by node, forward and every gradient, on one sequence and on
a padded batch; the zoo members; the options an RWKV block refuses; planted bugs on either
side named at their node; the parameter count of a released size.

Independent oracles: the JAX model (:mod:`nlaverify.models.jax_rwkv`: the WKV as per-channel
causal softmax attention, the token shift a ``jnp.pad``) for the graph's ops
(:mod:`nlaverify.ops.rwkv_block`: the running-maximum scan), and ``jax.grad`` of that model
for every cotangent of the graph's VJPs.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from nlaverify.config import ConfigError, TransformerConfig, preset
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.graph.run import init_params, run_graph, sample_data
from nlaverify.ops import rwkv_block
from nlaverify.ops.rwkv_specs import RWKV_OPS
from nlaverify.tolerance import magnitude_condition, tolerance
from nlaverify.zoo import zoo_config

jax.config.update("jax_enable_x64", True)

RWKV = "rwkv"
HYBRID = "hybrid-rwkv-attention"
#: dependent stages from the embedding to the loss of a two-block model and back: ln0, per
#: block two norms, the two mixers (about five stages each: mixes, projections, the WKV or
#: relu^2, the gate, the output), two adds; the final norm, the head, the loss; doubled for
#: the cotangents
DEPTH = 2 * (4 + 2 * 14)


def _both(member: str, batch: int | None, seed: int = 3):
    """Graph (NumPy) values and cotangents, the JAX model's intermediates and ``jax.grad``."""
    import jax.numpy as jnp

    from nlaverify.models import jax_transformer as model

    cfg = zoo_config(member) if member in (RWKV, HYBRID) else preset(member)
    graph = build_transformer(cfg)
    params = init_params(graph, seed)
    data = sample_data(cfg.vocab_size, 6, seed, batch=batch)
    ev = run_graph(graph, "numpy", params, data)
    jp = {k: jnp.asarray(v) for k, v in params.items()}
    rec = model.intermediates(jp, data["tokens"], cfg, data["targets"])
    grads = jax.grad(lambda p: model.loss(p, data["tokens"], data["targets"], cfg))(jp)
    return cfg, graph, params, ev, rec, grads


@pytest.mark.parametrize("batch", [None, 3])
@pytest.mark.parametrize("member", [RWKV, HYBRID, "tiny-rwkv"])
def test_independent_model_equals_every_node_and_gradient(member: str, batch) -> None:
    cfg, graph, params, ev, rec, grads = _both(member, batch)
    ops = [n for n in graph if graph.nodes[n]["kind"] == "op"]
    rwkv_blocks = [b for b in range(cfg.n_blocks) if cfg.block_mixer(b) == "rwkv"]
    for b in rwkv_blocks:
        assert {f"blocks.{b}.rwkv.time_mix", f"blocks.{b}.ffn.channel_mix"} <= set(ops)
        assert f"blocks.{b}.mlp.out" not in graph and f"blocks.{b}.attn.out" not in graph
    assert ("blocks.0.ln0" in graph) == (cfg.block_mixer(0) == "rwkv")
    compared = 0
    for node in ops:
        if node not in rec:
            continue
        ref = ev.values[node]
        tol = tolerance("float64", size=cfg.d_mlp, depth=DEPTH,
                        condition=magnitude_condition(ref))
        assert tol.compare(rec[node], ref).ok, node
        compared += 1
    assert compared >= 7 * cfg.n_blocks
    for name, g in grads.items():  # every parameter's cotangent, RWKV's and the others'
        ref = ev.cotangents[name]
        tol = tolerance("float64", size=cfg.d_mlp * 6 * (batch or 1), depth=DEPTH,
                        condition=magnitude_condition(ref))
        assert tol.compare(g, ref).ok, name
    assert set(grads) == set(params)
    assert any(".rwkv.time_decay" in k for k in grads) and any(".ffn.W_v" in k for k in grads)


@pytest.mark.parametrize("member", [RWKV, HYBRID])
def test_zoo_member_verified_node_by_node(member: str) -> None:
    from nlaverify.pipeline import verify_pipeline

    cfg = zoo_config(member)
    kinds = {a.get("op") for _, a in build_transformer(cfg).nodes(data=True)}
    assert {"rwkv_time_mix", "rwkv_channel_mix"} <= kinds
    assert ("attention" in kinds) == (member == HYBRID)
    report = verify_pipeline(cfg, ("numpy", "jax"), batch=2)
    assert report.ok, report.errors
    assert {label for label, *_ in report.end_to_end} >= {"independent JAX model"}


def test_preset_verified_from_the_command_line(capsys) -> None:
    from nlaverify.cli import main

    assert main(["verify", "--preset", "tiny-rwkv", "--backends", "numpy", "--seq-len", "5"]) == 0
    assert "tiny-rwkv" in capsys.readouterr().out


def _swapped_time_mix(xp, x, mu_k, mu_v, mu_r, *rest):
    """The planted bug: the key's and the receptance's mixes exchanged."""
    return rwkv_block.time_mix(xp, x, mu_r, mu_v, mu_k, *rest)


def _swapped_time_mix_vjp(xp, G, x, mu_k, mu_v, mu_r, *rest):
    bars = rwkv_block.time_mix_vjp(xp, G, x, mu_r, mu_v, mu_k, *rest)
    return (bars[0], bars[3], bars[2], bars[1], *bars[4:])


def test_graph_bug_consistent_with_its_vjp_is_named_by_the_independent_model(
        monkeypatch) -> None:
    # mu_k and mu_r swapped in the op's forward *and* its VJP: every node agrees with JAX
    # autodiff of the (wrong) graph; the independent model does not, first at the time mix
    from nlaverify.pipeline import verify_pipeline

    assert verify_pipeline(zoo_config(RWKV), ("numpy",)).ok
    spec = RWKV_OPS["rwkv_time_mix"]
    monkeypatch.setitem(RWKV_OPS, "rwkv_time_mix", dataclasses.replace(
        spec, forward=_swapped_time_mix, vjp=_swapped_time_mix_vjp))
    report = verify_pipeline(zoo_config(RWKV), ("numpy",))
    assert not report.ok
    assert all(c.ok for c in report.comparisons)
    assert report.model_divergence == "blocks.0.rwkv.time_mix"


@pytest.mark.parametrize(("attr", "node"), [("graph_time_mix", "blocks.0.rwkv.time_mix"),
                                            ("graph_channel_mix", "blocks.0.ffn.channel_mix")])
def test_model_bug_is_named_at_its_node(monkeypatch, attr: str, node: str) -> None:
    # the independent model's mixes exchanged (k <-> r): the pipeline names the first node
    from nlaverify.models import jax_rwkv
    from nlaverify.models import jax_transformer as model
    from nlaverify.pipeline import verify_pipeline

    right = getattr(jax_rwkv, attr)

    def swapped(p, name, x, rec):
        q = dict(p)
        q[f"{name}.mu_k"], q[f"{name}.mu_r"] = p[f"{name}.mu_r"], p[f"{name}.mu_k"]
        return right(q, name, x, rec)

    monkeypatch.setattr(model, attr, swapped)
    report = verify_pipeline(zoo_config(RWKV), ("numpy",))
    assert not report.ok and report.model_divergence == node


@pytest.mark.parametrize(("changes", "field"), [
    ({"placement": "post"}, "placement"), ({"parallel_residual": True}, "parallel_residual"),
    ({"positions": "learned"}, "positions"), ({"positions": "rope"}, "positions"),
    ({"norm": "rmsnorm"}, "norm"), ({"causal": False}, "causal"),
    ({"n_experts": 2, "mlp": "relu"}, "n_experts"), ({"mlp_bias": True}, "mlp_bias"),
    ({"lora_rank": 2}, "lora_rank"), ({"mlp": "none"}, "mlp"),
    ({"post_norms": True}, "post_norms"), ({"residual_multiplier": 0.5}, "residual_multiplier"),
    ({"rwkv_attention_size": 0}, "rwkv_attention_size"),
    ({"mixer": ("rwkv",)}, "mixer")])
def test_bad_rwkv_options_are_named(changes: dict, field: str) -> None:
    base = dict(vocab_size=5, d_model=4, n_heads=1, n_blocks=2, d_mlp=4, positions="none",
                mixer="rwkv")
    with pytest.raises(ConfigError, match=f"TransformerConfig.{field}"):
        TransformerConfig(**{**base, **changes})


def test_hybrid_options_apply_to_the_other_blocks() -> None:
    # RoPE, an MLP bias and LoRA act on the attention block of a hybrid: allowed there
    cfg = TransformerConfig(vocab_size=5, d_model=4, n_heads=1, n_blocks=2, d_mlp=4,
                            positions="rope", mixer=("rwkv", "attention"), mlp_bias=True,
                            lora_rank=1)
    graph = build_transformer(cfg)
    assert "blocks.1.mlp.in.b_in" in graph and "blocks.0.ffn.channel_mix" in graph
    assert not any(n.startswith("blocks.0.") and "lora" in n for n in graph)


def test_parameter_count_of_rwkv_4_169m() -> None:
    # Hugging Face RwkvForCausalLM, RWKV/rwkv-4-169m-pile (d = 768, 12 blocks, V = 50277,
    # attention_hidden_size = d, intermediate_size = 4d, untied head): per block two
    # LayerNorms 4d, time mixing 3d + 2a + 4da, channel mixing 2d + 2df + d^2; ln0 2d,
    # ln_out 2d, embedding and head Vd each
    d, V, L, f = 768, 50277, 12, 3072
    cfg = TransformerConfig(vocab_size=V, d_model=d, n_heads=12, n_blocks=L, d_mlp=f,
                            positions="none", mixer="rwkv")
    counts = parameter_counts(build_transformer(cfg))
    per_block = 4 * d + (3 * d + 2 * d + 4 * d * d) + (2 * d + 2 * d * f + d * d)
    assert counts.total == L * per_block + 2 * d + 2 * d + 2 * V * d == 169_342_464
    assert counts.by_component["rwkv.time_mix.time_decay"] == L * d


def test_cost_and_mesh_plan_name_the_rwkv_mixers() -> None:
    from nlaverify.cost.nodes import graph_costs
    from nlaverify.cost.summary import by_component
    from nlaverify.shard.plan import plan_mesh

    cfg = zoo_config(HYBRID)
    costs = graph_costs(build_transformer(cfg), 6)
    for c in costs:  # the closed forms of cost.nodes equal the count of the ops' code
        if c.op.startswith("rwkv_"):
            assert (c.forward.matmul, c.backward.matmul) == (
                c.forward_matmul_form, c.backward_matmul_form), c.name
    rows = by_component(costs)
    assert {"rwkv", "channel_mix", "attention", "mlp"} <= set(rows)
    assert rows["rwkv"]["forward_matmul"] == 2 * 6 * 4 * cfg.d_model * cfg.rwkv_dim
    assert rows["channel_mix"]["forward_matmul"] == 2 * 6 * cfg.d_model * (
        2 * cfg.d_mlp + cfg.d_model)
    plan = plan_mesh(cfg, "tp=2", seq_len=6, batch=None)
    assert any("RWKV" in note and "replicated" in note for note in plan.notes)


def test_recurrent_decoding_equals_the_full_forward() -> None:
    # RWKV's RNN mode (Baptista §5.3.4): the states carried token by token reproduce every
    # position of both mixers, the stream and the logits of the graph's scan (check_decode)
    from nlaverify.check import check_decode
    from nlaverify.models.jax_rwkv_decode import make_rwkv_decode_step

    cfg = zoo_config(RWKV)
    params = init_params(build_transformer(cfg), 1)
    tokens = np.array([1, 5, 3, 7, 2, 9, 4])
    for prefill in (1, 3):
        report = check_decode(make_rwkv_decode_step(cfg, params), cfg, params, tokens,
                              prefill=prefill)
        assert report.ok, str(report)
        assert any("blocks.1.ffn.channel_mix[pos 6]" in r.where for r in report.rows)
    with pytest.raises(ValueError, match="every block must be 'rwkv'"):
        make_rwkv_decode_step(zoo_config(HYBRID), params)


def test_recurrent_decoding_returns_the_untempered_logits() -> None:
    # with the options the shared decode loop reads (an unembedding bias, untied; learned
    # positions at start > 0 for Mamba): check_decode's contract: the step returns the
    # graph's ``logits`` node; the temperature
    # divides them afterwards (``logits_tempered``), as in the attention and Mamba decoders
    from nlaverify.check import check_decode
    from nlaverify.models.jax_rwkv_decode import make_rwkv_decode_step

    cfg = zoo_config(RWKV).replace(temperature=1.7, unembed_bias=True, tied_embeddings=False)
    params = init_params(build_transformer(cfg), 1)
    report = check_decode(make_rwkv_decode_step(cfg, params), cfg, params,
                          np.array([1, 5, 3, 7, 2]), prefill=2)
    assert report.ok, str(report)


@pytest.mark.parametrize(("forget", "node"), [(slice(1, 4), "blocks.0.rwkv.time_mix"),
                                              (slice(4, 5), "blocks.0.ffn.channel_mix")])
def test_decoding_with_a_forgotten_state_is_named(forget: slice, node: str) -> None:
    # the WKV's (a, b, p) or the channel mixing's previous token reset at every step
    from nlaverify.check import check_decode
    from nlaverify.models.jax_rwkv_decode import make_rwkv_decode_step, rwkv_state

    cfg = zoo_config(RWKV)
    params = init_params(build_transformer(cfg), 1)
    step = make_rwkv_decode_step(cfg, params)

    def forgetful(tokens, start, cache):
        logits, states, inter = step(tokens, start, cache)
        empty = rwkv_state(cfg)
        return logits, [(*s[:forget.start], *empty[forget], *s[forget.stop:])
                        for s in states], inter

    report = check_decode(forgetful, cfg, params, np.array([1, 5, 3, 7]), prefill=1)
    assert not report.ok
    assert next(r for r in report.rows if not r.ok).where.startswith(f"{node}[pos 1]")
