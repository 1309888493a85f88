"""The catalogue of identities: statements, seed references, proofs, checks."""

from nlaverify.identities.core import (
    Identity,
    Proof,
    Step,
    get_identity,
    load_catalogue,
    qualname,
    register,
)

__all__ = ["Identity", "Proof", "Step", "get_identity", "load_catalogue", "qualname", "register"]
