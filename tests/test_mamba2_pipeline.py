"""Issue 37, item 3: Mamba-2's block in the pipeline (Dao & Gu 2024, *Transformers are SSMs*,
§7-§8; Baptista, Stuart & Tran §5.3.4): the ``mixer="mamba2"`` option (alone, as Hugging
Face's ``Mamba2Block`` without an MLP, and per block in a hybrid) in the graph and in the
independent JAX model, node by node, forward and every gradient, on one sequence and on a
batch; the zoo members; the sizes a Mamba-2 block refuses; planted bugs on either side named
at their node; the parameter count of a released size; cost and mesh plan.

Independent oracles: the JAX model (:mod:`nlaverify.models.jax_mamba2`: the scan in its dual,
masked-attention form, the convolution of x, B, C as one ``conv_general_dilated``) for the
graph's ops (:mod:`nlaverify.ops.ssm2`: the recurrence), and ``jax.grad`` of that model for
every cotangent of the graph's VJPs.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.graph.run import init_params, run_graph, sample_data
from nlaverify.ops import ssm2
from nlaverify.ops.ssm_specs import SCAN_OPS
from nlaverify.tolerance import magnitude_condition, tolerance
from nlaverify.zoo import zoo_config

jax.config.update("jax_enable_x64", True)

MAMBA2 = "mamba2"
HYBRID = "hybrid-mamba2-attention"
#: dependent stages of a two-block model and back: per block the norm, the mixer (the
#: projection, the convolution and its silu, the view, the scan over up to n steps, the
#: gated norm, the output), the add; the final norm, the head, the loss; doubled
DEPTH = 2 * (4 + 2 * 16)


def _both(member: str, batch: int | None, seed: int = 3):
    """Graph (NumPy) values and cotangents, the JAX model's intermediates and ``jax.grad``."""
    from nlaverify.models import jax_transformer as model

    cfg = zoo_config(member)
    graph = build_transformer(cfg)
    params = init_params(graph, seed)
    data = sample_data(cfg.vocab_size, 6, seed, batch=batch)
    ev = run_graph(graph, "numpy", params, data)
    jp = {k: jnp.asarray(v) for k, v in params.items()}
    rec = model.intermediates(jp, data["tokens"], cfg, data["targets"])
    grads = jax.grad(lambda p: model.loss(p, data["tokens"], data["targets"], cfg))(jp)
    return cfg, graph, params, ev, rec, grads


@pytest.mark.parametrize("batch", [None, 3])
@pytest.mark.parametrize("member", [MAMBA2, HYBRID])
def test_independent_model_equals_every_node_and_gradient(member: str, batch) -> None:
    cfg, graph, params, ev, rec, grads = _both(member, batch)
    ops = [n for n in graph if graph.nodes[n]["kind"] == "op"]
    blocks = [b for b in range(cfg.n_blocks) if cfg.block_mixer(b) == "mamba2"]
    parts = ("in_z", "in_x", "in_B", "in_C", "in_dt", "conv_x", "conv_B", "conv_C", "x",
             "B", "C", "x_heads", "B_groups", "C_groups", "scan", "y", "norm", "out")
    for b in blocks:
        assert {f"blocks.{b}.mamba2.{k}" for k in parts} <= set(ops)
        assert graph.nodes[f"blocks.{b}.mamba2.scan"]["op"] == "mamba2_scan"
        assert graph.nodes[f"blocks.{b}.mamba2.norm"]["op"] == "gated_rmsnorm"
        assert f"blocks.{b}.attn.out" not in graph
    assert (f"blocks.{blocks[0]}.mlp.out" in graph) == (member == HYBRID)
    compared = 0
    for node in ops:
        if node not in rec:
            continue
        ref = ev.values[node]
        tol = tolerance("float64", size=cfg.d_inner, depth=DEPTH,
                        condition=magnitude_condition(ref))
        assert tol.compare(rec[node], ref).ok, node
        compared += ".mamba2." in node
    assert compared == len(parts) * len(blocks)
    for name, g in grads.items():  # every parameter's cotangent, Mamba-2's and the others'
        ref = ev.cotangents[name]
        tol = tolerance("float64", size=cfg.d_inner * 6 * (batch or 1), depth=DEPTH,
                        condition=magnitude_condition(ref))
        assert tol.compare(g, ref).ok, name
    assert set(grads) == set(params)
    assert any(".mamba2.A_log" in k for k in grads) and any(".conv_C.w" in k for k in grads)


@pytest.mark.parametrize("member", [MAMBA2, HYBRID])
def test_zoo_member_verified_node_by_node(member: str) -> None:
    from nlaverify.pipeline import verify_pipeline

    cfg = zoo_config(member)
    kinds = {a.get("op") for _, a in build_transformer(cfg).nodes(data=True)}
    assert {"mamba2_scan", "gated_rmsnorm", "causal_conv1d"} <= kinds
    assert ("attention" in kinds) == (member == HYBRID)
    report = verify_pipeline(cfg, ("numpy", "jax"), batch=2)
    assert report.ok, report.errors
    assert {label for label, *_ in report.end_to_end} >= {"independent JAX model"}


