r"""Randomized and linearized attention: the statistics of the kernel view.

Baggag & Saad §2.8 (Nadaraya–Watson), §4.3–4.4 (linear attention, Performer FAVOR / FAVOR+).
The attention *operators* (feature maps, prefix sums, FAVOR, Linformer) are in
:mod:`nlaverify.ops.linear_attention`; this package holds what is statistical about them:

* :mod:`~nlaverify.attention.features`: seeded draws of :math:`W` (i.i.d. Gaussian,
  orthogonal blocks with or without the QR sign fix) and of the phases :math:`b`;
* :mod:`~nlaverify.attention.estimators`: the kernels, the estimates
  :math:`\phi(x)^\top\phi(y)` through the ops' feature maps, their exact MSEs in closed form
  (written against an array namespace, so the proofs run them on SymPy), and seeded Monte
  Carlo;
* :mod:`~nlaverify.attention.nadaraya_watson`: kernel regression, attention's ancestor;
* :mod:`~nlaverify.attention.figures`: the Nadaraya–Watson figure (seed Fig. 14) and the
  measured-versus-predicted MSE figure.
"""

from nlaverify.attention.estimators import (
    ESTIMATORS,
    gaussian_kernel,
    hyperbolic_mse,
    kernel_estimate,
    monte_carlo,
    mse,
    orthogonal_variance_comparison,
    positive_mse,
    softmax_kernel,
    target_kernel,
    trig_mse,
    unfixed_qr_positive_mean,
)
from nlaverify.attention.features import draw_gaussian, draw_orthogonal, draw_phases
from nlaverify.attention.nadaraya_watson import nadaraya_watson, nadaraya_watson_weights

__all__ = [
    "ESTIMATORS",
    "draw_gaussian",
    "draw_orthogonal",
    "draw_phases",
    "gaussian_kernel",
    "hyperbolic_mse",
    "kernel_estimate",
    "monte_carlo",
    "mse",
    "nadaraya_watson",
    "nadaraya_watson_weights",
    "orthogonal_variance_comparison",
    "positive_mse",
    "softmax_kernel",
    "target_kernel",
    "trig_mse",
    "unfixed_qr_positive_mean",
]
