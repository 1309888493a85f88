r"""Hugging Face state dicts and ``safetensors`` checkpoints <-> nlaverify parameters.

Every convention of the weights' side, in one place (the configuration side is
:mod:`nlaverify.interop.hf_config`). Checked against ``transformers`` 5.24: the keys and
shapes below are those of ``AutoModelForCausalLM.from_config(...).state_dict()``.

nlaverify multiplies rows by weights, :math:`y = xW` with :math:`W \in \mathbb R^{d_{in}\times
d_{out}}` (``nlaverify.graph.build``). Hence:

* **Transposes.** ``torch.nn.Linear`` stores :math:`W^\top` (``(out, in)``): every Linear
  weight is transposed (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``, ``gate_proj``,
  ``up_proj``, ``down_proj``, ``lm_head``, the Mixtral router ``mlp.gate``). GPT-2's ``Conv1D``
  already stores ``(in, out)``: copied as is. Embeddings (``(V, d)``) and learned positions
  are copied; an untied ``lm_head.weight`` ``(V, d)`` becomes ``unembed.W_U`` ``(d, V)``.
* **GPT-2 fused QKV.** ``attn.c_attn.weight`` ``(d, 3d)`` and ``.bias`` ``(3d,)`` are
  :math:`[W_Q\,|\,W_K\,|\,W_V]` by columns (``GPT2Attention``: ``split(split_size, dim=2)``).
* **RoPE pairing.** nlaverify rotates the pairs :math:`(x_{2i}, x_{2i+1})` (RoFormer), HF the
  pairs :math:`(x_i, x_{i+d_h/2})` (``rotate_half``), both with :math:`\theta_i =
  b^{-2i/d_h}`. Per head, nlaverify's column :math:`j` is HF's column ``perm[j]``
  (:func:`rope_permutation`, ``perm = [0, d_h/2, 1, d_h/2+1, ...]``), applied to the query
  and key weights, their biases and the Qwen3 ``q_norm``/``k_norm`` gains. A common
  permutation of queries and keys leaves :math:`q_t^\top k_s` and so the attention unchanged;
  values and outputs are not permuted.
* **Mixtral experts.** ``transformers`` 5 stores each layer's experts fused:
  ``mlp.experts.gate_up_proj`` ``(E, 2m, d)`` (rows :math:`[0, m)` the gate :math:`w_1`,
  :math:`[m, 2m)` the up projection :math:`w_3`; ``MixtralExperts.forward`` ``chunk(2)``) and
  ``mlp.experts.down_proj`` ``(E, d, m)``; nlaverify's ``W1``, ``W3`` are ``(E, d, m)``, ``W2``
  ``(E, m, d)``. Published checkpoints use the per-expert layout
  ``block_sparse_moe.experts.{e}.w1/w2/w3.weight`` (``(m, d)``, ``(d, m)``, ``(m, d)``) and
  ``block_sparse_moe.gate.weight``, which :func:`params_from_hf` accepts too (as
  ``transformers``' ``conversion_mapping`` does); :func:`params_to_hf` writes the fused layout.
* **Gemma norm offset.** ``GemmaRMSNorm`` multiplies by :math:`1 + w`: nlaverify's
  :math:`\gamma = 1 + w` (final norm and both block norms). The round trip
  :math:`\gamma \to \gamma - 1 \to 1 + (\gamma - 1)` is exact for :math:`\gamma \in [1/2, 2]`
  (Sterbenz), within one rounding otherwise. With ``gradients=True`` the offset is not
  applied (:math:`\partial L/\partial w = \partial L/\partial\gamma`). The embedding scaling
  :math:`\sqrt d` is a config option (``embed_scale``), not a weight.
* **Tied embeddings.** ``model.state_dict()`` lists ``lm_head.weight`` even when it is the
  embedding: :func:`params_to_hf` writes it, :func:`params_from_hf` accepts it (or its
  absence) when it equals the embedding exactly. Untied, it is required.
* **Biases.** Only where the config has them (Qwen2: ``q/k/v_proj.bias``, no ``o_proj.bias``).
* **Prefixes.** The keys of ``*ForCausalLM.state_dict()`` carry ``model.`` (``transformer.`` for
  GPT-2) except ``lm_head.weight``; the base model's state dict and the released GPT-2
  checkpoint do not. :func:`params_from_hf` accepts either (not both for one tensor).
* **Buffers.** Non-persistent buffers (``rotary_emb.inv_freq``, Gemma's ``embed_scale``) are
  not in state dicts. GPT-2 checkpoints may hold the causal mask ``h.{l}.attn.bias``
  ``(1, 1, n_positions, n_positions)`` (and ``attn.masked_bias``): accepted when it is the
  lower-triangular mask, and carries no parameter.

Validation is complete before anything is returned or written: unknown, missing and
mis-shaped keys raise an error naming the key, the expected and the actual shape.

Checkpoints are read and written with ``safetensors.numpy``; ``safetensors`` 0.8 maps
``BF16`` to NumPy's ``"bfloat16"``, which exists once ``ml_dtypes`` (which JAX brings) is
imported: this module imports it before every read and write. Only safetensors is read: a
directory holding only ``pytorch_model.bin`` (or another format) is refused, naming the file.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.errors import ArgumentError, DTypeError, ShapeError, UnknownNameError
from nlaverify.interop.hf_config import SUPPORTED, HFConfig, load_hf_config

Shape = tuple[int, ...]
Transform = Callable[[list[np.ndarray], bool], list[np.ndarray]]


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


@dataclass(frozen=True)
class _Entry:
    """HF tensors ``hf`` (canonical state-dict keys, shapes ``hf_shapes``) <-> nlaverify
    parameters ``ours``; ``to_ours`` / ``to_hf`` map the lists (the flag: apply offsets)."""

    hf: tuple[str, ...]
    hf_shapes: tuple[Shape, ...]
    ours: tuple[str, ...]
    to_ours: Transform
    to_hf: Transform


def _copy(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
    return [a[0]]


def _transpose(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
    return [np.ascontiguousarray(a[0].T)]


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


def _head_perm(n_heads: int, d_head: int) -> np.ndarray:
    p = rope_permutation(d_head)
    return np.concatenate([h * d_head + p for h in range(n_heads)])


def _entries(config: TransformerConfig, model_type: str) -> list[_Entry]:
    """The mapping of every tensor of ``model_type``'s state dict (module docstring)."""
    if model_type not in SUPPORTED:
        raise ConfigError(f"argument 'model_type': expected one of {', '.join(SUPPORTED)}, "
                          f"got {model_type!r}")
    from nlaverify.interop.hf_config import hf_config_dict

    hf_config_dict(config, model_type)  # raises, naming the field, if HF cannot express it
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
                  _Entry((f"{h}{hn}.bias",), ((d,),), (f"{p}{pn}.beta",), _copy, _copy)]
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


