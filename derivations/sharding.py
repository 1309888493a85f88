"""Regenerate the `sharding` family of proofs (issue 22; Shoeybi et al. 2019, Megatron-LM §3;
Rajbhandari et al. 2020, ZeRO §5; Liu et al. 2023, Ring Attention; Milakov & Gimelshein
2018): the column- then row-parallel MLP with its one all-reduce; the data-parallel gradient
with padding as the all-reduce of summed gradients over the global token count (not the
mean of per-shard means); the vocabulary-parallel log-sum-exp, softmax and cross-entropy
from per-shard maxima and sums; ring attention equal to (causal) attention for every order
of arrival of the blocks; ZeRO-sharded SGD, momentum, Adam and AdamW equal to the unsharded
update; Newton-Schulz (Muon) on shards exact with the all-reduced Gram matrix and wrong on
a row shard.

The derivations live in :mod:`nlaverify.identities.sharding`, the sharded computations in
:mod:`nlaverify.sharding`; the SPMD cross-check on simulated JAX devices is
:func:`nlaverify.sharding.spmd.run_spmd_check`. Run from the repository root:
``python derivations/sharding.py [--check]``.
"""

from __future__ import annotations

import sys

import nlaverify.identities.sharding  # noqa: F401  (registers the family)
from nlaverify.proofs import derive_family

if __name__ == "__main__":
    raise SystemExit(derive_family("sharding", sys.argv[1:]))
