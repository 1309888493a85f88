r"""The ``geometry`` family: near-orthogonality of random directions and the
Johnson–Lindenstrauss bound (Baggag & Saad §3.14.1, Fig. 24, Table 5; Dasgupta & Gupta 2003;
Achlioptas 2003), proved with the running functions of :mod:`nlaverify.geometry` on the SymPy
namespace.

* the density of :math:`\cos\theta` between uniform directions in :math:`\mathbb R^d`: its
  normaliser, mean 0, variance :math:`1/d` and fourth moment, for every integer
  :math:`d \ge 2` (integration by parts at symbolic :math:`d`) and exactly for
  :math:`d = 2, \dots, 8`;
* the probability of the band :math:`|\theta - 90°| \le \delta`: the running recurrence is
  the integral of the density (its derivative in :math:`\delta`, exactly), equals the
  regularized incomplete beta that :func:`~nlaverify.geometry.angles.angle_band_probability`
  evaluates (50 digits, up to :math:`d = 12{,}288`);
* the moments of :math:`\|Px\|^2` for Gaussian, sparse Achlioptas and Rademacher entries;
* the Dasgupta–Gupta bound: the Chernoff step for :math:`\chi^2_k` and the logarithm
  inequalities it needs, and the target dimension :math:`k \ge 4\ln n/(\varepsilon^2/2 -
  \varepsilon^3/3)`.

The library is called through its modules (``_an.cosine_density``, ``_jl.projected_sq_norm``,
...), so a test can plant an error and see the proof fail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mpmath
import numpy as np
import sympy

from nlaverify.backends import get_namespace
from nlaverify.geometry import angles as _an
from nlaverify.geometry import jl as _jl
from nlaverify.identities._expectations import _Checks, _xp
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.symbolic.exact import symbol_array
from nlaverify.tolerance import tolerance

S314 = "Baggag & Saad §3.14.1 (Fig. 24, Table 5)"
DG = "Dasgupta & Gupta 2003 (An elementary proof of a theorem of Johnson and Lindenstrauss)"
ACH = "Achlioptas 2003 (Database-friendly random projections)"

_t = sympy.Symbol("t", real=True)
_phi = sympy.Symbol("phi", real=True)
_delta = sympy.Symbol("delta", real=True)
_d = sympy.Symbol("d", positive=True)
_j = sympy.Symbol("j", integer=True, nonnegative=True)
_k = sympy.Symbol("k", positive=True)
_eps = sympy.Symbol("epsilon", positive=True)
_lam = sympy.Symbol("lambda", positive=True)
_S, _C = sympy.symbols("S C")  # sin, cos as polynomial variables
_SMALL_D = tuple(range(2, 9))


def _v(x: Any) -> sympy.Expr:
    """A scalar result of the namespace (a 0-d object array or a SymPy expression)."""
    return sympy.sympify(np.asarray(x, dtype=object).ravel()[0]) if isinstance(
        x, np.ndarray) else sympy.sympify(x)


def _cos_power(expr: sympy.Expr, x: sympy.Symbol) -> sympy.Expr:
    r""":math:`(1 - \sin^2 x)^r \to \cos^{2r} x`: exact where :math:`\cos x \ge 0`
    (:math:`|x| \le \pi/2`, the only range used here)."""
    return expr.replace(lambda e: e.is_Pow and e.base == 1 - sympy.sin(x) ** 2,
                        lambda e: sympy.cos(x) ** (2 * e.exp))


def _gamma_zero(e: sympy.Expr) -> bool:
    """``e`` (Gamma functions at symbolic arguments differing by integers) is 0."""
    return sympy.cancel(sympy.gammasimp(sympy.expand_func(sympy.gammasimp(e)))) == 0


# --------------------------------------------------------------------------- cos θ density


def _moments_exact(d: int) -> list[sympy.Expr]:
    r""":math:`\int_{-1}^1 t^{m} f_d(t)\,dt`, :math:`m = 0, 2, 4`, of the running density:
    in :math:`t` when it is a polynomial (odd :math:`d`), else through :math:`t = \sin\varphi`,
    :math:`dt = \cos\varphi\,d\varphi` (SymPy's trigonometric integrals are fast where those
    of :math:`(1 - t^2)^{r}` with a half-integer :math:`r` are not)."""
    f = _v(_an.cosine_density(_xp(), _t, d))
    if f.is_polynomial(_t):
        return [sympy.integrate(sympy.expand(_t**m * f), (_t, -1, 1)) for m in (0, 2, 4)]
    f = _cos_power(_v(_an.cosine_density(_xp(), sympy.sin(_phi), d)), _phi)
    half = sympy.pi / 2
    return [sympy.integrate(sympy.sin(_phi) ** m * f * sympy.cos(_phi), (_phi, -half, half))
            for m in (0, 2, 4)]


def derive_cosine_density() -> Proof:
    chk = _Checks()
    xp = _xp()
    f = _v(_an.cosine_density(xp, _t, _d))
    chk.zero(_v(_an.cosine_density(xp, -_t, _d)) - f, "f_d(-t) - f_d(t)")
    # integration by parts at symbolic d and j (one identity for every moment)
    ibp = sympy.diff(_t ** (2 * _j + 1) * (1 - _t**2) * f, _t) - (
        (2 * _j + 1) * _t ** (2 * _j) - (_d + 2 * _j) * _t ** (2 * _j + 2)) * f
    # powers combined: integer j, and 1 - t^2 > 0 inside (-1, 1)
    chk.zero(sympy.expand(sympy.powsimp(sympy.expand(ibp / f), force=True)),
             "d/dt[t^(2j+1)(1-t^2) f] / f - ((2j+1)t^(2j) - (d+2j)t^(2j+2))")
    for m in range(4):
        ratio = _v(_an.cosine_moment(xp, _d, m + 1)) / _v(_an.cosine_moment(xp, _d, m))
        chk.zero(sympy.cancel(ratio - (2 * m + 1) / (_d + 2 * m)),
                 f"cosine_moment(d, {m + 1}) / cosine_moment(d, {m}) - (2j+1)/(d+2j)")
    # the normaliser: c_{d+2}/c_d = d/(d-1) = the ratio of the unnormalised integrals
    c = _an.cosine_density_constant(xp, _d)
    c2 = _an.cosine_density_constant(xp, _d + 2)
    chk.holds(_gamma_zero(c2 / c - _d / (_d - 1)), "c_{d+2}/c_d - d/(d-1)", c2 / c)
    chk.holds(_gamma_zero(c * sympy.beta(sympy.Rational(1, 2), (_d - 1) / 2) - 1),
              "c_d B(1/2, (d-1)/2) - 1")
    # exact cases
    table = []
    for d in _SMALL_D if chk.bad is None else ():  # (a failed proof stops before the integrals)
        chk.holds(_gamma_zero(_an.cosine_density_constant(xp, d) - c.subs(_d, d)),
                  f"d = {d}: the rational form of c_d minus the Gamma form")
        m0, m2, m4 = _moments_exact(d)
        chk.zero(m0 - 1, f"d = {d}: integral of f_d minus 1")
        chk.zero(m2 - _v(_an.cosine_moment(xp, d, 1)), f"d = {d}: E t^2 - cosine_moment")
        chk.zero(m2 - sympy.Rational(1, d), f"d = {d}: E t^2 - 1/d")
        chk.zero(m4 - _v(_an.cosine_moment(xp, d, 2)), f"d = {d}: E t^4 - cosine_moment")
        table.append(f"{d} & {sympy.latex(_v(_an.cosine_density(xp, _t, d)))} & "
                     f"{sympy.latex(m2)} & {sympy.latex(m4)}")
    return chk.proof([
        Step("The running `cosine_density` at symbolic $d$ (Baggag & Saad §3.14.1, Fig. 24) is "
             "even in $t$, so every odd moment vanishes (mean 0):",
             r"f_d(t) = " + sympy.latex(f) + r",\qquad f_d(-t) = f_d(t)"),
        Step("Integration by parts, checked at symbolic $d$ and $j$ on the running density "
             "(the boundary term $t^{2j+1}(1-t^2)f_d(t) \\propto t^{2j+1}(1-t^2)^{(d-1)/2}$ "
             "vanishes at $\\pm1$ for $d > 1$); integrated over $[-1, 1]$ it gives the "
             "recurrence of the even moments, which the running `cosine_moment` follows:",
             r"\frac{d}{dt}\bigl[t^{2j+1}(1-t^2)f_d\bigr] = \bigl((2j+1)t^{2j} - (d+2j)"
             r"t^{2j+2}\bigr)f_d \ \Rightarrow\ \mathbb E t^{2j+2} = \frac{2j+1}{d+2j}"
             r"\mathbb E t^{2j},\quad \mathbb E t^2 = \frac1d,\ \mathbb E t^4 = "
             r"\frac{3}{d(d+2)}"),
        Step("Normalisation for every integer $d \\ge 2$: with $N_d = \\int_{-1}^1 (1-t^2)^"
             "{(d-3)/2}dt$, the case $j = 0$ gives $N_{d+2} = N_d - N_d/d$, and the running "
             "constant has $c_{d+2}/c_d = d/(d-1)$ (SymPy, Gamma functions at symbolic $d$); "
             "so $c_dN_d$ is 2-periodic in $d$, and it is 1 at $d = 2, 3$ (below). "
             "Equivalently $c_d = 1/B(\\tfrac12, \\tfrac{d-1}2)$: $\\cos^2\\theta \\sim "
             "\\mathrm{Beta}(\\tfrac12, \\tfrac{d-1}2)$.",
             r"c_d = \frac{\Gamma(d/2)}{\sqrt\pi\,\Gamma((d-1)/2)},\quad "
             r"\frac{c_{d+2}}{c_d} = \frac{N_d}{N_{d+2}} = \frac{d}{d-1},\quad "
             r"c_d\,B\bigl(\tfrac12, \tfrac{d-1}2\bigr) = 1"),
        Step("Exact cases $d = 2, \\dots, 8$ by `sympy.integrate` of the running density "
             "(odd $d$ in $t$, even $d$ through $t = \\sin\\varphi$): integral 1, "
             "$\\mathbb E t^2 = 1/d$, $\\mathbb E t^4 = 3/(d(d+2))$; the rational form of "
             "$c_d$ equals the Gamma form:",
             r"\begin{array}{llll} d & f_d(t) & \mathbb E t^2 & \mathbb E t^4\\ "
             + r"\\ ".join(table) + r"\end{array}"),
    ])


# --------------------------------------------------------------------------- the band


def _band_derivative_zero(chk: _Checks, d: int) -> sympy.Expr:
    xp = _xp()
    P = _v(_an.band_probability(xp, _delta, d))
    f = _cos_power(_v(_an.cosine_density(xp, sympy.sin(_delta), d)), _delta)
    e = sympy.expand(sympy.diff(P, _delta) - 2 * f * sympy.cos(_delta))
    e = e.xreplace({sympy.sin(_delta): _S, sympy.cos(_delta): _C})
    num = sympy.numer(sympy.together(e))
    rem = sympy.rem(sympy.expand(num), _S**2 + _C**2 - 1, _S)
    chk.holds(rem == 0, f"d = {d}: dP/d(delta) - 2 f(sin delta) cos delta mod sin^2+cos^2-1",
              rem)
    chk.zero(P.subs(_delta, 0), f"d = {d}: P(0)")
    chk.zero(P.subs(_delta, sympy.pi / 2) - 1, f"d = {d}: P(pi/2) - 1")
    return P


def _band_high_precision(chk: _Checks, digits: int = 50) -> list[str]:
    r"""The incomplete beta (mpmath, ``digits``) against the recurrence: on the mpmath
    namespace for :math:`d \le 768`, in float64 for :math:`d = 12{,}288` (6,143 steps; the
    tolerance model with the chain of :math:`d/2` products of the constants as depth)."""
    rows = []
    for d in (3, 4, 768, 12288):
        exact = _an.angle_band_probability(d, 2, digits=digits)
        if d <= 768:
            mp = get_namespace("mpmath", digits=digits)
            rec: Any = _v(_an.band_probability(mp, mp.asarray(mp.ctx.pi / 90), d))
            tol = tolerance("mpmath", digits=digits, size=d // 2, depth=d // 2)
        else:
            rec = _an.band_probability(get_namespace("numpy"), np.float64(np.pi / 90), d)
            tol = tolerance(np.float64, size=d // 2, depth=d // 2)
        gap = abs(mpmath.mpf(rec) - mpmath.mpf(exact))
        chk.holds(float(gap) <= tol.rtol, f"d = {d}: betainc vs recurrence ({tol.reason})", gap)
        rows.append(f"{d} & {mpmath.nstr(exact, 20)} & "
                    f"{_an.angle_band_normal_approximation(d, 2):.15f}")
    return rows


def derive_band_probability() -> Proof:
    chk = _Checks()
    xp = _xp()
    Ps = {d: _band_derivative_zero(chk, d) for d in _SMALL_D}
    chk.zero(Ps[3] - sympy.sin(_delta), "d = 3: P - sin(delta)")
    chk.zero(Ps[4] - 2 / sympy.pi * (_delta + sympy.sin(_delta) * sympy.cos(_delta)),
             "d = 4: P - (2/pi)(delta + sin delta cos delta)")
    # the step of the recurrence at symbolic d
    inc = _v(_an.band_probability_increment(xp, sympy.sin(_delta), sympy.cos(_delta), _d))
    c, cm = _an.cosine_density_constant(xp, _d), _an.cosine_density_constant(xp, _d - 2)
    e = sympy.diff(inc, _delta) - (2 * c * sympy.cos(_delta) ** (_d - 2)
                                  - 2 * cm * sympy.cos(_delta) ** (_d - 4))
    e = e.subs(sympy.sin(_delta) ** 2, 1 - sympy.cos(_delta) ** 2)
    e = sympy.expand(sympy.powsimp(sympy.expand(e / sympy.cos(_delta) ** (_d - 4) / c)))
    chk.holds(_gamma_zero(e), "d/d(delta) of the step minus 2c_d cos^(d-2) - 2c_(d-2) "
              "cos^(d-4)", e)
    rows = _band_high_precision(chk)
    return chk.proof([
        Step("$|\\theta - 90°| \\le \\delta \\iff |\\cos\\theta| \\le \\sin\\delta$, so "
             "$P_d(\\delta) = \\int_{-\\sin\\delta}^{\\sin\\delta} f_d(t)\\,dt = "
             "\\int_0^\\delta 2f_d(\\sin u)\\cos u\\,du$ ($t = \\pm\\sin u$): $P_d(0) = 0$ and "
             "$P_d' = 2f_d(\\sin\\delta)\\cos\\delta = 2c_d\\cos^{d-2}\\delta$. The running "
             "`band_probability` (symbolic $\\delta$, $d = 2, \\dots, 8$) has exactly this "
             "derivative (reduced modulo $\\sin^2 + \\cos^2 = 1$), vanishes at 0 and is 1 at "
             "$\\pi/2$; for instance",
             r"P_3 = " + sympy.latex(Ps[3]) + r",\quad P_4 = " + sympy.latex(Ps[4])
             + r",\quad P_5 = " + sympy.latex(Ps[5])),
        Step("Every $d$: the running `band_probability_increment` (symbolic $d$, Gamma "
             "functions) has the derivative $P_d' - P_{d-2}'$, so the recurrence from $P_2 = "
             "2\\delta/\\pi$, $P_3 = \\sin\\delta$ gives $P_d$ for all $d$:",
             r"\frac{d}{d\delta}\Bigl[\frac{2c_d}{d-2}\sin\delta\cos^{d-3}\delta\Bigr] = "
             r"2c_d\cos^{d-2}\delta - 2c_{d-2}\cos^{d-4}\delta"),
        Step("With $u = t^2$, $P_d(\\delta) = P(\\cos^2\\theta \\le \\sin^2\\delta) = "
             "I_{\\sin^2\\delta}(\\tfrac12, \\tfrac{d-1}2)$ ($\\cos^2\\theta \\sim "
             "\\mathrm{Beta}(\\tfrac12, \\tfrac{d-1}2)$, identity `geometry_cosine_density`). "
             "The running `angle_band_probability` (mpmath `betainc`, 50 digits) agrees at "
             "$\\delta = 2°$ with the recurrence run on the mpmath namespace (50 digits) for "
             "$d = 3, 4, 768$ and in float64 for $d = 12{,}288$ (the 88°–92° band of Fig. 24 "
             "at $d_{\\text{model}}$ of GPT-3, Table 5), each within the tolerance model. "
             "Exact value against the normal "
             "approximation $\\operatorname{erf}(\\sin\\delta\\sqrt{d/2})$:",
             r"\begin{array}{lll} d & P(88° \le \theta \le 92°) & \text{normal approx.}\\ "
             + r"\\ ".join(rows) + r"\end{array}"),
    ])


# --------------------------------------------------------------------------- JL moments

_LAWS = (_jl.GAUSSIAN, _jl.ACHLIOPTAS, _jl.RADEMACHER)


def _expect(expr: sympy.Expr, entries: list[sympy.Symbol], law: _jl.EntryLaw,
            k: Any) -> sympy.Expr:
    r""":math:`\mathbb E` of a polynomial in i.i.d. entries with the law's moments
    (:meth:`EntryLaw.moment`): monomial by monomial, :math:`\mathbb E\prod s_i^{e_i} =
    \prod \mathbb E s^{e_i}`."""
    poly = sympy.Poly(sympy.expand(expr), *entries)
    xp = _xp()
    total = sympy.Integer(0)
    for exps, coeff in poly.terms():
        term = coeff
        for e in exps:
            if e:
                term = term * _v(law.moment(xp, e, k))
        total += term
    return sympy.expand(total)


def _gaussian_moments_step(chk: _Checks) -> None:
    g = sympy.Symbol("g", real=True)
    phi = sympy.exp(-g**2 / 2) / sympy.sqrt(2 * sympy.pi)
    for j in range(1, 5):
        m = sympy.integrate(g**j * phi, (g, -sympy.oo, sympy.oo))
        chk.zero(m - _jl.GAUSSIAN.raw_moment(j), f"E g^{j} by integration - raw_moment")


def derive_projection_moments() -> Proof:
    chk = _Checks()
    xp = _xp()
    _gaussian_moments_step(chk)
    d, k = 3, 2
    x = symbol_array("x", (d,))
    n2 = sum(x * x)
    n4 = sum(x**4)
    P = symbol_array("s", (k, d))
    entries = list(P.ravel())
    y = _v(_jl.projected_sq_norm(xp, x, P))
    # one row of a K-row projection, symbolic K
    row = symbol_array("r", (1, d))
    y1 = _v(_jl.projected_sq_norm(xp, x, row))
    shown = {}
    for law in _LAWS:
        m1 = _expect(y, entries, law, k)
        m2 = _expect(y * y, entries, law, k)
        chk.zero(m1 - n2, f"{law.name}: E|Px|^2 - |x|^2 (k = {k})")
        var = _v(_jl.sq_norm_ratio_variance(xp, x, k, law))
        chk.zero(sympy.cancel(m2 - m1**2 - var * n2**2), f"{law.name}: Var|Px|^2 (k = {k})",
                 rational=True)
        e1 = _expect(y1, list(row.ravel()), law, _k)
        e2 = _expect(y1 * y1, list(row.ravel()), law, _k)
        varK = _v(_jl.sq_norm_ratio_variance(xp, x, _k, law))
        chk.zero(sympy.cancel(_k * e1 - n2), f"{law.name}: K E(r.x)^2 - |x|^2")
        chk.zero(sympy.cancel(_k * (e2 - e1**2) - varK * n2**2),
                 f"{law.name}: K Var (r.x)^2 - Var|Px|^2 (symbolic K)", rational=True)
        shown[law.name] = (law.kurtosis(), sympy.factor(sympy.cancel(varK * n2**2)),
                           _v(law.moment(xp, 4, _k)))
    gauss = _v(_jl.sq_norm_ratio_variance(xp, x, _k, _jl.GAUSSIAN))
    for law in _LAWS[1:]:
        gap = sympy.cancel(gauss - _v(_jl.sq_norm_ratio_variance(xp, x, _k, law)))
        want = (3 - sympy.Rational(law.kurtosis().numerator, law.kurtosis().denominator)
                ) * n4 / (_k * n2**2)
        chk.zero(sympy.cancel(gap - want), f"{law.name}: Gaussian variance minus its own",
                 rational=True)
        chk.holds(law.kurtosis() <= 3, f"{law.name}: kurtosis <= 3", law.kurtosis())
    tab = r"\\ ".join(f"\\text{{{n}}} & {sympy.latex(m4)} & {ku} & {sympy.latex(v)}"
                      for n, (ku, v, m4) in shown.items())
    return chk.proof([
        Step("The Gaussian moments $\\mathbb E g^j = 0, 1, 0, 3$ ($j = 1..4$) by "
             "`sympy.integrate`; the discrete laws' moments from their tables "
             "(`EntryLaw.moment`: sparse Achlioptas $\\sqrt{3/k}\\{-1, 0, 1\\}$ with "
             "probabilities $\\tfrac16, \\tfrac23, \\tfrac16$; Rademacher $\\pm1/\\sqrt k$).",
             r"\mathbb E s^2 = \frac1k\ \text{(all three)},\qquad"
             r"\mathbb E s^4:\ \frac{3}{k^2},\ \frac{3}{k^2},\ \frac1{k^2}"),
        Step(f"Symbolic $x \\in \\mathbb R^{d}$ and projection entries $P \\in \\mathbb "
             f"R^{{{k}\\times{d}}}$: the running `projected_sq_norm` is a polynomial in the "
             "entries; its expectation monomial by monomial (independent entries) gives "
             "$\\mathbb E\\|Px\\|^2 = \\|x\\|^2$ and the running `sq_norm_ratio_variance` "
             "times $\\|x\\|^4$, for each law. For symbolic $k$: one row's mean and variance, "
             "times $k$ (i.i.d. rows), agree with it too:",
             r"\operatorname{Var}\frac{\|Px\|^2}{\|x\|^2} = \frac{2 + (\kappa-3)\|x\|_4^4/"
             r"\|x\|_2^4}{k},\qquad \begin{array}{llll} \text{law} & \mathbb E s^4 & \kappa "
             r"& \operatorname{Var}\|Px\|^2\\ " + tab + r"\end{array}"),
        Step("Hence the sparse law (two thirds zeros, three times cheaper) has exactly the "
             "Gaussian variance ($\\kappa = 3$) and the Rademacher law less "
             "($\\kappa = 1$): the difference to the Gaussian is $(3 - \\kappa)\\|x\\|_4^4/"
             "(k\\|x\\|_2^4) \\ge 0$ (Achlioptas 2003).",
             r"\operatorname{Var}_{\text{Gauss}} - \operatorname{Var}_{\text{law}} = "
             r"\frac{(3-\kappa)\,\|x\|_4^4}{k\,\|x\|_2^4} \ge 0"),
    ])


# --------------------------------------------------------------------------- Dasgupta–Gupta


def derive_dasgupta_gupta() -> Proof:
    chk = _Checks()
    xp = _xp()
    g = sympy.Symbol("g", real=True)
    a = sympy.Symbol("a", positive=True)  # a = 1 - 2 lambda (upper), 1 + 2 lambda (lower)
    mgf = sympy.integrate(sympy.exp(-a * g**2 / 2) / sympy.sqrt(2 * sympy.pi),
                          (g, -sympy.oo, sympy.oo))
    chk.zero(mgf - a ** sympy.Rational(-1, 2), "E exp(-a g^2/2) - a^(-1/2)")
    half = _k / 2
    # upper tail: log of (1 - 2 lam)^(-k/2) exp(-lam (1+eps) k), minimised over lam
    up = -half * sympy.log(1 - 2 * _lam) - _lam * (1 + _eps) * _k
    lam_up = sympy.solve(sympy.diff(up, _lam), _lam)
    chk.holds(len(lam_up) == 1 and sympy.cancel(lam_up[0] - _eps / (2 * (1 + _eps))) == 0,
              "the upper Chernoff minimiser", lam_up)
    up_val = sympy.expand_log(up.subs(_lam, lam_up[0]), force=True)
    chk.zero(sympy.simplify(up_val - half * (sympy.log(1 + _eps) - _eps)),
             "upper Chernoff value - (k/2)(ln(1+eps) - eps)")
    lo = -half * sympy.log(1 + 2 * _lam) + _lam * (1 - _eps) * _k
    lam_lo = sympy.solve(sympy.diff(lo, _lam), _lam)
    chk.holds(len(lam_lo) == 1 and sympy.cancel(lam_lo[0] - _eps / (2 * (1 - _eps))) == 0,
              "the lower Chernoff minimiser", lam_lo)
    # log(1 + 2 lam*) = -log(1 - eps), for 0 < eps < 1
    lo_val = lo.subs(_lam, lam_lo[0]).replace(
        sympy.log, lambda arg: -sympy.log(sympy.cancel(1 / arg)))
    chk.zero(sympy.simplify(sympy.expand_log(lo_val - half * (sympy.log(1 - _eps) + _eps),
                                             force=True)),
             "lower Chernoff value - (k/2)(ln(1-eps) + eps)")
    # the logarithm inequalities by the sign of a derivative
    q = _v(_jl.dg_exponent(xp, _eps))
    gfun = _eps - _eps**2 / 2 + _eps**3 / 3 - sympy.log(1 + _eps)
    hfun = -_eps - _eps**2 / 2 - sympy.log(1 - _eps)
    chk.zero(sympy.cancel(sympy.diff(gfun, _eps) - _eps**3 / (1 + _eps)), "g' - eps^3/(1+eps)")
    chk.zero(sympy.cancel(sympy.diff(hfun, _eps) - _eps**2 / (1 - _eps)), "h' - eps^2/(1-eps)")
    chk.zero(gfun.subs(_eps, 0), "g(0)")
    chk.zero(hfun.subs(_eps, 0), "h(0)")
    chk.zero(sympy.expand(half * (sympy.log(1 + _eps) - _eps) + half * q + half * gfun),
             "upper exponent + (k/2) q + (k/2) g")
    chk.zero(sympy.expand(half * (sympy.log(1 - _eps) + _eps) + half * q + half * hfun
                          + half * _eps**3 / 3), "lower exponent + (k/2) q + (k/2)(h + eps^3/3)")
    bound = _v(_jl.dg_pair_bound(xp, _k, _eps))
    chk.zero(sympy.expand_log(sympy.log(bound / 2), force=True) + half * q,
             "ln(dg_pair_bound/2) + (k/2) q")
    # target dimensions: n(n-1) e^{-k q/2} <= (n-1)/n < 1 exactly when k q >= 4 ln n
    rows = []
    for n, e in ((10, sympy.Rational(1, 2)), (1000, sympy.Rational(1, 10)),
                 (10**6, sympy.Rational(1, 5)), (12288, sympy.Rational(1, 4))):
        kk = _jl.jl_min_dimension(n, float(e))
        qe = q.subs(_eps, e)
        ok = (kk * qe - 4 * sympy.log(n)).evalf(50) >= 0 and (
            (kk - 1) * qe - 4 * sympy.log(n)).evalf(50) < 0
        chk.holds(bool(ok), f"jl_min_dimension({n}, {e}) = {kk} is the least k", kk)
        rows.append(f"{n} & {sympy.latex(e)} & {kk}")
    # the bound is a bound: the exact chi-square tail never exceeds it (a numeric grid)
    worst = max(_jl.chi2_distortion_probability(kk, ee)
                / float(_v(_jl.dg_pair_bound(get_namespace("numpy"), kk, ee)))
                for kk in (1, 4, 16, 64, 256, 1024) for ee in (0.05, 0.2, 0.5, 0.9))
    chk.holds(worst <= 1.0, "exact chi^2 tail / DG bound <= 1 on the grid", worst)
    return chk.proof([
        Step("For the Gaussian projection $k\\|Px\\|^2/\\|x\\|^2 \\sim \\chi^2_k$ (a sum of $k$ "
             "squared standard normals: rotation invariance). The moment generating function "
             "by `sympy.integrate` ($a = 1 \\mp 2\\lambda > 0$):",
             r"\mathbb E\,e^{\lambda g^2} = (1 - 2\lambda)^{-1/2},\qquad \mathbb E\,e^{-\lambda "
             r"g^2} = (1 + 2\lambda)^{-1/2}"),
        Step("Markov's inequality on $e^{\\pm\\lambda\\chi^2_k}$, the exponent minimised over "
             "$\\lambda$ by `sympy.solve` (Dasgupta–Gupta, Lemma 2.2):",
             r"P(\chi^2_k \ge (1+\varepsilon)k) \le \min_\lambda \frac{e^{-\lambda(1+"
             r"\varepsilon)k}}{(1-2\lambda)^{k/2}} = e^{\frac k2(\ln(1+\varepsilon) - "
             r"\varepsilon)},\ \lambda^* = \frac{\varepsilon}{2(1+\varepsilon)};\quad "
             r"P(\chi^2_k \le (1-\varepsilon)k) \le e^{\frac k2(\ln(1-\varepsilon) + "
             r"\varepsilon)},\ \lambda^* = \frac{\varepsilon}{2(1-\varepsilon)}"),
        Step("The logarithm inequalities, by the sign of a derivative: $g(\\varepsilon) = "
             "\\varepsilon - \\varepsilon^2/2 + \\varepsilon^3/3 - \\ln(1+\\varepsilon)$ and "
             "$h(\\varepsilon) = -\\varepsilon - \\varepsilon^2/2 - \\ln(1-\\varepsilon)$ "
             "vanish at 0 and have nonnegative derivatives on $[0, 1)$, so both are "
             "$\\ge 0$; with $q$ the running `dg_exponent` both tail exponents are "
             "$\\le -kq/2$ (the lower one by $h + \\varepsilon^3/3 \\ge 0$):",
             r"g' = \frac{\varepsilon^3}{1+\varepsilon},\ h' = \frac{\varepsilon^2}"
             r"{1-\varepsilon};\qquad q = " + sympy.latex(q) + r",\quad P\bigl(|\|Px\|^2 - "
             r"\|x\|^2| > \varepsilon\|x\|^2\bigr) \le " + sympy.latex(bound)),
        Step("The running `dg_pair_bound` is that bound. Union over the $\\binom n2$ pairs: "
             "all are preserved with probability $\\ge 1 - n(n-1)e^{-kq/2} \\ge 1/n$ when "
             "$kq \\ge 4\\ln n$; the running `jl_min_dimension` returns the least such $k$ "
             "(checked exactly, 50 digits). As a cross-check, the exact $\\chi^2$ tail "
             "(`chi2_distortion_probability`) stays below the bound on a grid of $k, "
             f"\\varepsilon$ (largest ratio {worst:.3f}).",
             r"\begin{array}{lll} n & \varepsilon & k_{\min}\\ " + r"\\ ".join(rows)
             + r"\end{array}"),
    ])


# --------------------------------------------------------------------------- catalogue

_F = "geometry"


def _reg(id_: str, title: str, statement: str, seed: str, certifies: tuple,
         derive: Callable[[], Proof]) -> None:
    register(Identity(id_, _F, title, statement, seed, tuple(qualname(f) for f in certifies),
                      guard(derive), tags=("geometry",)))


_reg("geometry_cosine_density", "The law of cos θ between random directions in R^d",
     r"f_d(t) = \frac{\Gamma(d/2)}{\sqrt\pi\,\Gamma(\frac{d-1}2)}(1-t^2)^{\frac{d-3}2}:\ "
     r"\int f_d = 1,\ \mathbb E t = 0,\ \mathbb E t^2 = \frac1d,\ \mathbb E t^4 = "
     r"\frac3{d(d+2)}", S314,
     (_an.cosine_density, _an.cosine_density_constant, _an.cosine_moment),
     derive_cosine_density)
_reg("geometry_angle_band", "The probability that a random angle lies within δ of 90°",
     r"P(|\theta - 90°| \le \delta) = \int_{-\sin\delta}^{\sin\delta} f_d = "
     r"I_{\sin^2\delta}\bigl(\tfrac12, \tfrac{d-1}2\bigr);\ P_3 = \sin\delta,\ "
     r"P_4 = \tfrac2\pi(\delta + \sin\delta\cos\delta)", S314,
     (_an.band_probability, _an.band_probability_increment, _an.angle_band_probability),
     derive_band_probability)
_reg("geometry_jl_projection_moments",
     "Random projections preserve squared norms in expectation; their variance",
     r"\mathbb E\|Px\|^2 = \|x\|^2,\ \operatorname{Var}\frac{\|Px\|^2}{\|x\|^2} = "
     r"\frac{2 + (\kappa - 3)\|x\|_4^4/\|x\|_2^4}k;\ \kappa = 3 \text{ (Gaussian, sparse "
     r"Achlioptas)},\ 1 \text{ (Rademacher)}", f"{S314}; {ACH}",
     (_jl.projected_sq_norm, _jl.sq_norm_ratio_variance, _jl.EntryLaw.moment,
      _jl.EntryLaw.raw_moment, _jl.EntryLaw.kurtosis), derive_projection_moments)
_reg("geometry_dasgupta_gupta", "The Johnson–Lindenstrauss bound (Dasgupta–Gupta form)",
     r"P\bigl(\|Px\|^2 \notin [1\mp\varepsilon]\|x\|^2\bigr) \le 2e^{-k(\varepsilon^2/2 - "
     r"\varepsilon^3/3)/2};\ k \ge \frac{4\ln n}{\varepsilon^2/2 - \varepsilon^3/3}",
     f"{S314}; {DG}",
     (_jl.dg_exponent, _jl.dg_pair_bound, _jl.jl_min_dimension), derive_dasgupta_gupta)
