r"""The op records of the released mixture-of-experts routers (issue 23): Qwen2-MoE's block
with its sigmoid-gated shared expert, DeepSeek-V3's block with its sigmoid router, scaled
gates and ungated shared experts, and DeepSeek-V3's gate map alone
(:mod:`nlaverify.ops.moe_shared`, :mod:`nlaverify.ops.moe_routing`), kept in
:data:`MOE_OPS` (like :data:`nlaverify.ops.rwkv_specs.RWKV_OPS`).

Not (yet) entries of :data:`nlaverify.ops.registry.OPS` (whose generic batching, hostile-input
and mutation machinery has no cases for them); reachable by name through
:func:`nlaverify.ops.registry.get_op` (``check_op(fn, "deepseek_v3_moe")``). Their VJP and JVP
are proved by :mod:`nlaverify.identities.moe_routing` on these very records. The mask is the
fixed routing of the proofs (:func:`~nlaverify.ops.opspec.fixed_routing_mask`: token
:math:`t` uses experts :math:`t, t+1 \bmod E`): with :math:`E = 3` one expert is left out,
so renormalising changes the gates. ``eps`` and ``routed_scaling_factor`` are positive
symbols in the proofs: the derivatives hold for every value, DeepSeek-V3's :math:`10^{-20}`
and :math:`2.5` included. Sizes: the smallest that keep every path, :math:`n = d = m = f = 1`,
:math:`E = 3` (a transposed router weight is a shape error): each Piecewise of the stable
sigmoid and SiLU doubles the exact check's branches, and at :math:`d = 2` the blocks' proofs
take 30 s (Qwen2-MoE) and 6 minutes (DeepSeek-V3); transposed expert weights are caught by
the JAX-autodiff and Hugging Face cross-checks at :math:`d = 4` (``tests/test_moe_routing.py``).
"""

from __future__ import annotations

from nlaverify.ops import moe_deepseek_v2, moe_routing, moe_shared
from nlaverify.ops.opspec import Arg, OpSpec

__all__ = ["MOE_OPS"]

_SEED_QWEN = ("Qwen team 2024 (Qwen1.5-MoE, Qwen2-MoE; Hugging Face Qwen2MoeSparseMoeBlock); "
              "Baggag & Saad §3.12.2")
_SEED_DS = ("DeepSeek-AI 2024 (DeepSeek-V3 technical report §2.1.2; Hugging Face "
            "DeepseekV3MoE, DeepseekV3TopkRouter); Baggag & Saad §3.12.2")
_BLOCK = (Arg("X", ("n", "d")), Arg("mask", ("n", "E"), "mask"), Arg("W_r", ("d", "E")),
          Arg("W1", ("E", "d", "m")), Arg("W3", ("E", "d", "m")), Arg("W2", ("E", "m", "d")),
          Arg("U1", ("d", "f")), Arg("U3", ("d", "f")), Arg("U2", ("f", "d")))
_SIZES = {"n": 1, "d": 1, "E": 3, "m": 1, "f": 1}
_RANGES = {"n": (1, 4), "d": (1, 4), "E": (2, 5), "m": (1, 3), "f": (1, 3)}
_SEED_V2 = ("DeepSeek-AI 2024 (DeepSeek-V2 technical report §2.2; Hugging Face "
            "DeepseekV2Moe, DeepseekV2TopkRouter); Baggag & Saad §3.12.2")
_DS_STATIC = {"routed_scaling_factor": 2.5, "renormalize": True,
              "eps": moe_routing.DEEPSEEK_V3_GATE_EPS}
_DS_PROOF = {"routed_scaling_factor": "rho", "eps": "epsilon"}

