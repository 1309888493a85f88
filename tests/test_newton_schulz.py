"""Newton–Schulz kernels on every backend against the certified singular-value intervals.

The claim checked (Baggag & Saad §5.5): after ``k`` steps from singular values in
``[lower, upper]`` the singular values of the *computed* result lie in the certified interval
of :func:`nlaverify.optim.certify.certified_interval` widened by the rounding term of
:func:`nlaverify.optim.newton_schulz.rounding_bound` (tolerance model, carried through the
map), exact zeros stay in ``[0, zero_hi]``, and each one is within ``delta`` of the exact
scalar map applied to its input. In bfloat16 the a-priori term is vacuous for Muon's
coefficients and the quintic (the model's per-step term, about 0.8 resp. 0.3, throws the
values out of the basin), so there the per-step errors are measured, checked against the
model's per-step term, and carried through the same recursion (:func:`propagate`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

import nlaverify.optim.newton_schulz as ns
from nlaverify.backends import BackendUnavailable, get_namespace
from nlaverify.backends.host import to_float64
from nlaverify.errors import ArgumentError, DTypeError, ShapeError
from nlaverify.optim.certify import certified_interval, certified_trajectory
from nlaverify.strategies import SpectralMatrix, make_spectral_matrix, matrices_with_spectrum
from nlaverify.symbolic.exact import is_zero
from nlaverify.tolerance import Tolerance, tolerance

EPS = 1e-7  # newton_schulz's default eps, so the normalised spectrum is known exactly
SETS = {"muon": ns.MUON, "cubic": ns.CUBIC, "quintic": ns.QUINTIC}


def exact_map(coeffs: tuple, steps: int, s: np.ndarray) -> np.ndarray:
    """:math:`|p_k \\circ \\dots \\circ p_1|(s)` in 50-digit mpmath (the exact scalar map)."""
    plan = ns.schedule(coeffs, steps)
    with mpmath.workdps(50):
        out = []
        for x in s:
            v = mpmath.mpf(float(x))
            for c in plan:
                v = ns.odd_polynomial([mpmath.mpf(a.numerator) / a.denominator for a in c], v)
            out.append(float(abs(v)))
    return np.asarray(out)


def run(xp, G, coeffs=ns.MUON, steps=5, normalize=True):
    """:func:`newton_schulz`, jitted on JAX (one compilation per shape, not one per op)."""
    if xp.name != "jax":
        return ns.newton_schulz(xp, G, coeffs, steps, normalize=normalize)
    return _jitted(xp, tuple(coeffs), steps, normalize)(G)


@functools.cache
def _jitted(xp, coeffs, steps, normalize):
    import jax

    return jax.jit(lambda G: ns.newton_schulz(xp, G, coeffs, steps, normalize=normalize))


@functools.cache
def _jitted_step(xp, coeffs):
    import jax

    return jax.jit(lambda X: ns.newton_schulz_step(xp, X, coeffs))


def normalised(case: SpectralMatrix, normalize: bool) -> np.ndarray:
    s = case.singular_values
    return s / (float(np.sqrt(np.sum(s * s))) + EPS) if normalize else s


def check_spectrum(xp, G, case: SpectralMatrix, coeffs, steps, *, normalize, dtype="float64",
                   accumulation=None, bound=None) -> ns.RoundingBound:
    """The kernel's result has G's shape, its singular values lie in the certified interval
    plus the rounding term (zeros in [0, zero_hi]), and, sorted, each is within ``delta``
    of the exact map of the (normalised) input spectrum."""
    X = run(xp, G, coeffs, steps, normalize)
    assert tuple(X.shape) == tuple(G.shape), f"shape {tuple(X.shape)} != {tuple(G.shape)}"
    sigma = ns.singular_values(X)
    s = normalised(case, normalize)
    nonzero = s[s > 0]
    lower, upper = float(nonzero.min()), float(nonzero.max())
    cert = certified_interval(coeffs, steps, lower, upper)
    m, n = case.matrix.shape
    if bound is None:
        bound = ns.rounding_bound(coeffs, steps, dtype, max(m, n), m=min(m, n), lower=lower,
                                  upper=upper, normalize=normalize, accumulation=accumulation)
    assert bound.contains(sigma, cert, zeros=case.zeros > 0), (
        f"{sigma} leaves {bound.envelope(cert)} (zeros <= {bound.zero_hi:.3g}): {bound.reason}")
    expected = np.sort(exact_map(coeffs, steps, s))[::-1]
    assert np.max(np.abs(sigma - expected)) <= bound.delta, (sigma, expected, bound.delta)
    return bound


# -- float64: every backend, every coefficient set -------------------------------------------


@given(case=matrices_with_spectrum(), name=st.sampled_from(sorted(SETS)),
       steps=st.integers(1, 6), normalize=st.booleans(),
       backend=st.sampled_from(["numpy", "jax", "strict"]))
def test_float64_stays_in_certified_interval(case, name, steps, normalize, backend):
    xp = get_namespace(backend)
    bound = check_spectrum(xp, xp.asarray(case.matrix), case, SETS[name], steps,
                           normalize=normalize)
    # not vacuous: the float64 rounding term is below a single float32 rounding of the model
    assert max(bound.delta, bound.zero_hi) < tolerance("float32").rtol


@given(case=matrices_with_spectrum(lower=st.sampled_from([1e-3, 0.05, 0.3]), max_dim=8),
       name=st.sampled_from(sorted(SETS)), steps=st.integers(1, 5))
def test_float32_stays_in_interval_plus_rounding(case, name, steps):
    """float32 on NumPy and JAX, a-priori rounding term (non-vacuous: checked)."""
    for backend in ("numpy", "jax"):
        xp = get_namespace(backend)
        G = xp.asarray(case.matrix, dtype=xp.float32)
        bound = check_spectrum(xp, G, case, SETS[name], steps, normalize=True,
                               dtype="float32")
        assert bound.hi < 1.5 and bound.delta < 1.0, bound


@given(case=matrices_with_spectrum(lower=st.sampled_from([0.2, 0.5]), max_dim=6),
       steps=st.integers(1, 5))
def test_bfloat16_cubic_a_priori(case, steps):
    """The cubic is the one set whose a-priori bfloat16 bound stays finite (|p| <= 1 on
    [0, 2]): the upper end is certified plus the model's rounding term."""
    import jax.numpy as jnp

    xp = get_namespace("jax")
    G = xp.asarray(case.matrix, dtype=jnp.bfloat16)
    bound = ns.rounding_bound(ns.CUBIC, steps, "bfloat16", max(case.matrix.shape),
                              m=min(case.matrix.shape), lower=0.0, upper=1.0,
                              accumulation="float32")
    assert bound.hi < 1.25  # non-vacuous: 1 + the last step's rounding
    sigma = ns.singular_values(run(xp, G, ns.CUBIC, steps))
    assert np.all(sigma <= bound.hi), (sigma, bound)


