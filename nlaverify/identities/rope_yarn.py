r"""The family ``architectures``, continued: YaRN's RoPE frequencies (Peng et al. 2023, YaRN
§3.2 "NTK-by-parts"; DeepSeek-V2/V3's ``rope_scaling``, Hugging Face
``_compute_yarn_parameters``) as :func:`nlaverify.ops.rotary.rope_frequencies` computes them.

Frequency :math:`\theta_i = b^{-2i/d}` turns :math:`r_i = L\theta_i/2\pi` times over the
original context :math:`L`. YaRN keeps the frequencies that turn often, divides by the factor
:math:`s` those that turn rarely, and blends linearly in the index between; the reference
code finds the ends through the dimension :math:`i^*(\beta) = d\ln(L/2\pi\beta)/(2\ln b)`
where :math:`r = \beta`, rounded outwards (:math:`\ell = \lfloor i^*(\beta_{fast})\rfloor`,
:math:`h = \lceil i^*(\beta_{slow})\rceil`). Identity ``rope_yarn_bands`` proves that
:math:`i^*` inverts the rotation count symbolically, then checks the running frequencies of
DeepSeek-V3's release (:math:`d = 64`, :math:`b = 10^4`, :math:`s = 40`, :math:`L = 4096`,
:math:`\beta = 32, 1`) entry by entry: kept (ratio 1) where :math:`i \le \ell`, every such
frequency turning more than :math:`\beta_{fast}` times; divided by :math:`s` where :math:`i
\ge h`, turning fewer than :math:`\beta_{slow}` times; :math:`1 - (1 - 1/s)(i - \ell)/(h -
\ell)` between.
"""

from __future__ import annotations

from nlaverify.backends import get_namespace
from nlaverify.config_options import RopeScaling
from nlaverify.identities._expectations import _Checks
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.ops import rotary as _rotary

__all__ = ["DEEPSEEK_V3_YARN", "derive_rope_yarn"]

SEED_YARN = ("Peng et al. 2023 (YaRN §3.2, NTK-by-parts); DeepSeek-AI 2024 (DeepSeek-V3's "
             "rope_scaling); Baggag & Saad §3.6.2")
#: DeepSeek-V3's released scaling: (d = qk_rope_head_dim, base, RopeScaling)
DEEPSEEK_V3_YARN = (64, 10000, RopeScaling("yarn", 40.0, original_context=4096, beta_fast=32.0,
                                           beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0))


def derive_rope_yarn() -> Proof:
    import sympy

    chk = _Checks()
    d, L, beta, b, i = sympy.symbols("d L beta b i", positive=True)
    r = L * b ** (-2 * i / d) / (2 * sympy.pi)
    star = d * sympy.log(L / (2 * sympy.pi * beta)) / (2 * sympy.log(b))
    chk.zero(sympy.simplify(sympy.expand_log(r.subs(i, star), force=True) - beta),
             "r(i*(beta)) - beta")
    xp = get_namespace("sympy")
    dim, base, sc = DEEPSEEK_V3_YARN
    theta = _rotary.rope_frequencies(xp, dim, base)
    scaled = _rotary.rope_frequencies(xp, dim, base, sc)
    s = sympy.Rational(40)
    at = {k: sympy.N(star.subs({d: dim, L: sc.original_context, b: base, beta: v}), 30)
          for k, v in (("fast", sc.beta_fast), ("slow", sc.beta_slow))}
    lo, hi = int(sympy.floor(at["fast"])), int(sympy.ceiling(at["slow"]))
    chk.holds(0 < lo < hi < dim // 2, "the ramp lies inside the frequencies", (lo, hi))
    for k in range(dim // 2):
        ratio = sympy.nsimplify(sympy.simplify(scaled[k] / theta[k]))
        turns = sympy.N(r.subs({d: dim, L: sc.original_context, b: base, i: k}), 30)
        if k <= lo:
            want = sympy.Integer(1)
            chk.holds(bool(turns > sc.beta_fast), f"theta_{k} kept turns > beta_fast", turns)
        elif k >= hi:
            want = 1 / s
            chk.holds(bool(turns < sc.beta_slow), f"theta_{k} / s turns < beta_slow", turns)
        else:
            want = 1 - (1 - 1 / s) * sympy.Rational(k - lo, hi - lo)
        chk.zero(ratio - want, f"theta'_{k} / theta_{k}")
    steps = [
        Step(r"Symbolically (positive $d, L, \beta, b$): the correction dimension inverts the "
             r"rotation count of $\theta_i = b^{-2i/d}$ over $L$ positions.",
             r"r(i) = \frac{L\,b^{-2i/d}}{2\pi},\qquad r\bigl(i^*(\beta)\bigr) = \beta,\quad "
             r"i^*(\beta) = \frac{d\ln(L/2\pi\beta)}{2\ln b}"),
        Step(rf"DeepSeek-V3's release ($d = {dim}$, $b = {base}$, $s = 40$, $L = 4096$, "
             rf"$\beta_{{fast}} = 32$, $\beta_{{slow}} = 1$): $\ell = \lfloor i^*(32)\rfloor = "
             rf"{lo}$, $h = \lceil i^*(1)\rceil = {hi}$ (30-digit evaluation)."),
        Step(r"Run `rope_frequencies` with and without the scaling on the exact namespace: "
             r"each ratio $\theta'_i/\theta_i$ is exactly 1 for $i \le \ell$ (those frequencies "
             r"turn more than $\beta_{fast}$ times), $1/s$ for $i \ge h$ (fewer than "
             r"$\beta_{slow}$), and linear in $i$ between.",
             r"\frac{\theta'_i}{\theta_i} = 1 - \Bigl(1 - \frac1s\Bigr)\operatorname{clip}"
             r"\Bigl(\frac{i - \ell}{h - \ell}, 0, 1\Bigr)"),
    ]
    return chk.proof(steps)


register(Identity(
    "rope_yarn_bands", "architectures",
    "YaRN's RoPE frequencies: kept, interpolated by the factor, and blended by rotation count",
    r"\theta'_i = \theta_i\Bigl(1 - \bigl(1 - \tfrac1s\bigr)\operatorname{clip}\bigl(\tfrac{i - "
    r"\lfloor i^*(\beta_f)\rfloor}{\lceil i^*(\beta_s)\rceil - \lfloor i^*(\beta_f)\rfloor}, "
    r"0, 1\bigr)\Bigr),\quad \frac{L\theta_{i^*(\beta)}}{2\pi} = \beta",
    SEED_YARN, (qualname(_rotary.rope_frequencies), qualname(_rotary.yarn_ramp)),
    guard(derive_rope_yarn), tags=("closed-form",)))
