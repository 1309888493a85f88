r"""Numeric and statistical checks of :mod:`nlaverify.lowrank` (Baggag & Saad §4.1).

* Truncated SVD: the measured errors :math:`\|A - A_k\|_{2,F}` equal :math:`\sigma_{k+1}` and
  the tail norm to the tolerance model.
* Randomized range finder (Halko, Martinsson & Tropp 2011): over :math:`R` seeded draws of
  :math:`\Omega`, the sample mean of the error is at most the HMT bound on its expectation
  plus five standard errors (:math:`s/\sqrt R`, :math:`s` the sample standard deviation; the
  seeds are fixed, so the outcome is deterministic). Planted mutants fail: no oversampling
  (:math:`l = k`) against the :math:`p = 5` bound on a spectrum with a gap, and power
  iterations without re-orthonormalisation in float32.
* Quantizers: the :math:`\Delta/2` bound (hypothesis over arrays, per tensor and per
  channel) and the linear-layer bound; a quantizer that floors instead of rounding fails.
* Distillation: the hand gradient against ``jax.grad``; the large-T limit.
* Pruning: exact sparsity, exact error.
"""

from __future__ import annotations

import importlib
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError, NonFiniteError, ShapeError
from nlaverify.lowrank import _xp, distill, prune
from nlaverify.lowrank import quantization as qz
from nlaverify.lowrank import svd as lsvd
from nlaverify.tolerance import tolerance, unit_roundoff

NP = get_namespace("numpy")
Z = 5.0  # standard errors


def _matrix(sigma: np.ndarray, m: int, seed: int) -> np.ndarray:
    """:math:`U\\operatorname{diag}(\\sigma)V^\\top` with Haar-like orthogonal factors."""
    rng = np.random.default_rng(seed)
    n = sigma.size
    U, _ = np.linalg.qr(rng.standard_normal((m, n)))
    V, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return (U * sigma) @ V.T


# -- truncated SVD ------------------------------------------------------------------------


@pytest.mark.parametrize(("backend", "dtype"), [("numpy", np.float64), ("numpy", np.float32),
                                               ("jax", np.float64), ("jax", np.float32)])
def test_truncated_svd_errors_are_eckart_young(backend: str, dtype: type) -> None:
    xp = get_namespace(backend)
    A64 = np.random.default_rng(1).standard_normal((12, 8))
    A = xp.asarray(A64.astype(dtype))
    s = np.linalg.svd(A64, compute_uv=False)
    tol = tolerance(dtype, size=12, depth=2)
    for k in (0, 1, 3, 8):
        U, sk, Vh = lsvd.truncated_svd(xp, A, k)
        assert tuple(U.shape) == (12, k) and tuple(Vh.shape) == (k, 8)
        measured = lsvd.approximation_errors(xp, A, lsvd.low_rank(xp, U, sk, Vh))
        predicted = lsvd.truncation_errors(NP, s, k)
        got = np.array([float(v) for v in measured])
        want = np.array([float(v) for v in predicted])
        assert tol.compare(got, want, floor=float(s[0])).ok, (k, got, want)


# -- randomized range finder: statistics ---------------------------------------------------


def _errors(A: np.ndarray, k: int, p: int, q: int, R: int, *, dtype: type = np.float64,
            reorthonormalise: bool = True) -> np.ndarray:
    """(Frobenius, spectral) errors of :math:`R` seeded range finders (float64 residual)."""
    out = np.empty((R, 2))
    Aw = A.astype(dtype)
    for r in range(R):
        if reorthonormalise:
            Q = lsvd.randomized_range_finder(NP, Aw, k, p, q, seed=1000 + r)
        else:  # the planted mutant: (A A^T)^q A Omega formed directly, one QR at the end
            Y = Aw @ lsvd.gaussian_test_matrix(A.shape[1], k + p, 1000 + r, dtype)
            for _ in range(q):
                Y = Aw @ (Aw.T @ Y)
            Q = np.linalg.qr(Y)[0]
        Q = Q.astype(np.float64)
        res = A - Q @ (Q.T @ A)
        out[r] = np.linalg.norm(res), np.linalg.norm(res, 2)
    return out


