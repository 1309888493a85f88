"""The ``kronecker`` family's library code on every backend (against NumPy) and its
bad-input errors."""

from __future__ import annotations

import numpy as np
import pytest
from _kronecker_helpers import NP, _assert_close, _cond, _rng, _spd

from nlaverify.backends import get_namespace, to_float64
from nlaverify.curvature import kfac, kronecker, shampoo
from nlaverify.errors import ArgumentError, DTypeError, ShapeError
from nlaverify.tolerance import tolerance

# --------------------------------------------------------------------------- backends


@pytest.mark.parametrize("backend", ["jax", "strict", "mpmath"])
def test_every_backend_agrees_with_numpy(backend: str) -> None:
    xp = get_namespace(backend)
    rng = _rng(11)
    A, B, X = _spd(3, 1), _spd(2, 2), rng.standard_normal((3, 2))
    Am, G = rng.standard_normal((2, 2, 3)), rng.standard_normal((2, 2, 2, 2))
    cases = [
        (lambda ns, *a: kronecker.kron(ns, *a), (A, B)),
        (lambda ns, *a: kronecker.kron_matvec(ns, *a), (A, B, X)),
        (lambda ns, *a: kronecker.damped_kron_solve(ns, *a, 0.5), (A, B, X)),
        (lambda ns, *a: kfac.kfac_factors(ns, *a, mode="reduce", bias=True)[0], (Am, G)),
        (lambda ns, *a: kfac.exact_layer_block(ns, *a), (Am, G)),
        (lambda ns, G1: shampoo.shampoo_direction(ns, G1, shampoo.shampoo_statistics(ns, G1)),
         (X,)),
    ]
    tol = tolerance("float64", size=16, condition=_cond(A) * _cond(B), depth=3)
    for f, args in cases:
        got = f(xp, *(xp.asarray(a) for a in args))
        _assert_close(to_float64(got), f(NP, *args), tol)


# --------------------------------------------------------------------------- bad input


_M2, _M3 = np.eye(2), np.eye(3)
BAD = [
    (lambda: kronecker.kron(NP, np.ones(3), _M2), ShapeError, r"kron: argument 'A'"),
    (lambda: kronecker.kron_solve(NP, np.ones((2, 3)), _M2, np.ones((2, 2))), ShapeError,
     r"kron_solve: argument 'A': expected shape \(m=2, m=2\)"),
    (lambda: kronecker.kron_matvec(NP, _M2, _M3, np.ones((2, 2))), ShapeError,
     r"argument 'X': expected shape \(n=2, q=3\)"),
    (lambda: kronecker.kron_solve(NP, _M2, _M3, np.ones((3, 2))), ShapeError, r"argument 'X'"),
    (lambda: kronecker.damped_kron_solve(NP, _M2, _M3, np.ones((2, 3)), -1.0), ArgumentError,
     r"argument 'damping': expected >= 0"),
    (lambda: kronecker.damped_factors(NP, _M2, _M3, np.ones(2)), ShapeError,
     r"argument 'damping': expected a scalar"),
    (lambda: kronecker.damped_factors(NP, _M2, _M3, 1.0, pi=0.0), ArgumentError,
     r"argument 'pi': expected > 0"),
    (lambda: kronecker.unvec(NP, np.ones(5), (2, 3)), ShapeError, r"unvec: argument 'v'"),
    (lambda: kronecker.kron(NP, np.eye(2, dtype=int), _M2), DTypeError, r"argument 'A'"),
    (lambda: kfac.kfac_factors(NP, np.ones((2, 3, 4)), np.ones((1, 2, 3, 5)), mode="both"),
     ArgumentError, r"argument 'mode'"),
    (lambda: kfac.kfac_factors(NP, np.ones((2, 3, 4)), np.ones((1, 3, 3, 5))), ShapeError,
     r"argument 'G': expected shape \(S=1, N=2, R=3, d_out\)"),
    (lambda: kfac.kfac_factors(NP, np.ones((2, 3, 4)), np.ones((1, 2, 3, 5)),
                               mask=np.full((2, 3), 2)), ArgumentError, r"argument 'mask'"),
    (lambda: kfac.kfac_factors(NP, np.ones((2, 3, 4)), np.ones((1, 2, 3, 5)),
                               mask=np.array([[1, 0, 0], [0, 0, 0]])), ArgumentError,
     r"fully masked"),
    (lambda: kfac.kfac_block(NP, np.ones((2, 3)), _M2), ShapeError, r"argument 'A_factor'"),
    (lambda: shampoo.inverse_root(NP, _M2, 0), ArgumentError, r"argument 'p'"),
    (lambda: shampoo.inverse_root(get_namespace("sympy"), np.eye(2, dtype=int).astype(object),
                                  2, rtol=1e-8), ArgumentError, r"argument 'rtol'"),
    (lambda: shampoo.shampoo_direction(NP, np.ones((2, 2, 2)), ()), ShapeError,
     r"argument 'G': expected a vector"),
    (lambda: shampoo.shampoo_direction(NP, np.ones((2, 3)), (_M2,)), ShapeError,
     r"argument 'stats': expected 2 matrices"),
    (lambda: shampoo.shampoo_direction(NP, np.ones((2, 3)), (_M2, _M2)), ShapeError,
     r"argument 'stats\[1\]'"),
]


@pytest.mark.parametrize(("call", "error", "match"), BAD)
def test_bad_input_gets_a_clear_error(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()
