"""Regenerate the `kronecker` family of proofs: Kronecker-product algebra (vec, mixed
product, inverse, transpose, trace, determinant, eigenpairs, factored damping), K-FAC for
one linear layer (exact cases and a case where it is not exact) and Shampoo (one gradient
gives the polar factor; order one is full-matrix Adagrad), Baggag & Saad §5.3–5.4.

The derivations live in :mod:`nlaverify.identities.kronecker`. Run from the repository
root: ``python derivations/kronecker.py [--check]``.
"""

from __future__ import annotations

import sys

from nlaverify.proofs import derive_family

if __name__ == "__main__":
    raise SystemExit(derive_family("kronecker", sys.argv[1:]))
