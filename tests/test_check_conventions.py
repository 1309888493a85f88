"""Conventions are options, each proved (issue 34, item 3): RoPE's pairing (``layout``:
interleaved, RoFormer; half, GPT-NeoX and Hugging Face Llama's ``rotate_half``) and base
(10000; Llama-3's 500000). A half-split kernel passes with its layout and fails without it,
the report naming the layout (and base) it follows; ``op_signature`` states the
conventions in force.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from nlaverify.check import check_op, op_signature  # noqa: E402
from nlaverify.ops.conventions import conventions  # noqa: E402
from nlaverify.ops.registry import OPS  # noqa: E402


def hf_rope(base: float):
    """RoPE as Hugging Face Llama writes it: frequencies duplicated over the two halves,
    ``rotate_half`` pairing coordinate i with i + d_h/2."""

    def rope(X):
        n, d = X.shape[-2], X.shape[-1]
        inv = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
        freqs = torch.outer(torch.arange(n, dtype=torch.float64), inv)
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos().to(X.dtype), emb.sin().to(X.dtype)
        x1, x2 = X[..., : d // 2], X[..., d // 2:]
        return X * cos + torch.cat([-x2, x1], dim=-1) * sin

    return rope


def test_op_signature_states_the_conventions() -> None:
    assert op_signature("rope") == ("rope(X[..., h, n, d_h]); static: base=10000, "
                                    "layout='interleaved'")
    assert "layout='half'" in op_signature("rope_half")
    assert set(conventions(OPS["rope"])) == {"layout", "base"}


def test_half_split_rope_passes_with_its_layout() -> None:
    report = check_op(hf_rope(10000.0), "rope", static={"layout": "half"}, dtype="float32")
    assert report.ok, report
    report = check_op(hf_rope(500000.0), "rope_half", dtype="float32")
    assert report.ok, report


def test_half_split_rope_fails_without_it_and_the_report_names_the_layout() -> None:
    report = check_op(hf_rope(10000.0), "rope", dtype="float32")
    assert report.failures, report
    notes = "\n".join(report.notes)
    assert "conventions in force: layout='interleaved'" in notes, notes
    assert "your forward follows layout='half' (pairs (i, i + d_h/2)" in notes, notes
    assert "static={'layout': 'half'}" in notes, notes
    # Llama-3's base as well: both conventions named
    report = check_op(hf_rope(500000.0), "rope", dtype="float32")
    notes = "\n".join(report.notes)
    assert report.failures and "layout='half'" in notes and "base=500000" in notes, notes


def test_a_wrong_base_is_not_explained_away() -> None:
    """A base no convention uses fails with the conventions in force stated and no
    'follows' line (nothing to blame on a convention)."""
    report = check_op(hf_rope(12345.0), "rope", static={"layout": "half"}, dtype="float32")
    notes = "\n".join(report.notes)
    assert report.failures and "conventions in force" in notes
    assert "your forward follows" not in notes, notes


def torch_ce(reduction: str = "mean", ignore_index: int = -100):
    def ce(Z, targets):
        return torch.nn.functional.cross_entropy(Z.reshape(-1, Z.shape[-1]),
                                                 targets.reshape(-1), reduction=reduction,
                                                 ignore_index=ignore_index)

    return ce


def test_cross_entropy_reduction_and_ignore_index_are_options() -> None:
    assert check_op(torch_ce(), "cross_entropy", dtype="float32").ok
    assert check_op(torch_ce("sum"), "cross_entropy", static={"reduction": "sum"},
                    dtype="float32").ok
    assert check_op(torch_ce("sum"), "cross_entropy_sum", dtype="float32").ok
    # the drawn padding uses the ignore index in force
    report = check_op(torch_ce(ignore_index=-1), "cross_entropy", static={"ignore_index": -1},
                      dtype="float32")
    assert report.ok, report
    assert not check_op(torch_ce(ignore_index=-1), "cross_entropy", dtype="float32").ok


def test_a_summed_loss_is_named_as_such() -> None:
    report = check_op(torch_ce("sum"), "cross_entropy", dtype="float32")
    notes = "\n".join(report.notes)
    assert report.failures and "conventions in force: reduction='mean'" in notes, notes
    assert "your forward follows reduction='sum'" in notes, notes


def attention_scaled(factor):
    def attn(Q, K, V):
        d = Q.shape[-1]
        return torch.softmax(Q @ K.transpose(-2, -1) * factor(d), dim=-1) @ V

    return attn


def test_the_attention_scale_is_an_option() -> None:
    mup = attention_scaled(lambda d: 1.0 / d)
    assert check_op(mup, "attention", static={"scale": "linear"}, dtype="float32").ok
    assert check_op(mup, "attention_mup", dtype="float32").ok
    assert check_op(attention_scaled(lambda d: 1.0), "attention", static={"scale": 1.0},
                    dtype="float32").ok
    report = check_op(mup, "attention", dtype="float32", shapes={"d_k": (4, 8)})
    notes = "\n".join(report.notes)
    assert report.failures and "your forward follows scale='linear' (1/d_k: muP)" in notes, \
        notes


def test_the_masked_row_convention_is_an_option() -> None:
    """All-masked softmax rows (hostile='extreme'): torch gives NaN, the op zeros. With
    masked_row='nan' torch's own softmax passes; without, it fails and the note names the
    convention."""
    def sm(Z):
        return torch.softmax(Z, dim=-1)

    assert check_op(sm, "softmax", static={"masked_row": "nan"}, hostile="extreme",
                    dtype="float32").ok
    report = check_op(sm, "softmax", hostile="extreme", dtype="float32")
    notes = "\n".join(report.notes)
    assert report.failures and "your forward follows masked_row='nan'" in notes, notes


def _sdpa_top_left(Q, K, V):
    """torch's causal SDPA: query i sees keys j <= i (top-left, whatever the key count)."""
    return torch.nn.functional.scaled_dot_product_attention(Q, K, V, is_causal=True)


