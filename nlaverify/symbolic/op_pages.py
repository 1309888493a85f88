r"""The parts of an op's proof page that teach: the sizes in words, what the exact check
covers and what it does not, one derived entry typeset, and the Notation section.

Used by :mod:`nlaverify.symbolic.vjp_proof` (steps) and by the ``jacobians`` and
``batching`` identities (the sections around the derivation, see
:class:`~nlaverify.symbolic.document.PageExtra`). Everything here is a pure function of
the op's spec and the proof's symbols, so the pages stay byte-reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import sympy
from sympy.printing.latex import LatexPrinter

from nlaverify.identities.core import Step
from nlaverify.ops.registry import OpSpec
from nlaverify.symbolic.document import PageExtra
from nlaverify.symbolic.statements import DIM_WORDS, arg_latex, glossary_for, op_text

#: the longest derived entry shown, in characters of LaTeX (longer ones: see
#: :func:`typeset_entry`)
DISPLAY_LIMIT = 480


def size_words(spec: OpSpec, sizes: Mapping[str, int], batch: int | None = None) -> str:
    """The sizes as text: ``n = 2 tokens, d = 3 features`` (and ``batch B = 3 sequences``)."""
    words = {**DIM_WORDS, **op_text(spec.name).dims}
    parts = [f"{k} = {v} {_number(words.get(k, 'entries'), v)}" for k, v in sizes.items()]
    if batch is not None:
        parts.append(f"batch B = {batch} sequences")
    return ", ".join(parts)


def _number(words: str, count: int) -> str:
    """``words`` (plural) for ``count`` things: the first plural word singular for 1."""
    if count != 1:
        return words
    parts = words.split(" ")
    for k, w in enumerate(parts):
        if w.endswith("ies"):
            parts[k] = w[:-3] + "y"
            break
        if w.endswith("s"):
            parts[k] = w[:-1]
            break
    return " ".join(parts)


def static_words(spec: OpSpec, static: Mapping[str, Any]) -> str:
    """The static arguments as text (``""`` when there are none)."""
    parts = []
    for key, value in static.items():
        if key in spec.proof_static:
            parts.append(f"`{key}` = ${sympy.latex(value)}$ (a positive symbol)")
        else:
            parts.append(f"`{key}` = `{value!r}`")
    return ("; static arguments " + ", ".join(parts)) if parts else ""


def _entry_name(base: str, idx: tuple[int, ...]) -> str:
    sub = ",".join(str(i + 1) for i in idx)
    if not sub:
        return base
    wrapped = f"({base})" if "_" in base or "^" in base else base
    return f"{wrapped}_{{{sub}}}"


def display_names(spec: OpSpec, args: Sequence[Any], tangents: Sequence[Any] = (),
                  cotangent: Any = None) -> dict[sympy.Symbol, str]:
    """``sympy.latex`` names of the proof's symbols: entries of argument ``X`` as
    ``X_{1,2}`` (1-based), of ``W_E`` as ``(W_E)_{1,2}``, tangents as ``\\dot X_{1,2}``, the
    cotangent as ``G_{1,2}`` (``g`` when the output is a scalar)."""
    names: dict[sympy.Symbol, str] = {}

    def add(arr: Any, base: str) -> None:
        arr = np.asarray(arr, dtype=object)
        for idx in np.ndindex(*arr.shape):
            if isinstance(arr[idx], sympy.Symbol):
                names[arr[idx]] = _entry_name(base, idx)

    for a, x in zip(spec.args, args, strict=True):
        if a.kind in ("real", "fixed"):
            add(x, arg_latex(a.name))
    for a, t in zip(spec.real_args, tangents, strict=False):  # none for a VJP
        add(t, rf"\dot {arg_latex(a.name)}")
    if cotangent is not None:
        add(cotangent, "G" if np.ndim(cotangent) else "g")
    return names


def entry_label(base: str, idx: tuple[int, ...], mark: str) -> str:
    r"""``\bar{x}_{1,2}`` / ``\dot{y}_{1,1}``: the derived quantity's entry."""
    return _entry_name(rf"{mark}{{{base}}}", idx)


