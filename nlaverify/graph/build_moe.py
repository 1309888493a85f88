r"""The mixture-of-experts sublayer of the graph: Mixtral's router, Qwen-MoE's (softmax,
optionally a shared expert and its sigmoid gate) and DeepSeek-V3's (sigmoid affinities, the
biased group-limited selection, scaled gates, ungated shared experts) and DeepSeek-V2's
(softmax affinities, groups scored by their max, gates :math:`\rho s`); Baggag & Saad §3.12,
:mod:`nlaverify.config_moe`.

Nodes (prefix ``p`` = ``blocks.{l}.mlp``): ``p.scores`` :math:`= xW_r` (parameter
``p.W_router`` ``(d, E)``); the selection ``p.route`` (``topk_mask`` of the scores, or
``deepseek_v3_select`` of ``p.affinity`` :math:`= \sigma(xW_r)` and the constant
``p.e_bias``); ``p.out``. The routed experts ``p.W1``, ``p.W3`` ``(E, d, m)``, ``p.W2``
``(E, m, d)`` (``p.W_in``, ``p.W_out`` for ungated experts), :math:`m` =
:func:`~nlaverify.config_moe.expert_width`; the shared expert ``p.U1``, ``p.U3`` ``(d, f)``,
``p.U2`` ``(f, d)``, :math:`f` = ``d_shared_expert``, its gate ``p.w_sg`` ``(d,)``.
"""

from __future__ import annotations

from typing import Any

from nlaverify.config import TransformerConfig
from nlaverify.config_moe import expert_width, routing_bias
from nlaverify.ops.moe_routing import DEEPSEEK_V3_GATE_EPS

__all__ = ["moe_sublayer"]


def _shared(b: Any, p: str, cfg: TransformerConfig, block: int) -> list[str]:
    d, f = cfg.d_model, cfg.d_shared_expert
    shapes = (("U1", (d, f)), ("U3", (d, f)), ("U2", (f, d)))
    return [b.param(f"{p}.{n}", s, "moe.shared_expert", ("normal", s[0] ** -0.5), block)
            for n, s in shapes]


def moe_sublayer(b: Any, p: str, x: str, cfg: TransformerConfig, block: int) -> str:
    r"""Block ``block``'s mixture of experts at ``p`` (module docstring). Mixtral (no shared
    expert): ``moe``/``moe_swiglu`` of the softmax gates. Qwen2-MoE with its gated shared
    expert: ``qwen2_moe`` (``qwen2_moe_norm`` with ``moe_renormalize``),

    .. math:: y = \sum_{e\in S} g_e E_e(x) + \sigma(x\cdot w_{sg})\,S(x);

    an ungated shared expert under the softmax router: ``p.routed`` + ``p.shared.out``, the
    SwiGLU :math:`S(x) = (\operatorname{SiLU}(xU_1)\odot xU_3)U_2` as nodes ``p.shared.gate``,
    ``up``, ``act``, ``out``. DeepSeek-V3 (``moe_router="sigmoid"``): ``deepseek_v3_moe``,
    :math:`y = \sum_{e\in S} \rho\,\frac{s_e}{\sum_S s + 10^{-20}} E_e(x) + S(x)`, the
    selection :math:`S` by :math:`s + b` (technical report §2.1.2, eq. (12)-(16)).
    DeepSeek-V2 (``moe_router="softmax_group"``): ``deepseek_v2_moe``, :math:`y = \sum_{e\in
    S}\rho\, s_e E_e(x) + S(x)`, :math:`s = \operatorname{softmax}(xW_r)` (node
    ``p.affinity``), :math:`S` by ``deepseek_v2_select`` (groups scored by their max)."""
    d, E, m = cfg.d_model, cfg.n_experts, expert_width(cfg)
    router = b.param(f"{p}.W_router", (d, E), "moe.router", ("normal", d**-0.5), block)
    scores = b.op(f"{p}.scores", "linear", [x, router], ("n", E))
    swiglu = cfg.mlp == "swiglu"
    names = (("W1", (E, d, m)), ("W3", (E, d, m)), ("W2", (E, m, d))) if swiglu else (
        ("W_in", (E, d, m)), ("W_out", (E, m, d)))
    ws = [b.param(f"{p}.{n}", s, "moe.experts", ("normal", s[1] ** -0.5), block)
          for n, s in names]
    if cfg.moe_router == "softmax_group":   # DeepSeek-V2 (report §2.2)
        aff = b.op(f"{p}.affinity", "deepseek_v2_affinity", [scores], ("n", E))
        mask = b.op(f"{p}.route", "deepseek_v2_select", [aff], ("n", E), top_k=cfg.top_k,
                    n_group=cfg.n_group, topk_group=cfg.topk_group)
        return b.op(f"{p}.out", "deepseek_v2_moe", [x, mask, router, *ws,
                                                    *_shared(b, p, cfg, block)], ("n", d),
                    routed_scaling_factor=float(cfg.routed_scaling_factor))
    if cfg.moe_router == "sigmoid":
        aff = b.op(f"{p}.affinity", "deepseek_v3_affinity", [scores], ("n", E))
        bias = b.constant(f"{p}.e_bias", routing_bias(cfg, block))
        mask = b.op(f"{p}.route", "deepseek_v3_select", [aff, bias], ("n", E),
                    top_k=cfg.top_k, n_group=cfg.n_group, topk_group=cfg.topk_group)
        return b.op(f"{p}.out", "deepseek_v3_moe", [x, mask, router, *ws,
                                                    *_shared(b, p, cfg, block)], ("n", d),
                    routed_scaling_factor=float(cfg.routed_scaling_factor),
                    renormalize=cfg.moe_renormalize, eps=DEEPSEEK_V3_GATE_EPS)
    mask = b.op(f"{p}.route", "topk_mask", [scores], ("n", E), top_k=cfg.top_k)
    if cfg.shared_expert_gate:
        w_sg = b.param(f"{p}.w_sg", (d,), "moe.shared_expert_gate", ("normal", d**-0.5),
                       block)
        op = "qwen2_moe_norm" if cfg.moe_renormalize else "qwen2_moe"
        return b.op(f"{p}.out", op, [x, mask, router, *ws, *_shared(b, p, cfg, block), w_sg],
                    ("n", d), renormalize=cfg.moe_renormalize)
    renorm = {} if cfg.moe_renormalize else {"renormalize": False}
    routed = b.op(f"{p}.routed" if cfg.d_shared_expert else f"{p}.out",
                  "moe_swiglu" if swiglu else "moe", [x, scores, mask, *ws], ("n", d),
                  activation="swiglu" if swiglu else cfg.mlp, **renorm)
    if not cfg.d_shared_expert:
        return routed
    U1, U3, U2 = _shared(b, p, cfg, block)
    f = cfg.d_shared_expert
    a = b.op(f"{p}.shared.gate", "linear", [x, U1], ("n", f))
    u = b.op(f"{p}.shared.up", "linear", [x, U3], ("n", f))
    h = b.op(f"{p}.shared.act", "swiglu", [a, u], ("n", f))
    s = b.op(f"{p}.shared.out", "linear", [h, U2], ("n", d))
    return b.op(f"{p}.out", "residual_add", [routed, s], ("n", d))
