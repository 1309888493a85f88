r"""Hostile cases of Mamba-2's scan (``mamba2_scan``; Dao & Gu 2024, *Transformers are
SSMs*, §7-§8; op in :mod:`nlaverify.ops.ssm2`): the inputs a trained model feeds it, where
naive kernels lose accuracy, with the condition derived for them.

**The inputs** (:func:`hostile_scan_args`). One sequence of :data:`SCAN_LENGTH` tokens,
:math:`H = 4` heads of :math:`P = 2` channels reading :math:`G = 2` groups of :math:`N = 3`
(each group serves two heads), one head per regime of :data:`SCAN_REGIMES`:

* ``fast``: :math:`\delta + b_\Delta \in [2, 4]` (:math:`b_\Delta \approx 3`), so
  :math:`\Delta = \operatorname{softplus}(\delta + b_\Delta) \approx 2..4`, and
  :math:`A_{\log} \approx 1.5` (:math:`A = -e^{A_{\log}} \approx -4.5`): decays
  :math:`e^{\Delta A} \approx 10^{-4}..10^{-8}` per step, whose products over the sequence
  underflow every float format (:math:`e^{-288}` after 16 steps; float32's smallest
  subnormal is :math:`e^{-103}`), and :math:`|\Delta A| \approx 9..18`, which the
  exponential amplifies: a rounding of :math:`\Delta A` is a relative error
  :math:`|\Delta A|\,u` of the decay;
* ``slow``: :math:`\delta + b_\Delta \approx -8`, :math:`\Delta \approx 10^{-4}..10^{-3}`,
  decay :math:`\approx 1`: the state accumulates the whole sequence (and
  :math:`1 - e^{\Delta A}` is the cancellation a kernel computing
  :math:`\log\bar A` by differences meets);
* ``mixed``: each token's :math:`\delta + b_\Delta` near :math:`-8` or :math:`+3` at
  random: runs that keep the state and steps that erase it;
* a second ``fast`` head (``fast`` on both heads of group 0 and 1).

From token :math:`n/3` on every token is the same (:math:`x, \delta, B, C` constant):
a long constant run, along which a slow head's state grows linearly and a dual-form
kernel's cumulative sum :math:`\sum_{r\le t}\Delta_r A` grows to :math:`\approx 18\,n` for a
fast head, so that the segment sums :math:`\text{cs}_t - \text{cs}_s` are differences of
large numbers (Hugging Face's ``segment_sum`` avoids them by masking before the sum).
:math:`x, B, C, D` and the cotangent are standard normal. Values are exact in the dtype.

**The bound** (:func:`scan_condition`). The scan is a recurrence :math:`n` steps deep,
forward and backward; the stage model's :math:`C\kappa D u` counts it as one stage and
would need a :math:`\kappa` covering :math:`|\Delta A|` and :math:`n` at once (vacuous in
bfloat16, :math:`32 \cdot 2\cdot 2^{-8} = 0.25` already at :math:`\kappa = 1`). Its
condition is instead the running error bound of :mod:`nlaverify.precision.running`: the
op's own sequential evaluation (the proved forward, VJP and JVP) on scalars that carry a
first-order bound on the absolute error of a kernel rounding every operation in the
dtype (Higham 2002 §3.3), entry by entry, weighted by the decay products. ``check_op``
judges each row of these cases by that bound (:data:`HOSTILE_RUNNING_OPS`); the scalar
:func:`scan_condition` is the same bound in units of :math:`u`, for a comparison through
:func:`~nlaverify.tolerance.tolerance` (looser by its :math:`C D \sqrt k`). Honest for a
sequential kernel (its rounding sites are the bound's); a kernel that evaluates
:math:`\prod\bar A` as :math:`e^{\text{cs}_t - \text{cs}_s}` (the dual, cumulative-sum
form) rounds :math:`\text{cs}` at :math:`|\text{cs}_t|\,u`, which the bound does not allow:
in bfloat16 the :math:`A_{\log}` cotangent of such a kernel is off by up to 40 % of its
scale (the reviewer's finding), in float32 by :math:`\approx 10^{-4}` of it (a sequential
kernel: :math:`2\cdot 10^{-8}`), and it fails. The dual form with Hugging Face's
``segment_sum`` (each segment summed from its start, no differences) passes, as the
sequential kernel does (``tests/test_check_op_mamba2_hostile.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nlaverify.cases.drawn import OpCase
from nlaverify.cases.rounding import exact_in

__all__ = ["HOSTILE_RUNNING_OPS", "HOSTILE_SCAN_OPS", "SCAN_LENGTH", "SCAN_REGIMES",
           "hostile_scan_args", "make_hostile_scan_case", "scan_condition"]

#: the scans :func:`make_hostile_scan_case` knows hostile inputs for
HOSTILE_SCAN_OPS: tuple[str, ...] = ("mamba2_scan",)
#: the ops whose hostile cases ``check_op`` judges by the running error bound
HOSTILE_RUNNING_OPS = frozenset(HOSTILE_SCAN_OPS)
#: the tokens of a hostile scan case (products of 16+ fast decays underflow)
SCAN_LENGTH = 20
#: the regime of each head (the module docstring)
SCAN_REGIMES: tuple[str, ...] = ("fast", "slow", "mixed", "fast")
_SIZES = {"n": SCAN_LENGTH, "H": len(SCAN_REGIMES), "P": 2, "G": 2, "N": 3}


def hostile_scan_args(rng: np.random.Generator, dtype: str) -> list[np.ndarray]:
    r"""``(x, dt, A_log, B, C, D, dt_bias)`` of ``mamba2_scan`` with one head per regime of
    :data:`SCAN_REGIMES` and a constant run from token :math:`n/3` on (the module
    docstring): :math:`\Delta = \operatorname{softplus}(\delta + b_\Delta)`, decays
    :math:`e^{\Delta A}`, :math:`A = -e^{A_{\log}}`, from :math:`10^{-8}` to
    :math:`1 - 10^{-4}`. Float64 values exact in ``dtype``."""
    n, H, P, G, N = (_SIZES[k] for k in ("n", "H", "P", "G", "N"))
    dt, bias, A_log = np.empty((n, H)), np.empty(H), np.empty(H)
    for j, regime in enumerate(SCAN_REGIMES):
        if regime == "fast":  # Delta ~ 2..4, A ~ -4.5: decays 1e-4..1e-8 per step
            bias[j], A_log[j] = rng.uniform(2.5, 3.5), rng.uniform(1.4, 1.6)
            dt[:, j] = rng.uniform(-0.5, 0.5, n)
        elif regime == "slow":  # Delta ~ 1e-4..1e-3: decays ~ 1
            bias[j], A_log[j] = rng.uniform(-9.0, -7.0), rng.uniform(-1.0, 1.5)
            dt[:, j] = rng.uniform(-1.0, 1.0, n)
        else:  # each token fast or slow
            bias[j], A_log[j] = 0.0, 1.5
            dt[:, j] = rng.choice([-8.0, 3.0], n) + rng.uniform(-0.5, 0.5, n)
    x = rng.standard_normal((n, H, P))
    B, C = rng.standard_normal((n, G, N)), rng.standard_normal((n, G, N))
    run = n // 3  # the long constant run: every token from here on the same
    for a in (x, dt, B, C):
        a[run:] = a[run]
    D = rng.standard_normal(H)
    return [exact_in(a, dtype, strict=True) for a in (x, dt, A_log, B, C, D, bias)]


def scan_condition(args: list[Any]) -> float:
    r"""The condition of a hostile scan case: the running error bound
    (:mod:`nlaverify.precision.running`) of the op's forward and of its VJP at the unit
    cotangent, in units of :math:`u`,

    .. math:: \kappa = \max\Bigl(1,\ \max_{\text{arrays } r}
       \frac{\max_i e_i(r)}{u\,\max(1, \max_i |r_i|)}\Bigr),

    :math:`e_i` the first-order bound on the error of entry :math:`i` of a kernel that
    rounds every operation of the sequential recurrence (the decay products weight each
    step's roundings, :math:`|\Delta A|` amplifies the exponential's argument). First
    order, :math:`e \propto u`: the ratio is the same in every dtype."""
    from nlaverify.backends import get_namespace
    from nlaverify.ops.ssm2 import mamba2_scan, mamba2_scan_vjp
    from nlaverify.precision.running import as_arrays, running_namespace

    u = 2.0 ** -24
    xp = running_namespace(u, u)
    lifted = [xp.asarray(np.asarray(a, dtype=np.float64)) for a in args]
    ones = np.ones(np.shape(args[0]))
    with np.errstate(all="ignore"):
        bounds = as_arrays([mamba2_scan(xp, *lifted),
                            *mamba2_scan_vjp(xp, xp.asarray(ones), *lifted)])
    NP = get_namespace("numpy")
    refs = [mamba2_scan(NP, *args), *mamba2_scan_vjp(NP, ones, *args)]
    return max([1.0] + [float(np.max(e)) / (u * max(1.0, float(np.max(np.abs(r)))))
                        for e, r in zip(bounds, refs, strict=True)])


def make_hostile_scan_case(op: str, dtype: str, seed: int) -> OpCase:
    """The hostile :class:`~nlaverify.cases.drawn.OpCase` of a scan of
    :data:`HOSTILE_SCAN_OPS` for one seed (deterministic): :func:`hostile_scan_args`, a
    standard normal cotangent, the op's spec with :func:`scan_condition`."""
    from dataclasses import replace

    from nlaverify.backends import get_namespace
    from nlaverify.ops.ssm_specs import SCAN_OPS

    if op not in HOSTILE_SCAN_OPS:
        raise ValueError(f"make_hostile_scan_case: argument 'op': expected one of "
                         f"{', '.join(HOSTILE_SCAN_OPS)}, got {op!r}")
    spec = replace(SCAN_OPS[op], condition=scan_condition)
    rng = np.random.default_rng([seed, 2024])
    args = hostile_scan_args(rng, dtype)
    out = spec.forward(get_namespace("numpy"), *args)
    G = exact_in(rng.standard_normal(np.shape(out)), dtype, strict=True)
    return OpCase(spec, dict(_SIZES), args, {}, G)
