r"""The ``kronecker`` family, concluded: Shampoo (Baggag & Saad §5.4, eqs. 5.4.1–5.4.3,
Algorithm 5), proved with the running functions of :mod:`nlaverify.curvature.shampoo` (the
Kronecker algebra and the helpers are in :mod:`nlaverify.identities.kronecker`, K-FAC in
:mod:`nlaverify.identities.kfac`).

The library is called through its modules (``_sh.shampoo_direction``, ...), so a test can
plant an error in a library function and see the proof fail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import sympy

from nlaverify.curvature import kronecker as _kr
from nlaverify.curvature import shampoo as _sh
from nlaverify.identities.core import Proof, Step
from nlaverify.identities.kronecker import (
    SEED_SHAMPOO,
    XP,
    _cayley,
    _concrete,
    _equal,
    _reg,
    _sym,
    _verdict,
)

# --------------------------------------------------------------------------- Shampoo


def _svd_matrix(m: int, n: int, r: int, equal: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(G, U_r V_r^T)`` with :math:`G = U_r\\operatorname{diag}(\\sigma)V_r^\\top`, Cayley
    orthogonal :math:`U`, :math:`V` and positive symbols :math:`\\sigma_1..\\sigma_r` (all
    the same symbol :math:`\\sigma` when ``equal``: a repeated singular value)."""
    U, V = _cayley(m)[:, :r], _cayley(n, 1)[:, :r]
    sigma = np.array([sympy.Symbol("sigma" if equal else f"sigma_{k + 1}", positive=True)
                      for k in range(r)])
    return U @ np.diag(sigma) @ V.T, U @ V.T


def _sylvester(M: np.ndarray, values: list, f: Callable[[Any], Any]) -> np.ndarray:
    r""":math:`f(M) = \sum_i f(\lambda_i)\prod_{j\ne i}\frac{M - \lambda_jI}{\lambda_i -
    \lambda_j}` (Sylvester's formula) for a diagonalizable :math:`M` with the distinct
    eigenvalues ``values``: the spectral projectors as polynomials in :math:`M`, so no
    eigenvector (and no basis of an eigenspace) is involved."""
    n = M.shape[0]
    Mm, out = sympy.Matrix(M.tolist()), sympy.zeros(n, n)
    for i, li in enumerate(values):
        P = sympy.eye(n)
        for j, lj in enumerate(values):
            if j != i:
                P = P * (Mm - lj * sympy.eye(n)) / (li - lj)
        out += f(li) * P
    return np.array(out.tolist(), dtype=object)


_s, _t = sympy.symbols("s t", positive=True)
#: PSD matrices with a repeated eigenvalue, and their distinct eigenvalues (by construction)
_REPEATED: dict[str, Callable[[], tuple[np.ndarray, list]]] = {
    r"$I_3 + \mathbb 1\mathbb 1^\top$": lambda: (np.eye(3, dtype=int).astype(object) + 1, [1, 4]),
    r"$Q\operatorname{diag}(s, s, t)Q^\top$": lambda: (
        _cayley(3) @ np.diag([_s, _s, _t]) @ _cayley(3).T, [_s, _t]),
    r"$Q\operatorname{diag}(s, s, 0)Q^\top$": lambda: (
        _cayley(3) @ np.diag([_s, _s, 0]) @ _cayley(3).T, [_s, 0]),
}


