"""Two identities per op: its VJP function is the transpose of its Jacobian, and its
JVP function is the Jacobian (forward mode).

Generated from :data:`nlaverify.ops.registry.OPS`, so every op in the table is
proved (by :func:`nlaverify.symbolic.vjp_proof.prove_vjp` and
:func:`~nlaverify.symbolic.vjp_proof.prove_jvp`) and listed.
"""

from __future__ import annotations

from nlaverify.identities.core import Identity, register
from nlaverify.ops.registry import OPS, OpSpec
from nlaverify.symbolic.vjp_proof import prove_jvp, prove_vjp


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


def _jvp_identity(spec: OpSpec) -> Identity:
    jvp = spec.jvp
    assert jvp is not None
    return Identity(
        id=f"{spec.name}_jvp",
        family="jacobians",
        title=f"JVP of `{spec.name}`",
        statement=r"\dot f = \textstyle\sum_a \frac{\partial f}{\partial a}\,\dot a",
        seed=spec.seed,
        certifies=(spec.qualified_names[0], f"{jvp.__module__}.{jvp.__qualname__}"),
        derive=lambda: prove_jvp(spec),
        tags=("jvp", spec.name),
    )


for _spec in OPS.values():
    if _spec.differentiable:
        register(_identity(_spec))
        if _spec.jvp is not None:
            register(_jvp_identity(_spec))
