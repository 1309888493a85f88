"""The tolerance model: its ingredients and its comparisons."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nlaverify.tolerance import (
    SAFETY,
    finite_difference_tolerance,
    magnitude_condition,
    tolerance,
    unit_roundoff,
)


def test_unit_roundoffs() -> None:
    assert unit_roundoff(np.float64) == np.finfo(np.float64).eps / 2
    assert unit_roundoff("float32") == np.finfo(np.float32).eps / 2
    assert unit_roundoff("mpmath", 50) == 0.5e-49
    with pytest.raises(ValueError, match="argument 'dtype'"):
        unit_roundoff("int32")


def test_model_formula_and_monotonicity() -> None:
    t = tolerance("float64", size=16, condition=10.0, depth=2)
    assert t.rtol == pytest.approx(SAFETY * 10 * 2 * 4 * 2.0**-53)
    assert "sqrt(k=16)" in t.reason
    assert tolerance("float32").rtol > tolerance("float64").rtol
    assert tolerance("float64", size=100).rtol > tolerance("float64", size=4).rtol
    with pytest.raises(ValueError, match="condition >= 1"):
        tolerance("float64", condition=0.5)


def test_compare_is_normwise() -> None:
    t = tolerance("float64")
    e = np.array([1e3, 1.0])
    # an error of 1e-14 on a small entry is fine relative to the largest entry
    assert t.compare(e + np.array([0.0, 1e-14]), e).ok
    assert not t.compare(e + np.array([0.0, 1e-9]), e).ok
    assert not t.compare(np.array([np.nan, 1.0]), e).ok


def test_finite_difference_tolerance_balances_terms() -> None:
    t = finite_difference_tolerance(50, 1e-16)
    assert t.rtol == pytest.approx(SAFETY * (1e-32 + 0.5e-49 / 1e-16))
    assert magnitude_condition(np.array([-3.0, 2.0])) == 9.0
    assert math.isfinite(t.rtol)
