r"""The table of every Hugging Face tensor and the nlaverify parameters it holds.

One :class:`_Entry` per HF state-dict tensor (canonical ``*ForCausalLM.state_dict()`` key,
shape) with the nlaverify parameters it holds and the two maps between them: the
transposes of ``nn.Linear``, GPT-2's fused QKV, the RoPE pairing permutation, Mixtral's
fused experts, Gemma's ``1 + w`` norms (and Gemma 2's four per block), Mamba's fused
``in_proj`` / ``x_proj`` and depthwise ``conv1d``, GPT-NeoX's per-head fused
``query_key_value``, StarCoder 2's and StableLM's biased LayerNorm blocks, RWKV's
``(1, 1, d)`` mixes (:mod:`~nlaverify.interop.weights_layout_rwkv`). Every convention
is stated in the
module docstring of :mod:`nlaverify.interop.weights`, which reads and writes state dicts with
this table.
"""

from __future__ import annotations

import numpy as np

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.config_moe import sparse_block
from nlaverify.errors import ArgumentError
from nlaverify.interop.hf_config import SUPPORTED, hf_config_dict
from nlaverify.interop.weights_layout_base import (  # noqa: F401 (re-exported)
    Shape,
    Transform,
    _copy,
    _Entry,
    _neox_qkv,
    _shape,
    _split_rows,
    _transpose,
    _unembed,
)
from nlaverify.interop.weights_layout_falcon import falcon_entries
from nlaverify.interop.weights_layout_mamba2 import mamba2_entries
from nlaverify.interop.weights_layout_mla import deepseek_v3_entries
from nlaverify.interop.weights_layout_moe import moe_entries
from nlaverify.interop.weights_layout_opt import opt_entries
from nlaverify.interop.weights_layout_rwkv import rwkv_entries


def rope_permutation(d_head: int) -> np.ndarray:
    r"""The per-head column permutation from HF's RoPE pairing to nlaverify's.

    HF rotates :math:`(x_i, x_{i+d_h/2})` by :math:`t\theta_i`, nlaverify
    :math:`(x_{2i}, x_{2i+1})`; so ``ours[..., j] = hf[..., perm[j]]`` with
    ``perm[2i] = i``, ``perm[2i+1] = i + d_h/2``, i.e. ``[0, d_h/2, 1, d_h/2 + 1, ...]``
    (and ``hf = ours[..., argsort(perm)]``).
    """
    if isinstance(d_head, bool) or not isinstance(d_head, int | np.integer) or d_head < 2 \
            or d_head % 2:
        raise ArgumentError(f"rope_permutation: argument 'd_head': expected an even integer "
                            f">= 2, got {d_head!r}")
    half = int(d_head) // 2
    return np.stack([np.arange(half), np.arange(half) + half], axis=1).reshape(-1)








def _plus_one(a: list[np.ndarray], offset: bool) -> list[np.ndarray]:
    return [a[0] + a[0].dtype.type(1) if offset else a[0]]


def _minus_one(a: list[np.ndarray], offset: bool) -> list[np.ndarray]:
    return [a[0] - a[0].dtype.type(1) if offset else a[0]]


