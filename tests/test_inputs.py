"""Parameters and arguments are validated; checks fail well (each on its own row, with the
faulty node named)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import nlaverify.graph.core as core
from nlaverify.cli import main
from nlaverify.config import TransformerConfig, preset
from nlaverify.crosscheck import format_summary, run_crosscheck
from nlaverify.errors import DTypeError, ShapeError, UnknownNameError
from nlaverify.graph.build import build_transformer
from nlaverify.graph.lower import lower
from nlaverify.graph.run import init_params, run_graph, sample_data
from nlaverify.ops import registry
from nlaverify.pipeline import format_report, verify_pipeline

CFG = TransformerConfig(vocab_size=50, d_model=8, n_heads=2, n_blocks=1, d_mlp=4, context=8,
                        name="v50")


@pytest.fixture(scope="session")
def setup():
    g = build_transformer(CFG)
    return g, init_params(g, 0), sample_data(50, 4, 0)


def test_misshaped_parameter_names_the_node(setup) -> None:
    g, p, d = setup
    with pytest.raises(ShapeError, match=r"parameter node 'embed\.W_E': expected shape "
                                         r"\(50, 8\), got \(49, 8\)"):
        run_graph(g, "numpy", {**p, "embed.W_E": p["embed.W_E"][:49]}, d)


def test_misspelled_extra_and_missing_parameters(setup) -> None:
    g, p, d = setup
    with pytest.raises(UnknownNameError, match=r"'embed\.w_E' is not an input or parameter "
                                               r"node.*did you mean 'embed\.W_E'"):
        run_graph(g, "numpy", {**p, "embed.w_E": p["embed.W_E"]}, d)
    with pytest.raises(UnknownNameError, match=r"no value for parameter node 'unembed\.W_U'"):
        run_graph(g, "numpy", {k: v for k, v in p.items() if k != "unembed.W_U"}, d)
    with pytest.raises(ShapeError, match=r"input node 'targets': expected shape \(n=4,\)"):
        run_graph(g, "numpy", p, {**d, "targets": d["targets"][:3]})


def test_misshaped_parameter_rejected_by_the_lowered_jit_too(setup) -> None:
    import jax.numpy as jnp

    g, p, d = setup
    bad = {k: jnp.asarray(v) for k, v in p.items()}
    bad["blocks.0.mlp.in.W_in"] = bad["blocks.0.mlp.in.W_in"][:, :3]
    with pytest.raises(ShapeError, match=r"blocks\.0\.mlp\.in\.W_in"):
        lower(g)(bad, {k: jnp.asarray(v) for k, v in d.items()})


def test_dtypes_are_kept_unless_a_cast_is_asked_for(setup) -> None:
    g, p, d = setup
    p32 = {k: v.astype(np.float32) for k, v in p.items()}
    ev = run_graph(g, "numpy", p32, d)
    assert ev.dtype == "float32"
    assert all(v.dtype == np.float32 for k, v in ev.values.items() if k not in d)
    assert all(c.dtype == np.float32 for c in ev.cotangents.values())
    assert run_graph(g, "numpy", p32, d, dtype="float64").values["loss"].dtype == np.float64
    mixed = {**p32, "embed.W_E": p["embed.W_E"]}
    with pytest.raises(DTypeError, match="pass dtype= to cast"):
        run_graph(g, "numpy", mixed, d)
    with pytest.raises(DTypeError, match=r"node 'embed\.W_E': expected a real floating dtype"):
        run_graph(g, "numpy", {**p, "embed.W_E": p["embed.W_E"].astype(np.int64)}, d)


@pytest.mark.parametrize(("argv", "message"), [
    (["verify", "--preset", "tiny", "--seq-len", "100"], "seq_len: expected an integer in "
                                                         "[1, context=16]"),
    (["verify", "--preset", "tiny", "--seq-len", "-3"], "--seq-len: expected an integer >= 1"),
    (["verify", "--preset", "tiny", "--seq-len", "x"], "--seq-len: expected an integer, got"),
    (["verify", "--preset", "tiny", "--batch", "0"], "--batch: expected an integer >= 1"),
    (["verify", "--digits", "8"], "--digits: expected an integer in [16, 10000]"),
    (["verify", "--seed", "-1"], "--seed: expected an integer in [0, 4294967295]"),
    (["derive", "--jobs", "0", "--check"], "--jobs: expected an integer >= 1"),
    (["verify", "--preset", "nano"], "unknown preset 'nano'"),
    (["params", "--preset", "nano"], "unknown preset 'nano'"),
])
def test_cli_arguments_out_of_range_one_line_exit_2(capsys, argv, message) -> None:
    with pytest.raises(SystemExit) as exc_info:
        raise SystemExit(main(argv))
    assert exc_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("nlaverify: error:")


def test_wrong_shape_vjp_fails_on_its_own_row_and_the_run_goes_on(monkeypatch) -> None:
    spec = registry.OPS["layernorm"]

    def wrong(xp, G, *args, **static):
        dx, dg, db = spec.vjp(xp, G, *args, **static)
        return dx[..., :-1], dg, db

    monkeypatch.setitem(registry.OPS, "layernorm", dataclasses.replace(spec, vjp=wrong))
    report = run_crosscheck(backends=("numpy", "jax", "mpmath", "strict"),
                            ops=["relu", "layernorm", "rmsnorm"])
    bad = [r for r in report.rows if not r.ok]
    assert bad and {r.op for r in bad} == {"layernorm"}
    assert any("expected shape" in r.reason for r in bad)
    assert sum(r.op == "rmsnorm" and r.ok for r in report.rows) >= 5  # the others still ran
    assert "cross-check:" in format_summary(report)


def test_wrong_number_of_cotangents_fails_on_its_own_row(monkeypatch) -> None:
    spec = registry.OPS["affine"]
    monkeypatch.setitem(registry.OPS, "affine", dataclasses.replace(
        spec, vjp=lambda xp, G, X, W, b: spec.vjp(xp, G, X, W, b)[:2]))
    report = run_crosscheck(backends=("numpy", "jax"), ops=["affine", "relu"])
    vjp_rows = [r for r in report.rows if "JVP" not in r.check]
    assert [r.ok for r in vjp_rows] == [False, True]
    assert "cotangents" in vjp_rows[0].reason
    # the forward-mode rows do not use the VJP: they pass
    assert all(r.ok for r in report.rows if "JVP" in r.check)


def test_fan_out_accumulation_fault_is_reported_at_its_node(monkeypatch) -> None:
    # the planted bug: a node with several consumers keeps the last contribution only
    def backprop(graph, xp, values, output, seed=None, contributions=None):
        cot = {output: xp.ones_like(values[output]) if seed is None else seed}
        for node in reversed(core.needed_nodes(graph, [output])):
            attrs = graph.nodes[node]
            if attrs["kind"] != "op" or node not in cot:
                continue
            spec = registry.get_op(attrs["op"])
            srcs = core._arguments(graph, node)
            grads = spec.vjp(xp, cot[node], *[values[u] for u in srcs], **attrs["static"])
            real = [s for a, s in zip(spec.args, srcs, strict=True) if a.kind == "real"]
            for src, gr in zip(real, grads, strict=True):
                if contributions is not None:
                    contributions[(node, src)] = gr
                cot[src] = gr  # no sum over consumers
        return cot

    import nlaverify.graph.run as run

    monkeypatch.setattr(run, "backprop", backprop)
    report = verify_pipeline(preset("tiny"), ("numpy",), n=4)
    c = report.comparisons[0]
    assert not c.ok and c.faulty_vjp is None
    # the last residual-stream node read by both a norm and the next residual add
    assert c.faulty_accumulation == "blocks.1.resid1"
    assert c.first_cotangent_divergence == "blocks.1.resid1"
    assert "cotangent accumulation fault at node: blocks.1.resid1" in format_report(report)


def test_wrong_rank_or_shapeless_values_name_the_node(setup) -> None:
    g, p, d = setup
    with pytest.raises(ShapeError, match=r"parameter node 'embed\.W_E': expected shape "
                                         r"\(50, 8\), got \(1, 50, 8\)"):
        run_graph(g, "numpy", {**p, "embed.W_E": p["embed.W_E"][None]}, d)
    with pytest.raises(ShapeError, match=r"input node 'tokens': expected an array of shape"):
        run_graph(g, "numpy", p, {**d, "tokens": [[1, 2], [3]]})
    with pytest.raises(ShapeError, match=r"input node 'tokens': expected shape \(n,\)"):
        run_graph(g, "numpy", p, {**d, "tokens": np.int64(3)})


def test_lowered_jit_checks_token_values_on_the_host(setup) -> None:
    import jax.numpy as jnp

    g, p, d = setup
    f = lower(g)
    jp = {k: jnp.asarray(v) for k, v in p.items()}
    for bad, what in (({"targets": np.array([1, 2, 99, 3])}, r"targets.*\[0, 50\)"),
                      ({"tokens": np.array([1, -5, 2, 3])}, r"tokens.*got ids in \[-5, 3\]"),
                      ({"targets": np.full(4, -100)}, "at least one target")):
        with pytest.raises(ShapeError, match=what):
            f(jp, {**d, **bad})


def test_a_failing_reference_or_subject_is_its_own_row(monkeypatch) -> None:
    import nlaverify.pipeline as pipeline

    def broken(*args, **kwargs):
        raise TypeError("planted failure")

    monkeypatch.setattr(pipeline, "make_value_grad_and_logits", broken, raising=False)
    import nlaverify.models.jax_transformer as model

    monkeypatch.setattr(model, "make_value_grad_and_logits", broken)
    report = verify_pipeline(preset("tiny"), ("numpy",), n=3)
    assert not report.ok
    assert [s for s, _ in report.errors] == ["independent JAX model"]
    assert report.comparisons[0].ok and len(report.end_to_end) == 3  # the others still ran
    assert "independent JAX model FAIL (TypeError: planted failure)" in format_report(report)
    monkeypatch.setattr(pipeline, "autodiff_reference", broken)
    report = verify_pipeline(preset("tiny"), ("numpy",), n=3)
    assert [s for s, _ in report.errors] == ["jax-autodiff reference"] and not report.ok


def test_a_forward_that_raises_fails_its_op_only(monkeypatch) -> None:
    spec = registry.OPS["relu"]

    def broken(xp, x):
        raise RuntimeError("planted")

    monkeypatch.setitem(registry.OPS, "relu", dataclasses.replace(spec, forward=broken))
    report = run_crosscheck(backends=("numpy", "jax"), ops=["relu", "tanh"])
    assert {r.op for r in report.rows if not r.ok} == {"relu"}
    assert all(r.ok for r in report.rows if r.op == "tanh")
    assert "planted" in report.rows[0].reason


def test_a_dropped_contribution_is_named(monkeypatch) -> None:
    import nlaverify.graph.run as run

    original = run.backprop

    def dropping(graph, xp, values, output, seed=None, contributions=None):
        cot = original(graph, xp, values, output, seed, contributions)
        if contributions is not None:
            del contributions[("blocks.1.resid2", "blocks.1.resid1")]
        return cot

    monkeypatch.setattr(run, "backprop", dropping)
    report = verify_pipeline(preset("tiny"), ("numpy",), n=3)
    assert report.comparisons[0].faulty_accumulation == "blocks.1.resid1"


@pytest.mark.parametrize(("argv", "message"), [
    (["verify", "--backends", "numpy"], "compares nothing"),
    (["verify", "--backends", ","], "expected at least one backend"),
    (["verify", "--zoo", "--preset", "tiny"], "--zoo runs its own configs"),
    (["verify", "--dtype", "float32"], "--dtype applies to --preset or --zoo"),
    (["verify", "--batch", "2"], "--batch applies to --preset or --zoo"),
    (["verify", "--seq-len", "3"], "--seq-len applies to --preset or --zoo"),
])
def test_options_a_mode_would_ignore_are_errors(capsys, argv, message) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_json_reports_are_strict_json(monkeypatch, capsys) -> None:
    import json

    spec = registry.OPS["layernorm"]
    monkeypatch.setitem(registry.OPS, "layernorm", dataclasses.replace(
        spec, vjp=lambda xp, G, *a, **s: spec.vjp(xp, G, *a, **s)[:2]))
    from nlaverify.crosscheck import run_crosscheck as rc

    monkeypatch.setattr("nlaverify.crosscheck.run_crosscheck",
                        lambda **kw: rc(**{**kw, "ops": ["layernorm"]}))
    assert main(["verify", "--backends", "numpy,jax", "--json"]) == 1
    out = capsys.readouterr().out
    rows = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert rows["rows"][0]["error"] == "inf"


@pytest.mark.parametrize(("changes", "field"), [
    ({"rope_base": 0}, "rope_base"), ({"temperature": float("inf")}, "temperature"),
    ({"n_experts": 2.5}, "n_experts"), ({"n_kv_heads": True}, "n_kv_heads"),
    ({"causal": "no"}, "causal"), ({"temperature": "2"}, "temperature"),
    ({"norm_eps": float("nan")}, "norm_eps"), ({"attn_bias": 1}, "attn_bias"),
])
def test_config_types_and_finiteness(changes, field) -> None:
    from nlaverify.config import ConfigError

    with pytest.raises(ConfigError, match=rf"TransformerConfig\.{field}:"):
        TransformerConfig(**{**dict(vocab_size=5, d_model=8, n_heads=2, n_blocks=1, d_mlp=4),
                             **changes})


@pytest.mark.parametrize("name", ["tiny", "gpt2-small", "mid"])
def test_learned_positions_have_the_context_rows(name: str) -> None:
    # the context field's one structural effect: pos.W_P has `context` rows, and a longer
    # sequence is refused (the field-effect check cannot see a builder that ignores it)
    cfg = preset(name)
    g = build_transformer(cfg)
    assert g.nodes["pos.W_P"]["shape"] == (cfg.context, cfg.d_model)
    with pytest.raises(Exception, match="seq_len"):
        verify_pipeline(cfg, ("numpy",), n=cfg.context + 1)
