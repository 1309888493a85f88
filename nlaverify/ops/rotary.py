"""Rotary position embedding, RoPE (Baggag & Saad §3.6.2; Su et al., RoFormer).

Pairs of coordinates of the query/key of the token at position :math:`t` are rotated by
the angle :math:`t\\,\\theta_i`, :math:`\\theta_i = b^{-2i/d_h}` (the base :math:`b`: 10000
in RoFormer, 500000 in Llama-3). Two pairings are in use, a permutation of the head's
coordinates apart, and both are options (``layout``): ``"interleaved"`` pairs
:math:`(x_{2i}, x_{2i+1})` (RoFormer, the graph's convention); ``"half"`` pairs
:math:`(x_i, x_{i+d_h/2})` (GPT-NeoX, Hugging Face Llama's ``rotate_half``; for the graph,
:mod:`nlaverify.interop.weights` permutes the query and key projections instead). Optionally
rescaled for long contexts (:class:`~nlaverify.config.RopeScaling`, Llama-3.1), and optionally
*partial* (``rotary_dim`` :math:`r < d_h`: only the first :math:`r` coordinates are rotated, at
frequencies :math:`b^{-2i/r}`, the other :math:`d_h - r` pass unchanged; GPT-NeoX/Pythia's
``rotary_pct``, GPT-J's ``rotary_dim``, Phi's ``partial_rotary_factor``): the rotation is then
:math:`R_t \\oplus I`, so the tables are padded with :math:`C = 1`, :math:`S = 0` and the skew
map with 0, and every formula below holds unchanged. Since
rotations compose, :math:`\\langle R_s q, R_t k\\rangle = \\langle q, R_{t-s} k\\rangle`:
scores depend on relative positions only (identity ``rope_relative_position``).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._tangent import jvp_rule
from nlaverify.ops._validate import check_args

if TYPE_CHECKING:
    from nlaverify.config import RopeScaling


def _exact(xp: Namespace, v: float) -> Any:
    """The float ``v`` as the exact rational it is, on ``xp``."""
    f = Fraction(v)
    return xp.rational(f.numerator, f.denominator)


def _scaling_terms(xp: Namespace, d: int, base: int, scaling: RopeScaling
                   ) -> tuple[list[Any], list[Any]]:
    r"""Per frequency :math:`i`, exact :math:`(a_i, b_i)` with scaled
    :math:`\theta_i' = \theta_i (a_i + b_i \mu_i)` (:func:`rope_frequencies`). The band of
    each frequency (kept, divided by the factor, or blended) is a discrete decision, taken
    on the float64 wavelength as the reference implementation takes it."""
    s = _exact(xp, scaling.factor)
    if scaling.kind == "linear":
        return [1 / s] * (d // 2), [xp.rational(0)] * (d // 2)
    L = scaling.original_context
    short, long_ = L / scaling.high_freq_factor, L / scaling.low_freq_factor
    a, b = [], []
    for i in range(d // 2):
        wavelength = 2 * math.pi * base ** (2 * i / d)
        if wavelength < short:        # high frequency: kept
            a.append(xp.rational(1)), b.append(xp.rational(0))
        elif wavelength > long_:      # low frequency: interpolated by the factor
            a.append(1 / s), b.append(xp.rational(0))
        else:                         # blended: (1 - mu)/s + mu
            a.append(1 / s), b.append(1 - 1 / s)
    return a, b


def yarn_ramp(d: int, base: int, scaling: RopeScaling) -> list[Fraction]:
    r"""YaRN's ramp :math:`\gamma_i \in [0, 1]` over the ``d/2`` frequencies (Peng et al.
    2023, YaRN §3.2, "NTK-by-parts", as DeepSeek's released code and Hugging Face
    ``_compute_yarn_parameters`` take it): the dimension :math:`i^*(\beta) = d\,\ln(L /
    2\pi\beta) / (2\ln b)` where frequency :math:`\theta_i` turns :math:`\beta` times over
    the original context :math:`L`, bounds :math:`\ell = \max(0, \lfloor i^*(\beta_{fast})
    \rfloor)`, :math:`h = \min(d - 1, \lceil i^*(\beta_{slow})\rceil)` (:math:`h + 10^{-3}`
    when equal), :math:`\gamma_i = \operatorname{clip}((i - \ell)/(h - \ell), 0, 1)`, exact
    rationals (the bounds are decided on float64 logarithms, as the reference does)."""
    L = scaling.original_context

    def dim(rotations: float) -> float:
        return d * math.log(L / (rotations * 2 * math.pi)) / (2 * math.log(base))

    lo = max(math.floor(dim(scaling.beta_fast)), 0)
    hi = Fraction(min(math.ceil(dim(scaling.beta_slow)), d - 1))
    if hi == lo:
        hi += Fraction(1, 1000)  # the reference's guard against a zero-width ramp
    return [min(max((i - lo) / (hi - lo), Fraction(0)), Fraction(1)) for i in range(d // 2)]


def rope_frequencies(xp: Namespace, d: int, base: int = 10000,
                     scaling: RopeScaling | None = None) -> Any:
    r"""The ``d/2`` rotation frequencies :math:`\theta_i = b^{-2i/d}`, rescaled by
    ``scaling`` (:class:`~nlaverify.config.RopeScaling`): ``"linear"``
    :math:`\theta_i/s`; ``"llama3"`` :math:`\theta_i` where the wavelength
    :math:`2\pi/\theta_i < L/h`, :math:`\theta_i/s` where it exceeds :math:`L/\ell`, else
    :math:`(1-\mu_i)\theta_i/s + \mu_i\theta_i` with :math:`\mu_i = (L\theta_i/2\pi -
    \ell)/(h - \ell)` (:math:`L` the original context, :math:`\ell, h` the low and high
    frequency factors; Dubey et al. 2024, the released Llama-3.1 code); ``"yarn"``
    :math:`\theta_i(1 - \gamma_i + \gamma_i/s)` with :func:`yarn_ramp`'s :math:`\gamma_i`
    (Peng et al. 2023; DeepSeek-V2/V3). Exact on SymPy."""
    exponents = xp.asarray([xp.rational(2 * i, d) for i in range(d // 2)])
    theta = xp.exp(-exponents * xp.log(xp.asarray([xp.rational(base)])))
    if scaling is None:
        return theta
    if scaling.kind == "yarn":  # theta_i ((1 - gamma_i) + gamma_i / s)
        s = _exact(xp, scaling.factor)
        return theta * xp.asarray([1 - xp.rational(g.numerator, g.denominator) * (1 - 1 / s)
                                   for g in yarn_ramp(d, base, scaling)])
    a, b = _scaling_terms(xp, d, base, scaling)
    lo, hi = _exact(xp, scaling.low_freq_factor), _exact(xp, scaling.high_freq_factor)
    mu = (xp.rational(scaling.original_context) * theta / (2 * xp.pi) - lo) / (hi - lo)
    return theta * (xp.asarray(a) + xp.asarray(b) * mu)


#: the pairings of RoPE's coordinates (module docstring)
LAYOUTS = ("interleaved", "half")


def _check_layout(op: str, layout: str) -> None:
    if layout not in LAYOUTS:
        from nlaverify.errors import ArgumentError

        raise ArgumentError(f"{op}: argument 'layout': expected one of {', '.join(LAYOUTS)} "
                            f"('interleaved': pairs (2i, 2i+1), RoFormer; 'half': pairs "
                            f"(i, i + d_h/2), GPT-NeoX and Hugging Face Llama), got {layout!r}")


def rope_tables(xp: Namespace, n: int, d: int, base: int = 10000,
                scaling: RopeScaling | None = None, layout: str = "interleaved",
                rotary_dim: int | None = None) -> tuple[Any, Any]:
    r"""``(C, S)``, each ``(n, d)``: :math:`C_{t,k} = \cos(t\theta_{i(k)})` and likewise
    :math:`S` with :math:`\sin`, :math:`\theta_i` from :func:`rope_frequencies` (of
    :math:`r` = ``rotary_dim``, default :math:`d`), where coordinate :math:`k < r` belongs to
    pair :math:`i(k) = \lfloor k/2 \rfloor` (``"interleaved"``) or :math:`k \bmod r/2`
    (``"half"``); :math:`C = 1`, :math:`S = 0` on the :math:`d - r` coordinates that are not
    rotated. Exact on SymPy."""
    _check_layout("rope_tables", layout)
    r = d if rotary_dim is None else rotary_dim
    theta = rope_frequencies(xp, r, base, scaling)
    if layout == "interleaved":
        theta = xp.reshape(xp.stack([theta, theta], axis=-1), (r,))  # theta_{k // 2}
    else:
        theta = xp.concat([theta, theta], axis=0)  # theta_{k mod r/2}
    angle = xp.asarray([[xp.rational(t)] for t in range(n)]) * theta
    C, S = xp.cos(angle), xp.sin(angle)
    if r == d:
        return C, S
    one = xp.asarray([[xp.rational(1)] * (d - r) for _ in range(n)])
    return xp.concat([C, one], axis=-1), xp.concat([S, 0 * one], axis=-1)


def rotate_half(xp: Namespace, x: Any, layout: str = "interleaved",
                rotary_dim: int | None = None) -> Any:
    r"""The skew map :math:`R` of the pairing: ``"interleaved"`` :math:`(x_{2i}, x_{2i+1})
    \mapsto (-x_{2i+1}, x_{2i})`; ``"half"`` :math:`(x_i, x_{i+d/2}) \mapsto (-x_{i+d/2},
    x_i)`, i.e. :math:`[x_1, x_2] \mapsto [-x_2, x_1]` on the two halves (Hugging Face's
    ``rotate_half``). With ``rotary_dim`` :math:`r` below the last axis, :math:`R \oplus 0`:
    the map on the first :math:`r` coordinates, zero on the others. Either way
    :math:`R^\top = -R`."""
    shape = tuple(x.shape)
    if rotary_dim is not None and rotary_dim < shape[-1]:
        return xp.concat([rotate_half(xp, x[..., :rotary_dim], layout),
                          0 * x[..., rotary_dim:]], axis=-1)
    if layout == "half":
        h = shape[-1] // 2
        return xp.concat([-x[..., h:], x[..., :h]], axis=-1)
    pairs = xp.reshape(x, (*shape[:-1], shape[-1] // 2, 2))
    return xp.reshape(xp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1), shape)


def _check(op: str, xp: Namespace, specs: dict, rotary_dim: int | None = None
           ) -> dict[str, int]:
    dims = check_args(op, xp, specs)
    if dims["d_h"] % 2:
        from nlaverify.errors import ShapeError

        raise ShapeError(f"{op}: argument 'X': expected an even head dimension, got {dims['d_h']}")
    r = rotary_dim
    if r is not None and (isinstance(r, bool) or not isinstance(r, int) or r < 2 or r % 2
                          or r > dims["d_h"]):
        from nlaverify.errors import ArgumentError

        raise ArgumentError(f"{op}: argument 'rotary_dim': expected None or an even integer in "
                            f"[2, d_h={dims['d_h']}] (the rotated coordinates), got {r!r}")
    return dims


def rope(xp: Namespace, X: Any, base: int = 10000, scaling: RopeScaling | None = None,
         layout: str = "interleaved", rotary_dim: int | None = None) -> Any:
    r"""RoPE of ``X`` ``(*, n, d_h)``: :math:`X \odot C + R(X) \odot S` (frequencies of base
    ``base``, rescaled by ``scaling``, :func:`rope_frequencies`; coordinates paired by
    ``layout``, :func:`rotate_half`; only the first ``rotary_dim`` coordinates rotated, the
    rest passed through, when it is given)."""
    dims = _check("rope", xp, {"X": (X, ("*", "n", "d_h"))}, rotary_dim)
    _check_layout("rope", layout)
    return _rotate(xp, X, dims, base, scaling, layout, rotary_dim)


def _partial(rotary_dim: int | None) -> dict[str, int]:
    """``rotary_dim`` as a keyword for the tables and the skew map, none for the whole head
    (so that a whole-head call passes exactly what it always did)."""
    return {} if rotary_dim is None else {"rotary_dim": rotary_dim}


def _rotate(xp: Namespace, X: Any, dims: dict[str, int], base: int,
            scaling: RopeScaling | None, layout: str = "interleaved",
            rotary_dim: int | None = None) -> Any:
    r""":math:`X \odot C + R(X) \odot S`, the tables in ``X``'s dtype."""
    part = _partial(rotary_dim)
    C, S = rope_tables(xp, dims["n"], dims["d_h"], base, scaling, layout, **part)
    if not xp.object_arrays:
        C, S = xp.astype(C, X.dtype), xp.astype(S, X.dtype)
    return X * C + rotate_half(xp, X, layout, **part) * S


