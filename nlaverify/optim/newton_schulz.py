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
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, DTypeError, ShapeError

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


def _is_row(x: Any) -> bool:
    """A coefficient tuple inside a schedule: a list/tuple or a 1-d array (not a string)."""
    if isinstance(x, (str, bytes)):
        return False
    ndim = getattr(x, "ndim", None)
    return ndim == 1 if ndim is not None else isinstance(x, Sequence)


def is_schedule(coeffs: Any) -> bool:
    """Whether ``coeffs`` is a per-step schedule (a sequence of coefficient tuples, or a 2-d
    array with one row per step) rather than one tuple ``(a_1, a_3, ...)``."""
    ndim = getattr(coeffs, "ndim", None)
    if ndim is not None:
        return ndim == 2
    return isinstance(coeffs, Sequence) and not isinstance(coeffs, (str, bytes)) and \
        len(coeffs) > 0 and _is_row(coeffs[0])


def _check_coefficient(c: Any, where: str) -> Any:
    """A real coefficient (int, Fraction, float, a real NumPy scalar, SymPy, mpmath, FLINT);
    NumPy scalars become Python numbers. :class:`ArgumentError` naming it otherwise."""
    if hasattr(c, "ndim") and getattr(c, "ndim", None) == 0 and hasattr(c, "item"):
        kind = getattr(getattr(c, "dtype", None), "kind", "f")
        if kind not in "biuf" and "float" not in str(c.dtype):
            raise ArgumentError(f"{where}: expected a real number, got dtype {c.dtype}")
        if kind == "b":
            raise ArgumentError(f"{where}: expected a real number, got a boolean")
        c = c.item()
    if isinstance(c, bool):
        raise ArgumentError(f"{where}: expected a real number, got {c!r}")
    if isinstance(c, numbers.Real) or type(c).__module__.split(".")[0] in (
            "sympy", "mpmath", "flint"):
        return c
    raise ArgumentError(f"{where}: expected a real number, got {type(c).__name__} {c!r}")


def _check_row(c: Any, where: str) -> Coefficients:
    if not _is_row(c):
        raise ArgumentError(f"{where}: expected a tuple (a_1, a_3, ...) or a 1-d array, got "
                            f"{type(c).__name__} {c!r}")
    row = tuple(_check_coefficient(a, f"{where}[{i}]") for i, a in enumerate(c))
    if not row:
        raise ArgumentError(f"{where}: no coefficients")
    return row