def _swapped_scan(xp, x, dt, A_log, B, C, D, dt_bias):
    """The planted bug: B and C exchanged (the state written with C, read with B)."""
    return ssm2.mamba2_scan(xp, x, dt, A_log, C, B, D, dt_bias)


def _swapped_scan_vjp(xp, G, x, dt, A_log, B, C, D, dt_bias):
    bars = ssm2.mamba2_scan_vjp(xp, G, x, dt, A_log, C, B, D, dt_bias)
    return (*bars[:3], bars[4], bars[3], *bars[5:])


def test_graph_bug_consistent_with_its_vjp_is_named_by_the_independent_model(
        monkeypatch) -> None:
    # B and C exchanged in the op's forward *and* its VJP: every node agrees with JAX
    # autodiff of the (wrong) graph; the independent model does not, first at the scan
    from nlaverify.pipeline import verify_pipeline

    assert verify_pipeline(zoo_config(MAMBA2), ("numpy",)).ok
    spec = SCAN_OPS["mamba2_scan"]
    monkeypatch.setitem(SCAN_OPS, "mamba2_scan", dataclasses.replace(
        spec, forward=_swapped_scan, vjp=_swapped_scan_vjp))
    report = verify_pipeline(zoo_config(MAMBA2), ("numpy",))
    assert not report.ok
    assert all(c.ok for c in report.comparisons)
    assert report.model_divergence == "blocks.0.mamba2.scan"


def test_model_bugs_are_named_at_their_node(monkeypatch) -> None:
    # the independent model's segment sums off by one step (e^{c_t - c_{s-1}}: the decay of
    # step s applied to its own input), then its gated norm over the whole row, not groups
    from nlaverify.models import jax_mamba2
    from nlaverify.pipeline import verify_pipeline

    right = jax_mamba2.ssd_dual

    def shifted(x, Dt, A, B, C):
        return right(x, Dt, A, B, C) * jnp.exp(Dt * A)[..., None]

    monkeypatch.setattr(jax_mamba2, "ssd_dual", shifted)
    report = verify_pipeline(zoo_config(MAMBA2), ("numpy",))
    assert not report.ok and report.model_divergence == "blocks.0.mamba2.scan"


def test_one_group_for_two_is_named_at_the_norm(monkeypatch) -> None:
    # a graph whose gated norm normalizes the whole row (group_size = E) where the model
    # normalizes per group: the pipeline names the norm
    import nlaverify.pipeline as pipeline

    def wrong(config):
        g = build_transformer(config)
        g.nodes["blocks.0.mamba2.norm"]["static"]["group_size"] = config.d_inner
        return g

    monkeypatch.setattr(pipeline, "build_transformer", wrong)
    report = pipeline.verify_pipeline(zoo_config(MAMBA2), ("numpy",))
    assert not report.ok and report.model_divergence == "blocks.0.mamba2.norm"


@pytest.mark.parametrize(("changes", "field"), [
    ({"ssm_heads": 3}, "ssm_heads"), ({"ssm_heads": 0}, "ssm_heads"),
    ({"ssm_groups": 3}, "ssm_groups"), ({"ssm_groups": -1}, "ssm_groups"),
    ({"ssm_heads": 2, "ssm_groups": 4}, "ssm_groups"), ({"causal": False}, "causal"),
    ({"mixer": ("mamba2",)}, "mixer")])
def test_bad_mamba2_options_are_named(changes: dict, field: str) -> None:
    base = dict(vocab_size=5, d_model=4, n_heads=1, n_blocks=2, d_mlp=4, positions="none",
                mixer="mamba2", mlp="none", ssm_heads=4, ssm_groups=2)
    with pytest.raises(ConfigError, match=f"TransformerConfig.{field}"):
        TransformerConfig(**{**base, **changes})


def test_sizes_unread_without_a_mamba2_block() -> None:
    cfg = TransformerConfig(vocab_size=5, d_model=4, n_heads=1, n_blocks=1, d_mlp=4,
                            ssm_heads=3, ssm_groups=2)
    assert not any(".mamba2." in n for n in build_transformer(cfg))