def _excess(samples: np.ndarray, bound: float) -> float:
    """(sample mean - bound) in standard errors of the mean."""
    return (float(samples.mean()) - bound) / (float(samples.std(ddof=1)) / math.sqrt(samples.size))


def test_range_finder_expected_error_below_hmt_bound() -> None:
    r"""HMT Thm. 10.5 / 10.6 on a spectrum with a gap (:math:`\sigma_{1..10} = 1`, the other
    50 equal to :math:`10^{-2}`), where the bounds are nearly tight (measured mean 0.123 vs
    0.132 for Frobenius at :math:`p = 5`). Mutant: no oversampling (:math:`l = k`),
    :math:`\mathbb E\|\Omega_1^{-1}\|_F^2 = \infty`: its mean is about 0.5, twenty standard
    errors above the :math:`p = 5` bound."""
    n, k, p, R = 60, 10, 5, 300
    sigma = np.r_[np.ones(k), 0.01 * np.ones(n - k)]
    A = _matrix(sigma, n, 0)
    frob, spec = lsvd.expected_error_bound(sigma, k, p)
    err = _errors(A, k, p, 0, R)
    assert _excess(err[:, 0], frob) <= Z, (err[:, 0].mean(), frob)
    assert _excess(err[:, 1], spec) <= Z, (err[:, 1].mean(), spec)
    mutant = _errors(A, k, 0, 0, R)
    assert _excess(mutant[:, 0], frob) > Z, (mutant[:, 0].mean(), frob)


def test_power_iterations_need_reorthonormalisation() -> None:
    r"""HMT Cor. 10.10 (spectral, :math:`q = 3`) in float32 on :math:`\sigma_j` falling from 1
    to :math:`10^{-3}` over the first :math:`k = 8` then :math:`10^{-4}`: with a QR after
    every product the mean error is within the bound; forming :math:`(AA^\top)^3A\Omega`
    directly, :math:`\sigma_k^7 = 10^{-21}` is below float32's :math:`u\sigma_1^7`, the
    trailing directions are lost and the error is about :math:`\sigma_k \gg` the bound."""
    n, k, p, q, R = 40, 8, 4, 3, 40
    sigma = np.r_[np.logspace(0, -3, k), 1e-4 * np.ones(n - k)]
    A = _matrix(sigma, n, 3)
    _, spec = lsvd.expected_error_bound(sigma, k, p, q)
    good = _errors(A, k, p, q, R, dtype=np.float32)
    assert _excess(good[:, 1], spec) <= Z, (good[:, 1].mean(), spec)
    bad = _errors(A, k, p, q, R, dtype=np.float32, reorthonormalise=False)
    assert _excess(bad[:, 1], spec) > Z, (bad[:, 1].mean(), spec)
    assert bad[:, 1].mean() > 3 * spec


