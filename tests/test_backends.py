"""The five namespaces run the same op function; mpmath keeps its own precision."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import sympy

from nlaverify import ops
from nlaverify.backends import available_backends, get_namespace
from nlaverify.tolerance import tolerance

Z = np.array([[0.5, -1.25, 2.0], [3.0, 0.0, -0.75]])


@pytest.mark.parametrize("name", ["numpy", "jax", "mpmath"])
def test_same_function_same_values(name: str) -> None:
    xp = get_namespace(name)
    ref = get_namespace("mpmath", digits=60)
    expected = ops.softmax(ref, ref.asarray(Z))
    got = ops.softmax(xp, xp.asarray(Z))
    tol = tolerance("float64", size=Z.shape[1])
    assert tol.compare(got, expected).ok


def test_sympy_namespace_is_exact() -> None:
    xp = get_namespace("sympy")
    P = np.asarray(ops.softmax(xp, xp.asarray(np.array([[0, 0, 0]]))), dtype=object)
    assert all(sympy.simplify(p - sympy.Rational(1, 3)) == 0 for p in P[0])
    assert xp.const_sqrt(2, pi_power=-1) == sympy.sqrt(2 / sympy.pi)


def test_mpmath_precision_is_private() -> None:
    before = mpmath.mp.dps
    xp = get_namespace("mpmath", digits=80)
    assert xp.digits == 80
    val = xp.const_sqrt(2)
    # 80 correct digits, whatever the global context says
    assert abs(val - xp.ctx.mpf(2) ** xp.ctx.mpf(0.5)) < xp.ctx.mpf(10) ** -78
    assert mpmath.mp.dps == before


def test_mpmath_digits_validated() -> None:
    with pytest.raises(ValueError, match="digits: expected >= 16"):
        get_namespace("mpmath", digits=8)


def test_available_backends_reports_reasons() -> None:
    avail = available_backends()
    assert avail["numpy"] is None and avail["sympy"] is None and avail["mpmath"] is None
    assert set(avail) == {"numpy", "jax", "cupy", "strict", "sympy", "mpmath"}
    assert avail["strict"] is None  # a test dependency: the CI stand-in for a GPU


def test_float32_stays_float32() -> None:
    xp = get_namespace("numpy")
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    for f in (ops.gelu_erf, ops.gelu_tanh, ops.silu, ops.relu):
        assert f(xp, x).dtype == np.float32, f.__name__
    assert ops.add_positions(xp, x).dtype == np.float32
    assert ops.layernorm(xp, x, np.ones(3, np.float32), np.zeros(3, np.float32), 1e-5).dtype \
        == np.float32
