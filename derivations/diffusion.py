"""Regenerate the `diffusion` family of proofs (Baptista, Stuart & Tran §9, App. D; Austin et
al. 2021; Campbell et al. 2022; Shi et al. 2024; Sahoo et al. 2024): the masked forward
process (Chapman-Kolmogorov, its rate matrix), the time reversal of a finite-state Markov
chain (reverse rates Q(y, x) p(y)/p(x)), the two-point posterior of the masked process, the
per-step KL of the discrete-time ELBO as a weighted cross-entropy, and the continuous-time
ELBO as the limit of the discrete one (schedule-invariant, Beta weights), each proved on the
functions of :mod:`nlaverify.diffusion` run with SymPy symbols.

No figure. The derivations live in :mod:`nlaverify.identities.diffusion`. Run from the
repository root: ``python derivations/diffusion.py [--check]``.
"""

from __future__ import annotations

import sys

import nlaverify.identities.diffusion  # noqa: F401  (registers the family)
from nlaverify.proofs import family_script


def draw() -> None:
    """The family has no figure."""


if __name__ == "__main__":
    raise SystemExit(family_script("diffusion", draw, sys.argv[1:], __doc__ or ""))