def test_expected_error_bound_is_hmt_exactly() -> None:
    r"""The bounds pinned to closed forms (the statistical tests above only check one side):
    :math:`\sigma = (5, 4, 3, 0, 0, 0)`, :math:`k = 2`, :math:`p = 3`, so
    :math:`\sigma_{k+1} = 3`, the tail norm is 3 and :math:`k/(p-1) = 1`: HMT Thm. 10.5 gives
    :math:`\sqrt{1 + 1}\cdot 3 = 3\sqrt2`, Thm. 10.6 :math:`(1 + 1)\cdot 3 + e\sqrt5/3
    \cdot 3 = 6 + e\sqrt5`; with :math:`q = 1` (Cor. 10.10) the spectral bound is that of
    :math:`\sigma^3`, :math:`(54 + 9e\sqrt5)^{1/3}`. A looser or tighter constant (``p - 2``,
    :math:`2e`, no square root, a factor 0.9) fails."""
    sigma = np.array([5.0, 4.0, 3.0, 0.0, 0.0, 0.0])
    tol = tolerance(np.float64, size=6, depth=3)
    frob, spec = lsvd.expected_error_bound(sigma, 2, 3)
    assert tol.compare(np.array([frob, spec]),
                       np.array([3 * math.sqrt(2), 6 + math.e * math.sqrt(5)])).ok, (frob, spec)
    frob1, spec1 = lsvd.expected_error_bound(sigma, 2, 3, q=1)
    assert math.isnan(frob1)
    assert tol.compare(spec1, (54 + 9 * math.e * math.sqrt(5)) ** (1 / 3)).ok, spec1
    # a second spectrum, k/(p-1) = 1/2 and two tail values: sqrt(3/2)*5, (1+sqrt(1/2))*4 + ...
    frob, spec = lsvd.expected_error_bound(np.array([9.0, 7.0, 4.0, 3.0, 0.0, 0.0, 0.0]), 2, 5)
    want = (math.sqrt(1.5) * 5, (1 + math.sqrt(0.5)) * 4 + math.e * math.sqrt(7) / 5 * 5)
    assert tol.compare(np.array([frob, spec]), np.array(want)).ok, (frob, spec)
    for bad in (np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), np.array([3.0, 2.0, 1.0, 0.0, -1.0]),
                np.array([3.0, 2.0, np.nan, 1.0, 0.0])):
        with pytest.raises(ArgumentError, match=r"'sigma'.*non-increasing"):
            lsvd.expected_error_bound(bad, 2, 2)
    with pytest.raises(ArgumentError, match=r"'s'.*non-increasing"):
        lsvd.truncation_errors(NP, np.array([1.0, 2.0, 3.0]), 1)


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_range_finder_is_exact_beyond_the_rank(backend: str) -> None:
    xp = get_namespace(backend)
    rng = np.random.default_rng(4)
    A = rng.standard_normal((30, 3)) @ rng.standard_normal((3, 20))
    tol = tolerance(np.float64, size=30, depth=3, condition=float(np.linalg.cond(A[:, :3])))
    for k, p, q in ((3, 0, 0), (1, 2, 1), (2, 4, 2)):
        Q = np.asarray(lsvd.randomized_range_finder(xp, xp.asarray(A), k, p, q, seed=k))
        assert Q.shape == (30, k + p)
        assert tol.compare(Q @ (Q.T @ A), A, floor=float(np.abs(A).max())).ok
    _, s, _ = lsvd.randomized_svd(xp, xp.asarray(A), 3, 2, 1, seed=0)
    full = np.linalg.svd(A, compute_uv=False)[:3]
    assert tol.compare(np.asarray(s), full, floor=float(full[0])).ok


def test_randomized_svd_is_seeded() -> None:
    A = np.random.default_rng(5).standard_normal((15, 10))
    a = lsvd.randomized_svd(NP, A, 3, 2, seed=7)[1]
    assert np.array_equal(a, lsvd.randomized_svd(NP, A, 3, 2, seed=7)[1])
    omega = lsvd.gaussian_test_matrix(10, 5, 7)
    assert np.array_equal(a, lsvd.randomized_svd(NP, A, 3, 2, omega=omega)[1])


# -- quantizers ----------------------------------------------------------------------------

_FLOATS = st.floats(-100.0, 100.0, allow_nan=False, width=64)


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


# -- distillation --------------------------------------------------------------------------


@pytest.mark.parametrize(("dtype", "T"), [(np.float64, 0.5), (np.float32, 4.0)])
def test_distillation_gradient_matches_jax_grad(dtype: type, T: float) -> None:
    import jax

    jx = get_namespace("jax")
    rng = np.random.default_rng(8)
    zs, zt = (jx.asarray(rng.standard_normal((5, 7)).astype(dtype)) for _ in range(2))
    auto = jax.grad(lambda z: distill.distillation_loss(jx, z, zt, T))(zs)
    hand = distill.distillation_grad(jx, zs, zt, T)
    cond = max(1.0, 1.0 / T) ** 2 * T  # the logits enter as z/T; the loss carries T^2
    assert tolerance(dtype, size=7, depth=3, condition=cond).compare(hand, auto).ok


