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
* **Mamba.** ``mixer.in_proj.weight`` ``(2E, d)`` holds :math:`[W_x\,|\,W_z]^\top` by rows
  (``chunk(2)``: the convolved branch first, the gate second), ``mixer.x_proj.weight``
  ``(R + 2N, E)`` :math:`[W_{\Delta,low}\,|\,W_B\,|\,W_C]^\top` (``split([R, N, N])``); both
  are split and transposed. ``conv1d.weight`` ``(E, 1, k)`` is the graph's ``conv.w``
  ``(E, k)`` (PyTorch's depthwise cross-correlation with ``k - 1`` zeros in front: the same
  taps), ``dt_proj.bias`` is :math:`b_\Delta` (inside the softplus), ``A_log`` (HF's
  :math:`A = -e^{A_{\log}}`, as the graph's ``mamba_scan``) and ``D`` are copied. Keys carry
  ``backbone.`` (the base model's state dict does not).
* **Mamba-2** (:mod:`~nlaverify.interop.weights_layout_mamba2`). ``mixer.in_proj.weight``
  ``(2E + 2GN + H, d)`` holds :math:`[W_z | W_x | W_B | W_C | W_\delta]^\top` by rows, split
  and transposed; the depthwise ``conv1d`` over :math:`[x, B, C]` split by channel
  (``conv_x``, ``conv_B``, ``conv_C``); ``dt_bias``, ``A_log``, ``D`` and the gated norm's
  weight copied. Keys carry ``backbone.``.
* **GPT-NeoX.** ``attention.query_key_value`` ``(3d, d)`` (and its bias) holds, per head, the
  query, key and value rows of that head (``(heads, 3, head_dim)``: ``view(..., -1, 3 *
  head_size)``, ``chunk(3)``), not GPT-2's blocked :math:`[Q | K | V]`; split per head and
  transposed. RoPE's half pairing is the config's ``rope_pairing="half"``: nothing is permuted.
  Released checkpoints name the head ``embed_out.weight`` (read as ``lm_head.weight``, as
  ``transformers`` renames it) and carry no ``gpt_neox.`` prefix; both are accepted.
* **GPT-J, Phi.** Separate ``q/k/v_proj`` and ``out_proj`` / ``dense`` (transposed; Phi's
  biased), one LayerNorm per block (``norm1``), ``lm_head.bias`` the config's ``unembed.b_U``.
  GPT-J's interleaved pairing is nlaverify's own and Phi's half pairing the config's
  ``rope_pairing``: nothing is permuted.
* **Falcon** (:mod:`~nlaverify.interop.weights_layout_falcon`). ``self_attention.
  query_key_value`` holds multi-query rows :math:`[Q \mid k \mid v]` (``split([heads, 1,
  1])``), else GPT-NeoX's per-head rows; keys carry ``transformer.``.
* **OPT** (:mod:`~nlaverify.interop.weights_layout_opt`). ``embed_positions`` ``(context + 2,
  d)`` is ``pos.W_P`` whole, copied: the config's ``position_offset=2`` reads position
  :math:`p` at row :math:`p + 2`; rows 0 and 1 (never read) are kept as they are.
* **RWKV** (:mod:`~nlaverify.interop.weights_layout_rwkv`). The mixes ``time_mix_*``
  ``(1, 1, d)`` flattened to ``(d,)``, every ``nn.Linear`` transposed, ``time_decay`` and
  ``time_first`` copied (the graph's op takes :math:`w = -e^{\text{time\_decay}}` itself); the
  head is ``head.weight``, never tied; keys carry ``rwkv.``.
* **Gemma 3 multimodal** (:mod:`~nlaverify.interop.weights_gemma3`). A
  ``Gemma3ForConditionalGeneration``'s language model (``language_model.model.*`` as saved,
  ``model.language_model.*`` in memory) read as ``Gemma3ForCausalLM``'s; the vision tower and
  projector (``vision_tower.*``, ``multi_modal_projector.*``) accepted and ignored (images
  only, not modelled); any other key refused by name.
* **DeepSeek-V3, DeepSeek-V2** (:mod:`~nlaverify.interop.weights_layout_mla`). Multi-head
  latent attention's joint projections split by output into the graph's: ``q_b_proj`` (or
  ``q_proj``) and ``kv_b_proj`` head by head (:math:`[W^{UQ}_i | W^{QR}_i]`,
  :math:`[W^{UK}_i | W^{UV}_i]` rows), ``kv_a_proj_with_mqa`` :math:`[W^{DKV} | W^{KR}]` by
  rows; the latent norms copied; the rotated coordinates not permuted (V3's
  ``rope_interleave`` is the config's pairing; V2's complex rotation is interleaved).
* **Biases.** Only where the config has them (Qwen2: ``q/k/v_proj.bias``, no ``o_proj.bias``).
* **Prefixes.** The keys of ``*ForCausalLM.state_dict()`` carry ``model.`` (``transformer.``
  for GPT-2, ``backbone.`` for Mamba) except ``lm_head.weight``; the base model's state dict
  and the released GPT-2
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

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nlaverify.config import TransformerConfig
from nlaverify.errors import ArgumentError, DTypeError, ShapeError, UnknownNameError
from nlaverify.interop.hf_config import HFConfig, load_hf_config
from nlaverify.interop.weights_files import (
    FOREIGN_WEIGHTS,
    _to_numpy,
    foreign_weight_files,
    load_safetensors,
    save_safetensors,
)
from nlaverify.interop.weights_gemma3 import gemma3_language_model
from nlaverify.interop.weights_keys import (
    _canonical_keys,
    _fuse_mixtral_experts,
    _gpt2_mask,
    _spelled,
)
from nlaverify.interop.weights_layout import Shape, Transform, _entries, _shape, rope_permutation

__all__ = ["FOREIGN_WEIGHTS", "Shape", "Transform", "foreign_weight_files", "load_checkpoint",
           "load_safetensors", "params_from_hf", "params_to_hf", "rope_permutation",
           "save_safetensors"]


def _resolve(hf: HFConfig | tuple[TransformerConfig, str], fn: str
             ) -> tuple[TransformerConfig, str]:
    if isinstance(hf, HFConfig):
        return hf.config, hf.model_type
    if isinstance(hf, tuple) and len(hf) == 2 and isinstance(hf[0], TransformerConfig) \
            and isinstance(hf[1], str):
        return hf
    raise ArgumentError(f"{fn}: argument 'hf': expected an HFConfig or a (TransformerConfig, "
                        f"model_type) pair, got {type(hf).__name__}")


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
    multimodal = None
    if mt == "gemma3_text":  # a Gemma3ForConditionalGeneration's: its language model
        state, given, multimodal = gemma3_language_model(state, fn)
    st, user = _canonical_keys(state, mt, fn)
    if multimodal is not None:
        user = {k: given.get(u, u) for k, u in user.items()}
    if mt == "gpt2":
        _gpt2_mask(st, config, fn, user)  # boolean/uint8 buffers: before the dtype check
    st = {k: _to_numpy(v, user[k], fn) for k, v in st.items()}
    if cast is not None:
        st = {k: v.astype(cast) for k, v in st.items()}
    if mt in ("mixtral", "deepseek_v2", "deepseek_v3", "qwen2_moe", "qwen3_moe"):  # fused
        _fuse_mixtral_experts(st, config, fn, user, mt)
    embed_key = {"gpt2": "transformer.wte.weight", "gptj": "transformer.wte.weight",
                 "mamba": "backbone.embeddings.weight", "mamba2": "backbone.embeddings.weight",
                 "gpt_neox": "gpt_neox.embed_in.weight",
                 "falcon": "transformer.word_embeddings.weight",
                 "opt": "model.decoder.embed_tokens.weight"}.get(
        mt, "model.embed_tokens.weight")
    known = {k for e in entries for k in e.hf}
    tied_head = config.tied_embeddings and "lm_head.weight" in st
    for k in st:
        if k not in known and not (tied_head and k == "lm_head.weight"):
            raise UnknownNameError(f"{fn}: unknown key {user.get(k, k)!r} for {mt} with this "
                                   "config" + _closest(k, known))
    for e in entries:
        for k, want in zip(e.hf, e.hf_shapes, strict=True):
            if k not in st:
                spelled = multimodal.spell(k) if multimodal else _spelled(k, user, mt)
                raise UnknownNameError(f"{fn}: missing key {spelled!r} "
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
