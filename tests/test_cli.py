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


def test_verify_summary(capsys) -> None:
    assert main(["verify", "--backends", "numpy,jax,cupy"]) == 0
    out = capsys.readouterr().out
    assert "numpy vs jax.vjp" in out and "cross-check:" in out
    assert ("SKIPPED" in out) or ("cupy float64" in out)


def test_verify_unknown_backend(capsys) -> None:
    assert main(["verify", "--backends", "numpy,torch"]) == 2
    assert "unknown backend 'torch'" in capsys.readouterr().err
