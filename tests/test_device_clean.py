"""Device-clean code: the pipeline never converts a device array to NumPy implicitly.

``array-api-strict`` on its emulated ``device1`` refuses ``numpy.asarray`` exactly as
CuPy does on a GPU, and refuses every non-standard call; CI has no GPU, so the op
cross-checks and the whole tiny pipeline run on it here.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from nlaverify.backends import get_namespace, to_float64, to_host
from nlaverify.config import preset
from nlaverify.crosscheck import format_summary, run_crosscheck
from nlaverify.ops import registry
from nlaverify.pipeline import format_report, verify_pipeline


def test_strict_arrays_refuse_implicit_conversion_and_to_host_moves_them() -> None:
    xp = get_namespace("strict")
    x = xp.asarray(np.arange(6.0).reshape(2, 3))
    assert "device1" in str(x.device)
    with pytest.raises(RuntimeError, match="device"):
        np.asarray(x)
    assert np.array_equal(to_host(x), np.arange(6.0).reshape(2, 3))
    assert to_float64(xp.astype(x, xp.float32)).dtype == np.float64
    assert "device1" in str(xp.arange(3).device) and "device1" in str(xp.zeros(2).device)


def test_every_op_cross_checks_on_the_strict_backend() -> None:
    report = run_crosscheck(backends=("strict",))
    strict = [r for r in report.rows if r.check.startswith("strict")]
    assert len(strict) == 2 * sum(s.differentiable for s in registry.OPS.values())
    assert report.ok, format_summary(report)
    assert all(r.skipped is None for r in strict)


def test_tiny_pipeline_node_by_node_on_the_strict_backend() -> None:
    report = verify_pipeline(preset("tiny"), ("strict",), n=6)
    assert report.ok, format_report(report)
    assert [c.subject for c in report.comparisons] == ["strict"]


def test_a_planted_host_conversion_on_the_pipeline_path_fails_it(monkeypatch) -> None:
    spec = registry.OPS["gelu_tanh"]

    def host_gelu(xp, x):  # the bug: a NumPy call on a device array (JAX traces are spared,
        y = spec.forward(xp, x)  # so that the autodiff reference and the jit still run)
        return y if xp.name == "jax" else xp.asarray(np.asarray(y))

    monkeypatch.setitem(registry.OPS, "gelu_tanh", dataclasses.replace(spec, forward=host_gelu))
    report = verify_pipeline(preset("tiny"), ("numpy", "strict"), n=4)
    assert not report.ok
    assert [b for b, _ in report.errors] == ["strict"]
    assert "RuntimeError" in report.errors[0][1] and "blocks.0.mlp.act" in report.errors[0][1]
    assert "graph on strict     FAIL" in format_report(report)
    ok = [c for c in report.comparisons if c.subject == "numpy"]
    assert ok and ok[0].ok  # the NumPy run is unaffected: the failure stays on its row


def test_generation_runs_on_the_strict_backend() -> None:
    from nlaverify.generate import generate_from_graph
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import init_params

    g = build_transformer(preset("tiny"))
    params = init_params(g, 0)
    on_device = generate_from_graph(g, params, [1, 2], 3, backend="strict")
    assert on_device == generate_from_graph(g, params, [1, 2], 3, backend="numpy")