def _unembed(c: TransformerConfig) -> list[_Entry]:
    if c.tied_embeddings:
        return []  # lm_head.weight: see _TIED
    return [_Entry(("lm_head.weight",), ((c.vocab_size, c.d_model),), ("unembed.W_U",),
                   _transpose, _transpose)]


def _llama_entries(c: TransformerConfig, mt: str) -> list[_Entry]:
    d, V = c.d_model, c.vocab_size
    H, Hkv, dh = c.n_heads, c.n_kv_heads, c.d_head
    assert Hkv is not None and dh is not None
    norm_in, norm_out = (_plus_one, _minus_one) if mt == "gemma" else (_copy, _copy)
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
            if c.qk_norm:
                E.append(_Entry((f"{a}{x}_norm.weight",), ((dh,),),
                                (f"{p}attn.{x}_norm.gamma",),
                                _columns(rope_permutation(dh), False, False),
                                _columns(np.argsort(rope_permutation(dh)), False, False)))
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
        E += [_Entry((f"{h}input_layernorm.weight",), ((d,),), (f"{p}norm1.gamma",), norm_in,
                     norm_out),
              _Entry((f"{h}post_attention_layernorm.weight",), ((d,),), (f"{p}norm2.gamma",),
                     norm_in, norm_out)]
    E.append(_Entry(("model.norm.weight",), ((d,),), ("final_norm.gamma",), norm_in,
                    norm_out))
    E += _unembed(c)
    return E


