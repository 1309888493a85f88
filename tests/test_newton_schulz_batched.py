"""Newton–Schulz on stacks of matrices ``(..., m, n)``: slice by slice the same as one
matrix at a time, each slice normalised by its own norm (a normalisation over the whole
stack is a planted mutant that must fail), and, run to convergence, the batched polar
factor (Baggag & Saad §5.5)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nlaverify.optim.newton_schulz as ns
from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError
from nlaverify.optim.certify import certified_interval, certified_trajectory
from nlaverify.tolerance import Tolerance, tolerance

# -- batched (..., m, n) inputs ------------------------------------------------------------------


def _tall_stack(lead: tuple[int, ...], m: int, n: int, seed: int) -> np.ndarray:
    """A stack of tall ``m x n`` matrices ``Q diag(s) R`` (``Q`` orthonormal columns,
    ``R`` orthogonal, ``s`` in [0.5, 1]), each slice scaled by its own power of ten, so a
    normalisation over the whole stack, not per matrix, changes every slice's spectrum."""
    rng = np.random.default_rng(seed)
    out = np.empty((*lead, m, n))
    for idx in np.ndindex(*lead):
        Q = np.linalg.qr(rng.standard_normal((m, n)))[0]
        R = np.linalg.qr(rng.standard_normal((n, n)))[0]
        out[idx] = 10.0 ** rng.uniform(-2, 2) * (Q * rng.uniform(0.5, 1.0, n)) @ R
    return out


def _check_batched(G: np.ndarray) -> None:
    """A stack equals slice by slice (Muon's quintic), and with the cubic run to
    convergence it is the stack's polar factor (``polar_svd``, batched)."""
    xp = get_namespace("numpy")
    m, n = G.shape[-2:]
    X = ns.newton_schulz(xp, G)
    kappa = float(sum(abs(a) for a in ns.MUON))
    tol = tolerance("float64", size=m * n, depth=5 * 3 + 2, condition=kappa)
    for idx in np.ndindex(*G.shape[:-2]):
        assert tol.compare(X[idx], ns.newton_schulz(xp, G[idx])).ok, idx
    # every slice's normalised singular values lie in [0.5 / sqrt(n), 1]
    lower = 0.5 / math.sqrt(n)
    u = tolerance("float64", size=m).rtol
    traj = certified_trajectory(ns.CUBIC, 60, lower, 1)
    steps = next(k for k, (lo, hi) in enumerate(traj) if max(1 - lo, hi - 1) <= u)
    bound = ns.rounding_bound(ns.CUBIC, steps, "float64", m, m=n, lower=lower)
    svd_tol = tolerance("float64", size=m, condition=1 / lower).rtol
    polar = Tolerance(float(traj[steps][1] - traj[steps][0]) + bound.delta + svd_tol,
                      f"certified width after {steps} steps + rounding + SVD")
    assert polar.compare(ns.newton_schulz(xp, G, ns.CUBIC, steps), ns.polar_svd(xp, G)).ok


@given(lead=st.sampled_from([(2,), (3,), (2, 2)]), m=st.integers(2, 5), seed=st.integers(0, 99))
def test_batched_equals_slices_and_polar(lead, m, seed):
    n = int(np.random.default_rng(seed).integers(1, m))  # tall: n < m
    _check_batched(_tall_stack(lead, m, n, seed))


@pytest.mark.parametrize("mutant", ["normalise_whole_stack", "reverse_all_axes"])
def test_batched_mutants_are_caught(monkeypatch, mutant):
    if mutant == "normalise_whole_stack":
        monkeypatch.setattr(ns, "frobenius_normalize", lambda xp, G, eps=1e-7: G / (
            xp.sqrt(xp.sum(G * G)) + eps))
    else:
        monkeypatch.setattr(ns, "_to_wide", lambda xp, X, tall: xp.permute_dims(
            X, tuple(reversed(range(X.ndim)))) if tall else X)
    with pytest.raises((AssertionError, ValueError)):
        _check_batched(_tall_stack((3,), 4, 2, 1))


def test_schedule_accepts_arrays():
    rows = [ns.CUBIC, (Fraction(2), Fraction(-1)), ns.CUBIC]
    arr = np.array([[float(a) for a in r] for r in rows])
    assert ns.schedule(arr, 3) == [tuple(float(a) for a in r) for r in rows]
    assert ns.schedule(list(arr), 3) == ns.schedule(arr, 3)
    assert ns.schedule(np.array([1.5, -0.5]), 2) == [(1.5, -0.5)] * 2
    xp = get_namespace("numpy")
    G = np.random.default_rng(0).standard_normal((3, 4))
    np.testing.assert_array_equal(ns.newton_schulz(xp, G, arr, 3),
                                  ns.newton_schulz(xp, G, rows, 3))
    assert certified_interval(arr, 3, 0.1) == certified_interval(rows, 3, 0.1)
    with pytest.raises(ArgumentError, match="a schedule of 3 steps"):
        ns.schedule(arr, 2)
    with pytest.raises(ArgumentError, match="coeffs"):
        ns.schedule(np.ones((2, 2, 2)), 2)
