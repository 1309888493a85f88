r"""Sharded computations, written once against ``xp`` as functions of per-device pieces,
and the collectives that make them exact (issue 22; Shoeybi et al. 2019, Megatron-LM;
Rajbhandari et al. 2020, ZeRO; Liu et al. 2023, Ring Attention; Milakov & Gimelshein
2018, the online softmax).

A sharded array is the list of its pieces, in device order; a collective is a function of
the list (:mod:`nlaverify.sharding._shards`). The same functions run on the exact SymPy
namespace (family ``sharding`` in :mod:`nlaverify.identities.sharding` proves them equal
to the unsharded computation) and on NumPy; :mod:`nlaverify.sharding.spmd` runs the same
computations on JAX SPMD (``shard_map`` on a device mesh) and compares them with the
unsharded reference, naming a known bug when the sharded result matches one of the
counterexamples kept here.

Modules: :mod:`~nlaverify.sharding.tensor` (column/row-parallel MLP, attention heads split
across devices, vocabulary-parallel softmax and cross-entropy),
:mod:`~nlaverify.sharding.data` (data-parallel gradient with padding),
:mod:`~nlaverify.sharding.curvature` (K-FAC factors as all-reduced sums),
:mod:`~nlaverify.sharding.sequence` (ring attention), :mod:`~nlaverify.sharding.optimizer`
(ZeRO, global-norm clipping, Newton–Schulz and Shampoo on shards),
:mod:`~nlaverify.sharding.spmd` (the check on JAX SPMD), :mod:`~nlaverify.sharding.check`
(``check_sharded``, a user's sharded code against these).
"""

from nlaverify.sharding._shards import all_gather, all_reduce_sum, check_shards, split
from nlaverify.sharding.curvature import (
    data_parallel_kfac_factors,
    data_parallel_kfac_factors_per_shard_mean,
)
from nlaverify.sharding.data import (
    data_parallel_gradient,
    data_parallel_gradient_per_shard_mean,
    linear_head_gradient,
    token_count,
)
from nlaverify.sharding.optimizer import (
    clip_by_global_norm,
    gather_params,
    newton_schulz_on_shards,
    newton_schulz_sharded,
    shampoo_on_shards,
    shampoo_sharded,
    shard_params,
    shard_sizes,
    zero_clip_by_global_norm,
    zero_clip_by_shard_norm,
    zero_init,
    zero_update,
)
from nlaverify.sharding.sequence import ring_attention, ring_attention_without_rescale, ring_order
from nlaverify.sharding.tensor import (
    column_row_partial,
    merge_vocab_statistics,
    mlp,
    target_logit,
    tensor_parallel_attention,
    tensor_parallel_attention_without_all_reduce,
    tensor_parallel_mlp,
    tensor_parallel_mlp_without_all_reduce,
    vocab_parallel_cross_entropy,
    vocab_parallel_logsumexp,
    vocab_parallel_logsumexp_without_global_max,
    vocab_parallel_softmax,
    vocab_parallel_softmax_without_global_max,
    vocab_shard_statistics,
)

__all__ = [
    "all_gather",
    "all_reduce_sum",
    "check_shards",
    "clip_by_global_norm",
    "column_row_partial",
    "data_parallel_gradient",
    "data_parallel_gradient_per_shard_mean",
    "data_parallel_kfac_factors",
    "data_parallel_kfac_factors_per_shard_mean",
    "gather_params",
    "linear_head_gradient",
    "merge_vocab_statistics",
    "mlp",
    "newton_schulz_on_shards",
    "newton_schulz_sharded",
    "ring_attention",
    "ring_attention_without_rescale",
    "ring_order",
    "shampoo_on_shards",
    "shampoo_sharded",
    "shard_params",
    "shard_sizes",
    "split",
    "target_logit",
    "tensor_parallel_attention",
    "tensor_parallel_attention_without_all_reduce",
    "tensor_parallel_mlp",
    "tensor_parallel_mlp_without_all_reduce",
    "token_count",
    "vocab_parallel_cross_entropy",
    "vocab_parallel_logsumexp",
    "vocab_parallel_logsumexp_without_global_max",
    "vocab_parallel_softmax",
    "vocab_parallel_softmax_without_global_max",
    "vocab_shard_statistics",
    "zero_clip_by_global_norm",
    "zero_clip_by_shard_norm",
    "zero_init",
    "zero_update",
]