def replay_errors(xp, G, coeffs, steps, normalize=True):
    """The computed iteration of :func:`newton_schulz`, step by step (jitted steps): its
    result, the measured spectral-norm errors (r_0, r_1, ..., r_k), each step's float64
    image of the computed input as reference, and the norms before each step."""
    npx = get_namespace("numpy")
    G64 = to_float64(G)
    X = ns.frobenius_normalize(xp, G, EPS) if normalize else G
    ref = ns.frobenius_normalize(npx, G64, EPS) if normalize else G64
    r = [np.linalg.norm(to_float64(X) - ref, 2)]
    tall = G64.shape[0] > G64.shape[1]
    X = xp.matrix_transpose(X) if tall else X
    norms = []
    for c in ns.schedule(coeffs, steps):
        X64 = to_float64(X)
        norms.append(np.linalg.norm(X64, 2))
        X = _jitted_step(xp, tuple(c))(X)
        r.append(np.linalg.norm(to_float64(X) - ns.newton_schulz_step(npx, X64, c), 2))
    return (xp.matrix_transpose(X) if tall else X), r, norms


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@given(case=matrices_with_spectrum(lower=st.sampled_from([1e-3, 0.1]), max_dim=8),
       name=st.sampled_from(sorted(SETS)), steps=st.integers(1, 5))