def _sdpa_bottom_right(Q, K, V):
    """A KV-cache kernel: the last query sees every key (bottom-right, FlashAttention 2.1)."""
    n, m = Q.shape[-2], K.shape[-2]
    mask = torch.ones(n, m, dtype=torch.bool).tril(diagonal=m - n)
    return torch.nn.functional.scaled_dot_product_attention(Q, K, V, attn_mask=mask)


def test_the_causal_alignment_is_an_option() -> None:
    """Fewer queries than keys: bottom-right (the default, a KV cache) and top-left
    (torch's is_causal) masks differ; each kernel passes under its own alignment, and a
    top-left kernel checked against bottom-right fails with a note naming 'top_left'."""
    assert set(conventions(OPS["causal_attention_kv"])) == {"scale", "align"}
    assert "align='bottom_right'" in op_signature("causal_attention_kv")
    assert check_op(_sdpa_bottom_right, "causal_attention_kv", examples=4).ok
    assert check_op(_sdpa_top_left, "causal_attention_kv", static={"align": "top_left"},
                    examples=4).ok
    r = check_op(_sdpa_top_left, "causal_attention_kv", examples=4)
    assert not r.ok
    assert any("follows align='top_left'" in n for n in r.notes), r.notes
    r = check_op(_sdpa_bottom_right, "causal_attention_kv", static={"align": "top_left"},
                 examples=4)
    assert not r.ok
    assert any("follows align='bottom_right'" in n for n in r.notes), r.notes


def test_a_bad_alignment_is_refused() -> None:
    from nlaverify.errors import CheckError

    with pytest.raises(CheckError, match="align"):
        check_op(_sdpa_top_left, "causal_attention_kv", static={"align": "top-left"})


def test_shapes_the_op_cannot_take_are_refused() -> None:
    """causal_attention_kv raises n_k to n (no more queries than keys): a shapes= range for
    n_k that no drawn case could keep is refused, not overridden silently."""
    from nlaverify.errors import CheckError

    with pytest.raises(CheckError, match="needs n_k = 8"):
        check_op(_sdpa_bottom_right, "causal_attention_kv", shapes={"n": (8, 12), "n_k": (1, 3)})
    assert check_op(_sdpa_bottom_right, "causal_attention_kv", shapes={"n": 2, "n_k": (2, 5)},
                    examples=3).ok
