"""The capture tables of the parallel-residual and other non-Llama layouts: GPT-NeoX's per-head
fused ``query_key_value``, GPT-J and Phi, StarCoder2 / StableLM / Cohere, Phi-3's fused
``qkv_proj`` and ``gate_up_proj``, Falcon's multi-query ``[Q | k | v]`` rows, OPT. Read by
:func:`nlaverify.interop.hf_taps._taps`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nlaverify.interop.hf_taps_core import _first, _layouts, _rows, _Tap

__all__ = ["_falcon_taps", "_gptj_taps", "_neox_taps", "_opt_taps", "_phi3_taps",
           "_starcoder2_taps"]


def _neox_qkv(H: int, dh: int, j: int, heads: bool) -> Callable[[Any], np.ndarray]:
    """GPT-NeoX's ``query_key_value`` output ``(1, n, 3 H d_h)``, per token ``(H, 3, d_h)``:
    part ``j`` (0 query, 1 key, 2 value) as the graph's ``(n, H d_h)`` rows or, ``heads``,
    its ``(H, n, d_h)``."""
    def f(a: Any) -> np.ndarray:
        r = _rows(a)
        x = r.reshape(r.shape[0], H, 3, dh)[:, :, j]
        return x.transpose(1, 0, 2) if heads else x.reshape(r.shape[0], H * dh)
    return f


def _neox_taps(c: Any) -> list[_Tap]:
    r"""``GPTNeoXForCausalLM``: ``query_key_value``'s output split per head into q, k, v
    (:func:`_neox_qkv`), the rotated query and key from the attention function (RoPE's half
    pairing is the config's, so nothing is permuted). HF sums a parallel block as
    ``mlp + attn + x`` in one statement: the graph's ``resid1`` (:math:`x + a`) is no HF
    tensor there and stays unmapped; sequential, it is ``post_attention_layernorm``'s
    input."""
    H, dh = c.n_heads, c.d_head
    taps = [_Tap("embed", "gpt_neox.embed_in", "out", _rows),
            _Tap("x0", "gpt_neox.embed_in", "out", _rows)]
    for layer in range(c.n_blocks):
        p, h = f"blocks.{layer}", f"gpt_neox.layers.{layer}"
        a, qkv = f"{h}.attention", f"{h}.attention.query_key_value"
        taps.append(_Tap(f"{p}.norm1", f"{h}.input_layernorm", "out", _rows))
        for j, x in enumerate("qkv"):
            taps += [_Tap(f"{p}.attn.{x}", qkv, "out", _neox_qkv(H, dh, j, False)),
                     _Tap(f"{p}.attn.{x}_heads", qkv, "out", _neox_qkv(H, dh, j, True))]
        taps += [_Tap(f"{p}.attn.q_rope", None, "query", lambda t: np.asarray(t)[0], layer),
                 _Tap(f"{p}.attn.k_rope", None, "key", lambda t: np.asarray(t)[0], layer),
                 _Tap(f"{p}.attn.heads", None, "output",
                      lambda t: np.asarray(t)[0].transpose(1, 0, 2), layer),
                 _Tap(f"{p}.attn.merged", f"{a}.dense", "in", _rows),
                 _Tap(f"{p}.attn.out", f"{a}.dense", "out", _rows),
                 _Tap(f"{p}.norm2", f"{h}.post_attention_layernorm", "out", _rows),
                 _Tap(f"{p}.mlp.in", f"{h}.mlp.dense_h_to_4h", "out", _rows),
                 _Tap(f"{p}.mlp.act", f"{h}.mlp.act", "out", _rows),
                 _Tap(f"{p}.mlp.out", f"{h}.mlp.dense_4h_to_h", "out", _rows),
                 _Tap(f"{p}.resid2", h, "out", _rows)]
        if not c.parallel_residual:
            taps.append(_Tap(f"{p}.resid1", f"{h}.post_attention_layernorm", "in", _rows))
    return [*taps, _Tap("final_norm", "gpt_neox.final_layer_norm", "out", _rows),
            _Tap("logits", "lm_head", "out", _rows)]


#: GPT-J's and Phi's module names: (embedding, stream entry, block, norm, attention,
#: output projection, MLP in, activation, MLP out, final norm)
_PARALLEL_NAMES = {
    "gptj": ("transformer.wte", "transformer.drop", "transformer.h", "ln_1", "attn", "out_proj",
             "mlp.fc_in", "mlp.act", "mlp.fc_out", "transformer.ln_f"),
    "phi": ("model.embed_tokens", "model.embed_dropout", "model.layers", "input_layernorm",
            "self_attn", "dense", "mlp.fc1", "mlp.activation_fn", "mlp.fc2",
            "model.final_layernorm")}


def _gptj_taps(c: Any, model_type: str) -> list[_Tap]:
    r"""``GPTJForCausalLM`` and ``PhiForCausalLM``: separate projections, the rotated query
    and key from the attention function (the config's pairing: nothing permuted), one norm
    feeding both sublayers. HF sums the block as ``attn + mlp + x`` in one statement:
    ``resid1`` stays unmapped."""
    emb, drop, blocks, norm, att, out, fc_in, act, fc_out, final = _PARALLEL_NAMES[model_type]
    lay = _layouts(c)
    taps = [_Tap("embed", emb, "out", _rows), _Tap("x0", drop, "out", _rows)]
    for layer in range(c.n_blocks):
        p, h = f"blocks.{layer}", f"{blocks}.{layer}"
        a = f"{h}.{att}"
        taps.append(_Tap(f"{p}.norm1", f"{h}.{norm}", "out", _rows))
        for x, heads in (("q", c.n_heads), ("k", c.n_kv_heads), ("v", c.n_kv_heads)):
            taps += [_Tap(f"{p}.attn.{x}", f"{a}.{x}_proj", "out", _rows),
                     _Tap(f"{p}.attn.{x}_heads", f"{a}.{x}_proj", "out",
                          lay["heads_of_rows"](heads, False))]
        taps += [_Tap(f"{p}.attn.q_rope", None, "query", lay["bhnd"](False), layer),
                 _Tap(f"{p}.attn.k_rope", None, "key", lay["bhnd"](False), layer),
                 _Tap(f"{p}.attn.heads", None, "output", lay["bnhd"](False), layer),
                 _Tap(f"{p}.attn.merged", f"{a}.{out}", "in", _rows),
                 _Tap(f"{p}.attn.out", f"{a}.{out}", "out", _rows),
                 _Tap(f"{p}.mlp.in", f"{h}.{fc_in}", "out", _rows),
                 _Tap(f"{p}.mlp.act", f"{h}.{act}", "out", _rows),
                 _Tap(f"{p}.mlp.out", f"{h}.{fc_out}", "out", _rows),
                 _Tap(f"{p}.resid2", h, "out", _rows)]
    return [*taps, _Tap("final_norm", final, "out", _rows), _Tap("logits", "lm_head", "out",
                                                                     _rows)]


def _starcoder2_taps(c: Any) -> list[_Tap]:
    r"""``Starcoder2ForCausalLM``, ``StableLmForCausalLM`` and ``CohereForCausalLM`` (parallel,
    one norm, RoPE interleaved as the graph's): Llama's module layout with
    LayerNorms and the half pairing (nothing permuted); StarCoder 2's non-gated MLP ``c_fc``
    -> ``act`` -> ``c_proj``, StableLM's gated one. A parallel StableLM block sums ``x +
    attn + mlp`` in one statement: ``resid1`` stays unmapped, and there is no ``norm2``."""
    lay = _layouts(c)
    H, Hkv = c.n_heads, c.n_kv_heads
    taps = [_Tap("embed", "model.embed_tokens", "out", _rows),
            _Tap("x0", "model.embed_tokens", "out", _rows)]
    for layer in range(c.n_blocks):
        p, h = f"blocks.{layer}", f"model.layers.{layer}"
        a = f"{h}.self_attn"
        taps.append(_Tap(f"{p}.norm1", f"{h}.input_layernorm", "out", _rows))
        for x, heads in (("q", H), ("k", Hkv), ("v", Hkv)):
            taps += [_Tap(f"{p}.attn.{x}", f"{a}.{x}_proj", "out", _rows),
                     _Tap(f"{p}.attn.{x}_heads", f"{a}.{x}_proj", "out",
                          lay["heads_of_rows"](heads, False))]
        taps += [_Tap(f"{p}.attn.q_rope", None, "query", lay["bhnd"](False), layer),
                 _Tap(f"{p}.attn.k_rope", None, "key", lay["bhnd"](False), layer),
                 _Tap(f"{p}.attn.heads", None, "output", lay["bnhd"](False), layer),
                 _Tap(f"{p}.attn.merged", f"{a}.o_proj", "in", _rows),
                 _Tap(f"{p}.attn.out", f"{a}.o_proj", "out", _rows)]
        if not c.parallel_residual:
            taps += [_Tap(f"{p}.resid1", f"{h}.post_attention_layernorm", "in", _rows),
                     _Tap(f"{p}.norm2", f"{h}.post_attention_layernorm", "out", _rows)]
        m = f"{h}.mlp"
        if c.mlp in ("swiglu", "geglu"):
            taps += [_Tap(f"{p}.mlp.gate", f"{m}.gate_proj", "out", _rows),
                     _Tap(f"{p}.mlp.up", f"{m}.up_proj", "out", _rows),
                     _Tap(f"{p}.mlp.act", f"{m}.down_proj", "in", _rows),
                     _Tap(f"{p}.mlp.out", f"{m}.down_proj", "out", _rows)]
        else:
            taps += [_Tap(f"{p}.mlp.in", f"{m}.c_fc", "out", _rows),
                     _Tap(f"{p}.mlp.act", f"{m}.act", "out", _rows),
                     _Tap(f"{p}.mlp.out", f"{m}.c_proj", "out", _rows)]
        taps.append(_Tap(f"{p}.resid2", h, "out", _rows))
    return [*taps, _Tap("final_norm", "model.norm", "out", _rows),
            _Tap("logits", "lm_head", "out", _rows)]


def _phi3_taps(c: Any) -> list[_Tap]:
    r"""``Phi3ForCausalLM``: ``qkv_proj``'s output split at :math:`h d_h` and :math:`(h +
    h_{kv}) d_h` into the graph's q, k, v, ``gate_up_proj``'s halves into gate and up; the
    half pairing is the config's (nothing permuted)."""
    lay = _layouts(c)
    H, Hkv, dh, m = c.n_heads, c.n_kv_heads, c.d_head, c.d_mlp
    cuts = {"q": (0, H * dh, H), "k": (H * dh, (H + Hkv) * dh, Hkv),
            "v": ((H + Hkv) * dh, (H + 2 * Hkv) * dh, Hkv)}
    taps = [_Tap("embed", "model.embed_tokens", "out", _rows),
            _Tap("x0", "model.embed_tokens", "out", _rows)]
    for layer in range(c.n_blocks):
        p, h = f"blocks.{layer}", f"model.layers.{layer}"
        a, qkv = f"{h}.self_attn", f"{h}.self_attn.qkv_proj"
        taps.append(_Tap(f"{p}.norm1", f"{h}.input_layernorm", "out", _rows))
        for x, (lo, hi, heads) in cuts.items():
            taps += [_Tap(f"{p}.attn.{x}", qkv, "out", lambda t, lo=lo, hi=hi: _rows(t)[:, lo:hi]),
                     _Tap(f"{p}.attn.{x}_heads", qkv, "out", lambda t, lo=lo, hi=hi, n=heads:
                          lay["heads_of_rows"](n, False)(_rows(t)[:, lo:hi]))]
        taps += [_Tap(f"{p}.attn.q_rope", None, "query", lay["bhnd"](False), layer),
                 _Tap(f"{p}.attn.k_rope", None, "key", lay["bhnd"](False), layer),
                 _Tap(f"{p}.attn.heads", None, "output", lay["bnhd"](False), layer),
                 _Tap(f"{p}.attn.merged", f"{a}.o_proj", "in", _rows),
                 _Tap(f"{p}.attn.out", f"{a}.o_proj", "out", _rows),
                 _Tap(f"{p}.resid1", f"{h}.post_attention_layernorm", "in", _rows),
                 _Tap(f"{p}.norm2", f"{h}.post_attention_layernorm", "out", _rows),
                 _Tap(f"{p}.mlp.gate", f"{h}.mlp.gate_up_proj", "out",
                      lambda t: _rows(t)[:, :m]),
                 _Tap(f"{p}.mlp.up", f"{h}.mlp.gate_up_proj", "out", lambda t: _rows(t)[:, m:]),
                 _Tap(f"{p}.mlp.act", f"{h}.mlp.down_proj", "in", _rows),
                 _Tap(f"{p}.mlp.out", f"{h}.mlp.down_proj", "out", _rows),
                 _Tap(f"{p}.resid2", h, "out", _rows)]
    return [*taps, _Tap("final_norm", "model.norm", "out", _rows),
            _Tap("logits", "lm_head", "out", _rows)]


def _falcon_taps(c: Any) -> list[_Tap]:
    r"""``FalconForCausalLM`` (old decoder): ``query_key_value``'s output split into q, k, v
    (multi-query rows :math:`[Q \mid k \mid v]`, else ``(H, 3, d_h)`` per token as
    GPT-NeoX's), the rotated query and key from the attention function (half pairing: nothing
    permuted). A parallel block is summed ``(mlp + attn) + x``: ``resid1`` stays unmapped and
    there is no ``norm2``; sequential, ``post_attention_layernorm``'s input and output are."""
    lay = _layouts(c)
    H, Hkv, dh = c.n_heads, c.n_kv_heads, c.d_head
    cuts = {"q": (0, H * dh, H), "k": (H * dh, (H + Hkv) * dh, Hkv),
            "v": ((H + Hkv) * dh, (H + 2 * Hkv) * dh, Hkv)}

    def part(x: str, j: int, heads: bool) -> Callable[[Any], np.ndarray]:
        if Hkv == H:
            return _neox_qkv(H, dh, j, heads)
        lo, hi, n = cuts[x]
        if heads:
            return lambda t: lay["heads_of_rows"](n, False)(_rows(t)[:, lo:hi])
        return lambda t: _rows(t)[:, lo:hi]

    taps = [_Tap("embed", "transformer.word_embeddings", "out", _rows),
            _Tap("x0", "transformer.word_embeddings", "out", _rows)]
    for layer in range(c.n_blocks):
        p, h = f"blocks.{layer}", f"transformer.h.{layer}"
        a, qkv = f"{h}.self_attention", f"{h}.self_attention.query_key_value"
        taps.append(_Tap(f"{p}.norm1", f"{h}.input_layernorm", "out", _rows))
        for j, x in enumerate("qkv"):
            taps += [_Tap(f"{p}.attn.{x}", qkv, "out", part(x, j, False)),
                     _Tap(f"{p}.attn.{x}_heads", qkv, "out", part(x, j, True))]
        taps += [_Tap(f"{p}.attn.q_rope", None, "query", lay["bhnd"](False), layer),
                 _Tap(f"{p}.attn.k_rope", None, "key", lay["bhnd"](False), layer),
                 _Tap(f"{p}.attn.heads", None, "output", lay["bnhd"](False), layer),
                 _Tap(f"{p}.attn.merged", f"{a}.dense", "in", _rows),
                 _Tap(f"{p}.attn.out", f"{a}.dense", "out", _rows)]
        if not c.parallel_residual:
            taps += [_Tap(f"{p}.resid1", f"{h}.post_attention_layernorm", "in", _rows),
                     _Tap(f"{p}.norm2", f"{h}.post_attention_layernorm", "out", _rows)]
        taps += [_Tap(f"{p}.mlp.in", f"{h}.mlp.dense_h_to_4h", "out", _rows),
                 _Tap(f"{p}.mlp.act", f"{h}.mlp.act", "out", _rows),
                 _Tap(f"{p}.mlp.out", f"{h}.mlp.dense_4h_to_h", "out", _rows),
                 _Tap(f"{p}.resid2", h, "out", _first)]
    return [*taps, _Tap("final_norm", "transformer.ln_f", "out", _rows),
            _Tap("logits", "lm_head", "out", _rows)]


def _opt_taps(c: Any) -> list[_Tap]:
    r"""``OPTForCausalLM``: GPT-2's function with Llama's separate projections under
    ``model.decoder``; ``x0`` (tokens plus positions read at the offset 2) is the first
    block's input. HF scales the query after ``q_proj``: q and its heads are read from
    ``q_proj``'s output (unscaled, as the graph's)."""
    lay = _layouts(c)
    H, dec = c.n_heads, "model.decoder"
    taps = [_Tap("embed", f"{dec}.embed_tokens", "out", _rows),
            _Tap("x0", f"{dec}.layers.0", "in", _rows)]
    for layer in range(c.n_blocks):
        p, h = f"blocks.{layer}", f"{dec}.layers.{layer}"
        a = f"{h}.self_attn"
        taps.append(_Tap(f"{p}.norm1", f"{h}.self_attn_layer_norm", "out", _rows))
        for x in "qkv":
            taps += [_Tap(f"{p}.attn.{x}", f"{a}.{x}_proj", "out", _rows),
                     _Tap(f"{p}.attn.{x}_heads", f"{a}.{x}_proj", "out",
                          lay["heads_of_rows"](H, False))]
        taps += [_Tap(f"{p}.attn.heads", None, "output", lay["bnhd"](False), layer),
                 _Tap(f"{p}.attn.merged", f"{a}.out_proj", "in", _rows),
                 _Tap(f"{p}.attn.out", f"{a}.out_proj", "out", _rows),
                 _Tap(f"{p}.resid1", f"{h}.final_layer_norm", "in", _rows),
                 _Tap(f"{p}.norm2", f"{h}.final_layer_norm", "out", _rows),
                 _Tap(f"{p}.mlp.in", f"{h}.fc1", "out", _rows),
                 _Tap(f"{p}.mlp.act", f"{h}.fc2", "in", _rows),
                 _Tap(f"{p}.mlp.out", f"{h}.fc2", "out", _rows),
                 _Tap(f"{p}.resid2", h, "out", _first)]
    return [*taps, _Tap("final_norm", f"{dec}.final_layer_norm", "out", _rows),
            _Tap("logits", "lm_head", "out", _rows)]