def _llama_mlp(c: TransformerConfig, h: str, p: str) -> list[_Entry]:
    d, m = c.d_model, c.d_mlp
    if c.n_experts:
        n_e = c.n_experts

        def gate_up_to_ours(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
            g = a[0].transpose(0, 2, 1)  # (E, d, 2m)
            return [np.ascontiguousarray(g[..., :m]), np.ascontiguousarray(g[..., m:])]

        def gate_up_to_hf(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
            return [np.ascontiguousarray(np.concatenate(a, axis=-1).transpose(0, 2, 1))]

        def swap(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
            return [np.ascontiguousarray(a[0].transpose(0, 2, 1))]

        return [_Entry((f"{h}mlp.gate.weight",), ((n_e, d),), (f"{p}mlp.W_router",),
                       _transpose, _transpose),
                _Entry((f"{h}mlp.experts.gate_up_proj",), ((n_e, 2 * m, d),),
                       (f"{p}mlp.W1", f"{p}mlp.W3"), gate_up_to_ours, gate_up_to_hf),
                _Entry((f"{h}mlp.experts.down_proj",), ((n_e, d, m),), (f"{p}mlp.W2",), swap,
                       swap)]
    out = []
    for hn, pn, shape in (("gate_proj", "gate.{}_gate", (m, d)), ("up_proj", "up.{}_up", (m, d)),
                          ("down_proj", "out.{}_down", (d, m))):
        out.append(_Entry((f"{h}mlp.{hn}.weight",), (shape,), (f"{p}mlp." + pn.format("W"),),
                          _transpose, _transpose))
        if c.mlp_bias:
            out.append(_Entry((f"{h}mlp.{hn}.bias",), ((shape[0],),),
                              (f"{p}mlp." + pn.format("b"),), _copy, _copy))
    return out


_PREFIX = {"gpt2": "transformer."}
_MIXTRAL_LEGACY = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.w([123])\.weight$")


def _shape(x: Any) -> Shape:
    return tuple(int(s) for s in np.shape(x))


def _resolve(hf: HFConfig | tuple[TransformerConfig, str], fn: str
             ) -> tuple[TransformerConfig, str]:
    if isinstance(hf, HFConfig):
        return hf.config, hf.model_type
    if isinstance(hf, tuple) and len(hf) == 2 and isinstance(hf[0], TransformerConfig) \
            and isinstance(hf[1], str):
        return hf
    raise ArgumentError(f"{fn}: argument 'hf': expected an HFConfig or a (TransformerConfig, "
                        f"model_type) pair, got {type(hf).__name__}")


def _canonical_keys(state: Mapping[str, Any], mt: str, fn: str
                    ) -> tuple[dict[str, Any], dict[str, str]]:
    """Keys as ``*ForCausalLM.state_dict()`` has them: the base-model prefix added where
    missing, Mixtral's ``block_sparse_moe`` renamed ``mlp`` (a duplicate is an error); and
    the map from each canonical key back to the user's spelling (for error messages)."""
    prefix = _PREFIX.get(mt, "model.")
    out: dict[str, Any] = {}
    user: dict[str, str] = {}
    for key, value in state.items():
        if not isinstance(key, str):
            raise UnknownNameError(f"{fn}: key {key!r}: expected a string")
        k = key if key.startswith(prefix) or key == "lm_head.weight" else prefix + key
        if mt == "mixtral":
            k = k.replace(".block_sparse_moe.", ".mlp.")
        if k in out:
            raise UnknownNameError(f"{fn}: key {key!r}: the same tensor is given twice (as "
                                   f"{k!r} with and without the {prefix!r} prefix or in two "
                                   "layouts)")
        out[k] = value
        user[k] = key
    return out, user


def _spelled(key: str, user: Mapping[str, str], mt: str) -> str:
    """A missing canonical ``key`` as the user's state dict would spell it: without the
    base-model prefix and with ``block_sparse_moe`` if the given keys are so written."""
    given = list(user.values())
    prefix = _PREFIX.get(mt, "model.")
    if given and key.startswith(prefix) and not any(u.startswith(prefix) for u in given):
        key = key[len(prefix):]
    if mt == "mixtral" and any(".block_sparse_moe." in u for u in given):
        key = key.replace(".mlp.", ".block_sparse_moe.")
    return key


def _fuse_mixtral_experts(state: dict[str, Any], c: TransformerConfig, fn: str,
                          user: Mapping[str, str]) -> None:
    """Per-expert ``experts.{e}.w1/w2/w3.weight`` -> the fused ``gate_up_proj`` /
    ``down_proj`` of transformers 5 (in place; every key and shape checked)."""
    groups: dict[int, dict[tuple[int, str], str]] = {}
    for k in state:
        mt = _MIXTRAL_LEGACY.match(k)
        if mt:
            groups.setdefault(int(mt.group(1)), {})[(int(mt.group(2)), mt.group(3))] = k
    d, m, n_e = c.d_model, c.d_mlp, c.n_experts
    want = {"1": (m, d), "2": (d, m), "3": (m, d)}
    for layer, found in sorted(groups.items()):
        base = f"model.layers.{layer}.mlp.experts."
        if layer >= c.n_blocks:
            k = user.get(found[min(found)], found[min(found)])
            raise UnknownNameError(f"{fn}: unknown key {k!r} (the config has n_blocks="
                                   f"{c.n_blocks})")
        for fused in ("gate_up_proj", "down_proj"):
            if base + fused in state:
                raise UnknownNameError(f"{fn}: key {user.get(base + fused)!r}: layer {layer} "
                                       "gives its "
                                       "experts both fused and per expert")
        for (e, w), k in sorted(found.items()):
            if e >= n_e:
                raise UnknownNameError(f"{fn}: unknown key {user.get(k, k)!r} (the config has "
                                       f"n_experts={n_e})")
            if _shape(state[k]) != want[w]:
                raise ShapeError(f"{fn}: key {user.get(k, k)!r}: expected shape {want[w]}, got "
                                 f"{_shape(state[k])}")
        for e in range(n_e):
            for w in "123":
                if (e, w) not in found:
                    key = _spelled(f"{base}{e}.w{w}.weight", user, "mixtral")
                    raise UnknownNameError(f"{fn}: missing key {key!r}")
        arr = {w: np.stack([np.asarray(state.pop(found[(e, w)])) for e in range(n_e)])
               for w in "123"}
        state[base + "gate_up_proj"] = np.concatenate([arr["1"], arr["3"]], axis=1)
        state[base + "down_proj"] = arr["2"]


def _gpt2_mask(state: dict[str, Any], c: TransformerConfig, fn: str,
               user: Mapping[str, str]) -> None:
    """Remove (after checking) GPT-2's legacy causal-mask buffers ``h.{l}.attn.bias`` (any
    dtype: transformers 4.x saved it as bool or uint8) and ``attn.masked_bias``: they hold
    no parameter."""
    for layer in range(c.n_blocks):
        k = f"transformer.h.{layer}.attn.bias"
        if k in state:
            v = state[k]
            if hasattr(v, "detach"):
                v = v.detach().cpu().numpy()
            a = np.asarray(v)
            want = (1, 1, c.context, c.context)
            if a.shape != want:
                raise ShapeError(f"{fn}: key {user[k]!r} (GPT-2's causal-mask buffer): expected "
                                 "shape "
                                 f"{want}, got {a.shape}")
            if not np.array_equal(a[0, 0].astype(bool), np.tri(c.context, dtype=bool)):
                raise ArgumentError(f"{fn}: key {user[k]!r}: expected GPT-2's lower-triangular "
                                    "causal mask")
            del state[k]
        k = f"transformer.h.{layer}.attn.masked_bias"
        if k in state:
            if np.shape(state[k]) != ():
                raise ShapeError(f"{fn}: key {user[k]!r}: expected a scalar buffer, got shape "
                                 f"{np.shape(state[k])}")
            del state[k]


def params_from_hf(hf: HFConfig | tuple[TransformerConfig, str],
                   state: Mapping[str, Any], *, dtype: Any = None) -> dict[str, np.ndarray]:
    """nlaverify parameters (the ``param`` nodes of ``build_transformer(config)``) from a
    Hugging Face state dict or checkpoint (arrays of any kind NumPy converts: NumPy,
    ``ml_dtypes.bfloat16``, CPU torch tensors via ``.numpy()``).

    Every convention is in the module docstring. ``dtype=None`` keeps each tensor's dtype
    (the Gemma offset :math:`1 + w` is then rounded to it); a ``dtype`` (e.g.
    ``np.float64``, what HF's ``from_pretrained(dtype=torch.float64)`` computes in) casts
    every tensor first, so :math:`1 + w` of a bfloat16/float32 checkpoint is exact in
    float64. Torch tensors are copied; a NumPy array that needs no transform (an embedding,
    a norm gain) is returned as given. Error messages name the keys as ``state`` spells them.

    Raises:
        UnknownNameError: an unknown or missing key (named).
        ArgumentError: a ``lm_head.weight`` that differs from the embedding under tied
            embeddings; a GPT-2 causal-mask buffer that is not lower-triangular.
        ShapeError: a tensor of the wrong shape, naming the key, the expected and actual
            shape. Nothing is returned unless every tensor is valid.
    """
    fn = "params_from_hf"
    config, mt = _resolve(hf, fn)
    if not isinstance(state, Mapping):
        raise ArgumentError(f"{fn}: argument 'state': expected a mapping of names to arrays, "
                            f"got {type(state).__name__}")
    entries = _entries(config, mt)
    cast = None if dtype is None else np.dtype(dtype)
    if cast is not None and cast.kind != "f":
        raise DTypeError(f"{fn}: argument 'dtype': expected a floating dtype, got {cast}")
    st, user = _canonical_keys(state, mt, fn)
    if mt == "gpt2":
        _gpt2_mask(st, config, fn, user)  # boolean/uint8 buffers: before the dtype check
    st = {k: _to_numpy(v, user[k], fn) for k, v in st.items()}
    if cast is not None:
        st = {k: v.astype(cast) for k, v in st.items()}
    if mt == "mixtral":
        _fuse_mixtral_experts(st, config, fn, user)
    embed_key = "transformer.wte.weight" if mt == "gpt2" else "model.embed_tokens.weight"
    known = {k for e in entries for k in e.hf}
    tied_head = config.tied_embeddings and "lm_head.weight" in st
    for k in st:
        if k not in known and not (tied_head and k == "lm_head.weight"):
            raise UnknownNameError(f"{fn}: unknown key {user.get(k, k)!r} for {mt} with this "
                                   "config" + _closest(k, known))
    for e in entries:
        for k, want in zip(e.hf, e.hf_shapes, strict=True):
            if k not in st:
                raise UnknownNameError(f"{fn}: missing key {_spelled(k, user, mt)!r} "
                                       f"(expected shape {want})")
            if _shape(st[k]) != want:
                raise ShapeError(f"{fn}: key {user.get(k, k)!r}: expected shape {want}, got "
                                 f"{_shape(st[k])}")
    if tied_head:
        head, emb = st["lm_head.weight"], st[embed_key]
        if head.shape != emb.shape or not np.array_equal(head, emb):
            raise ArgumentError(f"{fn}: key 'lm_head.weight': the config ties the embeddings"
                                f" but lm_head.weight differs from {user[embed_key]!r}")
    out: dict[str, np.ndarray] = {}
    for e in entries:
        for name, arr in zip(e.ours, e.to_ours([st[k] for k in e.hf], True), strict=True):
            out[name] = arr
    _check_against_graph(config, out, fn)
    return out


def _to_numpy(v: Any, key: str, fn: str) -> np.ndarray:
    if hasattr(v, "detach") and hasattr(v, "numpy"):  # a torch tensor, without importing torch
        # copied: an array sharing memory with a live model's parameter would change with it
        v = v.detach().cpu()
        if str(v.dtype) == "torch.bfloat16":  # NumPy has no bfloat16: reinterpret the bits
            import ml_dtypes
            import torch

            return v.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
        v = v.numpy().copy()
    arr = np.asarray(v)
    if arr.dtype.kind not in "fV" or (arr.dtype.kind == "V" and "bfloat16" not in str(
            arr.dtype)):
        raise DTypeError(f"{fn}: key {key!r}: expected a floating dtype, got {arr.dtype}")
    return arr


def _closest(k: str, known: set[str]) -> str:
    import difflib

    close = difflib.get_close_matches(k, sorted(known), n=2)
    return f" (did you mean {', '.join(map(repr, close))}?)" if close else ""


def _check_against_graph(config: TransformerConfig, params: Mapping[str, np.ndarray],
                         fn: str) -> None:
    """The mapped parameters are exactly the graph's ``param`` nodes, with their shapes
    (so this table and ``nlaverify.graph.build`` cannot drift apart)."""
    from nlaverify.graph.build import build_transformer

    graph = build_transformer(config)
    nodes = {n: tuple(int(s) for s in a["shape"]) for n, a in graph.nodes(data=True)
             if a["kind"] == "param"}
    for n in nodes:
        if n not in params:
            raise UnknownNameError(f"{fn}: no value for parameter node {n!r} (shape "
                                   f"{nodes[n]})")
    for n, a in params.items():
        if n not in nodes:
            raise UnknownNameError(f"{fn}: {n!r} is not a parameter node of the graph"
                                   + _closest(n, set(nodes)))
        if _shape(a) != nodes[n]:
            raise ShapeError(f"{fn}: parameter {n!r}: expected shape {nodes[n]}, got "
                             f"{_shape(a)}")


def params_to_hf(config: TransformerConfig, model_type: str,
                 params: Mapping[str, Any], *, gradients: bool = False
                 ) -> dict[str, np.ndarray]:
    r"""The Hugging Face state dict of ``model_type`` (keys and shapes of
    ``AutoModelForCausalLM.from_config(hf_config_dict(config, model_type)).state_dict()``,
    ``lm_head.weight`` included when tied) holding nlaverify's ``params``.

    ``gradients=True`` maps gradients: the same transposes, splits and permutations (all
    linear), without the Gemma offset (:math:`\partial L/\partial w = \partial
    L/\partial\gamma` for :math:`\gamma = 1 + w`). Tied: ``lm_head.weight`` is the
    embedding's (total) gradient, as HF's shared parameter has it.

    Raises:
        ConfigError: ``model_type`` cannot express ``config`` (naming the field).
        UnknownNameError, ShapeError: an unknown, missing or mis-shaped parameter, named.
    """
    fn = "params_to_hf"
    if not isinstance(config, TransformerConfig):
        raise ArgumentError(f"{fn}: argument 'config': expected a TransformerConfig, got "
                            f"{type(config).__name__}")
    entries = _entries(config, model_type)
    if not isinstance(params, Mapping):
        raise ArgumentError(f"{fn}: argument 'params': expected a mapping of parameter names "
                            f"to arrays, got {type(params).__name__}")
    p = {k: _to_numpy(v, k, fn) for k, v in params.items()}
    _check_against_graph(config, p, fn)
    out: dict[str, np.ndarray] = {}
    for e in entries:
        for k, arr in zip(e.hf, e.to_hf([p[n] for n in e.ours], not gradients), strict=True):
            out[k] = arr
    if config.tied_embeddings:
        out["lm_head.weight"] = p["embed.W_E"]
    return out


# ---------------------------------------------------------------------------------------------
# safetensors files


#: weight files of other formats (HF's ``WEIGHTS_NAME`` etc.): nlaverify reads only
#: safetensors, and refuses a checkpoint directory holding only these
FOREIGN_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".pkl")


def foreign_weight_files(path: str | os.PathLike) -> list[str]:
    """The weight files in directory ``path`` nlaverify cannot read (``pytorch_model.bin``,
    ``tf_model.h5``, ``flax_model.msgpack``, their shard indexes...), sorted."""
    p = Path(path)
    if not p.is_dir():
        return []
    return sorted(f.name for f in p.iterdir() if f.is_file() and (
        f.name.endswith(FOREIGN_WEIGHTS) or f.name.endswith(
            tuple(e + ".index.json" for e in FOREIGN_WEIGHTS))))


def _safetensors_numpy() -> tuple[Any, Any, type[BaseException]]:
    """``(load_file, save_file, SafetensorError)`` of ``safetensors.numpy``, with
    ``ml_dtypes`` imported first: ``safetensors.numpy`` maps ``BF16`` to NumPy's
    ``"bfloat16"`` dtype, which exists only once ``ml_dtypes`` has registered it."""
    try:
        import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy)
    except ImportError:  # pragma: no cover - jax brings it
        pass
    from safetensors import SafetensorError
    from safetensors.numpy import load_file, save_file

    return load_file, save_file, SafetensorError


def _read_file(f: Path, what: str) -> dict[str, np.ndarray]:
    """The tensors of one safetensors file, or an ArgumentError naming it (truncated or not
    a safetensors file; a dtype NumPy lacks)."""
    load_file, _, safetensor_error = _safetensors_numpy()
    try:
        return dict(load_file(str(f)))
    except (safetensor_error, OSError, ValueError) as e:
        raise ArgumentError(f"load_safetensors: {what} {str(f)!r} is not a readable safetensors "
                            f"file ({type(e).__name__}: {e})") from None
    except TypeError as e:  # e.g. BF16 without ml_dtypes
        raise DTypeError(f"load_safetensors: {what} {str(f)!r}: {e} (BF16 needs ml_dtypes and "
                         "safetensors >= 0.8)") from None


def _read_index(p: Path, index: Path) -> dict[str, np.ndarray]:
    """A sharded checkpoint: every shard of ``index``'s ``weight_map``, validated."""
    try:
        doc = json.loads(index.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, OSError) as e:
        raise ArgumentError(f"load_safetensors: {str(index)!r} is not valid JSON ({e})"
                            ) from None
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict):
        raise ArgumentError(f"load_safetensors: {str(index)!r}: expected a JSON object with a "
                            f"'weight_map' object, got {type(doc).__name__}"
                            + ("" if not isinstance(doc, dict) else
                               f" whose weight_map is {type(weight_map).__name__}"))
    root = p.resolve()
    for k, shard in weight_map.items():
        if not isinstance(shard, str):
            raise ArgumentError(f"load_safetensors: {index.name}: weight_map[{k!r}]: expected "
                                f"a shard file name, got {shard!r}")
        if (p / shard).resolve().parent != root:
            raise ArgumentError(f"load_safetensors: {index.name}: weight_map[{k!r}] = "
                                f"{shard!r}: expected a file in the checkpoint directory")
    for shard in sorted(set(weight_map.values())):
        if not (p / shard).is_file():
            raise ArgumentError(f"load_safetensors: shard {shard!r} listed in {index.name} is "
                                "missing")
    out: dict[str, np.ndarray] = {}
    for shard in sorted(set(weight_map.values())):
        for k, v in _read_file(p / shard, "shard").items():
            if weight_map.get(k) != shard:
                raise ArgumentError(f"load_safetensors: tensor {k!r} is in shard {shard!r} but "
                                    f"the index maps it to {weight_map.get(k)!r}")
            out[k] = v
    missing = sorted(set(weight_map) - set(out))
    if missing:
        raise ArgumentError(f"load_safetensors: tensor {missing[0]!r} listed in {index.name} "
                            "is in no shard")
    return out


