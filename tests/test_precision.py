"""Verification below float64 (nlaverify.precision): the tiny preset in float32 and
bfloat16 against float64 autodiff, bounds that hold and say something, a planted
float16 node found, the dtype kept through every node, and the TF32 policy.

The mid preset (d=256, 4 blocks, V=2048) is measured in docs/guide/precision.md and runs here
only under ``HYPOTHESIS_PROFILE=nightly``.
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import pytest

from nlaverify.cli import main
from nlaverify.config import preset
from nlaverify.errors import ArgumentError
from nlaverify.ops.registry import OPS
from nlaverify.precision import (
    PrecisionSetup,
    emulate_tf32,
    measure,
    node_bounds,
    planted,
    prepare,
    round_params,
    round_tf32,
    run_subject,
    verify_precision,
)
from nlaverify.tolerance import LAMBDA, SAFETY, unit_roundoff

TINY = preset("tiny")


@pytest.fixture(scope="session")
def f32() -> PrecisionSetup:
    return prepare(TINY, "float32", backend="numpy")


@pytest.fixture(scope="session")
def bf16() -> PrecisionSetup:
    return prepare(TINY, "bfloat16", backend="jax")


@pytest.fixture(scope="session")
def f32_report(f32):
    return measure(f32, run_subject(f32))


@pytest.fixture(scope="session")
def bf16_report(bf16):
    return measure(bf16, run_subject(bf16))


def test_reference_uses_the_rounded_parameters(f32, bf16) -> None:
    import jax.numpy as jnp

    for setup, t in ((f32, np.float32), (bf16, jnp.bfloat16)):
        for v in setup.params.values():
            assert v.dtype == np.float64
            assert np.array_equal(v.astype(t).astype(np.float64), v)  # exactly representable
    # the parameters' own rounding is no part of the measured error: it is exactly zero
    assert all(r.value_error == 0.0 for r in measure(f32, run_subject(f32)).rows
               if r.op in ("param", "embed"))


def test_tiny_float32_passes_on_numpy_and_jax(f32, f32_report) -> None:
    assert f32_report.ok, f32_report.summary()
    jax_run = dataclasses.replace(f32, backend="jax")
    rep = measure(jax_run, run_subject(jax_run))
    assert rep.ok, rep.summary()
    assert rep.passed == f32_report.passed == len(f32_report.rows)


def test_tiny_bfloat16_passes(bf16_report) -> None:
    assert bf16_report.ok, bf16_report.summary()
    assert bf16_report.accumulation == "float32"  # XLA's bfloat16 dots and sums
    assert bf16_report.first_value_divergence is None
    assert bf16_report.first_cotangent_divergence is None


def test_dtype_kept_through_every_node(bf16, f32) -> None:
    for setup in (bf16, f32):
        ev = run_subject(setup)
        for node, arr in [*ev.values.items(), *ev.cotangents.items()]:
            if setup.graph.nodes[node].get("dtype") == "int":
                continue
            assert str(arr.dtype) == setup.dtype, (node, arr.dtype)
    # a silent promotion (here: a float32 value in a bfloat16 run) is reported and fails
    ev = run_subject(bf16)
    ev.values["logits"] = ev.values["logits"].astype("float32")
    rep = measure(bf16, ev)
    assert rep.promoted == ["logits (value): float32"] and not rep.ok


def _floor(rep, dtype: str, k_max: int) -> float:
    r"""The least median error/bound ratio a non-vacuous bound must reach.

    A node that rounds at all carries at least about one unit roundoff :math:`u` of
    error (measured: 1 to 4 u, flat in depth). The bound of the model is
    :math:`\sqrt{\lambda C}\,\kappa\sqrt{D}\,u_{\text{stage}}(k)`, so at the median a bound
    that does not waste more than its own declared factors (the constant
    :math:`\sqrt{\lambda C} \approx 9.8`, the stage count :math:`\sqrt{D_{\max}}` and
    :math:`\sqrt{k_{\max}}` of the longest accumulation when it is done in ``dtype``,
    with :math:`\kappa \le 2` typical) gives a ratio of at least
    :math:`1 / (2\sqrt{\lambda C}\sqrt{D_{\max}}\sqrt{k})`. For tiny that is about
    :math:`4\cdot 10^{-3}` (float32, :math:`k = 16`) and :math:`1.6\cdot10^{-2}`
    (bfloat16, float32 accumulation so :math:`k` does not count); measured medians are
    about 5 times higher. A bound looser than this floor could not tell a correct run
    from one that loses 8 more bits.
    """
    d_max = max(max(r.value_stages for r in rep.rows),
                max(r.cot_stages or 0.0 for r in rep.rows))
    k = k_max if dtype == "float32" else 1
    return 1.0 / (2.0 * math.sqrt(LAMBDA * SAFETY) * math.sqrt(d_max) * math.sqrt(k))


@pytest.mark.parametrize("which", ["f32_report", "bf16_report"])
def test_bounds_are_not_vacuous(which, request) -> None:
    rep = request.getfixturevalue(which)
    floor = _floor(rep, rep.dtype, k_max=16)
    s = rep.summary()
    for what in ("value", "cotangent"):
        assert s[what]["median_ratio"] >= floor, (what, s[what], floor)
        assert s[what]["worst_ratio"] <= 1.0
    # a bound says something absolute too: under 1 (100 %) except for the cotangents
    # that are zero up to rounding (the key biases: softmax ignores a shift of a row)
    useless = [r.node for r in rep.rows if r.cot_bound is not None and r.cot_bound >= 1.0]
    assert all(n.endswith("attn.k.b_K") for n in useless), useless
    assert max(r.value_bound for r in rep.rows) < 0.5


@pytest.mark.parametrize("node", ["blocks.0.mlp.in", "blocks.0.attn.heads",
                                  "blocks.1.mlp.out"])
def test_planted_float16_node_is_named(f32, node) -> None:
    with planted(f32.graph, node) as g:
        name = g.nodes[node]["op"]
        assert name in OPS and f32.graph.nodes[node]["op"] != name
        rep = measure(f32, run_subject(f32, g))
    assert name not in OPS  # the registry is left as it was
    assert rep.first_value_divergence == node
    assert not rep.ok and not rep.promoted  # the planted op casts back: no promotion


def test_tf32_policy(f32) -> None:
    x = np.array([1.0 + 2.0**-11, 1.0 + 2.0**-10 + 2.0**-12, -3.0], dtype=np.float32)
    assert np.array_equal(round_tf32(x), np.array([1.0, 1.0 + 2.0**-10, -3.0], np.float32))
    # TF32 matmuls (emulated on the CPU) break the pinned float32 bounds ...
    tf32_run = run_subject(f32, xp=emulate_tf32())
    rep = measure(f32, tf32_run)
    assert not rep.ok and rep.first_value_divergence == "blocks.0.attn.q"
    # ... and pass the TF32 model (u_prod = 2^-11 for the matmul stages)
    bounds = node_bounds(f32.graph, f32.reference, "float32", f32.n, products="tfloat32")
    modelled = dataclasses.replace(f32, matmul_precision="tf32", bounds=bounds)
    rep = measure(modelled, tf32_run)
    assert rep.ok, rep.summary()
    assert unit_roundoff("tfloat32") == 2.0**-11


def test_arguments_and_rounding() -> None:
    with pytest.raises(ArgumentError, match="bfloat16 runs on jax"):
        verify_precision(TINY, "bfloat16", backend="numpy")
    with pytest.raises(ArgumentError, match="argument 'dtype'"):
        verify_precision(TINY, "float16")
    p = round_params({"w": np.array([1.0 + 2.0**-10, 0.1])}, "bfloat16")["w"]
    assert p[0] == 1.0 and p[1] == 0.10009765625


def test_cli_dtype(capsys, f32_report) -> None:
    assert main(["verify", "--preset", "tiny", "--dtype", "float32", "--backends", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "blocks.0.attn.heads" in out and "median" in out
    assert out.rstrip().splitlines()[-1] == (f"precision tiny float32: {len(f32_report.rows)} "
                                             f"passed, 0 failed")


@pytest.mark.skipif(os.environ.get("HYPOTHESIS_PROFILE") != "nightly",
                    reason="mid (d=256, 4 blocks, V=2048): nightly only")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_mid_passes(dtype) -> None:
    rep = verify_precision(preset("mid"), dtype, n=128)
    assert rep.ok, rep.summary()


def test_relu_branch_flips_make_bfloat16_vacuous_and_that_is_no_pass() -> None:
    """bfloat16 through Post-LN ReLU blocks: pre-activations within their error band flip
    sign and the cotangents jump by |g_i| (up to ~50 % here). The branch term of the bound
    then reaches 1 at many nodes: such a bound would admit a zeroed VJP, so the check
    reports those nodes as inconclusive (or failed, where over even that bound), never as
    passed, and the report is not ok. float32 resolves the same model."""
    cfg = TINY.replace(positions="sinusoidal", placement="post", mlp="relu",
                       tied_embeddings=True, temperature=0.7, name="tiny-post-relu")
    rep = verify_precision(cfg, "bfloat16")
    vacuous = [r for r in rep.rows if r.vacuous("cotangent")]
    assert vacuous and not rep.ok and all(not r.ok for r in vacuous)
    assert all(r.inconclusive != r.failed for r in vacuous)
    assert rep.passed + rep.failed + rep.inconclusive == len(rep.rows) and rep.inconclusive
    worst = max(r.cot_error for r in rep.rows if r.cot_error is not None
                and not r.node.endswith("b_K"))
    assert worst > 0.1  # the jumps are real
    assert verify_precision(cfg, "float32").ok


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_batched_padded_run_passes_below_float64(dtype) -> None:
    # weight cotangents now sum B n rows: the bounds take the longer accumulation
    rep = verify_precision(TINY, dtype, n=5, batch=3)
    assert rep.ok, rep.summary()
    with pytest.raises(ArgumentError, match=r"seq_len: expected an integer in \[1, context=16\]"):
        verify_precision(TINY, dtype, n=17)
