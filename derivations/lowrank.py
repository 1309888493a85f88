"""Regenerate the `lowrank` family of proofs, compression part (Baggag & Saad §4.1, Table 6,
Fig. 27): the truncated SVD's Eckart–Young errors, the randomized range finder's exactness
beyond the rank, the uniform quantizers' Δ/2 bound and the quantized linear layer's bound,
magnitude pruning's exact error, the distillation gradient T(p_s − p_t) and its logit-matching
limit — and the figure ``docs/figures/quantization_error.svg`` (output error against bits,
measured against the bound, for a linear layer and the tiny Transformer's logits).

The derivations live in :mod:`nlaverify.identities.lowrank`, the library in
:mod:`nlaverify.lowrank`. Run from the repository root:
``python derivations/lowrank.py [--check] [--figure-only]``.
"""

from __future__ import annotations

import sys

import nlaverify.identities.lowrank  # noqa: F401  (registers the family)
from nlaverify.proofs import family_script

FIGURES = "docs/figures"


def draw() -> None:
    from nlaverify.lowrank.figures import draw_all

    for path in draw_all(FIGURES):
        print(f"wrote {path}", file=sys.stderr)


def main(argv: list[str]) -> int:
    return family_script("lowrank", draw, argv, __doc__ or "")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
