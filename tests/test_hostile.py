"""Inputs that break naive kernels: every op stays finite and accurate, or raises clearly.

Logits of :math:`\\pm 10^4`, equal logits, :math:`-\\infty` entries and all-masked rows;
SiLU/sigmoid pre-activations far below :math:`-17`; LayerNorm/RMSNorm rows of huge and
tiny norm. Each op runs on every float backend (``numpy``, ``jax``, ``strict``) in
float64 and float32 and is compared, forward and VJP, with the same function on the
mpmath reference (50 digits) under :func:`nlaverify.tolerance.tolerance`, with the
condition estimates derived for such inputs (:func:`nlaverify.strategies.hostile_op_cases`).
The naive forms are planted (softmax without the max shift, the tanh sigmoid, the
unscaled root mean square) and must fail the same checks. See ``docs/guide/precision.md``,
"Inputs that break naive kernels".
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from nlaverify.backends import dtype_name, get_namespace, to_float64
from nlaverify.crosscheck import case_condition, case_size, run_vjp
from nlaverify.errors import NonFiniteError
from nlaverify.identities import load_catalogue
from nlaverify.ops import activations, moe, norms, softmaxes
from nlaverify.ops.registry import OPS, fixed_routing_mask
from nlaverify.strategies import (
    HOSTILE_OPS,
    LOGIT_ROWS,
    NORM_ROWS,
    OpCase,
    hostile_activations,
    hostile_logits,
    hostile_norm_rows,
    hostile_op_cases,
    make_hostile_case,
)
from nlaverify.tolerance import SAFETY, Tolerance, tolerance

FLOAT_BACKENDS = ("numpy", "jax", "strict")
DTYPES = ("float64", "float32")
DIGITS = 50


# -- the check -----------------------------------------------------------------------


def compare(actual: Any, expected: Any, tol: Tolerance) -> float:
    """Normwise relative error of ``actual`` against ``expected`` (:meth:`Tolerance.compare`),
    where an entry that is exactly ``-inf`` in the reference (log-softmax of a masked
    entry: :math:`\\log 0`) must be ``-inf`` too and is left out of the norm; any other
    non-finite value is an infinite error."""
    a, e = to_float64(actual), to_float64(expected)
    if a.shape != e.shape:
        return math.inf
    ninf = e == -np.inf
    if not np.array_equal(a == -np.inf, ninf):
        return math.inf
    c = tol.compare(a[~ninf], e[~ninf])
    return c.max_abs / c.scale


def hostile_errors(case: OpCase, dtype: str, backends: Sequence[str] = FLOAT_BACKENDS,
                   subject: Any = None) -> dict[str, tuple[float, float]]:
    """``{backend: (error, bound)}`` of the output and every cotangent of ``case`` run in
    ``dtype`` against the mpmath reference; an exception, a non-finite value or a
    changed dtype is an infinite error. ``subject`` (an ``OpSpec``) replaces the op on
    the float backends only: a planted kernel is judged against the real reference."""
    ref_out, ref_cot = run_vjp(case, "mpmath", digits=DIGITS)
    ref = [ref_out, *ref_cot]
    tol = tolerance(dtype, size=case_size(case), condition=case_condition(case), depth=2)
    run = case if subject is None else dataclasses.replace(case, spec=dataclasses.replace(
        case.spec, forward=subject.forward, vjp=subject.vjp))
    out: dict[str, tuple[float, float]] = {}
    for b in backends:
        try:
            got_out, got_cot = run_vjp(run, b, dtype)
            got = [got_out, *got_cot]
            if len(got) != len(ref) or any(dtype_name(g.dtype) != dtype for g in got):
                out[b] = (math.inf, tol.rtol)
                continue
            out[b] = (max(compare(g, r, tol) for g, r in zip(got, ref, strict=True)),
                      tol.rtol)
        except Exception:  # a kernel that raises on valid input fails its row
            out[b] = (math.inf, tol.rtol)
    return out


def failures(errors: dict[str, tuple[float, float]]) -> list[str]:
    return [f"{b}: error {e:.3e} > bound {r:.3e}" for b, (e, r) in errors.items() if not e <= r]


@contextmanager
def quiet() -> Iterator[None]:
    """Planted naive kernels overflow: let them produce inf/nan instead of raising the
    RuntimeWarning that the test configuration turns into an error."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


