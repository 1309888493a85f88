r"""The ``sharding`` family: the identities that make a sharded computation equal the
unsharded one, proved on the running functions of :mod:`nlaverify.sharding` with SymPy
(issue 22, item 1; Shoeybi et al. 2019, Megatron-LM §3; Rajbhandari et al. 2020, ZeRO §5;
Liu et al. 2023, Ring Attention; Milakov & Gimelshein 2018).

Every entry is an independent real symbol; every stability shift of the exact namespace
(each device's :math:`m_s`, each merge's :math:`m'`) an independent opaque symbol, so a
merge that forgot a rescale factor would leave the shifts in the result and be refuted.
Shards are 2 and 3 devices of unequal sizes; "in any order" is every permutation of the
arrival of 3 blocks. Each exact identity comes with the named counterexample that the
SPMD check (:mod:`nlaverify.sharding.spmd`) recognises as a planted bug, shown to differ
exactly.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import sympy

from nlaverify import sharding as _sh
from nlaverify.backends import get_namespace
from nlaverify.curvature import kfac as _kf
from nlaverify.identities._expectations import _Checks, _obj
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.identities.online_softmax import _exp_equal, _ratio_equal
from nlaverify.ops import sdpa as _sd
from nlaverify.ops import softmaxes as _sm
from nlaverify.ops.loss import IGNORE_INDEX, cross_entropy
from nlaverify.optim import newton_schulz as _ns
from nlaverify.optim import rules as _r
from nlaverify.sharding import curvature as _cu
from nlaverify.sharding import data as _da
from nlaverify.sharding import optimizer as _op
from nlaverify.sharding import sequence as _sq
from nlaverify.sharding import tensor as _te
from nlaverify.symbolic.exact import symbol_array

_F = "sharding"
#: the seed sections of each identity
SEEDS = {
    "tp": "Shoeybi et al. 2019 (Megatron-LM §3, Fig. 3); Baggag & Saad §3.5",
    "dp": "Baggag & Saad §3.1, §3.13.1 (the mean cross-entropy); data parallelism with padding",
    "kfac": "Martens & Grosse 2015; Ba, Grosse & Martens 2017 (distributed K-FAC); Baggag & "
            "Saad §5.3",
    "vocab": "Shoeybi et al. 2019 (Megatron-LM §3, parallel cross-entropy); Milakov & "
             "Gimelshein 2018; Baggag & Saad §3.1",
    "ring": "Liu et al. 2023 (Ring Attention); Milakov & Gimelshein 2018; Baggag & Saad "
            "§3.4.2, §3.4.4",
    "zero": "Rajbhandari et al. 2020 (ZeRO §5); Baggag & Saad §2.4",
    "ns": "Rajbhandari et al. 2020 (ZeRO §5); Baggag & Saad §5.5 (Muon, Newton–Schulz)",
}
_XP = "sympy"


def _xp() -> Any:
    xp = get_namespace(_XP)
    xp.reset_shifts()
    return xp


def _cut(x: Any, sizes: tuple[int, ...], axis: int) -> list[Any]:
    return _sh.split(get_namespace(_XP), x, sizes, axis)


def _failed(chk: _Checks, what: str) -> Proof:
    return Proof("failed", (Step(what),), chk.bad or "")


def _differs(chk: _Checks, a: Any, b: Any, what: str) -> Any:
    """Some entry of ``a - b`` is exactly nonzero (refuted at a rational point); returns the
    first such entry."""
    for v in _obj(a - b).ravel():
        if v != 0:
            chk.nonzero(v, what)
            return v
    chk.holds(False, what, "every entry is 0")
    return None


# --------------------------------------------------------------------------- tensor parallel


def derive_tensor_parallel() -> Proof:
    """Column- then row-parallel MLP = the full MLP, for any elementwise activation."""
    xp, f = _xp(), sympy.Function("f")
    act = np.vectorize(f, otypes=[object])
    X, W1, W2 = symbol_array("x", (2, 2)), symbol_array("a", (2, 4)), symbol_array("b", (4, 2))
    ref = _obj(_te.mlp(xp, X, W1, W2, lambda xp, H: act(H)))
    chk, splits = _Checks(), ((2, 2), (1, 3), (1, 1, 2))
    for sizes in splits:
        W1s, W2s = _cut(W1, sizes, -1), _cut(W2, sizes, 0)
        got = _te.tensor_parallel_mlp(xp, X, W1s, W2s, lambda xp, H: act(H))
        chk.zero(got - ref, f"split {sizes}")
        if chk.bad:
            return _failed(chk, f"split {sizes}")
    # the counterexample with f the identity (an undefined f cannot be evaluated to refute)
    W1s, W2s = _cut(W1, (2, 2), -1), _cut(W2, (2, 2), 0)
    missing = _te.tensor_parallel_mlp_without_all_reduce(xp, X, W1s, W2s)
    gap = _differs(chk, missing, _obj(_te.mlp(xp, X, W1, W2)), "device 0 without the all-reduce")
    steps = [
        Step("$X \\in \\mathbb R^{2\\times2}$, $W_1 \\in \\mathbb R^{2\\times4}$, $W_2 \\in "
             "\\mathbb R^{4\\times2}$ of independent real symbols and an *undefined* "
             "elementwise activation $f$. `tensor_parallel_mlp` splits $W_1$ by columns and "
             f"$W_2$ by the matching rows, for the hidden splits {', '.join(map(str, splits))}, "
             "and sums the partial products (the all-reduce)."),
        Step("Every entry equals `mlp`, the unsharded $f(XW_1)W_2$, exactly: the hidden "
             "units are independent, $f$ acts on each device's own columns, and the matmul "
             "by $W_2$ is a sum over the hidden units, split by device:",
             r"f(XW_1)W_2 = \sum_{s} f\bigl(XW_1^{(s)}\bigr)W_2^{(s)} ."),
        Step("Without the all-reduce, device 0 holds its partial product alone; with $f$ the "
             "identity, entry $(0, 0)$ of its difference with the full product is",
             r"-\,\Bigl(" + sympy.latex(-gap) + r"\Bigr) \ne 0 ."),
    ]
    return chk.proof(steps)


def derive_attention_heads() -> Proof:
    """Attention with its heads split across devices = multi-head attention."""
    xp = _xp()
    X = symbol_array("x", (2, 2))
    W = [symbol_array(c, (2, 4)) for c in ("q", "k", "v")]
    W_O = symbol_array("o", (4, 2))
    chk, splits, cases = _Checks(), ((2, 2), (1, 3), (1, 1, 2)), 0
    for causal in (False, True):
        ref = _obj(_sd.multihead_attention(xp, X, *W, W_O, 4, causal))
        for heads in splits:
            cases += 1
            got = _te.tensor_parallel_attention(xp, X, *(_cut(w, heads, -1) for w in W),
                                                _cut(W_O, heads, 0), list(heads), causal)
            _ratio_equal(chk, got, ref, f"causal={causal}, heads {heads}")
            if chk.bad:
                return _failed(chk, f"heads {heads}")
    Ws = [_cut(w, (2, 2), -1) for w in W]  # the counterexample: device 0 alone
    one = _te.tensor_parallel_attention_without_all_reduce(xp, X, *Ws, _cut(W_O, (2, 2), 0), 2)
    _differs(chk, one, _obj(_sd.multihead_attention(xp, X, *W, W_O, 4)), "device 0")
    steps = [
        Step("$X \\in \\mathbb R^{2\\times2}$ and $W_Q, W_K, W_V \\in \\mathbb "
             "R^{2\\times4}$, $W_O \\in \\mathbb R^{4\\times2}$ of independent real symbols: "
             "4 heads of width 1. `tensor_parallel_attention` gives each device the columns "
             "of its heads and the matching rows of $W_O$, runs the running "
             "`multihead_attention` on them and sums the results (the all-reduce), for the "
             f"head splits {', '.join(map(str, splits))}, without a mask and causal "
             f"({cases} cases)."),
        Step("Every entry equals `multihead_attention` with all 4 heads (the numerator of the "
             "difference is 0): the heads are independent and $W_O$ acts on their "
             "concatenation, a sum over the heads' row blocks:",
             r"[A_1, \dots, A_h]\,W_O = \sum_s [A_k]_{k \in s}\,W_O^{(s)} ."),
        Step("Without the all-reduce (`tensor_parallel_attention_without_all_reduce`), "
             "device 0 holds its 2 heads' share alone: entry $(0, 0)$ of its difference with "
             "the 4 heads' output, the other device's share, is refuted at a rational point "
             "(nonzero)."),
    ]
    return chk.proof(steps)


# --------------------------------------------------------------------------- data parallel


def derive_data_parallel() -> Proof:
    """Data-parallel gradient with padding = all-reduce of summed gradients / token count."""
    xp = _xp()
    X, W = symbol_array("x", (5, 2)), symbol_array("w", (2, 2))
    t = np.array([0, IGNORE_INDEX, 1, 1, IGNORE_INDEX])
    ref = _obj(_da.linear_head_gradient(xp, X, W, t))
    chk, splits = _Checks(), ((2, 3), (3, 2), (1, 2, 2))
    for sizes in splits:
        got = _da.data_parallel_gradient(xp, _cut(X, sizes, 0), W, _cut(t, sizes, 0))
        _ratio_equal(chk, got, ref, f"split {sizes}")
        if chk.bad:
            return _failed(chk, f"split {sizes}")
    # the counterexample at W = 0 (uniform probabilities, exact rationals): counts 1 and 2
    W0 = np.full((2, 2), sympy.Integer(0), dtype=object)
    sizes = (2, 3)
    ref0 = _obj(_da.linear_head_gradient(xp, X, W0, t))
    bad0 = _da.data_parallel_gradient_per_shard_mean(xp, _cut(X, sizes, 0), W0,
                                                     _cut(t, sizes, 0))
    gap = _differs(chk, bad0, ref0, "the mean of per-shard means")
    counts = [_da.token_count(p) for p in _cut(t, sizes, 0)]
    steps = [
        Step("A linear head $Z = XW$, $X \\in \\mathbb R^{5\\times2}$ and $W \\in \\mathbb "
             "R^{2\\times2}$ of independent real symbols, targets $(0, \\varnothing, 1, 1, "
             "\\varnothing)$ (two padded positions). The reference is $X^\\top\\bar Z$, "
             "$\\bar Z$ the running `cross_entropy_vjp` of the mean over the 3 targets."),
        Step(f"For the batch splits {', '.join(map(str, splits))} (uneven padding per "
             "device), `data_parallel_gradient` all-reduces each device's *summed* gradient "
             "and divides by the all-reduced count; every entry equals the reference "
             "exactly (the numerator of the difference is 0):",
             r"\nabla_W L = \frac{\sum_s X_s^\top\bigl(w_s\odot(P_s - Y_s)\bigr)}"
             r"{\sum_s N_s} ."),
        Step(f"The mean of per-device means is not the gradient: at $W = 0$ (uniform "
             f"probabilities), split {sizes} with counts {counts}, entry $(0, 0)$ of the "
             "difference is",
             r"\frac12\Bigl(\frac{G_1}{N_1} + \frac{G_2}{N_2}\Bigr) - \frac{G_1 + G_2}"
             r"{N_1 + N_2} = " + sympy.latex(gap) + r" \ne 0 ."),
    ]
    return chk.proof(steps)


def derive_kfac() -> Proof:
    """Data-parallel K-FAC factors: count-weighted all-reduce of A, plain all-reduce of G."""
    xp = _xp()
    A, G = symbol_array("a", (3, 2, 2)), symbol_array("g", (1, 3, 2, 1))
    mask = np.array([[1, 1], [1, 0], [1, 1]])
    chk, splits = _Checks(), ((1, 2), (2, 1), (1, 1, 1))
    for mode in _kf.MODES:
        ref = _kf.kfac_factors(xp, A, G, mode=mode, mask=mask)
        for sizes in splits:
            got = _cu.data_parallel_kfac_factors(xp, _cut(A, sizes, 0), _cut(G, sizes, 1),
                                                 _cut(mask, sizes, 0), mode)
            chk.zero(got[0] - ref[0], f"{mode}, split {sizes}: A")
            chk.zero(got[1] - ref[1], f"{mode}, split {sizes}: G")
            if chk.bad:
                return _failed(chk, f"{mode}, split {sizes}")
    ref = _kf.kfac_factors(xp, A, G, mask=mask)
    bad = _cu.data_parallel_kfac_factors_per_shard_mean(xp, _cut(A, (1, 2), 0),
                                                        _cut(G, (1, 2), 1),
                                                        _cut(mask, (1, 2), 0))
    gap = _differs(chk, bad[0], ref[0], "the mean of per-device A factors")
    steps = [
        Step("Layer inputs $A \\in \\mathbb R^{3\\times2\\times2}$ (3 sequences of 2 "
             "positions) and cotangents $G \\in \\mathbb R^{1\\times3\\times2\\times1}$ of "
             "independent real symbols, sequence 1 padded at its second position. "
             "`data_parallel_kfac_factors` runs the running `kfac_factors` on each device's "
             "sequences, for the splits " + ", ".join(map(str, splits)) + ", in the modes "
             "expand and reduce, and all-reduces $K_dA_d$ and $G_d$."),
        Step("Both factors equal those of the whole batch, entry by entry:",
             r"A_f = \frac{\sum_d K_dA_d}{\sum_d K_d},\qquad G_f = \sum_d G_d ."),
        Step("The plain mean of the devices' $A$ factors is not $A_f$ (split (1, 2), kept "
             "counts 2 and 3): entry $(0, 0)$ of the difference is",
             sympy.latex(gap) + r" \ne 0 ."),
    ]
    return chk.proof(steps)


# --------------------------------------------------------------------------- vocabulary


def _exp_of(v: Any) -> Any:
    """``exp`` of an expression with its sums split into products, :math:`e^{\\log x} = x`."""
    return sympy.expand(sympy.exp(v), power_exp=True, mul=False, multinomial=False,
                        power_base=False, log=False, basic=False)


def derive_vocab_parallel() -> Proof:
    """Vocabulary-parallel log-sum-exp, softmax and cross-entropy from per-shard (m, l)."""
    xp = _xp()
    Z = symbol_array("z", (2, 4))
    targets = np.array([3, 0])
    full = np.array([[sum(sympy.exp(z) for z in row)] for row in Z], dtype=object)
    p_ref = _obj(_sm.softmax(xp, Z))
    ce_ref = cross_entropy(xp, Z, targets, reduction="sum")
    chk, cases, shown = _Checks(), 0, None
    for sizes in ((2, 2), (1, 3), (1, 1, 2)):
        shards = _cut(Z, sizes, -1)
        for perm in itertools.permutations(range(len(sizes))):
            cases += 1
            what = f"split {sizes}, order {perm}"
            m, ell = _te.merge_vocab_statistics(
                xp, [_te.vocab_shard_statistics(xp, shards[s]) for s in perm])
            _exp_equal(chk, ell, xp.sum(xp.exp(Z - m), axis=-1, keepdims=True), f"{what}: l")
            if shown is None and len(sizes) == 3:
                shown = (sizes, perm, ell[0, 0])
        lse = _obj(_te.vocab_parallel_logsumexp(xp, shards))
        _exp_equal(chk, np.vectorize(_exp_of, otypes=[object])(lse), full, f"{sizes}: lse")
        got = xp.concat(_te.vocab_parallel_softmax(xp, shards), axis=-1)
        _ratio_equal(chk, got, p_ref, f"{sizes}: softmax")
        ce = _te.vocab_parallel_cross_entropy(xp, shards, targets, reduction="sum")
        _ratio_equal(chk, _exp_of(-_obj(ce).item()), _exp_of(-_obj(ce_ref).item()),
                     f"{sizes}: exp(-CE)")
        if chk.bad:
            return _failed(chk, f"split {sizes}")
    shards = _cut(Z, (2, 2), -1)
    bad = xp.concat(_te.vocab_parallel_softmax_without_global_max(xp, shards), axis=-1)
    gap = _differs(chk, bad, p_ref, "softmax without the global max")
    sizes, perm, l0 = shown
    steps = [
        Step("Logits $Z \\in \\mathbb R^{2\\times4}$ of independent real symbols, split by "
             "vocabulary into (2, 2), (1, 3) and (1, 1, 2) devices. Each device's "
             "`vocab_shard_statistics` is $(m_s, \\ell_s)$ at an opaque shift $m_s$; "
             "`merge_vocab_statistics` merges them in every order of arrival "
             f"({cases} cases). For example, split {sizes} merged in the order {perm} gives, "
             "in row 0,", r"\ell = " + sympy.latex(l0)),
        Step("In every case $\\ell_i = \\sum_j e^{z_{ij} - m_i}$ exactly, whatever the shifts; "
             "`vocab_parallel_logsumexp` $= m + \\log\\ell$ satisfies $e^{m + \\log\\ell} = "
             "\\sum_j e^{z_j}$; the gathered `vocab_parallel_softmax` equals `softmax`; and "
             "`vocab_parallel_cross_entropy` (target logit all-reduced from the device that "
             "holds it) equals the running `cross_entropy` (compared through "
             "$e^{-L}$, a quotient of sums of exponentials):",
             r"\log\sum_j e^{z_j} = m + \log\sum_s e^{m_s - m}\ell_s,\qquad "
             r"m = \max_s m_s ."),
        Step("Without the global max (local sums added at their own shifts), entry $(0,0)$ "
             "of the difference with `softmax` is",
             sympy.latex(gap) + r" \ne 0 \quad(\text{unless all } m_s \text{ agree}) ."),
    ]
    return chk.proof(steps)


# --------------------------------------------------------------------------- ring attention


def derive_ring_attention() -> Proof:
    """Ring attention: any order of arrival of 3 key/value blocks = (causal) attention."""
    xp = _xp()
    n = 3
    Q, K, V = (symbol_array(x, (n, 1)) for x in ("q", "k", "v"))
    chk, cases, shown = _Checks(), 0, None
    splits = ((1, 1, 1), (1, 2), (2, 1))
    for causal in (False, True):
        ref = _obj(_sd.attention(xp, Q, K, V, causal, None))
        for sizes in splits:
            Qs, Ks, Vs = (_cut(x, sizes, 0) for x in (Q, K, V))
            for perm in itertools.permutations(range(len(sizes))):
                cases += 1
                orders = [list(perm)] * len(sizes)
                got = xp.concat(_sq.ring_attention(xp, Qs, Ks, Vs, causal=causal,
                                                   orders=orders), axis=0)
                _ratio_equal(chk, got, ref, f"causal={causal}, split {sizes}, order {perm}")
                if shown is None and causal and len(sizes) == 3 and perm == (2, 0, 1):
                    shown = got[2, 0]
                if chk.bad:
                    return _failed(chk, f"{cases} cases")
    Qs, Ks, Vs = (_cut(x, (1, 1, 1), 0) for x in (Q, K, V))
    ref = _obj(_sd.attention(xp, Q, K, V, False, None))
    bad = xp.concat(_sq.ring_attention_without_rescale(xp, Qs, Ks, Vs), axis=0)
    gap = _differs(chk, bad, ref, "ring attention without the rescale")
    steps = [
        Step(f"$Q, K, V \\in \\mathbb R^{{{n}\\times1}}$ of independent real symbols, split "
             f"along the sequence into the blocks {', '.join(map(str, splits))}. "
             "`ring_attention` gives each query block the statistics of every key/value "
             "block (causal masks by global position, through `block_scores`), merged by "
             "`merge_statistics` in a given order of arrival; every shift is an opaque "
             "symbol."),
        Step(f"For every permutation of the arrival of the blocks, without a mask and "
             f"causal, {cases} cases: the output equals `sdpa.attention` exactly (the "
             "numerator of the difference is 0). For example, causal, three blocks arriving "
             "in the order (2, 0, 1), the last query's output is",
             r"A_2 = " + sympy.latex(shown)),
        Step("A ring step without the rescale factors $e^{m - m'}$ is not attention: "
             "entry $(0, 0)$ of the difference is",
             sympy.latex(gap) + r" \ne 0 ."),
    ]
    return chk.proof(steps)


# --------------------------------------------------------------------------- ZeRO / Muon


def _zero_case(chk: _Checks, rule: _r.Rule, params: dict, grads: list[dict],
               n_shards: int) -> None:
    xp = get_namespace(_XP)
    states, state, w = _op.zero_init(xp, rule, params, n_shards), rule.init(xp, params), params
    for step, g in enumerate(grads):
        u_sh, states = _op.zero_update(xp, rule, g, states, w)
        u, state = rule.update(xp, g, state, w)
        for k in u:
            chk.zero(u_sh[k] - u[k], f"{rule.name}, {n_shards} shards, step {step + 1}, {k}")
        w = _r.apply_updates(xp, w, u)


def derive_zero_elementwise() -> Proof:
    """ZeRO-sharded SGD/Adam/AdamW updates equal the unsharded ones."""
    _xp()
    eta, b1, b2, eps, lam = sympy.symbols("eta beta_1 beta_2 epsilon lambda", positive=True)
    params = {"w": symbol_array("w", (3, 2)), "b": symbol_array("c", (4,))}
    grads = [{"w": symbol_array(f"g{k}", (3, 2)), "b": symbol_array(f"h{k}", (4,))}
             for k in (1, 2)]
    rules = (_r.sgd(eta, lam), _r.momentum(eta, b1), _r.adam(eta, b1, b2, eps),
             _r.adamw(eta, b1, b2, eps, lam))
    chk = _Checks()
    for rule, n_shards in itertools.product(rules, (2, 3)):
        _zero_case(chk, rule, params, grads, n_shards)
        if chk.bad:
            return _failed(chk, rule.name)
    steps = [
        Step("Parameters $w \\in \\mathbb R^{3\\times2}$, $c \\in \\mathbb R^4$, two steps of "
             "symbolic gradients, symbolic hyperparameters. `zero_init` gives each of 2 and 3 "
             "devices the state of its slice (first axis, sizes as `numpy.array_split`); "
             "`zero_update` runs the rule on each device's slices and all-gathers the "
             f"updates; rules {', '.join(r.name for r in rules)}."),
        Step("Every entry of every update, at both steps, equals the unsharded "
             "`rule.update` exactly (the rules are entrywise: state and update entries "
             "depend on the same entry of $w$ and $g$ only):",
             r"\operatorname{gather}_s u\bigl(g^{(s)}, \sigma^{(s)}, w^{(s)}\bigr) = "
             r"u(g, \sigma, w) ."),
    ]
    return chk.proof(steps)


def derive_newton_schulz_sharded() -> Proof:
    """Newton–Schulz on shards of the long axis needs only the all-reduced Gram matrix; on a
    row shard of the short axis it is not the shard of Newton–Schulz (Muon on a shard)."""
    xp = _xp()
    G = symbol_array("g", (2, 4))
    ref2 = _obj(_ns.newton_schulz(xp, G, _ns.CUBIC, 2, normalize=False))
    chk = _Checks()
    cases = (("wide, columns", G, -1, (2, 2)), ("wide, columns", G, -1, (1, 3)),
             ("tall, rows", G.T.copy(), -2, (1, 1, 2)))
    for what, M, axis, sizes in cases:
        full = ref2 if axis == -1 else _obj(_ns.newton_schulz(xp, M, _ns.CUBIC, 2,
                                                                normalize=False))
        got = xp.concat(_op.newton_schulz_sharded(xp, _cut(M, sizes, axis), axis, _ns.CUBIC, 2,
                                                  normalize=False), axis=axis)
        chk.zero(got - full, f"{what} {sizes}, 2 cubic steps")
        if chk.bad:
            return _failed(chk, what)
    eps = sympy.Symbol("epsilon", positive=True)
    ref1 = _obj(_ns.newton_schulz(xp, G, _ns.QUINTIC, 1, eps=eps))
    got = xp.concat(_op.newton_schulz_sharded(xp, _cut(G, (2, 2), -1), -1, _ns.QUINTIC, 1,
                                              eps=eps), axis=-1)
    chk.zero(got - ref1, "normalised, 1 quintic step")
    rows = xp.concat(_op.newton_schulz_on_shards(xp, _cut(G, (1, 1), -2), -2, _ns.CUBIC, 1,
                                                 normalize=False), axis=-2)
    ref_c = _obj(_ns.newton_schulz(xp, G, _ns.CUBIC, 1, normalize=False))
    gap = _differs(chk, rows, ref_c, "Newton-Schulz of each row shard")
    coupling = sympy.Rational(1, 2) * sum(G[0, j] * G[1, j] for j in range(4)) * G[1, 0]
    chk.zero(gap - coupling, "the gap is the cross-row coupling")
    steps = [
        Step("$G \\in \\mathbb R^{2\\times4}$ of independent real symbols (and its transpose, "
             "tall). `newton_schulz_sharded` splits the long axis — the columns of the wide "
             "orientation — across devices and all-reduces only the Gram matrix "
             "$XX^\\top = \\sum_s X_sX_s^\\top$ ($2\\times2$) per step and the squared "
             "Frobenius norm once:",
             r"p(X)_s = a_1X_s + \Bigl(\sum_{k\ge1} a_{2k+1}\bigl(\textstyle\sum_r X_rX_r^\top"
             r"\bigr)^{k-1}\Bigr)\Bigl(\sum_r X_rX_r^\top\Bigr)X_s ."),
        Step("Two cubic steps (columns split (2, 2) and (1, 3); the tall transpose with rows "
             "split (1, 1, 2)) and one normalised quintic step with a symbolic "
             "$\\epsilon$ equal the running `newton_schulz` of the gathered matrix, "
             "entry by entry."),
        Step("Orthogonalising each row of the wide $G$ on its own device (Muon on a ZeRO "
             "shard) is not the row of the orthogonalised matrix: after one cubic step "
             "entry $(0, 0)$ of the difference is",
             sympy.latex(gap) + r" = \tfrac12\,(g_{1,\cdot}\,g_{2,\cdot}^\top)\,"
             r"g_{2,1} \ne 0 ,"),
        Step("the coupling $(GG^\\top)_{01}$ that a row shard cannot see: Muon (and Shampoo's "
             "$GG^\\top$, $G^\\top G$) on sharded state needs the Gram all-reduce along the "
             "long axis, or the all-gather of the matrix along the short one."),
    ]
    return chk.proof(steps)


def _reg(id_: str, seed: str, title: str, statement: str, certifies: tuple, derive: Any
         ) -> None:
    register(Identity(id_, _F, title, statement, SEEDS[seed],
                      tuple(qualname(f) for f in certifies),
                      guard(derive), tags=("sharding",)))


_reg("tensor_parallel_mlp_all_reduce", "tp",
     "Column- then row-parallel MLP equals the MLP, with one all-reduce",
     r"f(XW_1)W_2 = \sum_s f\bigl(XW_1^{(s)}\bigr)W_2^{(s)}",
     (_te.tensor_parallel_mlp, _te.column_row_partial, _te.mlp,
      _te.tensor_parallel_mlp_without_all_reduce), derive_tensor_parallel)
_reg("tensor_parallel_attention_heads", "tp",
     "Attention with its heads split across devices equals multi-head attention",
     r"[A_1, \dots, A_h]\,W_O = \sum_s [A_k]_{k \in s}\,W_O^{(s)}",
     (_te.tensor_parallel_attention, _sd.multihead_attention,
      _te.tensor_parallel_attention_without_all_reduce), derive_attention_heads)
_reg("data_parallel_gradient_token_weighted", "dp",
     "The data-parallel gradient with padding is the all-reduce of summed gradients over the "
     "global token count",
     r"\nabla_W L = \frac{\sum_s G_s}{\sum_s N_s} \ne \frac1S\sum_s\frac{G_s}{N_s}",
     (_da.data_parallel_gradient, _da.data_parallel_gradient_per_shard_mean,
      _da.linear_head_gradient), derive_data_parallel)
_reg("kfac_factors_all_reduce", "kfac",
     "Data-parallel K-FAC factors are count-weighted all-reduced sums",
     r"A_f = \frac{\sum_d K_dA_d}{\sum_d K_d},\quad G_f = \sum_d G_d \quad\Bigl(\ne "
     r"\frac1D\sum_d A_d\Bigr)",
     (_cu.data_parallel_kfac_factors, _cu.data_parallel_kfac_factors_per_shard_mean,
      _kf.kfac_factors), derive_kfac)
_reg("vocab_parallel_logsumexp_merge", "vocab",
     "Vocabulary-parallel log-sum-exp, softmax and cross-entropy from per-shard maxima and sums",
     r"\log\sum_j e^{z_j} = m + \log\sum_s e^{m_s - m}\ell_s,\ m = \max_s m_s",
     (_te.vocab_shard_statistics, _te.merge_vocab_statistics, _te.vocab_parallel_logsumexp,
      _te.vocab_parallel_softmax, _te.vocab_parallel_cross_entropy, _te.target_logit,
      _te.vocab_parallel_softmax_without_global_max), derive_vocab_parallel)
_reg("ring_attention_any_arrival_order", "ring",
     "Ring attention equals (causal) attention for every order of arrival of the blocks",
     r"A_i = \frac{O}{\ell},\ (m, \ell, O) = \bigoplus_{j \in \pi_i}(m_{ij}, \ell_{ij}, O_{ij})"
     r" \Rightarrow A = \operatorname{softmax}\!\Bigl(\frac{QK^\top}{\sqrt{d_k}} + M\Bigr)V",
     (_sq.ring_attention, _sq.ring_attention_without_rescale, _sq.ring_order),
     derive_ring_attention)
_reg("zero_elementwise_update", "zero",
     "ZeRO-sharded optimizer state gives the unsharded update for elementwise rules",
     r"\operatorname{gather}_s u\bigl(g^{(s)}, \sigma^{(s)}, w^{(s)}\bigr) = u(g, \sigma, w)",
     (_op.zero_init, _op.zero_update, _op.shard_params, _op.gather_params, _op.shard_sizes),
     derive_zero_elementwise)
_reg("newton_schulz_needs_the_gram_all_reduce", "ns",
     "Newton–Schulz (Muon) on shards: exact with the all-reduced Gram matrix, wrong on a shard",
     r"p(X)_s = a_1X_s + q\bigl(\textstyle\sum_r X_rX_r^\top\bigr)X_s,\quad "
     r"\mathrm{NS}(G_s) \ne \mathrm{NS}(G)_s",
     (_op.newton_schulz_sharded, _op.newton_schulz_on_shards), derive_newton_schulz_sharded)
