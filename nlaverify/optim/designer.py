r"""Designing Newton–Schulz coefficients: per-step minimax odd polynomials (Polar Express).

Muon's quintic comes from a tuning run; here the coefficients are *computed*. For
:math:`k` steps and singular values in :math:`[\varepsilon, 1]` we want odd polynomials
:math:`p_1, \dots, p_k` of a given degree that minimise

.. math:: \max_{x \in [\varepsilon, 1]} \bigl|1 - p_k \circ \dots \circ p_1(x)\bigr| .

Amsel, Persson, Musco & Gower (2025, "The Polar Express") prove that the *greedy* choice is
optimal for the composition: with :math:`[\ell_1, u_1] = [\varepsilon, 1]`, take for
:math:`p_j` the minimax odd polynomial for the constant 1 on :math:`[\ell_j, u_j]`, with
error :math:`E_j`; its image of :math:`[\ell_j, u_j]` is exactly :math:`[1 - E_j, 1 + E_j]`
(the error equioscillates, so both ends are attained), which is the next interval. The
composition's error is :math:`E_k`.

*Minimax by Remez exchange.* The odd monomials :math:`x, x^3, \dots, x^{2m+1}` form a
Chebyshev (Haar) system on :math:`(0, \infty)`, so the best approximation of degree
:math:`2m + 1` is characterised by equioscillation of :math:`e = 1 - p` at :math:`m + 2`
points, and since :math:`p'` (even, degree :math:`2m`) has at most :math:`m` positive roots
those points are forced: :math:`\ell`, the :math:`m` critical points of :math:`p` and
:math:`u`. Each Remez step solves :math:`p(x_j) + (-1)^j E = 1` on the reference and moves
the reference to :math:`\{\ell, \text{roots of } p', u\}`, where :math:`|e| \ge |E|` with
alternating signs; de la Vallée Poussin's theorem brackets the optimum,
:math:`\min_j |e(x_j)| \le E^\star \le \max_{[\ell, u]} |e|`, and the iteration stops when
the bracket is below :math:`10^{6-\text{digits}}` relative (mpmath, 40 digits by default),
or below :math:`10^{4-\text{digits}}` absolute when :math:`E` itself nears the working
precision (late steps of a design, where :math:`E_j \ll 10^{-16}` anyway).

*Seed:* Baggag & Saad §5.5 (Muon's Newton–Schulz step); Amsel et al., arXiv:2505.16932.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import mpmath

from nlaverify.errors import ArgumentError
from nlaverify.optim.newton_schulz import (
    CUBIC,
    MUON,
    QUINTIC,
    Coefficients,
    newton_schulz_family,
    odd_polynomial,
)

#: decimal digits of the Remez computation
DIGITS = 40
#: the designer stops at a step error :math:`E_j` below this: the float64 coefficients
#: that run carry rounding errors of about :math:`10^{-16}\sum|a_i|` in :math:`p(x)`, so a
#: minimax polynomial on :math:`[1 - E_j, 1 + E_j]` cannot do better than the Newton–Schulz
#: polynomial of the same degree (exact dyadic coefficients, error :math:`O(E_j^{m+1})`),
#: which the remaining steps use (:func:`design`)
STOP_ERROR = Fraction(1, 2**50)


@dataclass(frozen=True)
class Minimax:
    r"""The minimax odd polynomial of :func:`minimax_odd`.

    ``coeffs``: :math:`(a_1, a_3, \dots)`, the exact binary values of the mpmath result;
    ``error``: the levelled error :math:`E` (:math:`e(x_j) = (-1)^j E` on the reference);
    ``reference``: the :math:`m + 2` equioscillation points :math:`\ell < \dots < u`;
    ``spread``: :math:`\max_j |e(x_j)| - \min_j |e(x_j)|` at the last exchange (the
    de la Vallée Poussin bracket); ``iterations``: the number of exchanges."""

    coeffs: tuple[Fraction, ...]
    error: Fraction
    reference: tuple[Fraction, ...]
    spread: Fraction
    iterations: int


def _fraction(x: Any) -> Fraction:
    """The exact value of an mpmath ``mpf`` (a binary number) as a Fraction."""
    sign, man, exp, _ = x._mpf_
    if not man and exp:
        raise ArithmeticError(f"not a finite number: {x}")
    return (-1) ** sign * Fraction(int(man)) * Fraction(2) ** int(exp)


def _mp(ctx: Any, x: Any) -> Any:
    if isinstance(x, Fraction):
        return ctx.mpf(x.numerator) / x.denominator
    return ctx.mpf(x)


def _check_interval(lower: Any, upper: Any) -> None:
    try:
        lo, hi = Fraction(lower), Fraction(upper)
    except (TypeError, ValueError) as exc:
        raise ArgumentError(f"interval: expected real numbers, got lower={lower!r}, "
                            f"upper={upper!r}") from exc
    if not 0 < lo < hi:
        raise ArgumentError(f"interval: expected 0 < lower < upper, got lower={lower!r}, "
                            f"upper={upper!r}")


def _check_degree(degree: Any) -> int:
    if (not isinstance(degree, int) or isinstance(degree, bool) or degree < 1
            or degree % 2 == 0):
        raise ArgumentError(f"degree: expected an odd integer >= 1, got {degree!r}")
    return (degree - 1) // 2


def _critical_points(ctx: Any, c: Any, lo: Any, hi: Any) -> list[Any]:
    r"""The roots of :math:`p'(x) = \sum_i (2i+1) a_{2i+1} x^{2i}` in :math:`(\ell, u)`."""
    m = len(c) - 1
    if m == 0:
        return []
    t_poly = [(2 * i + 1) * c[i] for i in range(m, -1, -1)]  # in t = x^2, highest first
    roots = ctx.polyroots(t_poly, maxsteps=200, extraprec=4 * ctx.prec)
    tol = ctx.mpf(10) ** (-ctx.dps // 2)
    out = []
    for r in roots:
        r = ctx.mpc(r)
        if abs(r.imag) <= tol * max(1, abs(r)) and r.real > 0:
            x = ctx.sqrt(r.real)
            if lo < x < hi:
                out.append(x)
    return sorted(out)


def _solve(ctx: Any, ref: list[Any]) -> tuple[list[Any], Any]:
    r"""Coefficients and :math:`E` with :math:`p(x_j) + (-1)^j E = 1` on the reference."""
    n = len(ref)
    A = ctx.matrix(n, n)
    for j, x in enumerate(ref):
        for i in range(n - 1):
            A[j, i] = x ** (2 * i + 1)
        A[j, n - 1] = (-1) ** j
    sol = ctx.lu_solve(A, ctx.matrix([1] * n))
    return [sol[i] for i in range(n - 1)], sol[n - 1]


def _exchange(ctx: Any, c: list[Any], lo: Any, hi: Any) -> list[Any]:
    """The new reference: the endpoints and the critical points of ``p`` between them."""
    return [lo, *_critical_points(ctx, c, lo, hi), hi]


def working_digits(digits: int, m: int, lower: Any, upper: Any) -> int:
    r"""The working precision of :func:`minimax_odd` on :math:`[\ell, u]`: ``digits`` plus
    :math:`(m + 2)\,w` with :math:`w = \lceil -\log_{10}((u - \ell)/u) \rceil` the decimal
    digits that :math:`\ell` and :math:`u` share. On a narrow interval
    :math:`[1 - E, 1 + E]` (the late steps of a design) the reference points agree in
    :math:`w` digits and the Vandermonde-like system in :math:`x, x^3, \dots, x^{2m+1}` loses
    about :math:`(m + 1)w` digits, so a fixed precision finds too few critical points or a
    singular matrix once :math:`E^{m+1}` nears :math:`10^{-\text{digits}}`."""
    width = (Fraction(upper) - Fraction(lower)) / Fraction(upper)
    shared = max(0, width.denominator.bit_length() - width.numerator.bit_length())
    return digits + (m + 2) * math.ceil(shared * math.log10(2))


def minimax_odd(degree: int, lower: Any, upper: Any = 1, *, digits: int = DIGITS,
                max_iterations: int = 100) -> Minimax:
    r"""The odd polynomial :math:`p` of degree ``degree`` minimising
    :math:`\max_{x \in [\ell, u]} |1 - p(x)|` on :math:`[\ell, u]` = ``[lower, upper]``
    (:math:`0 < \ell < u`), by the Remez exchange (module docstring) in ``digits``
    decimal digits (more on a narrow interval: :func:`working_digits`), from Chebyshev
    points of :math:`[\ell, u]`. Returns a :class:`Minimax`
    whose error equioscillates at ``degree // 2 + 2`` points. Amsel et al. (2025), §4."""
    m = _check_degree(degree)
    _check_interval(lower, upper)
    if not isinstance(digits, int) or digits < 20:
        raise ArgumentError(f"digits: expected an integer >= 20, got {digits!r}")
    ctx = mpmath.MPContext()
    ctx.dps = working_digits(digits, m, lower, upper)
    lo, hi = _mp(ctx, lower), _mp(ctx, upper)
    n = m + 2
    ref = [(lo + hi) / 2 - (hi - lo) / 2 * ctx.cospi(ctx.mpf(j) / (n - 1)) for j in range(n)]
    ref[0], ref[-1] = lo, hi
    stop, floor = ctx.mpf(10) ** (6 - digits), ctx.mpf(10) ** (4 - ctx.dps)
    it = 0
    while it < max_iterations:
        it += 1
        c, E = _solve(ctx, ref)
        new = _exchange(ctx, c, lo, hi)
        if len(new) != n:
            raise ArithmeticError(f"minimax_odd: the exchange found {len(new)} points, "
                                  f"expected {n} (degree={degree}, [{lower}, {upper}])")
        errs = [abs(1 - odd_polynomial(c, x)) for x in new]
        spread = max(errs) - min(errs)
        ref = new
        if spread <= max(stop * abs(E), floor):
            break
    if spread > max(stop * abs(E), floor):
        raise ArithmeticError(f"minimax_odd: Remez did not level the error in "
                              f"{max_iterations} exchanges (spread {float(spread):.3g})")
    return Minimax(tuple(_fraction(a) for a in c), _fraction(abs(E)),
                   (Fraction(lower), *(_fraction(x) for x in ref[1:-1]), Fraction(upper)),
                   _fraction(spread), it)