# -- every op, every float backend, both precisions ----------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", HOSTILE_OPS)
@given(data=st.data())
def test_hostile_inputs_stay_finite_and_within_tolerance(op: str, dtype: str, data) -> None:
    case = data.draw(hostile_op_cases(op, dtype))
    bad = failures(hostile_errors(case, dtype))
    assert not bad, f"{op} {dtype} {case.sizes}: " + "; ".join(bad)


# -- the conventions -------------------------------------------------------------------


def _on(xp: Any, a: Any, dtype: str = "float64") -> Any:
    return xp.asarray(a) if xp.object_arrays else xp.asarray(a, dtype=getattr(xp, dtype))


ROWS = np.array([[1e4, 1e4 - 1.0, -1e4], [-np.inf, -np.inf, -np.inf], [2.0, -np.inf, 2.0],
                 [-1e4, -1e4, -1e4]])


@pytest.mark.parametrize("backend", [*FLOAT_BACKENDS, "mpmath"])
def test_all_masked_softmax_row_is_zero_with_zero_vjp(backend: str) -> None:
    xp = get_namespace(backend, digits=DIGITS) if backend == "mpmath" else get_namespace(backend)
    Z, G = _on(xp, ROWS), _on(xp, np.arange(12.0).reshape(4, 3))
    P = to_float64(softmaxes.softmax(xp, Z))
    (dZ,) = softmaxes.softmax_vjp(xp, G, Z)
    assert np.all(np.isfinite(P)) and np.all(np.isfinite(to_float64(dZ)))
    assert np.array_equal(P[1], np.zeros(3)) and np.array_equal(to_float64(dZ)[1], np.zeros(3))
    assert np.allclose(P[[0, 2, 3]].sum(axis=-1), 1.0)
    assert P[2, 1] == 0.0 and np.allclose(P[3], 1 / 3)


def test_all_masked_softmax_row_under_jit_and_autodiff() -> None:
    import jax
    import jax.numpy as jnp

    xp = get_namespace("jax")
    Z = jnp.asarray(ROWS)
    P = jax.jit(lambda z: softmaxes.softmax(xp, z))(Z)
    _, pullback = jax.vjp(lambda z: softmaxes.softmax(xp, z), Z)
    (dZ,) = pullback(jnp.ones_like(Z))
    assert np.array_equal(np.asarray(P)[1], np.zeros(3))
    assert np.all(np.isfinite(np.asarray(dZ))) and np.array_equal(np.asarray(dZ)[1], np.zeros(3))


@pytest.mark.parametrize("backend", [*FLOAT_BACKENDS, "mpmath"])
def test_all_masked_log_softmax_row_raises_naming_the_row(backend: str) -> None:
    xp = get_namespace(backend, digits=DIGITS) if backend == "mpmath" else get_namespace(backend)
    Z = _on(xp, ROWS)
    with pytest.raises(NonFiniteError, match=r"log_softmax: argument 'Z': expected at least "
                                             r"one entry > -inf .* got 1 row\(s\) with every "
                                             r"entry -inf at index 1"):
        softmaxes.log_softmax(xp, Z)
    with pytest.raises(NonFiniteError, match="log_softmax_vjp: argument 'Z'"):
        softmaxes.log_softmax_vjp(xp, _on(xp, np.ones((4, 3))), Z)
    ok = _on(xp, np.delete(ROWS, 1, axis=0))  # masked entries alone are fine: log 0 = -inf
    out = to_float64(softmaxes.log_softmax(xp, ok))
    finite = np.ones(out.shape, dtype=bool)
    finite[1, 1] = False
    assert out[1, 1] == -np.inf and np.all(np.isfinite(out[finite]))


def test_log_softmax_under_jit_gives_minus_inf_for_an_all_masked_row() -> None:
    import jax

    xp = get_namespace("jax")
    out = np.asarray(jax.jit(lambda z: softmaxes.log_softmax(xp, z))(jax.numpy.asarray(ROWS)))
    assert np.all(out[1] == -np.inf) and np.all(np.isfinite(out[0]))


