r"""The Hugging Face ``Mamba2ForCausalLM`` tensors and the nlaverify parameters they hold
(:mod:`nlaverify.interop.weights_layout`'s table, one model type; issue 37).

``backbone.embeddings`` (``embed.W_E``); per layer ``norm`` (``norm1``) and the mixer
(``blocks.{l}.mamba2.*``; Dao & Gu 2024 §7, Hugging Face ``Mamba2Mixer``): ``in_proj``
``(2E + 2GN + H, d)``, whose output rows are :math:`[z, x, B, C, \delta]`
(``Mamba2Mixer.forward``'s ``split([E, E + 2GN, H])`` then ``split([E, GN, GN])``), as five
transposed matrices ``in_z.W``, ``in_x.W``, ``in_B.W``, ``in_C.W``, ``in_dt.W``; the depthwise
``conv1d`` ``(E + 2GN, 1, k)`` and its bias, split by channel into ``conv_x``, ``conv_B``,
``conv_C`` (PyTorch's cross-correlation taps as they are, the graph's ``causal_conv1d``);
``dt_bias`` (``dt.b``), ``A_log`` and ``D`` :math:`(H,)` as they are (the graph's
``mamba2_scan`` takes :math:`A = -e^{A_{\log}}` itself); the gated norm ``norm.weight``
(``norm.gamma``); ``out_proj`` transposed; ``backbone.norm_f`` (``final_norm``); ``lm_head``
(or tied). No bias but the convolution's.
"""

from __future__ import annotations

import itertools

import numpy as np

from nlaverify.config import TransformerConfig
from nlaverify.interop.weights_layout_base import (
    _copy,
    _Entry,
    _split_rows,
    _transpose,
    _unembed,
)

__all__ = ["mamba2_entries"]


def _split_channels(sizes: tuple[int, ...], conv: bool):
    """A depthwise convolution's weight ``(sum(sizes), 1, k)`` (``conv``) or bias
    ``(sum(sizes),)`` whose channels are several parts <-> nlaverify's ``(size, k)`` taps
    (or ``(size,)`` biases), in order."""
    bounds = np.cumsum([0, *sizes])

    def to_ours(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
        w = a[0][:, 0, :] if conv else a[0]
        return [np.ascontiguousarray(w[lo:hi]) for lo, hi in itertools.pairwise(bounds)]

    def to_hf(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
        w = np.concatenate(a, axis=0)
        return [np.ascontiguousarray(w[:, None, :] if conv else w)]

    return to_ours, to_hf


def mamba2_entries(c: TransformerConfig) -> list[_Entry]:
    """Every tensor of ``Mamba2ForCausalLM.state_dict()`` for ``c`` (module docstring)."""
    d, V, E, H = c.d_model, c.vocab_size, c.d_inner, c.ssm_heads
    GN, k = c.ssm_groups * c.ssm_state, c.ssm_conv
    parts = (E, GN, GN)
    out = [_Entry(("backbone.embeddings.weight",), ((V, d),), ("embed.W_E",), _copy, _copy)]
    for layer in range(c.n_blocks):
        h, p = f"backbone.layers.{layer}.", f"blocks.{layer}."
        m, q = f"{h}mixer.", f"{p}mamba2."
        out += [_Entry((f"{h}norm.weight",), ((d,),), (f"{p}norm1.gamma",), _copy, _copy),
                _Entry((f"{m}in_proj.weight",), ((2 * E + 2 * GN + H, d),),
                       tuple(f"{q}in_{x}.W" for x in ("z", "x", "B", "C", "dt")),
                       *_split_rows((E, *parts, H))),
                _Entry((f"{m}conv1d.weight",), ((E + 2 * GN, 1, k),),
                       tuple(f"{q}conv_{x}.w" for x in "xBC"), *_split_channels(parts, True)),
                _Entry((f"{m}conv1d.bias",), ((E + 2 * GN,),),
                       tuple(f"{q}conv_{x}.b" for x in "xBC"), *_split_channels(parts, False)),
                *(_Entry((f"{m}{theirs}",), ((H,),), (f"{q}{ours}",), _copy, _copy)
                  for theirs, ours in (("dt_bias", "dt.b"), ("A_log", "A_log"), ("D", "D"))),
                _Entry((f"{m}norm.weight",), ((E,),), (f"{q}norm.gamma",), _copy, _copy),
                _Entry((f"{m}out_proj.weight",), ((d, E),), (f"{q}out.W",), _transpose,
                       _transpose)]
    out.append(_Entry(("backbone.norm_f.weight",), ((d,),), ("final_norm.gamma",), _copy,
                      _copy))
    return out + _unembed(c)
