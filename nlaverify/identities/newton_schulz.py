r"""The ``newton_schulz`` family: odd polynomial iterations for the polar factor (Baggag &
Saad §5.5, Muon), proved with the running functions of :mod:`nlaverify.optim.newton_schulz`
and :mod:`nlaverify.optim.certify`.

Matrix identities run the library on exact inputs whose entries live in SymPy's sparse
polynomial ring :math:`\mathbb Q[g, s, a]` (a canonical form: equality is equality of
coefficients, so no simplification can fail or time out), built from exact orthogonal
Cayley factors :math:`U, V` and symbolic singular values :math:`s_i`. Scalar identities use
SymPy's exact polynomial algebra (factorisation, division, real-root isolation, Sturm
counts). The certified ranges are re-checked independently: each step's enclosure
:math:`p([a, b]) \subseteq [\mathrm{lo}, \mathrm{hi}]` by exact root counting of
:math:`p - \mathrm{lo}` and :math:`\mathrm{hi} - p` on :math:`[a, b]`. The library is called
through its modules (``_ns.newton_schulz_step``, ``_ce.certified_interval``), so a test can
plant an error and see the proof fail.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import sympy
from sympy.polys.domains import QQ
from sympy.polys.rings import ring

from nlaverify.curvature import shampoo as _sh
from nlaverify.errors import NlaverifyError
from nlaverify.identities.core import Identity, Proof, Step, qualname, register
from nlaverify.identities.kronecker import XP, _cayley, _concrete, _equal, _verdict
from nlaverify.optim import certify as _ce
from nlaverify.optim import newton_schulz as _ns

SEED = "Baggag & Saad §5.5"
SEED_LINK = "Baggag & Saad §5.4–5.5"
Part = tuple[bool, Step]
_x, _e, _t = sympy.symbols("x e t", real=True)

# --------------------------------------------------------------------------- helpers


def _ring(names: str, coeffs: str = "") -> tuple[Any, list[Any], tuple[sympy.Symbol, ...]]:
    """The ring :math:`\\mathbb Q[a][g]` (generators ``names``, symbolic coefficients ``coeffs``
    in the ground domain, so that ``a * X`` on an object array of ring elements stays in it)."""
    a = tuple(sympy.symbols(coeffs, seq=True)) if coeffs else ()
    R, *gens = ring(names, QQ[a] if a else QQ)
    return R, gens, a


def _arr(values: list[Any], shape: tuple[int, int]) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    out.flat[:] = values
    return out


def _same(A: Any, B: Any) -> bool:
    """Entrywise equality of ring elements (canonical forms) and of the shapes."""
    A, B = np.asarray(A, dtype=object), np.asarray(B, dtype=object)
    return A.shape == B.shape and all(a - b == 0 for a, b in zip(A.flat, B.flat, strict=True))


def _orthogonal(n: int, r: int, shift: int, R: Any) -> np.ndarray:
    """The first ``r`` columns of a Cayley orthogonal matrix, as ring constants."""
    return np.vectorize(R, otypes=[object])(_cayley(n, shift)[:, :r])


def _svd(m: int, n: int, values: list[Any], R: Any) -> tuple[np.ndarray, np.ndarray, Callable]:
    """``(G, U V^T, f -> U f(S) V^T)``, :math:`G = U\\operatorname{diag}(values)V^\\top`."""
    r = len(values)
    U, V = _orthogonal(m, r, 0, R), _orthogonal(n, r, 1, R)

    def spectral(f: Callable[[Any], Any]) -> np.ndarray:
        return U @ np.diag([f(v) for v in values]) @ V.T

    return spectral(lambda v: v), spectral(lambda v: R(1) if v != 0 else R(0)), spectral


def _explicit(coeffs: tuple[Any, ...], s: Any) -> Any:
    r""":math:`p(s) = \sum_j a_{2j+1}s^{2j+1}`, written from the definition (not Horner)."""
    return sum((s ** (2 * j + 1) * c for j, c in enumerate(coeffs)), 0 * s)


def _sym_poly(coeffs: tuple[Any, ...], x: sympy.Symbol = _x) -> sympy.Expr:
    """The running scalar map on a SymPy symbol, with exact rational coefficients."""
    return sympy.expand(_ns.odd_polynomial(tuple(sympy.Rational(c) for c in coeffs), x))


def _nonnegative_on(f: sympy.Expr, a: Fraction, b: Fraction) -> bool:
    r"""Exactly: :math:`f \ge 0` on :math:`[a, b]` (a polynomial in :math:`x`). The sign can
    change only at a root of odd multiplicity: count those strictly inside by Sturm
    (``count_roots``), then test one interior point."""
    P = sympy.Poly(f, _x)
    if P.is_zero:
        return True
    A, B = sympy.Rational(a), sympy.Rational(b)
    if A == B:
        return P.eval(A) >= 0
    odd = sympy.Poly(1, _x)
    for fac, mult in P.sqf_list()[1]:
        if mult % 2:
            odd = odd * fac
    inside = odd.count_roots(A, B) - sum(1 for v in (A, B) if odd.eval(v) == 0)
    mid = (A + B) / 2
    return inside == 0 and P.eval(mid) >= 0 and P.eval(A) >= 0 and P.eval(B) >= 0


def _maps_into(coeffs: tuple[Any, ...], a: Fraction, b: Fraction, lo: Fraction,
               hi: Fraction) -> bool:
    r""":math:`p([a, b]) \subseteq [\mathrm{lo}, \mathrm{hi}]`, exactly."""
    p = _sym_poly(coeffs)
    return (_nonnegative_on(p - sympy.Rational(lo), a, b)
            and _nonnegative_on(sympy.Rational(hi) - p, a, b))


def _range_on(coeffs: tuple[Any, ...], a: sympy.Rational, b: sympy.Rational) -> tuple[Any, Any]:
    """Exact rational bounds of a polynomial with coefficients ``coeffs`` (of :math:`x^k`) on
    :math:`[a, b] \\subset [0, \\infty)` by monotone monomials (crude, rigorous)."""
    lo = hi = sympy.Integer(0)
    for k, c in enumerate(coeffs):
        u, v = c * a**k, c * b**k
        lo, hi = lo + min(u, v), hi + max(u, v)
    return lo, hi


def _failing(derive: Callable[..., Proof]) -> Callable[..., Proof]:
    """A planted error that makes the library raise is a failed identity, not a crash."""
    def wrapped(*args: Any, **kwargs: Any) -> Proof:
        try:
            return derive(*args, **kwargs)
        except (NlaverifyError, ValueError, TypeError, ArithmeticError) as exc:
            return Proof("failed", (Step(f"The derivation raised: {exc!r}"),))

    wrapped.__name__, wrapped.__doc__ = derive.__name__, derive.__doc__
    return wrapped


def _fmt(v: Any, digits: int = 6) -> str:
    return f"{float(v):.{digits}g}"


# --------------------------------------------------------------------------- singular values


def derive_singular_values() -> Proof:
    def check(case: tuple[int, int, int, int]) -> bool:
        m, n, r, degree = case
        R, s, coeffs = _ring(",".join(f"s{i}" for i in range(r)),
                             ",".join(f"a{j}" for j in range(degree)))
        G, _, spectral = _svd(m, n, s, R)
        return _same(_ns.newton_schulz_step(XP, G, coeffs),
                     spectral(lambda v: _explicit(coeffs, v)))

    def horner(degree: int) -> bool:
        _, (x,), a = _ring("x", ",".join(f"a{j}" for j in range(degree)))
        return _ns.odd_polynomial(a, x) - _explicit(a, x) == 0

    return _verdict(
        _concrete(r"The running scalar map `odd_polynomial` (Horner in $x^2$) with symbolic "
                  r"coefficients minus $\sum_j a_{2j+1}x^{2j+1}$, cases: the number of "
                  r"coefficients", [1, 2, 3, 4], horner),
        _concrete(r"The running `newton_schulz_step` on $G = U_r\operatorname{diag}(s)V_r^\top$"
                  r" ($U$, $V$ exact Cayley orthogonal matrices, symbolic $s_i$ and symbolic "
                  r"coefficients $a_1, a_3, \dots$, all in $\mathbb Q[s, a]$) minus "
                  r"$U_r\operatorname{diag}(p(s_i))V_r^\top$, cases $(m, n, r, \text{number "
                  r"of coefficients})$: square, wide, tall, rank-deficient, cubic, degree 7",
                  [(2, 2, 2, 3), (2, 3, 2, 3), (3, 2, 2, 3), (2, 3, 1, 3), (2, 3, 2, 2),
                   (2, 2, 2, 4)], check),
        (True, Step("Why: $XX^\\top = U\\Sigma^2U^\\top$, so $(XX^\\top)^jX = U\\Sigma^{2j+1}"
                    "V^\\top$ and every term of the step is $U(\\cdot)V^\\top$ with a diagonal "
                    "middle; a zero singular value stays $p(0) = 0$.",
                    r"p(X) = \sum_j a_{2j+1}(XX^\top)^jX = U\,p(\Sigma)\,V^\top")))


def derive_transpose_trick() -> Proof:
    def symbolic(case: tuple[str, int, int]) -> bool:
        kind, m, steps = case
        n = 2 if m == 3 else 1
        letters = {"cubic": "", "general cubic": "a,b", "general quintic": "a,b,c"}[kind]
        _, gens, a = _ring(",".join(f"g{i}" for i in range(m * n)), letters)
        G = _arr(gens, (m, n))
        coeffs = a or _ns.CUBIC
        run = [_ns.newton_schulz(XP, G, coeffs, steps, normalize=False, transpose=t)
               for t in (True, False)]
        return run[0].shape == (m, n) and _same(*run)

    def structured(case: tuple[int, int, str]) -> bool:
        m, n, kind = case
        R, (s1, s2), _ = _ring("s1,s2")
        values = [s1, s2] if kind == "full rank" else [s1, R(0)]
        G, _, spectral = _svd(m, n, values, R)

        def twice(v: Any) -> Any:
            return _explicit(_ns.MUON, _explicit(_ns.MUON, v))

        want = spectral(twice)
        return all(_same(_ns.newton_schulz(XP, G, _ns.MUON, 2, normalize=False, transpose=t),
                         want) for t in (True, False))

    return _verdict(
        _concrete(r"Tall $G$ with symbolic entries $g_i$ (in $\mathbb Q[g, a]$): the running "
                  r"`newton_schulz(..., normalize=False, transpose=True)` (transposed in and "
                  r"out, Gram matrix $m' \times m'$ with $m' = \min(m, n)$) minus the same "
                  r"without the transposition, cases (coefficients, $m$, steps)",
                  [("cubic", 3, 2), ("general cubic", 3, 2), ("general quintic", 3, 1),
                   ("general quintic", 2, 2)], symbolic),
        _concrete(r"Muon's coefficients, 2 steps, on $G = U\operatorname{diag}(s_1, s_2)V^\top"
                  r"$ and on the rank-deficient $U\operatorname{diag}(s_1, 0)V^\top$, with and "
                  r"without the transposition, minus $U\operatorname{diag}(p(p(s_1)), "
                  r"p(p(s_2)))V^\top$ (a zero singular value stays zero), cases $(m, n)$",
                  [(3, 2, "full rank"), (3, 2, "rank 1"), (2, 3, "rank 1")], structured),
        (True, Step("Why: $p(X^\\top) = \\sum_j a_{2j+1}(X^\\top X)^jX^\\top = "
                    "(\\sum_j a_{2j+1}X(X^\\top X)^j)^\\top = p(X)^\\top$, since $X(X^\\top X)^j "
                    "= (XX^\\top)^jX$.", r"p(X^\top) = p(X)^\top")))


# --------------------------------------------------------------------------- scalar maps


@_failing
def derive_cubic() -> Proof:
    f = _sym_poly(_ns.CUBIC)
    want = (1 - _x) ** 2 * (2 + _x) / 2
    parts: list[Part] = [
        (sympy.expand(1 - f - want) == 0,
         Step("The running `odd_polynomial(CUBIC, x)` and its error, factored by SymPy:",
              rf"f(x) = {sympy.latex(f)},\quad 1 - f(x) = {sympy.latex(sympy.factor(1 - f))}")),
        (sympy.expand((1 - f).subs(_x, 1 - _e) - _e**2 * (3 - _e) / 2) == 0,
         Step("With $e = 1 - x$ the error of one step (quadratic convergence, "
              r"$e'/e^2 \to 3/2$):", r"e' = 1 - f(1 - e) = \tfrac12 e^2(3 - e)"))]
    fixed = sorted(sympy.roots(sympy.Poly(f - _x, _x)))
    slopes = [sympy.diff(f, _x).subs(_x, r) for r in fixed]
    parts.append((fixed == [-1, 0, 1] and slopes == [0, sympy.Rational(3, 2), 0],
                  Step("Fixed points $f(x) = x$ and multipliers $f'$: "
                       + ", ".join(f"${r}$ ($f' = {sympy.latex(d)}$)" for r, d in
                                   zip(fixed, slopes, strict=True))
                       + ": $\\pm1$ superattracting, 0 repelling.")))
    pos = sympy.solveset(f > 0, _x, sympy.Interval.open(0, sympy.oo))
    below = sympy.solveset(1 - f >= 0, _x, sympy.Interval(0, sympy.oo))
    grows = sympy.solveset(f - _x >= 0, _x, sympy.Interval(0, sympy.oo))
    parts.append((pos == sympy.Interval.open(0, sympy.sqrt(3))
                  and below == sympy.Interval(0, sympy.oo) and grows == sympy.Interval(0, 1)
                  and f.subs(_x, sympy.sqrt(3)) == 0,
                  Step("Exact solution sets on $x \\ge 0$ (SymPy `solveset`): "
                       f"$f > 0$ on ${sympy.latex(pos)}$, $f \\le 1$ on "
                       f"${sympy.latex(below)}$, $f(x) \\ge x$ on ${sympy.latex(grows)}$, "
                       "$f(\\sqrt3) = 0$. Hence $f$ maps $(0, \\sqrt3)$ into $(0, 1]$; on "
                       "$(0, 1]$ the iterates increase and stay $\\le 1$, so they converge to "
                       "the only fixed point there, 1, quadratically: $(0, \\sqrt3)$ lies in "
                       "the basin of 1 (and $(-\\sqrt3, 0)$ in that of $-1$, $f$ being odd). "
                       "Argued from the checked sets.")))
    cert = _ce.fixed_points(_ns.CUBIC)
    parts.append(([fp.stable for fp in cert] == [False, True]
                  and cert[0].value.contains(0) and cert[1].value.contains(1),
                  Step("`certify.fixed_points(CUBIC)` agrees: 0 repelling, 1 attracting.")))
    return _verdict(*parts)


@_failing
def derive_family_order() -> Proof:
    parts: list[Part] = []
    named = {1: _ns.CUBIC, 2: _ns.QUINTIC}
    quintic = (15 * _x - 10 * _x**3 + 3 * _x**5) / 8
    parts.append((all(tuple(_ns.newton_schulz_family(k)) == tuple(c) for k, c in named.items())
                  and sympy.expand(_sym_poly(_ns.QUINTIC) - quintic) == 0,
                  Step(r"`newton_schulz_family(1)` is `CUBIC`, `newton_schulz_family(2)` is "
                       r"`QUINTIC` $= (15x - 10x^3 + 3x^5)/8$.")))
    shown = []
    for k in range(0, 5):
        p = _sym_poly(_ns.newton_schulz_family(k))
        series = _x * sum(sympy.binomial(2 * j, j) / 4**j * (1 - _x**2) ** j
                          for j in range(k + 1))
        q, rem = sympy.div(sympy.Poly(1 - p, _x), sympy.Poly((1 - _x) ** (k + 1), _x))
        ok = (sympy.expand(p - series) == 0 and rem.is_zero and q.eval(1) != 0)
        parts.append((ok, Step(f"$k = {k}$: the running family minus "
                               r"$x\sum_{j\le k}\binom{2j}{j}4^{-j}(1 - x^2)^j$ is 0, and "
                               f"$1 - p_{k}(x) = (1 - x)^{{{k + 1}}}\\,q_{k}(x)$ with "
                               f"$q_{k}(1) = {sympy.latex(q.eval(1))} \\ne 0$: a zero of "
                               f"order exactly {k + 1}.")))
        if k == 2:
            shown.append(sympy.latex(sympy.factor(1 - p)))
    coeffs = sympy.Poly(sympy.series(1 / sympy.sqrt(1 - _t), _t, 0, 8).removeO(), _t)
    parts.append((all(coeffs.coeff_monomial(_t**j) == sympy.binomial(2 * j, j) / 4**j
                      for j in range(8)),
                  Step(r"$(1 - t)^{-1/2} = \sum_j \binom{2j}{j}4^{-j}t^j$ (SymPy's series, "
                       r"$j < 8$). General $k$, argued: with $t = 1 - x^2 = (1 - x)(1 + x)$, "
                       r"$x(1 - t)^{-1/2} = 1$ for $x > 0$, so $1 - p_k(x) = x\sum_{j > k}"
                       r"\binom{2j}{j}4^{-j}t^j = O((1 - x)^{k+1})$: order $k + 1$.",
                       r"1 - p_2(x) = " + shown[0])))
    return _verdict(*parts)


@_failing
def derive_dynamics(coeffs: tuple[Any, ...], name: str, lower: Fraction = Fraction(1, 1000),
                    steps: int = 5) -> Proof:
    r"""The dynamics of :math:`x \mapsto p(x)` for any coefficients (registered for Muon's):
    :math:`p(1)`, the fixed points :math:`x \ge 0` and their stability, the critical points,
    the certified ranges after :math:`1..` ``steps`` steps from :math:`[\ell, 1]` re-checked
    exactly, and a certified absorbing interval, all against the running
    :mod:`nlaverify.optim.certify`. Baggag & Saad §5.5."""
    p = _sym_poly(coeffs)
    dp = sympy.diff(p, _x)
    parts: list[Part] = []
    one = _ns.odd_polynomial(tuple(Fraction(c) for c in coeffs), Fraction(1))
    relation = "= 1" if one == 1 else r"\ne 1"
    parts.append((True, Step(f"{name}: $p(1) = {sympy.latex(sympy.Rational(one))} {relation}$.",
                             rf"p(x) = {sympy.latex(p)}")))
    # fixed points: SymPy's exact isolating intervals, the multiplier bounded on them exactly
    iso = [iv for iv, _ in sympy.Poly(p - _x, _x).intervals(eps=sympy.Rational(1, 10**20))
           if iv[0] >= 0]
    cert = _ce.fixed_points(coeffs)
    dcoeffs = sympy.Poly(dp, _x).all_coeffs()[::-1]
    rows, ok = [], len(iso) == len(cert)
    for (a, b), fp in zip(iso, cert, strict=False):
        lo, hi = _range_on(dcoeffs, a, b)
        stable = True if max(-lo, hi) < 1 else False if (lo > 1 or hi < -1) else None
        ok &= fp.value.lo <= b and a <= fp.value.hi and fp.stable == stable
        rows.append(f"$x^\\ast \\approx {_fmt(a)}$, $p' \\in [{_fmt(lo)}, {_fmt(hi)}]$ "
                    f"({'attracting' if stable else 'repelling' if stable is False else '?'})")
    parts.append((ok, Step("Fixed points $p(x) = x \\ge 0$ (SymPy's exact isolating intervals;"
                           " $p'$ bounded on them in rational arithmetic) match "
                           "`certify.fixed_points`: " + "; ".join(rows) + ".")))
    crit = [iv for iv, _ in sympy.Poly(dp, _x).intervals(eps=sympy.Rational(1, 10**20))
            if iv[0] > 0]
    got = _ce.critical_points(coeffs)
    parts.append((len(crit) == len(got) and all(
        c.lo <= b and a <= c.hi for (a, b), c in zip(crit, got, strict=False)),
        Step("Critical points $p'(c) = 0$, $c > 0$, match `certify.critical_points`: "
             + ", ".join(f"$c \\approx {_fmt(a)}$, $p(c) \\approx {_fmt(p.subs(_x, a))}$"
                         for a, _ in crit) + ".")))
    # the certified ranges, re-checked step by step by exact root counting (Sturm)
    traj = _ce.certified_trajectory(coeffs, steps, lower)
    ok = all(_maps_into(coeffs, *traj[j - 1], *traj[j]) for j in range(1, steps + 1))
    grid = np.concatenate([np.linspace(float(lower), 1, 20001), np.geomspace(float(lower), 1,
                                                                               20001)])
    ys = _ce.iterate_map(coeffs, steps, grid)
    wit = [Fraction(grid[int(np.argmin(ys))]), Fraction(grid[int(np.argmax(ys))])]
    exact = []
    for w in wit:
        for _ in range(steps):
            w = _ns.odd_polynomial(tuple(Fraction(c) for c in coeffs), w)
        exact.append(w)
    lo, hi = traj[-1]
    tight = lo <= exact[0] <= lo + Fraction(1, 10**4) and hi - Fraction(1, 10**4) <= exact[1]
    res = _ce.certified_interval(coeffs, steps, lower)
    parts.append((ok and tight and res.lo <= lo and hi <= res.hi, Step(
        f"`certify.certified_trajectory` from $[{sympy.latex(sympy.Rational(lower))}, 1]$: "
        "each step's enclosure is re-checked exactly, $p([a, b]) \\subseteq [\\mathrm{lo}, "
        "\\mathrm{hi}]$ by counting the real roots of odd multiplicity of $p - \\mathrm{lo}$ and "
        "$\\mathrm{hi} - p$ in $[a, b]$ (Sturm); and it is tight: two sample points whose exact "
        "images after the last step lie within $10^{-4}$ of its ends. Ranges after $k$ steps: "
        + ", ".join(f"$k={j}$: $[{_fmt(a)}, {_fmt(b)}]$" for j, (a, b) in enumerate(traj)
                    if j) + ".")))
    try:
        J = _ce.absorbing_interval(coeffs, lower)
    except Exception as exc:  # no absorbing interval: a failed claim
        return _verdict(*parts, (False, Step(f"absorbing_interval raised: {exc}")))
    Jlo, Jhi = Fraction(J.lo), Fraction(J.hi)
    n = J.entered_after
    entered = _ce.certified_trajectory(coeffs, n, lower)[-1]
    parts.append((_maps_into(coeffs, Jlo, Jhi, Jlo, Jhi) and Jlo <= entered[0]
                  and entered[1] <= Jhi, Step(
        f"`certify.absorbing_interval`: $J = [{_fmt(J.lo, 8)}, {_fmt(J.hi, 8)}]$, "
        "$p(J) \\subseteq J$ checked exactly (Sturm), and the certified range after "
        f"$n = {n}$ steps lies in $J$: so after every $k \\ge {n}$ steps all singular values "
        f"lie in $J$, $|1 - \\sigma| \\le {_fmt(max(1 - J.lo, J.hi - 1))}$."
        + ("" if one == 1 else " Since $p(1) \\ne 1$, no singular value can converge to 1 "
           "(if $x_k \\to 1$ then $x_{k+1} = p(x_k) \\to p(1) \\ne 1$): the iteration "
           "oscillates inside $J$ instead."))))
    return _verdict(*parts)


# --------------------------------------------------------------------------- Shampoo link


@_failing
def derive_shampoo_link() -> Proof:
    s1, s2 = sympy.symbols("s1 s2", positive=True)
    U, V = _cayley(3)[:, :2], _cayley(2, 1)
    G = U @ np.diag([s1, s2]) @ V.T
    polar = U @ V.T
    norm = sympy.sqrt(s1**2 + s2**2)

    def f(v: Any) -> Any:
        return _explicit(_ns.CUBIC, v)

    def normalized(k: int) -> bool:
        X = _ns.newton_schulz(XP, G, _ns.CUBIC, k, eps=0)
        want = [s1 / norm, s2 / norm]
        for _ in range(k):
            want = [f(v) for v in want]
        return _equal(X, U @ np.diag(want) @ V.T)

    def steps(k: int) -> bool:
        R, (r1, r2), _ = _ring("s1,s2")
        Gr, _, spectral = _svd(3, 2, [r1, r2], R)

        def fk(v: Any) -> Any:
            for _ in range(k):
                v = f(v)
            return v

        return _same(_ns.newton_schulz(XP, Gr, _ns.CUBIC, k, normalize=False), spectral(fk))

    def shampoo(_: Any) -> bool:
        stats = _sh.shampoo_statistics(XP, G, _sh.shampoo_init(XP, G))
        return _equal(_sh.shampoo_direction(XP, G, stats), polar)

    # concrete singular values 3, 4: ||G||_F = 5, sigma/||G|| = 3/5, 4/5; after k steps the
    # exact distance to U V^T is max |1 - f^k(sigma)|, inside the certified error
    k = 8
    err = _ce.certified_interval(_ns.CUBIC, k, Fraction(3, 5), Fraction(4, 5)).error

    def concrete(k: int) -> bool:
        Gc = U @ np.diag([3, 4]) @ V.T
        D = _sh.shampoo_direction(XP, Gc, _sh.shampoo_statistics(XP, Gc, _sh.shampoo_init(XP, Gc)))
        dev = [Fraction(3, 5), Fraction(4, 5)]
        for _ in range(k):
            dev = [_ns.odd_polynomial(_ns.CUBIC, v) for v in dev]
        want = U @ np.diag([sympy.Rational(d - 1) for d in dev]) @ V.T
        return (_equal(_ns.newton_schulz(XP, Gc, _ns.CUBIC, k, eps=0) - D, want)
                and max(1 - d for d in dev) <= err < 1e-15)

    return _verdict(
        _concrete(r"The running `newton_schulz(G, CUBIC, k, eps=0)` on $G = U\operatorname{diag}"
                  r"(s_1, s_2)V^\top$ ($3\times 2$, symbolic $s_i > 0$), normalised by the "
                  r"running `frobenius_normalize`, minus $U\operatorname{diag}(f(s_i/\|G\|_F))"
                  r"V^\top$, cases $k$", [1], normalized),
        _concrete(r"Without the normalisation, in $\mathbb Q[s]$: $k$ steps minus "
                  r"$U\operatorname{diag}(f^k(s_i))V^\top$, cases $k$", [1, 2, 3], steps),
        _concrete("On the same $G$, the running `shampoo_direction` with one gradient "
                  "($L = GG^\\top$, $R = G^\\top G$) minus $UV^\\top$ (as in the identity "
                  "`shampoo_one_gradient_is_polar_factor`, family kronecker), cases",
                  ["symbolic $s_1, s_2$"], shampoo),
        _concrete(f"Concretely, $\\sigma = (3, 4)$, $\\|G\\|_F = 5$: after $k$ steps the exact "
                  "difference from the running `shampoo_direction` is $U\\operatorname{diag}"
                  "(f^k(\\sigma_i/5) - 1)V^\\top$, of norm $\\max_i|1 - f^k(\\sigma_i/5)| \\le$ "
                  f"`certified_interval(CUBIC, {k}, 3/5, 4/5).error` $= {err:.2g}$, cases $k$",
                  [k], concrete),
        (True, Step("Link: $\\sigma_i/\\|G\\|_F \\in (0, 1] \\subset (0, \\sqrt3)$, the basin "
                    "of 1 for the cubic (`ns_cubic_quadratic_convergence`), so $f^k(\\sigma_i/"
                    "\\|G\\|_F) \\to 1$ and Newton–Schulz converges to the Shampoo direction.",
                    r"\lim_{k\to\infty} X_k = UV^\top = (GG^\top)^{+1/4}G(G^\top G)^{+1/4}")))


# --------------------------------------------------------------------------- catalogue

_F = "newton_schulz"


def _reg(id_: str, title: str, statement: str, seed: str, certifies: tuple, derive) -> None:
    register(Identity(id_, _F, title, statement, seed, tuple(qualname(f) for f in certifies),
                      derive, tags=("closed-form",)))


_reg("ns_step_acts_on_singular_values", "An odd polynomial acts on the singular values",
     r"p(U\Sigma V^\top) = a_1X + a_3(XX^\top)X + a_5(XX^\top)^2X = U\,p(\Sigma)\,V^\top", SEED,
     (_ns.newton_schulz_step, _ns.odd_polynomial), derive_singular_values)
_reg("ns_transpose_trick", "The transpose trick changes nothing",
     r"p(X^\top) = p(X)^\top;\quad p(U\operatorname{diag}(s, 0)V^\top) = "
     r"U\operatorname{diag}(p(s), 0)V^\top", SEED,
     (_ns.newton_schulz, _ns.newton_schulz_step), derive_transpose_trick)
_reg("ns_cubic_quadratic_convergence", "The cubic converges quadratically on (0, √3)",
     r"1 - f(x) = \tfrac12(1 - x)^2(2 + x),\quad e' = \tfrac12e^2(3 - e),\quad "
     r"f((0, \sqrt3)) \subseteq (0, 1]", SEED,
     (_ns.odd_polynomial, _ce.fixed_points), derive_cubic)
_reg("ns_family_order", "Newton–Schulz of order k converges with order k + 1",
     r"p_k(x) = x\sum_{j\le k}\binom{2j}{j}4^{-j}(1 - x^2)^j,\quad "
     r"1 - p_k(x) = (1 - x)^{k+1}q_k(x),\ q_k(1) \ne 0", SEED,
     (_ns.newton_schulz_family, _ns.odd_polynomial), derive_family_order)
_reg("ns_muon_dynamics", "Muon's quintic: certified ranges and an absorbing interval",
     r"R_k = p^{\circ k}([10^{-3}, 1]) \subseteq [\mathrm{lo}_k, \mathrm{hi}_k];\ "
     r"p(J) \subseteq J;\ p(1) \ne 1", SEED,
     (_ce.certified_interval, _ce.certified_trajectory, _ce.image, _ce.fixed_points,
      _ce.critical_points, _ce.absorbing_interval, _ns.odd_polynomial),
     lambda: derive_dynamics(_ns.MUON, "Muon ($a, b, c = 3.4445, -4.7750, 2.0315$)"))
_reg("ns_shampoo_link", "Newton–Schulz converges to Shampoo's one-gradient direction",
     r"\lim_{k\to\infty}X_k = UV^\top = \texttt{shampoo\_direction}(G)", SEED_LINK,
     (_ns.newton_schulz, _ns.frobenius_normalize, _sh.shampoo_direction), derive_shampoo_link)
