r""":mod:`nlaverify.lowrank` on every backend (the same formulas as on NumPy) and its
bad-input errors."""

from __future__ import annotations

import numpy as np
import pytest
from _lowrank_helpers import NP

from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError, NonFiniteError, ShapeError
from nlaverify.lowrank import distill, prune
from nlaverify.lowrank import quantization as qz
from nlaverify.lowrank import svd as lsvd
from nlaverify.tolerance import tolerance

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

