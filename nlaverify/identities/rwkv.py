r"""The ``ssm`` family, part 4: RWKV-4's block (Peng et al. 2023; Baptista, Stuart & Tran
§5.3.4), proved on the running functions of :mod:`nlaverify.ops.rwkv` and
:mod:`nlaverify.ops.rwkv_block`, called with SymPy symbols.

* ``ssm_rwkv_<op>_vjp`` / ``_jvp`` (``<op>``: ``wkv``, ``token_shift``, ``token_mix``,
  ``time_mix``, ``channel_mix``) for every record of
  :data:`~nlaverify.ops.rwkv_specs.RWKV_OPS` (the WKV, the token shift, its interpolation,
  time and channel mixing): the generic proofs of the ``jacobians`` family
  (:func:`~nlaverify.symbolic.vjp_proof.prove_vjp`, :func:`~nlaverify.symbolic.vjp_proof
  .prove_jvp`: ``sympy.diff`` of the running forward against the running VJP/JVP, entry by
  entry). The WKV's running maxima (the forward's and the adjoint's) are opaque real
  symbols, so the derivatives hold for every choice of shifts, the maximum included.
* ``ssm_rwkv_time_mix_recurrent``: time mixing over a sequence (the token shift, the WKV
  scan) equals its recurrent form, one token at a time with the state :math:`(x_{t-1}, a, b,
  p)` carried (:func:`~nlaverify.ops.rwkv_block.time_mix_step`): the basis of RWKV's
  recurrent decoding; ``ssm_rwkv_channel_mix_recurrent`` the same for channel mixing (its
  state the previous token only).
"""

from __future__ import annotations

from collections.abc import Callable

import sympy

from nlaverify.backends import get_namespace
from nlaverify.identities._expectations import _Checks, _obj
from nlaverify.identities.core import Proof, Step, register
from nlaverify.identities.ssm import ssm_identity
from nlaverify.ops import rwkv_block as _rb
from nlaverify.ops.rwkv_specs import RWKV_OPS
from nlaverify.symbolic.exact import symbol_array
from nlaverify.symbolic.vjp_proof import prove_jvp, prove_vjp

__all__ = ["derive_channel_mix_recurrent", "derive_time_mix_recurrent"]

_TITLES = {"wkv": "RWKV-4's stable WKV (the backward adjoint sums)",
           "rwkv_token_shift": "RWKV's token shift",
           "rwkv_token_mix": "RWKV's token-shift interpolation mix(x, mu)",
           "rwkv_time_mix": "RWKV-4's time mixing",
           "rwkv_channel_mix": "RWKV-4's channel mixing"}


def _prover(prove: Callable[..., Proof], name: str) -> Callable[[], Proof]:
    def derive() -> Proof:
        return prove(RWKV_OPS[name])

    derive.__name__ = f"derive_{name}_{'vjp' if prove is prove_vjp else 'jvp'}"
    return derive


for _name, _spec in RWKV_OPS.items():
    _id = "ssm_rwkv_" + _name.removeprefix("rwkv_")
    register(ssm_identity(f"{_id}_vjp", f"VJP of {_TITLES[_name]}",
                          _spec.vjp_statement, (_spec.forward, _spec.vjp),
                          _prover(prove_vjp, _name), ("rwkv", "vjp")))
    register(ssm_identity(f"{_id}_jvp", f"JVP of {_TITLES[_name]}",
                          r"\dot f = \textstyle\sum_a \frac{\partial f}{\partial a}\,\dot a",
                          (_spec.forward, _spec.jvp), _prover(prove_jvp, _name),
                          ("rwkv", "jvp")))


