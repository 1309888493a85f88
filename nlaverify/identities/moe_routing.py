r"""The routers of released mixture-of-experts models (issue 23), proved on the running
functions of :mod:`nlaverify.ops.moe_routing` and :mod:`nlaverify.ops.moe_shared` (family
``architectures``).

* ``qwen2_moe_vjp`` / ``_jvp`` (and ``qwen2_moe_norm_*``), ``deepseek_v3_moe_vjp`` /
  ``_jvp``, ``deepseek_v3_gates_vjp`` / ``_jvp``: for every record of
  :data:`~nlaverify.ops.moe_specs.MOE_OPS`, the generic proofs of the ``jacobians`` family
  (:func:`~nlaverify.symbolic.vjp_proof.prove_vjp`,
  :func:`~nlaverify.symbolic.vjp_proof.prove_jvp`), the routing held fixed (the selection is
  piecewise constant: its derivative is 0 almost everywhere).
* ``moe_bias_chooses_never_weighs``: DeepSeek-V3's load-balancing bias changes which experts
  are chosen, never the gate values: on every weak order of four affinities and every bias of
  a grid, the running router's gates are :math:`\rho\, s_e/(\sum_S s + \epsilon)` on the
  chosen set :math:`S` (the bias absent), :math:`S` is the group-limited top-:math:`k` of
  :math:`s + b` (an independent reference), and some bias changes :math:`S`.
* ``moe_group_limited_all_groups_is_topk``: group-limited routing with ``topk_group ==
  n_group`` is plain top-:math:`k` (ties included), on every weak order of 4 and 6 scores;
  with fewer groups kept it is the reference rule (groups by the sum of their two best).
* ``moe_deepseek_v3_gates_sum``: DeepSeek-V3's gates sum to :math:`\rho\,\Sigma/(\Sigma +
  \epsilon)` for every chosen set (:math:`\rho` at :math:`\epsilon = 0`); Qwen3-MoE's
  renormalised gates to 1, Qwen2-MoE's to the chosen softmax mass.
* ``moe_qwen2_shared_expert``: with a zero shared-gate weight Qwen2-MoE's block is the routed
  experts plus *half* the shared expert (:math:`\sigma(0) = 1/2`); without a shared expert and
  with ``norm_topk_prob`` it is the proved ``moe`` op with SwiGLU experts (Mixtral,
  Qwen3-MoE).

The enumerations are exhaustive over finite sets on which the code's decisions are exact
(rationals, small integers), proofs on those sets, stated as such.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import sympy

from nlaverify.backends import get_namespace
from nlaverify.identities._expectations import _Checks
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.ops import moe as _moe
from nlaverify.ops import moe_routing as _mr
from nlaverify.ops import moe_shared as _ms
from nlaverify.ops.moe_specs import MOE_OPS
from nlaverify.symbolic.exact import symbol_array
from nlaverify.symbolic.vjp_proof import prove_jvp, prove_vjp

__all__ = ["check_group_selections", "derive_bias_chooses_never_weighs", "derive_gates_sum",
           "derive_group_limited_all_groups", "derive_qwen2_shared_expert",
           "reference_choice"]

FAMILY = "architectures"
SEED_DS = ("DeepSeek-AI 2024 (DeepSeek-V3 technical report §2.1.2); Hugging Face "
           "DeepseekV3TopkRouter")
SEED_V2 = ("DeepSeek-AI 2024 (DeepSeek-V2 technical report §2.2); Hugging Face "
           "DeepseekV2Moe, DeepseekV2TopkRouter")
SEED_QWEN = "Qwen team 2024 (Qwen1.5-MoE, Qwen2-MoE); Hugging Face Qwen2MoeSparseMoeBlock"
_TITLES = {"qwen2_moe": "Qwen2-MoE's block (softmax router, sigmoid-gated shared expert)",
           "qwen2_moe_norm": "Qwen2-MoE's block with norm_topk_prob (renormalised gates)",
           "deepseek_v3_moe": "DeepSeek-V3's MoE block (sigmoid router, scaled gates, shared "
                              "experts)",
           "deepseek_v2_moe": "DeepSeek-V2's MoE block (softmax router, scaled gates, shared "
                              "experts)",
           "deepseek_v3_gates": "DeepSeek-V3's gates (normalised sigmoid affinities, scaled)"}


def _prover(prove: Callable[..., Proof], name: str) -> Callable[[], Proof]:
    def derive() -> Proof:
        return prove(MOE_OPS[name])

    derive.__name__ = f"derive_{name}_{'vjp' if prove is prove_vjp else 'jvp'}"
    return derive


for _name, _spec in MOE_OPS.items():
    if not _spec.differentiable:  # the selection: no derivative to prove
        continue
    _seed = (SEED_QWEN if _name.startswith("qwen") else SEED_V2 if "_v2_" in _name
             else SEED_DS)
    _tags = ("moe", "routing-fixed")
    register(Identity(f"{_name}_vjp", FAMILY, f"VJP of {_TITLES[_name]}", _spec.vjp_statement,
                      _seed, _spec.qualified_names, guard(_prover(prove_vjp, _name)),
                      tags=(*_tags, "vjp")))
    register(Identity(f"{_name}_jvp", FAMILY, f"JVP of {_TITLES[_name]}",
                      r"\dot f = \textstyle\sum_a \frac{\partial f}{\partial a}\,\dot a",
                      _seed, (qualname(_spec.forward), qualname(_spec.jvp)),
                      guard(_prover(prove_jvp, _name)), tags=(*_tags, "jvp")))


def reference_choice(v: tuple[Any, ...], top_k: int, n_group: int, topk_group: int
                     ) -> set[int]:
    """The group-limited top-k written independently of the running code: a group's score is
    the sum of its two largest values; the ``topk_group`` best groups (ties: lower group),
    then the ``top_k`` best experts of theirs (ties: lower index)."""
    size = len(v) // n_group
    score = [sum(sorted(v[g * size:(g + 1) * size], reverse=True)[:2]) for g in range(n_group)]
    groups = sorted(range(n_group), key=lambda g: (-score[g], g))[:topk_group]
    allowed = [e for e in range(len(v)) if e // size in groups]
    return set(sorted(allowed, key=lambda e: (-v[e], e))[:top_k])


def _weak_orders(n: int) -> list[tuple[int, ...]]:
    """One integer vector per weak order of ``n`` items (values ``0 .. n - 1``)."""
    return sorted({tuple(sorted(set(z)).index(v) for v in z)
                   for z in itertools.product(range(n), repeat=n)})


def _chosen(mask_row: Any) -> set[int]:
    return {e for e, m in enumerate(mask_row) if m != 0}


def check_group_selections(chk: _Checks, select: Callable[..., Any],
                           reference: Callable[..., set[int]], n_groups: Callable[[int], Any],
                           shift: int, label: str) -> dict[int, int]:
    r"""Check a group-limited selection ``select(xp, v, k, n_group, topk_group)`` on every
    weak order of :math:`E = 4` scores (exact namespace) and :math:`E = 6` (NumPy: float64
    compares and adds these small integers exactly), as integers ``shift``, ..., ``E - 1 +
    shift``: with every group kept it is ``topk_mask``; with fewer, the set of ``reference(z,
    k, n_group, topk_group)`` for every :math:`k` the kept groups allow. ``n_groups(E)``: the
    group counts tried. Returns the number of orders per :math:`E`."""
    counts = {}
    for E in (4, 6):
        orders = _weak_orders(E)
        counts[E] = len(orders)
        xp = get_namespace("sympy" if E == 4 else "numpy")
        v = (np.array([[sympy.Integer(x + shift) for x in z] for z in orders], dtype=object)
             if E == 4 else np.array(orders, dtype=np.float64) + shift)
        for n_group in n_groups(E):
            for k in range(1, E + 1):
                got = select(xp, v, k, n_group, n_group)
                chk.holds(bool(np.all(got == _moe.topk_mask(xp, v, k))),
                          f"E={E}, n_group={n_group}, k={k}: {label} with every group "
                          "kept differs from topk_mask", "")
            for tg in range(1, n_group):
                for k in range(1, tg * (E // n_group) + 1):
                    got = select(xp, v, k, n_group, tg)
                    bad = [z for z, row in zip(orders, got, strict=True)
                           if _chosen(row) != reference(z, k, n_group, tg)]
                    chk.holds(not bad, f"E={E}, n_group={n_group}, topk_group={tg}, k={k}: "
                              "differs from the reference rule at", bad[:1])
    return counts


def derive_group_limited_all_groups() -> Proof:
    chk = _Checks()
    # groups of at least two experts (DeepSeek-V3 scores a group by its best two)
    counts = check_group_selections(chk, _mr.group_limited_topk_mask, reference_choice,
                                    lambda E: {4: (1, 2), 6: (1, 2, 3)}[E], 0, "group-limited")
    return chk.proof([
        Step(rf"Every weak order of $E = 4$ scores ({counts[4]} orders) and of $E = 6$ scores "
             rf"({counts[6]}), as integers $0, \dots, E-1$ (on the exact namespace for $E = 4$, "
             r"on NumPy for $E = 6$: float64 compares and adds these integers exactly, so ties "
             r"are exact), every divisor $n_{\text{group}}$ of $E$ leaving groups of at least two "
             r"experts, and every $k = 1, \dots, E$."),
        Step(r"`group_limited_topk_mask` with $\text{topk\_group} = n_{\text{group}}$ chooses "
             r"exactly the experts of `topk_mask` (the $k$ largest, ties to the lower index): "
             r"keeping every group, the group scores decide nothing."),
        Step(r"With fewer groups kept ($1 \le \text{topk\_group} < n_{\text{group}}$, every "
             r"$k$ they allow) it chooses the set of the reference rule written independently "
             r"(`reference_choice`: a group scores the sum of its two largest values, the best "
             r"groups are kept, ties to the lower group, then the $k$ best of their experts): "
             r"Hugging Face's `DeepseekV3TopkRouter` up to the order of ties, which "
             r"`torch.topk` leaves unspecified."),
    ])


def derive_bias_chooses_never_weighs() -> Proof:
    xp = get_namespace("sympy")
    chk = _Checks()
    E, n_group, rho = 4, 2, Fraction(5, 2)
    eps = Fraction(_mr.DEEPSEEK_V3_GATE_EPS)  # the binary value of the float, exactly
    orders = _weak_orders(E)
    biases = list(itertools.product((Fraction(0), Fraction(1, 2)), repeat=E))
    cases = [(tuple(Fraction(r + 1, E + 1) for r in z), b) for z in orders for b in biases]
    scores = np.array([[_q(x) for x in s] for s, _ in cases], dtype=object)
    bias = np.array([[_q(x) for x in b] for _, b in cases], dtype=object)
    changed = 0
    for topk_group, k in ((1, 1), (1, 2), (2, 2), (2, 3)):
        gates, mask = _run_router(xp, scores, bias, k, n_group, topk_group, rho)
        plain = {s: _chosen(m) for (s, b), m in zip(cases, mask, strict=True) if not any(b)}
        for (s, b), g_row, m_row in zip(cases, gates, mask, strict=True):
            S = _chosen(m_row)
            ref = reference_choice(tuple(x + y for x, y in zip(s, b, strict=True)), k,
                                   n_group, topk_group)
            at = f"topk_group={topk_group}, k={k}, s={_txt(s)}, b={_txt(b)}"
            chk.holds(S == ref, f"{at}: chose {S}, the reference rule on s + b chooses", ref)
            total = sum(s[e] for e in S) + eps
            want = [rho * s[e] / total if e in S else Fraction(0) for e in range(E)]
            chk.holds(all(g - _q(w) == 0 for w, g in zip(want, g_row, strict=True)),
                      f"{at}: gates {_txt(g_row)} are not rho s_e / (sum_S s + eps) on the "
                      "chosen set", "")
            changed += S != plain[s]
    chk.holds(changed > 0, "no bias of the grid changes the chosen experts", "")
    return chk.proof([
        Step(rf"Every weak order of $E = 4$ affinities $s_e = \sigma(l_e) \in \{{1/5, \dots, "
             rf"4/5\}}$ ({len(orders)} orders), exact rationals, each with every bias $b \in \{{0, "
             rf"1/2\}}^4$ ({len(biases)} biases): {len(cases)} tokens; $n_{{\text{{group}}}} "
             r"= 2$ groups of 2, $(\text{topk\_group}, k) \in \{(1,1), (1,2), (2,2), (2,3)\}$, "
             r"$\rho = 5/2$, $\epsilon$ the binary value of $10^{-20}$."),
        Step(r"`deepseek_v3_route` (what `deepseek_v3_router` runs on $s = \sigma(xW_r)$) "
             r"chooses the set $S$ of the reference rule on $s + b$ "
             r"(`reference_choice`), and its gates are exactly",
             r"g_e = \rho\,\frac{[e\in S]\,s_e}{\sum_{e'\in S}s_{e'} + \epsilon}:"),
        Step(r"the bias is absent from the gate values: it acts through $S$ alone, so two "
             r"biases that choose the same experts give the same gates. And it does choose: "
             rf"{changed} of the (token, setting) pairs choose other experts than at $b = 0$."),
    ])


def _txt(v: Any) -> str:
    return "(" + ", ".join(str(x) for x in v) + ")"


def _q(x: Fraction) -> sympy.Rational:
    return sympy.Rational(x.numerator, x.denominator)


def _run_router(xp: Any, scores: Any, bias: Any, k: int, n_group: int, topk_group: int,
                rho: Fraction) -> tuple[Any, Any]:
    """The running routing of the affinities ``(N, E)``, each token with its own bias row:
    one call per distinct bias (Hugging Face's ``scores + e_score_correction_bias``
    broadcasts one bias over the tokens)."""
    gates = np.empty(scores.shape, dtype=object)
    mask = np.empty(scores.shape, dtype=object)
    for b in {tuple(row) for row in bias}:
        rows = [i for i, row in enumerate(bias) if tuple(row) == b]
        g, m = _mr.deepseek_v3_route(xp, scores[rows], np.array(b, dtype=object), top_k=k,
                                      n_group=n_group, topk_group=topk_group,
                                      routed_scaling_factor=_q(rho))
        gates[rows], mask[rows] = g, m
    return gates, mask


def derive_gates_sum() -> Proof:
    xp = get_namespace("sympy")
    xp.reset_shifts()
    chk = _Checks()
    E = 4
    s = np.array([sympy.Symbol(f"s_{e + 1}", positive=True) for e in range(E)], dtype=object)
    rho, eps = sympy.Symbol("rho", positive=True), sympy.Symbol("epsilon", positive=True)
    masks = [m for m in itertools.product((0, 1), repeat=E) if any(m)]
    for m in masks:
        M = xp.asarray(np.array(m, dtype=object))
        total = sum(s[e] for e in range(E) if m[e])
        g = _mr.deepseek_v3_gates(xp, s, M, routed_scaling_factor=rho, eps=eps)
        chk.zero(sympy.Add(*g) - rho * total / (total + eps), f"mask {m}: sum g - rho S/(S+eps)",
                 rational=True)
        g0 = _mr.deepseek_v3_gates(xp, s, M, routed_scaling_factor=rho, eps=0)
        chk.zero(sympy.Add(*g0) - rho, f"mask {m}, eps = 0: sum g - rho", rational=True)
        logits = symbol_array("l", (E,))
        gq = _moe._gates(xp, logits, M, True)[0]
        chk.zero(xp.without_shifts(sympy.Add(*gq)) - 1, f"mask {m}: Qwen3 sum g - 1")
        gq2, p = _moe._gates(xp, logits, M, False)
        chk.zero(xp.without_shifts(sympy.Add(*gq2) - sum(p[e] for e in range(E) if m[e])),
                 f"mask {m}: Qwen2 sum g - chosen softmax mass")
    return chk.proof([
        Step(r"Symbolic positive affinities $s_1, \dots, s_4$, positive $\rho$ "
             r"(`routed_scaling_factor`) and $\epsilon$, and each of the "
             rf"{len(masks)} nonempty chosen sets $S$; `deepseek_v3_gates` sums to",
             r"\sum_e g_e = \rho\,\frac{\Sigma}{\Sigma + \epsilon},\quad \Sigma = "
             r"\sum_{e\in S}s_e,\qquad \text{and to } \rho \text{ exactly at } \epsilon = 0:"),
        Step(r"DeepSeek-V3's gates sum to `routed_scaling_factor` up to the relative "
             r"$\epsilon/(\Sigma+\epsilon)$ of Hugging Face's $+10^{-20}$, below float64's unit "
             r"roundoff $2^{-53}$ whenever $\Sigma > 10^{-20}/2^{-53} \approx 9\cdot 10^{-5}$."),
        Step(r"On symbolic logits $l$, Qwen3-MoE's renormalised gates (`norm_topk_prob`, "
             r"`_gates(..., renormalize=True)`) sum to exactly 1 (no $\epsilon$), and "
             r"Qwen2-MoE's (`norm_topk_prob=False`) to the softmax mass of the chosen "
             r"experts, $\sum_{e\in S} p_e < 1$ when $S$ is not every expert."),
    ])


def derive_qwen2_shared_expert() -> Proof:
    xp = get_namespace("sympy")
    chk = _Checks()
    n, d, E, m, f = 2, 1, 3, 1, 1
    X = symbol_array("x", (n, d))
    mask = xp.asarray(_fixed_mask(n, E))
    W_r = symbol_array("r", (d, E))
    W = [symbol_array(a, s) for a, s in (("a", (E, d, m)), ("b", (E, d, m)), ("c", (E, m, d)))]
    U = [symbol_array(a, s) for a, s in (("u", (d, f)), ("v", (d, f)), ("w", (f, d)))]
    for renorm in (False, True):
        xp.reset_shifts()
        got = _ms.qwen2_moe(xp, X, mask, W_r, *W, *U, xp.zeros((d,)), renormalize=renorm)
        xp.reset_shifts()
        routed = _moe.moe(xp, X, xp.matmul(X, W_r), mask, *W, activation="swiglu",
                          renormalize=renorm)
        shared = _ms.swiglu_mlp(xp, X, *U)[1]
        chk.zero(xp.without_shifts(got - routed - sympy.Rational(1, 2) * shared),
                 f"renormalize={renorm}: w_sg = 0 gives routed + S/2")
    xp.reset_shifts()
    zero_u = [U[0], U[1], xp.zeros((f, d))]
    got = _ms.qwen2_moe(xp, X, mask, W_r, *W, *zero_u, symbol_array("z", (d,)),
                        renormalize=True)
    xp.reset_shifts()
    ref = _moe.moe(xp, X, xp.matmul(X, W_r), mask, *W, activation="swiglu")
    chk.zero(xp.without_shifts(got - ref), "U2 = 0, norm_topk_prob: the moe op")
    return chk.proof([
        Step(rf"$n = {n}$ tokens of width $d = {d}$, $E = {E}$ SwiGLU experts of width "
             rf"${m}$, the fixed routing (token $t$: experts $t, t+1 \bmod 3$), a shared "
             rf"expert of width ${f}$; every weight an independent real symbol."),
        Step(r"With $w_{sg} = 0$, `qwen2_moe` equals the proved `moe` op (SwiGLU experts, "
             r"router logits $XW_r$) plus half the shared expert, with and without "
             r"`norm_topk_prob`:",
             r"y = \sum_e g_e E_e(x) + \sigma(0)\,S(x) = \sum_e g_e E_e(x) + \tfrac12 S(x)."),
        Step(r"With the shared expert's down projection $U_2 = 0$ (no shared expert) and "
             r"`norm_topk_prob`, `qwen2_moe` is the `moe` op with renormalised gates for "
             r"every shared-gate weight: Qwen3-MoE's block, and Mixtral's."),
    ])


def _fixed_mask(n: int, E: int) -> np.ndarray:
    from nlaverify.ops.opspec import fixed_routing_mask

    return np.asarray(fixed_routing_mask(n, E), dtype=object)


register(Identity(
    "moe_bias_chooses_never_weighs", FAMILY,
    "DeepSeek-V3's load-balancing bias chooses the experts, never weighs them",
    r"S = \operatorname{top}_k^{\text{group}}(s + b),\quad g_e = \rho\,\frac{[e\in S]\,s_e}"
    r"{\sum_{e'\in S}s_{e'} + \epsilon}\ \text{(no } b\text{)}",
    SEED_DS, (qualname(_mr.deepseek_v3_route), qualname(_mr.deepseek_v3_select),
              qualname(_mr.deepseek_v3_gates), qualname(_mr.group_limited_topk_mask)),
    guard(derive_bias_chooses_never_weighs), tags=("moe", "exhaustive")))

register(Identity(
    "moe_group_limited_all_groups_is_topk", FAMILY,
    "Group-limited routing keeping every group is plain top-k",
    r"\operatorname{top}_k^{\text{group}}(v;\ n_{\text{group}},\ \text{topk\_group} = "
    r"n_{\text{group}}) = \operatorname{top}_k(v)",
    SEED_DS, (qualname(_mr.group_limited_topk_mask), qualname(_mr.masked_topk_mask),
              qualname(_moe.topk_mask)),
    guard(derive_group_limited_all_groups), tags=("moe", "exhaustive")))

register(Identity(
    "moe_deepseek_v3_gates_sum", FAMILY,
    "DeepSeek-V3's gates sum to routed_scaling_factor (up to its 1e-20)",
    r"\sum_e g_e = \rho\,\frac{\sum_{e\in S}s_e}{\sum_{e\in S}s_e + \epsilon}",
    SEED_DS + "; " + SEED_QWEN, (qualname(_mr.deepseek_v3_gates), qualname(_moe._gates)),
    guard(derive_gates_sum), tags=("moe", "closed-form")))

register(Identity(
    "moe_qwen2_shared_expert", FAMILY,
    "Qwen2-MoE's shared expert: half weight at a zero gate, none without it",
    r"\operatorname{qwen2\_moe}(x;\ w_{sg} = 0) = \operatorname{moe}(x) + \tfrac12 S(x)",
    SEED_QWEN, (qualname(_ms.qwen2_moe), qualname(_moe.moe)),
    guard(derive_qwen2_shared_expert), tags=("moe", "closed-form")))
