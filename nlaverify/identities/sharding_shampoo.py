r"""The ``sharding`` family, concluded: what Shampoo and global-norm clipping need gathered
under ZeRO (issue 22, item 1), proved on the running functions of
:mod:`nlaverify.sharding.optimizer` with SymPy (the family's other identities are in
:mod:`nlaverify.identities.sharding`).

**Shampoo on row shards.** :math:`G = [G_1; \dots; G_S]`: the unsplit axis' statistic
:math:`R = \sum_t\sum_s G_{t,s}^\top G_{t,s}` is an all-reduce of the devices' own (no
gather), but :math:`L = \sum_t G_tG_t^\top` has the off-diagonal blocks
:math:`G_{t,s}G_{t,r}^\top`: exact Shampoo needs the all-gather of the rows for :math:`L`
(and device :math:`s`'s rows of :math:`L^{-1/4}` times the gathered :math:`G_rR^{-1/4}`).
Each device's own factors, and the all-reduced :math:`R` with :math:`L`'s diagonal block
(blocked Shampoo), are counterexamples. The roots are exact because the inputs are built
with known spectra: :math:`G_t = U\operatorname{diag}(\sigma_t)V^\top`, :math:`U`, :math:`V`
rational orthogonal (Cayley), so the expected direction is known in closed form.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from nlaverify.backends import get_namespace
from nlaverify.curvature import shampoo as _sp
from nlaverify.identities._expectations import _Checks, _obj
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.identities.kron_tools import _cayley
from nlaverify.identities.shampoo import _svd_matrix
from nlaverify.identities.sharding import _cut, _differs, _failed
from nlaverify.sharding import optimizer as _op
from nlaverify.symbolic.exact import symbol_array

_F = "sharding"
SEEDS = {
    "shampoo": "Gupta, Koren & Singer 2018 (Shampoo); Anil et al. 2020 (distributed Shampoo); "
               "Shi et al. 2023 (blocked Distributed Shampoo); Rajbhandari et al. 2020 (ZeRO "
               "§5); Baggag & Saad §5.4",
    "clip": "Pascanu, Mikolov & Bengio 2013 (gradient-norm clipping); Rajbhandari et al. 2020 "
            "(ZeRO §5)",
}
_XP = "sympy"
#: two steps' singular values: the summed squares 625 = 5^4 and 28561 = 13^4, so that
#: L^{-1/4} and R^{-1/4} are rational and the direction is U diag(24/25, 120/169) V^T
_SIGMAS = ((7, 119), (24, 120))
_DIRECTION = (sympy.Rational(24, 25), sympy.Rational(120, 169))


def _two_steps() -> tuple[list[np.ndarray], np.ndarray]:
    U, V = _cayley(3)[:, :2], _cayley(2, 1)
    Gs = [U @ np.diag(s).astype(object) @ V.T for s in _SIGMAS]
    return Gs, U @ np.diag(_DIRECTION) @ V.T


def _full(xp: Any, Gs: list[np.ndarray]) -> Any:
    stats = _sp.shampoo_init(xp, Gs[0])
    for G in Gs:
        stats = _sp.shampoo_statistics(xp, G, stats)
    return _obj(_sp.shampoo_direction(xp, Gs[-1], stats))


def derive_shampoo_sharded() -> Proof:
    """Shampoo on shards: exact with the all-reduced R and the gathered rows for L; wrong on
    a shard's own factors, and wrong with R all-reduced and L's diagonal block."""
    xp, chk = get_namespace(_XP), _Checks()
    G, polar = _svd_matrix(3, 2, 2)
    Gs, closed = _two_steps()
    cases = [("one gradient, symbolic sigma", [G], polar), ("two steps", Gs, closed)]
    splits = ((-2, (1, 2)), (-2, (2, 1)), (-2, (1, 1, 1)), (-1, (1, 2)), (-1, (1, 1, 1)))
    for what, hist, want in cases:
        chk.zero(_full(xp, hist) - want, f"{what}: shampoo_direction")
        for axis, sizes in splits:
            h = [_cut(g if axis == -2 else g.T.copy(), sizes, axis) for g in hist]
            got = xp.concat(_op.shampoo_sharded(xp, h, axis), axis=axis)
            chk.zero(got - (want if axis == -2 else want.T), f"{what}, axis {axis} {sizes}")
            if chk.bad:
                return _failed(chk, f"{what}, axis {axis} {sizes}")
    h = [_cut(g, (1, 2), -2) for g in Gs]
    own = xp.concat(_op.shampoo_on_shards(xp, h, -2), axis=-2)
    gap_own = _differs(chk, own, closed, "Shampoo on each row shard's own factors")
    blocked = xp.concat(_op.shampoo_on_shards(xp, h, -2, all_reduce=True), axis=-2)
    gap = _differs(chk, blocked, closed, "R all-reduced, L the diagonal block")
    G1 = sympy.Matrix(Gs[0].tolist())
    steps = [
        Step("Gradients $G_t = U\\operatorname{diag}(\\sigma_t)V^\\top \\in \\mathbb "
             "R^{3\\times2}$, $U$, $V$ rational orthogonal (Cayley transforms): one gradient "
             "with positive symbols $\\sigma_1, \\sigma_2$ (Shampoo's direction is then the "
             "polar factor $UV^\\top$), and two steps with $\\sigma_1 = (7, 119)$, "
             "$\\sigma_2 = (24, 120)$, whose summed squares $625 = 5^4$ and $28561 = 13^4$ "
             "make the direction $U\\operatorname{diag}(24/25,\\,120/169)V^\\top$ known in "
             "closed form (the independent oracle); the first is",
             "G_1 = " + sympy.latex(G1)),
        Step("`shampoo_sharded` splits the rows, (1, 2), (2, 1), (1, 1, 1), or the columns of "
             "the transposes, (1, 2), (1, 1, 1). The unsplit axis' statistic is the "
             "all-reduce of each device's own (no gather); the split axis' needs the "
             "all-gather of the slices; device $s$ forms its rows from its rows of "
             "$L^{-1/4}$:",
             r"R = \sum_t\sum_s G_{t,s}^\top G_{t,s},\qquad "
             r"L = \sum_t \bigl[G_{t,s}G_{t,r}^\top\bigr]_{s,r},\qquad "
             r"U_s = (L^{-1/4})_{s,:}\,\bigl[G_{T,r}R^{-1/4}\bigr]_r ."),
        Step("Every entry equals the closed form and the running `shampoo_direction` of the "
             "whole matrix, for both inputs and every split."),
        Step("Each device's own factors $L_s^{-1/4}G_{T,s}R_s^{-1/4}$ (Shampoo on a ZeRO "
             "shard, rows split (1, 2)) are not the rows of the update: entry $(0, 0)$ of "
             f"the difference is $\\approx {sympy.N(gap_own, 6)}$, an exact nonzero "
             "algebraic number. Nor is the all-reduce of $R$ alone enough: with $L$'s "
             "diagonal block $L_{ss}$ (blocked Shampoo, a different optimizer) entry "
             "$(0, 0)$ of the difference is",
             sympy.latex(gap) + r" \approx " + sympy.latex(sympy.N(gap, 6)) + r" \ne 0 ,"),
        Step("so the exact gather is precisely: the all-reduce of the unsplit axis' statistic "
             "($n\\times n$ for a row split) and the all-gather of the split axis' slices for "
             "the other ($L$'s off-diagonal blocks $G_sG_r^\\top$, which no device holds)."),
    ]
    return chk.proof(steps)


def derive_zero_clip() -> Proof:
    """Global-norm clipping under ZeRO: the all-reduced squared norm; not each shard's own."""
    xp, chk = get_namespace(_XP), _Checks()
    c = sympy.Symbol("c", positive=True)
    grads = {"w": symbol_array("g", (3, 2)), "b": symbol_array("h", (4,))}
    ref = _op.clip_by_global_norm(xp, grads, c)
    for n in (2, 3):
        got = _op.gather_params(xp, _op.zero_clip_by_global_norm(
            xp, _op.shard_params(xp, grads, n), c))
        for k in grads:
            chk.zero(got[k] - ref[k], f"{n} shards, {k}")
        if chk.bad:
            return _failed(chk, f"{n} shards")
    one = sympy.Integer(1)
    g0 = {"w": np.array([[3, 4], [0, 0], [0, 0]]) * one, "b": np.array([0, 0, 0, 12]) * one}
    ref0 = _op.clip_by_global_norm(xp, g0, one)
    bad = _op.gather_params(xp, _op.zero_clip_by_shard_norm(
        xp, _op.shard_params(xp, g0, 2), one))
    gap = _differs(chk, bad["w"], ref0["w"], "clipping by each shard's norm")
    steps = [
        Step("Gradients $g \\in \\mathbb R^{3\\times2}$, $h \\in \\mathbb R^4$ of independent "
             "real symbols and a positive threshold $c$. `clip_by_global_norm` multiplies "
             "both by $\\min(1, c/\\|(g, h)\\|)$ (a `Piecewise`, exact); "
             "`zero_clip_by_global_norm` gives 2 and 3 devices their first-axis slices and "
             "all-reduces the squared norms. Every entry equals the unsharded one:",
             r"\|g\|^2 = \sum_s \|g^{(s)}\|^2 ."),
        Step("Clipping each device's slices by their own norm is not: with $c = 1$, "
             "$g = ((3, 4), 0, 0)$, $h = (0, 0, 0, 12)$ on 2 devices (norms 5 and 12, global "
             "13), entry $(0, 0)$ of the difference is",
             sympy.latex(gap) + r" = \tfrac35 - \tfrac3{13} \ne 0 ."),
    ]
    return chk.proof(steps)


