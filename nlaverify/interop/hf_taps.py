r"""The map from Hugging Face's captures to graph nodes, one table per module layout.

Each :class:`_Tap` names a graph node and the HF capture it is read from (a module's output
or first input by its path, or a tensor of the attention function,
:mod:`nlaverify.interop.hf_capture`), with the conversion that undoes HF's conventions: the
RoPE permutation of each head's coordinates
(:func:`nlaverify.interop.weights.rope_permutation`, ``ours[..., j] = hf[..., perm[j]]``),
HF's ``(B, H, n, d_h)`` / ``(B, n, H, d_h)`` head layouts versus the graph's
``(H, n, d_h)``, GPT-2's fused ``c_attn`` (split into q, k, v), Mixtral's top-k indices
(as the 0/1 routing mask), Gemma's embedding module (which returns the scaled embedding,
the graph's ``embed_scaled``), Mamba's fused ``in_proj`` / ``x_proj`` outputs and
channels-first ``(1, E, n)`` tensors, GPT-NeoX's per-head fused ``query_key_value`` output
``(n, H, 3, d_h)``, Falcon's multi-query ``[Q | k | v]`` rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nlaverify.config_moe import sparse_block
from nlaverify.errors import UnknownNameError
from nlaverify.interop.hf_taps_core import _channels, _layouts, _rows, _Tap
from nlaverify.interop.hf_taps_families import (
    _falcon_taps,
    _gptj_taps,
    _neox_taps,
    _opt_taps,
    _phi3_taps,
    _starcoder2_taps,
)

#: the HF ``model_type``\ s whose module layout :func:`~nlaverify.interop.hf_verify.verify_hf`
#: maps
LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe",
              "gemma", "gemma2", "granite", "olmo2", "ministral", "olmo", "gemma3_text")


def _taps(model_type: str, config: Any) -> list[_Tap]:
    """Every graph node with an HF counterpart, for a model of ``model_type``."""
    if model_type == "gpt2":
        return _gpt2_taps(config)
    if model_type in LLAMA_LIKE:
        return _llama_taps(config, model_type)
    if model_type == "mamba":
        return _mamba_taps(config)
    if model_type in ("rwkv", "mamba2"):  # tables in modules of their own, given the tap
        from nlaverify.interop.hf_taps_mamba2 import mamba2_taps
        from nlaverify.interop.hf_taps_rwkv import rwkv_taps

        return (rwkv_taps if model_type == "rwkv" else mamba2_taps)(config, _Tap)
    if model_type == "gpt_neox":
        return _neox_taps(config)
    if model_type in ("gptj", "phi"):
        return _gptj_taps(config, model_type)
    if model_type in ("starcoder2", "stablelm", "cohere"):
        return _starcoder2_taps(config)
    if model_type == "phi3":
        return _phi3_taps(config)
    if model_type in ("falcon", "opt"):
        return _falcon_taps(config) if model_type == "falcon" else _opt_taps(config)
    if model_type in ("deepseek_v3", "deepseek_v2"):  # multi-head latent attention
        from nlaverify.interop.hf_taps_mla import deepseek_v3_taps

        return deepseek_v3_taps(config, model_type)
    raise UnknownNameError(f"verify_hf: model_type {model_type!r}: expected one of gpt2, "
                           f"{', '.join(LLAMA_LIKE)}, mamba, mamba2, rwkv, gpt_neox, gptj, phi, "
                           "starcoder2, stablelm, phi3, falcon, opt, deepseek_v3, deepseek_v2")


def _gpt2_taps(c: Any) -> list[_Tap]:
    lay = _layouts(c)
    d = c.d_model
    taps = [_Tap("embed", "transformer.wte", "out", _rows),
            _Tap("x0", "transformer.drop", "out", _rows)]  # wte + wpe (dropout: identity)
    for layer in range(c.n_blocks):
        p, h = f"blocks.{layer}", f"transformer.h.{layer}"
        taps += [_Tap(f"{p}.norm1", f"{h}.ln_1", "out", _rows)]
        for i, x in enumerate("qkv"):  # the fused c_attn output [q | k | v]
            taps.append(_Tap(f"{p}.attn.{x}", f"{h}.attn.c_attn", "out",
                             lambda a, i=i: _rows(a)[:, i * d:(i + 1) * d]))
        for x, where in (("q", "query"), ("k", "key"), ("v", "value")):
            taps.append(_Tap(f"{p}.attn.{x}_heads", None, where, lay["bhnd"](False), layer))
        taps += [_Tap(f"{p}.attn.heads", None, "output", lay["bnhd"](False), layer),
                 _Tap(f"{p}.attn.merged", f"{h}.attn.c_proj", "in", _rows),
                 _Tap(f"{p}.attn.out", f"{h}.attn.c_proj", "out", _rows),
                 _Tap(f"{p}.resid1", f"{h}.ln_2", "in", _rows),
                 _Tap(f"{p}.norm2", f"{h}.ln_2", "out", _rows),
                 _Tap(f"{p}.mlp.in", f"{h}.mlp.c_fc", "out", _rows),
                 _Tap(f"{p}.mlp.act", f"{h}.mlp.act", "out", _rows),
                 _Tap(f"{p}.mlp.out", f"{h}.mlp.c_proj", "out", _rows),
                 _Tap(f"{p}.resid2", h, "out", _rows)]
    return [*taps, _Tap("final_norm", "transformer.ln_f", "out", _rows),
            _Tap("logits", "lm_head", "out", _rows)]


def _onehot(n_experts: int) -> Callable[[Any], np.ndarray]:
    """Mixtral's router output ``(logits, weights, indices)`` -> the 0/1 routing mask."""
    def f(out: Any) -> np.ndarray:
        idx = np.asarray(out[2]).astype(np.int64)  # check_model hands it over in float64
        mask = np.zeros((idx.shape[0], n_experts))
        np.put_along_axis(mask, idx, 1.0, axis=-1)
        return mask
    return f