@pytest.mark.parametrize("backend", FLOAT_BACKENDS)
def test_cross_entropy_rejects_minus_inf_logits(backend: str) -> None:
    xp = get_namespace(backend)
    Z = _on(xp, np.array([[1e4, -np.inf, 0.0]]))
    with pytest.raises(NonFiniteError, match="cross_entropy: argument 'Z': expected finite"):
        OPS["cross_entropy"].forward(xp, Z, xp.asarray(np.array([0])))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", FLOAT_BACKENDS)
def test_attention_core_with_a_fully_masked_score_row(backend: str, dtype: str) -> None:
    # `attention` and `attention_vjp` compute P = softmax(S) and dS from
    # softmax_vjp_from_output(dP, P); a causal mask always leaves the diagonal, but a
    # padding mask can hide every key of a query: that row must give A = 0 and dS = 0
    xp, mp = get_namespace(backend), get_namespace("mpmath", digits=DIGITS)
    S = np.array([[3e3, -np.inf, 3e3 - 1.0], [-np.inf] * 3, [0.5, 0.25, -np.inf]])
    V, dA = np.arange(6.0).reshape(3, 2) - 2.0, np.ones((3, 2))

    def run(ns: Any) -> list[Any]:
        P = softmaxes.softmax(ns, _on(ns, S, dtype))
        dP = ns.matmul(_on(ns, dA, dtype), ns.matrix_transpose(_on(ns, V, dtype)))
        return [P, ns.matmul(P, _on(ns, V, dtype)), softmaxes.softmax_vjp_from_output(ns, dP, P)]

    tol = tolerance(dtype, size=S.size, depth=2)
    for got, ref in zip(run(xp), run(mp), strict=True):
        assert compare(got, ref, tol) <= tol.rtol
        assert np.array_equal(to_float64(got)[1], np.zeros(to_float64(got).shape[1]))


@pytest.mark.parametrize("backend", FLOAT_BACKENDS)
def test_moe_token_routed_to_no_expert_is_zero_not_nan(backend: str) -> None:
    xp = get_namespace(backend)
    rng = np.random.default_rng(0)
    n, d, E, m = 3, 2, 3, 2
    mask = fixed_routing_mask(n, E)
    mask[1] = 0.0  # token 1 routed nowhere: its gate softmax row is all-masked
    X, scores = rng.standard_normal((n, d)), 1e4 * rng.standard_normal((n, E))
    W_in, W_out = rng.standard_normal((E, d, m)), rng.standard_normal((E, m, d))
    args = [_on(xp, a) for a in (X, scores, mask, W_in, W_out)]
    Y = to_float64(moe.moe(xp, *args))
    cots = [to_float64(c) for c in moe.moe_vjp(xp, _on(xp, np.ones((n, d))), *args)]
    assert np.all(np.isfinite(Y)) and all(np.all(np.isfinite(c)) for c in cots)
    assert np.array_equal(Y[1], np.zeros(d)) and np.array_equal(cots[1][1], np.zeros(E))


def test_the_exact_side_keeps_the_plain_formulas() -> None:
    from nlaverify.symbolic.exact import symbol_array

    xp = get_namespace("sympy")
    xp.reset_shifts()
    z = symbol_array("z", (1, 3))
    p = np.asarray(softmaxes.softmax(xp, z), dtype=object)
    assert not any(v.has(sympy.Piecewise) for v in p.reshape(-1))  # no guard in the proofs
    x, g = symbol_array("x", (2, 3)), symbol_array("gamma", (3,))
    y = np.asarray(norms.rmsnorm(xp, x, g, sympy.Symbol("epsilon", positive=True)))
    scales = set(xp._scales.values())
    assert len(scales) == 2 and not any(v.free_symbols & scales for v in y.reshape(-1))
    s = activations.sigmoid(xp, symbol_array("x", (1,)))[0]
    assert isinstance(s, sympy.Piecewise) and len(s.args) == 2  # one flat Piecewise


# -- sigmoid and SiLU: a few ulps *relative*, all the way down ---------------------------


def _grid(dtype: str) -> np.ndarray:
    x = np.concatenate([np.linspace(-100.0, 100.0, 2001), [-17.0, -88.0, -87.5, 0.0, 1e-30,
                                                           -1e-30, 5e-8, -5e-8]])
    return np.unique(x.astype(dtype).astype(np.float64))


