"""General-dimension proofs with SymPy's indexed (Kronecker-delta) calculus.

``sympy.diff`` of an expression in ``IndexedBase`` entries with respect to
``x[j]`` produces sums of ``KroneckerDelta``; ``Sum.doit`` collapses them under
the condition :math:`1 \\le j \\le n`. What SymPy does not do on its own is
identify the same sum written with two dummy indices (``Sum(x[k])`` and
``Sum(x[m])``). :func:`canonical_sums` renames the dummy of every sum to one
symbol per nesting depth, so equal sums become the same expression and cancel.
"""

from __future__ import annotations

import sympy

from nlaverify.symbolic.normal_form import rational_zero

#: the dimension :math:`n` and the free indices :math:`i, j` of every indexed proof
n = sympy.Symbol("n", integer=True, positive=True)
i, j = sympy.symbols("i j", integer=True, positive=True)


def _rename(e: sympy.Basic, outer: tuple[sympy.Symbol, ...] = ()) -> sympy.Basic:
    """Rename dummies canonically and pull out factors free of the summation index.

    A sum's dummy is ``k_d`` with ``d`` the number of enclosing dummies its body
    depends on, so one sum gets one name wherever it stands.
    """
    if isinstance(e, sympy.Sum) and len(e.limits) == 1:
        var, lo, hi = e.limits[0]
        body = sympy.expand(e.function)
        if not body.has(var):
            return _rename(body, outer) * (hi - lo + 1)
        if isinstance(body, sympy.Add):
            return sympy.Add(*[_rename(sympy.Sum(t, (var, lo, hi)), outer) for t in body.args])
        if isinstance(body, sympy.Mul):
            inner = [a for a in body.args if a.has(var)]
            if len(inner) < len(body.args):
                outside = [a for a in body.args if not a.has(var)]
                return _rename(sympy.Mul(*outside), outer) * _rename(
                    sympy.Sum(sympy.Mul(*inner), (var, lo, hi)), outer)
        depth = sum(1 for v in outer if e.has(v))
        fresh = sympy.Symbol(f"k_{depth}", integer=True, positive=True)
        new_body = _rename(body.xreplace({var: fresh}), (*outer, fresh))
        return sympy.Sum(new_body, (fresh, lo, hi))
    if not e.args:
        return e
    return e.func(*[_rename(a, outer) for a in e.args])


def canonical_sums(e: sympy.Basic) -> sympy.Basic:
    """Evaluate Kronecker-delta sums and give every sum a canonical dummy index."""
    for _ in range(3):
        e = e.replace(lambda s: isinstance(s, sympy.Sum), lambda s: s.doit())
        e = _rename(e)
    return e


def zero_for_valid_indices(expr: sympy.Expr) -> tuple[bool, str]:
    """Prove ``expr == 0`` for indices in range.

    Returns ``(proved, condition)``: the Piecewise branch guarded by the index
    range must simplify to 0; its condition is returned as LaTeX.
    """
    e = sympy.piecewise_fold(canonical_sums(expr))
    condition = "all indices"
    if isinstance(e, sympy.Piecewise):
        # take the branch whose condition holds for in-range indices (checked, not assumed)
        inside = {i: 2, j: 1, n: 3}
        chosen = [(b, c) for b, c in e.args if bool(sympy.sympify(c).subs(inside))]
        if not chosen:
            return False, "no branch holds for in-range indices"
        branch, cond = chosen[0]
        condition = sympy.latex(cond)
        e = branch
    e = canonical_sums(e)
    # the rational normal form first (each sum, square root, ... a generator; numerator 0
    # is a proof), sympy.simplify only when that does not decide it
    return rational_zero(e) or sympy.simplify(sympy.expand(e)) == 0, condition
