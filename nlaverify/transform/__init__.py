r"""Weight transformations that claim to leave the function unchanged, and their
node-by-node verification (issue 20, item 3): fold the norms into the next layers and the
value biases into the output bias, center the residual writers and the unembedding, rotate
the stream of an RMSNorm model; the direct logit attribution through the final norm
with its scale frozen; the logit lens, attention patterns and rollout, OV and QK circuits
(:mod:`nlaverify.transform.lens`).

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
from nlaverify.transform.lens import (
    LensRow,
    attention_patterns,
    attention_rollout,
    logit_lens,
    ov_circuit,
    qk_circuit,
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
    "RELATIONS", "Attribution", "Claim", "InvarianceRow", "LensRow", "TransformCheck",
    "Transformed", "attention_patterns", "attention_rollout", "attribute", "center_last",
    "center_unembedding", "center_writers", "check_residual_decomposition", "check_transform",
    "direct_logit_attribution", "fold_bias", "fold_gain", "fold_norms", "fold_value_bias",
    "frozen_scale", "hadamard", "logit_lens", "ov_circuit", "qk_circuit", "random_orthogonal",
    "rotate",
]
