"""Regenerate the `batching` family of proofs: every op on a batch of sequences is the op
on each sequence (per-token outputs and cotangents slice, shared parameters' cotangents
sum over the batch), and the batched cross-entropy is the mean over the batch's
non-ignored targets.

The derivations live in :mod:`nlaverify.identities.batching`. Run from the repository
root: ``python derivations/batching.py [--check]``.
"""

from __future__ import annotations

import sys

from nlaverify.proofs import derive_family

if __name__ == "__main__":
    raise SystemExit(derive_family("batching", sys.argv[1:]))
