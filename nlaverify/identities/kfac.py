r"""The ``kronecker`` family, continued: K-FAC and Shampoo (Baggag & Saad §5.3–5.4), proved
with the running functions of :mod:`nlaverify.curvature.kfac` and
:mod:`nlaverify.curvature.shampoo` (the Kronecker algebra and the helpers are in
:mod:`nlaverify.identities.kronecker`).

The library is called through its modules (``_kf.kfac_factors``, ...), so a test can plant
an error in a library function and see the proof fail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import sympy

from nlaverify.curvature import kfac as _kf
from nlaverify.curvature import kronecker as _kr
from nlaverify.identities.core import Proof, Step
from nlaverify.identities.kronecker import (
    SEED_KRON,
    XP,
    Part,
    _col,
    _concrete,
    _equal,
    _reg,
    _sym,
    _verdict,
)
from nlaverify.symbolic.exact import zero_test

# --------------------------------------------------------------------------- K-FAC


def derive_gradient_vec_order() -> Proof:
    def check(size: tuple[int, int, int, int]) -> bool:
        N, R, d_in, d_out = size
        A, W, b = _sym("a", (N, R, d_in)), _sym("w", (d_in, d_out)), _sym("beta", (d_out,))
        Y, S_sym = _sym("y", (N, R, d_out)), _sym("s", (N, R, d_out))
        back = dict(zip(S_sym.flat, (A @ W + b).flat, strict=True))
        half_se = sum(((S_sym - Y) ** 2).flat, sympy.Integer(0)) / 2
        G1 = np.vectorize(lambda v: sympy.diff(half_se, v).xreplace(back), otypes=[object])(
            S_sym)
        loss = half_se.xreplace(back)
        grad = _kf.kfac_gradient(XP, A, G1, bias=True)
        want = [[sympy.diff(loss, W[i, j]) for j in range(d_out)] for i in range(d_in)]
        want.append([sympy.diff(loss, b[j]) for j in range(d_out)])
        # the seed's column convention: s = W_c a with W_c = W^T, dL/dW_c = sum g a^T
        seed = sum((_col(G1[n, r]) @ _col(A[n, r]).T for n in range(N) for r in range(R)),
                   np.zeros((d_out, d_in), dtype=object))
        a, g = _col(A[0, 0]), _col(G1[0, 0])
        return (_equal(grad, want)
                and _equal(_kr.vec(XP, seed), _kr.vec_rows(XP, grad[:d_in]))
                and _equal(_kr.vec_rows(XP, a @ g.T), _kr.kron(XP, a, g).reshape(-1))
                and _equal(_kr.vec(XP, g @ a.T), _kr.kron(XP, a, g).reshape(-1))
                and _equal(_kr.kron(XP, a @ a.T, g @ g.T),
                           _kr.kron(XP, a, g) @ _kr.kron(XP, a, g).T))

    return _verdict(_concrete(
        r"For a weight-shared layer $s_{nr} = a_{nr}W + b$ and $L = \frac12\sum\lVert s - y"
        r"\rVert^2$: the running `kfac_gradient(A, G1, bias=True)` with $G_1 = \partial L/"
        r"\partial s$ equals `sympy.diff` of $L$ in $W$ and $b$; the seed's column-convention "
        r"gradient $\sum g a^\top$ (of $W_c = W^\top$) has $\operatorname{vec}$ equal to "
        r"$\operatorname{vec}_r$ of the code's; $\operatorname{vec}_r(ag^\top) = "
        r"\operatorname{vec}(ga^\top) = a\otimes g$; and $(aa^\top)\otimes(gg^\top) = "
        r"(a\otimes g)(a\otimes g)^\top$ (the Fisher block's integrand). Cases "
        r"$(N, R, d_{in}, d_{out})$", [(1, 1, 2, 2), (2, 3, 2, 1), (2, 2, 3, 2)], check))


def _ggn_case(A: np.ndarray, W1: np.ndarray, downstream: Callable[[np.ndarray], list],
              roots: Callable[[int], sympy.Matrix]) -> tuple[np.ndarray, np.ndarray]:
    r"""``(G, GGN)`` of a layer :math:`H = AW_1` (``A`` its inputs, with a column of ones
    for a bias) of a small network, both from SymPy alone: ``G[s, n, r]`` is
    :math:`\partial (c_s^\top z_n)/\partial h_{nr}` (``c_s`` the columns of ``roots(n)``, a
    square root of sequence ``n``'s loss Hessian) and the GGN of
    :math:`\operatorname{vec}_r(W_1)` is :math:`\sum_n J_n^\top C_nC_n^\top J_n`,
    :math:`J_n` the ``Matrix.jacobian`` of :math:`z_n` in :math:`\operatorname{vec}_r(W_1)`."""
    N, R, _ = A.shape
    H_sym = _sym("h", (N, R, W1.shape[1]))
    H = A @ W1
    back = {H_sym[idx]: H[idx] for idx in np.ndindex(H.shape)}
    Z = downstream(H_sym)
    S = roots(0).shape[1]
    G = np.empty((S, *H.shape), dtype=object)
    params = list(W1.flat)
    ggn = sympy.zeros(len(params), len(params))
    for n in range(N):
        C = roots(n)
        for s in range(S):
            phi = sum((C[c, s] * Z[n][c] for c in range(C.shape[0])), sympy.Integer(0))
            for r, j in np.ndindex(R, W1.shape[1]):
                G[s, n, r, j] = sympy.diff(phi, H_sym[n, r, j]).xreplace(back)
        J = sympy.Matrix([z.xreplace(back) for z in Z[n]]).jacobian(params)
        ggn += J.T * C * C.T * J
    return G, np.array(ggn.tolist(), dtype=object)


def _root(weight: sympy.Rational, size: int) -> Callable[[int], sympy.Matrix]:
    return lambda n: sympy.sqrt(weight) * sympy.eye(size)


_W = {"u": _sym("u", (2, 2)), "x": _sym("x", (2, 1))}


def _augment(X: np.ndarray, bias: bool) -> np.ndarray:
    """Homogeneous coordinates: a column of ones appended when the layer has a bias."""
    return np.concatenate([X, np.ones((*X.shape[:-1], 1), dtype=int)], axis=-1) if bias else X


def _deep_linear(*layers: tuple[np.ndarray, bool], pool: bool = False,
                 mask: np.ndarray | None = None) -> Callable[[np.ndarray], list]:
    r"""The linear layers ``(W, bias)`` applied position-wise after the layer under test,
    after a mean over the positions (over the kept ones, with a ``mask``) when ``pool``."""
    def downstream(H: np.ndarray) -> list:
        out = []
        for n in range(H.shape[0]):
            if not pool:
                X = H[n]
            elif mask is None:
                X = H[n].mean(axis=0, keepdims=True)
            else:
                X = (mask[n] @ H[n]).reshape(1, -1) * sympy.Rational(1, int(mask[n].sum()))
            for W, bias in layers:
                X = _augment(X, bias) @ W
            out.append(list(X.flat))  # per-position outputs, concatenated over positions
        return out
    return downstream


def _stated_factors(mode: str, A: np.ndarray, G: np.ndarray,
                    mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    r"""The two factors as the statement writes them, by explicit sums (not the library):
    expand :math:`A_f = \frac1K\sum_{n,r} m_{nr}a_{nr}a_{nr}^\top` (:math:`K = \sum m_{nr}`),
    :math:`G_f = \sum_{s,n,r} g_{snr}g_{snr}^\top`; reduce :math:`A_f = \frac1N\sum_n\bar a_n
    \bar a_n^\top` (:math:`\bar a_n = \sum_r m_{nr}a_{nr}/\sum_r m_{nr}`), :math:`G_f =
    \sum_{s,n}(\sum_r g_{snr})(\sum_r g_{snr})^\top`; :math:`m = 1` without a mask."""
    S, N, R, _ = G.shape
    m = np.ones((N, R), dtype=int) if mask is None else mask

    def outer(x: np.ndarray) -> np.ndarray:
        return _col(x) @ _col(x).T

    if mode == "expand":
        kept = int(m.sum())
        A_f = sum((m[n, r] * outer(A[n, r]) for n in range(N) for r in range(R)),
                  np.zeros((A.shape[-1],) * 2, dtype=object)) * sympy.Rational(1, kept)
        G_f = sum((outer(G[s, n, r]) for s in range(S) for n in range(N) for r in range(R)),
                  np.zeros((G.shape[-1],) * 2, dtype=object))
        return A_f, G_f
    means = [sum(m[n, r] * A[n, r] for r in range(R)) * sympy.Rational(1, int(m[n].sum()))
             for n in range(N)]
    A_f = sum(outer(a) for a in means) * sympy.Rational(1, N)
    G_f = sum(outer(sum(G[s, n, r] for r in range(R))) for s in range(S) for n in range(N))
    return A_f, G_f


class _Case(NamedTuple):
    """One K-FAC case: the layer's inputs ``(N, R, d)``, its weight ``(d [+1], w)``, the
    network after it, the square roots of the per-sequence loss Hessians."""

    label: str
    mode: str
    inputs: np.ndarray
    weight: np.ndarray
    downstream: Callable[[np.ndarray], list]
    roots: Callable[[int], sympy.Matrix]
    bias: bool = False
    mask: np.ndarray | None = None


class _Outcome(NamedTuple):
    exact_ok: bool  # exact_layer_block == GGN
    kfac_ok: bool  # kfac_block(kfac_factors) == GGN
    factors_ok: tuple[bool, bool]  # A_f, G_f == their stated formulas
    diff: np.ndarray  # kfac_block - GGN
    factors: tuple[Any, Any]


def _run(case: _Case) -> _Outcome:
    G, ggn = _ggn_case(_augment(case.inputs, case.bias), case.weight, case.downstream,
                       case.roots)
    exact = _kf.exact_layer_block(XP, case.inputs, G, bias=case.bias)
    Af, Gf = _kf.kfac_factors(XP, case.inputs, G, mode=case.mode, bias=case.bias,
                              mask=case.mask)
    block = _kf.kfac_block(XP, Af, Gf)
    want_A, want_G = _stated_factors(case.mode, _augment(case.inputs, case.bias), G, case.mask)
    return _Outcome(_equal(exact, ggn), _equal(block, ggn),
                    (_equal(Af, want_A), _equal(Gf, want_G)), block - ggn, (Af, Gf))


def _sizes(case: _Case) -> str:
    N, R, d = case.inputs.shape
    extra = (", bias" if case.bias else "") + (
        f", mask ${sympy.latex(sympy.Matrix(case.mask))}$" if case.mask is not None else "")
    return f"$N = {N}$, $R = {R}$, $d_{{in}} = {d}$, mode `{case.mode}`{extra}"


def _kfac_proof(text: str, cases: list[_Case], argument: str | None = None) -> Proof:
    parts: list[Part] = []
    for k, case in enumerate(cases):
        out = _run(case)
        Af, Gf = out.factors
        shown = None if k else (r"(A_f)_{11} = " + sympy.latex(sympy.factor(Af[0, 0]))
                                + r",\qquad (G_f)_{11} = " + sympy.latex(sympy.factor(Gf[0, 0])))
        verb = {True: "equals", False: "DIFFERS from"}
        (ok_A, ok_G), alone = out.factors_ok, {True: "equal to", False: "DIFFERENT from"}
        parts.append((out.exact_ok and out.kfac_ok and ok_A and ok_G, Step(
            f"{case.label} ({_sizes(case)}): the running `exact_layer_block` "
            f"{verb[out.exact_ok]} the GGN of SymPy's Jacobians; "
            f"`kfac_block(*kfac_factors(...))` {verb[out.kfac_ok]} it, entry by entry; and "
            "each factor alone against its stated formula (explicit sums over $n, r, s$ "
            f"written in the proof): $A_f$ {alone[ok_A]} it, $G_f$ {alone[ok_G]} it."
            + (" One entry of each factor:" if shown else ""), shown)))
    steps = [(True, Step(text)), *parts]
    if argument is not None:
        steps.append((True, Step("Argument (by hand, not machine-checked): " + argument)))
    return _verdict(*steps)


def _tanh_net() -> Callable[[np.ndarray], list]:
    def downstream(H: np.ndarray) -> list:
        tanh = np.vectorize(sympy.tanh, otypes=[object])
        return [list((tanh(H[n]) @ _W["u"]).flat) for n in range(H.shape[0])]
    return downstream


def _first(label: str, mode: str, N: int, R: int, d_in: int, downstream, roots,
           bias: bool = False, mask: np.ndarray | None = None) -> _Case:
    """A case for the first layer: symbolic inputs ``a`` and weight ``w`` (width 2)."""
    return _Case(label, mode, _sym("a", (N, R, d_in)), _sym("w", (d_in + bias, 2)), downstream,
                 roots, bias, mask)


def derive_kfac_one_sample() -> Proof:
    C = sympy.Matrix(_sym("c", (2, 2)).tolist())
    C_num = sympy.Matrix([[1, 0], [sympy.Rational(1, 2), sympy.Rational(3, 2)]])
    return _kfac_proof(
        r"One input, one position ($N = R = 1$): the exact block is $\sum_s (a\otimes g_s)"
        r"(a\otimes g_s)^\top = aa^\top\otimes\sum_s g_sg_s^\top$ by the mixed product, for "
        r"any network. Checked on $z = \tanh(aW_1)W_2$ with a square root $C$ of the loss "
        r"Hessian (rational, then fully symbolic), cotangents "
        r"$g_s = \partial(c_s^\top z)/\partial h$.",
        [_first("tanh network, rational $C$", "expand", 1, 1, 2, _tanh_net(), lambda n: C_num),
         _first("tanh network, symbolic $C$", "reduce", 1, 1, 1, _tanh_net(), lambda n: C,
                True)])


#: the deep linear networks: ``(weight, bias)`` per layer, inputs of width 2
_NETS: dict[str, list[tuple[np.ndarray, bool]]] = {
    "two linear layers": [(_sym("w", (3, 2)), True), (_W["u"], False)],
    "three linear layers": [(_sym("w", (2, 2)), False), (_W["u"], False), (_W["x"], False)],
}


def _layer_cases(net: str, N: int) -> list[_Case]:
    """Every layer of a deep linear network, batch ``N`` (one position), loss
    :math:`\\frac1{2N}\\sum_n\\lVert z_n - y_n\\rVert^2` (Hessian :math:`\\frac1N I`)."""
    layers = _NETS[net]
    X = _sym("a", (N, 1, 2))
    out_dim = layers[-1][0].shape[1]
    cases = []
    for k, (W, bias) in enumerate(layers):
        cases.append(_Case(f"{net}, layer {k + 1}", "expand", X, W,
                           _deep_linear(*layers[k + 1:]), _root(sympy.Rational(1, N), out_dim),
                           bias))
        X = _augment(X, bias) @ W  # the next layer's inputs
    return cases


def derive_kfac_deep_linear() -> Proof:
    return _kfac_proof(
        r"Deep linear network $z_n = a_nW_1\cdots W_L$ ($L = 2$ with a bias in the first "
        r"layer, and $L = 3$), squared error averaged over the batch (Hessian $\frac1N I$ per "
        r"input); for each layer $k$ its inputs $x_n = a_nW_1\cdots W_{k-1}$ (with a column "
        r"of ones where a layer has a bias) are polynomials in the symbols. Checked by machine "
        r"for every layer of both networks and $N = 1, 2, 3$ distinct symbolic inputs:",
        [case for net in _NETS for N in (1, 2, 3) for case in _layer_cases(net, N)],
        argument=r"for any depth $L$, layer $k$ and batch $N$: with the columns "
        r"$c_s = N^{-1/2}e_s$ of the Hessian's square root, the cotangents of layer $k$ are "
        r"$g_{sn} = g_s := N^{-1/2}\,W_{k+1}\cdots W_Le_s$ ($N^{-1/2}e_s$ for the last layer), "
        r"the same for every input $n$ (a linear network's Jacobian does not depend on its "
        r"input); so $F = \sum_{s,n}(x_n\otimes g_s)(x_n\otimes g_s)^\top = \sum_n "
        r"x_nx_n^\top\otimes\sum_s g_sg_s^\top$ (mixed product) $= \bigl(\frac1N\sum_n "
        r"x_nx_n^\top\bigr)\otimes\bigl(\sum_{s,n} g_{sn}g_{sn}^\top\bigr) = A_f\otimes G_f$ "
        r"(K-FAC-expand with $R = 1$). The machine checks above cover $L = 2, 3$ and "
        r"$N \le 3$ only.")


def _position_roots(mask: np.ndarray, d_out: int) -> Callable[[int], sympy.Matrix]:
    """Square roots of the per-sequence Hessians of a per-position squared error averaged over
    the :math:`K` kept positions: :math:`\\operatorname{diag}(m_{nr}/K)` per output, so a
    padded position has weight 0 (and cotangents 0)."""
    kept = int(mask.sum())
    return lambda n: sympy.diag(*[sympy.sqrt(sympy.Rational(int(mask[n, r]), kept))
                                  for r in range(mask.shape[1]) for _ in range(d_out)])


_PAD = np.array([[1, 1, 1], [1, 0, 0]])  # two sequences, the second padded after one position


def derive_kfac_expand() -> Proof:
    u = [(_W["u"], False)]
    return _kfac_proof(
        r"Weight shared over $R$ positions, per-position squared error (mean over the $NR$ "
        r"positions), position-wise deep linear $z_{nr} = a_{nr}W_1W_2$: the samples of "
        r"sequence $n$ are the $R\,d_{out}$ columns of $\frac{1}{\sqrt{NR}}I$, each touching one "
        r"position, so $F = \sum_{n,r}a_{nr}a_{nr}^\top\otimes\frac{1}{NR}W_2W_2^\top$ = "
        r"K-FAC-expand, with its $\frac1{NR}$. With padding (a 0/1 mask $m$, $K = \sum m_{nr}$ "
        r"kept positions, the loss the mean over the kept ones) a padded position has loss "
        r"weight 0 and cotangents 0, and K-FAC-expand with the mask (its $A_f$ averaging over "
        r"the kept positions only) is exact.",
        [_first("positions", "expand", 2, 2, 2, _deep_linear(*u), _root(sympy.Rational(1, 4), 4)),
         _first("positions", "expand", 1, 3, 2, _deep_linear(*u), _root(sympy.Rational(1, 3), 6),
                True),
         _first("padded positions", "expand", 2, 3, 2, _deep_linear(*u),
                _position_roots(_PAD, 2), mask=_PAD)])


def derive_kfac_reduce() -> Proof:
    u, ux = [(_W["u"], False)], [(_W["u"], False), (_W["x"], False)]
    return _kfac_proof(
        r"Mean-pooled output $z_n = (\frac1R\sum_r a_{nr}W_1)W_2W_3$, squared error (mean "
        r"over $N$): $g_{snr} = \frac1R W_2W_3c_s$ for every $r$, so $\sum_r a_{nr}\otimes "
        r"g_{snr} = \bar a_n\otimes\sum_r g_{snr}$ and K-FAC-reduce is exact. With padding "
        r"(the mean over the kept positions of each sequence) a padded position has "
        r"cotangent 0 and K-FAC-reduce with the mask ($\bar a_n$ the mean over the kept "
        r"positions) is exact.",
        [_first("mean pooling, two layers", "reduce", 2, 3, 2, _deep_linear(*u, pool=True),
                _root(sympy.Rational(1, 2), 2)),
         _first("mean pooling, three layers", "reduce", 2, 2, 1, _deep_linear(*ux, pool=True),
                _root(sympy.Rational(1, 2), 1), True),
         _first("mean pooling over the kept positions", "reduce", 2, 3, 2,
                _deep_linear(*u, pool=True, mask=_PAD), _root(sympy.Rational(1, 2), 2),
                mask=_PAD)])


def derive_kfac_not_exact() -> Proof:
    parts: list[Part] = []
    for label, N, R, down in (("tanh hidden layer $z_n = \\tanh(a_nW_1)W_2$", 2, 1, _tanh_net()),
                              ("mean pooling (deep linear) with K-FAC-expand", 2, 2,
                               _deep_linear((_W["u"], False), pool=True))):
        out = _run(_first(label, "expand", N, R, 2, down, _root(sympy.Rational(1, 2), 2)))
        ok_exact, diff = out.exact_ok, out.diff
        tests = ((v, zero_test(v)) for v in diff.flat)
        hit = next(((v, t) for v, t in tests if t.verdict == "refuted"), None)
        if hit is None:
            parts.append((False, Step(f"{label}: no entry of K-FAC minus the GGN is refuted.")))
            continue
        entry, test = hit
        value = entry.xreplace(dict(test.counterexample.point))
        shown = (f"exactly ${sympy.latex(value)}$" if value.is_Rational else
                 f"the exact expression ${sympy.latex(value)}$ in $\\tanh$ of rationals, "
                 f"$\\approx {sympy.latex(sympy.N(value, 12))} \\ne 0$ (confirmed at 80 digits "
                 "by the refutation)")
        parts.append((ok_exact and value != 0, Step(
            f"{label} ($N = {N}$, $R = {R}$, mode `expand`): the running `exact_layer_block` "
            f"{'equals' if ok_exact else 'DIFFERS from'} the GGN of SymPy's Jacobians, but an "
            f"entry of `kfac_block(*kfac_factors(...))` minus the GGN is nonzero "
            f"{test.detail}: there it is {shown}.")))
    return _verdict((True, Step(
        "The statement proved is that K-FAC is *not* exact in these cases: the reference "
        "block is right, and K-FAC differs from it by a nonzero exact expression.")), *parts)


# --------------------------------------------------------------------------- catalogue

_reg("kfac_gradient_vec_order", "Layer gradient and its Kronecker order",
     r"\frac{\partial L}{\partial W} = \sum_{n,r} a_{nr}g_{nr}^\top,\quad "
     r"\operatorname{vec}_r(ag^\top) = \operatorname{vec}(ga^\top) = a\otimes g,\quad "
     r"(aa^\top)\otimes(gg^\top) = (a\otimes g)(a\otimes g)^\top",
     SEED_KRON, (_kf.kfac_gradient, _kr.vec, _kr.vec_rows, _kr.kron), derive_gradient_vec_order)
_KFAC = (_kf.kfac_factors, _kf.kfac_block, _kf.exact_layer_block, _kf.per_sample_gradients)
_reg("kfac_exact_one_sample", "K-FAC is exact for one sample",
     r"N = R = 1:\quad \sum_s (aa^\top)\otimes(g_sg_s^\top) = aa^\top\otimes\sum_s g_sg_s^\top",
     SEED_KRON, _KFAC, derive_kfac_one_sample)
_reg("kfac_exact_deep_linear", "K-FAC is exact for every layer of a deep linear network",
     r"\mathbb E[\bar a\bar a^\top\otimes gg^\top] = \mathbb E[\bar a\bar a^\top]\otimes"
     r"\mathbb E[gg^\top]\ \text{(deep linear, squared error, every layer; by machine for }"
     r"L = 2, 3\text{ layers and } N \le 3\text{, any } L, N \text{ by the argument given)}",
     SEED_KRON, _KFAC,
     derive_kfac_deep_linear)
_reg("kfac_expand_exact_shared_positions",
     "K-FAC-expand is exact for per-position losses (deep linear)",
     r"F = \frac{1}{NR}\sum_{n,r}a_{nr}a_{nr}^\top\otimes\sum_{s,n,r}g_{snr}g_{snr}^\top"
     r"\ \bigl(\text{padding mask } m\text{: } \tfrac1K\sum_{n,r}m_{nr}a_{nr}a_{nr}^\top,\ "
     r"K = \textstyle\sum m_{nr}\bigr)",
     SEED_KRON, _KFAC, derive_kfac_expand)
_reg("kfac_reduce_exact_mean_pooled",
     "K-FAC-reduce is exact for a mean-pooled output (deep linear)",
     r"F = \frac1N\sum_n\bar a_n\bar a_n^\top\otimes\sum_{s,n}\Bigl(\sum_r g_{snr}\Bigr)"
     r"\Bigl(\sum_r g_{snr}\Bigr)^\top\ (\bar a_n\text{: the mean over the kept positions})",
     SEED_KRON, _KFAC, derive_kfac_reduce)
_reg("kfac_not_exact", "K-FAC is not exact with a nonlinearity or the wrong variant",
     r"F \ne A_f\otimes G_f\ \text{(tanh layer; expand on a pooled output)}", SEED_KRON, _KFAC,
     derive_kfac_not_exact)
