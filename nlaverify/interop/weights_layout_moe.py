r"""The Hugging Face tensors of a mixture-of-experts block (Mixtral, Qwen2-MoE, Qwen3-MoE;
``transformers`` 5): the router ``mlp.gate.weight`` ``(E, d)`` (:math:`W_r^\top`), the fused
experts ``mlp.experts.gate_up_proj`` ``(E, 2m, d)`` (rows :math:`[0, m)` the gate
:math:`W_1^{e\top}`, :math:`[m, 2m)` the up projection :math:`W_3^{e\top}`:
``Qwen2MoeExperts.forward``'s ``chunk(2, dim=-1)``) and ``mlp.experts.down_proj`` ``(E, d,
m)`` (:math:`W_2^{e\top}`); Qwen2-MoE's shared expert ``mlp.shared_expert.{gate,up,down}_proj
.weight`` (:math:`U_1^\top, U_3^\top, U_2^\top`) and its gate ``mlp.shared_expert_gate.weight``
``(1, d)`` (:math:`w_{sg}^\top`). Used by :mod:`nlaverify.interop.weights_layout`.

DeepSeek-V3 (``DeepseekV3MoE``, ``modeling_deepseek_v3.py``, transformers 5.25;
:func:`deepseek_v3_moe_entries`): the same router and fused experts, the ungated shared
experts ``mlp.shared_experts.{gate,up,down}_proj.weight`` (one SwiGLU of width
``n_shared_experts * moe_intermediate_size``), and the router's load-balancing bias
``mlp.gate.e_score_correction_bias`` ``(E,)``, a *buffer* (no parameter): it holds the graph's
constant ``blocks.{l}.mlp.e_bias`` (:func:`~nlaverify.config_moe.routing_bias`), written by
``params_to_hf`` (zeros for ``gradients=True``: no parameter's derivative flows into it) and
read back by :func:`deepseek_v3_constants` as the data entry that replaces the constant.
"""

from __future__ import annotations

import numpy as np

from nlaverify.config import TransformerConfig
from nlaverify.config_moe import expert_width, routing_bias, sparse_block
from nlaverify.interop.weights_layout_base import _Entry, _transpose

__all__ = ["deepseek_v3_constants", "deepseek_v3_moe_entries", "moe_entries"]


def _swap(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
    return [np.ascontiguousarray(a[0].transpose(0, 2, 1))]


def _row(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
    return [np.ascontiguousarray(a[0].reshape(-1))]


def _to_row(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
    return [np.ascontiguousarray(a[0].reshape(1, -1))]


def _split_gate_up(g: np.ndarray, m: int) -> list[np.ndarray]:
    """``(E, d, 2m)`` -> :math:`W_1, W_3` ``(E, d, m)``: the first :math:`m` columns the gate."""
    return [np.ascontiguousarray(g[..., :m]), np.ascontiguousarray(g[..., m:])]


def _fuse_gate_up(W1: np.ndarray, W3: np.ndarray) -> np.ndarray:
    """:math:`W_1, W_3` ``(E, d, m)`` -> ``gate_up_proj`` ``(E, 2m, d)``, the gate first."""
    return np.ascontiguousarray(np.concatenate([W1, W3], axis=-1).transpose(0, 2, 1))


def moe_entries(c: TransformerConfig, h: str, p: str) -> list[_Entry]:
    """The entries of the MoE block of HF layer prefix ``h`` / graph prefix ``p`` (module
    docstring)."""
    d, n_e, m = c.d_model, c.n_experts, expert_width(c)

    def gate_up_to_ours(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
        return _split_gate_up(a[0].transpose(0, 2, 1), m)

    def gate_up_to_hf(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
        return [_fuse_gate_up(*a)]

    out = [_Entry((f"{h}mlp.gate.weight",), ((n_e, d),), (f"{p}mlp.W_router",), _transpose,
                  _transpose),
           _Entry((f"{h}mlp.experts.gate_up_proj",), ((n_e, 2 * m, d),),
                  (f"{p}mlp.W1", f"{p}mlp.W3"), gate_up_to_ours, gate_up_to_hf),
           _Entry((f"{h}mlp.experts.down_proj",), ((n_e, d, m),), (f"{p}mlp.W2",), _swap,
                  _swap)]
    f = c.d_shared_expert
    if f:
        s = (f"{h}mlp.shared_experts." if c.moe_router in ("sigmoid", "softmax_group")
             else f"{h}mlp.shared_expert.")  # DeepSeek-V3 and V2; Qwen2-MoE
        out += [_Entry((f"{s}{hn}.weight",), (shape,), (f"{p}mlp.{pn}",), _transpose,
                       _transpose)
                for hn, pn, shape in (("gate_proj", "U1", (f, d)), ("up_proj", "U3", (f, d)),
                                      ("down_proj", "U2", (d, f)))]
    if c.shared_expert_gate:
        out.append(_Entry((f"{h}mlp.shared_expert_gate.weight",), ((1, d),), (f"{p}mlp.w_sg",),
                          _row, _to_row))
    return out


def _bias_key(layer: int) -> str:
    return f"model.layers.{layer}.mlp.gate.e_score_correction_bias"


def deepseek_v3_moe_entries(c: TransformerConfig, layer: int) -> list[_Entry]:
    r"""The entries of DeepSeek-V3's MoE block ``layer`` (module docstring): router, fused
    experts and shared experts as :func:`moe_entries`, and the bias buffer, which holds no
    parameter (``ours=()``): :math:`b` = ``routing_bias(c, layer)`` when written (offsets
    on), zeros for gradients."""
    bias = routing_bias(c, layer)

    def bias_to_hf(_: list[np.ndarray], offsets: bool) -> list[np.ndarray]:
        return [bias.copy() if offsets else np.zeros_like(bias)]

    return [*moe_entries(c, f"model.layers.{layer}.", f"blocks.{layer}."),
            _Entry((_bias_key(layer),), ((c.n_experts,),), (), lambda a, _: [], bias_to_hf)]


def deepseek_v3_constants(c: TransformerConfig, state: dict[str, np.ndarray]
                          ) -> dict[str, np.ndarray]:
    r"""The graph's constants held by a DeepSeek-V3 state dict: each sparse block's
    ``e_score_correction_bias`` as ``blocks.{l}.mlp.e_bias`` (float64), the data entries
    that replace :func:`~nlaverify.config_moe.routing_bias` (a checkpoint's trained
    :math:`b`)."""
    return {f"blocks.{layer}.mlp.e_bias": np.asarray(state[_bias_key(layer)], dtype=np.float64)
            for layer in range(c.n_blocks) if sparse_block(c, layer)
            and c.moe_router == "sigmoid"}
