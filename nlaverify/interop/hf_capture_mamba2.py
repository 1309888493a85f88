r"""What no module of Hugging Face Mamba-2 returns (``models/mamba2/modeling_mamba2.py``,
transformers 5.25), recorded for :mod:`nlaverify.interop.hf_capture` (issue 37): the
depthwise convolution over :math:`[x, B, C]` before its SiLU (``mamba2[l].conv``:
``causal_conv1d_forward`` run without its activation, which is then applied as HF would,
``ACT2FN[activation]``), and what ``mamba2_scan_forward`` is handed and returns:
``mamba2[l].x``, ``.B``, ``.C`` (after the SiLU), ``.dt`` (before the bias and softplus) and
``.scan`` (with the :math:`D` skip). Both module functions are wrapped, whatever they are now
(exact mode's scan included), and restored. Imports nothing of the package.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["capture_mamba2"]


@contextlib.contextmanager
def capture_mamba2(mod: Any, keep: Any) -> Iterator[None]:
    """For the duration, wrap ``mod``'s (``modeling_mamba2``) ``causal_conv1d_forward`` and
    ``mamba2_scan_forward`` so that ``keep(name, tensor)`` receives the module docstring's
    captures."""
    conv_fn, scan_fn = mod.causal_conv1d_forward, mod.mamba2_scan_forward

    def conv(conv1d: Any, hidden_states: Any, cache: Any, layer_idx: int,
             activation: str | None = None, **kwargs: Any) -> Any:
        out = conv_fn(conv1d, hidden_states, cache, layer_idx, activation=None, **kwargs)
        keep(f"mamba2[{layer_idx}].conv", out)
        return out if activation is None else mod.ACT2FN[activation](out)

    def scan(module: Any, hidden_states: Any, B: Any, C: Any, dt: Any, *args: Any,
             **kwargs: Any) -> Any:
        out = scan_fn(module, hidden_states, B, C, dt, *args, **kwargs)
        for name, t in (("x", hidden_states), ("B", B), ("C", C), ("dt", dt), ("scan", out)):
            keep(f"mamba2[{module.layer_idx}].{name}", t)
        return out

    mod.causal_conv1d_forward, mod.mamba2_scan_forward = conv, scan
    try:
        yield
    finally:
        mod.causal_conv1d_forward, mod.mamba2_scan_forward = conv_fn, scan_fn
