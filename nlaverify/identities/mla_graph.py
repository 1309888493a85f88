r"""The family ``architectures``, continued: the graph's multi-head latent attention
(:mod:`nlaverify.graph.build_mla`, Hugging Face ``DeepseekV3Attention``'s path: joint
projections split by output, the shared rotated key repeated, ``concat_last`` of the two
halves, one ``attention`` node with :math:`d_v \ne d_k`) is the proved absorbed form
:func:`nlaverify.ops.mla.mla_attention_absorbed` (DeepSeek-V2 §2.1.2-2.1.3) on the same
weights, so identity ``mla_absorption`` certifies the graph's path too.

The graph's sublayer reads three rows per token: the queries' source :math:`c^Q` (the node
``q_a_norm``: the normalised query latent), the block's input :math:`x` (for the rotated key)
and the normalised key-value latent :math:`\hat c` (``kv_a_norm``), whatever the norms made of
them. ``mla_attention_absorbed`` reads one input :math:`X`; with :math:`X' = [c^Q \mid x \mid
\hat c]` and the block-embedded weights

.. math:: W'^{DKV} = \begin{bmatrix}0\\0\\I_r\end{bmatrix},\quad
   W'^{Q}_h = \begin{bmatrix}W^{UQ}_h\\0\\0\end{bmatrix},\quad
   W'^{QR}_h = \begin{bmatrix}W^{QR}_h\\0\\0\end{bmatrix},\quad
   W'^{KR} = \begin{bmatrix}0\\W^{KR}\\0\end{bmatrix},\quad W'^O_h = [W^O_h \mid 0],

it computes :math:`C = X' W'^{DKV} = \hat c`, :math:`X' W'^Q_h = c^Q W^{UQ}_h` and so on:
the same sublayer in the first :math:`d` output columns (the others 0), which the identity
checks entry by entry on symbols.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.identities._expectations import _Checks
from nlaverify.identities.architectures import SEED_MLA
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.identities.online_softmax import _ratio_equal
from nlaverify.ops import mla as _mla
from nlaverify.symbolic.exact import symbol_array

__all__ = ["derive_mla_graph", "mla_graph_config", "mla_graph_sublayer"]

#: n tokens, width d, h heads, ranks r (keys, values) and r_q (queries), head widths
_N, _D, _H, _R, _RQ, _DC, _DR, _DV = 2, 2, 2, 2, 2, 1, 2, 1


def mla_graph_config(causal: bool) -> Any:
    r"""The smallest MLA config with every part (a query latent, :math:`h = 2` heads,
    :math:`d_c = d_v = 1`, one RoPE pair :math:`d_r = 2`, a latent :math:`r = 2`)."""
    from nlaverify.config import TransformerConfig

    return TransformerConfig(vocab_size=3, d_model=_D, n_heads=_H, d_head=_DR, n_blocks=1,
                             d_mlp=2, positions="rope", norm="rmsnorm", mlp="swiglu", causal=causal,
                             kv_lora_rank=_R, q_lora_rank=_RQ, qk_nope_head_dim=_DC,
                             qk_rope_head_dim=_DR, v_head_dim=_DV)


def mla_graph_sublayer(xp: Any, cfg: Any, weights: dict[str, Any], cq: Any, x: Any,
                       c: Any) -> Any:
    r"""The node ``blocks.0.attn.out`` of ``build_transformer(cfg)``, evaluated on ``xp``
    with the sublayer's input ``blocks.0.norm1`` set to ``x``, ``q_a_norm`` to ``cq`` and
    ``kv_a_norm`` to ``c`` (``weights`` keyed by the parameter's name under
    ``blocks.0.attn.``)."""
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.core import evaluate

    g = build_transformer(cfg)
    p = "blocks.0.attn"
    out = evaluate(g, xp, {f"{p}.{k}": v for k, v in weights.items()},
                   outputs=[f"{p}.out"], overrides={"blocks.0.norm1": x,
                                                    f"{p}.q_a_norm": cq, f"{p}.kv_a_norm": c})
    return out[f"{p}.out"]


def _embedded(w: dict[str, Any]) -> list[Any]:
    """``mla_attention_absorbed``'s arguments for :math:`X' = [c^Q | x | \\hat c]`."""
    zq, zx = (np.zeros((k, _R), dtype=object) for k in (_RQ, _D))
    eye = np.eye(_R, dtype=int).astype(object)
    heads = lambda W, w_: np.stack([W[:, i * w_:(i + 1) * w_] for i in range(_H)])  # noqa: E731
    pad = lambda Wh: np.stack([np.concatenate([Wi, np.zeros((_D + _R, Wi.shape[1]),  # noqa: E731
                                                            dtype=object)]) for Wi in Wh])
    W_KR = np.concatenate([np.zeros((_RQ, _DR), dtype=object), w["k_pe.W_KR"],
                           np.zeros((_R, _DR), dtype=object)])
    W_O = np.stack([np.concatenate([w["out.W_O"][i * _DV:(i + 1) * _DV], np.zeros(
        (_DV, _RQ + _R), dtype=object)], axis=1) for i in range(_H)])  # zero extra columns
    return [np.concatenate([zq, zx, eye]),
            heads(w["k_nope.W_UK"], _DC), heads(w["v.W_UV"], _DV),
            pad(heads(w["q_nope.W_UQ"], _DC)), pad(heads(w["q_pe.W_QR"], _DR)), W_KR, W_O]


def derive_mla_graph() -> Proof:
    xp = get_namespace("sympy")
    chk = _Checks()
    w = {"q_nope.W_UQ": symbol_array("a", (_RQ, _H * _DC)),
         "q_pe.W_QR": symbol_array("b", (_RQ, _H * _DR)),
         "k_pe.W_KR": symbol_array("k", (_D, _DR)),
         "k_nope.W_UK": symbol_array("u", (_R, _H * _DC)),
         "v.W_UV": symbol_array("v", (_R, _H * _DV)),
         "out.W_O": symbol_array("o", (_H * _DV, _D))}
    cq, x, c = symbol_array("q", (_N, _RQ)), symbol_array("x", (_N, _D)), \
        symbol_array("c", (_N, _R))
    for causal in (False, True):
        xp.reset_shifts()
        got = mla_graph_sublayer(xp, mla_graph_config(causal), w, cq, x, c)
        xp.reset_shifts()
        X = np.concatenate([cq, x, c], axis=1)
        ref = np.asarray(_mla.mla_attention_absorbed(xp, X, *_embedded(w), causal=causal))
        _ratio_equal(chk, np.asarray(got), ref[:, :_D], f"causal={causal}")
        chk.zero(ref[:, _D:], f"causal={causal}: the padded output columns")
        if chk.bad:
            return Proof("failed", (Step(f"causal={causal}"),), chk.bad)
    steps = [
        Step(rf"Independent real symbols: the query latent $c^Q$ (${_N}\times{_RQ}$), the "
             rf"block's input $x$ (${_N}\times{_D}$), the normalised latent $\hat c$ "
             rf"(${_N}\times{_R}$) and, for $h = {_H}$ heads with $d_c = d_v = 1$, $d_r = 2$, "
             r"the graph's parameters $W^{UQ}$, $W^{QR}$, $W^{KR}$, $W^{UK}$, $W^{UV}$, "
             r"$W^O$."),
        Step(r"Evaluate the graph's node `blocks.0.attn.out` of `build_transformer` on the "
             r"exact namespace with `q_a_norm`, `norm1`, `kv_a_norm` set to $c^Q$, $x$, "
             r"$\hat c$ (its split projections, `split_heads`, `rope`, `repeat_kv` of the "
             r"one-head key, `concat_last`, `attention`, `merge_heads`, the output "
             r"projection), without a mask and causal."),
        Step(r"Run `mla_attention_absorbed` on $X' = [c^Q \mid x \mid \hat c]$ with the "
             r"block-embedded weights (module docstring): every entry of the two outputs is "
             r"equal (the numerator of their difference over a common positive denominator "
             r"is 0) and the padded output columns are 0, so `mla_absorption` certifies "
             r"the graph's path.",
             r"X' W'^{DKV} = \hat c,\quad X' W'^Q_h = c^Q W^{UQ}_h,\quad X' W'^{KR} = "
             r"x W^{KR}"),
    ]
    return chk.proof(steps)


register(Identity(
    "mla_graph_equals_absorbed", "architectures",
    "The graph's multi-head latent attention is the proved absorbed form on the same weights",
    r"\operatorname{graph}_{\mathrm{MLA}}(c^Q, x, \hat c) = \operatorname{MLA}_{\mathrm{abs}}"
    r"\bigl([c^Q \mid x \mid \hat c];\ W'^{DKV}, W^{UK}, W^{UV}, W'^Q, W'^{QR}, W'^{KR}, "
    r"W^O\bigr)",
    SEED_MLA, (qualname(mla_graph_sublayer), qualname(_mla.mla_attention_absorbed)),
    guard(derive_mla_graph), tags=("closed-form",)))
