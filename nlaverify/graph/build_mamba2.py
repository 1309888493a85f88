"""Mamba-2's block as graph nodes (Dao & Gu 2024, *Transformers are SSMs*, §7-§8; Hugging
Face ``Mamba2Mixer``), for :func:`nlaverify.graph.build.build_transformer`'s ``mixer="mamba2"``
(Baptista, Stuart & Tran §5.3.4: a state-space recurrence in place of attention).
"""

from __future__ import annotations

from typing import Any

from nlaverify.config import TransformerConfig

__all__ = ["mamba2_block"]


def mamba2_block(b: Any, p: str, x: str, cfg: TransformerConfig, block: int) -> str:
    r"""Mamba-2's block (Dao & Gu 2024, §7, Figure 6; Hugging Face ``Mamba2Mixer``, its
    ``in_proj`` split by output into :math:`[z, x, B, C, \delta]` and its depthwise
    ``conv1d`` by channel, which a depthwise convolution allows): with :math:`E` =
    ``d_inner``, :math:`H` = ``ssm_heads``, :math:`P = E/H`, :math:`G` = ``ssm_groups``,

    .. math:: x = \operatorname{silu}(\operatorname{conv}(uW_x)),\ B =
       \operatorname{silu}(\operatorname{conv}(uW_B)),\ C = \operatorname{silu}(
       \operatorname{conv}(uW_C)),\ y = \operatorname{mamba2\_scan}(x, uW_\delta,
       A_{\log}, B, C, D, b_\Delta),

    (:func:`nlaverify.ops.ssm2.mamba2_scan` on ``x_heads`` :math:`(n, H, P)` and
    ``B_groups``, ``C_groups`` :math:`(n, G, N)`, views that keep the sequence axis first),
    ``norm`` :math:`= \operatorname{GatedRMS}(y, uW_z)` over groups of :math:`E/G`
    (:func:`~nlaverify.ops.ssm2.gated_rmsnorm`), ``out`` :math:`= \text{norm}\,W_{out}`.
    Nodes ``{p}.in_z``, ``in_x``, ``in_B``, ``in_C``, ``in_dt``, ``conv_x``, ``conv_B``,
    ``conv_C``, ``x``, ``B``, ``C``, ``x_heads``, ``B_groups``, ``C_groups``, ``scan``,
    ``y``, ``norm``, ``out``."""
    d, E, N, k = cfg.d_model, cfg.d_inner, cfg.ssm_state, cfg.ssm_conv
    H, G = cfg.ssm_heads, cfg.ssm_groups
    P, comp = E // H, "mamba2.in_proj"
    z = b.project(f"{p}.in_z", x, d, E, False, comp, block)
    acts = {}
    for part, width in (("x", E), ("B", G * N), ("C", G * N)):
        pre = b.project(f"{p}.in_{part}", x, d, width, False, comp, block)
        w = b.param(f"{p}.conv_{part}.w", (width, k), "mamba2.conv.w", ("normal", k**-0.5),
                    block)
        cb = b.param(f"{p}.conv_{part}.b", (width,), "mamba2.conv.b", ("normal", 0.1), block)
        c = b.op(f"{p}.conv_{part}", "causal_conv1d", [pre, w, cb], ("n", width))
        acts[part] = b.op(f"{p}.{part}", "silu", [c], ("n", width))
    dt = b.project(f"{p}.in_dt", x, d, H, False, comp, block)
    xh = b.op(f"{p}.x_heads", "split_channels", [acts["x"]], ("n", H, P), n_heads=H)
    Bg, Cg = (b.op(f"{p}.{m}_groups", "split_channels", [acts[m]], ("n", G, N), n_heads=G)
              for m in ("B", "C"))
    A_log = b.param(f"{p}.A_log", (H,), "mamba2.A_log", ("normal", 0.5), block)
    D = b.param(f"{p}.D", (H,), "mamba2.D", ("one_plus", 0.1), block)
    dt_b = b.param(f"{p}.dt.b", (H,), "mamba2.dt_bias", ("normal", 0.5), block)
    s = b.op(f"{p}.scan", "mamba2_scan", [xh, dt, A_log, Bg, Cg, D, dt_b], ("n", H, P))
    y = b.op(f"{p}.y", "merge_channels", [s], ("n", E))
    g = b.param(f"{p}.norm.gamma", (E,), "mamba2.norm", ("one_plus", 0.1), block)
    normed = b.op(f"{p}.norm", "gated_rmsnorm", [y, z, g], ("n", E), eps=cfg.norm_eps,
                  group_size=E // G)
    return b.project(f"{p}.out", normed, E, d, False, "mamba2.out_proj", block)
