r"""Quantizers of :mod:`nlaverify.lowrank` (Baggag & Saad §4.1).

The :math:`\Delta/2` bound (hypothesis over arrays, per tensor and per channel) with the
dtype's rounding, the b-bit integers and steps, non-finite values refused, Widrow's model of
the linear-layer error and the linear-layer bound; a quantizer that floors instead of rounding
fails.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _lowrank_helpers import _FLOATS, NP, Z
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError, NonFiniteError
from nlaverify.lowrank import _xp
from nlaverify.lowrank import quantization as qz
from nlaverify.tolerance import tolerance, unit_roundoff

# -- quantizers ----------------------------------------------------------------------------


def _ratio(x: np.ndarray, bits: int, symmetric: bool, axis: int | None) -> float:
    """max |x - Q(x)| / error_bound: the bound carries the rounding of x/Delta and
    Delta(q - z) in x's dtype (its unit roundoff), so no further slack."""
    xq, params = qz.fake_quantize(NP, x, bits, symmetric=symmetric, axis=axis)
    return float(np.max(np.abs(x - xq) / np.broadcast_to(qz.error_bound(params), x.shape)))


@given(x=arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(1, 6)), elements=_FLOATS),
       bits=st.integers(2, 8), symmetric=st.booleans(), axis=st.sampled_from([None, 0, 1, -1]))
def test_quantizer_error_is_at_most_half_a_step(x: np.ndarray, bits: int, symmetric: bool,
                                                axis: int | None) -> None:
    assert _ratio(x, bits, symmetric, axis) <= 1.0
    params = qz.quantization_params(NP, x, bits, symmetric=symmetric, axis=axis)
    q = qz.quantize(NP, x, params)
    assert np.all(q >= params.qmin) and np.all(q <= params.qmax)
    assert np.array_equal(q, np.round(q))
    if axis is not None:  # per channel: every step at most the per-tensor step
        whole = qz.quantization_params(NP, x, bits, symmetric=symmetric)
        assert np.all(params.scale <= whole.scale * (1 + tolerance(x.dtype).rtol))


def test_floor_quantizer_fails_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted mutant: floor in place of round doubles the worst error (up to one step)."""
    x = np.random.default_rng(6).standard_normal((16, 8))
    for symmetric in (True, False):
        assert _ratio(x, 4, symmetric, 1) <= 1.0
    monkeypatch.setattr(_xp, "round_half_even", _xp.floor)
    for symmetric in (True, False):
        assert _ratio(x, 4, symmetric, 1) > 1.5


def test_quantizers_refuse_non_finite_values() -> None:
    """A NaN maximum took the "all zero, step 1" branch (fake_quantize([0.3, 0.01, nan])
    gave [0, 0, nan]); an inf gave all NaN."""
    for x in ([0.3, 0.01, np.nan], [1.0, np.inf, 0.5], [-np.inf, 1.0, 2.0]):
        for symmetric in (True, False):
            with pytest.raises(NonFiniteError, match="'x'"):
                qz.fake_quantize(NP, np.array(x), 8, symmetric=symmetric)
    per_channel = np.ones((3, 4))
    per_channel[1, 2] = np.nan
    with pytest.raises(NonFiniteError, match="'x'"):
        qz.quantization_params(NP, per_channel, 4, axis=1)
    with pytest.raises(NonFiniteError, match="'x'"):
        qz.quantization_params(get_namespace("jax"), get_namespace("jax").asarray(per_channel),
                               4, symmetric=False)


def test_quantizer_integers_and_step_are_b_bits() -> None:
    """The integers fit in ``bits`` bits (symmetric [-(2^(b-1)-1), 2^(b-1)-1], asymmetric
    [0, 2^b-1]), the step is max|x|/(2^(b-1)-1), resp. (max - min)/(2^b-1), and the
    extremes are reached: a quantizer using b+1 bits or a doubled step fails."""
    x = np.random.default_rng(12).standard_normal((6, 5))
    x[0, 0] = -np.abs(x).max() * 1.5  # the largest magnitude is negative
    for bits in (2, 4, 8):
        p = qz.quantization_params(NP, x, bits)
        q = qz.quantize(NP, x, p)
        top = 2 ** (bits - 1) - 1
        assert q.min() == -top and q.max() <= top and np.array_equal(q, np.round(q))
        assert p.scale == np.abs(x).max() / top
        lo, hi = qz.covered_interval(p)  # half a step beyond the extreme integers, no more
        assert hi == p.scale * (top + 0.5) and lo == -hi
        pa = qz.quantization_params(NP, x, bits, symmetric=False)
        qa = qz.quantize(NP, x, pa)
        assert qa.min() == 0 and qa.max() == 2**bits - 1
        assert tolerance(np.float64).compare(pa.scale, (x.max() - x.min()) / (2**bits - 1)).ok


def test_error_bound_carries_the_dtype_rounding() -> None:
    r"""In bfloat16 (:math:`u = 2^{-8}`) an 8-bit quantizer's step is comparable to the
    rounding of :math:`x/\Delta` and :math:`\Delta q`: the measured error exceeds
    :math:`\Delta/2` and stays within :func:`error_bound` (:math:`\Delta/2 + u(2M +
    \Delta)`). Bits beyond a dtype's significand are refused."""
    import jax.numpy as jnp

    jx = get_namespace("jax")
    x = np.random.default_rng(0).standard_normal(1000)
    xb = jx.astype(jx.asarray(x), jnp.bfloat16)
    xq, p = qz.fake_quantize(jx, xb, 8)
    err = np.abs(np.asarray(xb, dtype=np.float64) - np.asarray(xq, dtype=np.float64)).max()
    assert p.roundoff == unit_roundoff("bfloat16")
    assert err > float(p.scale) / 2                      # Delta/2 alone fails in bfloat16
    assert err <= float(np.asarray(qz.error_bound(p), dtype=np.float64))
    x32 = x.astype(np.float32)
    for bits, symmetric in ((24, False), (25, True)):
        assert _ratio(x32, bits, symmetric, None) <= 1.0
    for bits, symmetric in ((25, False), (26, True)):
        with pytest.raises(ArgumentError, match=r"'bits'.*float32"):
            qz.quantization_params(NP, x32, bits, symmetric=symmetric)