def _relative_cases(xp: Any, x: Any) -> dict[str, tuple[Any, Any]]:
    """``{name: (value, relative condition of its evaluation)}`` for sigmoid, SiLU,
    SiLU' (the VJP at g = 1) and SwiGLU's first cotangent (at g = b = 1).

    The relative condition of the *evaluation* (inputs are exact): 1 for the products
    :math:`\\sigma(x)` and :math:`x\\sigma(x)`; for :math:`\\operatorname{SiLU}'(x) =
    \\sigma(x)(1 + x\\sigma(-x))`, the cancellation factor of the sum,
    :math:`(1 + |x\\sigma(-x)|)/|1 + x\\sigma(-x)|` (infinite at its zero near -1.28)."""
    ones = xp.ones_like(x)
    (d_silu,) = activations.silu_vjp(xp, ones, x)
    d_a, _ = activations.swiglu_vjp(xp, ones, x, ones)
    xs = to_float64(x)
    s_neg = 1.0 / (1.0 + np.exp(np.clip(xs, -700, 700)))
    with np.errstate(divide="ignore"):
        kappa = (1.0 + np.abs(xs * s_neg)) / np.abs(1.0 + xs * s_neg)
    one = np.ones_like(xs)
    return {"sigmoid": (activations.sigmoid(xp, x), one), "silu": (activations.silu(xp, x), one),
            "silu'": (d_silu, kappa), "swiglu d/da": (d_a, kappa)}


def relative_failures(backend: str, dtype: str) -> list[str]:
    r"""Entries where :math:`|a - e| > \mathrm{rtol}(\kappa)\,|e| + C\lambda(1 + |x|)`: the
    tolerance model in relative form, with Higham's underflow term :math:`\lambda` = the
    smallest *normal* number (XLA on the CPU flushes subnormal results to zero), carried
    by the factor :math:`x` of SiLU (:math:`|1 + x\sigma(-x)| \le 1 + |x|` for SiLU')."""
    grid = _grid(dtype)
    xp, mp = get_namespace(backend), get_namespace("mpmath", digits=DIGITS)
    got = _relative_cases(xp, _on(xp, grid, dtype))
    ref = _relative_cases(mp, mp.asarray(grid))
    lam = float(np.finfo(dtype).tiny)
    bad = []
    for name, (a, kappa) in got.items():
        a, e = to_float64(a), to_float64(ref[name][0])
        for x, ai, ei, k in zip(grid, a, e, kappa, strict=True):
            if not math.isfinite(k):
                continue
            rtol = tolerance(dtype, condition=max(1.0, float(k))).rtol
            floor = SAFETY * lam * (1.0 + abs(x))
            if not (math.isfinite(ai) and abs(ai - ei) <= rtol * abs(ei) + floor):
                bad.append(f"{name}({x:.6g}) = {ai:.6e}, expected {ei:.6e}")
    return bad


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", FLOAT_BACKENDS)
def test_sigmoid_and_silu_are_relatively_accurate_on_minus_100_to_100(backend: str,
                                                                       dtype: str) -> None:
    bad = relative_failures(backend, dtype)
    assert not bad, f"{len(bad)} entries, e.g. " + "; ".join(bad[:5])


# -- the naive forms, planted, fail the same checks ----------------------------------------


def _naive_softmax(xp: Any, Z: Any, axis: int = -1) -> Any:
    E = xp.exp(Z)  # the planted bug: no max shift
    return E / xp.sum(E, axis=axis, keepdims=True)


def _naive_softmax_vjp(xp: Any, G: Any, Z: Any, axis: int = -1) -> tuple[Any]:
    return (softmaxes.softmax_vjp_from_output(xp, G, _naive_softmax(xp, Z, axis), axis),)


@pytest.mark.parametrize("dtype", DTYPES)
def test_planted_softmax_without_max_shift_fails_the_hostile_check(dtype: str) -> None:
    # the audit's bug: it overflows only beyond ~709 (float64), so ordinary checks miss it
    naive = dataclasses.replace(OPS["softmax"], forward=_naive_softmax, vjp=_naive_softmax_vjp)
    case = make_hostile_case("softmax", dtype, seed=0)
    with quiet():
        bad = failures(hostile_errors(case, dtype, subject=naive))
    assert len(bad) == len(FLOAT_BACKENDS), bad
    assert not failures(hostile_errors(case, dtype))  # the control


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "cross_entropy", "attention",
                                "causal_attention", "moe"])
