r"""The selection-margin rule of ``check_op``: a top-:math:`k` selection within rounding of a
tie is inconclusive, not a failure.

A selection op (:data:`NEAR_TIES`) is piecewise constant: the reference chooses on exact
values, a correct kernel on values it rounded in its dtype. Where an entry's score lies within
that rounding of the :math:`k`-th/:math:`(k+1)`-th boundary, either choice is a correct
kernel's (DeepSeek-V3's :math:`s + b`, rounded once, then summed over a group's two best,
flips a group on a constructed near-tie); an exact tie is broken by index in the reference and
by whatever the kernel's top-:math:`k` does. So the forward row of such a case is judged by
token: a token whose choice differs from the reference

* away from every boundary (margin beyond the rounding radius): the row fails, as before;
* within the radius of a boundary: not judged. If every differing token is such a near tie the
  row is inconclusive (:func:`~nlaverify.check.report.inconclusive_row`), naming the tokens.

Radii (Higham 2002, §3.1, Lemma 3.1; :math:`u` the dtype's unit roundoff,
:func:`nlaverify.tolerance.unit_roundoff`, plus twice float64's for this evaluation's own
rounding; :math:`\gamma_n = nu/(1 - nu)`): an expert's score :math:`\widehat{s + b} = (s +
b)(1 + \delta)` moves by :math:`u|s + b|`, so two experts can swap (or tie) only when their
gap is at most :math:`u(|v_a| + |v_b|)`; a group's score :math:`\widehat{v_1 + v_2}` moves by
:math:`\gamma_2(|v_1| + |v_2|)`, and by :math:`u(|v_2| + |v_3|)` more when its second and third
experts may swap; two groups can swap when their gap is at most the sum of their radii. Plain
``topk_mask`` does no arithmetic on its inputs (exact in the dtype): only exact ties count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from nlaverify.cases.inputs import OpCaseInput
from nlaverify.check.report import Row, inconclusive_row
from nlaverify.tolerance import unit_roundoff

__all__ = ["NEAR_TIES", "deepseek_v2_near_ties", "deepseek_v3_near_ties", "selection_margin",
           "topk_near_ties"]


def _gamma(n: int, u: float) -> float:
    r""":math:`\gamma_n = nu/(1 - nu)` (Higham 2002, Lemma 3.1)."""
    return n * u / (1 - n * u)


def _unit(dtype: str) -> float:
    """The dtype's unit roundoff plus twice float64's (the margins are computed in float64)."""
    return unit_roundoff(dtype) + 2 * unit_roundoff("float64")


def _top_boundary_near(values: np.ndarray, k: int, radius: np.ndarray) -> bool:
    """Whether the ``k``-th and ``(k+1)``-th largest of ``values`` are within the sum of their
    ``radius`` (entrywise) of each other; ``False`` when there is no ``(k+1)``-th."""
    if k >= values.size:
        return False
    order = np.argsort(-values, kind="stable")
    a, b = order[k - 1], order[k]
    return bool(values[a] - values[b] <= radius[a] + radius[b])


def deepseek_v3_near_ties(case: OpCaseInput, dtype: str) -> np.ndarray:
    r"""For each token of a ``deepseek_v3_select`` case, whether the kept groups or the chosen
    experts lie within ``dtype``'s rounding of a boundary (module docstring), evaluated on the
    exact scores :math:`v = s + b` of ``case.args`` (float64, exact in ``dtype``)."""
    s, b = (np.asarray(a, dtype=np.float64) for a in case.args[:2])
    k, n_group, k_group = (int(case.static[x]) for x in ("top_k", "n_group", "topk_group"))
    v = s + b
    E = v.shape[-1]
    size = E // n_group
    u = _unit(dtype)
    flat = v.reshape(-1, E)
    near = np.zeros(flat.shape[0], dtype=bool)
    for i, row in enumerate(flat):
        groups = -np.sort(-row.reshape(n_group, size), axis=-1)  # each group descending
        mag = np.abs(groups)
        score = groups[:, 0] + groups[:, 1]
        third = mag[:, 2] if size > 2 else np.zeros(n_group)
        radius = _gamma(2, u) * (mag[:, 0] + mag[:, 1]) + u * (mag[:, 1] + third)
        if _top_boundary_near(score, k_group, radius):
            near[i] = True
            continue
        kept = np.argsort(-score, kind="stable")[:k_group]
        allowed = np.concatenate([row[g * size:(g + 1) * size] for g in sorted(kept)])
        near[i] = _top_boundary_near(allowed, k, u * np.abs(allowed))
    return near.reshape(v.shape[:-1])


def deepseek_v2_near_ties(case: OpCaseInput, dtype: str) -> np.ndarray:
    r"""For each token of a ``deepseek_v2_select`` case, whether the kept groups or the chosen
    experts tie exactly at a boundary: a group's score is its largest affinity (a comparison,
    no arithmetic: exact in ``dtype`` as the inputs are), the dropped groups' scores 0 (HF's
    ``masked_fill``, exact), so only exact ties are near."""
    s = np.asarray(case.args[0], dtype=np.float64)
    k, n_group, k_group = (int(case.static[x]) for x in ("top_k", "n_group", "topk_group"))
    E = s.shape[-1]
    size = E // n_group
    flat = s.reshape(-1, E)
    near = np.zeros(flat.shape[0], dtype=bool)
    for i, row in enumerate(flat):
        score = row.reshape(n_group, size).max(axis=-1)
        if _top_boundary_near(score, k_group, np.zeros(n_group)):
            near[i] = True
            continue
        kept = np.zeros(n_group)
        kept[np.argsort(-score, kind="stable")[:k_group]] = 1.0
        masked = row * np.repeat(kept, size)   # HF's masked_fill(~score_mask, 0.0)
        near[i] = _top_boundary_near(masked, k, np.zeros_like(masked))
    return near.reshape(s.shape[:-1])


def topk_near_ties(case: OpCaseInput, dtype: str) -> np.ndarray:
    """For each token of a ``topk_mask`` case, whether its ``top_k``-th and next score tie
    exactly (no arithmetic before the comparison: the inputs are exact in ``dtype``)."""
    scores = np.asarray(case.args[0], dtype=np.float64)
    k = int(case.static["top_k"])
    flat = scores.reshape(-1, scores.shape[-1])
    near = [_top_boundary_near(row, k, np.zeros_like(row)) for row in flat]
    return np.asarray(near, dtype=bool).reshape(scores.shape[:-1])


#: the selection ops and their near-tie rule: ``(case, dtype) -> bool per token``
NEAR_TIES: dict[str, Callable[[OpCaseInput, str], np.ndarray]] = {
    "deepseek_v2_select": deepseek_v2_near_ties,
    "deepseek_v3_select": deepseek_v3_near_ties,
    "topk_mask": topk_near_ties,
}


def _tokens(where: np.ndarray) -> list[Any]:
    return [list(t) if len(t) > 1 else t[0] for t in np.argwhere(where).tolist()]


def selection_margin(row: Row, case: OpCaseInput, got: Any, expected: np.ndarray,
                     dtype: str) -> Row:
    """The forward ``row`` of a selection op judged token by token (module docstring): a
    token that differs away from every near tie fails the row (also where an exact tie
    elsewhere made the statistical condition, and so the bound, useless); a failure whose
    every differing token is a near tie becomes inconclusive; otherwise ``row`` as it is."""
    rule = NEAR_TIES.get(case.spec.name)
    got = np.asarray(got)
    if rule is None or row.verdict not in ("pass", "fail") or got.shape != expected.shape or (
            not got.ndim):
        return row
    differ = np.any(got != expected, axis=-1)
    near = rule(case, dtype)
    if not differ.any() or near.shape != differ.shape:
        return row
    if not np.all(near[differ]):
        return replace(row, verdict="fail", reason=f"the selection of token(s) "
                       f"{_tokens(differ & ~near)} differs from the reference away from any "
                       f"near tie (beyond {dtype}'s rounding of every top-k boundary)"
                       + (f"; {row.reason}" if row.reason else ""))
    if row.verdict != "fail":
        return row
    tokens = _tokens(differ)
    return inconclusive_row(
        row.subject, row.check, f"near tie: the selection of token(s) {tokens} differs from "
        f"the reference, and each lies within {dtype}'s rounding of a top-k boundary (a "
        f"correct kernel may choose either side); every other token agrees", where=row.where)