@lru_cache(maxsize=1)
def _cubic_closed_form() -> tuple[tuple[str, Any], ...]:
    return tuple(_derive_optimal_cubic().items())


def optimal_cubic_closed_form() -> dict[str, Any]:
    r"""The minimax cubic :math:`p(x) = a x + b x^3` for 1 on :math:`[\ell, 1]`, derived
    with SymPy: equioscillation at :math:`\ell`, the critical point :math:`x_*` and 1,

    .. math:: 1 - p(\ell) = E,\quad 1 - p(x_*) = -E,\quad 1 - p(1) = E,\quad p'(x_*) = 0,

    is linear in :math:`(a, b, E)` for fixed :math:`x_*`; substituting its solution into
    :math:`p'(x_*) = 0` and factoring leaves :math:`x_*^2 = (\ell^2 + \ell + 1)/3`, whence

    .. math:: a = \frac{2 s}{\ell^2 + \ell + \frac{2}{3\sqrt 3} s^{3/2}},\quad
              b = -\frac{a}{s},\quad E = 1 - \frac{a (\ell^2 + \ell)}{s},\qquad
              s = \ell^2 + \ell + 1.

    Returns the SymPy expressions ``{"l", "x_star", "a", "b", "E"}`` in the symbol ``l``
    (derived once, then cached)."""
    return dict(_cubic_closed_form())


