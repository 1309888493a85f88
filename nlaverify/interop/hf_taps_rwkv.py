r"""The map from Hugging Face ``RwkvForCausalLM``'s modules to graph nodes (issue 37): one
table of :mod:`nlaverify.interop.hf_taps`, kept apart (it is given the tap class, so this
module imports nothing of the package).

Every graph node of an RWKV block is a module's output or first input
(``models/rwkv/modeling_rwkv.py``, transformers 5.25): ``blocks.0.ln0`` is ``pre_ln``'s
output, ``norm1`` / ``norm2`` ``ln1`` / ``ln2``'s, ``resid1`` ``ln2``'s input, the time
mixing ``rwkv.time_mix`` ``attention``'s output (``RwkvSelfAttention`` returns ``(output,
state)``), the channel mixing ``ffn.channel_mix`` ``feed_forward``'s, ``resid2`` the block's
(``(hidden, state, attentions)``); ``x0`` is the embedding itself (no positions);
``final_norm`` is ``rwkv.ln_out``, ``logits`` ``head``. HF's own halving of the stream under
``rescale_every`` is not modelled (:mod:`nlaverify.interop.hf_config_rwkv`): verification
builds HF's model with ``rescale_every = 0``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["rwkv_taps"]


def _first(a: Any) -> np.ndarray:
    """A module's output, or the first of its tuple, as the rows ``(n, c)`` of a batch of
    one."""
    x = np.asarray(a[0] if isinstance(a, tuple) else a)
    return x[0] if x.ndim == 3 else x


def rwkv_taps(c: Any, tap: Callable[..., Any]) -> list[Any]:
    """The taps of ``RwkvForCausalLM`` for the config ``c`` (module docstring), built with
    ``tap`` (:class:`nlaverify.interop.hf_taps._Tap`: ``tap(node, path, where, convert)``)."""
    taps = [tap("embed", "rwkv.embeddings", "out", _first),
            tap("x0", "rwkv.embeddings", "out", _first),
            tap("blocks.0.ln0", "rwkv.blocks.0.pre_ln", "out", _first)]
    for layer in range(c.n_blocks):
        p, h = f"blocks.{layer}", f"rwkv.blocks.{layer}"
        taps += [tap(f"{p}.norm1", f"{h}.ln1", "out", _first),
                 tap(f"{p}.rwkv.time_mix", f"{h}.attention", "out", _first),
                 tap(f"{p}.resid1", f"{h}.ln2", "in", _first),
                 tap(f"{p}.norm2", f"{h}.ln2", "out", _first),
                 tap(f"{p}.ffn.channel_mix", f"{h}.feed_forward", "out", _first),
                 tap(f"{p}.resid2", h, "out", _first)]
    return [*taps, tap("final_norm", "rwkv.ln_out", "out", _first),
            tap("logits", "head", "out", _first)]
