r"""The ``ssm`` family, part 2: Mamba-2's state-space duality, the selective scan as an SSD,
RWKV-4's stable WKV, and the permutation symmetries of the set transformer (Dao & Gu 2024,
§3; Gu & Dao 2023; Peng et al. 2023; Baggag & Saad §5.2, §5.1), proved on the running
functions of :mod:`nlaverify.ops.ssm`, :mod:`nlaverify.ops.rwkv`, :mod:`nlaverify.ops.pooling`
and :mod:`nlaverify.ops.sdpa`, called with SymPy symbols.

Every stability shift (the softmax's and the WKV's running maximum) is an independent opaque
real symbol, so the proofs hold for every choice of shifts, the maximum included; the
:math:`\ell_2` normalization's power-of-two scale is an opaque positive symbol.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import sympy

from nlaverify.backends import get_namespace
from nlaverify.identities._expectations import _Checks, _obj
from nlaverify.identities.core import Proof, Step, register
from nlaverify.identities.ssm import ssm_identity
from nlaverify.ops import pooling as _pool
from nlaverify.ops import rwkv as _rwkv
from nlaverify.ops import sdpa as _sd
from nlaverify.ops import ssm as _ssm
from nlaverify.ops import ssm2 as _ssm2
from nlaverify.symbolic.exact import symbol_array

__all__: list[str] = []


def _equal(chk: _Checks, got: Any, want: Any, what: str) -> None:
    """``got == want`` entrywise; quotients by the numerator of the difference."""
    chk.zero(_obj(got) - _obj(want), what, rational=True)


def derive_duality() -> Proof:
    xp = get_namespace("sympy")
    T, N, d = 4, 2, 1
    la = symbol_array(r"\ell", (T,))
    B, C, X = symbol_array("b", (T, N)), symbol_array("c", (T, N)), symbol_array("x", (T, d))
    chk = _Checks()
    Lmat = _obj(_ssm.ssm_decay_matrix(xp, la))
    _equal(chk, _ssm.ssd_recurrence(xp, la, B, C, X), _ssm.ssd_attention(xp, la, B, C, X),
           "recurrence - (L o CB^T) X")
    for i, j in itertools.product(range(T), repeat=2):
        want = sympy.exp(sum(la[j + 1:i + 1])) if i >= j else 0
        chk.zero(Lmat[i, j] - want, f"L[{i},{j}]")
    # the running selective scan (Mamba's rule) is an SSD: scalar A, Delta shared by channels
    a = sympy.Symbol("a", negative=True)
    dt = np.array([sympy.Symbol(f"Delta_{t + 1}", positive=True) for t in range(T)],
                  dtype=object)
    ch = 2
    u = symbol_array("u", (T, ch))
    delta = np.stack([dt] * ch, axis=-1)
    A = np.full((ch, N), a, dtype=object)
    y = _ssm.selective_scan(xp, u, delta, A, B, C)
    _equal(chk, y, _ssm.ssd_attention(xp, dt * a, B, C, dt[:, None] * u),
           "selective_scan - SSD")
    return chk.proof([
        Step(rf"$T = {T}$ steps, state size $N = {N}$, log-decays $\ell_t$ and $B, C, X$ "
             r"independent symbols. `ssm_decay_matrix` is the 1-semiseparable mask",
             r"L = " + sympy.latex(sympy.Matrix(Lmat))),
        Step(r"and `ssd_recurrence` ($H_t = e^{\ell_t} H_{t-1} + B_t^\top X_t$, $Y_t = C_t "
             r"H_t$) equals `ssd_attention`, masked attention without softmax:",
             r"Y = (L \circ C B^\top)\, X ."),
        Step(r"The running `selective_scan` (Mamba's rule, $\bar A_t = e^{\Delta_t a}$, "
             r"$\bar B_t = \Delta_t B_t$) with a scalar $A = a$ and a step $\Delta_t$ shared "
             rf"by its {ch} channels equals `ssd_attention` with $\ell_t = \Delta_t a$ and "
             r"$X_t = \Delta_t u_t$: Mamba-2's state-space duality."),
    ])


def derive_wkv() -> Proof:
    xp = get_namespace("sympy")
    xp.reset_shifts()
    T, d = 3, 1
    w = np.array([sympy.Symbol("w", negative=True)], dtype=object)
    u = symbol_array("u", (d,))
    k, v = symbol_array("k", (T, d)), symbol_array("v", (T, d))
    chk = _Checks()
    stable = _obj(_rwkv.wkv(xp, w, u, k, v))
    naive = _obj(_rwkv.wkv_naive(xp, w, u, k, v))
    _equal(chk, stable, naive, "stable - naive")
    return chk.proof([
        Step(rf"$T = {T}$ steps, $w < 0$, $u$, $k_t$, $v_t$ independent symbols; the running "
             r"maxima of `wkv` are independent opaque symbols $c_j$. Step 2 of the stable "
             r"form reads", r"\mathrm{wkv}_2 = " + sympy.latex(stable[2, 0])),
        Step(r"and every step equals `wkv_naive`, the definition",
             r"\mathrm{wkv}_t = \frac{\sum_{i<t} e^{(t-1-i)w + k_i} v_i + e^{u + k_t} v_t}"
             r"{\sum_{i<t} e^{(t-1-i)w + k_i} + e^{u + k_t}},"),
        Step("whatever the shifts: the numerator of the difference is 0."),
    ])


def _block(xp: Any, X: Any, W: tuple[Any, Any, Any]) -> Any:
    """A set-transformer block without positions: :math:`X + \\operatorname{Att}(XW_Q,
    XW_K, XW_V)`."""
    return X + _sd.attention(xp, xp.matmul(X, W[0]), xp.matmul(X, W[1]), xp.matmul(X, W[2]))


def derive_permutation() -> Proof:
    xp = get_namespace("sympy")
    xp.reset_shifts()
    n, d = 3, 1
    X = symbol_array("x", (n, d))
    W = tuple(symbol_array(f"w^{m}", (d, d)) for m in "QKV")
    chk = _Checks()
    base = _obj(_block(xp, X, W))
    pooled = _obj(_pool.mean_pool(xp, base))
    count = 0
    for perm in itertools.permutations(range(n)):
        P = list(perm)
        _equal(chk, _block(xp, X[P], W), base[P], f"block(PX) - P block(X), {perm}")
        _equal(chk, _pool.mean_pool(xp, _block(xp, X[P], W)), pooled, f"pool, {perm}")
        count += 1
    return chk.proof([
        Step(rf"$n = {n}$ tokens $X$ and weights $W_Q, W_K, W_V$ independent symbols (no "
             r"positions, no mask); $f(X) = X + \operatorname{Att}(XW_Q, XW_K, XW_V)$ from "
             r"the running `sdpa.attention`, each softmax's shift an opaque symbol."),
        Step(rf"For all {count} permutations $P$: $f(PX) = P f(X)$ (equivariance), and the "
             r"set transformer's pooled output `mean_pool` is invariant:",
             r"P\bigl(f(\Pi X)\bigr) = \tfrac1n \mathbf 1^\top f(\Pi X) = P\bigl(f(X)\bigr)."),
    ])


def derive_pooling() -> Proof:
    xp = get_namespace("sympy")
    xp.reset_shifts()
    n, d = 2, 3
    U, G = symbol_array("u", (n, d)), symbol_array("g", (n, d))
    chk = _Checks()
    got = _obj(_pool.l2_normalize(xp, U))
    norms = [sympy.sqrt(sum(U[i, j]**2 for j in range(d))) for i in range(n)]
    ref = np.array([[U[i, j] / norms[i] for j in range(d)] for i in range(n)], dtype=object)
    chk.zero(got - ref, "N(u) - u/|u|")
    vjp = _obj(_pool.l2_normalize_vjp(xp, G, U)[0])
    jvp = _obj(_pool.l2_normalize_jvp(xp, (G,), U))
    for i in range(n):
        J = sympy.Matrix([[sympy.diff(ref[i, r], U[i, c]) for c in range(d)]
                          for r in range(d)])
        gi = sympy.Matrix(G[i])
        chk.zero(vjp[i] - np.array(list(J.T * gi), dtype=object), f"vjp row {i}")
        chk.zero(jvp[i] - np.array(list(J * gi), dtype=object), f"jvp row {i}")
    P = _obj(_pool.mean_pool(xp, U))
    for j in range(d):
        chk.zero(P[j] - sum(U[:, j]) / n, f"mean {j}")
    Gp = symbol_array("h", (d,))
    pv = _obj(_pool.mean_pool_vjp(xp, Gp, U)[0])
    for i, j in itertools.product(range(n), range(d)):
        chk.zero(pv[i, j] - sum(sympy.diff(P[c], U[i, j]) * Gp[c] for c in range(d)),
                 f"mean vjp {i},{j}")
    pj = _obj(_pool.mean_pool_jvp(xp, (G,), U))
    for c in range(d):
        chk.zero(pj[c] - sum(sympy.diff(P[c], U[i, j]) * G[i, j]
                             for i in range(n) for j in range(d)), f"mean jvp {c}")
    return chk.proof([
        Step(rf"$u \in \mathbb R^{{{n}\times{d}}}$ (rows) of independent symbols. "
             r"`l2_normalize` divides by an opaque positive scale $s$ first; it cancels:",
             r"N(u)_{1} = " + sympy.latex(got[0, 0]) + r" = \frac{u_1}{|u|_2}."),
        Step(r"Its VJP and JVP equal $J^\top g$ and $J \dot u$ with $J = \partial N/\partial "
             r"u$ by `sympy.diff` of the definition:",
             r"\bar u = \frac{g - N(N^\top g)}{|u|},\qquad \dot N = \frac{\dot u - N(N^\top "
             r"\dot u)}{|u|} ;"),
        Step(r"`mean_pool` is $\tfrac1n\sum_i u_i$, its VJP $\bar u_i = g/n$ and its JVP "
             r"$\tfrac1n\sum_i \dot u_i$, also by `sympy.diff`."),
    ])


def derive_chunked() -> Proof:
    xp = get_namespace("sympy")
    T, N, d = 5, 2, 1
    la = symbol_array(r"\ell", (T,))
    B, C, X = symbol_array("b", (T, N)), symbol_array("c", (T, N)), symbol_array("x", (T, d))
    chk = _Checks()
    ref = _ssm.ssd_recurrence(xp, la, B, C, X)
    chunkings: list[Any] = [1, 2, 3, 4, 5, 6, [1, 4], [3, 2], [2, 1, 2]]
    for chunks in chunkings:
        _equal(chk, _ssm2.ssd_chunked(xp, la, B, C, X, chunks), ref,
               f"ssd_chunked(chunks={chunks}) - recurrence")
    return chk.proof([
        Step(rf"$T = {T}$ steps, state size $N = {N}$, log-decays $\ell_t$ and $B, C, X$ "
             r"independent symbols; `ssd_chunked` runs Mamba-2's chunked algorithm (the "
             r"diagonal blocks as masked attention, each chunk's state from zero, the state "
             r"carried across chunks, the carried state read out) for the chunkings "
             + ", ".join(f"`{c}`" for c in chunkings) + " (a size: the last chunk ragged, as "
             r"Hugging Face's zero padding; a list: the sizes)"),
        Step(r"and equals `ssd_recurrence` entry by entry for each, every exponential of a "
             r"segment sum expanded into the product of its factors:",
             r"Y^{diag} + Y^{off} = Y ."),
    ])


register(ssm_identity("ssm_state_space_duality",
             "Mamba-2's duality: a scalar-decay SSM is masked attention with a "
             "1-semiseparable mask",
             r"H_t = a_t H_{t-1} + B_t^\top x_t,\ y_t = C_t H_t \iff y = (L \circ C B^\top)x,"
             r"\ L_{ij} = \textstyle\prod_{k=j+1}^{i} a_k\ (i \ge j)",
             (_ssm.ssd_recurrence, _ssm.ssd_attention, _ssm.ssm_decay_matrix,
              _ssm.selective_scan, _ssm.discretize_zoh_euler), derive_duality, ("scan",)))
register(ssm_identity("ssm_wkv_stable_equals_naive",
             "RWKV-4's running-maximum WKV equals the naive WKV exactly",
             r"\frac{e^{m-m_o}p + e^{u+k_t-m_o}v_t}{e^{m-m_o}q + e^{u+k_t-m_o}} = "
             r"\frac{\sum_{i<t} e^{(t-1-i)w+k_i}v_i + e^{u+k_t}v_t}{\sum_{i<t} e^{(t-1-i)w"
             r"+k_i} + e^{u+k_t}}",
             (_rwkv.wkv, _rwkv.wkv_naive), derive_wkv, ("rwkv",)))
register(ssm_identity("ssm_set_permutation",
             "Attention without positions is permutation-equivariant, the mean-pooled set "
             "transformer invariant",
             r"f(\Pi X) = \Pi f(X),\quad P(f(\Pi X)) = P(f(X)),\quad P(X) = \tfrac1n "
             r"\mathbf 1^\top X",
             (_sd.attention, _pool.mean_pool), derive_permutation, ("set",)))
register(ssm_identity("ssm_pooling_derivatives",
             "The l2 normalization and mean pooling, with their VJPs and JVPs",
             r"N(u) = \frac{u}{|u|_2},\ \bar u = \frac{g - N N^\top g}{|u|_2};\ "
             r"P(X) = \tfrac1n\textstyle\sum_i X_i,\ \bar X_i = \tfrac gn",
             (_pool.l2_normalize, _pool.l2_normalize_vjp, _pool.l2_normalize_jvp,
              _pool.mean_pool, _pool.mean_pool_vjp, _pool.mean_pool_jvp), derive_pooling,
             ("set",)))
register(ssm_identity("ssm_ssd_chunked_equals_recurrence",
             "Mamba-2's chunked algorithm equals the recurrence for every chunking",
             r"Y_{[l,h)} = (L_{[l,h)}\circ C B^\top)X_{[l,h)} + \bigl(e^{\sum_{l\le r\le t}"
             r"\ell_r} C_t H_{l-1}\bigr)_t,\ H_{h-1} = e^{\sum_{l\le r<h}\ell_r}H_{l-1} + "
             r"\textstyle\sum_s e^{\sum_{s<r<h}\ell_r}B_s^\top X_s",
             (_ssm2.ssd_chunked, _ssm.ssd_recurrence, _ssm.ssd_attention), derive_chunked,
             ("scan", "mamba2")))