def _derive_optimal_cubic() -> dict[str, Any]:
    """SymPy derivation of :func:`optimal_cubic_closed_form`."""
    import sympy as sp

    l_, x, E = sp.symbols("l x E", positive=True)
    a_, b_ = sp.symbols("a b", real=True)
    p = a_ * x + b_ * x**3
    sol = sp.solve([sp.Eq(1 - p.subs(x, l_), E), sp.Eq(1 - p, -E),
                    sp.Eq(1 - p.subs(x, 1), E)], [a_, b_, E], dict=True)[0]
    crit = sp.factor(sp.together(sp.diff(p, x).subs(sol)))
    # the numerator's factors in x (the denominator vanishes only at x = -l, -1, 1 + l)
    factors = [f for f, _ in sp.factor_list(sp.numer(crit))[1] if f.has(x)]
    if len(factors) != 1 or sp.degree(factors[0], x) != 2:
        raise ArithmeticError(f"optimal_cubic_closed_form: unexpected factors {factors}")
    x2 = sp.solve(factors[0].subs(x, sp.sqrt(x)), x)  # the factor is linear in x**2
    x_star = sp.sqrt(sp.factor(x2[0]))
    out = {k: sp.simplify(v.subs(x, x_star)) for k, v in sol.items()}
    return {"l": l_, "x_star": x_star, "a": out[a_], "b": out[b_], "E": out[E]}