def test_parameter_count_of_mamba2_130m() -> None:
    # state-spaces/mamba2-130m (d = 768, 24 blocks, d_state 128, head dim 64: H = 24 heads,
    # one group, conv 4, V = 50288, tied): per block the norm d, in_proj d(2E + 2GN + H),
    # conv (E + 2GN)(k + 1), dt_bias, A_log, D 3H, the gated norm E, out_proj Ed
    d, L, V, N, k = 768, 24, 50288, 128, 4
    E, H, G = 2 * d, 2 * d // 64, 1
    cfg = TransformerConfig(vocab_size=V, d_model=d, n_heads=1, n_blocks=L, d_mlp=1,
                            positions="none", mixer="mamba2", mlp="none", norm="rmsnorm",
                            ssm_state=N, ssm_heads=H, ssm_groups=G, tied_embeddings=True)
    counts = parameter_counts(build_transformer(cfg))
    per_block = d + d * (2 * E + 2 * G * N + H) + (E + 2 * G * N) * (k + 1) + 3 * H + E + E * d
    assert counts.total == L * per_block + d + V * d
    assert counts.by_component["mamba2.A_log"] == L * H


def test_cost_and_mesh_plan_name_the_mamba2_mixers() -> None:
    from nlaverify.cost.nodes import graph_costs
    from nlaverify.cost.summary import by_component
    from nlaverify.shard.plan import plan_mesh

    cfg = zoo_config(HYBRID)
    costs = graph_costs(build_transformer(cfg), 6)
    rows = by_component(costs)
    assert {"mamba2", "attention", "mlp"} <= set(rows)
    d, E, H, GN = cfg.d_model, cfg.d_inner, cfg.ssm_heads, cfg.ssm_groups * cfg.ssm_state
    # the projections in (2E + 2GN + H columns) and out (E -> d), 2 FLOPs per product
    assert rows["mamba2"]["forward_matmul"] == 2 * 6 * (d * (2 * E + 2 * GN + H) + E * d)
    assert next(c for c in costs if c.name.endswith("mamba2.scan")).component == "mamba2"
    plan = plan_mesh(cfg, "tp=2", seq_len=6, batch=None)
    assert any("Mamba-2" in note and "replicated" in note for note in plan.notes)


def test_recurrent_decoding_equals_the_full_forward() -> None:
    # Mamba-2's recurrent mode (Baptista §5.3.4): the convolution's window and the state
    # (H, P, N) carried token by token reproduce the graph's scan, mixer, stream and logits
    import numpy as np

    from nlaverify.check import check_decode
    from nlaverify.models.jax_mamba2_decode import make_mamba2_decode_step

    cfg = zoo_config(MAMBA2)
    params = init_params(build_transformer(cfg), 1)
    tokens = np.array([1, 5, 3, 7, 2, 9, 4])
    for prefill in (1, 3):
        report = check_decode(make_mamba2_decode_step(cfg, params), cfg, params, tokens,
                              prefill=prefill)
        assert report.ok, str(report)
        assert any("blocks.1.mamba2.scan[pos 6]" in r.where for r in report.rows)
    with pytest.raises(ValueError, match="every block must be 'mamba2'"):
        make_mamba2_decode_step(zoo_config(HYBRID), params)


def test_recurrent_decoding_returns_the_untempered_logits() -> None:
    # with the options the shared decode loop reads (an unembedding bias, untied; learned
    # positions at start > 0 for Mamba): check_decode's contract: the step returns the
    # graph's ``logits`` node, the temperature
    # applied afterwards (``logits_tempered``)
    import numpy as np

    from nlaverify.check import check_decode
    from nlaverify.models.jax_mamba2_decode import make_mamba2_decode_step

    cfg = zoo_config(MAMBA2).replace(temperature=1.7, unembed_bias=True, tied_embeddings=False)
    params = init_params(build_transformer(cfg), 1)
    report = check_decode(make_mamba2_decode_step(cfg, params), cfg, params,
                          np.array([1, 5, 3, 7, 2]), prefill=2)
    assert report.ok, str(report)


@pytest.mark.parametrize(("forget", "node"), [(1, "blocks.0.mamba2.scan"),
                                              (0, "blocks.0.mamba2.scan")])
def test_decoding_with_a_forgotten_state_is_named(forget: int, node: str) -> None:
    # the SSM state (1) or the convolution's window (0) reset at every step: named at the
    # scan of block 0 at the second position
    import numpy as np

    from nlaverify.check import check_decode
    from nlaverify.models.jax_mamba2_decode import make_mamba2_decode_step, mamba2_state

    cfg = zoo_config(MAMBA2)
    params = init_params(build_transformer(cfg), 1)
    step = make_mamba2_decode_step(cfg, params)

    def forgetful(tokens, start, cache):
        logits, states, inter = step(tokens, start, cache)
        empty = mamba2_state(cfg)
        return logits, [tuple(empty[i] if i == forget else s[i] for i in range(2))
                        for s in states], inter

    report = check_decode(forgetful, cfg, params, np.array([1, 5, 3, 7]), prefill=1)
    assert not report.ok
    assert next(r for r in report.rows if not r.ok).where.startswith(f"{node}[pos 1]")
