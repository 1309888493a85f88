"""Interoperability with Hugging Face: configs, checkpoints and node-by-node verification.

* :mod:`nlaverify.interop.hf_config`: a :class:`~nlaverify.config.TransformerConfig` from a
  ``config.json`` (GPT-2, Llama/Llama-3.x with RoPE scaling, Mistral, Mixtral, Qwen2, Qwen3,
  Gemma, Mamba, RWKV-4 and the other types of :data:`SUPPORTED`) and back;
* :mod:`nlaverify.interop.weights`: graph parameters from a ``safetensors`` file or a state
  dict of NumPy arrays and back, every layout convention in one place (torch not needed);
* :mod:`nlaverify.interop.hf_verify`: the Hugging Face model and the graph on the same
  weights and tokens, compared node by node (needs the ``[hf]`` extra: torch,
  transformers).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.interop.hf_config import SUPPORTED, HFConfig, hf_config_dict, load_hf_config

__all__ = ["SUPPORTED", "HFConfig", "config_from_file", "config_note", "hf_config_dict",
           "load_checkpoint",
           "load_hf_config", "load_safetensors", "params_from_hf", "params_to_hf",
           "save_safetensors", "verify_hf"]

#: names served from the submodules on first use (the weights' layouts, and verify_hf, which
#: needs the [hf] extra only when called)
_LAZY = {"load_checkpoint": "weights", "load_safetensors": "weights",
         "params_from_hf": "weights", "params_to_hf": "weights", "save_safetensors": "weights",
         "verify_hf": "hf_verify", "config_note": "hf_config_gemma3"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"nlaverify.interop.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'nlaverify.interop' has no attribute {name!r}")


def config_from_file(path: str | os.PathLike) -> TransformerConfig:
    """The :class:`~nlaverify.config.TransformerConfig` of ``path``: a Hugging Face
    ``config.json`` (a ``model_type`` key; or a checkpoint folder holding one), read by
    :func:`~nlaverify.interop.hf_config.load_hf_config`, or a JSON object of
    ``TransformerConfig`` fields (as ``nlaverify params --json`` prints under ``config``)."""
    p = Path(path)
    if p.is_dir():
        return load_hf_config(p).config
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {str(p)!r}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"config file {str(p)!r}: not readable as JSON ({e})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {str(p)!r}: expected a JSON object, got "
                          f"{type(raw).__name__}")
    if "model_type" in raw:
        return load_hf_config(raw).config
    try:
        return TransformerConfig(**raw)
    except TypeError as e:
        raise ConfigError(f"config file {str(p)!r}: not a TransformerConfig ({e}); a Hugging "
                          "Face config.json needs its model_type") from None
