r"""The quantization and pruning identities of the ``lowrank`` family (Baggag & Saad §4.1,
Table 6): the error bound of the uniform quantizers, checked at every point of a rational grid
that includes the ties and both ends of the covered interval, the output bound of a quantized
linear layer, and the exact and optimal error of magnitude and N:M pruning. Registered, in
catalogue order, by :mod:`nlaverify.identities.lowrank`; the library is called through its
modules (``_qz.quantize``, ``_pr.magnitude_prune``, ...), so a test can plant an error and see
a proof fail.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import sympy

from nlaverify.identities._expectations import _Checks, _obj, _xp
from nlaverify.identities.core import Proof, Step
from nlaverify.lowrank import prune as _pr
from nlaverify.lowrank import quantization as _qz

R = sympy.Rational


# --------------------------------------------------------------------------- quantizers


def _calibration() -> np.ndarray:
    return _xp().asarray(_obj([[R(1, 3), -2, R(5, 2), R(-3, 4)], [0, 1, R(-7, 4), R(9, 8)],
                               [R(-1, 5), R(3, 2), R(1, 6), -1]]))


def derive_quantizer_bound() -> Proof:
    xp = _xp()
    chk = _Checks()
    X = _calibration()
    shown = ""
    points = 0
    for bits, sym, axis in itertools.product((1, 2, 3), (True, False), (None, 0, 1)):
        if sym and bits == 1:
            continue
        params = _qz.quantization_params(xp, X, bits, symmetric=sym, axis=axis)
        # the b-bit integer range and the step, against their definitions written out here
        red = None if axis is None else 1 - axis
        keep = axis is not None
        if sym:
            q_lo, q_hi = -(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1
            width = np.max(np.abs(X), axis=red, keepdims=keep)
        else:
            q_lo, q_hi = 0, 2**bits - 1
            width = (np.maximum(np.max(X, axis=red, keepdims=keep), 0)
                     - np.minimum(np.min(X, axis=red, keepdims=keep), 0))
        tag = f"(b={bits}, symmetric={sym}, axis={axis})"
        chk.holds((params.qmin, params.qmax) == (q_lo, q_hi),
                  f"integer range [{q_lo}, {q_hi}] {tag}", (params.qmin, params.qmax))
        chk.zero(_obj(params.scale) - _obj(width) / (q_hi - q_lo if not sym else q_hi),
                 f"step = {'max|x|/(2^(b-1)-1)' if sym else '(beta-alpha)/(2^b-1)'} {tag}")
        q = _obj(_qz.quantize(xp, X, params))
        chk.holds(bool(np.all(q >= q_lo) and np.all(q <= q_hi)) and all(
            v == sympy.floor(v) for v in q.ravel()), f"q are {bits}-bit integers {tag}", q)
        if sym:  # the largest magnitude is represented exactly: the range is used tightly
            top = _obj(np.broadcast_to(width, X.shape))
            back = _obj(_qz.dequantize(xp, _qz.quantize(xp, top, params), params))
            chk.zero(back - top, f"Q(max|x|) = max|x| {tag}")
        lo, hi = _qz.covered_interval(params)
        bound = _qz.error_bound(params)
        lo, hi, bound = (np.broadcast_to(_obj(v), X.shape) for v in (lo, hi, bound))
        # the calibration range is covered
        if sym:  # max|x| over the tensor or the channel, computed here
            wide = np.broadcast_to(np.max(np.abs(X), axis=red, keepdims=axis is not None),
                                   X.shape)
            chk.holds(bool(np.all(lo <= -wide) and np.all(hi >= wide)), "covers [-max, max]")
        chk.holds(bool(np.all(lo <= X) and np.all(X <= hi)), f"covers x (b={bits}, {sym})")
        # a grid over the covered interval of every entry (steps of Delta/4: every tie)
        n = 4 * (params.qmax - params.qmin + 1)
        worst = np.zeros(X.shape, dtype=object)
        for t in range(n + 1):
            pts = _obj(lo + (hi - lo) * R(t, n))
            err = _obj(np.abs(pts - _qz.dequantize(xp, _qz.quantize(xp, pts, params), params)))
            ok = bool(np.all(err <= bound))
            worst = np.maximum(worst, err)
            points += pts.size
            chk.holds(ok, f"|x - Q(x)| <= Delta/2 (b={bits}, symmetric={sym}, axis={axis})",
                      err)
        chk.zero(worst - bound, f"the bound Delta/2 is attained (at the ties) {tag}")
        # just outside: the bound fails (the hypothesis is needed)
        out = _obj(hi + bound / 2)
        err = _obj(np.abs(out - _qz.dequantize(xp, _qz.quantize(xp, out, params), params)))
        chk.holds(bool(np.all(err > bound)), "outside the covered interval the bound fails")
        if bits == 2 and not sym and axis == 1:
            shown = (f"\\Delta = {sympy.latex(sympy.Matrix(_obj(params.scale).tolist()))},\\ "
                     f"z = {sympy.latex(sympy.Matrix(_obj(params.zero_point).tolist()))}")
    # the tie rule: half to even, symmetric
    ties = _obj([R(-5, 2), R(-3, 2), R(-1, 2), R(1, 2), R(3, 2), R(5, 2)])
    params = _qz.quantization_params(xp, _obj([4]), 4)
    got = _qz.quantize(xp, ties * params.scale, params)
    chk.zero(_obj(got) - _obj([-2, -2, 0, 0, 2, 2]), "round half to even")
    return chk.proof([
        Step("The quantizer $Q(x) = \\Delta\\,(\\operatorname{clip}(\\operatorname{round}"
             "(x/\\Delta) + z, q_{\\min}, q_{\\max}) - z)$. Let $t = x/\\Delta + z$. If "
             "$\\operatorname{round}(x/\\Delta) + z \\in [q_{\\min}, q_{\\max}]$ the error is "
             "$\\Delta|t - \\operatorname{round}(t)| \\le \\Delta/2$ (any tie rule). If it is "
             "$< q_{\\min}$ then $t \\le q_{\\min} - \\tfrac12$; on the covered interval "
             "$t \\ge q_{\\min} - \\tfrac12$, so $t = q_{\\min} - \\tfrac12$ and the clipped error "
             "is exactly $\\Delta/2$; likewise above $q_{\\max}$. Symmetric: $z = 0$, the "
             "interval contains $[-\\max|x|, \\max|x|]$; asymmetric: $|z + \\alpha/\\Delta| \\le "
             "\\tfrac12$, so it contains $[\\alpha, \\beta]$.",
             r"x \in \bigl[\Delta(q_{\min} - z) - \tfrac\Delta2,\ \Delta(q_{\max} - z) + "
             r"\tfrac\Delta2\bigr] \Rightarrow |x - Q(x)| \le \tfrac\Delta2"),
        Step("The running `quantization_params` uses exactly $b$ bits: the integers are "
             "$[-(2^{b-1} - 1), 2^{b-1} - 1]$ (symmetric) and $[0, 2^b - 1]$ (asymmetric), and "
             "every $q$ it produces is such an integer; the step is $\\Delta = \\max|x|/"
             "(2^{b-1} - 1)$, resp. $(\\beta - \\alpha)/(2^b - 1)$, equal to the definition "
             "written out independently (per tensor and per channel), and symmetric "
             "quantization represents $\\pm\\max|x|$ exactly, so the range is covered "
             "tightly (a wider range or a larger step fails here).",
             r"q \in [-(2^{b-1}-1), 2^{b-1}-1],\ \Delta = \frac{\max|x|}{2^{b-1}-1};\qquad "
             r"q \in [0, 2^b - 1],\ \Delta = \frac{\beta - \alpha}{2^b - 1}"),
        Step("Exact check of the running code on a rational $3\\times 4$ calibration tensor: "
             "symmetric ($b = 2, 3$) and asymmetric ($b = 1, 2, 3$) quantizers, per tensor and "
             "per channel (axis 0 and 1), from `quantization_params`; every entry's covered "
             "interval sampled in steps of $\\Delta/4$ (all ties and both ends included), "
             f"{points} points in all: the bound holds everywhere, is attained (at the ties: "
             "`error_bound` is no larger than needed), and the calibration values "
             "are covered. Half a step beyond the interval the error exceeds $\\Delta/2$. "
             "Asymmetric, $b = 2$, per column:", shown),
        Step("Ties go to the even integer (as `numpy.round`): $\\pm\\tfrac12 \\to 0$, "
             "$\\pm\\tfrac32, \\pm\\tfrac52 \\to \\pm 2$."),
    ])


def derive_linear_bound() -> Proof:
    xp = _xp()
    chk = _Checks()
    W = xp.asarray(_obj([[R(1, 3), -2, R(5, 2)], [R(-3, 4), 1, R(-7, 4)],
                         [R(9, 8), R(1, 5), -1], [R(3, 2), R(-1, 6), R(2, 3)]]))
    X = xp.asarray(_obj([[1, R(-1, 2), 2, R(1, 3)], [R(-3, 2), 1, 0, R(1, 4)]]))
    shown = ""
    for bits, sym, axis in itertools.product((2, 3), (True, False), (None, 1)):
        Wq, params = _qz.fake_quantize(xp, W, bits, symmetric=sym, axis=axis)
        err = _obj(np.abs(_obj(X @ W) - _obj(X @ Wq)))
        B = _obj(_qz.linear_output_error_bound(xp, X, params.scale, W.shape))
        chk.holds(bool(np.all(err <= B)), f"|XW - XQ(W)| <= B (b={bits}, {sym}, {axis})",
                  err - B)
        indep = _obj([[sum(abs(X[i, k]) * np.broadcast_to(_obj(params.scale), W.shape)[k, j]
                           for k in range(W.shape[0])) / 2 for j in range(W.shape[1])]
                      for i in range(X.shape[0])])
        chk.zero(B - indep, f"bound = (1/2) sum_k |X_ik| Delta_kj (b={bits})")
        if bits == 2 and sym and axis == 1:
            shown = sympy.latex(sympy.Matrix(B.tolist()))
    # attained: weights at ties (|E| = Delta/2) and X with the signs of E
    Wt = xp.asarray(_obj([[R(1, 2), R(3, 2)], [R(-3, 2), 2], [3, R(-1, 2)]]))
    params = _qz.quantization_params(xp, Wt, 3, axis=1)
    E = Wt - _qz.dequantize(xp, _qz.quantize(xp, Wt, params), params)
    Xs = _obj([[sympy.sign(E[k, 0]) * (k + 1) for k in range(3)]])
    err = _obj(Xs @ E)[0, 0]
    B = _obj(_qz.linear_output_error_bound(xp, Xs, params.scale, Wt.shape))[0, 0]
    chk.zero(abs(err) - B, "the bound is attained")
    # Widrow's model: E_kj independent, uniform on [-Delta/2, Delta/2]; the variance of one
    # error by integration, then of the sum (independent terms add their variances)
    e, D = sympy.symbols("e Delta", positive=True)
    var_u = sympy.integrate(e**2, (e, -D / 2, D / 2)) / D
    chk.zero(var_u - D**2 / 12, "Var U[-Delta/2, Delta/2] = Delta^2/12")
    for axis in (None, 1):
        params = _qz.quantization_params(xp, W, 3, axis=axis)
        steps = np.broadcast_to(_obj(params.scale), W.shape)
        rms = _obj(_qz.linear_output_error_rms(xp, X, params.scale, W.shape))
        model = _obj([[sum(X[i, k] ** 2 * var_u.subs(D, steps[k, j]) for k in range(W.shape[0]))
                       for j in range(W.shape[1])] for i in range(X.shape[0])])
        chk.zero(rms * rms - model, f"linear_output_error_rms^2 = sum_k X_ik^2 Var E_kj "
                 f"(axis={axis})")
    return chk.proof([
        Step("With $E = W - Q(W)$ and $|E_{kj}| \\le \\Delta_{kj}/2$ (identity "
             "`lowrank_quantizer_error_bound`; $\\Delta_{kj} = \\Delta$ per tensor, "
             "$\\Delta_j$ per output channel), the triangle inequality gives the bound.",
             r"|(XW - XQ(W))_{ij}| = \Bigl|\sum_k X_{ik}E_{kj}\Bigr| \le \frac12\sum_k "
             r"|X_{ik}|\,\Delta_{kj}"),
        Step("Exact check of `linear_output_error_bound` against $|XW - XQ(W)|$ computed from "
             "`fake_quantize` for a rational $X \\in \\mathbb Q^{2\\times 4}$, $W \\in "
             "\\mathbb Q^{4\\times 3}$, $b = 2, 3$, symmetric and asymmetric, per tensor and per "
             "output channel; the bound also equals the sum written out entry by entry. "
             "Symmetric, $b = 2$, per channel:", shown),
        Step("The bound is attained: weights at ties ($|E_{kj}| = \\Delta_j/2$) and a row of "
             "$X$ carrying the signs of $E_{:,j}$ make every term of the sum add up."),
        Step("The typical size (Widrow's model, not a bound): with the $E_{kj}$ independent "
             "and uniform on $[-\\Delta_{kj}/2, \\Delta_{kj}/2]$, `sympy.integrate` gives "
             "each the variance $\\Delta^2/12$, and the variances of the independent terms "
             "of $\\sum_k X_{ik}E_{kj}$ add: the square of the running "
             "`linear_output_error_rms` equals this sum exactly (3 bits, per tensor and per "
             "output channel).",
             r"\operatorname{Var}(XW - XQ(W))_{ij} = \sum_k X_{ik}^2\,\frac{\Delta_{kj}^2}{12}"),
    ])


# --------------------------------------------------------------------------- pruning


def derive_pruning() -> Proof:
    xp = _xp()
    chk = _Checks()
    W = xp.asarray(_obj([[R(1, 3), -2, R(1, 2), R(-3, 4)], [0, 1, R(-1, 2), R(9, 8)],
                         [R(-1, 5), R(3, 2), R(1, 6), -1]]))
    vals = list(W.ravel())
    for s in (Fraction(0), Fraction(1, 5), Fraction(1, 4), Fraction(3, 7), Fraction(2, 3),
              Fraction(1)):
        P, M = _pr.magnitude_prune(xp, W, s)
        n = _pr.pruned_count(W.size, s)
        chk.holds(n == math.floor(s * W.size), f"pruned_count = floor(sN), s={s}", n)
        chk.holds(int(np.sum(_obj(M) == 0)) == n, f"{n} entries pruned at s={s}")
        D = _obj(W - P)
        direct = sum(v * v for v in D.ravel())
        smallest = sum(sorted(v * v for v in vals)[:n])
        chk.zero(direct - smallest, f"||W - P(W)||_F^2 = smallest squares, s={s}")
        chk.zero(_obj(_pr.pruning_error(xp, W, M)) - direct, f"pruning_error, s={s}")
        best = min(sum(vals[i] ** 2 for i in c) for c in itertools.combinations(range(W.size), n))
        chk.zero(direct - best, f"optimal among masks with {n} zeros")
    # a float sparsity is its decimal: 0.29 of 100 is 29 (the binary 0.29 * 100 < 29)
    floats = [_pr.pruned_count(100, i / 100) for i in range(101)]
    chk.holds(floats == list(range(101)), "pruned_count(100, i/100) = i for every float i/100",
              floats)
    # the tie rule: among equal magnitudes the lower flat index is pruned first
    Wt = xp.asarray(_obj([[1, -1, R(1, 2)], [-1, 1, R(-1, 2)]]))
    for s_, want in ((Fraction(1, 6), [1, 1, 0, 1, 1, 1]), (Fraction(1, 2), [0, 1, 0, 1, 1, 0]),
                     (Fraction(2, 3), [0, 0, 0, 1, 1, 0])):
        _, Mt = _pr.magnitude_prune(xp, Wt, s_)
        chk.holds(list(_obj(Mt).ravel()) == want, f"ties: lower index pruned first, s={s_}",
                  _obj(Mt))
    _, Mt = _pr.nm_prune(xp, xp.asarray(_obj([[2], [-2], [2], [1]])), 2, 4, axis=0)
    chk.holds(list(_obj(Mt).ravel()) == [0, 1, 1, 0], "N:M ties: lower index pruned first",
              _obj(Mt))
    # N:M along the input axis
    Wn = _obj(np.array(vals * 2, dtype=object).reshape(8, 3))
    P, M = _pr.nm_prune(xp, Wn, 2, 4, axis=0)
    chk.holds(all(int(np.sum(_obj(M)[g:g + 4, j] == 0)) == 2 for g in (0, 4) for j in range(3)),
              "2 zeros in every group of 4")
    direct = sum(v * v for v in _obj(Wn - P).ravel())
    best = sum(sum(sorted(v * v for v in Wn[g:g + 4, j])[:2]) for g in (0, 4) for j in range(3))
    chk.zero(direct - best, "N:M error = the two smallest squares of every group")
    return chk.proof([
        Step("`magnitude_prune` zeroes the $\\lfloor sN\\rfloor$ entries of smallest $|w|$ "
             "(ties: lower index first), so $W - P(W) = (1 - M)\\odot W$ and",
             r"\|W - P(W)\|_F^2 = \sum_{M_{ij} = 0} w_{ij}^2 = \min_{\#\{M = 0\} = "
             r"\lfloor sN\rfloor}\ \sum_{M_{ij} = 0} w_{ij}^2"),
        Step("Exact check on a rational $3\\times 4$ $W$ with ties in $|w|$ (an exact zero and "
             "$\\pm\\tfrac12$), $s \\in \\{0, \\tfrac15, \\tfrac14, \\tfrac37, \\tfrac23, 1\\}$: "
             "`pruned_count` is $\\lfloor sN\\rfloor$ (2 and 5 where $sN$ is not an integer), "
             "a float $s$ counts as the decimal it prints as ($0.29$ of 100 prunes 29; "
             "$\\lfloor 0.29 \\cdot 100\\rfloor$ in binary is 28), the count of "
             "zeros is $\\lfloor sN\\rfloor$, $\\|W - P(W)\\|_F^2$ equals the sum of the "
             "$\\lfloor sN\\rfloor$ smallest squares, `pruning_error` agrees, and it is the "
             "minimum over all $\\binom{12}{\\lfloor sN\\rfloor}$ masks (magnitude pruning is "
             "the best $s$-sparse approximation in the Frobenius norm). 2:4 pruning "
             "(`nm_prune`) of an $8\\times 3$ weight along its input axis: two zeros per group, "
             "error the two smallest squares of each group."),
        Step("The tie rule, on $W = \\begin{pmatrix}1 & -1 & \\tfrac12\\\\ -1 & 1 & "
             "-\\tfrac12\\end{pmatrix}$: at $s = \\tfrac16, \\tfrac12, \\tfrac23$ the masks "
             "are exactly those that prune equal magnitudes in increasing flat index (row-major), "
             "and 2:4 pruning of $(2, -2, 2, 1)$ prunes the 1 and the first 2."),
    ])

