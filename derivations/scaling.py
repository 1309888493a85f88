"""Regenerate the `scaling` family of proofs (Hoffmann et al. 2022, eq. 4; Baggag & Saad
§3.14): the compute-optimal allocation of the Chinchilla law under C = 6ND, proved on
:func:`nlaverify.scaling.compute_optimal` with symbolic constants (the budget spent exactly,
the stationary point, strict convexity in log N, the exponents beta/(alpha+beta) and
alpha/(alpha+beta)), with the published constants' allocations at Chinchilla's budget.

Figure: ``docs/figures/chinchilla_isoflop.svg``, the iso-FLOP curves of both published fits
with the proved optimum marked (Hoffmann et al. 2022, Fig. 3).

The derivation lives in :mod:`nlaverify.identities.scaling`, the law, the allocation and the
fitter in :mod:`nlaverify.scaling`. Run from the repository root:
``python derivations/scaling.py [--check] [--figure-only]``.
"""

from __future__ import annotations

import sys

import nlaverify.identities.scaling  # noqa: F401  (registers the family)
from nlaverify.proofs import family_script

FIGURE = "docs/figures/chinchilla_isoflop.svg"


def draw() -> None:
    from nlaverify.scaling import draw_isoflop

    print(f"wrote {draw_isoflop(FIGURE)}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(family_script("scaling", draw, sys.argv[1:], __doc__ or ""))
