r"""The ``ssm`` family, part 3: the VJP and JVP of Mamba's selective scan (Gu & Dao 2023,
Algorithm 2 and its backward kernel), proved by the generic machinery of the ``jacobians``
family (:func:`~nlaverify.symbolic.vjp_proof.prove_vjp`, :func:`~nlaverify.symbolic.vjp_proof
.prove_jvp`: ``sympy.diff`` of the running forward against the running VJP/JVP, entry by
entry) on an :class:`~nlaverify.ops.opspec.OpSpec` of the op, :data:`SELECTIVE_SCAN`.

The spec is not (yet) an entry of :data:`nlaverify.ops.registry.OPS`: the generic batching,
hostile-input and mutation machinery that every registered op joins has no cases for a scan
(a state carried along the sequence axis) so far. Three steps, so that the backward adjoint
:math:`\lambda_k = \bar y_k C_k^\top + \bar A_{k+1}\odot\lambda_{k+1}` is carried twice, with
``delta_softplus`` (the stable two-branch softplus, a ``Piecewise`` on the exact side), the
skip :math:`D`, the gate :math:`z` and the bias of :math:`\Delta`.
"""

from __future__ import annotations

from nlaverify.identities.core import Proof, register
from nlaverify.identities.ssm import ssm_identity
from nlaverify.ops import ssm as _ssm
from nlaverify.ops.ssm_specs import SCAN_OPS
from nlaverify.symbolic.vjp_proof import prove_jvp, prove_vjp

__all__ = ["MAMBA_SCAN", "SELECTIVE_SCAN"]

#: Mamba's selective scan as an op record: ``(u, delta, A, B, C, D, z, delta_bias)``, all real;
#: the very spec ``get_op("selective_scan")`` returns (``check_op``'s reference)
SELECTIVE_SCAN = SCAN_OPS["selective_scan"]
#: the pipeline's scan (A = -exp(A_log)), the op of the graph's ``mamba.scan`` nodes
MAMBA_SCAN = SCAN_OPS["mamba_scan"]
_STATEMENT = SELECTIVE_SCAN.vjp_statement


def derive_vjp() -> Proof:
    return prove_vjp(SELECTIVE_SCAN)


def derive_jvp() -> Proof:
    return prove_jvp(SELECTIVE_SCAN)


register(ssm_identity("ssm_selective_scan_vjp", "VJP of Mamba's selective scan (the backward scan)",
             _STATEMENT, (_ssm.selective_scan, _ssm.selective_scan_vjp), derive_vjp,
             ("vjp", "scan")))
register(ssm_identity("ssm_selective_scan_jvp", "JVP of Mamba's selective scan (the tangent scan)",
             r"\dot x_k = \bar A_k\odot(\dot\Delta_k A + \Delta_k\dot A)\odot x_{k-1} + \bar A_k"
             r"\odot\dot x_{k-1} + (\dot\Delta_k B_k + \Delta_k\dot B_k)u_k + \bar B_k\dot u_k,"
             r"\ \dot y_k = C_k\dot x_k + \dot C_k x_k + \dot D u_k + D\dot u_k",
             (_ssm.selective_scan, _ssm.selective_scan_jvp), derive_jvp, ("jvp", "scan")))


def derive_mamba_vjp() -> Proof:
    return prove_vjp(MAMBA_SCAN)


def derive_mamba_jvp() -> Proof:
    return prove_jvp(MAMBA_SCAN)


register(ssm_identity("ssm_mamba_scan_vjp", "VJP of the pipeline's Mamba scan (A = -exp(A_log))",
             MAMBA_SCAN.vjp_statement, (_ssm.mamba_scan, _ssm.mamba_scan_vjp), derive_mamba_vjp,
             ("vjp", "scan")))
register(ssm_identity("ssm_mamba_scan_jvp", "JVP of the pipeline's Mamba scan (A = -exp(A_log))",
             r"\dot A = -e^{A_{\log}}\odot\dot A_{\log}\ \text{into the selective scan's JVP}",
             (_ssm.mamba_scan, _ssm.mamba_scan_jvp), derive_mamba_jvp, ("jvp", "scan")))