def typeset_entry(expr: sympy.Expr, names: Mapping[sympy.Symbol, str],
                  limit: int = DISPLAY_LIMIT) -> tuple[str, str]:
    """``(latex, note)`` of ``expr``, at most ``limit`` characters: a longer sum keeps its
    leading terms (in SymPy's printing order) and ends with ``+ \\cdots``; ``note`` says
    how many terms are shown (``""`` when it is complete). A longer non-sum is not
    shown (``latex`` empty, ``note`` says so)."""
    full = sympy.latex(expr, symbol_names=dict(names))
    if len(full) <= limit:
        return full, ""
    if isinstance(expr, sympy.Add):
        terms = sympy.Add.make_args(expr)
        ordered = sorted(terms, key=sympy.default_sort_key)
        shown: list[sympy.Expr] = []
        for term in ordered:
            trial = sympy.latex(sympy.Add(*shown, term, evaluate=False),
                                symbol_names=dict(names))
            if len(trial) > limit:
                break
            shown.append(term)
        if shown:
            head = sympy.latex(sympy.Add(*shown, evaluate=False), symbol_names=dict(names))
            return (head + r" + \cdots",
                    f"{len(shown)} of its {len(terms)} terms shown; the whole entry is "
                    f"{len(full)} characters of LaTeX")
    return "", f"the entry is {len(full)} characters of LaTeX, too long to show"


def coverage(spec: OpSpec, sizes: Mapping[str, int], kind: str, batch: int | None = None
             ) -> str:
    """The body of "What the check covers": what the exact check at ``sizes`` (and a batch
    of ``batch`` sequences) proves, and what it does not (``kind``: ``vjp``, ``jvp`` or
    ``batch``)."""
    text = op_text(spec.name)
    what = {"vjp": "the VJP function equals the transpose of the forward's Jacobian applied "
                   "to $G$",
            "jvp": "the JVP function equals the forward's Jacobian applied to the tangents",
            "batch": "the batched op (and its VJP) equals the op run on each sequence"}[kind]
    wide = [k for k, v in sizes.items() if v >= 2]
    narrow = [k for k, v in sizes.items() if v < 2]
    covers = [
        f"**Covers.** At {size_words(spec, sizes, batch)}, "
        f"{what}, exactly: every entry of the difference is an expression in independent "
        "real symbols (rational functions of them, with exp, log, erf, tanh, square roots "
        "or piecewise branches where the op has them) and simplifies to 0. So the identity "
        "holds at these sizes for every real input where the expressions are defined (not "
        "only at sampled points), on every branch of a piecewise op."]
    coupling = []
    if wide:
        coupling.append(
            "The op's code is one array program, the same at every size, and each entry is "
            "built by the same formula at every index. Along "
            + ", ".join(f"{k} (= {sizes[k]})" for k in wide)
            + " there are pairs of distinct indices, so every off-diagonal coupling along "
              "these axes (an output entry depending on an input entry at another index) is "
              "in the checked Jacobian: a missing, transposed or misplaced cross term would "
              "leave a nonzero entry.")
    if narrow:
        coupling.append("Along " + ", ".join(narrow) + " (size 1) there is no such pair: no "
                        "coupling between distinct indices along these axes is exercised "
                        "here.")
    if text.note:
        coupling.append(text.note)
    if batch is not None:
        coupling.append(f"With B = {batch} sequences, a reduction over the batch that used only "
                        "some sequences (the first and the last, or any two) would be "
                        "refuted.")
    limits = ["**Does not cover.** This is not a proof for every size: an error that appears "
              "only at other sizes (a special case for one size, an off-by-one that needs a "
              "longer axis) is not excluded by it."]
    equal = _equal_sizes(sizes)
    if equal:
        limits.append(f"Here {equal}, so a swap of those axes keeps the shapes: it is caught "
                      "only because the entries differ.")
    ranges = ", ".join(f"{k} in [{lo}, {hi}]" for k, (lo, hi) in spec.size_ranges.items())
    limits.append("Other sizes are tested numerically, in floating point, by the cross-checks "
                  "against JAX autodiff and mpmath and by `check_op`, which draw sizes with "
                  f"{ranges}.")
    if spec.static or spec.proof_static:
        limits.append("Static arguments are checked only at the values above.")
    return "\n\n".join(" ".join(p) for p in (covers, coupling, limits) if p)


