"""Issue 37, item 3: Mamba's block in the pipeline (Gu & Dao 2023; Baptista, Stuart & Tran
§5.3.4): the causal convolution op, the block scan ``mamba_scan`` (A = -exp(A_log)), the
``mixer`` option in the graph and in the independent JAX model, node by node, the zoo
members, recurrent decoding through ``check_decode``, and the parameter count.

Independent oracles: explicit loops in NumPy for the convolution (PyTorch's conv1d layout),
the JAX model (``jax.lax.conv_general_dilated``, ``jax.lax.scan``) for the graph, JAX
autodiff for every cotangent, the token-by-token decoder for the full scan.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.graph.run import init_params, run_graph, sample_data
from nlaverify.ops import ssm
from nlaverify.ops.registry import OPS, get_op
from nlaverify.ops.ssm_specs import SCAN_OPS
from nlaverify.tolerance import magnitude_condition, tolerance
from nlaverify.zoo import zoo_config

jax.config.update("jax_enable_x64", True)

MAMBA = "mamba-rmsnorm"
HYBRID = "hybrid-mamba-attention"


def _conv_loops(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """PyTorch's ``conv1d(x.T, w[:, None, :], b, padding=k-1, groups=d)[:, :n].T`` by loops."""
    n, d = x.shape
    k = w.shape[1]
    xp = np.concatenate([np.zeros((k - 1, d)), x])
    return np.array([[b[c] + sum(w[c, j] * xp[t + j, c] for j in range(k)) for c in range(d)]
                     for t in range(n)])


@pytest.mark.parametrize(("n", "k"), [(5, 3), (2, 4), (4, 1)])
def test_causal_conv1d_equals_pytorch_layout_loops(n: int, k: int) -> None:
    from nlaverify.backends import get_namespace

    rng = np.random.default_rng(n * 10 + k)
    x, w, b = rng.standard_normal((n, 3)), rng.standard_normal((3, k)), rng.standard_normal(3)
    got = OPS["causal_conv1d"].forward(get_namespace("numpy"), x, w, b)
    tol = tolerance("float64", size=k, condition=magnitude_condition(x, w, b))
    assert tol.compare(got, _conv_loops(x, w, b)).ok


@pytest.mark.parametrize("op", ["causal_conv1d", "mamba_scan", "selective_scan"])
def test_vjp_and_jvp_against_jax_autodiff(op: str) -> None:
    import jax.numpy as jnp

    from nlaverify.backends import get_namespace

    spec = get_op(op)
    sizes = {"n": 5, "d": 3, "k": 3, "N": 2}
    rng = np.random.default_rng(7)
    args = [jnp.asarray(rng.standard_normal(tuple(sizes[d] for d in a.dims)))
            for a in spec.args]
    if op == "selective_scan":  # A < 0, the stable systems of Mamba
        args[2] = -jnp.exp(args[2])
    xp = get_namespace("jax")
    out = spec.forward(xp, *args, **spec.static)
    G = jnp.asarray(rng.standard_normal(out.shape))
    _, auto = spec.autodiff_vjp(args, G, **spec.static)
    mine = spec.vjp(xp, G, *args, **spec.static)
    T = [jnp.asarray(rng.standard_normal(a.shape)) for a in args]
    cond = magnitude_condition(*args, G)
    tol = tolerance("float64", size=sizes["n"] * sizes["N"] * sizes["k"], condition=cond,
                    depth=2 * sizes["n"])
    for a, got, want in zip(spec.args, mine, auto, strict=True):
        assert tol.compare(got, want).ok, a.name
    assert tol.compare(spec.jvp(xp, tuple(T), *args, **spec.static),
                       spec.autodiff_jvp(args, T, **spec.static)).ok


def test_mamba_scan_derivatives_proved_exactly() -> None:
    # sympy.diff of the running forward against the running VJP and JVP, entry by entry
    from nlaverify.symbolic.vjp_proof import prove_jvp, prove_vjp

    assert prove_vjp(SCAN_OPS["mamba_scan"]).verdict == "proved"
    assert prove_jvp(SCAN_OPS["mamba_scan"]).verdict == "proved"
    wrong = dataclasses.replace(SCAN_OPS["mamba_scan"], vjp=_vjp_without_chain_rule)
    assert prove_vjp(wrong).verdict == "failed"


