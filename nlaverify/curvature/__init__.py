"""Curvature of losses and models: likelihoods and reductions, Fisher, Gauss–Newton, GGN,
Hessian, Kronecker factors (Baggag & Saad §5.1–5.4)."""

from nlaverify.curvature.likelihoods import (
    FAMILIES,
    LOSS_LIKELIHOODS,
    REDUCTIONS,
    Likelihood,
    Reduction,
    likelihood_of,
)

__all__ = ["FAMILIES", "LOSS_LIKELIHOODS", "REDUCTIONS", "Likelihood", "Reduction",
           "likelihood_of"]