def load_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The tensors of a ``.safetensors`` file, or of a checkpoint directory, as NumPy arrays
    (``BF16`` as ``ml_dtypes.bfloat16``). A directory is read as ``transformers``'
    ``from_pretrained`` reads it (``modeling_utils._get_resolved_checkpoint_files``): its
    ``model.safetensors`` if present, else the shards listed in
    ``model.safetensors.index.json``'s ``weight_map`` (each a file of the directory itself).

    Raises:
        ArgumentError: no such file, a directory without a safetensors checkpoint (naming
            the ``pytorch_model.bin`` etc. it holds instead), an unreadable index or shard
            (invalid JSON, truncated file), a shard listed but missing or outside the
            directory, a tensor in two shards or in a shard the index does not name.
    """
    p = Path(path)
    if p.is_file():
        return _read_file(p, "file")
    if not p.is_dir():
        raise ArgumentError(f"load_safetensors: argument 'path': no such file or directory "
                            f"{str(p)!r}")
    single = p / "model.safetensors"
    if single.is_file():
        return _read_file(single, "file")
    index = p / "model.safetensors.index.json"
    if index.is_file():
        return _read_index(p, index)
    foreign = foreign_weight_files(p)
    raise ArgumentError(f"load_safetensors: {str(p)!r} holds neither model.safetensors nor "
                        "model.safetensors.index.json" + (
                            f" (it holds {', '.join(foreign)}: nlaverify reads only "
                            "safetensors; convert with transformers' save_pretrained(..., "
                            "safe_serialization=True))" if foreign else ""))


def save_safetensors(path: str | os.PathLike, tensors: Mapping[str, Any]) -> None:
    """Write ``tensors`` (NumPy arrays, ``ml_dtypes.bfloat16`` included) to one
    ``.safetensors`` file, atomically (a temporary file ``.NAME.*.tmp`` in the same
    directory, then ``os.replace``): the file is whole or untouched. A process killed
    mid-write can leave the temporary file behind (never a partial ``path``).

    Raises:
        ArgumentError: ``path``'s directory does not exist, or ``path`` is a directory; a
            non-string key. DTypeError: a non-floating tensor."""
    _, save_file, _ = _safetensors_numpy()
    if not isinstance(tensors, Mapping):
        raise ArgumentError(f"save_safetensors: argument 'tensors': expected a mapping, got "
                            f"{type(tensors).__name__}")
    arrays = {}
    for k, v in tensors.items():
        if not isinstance(k, str):
            raise ArgumentError(f"save_safetensors: key {k!r}: expected a string")
        arrays[k] = np.ascontiguousarray(_to_numpy(v, k, "save_safetensors"))
    target = Path(path)
    if target.is_dir():
        raise ArgumentError(f"save_safetensors: argument 'path': {str(target)!r} is a "
                            "directory, expected a file name")
    if not target.parent.is_dir():
        raise ArgumentError(f"save_safetensors: argument 'path': directory "
                            f"{str(target.parent)!r} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                               dir=str(target.parent))
    os.close(fd)
    try:
        save_file(arrays, tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: str | os.PathLike, *, dtype: Any = None
                    ) -> tuple[HFConfig, dict[str, np.ndarray]]:
    """A Hugging Face checkpoint directory (``config.json`` and ``safetensors`` weights) as
    ``(HFConfig, params)``: :func:`~nlaverify.interop.hf_config.load_hf_config`,
    :func:`load_safetensors`, :func:`params_from_hf` (``dtype`` passed on: e.g.
    ``np.float64`` to compute Gemma's :math:`1 + w` exactly), each validating fully."""
    p = Path(path)
    if not p.is_dir():
        raise ArgumentError(f"load_checkpoint: argument 'path': expected a checkpoint "
                            f"directory, got {str(p)!r}")
    hf = load_hf_config(p)
    return hf, params_from_hf(hf, load_safetensors(p), dtype=dtype)
