r"""The Piecewise rung of :func:`~nlaverify.symbolic.exact.zero_test`: an expression with
:class:`~sympy.Piecewise` subexpressions proved identically 0 branch by branch, without
``sympy.piecewise_fold`` (which multiplies the branches of a sum out).

:func:`piecewise_rung` works in two stages:

1. **Collapse the Piecewise whose branches agree.** The stable sigmoid and SiLU of the exact
   namespace are a ``Piecewise`` whose two branches, :math:`1/(1+e^{-x})` for :math:`x > 0`
   and :math:`e^{x}/(1+e^{x})` otherwise, are the same rational function of the generator
   :math:`e^{x}` (:mod:`nlaverify.symbolic.normal_form`), and so are the branches of their
   derivatives by ``sympy.diff``. When every branch of a ``Piecewise`` has the rational
   normal form of its first branch (:func:`~nlaverify.symbolic.normal_form.same_normal_form`),
   the ``Piecewise`` is replaced by its first branch: under any truth assignment of its
   conditions its value is that of one branch, equal to the first wherever both are
   defined; and since the normal form is built from those of the subexpressions by sums,
   products and powers, the expression with any branch in its place has the normal form of
   the expression with the first. Enumerating that ``Piecewise``'s conditions would check
   the same normal form again for each of their truth values (DeepSeek-V3's MoE block: 32
   conversions of the whole JVP entry, 6 s, become one).
2. **Every truth assignment of the rest.** Let :math:`r_1, \dots, r_k` be the relations
   (``x > 0``, ...) in the conditions of the ``Piecewise`` left (``k <=``
   :data:`MAX_CONDITIONS`). For each of the :math:`2^k` truth assignments every ``Piecewise``
   is replaced by its first branch whose condition is true under the assignment
   (repeatedly, for nested ones), and the result must have rational normal form 0. Sound: at
   any point where the expression is defined the relations take *some* assignment, under
   which the expression equals the substituted one there; every assignment is checked,
   infeasible ones too (which can only cost a proof).
"""

from __future__ import annotations

import itertools

import sympy
from sympy.core.relational import Relational

from nlaverify.symbolic.normal_form import rational_rung, same_normal_form

__all__ = ["MAX_CONDITIONS", "collapse_equal_branches", "piecewise_rung"]

#: at most this many relations are enumerated by :func:`piecewise_rung` (2^k assignments)
MAX_CONDITIONS = 8


def collapse_equal_branches(expr: sympy.Basic) -> tuple[sympy.Basic, int]:
    """``expr`` with every ``Piecewise`` whose branches all have the rational normal form of
    its first branch replaced by that branch (innermost ones after the outer, until none is
    left), and how many distinct ``Piecewise`` were replaced. A condition is never looked
    at: the value of a ``Piecewise`` is one of its branches, whichever holds."""
    done: dict[sympy.Basic, bool] = {}
    count = 0
    pieces = _pieces(expr)
    while pieces:
        chosen = {}
        for piece in pieces:
            if piece not in done:
                done[piece] = same_normal_form([value for value, _ in piece.args])
            if done[piece]:
                chosen[piece] = piece.args[0][0]
        if not chosen:
            break
        count += len(chosen)
        expr = _substitute(expr, chosen)
        pieces = _pieces(expr)
    return expr, count


def piecewise_rung(expr: sympy.Expr, max_conditions: int = MAX_CONDITIONS) -> str | None:
    r"""Prove ``expr`` identically 0 branch by branch (see the module's docstring): the
    ``Piecewise`` with equal branches collapsed, then every truth assignment of the
    relations of the others. The rung, e.g. ``"each of 8 branch assignments, then
    together"`` or ``"20 Piecewise with equal branches, then together"``, or None: not
    proved this way (no ``Piecewise``, too many relations, a condition not decided by them,
    or a branch not 0 in its normal form)."""
    if not expr.has(sympy.Piecewise):
        return None
    expr, collapsed = collapse_equal_branches(expr)
    said = f"{collapsed} Piecewise with equal branches, then " if collapsed else ""
    pieces = _pieces(expr)
    if not pieces:
        rung = rational_rung(expr)
        return None if rung is None else said + rung
    relations: set[sympy.Basic] = set()
    for piece in pieces:
        for _, cond in piece.args:
            relations |= cond.atoms(Relational)
    if len(relations) > max_conditions:
        return None
    ordered = sorted(relations, key=sympy.default_sort_key)
    rungs: set[str] = set()
    for truths in itertools.product((sympy.true, sympy.false), repeat=len(ordered)):
        branch = _select(expr, dict(zip(ordered, truths, strict=True)), pieces)
        if branch is False:
            continue  # some Piecewise has no true branch: undefined under this assignment
        rung = None if branch is None else rational_rung(branch)
        if rung is None:
            return None
        rungs.add(rung)
    return (f"{said}each of {2 ** len(ordered)} branch assignments, then "
            + " and ".join(sorted(rungs)))


def _select(expr: sympy.Basic, values: dict, pieces: set | None = None
            ) -> sympy.Basic | bool | None:
    """``expr`` with every Piecewise replaced by its branch under the truth ``values`` of
    the relations; None when a condition is not decided by them, False when a Piecewise has
    no true branch. ``pieces``: the Piecewise of ``expr``, when known."""
    if pieces is None:
        pieces = _pieces(expr)
    while pieces:
        chosen = {}
        for piece in pieces:
            for value, cond in piece.args:
                truth = cond.xreplace(values)
                if truth is sympy.true:
                    chosen[piece] = value
                    break
                if truth is not sympy.false:
                    return None
            else:
                return False
        expr = _substitute(expr, chosen)
        # a Piecewise is left only inside a chosen branch (nested ones): look again then
        nested = any(isinstance(v, sympy.Basic) and v.has(sympy.Piecewise)
                     for v in chosen.values())
        pieces = _pieces(expr) if nested else set()
    return expr


def _pieces(expr: sympy.Basic) -> set[sympy.Basic]:
    """``expr.atoms(sympy.Piecewise)``, each shared subexpression visited once (SymPy's
    traversal visits every occurrence: the trees of a scan share most of their nodes)."""
    seen: set[sympy.Basic] = set()
    out: set[sympy.Basic] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node, sympy.Piecewise):
            out.add(node)
        stack.extend(node.args)
    return out


def _substitute(expr: sympy.Basic, rule: dict) -> sympy.Basic:
    """``expr.xreplace(rule)``, each shared subexpression rebuilt once."""
    memo: dict[sympy.Basic, sympy.Basic] = {}

    def walk(node: sympy.Basic) -> sympy.Basic:
        if node in rule:
            return rule[node]
        hit = memo.get(node)
        if hit is not None:
            return hit
        args = [walk(a) for a in node.args]
        out = node.func(*args) if any(a is not b for a, b in zip(args, node.args,
                                                                    strict=True)) else node
        memo[node] = out
        return out

    return walk(expr)
