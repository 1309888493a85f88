"""The generic proofs that an op's VJP is the transpose of its Jacobian, and its JVP the
Jacobian itself.

For an :class:`~nlaverify.ops.registry.OpSpec`, at concrete sizes with symbolic
entries, the VJP *function* run on the exact namespace is compared with

.. math:: \\bar a_{\\iota} = \\sum_{o} g_o\\, \\frac{\\partial f_o}{\\partial a_{\\iota}}

obtained by :func:`sympy.diff` of the *same forward function*; the difference
of every entry must simplify to exactly 0. Likewise the JVP function is compared with
:math:`\\dot f_o = \\sum_{a,\\iota} \\frac{\\partial f_o}{\\partial a_\\iota}\\,\\dot a_\\iota`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from nlaverify.backends import get_namespace
from nlaverify.identities.core import Proof, Step
from nlaverify.ops.registry import OpSpec, fixed_routing_mask, with_ignored
from nlaverify.symbolic.exact import symbol_array, zero_test
from nlaverify.symbolic.normal_form import rational_zero
from nlaverify.symbolic.op_pages import (
    derived_step,
    display_names,
    entry_label,
    size_words,
    static_words,
)
from nlaverify.symbolic.piecewise import piecewise_rung
from nlaverify.symbolic.statements import arg_latex, op_text


def proof_tokens(n: int, vocab: int) -> np.ndarray:
    """Deterministic token ids for a proof: ``(2i+1) mod V`` (repeats when n > V)."""
    return np.array([(2 * i + 1) % vocab for i in range(n)], dtype=np.int64)


def symbolic_inputs(spec: OpSpec, sizes: dict[str, int]) -> tuple[list[Any], dict[str, Any]]:
    """Symbolic arguments and static values of ``spec`` at ``sizes``."""
    args: list[Any] = []
    for a in spec.args:
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in a.dims)
        if a.kind == "tokens":
            toks = proof_tokens(shape[0], sizes["V"])
            args.append(toks if a.ignore is None else with_ignored(toks, a.ignore))
        elif a.kind == "fixed":
            args.append(symbol_array(a.name, shape))
        elif a.kind == "mask":
            args.append(get_namespace("sympy").asarray(fixed_routing_mask(*shape)))
        else:
            args.append(symbol_array(a.name.lower() if len(a.name) == 1 else a.name, shape))
    static = dict(spec.static)
    for key, sym in spec.proof_static.items():
        static[key] = sympy.Symbol(sym, positive=True)
    return args, static


def _shape(shape: tuple[int, ...]) -> str:
    return " x ".join(map(str, shape)) if shape else "a scalar"


def _obj(x: Any) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else np.asarray(x, dtype=object)


def _free_symbols(out: np.ndarray) -> dict[tuple[int, ...], set]:
    """The free symbols of every output entry, computed once (SymPy walks the whole tree
    for them at every ``sympy.diff``)."""
    return {o: sympy.sympify(out[o]).free_symbols for o in np.ndindex(*out.shape)}


def _diff(f: Any, x: sympy.Symbol, free: set) -> Any:
    """``sympy.diff(f, x)``; 0 at once when ``x`` is not a free symbol of ``f`` (``free``),
    which is what ``sympy.diff`` returns then."""
    return sympy.diff(f, x) if x in free else sympy.S.Zero


def prove_vjp(
    spec: OpSpec, sizes: dict[str, int] | None = None, *, time_limit: float | None = None
) -> Proof:
    """Prove ``spec.vjp == (d spec.forward)^T g`` exactly at ``sizes`` (default: the spec's).

    Each entry's difference goes through :func:`~nlaverify.symbolic.exact.zero_test`
    (``time_limit`` seconds per entry; default: its own). The first entry not proved fails
    the proof, and the detail names it and says why: ``entry W_Q[0, 1]: refuted at a
    rational point (value -0.371...)``, ``... timed out after 60 s`` or ``... does not
    simplify to 0``, followed in parentheses by the counterexample or the phase that ran
    out of time.
    """
    sizes = dict(spec.proof_sizes if sizes is None else sizes)
    xp = get_namespace("sympy")
    xp.reset_shifts()
    args, static = symbolic_inputs(spec, sizes)
    out = _obj(spec.forward(xp, *args, **static))
    G = symbol_array("g", out.shape)
    cotangents = [_obj(c) for c in spec.vjp(xp, G, *args, **static)]
    real = [(a, x) for a, x in zip(spec.args, args, strict=True) if a.kind == "real"]
    if len(cotangents) != len(real):
        return Proof("failed", (), f"vjp returned {len(cotangents)} cotangents, expected "
                                   f"{len(real)} (one per real argument)")
    checked = 0
    refs: list[tuple[str, Any]] = []
    free = _free_symbols(out)
    for (arg, x), cot in zip(real, cotangents, strict=True):
        if cot.shape != x.shape:
            return Proof("failed", (), f"cotangent of {arg.name!r} has shape {cot.shape}, "
                                       f"expected {x.shape}")
        for idx in np.ndindex(*x.shape):
            by_diff = sympy.Add(*[G[o] * _diff(out[o], x[idx], free[o])
                                  for o in np.ndindex(*out.shape)])
            checked += 1
            test = zero_test(cot[idx] - by_diff, time_limit=time_limit)
            if not test.proved:
                return Proof("failed", (), f"entry {arg.name}{list(idx)}: {test.reason} "
                                           f"(VJP - sum_o g_o df_o/da; {test.detail})")
            refs.append((entry_label(arg_latex(arg.name), idx, r"\bar"), by_diff))
    fwd, vjp = spec.qualified_names
    names = display_names(spec, args, cotangent=G)
    counts = ", ".join(f"{x.size} of ${arg_latex(a.name)}$" for a, x in real)
    out_name = op_text(spec.name).out
    jacobian = ((rf"\frac{{\partial {entry_label(out_name, o, '')}}}{{\partial {names[x[i]]}}}",
                 sympy.diff(out[o], x[i]))
                for _, x in real for i in np.ndindex(*x.shape) for o in np.ndindex(*out.shape))
    steps = [
        Step(f"Exact check at {size_words(spec, sizes)}{static_words(spec, static)}. Every "
             "real argument is an array of independent real symbols (entries such as "
             f"${next(iter(names.values()))}$, 1-based); "
             + (f"the cotangent $G$ has the output's shape, {_shape(out.shape)}, with "
                "independent symbols as entries." if out.shape else "the cotangent $g$ of "
                "the scalar output is a symbol too.")),
        Step(f"Run `{fwd}` on the exact SymPy namespace to get the output $f$, and "
             f"`{vjp}` on the same namespace to get the cotangents."),
        Step("For every entry $a_\\iota$ of every real argument, form the reference by "
             "`sympy.diff` of the forward function's output:",
             r"\bar a_\iota^{\mathrm{ref}} = \sum_o G_o \frac{\partial f_o}{\partial a_\iota}."),
        Step(f"The difference $\\bar a_\\iota - \\bar a_\\iota^{{\\mathrm{{ref}}}}$ simplifies to "
             f"exactly $0$ for all {checked} entries ({counts})."),
        derived_step(refs, jacobian, names, xp.without_shifts, "VJP"),
    ]
    return Proof("proved", tuple(steps), f"{checked} entries")


def prove_jvp(
    spec: OpSpec, sizes: dict[str, int] | None = None, *, time_limit: float | None = None
) -> Proof:
    r"""Prove ``spec.jvp == sum_a (d spec.forward / d a) . da`` exactly at ``sizes``.

    Every real argument gets a tangent of independent symbols :math:`\dot a_\iota`; the
    JVP function run on the exact namespace must equal, entry by entry of the output,
    :math:`\sum_{a,\iota} \partial f_o/\partial a_\iota\;\dot a_\iota` by
    :func:`sympy.diff` of the same forward. Failures name the output entry, as in
    :func:`prove_vjp`.
    """
    jvp = spec.jvp
    if jvp is None:
        return Proof("failed", (), f"op {spec.name!r} has no JVP function "
                                   f"({spec.forward.__name__}_jvp)")
    sizes = dict(spec.proof_sizes if sizes is None else sizes)
    xp = get_namespace("sympy")
    xp.reset_shifts()
    args, static = symbolic_inputs(spec, sizes)
    out = _obj(spec.forward(xp, *args, **static))
    real = [(a, x) for a, x in zip(spec.args, args, strict=True) if a.kind == "real"]
    tangents = [symbol_array(f"d{a.name}", x.shape) for a, x in real]
    got = _obj(jvp(xp, tuple(tangents), *args, **static))
    if got.shape != out.shape:
        return Proof("failed", (), f"JVP has shape {got.shape}, expected {out.shape} (the "
                                   "output's)")
    checked = 0
    out_name = op_text(spec.name).out
    refs: list[tuple[str, Any]] = []
    free = _free_symbols(out)
    for o in np.ndindex(*out.shape):
        by_diff = sympy.Add(*[_diff(out[o], x[idx], free[o]) * t[idx]
                              for (_, x), t in zip(real, tangents, strict=True)
                              for idx in np.ndindex(*x.shape)])
        checked += 1
        refs.append((entry_label(out_name, o, r"\dot"), by_diff))
        lhs = got[o]
        test = None
        if by_diff.has(sympy.Piecewise):
            # the Piecewise as opaque atoms first (sound: zero in the atoms is zero for any of
            # their values; elu1_attention), then branch by branch in the rational normal form
            # (nlaverify.symbolic.normal_form); else fold each side first: folding the
            # difference of two large Piecewise sums is far slower (moe_swiglu: 31 s -> 0.2 s)
            diff = lhs - by_diff
            if not rational_zero(diff) and piecewise_rung(diff) is None:
                by_diff, lhs = sympy.piecewise_fold(by_diff), sympy.piecewise_fold(lhs)
                test = zero_test(lhs - by_diff, time_limit=time_limit)
        else:
            test = zero_test(lhs - by_diff, time_limit=time_limit)
        if test is not None and not test.proved:
            return Proof("failed", (), f"output entry {list(o)}: {test.reason} (JVP - "
                                       f"sum_a df/da . da; {test.detail})")
    fwd = spec.qualified_names[0]
    name = f"{jvp.__module__}.{jvp.__qualname__}"
    names = display_names(spec, args, tangents)
    out_name = op_text(spec.name).out
    jacobian = ((rf"\frac{{\partial {entry_label(out_name, o, '')}}}{{\partial {names[x[i]]}}}",
                 sympy.diff(out[o], x[i]))
                for o in np.ndindex(*out.shape) for _, x in real for i in np.ndindex(*x.shape))
    steps = [
        Step(f"Exact check at {size_words(spec, sizes)}{static_words(spec, static)}. Every "
             "real argument $a$ is an array of independent real symbols, and so is its "
             "tangent $\\dot a$ (entries such as "
             f"${next(iter(names.values()))}$ and ${names[tangents[0].flat[0]]}$, 1-based)."),
        Step(f"Run `{fwd}` on the exact SymPy namespace to get the output $f$ (shape "
             f"{_shape(out.shape)}), and `{name}` on the same namespace to get its tangent."),
        Step("For every output entry $f_o$, form the reference by `sympy.diff` of the forward "
             "function's output:",
             r"\dot f_o^{\mathrm{ref}} = \sum_{a}\sum_\iota \frac{\partial f_o}"
             r"{\partial a_\iota}\,\dot a_\iota."),
        Step(f"The difference $\\dot f_o - \\dot f_o^{{\\mathrm{{ref}}}}$ simplifies to exactly "
             f"$0$ for all {checked} output entries."),
        derived_step(refs, jacobian, names, xp.without_shifts, "JVP"),
    ]
    return Proof("proved", tuple(steps), f"{checked} entries")
