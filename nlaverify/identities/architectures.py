r"""The family ``architectures``: the new mathematics of the model types beyond the seed's
decoder (issue 23), proved on the running functions. Multi-head latent attention (DeepSeek-V2,
§2.1): absorbing :math:`W^{UK}` into the query and :math:`W^{UV}` into the output leaves the
attention unchanged (:func:`nlaverify.ops.mla.mla_attention` against
:func:`~nlaverify.ops.mla.mla_attention_absorbed`, with the decoupled RoPE key, causal and
not). Partial rotary embeddings (GPT-NeoX's ``rotary_pct``, GPT-J's ``rotary_dim``): scores
still depend on relative positions only, in either pairing; and the half pairing is the
interleaved one conjugated by the permutation of the rotated coordinates
(:func:`nlaverify.interop.weights_layout.rope_permutation`, identity on the others), which
is what lets a checkpoint of one pairing run in the other.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends import get_namespace
from nlaverify.identities._expectations import _Checks
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.identities.online_softmax import _ratio_equal
from nlaverify.ops import mla as _mla
from nlaverify.ops import rotary as _rotary
from nlaverify.symbolic.exact import symbol_array

SEED_MLA = "DeepSeek-AI 2024 (DeepSeek-V2, §2.1.2-2.1.3); Baggag & Saad §3.4.2"
SEED_PARTIAL = ("Baggag & Saad §3.6.2; Black et al. 2022 (GPT-NeoX, rotary_pct); Wang & "
                "Komatsuzaki 2021 (GPT-J, rotary_dim)")
#: the head of the partial-rotary proofs: d_h = 6, the first r = 4 coordinates rotated
_DH, _R = 6, 4


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


def derive_rope_partial_relative() -> Proof:
    import itertools

    import numpy as np
    import sympy

    from nlaverify.symbolic.exact import is_zero
    from nlaverify.symbolic.normal_form import rational_zero

    xp = get_namespace("sympy")
    n = 3
    chk = _Checks()
    q, k = symbol_array("q", (_DH,)), symbol_array("k", (_DH,))
    for layout in _rotary.LAYOUTS:
        Q = np.asarray(_rotary.rope(xp, np.stack([q] * n)[None], layout=layout,
                                    rotary_dim=_R), dtype=object)[0]
        K = np.asarray(_rotary.rope(xp, np.stack([k] * n)[None], layout=layout,
                                    rotary_dim=_R), dtype=object)[0]
        chk.zero(Q[:, _R:] - np.stack([q[_R:]] * n), f"{layout}: passed coordinates")
        S = Q @ K.T
        for s, t in itertools.product(range(n - 1), repeat=2):
            diff = sympy.expand_trig(S[s, t] - S[s + 1, t + 1])
            chk.holds(rational_zero(diff, trig=True) or is_zero(diff),
                      f"{layout}: S[{s},{t}] - S[{s + 1},{t + 1}]", diff)
    steps = [
        Step(f"Apply the running `rope` with `rotary_dim` = {_R} of $d_h = {_DH}$, in both "
             f"pairings, to {n} positions carrying the same symbolic query $q$ and key $k$."),
        Step(f"The last {_DH - _R} coordinates leave unchanged, and every score "
             r"$S_{st} = \langle R_s q, R_t k\rangle$ equals $S_{s+1,t+1}$ exactly (rational "
             r"normal form with $\sin^2 + \cos^2 = 1$): the passed coordinates add the "
             r"position-free $\langle q_p, k_p\rangle$.",
             r"\langle (R_s\oplus I) q, (R_t\oplus I) k\rangle = q_r^\top R_{t-s} k_r + "
             r"q_p^\top k_p"),
    ]
    return chk.proof(steps)


def derive_rope_pairing_permutation() -> Proof:
    import numpy as np

    from nlaverify.interop.weights_layout import rope_permutation

    xp = get_namespace("sympy")
    chk = _Checks()
    X = symbol_array("x", (1, 3, _DH))
    perm = np.concatenate([rope_permutation(_R), np.arange(_R, _DH)])
    for r in (_R, _DH):
        p = perm if r == _R else rope_permutation(_DH)
        half = np.asarray(_rotary.rope(xp, X, layout="half", rotary_dim=r), dtype=object)
        inter = np.asarray(_rotary.rope(xp, np.asarray(X, dtype=object)[..., p],
                                        layout="interleaved", rotary_dim=r), dtype=object)
        chk.zero(half[..., p] - inter, f"rotary_dim={r}")
    steps = [
        Step(f"Symbolic $X$ (3 positions, $d_h = {_DH}$); $P$ the permutation "
             r"$[0, r/2, 1, r/2+1, \ldots]$ of the first $r$ coordinates (the interop's "
             r"`rope_permutation`), the identity on the rest; $r = 4$ and $r = d_h$."),
        Step("Rotate in the half pairing and permute, or permute and rotate in the "
             "interleaved pairing: every entry agrees exactly.",
             r"\operatorname{rope}_{half}(X)\,P = \operatorname{rope}_{interleaved}(X P)"),
    ]
    return chk.proof(steps)


register(Identity(
    "rope_partial_relative_position", "architectures",
    "Partial RoPE scores depend on relative position only, in either pairing",
    r"\langle (R_s\oplus I) q, (R_t\oplus I) k\rangle = q_r^\top R_{t-s} k_r + q_p^\top k_p",
    SEED_PARTIAL, (qualname(_rotary.rope),), guard(derive_rope_partial_relative)))
register(Identity(
    "rope_pairing_permutation", "architectures",
    "The half RoPE pairing is the interleaved one conjugated by a permutation",
    r"\operatorname{rope}_{half}(X)\,P = \operatorname{rope}_{interleaved}(X P)",
    SEED_PARTIAL, (qualname(_rotary.rope),), guard(derive_rope_pairing_permutation)))
