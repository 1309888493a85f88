"""The tap of :mod:`nlaverify.interop.hf_taps` (a graph node read from one Hugging Face capture)
and the converters of HF's layouts the tables share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.interop.weights_layout import rope_permutation

__all__ = ["_Tap", "_channels", "_first", "_layouts", "_onehot", "_rows"]


@dataclass(frozen=True)
class _Tap:
    """Graph node ``node`` is ``convert`` of the capture ``(path, where)`` (a module's
    ``"out"``/``"in"``; ``path=None``: the attention function's ``(layer, where)``)."""

    node: str
    path: str | None
    where: str
    convert: Callable[[Any], np.ndarray]
    layer: int | None = None
    #: the capturing function of ``path=None`` taps: ``attention`` (the registered attention
    #: function) or ``mamba`` (the mixer's convolution and scan, :mod:`.hf_capture`)
    function: str = "attention"

    @property
    def source(self) -> str:
        if self.path is None:
            return f"{self.function}[{self.layer}].{self.where}"
        return f"{self.path}.{'output' if self.where == 'out' else 'input'}"


def _rows(a: np.ndarray) -> np.ndarray:
    """``(1, n, c) -> (n, c)`` (a batch of one)."""
    return a[0] if a.ndim == 3 else a


def _layouts(config: Any) -> dict[str, Callable[..., Callable[[Any], np.ndarray]]]:
    """Converters from HF layouts to the graph's, with the RoPE permutation ``perm`` of
    each head's last axis when ``positions == "rope"``."""
    dh = config.d_head
    perm = rope_permutation(dh) if config.positions == "rope" else np.arange(dh)

    def cols(h: int, permute: bool = True) -> Callable[[Any], np.ndarray]:
        def f(a: Any) -> np.ndarray:
            r = _rows(a)
            p = perm if permute else np.arange(dh)
            return r.reshape(r.shape[0], h, dh)[..., p].reshape(r.shape[0], h * dh)
        return f

    def heads_of_rows(h: int, permute: bool = True) -> Callable[[Any], np.ndarray]:
        def f(a: Any) -> np.ndarray:
            r = _rows(a)
            p = perm if permute else np.arange(dh)
            return r.reshape(r.shape[0], h, dh).transpose(1, 0, 2)[..., p]
        return f

    def bhnd(permute: bool = True) -> Callable[[Any], np.ndarray]:  # (1, H, n, dh)
        return lambda a: a[0][..., perm if permute else np.arange(dh)]

    def bnhd(permute: bool = True) -> Callable[[Any], np.ndarray]:  # (1, n, H, dh)
        return lambda a: a[0].transpose(1, 0, 2)[..., perm if permute else np.arange(dh)]

    return {"cols": cols, "heads_of_rows": heads_of_rows, "bhnd": bhnd, "bnhd": bnhd}


def _first(a: Any) -> np.ndarray:
    """A decoder layer's output ``(hidden, attn_weights)`` -> the hidden rows."""
    return _rows(np.asarray(a[0] if isinstance(a, tuple) else a))


def _channels(a: Any) -> np.ndarray:
    """HF's channels-first ``(1, E, n)`` (Mamba's convolution and time step) -> ``(n, E)``."""
    return np.asarray(a)[0].T


def _onehot(n_experts: int) -> Callable[[Any], np.ndarray]:
    """A top-k router's output ``(logits, weights, indices)`` (Mixtral's, Qwen's,
    DeepSeek-V3's) -> the 0/1 routing mask."""
    def f(out: Any) -> np.ndarray:
        idx = np.asarray(out[2]).astype(np.int64)  # check_model hands it over in float64
        mask = np.zeros((idx.shape[0], n_experts))
        np.put_along_axis(mask, idx, 1.0, axis=-1)
        return mask
    return f