def rope_vjp(xp: Namespace, G: Any, X: Any, base: int = 10000,
             scaling: RopeScaling | None = None, layout: str = "interleaved",
             rotary_dim: int | None = None) -> tuple[Any]:
    r"""VJP of :func:`rope`: the transpose rotation,
    :math:`\bar X = G \odot C + R^\top(G \odot S) = G\odot C - R(G \odot S)` (either
    layout, partial or not: :math:`(R \oplus 0)^\top = -(R \oplus 0)`)."""
    dims = _check("rope_vjp", xp, {"X": (X, ("*", "n", "d_h")), "G": (G, ("*", "n", "d_h"))},
                  rotary_dim)
    _check_layout("rope_vjp", layout)
    part = _partial(rotary_dim)
    C, S = rope_tables(xp, dims["n"], dims["d_h"], base, scaling, layout, **part)
    if not xp.object_arrays:
        C, S = xp.astype(C, G.dtype), xp.astype(S, G.dtype)
    return (G * C - rotate_half(xp, G * S, layout, **part),)


@jvp_rule("dX",)
def rope_jvp(xp: Namespace, T: tuple[Any], X: Any, base: int = 10000,
             scaling: RopeScaling | None = None, layout: str = "interleaved",
             rotary_dim: int | None = None) -> Any:
    r"""JVP of :func:`rope` (Baggag & Saad §3.6.2): RoPE is linear in :math:`X`, so the
    tangent is rotated alike, :math:`\dot Y = \dot X \odot C + R(\dot X) \odot S`."""
    dims = _check("rope_jvp", xp, {"X": (X, ("*", "n", "d_h")),
                                   "dX": (T[0], ("*", "n", "d_h"))}, rotary_dim)
    _check_layout("rope_jvp", layout)
    return _rotate(xp, T[0], dims, base, scaling, layout, rotary_dim)