def test_distillation_tends_to_logit_matching() -> None:
    r"""The gap to the limit is :math:`O(1/T)`: halving it at every doubling of :math:`T`."""
    rng = np.random.default_rng(9)
    zs, zt = rng.standard_normal((4, 6)), rng.standard_normal((4, 6))
    limit = distill.logit_matching_grad(NP, zs, zt)
    gaps = [float(np.abs(distill.distillation_grad(NP, zs, zt, T) - limit).max())
            for T in (10.0, 20.0, 40.0, 80.0)]
    ratios = np.array(gaps[1:]) / np.array(gaps[:-1])
    assert np.all(np.abs(ratios - 0.5) < 0.05), ratios
    loss_gap = abs(distill.distillation_loss(NP, zs, zt, 1e3) - distill.logit_matching_loss(
        NP, zs, zt))
    assert loss_gap < 1e-2 * distill.logit_matching_loss(NP, zs, zt)
    # KL(p || p) = 0 up to the rounding of T^2 times a sum of V log-ratios
    tol = tolerance("float64", size=zs.shape[-1], depth=3)
    assert distill.distillation_loss(NP, zs, zs, 2.0) == pytest.approx(0.0, abs=tol.rtol)


def test_distillation_with_a_masked_teacher_class() -> None:
    r"""A teacher logit :math:`-\infty` (masked vocabulary) has :math:`p_t = 0` and
    contributes :math:`0\log 0 = 0`: the loss is the KL over the live classes (computed here
    from the renormalised teacher), not NaN; the gradient stays finite and equals
    ``jax.grad``."""
    import jax

    zs = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
    zt = np.array([[0.0, -np.inf, 1.0], [1.0, 2.0, -np.inf]])
    T = 2.0
    want = 0.0
    for s_row, t_row in zip(zs, zt, strict=True):
        live = np.isfinite(t_row)
        pt = np.exp(t_row[live] / T) / np.exp(t_row[live] / T).sum()
        log_ps = s_row / T - np.log(np.exp(s_row / T).sum())
        want += float(np.sum(pt * (np.log(pt) - log_ps[live])))
    want *= T * T / zs.shape[0]
    tol = tolerance(np.float64, size=3, depth=3)
    assert tol.compare(distill.distillation_loss(NP, zs, zt, T), want).ok
    assert tol.compare(distill.distillation_loss(NP, zs[:1], zt[:1], T), 1.5798520834428023).ok
    jx = get_namespace("jax")
    auto = jax.grad(lambda z: distill.distillation_loss(jx, z, jx.asarray(zt), T))(
        jx.asarray(zs))
    hand = distill.distillation_grad(jx, jx.asarray(zs), jx.asarray(zt), T)
    assert np.all(np.isfinite(np.asarray(auto))) and tol.compare(hand, auto).ok


def test_distillation_temperature_forms() -> None:
    """T as a 0-d NumPy or JAX array is accepted (the same value); inf, nan, a vector or
    a string are refused."""
    jx = get_namespace("jax")
    rng = np.random.default_rng(14)
    zs, zt = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    ref = distill.distillation_loss(NP, zs, zt, 2.0)
    tol = tolerance(np.float64, size=4, depth=3)
    assert tol.compare(distill.distillation_loss(NP, zs, zt, np.array(2.0)), ref).ok
    assert tol.compare(distill.distillation_loss(jx, jx.asarray(zs), jx.asarray(zt),
                                                 jx.asarray(2.0)), ref).ok
    for T in (np.inf, np.nan, -np.inf, np.array([2.0]), "2", True, np.array(-1.0)):
        with pytest.raises(ArgumentError, match="'T'"):
            distill.distillation_loss(NP, zs, zt, T)


def test_pruned_count_reads_a_float_as_its_decimal() -> None:
    """0.29 * 100 is 28.999999999999996 in binary: the count is 29 (and 0.57 -> 57), for
    every percentage; a ceiling in place of the floor fails (3 at 0.5 -> 1, 10 at 0.25 -> 2)."""
    assert [prune.pruned_count(100, i / 100) for i in range(101)] == list(range(101))
    assert prune.pruned_count(100, np.float32(0.29)) == 29
    assert prune.pruned_count(3, 0.5) == 1 and prune.pruned_count(10, 0.25) == 2
    assert prune.pruned_count(7, 1 / 3) == 2 and prune.pruned_count(6, Fraction(1, 3)) == 2
    W = np.arange(1.0, 101.0)
    assert int(np.sum(prune.magnitude_prune(NP, W, 0.29)[1] == 0)) == 29


