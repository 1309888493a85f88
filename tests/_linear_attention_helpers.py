"""Shared by the linearized-attention tests: the backends, the size draws, the tolerance-model
comparison and the independent NumPy write-ups of the masked quadratic forms, with the check
of ``kernel_attention`` against them."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from nlaverify.backends import get_namespace
from nlaverify.backends.host import to_float64
from nlaverify.ops import linear_attention as la
from nlaverify.tolerance import tolerance

BACKENDS = ["numpy", "jax", "strict", "mpmath"]
BATCHES = st.sampled_from([(), (2,), (2, 2)])


def _ns(name: str):
    return get_namespace(name, digits=30) if name == "mpmath" else get_namespace(name)


def _on(xp, *arrays):
    return [xp.asarray(a) if xp.object_arrays else xp.asarray(a, dtype=xp.float64)
            for a in arrays]


def _sizes(data, backend: str, **ranges: tuple[int, int]) -> dict:
    """Sizes drawn in ``ranges`` and a batch shape; on JAX one fixed shape (each range's
    middle, batch ``(2,)``), so that its per-shape compilation runs once, not per example."""
    if backend == "jax":
        return {**{k: (lo + hi + 1) // 2 for k, (lo, hi) in ranges.items()}, "batch": (2,)}
    drawn = {k: data.draw(st.integers(lo, hi), label=k) for k, (lo, hi) in ranges.items()}
    return {**drawn, "batch": data.draw(BATCHES, label="batch")}


def _assert_close(actual, expected, *, size: int, condition: float = 1.0, what: str = ""):
    # float64 on both sides (the reference is NumPy float64): forward then normalise
    tol = tolerance("float64", size=size, condition=max(1.0, condition), depth=2)
    c = tol.compare(to_float64(actual), expected)
    assert c.ok, f"{what}: error {c.normwise:.3e} > {tol.rtol:.3e} ({tol.reason})"


# -- independent quadratic forms (NumPy) --------------------------------------------------


def _masked_quadratic(A: np.ndarray, V: np.ndarray, causal: bool) -> np.ndarray:
    r""":math:`D^{-1}(A \circ M) V` with the :math:`n \times n` matrix built explicitly."""
    if causal:
        A = A * np.tril(np.ones(A.shape[-2:]))
    return (A / A.sum(-1, keepdims=True)) @ V


def _cancellation(A: np.ndarray, causal: bool) -> float:
    r"""Condition of the normaliser: :math:`\max_i \sum_j |a_{ij}| / |\sum_j a_{ij}|`."""
    if causal:
        A = A * np.tril(np.ones(A.shape[-2:]))
    return float(np.max(np.abs(A).sum(-1) / np.abs(A.sum(-1))))


def _gram(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    return X @ np.swapaxes(Y, -1, -2)


def _check_kernel(backend: str, causal: bool, n: int, m: int, dv: int, batch, seed: int):
    rng = np.random.default_rng(seed)
    Qf, Kf = (rng.uniform(0.1, 2.0, (*batch, n, m)) for _ in range(2))  # any positive map
    V = rng.standard_normal((*batch, n, dv))
    xp = _ns(backend)
    got = la.kernel_attention(xp, *_on(xp, Qf, Kf, V), causal=causal)
    A = _gram(Qf, Kf)
    _assert_close(got, _masked_quadratic(A, V, causal), size=n * m,
                  condition=_cancellation(A, causal), what=f"kernel_attention {backend}")
