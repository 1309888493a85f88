"""General-dimension closed forms of the Jacobians (Baggag & Saad §3.4, §3.8).

Each identity has two parts:

1. the closed form, derived for *general* :math:`n` with SymPy's indexed
   calculus (:mod:`nlaverify.symbolic.indexed`);
2. the library's running function (an explicit Jacobian, or the VJP) compared
   with ``sympy`` differentiation of the running forward at n = 2..5.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import sympy

from nlaverify.backends import get_namespace
from nlaverify.identities.core import Identity, Proof, Step, qualname, register
from nlaverify.ops.loss import cross_entropy, cross_entropy_vjp
from nlaverify.ops.norms import layernorm, layernorm_jacobian, rmsnorm, rmsnorm_jacobian
from nlaverify.ops.softmaxes import softmax, softmax_jacobian, softmax_vjp_from_output
from nlaverify.symbolic.exact import is_zero, symbol_array
from nlaverify.symbolic.indexed import canonical_sums, i, j, n, zero_for_valid_indices

SIZES = range(2, 6)
_k = sympy.Symbol("k", integer=True, positive=True)
_m = sympy.Symbol("m", integer=True, positive=True)
_z, _x, _y, _dP = (sympy.IndexedBase(s) for s in ("z", "x", "y", "dP"))
_eps = sympy.Symbol("epsilon", positive=True)
_delta = sympy.KroneckerDelta(i, j)


def _p(a: sympy.Expr) -> sympy.Expr:
    return sympy.exp(_z[a]) / sympy.Sum(sympy.exp(_z[_m]), (_m, 1, n))


def _general(name: str, lhs: sympy.Expr, rhs: sympy.Expr, derivation: str) -> tuple[bool, Step]:
    ok, cond = zero_for_valid_indices(lhs - rhs)
    text = (f"General $n$ ({name}): {derivation} With SymPy's Kronecker-delta calculus the "
            f"difference of the two sides is exactly $0$ for positive integer indices under the "
            f"condition ${cond}$.")
    return ok, Step(text, f"{sympy.latex(lhs)} \\;=\\; {sympy.latex(rhs)}" if len(
        sympy.latex(lhs)) < 600 else None)


def _concrete(check: Callable[[int], bool], what: str) -> tuple[bool, Step]:
    for size in SIZES:
        if not check(size):
            return False, Step(f"{what}: fails at n = {size}.")
    return True, Step(f"{what}: the difference is exactly $0$ entrywise at "
                      f"n = {SIZES.start}..{SIZES.stop - 1}.")


def _verdict(*parts: tuple[bool, Step]) -> Proof:
    ok = all(p[0] for p in parts)
    return Proof("proved" if ok else "failed", tuple(p[1] for p in parts))


def _matrix_matches(jacobian_fn, forward_fn, extra: dict, size: int) -> bool:
    xp = get_namespace("sympy")
    xp.reset_shifts()
    x = symbol_array("x", (size,))
    args = {"gamma": symbol_array("gamma", (size,))} if "gamma" in extra else {}
    fwd_kwargs = dict(args)
    if extra.get("beta"):
        fwd_kwargs["beta"] = symbol_array("beta", (size,))
    eps = {"eps": _eps} if "gamma" in extra else {}
    J = np.asarray(jacobian_fn(xp, x if "gamma" in extra else forward_fn(xp, x), **args, **eps),
                   dtype=object)
    y = np.asarray(forward_fn(xp, x, **fwd_kwargs, **eps), dtype=object)
    ref = sympy.Matrix(list(y)).jacobian(list(x))
    return all(is_zero(J[a, b] - ref[a, b]) for a in range(size) for b in range(size))


def _softmax_fwd(xp, x):
    return softmax(xp, x)


def derive_softmax() -> Proof:
    general = _general("softmax", sympy.diff(_p(i), _z[j]), _p(i) * (_delta - _p(j)),
                       r"$p_i = e^{z_i}/\sum_m e^{z_m}$, differentiate with respect to $z_j$.")
    concrete = _concrete(lambda s: _matrix_matches(softmax_jacobian, _softmax_fwd, {}, s),
                         "The running `softmax_jacobian(p)` against `sympy` Jacobian of the "
                         "running `softmax`")
    return _verdict(general, concrete)


def derive_attention_scores() -> Proof:
    lhs = sympy.Sum(_dP[_k] * sympy.diff(_p(_k), _z[j]), (_k, 1, n))
    rhs = _p(j) * (_dP[j] - sympy.Sum(_dP[_k] * _p(_k), (_k, 1, n)))
    general = _general("one row of scores $s = z$", lhs, rhs,
                       r"$dS_j = \sum_k dP_k\,\partial p_k/\partial s_j$.")

    def check(size: int) -> bool:
        xp = get_namespace("sympy")
        xp.reset_shifts()
        s, g = symbol_array("s", (1, size)), symbol_array("dP", (1, size))
        P = np.asarray(softmax(xp, s), dtype=object)
        dS = np.asarray(softmax_vjp_from_output(xp, g, P), dtype=object)
        return all(is_zero(dS[0, b] - sum(g[0, a] * sympy.diff(P[0, a], s[0, b])
                                           for a in range(size))) for b in range(size))

    concrete = _concrete(check, "The running `softmax_vjp_from_output` (used by "
                                "`attention_vjp`) against `sympy.diff`")
    return _verdict(general, concrete)


def derive_cross_entropy() -> Proof:
    L = -sympy.Sum(_y[_k] * (_z[_k] - sympy.log(sympy.Sum(sympy.exp(_z[_m]), (_m, 1, n)))),
                   (_k, 1, n))
    # The raw derivative is p_j * sum_k y_k - y_j; it equals p_j - y_j because y is a
    # probability vector. Impose sum_k y_k = 1 on the canonical form of the sum.
    k0 = sympy.Symbol("k_0", integer=True, positive=True)
    total = sympy.Sum(_y[k0], (k0, 1, n))
    resid = canonical_sums(sympy.diff(L, _z[j]) - (_p(j) - _y[j]))
    ok, cond = zero_for_valid_indices(resid.xreplace({total: sympy.Integer(1)}))
    general = (ok and resid.has(total), Step(
        r"General $n$: $L = -\sum_k y_k \log p_k$; differentiating gives "
        r"$\partial L/\partial z_j = p_j \sum_k y_k - y_j$, which is $p_j - y_j$ because "
        r"$\sum_k y_k = 1$ for a one-hot (or any probability) $y$. With that substitution the "
        f"difference is exactly $0$ under ${cond}$ (and without it the remainder is "
        r"$(\sum_k y_k - 1)\,p_j$, so the hypothesis is needed).",
        r"\frac{\partial L}{\partial z_j} = p_j - y_j"))

    def check(size: int) -> bool:
        xp = get_namespace("sympy")
        xp.reset_shifts()
        Z = symbol_array("z", (1, size))
        t = np.array([size - 1])
        L_run = _scalar(cross_entropy(xp, Z, t))
        (dZ,) = cross_entropy_vjp(xp, np.asarray(sympy.Integer(1), dtype=object), Z, t)
        return all(is_zero(dZ[0, b] - sympy.diff(L_run, Z[0, b])) for b in range(size))

    concrete = _concrete(check, "The running `cross_entropy_vjp` against `sympy.diff` of the "
                                "running `cross_entropy` (target: the last class)")
    return _verdict(general, concrete)


def _scalar(x):
    return x[()] if isinstance(x, np.ndarray) else x


def _layernorm_general() -> tuple[bool, Step]:
    mu = sympy.Sum(_x[_k], (_k, 1, n)) / n
    sigma = sympy.sqrt(sympy.Sum((_x[_m] - mu) ** 2, (_m, 1, n)) / n + _eps)

    def xhat(a):
        return (_x[a] - mu) / sigma

    return _general("LayerNorm, $\\gamma = 1$, $\\beta = 0$", sympy.diff(xhat(i), _x[j]),
                    (_delta - 1 / n - xhat(i) * xhat(j) / n) / sigma,
                    r"$\hat x_i = (x_i - \mu)/\sigma$, differentiate with respect to $x_j$.")


def _rmsnorm_general() -> tuple[bool, Step]:
    r = sympy.sqrt(sympy.Sum(_x[_k] ** 2, (_k, 1, n)) / n + _eps)

    def xhat(a):
        return _x[a] / r

    return _general("RMSNorm, $\\gamma = 1$", sympy.diff(xhat(i), _x[j]),
                    (_delta - xhat(i) * xhat(j) / n) / r,
                    r"$\hat x_i = x_i/r$, differentiate with respect to $x_j$.")


def derive_layernorm() -> Proof:
    return _verdict(_layernorm_general(), _concrete(
        lambda s: _matrix_matches(layernorm_jacobian, layernorm, {"gamma": 1, "beta": 1}, s),
        "The running `layernorm_jacobian` (with symbolic $\\gamma$) against the `sympy` "
        "Jacobian of the running `layernorm` (with symbolic $\\gamma, \\beta, \\epsilon$)"))


def derive_rmsnorm() -> Proof:
    return _verdict(_rmsnorm_general(), _concrete(
        lambda s: _matrix_matches(rmsnorm_jacobian, rmsnorm, {"gamma": 1}, s),
        "The running `rmsnorm_jacobian` against the `sympy` Jacobian of the running `rmsnorm`"))


register(Identity(
    "softmax_jacobian", "jacobians", "Softmax Jacobian, general n",
    r"\frac{\partial p_i}{\partial z_j} = p_i(\delta_{ij} - p_j),\quad "
    r"J = \operatorname{diag}(p) - p p^\top",
    "Baggag & Saad §3.4.2", (qualname(softmax_jacobian), qualname(softmax)), derive_softmax,
    tags=("closed-form",)))
register(Identity(
    "attention_score_cotangent", "jacobians", "Attention score cotangent, general n",
    r"dS = P \odot \bigl(dP - \operatorname{rowsum}(dP \odot P)\bigr)",
    "Baggag & Saad §3.4.2", (qualname(softmax_vjp_from_output),), derive_attention_scores,
    tags=("closed-form",)))
register(Identity(
    "softmax_cross_entropy_gradient", "jacobians", "Softmax + cross-entropy gradient, general n",
    r"\frac{\partial}{\partial z}\Bigl(-\sum_k y_k \log\operatorname{softmax}(z)_k\Bigr) = p - y",
    "Baggag & Saad §3.1, §3.13.1", (qualname(cross_entropy_vjp), qualname(cross_entropy)),
    derive_cross_entropy, tags=("closed-form",)))
register(Identity(
    "layernorm_jacobian", "jacobians", "LayerNorm Jacobian, general n",
    r"\frac{\partial y}{\partial x} = \frac{1}{\sigma}\operatorname{diag}(\gamma)"
    r"\Bigl(I - \tfrac1n\mathbf 1\mathbf 1^\top - \tfrac1n\hat x\hat x^\top\Bigr)",
    "Baggag & Saad §3.8", (qualname(layernorm_jacobian), qualname(layernorm)), derive_layernorm,
    tags=("closed-form",)))
register(Identity(
    "rmsnorm_jacobian", "jacobians", "RMSNorm Jacobian, general n",
    r"\frac{\partial y}{\partial x} = \frac{1}{r}\operatorname{diag}(\gamma)"
    r"\Bigl(I - \tfrac1n\hat x\hat x^\top\Bigr)",
    "Baggag & Saad §3.8.1", (qualname(rmsnorm_jacobian), qualname(rmsnorm)), derive_rmsnorm,
    tags=("closed-form",)))