def test_low_precision_a_posteriori(dtype, case, name, steps):
    """Each measured step error is within the tolerance model's per-step term, and the
    measured errors carried through the map enclose the result (non-vacuously, Muon in
    bfloat16 included)."""
    import jax.numpy as jnp

    xp = get_namespace("jax")
    acc = "float32" if dtype == "bfloat16" else None
    G = xp.asarray(case.matrix, dtype=getattr(jnp, dtype))
    coeffs = SETS[name]
    m, n = sorted(case.matrix.shape)
    X, r, norms = replay_errors(xp, G, coeffs, steps)
    model = ns.rounding_bound(coeffs, 0, dtype, n, m=m, accumulation=acc).per_step[0]
    assert r[0] <= model, (r[0], model)
    for j, c in enumerate(ns.schedule(coeffs, steps)):
        model = ns.step_rounding(c, dtype, n, norms[j], accumulation=acc)
        assert r[j + 1] <= model, (j, r[j + 1], model)
    s = normalised(case, True)
    nz = s[s > 0]
    measured = ns.propagate(coeffs, steps, r, float(nz.min()), float(nz.max()))
    assert measured.hi < 2.0  # non-vacuous
    sigma = ns.singular_values(X)
    cert = certified_interval(coeffs, steps, float(nz.min()), float(nz.max()))
    assert measured.contains(sigma, cert, zeros=case.zeros > 0), (sigma, measured)


def test_a_priori_term_vacuous_for_muon_in_bfloat16():
    """Documented limit: the model's bfloat16 per-step term for Muon (kappa = 10.25)
    pushes the region past Muon's basin (p grows fast beyond 1.3)."""
    b = ns.rounding_bound(ns.MUON, 5, "bfloat16", 256, accumulation="float32")
    assert math.isinf(b.hi) and b.per_step[1] > 0.5
    assert ns.rounding_bound(ns.MUON, 5, "float32", 256).hi < 1.3


# -- the polar factor -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cubic", "quintic"])
@given(case=matrices_with_spectrum(lower=0.1, rank_deficient=False, max_dim=8))
def test_polar_factor_matches_svd(name, case):
    coeffs = SETS[name]
    s = normalised(case, True)
    lower, upper = float(s.min()), float(s.max())
    u = tolerance("float64", size=max(case.matrix.shape)).rtol
    traj = certified_trajectory(coeffs, 60, lower, upper)
    steps = next(k for k, (lo, hi) in enumerate(traj) if max(1 - lo, hi - 1) <= u)
    cert = certified_interval(coeffs, steps, lower, upper)
    bound = ns.rounding_bound(coeffs, steps, "float64", max(case.matrix.shape),
                              m=min(case.matrix.shape), lower=lower, upper=upper)
    # ||X - UV^T||_2 = max|1 - phi(sigma)| <= error, plus rounding, plus the SVD's own error
    # (the polar factor's condition number is 1/sigma_min)
    svd_tol = tolerance("float64", size=max(case.matrix.shape), condition=1 / lower).rtol
    tol = Tolerance(cert.error + bound.delta + svd_tol,
                    f"certified error {cert.error:.2g} after {steps} steps + rounding "
                    f"{bound.delta:.2g} + SVD {svd_tol:.2g}")
    for backend in ("numpy", "jax"):
        xp = get_namespace(backend)
        G = xp.asarray(case.matrix)
        assert tol.compare(run(xp, G, coeffs, steps), ns.polar_svd(xp, G)).ok, tol.reason


def test_polar_svd_backends_and_dtypes():
    import jax.numpy as jnp

    case = make_spectral_matrix(5, 3, 0.2, 1, rank_deficient=False)
    ref = ns.polar_svd(get_namespace("numpy"), case.matrix)
    assert tolerance("float64", size=5).compare(ref.T @ ref, np.eye(3)).ok
    for backend in ("jax", "strict", "mpmath", "sympy"):
        xp = get_namespace(backend)
        assert tolerance("float64", size=5, condition=5).compare(
            ns.polar_svd(xp, xp.asarray(case.matrix)), ref).ok, backend
    xp = get_namespace("jax")
    q = ns.polar_svd(xp, xp.asarray(case.matrix, dtype=jnp.bfloat16))
    assert q.dtype == jnp.bfloat16
    assert tolerance("bfloat16", size=5).compare(q, ref).ok


# -- JAX jit, exact and high-precision backends, CuPy -------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_jit(dtype):
    import jax
    import jax.numpy as jnp

    xp = get_namespace("jax")
    case = make_spectral_matrix(6, 9, 1e-2, 3)
    G = xp.asarray(case.matrix, dtype=getattr(jnp, dtype))
    jitted = jax.jit(lambda G: ns.newton_schulz(xp, G))(G)
    assert jitted.dtype == G.dtype and jitted.shape == G.shape
    # same operations, possibly fused differently: within the model's rounding of 5 steps
    acc = "float32" if dtype == "bfloat16" else None
    r = ns.step_rounding(ns.MUON, dtype, 9, 1.25, accumulation=acc)
    assert tolerance(dtype, size=9, depth=5, accumulation=acc).compare(
        jitted, ns.newton_schulz(xp, G)).max_abs <= 5 * 4**5 * r


