"""State-space models (family ``ssm``): the discretizations against mpmath, the scans against
each other, an independent NumPy transcription of ``mamba_ssm``'s ``selective_scan_ref`` and
``jax.lax.associative_scan``; RWKV-4's stable WKV against the naive form and mpmath; the
l2 normalization and mean pooling against JAX autodiff; the exact identities, and planted
mistakes each one refutes."""

from __future__ import annotations

import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError
from nlaverify.identities import ssm as ids
from nlaverify.identities import ssm_derivatives as ids3
from nlaverify.identities import ssm_duality as ids2
from nlaverify.identities.core import load_catalogue
from nlaverify.ops import pooling, rwkv, ssm
from nlaverify.tolerance import tolerance

NP = get_namespace("numpy")
MP = get_namespace("mpmath")


def _rel_ok(got, want, tol) -> bool:
    """Entrywise *relative* error within ``tol.rtol`` (``want`` has no zero entry)."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray([float(w) for w in np.ravel(want)]).reshape(np.shape(got))
    return bool(np.all(np.abs(got - want) <= tol.rtol * np.abs(want)))


# -- discretization ---------------------------------------------------------------------------
Z = np.array([-700.0, -30.0, -1.0, -1e-3, -1e-9, -1e-300, 1e-12, 1e-5, 0.5, 3.0])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_phi1_is_accurate_to_a_few_ulps_relative_where_the_naive_form_cancels(dtype):
    z = Z.astype(dtype)
    want = ssm.phi1(MP, MP.asarray(z.astype(np.float64)))
    got = ssm.phi1(NP, z)
    assert got.dtype == np.dtype(dtype)
    assert _rel_ok(got, want, tolerance(dtype, depth=2))
    with np.errstate(all="ignore"):
        naive = (np.exp(z) - 1) / z  # the cancelling form
    assert not _rel_ok(naive, want, tolerance(dtype, depth=2))


def test_phi1_autodiff_at_zero_is_one_half():
    import jax

    jx = get_namespace("jax")
    assert float(jax.grad(lambda z: ssm.phi1(jx, z))(0.0)) == 0.5


def test_selective_scan_with_constant_inputs_is_the_lti_scan_for_every_rule():
    # Delta, B, C constant over time: the selective scan is the LTI scan of the same rule
    k = _mamba_inputs(12)
    L = k["u"].shape[0]
    dt = np.exp(k["delta_bias"])
    B, C = k["B"][0], k["C"][0]
    tol = tolerance("float64", size=L * 4, depth=3)
    for rule, discretize in ssm.DISCRETIZATIONS.items():
        got = ssm.selective_scan(NP, k["u"], np.broadcast_to(dt, k["u"].shape), k["A"],
                                 np.broadcast_to(B, (L, B.size)),
                                 np.broadcast_to(C, (L, C.size)), discretization=rule)
        Abar, Bbar = discretize(NP, dt[:, None], k["A"], B[None, :])
        want = ssm.lti_scan(NP, Abar, Bbar, np.broadcast_to(C, Abar.shape), k["u"])
        assert tol.compare(got, want).ok, rule


@pytest.mark.parametrize("backend", ["numpy", "jax", "mpmath"])
def test_zoh_at_a_zero_is_euler_without_a_division_by_zero(backend):
    xp = get_namespace(backend)
    A, B = xp.asarray([0.0, -2.0]), xp.asarray([3.0, 3.0])
    Abar, Bbar = ssm.discretize_zoh(xp, xp.asarray([0.5, 0.5]), A, B)
    assert float(np.asarray(Abar, dtype=object)[0]) == 1.0
    assert float(np.asarray(Bbar, dtype=object)[0]) == 1.5
    assert np.isfinite(float(np.asarray(Bbar, dtype=object)[1]))


def _zoh_steps(xp, a, b, deltas, us, rule):
    x = xp.asarray(0.0)
    for d, u in zip(deltas, us, strict=True):
        Ab, Bb = rule(xp, xp.asarray(d), xp.asarray(a), xp.asarray(b))
        x = Ab * x + Bb * u
    return x


def test_zoh_float64_tracks_the_exact_ode_solution_over_many_steps():
    # the ODE solution for piecewise-constant input is ZOH itself (identity ssm_zoh_exact),
    # evaluated at 50 digits; float64 over 200 steps, including a step with |Delta a| ~ 1e-12
    rng = np.random.default_rng(0)
    deltas = np.exp(rng.uniform(-28, 1, 200))
    us = rng.standard_normal(200)
    got = _zoh_steps(NP, -0.7, 1.3, deltas, us, ssm.discretize_zoh)
    want = _zoh_steps(MP, -0.7, 1.3, deltas, us, ssm.discretize_zoh)
    assert tolerance("float64", size=200, depth=2).compare(got, float(want)).ok


def test_euler_b_error_is_half_a_b_delta_squared_and_bounded_by_it():
    a, b = -1.7, 0.9
    ratios = []
    for d in 10.0 ** -np.arange(1, 7):
        _, bz = ssm.discretize_zoh(MP, MP.asarray(d), MP.asarray(a), MP.asarray(b))
        _, be = ssm.discretize_zoh_euler(MP, MP.asarray(d), MP.asarray(a), MP.asarray(b))
        err = float(np.asarray(bz - be, dtype=object)[()])
        bound = 0.5 * abs(a) * d * d * abs(b)
        assert abs(err) <= bound
        ratios.append(err / (0.5 * a * b * d * d))
    # the constant 1/2 is sharp: the ratio tends to 1 (first-order in Delta a)
    assert abs(ratios[-1] - 1) <= abs(a) * 1e-6


# -- scans ----------------------------------------------------------------------------------
def _mamba_reference(u, delta, A, B, C, D, z, delta_bias):
    """``selective_scan_ref`` of ``mamba_ssm`` transcribed with einsum, channels first
    (u: (d, L), B, C: (N, L)): an implementation independent of ``selective_scan``."""
    delta = np.logaddexp(0.0, delta + delta_bias[:, None])
    dA = np.exp(np.einsum("dl,dn->dln", delta, A))
    dBu = np.einsum("dl,nl,dl->dln", delta, B, u)
    x = np.zeros(A.shape)
    ys = []
    for i in range(u.shape[1]):
        x = dA[:, i] * x + dBu[:, i]
        ys.append(np.einsum("dn,n->d", x, C[:, i]))
    y = np.stack(ys, axis=1) + u * D[:, None]
    return y * (z / (1 + np.exp(-z)))


def _mamba_inputs(seed, L=9, d=3, N=4):
    rng = np.random.default_rng(seed)
    return dict(u=rng.standard_normal((L, d)), delta=rng.standard_normal((L, d)),
                A=-np.exp(rng.standard_normal((d, N))), B=rng.standard_normal((L, N)),
                C=rng.standard_normal((L, N)), D=rng.standard_normal(d),
                z=rng.standard_normal((L, d)), delta_bias=rng.standard_normal(d))


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_selective_scan_equals_mamba_reference(backend):
    xp = get_namespace(backend)
    k = _mamba_inputs(1)
    got = ssm.selective_scan(xp, *(xp.asarray(k[n]) for n in ("u", "delta", "A", "B", "C")),
                             D=xp.asarray(k["D"]), z=xp.asarray(k["z"]),
                             delta_bias=xp.asarray(k["delta_bias"]), delta_softplus=True)
    want = _mamba_reference(k["u"].T, k["delta"].T, k["A"], k["B"].T, k["C"].T, k["D"],
                            k["z"].T, k["delta_bias"]).T
    tol = tolerance("float64", size=9 * 4, depth=4)
    assert tol.compare(got, want).ok
    # the skip D and the gate matter: dropping either is far outside the bound
    no_d = _mamba_reference(k["u"].T, k["delta"].T, k["A"], k["B"].T, k["C"].T, 0 * k["D"],
                            k["z"].T, k["delta_bias"]).T
    assert not tol.compare(got, no_d).ok


@pytest.mark.parametrize("softplus", [True, False])
def test_selective_scan_vjp_and_jvp_match_jax_autodiff_with_batch_axes(softplus):
    import jax

    jx = get_namespace("jax")
    k = _mamba_inputs(10)
    names = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")
    # a batch of 2 sequences: the per-sequence arguments get a leading axis
    args = [np.stack([k[n], 0.5 * k[n]]) if n in ("u", "delta", "B", "C", "z") else k[n]
            for n in names]
    out, pull = jax.vjp(lambda *a: ssm.selective_scan(jx, *a, delta_softplus=softplus),
                        *map(jx.asarray, args))
    rng = np.random.default_rng(11)
    G = rng.standard_normal(out.shape)
    tol = tolerance("float64", size=9 * 4, depth=4)
    for name, got, want in zip(names, ssm.selective_scan_vjp(NP, G, *args,
                                                             delta_softplus=softplus),
                               pull(jx.asarray(G)), strict=True):
        assert tol.compare(got, want).ok, name
    T = [rng.standard_normal(np.shape(a)) for a in args]
    _, want = jax.jvp(lambda *a: ssm.selective_scan(jx, *a, delta_softplus=softplus),
                      tuple(map(jx.asarray, args)), tuple(map(jx.asarray, T)))
    assert tol.compare(ssm.selective_scan_jvp(NP, tuple(T), *args, delta_softplus=softplus),
                       want).ok
    # a None tangent is a zero one
    T[1] = None
    _, want = jax.jvp(lambda u: ssm.selective_scan(jx, u, *map(jx.asarray, args[1:]),
                                                   delta_softplus=softplus),
                      (jx.asarray(args[0]),), (jx.asarray(T[0]),))
    only_u = (T[0], *(None,) * 7)
    assert tol.compare(ssm.selective_scan_jvp(NP, only_u, *args, delta_softplus=softplus),
                       want).ok


def test_selective_scan_carries_its_state_across_a_split():
    k = _mamba_inputs(2)
    args = [k[n] for n in ("u", "delta", "A", "B", "C")]
    full = ssm.selective_scan(NP, *args, D=k["D"])
    y1, h = ssm.selective_scan(NP, *(x[:4] if x.shape[0] == 9 else x for x in args),
                               D=k["D"], return_state=True)
    y2 = ssm.selective_scan(NP, *(x[4:] if x.shape[0] == 9 else x for x in args), D=k["D"],
                            state=h)
    assert tolerance("float64", size=9, depth=2).compare(np.concatenate([y1, y2]), full).ok


def test_selective_scan_names_a_bad_argument():
    k = _mamba_inputs(3)
    with pytest.raises(ArgumentError, match="discretization"):
        ssm.selective_scan(NP, *(k[n] for n in ("u", "delta", "A", "B", "C")),
                           discretization="euler")
    with pytest.raises(Exception, match="'A'"):
        ssm.selective_scan(NP, k["u"], k["delta"], k["A"][:, :2].T, k["B"], k["C"])
    empty = {n: k[n][:0] for n in ("u", "delta", "B", "C")}
    for f in (lambda: ssm.selective_scan(NP, empty["u"], empty["delta"], k["A"], empty["B"],
                                         empty["C"]),
              lambda: ssm.selective_scan_vjp(NP, empty["u"], empty["u"], empty["delta"], k["A"],
                                             empty["B"], empty["C"])):
        with pytest.raises(ArgumentError, match=r"at least one token \(L >= 1\)"):
            f()


def test_lti_scan_is_the_causal_convolution_with_batch_axes():
    rng = np.random.default_rng(4)
    d, N, L = 3, 5, 11
    Abar, Bbar = ssm.discretize_bilinear(NP, np.exp(rng.standard_normal((d, 1))),
                                         -np.exp(rng.standard_normal((d, N))),
                                         rng.standard_normal((d, N)))
    C, u = rng.standard_normal((d, N)), rng.standard_normal((2, L, d))
    K = ssm.ssm_kernel(NP, Abar, Bbar, C, L)
    assert tolerance("float64", size=L * N, depth=2).compare(
        ssm.lti_scan(NP, Abar, Bbar, C, u), ssm.causal_convolution(NP, K, u)).ok


def test_parallel_scans_equal_the_recurrence_and_jax_associative_scan():
    import jax

    jx = get_namespace("jax")
    rng = np.random.default_rng(5)
    a, b = rng.uniform(0.5, 1.0, (37, 3)), rng.standard_normal((37, 3))
    want = ssm.linear_recurrence(NP, a, b)
    tol = tolerance("float64", size=37, depth=2)
    assert tol.compare(ssm.associative_scan(NP, a, b), want).ok
    for chunks in (1, 5, 16, 37, [30, 7]):
        assert tol.compare(ssm.chunked_scan(NP, a, b, chunks), want).ok
    lax = jax.lax.associative_scan(lambda e1, e2: ssm.scan_combine(jx, e1, e2),
                                   (jx.asarray(a), jx.asarray(b)))
    assert tol.compare(np.asarray(lax[1]), want).ok
    with pytest.raises(ArgumentError, match="chunks"):
        ssm.chunked_scan(NP, a, b, [30, 6])


def test_ssd_attention_equals_its_recurrence_in_float64():
    rng = np.random.default_rng(6)
    T, N, d = 16, 4, 3
    log_a = -np.exp(rng.standard_normal(T))
    B, C, X = (rng.standard_normal((T, m)) for m in (N, N, d))
    assert tolerance("float64", size=T * N, depth=2).compare(
        ssm.ssd_attention(NP, log_a, B, C, X), ssm.ssd_recurrence(NP, log_a, B, C, X)).ok


# -- RWKV, pooling --------------------------------------------------------------------------
def _wkv_inputs(seed, T=8, d=3, key_scale=1.0):
    rng = np.random.default_rng(seed)
    return (-np.exp(rng.standard_normal(d)), rng.standard_normal(d),
            key_scale * rng.standard_normal((2, T, d)), rng.standard_normal((2, T, d)))


def test_wkv_stable_equals_naive_and_survives_large_keys_in_float32():
    w, u, k, v = _wkv_inputs(7)
    tol = tolerance("float64", size=8, depth=2)
    assert tol.compare(rwkv.wkv(NP, w, u, k, v), rwkv.wkv_naive(NP, w, u, k, v)).ok
    w32, u32, k32, v32 = (x.astype(np.float32) for x in _wkv_inputs(8, key_scale=200.0))
    with np.errstate(over="ignore", invalid="ignore"):
        naive = rwkv.wkv_naive(NP, w32, u32, k32, v32)
    assert not np.all(np.isfinite(naive))  # e^{k} overflows float32 near k = 88
    got = rwkv.wkv(NP, w32, u32, k32, v32)
    want = rwkv.wkv_naive(MP, *(MP.asarray(x.astype(np.float64)) for x in (w32, u32, k32, v32)))
    # a convex combination of the values: cond. 1 in the values, the keys' rounding amplified
    # by |k| in the exponent
    assert tolerance("float32", size=8, depth=2, condition=200.0 * 4).compare(
        got, np.asarray(want, dtype=np.float64)).ok


def test_l2_normalize_is_accurate_at_extreme_magnitudes_and_its_derivatives_match_jax():
    import jax

    rng = np.random.default_rng(9)
    u = rng.standard_normal((3, 4))
    want = u / np.linalg.norm(u, axis=-1, keepdims=True)
    tol = tolerance("float64", size=4, depth=2)
    for s in (1e-300, 1.0, 1e300):
        assert tol.compare(pooling.l2_normalize(NP, s * u), want).ok
    jx = get_namespace("jax")
    g = rng.standard_normal((3, 4))
    _, pull = jax.vjp(lambda x: pooling.l2_normalize(jx, x), jx.asarray(u))
    assert tol.compare(pooling.l2_normalize_vjp(NP, g, u)[0], pull(jx.asarray(g))[0]).ok
    tang = jax.jvp(lambda x: pooling.l2_normalize(jx, x), (jx.asarray(u),), (jx.asarray(g),))
    assert tol.compare(pooling.l2_normalize_jvp(NP, (g,), u), tang[1]).ok
    _, pull = jax.vjp(lambda x: pooling.mean_pool(jx, x), jx.asarray(u))
    h = rng.standard_normal(4)
    assert tol.compare(pooling.mean_pool_vjp(NP, h, u)[0], pull(jx.asarray(h))[0]).ok


def test_softplus_matches_logaddexp_and_its_gradient_is_the_sigmoid():
    import jax

    x = np.linspace(-800, 800, 4001)
    tol = tolerance("float64", depth=2)
    assert tol.compare(ssm.softplus(NP, x), np.logaddexp(0.0, x)).ok
    jx = get_namespace("jax")
    grad = jax.vmap(jax.grad(lambda t: ssm.softplus(jx, t)))(jx.asarray(x[1000:3001]))
    assert tol.compare(grad, 1 / (1 + np.exp(-x[1000:3001]))).ok


# -- the exact identities and planted mistakes ------------------------------------------------
def test_every_ssm_identity_is_proved():
    family = [i for i, x in load_catalogue().items() if x.family == "ssm"]
    rwkv = [i for i in family if i.startswith("ssm_rwkv_")]
    # 14 with the pipeline scan's VJP and JVP, 5 of Mamba-2 (scan, gated norm, chunks); RWKV's
    # 12 are derived by tests/test_rwkv_block.py
    assert len(family) - len(rwkv) == 19 and len(rwkv) == 12
    for i in (i for i in family if i not in rwkv):
        proof = load_catalogue()[i].derive()
        assert proof.verdict == "proved", (i, proof.detail)


PLANTED = [
    ("discretize_zoh", lambda xp, d, A, B: (xp.exp(d * A), d * B), ids.derive_zoh_exact,
     "phi1 dropped"),
    ("discretize_zoh", lambda xp, d, A, B: (1 + d * A, ssm.phi1(xp, d * A) * d * B),
     ids.derive_zoh_exact, "Euler for A"),
    ("scan_combine", lambda xp, f, s: (f[0] * s[0], f[0] * s[1] + f[1]),
     ids.derive_associative_scan, "combine in the wrong order"),
    ("ssm_decay_matrix", lambda xp, la: np.tril(np.ones((la.shape[0],) * 2, dtype=object)),
     ids2.derive_duality, "no decay in the mask"),
]


@pytest.mark.parametrize(("name", "wrong", "derive", "what"), PLANTED,
                         ids=[p[3] for p in PLANTED])
def test_a_planted_mistake_is_refuted(monkeypatch, name, wrong, derive, what):
    monkeypatch.setattr(ssm, name, wrong)
    assert derive().verdict == "failed", what


def test_a_selective_scan_vjp_and_jvp_without_the_softplus_derivative_are_refuted(monkeypatch):
    # the chain rule through Delta = softplus(delta + b) forgets its sigma(delta + b)
    monkeypatch.setattr(ssm, "sigmoid", lambda xp, x: xp.ones_like(x))
    assert ids3.derive_vjp().verdict == "failed"
    assert ids3.derive_jvp().verdict == "failed"


def test_a_wkv_without_rescaling_is_refuted(monkeypatch):
    # the state update forgets e^{m + w - m'}: decay lost
    def no_decay(xp, w, u, k, v):
        return rwkv.wkv_naive(xp, w * 0, u, k, v)

    monkeypatch.setattr(rwkv, "wkv", no_decay)
    assert ids2.derive_wkv().verdict == "failed"


def test_the_namespace_recurrence_is_the_same_on_numpy_and_jax():
    """``xp.linear_recurrence`` (the selective scan's states, adjoint and tangent): the
    NumPy loop and JAX's ``lax.scan`` agree forward and reversed, on a middle axis, and JAX
    promotes mixed dtypes as the loop does (lax.scan's carry alone would refuse them)."""
    import jax.numpy as jnp

    jx = get_namespace("jax")
    rng = np.random.default_rng(6)
    a, b = rng.uniform(0.5, 1.0, (2, 7, 3, 4)), rng.standard_normal((2, 7, 3, 4))
    tol = tolerance("float64", size=7, depth=2)
    for reverse in (False, True):
        want = NP.linear_recurrence(a, b, axis=-3, reverse=reverse)
        x = want[:, 6 if reverse else 0]
        for k in (range(5, -1, -1) if reverse else range(1, 7)):
            x = a[:, k] * x + b[:, k]
        assert np.array_equal(want[:, 0 if reverse else 6], x)
        got = jx.linear_recurrence(jx.asarray(a), jx.asarray(b), axis=-3, reverse=reverse)
        assert tol.compare(np.asarray(got), want).ok
    mixed = jx.linear_recurrence(jnp.asarray(a[0], jnp.float32), jnp.asarray(b[0], jnp.bfloat16))
    assert mixed.dtype == jnp.float32