def _equal_sizes(sizes: Mapping[str, int]) -> str:
    groups: dict[int, list[str]] = {}
    for k, v in sizes.items():
        if v >= 2:
            groups.setdefault(v, []).append(k)
    return "; ".join(" = ".join(ks) + f" = {v}" for v, ks in groups.items() if len(ks) > 1)


def notation(spec: OpSpec, kind: str, page: str) -> str:
    """The Notation section of ``spec``'s ``kind`` page, whose other text is ``page``: the
    output, every argument, the op's own symbols, the proof's symbols and every glossary
    symbol that ``page`` uses."""
    text = op_text(spec.name)
    rows = [(text.out, f"the output of `{spec.name}` ($f$ in the derivation)")]
    kinds = {"real": "differentiated", "tokens": "integer token ids, not differentiated",
             "mask": "a fixed 0/1 mask, not differentiated",
             "fixed": "a real array held fixed, not differentiated"}
    for a in spec.args:
        dims = " x ".join(str(d) for d in a.dims)
        rows.append((arg_latex(a.name), f"the argument `{a.name}` ({dims}), {kinds[a.kind]}"))
    rows += list(text.symbols)
    rows.append((r"x_{i,j}", "an entry of an argument, 1-based as in the papers (a "
                             r"subscripted name in parentheses: $(W_E)_{i,j}$)"))
    if kind in ("vjp", "batch"):
        rows += [("G", "the cotangent: an array of independent symbols of the output's "
                       r"shape (entries $G_{i,j}$; $g$ when the output is a scalar)"),
                 (r"\bar a", r"the cotangent of the argument $a$: $\bar a_\iota = \sum_o "
                             r"G_o\,\partial f_o/\partial a_\iota$")]
    if kind == "jvp":
        rows += [(r"\dot a", "the tangent of the argument $a$: independent symbols, one "
                             "per entry (the direction of the derivative)"),
                 (rf"\dot {text.out}", r"the output's tangent, $\sum_a \partial f/\partial a"
                                       r"\,\dot a$")]
    if kind != "batch":
        rows.append((r"\iota, o", "multi-indices of an argument's entry and of an output "
                                  "entry"))
    if "s_{0}" in page:
        rows.append(("s_k", "an opaque positive row scale of the norm (the same for the "
                            "forward and its derivative; `norm_scale_invariance`)"))
    if kind == "batch":
        rows += [("B, b", "the batch size and the index of a sequence"),
                 ("X, W", "in the batch statement: any per-token argument (batched) and any "
                          "parameter shared by every sequence (one array)"),
                 ("X_b", "sequence $b$ of a batched argument"),
                 (r"\bar X^{(b)}", "the cotangent computed by the VJP on sequence $b$ alone "
                                   r"(likewise $\bar W^{(b)}$, $\bar Z^{(b)}$)")]
        if spec.name in ("cross_entropy", "half_squared_error"):
            rows += [("L, L(Z_b)", "the loss of the batch, of sequence $b$ alone"),
                     (r"\alpha_b", "the weight of sequence $b$ in the batched loss")]
        else:
            rows.append(("f", f"the op `{spec.name}`"))
    used = glossary_for(page + "\n".join(r[0] for r in rows))
    rows += [r for r in used if r[0] not in {x[0] for x in rows}]
    return "\n".join(f"- ${sym}$: {meaning}" for sym, meaning in rows)