def derive_shampoo_polar() -> Proof:
    def check(case: tuple[int, int, int, str]) -> bool:
        m, n, r, kind = case
        G, polar = _svd_matrix(m, n, r, equal=kind == "equal")
        stats = _sh.shampoo_statistics(XP, G, _sh.shampoo_init(XP, G))
        return _equal(_sh.shampoo_direction(XP, G, stats), polar)

    def roots(name: str) -> bool:
        M, values = _REPEATED[name]()
        return all(_equal(_sh.inverse_root(XP, M, p), _sylvester(
            M, values, lambda w, p=p: 0 if w == 0 else w ** sympy.Rational(-1, p)))
            for p in (1, 2, 4))

    m, n, r = 3, 2, 2
    G, _ = _svd_matrix(m, n, r)
    return _verdict(_concrete(
        r"Build $G = U_r\operatorname{diag}(\sigma)V_r^\top$ from exact rational orthogonal "
        r"$U$, $V$ (Cayley transforms of rational skew matrices) and positive symbols "
        r"$\sigma_k$ (distinct, or all equal to one $\sigma$: a repeated singular value, so "
        r"$GG^\top$ and $G^\top G$ have a repeated eigenvalue whose eigenspace SymPy returns in "
        r"a non-orthogonal basis); run the running `shampoo_init` ($\epsilon = 0$), "
        r"`shampoo_statistics` and `shampoo_direction`, whose `inverse_root` diagonalizes "
        r"$GG^\top$ and $G^\top G$ with the exact `symmetric_eigh` (SymPy's `eigenvects`, "
        r"Gram–Schmidt inside each eigenspace; not knowing $U$, $V$) and drops the exactly-zero "
        r"eigenvalues. The result minus $U_rV_r^\top$, cases $(m, n, r, \sigma)$",
        [(2, 2, 2, "distinct"), (3, 2, 2, "distinct"), (2, 3, 2, "distinct"),
         (3, 3, 2, "distinct"), (3, 2, 1, "distinct"), (3, 2, 2, "equal"),
         (3, 3, 2, "equal")], check),
        _concrete(
            r"The running `inverse_root(M, p)`, $p = 1, 2, 4$, on PSD matrices with a repeated "
            r"eigenvalue ($s$, $t$ positive symbols, $Q$ a Cayley orthogonal matrix), against "
            r"Sylvester's formula $M^{+1/p} = \sum_{\lambda_i \ne 0}\lambda_i^{-1/p}"
            r"\prod_{j\ne i}(M - \lambda_jI)/(\lambda_i - \lambda_j)$ over the distinct "
            r"eigenvalues known by construction (no eigenvectors), cases $M$",
            list(_REPEATED), roots),
        (True, Step("One such input, $(m, n, r) = (3, 2, 2)$:",
                    "G = " + sympy.latex(sympy.Matrix(G.tolist())))))


