r"""Newton–Schulz polynomial iterations for the polar factor (Baggag & Saad §5.5, Muon).

An *odd* polynomial :math:`p(x) = a_1 x + a_3 x^3 + a_5 x^5 + \dots` acts on a matrix
through its singular values: for :math:`X = U\Sigma V^\top`,

.. math:: p(X) := a_1 X + a_3 (XX^\top)X + a_5 (XX^\top)^2 X + \dots = U\,p(\Sigma)\,V^\top,

so iterating :math:`X \leftarrow p(X)` from :math:`X_0 = G/\|G\|_F` (all singular values in
:math:`(0, 1]`) drives every singular value along the scalar map :math:`x \mapsto p(x)`
towards 1, and :math:`X_k \to UV^\top`, the polar factor that Shampoo computes with inverse
fourth roots (§5.4) and Muon with five steps of :data:`MUON`. Coefficients are a tuple
``(a_1, a_3, a_5, ...)`` (exact :class:`fractions.Fraction` for the published sets, so the
proofs see the exact numbers); a *schedule* is one such tuple per step.

The matrix product is evaluated by Horner's rule in the Gram matrix :math:`A = XX^\top`
of the wide orientation (:math:`m \le n`; a tall input is transposed first and back at
the end, the "transpose trick", which changes nothing in exact arithmetic and makes
:math:`A` the smaller Gram matrix):

.. math:: B = a_{2d+1} A;\quad B \leftarrow a_{2j+1} A + B A\ (j = d-1, \dots, 1);\quad
          X \leftarrow a_1 X + B X,

which for Muon's quintic is exactly Keller Jordan's ``A = X @ X.T; B = b*A + c*A@A;
X = a*X + B@X``.

For checking the kernels: :func:`polar_svd` (the reference :math:`UV^\top`),
:func:`singular_values` / :func:`newton_schulz_spectrum` (float64, host),
:func:`matmul_flops`, and the rounding term :func:`rounding_bound` (tolerance model per
step, carried through the map) / :func:`propagate` (measured per-step errors), which widen
the certified interval of :mod:`nlaverify.optim.certify`.

The coefficient tuples, schedules and the scalar map :func:`odd_polynomial` live in
:mod:`nlaverify.optim.polynomials`, the rounding term in :mod:`nlaverify.optim.rounding`;
both are re-exported here.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, DTypeError, ShapeError
from nlaverify.optim.polynomials import Coefficients as Coefficients
from nlaverify.optim.polynomials import is_schedule as is_schedule
from nlaverify.optim.polynomials import odd_polynomial as odd_polynomial
from nlaverify.optim.polynomials import schedule
from nlaverify.optim.rounding import RoundingBound as RoundingBound
from nlaverify.optim.rounding import propagate as propagate
from nlaverify.optim.rounding import rounding_bound as rounding_bound
from nlaverify.optim.rounding import step_rounding as step_rounding

#: Muon's quintic (Jordan et al. 2024), from a tuning run: fast growth near 0, does not
#: converge to 1 (its fixed points are not at 1; see the ``newton_schulz`` proofs)
MUON: Coefficients = (Fraction("3.4445"), Fraction("-4.7750"), Fraction("2.0315"))
#: the classic cubic :math:`(3x - x^3)/2` (Newton–Schulz of order 1)
CUBIC: Coefficients = (Fraction(3, 2), Fraction(-1, 2))
#: the quintic :math:`(15x - 10x^3 + 3x^5)/8` (Newton–Schulz of order 2)
QUINTIC: Coefficients = (Fraction(15, 8), Fraction(-10, 8), Fraction(3, 8))

#: named coefficient sets, for the command line and the figures
COEFFICIENT_SETS: dict[str, Coefficients] = {"muon": MUON, "cubic": CUBIC, "quintic": QUINTIC}


def newton_schulz_family(order: int) -> Coefficients:
    r"""The Newton–Schulz polynomial of order :math:`k` = ``order``: the degree-:math:`k`
    Taylor truncation of :math:`x\,(1 - (1 - x^2))^{-1/2}` about :math:`x^2 = 1`,

    .. math:: p_k(x) = x \sum_{j=0}^{k} \binom{2j}{j} 4^{-j} (1 - x^2)^j,

    (:math:`p_1` = :data:`CUBIC`, :math:`p_2` = :data:`QUINTIC`), whose error
    :math:`1 - p_k(x)` vanishes to order :math:`k + 1` at :math:`x = 1` (Higham, *Functions
    of Matrices*, §8.3; Baggag & Saad §5.5). Returned as exact fractions in the monomial
    basis ``(a_1, a_3, ..., a_{2k+1})``."""
    if not isinstance(order, int) or isinstance(order, bool) or order < 0:
        raise ArgumentError(f"order: expected an integer >= 0, got {order!r}")
    from math import comb

    out = [Fraction(0)] * (order + 1)
    for j in range(order + 1):
        w = Fraction(comb(2 * j, j), 4**j)
        for i in range(j + 1):  # (1 - t)^j = sum_i C(j, i) (-t)^i, t = x^2
            out[i] += w * comb(j, i) * (-1) ** i
    return tuple(out)


def _coef(xp: Namespace, c: Any) -> Any:
    """A coefficient as a scalar of ``xp``: fractions exactly on SymPy (rounded once
    elsewhere), SymPy expressions unchanged (symbolic coefficients in proofs)."""
    if isinstance(c, Fraction):
        return xp.rational(c.numerator, c.denominator)
    if type(c).__module__.startswith("sympy"):
        return c
    return xp.const(c)


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape)


def newton_schulz_step(xp: Namespace, X: Any, coeffs: Coefficients) -> Any:
    r"""One step :math:`X \leftarrow p(X) = a_1X + a_3(XX^\top)X + a_5(XX^\top)^2X + \dots`
    on a wide :math:`X` of shape ``(..., m, n)``, :math:`m \le n` (Horner in
    :math:`A = XX^\top`, module docstring). Baggag & Saad §5.5."""
    shape = _shape(X)
    if len(shape) < 2:
        raise ShapeError(f"newton_schulz_step: X must be a matrix (..., m, n), got shape {shape}")
    a = [_coef(xp, c) for c in coeffs]
    if len(a) == 1:
        return a[0] * X
    A = xp.matmul(X, xp.matrix_transpose(X))
    B = a[-1] * A
    for c in reversed(a[1:-1]):
        B = c * A + xp.matmul(B, A)
    return a[0] * X + xp.matmul(B, X)


def frobenius_normalize(xp: Namespace, G: Any, eps: Any = 1e-7) -> Any:
    r""":math:`G / (\|G\|_F + \epsilon)` per matrix (over the last two axes), so every
    singular value lies in :math:`[0, 1]` (:math:`\sigma_{\max} \le \|G\|_F`)."""
    norm = xp.sqrt(xp.sum(G * G, axis=(-2, -1), keepdims=True))
    return G / (norm + _coef(xp, eps))


def newton_schulz(
    xp: Namespace,
    G: Any,
    coeffs: Coefficients | Sequence[Coefficients] = MUON,
    steps: int = 5,
    *,
    eps: Any = 1e-7,
    normalize: bool = True,
    transpose: bool = True,
) -> Any:
    r"""Approximate the polar factor :math:`UV^\top` of :math:`G = U\Sigma V^\top` (shape
    ``(..., m, n)``) by ``steps`` odd-polynomial steps (:func:`newton_schulz_step`) from
    :math:`X_0 = G/(\|G\|_F + \epsilon)` (``normalize``), on the wide orientation
    (``transpose``: a tall :math:`G` is transposed in and out). Runs in the dtype of ``G``
    (float64, float32, bfloat16 on any backend; exact on SymPy). After :math:`k` steps the
    singular values of the result are :math:`p_k \circ \dots \circ p_1(\sigma_i /
    (\|G\|_F + \epsilon))`, whose range :mod:`nlaverify.optim.certify` encloses. Baggag &
    Saad §5.5, Muon (Jordan et al. 2024)."""
    _check_input(xp, G, "newton_schulz")
    shape = _shape(G)
    if len(shape) < 2:
        raise ShapeError(f"newton_schulz: G must be a matrix (..., m, n), got shape {shape}")
    plan = schedule(coeffs, steps)
    if normalize:
        _check_eps(eps)
    X = frobenius_normalize(xp, G, eps) if normalize else G
    tall = transpose and shape[-2] > shape[-1]
    X = _to_wide(xp, X, tall)
    for c in plan:
        X = newton_schulz_step(xp, X, c)
    return _from_wide(xp, X, tall)


def _check_input(xp: Namespace, G: Any, fn: str) -> None:
    """``G`` is an array of ``xp`` with a real dtype: :class:`ArgumentError` for a list or a
    scalar, :class:`DTypeError` for a complex, boolean or non-numeric dtype."""
    if not hasattr(G, "shape") or not hasattr(G, "dtype"):
        raise ArgumentError(f"{fn}: argument 'G': expected an array of the {xp.name} namespace "
                            f"(xp.asarray(...)), got {type(G).__name__}")
    if xp.object_arrays:
        return
    from nlaverify.backends.host import dtype_name

    name = dtype_name(G.dtype)
    if not name.startswith(("float", "bfloat", "int", "uint")):
        raise DTypeError(f"{fn}: argument 'G': expected a real floating-point array, got dtype "
                         f"{name}")


def _check_eps(eps: Any) -> None:
    if type(eps).__module__.startswith("sympy") or getattr(eps, "shape", None) == ():
        return
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not (
            math.isfinite(float(eps)) and eps >= 0):
        raise ArgumentError(f"newton_schulz: argument 'eps': expected a finite number >= 0, got "
                            f"{eps!r}")


def _to_wide(xp: Namespace, X: Any, tall: bool) -> Any:
    """The transpose trick, way in: a tall matrix is iterated as its (wide) transpose."""
    return xp.matrix_transpose(X) if tall else X


def _from_wide(xp: Namespace, X: Any, tall: bool) -> Any:
    """The transpose trick, way out: :math:`p(X^\top)^\top = p(X)`."""
    return xp.matrix_transpose(X) if tall else X


# -- the reference polar factor, spectra, flops ------------------------------------------


def polar_svd(xp: Namespace, G: Any) -> Any:
    r"""The polar factor :math:`UV^\top` of :math:`G = U\Sigma V^\top` from the thin SVD
    (shape of ``G``), the reference that :func:`newton_schulz` approximates (Baggag & Saad
    §5.4–5.5; Higham, *Functions of Matrices*, §8.1). Computed with the backend's
    ``linalg.svd`` (NumPy, JAX, CuPy, array-api-strict; bfloat16 in float32, returned in
    the dtype of ``G``), on the host in float64 for the object backends (SymPy, mpmath).
    Rank-deficient :math:`G`: the singular vectors of the zero singular values are an
    arbitrary orthonormal completion (the polar factor is not unique there)."""
    shape = _shape(G)
    if len(shape) < 2:
        raise ShapeError(f"polar_svd: G must be a matrix (..., m, n), got shape {shape}")
    if xp.object_arrays:
        import numpy as np

        from nlaverify.backends.host import to_float64

        U, _, Vh = np.linalg.svd(to_float64(G), full_matrices=False)
        return xp.asarray(U @ Vh)
    from nlaverify.backends.host import dtype_name

    native = dtype_name(G.dtype) in ("float32", "float64")
    work = G if native else xp.astype(G, xp.float32)
    U, _, Vh = xp.linalg.svd(work, full_matrices=False)
    Q = xp.matmul(U, Vh)
    return Q if native else xp.astype(Q, G.dtype)


def singular_values(X: Any) -> Any:
    """The singular values of ``X`` (any backend, shape ``(..., m, n)``) in float64 on the
    host, descending, shape ``(..., min(m, n))``."""
    import numpy as np

    from nlaverify.backends.host import to_float64

    A = to_float64(X)
    if A.ndim < 2:
        raise ShapeError(f"singular_values: X must be a matrix (..., m, n), got shape {A.shape}")
    return np.linalg.svd(A, compute_uv=False)


def newton_schulz_spectrum(xp: Namespace, G: Any,
                           coeffs: Coefficients | Sequence[Coefficients] = MUON,
                           steps: int = 5, **kwargs: Any) -> Any:
    r"""The singular values (float64, host, descending) of :func:`newton_schulz`'s result,
    i.e. :math:`|p_k\circ\dots\circ p_1|(\sigma_i(X_0))` up to rounding: what
    :func:`nlaverify.optim.certify.certified_interval` encloses and
    :func:`rounding_bound` widens."""
    return singular_values(newton_schulz(xp, G, coeffs, steps, **kwargs))


def matmul_flops(m: int, n: int, coeffs: Coefficients | Sequence[Coefficients] = MUON,
                 steps: int = 5) -> int:
    r"""Floating-point operations of the matrix products of :func:`newton_schulz` on an
    :math:`m \times n` (or :math:`n \times m`) matrix, counted on the wide side
    (:math:`m \le n` after the transpose trick), :math:`2pqr` per :math:`(p\times q)(q
    \times r)` product (a multiply and an add per term). A step with :math:`d \ge 2`
    coefficients computes :math:`A = XX^\top` (:math:`2m^2n`), :math:`d - 2` Horner
    products :math:`BA` (:math:`2m^3` each) and :math:`BX` (:math:`2m^2n`):

    .. math:: F = \sum_{\text{steps}} \bigl(4m^2n + 2(d-2)\,m^3\bigr),

    e.g. :math:`5 \cdot 6n^3 = 30n^3` for five quintic steps on a square matrix. The
    elementwise terms (:math:`O(dm^2 + mn)` per step, the normalisation :math:`O(mn)`)
    are left out: below :math:`1/n` of the total."""
    for name, v in (("m", m), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
            raise ArgumentError(f"matmul_flops: argument '{name}': expected an integer >= 0, "
                                f"got {v!r}")
    m, n = min(int(m), int(n)), max(int(m), int(n))
    total = 0
    for c in schedule(coeffs, steps):
        if len(c) >= 2:
            total += 4 * m * m * n + 2 * (len(c) - 2) * m**3
    return total