def _right_gram_iteration(G: sympy.Matrix, coeffs, steps: int) -> sympy.Matrix:
    """An independent exact iteration: :math:`X \\leftarrow X\\,q(X^\\top X)` (the Gram
    matrix on the right, never transposed), :math:`p(x) = x\\,q(x^2)`."""
    X = G
    for c in ns.schedule(coeffs, steps):
        A = X.T * X
        Q = sympy.zeros(A.shape[0])
        P = sympy.eye(A.shape[0])
        for a in c:
            Q += sympy.Rational(a.numerator, a.denominator) * P
            P = P * A
        X = X * Q
    return X


@pytest.mark.parametrize("shape", [(2, 3), (3, 2), (2, 2)])
@pytest.mark.parametrize("name", ["cubic", "muon"])
def test_exact_on_sympy(shape, name):
    """Exact: the kernel on SymPy equals the right-Gram iteration, entry for entry (tall
    shapes through the transpose trick)."""
    xp = get_namespace("sympy")
    rng = np.random.default_rng(sum(shape))
    ints = rng.integers(-5, 6, shape[0] * shape[1])
    G = sympy.Matrix(*shape, [sympy.Rational(int(v), 7) for v in ints])
    X = ns.newton_schulz(xp, xp.asarray(np.array(G.tolist(), dtype=object)), SETS[name], 2,
                         normalize=False)
    ref = _right_gram_iteration(G, SETS[name], 2)
    assert all(is_zero(X[i, j] - ref[i, j]) for i in range(shape[0]) for j in range(shape[1]))
    # a broken transpose trick (in, not out) would not even have the right shape
    assert X.shape == shape


def test_mpmath_matches_float64():
    case = make_spectral_matrix(4, 6, 1e-2, 5)
    xp = get_namespace("mpmath")
    X = ns.newton_schulz(xp, xp.asarray(case.matrix))
    ref = ns.newton_schulz(get_namespace("numpy"), case.matrix)
    b = ns.rounding_bound(ns.MUON, 5, "float64", 6, m=4, lower=case.lower)
    assert Tolerance(b.delta, b.reason).compare(X, ref).ok


def test_cupy_where_a_gpu_is_present():
    try:
        xp = get_namespace("cupy")
    except BackendUnavailable as exc:
        pytest.skip(f"no GPU: {exc}")
    case = make_spectral_matrix(8, 16, 1e-3, 0)  # pragma: no cover - needs a GPU
    for dtype in ("float64", "float32"):  # pragma: no cover - needs a GPU
        check_spectrum(xp, xp.asarray(case.matrix, dtype=getattr(xp, dtype)), case, ns.MUON,
                       5, normalize=True, dtype=dtype)


# -- planted mutants: each must fail the checks above ------------------------------------------


CASE = make_spectral_matrix(9, 6, 1e-3, 11)  # tall, full rank: every mutant applies
SQUARE = make_spectral_matrix(6, 6, 1e-3, 12, rank_deficient=False)


def _check(case=CASE, coeffs=ns.MUON, scale=1.0):
    case = replace(case, matrix=scale * case.matrix, singular_values=scale * case.singular_values,
                   lower=scale * case.lower)
    check_spectrum(get_namespace("numpy"), case.matrix, case, coeffs, 5, normalize=True)


def test_unmutated_passes():
    _check()
    _check(SQUARE)
    _check(scale=3.0, case=CASE)


def test_mutant_wrong_coefficient_is_caught(monkeypatch):
    a, b, c = ns.MUON
    wrong = (a, b + Fraction(1, 100), c)
    s = normalised(CASE, True)
    bound = ns.rounding_bound(ns.MUON, 5, "float64", 9, m=6, lower=float(s.min()))
    # provably visible: the exact maps differ by far more than the rounding term
    assert np.max(np.abs(exact_map(wrong, 5, s) - exact_map(ns.MUON, 5, s))) > 100 * bound.delta
    real = ns.newton_schulz

    def mutant(xp, G, coeffs=ns.MUON, steps=5, **kw):  # the kernel iterates the wrong set
        return real(xp, G, wrong, steps, **kw)

    monkeypatch.setattr(ns, "newton_schulz", mutant)
    with pytest.raises(AssertionError):
        _check()


