r"""The Hugging Face ``FalconForCausalLM`` (old decoder) tensors and the nlaverify parameters
they hold (:mod:`nlaverify.interop.weights_layout`'s table, one model type).

``transformer.word_embeddings``; per layer ``input_layernorm`` (``norm1``) and, unless the
block is parallel, ``post_attention_layernorm`` (``norm2``), weight and bias; the fused
``self_attention.query_key_value`` (:func:`falcon_qkv`), ``self_attention.dense``,
``mlp.dense_h_to_4h`` / ``dense_4h_to_h`` (Linear, transposed; biased by the config's
``bias``); ``transformer.ln_f``; ``lm_head`` unless tied. RoPE's half pairing is the config's
``rope_pairing``: nothing permuted.
"""

from __future__ import annotations

import itertools

import numpy as np

from nlaverify.config import TransformerConfig
from nlaverify.interop.weights_layout_base import (
    Transform,
    _copy,
    _Entry,
    _neox_qkv,
    _split_rows,
    _transpose,
    _unembed,
)


def falcon_qkv(H: int, Hkv: int, dh: int, weight: bool) -> tuple[Transform, Transform]:
    r"""Falcon's fused ``query_key_value`` <-> ``W_Q, W_K, W_V`` (or the biases). Multi-query
    (``Hkv == 1 < H``): rows :math:`[Q \mid k \mid v]`, :math:`H d_h` then :math:`d_h` twice
    (``FalconAttention.forward``: ``split([num_heads, 1, 1], dim=-2)``); otherwise
    ``(heads, 3, head_dim)`` per head (``unflatten(-2, (num_heads, 3))``), GPT-NeoX's
    layout."""
    if Hkv == H:
        return _neox_qkv(H, dh, weight)
    if weight:
        return _split_rows((H * dh, dh, dh))
    bounds = np.cumsum([0, H * dh, dh, dh])

    def to_ours(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
        return [np.ascontiguousarray(a[0][lo:hi]) for lo, hi in itertools.pairwise(bounds)]

    def to_hf(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
        return [np.ascontiguousarray(np.concatenate(a))]

    return to_ours, to_hf


def falcon_entries(c: TransformerConfig) -> list[_Entry]:
    """Every tensor of a ``FalconForCausalLM`` state dict (module docstring)."""
    d, m, V, dh = c.d_model, c.d_mlp, c.vocab_size, c.d_head
    H, Hkv = c.n_heads, c.n_kv_heads
    assert dh is not None and Hkv is not None
    E = [_Entry(("transformer.word_embeddings.weight",), ((V, d),), ("embed.W_E",), _copy,
                _copy)]
    for layer in range(c.n_blocks):
        h, p = f"transformer.h.{layer}.", f"blocks.{layer}."
        norms = (("input_layernorm", "norm1"),) + (
            () if c.parallel_residual else (("post_attention_layernorm", "norm2"),))
        for hn, pn in norms:
            E += [_Entry((f"{h}{hn}.weight",), ((d,),), (f"{p}{pn}.gamma",), _copy, _copy),
                  _Entry((f"{h}{hn}.bias",), ((d,),), (f"{p}{pn}.beta",), _copy, _copy)]
        qkv = f"{h}self_attention.query_key_value"
        rows = (H + 2 * Hkv) * dh
        E.append(_Entry((f"{qkv}.weight",), ((rows, d),),
                        tuple(f"{p}attn.{x}.W_{x.upper()}" for x in "qkv"),
                        *falcon_qkv(H, Hkv, dh, True)))
        if c.attn_bias:
            E.append(_Entry((f"{qkv}.bias",), ((rows,),),
                            tuple(f"{p}attn.{x}.b_{x.upper()}" for x in "qkv"),
                            *falcon_qkv(H, Hkv, dh, False)))
        for hn, pn, shape, bias in (
                ("self_attention.dense", "attn.out.{}_O", (d, H * dh), c.out_bias),
                ("mlp.dense_h_to_4h", "mlp.in.{}_in", (m, d), c.mlp_bias),
                ("mlp.dense_4h_to_h", "mlp.out.{}_out", (d, m), c.mlp_bias)):
            E.append(_Entry((f"{h}{hn}.weight",), (shape,), (p + pn.format("W"),), _transpose,
                            _transpose))
            if bias:
                E.append(_Entry((f"{h}{hn}.bias",), ((shape[0],),), (p + pn.format("b"),),
                                _copy, _copy))
    E += [_Entry(("transformer.ln_f.weight",), ((d,),), ("final_norm.gamma",), _copy, _copy),
          _Entry(("transformer.ln_f.bias",), ((d,),), ("final_norm.beta",), _copy, _copy)]
    return E + _unembed(c)
