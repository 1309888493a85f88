"""A user's own op is first-class in check_op (issue 34, item 2): ``user_op`` is exported
from ``nlaverify.check``; without ``vjp=``/``jvp=`` its reference derivatives come from JAX
autodiff of the user's ``xp`` forward in float64, and the report says so (never "proved"
unless ``prove`` ran on the spec); the hostile cases it has none of are a skip row with the
reason, not silently dropped. The worked example is padded attention (a key-padding mask),
the op of docs/check.md.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from nlaverify.check import check_op, prove, user_op  # noqa: E402
from nlaverify.ops import softmax  # noqa: E402

VALID = 2  # keys 0 and 1 are real, the rest padding


def padded_attention(xp, Q, K, V, *, valid):
    """Attention over the first ``valid`` keys: the others are padding."""
    S = xp.matmul(Q, xp.matrix_transpose(K)) / xp.const_sqrt(Q.shape[-1])
    keep = xp.arange(K.shape[-2]) < valid
    return xp.matmul(softmax(xp, xp.where(keep, S, -xp.inf)), V)


def padded_attention_vjp(xp, G, Q, K, V, *, valid):
    P = padded_attention_probs(xp, Q, K, valid)
    dV = xp.matmul(xp.matrix_transpose(P), G)
    dP = xp.matmul(G, xp.matrix_transpose(V))
    dS = P * (dP - xp.sum(dP * P, axis=-1, keepdims=True))
    scale = xp.const_sqrt(Q.shape[-1])
    return xp.matmul(dS, K) / scale, xp.matmul(xp.matrix_transpose(dS), Q) / scale, dV


def padded_attention_probs(xp, Q, K, valid):
    S = xp.matmul(Q, xp.matrix_transpose(K)) / xp.const_sqrt(Q.shape[-1])
    keep = xp.arange(K.shape[-2]) < valid
    return softmax(xp, xp.where(keep, S, -xp.inf))


ARGS = {"Q": ("n", "d"), "K": ("n", "d"), "V": ("n", "d")}
SIZES = {"n": 3, "d": 2}


def torch_padded(Q, K, V):
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    S = S.masked_fill(torch.arange(K.shape[-2]) >= VALID, float("-inf"))
    return torch.softmax(S, dim=-1) @ V


def torch_unmasked(Q, K, V):  # forgot the padding mask
    return torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1) @ V


def torch_masks_queries(Q, K, V):  # masked the query rows instead of the key columns
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    S = S.masked_fill((torch.arange(Q.shape[-2]) >= VALID)[:, None], float("-inf"))
    return torch.nan_to_num(torch.softmax(S, dim=-1)) @ V


def test_user_op_is_exported_and_its_derivatives_come_from_autodiff() -> None:
    spec = user_op(padded_attention, args=ARGS, sizes=SIZES, static={"valid": VALID})
    report = check_op(torch_padded, spec, dtype="float32")
    assert report.ok, report
    checks = {r.check for r in report.rows}
    # every derivative row is there: the VJP of each argument and the JVP
    assert {"vjp (torch autodiff) Q", "vjp (torch autodiff) K", "vjp (torch autodiff) V",
            "jvp (torch autodiff)"} <= checks, "\n".join(f"{r.check}: {r.reason}"
                                                          for r in report.rows)
    note = report.notes[0]
    assert "your op" in note and "JAX autodiff of your forward in float64 (not proved)" in note
    assert "proved (nlaverify derive)" not in note
    # no hostile cases for a user's op: one skip row says so
    hostile = [r for r in report.rows if r.check == "hostile"]
    assert len(hostile) == 1 and "inputs=" in hostile[0].reason


@pytest.mark.parametrize("kernel", [torch_unmasked, torch_masks_queries])
def test_padding_bugs_are_killed(kernel) -> None:
    spec = user_op(padded_attention, args=ARGS, sizes=SIZES, static={"valid": VALID})
    report = check_op(kernel, spec, dtype="float32")
    assert report.failures and report.first_failure.check == "forward", report


def test_the_note_says_proved_only_after_prove() -> None:
    spec = user_op(padded_attention, args=ARGS, sizes=SIZES, static={"valid": VALID},
                   vjp=padded_attention_vjp)
    before = check_op(torch_padded, spec, dtype="float32", examples=2, batch=False)
    assert "its VJP yours, NOT proved" in before.notes[0], before.notes
    assert prove(spec).ok
    after = check_op(torch_padded, spec, dtype="float32", examples=2, batch=False)
    assert "its VJP yours, proved exactly (prove)" in after.notes[0], after.notes
    assert after.ok, after


def test_a_wrong_given_vjp_is_refuted_by_prove_and_named_by_check_op() -> None:
    def wrong_vjp(xp, G, Q, K, V, *, valid):
        dQ, dK, dV = padded_attention_vjp(xp, G, Q, K, V, valid=valid)
        return dQ, dK, 2 * dV

    spec = user_op(padded_attention, args=ARGS, sizes=SIZES, static={"valid": VALID},
                   vjp=wrong_vjp)
    assert not prove(spec).ok
    # the reference is the user's (wrong) VJP: torch's correct autodiff disagrees with it
    report = check_op(torch_padded, spec, dtype="float32", examples=2, batch=False)
    assert report.failures and "NOT proved" in report.notes[0]
    bad = np.asarray([r.where.startswith("V") for r in report.failures])
    assert bad.any(), report


def test_a_forward_jax_cannot_trace_gives_skip_rows_not_a_crash() -> None:
    """A Python branch on values runs on NumPy and mpmath but not under JAX's tracing: the
    VJP and JVP rows are skipped with the reason (the forward is still checked)."""

    def branchy(xp, x):
        return x * (1 if float(xp.sum(x)) > 0 else -1)

    def torch_branchy(x):
        return x * (1 if float(x.sum()) > 0 else -1)

    spec = user_op(branchy, args={"x": ("n", "d")}, sizes={"n": 2, "d": 2})
    report = check_op(torch_branchy, spec, dtype="float32", examples=3, batch=False)
    skips = {r.check: r.reason for r in report.rows if r.verdict == "skip"}
    assert "JAX autodiff of your forward raised" in skips.get("vjp", ""), report
    assert any(r.check == "forward" and r.verdict == "pass" for r in report.rows), report


def torch_no_shift(Q, K, V):  # exp of the raw scores: overflows once they reach ~90
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    E = torch.exp(S) * (torch.arange(K.shape[-2]) < VALID)
    return (E / E.sum(-1, keepdim=True)) @ V


HOSTILE = {"Q": "scores", "K": "scores"}


def test_hostile_cases_by_argument_kind_kill_a_kernel_without_the_max_shift() -> None:
    """The drawn cases cannot see a missing max shift (scores of order 1); the hostile
    queries and keys of ``user_op(hostile=...)`` (scores of 1e4) kill it, in float32 and in
    bfloat16, and the correct kernel passes them (no false alarm)."""
    plain = user_op(padded_attention, args=ARGS, sizes=SIZES, static={"valid": VALID})
    r = check_op(torch_no_shift, plain, dtype="float32")
    # without hostile kinds the bug passes every drawn case; the skip row says what was not
    # tested
    assert r.ok and any(row.check == "hostile" and row.verdict == "skip" for row in r.rows)
    spec = user_op(padded_attention, args=ARGS, sizes=SIZES, static={"valid": VALID},
                   hostile=HOSTILE)
    for dtype in ("float32", "bfloat16"):
        r = check_op(torch_no_shift, spec, dtype=dtype)
        assert not r.ok and any("(hostile seed" in row.check and row.verdict == "fail"
                                for row in r.rows), r
        assert check_op(torch_padded, spec, dtype=dtype).ok


def test_hostile_kinds_are_checked() -> None:
    from nlaverify.check import CheckError

    with pytest.raises(CheckError, match="'W' is not a real argument"):
        user_op(padded_attention, args=ARGS, sizes=SIZES, static={"valid": VALID},
                hostile={"W": "scores"})
    with pytest.raises(CheckError, match="expected a kind among 'logits'"):
        user_op(padded_attention, args=ARGS, sizes=SIZES, static={"valid": VALID},
                hostile={"Q": "huge"})
