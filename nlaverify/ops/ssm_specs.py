r"""The op records of Mamba's block (Gu & Dao 2023): the depthwise causal convolution, an
entry of :data:`nlaverify.ops.registry.OPS` like every other op, and the scans, kept in
:data:`SCAN_OPS`.

The scans (``selective_scan`` with :math:`A` given, ``mamba_scan`` with :math:`A =
-e^{A_{\log}}`) are graph nodes and ``check_op`` references through
:func:`nlaverify.ops.registry.get_op` (``check_op(fn, "selective_scan")`` for a user's
sequential, chunked or associative scan kernel: ``tests/test_ssm_check_op.py``), but not
(yet) entries of ``OPS``: the generic batching, hostile-input and mutation machinery every
entry of ``OPS`` joins has no cases for a state carried along the sequence axis. Their VJP
and JVP are proved by the family ``ssm`` (identities ``ssm_selective_scan_vjp``,
``ssm_selective_scan_jvp`` on the same running functions); ``mamba_scan`` adds the chain
rule through :math:`A = -e^{A_{\log}}`, proved in ``tests/test_ssm_pipeline.py`` and checked
against JAX autodiff node by node wherever a Mamba block runs
(:func:`nlaverify.pipeline.verify_pipeline`).
"""

from __future__ import annotations

from nlaverify.ops import conv, ssm, ssm2
from nlaverify.ops.concat import CONCAT_OPS
from nlaverify.ops.opspec import Arg, OpSpec
from nlaverify.ops.views import VIEW_OPS

__all__ = ["CONV_OPS", "SCAN_OPS"]

_SCAN_STATEMENT = (r"\lambda_k = \bar y_k C_k^\top + \bar A_{k+1}\odot\lambda_{k+1},\ \bar u_k"
                   r" = D\odot\bar y_k + \textstyle\sum_n\lambda_k\odot\bar B_k,\ "
                   r"\bar\Delta_k = \sum_n\lambda_k\odot(x_{k-1}A\bar A_k + u_kB_k),\ \bar A"
                   r" = \sum_k\lambda_k\odot x_{k-1}\Delta_k\bar A_k,\ \bar y = G\odot"
                   r"\operatorname{silu}(z)")
_SCAN_SIZES = ({"n": 3, "d": 1, "N": 2}, {"n": (1, 6), "d": (1, 4), "N": (1, 4)})


def _scan_args(a: str) -> tuple[Arg, ...]:
    return (Arg("u", ("n", "d")), Arg("delta", ("n", "d")), Arg(a, ("d", "N")),
            Arg("B", ("n", "N")), Arg("C", ("n", "N")), Arg("D", ("d",)), Arg("z", ("n", "d")),
            Arg("delta_bias", ("d",)))


#: ops proved elsewhere (the family ``ssm``), reachable by name through ``get_op``
SCAN_OPS: dict[str, OpSpec] = {s.name: s for s in (
    OpSpec("selective_scan", ssm.selective_scan, ssm.selective_scan_vjp, _scan_args("A"),
           "Gu & Dao 2023 (Mamba, Algorithm 2; selective_scan_ref)", _SCAN_STATEMENT,
           *_SCAN_SIZES, static={"delta_softplus": True}),
    OpSpec("mamba_scan", ssm.mamba_scan, ssm.mamba_scan_vjp, _scan_args("A_log"),
           "Gu & Dao 2023 (Mamba; Hugging Face MambaMixer, A = -exp(A_log))",
           _SCAN_STATEMENT + r",\ \bar A_{\log} = \bar A\odot A", *_SCAN_SIZES),
    # Mamba-2 (Dao & Gu 2024): a scalar decay per head, B and C shared by groups of heads;
    # the proof's H = 2 heads read G = 1 group (the group sum of the adjoint exercised)
    OpSpec("mamba2_scan", ssm2.mamba2_scan, ssm2.mamba2_scan_vjp,
           (Arg("x", ("n", "H", "P")), Arg("dt", ("n", "H")), Arg("A_log", ("H",)),
            Arg("B", ("n", "G", "N")), Arg("C", ("n", "G", "N")), Arg("D", ("H",)),
            Arg("dt_bias", ("H",))),
           "Dao & Gu 2024 (Mamba-2, §7; Hugging Face mamba2_chunk_scan, A = -exp(A_log))",
           r"\lambda_t = G_t C_t^\top + \bar A_{t+1}\lambda_{t+1},\ \bar x_t = \Delta_t"
           r"\lambda_t B_t + D\odot G_t,\ \bar\Delta_t = a_t\bar A_t A + \textstyle\sum"
           r"\lambda_t\odot x_tB_t^\top,\ a_t = \sum\lambda_t\odot h_{t-1},\ \bar A_{\log}"
           r" = A\textstyle\sum_t a_t\bar A_t\Delta_t",
           {"n": 3, "H": 2, "P": 1, "G": 1, "N": 2},
           {"n": (1, 5), "H": (1, 2), "P": (1, 3), "G": (1, 2), "N": (1, 3)},
           fix_sizes=lambda s: {**s, "H": s["H"] * s["G"]}),
    OpSpec("gated_rmsnorm", ssm2.gated_rmsnorm, ssm2.gated_rmsnorm_vjp,
           (Arg("x", ("n", "d")), Arg("z", ("n", "d")), Arg("gamma", ("d",))),
           "Dao & Gu 2024 (Mamba-2, §7.3, the extra normalization; Hugging Face "
           "Mamba2RMSNormGated)",
           r"v = x\odot\operatorname{silu}(z),\ \bar v = \tfrac1r(g - \hat v\,\overline{g"
           r"\odot\hat v}),\ g = G\odot\gamma,\ \bar x = \bar v\odot\operatorname{silu}(z),"
           r"\ \bar z = \bar v\odot x\odot\operatorname{silu}'(z)",
           # two groups of 2: the per-group mean, not the row's, is exercised
           {"n": 2, "d": 4}, {"n": (1, 4), "d": (2, 8)},
           static={"eps": 1e-5, "group_size": 2}, proof_static={"eps": "epsilon"},
           fix_sizes=lambda s: {**s, "d": s["d"] + s["d"] % 2}),
)}

#: entries of ``OPS`` (the causal convolution; Mamba-2's channel views,
#: :mod:`nlaverify.ops.views`): proved by ``nlaverify derive`` like every op of the table
CONV_OPS: dict[str, OpSpec] = {s.name: s for s in (
    OpSpec("causal_conv1d", conv.causal_conv1d, conv.causal_conv1d_vjp,
           (Arg("x", ("n", "d")), Arg("w", ("d", "k")), Arg("b", ("d",))),
           "Gu & Dao 2023 (Mamba §3.4, the causal convolution); Baptista, Stuart & Tran §5.3.4",
           r"\bar x_{s} = \textstyle\sum_j w_{j}\odot G_{s+k-1-j},\ \bar w_{j} = \sum_t "
           r"G_t\odot x_{t-k+1+j},\ \bar b = \sum_t G_t",
           # k = 3 != d = 2 != n = 4: a transposed kernel is a shape error; k < n leaves
           # the first k - 1 rows with a truncated window
           {"n": 4, "d": 2, "k": 3}, {"n": (1, 6), "d": (1, 4), "k": (1, 4)}),
)}
CONV_OPS.update(VIEW_OPS)
CONV_OPS.update(CONCAT_OPS)  # multi-head latent attention's [nope | rope] (issue 23)
