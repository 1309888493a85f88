"""Regenerate the `architectures` family of proofs (DeepSeek-AI 2024, DeepSeek-V2 §2.1):
multi-head latent attention with W^UK absorbed into the query and W^UV into the output
equals its training form (the decoupled RoPE key computed alike), proved on
:func:`nlaverify.ops.mla.mla_attention` and :func:`~nlaverify.ops.mla.mla_attention_absorbed`.

The derivation lives in :mod:`nlaverify.identities.architectures`. No figure. Run from the
repository root: ``python derivations/architectures.py [--check]``.
"""

from __future__ import annotations

import sys

import nlaverify.identities.architectures  # noqa: F401  (registers the family)
from nlaverify.proofs import family_script


def draw() -> None:
    """No figure for this family."""


if __name__ == "__main__":
    raise SystemExit(family_script("architectures", draw, sys.argv[1:], __doc__ or ""))