def _vjp_without_chain_rule(xp, G, u, delta, A_log, B, C, D, z, delta_bias):
    """The planted bug: the cotangent of A passed on as A_log's (no factor A)."""
    bars = ssm.selective_scan_vjp(xp, G, u, delta, -xp.exp(A_log), B, C, D, z, delta_bias,
                                  delta_softplus=True)
    return bars


def test_causal_conv1d_is_a_proved_op_of_the_table() -> None:
    from nlaverify.identities.core import load_catalogue

    catalogue = load_catalogue()
    for suffix in ("vjp", "jvp", "batch"):
        assert f"causal_conv1d_{suffix}" in catalogue
    assert "mamba_scan" not in OPS and get_op("mamba_scan") is SCAN_OPS["mamba_scan"]


@pytest.mark.parametrize("member", [MAMBA, HYBRID])
def test_zoo_member_verified_node_by_node(member: str) -> None:
    from nlaverify.pipeline import verify_pipeline

    cfg = zoo_config(member)
    graph = build_transformer(cfg)
    kinds = {a.get("op") for _, a in graph.nodes(data=True)}
    assert {"causal_conv1d", "mamba_scan"} <= kinds
    assert ("attention" in kinds) == (member == HYBRID)
    report = verify_pipeline(cfg, ("numpy", "jax"))
    assert report.ok, report.errors
    assert {label for label, *_ in report.end_to_end} >= {"independent JAX model"}


@pytest.mark.parametrize("member", [MAMBA, HYBRID])
def test_independent_model_equals_every_mamba_node(member: str) -> None:
    import jax.numpy as jnp

    from nlaverify.models.jax_transformer import intermediates

    cfg = zoo_config(member)
    graph = build_transformer(cfg)
    params = init_params(graph, 3)
    data = sample_data(cfg.vocab_size, 6, 3)
    ev = run_graph(graph, "numpy", params, data)
    rec = intermediates({k: jnp.asarray(v) for k, v in params.items()}, data["tokens"], cfg)
    nodes = [n for n in graph if ".mamba." in n and graph.nodes[n]["kind"] == "op"]
    assert len(nodes) == 10 * sum(cfg.block_mixer(b) == "mamba" for b in range(cfg.n_blocks))
    for node in nodes:
        ref = ev.values[node]
        tol = tolerance("float64", size=cfg.d_inner, depth=12, condition=magnitude_condition(ref))
        assert tol.compare(rec[node], ref).ok, node


def test_recurrent_decoding_equals_the_full_scan() -> None:
    # Baptista §5.3.4: the state carried token by token reproduces the full scan, every
    # position of the block's output, the stream and the logits (check_decode)
    from nlaverify.check import check_decode
    from nlaverify.models.jax_transformer import make_mamba_decode_step

    cfg = zoo_config(MAMBA).replace(n_blocks=2, placement="post")
    params = init_params(build_transformer(cfg), 1)
    tokens = np.array([1, 5, 3, 7, 2, 9, 4])
    for prefill in (1, 3):
        report = check_decode(make_mamba_decode_step(cfg, params), cfg, params, tokens,
                              prefill=prefill)
        assert report.ok, str(report)
        assert any("blocks.1.mamba.out[pos 6]" in r.where for r in report.rows)


def test_recurrent_decoding_returns_the_untempered_logits() -> None:
    # with the options the shared decode loop reads (an unembedding bias, untied; learned
    # positions at start > 0 for Mamba): check_decode's contract: the step returns the
    # graph's ``logits`` node, the temperature
    # applied afterwards (``logits_tempered``), as the RWKV and Mamba-2 decoders do
    from nlaverify.check import check_decode
    from nlaverify.models.jax_transformer import make_mamba_decode_step

    cfg = zoo_config(MAMBA).replace(n_blocks=2, placement="post", temperature=1.7,
                                    positions="learned", unembed_bias=True,
                                    tied_embeddings=False)
    params = init_params(build_transformer(cfg), 1)
    report = check_decode(make_mamba_decode_step(cfg, params), cfg, params,
                          np.array([1, 5, 3, 7, 2]), prefill=2)
    assert report.ok, str(report)


