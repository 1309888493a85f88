r"""Weight transformations that claim to leave the function unchanged, and their
node-by-node verification (issue 20, item 3): fold the norms into the next layers and the
value biases into the output bias, center the residual writers and the unembedding, rotate
the stream of an RMSNorm model; and the direct logit attribution through the final norm
with its scale frozen.

Seed: Baggag & Saad §3.15-3.16; Elhage et al. 2021; Ashkboos et al. 2024 (SliceGPT,
QuaRot). The identities are proved by the ``interpretability`` family
(:mod:`nlaverify.identities.interpretability`).
"""

from nlaverify.transform.attribution import (
    Attribution,
    attribute,
    direct_logit_attribution,
    frozen_scale,
)
from nlaverify.transform.verify import (
    InvarianceRow,
    TransformCheck,
    check_residual_decomposition,
    check_transform,
)
from nlaverify.transform.weights import (
    RELATIONS,
    Claim,
    Transformed,
    center_last,
    center_unembedding,
    center_writers,
    fold_bias,
    fold_gain,
    fold_norms,
    fold_value_bias,
    hadamard,
    random_orthogonal,
    rotate,
)

__all__ = [
    "RELATIONS", "Attribution", "Claim", "InvarianceRow", "TransformCheck", "Transformed",
    "attribute", "center_last", "center_unembedding", "center_writers",
    "check_residual_decomposition", "check_transform", "direct_logit_attribution", "fold_bias",
    "fold_gain", "fold_norms", "fold_value_bias", "frozen_scale", "hadamard",
    "random_orthogonal", "rotate",
]