def test_pruning_tie_rule() -> None:
    """Equal magnitudes: the lower flat index (row-major) is pruned first, in unstructured
    and N:M pruning (the documented rule; reversing it fails; on SymPy the proof
    ``lowrank_pruning_error`` checks the same masks, and JAX runs the same stable argsort in
    ``test_backends_agree_with_numpy``)."""
    xp = NP
    W = xp.asarray(np.array([[1.0, -1.0, 0.5], [-1.0, 1.0, -0.5]]))
    for s, want in ((Fraction(1, 6), [1, 1, 0, 1, 1, 1]), (Fraction(1, 2), [0, 1, 0, 1, 1, 0]),
                    (Fraction(2, 3), [0, 0, 0, 1, 1, 0])):
        assert np.asarray(prune.magnitude_prune(xp, W, s)[1]).ravel().tolist() == want, s
    M = prune.nm_prune(xp, xp.asarray(np.array([[2.0, 1.0], [-2.0, 1.0], [2.0, 1.0],
                                                [1.0, 1.0]])), 2, 4)[1]
    assert np.asarray(M).T.tolist() == [[0, 1, 1, 0], [0, 0, 1, 1]]


# -- pruning -------------------------------------------------------------------------------


@given(W=arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(1, 6)), elements=_FLOATS),
       s=st.fractions(0, 1, max_denominator=8))
def test_magnitude_pruning_sparsity_and_error_are_exact(W: np.ndarray, s: Fraction) -> None:
    P, M = prune.magnitude_prune(NP, W, s)
    n = prune.pruned_count(W.size, s)
    assert int(np.sum(M == 0)) == n == math.floor(s * W.size)
    assert np.array_equal(P, M * W)
    smallest = np.sort((W * W).ravel())[:n].sum()
    tol = tolerance(np.float64, size=W.size)
    assert tol.compare(prune.pruning_error(NP, W, M), smallest, floor=float(smallest)).ok
    if n < W.size:  # every kept entry at least as large as every pruned one
        assert np.abs(W[M == 1]).min() >= (np.abs(W[M == 0]).max() if n else 0.0)


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_nm_pruning_keeps_n_of_every_m(backend: str) -> None:
    xp = get_namespace(backend)
    W = np.random.default_rng(10).standard_normal((8, 6))
    for axis in (0, 1):
        P, M = prune.nm_prune(xp, xp.asarray(W), 2, 4 if axis == 0 else 3, axis=axis)
        M = np.asarray(M)
        groups = M.reshape(2, 4, 6) if axis == 0 else M.reshape(8, 2, 3)
        assert np.all(groups.sum(axis=1 if axis == 0 else 2) == 2)
        assert np.array_equal(np.asarray(P), M * W)


# -- every backend runs the same formulas --------------------------------------------------


@pytest.mark.parametrize("backend", ["jax", "strict"])
def test_backends_agree_with_numpy(backend: str) -> None:
    from nlaverify.backends import to_host

    xp = get_namespace(backend)
    rng = np.random.default_rng(11)
    x, y = rng.standard_normal((8, 6)), rng.standard_normal((8, 6))
    tol = tolerance(np.float64, size=8, depth=3)
    cases = [
        lambda ns, a, b: qz.fake_quantize(ns, a, 4, symmetric=False, axis=1)[0],
        lambda ns, a, b: qz.fake_quantize(ns, a, 3)[0],
        lambda ns, a, b: prune.magnitude_prune(ns, a, 0.5)[0],
        lambda ns, a, b: prune.nm_prune(ns, a, 2, 4)[0],
        lambda ns, a, b: lsvd.randomized_svd(ns, a, 3, 2, 1)[1],
        lambda ns, a, b: distill.distillation_grad(ns, a, b, 2.0),
        lambda ns, a, b: distill.distillation_loss(ns, a, b, 2.0),
    ]
    for k, f in enumerate(cases):
        got = to_host(f(xp, xp.asarray(x), xp.asarray(y)))
        assert tol.compare(got, f(NP, x, y)).ok, k


