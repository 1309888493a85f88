"""A fast exact rung of :func:`~nlaverify.symbolic.exact.zero_test`: the rational normal
form of an expression over :math:`\\mathbb{Q}`, computed in SymPy's sparse polynomial rings.

:func:`rational_zero` maps an expression to a quotient ``N / D`` of polynomials with rational
coefficients in *generators*, and proves the expression identically 0 when ``N`` is the zero
polynomial. The generators are

* every free symbol;
* for every ``exp(P)`` whose argument ``P`` is a polynomial (number coefficients; its atoms
  symbols or any other subexpression, ``Max(a, b)``, taken as it stands), one generator
  :math:`E_m = \\exp(m / L_m)` per monomial :math:`m` of ``P`` (the constant monomial
  included), :math:`L_m` the least common denominator of the coefficients of :math:`m` in
  all such arguments, so that :math:`\\exp(\\sum_m c_m m) = \\prod_m E_m^{c_m L_m}` with
  integer exponents (this is what ``sympy.expand``'s ``power_exp`` does term by term);
* for every base :math:`b` raised to non-integer rational powers :math:`p/q`, one generator
  :math:`R_b = b^{1/L_b}` (principal branch; :math:`L_b` the least common multiple of the
  ``q``), so that :math:`b^{p/q} = R_b^{pL_b/q}`; the relation :math:`R_b^{L_b} = b` is used
  at the end, to reduce the numerator (:meth:`_NormalForm.reduce`); when the numerator is
  not 0, once more with every base expanded and its positive rational content taken out
  (:func:`canonical_radicals`), so that equal bases written differently share a generator;
* with ``trig=True``, for the angles ``a`` of ``sin``/``cos``: each ``a = n b`` with ``b``
  the smallest angle of which it is a multiple ``n <= 12`` (:func:`_group_angles`),
  ``sin b`` and ``cos b`` opaque generators, ``sin(n b)``, ``cos(n b)`` by de Moivre;
  :math:`\\sin^2 b = 1 - \\cos^2 b` reduces the numerator at the end;
* every other subexpression (a ``Piecewise``, ``exp`` of a non-polynomial, ``pi``) as an
  *opaque* generator, keyed by the expression itself.

**Why a zero numerator is a proof.** Every step is an identity of real (or principal
complex) functions: the sum, product and integer power of quotients, the splitting of
``exp`` of a sum into a product of ``exp``, and :math:`R_b^{L_b} = b`. Evaluating the
generators at their actual values therefore maps ``N / D`` back to the expression, wherever
the expression is defined (every denominator factor is a nonzero polynomial, so ``D`` is a
nonzero polynomial). If ``N`` is the zero polynomial, the expression is 0 *whatever values
the generators take*, the opaque ones included: no relation among them is assumed, so the
test can only miss a zero (then the ladder of :func:`~nlaverify.symbolic.exact._ladder`
goes on), never invent one. It is the same canonical form as the numerator of
``sympy.together`` after ``sympy.expand``, without rebuilding SymPy expression trees:
denominators are kept as products of syntactically distinct monic factors (their least
common multiple in a sum is taken factor by factor), monomial factors cancel against the
numerator, and shared subexpressions are converted once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import sympy
from sympy.polys.domains import QQ
from sympy.polys.rings import PolyElement, ring

__all__ = ["canonical_radicals", "normal_form_rung", "rational_rung", "rational_zero",
           "same_normal_form"]

#: numerator, monomial denominator (exponent vector), other denominator factors
_Frac = tuple[PolyElement, tuple[int, ...], dict[PolyElement, int]]


class _Unsupported(Exception):
    """Something with no exact rational form here (a Float, ``I``, an infinity)."""


def rational_zero(expr: sympy.Expr, *, trig: bool = False) -> bool:
    """True when the rational normal form of ``expr`` has numerator 0 (see the module's
    docstring): then ``expr`` is identically 0. False means *not proved* this way.
    ``trig``: ``sin``/``cos`` by multiple angles and :math:`\\sin^2 + \\cos^2 = 1` rather
    than opaque (the ladder leaves trigonometry to ``sympy.simplify``)."""
    return normal_form_rung(expr, trig=trig)[0] is not None


def rational_rung(expr: sympy.Expr) -> str | None:
    """The rung of :func:`normal_form_rung`, or None."""
    return normal_form_rung(expr)[0]


def normal_form_rung(expr: sympy.Expr, *, trig: bool = False) -> tuple[str | None, bool]:
    """``("expand" | "together" | None, supported)``: the rung when the rational normal form
    of ``expr`` has numerator 0, else None (not proved this way); ``supported`` is False
    when ``expr`` has something with no rational form here (a Float, ``I``).

    ``"expand"``: no two terms of a sum had to be brought over a common denominator other
    than a monomial in the generators (the sum was 0 with every other denominator an
    atom, as in ``sympy.expand``); ``"together"``: some were (as in the numerator of
    ``sympy.together``)."""
    rung, supported, radicals = _rung(expr, trig)
    if rung is None and radicals and (canon := canonical_radicals(expr)) != expr:
        # radicals of bases equal but written differently (the norm of a running function's
        # output against a closed form) are distinct generators: once more with every base
        # in a canonical form (ns_shampoo_link: no sympy.simplify, 0.2 s an entry)
        rung = _rung(canon, trig)[0]
    return rung, supported


def _rung(expr: sympy.Expr, trig: bool) -> tuple[str | None, bool, bool]:
    """The rung and ``supported`` of :func:`normal_form_rung`, and whether ``expr`` has a
    radical generator."""
    radicals = False
    try:
        form = _NormalForm(expr, trig)
        radicals = bool(form.radicals)
        num, _, _ = form.convert(expr)
        if num and form.reduce(num):
            return None, True, radicals
    except _Unsupported:
        return None, False, radicals
    except ZeroDivisionError:
        return None, True, radicals
    return ("together" if form.combined else "expand"), True, radicals


def canonical_radicals(expr: sympy.Expr) -> sympy.Expr:
    r"""``expr`` with every power :math:`b^{p/q}` (non-integer rational exponent) written
    :math:`c^{p/q}\,P^{p/q}`, :math:`cP` the expanded base, :math:`c > 0` its rational
    content (:math:`P^{p/q}` alone when :math:`c = 1` or :math:`c \le 0`). The same value:
    :math:`(cP)^{r} = c^{r}P^{r}` for :math:`c > 0` on the principal branch (the argument of
    :math:`cP` is that of :math:`P`). Bases equal as polynomials up to a positive factor then
    give one generator."""
    def canon(power: sympy.Pow) -> sympy.Expr:
        base = sympy.expand(power.base)
        c, prim = base.as_content_primitive()
        if c.is_Rational and c > 0 and c != 1:
            return sympy.Pow(c, power.exp) * sympy.Pow(prim, power.exp)
        return sympy.Pow(base, power.exp)

    return expr.replace(lambda e: e.is_Pow and e.exp.is_Rational and not e.exp.is_Integer,
                        canon)


def same_normal_form(exprs: Sequence[sympy.Expr]) -> bool:
    """True when every expression of ``exprs`` has the rational normal form of the first,
    with no relation among the generators used (no radical or trigonometric reduction):
    their differences are 0 as rational functions of independent generators, so the
    expressions are equal wherever they are defined, and an expression built from one of
    them by sums, products and powers has the same normal form when built from another.
    False means *not shown equal this way*."""
    try:
        form = _NormalForm(exprs[0], also=exprs[1:])
        first = form.convert(exprs[0])
        for expr in exprs[1:]:
            num, mono, facs = form.convert(expr)
            if form._add([first, (-num, mono, facs)])[0]:
                return False
    except (_Unsupported, ZeroDivisionError):
        return False
    return True


#: the largest n for which sin(n b), cos(n b) are expanded in sin b, cos b
MAX_ANGLE_MULTIPLE = 12


def _group_angles(angles: Iterable[sympy.Basic]) -> dict[sympy.Basic, tuple[sympy.Basic, int]]:
    """Each angle ``a`` of a ``sin``/``cos`` as ``(b, n)`` with ``a = n b``: ``b`` the
    smallest angle (numbers by magnitude) of which ``a`` is a multiple ``n <=``
    :data:`MAX_ANGLE_MULTIPLE`, else ``a`` itself (``n = 1``)."""
    def key(a: sympy.Basic) -> tuple:
        if a.is_number and a.is_extended_real and a.is_finite:
            return (0, abs(float(a)), "")
        return (1, 0.0, sympy.default_sort_key(a))

    out: dict[sympy.Basic, tuple[sympy.Basic, int]] = {}
    bases: list[sympy.Basic] = []
    for a in sorted(angles, key=key):
        for b in bases:
            ratio = a / b
            if ratio.is_Integer and 1 <= ratio <= MAX_ANGLE_MULTIPLE:
                out[a] = (b, int(ratio))
                break
        else:
            bases.append(a)
            out[a] = (a, 1)
    return out


def _lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)


def _poly_dict(node: sympy.Basic, memo: dict) -> dict[tuple, Any] | None:
    """``node`` as ``{monomial: coefficient}`` when it is a polynomial with number
    coefficients in symbols and other *atoms* (``Max(a, b)``, ``sqrt(x)``: any subexpression
    that is not a sum, product or power, taken as it stands), else None. A monomial is a
    sorted tuple of ``(atom, power)`` pairs."""
    if node in memo:
        return memo[node]
    out: dict[tuple, Any] | None
    if node.is_Rational:
        out = {(): sympy.Rational(node)} if node != 0 else {}
    elif node.is_number:  # sqrt(2), pi/4: part of a coefficient (exp(sqrt(2) x / 2))
        out = None if node.has(sympy.Float, sympy.zoo, sympy.nan, sympy.oo, -sympy.oo) \
            else {(): node}
    elif node.is_Symbol:
        out = {((node, 1),): sympy.Integer(1)}
    elif node.is_Add or node.is_Mul:
        parts = [_poly_dict(a, memo) for a in node.args]
        out = None if any(p is None for p in parts) else (
            _add_dicts(parts) if node.is_Add else _mul_dicts(parts))
    elif node.is_Pow and node.exp.is_Integer and node.exp >= 0:
        base = _poly_dict(node.base, memo)
        out = None if base is None else _mul_dicts([base] * int(node.exp))
    elif isinstance(node, sympy.Expr) and node.is_commutative and not node.has(
            sympy.I, sympy.zoo, sympy.nan, sympy.oo, -sympy.oo, sympy.Float):
        out = {((node, 1),): sympy.Integer(1)}  # Max(a, b), sqrt(x): an atom of the exponent
    else:
        out = None
    memo[node] = out
    return out


def _add_dicts(parts: Iterable[dict]) -> dict:
    out: dict = {}
    for p in parts:
        for m, c in p.items():
            out[m] = out.get(m, 0) + c
    return {m: c for m, c in out.items() if c != 0}


def _mul_dicts(parts: list[dict]) -> dict:
    out: dict = {(): sympy.Integer(1)}
    for p in parts:
        nxt: dict = {}
        for m1, c1 in out.items():
            for m2, c2 in p.items():
                powers = dict(m1)
                for s, k in m2:
                    powers[s] = powers.get(s, 0) + k
                m = tuple(sorted(powers.items(), key=lambda sk: sk[0].sort_key()))
                nxt[m] = nxt.get(m, 0) + c1 * c2
        out = {m: c for m, c in nxt.items() if c != 0}
    return out


class _NormalForm:
    """The generators of one expression and the conversion of its subexpressions."""

    def __init__(self, expr: sympy.Expr, trig: bool = False, *,
                 also: Iterable[sympy.Expr] = ()) -> None:
        self.trig = trig
        self.symbols: set[sympy.Symbol] = set()
        self.exp_parts: dict[sympy.Basic, dict[tuple, Any]] = {}
        self.exp_lcm: dict[tuple, int] = {}
        self.radicals: dict[sympy.Basic, int] = {}
        self.opaque: dict[sympy.Basic, None] = {}
        self.angles: dict[sympy.Basic, None] = {}
        self._seen: set[sympy.Basic] = set()
        self._polys: dict = {}
        for root in (expr, *also):  # the generators of every expression to convert
            self._collect(root)
        self.multiples = _group_angles(self.angles)
        self.angles = {base: None for base, _ in self.multiples.values()}
        for base in self.angles:
            self.opaque[sympy.sin(base)] = self.opaque[sympy.cos(base)] = None
        gens: list[Any] = sorted(self.symbols, key=sympy.default_sort_key)
        gens += [("exp", m) for m in self.exp_lcm] + [("opaque", o) for o in self.opaque]
        gens += [("radical", b) for b in self.radicals]
        self.index = {g: i for i, g in enumerate(gens)}
        self.ring = ring([f"z{i}" for i in range(len(gens))] or ["z"], QQ)[0]
        self.n = self.ring.ngens
        self.zero_mono = (0,) * self.n
        self.memo: dict[sympy.Basic, _Frac] = {}
        #: whether a sum brought terms over a common non-monomial denominator
        self.combined = False

    # ------------------------------------------------------------------ generators

    def _collect(self, node: sympy.Basic) -> None:
        if node in self._seen:
            return
        self._seen.add(node)
        if node.is_Rational:
            return
        if node.is_Symbol:
            self.symbols.add(node)
        elif node.is_Add or node.is_Mul:
            for a in node.args:
                self._collect(a)
        elif node.is_Pow and node.exp.is_Rational:
            if not node.exp.is_Integer:
                self.radicals[node.base] = _lcm(self.radicals.get(node.base, 1), node.exp.q)
            self._collect(node.base)
        elif isinstance(node, sympy.exp) and (parts := _poly_dict(node.args[0], self._polys)) \
                is not None:
            keyed = {}
            for m, c in parts.items():
                r, unit = c.as_coeff_Mul()
                if not r.is_Rational:
                    raise _Unsupported(f"coefficient {c}")
                keyed[(m, unit)] = r
                self.exp_lcm[(m, unit)] = _lcm(self.exp_lcm.get((m, unit), 1), int(r.q))
            self.exp_parts[node] = keyed
        elif node.is_Number or node in (sympy.I, sympy.zoo, sympy.nan):  # Float, oo
            raise _Unsupported(type(node).__name__)
        elif self.trig and isinstance(node, (sympy.sin, sympy.cos)):  # see _group_angles
            self.angles[node.args[0]] = None
        elif isinstance(node, sympy.Expr) and node.is_commutative:
            self.opaque[node] = None
        else:
            raise _Unsupported(type(node).__name__)

    # ------------------------------------------------------------------ arithmetic

    def _monomial(self, exps: tuple[int, ...]) -> PolyElement:
        return self.ring({exps: QQ(1)})

    def _gen(self, key: Any) -> _Frac:
        exps = [0] * self.n
        exps[self.index[key]] = 1
        return self._monomial(tuple(exps)), self.zero_mono, {}

    def _power_of_gen(self, key: Any, k: int) -> _Frac:
        exps = [0] * self.n
        exps[self.index[key]] = abs(k)
        if k >= 0:
            return self._monomial(tuple(exps)), self.zero_mono, {}
        return self.ring.one, tuple(exps), {}

    def _cancel(self, num: PolyElement, mono: tuple[int, ...], facs: dict) -> _Frac:
        """Cancel the common monomial factor of ``num`` and the monomial denominator."""
        if not num:
            return self.ring.zero, self.zero_mono, {}
        cut = [0] * self.n
        for i, d in enumerate(mono):
            if d:
                cut[i] = min(d, min(m[i] for m in num.keys()))
        if any(cut):
            num = self.ring({tuple(a - b for a, b in zip(m, cut, strict=True)): c
                             for m, c in num.items()})
            mono = tuple(a - b for a, b in zip(mono, cut, strict=True))
        return num, mono, facs

    def _add(self, terms: list[_Frac]) -> _Frac:
        terms = [t for t in terms if t[0]]
        if not terms:
            return self.ring.zero, self.zero_mono, {}
        if len(terms) == 1:
            return terms[0]
        mono = tuple(max(col) for col in zip(*(t[1] for t in terms), strict=True))
        facs: dict[PolyElement, int] = {}
        for _, _, f in terms:
            for p, k in f.items():
                facs[p] = max(facs.get(p, 0), k)
        num = self.ring.zero
        for t_num, t_mono, t_facs in terms:
            scale = self._monomial(tuple(a - b for a, b in zip(mono, t_mono, strict=True)))
            for p, k in facs.items():
                if k > t_facs.get(p, 0):
                    self.combined = True
                    scale = scale * p ** (k - t_facs.get(p, 0))
            num += t_num * scale
        return self._cancel(num, mono, facs)

    def _mul(self, a: _Frac, b: _Frac) -> _Frac:
        if not a[0] or not b[0]:
            return self.ring.zero, self.zero_mono, {}
        facs = dict(a[2])
        for p, k in b[2].items():
            facs[p] = facs.get(p, 0) + k
        return self._cancel(a[0] * b[0], tuple(x + y for x, y in zip(a[1], b[1], strict=True)),
                            facs)

    def _pow(self, a: _Frac, k: int) -> _Frac:
        if k < 0:
            a, k = self._inverse(a), -k
        out: _Frac = (self.ring.one, self.zero_mono, {})
        while k:
            if k & 1:
                out = self._mul(out, a)
            k >>= 1
            if k:
                a = self._mul(a, a)
        return out

    def _inverse(self, a: _Frac) -> _Frac:
        num, mono, facs = a
        if not num:
            raise ZeroDivisionError("1/0 in the rational normal form")
        new_num = self._monomial(mono)
        for p, k in facs.items():
            new_num = new_num * p ** k
        # split the old numerator into its monomial content and a monic factor
        content = tuple(min(col) for col in zip(*num.keys(), strict=True))
        rest = self.ring({tuple(x - y for x, y in zip(m, content, strict=True)): c
                          for m, c in num.items()})
        lc = rest.LC
        rest = rest.quo_ground(lc)
        new_num = new_num.quo_ground(lc)
        new_facs = {} if rest == self.ring.one else {rest: 1}
        return self._cancel(new_num, content, new_facs)

    def convert(self, node: sympy.Basic) -> _Frac:
        hit = self.memo.get(node)
        if hit is not None:
            return hit
        if node.is_Rational:
            out: _Frac = (self.ring(QQ(int(node.p), int(node.q))), self.zero_mono, {})
        elif node.is_Symbol:
            out = self._gen(node)
        elif node.is_Add:
            out = self._add([self.convert(a) for a in node.args])
        elif node.is_Mul:
            out = (self.ring.one, self.zero_mono, {})
            for a in node.args:
                out = self._mul(out, self.convert(a))
        elif node.is_Pow and node.exp.is_Integer:
            out = self._pow(self.convert(node.base), int(node.exp))
        elif node.is_Pow and node.exp.is_Rational:
            base_lcm = self.radicals[node.base]
            out = self._power_of_gen(("radical", node.base),
                                     int(node.exp.p) * base_lcm // int(node.exp.q))
        elif self.trig and isinstance(node, (sympy.sin, sympy.cos)):
            base, n = self.multiples[node.args[0]]
            out = self._multiple_angle(base, n)[isinstance(node, sympy.sin)]
        elif node in self.exp_parts:
            out = (self.ring.one, self.zero_mono, {})
            for m, c in self.exp_parts[node].items():
                out = self._mul(out, self._power_of_gen(("exp", m), int(c * self.exp_lcm[m])))
        else:
            out = self._gen(("opaque", node))
        self.memo[node] = out
        return out

    def _multiple_angle(self, base: sympy.Basic, n: int) -> tuple[_Frac, _Frac]:
        r"""``(cos(n b), sin(n b))`` as polynomials in ``cos b``, ``sin b``: the real and
        imaginary parts of :math:`(\cos b + i \sin b)^n`."""
        c = self._gen(("opaque", sympy.cos(base)))[0]
        s = self._gen(("opaque", sympy.sin(base)))[0]
        cn, sn = c, s
        for _ in range(n - 1):
            cn, sn = cn * c - sn * s, sn * c + cn * s
        return (cn, self.zero_mono, {}), (sn, self.zero_mono, {})

    # ------------------------------------------------------------------ radicals

    def reduce(self, num: PolyElement) -> PolyElement:
        r"""``num`` reduced by the relations of its generators: :math:`R_b^{L_b} = b`
        (:meth:`reduce_radicals`), then :math:`\sin^2 a = 1 - \cos^2 a` for every angle
        ``a`` (each a polynomial identity of the actual values, so the reduced numerator
        vanishes exactly when ``num`` does at them)."""
        num = self.reduce_radicals(num)
        for angle in self.angles:
            if not num:
                break
            i = self.index[("opaque", sympy.sin(angle))]
            if max(m[i] for m in num.keys()) < 2:
                continue
            cos2 = self._gen(("opaque", sympy.cos(angle)))[0] ** 2
            out = self.ring.zero
            for m, c in num.items():
                q, r = divmod(m[i], 2)
                low = list(m)
                low[i] = r
                out += self.ring({tuple(low): c}) * (self.ring.one - cos2) ** q
            num = out
        return num

    def reduce_radicals(self, num: PolyElement) -> PolyElement:
        """``num`` with every :math:`R_b^{e}`, :math:`e \\ge L_b`, rewritten by
        :math:`R_b^{L_b} = b` (denominators of ``b`` cleared by a common factor), one
        radical at a time; the zero polynomial when ``num`` vanishes at the radicals."""
        for base, big in self.radicals.items():
            if not num:
                break
            i = self.index[("radical", base)]
            b_num, b_mono, b_facs = self.convert(base)
            b_den = self._monomial(b_mono)
            for p, k in b_facs.items():
                b_den = b_den * p ** k
            top = max(m[i] for m in num.keys()) // big
            if top == 0:
                continue
            out = self.ring.zero
            for m, c in num.items():
                q, r = divmod(m[i], big)
                low = list(m)
                low[i] = r
                out += self.ring({tuple(low): c}) * b_num ** q * b_den ** (top - q)
            num = out
        return num
