"""The command line."""

from __future__ import annotations

import json

from nlaverify.cli import main


def test_list_json(capsys) -> None:
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    ids = {r["id"] for r in rows}
    assert {"softmax_vjp", "layernorm_jacobian", "mlp_backprop_recursion"} <= ids
    assert all(r["status"] == "proved" for r in rows)


def test_unknown_identity_exit_2(capsys) -> None:
    assert main(["derive", "no_such_identity", "--check"]) == 2
    assert "unknown identity id 'no_such_identity'" in capsys.readouterr().err


def test_verify_summary(capsys, monkeypatch) -> None:
    # the command on three ops (every op's VJP and JVP against JAX: test_ops_crosscheck,
    # test_jvp; the whole `nlaverify verify` is the README's main job)
    import nlaverify.crosscheck as crosscheck

    run = crosscheck.run_crosscheck
    monkeypatch.setattr(crosscheck, "run_crosscheck", lambda *a, **k: run(
        *a, **{**k, "ops": ("softmax", "causal_attention", "favor_plus_attention")}))
    assert main(["verify", "--backends", "numpy,jax,cupy"]) == 0
    out = capsys.readouterr().out
    assert "numpy vs jax.vjp" in out and "cross-check:" in out
    assert ("SKIPPED" in out) or ("cupy float64" in out)


def test_verify_unknown_backend(capsys) -> None:
    assert main(["verify", "--backends", "numpy,torch"]) == 2
    assert "unknown backend 'torch'" in capsys.readouterr().err


def test_newton_schulz_json(capsys) -> None:
    import numpy as np

    from nlaverify.optim.certify import iterate_map
    from nlaverify.optim.newton_schulz import MUON

    assert main(["newton-schulz", "--steps", "3", "--lower", "0.01", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in out["comparison"]}
    designed = next(r for name, r in rows.items() if name.startswith("designed"))
    assert designed["error"] < rows["muon"]["error"]
    # the certified range contains Muon's map sampled on [0.01, 1], and both ends are nearly
    # attained (a range that ignored the critical points would miss the samples)
    values = iterate_map(MUON, 3, np.linspace(0.01, 1.0, 20001))
    assert rows["muon"]["lo"] <= values.min() and values.max() <= rows["muon"]["hi"]
    assert out["dynamics"]["muon"]["p(1)"] != 1.0
    import pytest

    with pytest.raises(SystemExit) as exit_info:
        main(["newton-schulz", "--lower", "0"])
    assert exit_info.value.code == 2
    assert "expected a number in (0, 1]" in capsys.readouterr().err
