"""One identity per op: its VJP function is the transpose of its Jacobian.

Generated from :data:`nlaverify.ops.registry.OPS`, so every op in the table is
proved (by :func:`nlaverify.symbolic.vjp_proof.prove_vjp`) and listed.
"""

from __future__ import annotations

from nlaverify.identities.core import Identity, register
from nlaverify.ops.registry import OPS, OpSpec
from nlaverify.symbolic.vjp_proof import prove_vjp


def _identity(spec: OpSpec) -> Identity:
    return Identity(
        id=f"{spec.name}_vjp",
        family="jacobians",
        title=f"VJP of `{spec.name}`",
        statement=spec.vjp_statement,
        seed=spec.seed,
        certifies=spec.qualified_names,
        derive=lambda: prove_vjp(spec),
        tags=("vjp", spec.name),
    )


for _spec in OPS.values():
    if _spec.differentiable:
        register(_identity(_spec))
