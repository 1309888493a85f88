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
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, ShapeError

#: coefficients ``(a_1, a_3, a_5, ...)`` of an odd polynomial
Coefficients = tuple[Any, ...]

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


def schedule(coeffs: Coefficients | Sequence[Coefficients], steps: int) -> list[Coefficients]:
    """One coefficient tuple per step: ``coeffs`` repeated ``steps`` times, or, when
    ``coeffs`` is already a sequence of tuples (a designed schedule), exactly those."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ArgumentError(f"steps: expected an integer >= 0, got {steps!r}")
    if len(coeffs) and isinstance(coeffs[0], (tuple, list)):
        if len(coeffs) != steps:
            raise ArgumentError(f"coeffs: a schedule of {len(coeffs)} steps, but steps={steps}")
        out = [tuple(c) for c in coeffs]
    else:
        out = [tuple(coeffs)] * steps
    for k, c in enumerate(out):
        if not c:
            raise ArgumentError(f"coeffs: step {k} has no coefficients")
    return out


def _coef(xp: Namespace, c: Any) -> Any:
    """A coefficient as a scalar of ``xp``: fractions exactly on SymPy (rounded once
    elsewhere), SymPy expressions unchanged (symbolic coefficients in proofs)."""
    if isinstance(c, Fraction):
        return xp.rational(c.numerator, c.denominator)
    if type(c).__module__.startswith("sympy"):
        return c
    return xp.const(c)


def odd_polynomial(coeffs: Coefficients, x: Any) -> Any:
    r"""The scalar map :math:`p(x) = \sum_j a_{2j+1} x^{2j+1}` by Horner's rule in
    :math:`x^2`, for any number type that mixes with the coefficients (Fraction, float,
    SymPy, mpmath, flint's arb after conversion by the caller)."""
    x2 = x * x
    q = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        q = c + q * x2
    return q * x


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
    shape = _shape(G)
    if len(shape) < 2:
        raise ShapeError(f"newton_schulz: G must be a matrix (..., m, n), got shape {shape}")
    plan = schedule(coeffs, steps)
    X = frobenius_normalize(xp, G, eps) if normalize else G
    tall = transpose and shape[-2] > shape[-1]
    if tall:
        X = xp.matrix_transpose(X)
    for c in plan:
        X = newton_schulz_step(xp, X, c)
    return xp.matrix_transpose(X) if tall else X
