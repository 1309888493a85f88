"""Regenerate the `curvature` family of proofs (Baggag & Saad §5.1–5.2: the score, the
Fisher, Gauss–Newton and the GGN, the empirical Fisher, the reduction conventions, the
natural gradient) and the figure ``docs/figures/natural_gradient.svg`` (the seed's
Figure 30: gradient descent against the natural gradient on a 2-D Gaussian model).

The derivations live in :mod:`nlaverify.identities.curvature`, the figure's model in
:mod:`nlaverify.curvature.natural`. Run from the repository root:
``python derivations/curvature.py [--check] [--figure-only]``. ``--check`` writes nothing:
it fails when a proof is not proved, a document is stale, or the figure differs from the
one the code draws; ``--figure-only`` (re)draws the figure and derives nothing.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import nlaverify.identities.curvature  # noqa: F401  (registers the family)
from nlaverify.curvature.natural import figure
from nlaverify.proofs import derive_family

FIGURE = Path("docs/figures/natural_gradient.svg")


def figure_is_current(path: Path = FIGURE) -> bool:
    """Draw the figure into a temporary file and compare it byte for byte with ``path``."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / path.name
        figure(str(fresh))
        return path.exists() and path.read_bytes() == fresh.read_bytes()


def main(argv: list[str]) -> int:
    if "--help" in argv or "-h" in argv:
        print(__doc__)
        return 0
    if "--check" not in argv:
        from nlaverify.reproducible import pin_process

        pin_process()  # the figure's data must not depend on the machine's kernels
    if "--figure-only" in argv:
        figure(str(FIGURE))
        print(f"wrote {FIGURE}", file=sys.stderr)
        return 0
    code = derive_family("curvature", argv)
    if "--check" in argv:
        if not figure_is_current():
            print(f"FAIL stale figure: {FIGURE} (run `python derivations/curvature.py`)",
                  file=sys.stderr)
            return 1
        return code
    figure(str(FIGURE))
    print(f"wrote {FIGURE}", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
