"""Regenerate the `attention` family of proofs (Baggag & Saad §2.8, §4.3, §4.4): attention
rows as Nadaraya–Watson weights, the linear (associative) form and its operation counts,
the softmax kernel as a Gaussian kernel with σ = d^{1/4}, unbiasedness and mean squared
errors of trigonometric, positive and hyperbolic random features, orthogonal features, the
causal prefix-sum algorithm and FAVOR+'s stabilisers, elu+1 and efficient attention,
Linformer — and the figures ``docs/figures/nadaraya_watson.svg`` (the seed's Fig. 14) and
``docs/figures/random_features_mse.svg`` (MSE against m, measured and predicted).

The derivations live in :mod:`nlaverify.identities.attention`, the ops in
:mod:`nlaverify.ops.linear_attention`, the estimators and figures in
:mod:`nlaverify.attention`. Run from the repository root:
``python derivations/attention.py [--check] [--figure-only]``. The cost figure
``docs/figures/attention_cost.svg`` is a measurement: ``python benchmarks/attention.py
--figure docs/figures/attention_cost.svg``.
"""

from __future__ import annotations

import sys

import nlaverify.identities.attention  # noqa: F401  (registers the family)
from nlaverify.proofs import family_script

FIGURES = "docs/figures"


def draw() -> None:
    from nlaverify.attention.figures import draw_all

    for path in draw_all(FIGURES):
        print(f"wrote {path}", file=sys.stderr)


def main(argv: list[str]) -> int:
    return family_script("attention", draw, argv, __doc__ or "")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
