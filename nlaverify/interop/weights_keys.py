r"""State-dict spellings normalised before the table of
:mod:`nlaverify.interop.weights_layout` is applied: the base-model prefix (``model.``,
``transformer.``, ``backbone.``, ``gpt_neox.``, ``rwkv.``) added where missing (RWKV's
head is ``head``), GPT-NeoX's released
``embed_out`` read as ``lm_head``, Mixtral's ``block_sparse_moe`` renamed
``mlp`` and its per-expert ``w1/w2/w3`` fused as ``transformers`` 5 stores them, GPT-2's legacy
causal-mask buffers checked and dropped (module docstring of
:mod:`nlaverify.interop.weights`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from nlaverify.config import TransformerConfig
from nlaverify.errors import ArgumentError, ShapeError, UnknownNameError
from nlaverify.interop.weights_layout import _shape

_PREFIX = {"gpt2": "transformer.", "mamba": "backbone.", "mamba2": "backbone.",
           "gpt_neox": "gpt_neox.",
           "gptj": "transformer.", "falcon": "transformer.", "rwkv": "rwkv."}
#: the head's key, outside the base model (RWKV's is ``head``)
_HEAD = {"rwkv": "head."}
_MIXTRAL_LEGACY = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.w([123])\.weight$")
#: DeepSeek-V3's per-expert keys (the released checkpoints', and what transformers 5.25's
#: ``save_pretrained`` writes): ``experts.{e}.{gate,up,down}_proj.weight`` are w1, w3, w2
_PER_EXPERT = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj"
                         r"\.weight$")
_PER_EXPERT_W = {"gate": "1", "up": "3", "down": "2"}


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
        # released GPT-NeoX checkpoints name the head embed_out (transformers renames it)
        k = "lm_head.weight" if mt == "gpt_neox" and key == "embed_out.weight" else key
        k = k if k.startswith((prefix, _HEAD.get(mt, "lm_head."))) else prefix + k
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
                          user: Mapping[str, str], model_type: str = "mixtral") -> None:
    """Per-expert ``experts.{e}.w1/w2/w3.weight`` (DeepSeek-V2, -V3, Qwen2/3-MoE:
    ``experts.{e}.{gate,up,down}_proj.weight``) -> the fused ``gate_up_proj`` / ``down_proj``
    of transformers 5 (in place; every key and shape checked)."""
    from nlaverify.config_moe import expert_width

    deepseek = model_type in ("deepseek_v2", "deepseek_v3", "qwen2_moe", "qwen3_moe")
    groups: dict[int, dict[tuple[int, str], str]] = {}
    for k in state:
        mt = (_PER_EXPERT if deepseek else _MIXTRAL_LEGACY).match(k)
        if mt:
            w = _PER_EXPERT_W[mt.group(3)] if deepseek else mt.group(3)
            groups.setdefault(int(mt.group(1)), {})[(int(mt.group(2)), w)] = k
    d, m, n_e = c.d_model, expert_width(c), c.n_experts
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
                    name = {v: f"{k}_proj" for k, v in _PER_EXPERT_W.items()}[w] if \
                        deepseek else f"w{w}"
                    key = _spelled(f"{base}{e}.{name}.weight", user, model_type)
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
