"""Regenerate the `decoding` family of proofs (Baptista, Stuart & Tran §6; Holtzman et al.
2020; Meister et al. 2023; Nguyen et al. 2024): a truncation filter is the softmax of the kept
logits (Hugging Face's -inf mask), temperature's limits (greedy and uniform), top-p's smallest
set, the kept sets of top-k, min-p and typical sampling, and beam search of width one as
greedy decoding, each proved on the functions of :mod:`nlaverify.decoding` and
:mod:`nlaverify.beam` (symbolically, or exhaustively on exact finite sets).

No figure. The derivations live in :mod:`nlaverify.identities.decoding`. Run from the
repository root: ``python derivations/decoding.py [--check]``.
"""

from __future__ import annotations

import sys

import nlaverify.identities.decoding  # noqa: F401  (registers the family)
from nlaverify.proofs import family_script


def draw() -> None:
    """The family has no figure."""


if __name__ == "__main__":
    raise SystemExit(family_script("decoding", draw, sys.argv[1:], __doc__ or ""))