def schedule(coeffs: Coefficients | Sequence[Coefficients], steps: int) -> list[Coefficients]:
    """One coefficient tuple per step: ``coeffs`` (a tuple, list or 1-d array
    ``(a_1, a_3, ...)``) repeated ``steps`` times, or, when ``coeffs`` is a schedule
    (:func:`is_schedule`: a sequence of such tuples, or a 2-d array, one row per step; e.g. a
    designed one), exactly those rows. Raises :class:`ArgumentError` for a schedule of another
    length, an empty tuple or a coefficient that is not a real number (a string, a complex
    number)."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ArgumentError(f"steps: expected an integer >= 0, got {steps!r}")
    if isinstance(coeffs, (str, bytes)) or not (_is_row(coeffs) or is_schedule(coeffs)):
        raise ArgumentError(f"coeffs: expected a tuple (a_1, a_3, ...) or a schedule of "
                            f"tuples, got {type(coeffs).__name__} {coeffs!r}")
    if is_schedule(coeffs):
        if len(coeffs) != steps:
            raise ArgumentError(f"coeffs: a schedule of {len(coeffs)} steps, but steps={steps}")
        return [_check_row(c, f"coeffs[{k}]") for k, c in enumerate(coeffs)]
    return [_check_row(coeffs, "coeffs")] * steps


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


# -- the rounding term: per-step rounding carried through the map -------------------------


@dataclass(frozen=True)
class RoundingBound:
    r"""Where the singular values of a *computed* iteration can be (:func:`rounding_bound`,
    :func:`propagate`). ``per_step`` = :math:`(r_0, r_1, \dots, r_k)`: the spectral-norm
    rounding of the input (storage and normalisation) and of each step; ``gains`` =
    :math:`L_j = \max|p_j'|` over the region the values occupy before step :math:`j`;
    ``delta`` :math:`= \delta_k`, :math:`\delta_0 = r_0`, :math:`\delta_j = L_j
    \delta_{j-1} + r_j`; ``[lo, hi]``: the interval propagation :math:`T_j =
    |p_j|(T_{j-1}) \oplus [-r_j, r_j]` of :math:`T_0 = [\ell - r_0, u + r_0]` (clipped at
    0), and ``[0, zero_hi]`` that of :math:`\{0\}` (exact zero singular values).
    ``inf`` when the propagated region leaves the polynomial's basin (the bound is then
    vacuous)."""

    per_step: tuple[float, ...]
    gains: tuple[float, ...]
    delta: float
    lo: float
    hi: float
    zero_hi: float
    reason: str

    def envelope(self, certified: Any) -> tuple[float, float]:
        r"""The certified interval plus the rounding term: :math:`[\max(\mathrm{lo}_c -
        \delta, \mathrm{lo}), \min(\mathrm{hi}_c + \delta, \mathrm{hi})]` (both bounds
        hold, so their intersection does), never narrower than the certified
        ``[certified.lo, certified.hi]`` itself."""
        lo = max(self.lo, certified.lo - self.delta)
        hi = min(self.hi, certified.hi + self.delta)
        return min(lo, certified.lo), max(hi, certified.hi)

    def contains(self, sigma: Any, certified: Any, zeros: bool = False) -> bool:
        """Whether every value of ``sigma`` lies in :meth:`envelope` (or, with ``zeros``,
        in ``[0, zero_hi]``)."""
        import numpy as np

        lo, hi = self.envelope(certified)
        s = np.asarray(sigma, dtype=np.float64)
        inside = (s >= lo) & (s <= hi)
        if zeros:
            inside |= (s >= 0) & (s <= self.zero_hi)
        return bool(np.all(inside))


_VACUOUS = 1e6  # a region beyond this has left every basin of a Newton–Schulz polynomial


def _float_coeffs(c: Coefficients) -> list[float]:
    return [float(a) for a in c]


def _abs_image(c: Coefficients, lo: float, hi: float) -> tuple[float, float]:
    """The exact range of :math:`|p|` on ``[lo, hi]`` (certified image, rounded to floats)."""
    from nlaverify.optim.certify import _exact_coeffs, image

    a, b = image(_exact_coeffs(c), Fraction(lo), Fraction(hi))
    if a >= 0:
        return float(a), float(b)
    if b <= 0:
        return float(-b), float(-a)
    return 0.0, float(max(-a, b))


def _max_abs_derivative(c: Coefficients, lo: float, hi: float) -> float:
    r""":math:`\max |p'|` on ``[lo, hi]``: at the ends and the real roots of :math:`p''`
    (float64; a model quantity, not a certified one)."""
    import numpy as np

    coef = np.zeros(2 * len(c))
    coef[1::2] = _float_coeffs(c)
    d1 = np.polynomial.Polynomial(coef).deriv()
    pts = [lo, hi] + [float(r.real) for r in d1.deriv().roots()
                      if abs(r.imag) <= 1e-9 * max(1.0, abs(r)) and lo <= r.real <= hi]
    return max(abs(float(d1(x))) for x in pts)


def step_rounding(c: Coefficients, dtype: Any, n: int, bound: float, *,
                  accumulation: Any = None) -> float:
    r"""The tolerance model's spectral-norm rounding :math:`r` of one step
    :math:`X \leftarrow p(X)`, :math:`\|X\|_2 \le` ``bound``, on the wide side (longest
    sum ``n``): :func:`nlaverify.tolerance.tolerance` with ``size`` :math:`= n`,
    ``depth`` :math:`= d` dependent products (:math:`A = XX^\top`, :math:`d - 2` Horner
    products, :math:`BX`), composed at random (``composition="random"``: independent
    stages add in quadrature), and ``condition`` :math:`\kappa = \max(1, \sum_i
    |a_{2i+1}|\,\mathrm{bound}^{2i+1})`, the size of the terms that cancel to
    :math:`p(X) = O(1)` (10.25 for Muon at bound 1, 2 for the cubic)."""
    from nlaverify.tolerance import tolerance

    kappa = max(1.0, sum(abs(a) * bound ** (2 * i + 1) for i, a in enumerate(_float_coeffs(c))))
    return tolerance(dtype, size=max(1, n), depth=max(1, len(c)), condition=kappa,
                     accumulation=accumulation, composition="random").rtol


def _propagate(plan: list[Coefficients], lower: float, upper: float, r0: float,
               step_r: Any, reason: str) -> RoundingBound:
    lo, hi, zhi, delta = max(0.0, lower - r0), upper + r0, r0, r0
    rs, gains = [r0], []
    for j, c in enumerate(plan):
        if not hi < _VACUOUS:
            rs.append(math.inf)
            gains.append(math.inf)
            lo, hi, zhi, delta = 0.0, math.inf, math.inf, math.inf
            continue
        r = float(step_r(j, c, hi))
        L = _max_abs_derivative(c, lo, hi)
        rs.append(r)
        gains.append(L)
        delta = L * delta + r
        ilo, ihi = _abs_image(c, lo, hi)
        lo, hi = max(0.0, ilo - r), ihi + r
        zhi = (_abs_image(c, 0.0, zhi)[1] + r) if zhi < _VACUOUS else math.inf
    if not hi < _VACUOUS:
        lo, hi, zhi, delta = 0.0, math.inf, math.inf, math.inf
    return RoundingBound(tuple(rs), tuple(gains), delta, lo, hi, min(zhi, hi), reason)


def propagate(coeffs: Coefficients | Sequence[Coefficients], steps: int, per_step: Any,
              lower: float = 0.0, upper: float = 1.0) -> RoundingBound:
    r"""The :class:`RoundingBound` of given per-step spectral-norm errors ``per_step`` =
    :math:`(r_0, \dots, r_k)` (measured ones, for an a-posteriori check), from singular
    values in :math:`[\ell, u]` = ``[lower, upper]``. By Weyl's inequality the computed
    :math:`\hat X_j = p_j(\hat X_{j-1}) + E_j` has singular values within
    :math:`\|E_j\|_2 \le r_j` of those of :math:`p_j(\hat X_{j-1})`, which are
    :math:`|p_j|` of those of :math:`\hat X_{j-1}` (an odd polynomial acts on singular
    values): hence :math:`T_j`; and by the mean value theorem each stays within
    :math:`\delta_j` of the exact image of the same input value."""
    plan = schedule(coeffs, steps)
    r = [float(x) for x in per_step]
    if len(r) != len(plan) + 1:
        raise ArgumentError(f"per_step: expected {len(plan) + 1} errors (input and one per "
                            f"step), got {len(r)}")
    return _propagate(plan, float(lower), float(upper), r[0], lambda j, c, b: r[j + 1],
                      "measured per-step errors")


def rounding_bound(coeffs: Coefficients | Sequence[Coefficients], steps: int, dtype: Any,
                   n: int, *, m: int | None = None, lower: float = 0.0, upper: float = 1.0,
                   normalize: bool = True, accumulation: Any = None) -> RoundingBound:
    r"""The tolerance model's rounding term for :func:`newton_schulz` in ``dtype`` on an
    :math:`m \times n` matrix (``m`` defaults to ``n``; the longer side governs the sums)
    with singular values in ``[lower, upper]`` (after normalisation): :math:`r_0` =
    :func:`~nlaverify.tolerance.tolerance` of storing the input and, with ``normalize``,
    of the Frobenius norm (:math:`mn` terms, two stages), times ``upper``; :math:`r_j` =
    :func:`step_rounding` at the current region's upper end; carried through the map by
    :func:`propagate`'s recursion: each rounding is amplified by at most :math:`\max|p'|`
    over the region (the absorbing region, once entered) per later step. ``accumulation``
    as for :func:`~nlaverify.tolerance.tolerance` (``"float32"`` for bfloat16 on XLA).
    Baggag & Saad §5.5; Higham & Mary (2019) for the per-stage model."""
    from nlaverify.tolerance import tolerance

    plan = schedule(coeffs, steps)
    long_side, short = max(n, m or n), min(n, m or n)
    r0 = tolerance(dtype, size=short * long_side if normalize else long_side,
                   depth=2 if normalize else 1, accumulation=accumulation,
                   composition="random").rtol * float(upper)
    from nlaverify.backends.host import dtype_name

    name = dtype if isinstance(dtype, str) else dtype_name(dtype)
    return _propagate(plan, float(lower), float(upper), r0,
                      lambda j, c, b: step_rounding(c, dtype, long_side, b,
                                                    accumulation=accumulation),
                      f"tolerance model, {name}, n={long_side}, random composition per step")
