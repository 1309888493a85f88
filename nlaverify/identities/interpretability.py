r"""The ``interpretability`` family: the identities behind the weight transformations of
:mod:`nlaverify.transform` (folding norms and value biases, centering writers and the
unembedding, rotating an RMSNorm stream), the additive residual stream and the direct logit
attribution with the final norm's scale frozen, proved on the running code.

Each derivation runs the ops (:func:`nlaverify.ops.norms.layernorm`, ``rmsnorm``,
:func:`nlaverify.ops.linear.affine`, :func:`nlaverify.ops.softmaxes.softmax`, the graph's
``residual_add``, :func:`nlaverify.ops.sdpa.attention`) on the exact SymPy namespace, with
the transformed weights produced by the transformation's own helpers
(:func:`~nlaverify.transform.weights.fold_gain`,
:func:`~nlaverify.transform.weights.fold_bias`,
:func:`~nlaverify.transform.weights.center_last`,
:func:`~nlaverify.transform.attribution.attribute`) on symbolic arrays, and shows the
difference from the untransformed computation is exactly 0. Where a premise matters (a
unit gain before a rotation, a frozen scale for the attribution), the derivation also shows
the identity fails without it, so the check is not vacuous.

Seed: Baggag & Saad §3.8, §3.15-3.16; Elhage et al. 2021; Ashkboos et al. 2024 (SliceGPT,
QuaRot).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import sympy

from nlaverify.backends import get_namespace
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.ops import norms
from nlaverify.ops.linear import add, affine
from nlaverify.ops.sdpa import attention
from nlaverify.ops.softmaxes import log_softmax, softmax
from nlaverify.symbolic.exact import is_zero, symbol_array
from nlaverify.symbolic.normal_form import rational_zero
from nlaverify.transform import attribution as ta
from nlaverify.transform import weights as tw

FAMILY = "interpretability"
SEED = "Baggag & Saad §3.8, §3.15-3.16; Elhage et al. 2021"
SEED_ROT = "Ashkboos et al. 2024 (SliceGPT, QuaRot); Baggag & Saad §3.8.1"


def _xp():
    xp = get_namespace("sympy")
    xp.reset_shifts()
    return xp


def _roots_cancelled(e: sympy.Expr) -> sympy.Expr:
    """Every square root's argument put over a common denominator and cancelled (an exact
    rewriting), so that equal radicands are recognised as equal."""
    return sympy.sympify(e).replace(
        lambda a: a.is_Pow and a.exp.is_Rational and a.exp.q == 2,
        lambda a: sympy.Pow(sympy.cancel(sympy.expand(a.base)), a.exp))


def _all_zero(diff: np.ndarray) -> bool:
    """Every entry is 0: in the rational normal form (which retries with the radicands
    expanded), else by the zero test after :func:`_roots_cancelled`."""
    return all(rational_zero(sympy.sympify(v)) or is_zero(_roots_cancelled(v))
               for v in np.asarray(diff, dtype=object).ravel())


def _cayley(d: int) -> np.ndarray:
    r"""The Cayley transform :math:`Q = (I - S)(I + S)^{-1}` of a symbolic skew-symmetric
    :math:`S`: an orthogonal matrix with rational entries in :math:`d(d-1)/2` symbols."""
    S = sympy.zeros(d, d)
    for i in range(d):
        for j in range(i + 1, d):
            a = sympy.Symbol(f"a_{{{i + 1}{j + 1}}}", real=True)
            S[i, j], S[j, i] = a, -a
    eye = sympy.eye(d)
    Q = ((eye - S) * (eye + S).inv()).applyfunc(sympy.cancel)
    return np.array(Q.tolist(), dtype=object)


def derive_rmsnorm_rotation() -> Proof:
    xp, eps = _xp(), sympy.Symbol("epsilon", positive=True)
    steps, checked = [], []
    cases = [(f"Cayley rotation, d = {d}", _cayley(d)) for d in (2, 3)]
    cases.append(("normalised Hadamard H_4/2", np.array(
        [[sympy.Integer(int(v)) / 2 for v in row] for row in tw.hadamard(4) * 2], dtype=object)))
    for label, Q in cases:
        d = Q.shape[0]
        gram = np.asarray(Q.T @ Q - np.eye(d, dtype=int), dtype=object)
        if not _all_zero(gram):
            return Proof("failed", tuple(steps), f"{label}: Q^T Q != I")
        x = symbol_array("x", (1, d))
        ones = np.array([sympy.Integer(1)] * d, dtype=object)
        lhs = norms.rmsnorm(xp, x @ Q, ones, eps)
        rhs = norms.rmsnorm(xp, x, ones, eps) @ Q
        if not _all_zero(lhs - rhs):
            return Proof("failed", tuple(steps), f"{label}: RMSNorm(xQ) != RMSNorm(x)Q")
        checked.append(label)
        if d == 2:
            steps.append(Step(r"The Cayley transform of a skew $S$ is orthogonal, "
                              r"$Q^\top Q - I$ simplifies to 0:",
                              r"Q = " + sympy.latex(sympy.Matrix(Q))))
            steps.append(Step(r"`rmsnorm` with unit gain, run on $xQ$, gives (first entry)",
                              sympy.latex(_roots_cancelled(lhs[0, 0]))))
    gamma = symbol_array("gamma", (2,))
    Q = _cayley(2)
    x = symbol_array("x", (1, 2))
    with_gain = norms.rmsnorm(xp, x @ Q, gamma, eps) - norms.rmsnorm(xp, x, gamma, eps) @ Q
    if _all_zero(with_gain):
        return Proof("failed", tuple(steps), "the identity holds with a gain: check is vacuous")
    steps.append(Step("The difference $\\mathrm{RMSNorm}(xQ) - \\mathrm{RMSNorm}(x)Q$ "
                      "simplifies to 0 for every entry, for " + "; ".join(checked)
                      + ". With a general gain $\\gamma$ (d = 2) it does not: the gain must be "
                      "folded into the readers first (`fold_norms`)."))
    return Proof("proved", tuple(steps))


def derive_layernorm_centered_writer() -> Proof:
    xp, eps = _xp(), sympy.Symbol("epsilon", positive=True)
    for d, m in ((2, 2), (3, 2), (4, 1)):
        x, a = symbol_array("x", (1, d)), symbol_array("h", (1, m))
        W, b = symbol_array("W", (m, d)), symbol_array("b", (d,))
        gamma, beta = symbol_array("gamma", (d,)), symbol_array("beta", (d,))
        Wc, bc = tw.center_last(W), tw.center_last(b)
        if not _all_zero(np.sum(Wc, axis=-1)) or not is_zero(sum(bc)):
            return Proof("failed", (), f"d={d}: center_last leaves a nonzero row mean")
        write, centered = affine(xp, a, W, b), affine(xp, a, Wc, bc)
        shift = np.asarray(write - centered, dtype=object)[0]
        if not _all_zero(shift - shift[0]):
            return Proof("failed", (), f"d={d}: the centered write is not a per-row shift")
        lhs = norms.layernorm(xp, x + write, gamma, beta, eps)
        rhs = norms.layernorm(xp, x + centered, gamma, beta, eps)
        if not _all_zero(lhs - rhs):
            return Proof("failed", (), f"d={d}, m={m}: LayerNorm changed")
    return Proof("proved", (
        Step(r"`center_last` subtracts each row's mean from the writer's weight and bias: "
             r"the rows of $W'$ and $b'$ sum to 0 (so every write, and the stream they sum "
             r"to, has zero row mean), and the write $hW + b$ changes by $h\bar w + \bar b$, "
             r"the same for every entry of the row:",
             r"(hW + b) - (hW' + b') = \Bigl(\tfrac1d\textstyle\sum_j (hW + b)_j\Bigr)"
             r"\mathbf 1^\top ."),
        Step(r"`layernorm` of the stream $x + hW + b$ and of $x + hW' + b'$ (run on the exact "
             r"namespace, symbolic $\gamma, \beta, \epsilon$) differ by 0 in every entry, for "
             r"$(d, m) = (2, 2), (3, 2), (4, 1)$: the mean subtraction kills the per-row "
             r"constant."),
    ))


def derive_norm_fold() -> Proof:
    xp, eps = _xp(), sympy.Symbol("epsilon", positive=True)
    d, m = 3, 2
    x = symbol_array("x", (1, d))
    W, b = symbol_array("W", (d, m)), symbol_array("b", (m,))
    gamma = symbol_array("gamma", (d,), nonzero=True)
    beta = symbol_array("beta", (d,))
    ones = np.array([sympy.Integer(1)] * d, dtype=object)
    zeros = np.array([sympy.Integer(0)] * d, dtype=object)
    Wf = tw.fold_gain(W, gamma)
    cases = {
        "LayerNorm into an affine reader": (
            affine(xp, norms.layernorm(xp, x, gamma, beta, eps), W, b),
            affine(xp, norms.layernorm(xp, x, ones, zeros, eps), Wf, tw.fold_bias(beta, W, b))),
        "LayerNorm into a bias-free reader (beta/gamma kept)": (
            affine(xp, norms.layernorm(xp, x, gamma, beta, eps), W),
            affine(xp, norms.layernorm(xp, x, ones, beta / gamma, eps), Wf)),
        "RMSNorm into a reader": (
            affine(xp, norms.rmsnorm(xp, x, gamma, eps), W, b),
            affine(xp, norms.rmsnorm(xp, x, ones, eps), Wf, b)),
    }
    for label, (lhs, rhs) in cases.items():
        if not _all_zero(lhs - rhs):
            return Proof("failed", (), f"{label}: the folded layer differs")
    return Proof("proved", (
        Step(r"`fold_gain` and `fold_bias`, run on symbolic $W \in \mathbb R^{3\times 2}$, "
             r"$\gamma, \beta, b$, give",
             r"W' = " + sympy.latex(sympy.Matrix(Wf)) + r",\qquad b' = \beta W + b ."),
        Step(r"`affine` after `layernorm` with $(\gamma, \beta)$ equals `affine` with "
             r"$(W', b')$ after `layernorm` with $(\mathbf 1, 0)$; without a reader bias, "
             r"`layernorm` with $(\mathbf 1, \beta/\gamma)$ before $W'$; `rmsnorm` with "
             r"$\gamma$ before $W$ equals `rmsnorm` with $\mathbf 1$ before $W'$. Every "
             r"difference simplifies to 0 (d = 3, two outputs)."),
    ))


def derive_unembedding_centering() -> Proof:
    xp = _xp()
    d, V = 2, 3
    x, W_U = symbol_array("x", (1, d)), symbol_array("U", (d, V))
    Uc = tw.center_last(W_U)
    if not _all_zero(np.sum(Uc, axis=-1)):
        return Proof("failed", (), "center_last leaves a nonzero row mean")
    Z, Zc = affine(xp, x, W_U), affine(xp, x, Uc)
    shift = np.asarray(Z - Zc, dtype=object)[0]
    if not _all_zero(shift - shift[0]):
        return Proof("failed", (), "the logits do not change by a per-position constant")
    p, pc = softmax(xp, Z), softmax(xp, Zc)
    lp, lpc = log_softmax(xp, Z), log_softmax(xp, Zc)
    if not (_all_zero(p - pc) and _all_zero(sympy.expand_log(
            sympy.Matrix(lp - lpc), force=True))):
        return Proof("failed", (), "softmax or log-softmax changed")
    return Proof("proved", (
        Step(r"`center_last` of $W_U$ ($d = 2$, $V = 3$) leaves rows summing to 0 and "
             r"changes the logits $z = xW_U$ by the per-position constant",
             r"z_j - z'_j = " + sympy.latex(sympy.factor(shift[0])) + r"\quad\forall j ."),
        Step(r"`softmax` and `log_softmax` (hence the cross-entropy $-\log p_t$) of $z$ and "
             r"$z'$, run on the exact namespace, differ by 0 in every entry."),
    ))


def derive_residual_decomposition() -> Proof:
    from nlaverify.config import preset
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.core import evaluate

    xp = _xp()
    steps = []
    for cfg in (replace(preset("tiny"), d_model=2, n_heads=1, n_kv_heads=None, d_head=None,
                        n_blocks=3, name="tiny-3"),):
        g = build_transformer(cfg)
        writers = tw._writers(g)
        last = [n for n in g if g.nodes[n].get("op") == "residual_add"][-1]
        over = {"x0": symbol_array("x", (1, 2))}
        for k, w in enumerate(writers):
            over[w] = symbol_array(f"a^{{({k + 1})}}", (1, 2))
        got = evaluate(g, xp, {}, outputs=[last], overrides=over)[last]
        total = sum(over.values(), start=np.zeros((1, 2), dtype=int))
        if not _all_zero(got - total):
            return Proof("failed", (), f"{cfg.name}: the stream is not the sum")
        steps.append(Step(f"The graph of a {cfg.n_blocks}-block pre-LN model, "
                          f"evaluated on the exact namespace from a symbolic stream entry "
                          f"$x_0$ and symbolic writes $a^{{(k)}}$ of its {len(writers)} "
                          f"writers ({', '.join(writers)}), gives at `{last}`",
                          sympy.latex(sympy.Matrix(got))))
    steps.append(Step(r"which is $x_0 + \sum_k a^{(k)}$ exactly: the residual stream is the "
                      r"embedding plus every block's attention and MLP writes."))
    return Proof("proved", tuple(steps))


def derive_dla_frozen_scale() -> Proof:
    attribute, frozen_scale = ta.attribute, ta.frozen_scale
    xp, eps = _xp(), sympy.Symbol("epsilon", positive=True)
    d = 3
    parts = [symbol_array(f"a^{{({k})}}", (1, d)) for k in (1, 2, 3)]
    x = parts[0] + parts[1] + parts[2]
    gamma, beta = symbol_array("gamma", (d,)), symbol_array("beta", (d,))
    zero = np.array([sympy.Integer(0)] * d, dtype=object)
    for label, centered, norm in (
            ("LayerNorm", True, norms.layernorm(xp, x, gamma, beta, eps)),
            ("RMSNorm", False, norms.rmsnorm(xp, x, gamma, eps))):
        sigma = frozen_scale(x, eps, centered)
        split = sum(attribute(a, gamma, sigma, centered) for a in parts) + (
            beta if centered else zero)
        if not _all_zero(norm - split):
            return Proof("failed", (), f"{label}: the frozen-scale split is not the norm")
    own = sum(norms.layernorm(xp, a, gamma, zero, eps) for a in parts) + beta
    if _all_zero(own - norms.layernorm(xp, x, gamma, beta, eps)):
        return Proof("failed", (), "the split with each part's own scale is exact: vacuous")
    return Proof("proved", (
        Step(r"`frozen_scale` of the whole stream $x = a^{(1)} + a^{(2)} + a^{(3)}$ ($d = 3$) "
             r"is",
             r"\sigma = " + sympy.latex(frozen_scale(x, eps, True)[0, 0])),
        Step(r"`attribute` of each part, $\gamma\odot a^{(k)}P/\sigma$, summed with $eta$, "
             r"equals `layernorm`$(x)$ exactly; with $P = I$ and no $eta$ it equals "
             r"`rmsnorm`$(x)$: the final norm is affine in its input once its scale is "
             r"frozen, so the logits $\mathrm{N}(x)W_U$ split exactly over the components."),
        Step(r"Normalising each part by its own scale instead, $\sum_k \mathrm{LN}_{\gamma, 0}"
             r"(a^{(k)}) + eta$, does not simplify to `layernorm`$(x)$: the split is exact "
             r"only with the frozen scale."),
    ))


register(Identity(
    "rmsnorm_rotation_equivariance", FAMILY,
    "RMSNorm with unit gain commutes with an orthogonal rotation",
    r"Q^\top Q = I \implies \mathrm{RMSNorm}_{\mathbf 1}(xQ) = \mathrm{RMSNorm}_{\mathbf 1}(x)Q",
    SEED_ROT, (qualname(norms.rmsnorm), qualname(tw.hadamard), qualname(tw.rotate)),
    guard(derive_rmsnorm_rotation), tags=("transform",)))
register(Identity(
    "layernorm_centered_writer", FAMILY,
    "LayerNorm is unchanged when a residual writer is centered",
    r"\mathrm{LN}\bigl(x + hW(I - \tfrac1d\mathbf 1\mathbf 1^\top) + b(I - \tfrac1d\mathbf 1"
    r"\mathbf 1^\top)\bigr) = \mathrm{LN}(x + hW + b)",
    SEED, (qualname(norms.layernorm), qualname(tw.center_last), qualname(tw.center_writers)),
    guard(derive_layernorm_centered_writer), tags=("transform",)))
register(Identity(
    "norm_gain_fold", FAMILY, "Folding a norm's gain and bias into the next linear layer",
    r"(\hat x\odot\gamma + \beta)W + b = \hat x\,(\operatorname{diag}(\gamma)W) + (\beta W + b)",
    SEED, (qualname(norms.layernorm), qualname(norms.rmsnorm), qualname(tw.fold_gain),
           qualname(tw.fold_bias), qualname(tw.fold_norms)),
    guard(derive_norm_fold), tags=("transform",)))
register(Identity(
    "unembedding_centering", FAMILY,
    "Centering the unembedding shifts each position's logits by a constant",
    r"\operatorname{softmax}\bigl(xW_U(I - \tfrac1V\mathbf 1\mathbf 1^\top)\bigr) = "
    r"\operatorname{softmax}(xW_U)",
    SEED, (qualname(tw.center_last), qualname(softmax), qualname(log_softmax),
           qualname(tw.center_unembedding)),
    guard(derive_unembedding_centering), tags=("transform",)))
register(Identity(
    "residual_stream_additive", FAMILY,
    "The residual stream is the sum of the embedding and every block's writes",
    r"x_L = x_0 + \sum_{l=1}^{L}\bigl(\mathrm{Attn}_l + \mathrm{MLP}_l\bigr)",
    "Elhage et al. 2021; Baggag & Saad §3.15",
    (qualname(add), qualname(tw._writers)),
    guard(derive_residual_decomposition), tags=("transform",)))


def derive_value_bias_fold() -> Proof:
    xp = _xp()
    n, dk, dv = 3, 1, 2
    Q, K = symbol_array("q", (1, n, dk)), symbol_array("k", (1, n, dk))
    V, b_V = symbol_array("v", (1, n, dv)), symbol_array("b_V", (dv,))
    W_O, b_O = symbol_array("W_O", (dv, dv)), symbol_array("b_O", (dv,))
    for causal in (False, True):
        lhs = affine(xp, attention(xp, Q, K, V + b_V, causal=causal)[0], W_O, b_O)
        rhs = affine(xp, attention(xp, Q, K, V, causal=causal)[0], W_O,
                     tw.fold_bias(b_V, W_O, b_O))
        if not _all_zero(lhs - rhs):
            return Proof("failed", (), f"causal={causal}: the folded output bias differs")
    return Proof("proved", (
        Step(r"`attention` (softmax, exact namespace, $n = 3$ tokens, $d_v = 2$, with and "
             r"without the causal mask) on values $V + \mathbf 1 b_V$, then `affine` with "
             r"$(W_O, b_O)$, equals `attention` on $V$ then `affine` with $(W_O,\ b_VW_O + "
             r"b_O)$ (`fold_bias`): every difference simplifies to 0, because each row of the "
             r"softmax sums to 1.",
             r"P(V + \mathbf 1 b_V)W_O + b_O = PVW_O + (b_VW_O + b_O),\qquad P\mathbf 1 = "
             r"\mathbf 1 ."),
    ))


register(Identity(
    "value_bias_fold", FAMILY, "Folding the value bias into the attention output bias",
    r"\operatorname{softmax}(S)(V + \mathbf 1 b_V)W_O + b_O = \operatorname{softmax}(S)VW_O "
    r"+ (b_VW_O + b_O)",
    SEED, (qualname(attention), qualname(tw.fold_bias),
           qualname(tw.fold_value_bias)),
    guard(derive_value_bias_fold), tags=("transform",)))
register(Identity(
    "dla_frozen_scale", FAMILY,
    "Direct logit attribution through the final norm with its scale frozen is exact",
    r"\mathrm{LN}\Bigl(\sum_k a^{(k)}\Bigr) = \sum_k \gamma\odot\frac{a^{(k)}P}{\sigma}"
    r" + \beta,\qquad \sigma = \sqrt{\tfrac1d\Bigl\lVert \sum_k a^{(k)}P\Bigr\rVert^2"
    r" + \epsilon}",
    "Elhage et al. 2021; Baggag & Saad §3.15-3.16",
    (qualname(norms.layernorm), qualname(norms.rmsnorm),
     qualname(ta.frozen_scale), qualname(ta.attribute)),
    guard(derive_dla_frozen_scale), tags=("transform",)))
