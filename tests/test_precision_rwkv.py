"""Verification below float64 of RWKV blocks: the a-posteriori bound covers the nodes of the
ops ``rwkv_time_mix`` and ``rwkv_channel_mix`` (values and the cotangents they send), a row
whose every bound is >= 1 is *inconclusive* (neither passed nor failed: the bfloat16
cotangents of the token-shift mixes and the decay, sums over the sequence that cancel), and a
bug planted in an RWKV node of the low-precision run is still named at its node."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from nlaverify.config import preset
from nlaverify.ops.registry import OPS, get_op
from nlaverify.precision import format_precision_report, measure, prepare, run_subject
from nlaverify.precision.local import local_tolerances
from nlaverify.precision.running import running_error, running_namespace
from nlaverify.tolerance import unit_roundoff

RWKV = preset("tiny-rwkv")


@pytest.fixture(scope="module")
def former_alarm():
    """``verify --preset tiny-rwkv --dtype bfloat16 --batch 2 --seed 1``: 59 passed,
    1 failed (``blocks.1.ffn.mu_k``'s cotangent, error 0.10 within its bound 1.31)."""
    setup = prepare(RWKV, "bfloat16", seed=1, batch=2)
    subject = run_subject(setup)
    return setup, subject, measure(setup, subject)


def test_rwkv_rows_have_the_a_posteriori_bound(former_alarm) -> None:
    setup, subject, _ = former_alarm
    local = local_tolerances(setup.graph, setup.reference, subject, setup.dtype,
                             setup.accumulation)
    for v, attrs in setup.graph.nodes(data=True):
        if attrs.get("op") in ("rwkv_time_mix", "rwkv_channel_mix"):
            assert (v, "value") in local and (v, "cotangent") in local, v
            for a in setup.graph.predecessors(v):  # every parameter it sends a cotangent to
                if setup.graph.nodes[a].get("kind") == "param":
                    assert (a, "cotangent") in local, a


def test_vacuous_row_is_inconclusive_not_failed_nor_passed(former_alarm) -> None:
    _, _, rep = former_alarm
    assert rep.failed == 0 and rep.inconclusive >= 1 and not rep.ok
    assert rep.passed + rep.inconclusive == len(rep.rows)
    assert rep.first_value_divergence is None and rep.first_cotangent_divergence is None
    row = {r.node: r for r in rep.rows}["blocks.1.ffn.mu_k"]
    assert row.inconclusive and not row.ok and not row.failed
    assert row.cot_bound >= 1.0 and row.cot_error <= row.cot_bound
    text = format_precision_report(rep)
    assert "INCONCLUSIVE" in text and text.endswith("0 failed, 1 inconclusive")
    assert rep.summary()["inconclusive"] == rep.inconclusive
    assert row.as_dict()["inconclusive"] and not row.as_dict()["failed"]


def test_cli_exit_status_of_an_inconclusive_run(capsys) -> None:
    """Not a failure, never a pass: the line says inconclusive and the exit status is 1,
    as ``check``'s for a CheckReport with inconclusive rows."""
    from nlaverify.precision import precision_command

    assert precision_command("tiny-rwkv", "bfloat16", ["jax"], seed=1, batch=2) == 1
    assert "59 passed, 0 failed, 1 inconclusive" in capsys.readouterr().out


def test_stability_shift_is_an_exact_constant() -> None:
    r"""The ops are proved for every shift: what went into :math:`\hat c` cancels, so the
    running namespace takes it as exact (its value the maximum, an all-masked row 0)."""
    rn = running_namespace(unit_roundoff("bfloat16"), unit_roundoff("float32"))
    z = rn.asarray(np.array([[0.3, 1.7], [-math.inf, -math.inf]])) * 1.1
    assert running_error(z)[0].min() > 0  # rounded: e > 0 on the finite entries
    c = rn.stability_shift(z, axis=-1)
    assert [float(s) for s in c.reshape(-1)] == pytest.approx([1.87, 0.0])
    assert running_error(c).max() == 0.0


def _column_scaled(spec, by: float):
    def forward(xp, *args, **st):
        y = spec.forward(xp, *args, **st)
        return xp.concat([y[..., :1] * by, y[..., 1:]], axis=-1)
    return forward


@pytest.mark.parametrize("node", ["blocks.0.ffn.channel_mix", "blocks.1.rwkv.time_mix"])
def test_planted_rwkv_bug_is_named_in_bfloat16(monkeypatch, former_alarm, node) -> None:
    """One output column of an RWKV node doubled in the bfloat16 run only: named at its node
    (the smallest factor named on 3 of 3 seeds, 2; 1.5 is named on 2 of 3, the WKV's
    worst-case bound in bfloat16 being about a fifth of its output)."""
    setup = prepare(RWKV, "bfloat16", seed=0, batch=2)
    spec = get_op(setup.graph.nodes[node]["op"])
    name = f"{spec.name}#bug#{node}"
    monkeypatch.setitem(OPS, name, dataclasses.replace(spec, name=name,
                                                       forward=_column_scaled(spec, 2.0)))
    g = setup.graph.copy()
    g.nodes[node]["op"] = name
    rep = measure(setup, run_subject(setup, g))
    assert rep.first_value_divergence == node and rep.failed >= 1
