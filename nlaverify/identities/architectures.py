r"""The family ``architectures``: the new mathematics of the model types beyond the seed's
decoder (issue 23), proved on the running functions. Multi-head latent attention (DeepSeek-V2,
§2.1): absorbing :math:`W^{UK}` into the query and :math:`W^{UV}` into the output leaves the
attention unchanged (:func:`nlaverify.ops.mla.mla_attention` against
:func:`~nlaverify.ops.mla.mla_attention_absorbed`, with the decoupled RoPE key, causal and
not).
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends import get_namespace
from nlaverify.identities._expectations import _Checks
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.identities.online_softmax import _ratio_equal
from nlaverify.ops import mla as _mla
from nlaverify.symbolic.exact import symbol_array

SEED_MLA = "DeepSeek-AI 2024 (DeepSeek-V2, §2.1.2-2.1.3); Baggag & Saad §3.4.2"


def _mla_args() -> list[Any]:
    """Independent real symbols: n = 2 tokens, d = 2, latent r = 2, h = 2 heads with
    d_c = 1, d_r = 2 (one RoPE pair), d_v = 1."""
    return [symbol_array("x", (2, 2)), symbol_array("c", (2, 2)), symbol_array("u", (2, 2, 1)),
            symbol_array("v", (2, 2, 1)), symbol_array("q", (2, 2, 1)),
            symbol_array("p", (2, 2, 2)), symbol_array("k", (2, 2)),
            symbol_array("o", (2, 1, 2))]


def derive_mla_absorption() -> Proof:
    xp = get_namespace("sympy")
    chk = _Checks()
    for causal in (False, True):
        xp.reset_shifts()
        args = _mla_args()
        ref = _mla.mla_attention(xp, *args, causal=causal)
        xp.reset_shifts()
        got = _mla.mla_attention_absorbed(xp, *args, causal=causal)
        _ratio_equal(chk, got, ref, f"causal={causal}")
        if chk.bad:
            return Proof("failed", (Step(f"causal={causal}"),), chk.bad)
    steps = [
        Step(r"Independent real symbols for $X$ ($2\times2$), $W^{DKV}$ ($2\times2$: a "
             r"latent of rank $r = 2$), and, for $h = 2$ heads, $W^{UK}_h$, $W^{UV}_h$ "
             r"($2\times1$), $W^Q_h$ ($2\times1$), $W^{QR}_h$ ($2\times2$: one RoPE pair), "
             r"the shared $W^{KR}$ ($2\times2$) and $W^O_h$ ($1\times2$)."),
        Step(r"Run the training form `mla_attention` (keys $[C W^{UK}_h, K^R]$ and values "
             r"$C W^{UV}_h$ materialised per head) and the inference form "
             r"`mla_attention_absorbed` (queries $Q^C_h {W^{UK}_h}^\top$ over the latent "
             r"$C = X W^{DKV}$, output map $W^{UV}_h W^O_h$) on the exact namespace, "
             r"without a mask and causal.",
             r"Q^C_h (C W^{UK}_h)^\top = (Q^C_h {W^{UK}_h}^\top) C^\top,\qquad "
             r"\operatorname{softmax}(S_h)(C W^{UV}_h) W^O_h = \operatorname{softmax}(S_h)\,C"
             r"\,(W^{UV}_h W^O_h)"),
        Step(r"Every entry of the two outputs is equal: the numerator of their difference over "
             r"a common positive denominator is 0 (the scores of the two forms are the same "
             r"polynomials, the RoPE term $Q^R_h {K^R}^\top$ being computed alike; a rotation "
             r"between $W^{UK}$ and the query could not be absorbed, which is why the RoPE "
             r"key is decoupled)."),
    ]
    return chk.proof(steps)


register(Identity(
    "mla_absorption", "architectures",
    "Multi-head latent attention: W^UK absorbed into the query, W^UV into the output",
    r"\operatorname{softmax}\Bigl(\tfrac{[Q^C_h, Q^R_h][C W^{UK}_h, K^R]^\top}{\sqrt{d_c+d_r}}"
    r"\Bigr) C W^{UV}_h W^O_h = \operatorname{softmax}\Bigl(\tfrac{[Q^C_h {W^{UK}_h}^\top, "
    r"Q^R_h][C, K^R]^\top}{\sqrt{d_c+d_r}}\Bigr) C\,(W^{UV}_h W^O_h)",
    SEED_MLA, (qualname(_mla.mla_attention), qualname(_mla.mla_attention_absorbed)),
    guard(derive_mla_absorption), tags=("closed-form",)))