def op_page(spec: OpSpec, kind: str, batch: int | None = None) -> PageExtra:
    """The sections of ``spec``'s ``kind`` page (``vjp``, ``jvp`` or ``batch``, with
    ``batch`` sequences) around its statement and derivation."""
    text = op_text(spec.name)
    what = {"vjp": "Its VJP (reverse mode)", "jvp": "Its JVP (forward mode)",
            "batch": "Its batch-axis identity"}[kind]
    body = (f"`{spec.qualified_names[0]}` computes\n\n$$\n{text.forward}\n$$\n\n{what} is "
            f"the statement below; seed: {spec.seed}.")
    return PageExtra(before=(("The op", body),),
                     after=(("What the check covers",
                             coverage(spec, spec.proof_sizes, kind, batch)),),
                     notation=lambda page: notation(spec, kind, page))


class _MemoLatexPrinter(LatexPrinter):
    """SymPy's LaTeX printer that prints each subexpression once: ``doprint`` returns what
    ``sympy.latex(expr, **settings)`` does (a subexpression's LaTeX depends only on it, the
    keyword arguments of the call and the settings), the repeated subexpressions of many
    entries looked up instead of printed again."""

    def __init__(self, settings: dict | None = None) -> None:
        super().__init__(settings)
        self._memo: dict[tuple, str] = {}

    def _print(self, expr: Any, **kwargs: Any) -> str:
        try:
            key = (type(expr), expr, tuple(sorted(kwargs.items())))
            hit = self._memo.get(key)
        except TypeError:  # an unhashable argument (a list): printed as usual
            return super()._print(expr, **kwargs)
        if hit is None:
            hit = self._memo[key] = super()._print(expr, **kwargs)
        return hit


def derived_step(entries: Iterable[tuple[str, sympy.Expr]],
                 jacobian: Iterable[tuple[str, sympy.Expr]],
                 names: Mapping[sympy.Symbol, str], clean: Callable[[Any], Any],
                 what: str) -> Step:
    r"""The step that shows one derived entry: the first of ``entries`` (``(label,
    reference)``, in the order checked) that is nonzero and at most :data:`DISPLAY_LIMIT`
    characters of LaTeX; when none is, the first such entry of ``jacobian`` (``(label,
    \partial f_o/\partial a_\iota)``); when neither, the shortest of ``entries`` cut by
    :func:`typeset_entry`. ``clean`` sets the stability shifts to 0 (licensed by
    ``softmax_shift_invariance``)."""
    seen: list[tuple[str, sympy.Expr, bool]] = []
    # sympy.latex(., symbol_names=names) and sympy.latex(.), each subexpression printed once
    # for all the entries (they share their Piecewise, exp and denominators)
    named, plain = _MemoLatexPrinter({"symbol_names": dict(names)}), _MemoLatexPrinter()

    def first_fit(pairs: Iterable[tuple[str, sympy.Expr]], cap: int) -> tuple | None:
        for k, (label, expr) in enumerate(pairs):
            if k >= cap:
                break
            value = clean(expr)
            if value == 0:
                continue
            # what typeset_entry shows complete (no note): the whole LaTeX, when it fits
            latex = named.doprint(value)
            if len(latex) <= DISPLAY_LIMIT:
                return label, latex, value != expr
            seen.append((label, value, value != expr))
        return None

    found = first_fit(entries, 10_000)
    intro = f"One entry of the derived {what} (the reference, by `sympy.diff` of the forward"
    if found is None and (jac := first_fit(jacobian, 400)) is not None:
        found = jac
        intro = (f"Every entry of the derived {what} is longer than {DISPLAY_LIMIT} "
                 "characters of LaTeX; one Jacobian entry that it sums over (by `sympy.diff` "
                 "of the forward")
    if found is not None:
        label, latex, cleaned = found
        return Step(intro + ("; stability shifts set to 0, licensed by "
                             "`softmax_shift_invariance`" if cleaned else "") + "):",
                    f"{label} = {latex}")
    if not seen:
        return Step(f"Every entry of the derived {what} is 0.")
    # the shortest (the first of equal length), measured only when it is needed
    label, value, cleaned = min(seen, key=lambda s: len(plain.doprint(s[1])))
    latex, note = typeset_entry(value, names, limit=DISPLAY_LIMIT)
    return Step(intro + ("; stability shifts set to 0" if cleaned else "") + f"; {note}):",
                f"{label} = {latex}" if latex else None)
