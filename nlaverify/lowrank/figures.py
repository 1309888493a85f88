r"""The quantization figure: measured output error against bits, with the bound (Baggag & Saad
§4.1).

:func:`quantization_curves` measures, for :math:`b = 2..8` bits,

* a seeded linear layer :math:`Y = XW` (:math:`X \in \mathbb R^{64\times 256}`,
  :math:`W \in \mathbb R^{256\times 128}`, Gaussian, :math:`W` scaled by
  :math:`1/\sqrt{256}`): :math:`\max_{ij}|Y - XQ(W)|_{ij}` for symmetric per-tensor, symmetric
  per-channel and asymmetric per-channel quantizers, against the worst-case bound
  :math:`\max_{ij}\tfrac12\sum_k|X_{ik}|\Delta_{kj}` and Widrow's RMS model (drawn times
  :math:`\sqrt{2\ln(mn)}`, the typical maximum of :math:`mn` Gaussian errors);
* the tiny Transformer (:func:`nlaverify.graph.build.build_transformer` of the ``tiny``
  preset, seeded parameters, evaluated by :func:`nlaverify.graph.core.evaluate`): the logits
  error with only the unembedding :math:`W_U` quantized (per channel, symmetric; the bound of
  the linear layer applies exactly, :math:`X` the final normalised hidden states), and with
  every projection matrix quantized (no bound: the layers are nonlinear; measured only).

Matplotlib's Agg backend; the SVG is byte-reproducible (fixed ``svg.hashsalt``, text kept as
text, no date) and written atomically.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.symbolic.document import save_svg

__all__ = ["BITS", "draw_all", "draw_quantization_error", "quantization_curves"]

qz = importlib.import_module("nlaverify.lowrank.quantization")
BITS = tuple(range(2, 9))
_RC = {"svg.hashsalt": "nlaverify", "svg.fonttype": "none", "font.size": 9}
_SCHEMES = {"symmetric, per tensor": (True, None), "symmetric, per channel": (True, 1),
            "asymmetric, per channel": (False, 1)}
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _linear_layer(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((64, 256)), rng.standard_normal((256, 128)) / 16.0


def quantization_curves(seed: int = 0) -> dict[str, dict[str, list[float]]]:
    """The measured errors and bounds of the figure, per curve, one value per bit width in
    :data:`BITS` (float64)."""
    xp = get_namespace("numpy")
    X, W = _linear_layer(seed)
    Y = X @ W
    out: dict[str, dict[str, list[float]]] = {}
    for label, (sym, axis) in _SCHEMES.items():
        rec: dict[str, list[float]] = {"measured": [], "bound": [], "rms": []}
        for b in BITS:
            Wq, params = qz.fake_quantize(xp, W, b, symmetric=sym, axis=axis)
            rec["measured"].append(float(np.abs(Y - X @ Wq).max()))
            rec["bound"].append(float(qz.linear_output_error_bound(xp, X, params.scale,
                                                                   W.shape).max()))
            rec["rms"].append(float(qz.linear_output_error_rms(xp, X, params.scale,
                                                               W.shape).max()))
        out[label] = rec
    out.update(_transformer_curves(seed))
    return out


def _transformer_curves(seed: int) -> dict[str, dict[str, list[float]]]:
    from nlaverify.config import preset
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.core import evaluate
    from nlaverify.graph.run import graph_inputs, init_params, sample_data

    xp = get_namespace("numpy")
    cfg = preset("tiny")
    g = build_transformer(cfg)
    params = init_params(g, seed)
    data = sample_data(cfg.vocab_size, cfg.context, seed)

    def logits(p: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        vals = evaluate(g, xp, graph_inputs(g, xp, p, data))
        return np.asarray(vals["logits"]), np.asarray(vals["final_norm"])

    ref, hidden = logits(params)
    matrices = [k for k, v in params.items() if v.ndim == 2 and not k.startswith(("embed.",
                                                                                  "pos."))]
    last: dict[str, list[float]] = {"measured": [], "bound": []}
    every: dict[str, list[float]] = {"measured": []}
    for b in BITS:
        WU = params["unembed.W_U"]
        WUq, pu = qz.fake_quantize(xp, WU, b, symmetric=True, axis=1)
        out, _ = logits(dict(params, **{"unembed.W_U": WUq}))
        last["measured"].append(float(np.abs(out - ref).max()))
        last["bound"].append(float(qz.linear_output_error_bound(xp, hidden, pu.scale,
                                                                WU.shape).max()))
        qd = {k: qz.fake_quantize(xp, params[k], b, symmetric=True, axis=1)[0]
              for k in matrices}
        out, _ = logits(dict(params, **qd))
        every["measured"].append(float(np.abs(out - ref).max()))
    return {"tiny: W_U only": last, "tiny: every projection": every}


def draw_quantization_error(path: Path | str, *, seed: int = 0) -> Path:
    """``docs/figures/quantization_error.svg``: two panels (linear layer; tiny Transformer),
    max output error against bits on a log scale, measured (markers) against the bound
    (lines). Baggag & Saad §4.1."""
    plt = _pyplot()
    curves = quantization_curves(seed)
    bits = np.array(BITS)
    with plt.rc_context(_RC):
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.0, 3.8), sharex=True)
        # under the RMS model the max of the 64*128 output errors is about sqrt(2 ln(mn)) RMS
        spread = float(np.sqrt(2.0 * np.log(64 * 128)))
        for (label, rec), colour, style in zip(((k, curves[k]) for k in _SCHEMES), _COLOURS,
                                               ("--", "-", "-"), strict=True):
            ax1.semilogy(bits, rec["measured"], "o", color=colour, label=f"{label}: measured")
            ax1.semilogy(bits, rec["bound"], style, color=colour, label="  bound max ½Σ|X|Δ")
            ax1.semilogy(bits, spread * np.array(rec["rms"]), ":", color=colour, lw=1)
        ax1.set_title("linear layer Y = XW (64×256·256×128), W quantized", fontsize=9)
        ax1.set_xlabel("bits b")
        ax1.set_ylabel("max |Y − XQ(W)|")
        ax1.legend(fontsize=6.5, loc="lower left")
        ax1.text(0.98, 0.97, "dotted: √(2 ln mn) × RMS, Widrow's model (not a bound)\n"
                 "per-channel bound's max = per-tensor's (largest channel)",
                 transform=ax1.transAxes, ha="right", va="top", fontsize=7)
        last, every = curves["tiny: W_U only"], curves["tiny: every projection"]
        ax2.semilogy(bits, last["measured"], "o", color=_COLOURS[1],
                     label="W_U quantized: measured")
        ax2.semilogy(bits, last["bound"], "-", color=_COLOURS[1], label="  bound ½Σ|h|Δ")
        ax2.semilogy(bits, every["measured"], "s", color="#9467bd",
                     label="every projection quantized (no bound)")
        ax2.set_title("tiny Transformer logits (per-channel, symmetric)", fontsize=9)
        ax2.set_xlabel("bits b")
        ax2.set_ylabel("max |logits − logits_Q|")
        ax2.legend(fontsize=7, loc="lower left")
        for ax in (ax1, ax2):
            ax.grid(True, which="both", alpha=0.3)
        fig.suptitle("Quantization error against bits, measured vs bound (Baggag & Saad §4.1)",
                     fontsize=10)
        fig.tight_layout()
        save_svg(fig, path)
        plt.close(fig)
    return Path(path)


def draw_all(directory: Path | str) -> list[Path]:
    """The family's figures, written into ``directory``."""
    return [draw_quantization_error(Path(directory) / "quantization_error.svg")]
