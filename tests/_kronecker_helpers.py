"""Shared by the ``kronecker`` family's tests: the NumPy namespace, the size strategy, seeded
generators, condition numbers, SPD matrices and the tolerance-model comparison."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from nlaverify.backends import get_namespace

NP = get_namespace("numpy")
SIZES = st.integers(1, 5)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _cond(M: np.ndarray) -> float:
    return float(np.linalg.cond(M))


def _assert_close(actual, expected, tol) -> None:
    result = tol.compare(actual, expected)
    assert result.ok, f"normwise error {result.normwise:.3g} > {tol.rtol:.3g} ({tol.reason})"


def _spd(n: int, seed: int, max_condition: float = 10.0) -> np.ndarray:
    """An SPD matrix with eigenvalues in [1, max_condition] (as ``spd_matrices``)."""
    rng = _rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    lam = np.exp(rng.uniform(0.0, np.log(max_condition), size=n))
    M = (Q * lam) @ Q.T
    return (M + M.T) / 2
