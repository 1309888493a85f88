"""``nlaverify verify --zoo``: the command's lines, its totals, its JSON and its exit codes."""

from __future__ import annotations

import dataclasses
import json

from nlaverify import zoo
from nlaverify.cli import main

# --------------------------------------------------------------------------- CLI


def test_cli_verify_zoo(monkeypatch, capsys) -> None:
    # the command over two members' reports (each member is verified by its own test in
    # tests/test_zoo.py)
    import nlaverify.pipeline

    members = ("post-layernorm", "post-rmsnorm-bidirectional")
    monkeypatch.setattr(zoo, "ZOO", tuple(zoo.zoo_config(m) for m in members))
    # real reports, made cheaply (one backend, three tokens): the command only formats them
    recorded = {r.config.name: r for r in zoo.verify_zoo(("numpy",), zoo.ZOO, n=3)}
    calls = []

    def fake(cfg, backends, seed, n, digits):
        calls.append((cfg.name, backends, n))
        return recorded[cfg.name]

    monkeypatch.setattr(nlaverify.pipeline, "verify_pipeline", fake)
    assert main(["verify", "--zoo", "--backends", "numpy,jax", "--jobs", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[1:3] for line in out[:-1]] == [[c.name, "ok"] for c in zoo.ZOO]
    assert out[-1] == f"zoo: {len(zoo.ZOO)} passed, 0 failed"
    assert calls[0][1] == ("numpy", "jax")
    assert dict((c, n) for c, _, n in calls)["post-rmsnorm-bidirectional"] == 5  # context
    wrong = dataclasses.replace(recorded["post-layernorm"], model_divergence="blocks.0.resid2",
                                end_to_end=[(s, q, 2 * b if s == "independent JAX model"
                                             else e, b) for s, q, e, b in
                                            recorded["post-layernorm"].end_to_end])
    monkeypatch.setitem(recorded, "post-layernorm", wrong)
    assert main(["verify", "--zoo", "--backends", "numpy", "--jobs", "1"]) == 1
    out = capsys.readouterr().out.splitlines()
    line = next(x for x in out if "post-layernorm" in x)
    assert "FAIL" in line and "first divergence at blocks.0.resid2" in line
    assert out[-1] == f"zoo: {len(zoo.ZOO) - 1} passed, 1 failed"
    assert main(["verify", "--zoo", "--backends", "numpy", "--json", "--jobs", "1"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert (doc["passed"], doc["failed"], doc["ok"]) == (len(zoo.ZOO) - 1, 1, False)
    assert [r["model_first_divergence"] for r in doc["reports"] if not r["ok"]] == [
        "blocks.0.resid2"]
    assert main(["verify", "--zoo", "--backends", "numpy,nope"]) == 2
    assert "unknown backend 'nope'" in capsys.readouterr().err


def test_the_zoo_in_parallel_gives_the_serial_reports() -> None:
    """--jobs 2 verifies the members in two processes; the reports, in zoo order, are the
    serial ones (the same checks, the same errors)."""
    cfgs = [zoo.zoo_config(m) for m in ("post-layernorm", "post-rmsnorm-bidirectional")]
    serial = zoo.verify_zoo(("numpy",), cfgs, n=3)
    parallel = zoo.verify_zoo(("numpy",), cfgs, n=3, jobs=2)
    assert [r.config.name for r in parallel] == [c.name for c in cfgs]
    assert [zoo.format_zoo_line(r) for r in parallel] == [zoo.format_zoo_line(r)
                                                           for r in serial]


def test_jobs_applies_to_the_zoo_only(capsys) -> None:
    assert main(["verify", "--preset", "tiny", "--jobs", "2"]) == 2
    assert "--jobs applies to --zoo" in capsys.readouterr().err
