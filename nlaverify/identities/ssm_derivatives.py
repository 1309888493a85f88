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
from nlaverify.ops import ssm2 as _ssm2
from nlaverify.ops.ssm_specs import SCAN_OPS
from nlaverify.symbolic.vjp_proof import prove_jvp, prove_vjp

__all__ = ["GATED_RMSNORM", "MAMBA2_SCAN", "MAMBA_SCAN", "SELECTIVE_SCAN"]

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


#: Mamba-2's scan (a scalar decay per head, B and C per group of heads) and its gated norm
MAMBA2_SCAN = SCAN_OPS["mamba2_scan"]
GATED_RMSNORM = SCAN_OPS["gated_rmsnorm"]


def derive_mamba2_vjp() -> Proof:
    return prove_vjp(MAMBA2_SCAN)


def derive_mamba2_jvp() -> Proof:
    return prove_jvp(MAMBA2_SCAN)


def derive_gated_norm_vjp() -> Proof:
    return prove_vjp(GATED_RMSNORM)


def derive_gated_norm_jvp() -> Proof:
    return prove_jvp(GATED_RMSNORM)


register(ssm_identity("ssm_mamba2_scan_vjp", "VJP of Mamba-2's scan (scalar decay per head)",
             MAMBA2_SCAN.vjp_statement, (_ssm2.mamba2_scan, _ssm2.mamba2_scan_vjp),
             derive_mamba2_vjp, ("vjp", "scan", "mamba2")))
register(ssm_identity("ssm_mamba2_scan_jvp", "JVP of Mamba-2's scan (scalar decay per head)",
             r"\dot h_t = \bar A_t\dot h_{t-1} + \bar A_t(\dot\Delta_t A + \Delta_t\dot A)"
             r"h_{t-1} + (\dot\Delta_t x_t + \Delta_t\dot x_t)B_t^\top + \Delta_t x_t\dot B_t^\top,"
             r"\ \dot y_t = \dot h_t C_t + h_t\dot C_t + \dot D x_t + D\dot x_t",
             (_ssm2.mamba2_scan, _ssm2.mamba2_scan_jvp), derive_mamba2_jvp,
             ("jvp", "scan", "mamba2")))
register(ssm_identity("ssm_gated_rmsnorm_vjp", "VJP of Mamba-2's gated RMSNorm (per group)",
             GATED_RMSNORM.vjp_statement, (_ssm2.gated_rmsnorm, _ssm2.gated_rmsnorm_vjp),
             derive_gated_norm_vjp, ("vjp", "mamba2")))
register(ssm_identity("ssm_gated_rmsnorm_jvp", "JVP of Mamba-2's gated RMSNorm (per group)",
             r"\dot v = \dot x\odot\operatorname{silu}(z) + x\odot\operatorname{silu}'(z)\odot"
             r"\dot z,\ \dot y = \gamma\odot\tfrac1r(\dot v - \hat v\,\overline{\hat v\odot"
             r"\dot v}) + \dot\gamma\odot\hat v",
             (_ssm2.gated_rmsnorm, _ssm2.gated_rmsnorm_jvp), derive_gated_norm_jvp,
             ("jvp", "mamba2")))
