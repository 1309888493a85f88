"""Shared by the :mod:`nlaverify.lowrank` tests: the NumPy namespace, the number of standard
errors the statistical checks allow, and the hypothesis element strategy of the arrays."""

from __future__ import annotations

from hypothesis import strategies as st

from nlaverify.backends import get_namespace

NP = get_namespace("numpy")
Z = 5.0  # standard errors

_FLOATS = st.floats(-100.0, 100.0, allow_nan=False, width=64)
