"""The Piecewise rung of the zero test (:mod:`nlaverify.symbolic.piecewise`), the canonical
radicals of the rational normal form and the memoised LaTeX printer of the proof pages: each
a faster route to the same verdict, never a proof of something false."""

from __future__ import annotations

import sympy

from nlaverify.symbolic import piecewise as pw
from nlaverify.symbolic.exact import zero_test
from nlaverify.symbolic.normal_form import canonical_radicals, rational_zero, same_normal_form
from nlaverify.symbolic.op_pages import _MemoLatexPrinter

x, y, a = sympy.symbols("x y a", real=True)


def _stable_sigmoid(v: sympy.Expr) -> sympy.Expr:
    """The exact namespace's stable sigmoid: two branches, one rational function of e^v."""
    return sympy.Piecewise((1 / (1 + sympy.exp(-v)), v > 0),
                           (sympy.exp(v) / (sympy.exp(v) + 1), True))


def test_equal_branches_collapse_and_prove_without_enumerating() -> None:
    s = _stable_sigmoid(x)
    silu_grad = sympy.diff(x * s, x)  # a Piecewise of derivatives, branches equal too
    ref = 1 / (1 + sympy.exp(-x)) + x * sympy.exp(-x) / (1 + sympy.exp(-x)) ** 2
    expr = silu_grad - ref
    collapsed, count = pw.collapse_equal_branches(expr)
    assert count >= 1 and not collapsed.has(sympy.Piecewise)
    rung = pw.piecewise_rung(expr)
    assert rung is not None and "with equal branches" in rung and "assignments" not in rung


def test_unequal_branches_are_enumerated_not_collapsed() -> None:
    relu = sympy.Piecewise((x, x > 0), (0, True))
    assert not same_normal_form([x, sympy.Integer(0)])
    assert pw.collapse_equal_branches(relu * y)[1] == 0
    rung = pw.piecewise_rung(relu * relu - relu * x)  # x^2 - x^2 and 0 - 0
    assert rung is not None and "each of 2 branch assignments" in rung


def test_a_wrong_identity_with_collapsible_branches_is_not_proved() -> None:
    s = _stable_sigmoid(x)
    wrong = sympy.diff(s, x) - s * s  # sigma' = sigma (1 - sigma), not sigma^2
    assert pw.piecewise_rung(wrong) is None
    assert zero_test(wrong).verdict == "refuted"
    # a branch of one Piecewise that differs from the other (a planted typo) is kept
    typo = sympy.Piecewise((1 / (1 + sympy.exp(-x)), x > 0),
                           (sympy.exp(x) / (sympy.exp(x) + 2), True))
    assert pw.collapse_equal_branches(typo)[1] == 0
    assert pw.piecewise_rung(typo - 1 / (1 + sympy.exp(-x))) is None


def test_dag_traversal_and_substitution_match_sympy() -> None:
    inner = _stable_sigmoid(a * x) + _stable_sigmoid(y)
    shared = inner * inner + sympy.exp(inner) * sympy.Piecewise((inner, y > 0), (x, True))
    assert pw._pieces(shared) == shared.atoms(sympy.Piecewise)
    rule = {p: p.args[-1][0] for p in shared.atoms(sympy.Piecewise)}
    assert pw._substitute(shared, rule) == shared.xreplace(rule)


def test_radicals_of_equal_bases_written_differently_are_one_generator() -> None:
    s1, s2 = sympy.symbols("s1 s2", positive=True)
    base = 9 * (s1 + s2) ** 2 + 9 * (s1 - s2) ** 2  # 18 (s1^2 + s2^2)
    expr = 1 / sympy.sqrt(base) - 1 / (3 * sympy.sqrt(2) * sympy.sqrt(s1**2 + s2**2))
    assert canonical_radicals(expr) != expr
    assert rational_zero(expr)
    assert not rational_zero(1 / sympy.sqrt(base) - 1 / (3 * sympy.sqrt(s1**2 + s2**2)))


def test_memoised_latex_is_sympys_latex() -> None:
    names = {x: r"x_{\mathrm{in}}"}
    exprs = [_stable_sigmoid(x) * y + sympy.exp(-x) / (1 + sympy.exp(-x)) ** 2,
             sympy.Rational(3, 7) * sympy.sqrt(x**2 + 1) - sympy.Float("0.5") * y,
             sympy.Add(x, y, evaluate=False) * _stable_sigmoid(x)]
    named, plain = _MemoLatexPrinter({"symbol_names": names}), _MemoLatexPrinter()
    for _ in range(2):  # the second time from the memo
        for e in exprs:
            assert named.doprint(e) == sympy.latex(e, symbol_names=names)
            assert plain.doprint(e) == sympy.latex(e)
