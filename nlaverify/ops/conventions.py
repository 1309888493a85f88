"""The conventions of the catalogue's ops that are options (static values), with who uses
each value: RoPE's pairing and base, the attention scale, the causal mask's alignment,
the loss reduction, the all-masked softmax row.
:func:`nlaverify.check.check_op` states the ones in force and, when a kernel fails, names
the one it follows (:mod:`nlaverify.check.op_hints`). Seeds: Baggag & Saad §3.4.2, §3.6.2,
§3.13.1.
"""

from __future__ import annotations

from typing import Any

from nlaverify.ops.registry import OPS, OpSpec

__all__ = ["CONVENTIONS", "conventions"]


#: the conventions of an op that are options (static values): per static, the values in
#: use and who uses them. ``check_op`` states them and, when a kernel fails, names the one
#: it follows (:func:`conventions`)
_ROPE_CONVENTIONS: dict[str, tuple[tuple[Any, str], ...]] = {
    "layout": (("interleaved", "pairs (2i, 2i+1): RoFormer, the graph's convention"),
               ("half", "pairs (i, i + d_h/2): GPT-NeoX, Hugging Face Llama's rotate_half")),
    "base": ((10000, "RoFormer, GPT-NeoX, Llama-2"), (500000, "Llama-3")),
}
_CE_CONVENTIONS: dict[str, tuple[tuple[Any, str], ...]] = {
    "reduction": (("mean", "the mean over the targets that are not ignored: PyTorch's and "
                           "Hugging Face's default"),
                  ("sum", "the sum over the targets (PyTorch reduction='sum')")),
}
_SCALE_CONVENTIONS: dict[str, tuple[tuple[Any, str], ...]] = {
    "scale": ((None, "1/sqrt(d_k): Vaswani et al. 2017"), ("linear", "1/d_k: muP"),
              (1.0, "no scale (folded into the query projection)")),
}
_SOFTMAX_CONVENTIONS: dict[str, tuple[tuple[Any, str], ...]] = {
    "masked_row": (("zero", "an all-masked row gives zeros: nlaverify, FlashAttention's safe "
                            "softmax"),
                   ("nan", "an all-masked row gives NaN: torch.softmax, jax.nn.softmax")),
}
_ALIGN_CONVENTIONS: dict[str, tuple[tuple[Any, str], ...]] = {
    **_SCALE_CONVENTIONS,
    "align": (("bottom_right", "query i sees keys j <= i + n_k - n: FlashAttention >= 2.1, "
                               "decoding with a KV cache"),
              ("top_left", "query i sees keys j <= i: torch scaled_dot_product_attention("
                           "is_causal=True), FlashAttention < 2.1")),
}
CONVENTIONS: dict[str, dict[str, tuple[tuple[Any, str], ...]]] = {
    "softmax": _SOFTMAX_CONVENTIONS,
    "attention": _SCALE_CONVENTIONS,
    "attention_mup": _SCALE_CONVENTIONS,
    "causal_attention": _SCALE_CONVENTIONS,
    "causal_attention_kv": _ALIGN_CONVENTIONS,
    "rope": _ROPE_CONVENTIONS,
    "rope_half": _ROPE_CONVENTIONS,
    "cross_entropy": _CE_CONVENTIONS,
    "cross_entropy_sum": _CE_CONVENTIONS,
}


def conventions(spec: OpSpec) -> dict[str, tuple[tuple[Any, str], ...]]:
    """The conventions of ``spec`` that are options (:data:`CONVENTIONS`; empty for an op
    without, or for a spec not of the catalogue)."""
    known = OPS.get(spec.name)
    if known is None or known.forward is not spec.forward:
        return {}
    return CONVENTIONS.get(spec.name, {})