def test_planted_zero_stability_shift_fails_the_hostile_check(op: str, monkeypatch) -> None:
    # the same bug one level down: the namespace hook returns 0 instead of the row maximum
    cases = {dtype: make_hostile_case(op, dtype, seed=1) for dtype in DTYPES}
    for b in FLOAT_BACKENDS:
        xp = get_namespace(b)
        monkeypatch.setattr(xp, "stability_shift",
                            lambda z, axis=-1, xp=xp: xp.zeros_like(xp.sum(z, axis=axis,
                                                                           keepdims=True)))
    for dtype, case in cases.items():
        with quiet():
            bad = failures(hostile_errors(case, dtype))
        assert len(bad) == len(FLOAT_BACKENDS), (op, dtype, bad)


def _tanh_sigmoid_pair(xp: Any, x: Any) -> tuple[Any, Any]:
    half = xp.rational(1, 2)
    s = half * (1 + xp.tanh(x * half))  # the planted naive form
    return s, 1 - s


@pytest.mark.parametrize("backend", FLOAT_BACKENDS)
def test_planted_tanh_sigmoid_fails_the_relative_check(backend: str, monkeypatch) -> None:
    monkeypatch.setattr(activations, "_sigmoid_pair", _tanh_sigmoid_pair)
    bad = relative_failures(backend, "float32")
    assert any(b.startswith("sigmoid(-17)") for b in bad)
    assert {b.split("(")[0] for b in bad} == {"sigmoid", "silu", "silu'", "swiglu d/da"}


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_planted_unscaled_norm_fails_the_hostile_check(op: str, monkeypatch) -> None:
    # scale 1: the plain sqrt(mean(x^2) + eps), whose x^2 overflows for huge rows
    cases = {dtype: make_hostile_case(op, dtype, seed=2) for dtype in DTYPES}
    for b in FLOAT_BACKENDS:
        xp = get_namespace(b)
        monkeypatch.setattr(xp, "norm_scale",
                            lambda x, eps, axis=-1, xp=xp: xp.ones_like(xp.sum(x, axis=axis,
                                                                               keepdims=True)))
    for dtype, case in cases.items():
        with quiet():
            bad = failures(hostile_errors(case, dtype))
        assert len(bad) == len(FLOAT_BACKENDS), (op, dtype, bad)


def test_planted_uncancelled_scale_fails_the_lemma(monkeypatch) -> None:
    # without the exact square root that takes s out, the scale would stay in the proofs:
    # the lemma notices instead of passing vacuously
    xp = get_namespace("sympy")
    monkeypatch.setattr(xp, "_sqrt", sympy.sqrt)
    assert load_catalogue()["norm_scale_invariance"].derive().verdict == "failed"


# -- the lemmas and the strategies ---------------------------------------------------------


@pytest.mark.parametrize("lemma", ["softmax_denominator_at_least_one", "sigmoid_stable_branches",
                                   "norm_scale_invariance"])
def test_new_lemmas_are_proved(lemma: str) -> None:
    assert load_catalogue()[lemma].derive().verdict == "proved"


@given(Z=hostile_logits((5, 4), "float32"))
def test_hostile_logits_hold_every_row_kind(Z: np.ndarray) -> None:
    assert len(LOGIT_ROWS) == 5
    finite = np.isfinite(Z)
    assert np.array_equal(Z[finite], Z[finite].astype(np.float32))
    assert np.sum(~finite.any(axis=-1)) == 1  # one all-masked row
    assert np.any(np.abs(Z[finite]) > 9e3) and (Z[~finite] == -np.inf).all()
    assert any(len(set(r)) == 1 for r in Z)  # a row of equal logits


@given(Z=hostile_logits((3, 6), masked=False))
def test_hostile_logits_without_masks(Z: np.ndarray) -> None:
    assert np.all(np.isfinite(Z))