def test_linear_output_error_rms_is_widrows_model() -> None:
    r"""Draw :math:`E_{kj}` uniform on :math:`[-\Delta_j/2, \Delta_j/2]` (Widrow's model)
    and standardise :math:`Z = (XE)_{ij}/\text{rms}_{ij}`: :math:`\mathbb E Z^2 = 1` and
    :math:`\operatorname{Var}Z^2 = \kappa - 1 \le 2` (:math:`\kappa \le 3`, the kurtosis
    of a weighted sum of uniforms, each of kurtosis 9/5). Two-sided, five standard errors;
    the mutant :math:`\Delta^2/3` (:math:`\mathbb E Z^2 = 1/4`) fails by far. The exact
    variance :math:`\Delta^2/12` is proved (``lowrank_quantized_linear_bound``)."""
    rng = np.random.default_rng(13)
    X = rng.standard_normal((1, 16))  # one row: the six Z_j of a draw are independent
    step = rng.uniform(0.5, 2.0, (1, 6))
    rms = qz.linear_output_error_rms(NP, X, step, (16, 6))
    R = 2000
    E = (rng.random((R, 16, 6)) - 0.5) * step
    Z2 = ((X @ E) / rms) ** 2
    n = Z2.size
    assert abs(float(Z2.mean()) - 1.0) <= Z * math.sqrt(2.0 / n), Z2.mean()
    wrong = np.sqrt((X * X) @ (np.ones((16, 6)) * step) ** 2 / 3)
    assert abs(float((((X @ E) / wrong) ** 2).mean()) - 1.0) > Z * math.sqrt(2.0 / n)


def test_round_half_even_on_every_backend() -> None:
    ties = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]
    want = [-2, -2, 0, 0, 2, 2]
    for name in ("numpy", "jax", "sympy", "mpmath"):
        xp = get_namespace(name)
        got = [float(v) for v in np.asarray(_xp.round_half_even(xp, xp.asarray(ties)))]
        assert got == want, name


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("axis", [None, 1])
def test_quantized_linear_layer_bound(dtype: type, symmetric: bool, axis: int | None) -> None:
    rng = np.random.default_rng(7)
    X = rng.standard_normal((16, 32)).astype(dtype)
    W = rng.standard_normal((32, 24)).astype(dtype)
    for bits in range(2, 9):
        Wq, params = qz.fake_quantize(NP, W, bits, symmetric=symmetric, axis=axis)
        err = np.abs(X.astype(np.float64) @ (W - Wq).astype(np.float64))
        B = qz.linear_output_error_bound(NP, X, params.scale, W.shape).astype(np.float64)
        slack = tolerance(dtype, size=32, depth=2).rtol * float((np.abs(X) @ np.abs(W)).max())
        assert np.all(err <= B + slack), bits
        rms = qz.linear_output_error_rms(NP, X, params.scale, W.shape)
        assert np.all(rms <= B * (1 + tolerance(dtype).rtol))  # the model sits below the bound

