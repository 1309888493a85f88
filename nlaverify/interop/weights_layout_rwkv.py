r"""The Hugging Face ``RwkvForCausalLM`` tensors and the nlaverify parameters they hold
(:mod:`nlaverify.interop.weights_layout`'s table, one model type; issue 37).

``rwkv.embeddings`` (``embed.W_E``); ``rwkv.blocks.0.pre_ln`` (``blocks.0.ln0``, weight and
bias); per block ``ln1`` / ``ln2`` (``norm1`` / ``norm2``), the time mixing
``attention.*`` (``blocks.{l}.rwkv.*``: ``time_decay`` and ``time_first`` :math:`(a,)` as
they are, the graph's op taking :math:`w = -e^{\text{time\_decay}}` itself, as HF's
``rwkv_linear_attention_cpu`` does; ``time_mix_key`` / ``_value`` / ``_receptance``
``(1, 1, d)`` flattened to :math:`\mu_k, \mu_v, \mu_r` ``(d,)``; ``key``, ``value``,
``receptance`` ``(a, d)`` and ``output`` ``(d, a)``, ``nn.Linear`` weights, transposed to
:math:`W_k, W_v, W_r` ``(d, a)`` and :math:`W_o` ``(a, d)``), the channel mixing
``feed_forward.*`` (``blocks.{l}.ffn.*``: :math:`\mu_k, \mu_r`; ``key`` ``(f, d)``,
``receptance`` ``(d, d)``, ``value`` ``(d, f)`` transposed); ``rwkv.ln_out``
(``final_norm``); ``head`` (``unembed.W_U``, transposed; never tied, see
:mod:`nlaverify.interop.hf_config_rwkv`). No bias anywhere but the LayerNorms'.
"""

from __future__ import annotations

import numpy as np

from nlaverify.config import TransformerConfig
from nlaverify.interop.weights_layout_base import _copy, _Entry, _transpose

__all__ = ["rwkv_entries"]


def _mix_to_ours(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
    """HF's ``time_mix_*`` ``(1, 1, d)`` -> :math:`\\mu` ``(d,)``."""
    return [np.ascontiguousarray(a[0].reshape(-1))]


def _mix_to_hf(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
    return [np.ascontiguousarray(a[0].reshape(1, 1, -1))]


def rwkv_entries(c: TransformerConfig) -> list[_Entry]:
    """Every tensor of ``RwkvForCausalLM.state_dict()`` for ``c`` (module docstring)."""
    d, V, a, f = c.d_model, c.vocab_size, c.rwkv_dim, c.d_mlp

    def norm(hf: str, ours: str) -> list[_Entry]:
        return [_Entry((f"{hf}.weight",), ((d,),), (f"{ours}.gamma",), _copy, _copy),
                _Entry((f"{hf}.bias",), ((d,),), (f"{ours}.beta",), _copy, _copy)]

    out = [_Entry(("rwkv.embeddings.weight",), ((V, d),), ("embed.W_E",), _copy, _copy),
           *norm("rwkv.blocks.0.pre_ln", "blocks.0.ln0")]
    for layer in range(c.n_blocks):
        h, p = f"rwkv.blocks.{layer}.", f"blocks.{layer}."
        out += norm(f"{h}ln1", f"{p}norm1") + norm(f"{h}ln2", f"{p}norm2")
        att, q = f"{h}attention.", f"{p}rwkv."
        out += [_Entry((f"{att}{k}",), ((a,),), (f"{q}{k}",), _copy, _copy)
                for k in ("time_decay", "time_first")]
        out += [_Entry((f"{att}time_mix_{k}",), ((1, 1, d),), (f"{q}mu_{k[0]}",), _mix_to_ours,
                       _mix_to_hf) for k in ("key", "value", "receptance")]
        out += [_Entry((f"{att}{k}.weight",), ((a, d),), (f"{q}W_{k[0]}",), _transpose,
                       _transpose) for k in ("key", "value", "receptance")]
        out.append(_Entry((f"{att}output.weight",), ((d, a),), (f"{q}W_o",), _transpose,
                          _transpose))
        ffn, q = f"{h}feed_forward.", f"{p}ffn."
        out += [_Entry((f"{ffn}time_mix_{k}",), ((1, 1, d),), (f"{q}mu_{k[0]}",), _mix_to_ours,
                       _mix_to_hf) for k in ("key", "receptance")]
        out += [_Entry((f"{ffn}{k}.weight",), (shape,), (f"{q}W_{k[0]}",), _transpose,
                       _transpose)
                for k, shape in (("key", (f, d)), ("receptance", (d, d)), ("value", (d, f)))]
    return [*out, *norm("rwkv.ln_out", "final_norm"),
            _Entry(("head.weight",), ((V, d),), ("unembed.W_U",), _transpose, _transpose)]