@given(x=hostile_activations("float32", shape=(2, 8)))
def test_hostile_activations_hold_the_special_values(x: np.ndarray) -> None:
    assert {-17.0, -100.0, 100.0, 0.0} <= set(x.reshape(-1).tolist())
    assert np.any((x != 0) & (np.abs(x) < np.finfo(np.float32).tiny))  # subnormal


@pytest.mark.parametrize("dtype", DTYPES)
@given(data=st.data())
def test_hostile_norm_rows_break_the_naive_square(dtype: str, data) -> None:
    x = data.draw(hostile_norm_rows(d=4, dtype=dtype))
    assert x.shape == (len(NORM_ROWS), 4)
    big = np.sqrt(np.finfo(dtype).max)
    assert np.any(np.abs(x) > big)  # x*x overflows in dtype
    assert np.any((x != 0) & (np.abs(x) < np.finfo(dtype).tiny))  # subnormal
    assert any(len(set(r)) == 1 and r[0] != 0 for r in x)  # a constant row
    assert np.array_equal(x, x.astype(dtype).astype(np.float64))


def test_hostile_op_cases_rejects_an_op_without_hostile_inputs() -> None:
    with pytest.raises(ValueError, match=r"hostile_op_cases: argument 'op': expected one of "
                                         r"softmax, .* got 'affine'"):
        make_hostile_case("affine", "float64", 0)


# --- review findings: rows at the top of the float range, eps out of range, GELU at 2e38 ---

@pytest.mark.parametrize("backend", ["numpy", "jax", "strict"])
@pytest.mark.parametrize(("dtype", "big"), [("float32", 1.7e38), ("float64", 5e307)])
def test_norms_of_rows_at_the_top_of_the_range(backend: str, dtype: str, big: float) -> None:
    # XLA computes x/s as x*(1/s): a scale that is not a capped power of two made 1/s
    # subnormal, flushed to 0 on the CPU, and the row 0/0
    from nlaverify.backends import get_namespace, to_host
    from nlaverify.ops import layernorm, rmsnorm
    from nlaverify.tolerance import tolerance

    xp, mp = get_namespace(backend), get_namespace("mpmath", digits=50)
    row = np.array([[big, -big, 0.5 * big]])
    g, b = np.array([1.0, 2.0, 0.5]), np.array([0.1, 0.0, -0.1])
    dt = getattr(xp, dtype)
    for f, args in ((layernorm, (g, b)), (rmsnorm, (g,))):
        got = to_host(f(xp, xp.asarray(row, dtype=dt), *[xp.asarray(a, dtype=dt) for a in args],
                        1e-5))
        ref = f(mp, mp.asarray(row), *[mp.asarray(a) for a in args], 1e-5)
        tol = tolerance(dtype, size=3, depth=2, condition=3.0)  # sqrt(d) max|gamma| (norms)
        assert np.isfinite(got).all() and tol.compare(got, ref).ok, (f.__name__, got)


def test_eps_outside_the_dtype_is_a_clear_error() -> None:
    from nlaverify.backends import get_namespace
    from nlaverify.errors import ArgumentError
    from nlaverify.ops import layernorm, rmsnorm

    xp = get_namespace("numpy")
    x, g = np.ones((1, 2), np.float32), np.ones(2, np.float32)
    with pytest.raises(ArgumentError, match=r"rmsnorm: argument 'eps': expected a number in"):
        rmsnorm(xp, x, g, 1e-50)
    with pytest.raises(ArgumentError, match=r"layernorm: argument 'eps'"):
        layernorm(xp, x, g, g, 1e39)
    assert np.isfinite(rmsnorm(xp, x.astype(np.float64), g.astype(np.float64), 1e-50)).all()


def test_gelu_forwards_do_not_overflow_below_the_largest_float() -> None:
    from nlaverify.backends import get_namespace
    from nlaverify.ops import gelu_erf, gelu_tanh

    xp = get_namespace("numpy")
    x = np.array([2e38, -2e38, 3e38], np.float32)
    with np.errstate(over="ignore"):  # x^3 inside tanh overflows to inf: tanh(inf) = 1
        for f in (gelu_erf, gelu_tanh):
            y = f(xp, x)
            assert np.isfinite(y).all() and y[0] == x[0] and y[1] == 0 and y[2] == x[2]
