r"""The ``decoding`` family: decoding strategies as exact transformations of the next-token
distribution (Baptista, Stuart & Tran §6; Holtzman et al. 2020; Meister et al. 2023; Nguyen
et al. 2024), proved on the functions of :mod:`nlaverify.decoding` and :mod:`nlaverify.beam`
themselves.

* ``decoding_filter_renormalisation``: for every kept set :math:`K` of a 4-token vocabulary,
  :func:`~nlaverify.decoding.renormalise` on symbolic logits equals Hugging Face's form, the
  softmax of the logits with the dropped ones set to :math:`-\infty`; a shift of the logits
  changes nothing;
* ``decoding_temperature_limits``: :func:`~nlaverify.decoding.tempered` tends, as
  :math:`T \to 0^+`, to the uniform law on the maximisers of :math:`z` (the one-hot of greedy's
  choice when the maximum is unique; greedy takes the lowest id of a tie, inside that support),
  and to the uniform law as :math:`T \to \infty`;
* ``decoding_top_p_smallest_set``: the kept set of top-:math:`p` is, for every probability
  vector of a grid of exact rationals and every threshold (the cumulative sums themselves
  included), a set of mass :math:`\ge p` of the least cardinality among *all* subsets, closed
  upward in probability, ties broken by token id;
* ``decoding_truncation_sets``: top-:math:`k` keeps exactly the tokens with fewer than
  :math:`k` strictly larger logits (ties at the boundary kept: :math:`|K| \ge k`, equality
  without a tie); min-:math:`p`'s threshold in logits is :math:`z_i \ge \max_j z_j + \log
  p_{\min}`; the typical set is closed under typicality, reaches the mass and is minimal;
* ``decoding_beam_width_one_greedy``: beam search of width 1 chooses greedy's token at every
  step for every weak order of the logits at each of three steps, with or without an
  end-of-sequence id, for Hugging Face's default ``early_stopping=False`` and for ``True``;
  with ``"never"``, :math:`\lambda > 0` and an end-of-sequence id it is not greedy (a
  counterexample is found and shown).

The enumerations are exhaustive over finite sets on which the code's decisions are exact
(rationals, or integer logits whose comparisons no rounding can flip); they are proofs on
those sets, stated as such.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import numpy as np
import sympy

from nlaverify import beam as _beam
from nlaverify import decoding as _dec
from nlaverify import strategy as _strategy
from nlaverify.backends import get_namespace
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.symbolic.normal_form import rational_zero

SEED = "Baptista, Stuart & Tran §6"
V = 4
GRID = 8  # probabilities n_i / 8, n_i >= 1: the 35 compositions of 8 into 4 parts


def _clean(xp: Any, v: Any) -> sympy.Expr:
    return sympy.sympify(xp.without_shifts(v))


def _zero(e: Any) -> bool:
    """``e`` is identically 0: its rational normal form (each exponential of a sum split
    into a product; :func:`~nlaverify.symbolic.normal_form.rational_zero`), else
    ``sympy.simplify`` after combining the powers."""
    e = sympy.sympify(e)
    return rational_zero(e) or sympy.simplify(sympy.powsimp(e, force=True)) == 0


def derive_renormalisation() -> Proof:
    xp = get_namespace("sympy")
    z = sympy.symbols(f"z_0:{V}", real=True)
    s = sympy.Symbol("s", real=True)
    zs = np.asarray(z, dtype=object)
    ok, shown = True, None
    subsets = [m for m in itertools.product((False, True), repeat=V) if any(m)]
    for mask in subsets:
        keep = np.asarray(mask)
        q = _dec.renormalise(xp, zs, keep)
        denom = sum(sympy.exp(z[j]) for j in range(V) if mask[j])
        hf = [sympy.exp(z[i]) / denom if mask[i] else 0 for i in range(V)]  # -inf masked
        ok = ok and all(_zero(_clean(xp, a) - b) for a, b in zip(q, hf, strict=True))
        q_shift = _dec.renormalise(xp, zs + s, keep)
        ok = ok and all(_zero(_clean(xp, a) - _clean(xp, b))
                        for a, b in zip(q, q_shift, strict=True))
        if mask == (True, False, True, True):
            shown = [sympy.simplify(_clean(xp, a)) for a in q]
    steps = [Step(r"Four tokens of symbolic logits $z_0, \dots, z_3$ (the stability shift a "
                  r"symbol $c$ of its own); for each of the 15 non-empty kept sets $K$, "
                  r"`renormalise` (the softmax restricted to $K$ and renormalised) returns, "
                  r"for $K = \{0, 2, 3\}$,",
                  r"q = " + sympy.latex(sympy.Matrix([shown]))),
             Step(r"Hugging Face's processors set the dropped logits to $-\infty$ and take the "
                  r"softmax, $q_i = [i \in K]\,e^{z_i}/\sum_{j \in K} e^{z_j}$; the difference "
                  r"simplifies to 0 in every entry of every kept set, and replacing $z$ by "
                  r"$z + s\mathbf 1$ changes no entry: " + str(ok))]
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else "renormalise differs from the -inf-masked softmax")


def _limit(xp: Any, v: Any, T: sympy.Symbol, to: Any) -> sympy.Expr:
    r"""The limit of a softmax entry :math:`v`: :math:`1/v` expanded is a sum of
    exponentials :math:`e^{c/T}` whose limits are taken one by one."""
    r = sympy.powsimp(sympy.expand(sympy.powsimp(sympy.simplify(1 / _clean(xp, v)),
                                                 force=True)), force=True)
    total = sum(sympy.limit(u, T, to, "+" if to == 0 else "-") for u in sympy.Add.make_args(r))
    return sympy.simplify(1 / total)


def derive_temperature_limits() -> Proof:
    xp = get_namespace("sympy")
    T = sympy.Symbol("T", positive=True)
    e = sympy.symbols("e_1:4", positive=True)
    cases = {"unique maximum": [0, -e[0], -e[0] - e[1], -e[0] - e[1] - e[2]],
             "a tie of two": [-e[0], 0, 0, -e[0] - e[2]],
             "a tie of three": [0, 0, -e[1], 0]}
    ok, steps = True, [Step(r"Logits relative to their maximum 0 (a shift changes nothing: "
                            r"`decoding_filter_renormalisation`), the gaps sums of positive "
                            r"symbols $e_k$; `tempered` is $\operatorname{softmax}(z/T)$. Each "
                            r"limit is taken on $1/q_i$, a sum of exponentials $e^{c/T}$ "
                            r"whose limits are $0$, $1$ or $\infty$ by the sign of $c$")]
    for name, z in cases.items():
        zs = np.asarray(z, dtype=object)
        q = _dec.tempered(xp, zs, T)
        cold = [_limit(xp, v, T, 0) for v in q]
        hot = [_limit(xp, v, T, sympy.oo) for v in q]
        top = [i for i in range(V) if z[i] == 0]
        expect = [sympy.Rational(1, len(top)) if i in top else 0 for i in range(V)]
        greedy = int(np.argmax([0 if v == 0 else -1 for v in z]))  # lowest id of the maxima
        case_ok = (cold == expect and hot == [sympy.Rational(1, V)] * V
                   and cold[greedy] > 0)
        ok = ok and case_ok
        steps.append(Step(rf"{name.capitalize()}: $z = {sympy.latex(sympy.Matrix([z]).T)}$, "
                          r"$\lim_{T\to 0^+} q = " + sympy.latex(sympy.Matrix([cold]))
                          + r"$ (uniform on the maximisers; greedy's token " + str(greedy)
                          + r" is in its support), $\lim_{T\to\infty} q = "
                          + sympy.latex(sympy.Matrix([hot])) + r"$: " + str(case_ok)))
    steps.append(Step(r"So temperature $\to 0$ is greedy decoding when the maximum is unique; "
                      r"with a tie it samples uniformly among the tied maximisers, of which "
                      r"greedy (`argmax`) takes the lowest id"))
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else "a temperature limit differs")


def _grid() -> list[tuple[Fraction, ...]]:
    return [tuple(Fraction(n, GRID) for n in c) for c in itertools.product(
        range(1, GRID), repeat=V) if sum(c) == GRID]


def _subsets(n: int) -> list[tuple[int, ...]]:
    return [c for r in range(1, n + 1) for c in itertools.combinations(range(n), r)]


def _top_p_property(p: tuple[Fraction, ...], thr: Fraction, kept: set[int]) -> bool:
    mass = sum(p[i] for i in kept)
    smallest = min(len(S) for S in _subsets(V) if sum(p[i] for i in S) >= thr)
    upward = all(j in kept for i in kept for j in range(V) if p[j] > p[i])
    least = min(p[i] for i in kept)
    ties = sorted(j for j in range(V) if p[j] == least)
    by_id = sorted(i for i in kept if p[i] == least) == ties[:len(
        [i for i in kept if p[i] == least])]
    return mass >= thr and len(kept) == smallest and upward and by_id


def derive_top_p() -> Proof:
    grid = _grid()
    thresholds = [Fraction(j, 2 * GRID) for j in range(1, 2 * GRID + 1)]
    bad = []
    for p in grid:
        probs = np.asarray(p, dtype=object)
        for thr in thresholds:
            kept = set(np.flatnonzero(_dec.keep_top_p(probs, thr)).tolist())
            if not _top_p_property(p, thr, kept):
                bad.append((p, thr, kept))
    example = (Fraction(3, 8), Fraction(1, 8), Fraction(3, 8), Fraction(1, 8))
    kept_ex = sorted(np.flatnonzero(_dec.keep_top_p(np.asarray(example, dtype=object),
                                                     Fraction(1, 2))).tolist())
    ok = not bad
    steps = [Step(rf"Every probability vector $n/{GRID}$ of 4 tokens ($n_i \ge 1$: "
                  rf"{len(grid)} vectors, ties included) and every threshold $p = j/16$, "
                  r"$j = 1, \dots, 16$ (the cumulative sums themselves among them): "
                  rf"{len(grid) * len(thresholds)} cases, run on exact rationals"),
             Step(r"In each, the kept set $K$ of `keep_top_p` has mass $\ge p$, no subset of "
                  r"fewer tokens (among all $2^4 - 1$) reaches $p$, every token more probable "
                  r"than a kept one is kept, and a tie at the boundary keeps the lowest ids: "
                  + ("true in every case" if ok else f"false in {len(bad)} cases, e.g. "
                     f"{bad[0]}")),
             Step(r"Ties stated: for $p = (3, 1, 3, 1)/8$ and threshold $1/2$ the kept set is "
                  + str(kept_ex) + r" (mass $3/4$: the two tied tokens are needed, since one "
                  r"reaches only $3/8$); at threshold exactly $3/8$ it is $\{0\}$ (reaching "
                  r"$p$ means $\ge$)")]
    ok = ok and kept_ex == [0, 2] and sorted(np.flatnonzero(_dec.keep_top_p(
        np.asarray(example, dtype=object), Fraction(3, 8))).tolist()) == [0]
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else f"{len(bad)} cases fail")


def _weak_orders(n: int, levels: int) -> list[tuple[int, ...]]:
    """One integer vector per weak order of ``n`` items (values ``0 .. levels - 1``)."""
    seen: dict[tuple[int, ...], tuple[int, ...]] = {}
    for z in itertools.product(range(levels), repeat=n):
        ranks = tuple(sorted(set(z)).index(v) for v in z)
        seen.setdefault(ranks, ranks)
    return sorted(seen)


def _typical_property(p: tuple[Fraction, ...], dist: list[Any], tau: Fraction,
                      kept: set[int]) -> bool:
    r"""``kept`` is :math:`\{i : \delta_i \le \delta^*\}` for the :math:`\delta^*` at
    which the mass first reaches :math:`\tau`: it has mass :math:`\ge\tau` and the tokens
    strictly more typical than :math:`\delta^*` have mass :math:`< \tau`."""
    dstar = max(dist[i] for i in kept)
    closed = kept == {j for j in range(V) if dist[j] <= dstar}
    inner = sum(p[j] for j in range(V) if dist[j] < dstar)
    return closed and sum(p[i] for i in kept) >= tau and inner < tau


def derive_truncation_sets() -> Proof:
    xp = get_namespace("sympy")
    steps = []
    # top-k on every weak order of 4 integer logits
    orders = _weak_orders(V, V)
    bad_k, exact = 0, True
    for z in orders:
        for k in range(1, V + 2):
            kept = set(np.flatnonzero(_dec.keep_top_k(np.asarray(z), k)).tolist())
            expect = {i for i in range(V) if sum(zj > z[i] for zj in z) < k}
            kth = sorted(z, reverse=True)[min(k, V) - 1]
            tie = sum(zj == kth for zj in z) > 1 and k < V
            bad_k += kept != expect or len(kept) < min(k, V)
            exact = exact and (tie or len(kept) == min(k, V))
    steps.append(Step(rf"Top-$k$, every weak order of 4 logits ({len(orders)} orders) and "
                      r"$k = 1, \dots, 5$: `keep_top_k` keeps exactly the tokens with fewer "
                      r"than $k$ strictly larger logits ($|K| \ge \min(k, V)$, equality "
                      r"unless the $k$-th logit is tied): " + str(bad_k == 0 and exact)))
    # min-p in logits: p_i / p_max = exp(z_i - z_max) on the code's softmax
    z = sympy.symbols(f"z_0:{V}", real=True)
    p = _dec.renormalise(xp, np.asarray(z, dtype=object), np.ones(V, dtype=bool))
    ratios = [sympy.simplify(_clean(xp, p[i]) / _clean(xp, p[0])) for i in range(V)]
    ratio_ok = all(_zero(r - sympy.exp(z[i] - z[0])) for i, r in enumerate(ratios))
    steps.append(Step(r"Min-$p$: on the softmax of symbolic logits, $p_i/p_0$ simplifies to "
                      r"$e^{z_i - z_0}$ (" + str(ratio_ok) + r"); with $z_0 = \max_j z_j$, "
                      r"$p_i \ge p_{\min} p_0 \iff z_i \ge \max_j z_j + \log p_{\min}$ "
                      r"($\exp$ increasing): the logit form of the threshold"))
    grid = _grid()
    bad_m = 0
    for probs in grid:
        for j in range(1, GRID + 1):
            kept = set(np.flatnonzero(_dec.keep_min_p(np.asarray(probs, dtype=object),
                                                      Fraction(j, GRID))).tolist())
            bad_m += kept != {i for i in range(V) if probs[i] * GRID >= j * max(probs)}
    steps.append(Step(rf"and `keep_min_p` keeps $\{{i: p_i \ge p_{{\min}}\max_j p_j\}}$ on "
                      rf"every grid vector and $p_{{\min}} = j/{GRID}$: " + str(bad_m == 0)))
    # typical: closed under typicality, reaches the mass, minimal
    bad_t = 0
    for probs in grid[::3]:
        logp = [sympy.log(sympy.Rational(v.numerator, v.denominator)) for v in probs]
        H = -sum(sympy.Rational(v.numerator, v.denominator) * lv
                 for v, lv in zip(probs, logp, strict=True))
        dist = [sympy.N(abs(-lv - H), 50) for lv in logp]
        for j in range(1, 2 * GRID + 1, 3):
            tau = Fraction(j, 2 * GRID)
            kept = set(np.flatnonzero(_dec.keep_typical(
                np.asarray(probs, dtype=object), np.asarray(logp, dtype=object), tau)).tolist())
            bad_t += not _typical_property(probs, dist, tau, kept)
    steps.append(Step(r"Typical (mass $\tau$): on every third grid vector and $\tau = j/16$, "
                      r"$j = 1, 4, \dots, 16$, the kept set of `keep_typical` (exact "
                      r"logarithms) is $\{i : \delta_i \le \delta^*\}$, "
                      r"$\delta_i = |-\log p_i - H(p)|$ (to 50 digits): it has mass "
                      r"$\ge \tau$, the tokens strictly more typical than $\delta^*$ have "
                      r"mass $< \tau$, and every token tied with the cut is kept (Hugging "
                      r"Face's rule): "
                      + str(bad_t == 0)))
    ok = bad_k == 0 and exact and ratio_ok and bad_m == 0 and bad_t == 0
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else f"top-k {bad_k}, min-p {bad_m}, typical {bad_t}")


def _table_logits(tables: tuple[tuple[int, ...], ...], n0: int):
    def next_logits(ids: np.ndarray) -> np.ndarray:
        return np.asarray([tables[ids.shape[1] - n0]] * ids.shape[0], dtype=np.float64)
    return next_logits


def derive_beam_width_one() -> Proof:
    prompt, steps_n, vocab = [0], 3, 3
    orders = _weak_orders(vocab, vocab)
    cases: dict[str, dict[str, Any]] = {
        "no end-of-sequence id": {},
        "end-of-sequence id 2, lambda 0": {"eos_token_id": 2, "length_penalty": 0.0},
        "end-of-sequence id 2, lambda 2": {"eos_token_id": 2, "length_penalty": 2.0},
        "end-of-sequence id 2, early stopping": {"eos_token_id": 2, "early_stopping": True}}
    mismatch = dict.fromkeys(cases, 0)
    counter = None
    for tables in itertools.product(orders, repeat=steps_n):
        fn = _table_logits(tables, len(prompt))
        # greedy's sequence once per end-of-sequence id (the cases share it)
        greedy = {eos: _strategy.generate_tokens(fn, prompt, steps_n, "greedy",
                                                 eos_token_id=eos) for eos in (None, 2)}
        for name, kw in cases.items():
            mismatch[name] += (_beam.beam_search(fn, prompt, 1, steps_n, **kw).tokens
                               != greedy[kw.get("eos_token_id")])
        if counter is None:
            g = greedy[2]
            b = _beam.beam_search(fn, prompt, 1, steps_n, length_penalty=2.0, eos_token_id=2,
                                  early_stopping="never").tokens
            if b != g:
                counter = (tables, g, b)
    ok = all(v == 0 for v in mismatch.values()) and counter is not None
    steps = [Step(rf"Vocabulary 3, prompt $(0)$, {steps_n} new tokens; the logits at step $t$ "
                  rf"one of the {len(orders)} weak orders of 3 integer logits (a width-1 "
                  r"search queries one prefix per step, so this is every situation it can "
                  r"meet); equal integer logits give bit-identical log-probabilities and "
                  r"unequal ones differ by at least $1 - 4u$, so every comparison is exact: "
                  rf"{len(orders) ** steps_n} tables"),
             Step(r"`beam_search` with one beam returns greedy's sequence (`argmax`, lowest id "
                  r"of a tie; stopping at the end-of-sequence id) on every table, with "
                  r"Hugging Face's default `early_stopping=False`: " + "; ".join(
                      f"{k}: {'every table' if v == 0 else f'{v} mismatches'}"
                      for k, v in mismatch.items()))]
    if counter is not None:
        tables, g, b = counter
        steps.append(Step(r"Not with `early_stopping='never'` and $\lambda > 0$: with "
                          r"$\lambda = 2$, end-of-sequence id 2 and the logits "
                          + str([list(t) for t in tables]) + rf", greedy returns {g} but "
                          rf"width 1 returns {b} (the running beam is judged at the maximal "
                          r"length, where a longer hypothesis can win once divided by "
                          r"$\ell^\lambda$)"))
    return Proof("proved" if ok else "failed", tuple(steps),
                 "" if ok else f"mismatches {mismatch}, counterexample {counter is not None}")


register(Identity(
    "decoding_filter_renormalisation", "decoding",
    "A truncation filter is the softmax of the kept logits",
    r"\frac{[i\in K]\,p_i}{\sum_{j\in K}p_j} = \operatorname{softmax}\bigl(z + "
    r"\log\mathbf 1_K\bigr)_i = \frac{[i\in K]\,e^{z_i}}{\sum_{j\in K}e^{z_j}}",
    SEED + "; Hugging Face's logits processors",
    (qualname(_dec.renormalise),),
    guard(derive_renormalisation), tags=("closed-form",)))

register(Identity(
    "decoding_temperature_limits", "decoding",
    "Temperature to zero is greedy; to infinity, uniform",
    r"\lim_{T\to 0^+}\operatorname{softmax}(z/T) = \frac{\mathbf 1_{\arg\max z}}{|\arg\max z|},"
    r"\quad \lim_{T\to\infty}\operatorname{softmax}(z/T) = \tfrac1V\mathbf 1",
    SEED,
    (qualname(_dec.tempered),),
    guard(derive_temperature_limits), tags=("closed-form",)))

register(Identity(
    "decoding_top_p_smallest_set", "decoding",
    "Top-p keeps the smallest set whose mass reaches p",
    r"K_p = \text{the first } m \text{ tokens by decreasing } p_i,\ m = \min\{|S| : "
    r"\textstyle\sum_{i\in S}p_i \ge p\}",
    SEED + "; Holtzman et al. 2020",
    (qualname(_dec.keep_top_p),),
    guard(derive_top_p), tags=("exhaustive",)))

register(Identity(
    "decoding_truncation_sets", "decoding",
    "The kept sets of top-k, min-p and typical sampling",
    r"K_k = \{i : |\{j : z_j > z_i\}| < k\},\quad K_{\min} = \{i : z_i \ge \max_j z_j + "
    r"\log p_{\min}\}",
    SEED + "; Nguyen et al. 2024; Meister et al. 2023",
    (qualname(_dec.keep_top_k), qualname(_dec.keep_min_p), qualname(_dec.keep_typical),
     qualname(_dec.renormalise)),
    guard(derive_truncation_sets), tags=("exhaustive",)))

register(Identity(
    "decoding_beam_width_one_greedy", "decoding",
    "Beam search of width one is greedy decoding",
    r"\operatorname{beam}_{B=1}(x) = \operatorname{greedy}(x)\quad(\texttt{early\_stopping} "
    r"\ne \texttt{never})",
    SEED + "; Hugging Face's generate",
    (qualname(_beam.beam_search), qualname(_strategy.generate_tokens)),
    guard(derive_beam_width_one), tags=("exhaustive",)))
