"""The tolerance model: its ingredients and its comparisons."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nlaverify.tolerance import (
    LAMBDA,
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


def test_mixed_precision_stage() -> None:
    # one precision: exactly the old formula (every float64 bound unchanged)
    assert tolerance("float64", size=16, depth=2, accumulation="float64").rtol == (
        tolerance("float64", size=16, depth=2).rtol)
    # bfloat16 stored, float32 accumulated (XLA): the final rounding, not sqrt(k) of them
    t = tolerance("bfloat16", size=2048, accumulation="float32")
    assert t.rtol == pytest.approx(SAFETY * 2.0**-8)
    assert tolerance("bfloat16", size=2048).rtol == pytest.approx(SAFETY * 45.25 * 2.0**-8,
                                                                  rel=1e-3)
    # float32 with TF32 products: u_p = 2^-11 dominates sqrt(k) u_a until k = 2^26
    t = tolerance("float32", size=256, products="tfloat32")
    assert t.rtol == pytest.approx(SAFETY * 2.0**-11) and "u_prod(tfloat32)" in t.reason
    assert unit_roundoff("tfloat32") == 2.0**-11


def test_random_composition() -> None:
    lin = tolerance("float32", size=4, depth=16)
    rnd = tolerance("float32", size=4, depth=16, composition="random")
    assert lin.rtol == pytest.approx(SAFETY * 16 * 2 * 2.0**-24)
    # independent errors add in quadrature: sqrt(D), and sqrt(lambda C) for C
    assert rnd.rtol == pytest.approx(math.sqrt(LAMBDA * SAFETY) * 4 * 2 * 2.0**-24)
    assert "sqrt(D=16)" in rnd.reason
    assert tolerance("float32", size=4, composition="random").rtol < tolerance(
        "float32", size=4).rtol
    with pytest.raises(ValueError, match="composition"):
        tolerance("float32", composition="worst")


def test_compare_floor() -> None:
    e = np.array([1e-3, -2e-3])
    a = e * (1 + 1e-5)
    t = tolerance("float32")
    # the default unit scale hides a relative error of 1e-5 on entries of size 1e-3 ...
    assert t.compare(a, e).ok
    # ... the plain normwise relative error does not
    c = t.compare(a, e, floor=0.0)
    assert c.scale == 2e-3 and not c.ok
    assert t.compare(np.zeros(2), np.zeros(2), floor=0.0).scale == 1.0
