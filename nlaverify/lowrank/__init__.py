r"""Low rank and compression (Baggag & Saad §4.1, Table 6, Fig. 27).

* :mod:`~nlaverify.lowrank.svd`: truncated SVD and its Eckart–Young errors; the randomized
  range finder and SVD (Halko, Martinsson & Tropp 2011) with their expected-error bounds;
* :mod:`~nlaverify.lowrank.quantization`: symmetric and affine uniform quantizers, per tensor and
  per channel, the element-wise :math:`\Delta/2` bound and the linear-layer bound;
* :mod:`~nlaverify.lowrank.prune`: magnitude pruning (unstructured, N:M), exact error;
* :mod:`~nlaverify.lowrank.distill`: the distillation loss, its gradient
  :math:`T(p_s - p_t)/N` and its logit-matching limit.

Every formula is written against an array namespace ``xp`` and proved on SymPy by
:mod:`nlaverify.identities.lowrank`.
"""

from __future__ import annotations

from nlaverify.lowrank.distill import (
    distillation_grad,
    distillation_loss,
    logit_matching_grad,
    logit_matching_loss,
)
from nlaverify.lowrank.prune import magnitude_prune, nm_prune, pruned_count, pruning_error
from nlaverify.lowrank.quantization import (
    QuantParams,
    covered_interval,
    dequantize,
    error_bound,
    fake_quantize,
    linear_output_error_bound,
    linear_output_error_rms,
    quantization_params,
    quantize,
)
from nlaverify.lowrank.svd import (
    approximation_errors,
    expected_error_bound,
    gaussian_test_matrix,
    low_rank,
    randomized_range_finder,
    randomized_svd,
    truncated_svd,
    truncation_errors,
)

__all__ = [
    "QuantParams",
    "approximation_errors",
    "covered_interval",
    "dequantize",
    "distillation_grad",
    "distillation_loss",
    "error_bound",
    "expected_error_bound",
    "fake_quantize",
    "gaussian_test_matrix",
    "linear_output_error_bound",
    "linear_output_error_rms",
    "logit_matching_grad",
    "logit_matching_loss",
    "low_rank",
    "magnitude_prune",
    "nm_prune",
    "pruned_count",
    "pruning_error",
    "quantization_params",
    "quantize",
    "randomized_range_finder",
    "randomized_svd",
    "truncated_svd",
    "truncation_errors",
]
