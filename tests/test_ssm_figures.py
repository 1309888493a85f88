"""The claims of the state-space figure (nlaverify.ssm_figures): the selective scan's FLOPs,
counted in its jaxpr, are affine in L with c0 = -2dN (the first step has no A-bar x); causal
attention's are c2 L^2 + c3 L; zero-order hold is exact to float64 rounding; Mamba's Euler B
error tends to the proved leading term (1/2)|a b u| Delta^2 (relative gap O(Delta)); the
bilinear rule is third order."""

from __future__ import annotations

import numpy as np

from nlaverify.ssm_figures import discretization_errors, mixing_flops
from nlaverify.tolerance import tolerance


def test_scan_is_affine_and_attention_quadratic() -> None:
    d, N = 8, 4
    lengths = [4, 8, 16]
    f = mixing_flops(lengths, d=d, N=N)
    scan = np.asarray(f["scan"])
    c1 = (scan[1] - scan[0]) // 4
    assert np.array_equal(scan, c1 * np.asarray(lengths) - 2 * d * N)
    att = np.asarray(f["attention"], dtype=np.int64)
    L = np.asarray(lengths, dtype=np.int64)
    A = np.stack([L**2, L], 1)
    sol = np.linalg.solve(A[:2].astype(float), att[:2].astype(float))
    c2, c3 = (round(float(c)) for c in sol)
    assert np.array_equal(att, c2 * L**2 + c3 * L) and c2 > 0


def test_discretization_errors_follow_their_orders() -> None:
    deltas = np.array([1e-4, 1e-3, 1e-2])
    e = discretization_errors(deltas)
    # zero-order hold: exact up to the rounding of a few float64 operations
    assert np.all(e["zoh"] <= tolerance("float64", size=1, depth=4).rtol)
    # Euler B: error / (1/2 |a b u| Delta^2) = 1 + O(Delta) (here |a| Delta / 3 at most)
    ratio = e["zoh_euler"] / e["euler_b_leading"]
    assert np.all(np.abs(ratio - 1) <= 1.5 * deltas), ratio
    # bilinear: third order (error ratio 10^3 per decade of Delta, within 10 %)
    slope = np.log10(e["bilinear"][1:] / e["bilinear"][:-1])
    assert np.all(np.abs(slope - 3) < 0.1), slope
