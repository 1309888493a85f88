r"""The map from Hugging Face ``Mamba2ForCausalLM``'s modules to graph nodes (issue 37): one
table of :mod:`nlaverify.interop.hf_taps`, kept apart (it is given the tap class, so this
module imports nothing of the package).

``models/mamba2/modeling_mamba2.py``, transformers 5.25: ``norm1`` is ``layers.{l}.norm``'s
output; ``in_proj``'s output ``(n, 2E + 2GN + H)`` split into ``in_z``, ``in_x``, ``in_B``,
``in_C``, ``in_dt``; the convolution before its SiLU (``conv_x``, ``conv_B``, ``conv_C``,
channels first) and the scan's inputs (``x``, ``B``, ``C``, and their views ``x_heads``,
``B_groups``, ``C_groups``) and output (``scan`` as ``(n, H, P)``) are no module's: they
come from :mod:`~nlaverify.interop.hf_capture_mamba2` (``mamba2[l].conv`` ...); ``y`` is the
gated norm's first input, ``norm`` its output, ``out`` ``out_proj``'s, ``resid1`` the
block's; ``final_norm`` ``backbone.norm_f``, ``logits`` ``lm_head``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["mamba2_taps"]


def _rows(a: Any) -> np.ndarray:
    """``(1, n, c) -> (n, c)`` (a batch of one)."""
    x = np.asarray(a)
    return x[0] if x.ndim == 3 else x


def _cut(lo: int, hi: int, channels_first: bool = False,
         view: tuple[int, int] | None = None) -> Callable[[Any], np.ndarray]:
    """Columns ``[lo, hi)`` of the rows (of HF's ``(1, C, n)`` transposed, ``channels_first``),
    reshaped to ``(n, *view)`` when given."""
    def f(a: Any) -> np.ndarray:
        r = np.asarray(a)[0].T if channels_first else _rows(a)
        r = r[:, lo:hi]
        return r.reshape(r.shape[0], *view) if view else r
    return f


def mamba2_taps(c: Any, tap: Callable[..., Any]) -> list[Any]:
    """The taps of ``Mamba2ForCausalLM`` for the config ``c`` (module docstring), built with
    ``tap`` (:class:`nlaverify.interop.hf_taps._Tap`: ``tap(node, path, where, convert,
    layer, function)``)."""
    E, H, G, N = c.d_inner, c.ssm_heads, c.ssm_groups, c.ssm_state
    GN, P = G * N, E // H
    cols = {"z": (0, E), "x": (E, 2 * E), "B": (2 * E, 2 * E + GN),
            "C": (2 * E + GN, 2 * E + 2 * GN), "dt": (2 * E + 2 * GN, 2 * E + 2 * GN + H)}
    conv = {"x": (0, E), "B": (E, E + GN), "C": (E + GN, E + 2 * GN)}
    taps = [tap("embed", "backbone.embeddings", "out", _rows),
            tap("x0", "backbone.embeddings", "out", _rows)]
    for layer in range(c.n_blocks):
        p, h = f"blocks.{layer}", f"backbone.layers.{layer}"
        q, m = f"{p}.mamba2", f"{h}.mixer"
        taps.append(tap(f"{p}.norm1", f"{h}.norm", "out", _rows))
        taps += [tap(f"{q}.in_{k}", f"{m}.in_proj", "out", _cut(*b)) for k, b in cols.items()]
        taps += [tap(f"{q}.conv_{k}", None, "conv", _cut(*b, True), layer, "mamba2")
                 for k, b in conv.items()]
        for k, view, name in (("x", (H, P), "x_heads"), ("B", (G, N), "B_groups"),
                              ("C", (G, N), "C_groups")):
            width = view[0] * view[1]
            taps += [tap(f"{q}.{k}", None, k, _cut(0, width), layer, "mamba2"),
                     tap(f"{q}.{name}", None, k, _cut(0, width, view=view), layer, "mamba2")]
        taps += [tap(f"{q}.scan", None, "scan", _cut(0, E, view=(H, P)), layer, "mamba2"),
                 tap(f"{q}.y", f"{m}.norm", "in", _rows),
                 tap(f"{q}.norm", f"{m}.norm", "out", _rows),
                 tap(f"{q}.out", f"{m}.out_proj", "out", _rows),
                 tap(f"{p}.resid1", h, "out", _rows)]
    return [*taps, tap("final_norm", "backbone.norm_f", "out", _rows),
            tap("logits", "lm_head", "out", _rows)]
