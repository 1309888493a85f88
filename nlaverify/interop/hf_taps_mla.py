r"""The taps of a dense ``DeepseekV3ForCausalLM`` (Hugging Face
``models/deepseek_v3/modeling_deepseek_v3.py``, transformers 5.25) for
:mod:`nlaverify.interop.hf_taps`: Llama's block around multi-head latent attention, whose
joint projections' outputs are split into the graph's nodes (:mod:`nlaverify.graph.build_mla`,
:mod:`nlaverify.interop.weights_layout_mla`):

- ``q_b_proj`` (or ``q_proj``) out ``(n, h (d_c + d_r))``: per head the first :math:`d_c`
  columns are ``q_nope``, the last :math:`d_r` ``q_pe``; ``kv_a_proj_with_mqa`` out: the first
  :math:`r` columns ``c_kv``, the last :math:`d_r` ``k_pe``; ``kv_b_proj`` out: per head
  ``k_nope`` then ``v``;
- the attention function's ``query`` / ``key`` ``(1, h, n, d_c + d_r)`` are the graph's ``q``
  and ``k``, ``value`` ``(1, h, n, d_v)`` its ``v_heads``; their rotated halves ``q_rope``,
  ``k_rope`` (head 0: one key for all), ``k_shared``. With ``rope_interleave``
  (``apply_rotary_pos_emb_interleave``) HF lists the rotated pairs' first coordinates, then
  their second: ``ours[..., j] = hf[..., perm[j]]`` with
  :func:`~nlaverify.interop.weights_layout.rope_permutation` of :math:`d_r` (the same
  permutation of queries and keys, so HF's scores are the interleaved rotation's);
  ``rotate_half`` needs none (``rope_pairing="half"``), nor DeepSeek-V2's complex
  ``apply_rotary_emb`` (pairs :math:`(x_{2i}, x_{2i+1})` written back in place).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nlaverify.config_moe import sparse_block
from nlaverify.interop.hf_taps_core import _onehot, _rows, _Tap
from nlaverify.interop.weights_layout import rope_permutation

__all__ = ["deepseek_v3_taps"]


def _tokens(a: Any) -> np.ndarray:
    """One row per token: ``kv_b_proj`` reads the latent viewed as one head, ``(1, 1, n,
    r)``, so its output has two leading axes of 1, the other projections' one."""
    x = np.asarray(a)
    return x.reshape(-1, x.shape[-1])


def _cols(heads: int, width: int, lo: int, hi: int) -> Callable[[Any], np.ndarray]:
    """Columns ``lo:hi`` of each head's ``width``: ``(n, heads * width) -> (n, heads * (hi -
    lo))``."""
    def f(a: Any) -> np.ndarray:
        x = _tokens(a)
        return x.reshape(x.shape[0], heads, width)[..., lo:hi].reshape(x.shape[0], -1)
    return f


def _heads(heads: int, width: int, lo: int, hi: int) -> Callable[[Any], np.ndarray]:
    """As :func:`_cols`, as heads ``(heads, n, hi - lo)``."""
    def f(a: Any) -> np.ndarray:
        x = _tokens(a)
        return x.reshape(x.shape[0], heads, width)[..., lo:hi].transpose(1, 0, 2)
    return f


def _mlp_taps(c: Any, layer: int) -> list[_Tap]:
    r"""The MLP's taps of block ``layer``: the dense SwiGLU's, or DeepSeek-V3's (V2's) MoE
    (``DeepseekV3TopkRouter``, ``DeepseekV2TopkRouter`` return ``(router_logits,
    topk_weights, topk_indices)``: the logits are ``mlp.scores``, the indices' 0/1 mask
    ``mlp.route``; ``DeepseekV3MoE``'s output ``mlp.out``). ``mlp.affinity``
    (:math:`\sigma(xW_r)`; V2: the softmax) has no HF module output: unmapped."""
    p, m = f"blocks.{layer}", f"model.layers.{layer}.mlp"
    if sparse_block(c, layer):
        return [_Tap(f"{p}.mlp.scores", f"{m}.gate", "out", lambda o: np.asarray(o[0])),
                _Tap(f"{p}.mlp.route", f"{m}.gate", "out", _onehot(c.n_experts)),
                _Tap(f"{p}.mlp.out", m, "out", _rows)]
    return [_Tap(f"{p}.mlp.gate", f"{m}.gate_proj", "out", _rows),
            _Tap(f"{p}.mlp.up", f"{m}.up_proj", "out", _rows),
            _Tap(f"{p}.mlp.act", f"{m}.down_proj", "in", _rows),
            _Tap(f"{p}.mlp.out", f"{m}.down_proj", "out", _rows)]