def _llama_taps(c: Any, model_type: str) -> list[_Tap]:
    lay = _layouts(c)
    rope = c.positions == "rope"
    H, Hkv = c.n_heads, c.n_kv_heads
    # Gemma's embedding module returns the scaled embedding, the graph's embed_scaled
    first = "embed_scaled" if c.embed_scale else "embed"
    taps = [_Tap(first, "model.embed_tokens", "out", _rows),
            _Tap("x0", "model.embed_tokens", "out", _rows)]
    if c.embed_multiplier is not None:  # Granite multiplies in GraniteModel.forward
        taps = [_Tap("embed", "model.embed_tokens", "out", _rows)] + [
            _Tap(n, "model.layers.0", "in", _rows) for n in ("embed_scaled", "x0")]
    for layer in range(c.n_blocks):
        p, h = f"blocks.{layer}", f"model.layers.{layer}"
        a = f"{h}.self_attn"
        if c.pre_norms:  # OLMo 2 has no input_layernorm
            taps.append(_Tap(f"{p}.norm1", f"{h}.input_layernorm", "out", _rows))
        # the heads are split from q_proj's output, or from the joint QK-norm's (OLMo 2)
        qs, ks = (f"{a}.q_norm", f"{a}.k_norm") if c.qk_norm_joint else (f"{a}.q_proj",
                                                                         f"{a}.k_proj")
        taps += [_Tap(f"{p}.attn.q", f"{a}.q_proj", "out", lay["cols"](H, rope)),
                 _Tap(f"{p}.attn.k", f"{a}.k_proj", "out", lay["cols"](Hkv, rope)),
                 _Tap(f"{p}.attn.v", f"{a}.v_proj", "out", _rows),
                 _Tap(f"{p}.attn.q_heads", qs, "out", lay["heads_of_rows"](H, rope)),
                 _Tap(f"{p}.attn.k_heads", ks, "out", lay["heads_of_rows"](Hkv, rope)),
                 _Tap(f"{p}.attn.v_heads", None, "value", lay["bhnd"](False), layer)]
        if c.qk_norm_joint:
            taps += [_Tap(f"{p}.attn.q_norm", qs, "out", lay["cols"](H, rope)),
                     _Tap(f"{p}.attn.k_norm", ks, "out", lay["cols"](Hkv, rope))]
        elif getattr(c, "qk_norm", False):  # Qwen3 normalises (B, n, H, d_h), Gemma 3
            # the heads after the transpose, (B, H, n, d_h)
            qk = lay["bhnd" if model_type == "gemma3_text" else "bnhd"](rope)
            taps += [_Tap(f"{p}.attn.q_norm", f"{a}.q_norm", "out", qk),
                     _Tap(f"{p}.attn.k_norm", f"{a}.k_norm", "out", qk)]
        if rope:
            taps += [_Tap(f"{p}.attn.q_rope", None, "query", lay["bhnd"](), layer),
                     _Tap(f"{p}.attn.k_rope", None, "key", lay["bhnd"](), layer)]
        taps += [_Tap(f"{p}.attn.heads", None, "output", lay["bnhd"](False), layer),
                 _Tap(f"{p}.attn.merged", f"{a}.o_proj", "in", _rows),
                 _Tap(f"{p}.attn.out", f"{a}.o_proj", "out", _rows)]
        if c.post_norms and not c.pre_norms:  # OLMo 2: the MLP reads the stream itself
            taps += [_Tap(f"{p}.post_norm1", f"{h}.post_attention_layernorm", "out", _rows),
                     _Tap(f"{p}.resid1", f"{h}.mlp", "in", _rows),
                     _Tap(f"{p}.post_norm2", f"{h}.post_feedforward_layernorm", "out", _rows)]
        elif c.post_norms:  # Gemma 2: post_attention_layernorm normalises the attention output
            taps += [_Tap(f"{p}.post_norm1", f"{h}.post_attention_layernorm", "out", _rows),
                     _Tap(f"{p}.resid1", f"{h}.pre_feedforward_layernorm", "in", _rows),
                     _Tap(f"{p}.norm2", f"{h}.pre_feedforward_layernorm", "out", _rows),
                     _Tap(f"{p}.post_norm2", f"{h}.post_feedforward_layernorm", "out", _rows)]
        else:
            taps += [_Tap(f"{p}.resid1", f"{h}.post_attention_layernorm", "in", _rows),
                     _Tap(f"{p}.norm2", f"{h}.post_attention_layernorm", "out", _rows)]
        m = f"{h}.mlp"
        if sparse_block(c, layer):  # Mixtral's or Qwen's router: (logits, weights, indices)
            taps += [_Tap(f"{p}.mlp.scores", f"{m}.gate", "out", lambda o: np.asarray(o[0])),
                     _Tap(f"{p}.mlp.route", f"{m}.gate", "out", _onehot(c.n_experts)),
                     _Tap(f"{p}.mlp.out", m, "out", _rows)]
        else:
            taps += [_Tap(f"{p}.mlp.gate", f"{m}.gate_proj", "out", _rows),
                     _Tap(f"{p}.mlp.up", f"{m}.up_proj", "out", _rows),
                     _Tap(f"{p}.mlp.act", f"{m}.down_proj", "in", _rows),
                     _Tap(f"{p}.mlp.out", f"{m}.down_proj", "out", _rows)]
        taps.append(_Tap(f"{p}.resid2", h, "out", _rows))
    # Gemma 2 caps lm_head's output in Gemma2ForCausalLM.forward: the graph's logits_uncapped
    head = "logits" if c.final_softcap is None else "logits_uncapped"
    # (the capped logits are then the model's returned output, check_model's "logits")
    return [*taps, _Tap("final_norm", "model.norm", "out", _rows),
            _Tap(head, "lm_head", "out", _rows)]


