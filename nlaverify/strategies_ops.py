"""Where the drawn cases of an op lived before :mod:`nlaverify.cases` (now
:mod:`nlaverify.cases.drawn` and :mod:`nlaverify.cases.rounding`): re-exported so that old
imports keep working."""

from __future__ import annotations

from nlaverify.cases.drawn import BATCHES, OpCase, make_case, op_cases, seeds
from nlaverify.cases.rounding import exact_in

__all__ = ["BATCHES", "OpCase", "exact_in", "make_case", "op_cases", "seeds"]