def test_decoding_with_a_forgotten_state_is_named() -> None:
    from nlaverify.check import check_decode
    from nlaverify.models.jax_transformer import make_mamba_decode_step

    cfg = zoo_config(MAMBA)
    params = init_params(build_transformer(cfg), 1)
    step = make_mamba_decode_step(cfg, params)

    def forgetful(tokens, start, cache):  # drops the SSM state at every step
        logits, states, inter = step(tokens, start, None)
        return logits, states, inter

    report = check_decode(forgetful, cfg, params, np.array([1, 5, 3, 7]), prefill=1)
    assert not report.ok
    bad = [r for r in report.rows if not r.ok]
    assert bad[0].where.startswith("blocks.0.mamba.out[pos 1]")


def test_consistent_bug_is_seen_by_the_independent_model_only(monkeypatch) -> None:
    # the skip D dropped from the scan's forward *and* its VJP: every node agrees with JAX
    # autodiff of the (wrong) graph; the independent model does not
    from nlaverify.pipeline import verify_pipeline

    def no_skip(xp, u, delta, A_log, B, C, D, z, delta_bias):
        return ssm.selective_scan(xp, u, delta, -xp.exp(A_log), B, C, None, z, delta_bias,
                                  delta_softplus=True)

    def no_skip_vjp(xp, G, u, delta, A_log, B, C, D, z, delta_bias):
        A = -xp.exp(A_log)
        bars = ssm.selective_scan_vjp(xp, G, u, delta, A, B, C, None, z, delta_bias,
                                      delta_softplus=True)
        return (*bars[:2], bars[2] * A, *bars[3:5], xp.zeros_like(D), *bars[6:])

    spec = SCAN_OPS["mamba_scan"]
    monkeypatch.setitem(SCAN_OPS, "mamba_scan",
                        dataclasses.replace(spec, forward=no_skip, vjp=no_skip_vjp))
    report = verify_pipeline(zoo_config(MAMBA), ("numpy",))
    assert not report.ok
    assert all(c.ok for c in report.comparisons)
    assert any(s == "independent JAX model" and e > b for s, _, e, b in report.end_to_end)


def test_parameter_count_of_a_mamba_block() -> None:
    # Hugging Face MambaMixer: in_proj d x 2E, conv1d E k + E, x_proj E (R + 2N),
    # dt_proj R E + E, A_log E N, D E, out_proj E d (no projection biases)
    cfg = TransformerConfig(vocab_size=50280, d_model=768, n_heads=12, n_blocks=24,
                            d_mlp=3072, mixer="mamba", norm="rmsnorm", positions="none",
                            mlp="swiglu")
    d, E, N, k, R = 768, 1536, 16, 4, 48
    assert (cfg.d_inner, cfg.dt_rank) == (E, R)
    counts = parameter_counts(build_transformer(cfg)).by_component
    mamba = sum(v for c, v in counts.items() if c.startswith("mamba."))
    per_block = 2 * d * E + E * k + E + E * (R + 2 * N) + R * E + E + E * N + E + E * d
    # mamba-130m: 24 (3,770,880 + 768 norm) + 50,280 x 768 + 768 = 129,135,360
    assert per_block == 3_770_880
    assert mamba == 24 * per_block
    assert counts["mamba.A_log"] == 24 * E * N


@pytest.mark.parametrize(("changes", "field"), [
    ({"mixer": "ssm"}, "mixer"), ({"mixer": ("mamba",)}, "mixer"),
    ({"ssm_state": 0}, "ssm_state"), ({"ssm_dt_rank": True}, "ssm_dt_rank")])
def test_bad_mixer_options_are_named(changes: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=f"TransformerConfig.{field}"):
        TransformerConfig(vocab_size=5, d_model=4, n_heads=1, n_blocks=2, d_mlp=4, **changes)


def test_scan_reference_is_the_spec_the_ssm_family_proves() -> None:
    # check_op(fn, "selective_scan") runs the record whose VJP and JVP the identities
    # ssm_selective_scan_vjp / _jvp prove: the same functions, arguments and static values
    from nlaverify.identities.ssm_derivatives import SELECTIVE_SCAN

    spec = get_op("selective_scan")
    assert (spec.forward, spec.vjp, spec.jvp) == (SELECTIVE_SCAN.forward, SELECTIVE_SCAN.vjp,
                                                  SELECTIVE_SCAN.jvp)
    assert spec.args == SELECTIVE_SCAN.args and dict(spec.static) == dict(SELECTIVE_SCAN.static)
