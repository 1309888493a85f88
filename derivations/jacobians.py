"""Regenerate the `jacobians` family of proofs: the VJP of every Transformer op, the
general-dimension Jacobian closed forms, the stability lemmas, and the back-propagation
examples of Baggag & Saad §2.6.

The derivations themselves live in the package (:mod:`nlaverify.identities.jacobians`,
:mod:`~nlaverify.identities.closed_forms`, :mod:`~nlaverify.identities.lemmas`,
:mod:`~nlaverify.identities.backprop`) so that the installed library can prove and list
them; this script is the family's entry point. Run from the repository root:
``python derivations/jacobians.py [--check]``.
"""

from __future__ import annotations

import sys

from nlaverify.proofs import derive_family

if __name__ == "__main__":
    raise SystemExit(derive_family("jacobians", sys.argv[1:]))
