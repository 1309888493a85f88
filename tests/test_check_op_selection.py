"""The selection-margin rule of ``check_op`` (issue 23 review): a selection within the dtype's
rounding of a top-k boundary is inconclusive, a real selection bug still fails.

The constructed near tie: DeepSeek-V3's ``s + b`` in float32 rounds expert 0 down
(:math:`0.5 + 2^{-25} - 2^{-30} \\to 0.5`) and expert 2 up (:math:`0.5 + 2^{-25} + 2^{-30}
\\to 0.5 + 2^{-24}`), so group 1 (experts 2, 3) outscores group 0 by :math:`2^{-24} -
2^{-28}` in float32 although group 0 wins by :math:`2^{-29}` exactly: a correct float32 kernel
chooses the other group (this failed before the rule). Token 1 is far from any tie.
"""

from __future__ import annotations

import numpy as np

from nlaverify.cases.inputs import OpCaseInput
from nlaverify.check import check_op
from nlaverify.check.op_selection import deepseek_v3_near_ties
from nlaverify.ops.registry import get_op

STATIC = {"top_k": 2, "n_group": 2, "topk_group": 1}
S = np.array([[0.5, 2.0**-10 + 2.0**-28, 0.5, 2.0**-10], [0.9, 0.8, 0.1, 0.2]])
B = np.array([2.0**-25 - 2.0**-30, 0.0, 2.0**-25 + 2.0**-30, 0.0])


def _select(worst_group: bool = False):
    """DeepSeek-V3's selection in the arguments' dtype (NumPy): groups of 2, one kept, its 2
    experts chosen; ``worst_group``: a real bug, the lowest-scoring group kept."""
    def select(scores, bias):
        v = scores + bias  # rounded in the kernel's dtype
        g = v.reshape(*v.shape[:-1], 2, 2).sum(-1)
        keep = np.argmin(g, axis=-1) if worst_group else np.argmax(g, axis=-1)
        return np.repeat(np.eye(2, dtype=scores.dtype)[keep], 2, axis=-1)
    return select


def test_near_tie_is_inconclusive_not_a_failure() -> None:
    r = check_op(_select(), "deepseek_v3_select", dtype="float32", static=STATIC,
                 inputs=[[S, B]])
    assert not r.failures and [row.inconclusive for row in r.rows] == [True]
    assert "token(s) [0]" in r.rows[0].reason and not r.ok  # inconclusive is not a pass
    # in float64 the same kernel chooses as the reference does: a pass
    assert check_op(_select(), "deepseek_v3_select", dtype="float64", static=STATIC,
                    inputs=[[S, B]]).ok


def test_near_ties_are_measured_in_the_dtype() -> None:
    case = OpCaseInput(get_op("deepseek_v3_select"), [S, B], np.zeros_like(S), [], STATIC, "x")
    assert deepseek_v3_near_ties(case, "float32").tolist() == [True, False]
    # the exact margin 2^-29 is far beyond float64's rounding of s + b
    assert deepseek_v3_near_ties(case, "float64").tolist() == [False, False]


def test_a_real_selection_bug_still_fails() -> None:
    bad = _select(worst_group=True)
    # token 1 is no near tie: the wrong group there fails the row, near tie or not at token 0
    r = check_op(bad, "deepseek_v3_select", dtype="float32", static=STATIC, inputs=[[S, B]])
    assert r.failures and r.failures[0].check.startswith("forward")
    drawn = check_op(bad, "deepseek_v3_select", dtype="float32", static=STATIC,
                     hostile=False, examples=3)
    assert drawn.failures
    assert check_op(_select(), "deepseek_v3_select", dtype="float32", static=STATIC,
                    hostile=False, examples=3).ok


def test_plain_topk_exact_ties() -> None:
    scores = np.array([[1.0, 2.0, 2.0], [3.0, 1.0, 2.0]])

    def later_first(x):  # ties broken towards the higher index: a correct top-2 of 3 too
        order = np.argsort(-x[..., ::-1], axis=-1, kind="stable")[..., :1]
        out = np.zeros_like(x)
        np.put_along_axis(out, x.shape[-1] - 1 - order, 1, axis=-1)
        return out

    r = check_op(later_first, "topk_mask", dtype="float32", static={"top_k": 1},
                 inputs=[[scores]])
    assert not r.failures and r.rows[0].inconclusive

    def bottom(x):  # the smallest score: a bug on every token
        out = np.zeros_like(x)
        np.put_along_axis(out, np.argmin(x, axis=-1)[..., None], 1, axis=-1)
        return out

    # token 1 has no tie: the bug fails there, although the exact tie at token 0 makes the
    # statistical condition (and so the normwise bound) useless for the row
    r = check_op(bottom, "topk_mask", dtype="float32", static={"top_k": 1}, inputs=[[scores]])
    assert r.failures and "token(s) [1]" in r.failures[0].reason


def test_radii_are_the_rounding_no_wider() -> None:
    """The near-tie radii are the dtype's rounding and no wider (review of issue 23): a gap
    of a few :math:`u` is judged, so a real selection bug there still fails (a radius grown by
    a factor of 2 or 1000 made such a bug inconclusive and passed every other test). Experts
    at :math:`v \\approx 1` can swap within :math:`u(|v_a| + |v_b|) \\approx 2u`; groups of
    two at :math:`v \\approx 1/2` within :math:`2(\\gamma_2 + u/2) \\approx 5u`."""
    from nlaverify.tolerance import unit_roundoff

    u = unit_roundoff("float32")

    def near(s: np.ndarray, static: dict) -> list[bool]:
        case = OpCaseInput(get_op("deepseek_v3_select"), [s, np.zeros(s.shape[-1])],
                           np.zeros_like(s), [], static, "x")
        return deepseek_v3_near_ties(case, "float32").tolist()

    one_group = {"top_k": 1, "n_group": 1, "topk_group": 1}
    experts = np.array([[1.0, 1 - u, 0.25, 0.5], [1.0, 1 - 3 * u, 0.25, 0.5]])
    assert near(experts, one_group) == [True, False]
    groups = np.array([[0.5, 0.5, 0.5, 0.5 - 4 * u], [0.5, 0.5, 0.5, 0.5 - 8 * u]])
    assert near(groups, STATIC) == [True, False]
