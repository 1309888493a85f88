r"""The op records of RWKV-4's block (Peng et al. 2023; Hugging Face ``RwkvSelfAttention``,
``RwkvFeedForward``): the WKV, the token shift and its interpolation, time and channel
mixing, kept in :data:`RWKV_OPS` (like :data:`nlaverify.ops.ssm_specs.SCAN_OPS`).

Not (yet) entries of :data:`nlaverify.ops.registry.OPS`: the generic batching, hostile-input
and mutation machinery has no cases for a state carried along the sequence axis. Their VJP
and JVP are proved by the family ``ssm`` (:mod:`nlaverify.identities.rwkv`, on these very
records), and reachable by name through :func:`nlaverify.ops.registry.get_op` (the graph's
nodes and ``check_op``). Proof sizes keep the dimensions distinct where they can (:math:`d
\ne a`: a transposed weight is a shape error) and up to three tokens (the WKV's adjoint
carried twice); the mixers' sizes are the largest whose exact VJP finishes in seconds.
"""

from __future__ import annotations

from nlaverify.ops import rwkv, rwkv_block
from nlaverify.ops.opspec import Arg, OpSpec

__all__ = ["RWKV_OPS"]

_SEED = "Peng et al. 2023 (RWKV-4); Baptista, Stuart & Tran §5.3.4; Hugging Face modeling_rwkv"

#: RWKV-4's ops, proved by the family ``ssm`` (identities ``ssm_rwkv_*``)
RWKV_OPS: dict[str, OpSpec] = {s.name: s for s in (  # names unique in get_op's table
    OpSpec("wkv", rwkv.wkv, rwkv.wkv_vjp,
           (Arg("w", ("d",)), Arg("u", ("d",)), Arg("k", ("n", "d")), Arg("v", ("n", "d"))),
           "Peng et al. 2023 (RWKV-4, eq. (14)-(16); rwkv_linear_attention_cpu)",
           r"\bar v_i = e^{k_i}S_i + g_i e^{u+k_i},\ \bar k_i = e^{k_i}(v_iS_i - R_i) + g_i "
           r"e^{u+k_i}(v_i - y_i),\ S_i = g_{i+1} + e^w S_{i+1},\ g_t = \bar y_t/"
           r"\mathrm{den}_t",
           {"n": 3, "d": 1}, {"n": (1, 6), "d": (1, 4)}),
    OpSpec("rwkv_token_shift", rwkv_block.token_shift, rwkv_block.token_shift_vjp,
           (Arg("x", ("n", "d")),), _SEED, r"\bar x_t = G_{t+1},\ \bar x_{n-1} = 0",
           {"n": 3, "d": 2}, {"n": (1, 6), "d": (1, 4)}),
    OpSpec("rwkv_token_mix", rwkv_block.token_mix, rwkv_block.token_mix_vjp,
           (Arg("x", ("n", "d")), Arg("mu", ("d",))), _SEED,
           r"\bar x_t = \mu\odot G_t + (1-\mu)\odot G_{t+1},\ \bar\mu = \textstyle\sum_t "
           r"G_t\odot(x_t - x_{t-1})",
           {"n": 3, "d": 2}, {"n": (1, 6), "d": (1, 4)}),
    OpSpec("rwkv_time_mix", rwkv_block.time_mix, rwkv_block.time_mix_vjp,
           (Arg("x", ("n", "d")), Arg("mu_k", ("d",)), Arg("mu_v", ("d",)),
            Arg("mu_r", ("d",)), Arg("time_decay", ("a",)), Arg("time_first", ("a",)),
            Arg("W_k", ("d", "a")), Arg("W_v", ("d", "a")), Arg("W_r", ("d", "a")),
            Arg("W_o", ("a", "d"))), _SEED,
           r"\bar h = GW_o^\top,\ \bar W_o = h^\top G,\ \bar z_r = \bar h\odot\mathrm{wkv}"
           r"\odot\sigma(1-\sigma),\ \overline{\mathrm{wkv}} = \bar h\odot r,\ "
           r"\overline{\text{time\_decay}} = \bar w\odot w",
           # a = 1 and n = 2: at n = 3, a = 2 the exact VJP of x times out (60 s per entry);
           # the WKV's own adjoint is proved at n = 3 (its record above)
           {"n": 2, "d": 2, "a": 1}, {"n": (1, 5), "d": (1, 4), "a": (1, 4)}),
    OpSpec("rwkv_channel_mix", rwkv_block.channel_mix, rwkv_block.channel_mix_vjp,
           (Arg("x", ("n", "d")), Arg("mu_k", ("d",)), Arg("mu_r", ("d",)),
            Arg("W_k", ("d", "f")), Arg("W_r", ("d", "d")), Arg("W_v", ("f", "d"))), _SEED,
           r"\bar s = G\odot r,\ \bar z_r = G\odot s\odot\sigma(1-\sigma),\ \bar z_k = "
           r"2\operatorname{relu}(z_k)\odot\bar sW_v^\top",
           # f = 1: each relu is a Piecewise, and a product of f of them per output entry
           # times the sigmoid's makes the exact VJP of x time out at f = 3 (60 s per entry)
           {"n": 2, "d": 2, "f": 1}, {"n": (1, 5), "d": (1, 4), "f": (1, 6)}),
)}