def derive_time_mix_recurrent() -> Proof:
    xp = get_namespace("sympy")
    xp.reset_shifts()
    n, d, a = 3, 2, 1
    x = symbol_array("x", (n, d))
    mus = [symbol_array(rf"\mu^{m}", (d,)) for m in "kvr"]
    td, tf = symbol_array(r"\lambda", (a,)), symbol_array("u", (a,))
    Ws = [symbol_array(f"W^{m}", (d, a)) for m in "kvr"]
    Wo = symbol_array("W^o", (a, d))
    args = (x, *mus, td, tf, *Ws, Wo)
    chk = _Checks()
    seq = _obj(_rb.time_mix(xp, *args))
    rec = _obj(_rb.time_mix_recurrent(xp, *args))
    chk.zero(seq - rec, "time_mix - time_mix_recurrent", rational=True)
    return chk.proof([
        Step(rf"$n = {n}$ tokens of width $d = {d}$, one WKV channel; $x$, $\mu_k, \mu_v, "
             r"\mu_r$, $\lambda$ (time_decay, $w = -e^{\lambda}$), $u$ (time_first) and the "
             r"weights independent real symbols; every running maximum an opaque symbol."),
        Step(r"`time_mix` (the token shift over the sequence, the WKV scan) and "
             r"`time_mix_recurrent` (one token at a time, from $(x_{-1}, a, b, p) = (0, 0, 0, "
             r"-\infty)$, the state carried) give, at the first token,",
             r"\mathrm{out}_1 = " + sympy.latex(sympy.simplify(
                 xp.without_shifts(seq[0, 0])))),
        Step("and the numerator of the difference is 0 at every token and channel: the "
             "recurrent decoder carries exactly the sequence's time mixing."),
    ])


register(ssm_identity("ssm_rwkv_time_mix_recurrent",
             "RWKV-4's time mixing equals its recurrent (one token at a time) form",
             r"x_{t-1}, (a, b, p) \text{ carried: } \mathrm{wkv}_t = \frac{e^{p-q}a + "
             r"e^{u+k_t-q}v_t}{e^{p-q}b + e^{u+k_t-q}},\ q = \max(p, u+k_t)",
             (_rb.time_mix, _rb.time_mix_recurrent, _rb.time_mix_step),
             derive_time_mix_recurrent, ("rwkv", "decoding")))


def derive_channel_mix_recurrent() -> Proof:
    xp = get_namespace("sympy")
    xp.reset_shifts()
    n, d, f = 3, 2, 1
    x = symbol_array("x", (n, d))
    args = (x, symbol_array(r"\mu^k", (d,)), symbol_array(r"\mu^r", (d,)),
            symbol_array("W^k", (d, f)), symbol_array("W^r", (d, d)), symbol_array("W^v", (f, d)))
    chk = _Checks()
    seq = _obj(_rb.channel_mix(xp, *args))
    chk.zero(seq - _obj(_rb.channel_mix_recurrent(xp, *args)),
             "channel_mix - channel_mix_recurrent", rational=True)
    return chk.proof([
        Step(rf"$n = {n}$ tokens of width $d = {d}$, $f = {f}$ hidden unit; $x$, $\mu_k, "
             r"\mu_r$ and the weights independent real symbols."),
        Step(r"`channel_mix` (the token shift over the sequence) equals `channel_mix_recurrent`"
             r" (one token at a time, only $x_{t-1}$ carried, $x_{-1} = 0$) at every token and "
             r"channel; at the first token",
             r"\mathrm{out}_1 = " + sympy.latex(seq[0, 0])),
    ])


register(ssm_identity("ssm_rwkv_channel_mix_recurrent",
             "RWKV-4's channel mixing equals its recurrent (one token at a time) form",
             r"\mathrm{out}_t = \sigma\bigl((x_{t-1} + \mu_r\odot(x_t - x_{t-1}))W_r\bigr)"
             r"\odot\bigl(\operatorname{relu}((x_{t-1} + \mu_k\odot(x_t - x_{t-1}))W_k)^2W_v"
             r"\bigr)",
             (_rb.channel_mix, _rb.channel_mix_recurrent, _rb.channel_mix_step),
             derive_channel_mix_recurrent, ("rwkv", "decoding")))
