"""Regenerate the `geometry` family of proofs (Baggag & Saad §3.14.1, Fig. 24, Table 5):
the law of cos θ between random directions in R^d (normalised, mean 0, variance 1/d, fourth
moment 3/(d(d+2))), the exact probability of the band |θ − 90°| ≤ δ (recurrence = integral
of the density = regularized incomplete beta), the moments of ‖Px‖² for Gaussian and
Achlioptas projections, and the Dasgupta–Gupta form of the Johnson–Lindenstrauss bound —
and the figures ``docs/figures/angles.svg`` (the seed's Fig. 24: 10,000 random vectors in
12,288 dimensions) and ``docs/figures/jl_distortion.svg`` (measured distortion against the
bound as k varies).

The derivations live in :mod:`nlaverify.identities.geometry`, the library and figures in
:mod:`nlaverify.geometry`. Run from the repository root:
``python derivations/geometry.py [--check] [--figure-only]``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import nlaverify.identities.geometry  # noqa: F401  (registers the family)
from nlaverify.proofs import family_script

FIGURES = Path("docs/figures")


def draw() -> None:
    from nlaverify.geometry.figures import draw_angles, draw_jl

    start = time.perf_counter()
    path, st, p = draw_angles(FIGURES / "angles.svg")
    se = st.fraction_se(p)
    print(f"wrote {path}: {st.pairs:,} pairs, band fraction {st.fraction:.9f} vs exact "
          f"{p:.9f} (SE {se:.2e}, z = {(st.fraction - p) / se:+.2f}); mean cos^2 "
          f"{st.mean_c2:.6e} vs 1/d = {1 / st.d:.6e} (z = "
          f"{(st.mean_c2 - 1 / st.d) / st.mean_c2_se:+.2f}); "
          f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
    start = time.perf_counter()
    path, c = draw_jl(FIGURES / "jl_distortion.svg")
    rows = ", ".join(f"k={k}: G {np.median(c.measured['Gaussian'][i]):.3f} / A "
                     f"{np.median(c.measured['Achlioptas (sparse)'][i]):.3f} / DG "
                     f"{c.dg_eps[i]:.3f} / chi2 {c.chi2_median[i]:.3f}"
                     for i, k in enumerate(c.ks))
    print(f"wrote {path}: n = {c.n}, d = {c.d}; median max distortion {rows}; "
          f"{time.perf_counter() - start:.1f} s", file=sys.stderr)


def main(argv: list[str]) -> int:
    return family_script("geometry", draw, argv, __doc__ or "")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