def optimal_cubic(lower: Any) -> dict[str, Any]:
    r"""The closed form of :func:`optimal_cubic_closed_form` at :math:`\ell` = ``lower``
    (exact SymPy numbers for a Fraction or integer ``lower``).

    The known optimum on :math:`[0.1, 1]`: :math:`x_* = \sqrt{0.37}`,

    .. math:: a = 3.963\,405\,079\,35\ldots,\quad b = -3.570\,635\,206\,62\ldots,\quad
              E = 0.607\,230\,127\,27\ldots

    (:math:`p(0.1) = p(1) = 1 - E = 0.392\,769\,87\ldots`, :math:`p(x_*) = 1 + E`)."""
    import sympy as sp

    _check_interval(lower, 1)
    form = optimal_cubic_closed_form()
    val = sp.Rational(Fraction(lower).numerator, Fraction(lower).denominator)
    return {k: val if k == "l" else sp.simplify(v.subs(form["l"], val))
            for k, v in form.items()}


@dataclass(frozen=True)
class Design:
    r"""A designed schedule (:func:`design`): ``schedule`` (one coefficient tuple per step,
    exact Fractions of the float64 coefficients that run), ``lower``, ``steps``,
    ``degree``, ``step_errors`` (:math:`E_j = \max |1 - p_j|` on :math:`[\ell_j, u_j]`, each
    greedy step's error in high precision, before rounding the coefficients),
    ``certified`` (:func:`nlaverify.optim.certify.certified_interval` of ``schedule`` on
    :math:`[\varepsilon, 1]`), ``error`` = ``certified.error`` and ``designed`` (the number
    of minimax steps; the ``steps - designed`` later ones are the Newton–Schulz fallback of
    :func:`design`, whose ``step_errors`` are the certified errors of the schedule after
    them)."""

    schedule: list[Coefficients]
    lower: Fraction
    steps: int
    degree: int
    step_errors: tuple[float, ...]
    certified: Any
    error: float
    designed: int = 0


def _image(ctx: Any, c: list[Any], lo: Any, hi: Any) -> tuple[Any, Any]:
    """The exact range of ``p`` on ``[lo, hi]`` (endpoints and critical points)."""
    vals = [odd_polynomial(c, x) for x in _exchange(ctx, c, lo, hi)]
    return min(vals), max(vals)


