r"""The weights table of ``DeepseekV3ForCausalLM`` (its MoE blocks:
:func:`~nlaverify.interop.weights_layout_moe.deepseek_v3_moe_entries`) and
``DeepseekV2ForCausalLM`` with every layer dense (Hugging Face
``models/deepseek_v3/modeling_deepseek_v3.py``, ``deepseek_v2``, transformers 5.25; V2's
``mlp_bias`` adds the MLP's three biases), for
:mod:`nlaverify.interop.weights_layout`: Llama's embedding, norms, SwiGLU MLP and
``lm_head``, and multi-head latent attention's projections split by output into the graph's
(:mod:`nlaverify.graph.build_mla`):

- ``q_a_proj`` ``(r_q, d)`` is ``q_a.W_DQ`` transposed, ``q_a_layernorm`` ``q_a_norm.gamma``;
- ``q_b_proj`` ``(h (d_c + d_r), r_q)`` (``q_proj`` ``(h (d_c + d_r), d)`` without
  ``q_lora_rank``): head by head, :math:`d_c` rows of ``q_nope.W_UQ`` then :math:`d_r` of
  ``q_pe.W_QR`` (``DeepseekV3Attention.forward``: ``view(..., -1, qk_head_dim)`` then
  ``split([qk_nope_head_dim, qk_rope_head_dim])``);
- ``kv_a_proj_with_mqa`` ``(r + d_r, d)``: :math:`r` rows of ``c_kv.W_DKV``, then :math:`d_r`
  of ``k_pe.W_KR`` (``split([kv_lora_rank, qk_rope_head_dim])``); ``kv_a_layernorm``
  ``kv_a_norm.gamma``;
- ``kv_b_proj`` ``(h (d_c + d_v), r)``: head by head, :math:`d_c` rows of ``k_nope.W_UK``
  then :math:`d_v` of ``v.W_UV`` (``expand_kv``: ``view(..., -1, qk_nope_head_dim +
  v_head_dim)`` then ``split``);
- ``o_proj`` ``(d, h d_v)``: ``out.W_O`` transposed.

The rotated coordinates are not permuted: ``rope_interleave`` is the config's
``rope_pairing`` (:mod:`nlaverify.interop.hf_config_deepseek`).
"""

from __future__ import annotations

import itertools

import numpy as np

from nlaverify.config import TransformerConfig
from nlaverify.config_moe import sparse_block
from nlaverify.interop.weights_layout_base import (
    Transform,
    _copy,
    _Entry,
    _split_rows,
    _transpose,
    _unembed,
)
from nlaverify.interop.weights_layout_moe import deepseek_v3_moe_entries, moe_entries

__all__ = ["deepseek_v3_entries", "per_head_rows"]


def per_head_rows(heads: int, sizes: tuple[int, ...]) -> tuple[Transform, Transform]:
    r"""A Linear weight ``(heads * sum(sizes), d_in)`` whose output rows hold, head by head,
    several parts of ``sizes`` rows <-> the graph's ``(d_in, heads * size)`` matrices, one per
    part, each head's block of columns in head order."""
    bounds = np.cumsum([0, *sizes])
    total = int(bounds[-1])

    def to_ours(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
        w = a[0].reshape(heads, total, -1)
        return [np.ascontiguousarray(w[:, lo:hi].reshape(heads * (hi - lo), -1).T)
                for lo, hi in itertools.pairwise(bounds)]

    def to_hf(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
        parts = [x.T.reshape(heads, s, -1) for x, s in zip(a, sizes, strict=True)]
        return [np.ascontiguousarray(np.concatenate(parts, axis=1).reshape(heads * total, -1))]

    return to_ours, to_hf


def deepseek_v3_entries(c: TransformerConfig) -> list[_Entry]:
    """Every tensor of a dense ``DeepseekV3ForCausalLM``'s state dict (module docstring)."""
    d, V, m, H = c.d_model, c.vocab_size, c.d_mlp, c.n_heads
    r, rq = c.kv_lora_rank, c.q_lora_rank
    dc, dr, dv = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
    assert dc is not None and dr is not None and dv is not None
    E = [_Entry(("model.embed_tokens.weight",), ((V, d),), ("embed.W_E",), _copy, _copy)]
    for layer in range(c.n_blocks):
        h, p = f"model.layers.{layer}.", f"blocks.{layer}."
        a, q = f"{h}self_attn.", f"{p}attn."
        queries = (f"{q}q_nope.W_UQ", f"{q}q_pe.W_QR")
        if rq is not None:
            E += [_Entry((f"{a}q_a_proj.weight",), ((rq, d),), (f"{q}q_a.W_DQ",), _transpose,
                         _transpose),
                  _Entry((f"{a}q_a_layernorm.weight",), ((rq,),), (f"{q}q_a_norm.gamma",),
                         _copy, _copy),
                  _Entry((f"{a}q_b_proj.weight",), ((H * (dc + dr), rq),), queries,
                         *per_head_rows(H, (dc, dr)))]
        else:
            E.append(_Entry((f"{a}q_proj.weight",), ((H * (dc + dr), d),), queries,
                            *per_head_rows(H, (dc, dr))))
        E += [_Entry((f"{a}kv_a_proj_with_mqa.weight",), ((r + dr, d),),
                     (f"{q}c_kv.W_DKV", f"{q}k_pe.W_KR"), *_split_rows((r, dr))),
              _Entry((f"{a}kv_a_layernorm.weight",), ((r,),), (f"{q}kv_a_norm.gamma",), _copy,
                     _copy),
              _Entry((f"{a}kv_b_proj.weight",), ((H * (dc + dv), r),),
                     (f"{q}k_nope.W_UK", f"{q}v.W_UV"), *per_head_rows(H, (dc, dv))),
              _Entry((f"{a}o_proj.weight",), ((d, H * dv),), (f"{q}out.W_O",), _transpose,
                     _transpose)]
        sparse = sparse_block(c, layer)  # DeepSeek-V3's experts (weights_layout_moe)
        if sparse:  # DeepSeek-V2's: no bias buffer, the same keys otherwise
            E += (deepseek_v3_moe_entries(c, layer) if c.moe_router == "sigmoid"
                  else moe_entries(c, h, p))
        for hn, pn, shape in () if sparse else (("gate_proj", "gate.{}_gate", (m, d)),
                                                ("up_proj", "up.{}_up", (m, d)),
                                                ("down_proj", "out.{}_down", (d, m))):
            E.append(_Entry((f"{h}mlp.{hn}.weight",), (shape,), (f"{p}mlp.{pn.format('W')}",),
                            _transpose, _transpose))
            if c.mlp_bias:  # DeepSeek-V2's mlp_bias
                E.append(_Entry((f"{h}mlp.{hn}.bias",), ((shape[0],),),
                                (f"{p}mlp.{pn.format('b')}",), _copy, _copy))
        E += [_Entry((f"{h}{hn}.weight",), ((d,),), (f"{p}{pn}.gamma",), _copy, _copy)
              for hn, pn in (("input_layernorm", "norm1"), ("post_attention_layernorm",
                                                              "norm2"))]
    E.append(_Entry(("model.norm.weight",), ((d,),), ("final_norm.gamma",), _copy, _copy))
    return E + _unembed(c)