def _reg(id_: str, seed: str, title: str, statement: str, certifies: tuple, derive: Any
         ) -> None:
    register(Identity(id_, _F, title, statement, SEEDS[seed],
                      tuple(qualname(f) for f in certifies),
                      guard(derive), tags=("sharding",)))


_reg("shampoo_needs_the_gather_of_the_split_axis", "shampoo",
     "Shampoo on shards: exact with the all-reduced statistic of the unsplit axis and the "
     "gathered split axis; wrong on a shard's own factors",
     r"U_s = (L^{-1/4})_{s,:}\bigl[G_rR^{-1/4}\bigr]_r,\ R = \textstyle\sum_s G_s^\top G_s;"
     r"\quad L_s^{-1/4}G_sR_s^{-1/4} \ne U_s",
     (_op.shampoo_sharded, _op.shampoo_on_shards, _sp.shampoo_direction,
      _sp.shampoo_statistics), derive_shampoo_sharded)
_reg("zero_global_norm_clipping", "clip",
     "Global-norm clipping under ZeRO is exact with the all-reduced squared norm",
     r"g^{(s)}\min\Bigl(1, \frac{c}{\sqrt{\sum_r\|g^{(r)}\|^2}}\Bigr) = "
     r"\Bigl(g\min\bigl(1, \tfrac{c}{\|g\|}\bigr)\Bigr)^{(s)}",
     (_op.clip_by_global_norm, _op.zero_clip_by_global_norm, _op.zero_clip_by_shard_norm),
     derive_zero_clip)
