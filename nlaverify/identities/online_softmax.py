r"""The ``online_softmax`` family: blockwise (FlashAttention) attention is softmax attention,
for every split of the keys into blocks and every order of merging the blocks' statistics
(Baggag & Saad §3.4.2, §3.4.4; Milakov & Gimelshein 2018; Dao et al. 2022).

Both identities run the functions of :mod:`nlaverify.ops.online_softmax` on the exact
SymPy namespace, where every stability shift (each block's :math:`m_b` and each merge's
:math:`m'`) is an *independent opaque real symbol*. Nothing is set to 0: a merge that
forgot to rescale by :math:`e^{m_a - m'}` would leave the shifts in the result and be
refuted. The VJP and JVP (FlashAttention's backward, the forward-mode online softmax) are
proved by the ``jacobians`` family (``blockwise_attention_vjp``, ...) and the batch axis
by the ``batching`` family.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import sympy

from nlaverify.backends import get_namespace
from nlaverify.identities._expectations import _Checks, _obj
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.ops import online_softmax as _os
from nlaverify.ops import sdpa as _sd
from nlaverify.ops import softmaxes as _sm
from nlaverify.symbolic.exact import symbol_array
from nlaverify.symbolic.normal_form import rational_zero

_F = "online_softmax"
SEED = "Baggag & Saad §3.4.2, §3.4.4; Milakov & Gimelshein 2018; Dao et al. 2022, Alg. 1"


def compositions(n: int) -> Iterator[tuple[int, ...]]:
    """Every split of ``n`` keys into contiguous nonempty blocks (:math:`2^{n-1}` of them)."""
    for cuts in itertools.product((False, True), repeat=n - 1):
        sizes, run = [], 1
        for cut in cuts:
            if cut:
                sizes.append(run)
                run = 1
            else:
                run += 1
        yield (*sizes, run)


def merge_trees(leaves: tuple[int, ...]) -> Iterator[Any]:
    """Every order of merging ``leaves``: the binary trees with ordered children over them
    (:math:`(2b-2)!/(b-1)!` for :math:`b` leaves: associativity *and* commutativity)."""
    if len(leaves) == 1:
        yield leaves[0]
        return
    rest = leaves[1:]
    for r in range(len(rest) + 1):
        for chosen in itertools.combinations(rest, r):
            left = (leaves[0], *chosen)
            right = tuple(x for x in rest if x not in chosen)
            if not right:
                continue
            for a in merge_trees(left):
                for b in merge_trees(right):
                    yield (a, b)
                    yield (b, a)


def _evaluate(xp: Any, tree: Any, stats: list[tuple[Any, ...]],
              memo: dict | None = None) -> tuple[Any, ...]:
    """The statistics of ``tree``, by ``merge_statistics`` at each inner node. ``memo``: the
    statistics of the subtrees already merged (over the same ``stats``), run once for all
    the trees that contain them; within one tree the subtrees are distinct, so each of its
    merges has its own shift symbols as without it."""
    if isinstance(tree, int):
        return stats[tree]
    if memo is not None and tree in memo:
        return memo[tree]
    out = _os.merge_statistics(xp, _evaluate(xp, tree[0], stats, memo),
                               _evaluate(xp, tree[1], stats, memo))
    if memo is not None:
        memo[tree] = out
    return out


def _tree_text(tree: Any) -> str:
    return f"B{tree + 1}" if isinstance(tree, int) else \
        f"({_tree_text(tree[0])} ⊕ {_tree_text(tree[1])})"


def _exp_equal(chk: _Checks, a: Any, b: Any, what: str) -> None:
    """``a == b`` entrywise, for sums of :math:`c\\,e^{u}` (rational normal form,
    :func:`~nlaverify.symbolic.normal_form.rational_zero`, whose exponentials of a sum split
    into products: the canonical form of ``_canon``; else the exact zero test, which
    refutes at a rational point)."""
    for idx, v in np.ndenumerate(_obj(a - b)):
        if rational_zero(v):
            chk.holds(True, what)
        else:
            chk.zero(v, f"{what}{list(idx)}")


def _ratio_equal(chk: _Checks, a: Any, b: Any, what: str) -> None:
    """``a == b`` entrywise for quotients of sums of exponentials: the numerator of the
    difference over a common (positive) denominator is 0 (in the rational normal form)."""
    for idx, v in np.ndenumerate(_obj(a - b)):
        if rational_zero(v):
            chk.holds(True, what)
        else:
            chk.zero(v, f"{what}{list(idx)}", rational=True)


N_KEYS = 4


def derive_merge() -> Proof:
    """Every split of 4 keys and every merge order give softmax attention (scores given)."""
    xp = get_namespace("sympy")
    xp.reset_shifts()
    s = symbol_array("s", (2, N_KEYS))
    S = s.copy()
    S[1, 2:] = -sympy.oo  # row 1 sees keys 0, 1 only (a causal row: a fully masked block)
    V = symbol_array("v", (N_KEYS, 1))
    reference = _obj(xp.matmul(_sm.softmax(xp, S), V))
    chk, n_splits, n_trees, shown = _Checks(), 0, 0, None
    for sizes in compositions(N_KEYS):
        n_splits += 1
        bounds = _os.block_bounds(N_KEYS, sizes)
        stats = [_os.block_statistics(xp, S[:, lo:hi], V[lo:hi]) for lo, hi in bounds]
        memo: dict = {}
        for tree in merge_trees(tuple(range(len(bounds)))):
            n_trees += 1
            m, ell, acc = _evaluate(xp, tree, stats, memo)
            what = f"split {sizes}, order {_tree_text(tree)}"
            # the invariant: l = sum_j e^{s_j - m}, O = sum_j e^{s_j - m} v_j, for any shift m
            w = xp.exp(S - m)
            _exp_equal(chk, ell, xp.sum(w, axis=-1, keepdims=True), f"{what}: l")
            _exp_equal(chk, acc, xp.matmul(w, V), f"{what}: O")
            if shown is None and len(bounds) == 2:
                shown = (sizes, tree, ell[0, 0])
            if chk.bad:
                return Proof("failed", (Step(f"Checked {n_trees} merge orders."),), chk.bad)
    # the output of any state with the invariant, at an opaque shift mu per row
    mu = symbol_array("mu", (2, 1))
    w = xp.exp(S - mu)
    state = (mu, xp.sum(w, axis=-1, keepdims=True), xp.matmul(w, V))
    _ratio_equal(chk, _os.finalize_statistics(xp, state), reference, "O/l")
    if chk.bad:
        return Proof("failed", (Step(f"Checked {n_trees} merge orders."),), chk.bad)
    sizes, tree, l0 = shown
    steps = (
        Step(f"Scores $s_{{ij}}$ and values $v_j$ are independent real symbols, {N_KEYS} "
             "keys and 2 query rows; row 1 is causal (keys 2, 3 masked, $-\\infty$), so some "
             "blocks are fully masked in it. Each block's statistics come from "
             "`block_statistics`, each merge from `merge_statistics`, with every stability "
             "shift an independent opaque symbol $c_k$."),
        Step(f"All {n_splits} splits of the keys into contiguous blocks, and for each every "
             f"binary merge tree with ordered children: {n_trees} merge orders in all. For "
             f"example, split {sizes} merged as {_tree_text(tree)} gives, in row 0,",
             r"\ell = " + sympy.latex(l0)),
        Step("In every case the merged statistics satisfy the invariant, exactly (sums of "
             "exponentials in canonical form), whatever the shifts:",
             r"\ell_i = \textstyle\sum_j e^{s_{ij} - m_i},\qquad "
             r"O_i = \textstyle\sum_j e^{s_{ij} - m_i}\, v_j^\top ,"),
        Step("Finally `finalize_statistics` of *any* state with this invariant, at an opaque "
             "shift $\\mu_i$ per row, equals `softmax`$(S)\\,V$ (the numerator of the "
             "difference is 0), so every split and every merge order gives softmax attention: "
             f"{chk.n} exact comparisons in all.",
             r"\frac{O_i}{\ell_i} = \frac{\sum_j e^{s_{ij} - \mu_i} v_j^\top}"
             r"{\sum_j e^{s_{ij} - \mu_i}} = \operatorname{softmax}(s_i)\,V ."),
    )
    return Proof("proved", steps, f"{n_trees} merge orders, {chk.n} comparisons")


def derive_blockwise() -> Proof:
    """The running `blockwise_attention`, for every split of 3 keys, equals
    `sdpa.attention` (plain, causal, sliding window) and a decoding query its last row."""
    xp = get_namespace("sympy")
    xp.reset_shifts()
    n, d = 3, 1
    Q, K, V = (symbol_array(x, (n, d)) for x in ("q", "k", "v"))
    chk, count, shown = _Checks(), 0, None
    masks = ((False, None), (True, None), (True, 2))
    for (causal, window), sizes in itertools.product(masks, compositions(n)):
        ref = _obj(_sd.attention(xp, Q, K, V, causal, window))
        got = _obj(_os.blockwise_attention(xp, Q, K, V, block=sizes, causal=causal,
                                           window=window))
        label = f"block {sizes}, causal={causal}, window={window}"
        _ratio_equal(chk, got, ref, label)
        # a decoding step: the last query alone against the whole cache (bottom-right causal)
        last = _obj(_os.blockwise_attention(xp, Q[-1:], K, V, block=sizes, causal=causal,
                                            window=window))
        _ratio_equal(chk, last, ref[-1:], f"{label}, last query alone")
        count += 1
        if shown is None and causal and len(sizes) == 2:
            shown = (sizes, got[1, 0])
        if chk.bad:
            return Proof("failed", (Step(f"Checked {count} cases."),), chk.bad)
    sizes, entry = shown
    steps = (
        Step(f"$Q, K, V \\in \\mathbb R^{{{n}\\times{d}}}$ of independent real symbols. "
             "`blockwise_attention` runs on the exact namespace with an explicit block "
             f"split, for all {2 ** (n - 1)} splits of the {n} keys, without a mask, causal, "
             "and causal with a sliding window $w = 2$."),
        Step(f"For example, causal with blocks {sizes}, row 1 of the output (the shifts "
             "$c_k$ are opaque symbols):", r"A_{1} = " + sympy.latex(entry)),
        Step("Every output entry equals `sdpa.attention` with the same mask (the numerator of "
             "the difference is 0), and the last query run alone against all keys (a "
             f"decoding step, bottom-right causal alignment) equals the last row: {chk.n} "
             "exact comparisons.",
             r"\operatorname{blockwise}(Q, K, V) = \operatorname{softmax}\!\Bigl("
             r"\frac{QK^\top}{\sqrt{d}} + M\Bigr)V"),
    )
    return Proof("proved", steps, f"{count} cases, {chk.n} comparisons")


def _reg(id_: str, title: str, statement: str, certifies: tuple, derive: Any) -> None:
    register(Identity(id_, _F, title, statement, SEED, tuple(qualname(f) for f in certifies),
                      guard(derive), tags=("attention", "online_softmax")))


_reg("online_softmax_merge",
     "The online-softmax merge is associative and commutative: any split, any order",
     r"(m, \ell, O) = \bigoplus_b (m_b, \ell_b, O_b) \Rightarrow \ell = \textstyle\sum_j "
     r"e^{s_j - m},\ O = \sum_j e^{s_j - m}v_j,\ O/\ell = \operatorname{softmax}(s)V",
     (_os.block_statistics, _os.merge_statistics, _os.finalize_statistics, _os.block_bounds,
      _sm.softmax), derive_merge)
_reg("blockwise_attention_equals_softmax_attention",
     "Blockwise (FlashAttention) attention equals softmax attention for every block split",
     r"\operatorname{blockwise}_{B_1|\dots|B_T}(Q, K, V) = \operatorname{softmax}\!\Bigl("
     r"\frac{QK^\top}{\sqrt{d_k}} + M\Bigr)V",
     (_os.blockwise_attention, _os.block_scores, _sd.attention), derive_blockwise)
