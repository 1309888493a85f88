"""Hostile values by argument kind, for a user's op (``user_op(hostile=...)``): the same
builders as the catalogue's hostile cases (:mod:`nlaverify.cases.hostile`), chosen by what an
argument *is* (logits, attention queries and keys, a normalization's rows, pre-activations)
instead of by op name. Seeds: Baggag & Saad §3.4.2 (softmax and attention), §3.8
(normalizations); Higham (2002) §1.12–1.14 (overflow, cancellation).
"""

from __future__ import annotations

import numpy as np

from nlaverify.cases.hostile import (
    LOGIT_ROWS,
    _hostile_activation_array,
    _hostile_norm_array,
    _hostile_scores,
    hostile_logit_array,
    realistic_norm_rows,
)
from nlaverify.cases.rounding import exact_in

__all__ = ["HOSTILE_KINDS", "hostile_array"]

#: the kinds of argument :func:`hostile_array` fills with hostile values, and what each
#: breaks (``user_op(..., hostile={"Q": "scores", "K": "scores"})``)
HOSTILE_KINDS: dict[str, str] = {
    "logits": "rows of +-1e4, spread, equal and masked (-inf) logits (and an all-masked row "
              "with hostile='extreme'): a softmax without its max shift overflows",
    "scores": "queries or keys whose dot products reach +-1e4 (a zero row, rows sharing a "
              "huge component): attention without the max shift overflows",
    "norm_rows": "rows a normalization meets: large (1e2..1e4), offset, tiny (mean square "
                 "near eps), constant and zero rows",
    "activations": "pre-activations in the tails (-88, -100, +-1e-30, subnormal, 0): a "
                   "naive exp or erf overflows or loses its sign",
}


def hostile_array(kind: str, rng: np.random.Generator, shape: tuple[int, ...], dtype: str,
                  extreme: bool = False) -> np.ndarray:
    """Hostile values of one :data:`HOSTILE_KINDS` kind for an argument of ``shape``
    (rows along the last axis), exactly representable in ``dtype`` (float64 values)."""
    if kind not in HOSTILE_KINDS:
        raise ValueError(f"hostile_array: argument 'kind': expected one of "
                         f"{', '.join(HOSTILE_KINDS)}, got {kind!r}")
    base = "float64" if dtype == "float64" else "float32"
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    if kind == "logits":
        kinds = LOGIT_ROWS if extreme else LOGIT_ROWS[:-1]
        x = hostile_logit_array(rng, tuple(shape), base, kinds)
    elif kind == "scores":
        x = _hostile_scores(rng, tuple(shape))
    elif kind == "norm_rows":
        x = (_hostile_norm_array(rng, rows, shape[-1], base) if extreme else
             realistic_norm_rows(rng, rows, shape[-1], dtype)).reshape(shape)
    else:
        x = _hostile_activation_array(rng, tuple(shape), base)
    return exact_in(x, dtype, strict=True)
