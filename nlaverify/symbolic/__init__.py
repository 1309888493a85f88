"""Derivation helpers: symbolic arrays, the exact zero test, VJP proofs, proof documents."""