def deepseek_v3_taps(c: Any, model_type: str = "deepseek_v3") -> list[_Tap]:
    """Every graph node of a dense DeepSeek-V3 (or V2: ``model_type="deepseek_v2"``, whose
    complex rotation writes the pairs back in place) with an HF counterpart (module
    docstring)."""
    H, r = c.n_heads, c.kv_lora_rank
    dc, dr, dv = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
    permuted = c.rope_pairing == "interleaved" and model_type == "deepseek_v3"
    perm = rope_permutation(dr) if permuted else np.arange(dr)
    joined = np.concatenate([np.arange(dc), dc + perm])  # [nope | rope] of q and k

    def att(take: Callable[[np.ndarray], np.ndarray]) -> Callable[[Any], np.ndarray]:
        return lambda a: take(np.asarray(a)[0][..., joined])  # (1, H, n, dc + dr)

    taps = [_Tap("embed", "model.embed_tokens", "out", _rows),
            _Tap("x0", "model.embed_tokens", "out", _rows)]
    for layer in range(c.n_blocks):
        p, h = f"blocks.{layer}", f"model.layers.{layer}"
        a, q = f"{h}.self_attn", f"{p}.attn"
        qb = f"{a}.q_b_proj" if c.q_lora_rank is not None else f"{a}.q_proj"
        taps.append(_Tap(f"{p}.norm1", f"{h}.input_layernorm", "out", _rows))
        if c.q_lora_rank is not None:
            taps += [_Tap(f"{q}.q_a", f"{a}.q_a_proj", "out", _rows),
                     _Tap(f"{q}.q_a_norm", f"{a}.q_a_layernorm", "out", _rows)]
        taps += [_Tap(f"{q}.q_nope", qb, "out", _cols(H, dc + dr, 0, dc)),
                 _Tap(f"{q}.q_pe", qb, "out", _cols(H, dc + dr, dc, dc + dr)),
                 _Tap(f"{q}.q_nope_heads", qb, "out", _heads(H, dc + dr, 0, dc)),
                 _Tap(f"{q}.q_pe_heads", qb, "out", _heads(H, dc + dr, dc, dc + dr)),
                 _Tap(f"{q}.c_kv", f"{a}.kv_a_proj_with_mqa", "out", _cols(1, r + dr, 0, r)),
                 _Tap(f"{q}.k_pe", f"{a}.kv_a_proj_with_mqa", "out",
                      _cols(1, r + dr, r, r + dr)),
                 _Tap(f"{q}.k_pe_heads", f"{a}.kv_a_proj_with_mqa", "out",
                      _heads(1, r + dr, r, r + dr)),
                 _Tap(f"{q}.kv_a_norm", f"{a}.kv_a_layernorm", "out", _tokens),
                 _Tap(f"{q}.k_nope", f"{a}.kv_b_proj", "out", _cols(H, dc + dv, 0, dc)),
                 _Tap(f"{q}.v", f"{a}.kv_b_proj", "out", _cols(H, dc + dv, dc, dc + dv)),
                 _Tap(f"{q}.k_nope_heads", f"{a}.kv_b_proj", "out",
                      _heads(H, dc + dv, 0, dc)),
                 _Tap(f"{q}.q", None, "query", att(lambda x: x), layer),
                 _Tap(f"{q}.k", None, "key", att(lambda x: x), layer),
                 _Tap(f"{q}.q_rope", None, "query", att(lambda x: x[..., dc:]), layer),
                 _Tap(f"{q}.k_rope", None, "key", att(lambda x: x[:1, :, dc:]), layer),
                 _Tap(f"{q}.v_heads", None, "value", lambda x: np.asarray(x)[0], layer),
                 _Tap(f"{q}.heads", None, "output",
                      lambda x: np.asarray(x)[0].transpose(1, 0, 2), layer),
                 _Tap(f"{q}.merged", f"{a}.o_proj", "in", _rows),
                 _Tap(f"{q}.out", f"{a}.o_proj", "out", _rows),
                 _Tap(f"{p}.resid1", f"{h}.post_attention_layernorm", "in", _rows),
                 _Tap(f"{p}.norm2", f"{h}.post_attention_layernorm", "out", _rows),
                 *_mlp_taps(c, layer),
                 _Tap(f"{p}.resid2", h, "out", _rows)]
        if H > 1:
            taps.append(_Tap(f"{q}.k_shared", None, "key", att(lambda x: x[..., dc:]), layer))
    return [*taps, _Tap("final_norm", "model.norm", "out", _rows),
            _Tap("logits", "lm_head", "out", _rows)]