# -- bad input -----------------------------------------------------------------------------


def test_bad_inputs_raise_clear_errors() -> None:
    A = np.ones((4, 3))
    with pytest.raises(ArgumentError, match=r"'k'.*\[0, 3\]"):
        lsvd.truncated_svd(NP, A, 4)
    with pytest.raises(ShapeError, match="'A'"):
        lsvd.truncated_svd(NP, np.ones(3), 1)
    with pytest.raises(ArgumentError, match="'p'"):
        lsvd.randomized_range_finder(NP, A, 2, 2)
    with pytest.raises(ArgumentError, match=r"'p'.*>= 2"):
        lsvd.expected_error_bound(np.ones(10), 3, 1)
    with pytest.raises(ArgumentError, match="'k'"):
        lsvd.expected_error_bound(np.ones(10), 1, 3)
    with pytest.raises(ArgumentError, match="k \\+ p"):
        lsvd.expected_error_bound(np.ones(5), 3, 3)
    with pytest.raises(ShapeError, match="'omega'"):
        lsvd.randomized_range_finder(NP, A, 1, 1, omega=np.ones((3, 3)))
    for bits, sym in ((0, False), (1, True), (2.5, True), (True, False), (33, False)):
        with pytest.raises(ArgumentError, match="'bits'"):
            qz.quantization_params(NP, A, bits, symmetric=sym)
    with pytest.raises(ArgumentError, match="'axis'"):
        qz.quantization_params(NP, A, 4, axis=2)
    for T in (0.0, -1.0):
        with pytest.raises(ArgumentError, match="'T'"):
            distill.distillation_loss(NP, A, A, T)
    with pytest.raises(ShapeError, match="'z_t'"):
        distill.distillation_grad(NP, A, np.ones((4, 4)), 1.0)
    with pytest.raises(ArgumentError, match="'sparsity'"):
        prune.magnitude_prune(NP, A, 1.5)
    with pytest.raises(ShapeError, match="multiple of m"):
        prune.nm_prune(NP, A, 2, 4, axis=1)
    with pytest.raises(ArgumentError, match="n <= m"):
        prune.nm_prune(NP, np.ones((4, 4)), 3, 2)
    for axis in (5, -3, 1.0, True):
        with pytest.raises(ArgumentError, match="'axis'"):
            prune.nm_prune(NP, np.ones((4, 4)), 2, 4, axis=axis)
    for W in (np.array(1.0), [1.0, 2.0, 3.0, 4.0]):
        with pytest.raises(ShapeError, match="'W'"):
            prune.nm_prune(NP, W, 2, 4)
    for fn in (lambda W: prune.magnitude_prune(NP, W, 0.5), lambda W: prune.nm_prune(NP, W, 2, 4)):
        with pytest.raises(NonFiniteError, match="'W'"):
            fn(np.array([1.0, np.nan, 2.0, 3.0]))


# -- the proofs fail on planted errors -----------------------------------------------------


def _derive(identity_id: str) -> str:
    from nlaverify.identities.core import _REGISTRY

    importlib.import_module("nlaverify.identities.lowrank")
    return _REGISTRY[identity_id].derive().verdict


def test_proofs_catch_planted_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _derive("lowrank_quantizer_error_bound") == "proved"
    with monkeypatch.context() as m:
        m.setattr(_xp, "round_half_even", _xp.floor)
        assert _derive("lowrank_quantizer_error_bound") == "failed"
    with monkeypatch.context() as m:
        m.setattr(lsvd, "truncation_errors", lambda xp, s, k: (s[k - 1], s[k - 1]) if k else (
            s[0], s[0]))
        assert _derive("lowrank_eckart_young") == "failed"
    with monkeypatch.context() as m:
        m.setattr(prune, "pruning_error", lambda xp, W, M: xp.sum(W * W * M))
        assert _derive("lowrank_pruning_error") == "failed"
    with monkeypatch.context() as m:
        m.setattr(qz, "linear_output_error_bound",
                  lambda xp, X, step, shape: xp.matmul(_xp.absolute(xp, X), xp.ones(shape)
                                                       * step) / 4)
        assert _derive("lowrank_quantized_linear_bound") == "failed"
