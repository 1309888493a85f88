"""Check your own code: one call per kind of subject, one report type.

=========================  ===============================================================
call                        subject
=========================  ===============================================================
:func:`check_op`            your op or kernel (NumPy, JAX, PyTorch, CuPy) and its VJP/JVP,
                            against the proved op at high precision
:func:`prove`               your op written against ``xp``: the exact SymPy proof of its
                            VJP/JVP, with a counterexample when it is wrong
:func:`user_op`             your op (not in the catalogue) as the reference of
                            ``check_op`` and the subject of ``prove``
:func:`check_function`      any function against an nlaverify reference (closed forms,
                            curvature products, Newton–Schulz maps, estimators' moments)
:func:`check_optimizer`     your optimizer step against the reference update rules
:func:`check_model`         your model, node by node against the graph
:func:`check_decode`        your incremental decoding loop (KV cache) against the full
                            forward
:func:`model_curvature`     GGN / Fisher / Hessian products, eigenvalues and natural
                            gradients of your JAX loss and parameter pytree
:func:`check_curvature`     your own curvature product against those
:func:`model_kfac`          K-FAC factors of your named linear layers (``kfac_report``:
                            the curvature report; ``check_kfac``: your factor code)
:func:`check_sharded`       your sharded function (tensor-, data-, vocabulary-, sequence-
                            parallel; attention heads, ring attention, Muon and ZeRO AdamW)
                            against the unsharded reference, the classic bug named
=========================  ===============================================================

Every call returns a :class:`CheckReport` (``.ok``, ``.raise_if_failed()``, ``.to_json()``;
``assert report`` shows the first failure in pytest).
"""

from __future__ import annotations

import importlib
from typing import Any

from nlaverify.check.report import CheckError, CheckFailed, CheckReport, Row

_LAZY = {
    "check_op": "nlaverify.check.op",
    "op_signature": "nlaverify.check.op",
    "prove": "nlaverify.check.proof",
    "UserOp": "nlaverify.check.proof",
    "user_op": "nlaverify.check.proof",
    "check_function": "nlaverify.check.function",
    "check_optimizer": "nlaverify.check.optimizer",
    "check_model": "nlaverify.check.model",
    "check_decode": "nlaverify.check.decode",
    "model_curvature": "nlaverify.check.curvature",
    "check_curvature": "nlaverify.check.curvature",
    "model_kfac": "nlaverify.check.kfac",
    "kfac_report": "nlaverify.check.kfac",
    "check_kfac": "nlaverify.check.kfac",
    "check_sharded": "nlaverify.sharding.check",
}

__all__ = ["CheckError", "CheckFailed", "CheckReport", "Row", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:  # the calls load their own dependencies on first use
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'nlaverify.check' has no attribute {name!r}")
