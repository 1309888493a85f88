r"""The ``ssm`` family, part 1: discretization and scans of diagonal state-space models
(Baggag & Saad §5.3.4, Appendix C; Gu et al. 2022, S4/S4D; Gu & Dao 2023, Mamba), proved on
the running functions of :mod:`nlaverify.ops.ssm`, called with SymPy symbols.

* ``ssm_zoh_exact``: :func:`~nlaverify.ops.ssm.discretize_zoh` solves :math:`x' = a x + b u`
  exactly over a step (the error against the ODE solution is 0 for piecewise-constant input,
  over three steps of different lengths), with the limit :math:`A \to 0`;
* ``ssm_euler_b_error``: Mamba's Euler :math:`\bar B` is off by :math:`\tfrac12 a b
  \Delta^2 + O(\Delta^3)`, at most :math:`\tfrac12|a|\Delta^2|b|` per step for :math:`a \le 0`;
* ``ssm_stability``: :math:`|\bar A| < 1 \iff \operatorname{Re} A < 0` (ZOH and bilinear);
* ``ssm_softplus_branches``: the stable softplus is :math:`\log(1+e^x)` on both branches;
* ``ssm_lti_convolution``: the LTI scan is the causal convolution with :math:`K_k = C\bar
  A^k\bar B`;
* ``ssm_associative_scan``: the combine is associative, every bracketing of the fold, the
  recursive-doubling scan and every chunk split give the sequential recurrence.

Part 2 (duality, WKV, permutations, pooling) is :mod:`nlaverify.identities.ssm_duality`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import sympy

from nlaverify.backends import get_namespace
from nlaverify.identities._expectations import _Checks, _obj
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.identities.online_softmax import compositions
from nlaverify.ops import ssm as _ssm
from nlaverify.symbolic.exact import symbol_array

__all__ = ["FAMILY", "SEED", "bracketings", "compositions", "ssm_identity"]

FAMILY = "ssm"
SEED = ("Baggag & Saad §5.3.4, Appendix C; Gu et al. 2022 (S4, S4D); Gu & Dao 2023 (Mamba); "
        "Dao & Gu 2024 (Mamba-2); Peng et al. 2023 (RWKV)")


def ssm_identity(id_: str, title: str, statement: str, certifies: tuple, derive: Any,
                 tags: tuple[str, ...] = ()) -> Identity:
    """An identity of the family ``ssm`` certifying the functions ``certifies`` (each module
    registers its own, so that the catalogue records the module that did)."""
    return Identity(id_, FAMILY, title, statement, SEED, tuple(qualname(f) for f in certifies),
                    guard(derive), tags=("ssm", *tags))


def bracketings(lo: int, hi: int) -> Iterator[Any]:
    """Every full bracketing of the ordered leaves ``lo..hi-1`` (Catalan many): ints and
    pairs ``(left, right)``; the order of the leaves is kept (the combine is not
    commutative)."""
    if hi - lo == 1:
        yield lo
        return
    for mid in range(lo + 1, hi):
        for left in bracketings(lo, mid):
            for right in bracketings(mid, hi):
                yield (left, right)


def _fold(xp: Any, tree: Any, elems: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    if isinstance(tree, int):
        return elems[tree]
    return _ssm.scan_combine(xp, _fold(xp, tree[0], elems), _fold(xp, tree[1], elems))


def _text(tree: Any) -> str:
    return f"e{tree + 1}" if isinstance(tree, int) else f"({_text(tree[0])}∘{_text(tree[1])})"


# -- discretization -------------------------------------------------------------------------
def derive_zoh_exact() -> Proof:
    xp = get_namespace("sympy")
    a = sympy.Symbol("a", negative=True)
    b, x0 = sympy.symbols("b x_0", real=True)
    t = sympy.Symbol("t", positive=True)
    chk = _Checks()
    Abar, Bbar = (_obj(v)[()] for v in _ssm.discretize_zoh(xp, xp.asarray(t), a, b))
    us = sympy.symbols("u_1:4", real=True)
    x_t = Abar * x0 + Bbar * us[0]
    chk.zero(sympy.diff(x_t, t) - (a * x_t + b * us[0]), "x'(t) - (a x + b u)")
    A0, B0 = (_obj(v)[()] for v in _ssm.discretize_zoh(xp, xp.asarray(sympy.Integer(0)), a, b))
    chk.zero(A0 * x0 + B0 * us[0] - x0, "x(0) - x_0")
    # three steps of different lengths, a different constant input on each
    steps = sympy.symbols("Delta_1:4", positive=True)
    s = sympy.Symbol("s", real=True)
    x, T, exact = x0, 0, None
    for d, u in zip(steps, us, strict=True):
        Ab, Bb = (_obj(v)[()] for v in _ssm.discretize_zoh(xp, xp.asarray(d), a, b))
        x, T = Ab * x + Bb * u, T + d
    ends = [0, steps[0], steps[0] + steps[1], sum(steps)]
    exact = sympy.exp(a * T) * x0 + sum(
        sympy.integrate(sympy.exp(a * (T - s)) * b * u, (s, lo, hi))
        for u, lo, hi in zip(us, ends[:-1], ends[1:], strict=True))
    chk.zero(x - exact, "three ZOH steps - ODE solution")
    # A -> 0: the running function at A = 0, and its limit from the expm1 branch
    _, Bz = (_obj(v)[()] for v in _ssm.discretize_zoh(xp, xp.asarray(t), sympy.Integer(0), b))
    lim = sympy.limit(Bbar, a, 0, "-")
    chk.zero(Bz - t * b, "Bbar(A=0) - Delta b")
    chk.zero(lim - Bz, "lim_{A->0} Bbar - Bbar(A=0)")
    phi_lim = sympy.limit(_obj(_ssm.phi1(xp, xp.asarray(a)))[()], a, 0, "-")
    chk.zero(phi_lim - _obj(_ssm.phi1(xp, xp.asarray(sympy.Integer(0))))[()], "phi1 limit")
    return chk.proof([
        Step(r"With $a < 0$, a step $t > 0$ and real $b, x_0, u$, `discretize_zoh` returns",
             r"\bar A = " + sympy.latex(Abar) + r",\qquad \bar B = " + sympy.latex(Bbar)),
        Step(r"so $x(t) = \bar A(t) x_0 + \bar B(t) u$ satisfies $x'(t) - (a x(t) + b u) = 0$ "
             r"and, at $t = 0$ (the `where` of `phi1` selects $\varphi_1(0) = 1$), "
             r"$x(0) = x_0$: by uniqueness it *is* the solution of the ODE with constant input."),
        Step(r"Over three steps $\Delta_1, \Delta_2, \Delta_3$ with inputs $u_1, u_2, u_3$ held "
             r"constant on each, the ZOH recurrence equals the variation-of-constants solution",
             r"x(T) = e^{aT}x_0 + \sum_k \int_{t_{k-1}}^{t_k} e^{a(T-s)}\, b\, u_k\, ds,"
             r"\qquad T = \Delta_1 + \Delta_2 + \Delta_3 ,"),
        Step(r"exactly: the discretization error is 0. At $A = 0$ `discretize_zoh` gives "
             r"$\bar B = \Delta b$, the solution of $x' = b u$, and it is the limit of the "
             r"$\operatorname{expm1}$ branch:",
             r"\lim_{a \to 0^-} \bar B = " + sympy.latex(lim) + r",\qquad \lim_{z \to 0}"
             r"\varphi_1(z) = " + sympy.latex(phi_lim) + r" = \varphi_1(0)."),
    ])


def derive_euler_b_error() -> Proof:
    xp = get_namespace("sympy")
    a = sympy.Symbol("a", negative=True)
    b = sympy.Symbol("b", real=True)
    d = sympy.Symbol("Delta", positive=True)
    z, s = sympy.Symbol("z", negative=True), sympy.Symbol("s", real=True)
    chk = _Checks()
    Az, Bz = (_obj(v)[()] for v in _ssm.discretize_zoh(xp, xp.asarray(d), a, b))
    Ae, Be = (_obj(v)[()] for v in _ssm.discretize_zoh_euler(xp, xp.asarray(d), a, b))
    chk.zero(Az - Ae, "Abar_zoh - Abar_euler")
    err = sympy.simplify(Bz - Be)
    lead = sympy.limit(err / d**2, d, 0)
    chk.zero(lead - a * b / 2, "lim err/Delta^2 - a b/2")
    phi = _obj(_ssm.phi1(xp, xp.asarray(z)))[()]
    h2 = sympy.exp(z) - 1 - z - z**2 / 2
    h1 = sympy.exp(z) - 1 - z
    chk.zero(sympy.integrate((z - s)**2 / 2 * sympy.exp(s), (s, 0, z)) - h2, "Taylor h2")
    chk.zero(sympy.integrate((z - s) * sympy.exp(s), (s, 0, z)) - h1, "Taylor h1")
    chk.zero((phi - 1 - z / 2) - h2 / z, "phi1 - 1 - z/2 = h2/z")
    chk.zero((1 - phi) + h1 / z, "1 - phi1 = -h1/z")
    return chk.proof([
        Step(r"Mamba's `discretize_zoh_euler` has the same $\bar A = e^{\Delta a}$ as "
             r"`discretize_zoh`; its $\bar B$ differs by",
             r"\bar B_{\mathrm{ZOH}} - \bar B_{\mathrm{Euler}} = " + sympy.latex(err)
             + r" = (\varphi_1(\Delta a) - 1)\,\Delta b,"),
        Step(r"with leading term $\lim_{\Delta\to0} (\bar B_{\mathrm{ZOH}} - \bar B_{\mathrm{"
             r"Euler}})/\Delta^2 = " + sympy.latex(lead) + r"$: the per-step error, on a "
             r"state driven by $u$, is $\tfrac12 a b u \Delta^2 + O(\Delta^3)$ (the global "
             r"error over $T/\Delta$ steps $O(\Delta)$)."),
        Step(r"A bound for every $\Delta$: with $z = \Delta a < 0$, Taylor's formula with "
             r"integral remainder (both integrals checked by SymPy)",
             r"e^z - 1 - z = \int_0^z (z-s)e^s ds \ge 0,\qquad e^z - 1 - z - \tfrac{z^2}2 = "
             r"\int_0^z \tfrac{(z-s)^2}{2}e^s ds \le 0 ,"),
        Step(r"(for $z < 0$ the integrands are $\le 0$, resp. $\ge 0$, integrated from 0 "
             r"down to $z$), and `phi1` satisfies $1 - \varphi_1(z) = -(e^z-1-z)/z$, "
             r"$\varphi_1(z) - 1 - z/2 = (e^z - 1 - z - z^2/2)/z$; so $z/2 \le \varphi_1(z) "
             r"- 1 \le 0$ and",
             r"\bigl|\bar B_{\mathrm{ZOH}} - \bar B_{\mathrm{Euler}}\bigr| \le "
             r"\tfrac12\,|a|\,\Delta^2\,|b| \qquad (a \le 0,\ \Delta > 0),"),
        Step(r"with the constant $\tfrac12$ sharp as $\Delta \to 0$."),
    ])


def derive_stability() -> Proof:
    xp = get_namespace("sympy")
    al, be = sympy.symbols("alpha beta", real=True)
    d = sympy.Symbol("Delta", positive=True)
    A = al + sympy.I * be
    chk = _Checks()
    Az = _obj(_ssm.discretize_zoh(xp, xp.asarray(d), A, sympy.Integer(1))[0])[()]
    mod = sympy.simplify(sympy.Abs(Az))
    chk.zero(mod - sympy.exp(d * al), "|e^{Delta A}| - e^{Delta alpha}")
    Ab = _obj(_ssm.discretize_bilinear(xp, xp.asarray(d), A, sympy.Integer(1))[0])[()]
    num, den = sympy.fraction(sympy.together(Ab))
    gap = sympy.expand(num * sympy.conjugate(num) - den * sympy.conjugate(den))
    ratio = sympy.simplify(gap / (d * al))
    chk.holds(bool(ratio.is_number and ratio > 0),
              "|num|^2 - |den|^2 = c Delta alpha with a number c > 0", ratio)
    return chk.proof([
        Step(r"For $A = \alpha + i\beta$ and $\Delta > 0$, `discretize_zoh` gives "
             r"$\bar A = " + sympy.latex(Az) + r"$ with modulus", r"|\bar A| = "
             + sympy.latex(mod) + r" < 1 \iff \Delta\alpha < 0 \iff \operatorname{Re} A < 0."),
        Step(r"`discretize_bilinear` gives $\bar A = \frac{" + sympy.latex(num) + r"}{"
             + sympy.latex(den) + r"}$, and", r"|\text{num}|^2 - |\text{den}|^2 = "
             + sympy.latex(gap) + r","),
        Step(r"a positive multiple of $\Delta\alpha$: again $|\bar A| < 1 \iff \operatorname"
             r"{Re} A < 0$ (both rules map the stable half-plane into the unit disc)."),
    ])


def derive_softplus() -> Proof:
    xp = get_namespace("sympy")
    chk = _Checks()
    shown = []
    for x in (sympy.Symbol("x", positive=True), sympy.Symbol("x", negative=True)):
        got = _obj(_ssm.softplus(xp, xp.asarray(x)))[()]
        shown.append(got)
        chk.zero(sympy.expand(sympy.exp(got)) - (1 + sympy.exp(x)), f"exp(softplus) x={x}")
    zero = _obj(_ssm.softplus(xp, xp.asarray(sympy.Integer(0))))[()]
    chk.zero(zero - sympy.log(2), "softplus(0) - log 2")
    return chk.proof([
        Step(r"`softplus` on a positive and on a negative symbol takes the two branches",
             r"x > 0:\ " + sympy.latex(shown[0]) + r",\qquad x < 0:\ " + sympy.latex(shown[1])),
        Step(r"and on each $e^{\operatorname{softplus}(x)} = 1 + e^x$ exactly (and "
             r"$\operatorname{softplus}(0) = \log 2$): both are $\log(1+e^x)$."),
    ])


# -- scans ----------------------------------------------------------------------------------
def derive_lti_convolution() -> Proof:
    xp = get_namespace("sympy")
    L, d, N = 4, 1, 2
    Ab, Bb, C = (symbol_array(n, (d, N)) for n in (r"\bar a", r"\bar b", "c"))
    u = symbol_array("u", (L, d))
    chk = _Checks()
    y = _ssm.lti_scan(xp, Ab, Bb, C, u)
    K = _ssm.ssm_kernel(xp, Ab, Bb, C, L)
    chk.zero(_obj(y) - _obj(_ssm.causal_convolution(xp, K, u)), "scan - conv")
    for k in range(L):
        closed = sum(C[0, n] * Ab[0, n]**k * Bb[0, n] for n in range(N))
        chk.zero(_obj(K)[k, 0] - closed, f"K_{k}")
    return chk.proof([
        Step(rf"$L = {L}$ steps, a state of size $N = {N}$, $\bar A, \bar B, C$ and $u$ "
             r"independent symbols (any discretization). `ssm_kernel` gives, e.g.,",
             r"K_2 = " + sympy.latex(_obj(K)[2, 0]) + r" = \textstyle\sum_n C_n \bar A_n^2"
             r"\bar B_n ,"),
        Step(r"and `lti_scan` equals `causal_convolution` with that kernel at every step:",
             r"y_k = \sum_{j \le k} K_{k-j} u_j,\qquad K_k = C \bar A^k \bar B ."),
    ])


def derive_associative_scan() -> Proof:
    xp = get_namespace("sympy")
    L = 4
    a, b = symbol_array("a", (L,)), symbol_array("b", (L,))
    chk = _Checks()
    e = [(sympy.Symbol(f"a_{i}", real=True), sympy.Symbol(f"b_{i}", real=True))
         for i in (1, 2, 3)]
    left = _ssm.scan_combine(xp, _ssm.scan_combine(xp, e[0], e[1]), e[2])
    right = _ssm.scan_combine(xp, e[0], _ssm.scan_combine(xp, e[1], e[2]))
    chk.zero(left[0] - right[0], "assoc a")
    chk.zero(left[1] - right[1], "assoc b")
    ref = _obj(_ssm.linear_recurrence(xp, a, b))
    elems = [(a[k], b[k]) for k in range(L)]
    n_trees = 0
    for tree in bracketings(0, L):
        n_trees += 1
        chk.zero(_fold(xp, tree, elems)[1] - ref[-1], f"fold {_text(tree)}")
    chk.zero(_obj(_ssm.associative_scan(xp, a, b)) - ref, "associative_scan")
    n_splits = 0
    for sizes in compositions(L):
        n_splits += 1
        chk.zero(_obj(_ssm.chunked_scan(xp, a, b, sizes)) - ref, f"chunks {sizes}")
    return chk.proof([
        Step(r"`scan_combine` composes the affine maps $h \mapsto a h + b$:",
             r"(e_1 \circ e_2) \circ e_3 = " + sympy.latex(sympy.Tuple(*left))
             + r" = e_1 \circ (e_2 \circ e_3) ,"),
        Step(rf"so it is associative (not commutative). With $L = {L}$ symbolic steps "
             r"$(a_k, b_k)$, `linear_recurrence` gives $h_3 = " + sympy.latex(ref[-1])
             + rf"$, and all {n_trees} bracketings of $e_1 \circ \cdots \circ e_{L}$ give "
             r"its $b$ component."),
        Step(rf"`associative_scan` (recursive doubling, as `jax.lax.associative_scan`) and "
             rf"`chunked_scan` for all {n_splits} splits into contiguous chunks equal "
             r"`linear_recurrence` at every step."),
    ])


register(ssm_identity("ssm_zoh_exact",
             "Zero-order hold is exact for piecewise-constant input, with the limit A → 0",
             r"\bar A = e^{\Delta A},\ \bar B = \varphi_1(\Delta A)\Delta B:\ x_{k} = \bar A "
             r"x_{k-1} + \bar B u_k = x(t_k)\ \text{for}\ x' = Ax + Bu,\ u|_{[t_{k-1},t_k)} "
             r"= u_k;\ \varphi_1(0) = 1",
             (_ssm.discretize_zoh, _ssm.phi1), derive_zoh_exact, ("discretization",)))
register(ssm_identity("ssm_euler_b_error",
             "Mamba's Euler B̄ is off by ½ a b Δ² + O(Δ³), at most ½|a|Δ²|b| per step",
             r"\bar B_{\mathrm{ZOH}} - \Delta B = (\varphi_1(\Delta A) - 1)\Delta B = "
             r"\tfrac12 A B\Delta^2 + O(\Delta^3),\ |\cdot| \le \tfrac12|A|\Delta^2|B|\ "
             r"(A \le 0)",
             (_ssm.discretize_zoh_euler, _ssm.discretize_zoh, _ssm.phi1), derive_euler_b_error,
             ("discretization",)))
register(ssm_identity("ssm_stability", "The discretized SSM is stable iff Re A < 0",
             r"\Delta > 0:\ |e^{\Delta A}| < 1 \iff \operatorname{Re}A < 0 \iff "
             r"\Bigl|\frac{1 + \Delta A/2}{1 - \Delta A/2}\Bigr| < 1",
             (_ssm.discretize_zoh, _ssm.discretize_bilinear), derive_stability,
             ("discretization",)))
register(ssm_identity("ssm_softplus_branches",
             "The stable softplus is log(1 + e^x) on both branches",
             r"\max(x, 0) + \log(1 + e^{-|x|}) = \log(1 + e^x)",
             (_ssm.softplus,), derive_softplus))
register(ssm_identity("ssm_lti_convolution",
             "The LTI scan is the causal convolution with kernel K_k = C Ā^k B̄",
             r"x_k = \bar A x_{k-1} + \bar B u_k,\ y_k = C x_k \Rightarrow y = K * u,\ "
             r"K_k = C \bar A^k \bar B",
             (_ssm.lti_scan, _ssm.ssm_kernel, _ssm.causal_convolution), derive_lti_convolution,
             ("scan",)))
register(ssm_identity("ssm_associative_scan",
             "The scan combine is associative: every bracketing, the parallel and the "
             "chunked scans give the recurrence",
             r"(a_1, b_1) \circ (a_2, b_2) = (a_1 a_2, a_2 b_1 + b_2)\ \text{associative};\ "
             r"\operatorname{scan}_\circ(a, b)_k = h_k = a_k h_{k-1} + b_k",
             (_ssm.scan_combine, _ssm.linear_recurrence, _ssm.associative_scan,
              _ssm.chunked_scan, _ssm.chunk_bounds), derive_associative_scan, ("scan",)))