def _mamba_taps(c: Any) -> list[_Tap]:
    r"""``MambaForCausalLM``: ``in_proj``'s output split into the graph's ``in_x`` (first
    :math:`E` channels) and ``in_z``, ``x_proj``'s into ``dt_low``, ``B``, ``C``
    (``split([R, N, N])``); ``conv_act`` is ``x_proj``'s input and ``scan`` ``out_proj``'s. The
    convolution before its SiLU and the time step :math:`\delta` before its bias are no
    module's output (``causal_conv1d_forward`` and ``mamba_scan_forward`` are functions of
    ``modeling_mamba.py``): :mod:`~nlaverify.interop.hf_capture` records them
    (``mamba[l].conv``, ``mamba[l].dt``)."""
    E, N, R = c.d_inner, c.ssm_state, c.dt_rank
    bounds = {"dt_low": (0, R), "B": (R, R + N), "C": (R + N, R + 2 * N)}
    taps = [_Tap("embed", "backbone.embeddings", "out", _rows),
            _Tap("x0", "backbone.embeddings", "out", _rows)]
    for layer in range(c.n_blocks):
        p, h = f"blocks.{layer}", f"backbone.layers.{layer}"
        q, m = f"{p}.mamba", f"{h}.mixer"
        taps += [_Tap(f"{p}.norm1", f"{h}.norm", "out", _rows),
                 _Tap(f"{q}.in_x", f"{m}.in_proj", "out", lambda a: _rows(a)[:, :E]),
                 _Tap(f"{q}.in_z", f"{m}.in_proj", "out", lambda a: _rows(a)[:, E:]),
                 _Tap(f"{q}.conv", None, "conv", _channels, layer, "mamba"),
                 _Tap(f"{q}.conv_act", f"{m}.x_proj", "in", _rows)]
        taps += [_Tap(f"{q}.{k}", f"{m}.x_proj", "out", lambda a, lo=lo, hi=hi: _rows(a)[:, lo:hi])
                 for k, (lo, hi) in bounds.items()]
        taps += [_Tap(f"{q}.dt", None, "dt", _channels, layer, "mamba"),
                 _Tap(f"{q}.scan", f"{m}.out_proj", "in", _rows),
                 _Tap(f"{q}.out", f"{m}.out_proj", "out", _rows),
                 _Tap(f"{p}.resid1", h, "out", _rows)]
    return [*taps, _Tap("final_norm", "backbone.norm_f", "out", _rows),
            _Tap("logits", "lm_head", "out", _rows)]


def _capture_name(t: _Tap) -> str:
    """The name :func:`~nlaverify.check.check_model` reads ``t`` by: a module path (``:input``
    for its first input) or a key of the intermediates
    :func:`~nlaverify.interop.hf_capture._hf_call` returns."""
    if t.path is None:
        return t.source  # attention[layer].query / key / value / output, mamba[layer].conv
    return t.path if t.where == "out" else f"{t.path}:input"
