r"""Two identities per op: its VJP function is the transpose of its Jacobian, and its
JVP function is the Jacobian (forward mode).

Generated from :data:`nlaverify.ops.registry.OPS`, so every op in the table is
proved (by :func:`nlaverify.symbolic.vjp_proof.prove_vjp` and
:func:`~nlaverify.symbolic.vjp_proof.prove_jvp`) and listed. The VJP statement is the
op's :attr:`~nlaverify.ops.registry.OpSpec.vjp_statement`, the JVP statement its own
:math:`\dot y = \sum_a \partial f/\partial a\,\dot a` written out
(:mod:`nlaverify.symbolic.statements`); each page also shows the op's formula, its
notation and what the exact check covers (:func:`nlaverify.symbolic.op_pages.op_page`).
"""

from __future__ import annotations

from nlaverify.identities.core import Identity, register
from nlaverify.ops.registry import OPS, OpSpec
from nlaverify.symbolic.document import add_page_extra
from nlaverify.symbolic.op_pages import op_page
from nlaverify.symbolic.statements import op_text
from nlaverify.symbolic.vjp_proof import prove_jvp, prove_vjp


def _identity(spec: OpSpec) -> Identity:
    add_page_extra(f"{spec.name}_vjp", lambda: op_page(spec, "vjp"))
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
    statement = op_text(spec.name).jvp
    assert jvp is not None and statement is not None
    add_page_extra(f"{spec.name}_jvp", lambda: op_page(spec, "jvp"))
    return Identity(
        id=f"{spec.name}_jvp",
        family="jacobians",
        title=f"JVP of `{spec.name}`",
        statement=statement,
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
