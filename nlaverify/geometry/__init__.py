r"""High-dimensional geometry: near-orthogonality of random directions and
Johnson–Lindenstrauss projections (Baggag & Saad §3.14.1, Fig. 24, Table 5).

* :mod:`~nlaverify.geometry.angles`: the exact law of :math:`\cos\theta` between uniform
  directions in :math:`\mathbb R^d` (density, moments, the probability of the band
  :math:`|\theta - 90°| \le \delta`, written against an array namespace so the proofs run it
  on SymPy), seeded unit vectors and streamed pairwise-angle statistics;
* :mod:`~nlaverify.geometry.jl`: Gaussian and Achlioptas projections, the moments of
  :math:`\|Px\|^2`, the Dasgupta–Gupta bound and target dimension, measured distortion;
* :mod:`~nlaverify.geometry.intrinsic`: intrinsic dimension (TwoNN, Levina–Bickel, PCA at an
  energy) and anisotropy (mean pairwise cosine) of point clouds, with known-answer samplers;
* :mod:`~nlaverify.geometry.figures`: the seed's Fig. 24 (angles) and JL distortion against
  the bound.
"""

from nlaverify.geometry.angles import (
    AngleStatistics,
    angle_band_normal_approximation,
    angle_band_probability,
    angle_density,
    angle_statistics,
    band_fraction,
    band_probability,
    band_probability_increment,
    cosine_density,
    cosine_density_constant,
    cosine_moment,
    pairwise_cosines,
    random_unit_vectors,
)
from nlaverify.geometry.intrinsic import (
    IntrinsicEstimate,
    anisotropy,
    knn_distances,
    levina_bickel,
    levina_bickel_from_distances,
    neighbour_ratios,
    pca_dimension,
    pca_energies,
    sphere_samples,
    subspace_samples,
    swiss_roll_samples,
    twonn,
    twonn_fit,
    twonn_fit_from_ratios,
    twonn_from_ratios,
)
from nlaverify.geometry.jl import (
    ACHLIOPTAS,
    GAUSSIAN,
    RADEMACHER,
    EntryLaw,
    achlioptas_projection,
    chi2_distortion_probability,
    dg_exponent,
    dg_pair_bound,
    distortion,
    gaussian_projection,
    jl_epsilon,
    jl_min_dimension,
    pair_distortions,
    pairwise_sq_distances,
    projected_sq_norm,
    random_projection,
    sq_norm_ratio_variance,
)

__all__ = [
    "ACHLIOPTAS",
    "GAUSSIAN",
    "RADEMACHER",
    "AngleStatistics",
    "EntryLaw",
    "IntrinsicEstimate",
    "achlioptas_projection",
    "angle_band_normal_approximation",
    "angle_band_probability",
    "angle_density",
    "angle_statistics",
    "anisotropy",
    "band_fraction",
    "band_probability",
    "band_probability_increment",
    "chi2_distortion_probability",
    "cosine_density",
    "cosine_density_constant",
    "cosine_moment",
    "dg_exponent",
    "dg_pair_bound",
    "distortion",
    "gaussian_projection",
    "jl_epsilon",
    "jl_min_dimension",
    "knn_distances",
    "levina_bickel",
    "levina_bickel_from_distances",
    "neighbour_ratios",
    "pair_distortions",
    "pairwise_cosines",
    "pairwise_sq_distances",
    "pca_dimension",
    "pca_energies",
    "projected_sq_norm",
    "random_projection",
    "random_unit_vectors",
    "sphere_samples",
    "sq_norm_ratio_variance",
    "subspace_samples",
    "swiss_roll_samples",
    "twonn",
    "twonn_fit",
    "twonn_fit_from_ratios",
    "twonn_from_ratios",
]