#: the released routers' ops, proved by :mod:`nlaverify.identities.moe_routing`
MOE_OPS: dict[str, OpSpec] = {s.name: s for s in (  # names unique in get_op's table
    OpSpec("qwen2_moe", moe_shared.qwen2_moe, moe_shared.qwen2_moe_vjp,
           (*_BLOCK, Arg("w_sg", ("d",))), _SEED_QWEN,
           r"\bar l = \operatorname{softmax\_vjp}_p(M\odot\bar g),\ \bar g_{te} = \langle G_t,"
           r" E_e(x_t)\rangle,\ \bar W_r = X^\top\bar l,\ \bar z = \langle G, S(X)\rangle"
           r"\odot\sigma(z)\sigma(-z),\ \bar w_{sg} = X^\top\bar z",
           _SIZES, _RANGES, static={"renormalize": False}),
    # norm_topk_prob=True (the Hugging Face option; Qwen3-MoE's router, without its shared
    # expert): the gates renormalised over the chosen experts, no epsilon
    OpSpec("qwen2_moe_norm", moe_shared.qwen2_moe, moe_shared.qwen2_moe_vjp,
           (*_BLOCK, Arg("w_sg", ("d",))), _SEED_QWEN,
           r"\bar l = \operatorname{softmax\_vjp}_g(M\odot\bar g),\ g = "
           r"\operatorname{softmax}(l + \log M),\ \text{shared expert as qwen2\_moe}",
           _SIZES, _RANGES, static={"renormalize": True}),
    OpSpec("deepseek_v3_moe", moe_shared.deepseek_v3_moe, moe_shared.deepseek_v3_moe_vjp,
           _BLOCK, _SEED_DS,
           r"\bar s = M\odot\frac{\rho\bar g - \langle\bar g, g\rangle}{Z},\ \bar l = \bar s"
           r"\odot\sigma(l)\sigma(-l),\ \bar W_r = X^\top\bar l,\ Z = \textstyle\sum_e M_e s_e"
           r" + \epsilon",
           _SIZES, _RANGES, static=dict(_DS_STATIC), proof_static=dict(_DS_PROOF)),
    OpSpec("deepseek_v3_gates", moe_routing.deepseek_v3_gates, moe_routing.deepseek_v3_gates_vjp,
           (Arg("scores", ("n", "E")), Arg("mask", ("n", "E"), "mask")), _SEED_DS,
           r"\bar s = M\odot\frac{\rho\bar g - \langle\bar g, g\rangle\mathbf 1}{Z},\ "
           r"g = \rho\frac{M\odot s}{Z},\ Z = \textstyle\sum_e M_e s_e + \epsilon",
           {"n": 2, "E": 3}, {"n": (1, 4), "E": (2, 6)}, static=dict(_DS_STATIC),
           proof_static=dict(_DS_PROOF)),
    # the affinities that feed the selection (a graph node): no cotangent, as the selection
    OpSpec("deepseek_v3_affinity", moe_routing.deepseek_v3_affinity,
           moe_routing.deepseek_v3_affinity_vjp, (Arg("logits", ("n", "E"), "fixed"),),
           _SEED_DS, r"\text{feeds the selection only: no cotangent (routing fixed)}",
           {"n": 2, "E": 4}, {"n": (1, 4), "E": (2, 6)}),
    # the selection (a graph node beside topk_mask): piecewise constant, no cotangent
    OpSpec("deepseek_v3_select", moe_routing.deepseek_v3_select,
           moe_routing.deepseek_v3_select_vjp,
           (Arg("scores", ("n", "E"), "fixed"), Arg("bias", ("E",), "fixed")), _SEED_DS,
           r"\text{piecewise constant: no cotangent (routing fixed)}",
           {"n": 2, "E": 4}, {"n": (1, 4), "E": (4, 4)},
           static={"top_k": 2, "n_group": 2, "topk_group": 1}),
    # DeepSeek-V2: softmax affinities, gates rho * s (never renormalised), ungated shared
    OpSpec("deepseek_v2_moe", moe_deepseek_v2.deepseek_v2_moe,
           moe_deepseek_v2.deepseek_v2_moe_vjp, _BLOCK, _SEED_V2,
           r"\bar l = \operatorname{softmax\_vjp}_s(\rho\, M\odot\bar g),\ \bar g_{te} = "
           r"\langle G_t, E_e(x_t)\rangle,\ \bar W_r = X^\top\bar l",
           _SIZES, _RANGES, static={"routed_scaling_factor": 16.0},
           proof_static={"routed_scaling_factor": "rho"}),
    OpSpec("deepseek_v2_affinity", moe_deepseek_v2.deepseek_v2_affinity,
           moe_deepseek_v2.deepseek_v2_affinity_vjp, (Arg("logits", ("n", "E"), "fixed"),),
           _SEED_V2, r"\text{feeds the selection only: no cotangent (routing fixed)}",
           {"n": 2, "E": 4}, {"n": (1, 4), "E": (2, 6)}),
    OpSpec("deepseek_v2_select", moe_deepseek_v2.deepseek_v2_select,
           moe_deepseek_v2.deepseek_v2_select_vjp, (Arg("scores", ("n", "E"), "fixed"),),
           _SEED_V2, r"\text{piecewise constant: no cotangent (routing fixed)}",
           {"n": 2, "E": 4}, {"n": (1, 4), "E": (4, 4)},
           static={"top_k": 2, "n_group": 2, "topk_group": 1}),
)}
