"""Regenerate the `objectives` family of proofs (Baptista, Stuart & Tran §3–4, §4.1,
§4.3–4.4; Rafailov et al. 2023; Williams 1992): the chain rule of the sequence KL,
cross-entropy = KL + entropy (with perplexity and bits per byte), maximum likelihood as the
forward KL and the asymmetry of the KL, the Gibbs maximiser of the KL-regularised objective,
DPO from the Bradley–Terry likelihood of that maximiser, and the unbiasedness of the
score-function gradient with a baseline, each proved on the functions of
:mod:`nlaverify.objectives` run with SymPy symbols.

No figure. The derivations live in :mod:`nlaverify.identities.objectives`. Run from the
repository root: ``python derivations/objectives.py [--check]``.
"""

from __future__ import annotations

import sys

import nlaverify.identities.objectives  # noqa: F401  (registers the family)
from nlaverify.proofs import family_script


def draw() -> None:
    """The family has no figure."""


if __name__ == "__main__":
    raise SystemExit(family_script("objectives", draw, sys.argv[1:], __doc__ or ""))
