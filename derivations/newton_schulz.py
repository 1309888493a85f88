"""Regenerate the `newton_schulz` family of proofs (Baggag & Saad §5.5, Muon; §5.4 for
Shampoo's link): odd polynomials act on singular values, the transpose trick, the cubic and
the Newton–Schulz family of order k, fixed points, critical points, absorbing intervals and
the certified interval of every singular value after k steps for any coefficients, and the
figures ``docs/figures/newton_schulz_maps.svg`` (the scalar maps p^k on [0, 1.3]) and
``docs/figures/newton_schulz_spectra.svg`` (spectra before and after k steps).

The derivations live in :mod:`nlaverify.identities.newton_schulz`, the certified intervals
in :mod:`nlaverify.optim.certify`, the figures in :mod:`nlaverify.optim.figures`. Run from
the repository root: ``python derivations/newton_schulz.py [--check] [--figure-only]``.
``--check`` writes nothing and fails on a failed proof or a stale document;
``--figure-only`` (re)draws the figures and derives nothing.
"""

from __future__ import annotations

import sys

import nlaverify.identities.newton_schulz  # noqa: F401  (registers the family)
from nlaverify.proofs import family_script

FIGURES = "docs/figures"


def draw() -> None:
    from nlaverify.optim.figures import draw_all

    for path in draw_all(FIGURES):
        print(f"wrote {path}", file=sys.stderr)


def main(argv: list[str]) -> int:
    return family_script("newton_schulz", draw, argv, __doc__ or "")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