def derive_shampoo_adagrad() -> Proof:
    def check(case: tuple[int, int, str]) -> bool:
        n, r, kind = case
        U = _cayley(n)
        sigma = [sympy.Symbol("sigma" if kind == "equal" else f"sigma_{k + 1}", positive=True)
                 for k in range(r)]
        gs = [U[:, k] * sigma[k] for k in range(r)]
        stats = _sh.shampoo_init(XP, gs[0])
        for g in gs:
            stats = _sh.shampoo_statistics(XP, g, stats)
        v = _sym("v", (n,))
        # full-matrix Adagrad (Duchi et al. 2011): H = sum g g^T = U diag(sigma^2, 0) U^T and
        # the step H^{+1/2} v = U diag(1/sigma, 0) U^T v, from the construction alone
        inv_sqrt = U @ np.diag([1 / s for s in sigma] + [0] * (n - r)) @ U.T
        return (_equal(_sh.shampoo_direction(XP, v, stats), inv_sqrt @ v)
                and _equal(_sh.shampoo_direction(XP, gs[-1], stats), U[:, r - 1]))

    beta, eps = sympy.Symbol("beta", positive=True), sympy.Symbol("epsilon", positive=True)

    def decay(shape: tuple[int, ...]) -> bool:
        Gs = [_sym(f"g{k + 1}", shape) for k in range(3)]
        stats = _sh.shampoo_init(XP, Gs[0], eps)
        for G in Gs:
            stats = _sh.shampoo_statistics(XP, G, stats, beta=beta)
        mats = [sympy.Matrix(G.reshape(shape[0], -1).tolist()) for G in Gs]
        t = len(Gs)
        # the discounted sums, written out: L_t = beta^t eps I + sum_k beta^(t-k) G_k G_k^T
        L = beta**t * eps * sympy.eye(shape[0]) + sum(
            (beta ** (t - k) * M * M.T for k, M in enumerate(mats, 1)), sympy.zeros(shape[0]))
        want = [L]
        if len(shape) == 2:
            want.append(beta**t * eps * sympy.eye(shape[1]) + sum(
                (beta ** (t - k) * M.T * M for k, M in enumerate(mats, 1)),
                sympy.zeros(shape[1])))
        return len(stats) == len(want) and all(
            _equal(S, np.array(W.tolist(), dtype=object)) for S, W in zip(stats, want,
                                                                           strict=True))

    def decayed_direction(n: int) -> bool:
        U = _cayley(n)
        sigma = [sympy.Symbol(f"sigma_{k + 1}", positive=True) for k in range(n)]
        stats = None
        for k in range(n):
            stats = _sh.shampoo_statistics(XP, U[:, k] * sigma[k], stats, beta=beta)
        v = _sym("v", (n,))
        # L = sum_k beta^(n-k) sigma_k^2 u_k u_k^T, so L^{-1/2} = U diag(...^{-1/2}) U^T
        scale = [1 / (sympy.sqrt(beta) ** (n - 1 - k) * sigma[k]) for k in range(n)]
        return _equal(_sh.shampoo_direction(XP, v, stats), U @ np.diag(scale) @ U.T @ v)

    return _verdict(_concrete(
        r"Order 1 (a vector parameter): the running `shampoo_statistics` accumulates "
        r"$L = \sum_k g_kg_k^\top$ over $g_k = \sigma_k u_k$ ($u_k$ the columns of a Cayley "
        r"orthogonal $U$), and `shampoo_direction` returns $L^{+1/2}v$ for a symbolic $v$: "
        r"minus full-matrix Adagrad's $H^{+1/2}v = U\operatorname{diag}(\sigma^{-1}, 0)U^\top v$"
        r" (and the last gradient maps to $u_r$), cases $(n, r, \sigma)$ (rank-deficient when "
        r"$r < n$; with equal $\sigma_k$, $L$ has a repeated nonzero eigenvalue)",
        [(2, 2, "distinct"), (3, 2, "distinct"), (3, 3, "distinct"), (3, 2, "equal")], check),
        _concrete(
        r"The moving-average path (`beta`): three symbolic gradients accumulated by the "
        r"running `shampoo_statistics(..., beta=beta)` from `shampoo_init(G, epsilon)` "
        r"(symbolic $\beta$, $\epsilon > 0$) minus the discounted sums written out, "
        r"$L_3 = \beta^3\epsilon I + \sum_{k=1}^3\beta^{3-k}G_kG_k^\top$ (and $R_3$ alike "
        r"with $G_k^\top G_k$ for a matrix), cases: the gradients' shape", [(3,), (2, 3)],
        decay), _concrete(
        r"With $\beta$, the direction: $g_k = \sigma_ku_k$ accumulated with `beta` give "
        r"$L = \sum_k\beta^{n-k}\sigma_k^2u_ku_k^\top$, and `shampoo_direction` returns "
        r"$L^{-1/2}v = U\operatorname{diag}(\beta^{-(n-k)/2}\sigma_k^{-1})U^\top v$, cases $n$",
        [2], decayed_direction))


# --------------------------------------------------------------------------- catalogue

_reg("shampoo_one_gradient_is_polar_factor", "Shampoo with one gradient is the polar factor",
     r"(GG^\top)^{+1/4}\,G\,(G^\top G)^{+1/4} = UV^\top,\quad G = U\Sigma V^\top",
     SEED_SHAMPOO, (_sh.shampoo_direction, _sh.shampoo_statistics, _sh.inverse_root,
                    _kr.symmetric_eigh), derive_shampoo_polar)
_reg("shampoo_order_one_is_full_matrix_adagrad", "Shampoo of order one is full-matrix Adagrad",
     r"L_t = \sum_{k\le t} g_kg_k^\top,\quad \Delta = L_t^{+1/2}g_t;\quad \text{with }"
     r"\beta:\ L_t = \beta^t\epsilon I + \sum_{k\le t}\beta^{t-k}g_kg_k^\top", SEED_SHAMPOO,
     (_sh.shampoo_direction, _sh.shampoo_statistics, _sh.shampoo_init, _sh.inverse_root),
     derive_shampoo_adagrad)
