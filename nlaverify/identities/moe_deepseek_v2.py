r"""Identities of DeepSeek-V2's router (DeepSeek-V2 technical report §2.2; Hugging Face
``DeepseekV2TopkRouter``, :mod:`nlaverify.ops.moe_deepseek_v2`), beside the VJP/JVP proofs
of ``deepseek_v2_moe`` (registered with the other records of
:data:`~nlaverify.ops.moe_specs.MOE_OPS` by :mod:`nlaverify.identities.moe_routing`):

* ``moe_group_max_all_groups_is_topk``: ``group_limited_greedy`` keeping every group is
  ``greedy`` (plain top-:math:`k`), and with fewer groups kept it chooses the set of a
  reference rule written independently (groups scored by their **max**), exhaustively over
  every weak order of :math:`E = 4` and :math:`E = 6` scores.
"""

from __future__ import annotations

from typing import Any

from nlaverify.identities._expectations import _Checks
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.identities.moe_routing import check_group_selections
from nlaverify.ops import moe as _moe
from nlaverify.ops import moe_deepseek_v2 as _v2

__all__ = ["derive_group_max_all_groups", "reference_choice_max"]

FAMILY = "architectures"
SEED_V2 = ("DeepSeek-AI 2024 (DeepSeek-V2 technical report §2.2.2, device-limited routing); "
           "Hugging Face DeepseekV2TopkRouter (topk_method='group_limited_greedy')")


def reference_choice_max(v: tuple[Any, ...], top_k: int, n_group: int, topk_group: int
                         ) -> set[int]:
    """DeepSeek-V2's group-limited top-k written independently of the running code: a group
    scores its largest value; the ``topk_group`` best groups (ties: lower group), then the
    ``top_k`` best experts of theirs (ties: lower index)."""
    size = len(v) // n_group
    score = [max(v[g * size:(g + 1) * size]) for g in range(n_group)]
    groups = sorted(range(n_group), key=lambda g: (-score[g], g))[:topk_group]
    allowed = [e for e in range(len(v)) if e // size in groups]
    return set(sorted(allowed, key=lambda e: (-v[e], e))[:top_k])


def derive_group_max_all_groups() -> Proof:
    r"""``deepseek_v2_select`` with every group kept is ``topk_mask``; with fewer, the
    reference rule :func:`reference_choice_max`, for every weak order of 4 and 6 scores."""
    chk = _Checks()
    # shifted to 1..E: positive, as affinities (a softmax) are; HF's masked 0 is below
    counts = check_group_selections(
        chk, _v2.deepseek_v2_select, reference_choice_max,
        lambda E: [g for g in range(1, E + 1) if E % g == 0], 1, "group-limited (max)")
    return chk.proof([
        Step(rf"Every weak order of $E = 4$ scores ({counts[4]} orders) and of $E = 6$ scores "
             rf"({counts[6]}), as integers $1, \dots, E$ (positive, as affinities are; exact "
             r"namespace for $E = 4$, NumPy for $E = 6$, whose float64 compares these integers "
             r"exactly), every divisor "
             r"$n_{\text{group}}$ of $E$ (groups of one expert included), every $k$."),
        Step(r"`deepseek_v2_select` with $\text{topk\_group} = n_{\text{group}}$ chooses "
             r"exactly the experts of `topk_mask` (``group_limited_greedy`` keeping every "
             r"group is ``greedy``)."),
        Step(r"With $1 \le \text{topk\_group} < n_{\text{group}}$ it chooses the set of "
             r"`reference_choice_max` (a group scores its **largest** value, the best groups "
             r"kept, ties to the lower group, then the $k$ best of their experts): Hugging "
             r"Face's `DeepseekV2TopkRouter` up to the order of ties."),
    ])


register(Identity(
    "moe_group_max_all_groups_is_topk", FAMILY,
    "DeepSeek-V2's group-limited routing (groups scored by their max) keeping every group "
    "is plain top-k",
    r"\operatorname{top}_k^{\max\text{-group}}(v;\ n_{\text{group}},\ \text{topk\_group} = "
    r"n_{\text{group}}) = \operatorname{top}_k(v)",
    SEED_V2, (qualname(_v2.deepseek_v2_select), qualname(_v2.group_max_topk_mask),
              qualname(_moe.topk_mask)),
    guard(derive_group_max_all_groups), tags=("moe", "exhaustive")))
