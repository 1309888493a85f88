"""Regenerate the `transformer` family of proofs: structural facts of the whole
pipeline (RoPE relative positions, the Pre-LN residual stream, permutation
equivariance, causality), proved on the running graph.

The derivations live in :mod:`nlaverify.identities.transformer`; the VJPs of RoPE,
grouped-query head sharing, MoE routing and causal attention are op identities of the
`jacobians` family. Run from the repository root: ``python derivations/transformer.py
[--check]``.
"""

from __future__ import annotations

import sys

from nlaverify.proofs import derive_family

if __name__ == "__main__":
    raise SystemExit(derive_family("transformer", sys.argv[1:]))
