"""Regenerate the `optimizers` family of proofs (Baggag & Saad §2.4: SGD, momentum,
Adagrad, RMSprop, Adam, AdamW; §5.4 Shampoo; §5.5 Muon): Adam's bias correction, AdamW's
decoupled decay against L2 regularisation, Adagrad as diagonal Shampoo, the two forms of
Nesterov momentum, and Muon's first step as the polar factor.

The derivations live in :mod:`nlaverify.identities.optimizers`, the update rules in
:mod:`nlaverify.optim.rules`. Run from the repository root:
``python derivations/optimizers.py [--check]``.
"""

from __future__ import annotations

import sys

import nlaverify.identities.optimizers  # noqa: F401  (registers the family)
from nlaverify.proofs import derive_family

if __name__ == "__main__":
    if "--help" in sys.argv or "-h" in sys.argv:
        print(__doc__)
        raise SystemExit(0)
    raise SystemExit(derive_family("optimizers", sys.argv[1:]))
