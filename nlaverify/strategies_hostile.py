"""Where the hostile inputs lived before :mod:`nlaverify.cases` (now
:mod:`nlaverify.cases.hostile`): re-exported so that old imports keep working."""

from __future__ import annotations

from nlaverify.cases.hostile import (
    HOSTILE_OPS,
    HUGE_LOGIT,
    LOGIT_ROWS,
    NORM_ROWS,
    hostile_activations,
    hostile_logits,
    hostile_norm_rows,
    hostile_op_cases,
    make_hostile_case,
)

__all__ = ["HOSTILE_OPS", "HUGE_LOGIT", "LOGIT_ROWS", "NORM_ROWS", "hostile_activations",
           "hostile_logits", "hostile_norm_rows", "hostile_op_cases", "make_hostile_case"]