def design(steps: int, lower: Any, degree: int = 5, *, digits: int = DIGITS,
           safety: float = 1.0, cushion: float = 0.0) -> Design:
    r"""Per-step odd polynomials of degree ``degree`` minimising
    :math:`\max_{[\varepsilon, 1]} |1 - p_k \circ \dots \circ p_1|`, greedily (module
    docstring; optimal by Amsel et al. 2025, Thm. 4.1): step :math:`j` is
    :func:`minimax_odd` on :math:`[\ell_j, u_j]`, the next interval its image
    :math:`[1 - E_j, 1 + E_j]`, from :math:`[\varepsilon, 1]` = ``[lower, 1]``.

    Two practical tweaks of the Polar Express, both off by default (then the schedule is the
    exact greedy optimum for the rounded coefficients):

    - ``safety`` :math:`= s > 1`: every step but the last is applied as
      :math:`p_j(x / s)` (coefficients :math:`a_{2i+1} s^{-(2i+1)}`), so a singular value
      that float rounding pushed up to :math:`s\,u_j` is still inside the interval the
      polynomial was designed for (the paper uses :math:`s = 1.01` for bfloat16);
    - ``cushion`` :math:`= c \in (0, 1)`: :math:`p_j` is designed on
      :math:`[\max(\ell_j, c u_j), u_j]` and rescaled so that its image of
      :math:`[\ell_j, u_j]` is centred on 1, which keeps the early polynomials from
      growing so steeply that rounding is amplified (the paper uses :math:`c \approx 0.024`).

    With a tweak the next interval is the exact image of :math:`[\ell_j, u_j]` under the
    applied polynomial (endpoints and critical points, in ``digits`` digits).

    Once a step's error :math:`E_j` falls below :data:`STOP_ERROR` (:math:`2^{-50}`, the
    rounding level of the float64 coefficients), designing stops and every later step is
    the Newton–Schulz polynomial of the same degree
    (:func:`~nlaverify.optim.newton_schulz.newton_schulz_family`, exact in float64,
    superattracting at 1): a minimax polynomial on :math:`[1 - E_j, 1 + E_j]` would gain
    nothing over the coefficient rounding, and would need ever more working digits. The
    result is certified by :func:`nlaverify.optim.certify.certified_trajectory` on the
    schedule that runs, fallback included."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ArgumentError(f"steps: expected an integer >= 1, got {steps!r}")
    _check_degree(degree)
    _check_interval(lower, 1)
    if not (isinstance(safety, (int, float)) and 1.0 <= safety < 2.0):
        raise ArgumentError(f"safety: expected a number in [1, 2), got {safety!r}")
    if not (isinstance(cushion, (int, float)) and 0.0 <= cushion < 1.0):
        raise ArgumentError(f"cushion: expected a number in [0, 1), got {cushion!r}")
    ctx = mpmath.MPContext()
    ctx.dps = digits
    lo, hi = Fraction(lower), Fraction(1)
    plan: list[Coefficients] = []
    errors: list[float] = []
    fallback = newton_schulz_family((degree - 1) // 2)
    designed = steps
    for j in range(steps):
        if j and max(1 - lo, hi - 1) < STOP_ERROR:
            designed = j
            plan.extend([fallback] * (steps - j))
            break
        l_design = max(lo, Fraction(cushion) * hi)
        mm = minimax_odd(degree, l_design, hi, digits=digits)
        c = [_mp(ctx, a) for a in mm.coeffs]
        if cushion and l_design > lo:  # re-centre the image of [lo, hi] on 1
            pmin, pmax = _image(ctx, c, _mp(ctx, lo), _mp(ctx, hi))
            c = [a * 2 / (pmin + pmax) for a in c]
        if safety != 1.0 and j < steps - 1:
            s = _mp(ctx, Fraction(safety))
            c = [a / s ** (2 * i + 1) for i, a in enumerate(c)]
        coeffs = tuple(Fraction(float(a)) for a in c)  # the float64 numbers that run
        plan.append(coeffs)
        if safety == 1.0 and not cushion:
            lo, hi = 1 - mm.error, 1 + mm.error
        else:
            pmin, pmax = _image(ctx, c, _mp(ctx, lo), _mp(ctx, hi))
            lo, hi = _fraction(pmin), _fraction(pmax)
        errors.append(float(max(1 - lo, hi - 1)))
    from nlaverify.optim.certify import certified_trajectory, interval_of

    traj = certified_trajectory(plan, steps, Fraction(lower), 1)
    cert = interval_of(traj, steps)
    for lo_j, hi_j in traj[designed + 1:]:  # the fallback steps: certified errors
        errors.append(float(max(abs(1 - lo_j), abs(hi_j - 1))))
    return Design(plan, Fraction(lower), steps, degree, tuple(errors), cert, cert.error,
                  designed)


def compare(steps: int, lower: Any, degree: int = 5) -> list[dict[str, Any]]:
    r"""Side by side, for :math:`k` = ``steps`` and :math:`\varepsilon` = ``lower``: the
    certified interval :math:`[lo, hi]` of :math:`p^k([\varepsilon, 1])` and the
    worst-case error :math:`\max |1 - p^k|` for Muon's set, the cubic, the quintic and the
    designed schedule (:func:`design` of ``degree``). Rows are dicts
    ``{"name", "steps", "lower", "lo", "hi", "error"}``.

    For :math:`k = 5`, :math:`\varepsilon = 10^{-3}` (certified, rounded outward):

    ==================  =====================  ================
    coefficients        interval after 5       worst error
    ==================  =====================  ================
    Muon                [0.470544, 1.20237]    0.529456
    cubic               [0.00759364, 1]        0.992406
    quintic             [0.023171, 1]          0.976829
    designed (quintic)  [0.886552, 1.11345]    0.113448
    ==================  =====================  ================
    """
    from nlaverify.optim.certify import certified_interval

    d = design(steps, lower, degree)
    rows = []
    for name, coeffs in (("muon", MUON), ("cubic", CUBIC), ("quintic", QUINTIC),
                         (f"designed (degree {degree})", d.schedule)):
        cert = d.certified if name.startswith("designed") else certified_interval(
            coeffs, steps, Fraction(lower), 1)
        rows.append({"name": name, "steps": steps, "lower": float(lower), "lo": cert.lo,
                     "hi": cert.hi, "error": cert.error})
    return rows


def format_comparison(rows: list[dict[str, Any]]) -> str:
    """The rows of :func:`compare` as a Markdown table."""
    out = ["| coefficients | k | ε | certified interval | worst-case error |",
           "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['name']} | {r['steps']} | {r['lower']:g} | "
                   f"[{r['lo']:.6g}, {r['hi']:.6g}] | {r['error']:.6g} |")
    return "\n".join(out)