def test_mutant_transpose_in_not_out_is_caught(monkeypatch):
    monkeypatch.setattr(ns, "_from_wide", lambda xp, X, tall: X)
    with pytest.raises(AssertionError, match="shape"):
        _check()


def test_mutant_gram_on_the_wrong_side_is_caught(monkeypatch):
    def mutant_step(xp, X, coeffs):  # A = X^T X but multiplied from the left: B X
        a = [ns._coef(xp, c) for c in coeffs]
        A = xp.matmul(xp.matrix_transpose(X), X)
        B = a[-1] * A
        for c in reversed(a[1:-1]):
            B = c * A + xp.matmul(B, A)
        return a[0] * X + xp.matmul(B, X)

    monkeypatch.setattr(ns, "newton_schulz_step", mutant_step)
    with pytest.raises(AssertionError, match="leaves"):  # square: runs, wrong spectrum
        _check(SQUARE)
    with pytest.raises(ValueError, match="mismatch"):  # rectangular: shapes do not fit
        _check()


def test_mutant_missing_normalisation_is_caught(monkeypatch):
    monkeypatch.setattr(ns, "frobenius_normalize", lambda xp, G, eps=EPS: G)
    with pytest.raises(AssertionError):
        _check()  # s in [1e-3, 1] iterated as is: not the map of s / ||s||_F
    with pytest.raises(AssertionError):
        _check(scale=0.5)


# -- bad input, strategy, flops ------------------------------------------------------------------


def test_bad_input_errors():
    xp = get_namespace("numpy")
    with pytest.raises(ShapeError, match=r"G must be a matrix.*\(4,\)"):
        ns.newton_schulz(xp, np.ones(4))
    with pytest.raises(ArgumentError, match="steps: expected an integer"):
        ns.newton_schulz(xp, np.ones((2, 3)), steps="5")
    with pytest.raises(ArgumentError, match="steps: expected an integer"):
        ns.newton_schulz(xp, np.ones((2, 3)), steps=-1)
    with pytest.raises(ArgumentError, match="a schedule of 2 steps"):
        ns.newton_schulz(xp, np.ones((2, 3)), [ns.CUBIC, ns.CUBIC], 3)
    with pytest.raises(ShapeError, match="polar_svd"):
        ns.polar_svd(xp, np.ones(3))
    with pytest.raises(ArgumentError, match="per_step: expected 3"):
        ns.propagate(ns.MUON, 2, [0.0])
    with pytest.raises(ArgumentError, match=r"'G'.*list"):
        ns.newton_schulz(xp, [[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(ArgumentError, match=r"'eps'.*None"):
        ns.newton_schulz(xp, np.ones((2, 3)), eps=None)
    with pytest.raises(ArgumentError, match=r"coeffs\[1\].*str"):
        ns.newton_schulz(xp, np.ones((2, 3)), (1.5, "x"))
    with pytest.raises(ArgumentError, match=r"coeffs.*str"):
        ns.newton_schulz(xp, np.ones((2, 3)), "abc")
    with pytest.raises(DTypeError, match=r"'G'.*complex128"):
        ns.newton_schulz(xp, np.ones((2, 3)) * 1j)
    with pytest.raises(ArgumentError, match=r"'m'.*-3"):
        ns.matmul_flops(-3, 5)
    with pytest.raises(ArgumentError, match=r"'n'.*2.5"):
        ns.matmul_flops(3, 2.5)


@given(case=matrices_with_spectrum(lower=1e-3))
def test_matrices_with_spectrum(case):
    s = case.singular_values
    sv = np.linalg.svd(case.matrix, compute_uv=False)
    assert tolerance("float64", size=max(case.matrix.shape)).compare(sv, s).ok
    assert s[0] == 1.0 and np.all(np.diff(s) <= 0) and np.all(s >= 0)
    if len(s) - case.zeros >= 2:
        assert case.lower == 1e-3


def test_matmul_flops():
    assert ns.matmul_flops(64, 64, ns.MUON, 5) == 30 * 64**3
    assert ns.matmul_flops(32, 64, ns.CUBIC, 1) == ns.matmul_flops(64, 32, ns.CUBIC, 1) \
        == 4 * 32 * 32 * 64
