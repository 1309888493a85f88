"""Where the cases of ``check_op`` lived before they found one home in :mod:`nlaverify.cases`
(the reference and the condition estimate are in :mod:`nlaverify.check.op_reference`): the
public names, re-exported so that old imports keep working."""

from __future__ import annotations

from nlaverify.cases import OpCaseInput, realistic_norm_rows
from nlaverify.check.op import exact_in
from nlaverify.check.op_plan import DEFAULT_MAX_SIZE, WIDENED
from nlaverify.check.op_reference import REFERENCE_DIGITS, REFERENCES, SCE_DRAWS, SCE_EPS
from nlaverify.ops.registry import op_signature

__all__ = ["DEFAULT_MAX_SIZE", "REFERENCES", "REFERENCE_DIGITS", "SCE_DRAWS", "SCE_EPS",
           "WIDENED", "OpCaseInput", "exact_in", "op_signature", "realistic_norm_rows"]