def _columns(index: np.ndarray, transpose_in: bool, transpose_out: bool) -> Transform:
    """``x -> (x^T if transpose_in)[..., index]`` then ``^T if transpose_out``."""
    def f(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
        x = a[0].T if transpose_in else a[0]
        x = x[..., index]
        return [np.ascontiguousarray(x.T if transpose_out else x)]
    return f


def _then(f: Transform, g: Transform) -> Transform:
    """``g`` after ``f`` (the offset flag passed to both)."""
    return lambda a, offset: g(f(a, offset), offset)


def _head_perm(n_heads: int, d_head: int) -> np.ndarray:
    p = rope_permutation(d_head)
    return np.concatenate([h * d_head + p for h in range(n_heads)])


def _entries(config: TransformerConfig, model_type: str) -> list[_Entry]:
    """The mapping of every tensor of ``model_type``'s state dict (module docstring of
    :mod:`nlaverify.interop.weights`)."""
    if model_type not in SUPPORTED:
        raise ConfigError(f"argument 'model_type': expected one of {', '.join(SUPPORTED)}, "
                          f"got {model_type!r}")
    hf_config_dict(config, model_type)  # raises, naming the field, if HF cannot express it
    if model_type == "mamba":
        return _mamba_entries(config)
    if model_type in ("rwkv", "mamba2"):
        return (rwkv_entries if model_type == "rwkv" else mamba2_entries)(config)
    if model_type == "gpt_neox":
        return _neox_entries(config)
    if model_type == "gptj":
        return _gptj_entries(config)
    if model_type == "phi":
        return _phi_entries(config)
    if model_type in ("starcoder2", "stablelm", "cohere"):
        return _starcoder2_entries(config)
    if model_type == "phi3":
        return _phi3_entries(config)
    if model_type == "falcon":
        return falcon_entries(config)
    if model_type == "opt":
        return opt_entries(config)
    if model_type in ("deepseek_v3", "deepseek_v2"):
        return deepseek_v3_entries(config)
    return _gpt2_entries(config) if model_type == "gpt2" else _llama_entries(config, model_type)


def _gpt2_entries(c: TransformerConfig) -> list[_Entry]:
    d, m, V = c.d_model, c.d_mlp, c.vocab_size
    E = [_Entry(("transformer.wte.weight",), ((V, d),), ("embed.W_E",), _copy, _copy),
         _Entry(("transformer.wpe.weight",), ((c.context, d),), ("pos.W_P",), _copy, _copy)]
    split = [np.arange(i * d, (i + 1) * d) for i in range(3)]

    def qkv_to_ours(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
        return [np.ascontiguousarray(a[0][..., s]) for s in split]

    def qkv_to_hf(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
        return [np.concatenate(a, axis=-1)]

    for layer in range(c.n_blocks):
        h, p = f"transformer.h.{layer}.", f"blocks.{layer}."
        for hn, pn in (("ln_1", "norm1"), ("ln_2", "norm2")):
            E += [_Entry((f"{h}{hn}.weight",), ((d,),), (f"{p}{pn}.gamma",), _copy, _copy),
                  _Entry((f"{h}{hn}.bias",), ((d,),), (f"{p}{pn}.beta",), _copy, _copy)][
                      :2 if c.norm_bias else 1]  # Cohere's LayerNorm: no bias
        E += [_Entry((f"{h}attn.c_attn.weight",), ((d, 3 * d),),
                     tuple(f"{p}attn.{x}.W_{x.upper()}" for x in "qkv"), qkv_to_ours,
                     qkv_to_hf),
              _Entry((f"{h}attn.c_attn.bias",), ((3 * d,),),
                     tuple(f"{p}attn.{x}.b_{x.upper()}" for x in "qkv"), qkv_to_ours,
                     qkv_to_hf)]
        for hn, pn, shape in (("attn.c_proj", "attn.out.{}_O", (d, d)),
                              ("mlp.c_fc", "mlp.in.{}_in", (d, m)),
                              ("mlp.c_proj", "mlp.out.{}_out", (m, d))):
            E += [_Entry((f"{h}{hn}.weight",), (shape,), (p + pn.format("W"),), _copy, _copy),
                  _Entry((f"{h}{hn}.bias",), ((shape[1],),), (p + pn.format("b"),), _copy,
                         _copy)]
    E += [_Entry(("transformer.ln_f.weight",), ((d,),), ("final_norm.gamma",), _copy, _copy),
          _Entry(("transformer.ln_f.bias",), ((d,),), ("final_norm.beta",), _copy, _copy)]
    E += _unembed(c)
    return E




def _llama_entries(c: TransformerConfig, mt: str) -> list[_Entry]:
    d, V = c.d_model, c.vocab_size
    H, Hkv, dh = c.n_heads, c.n_kv_heads, c.d_head
    assert Hkv is not None and dh is not None
    gemma = mt in ("gemma", "gemma2", "gemma3_text")  # GemmaRMSNorm's gain 1 + w
    norm_in, norm_out = (_plus_one, _minus_one) if gemma else (_copy, _copy)
    E = [_Entry(("model.embed_tokens.weight",), ((V, d),), ("embed.W_E",), _copy, _copy)]
    for layer in range(c.n_blocks):
        h, p = f"model.layers.{layer}.", f"blocks.{layer}."
        a = f"{h}self_attn."
        for x, heads in (("q", H), ("k", Hkv)):
            perm = _head_perm(heads, dh)
            inv = np.argsort(perm)
            E.append(_Entry((f"{a}{x}_proj.weight",), ((heads * dh, d),),
                            (f"{p}attn.{x}.W_{x.upper()}",), _columns(perm, True, False),
                            _columns(inv, False, True)))
            if c.attn_bias:
                E.append(_Entry((f"{a}{x}_proj.bias",), ((heads * dh,),),
                                (f"{p}attn.{x}.b_{x.upper()}",), _columns(perm, False, False),
                                _columns(inv, False, False)))
            if c.qk_norm_joint:  # OLMo 2: one gain per column of the projection
                E.append(_Entry((f"{a}{x}_norm.weight",), ((heads * dh,),),
                                (f"{p}attn.{x}_norm.gamma",), _columns(perm, False, False),
                                _columns(inv, False, False)))
            elif c.qk_norm:  # per head (Qwen3; Gemma 3's with the gain 1 + w)
                E.append(_Entry((f"{a}{x}_norm.weight",), ((dh,),),
                                (f"{p}attn.{x}_norm.gamma",),
                                _then(norm_in, _columns(rope_permutation(dh), False, False)),
                                _then(_columns(np.argsort(rope_permutation(dh)), False, False),
                                      norm_out)))
        E.append(_Entry((f"{a}v_proj.weight",), ((Hkv * dh, d),), (f"{p}attn.v.W_V",),
                        _transpose, _transpose))
        if c.attn_bias:
            E.append(_Entry((f"{a}v_proj.bias",), ((Hkv * dh,),), (f"{p}attn.v.b_V",), _copy,
                            _copy))
        E.append(_Entry((f"{a}o_proj.weight",), ((d, H * dh),), (f"{p}attn.out.W_O",),
                        _transpose, _transpose))
        if c.out_bias:
            E.append(_Entry((f"{a}o_proj.bias",), ((d,),), (f"{p}attn.out.b_O",), _copy,
                            _copy))
        E += _llama_mlp(c, h, p)
        # post_attention_layernorm: the MLP's pre-norm (Llama), or the attention output's
        # norm where the block has post_norms (Gemma 2's sandwich, OLMo 2's output norms)
        if c.post_norms:
            norms = [("post_attention_layernorm", "post_norm1"),
                     ("post_feedforward_layernorm", "post_norm2")]
            if c.pre_norms:
                norms += [("input_layernorm", "norm1"), ("pre_feedforward_layernorm", "norm2")]
        else:
            norms = [("input_layernorm", "norm1"), ("post_attention_layernorm", "norm2")]
        E += [_Entry((f"{h}{hn}.weight",), ((d,),), (f"{p}{pn}.gamma",), norm_in, norm_out)
              for hn, pn in norms if c.norm_affine]  # OLMo's LayerNorms have no weight
    if c.norm_affine:
        E.append(_Entry(("model.norm.weight",), ((d,),), ("final_norm.gamma",), norm_in,
                        norm_out))
    E += _unembed(c)
    return E


def _llama_mlp(c: TransformerConfig, h: str, p: str) -> list[_Entry]:
    if sparse_block(c, int(p.split(".")[1])):  # p = blocks.{l}.
        return moe_entries(c, h, p)
    d, m = c.d_model, c.d_mlp
    out = []
    for hn, pn, shape in (("gate_proj", "gate.{}_gate", (m, d)), ("up_proj", "up.{}_up", (m, d)),
                          ("down_proj", "out.{}_down", (d, m))):
        out.append(_Entry((f"{h}mlp.{hn}.weight",), (shape,), (f"{p}mlp." + pn.format("W"),),
                          _transpose, _transpose))
        if c.mlp_bias:
            out.append(_Entry((f"{h}mlp.{hn}.bias",), ((shape[0],),),
                              (f"{p}mlp." + pn.format("b"),), _copy, _copy))
    return out




def _conv_to_ours(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
    return [np.ascontiguousarray(a[0][:, 0, :])]  # depthwise (E, 1, k) -> (E, k)


def _conv_to_hf(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
    return [np.ascontiguousarray(a[0][:, None, :])]


def _mamba_entries(c: TransformerConfig) -> list[_Entry]:
    r"""``MambaForCausalLM``: ``backbone.embeddings``, per layer ``norm`` and the mixer's
    ``in_proj`` (rows :math:`[0, E)` the convolved branch :math:`x`, :math:`[E, 2E)` the gate
    :math:`z`: ``MambaMixer.forward``'s ``chunk(2, dim=1)``), ``conv1d`` (depthwise ``(E, 1,
    k)``, PyTorch's cross-correlation: the graph's ``(E, k)`` taps as they are), ``x_proj``
    (rows :math:`\Delta_{low}`, B, C: ``torch.split([R, N, N])``), ``dt_proj`` (weight and the
    bias inside the softplus), ``A_log`` and ``D`` as they are; ``backbone.norm_f``."""
    d, V, E, N, R = c.d_model, c.vocab_size, c.d_inner, c.ssm_state, c.dt_rank
    out = [_Entry(("backbone.embeddings.weight",), ((V, d),), ("embed.W_E",), _copy, _copy)]
    for layer in range(c.n_blocks):
        h, p = f"backbone.layers.{layer}.", f"blocks.{layer}."
        m, q = f"{h}mixer.", f"{p}mamba."
        out += [_Entry((f"{h}norm.weight",), ((d,),), (f"{p}norm1.gamma",), _copy, _copy),
                _Entry((f"{m}in_proj.weight",), ((2 * E, d),), (f"{q}in_x.W", f"{q}in_z.W"),
                       *_split_rows((E, E))),
                _Entry((f"{m}conv1d.weight",), ((E, 1, c.ssm_conv),), (f"{q}conv.w",),
                       _conv_to_ours, _conv_to_hf),
                _Entry((f"{m}conv1d.bias",), ((E,),), (f"{q}conv.b",), _copy, _copy),
                _Entry((f"{m}x_proj.weight",), ((R + 2 * N, E),),
                       (f"{q}dt_low.W", f"{q}B.W", f"{q}C.W"), *_split_rows((R, N, N))),
                _Entry((f"{m}dt_proj.weight",), ((E, R),), (f"{q}dt.W",), _transpose,
                       _transpose),
                _Entry((f"{m}dt_proj.bias",), ((E,),), (f"{q}dt.b",), _copy, _copy),
                _Entry((f"{m}A_log",), ((E, N),), (f"{q}A_log",), _copy, _copy),
                _Entry((f"{m}D",), ((E,),), (f"{q}D",), _copy, _copy),
                _Entry((f"{m}out_proj.weight",), ((d, E),), (f"{q}out.W",), _transpose,
                       _transpose)]
    out.append(_Entry(("backbone.norm_f.weight",), ((d,),), ("final_norm.gamma",), _copy,
                      _copy))
    return out + _unembed(c)




def _neox_entries(c: TransformerConfig) -> list[_Entry]:
    r"""``GPTNeoXForCausalLM``: ``gpt_neox.embed_in``, per layer the two LayerNorms
    (``input_layernorm`` = ``norm1``, ``post_attention_layernorm`` = ``norm2``, weight and
    bias), ``attention.query_key_value`` (:func:`_neox_qkv`; RoPE's half pairing is the
    config's ``rope_pairing``, so nothing is permuted), ``attention.dense``,
    ``mlp.dense_h_to_4h`` / ``dense_4h_to_h`` (Linear, transposed, biased),
    ``gpt_neox.final_layer_norm``, ``lm_head`` (released checkpoints: ``embed_out``)."""
    d, m, V, H = c.d_model, c.d_mlp, c.vocab_size, c.n_heads
    dh = c.d_head
    assert dh is not None
    E = [_Entry(("gpt_neox.embed_in.weight",), ((V, d),), ("embed.W_E",), _copy, _copy)]
    for layer in range(c.n_blocks):
        h, p = f"gpt_neox.layers.{layer}.", f"blocks.{layer}."
        for hn, pn in (("input_layernorm", "norm1"), ("post_attention_layernorm", "norm2")):
            E += [_Entry((f"{h}{hn}.weight",), ((d,),), (f"{p}{pn}.gamma",), _copy, _copy),
                  _Entry((f"{h}{hn}.bias",), ((d,),), (f"{p}{pn}.beta",), _copy, _copy)][
                      :2 if c.norm_bias else 1]  # Cohere's LayerNorm: no bias
        E.append(_Entry((f"{h}attention.query_key_value.weight",), ((3 * H * dh, d),),
                        tuple(f"{p}attn.{x}.W_{x.upper()}" for x in "qkv"),
                        *_neox_qkv(H, dh, True)))
        if c.attn_bias:
            E.append(_Entry((f"{h}attention.query_key_value.bias",), ((3 * H * dh,),),
                            tuple(f"{p}attn.{x}.b_{x.upper()}" for x in "qkv"),
                            *_neox_qkv(H, dh, False)))
        for hn, pn, shape, bias in (("attention.dense", "attn.out.{}_O", (d, H * dh), c.out_bias),
                                    ("mlp.dense_h_to_4h", "mlp.in.{}_in", (m, d), True),
                                    ("mlp.dense_4h_to_h", "mlp.out.{}_out", (d, m), True)):
            E.append(_Entry((f"{h}{hn}.weight",), (shape,), (p + pn.format("W"),), _transpose,
                            _transpose))
            if bias:
                E.append(_Entry((f"{h}{hn}.bias",), ((shape[0],),), (p + pn.format("b"),),
                                _copy, _copy))
    E += [_Entry(("gpt_neox.final_layer_norm.weight",), ((d,),), ("final_norm.gamma",), _copy,
                 _copy),
          _Entry(("gpt_neox.final_layer_norm.bias",), ((d,),), ("final_norm.beta",), _copy,
                 _copy)]
    return E + _unembed(c)


def _gptj_entries(c: TransformerConfig) -> list[_Entry]:
    r"""``GPTJForCausalLM``: ``transformer.wte``, per layer the one LayerNorm ``ln_1``
    (``norm1``, shared by attention and MLP), ``attn.{q,k,v,out}_proj`` (Linear, transposed,
    no bias; RoPE's interleaved pairing is nlaverify's own: nothing permuted), ``mlp.fc_in`` /
    ``fc_out`` (biased), ``transformer.ln_f``, ``lm_head`` weight and bias."""
    d, m, V = c.d_model, c.d_mlp, c.vocab_size
    E = [_Entry(("transformer.wte.weight",), ((V, d),), ("embed.W_E",), _copy, _copy)]
    for layer in range(c.n_blocks):
        h, p = f"transformer.h.{layer}.", f"blocks.{layer}."
        E += [_Entry((f"{h}ln_1.weight",), ((d,),), (f"{p}norm1.gamma",), _copy, _copy),
              _Entry((f"{h}ln_1.bias",), ((d,),), (f"{p}norm1.beta",), _copy, _copy)]
        E += [_Entry((f"{h}attn.{x}_proj.weight",), ((d, d),), (f"{p}attn.{x}.W_{x.upper()}",),
                     _transpose, _transpose) for x in "qkv"]
        E.append(_Entry((f"{h}attn.out_proj.weight",), ((d, d),), (f"{p}attn.out.W_O",),
                        _transpose, _transpose))
        for hn, pn, shape in (("mlp.fc_in", "mlp.in.{}_in", (m, d)),
                              ("mlp.fc_out", "mlp.out.{}_out", (d, m))):
            E += [_Entry((f"{h}{hn}.weight",), (shape,), (p + pn.format("W"),), _transpose,
                         _transpose),
                  _Entry((f"{h}{hn}.bias",), ((shape[0],),), (p + pn.format("b"),), _copy,
                         _copy)]
    E += [_Entry(("transformer.ln_f.weight",), ((d,),), ("final_norm.gamma",), _copy, _copy),
          _Entry(("transformer.ln_f.bias",), ((d,),), ("final_norm.beta",), _copy, _copy)]
    return E + _unembed(c)


def _phi_entries(c: TransformerConfig) -> list[_Entry]:
    r"""``PhiForCausalLM``: ``model.embed_tokens``, per layer the one ``input_layernorm``
    (``norm1``), ``self_attn.{q,k,v}_proj`` and ``dense`` (Linear, transposed, biased; RoPE's
    half pairing is the config's ``rope_pairing``: nothing permuted), ``mlp.fc1`` / ``fc2``,
    ``model.final_layernorm``, ``lm_head`` weight and bias."""
    d, m, V, dh = c.d_model, c.d_mlp, c.vocab_size, c.d_head
    H, Hkv = c.n_heads, c.n_kv_heads
    assert dh is not None and Hkv is not None
    E = [_Entry(("model.embed_tokens.weight",), ((V, d),), ("embed.W_E",), _copy, _copy)]
    for layer in range(c.n_blocks):
        h, p = f"model.layers.{layer}.", f"blocks.{layer}."
        rows = (("self_attn.q_proj", "attn.q.{}_Q", (H * dh, d)),
                ("self_attn.k_proj", "attn.k.{}_K", (Hkv * dh, d)),
                ("self_attn.v_proj", "attn.v.{}_V", (Hkv * dh, d)),
                ("self_attn.dense", "attn.out.{}_O", (d, H * dh)),
                ("mlp.fc1", "mlp.in.{}_in", (m, d)), ("mlp.fc2", "mlp.out.{}_out", (d, m)))
        E += [_Entry((f"{h}input_layernorm.weight",), ((d,),), (f"{p}norm1.gamma",), _copy,
                     _copy),
              _Entry((f"{h}input_layernorm.bias",), ((d,),), (f"{p}norm1.beta",), _copy, _copy)]
        for hn, pn, shape in rows:
            E += [_Entry((f"{h}{hn}.weight",), (shape,), (p + pn.format("W"),), _transpose,
                         _transpose),
                  _Entry((f"{h}{hn}.bias",), ((shape[0],),), (p + pn.format("b"),), _copy,
                         _copy)]
    E += [_Entry(("model.final_layernorm.weight",), ((d,),), ("final_norm.gamma",), _copy,
                 _copy),
          _Entry(("model.final_layernorm.bias",), ((d,),), ("final_norm.beta",), _copy, _copy)]
    return E + _unembed(c)


def _starcoder2_entries(c: TransformerConfig) -> list[_Entry]:
    r"""``Starcoder2ForCausalLM``, ``StableLmForCausalLM`` and ``CohereForCausalLM`` (its
    LayerNorms without bias, RoPE interleaved): ``model.embed_tokens``, per
    layer the LayerNorms ``input_layernorm`` (``norm1``) and, unless the block is parallel,
    ``post_attention_layernorm`` (``norm2``), weight and bias, ``self_attn.{q,k,v,o}_proj``
    (Linear, transposed, biased as the config says; RoPE's half pairing is the config's
    ``rope_pairing``: nothing permuted), the MLP (StarCoder 2's non-gated ``mlp.c_fc`` /
    ``c_proj``, StableLM's gated ``gate_proj`` / ``up_proj`` / ``down_proj``),
    ``model.norm``; ``lm_head`` unless tied."""
    d, m, V, dh = c.d_model, c.d_mlp, c.vocab_size, c.d_head
    H, Hkv = c.n_heads, c.n_kv_heads
    assert dh is not None and Hkv is not None
    E = [_Entry(("model.embed_tokens.weight",), ((V, d),), ("embed.W_E",), _copy, _copy)]
    for layer in range(c.n_blocks):
        h, p = f"model.layers.{layer}.", f"blocks.{layer}."
        norms = (("input_layernorm", "norm1"),) + (
            () if c.parallel_residual else (("post_attention_layernorm", "norm2"),))
        for hn, pn in norms:
            E += [_Entry((f"{h}{hn}.weight",), ((d,),), (f"{p}{pn}.gamma",), _copy, _copy),
                  _Entry((f"{h}{hn}.bias",), ((d,),), (f"{p}{pn}.beta",), _copy, _copy)][
                      :2 if c.norm_bias else 1]  # Cohere's LayerNorm: no bias
        gated = c.mlp in ("swiglu", "geglu")
        if gated:
            E += _llama_mlp(c, h, p)
        rows = (("self_attn.q_proj", "attn.q.{}_Q", (H * dh, d), c.attn_bias),
                ("self_attn.k_proj", "attn.k.{}_K", (Hkv * dh, d), c.attn_bias),
                ("self_attn.v_proj", "attn.v.{}_V", (Hkv * dh, d), c.attn_bias),
                ("self_attn.o_proj", "attn.out.{}_O", (d, H * dh), c.out_bias))
        if not gated:
            rows += (("mlp.c_fc", "mlp.in.{}_in", (m, d), c.mlp_bias),
                     ("mlp.c_proj", "mlp.out.{}_out", (d, m), c.mlp_bias))
        for hn, pn, shape, bias in rows:
            E.append(_Entry((f"{h}{hn}.weight",), (shape,), (p + pn.format("W"),), _transpose,
                            _transpose))
            if bias:
                E.append(_Entry((f"{h}{hn}.bias",), ((shape[0],),), (p + pn.format("b"),),
                                _copy, _copy))
    E += [_Entry(("model.norm.weight",), ((d,),), ("final_norm.gamma",), _copy, _copy),
          _Entry(("model.norm.bias",), ((d,),), ("final_norm.beta",), _copy, _copy)][
              :2 if c.norm_bias else 1]
    return E + _unembed(c)


def _phi3_entries(c: TransformerConfig) -> list[_Entry]:
    r"""``Phi3ForCausalLM``: ``model.embed_tokens``, per layer ``input_layernorm`` (``norm1``),
    the fused ``self_attn.qkv_proj`` (rows :math:`[Q \mid K \mid V]`: :math:`h d_h`, then
    :math:`h_{kv} d_h` twice; the half pairing is the config's, nothing permuted),
    ``o_proj``, ``post_attention_layernorm`` (``norm2``), the fused ``mlp.gate_up_proj``
    (rows gate then up, ``chunk(2)``) and ``down_proj``, ``model.norm``; ``lm_head`` unless
    tied. No biases."""
    d, m, V, dh = c.d_model, c.d_mlp, c.vocab_size, c.d_head
    H, Hkv = c.n_heads, c.n_kv_heads
    assert dh is not None and Hkv is not None
    E = [_Entry(("model.embed_tokens.weight",), ((V, d),), ("embed.W_E",), _copy, _copy)]
    for layer in range(c.n_blocks):
        h, p = f"model.layers.{layer}.", f"blocks.{layer}."
        E += [_Entry((f"{h}input_layernorm.weight",), ((d,),), (f"{p}norm1.gamma",), _copy,
                     _copy),
              _Entry((f"{h}self_attn.qkv_proj.weight",), (((H + 2 * Hkv) * dh, d),),
                     tuple(f"{p}attn.{x}.W_{x.upper()}" for x in "qkv"),
                     *_split_rows((H * dh, Hkv * dh, Hkv * dh))),
              _Entry((f"{h}self_attn.o_proj.weight",), ((d, H * dh),), (f"{p}attn.out.W_O",),
                     _transpose, _transpose),
              _Entry((f"{h}post_attention_layernorm.weight",), ((d,),), (f"{p}norm2.gamma",),
                     _copy, _copy),
              _Entry((f"{h}mlp.gate_up_proj.weight",), ((2 * m, d),),
                     (f"{p}mlp.gate.W_gate", f"{p}mlp.up.W_up"), *_split_rows((m, m))),
              _Entry((f"{h}mlp.down_proj.weight",), ((d, m),), (f"{p}mlp.out.W_down",),
                     _transpose, _transpose)]
    E.append(_Entry(("model.norm.weight",), ((d,),), ("final_norm.gamma",), _copy, _copy))
    return E + _unembed(c)
