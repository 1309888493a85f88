"""The per-op text type of the proof pages (:class:`OpText`), apart from the tables that
use it (:mod:`nlaverify.symbolic.statements_data`,
:mod:`nlaverify.symbolic.statements_attention`) and the lookup that joins them
(:mod:`nlaverify.symbolic.statements`), so that neither imports the other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class OpText:
    """The per-op text of a proof page.

    ``out`` is the LaTeX name of the output (``y``, ``Y``, ``L``); ``forward`` the op's
    formula; ``jvp`` its JVP statement (``None``: the op has no JVP function);
    ``symbols`` ``(latex, meaning)`` pairs for every symbol of ``forward``, ``jvp`` and the
    VJP statement that is neither an argument, the output nor in :data:`GLOSSARY`;
    ``dims`` words for the sizes that differ from :data:`DIM_WORDS` (``m`` means
    classes, random features or an expert's width); ``note`` an op-specific sentence on
    what the exact check covers.
    """

    out: str
    forward: str
    jvp: str | None
    symbols: tuple[tuple[str, str], ...] = ()
    dims: Mapping[str, str] = field(default_factory=dict)
    note: str = ""
