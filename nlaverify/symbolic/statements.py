r"""The text of the op proof pages: each op's formula, its own JVP statement and its
notation, keyed by op name (the VJP statement is :attr:`~nlaverify.ops.registry.OpSpec.
vjp_statement`).

The entries live in :mod:`nlaverify.symbolic.statements_data` (elementwise, linear, norm,
softmax and routing ops) and :mod:`nlaverify.symbolic.statements_attention` (softmax,
linear and blockwise attention); this module holds the types, the shared glossary and
the LaTeX names of arguments and sizes. For an op :math:`f` with output :math:`y`, the
JVP statement is :math:`\dot y = \sum_a \partial f/\partial a\,\dot a` written out for
that op (the product rule, the softmax Jacobian, ...), the VJP statement
:math:`\bar a = (\partial f/\partial a)^\top G` likewise.
"""

from __future__ import annotations

from nlaverify.errors import UnknownNameError
from nlaverify.symbolic.op_text import OpText

__all__ = ["DIM_WORDS", "GLOSSARY", "OpText", "arg_latex", "glossary_for", "op_text",
           "op_texts"]


#: what each named size counts, in "n = 2 tokens" (an op may override it in ``dims``)
DIM_WORDS: dict[str, str] = {
    "n": "tokens", "d": "features", "d_in": "input features", "d_out": "output features",
    "m": "columns", "V": "vocabulary entries", "h": "heads", "d_h": "features per head",
    "hd": "features (all heads)", "d_k": "query/key features", "d_v": "value features",
    "r": "rank", "E": "experts", "k": "projected positions", "context": "positions of the "
    "table", "h_kv": "key/value heads",
}

#: LaTeX names of arguments whose name is not already LaTeX
ARG_LATEX: dict[str, str] = {
    "gamma": r"\gamma", "beta": r"\beta", "Yhat": r"\hat Y", "scores": "s",
    "W_in": r"W_{\mathrm{in}}", "W_out": r"W_{\mathrm{out}}", "W1": "W_1", "W2": "W_2",
    "W3": "W_3", "Qf": "Q_f", "Kf": "K_f", "tokens": "t", "targets": "t", "mask": "M",
}

#: notation shared by the pages: ``(trigger, latex, meaning)``; an entry is listed on a
#: page whose text contains ``trigger``
GLOSSARY: tuple[tuple[str, str, str], ...] = (
    (r"\odot", r"\odot", "the entrywise (Hadamard) product"),
    (r"\circ", r"\circ", "the entrywise product with a 0/1 mask"),
    (r"\mathbf 1", r"\mathbf 1", "the all-ones vector of the length that makes the "
                                 "product defined"),
    (r"\mathbb 1[", r"\mathbb 1[\cdot]", "the indicator: 1 where the condition holds, "
                                        "else 0"),
    (r"\operatorname{rowsum}", r"\operatorname{rowsum}(A)", "the column vector of the row "
                                                            "sums of A"),
    (r"\langle", r"\langle u, v\rangle", "the inner product of two vectors (with "
                                         r"$_F$: of two matrices, entry by entry)"),
    (r"\overline{", r"\overline{v}", "the mean of v over the feature axis (one value per "
                                     "row, broadcast back along it)"),
    (r"\operatorname{diag}", r"\operatorname{diag}(v)", "the diagonal matrix with v on "
                                                        "its diagonal"),
    (r"^\top", r"A^\top", "the transpose"),
    (r"\operatorname{softmax}", r"\operatorname{softmax}(z)_j",
     r"$e^{z_j}/\sum_k e^{z_k}$, along each row unless marked otherwise"),
    (r"\sigma(", r"\sigma(x)", r"the logistic sigmoid $1/(1+e^{-x})$"),
    (r"\operatorname{SiLU}", r"\operatorname{SiLU}(x)", r"$x\,\sigma(x)$; "
                                                        r"$\operatorname{SiLU}'$ its derivative"),
    (r"\operatorname{GELU}_{\tanh}", r"\operatorname{GELU}_{\tanh}(x)",
     r"$\tfrac x2(1 + \tanh(\sqrt{2/\pi}(x + 0.044715x^3)))$; the prime is its derivative"),
    (r"\operatorname{split}", r"\operatorname{split}", "the reshape (n, h d_h) to (h, n, "
                                                       "d_h): column block k becomes head k"),
    (r"\operatorname{merge}", r"\operatorname{merge}", "the inverse reshape of split "
                                                       "(heads concatenated along features)"),
    (r"\epsilon", r"\epsilon", "the static argument `eps`, a positive symbol in the exact "
                               "check"),
    (r"\varnothing", r"\varnothing", "the ignore index (padding): no target at that "
                                     "position"),
    (r"\textstyle", r"\textstyle", "(typesetting only: inline-size sums)"),
)


def arg_latex(name: str) -> str:
    """The LaTeX name of an op argument (``gamma`` -> ``\\gamma``, ``W_E`` stays)."""
    return ARG_LATEX.get(name, name)


#: the text of an op that is not one of nlaverify's (a user's op proved by
#: :func:`nlaverify.check.prove`): its output is named :math:`y`, its formula is its code
USER_OP_TEXT = OpText(out="y", forward=r"y = f(\ldots)", jvp=None,
                      note="The op is the user's own code, evaluated on exact symbols.")


def op_text(name: str) -> OpText:
    """The :class:`OpText` of op ``name``: a registered op must have one (a missing entry
    lists the known ones); any other name is a user's op and gets :data:`USER_OP_TEXT`."""
    from nlaverify.ops.registry import OPS

    table = op_texts()
    if name in table:
        return table[name]
    if name not in OPS:
        return USER_OP_TEXT
    raise UnknownNameError(f"no proof-page text for op {name!r}: expected one of "
                           f"{', '.join(sorted(table))}")


def op_texts() -> dict[str, OpText]:
    """Every op's :class:`OpText`, by op name."""
    from nlaverify.symbolic.statements_attention import ATTENTION_TEXT
    from nlaverify.symbolic.statements_data import OP_TEXT

    return {**OP_TEXT, **ATTENTION_TEXT}


def glossary_for(text: str) -> list[tuple[str, str]]:
    """The glossary entries ``(latex, meaning)`` whose trigger occurs in ``text``."""
    return [(latex, meaning) for trigger, latex, meaning in GLOSSARY if trigger in text]
