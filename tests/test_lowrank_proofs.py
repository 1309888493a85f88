r"""The ``lowrank`` proofs fail on planted errors: a floor for the rounding, the wrong
Eckart-Young errors, a pruning error over the kept entries and a quantized-linear bound a
quarter too small."""

from __future__ import annotations

import importlib

import pytest

from nlaverify.lowrank import _xp, prune
from nlaverify.lowrank import quantization as qz
from nlaverify.lowrank import svd as lsvd

# -- the proofs fail on planted errors -----------------------------------------------------


def _derive(identity_id: str) -> str:
    from nlaverify.identities.core import _REGISTRY

    importlib.import_module("nlaverify.identities.lowrank")
    return _REGISTRY[identity_id].derive().verdict


def test_proofs_catch_planted_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _derive("lowrank_quantizer_error_bound") == "proved"
    with monkeypatch.context() as m:
        m.setattr(_xp, "round_half_even", _xp.floor)
        assert _derive("lowrank_quantizer_error_bound") == "failed"
    with monkeypatch.context() as m:
        m.setattr(lsvd, "truncation_errors", lambda xp, s, k: (s[k - 1], s[k - 1]) if k else (
            s[0], s[0]))
        assert _derive("lowrank_eckart_young") == "failed"
    with monkeypatch.context() as m:
        m.setattr(prune, "pruning_error", lambda xp, W, M: xp.sum(W * W * M))
        assert _derive("lowrank_pruning_error") == "failed"
    with monkeypatch.context() as m:
        m.setattr(qz, "linear_output_error_bound",
                  lambda xp, X, step, shape: xp.matmul(_xp.absolute(xp, X), xp.ones(shape)
                                                       * step) / 4)
        assert _derive("lowrank_quantized_linear_bound") == "failed"
