r"""The Hugging Face ``OPTForCausalLM`` tensors and the nlaverify parameters they hold
(:mod:`nlaverify.interop.weights_layout`'s table, one model type).

``model.decoder.embed_tokens``; ``embed_positions`` ``(context + 2, d)`` is ``pos.W_P``
whole, copied (the config's ``position_offset=2``: position :math:`p` reads row
:math:`p + 2`; rows 0 and 1 held, never read); per layer ``self_attn_layer_norm``
(``norm1``), ``self_attn.{q,k,v,out}_proj``,
``final_layer_norm`` (``norm2``), ``fc1`` / ``fc2`` (Linear, transposed; biased by
``enable_bias``; norms without weight and bias when ``layer_norm_elementwise_affine`` is
false); the decoder's ``final_layer_norm``; ``lm_head`` unless tied.
"""

from __future__ import annotations

from nlaverify.config import TransformerConfig
from nlaverify.interop.hf_config_opt import OPT_OFFSET
from nlaverify.interop.weights_layout_base import (
    _copy,
    _Entry,
    _transpose,
    _unembed,
)

_POS = "model.decoder.embed_positions.weight"


def opt_entries(c: TransformerConfig) -> list[_Entry]:
    """Every tensor of an ``OPTForCausalLM`` state dict (module docstring)."""
    d, m, V = c.d_model, c.d_mlp, c.vocab_size
    dec = "model.decoder."

    def norm(hn: str, pn: str) -> list[_Entry]:
        if not c.norm_affine:
            return []
        return [_Entry((f"{hn}.weight",), ((d,),), (f"{pn}.gamma",), _copy, _copy),
                _Entry((f"{hn}.bias",), ((d,),), (f"{pn}.beta",), _copy, _copy)]

    E = [_Entry((f"{dec}embed_tokens.weight",), ((V, d),), ("embed.W_E",), _copy, _copy),
         _Entry((_POS,), ((c.context + OPT_OFFSET, d),), ("pos.W_P",), _copy, _copy)]
    for layer in range(c.n_blocks):
        h, p = f"{dec}layers.{layer}.", f"blocks.{layer}."
        E += norm(f"{h}self_attn_layer_norm", f"{p}norm1")
        for hn, pn, shape, bias in (
                ("self_attn.q_proj", "attn.q.{}_Q", (d, d), c.attn_bias),
                ("self_attn.k_proj", "attn.k.{}_K", (d, d), c.attn_bias),
                ("self_attn.v_proj", "attn.v.{}_V", (d, d), c.attn_bias),
                ("self_attn.out_proj", "attn.out.{}_O", (d, d), c.out_bias),
                ("fc1", "mlp.in.{}_in", (m, d), c.mlp_bias),
                ("fc2", "mlp.out.{}_out", (d, m), c.mlp_bias)):
            E.append(_Entry((f"{h}{hn}.weight",), (shape,), (p + pn.format("W"),), _transpose,
                            _transpose))
            if bias:
                E.append(_Entry((f"{h}{hn}.bias",), ((shape[0],),), (p + pn.format("b"),),
                                _copy, _copy))
        E += norm(f"{h}final_layer_norm", f"{p}norm2")
    E += norm(f"{dec}final_layer_norm", "final_norm")
    return E + _unembed(c)
