"""Regenerate the `interpretability` family of proofs (Baggag & Saad §3.8, §3.15-3.16;
Elhage et al. 2021; Ashkboos et al. 2024, SliceGPT and QuaRot): the identities behind the
weight transformations of :mod:`nlaverify.transform`, proved on the running ops with the
transformed weights made by the transformations' own helpers: RMSNorm with unit gain
commutes with an orthogonal rotation (Cayley rotations, d = 2, 3; the normalised Hadamard
H_4), LayerNorm is unchanged when a residual writer is centered, a norm's gain and bias
fold into the next linear layer, centering the unembedding shifts each position's logits by
a constant (softmax and log-softmax unchanged), the value bias folds into the attention
output bias (softmax rows sum to 1), the residual stream is the sum of the stream entry and
every block's writes (on the graph's own ``residual_add`` nodes), and the final norm with
its scale frozen splits the logits exactly over the components (direct logit attribution).

The derivations live in :mod:`nlaverify.identities.interpretability`; the transformations
and their node-by-node check in :mod:`nlaverify.transform`. Run from the repository root:
``python derivations/interpretability.py [--check]``.
"""

from __future__ import annotations

import sys

import nlaverify.identities.interpretability  # noqa: F401  (registers the family)
from nlaverify.proofs import derive_family

if __name__ == "__main__":
    raise SystemExit(derive_family("interpretability", sys.argv[1:]))
