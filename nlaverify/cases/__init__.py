r"""The cases of an op, in one home: what both :func:`nlaverify.check.check_op` and the
hypothesis strategies of :mod:`nlaverify.strategies` run a kernel on.

* :mod:`~nlaverify.cases.rounding`: values rounded to a dtype (:func:`exact_in`), so that a
  kernel in that dtype and the reference see the same inputs;
* :mod:`~nlaverify.cases.drawn`: drawn cases, with sizes in the op's ranges, leading batch
  axes and generic values from a seed (:func:`make_case`, :func:`op_cases`);
* :mod:`~nlaverify.cases.hostile`: inputs that break naive kernels (logits of
  :math:`\pm 10^4`, masked rows, huge, tiny and constant norm rows, activations in the
  tails) with condition estimates derived for them (:func:`make_hostile_case`,
  :func:`hostile_op_cases`, :func:`realistic_norm_rows`);
* :mod:`~nlaverify.cases.hostile_ssm`: Mamba-2's scan at trained-like decays
  (:math:`e^{\Delta A}` from :math:`10^{-8}` to :math:`\approx 1`, a long constant run), its
  condition the scan's running error bound (:func:`make_hostile_scan_case`);
* :mod:`~nlaverify.cases.inputs`: the form ``check_op`` runs, an :class:`OpCaseInput` with a
  cotangent and tangents, from a drawn, a hostile or an explicit case
  (:func:`drawn_input`, :func:`hostile_inputs`, :func:`explicit_inputs`).

Seeds: Baggag & Saad §2.6 and §3 (the ops whose cases these are); Higham (2002) for the
rounding of inputs to a format.
"""

from __future__ import annotations

from nlaverify.cases.drawn import BATCHES, OpCase, make_case, op_cases, seeds, size_strategy
from nlaverify.cases.hostile import (
    HOSTILE_OPS,
    HUGE_LOGIT,
    LOGIT_ROWS,
    NORM_ROWS,
    hostile_activations,
    hostile_logit_array,
    hostile_logits,
    hostile_norm_rows,
    hostile_op_cases,
    make_hostile_case,
    realistic_norm_rows,
)
from nlaverify.cases.hostile_kinds import HOSTILE_KINDS, hostile_array
from nlaverify.cases.hostile_ssm import HOSTILE_SCAN_OPS, make_hostile_scan_case
from nlaverify.cases.inputs import (
    OpCaseInput,
    drawn_input,
    explicit_inputs,
    hostile_inputs,
    real_indices,
    registered,
)
from nlaverify.cases.rounding import DTYPES, exact_in

__all__ = [
    "BATCHES",
    "DTYPES",
    "HOSTILE_KINDS",
    "HOSTILE_OPS",
    "HOSTILE_SCAN_OPS",
    "HUGE_LOGIT",
    "LOGIT_ROWS",
    "NORM_ROWS",
    "OpCase",
    "OpCaseInput",
    "drawn_input",
    "exact_in",
    "explicit_inputs",
    "hostile_activations",
    "hostile_array",
    "hostile_inputs",
    "hostile_logit_array",
    "hostile_logits",
    "hostile_norm_rows",
    "hostile_op_cases",
    "make_case",
    "make_hostile_case",
    "make_hostile_scan_case",
    "op_cases",
    "real_indices",
    "realistic_norm_rows",
    "registered",
    "seeds",
    "size_strategy",
]
