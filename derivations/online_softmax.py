"""Regenerate the `online_softmax` family of proofs (Baggag & Saad §3.4.2, §3.4.4; Milakov &
Gimelshein 2018; Dao et al. 2022): the online-softmax merge of per-block statistics is
associative and commutative, so every split of the keys into blocks and every merge order
gives softmax attention; the running `blockwise_attention` (FlashAttention's forward) equals
`sdpa.attention` for every split, plain, causal and with a sliding window, and for a
decoding query against the whole cache.

The derivations live in :mod:`nlaverify.identities.online_softmax`, the op in
:mod:`nlaverify.ops.online_softmax` (its VJP and JVP are proved by the `jacobians` family,
its batch axis by `batching`). Run from the repository root:
``python derivations/online_softmax.py [--check]``.
"""

from __future__ import annotations

import sys

import nlaverify.identities.online_softmax  # noqa: F401  (registers the family)
from nlaverify.proofs import derive_family

if __name__ == "__main__":
    raise SystemExit(derive_family("online_softmax", sys.argv[1:]))
