r"""The a-posteriori bound of every row of the graph check: what a node's *own* arithmetic may
add to the errors the run gave it, plus those errors carried through the node exactly.

The stage model (:func:`~nlaverify.precision.bounds.node_bounds`) bounds a node by
:math:`\sqrt{\lambda C}\,\kappa\sqrt D\,u`, :math:`D` the rounding stages upstream and
:math:`\kappa` the node's *local* condition estimate. Upstream amplification is not in it: a
selective scan multiplies the errors of its output cotangent by up to 10 on their way to
``dt``, ``B``, ``C`` (the state adjoint's cancellation), and a node upstream of it (the
low-rank :math:`\Delta` projection's weight ``dt_low.W`` of ``tiny-mamba``, seed 8) then
carries 1.7 times its stage bound in bfloat16: a false alarm (issue 37). Counting the
amplification a priori would loosen every bound downstream of it; here it is measured.

The bound. Node :math:`v` computes :math:`y = f(x)` from its arguments; the run evaluates
:math:`\hat y = \mathrm{fl}(f)(\hat x)` on its own arguments :math:`\hat x` (exact in the
dtype). Entrywise, by the triangle inequality,

.. math::
   |\hat y - y| \le \underbrace{|\mathrm{fl}(f)(\hat x) - f(\hat x)|}_{\le\, e(\hat x)}
   + \underbrace{|f(\hat x) - f(x)|}_{\Delta,\ \text{exact}}
   + \underbrace{|f(x) - y|}_{\text{float64}},

:math:`e(\hat x)` the op's first-order running error bound in its own evaluation order at
:math:`\hat x`, divided by :math:`1 - m u` (:mod:`~nlaverify.precision.running`, Higham 2002
§3.1, §3.3, Lemma 3.1; matmul products of relative error :math:`u_p`, see
:func:`product_roundoff`), :math:`\Delta` the proved op in float64 at the run's arguments
and at the reference's (the upstream error carried through :math:`f` to all orders), and the
last term the reference's own float64 error, neglected as everywhere in the check
(:math:`2^{-29}` of float32's :math:`u`). A cotangent sums the VJPs of its consumers
:math:`c` in the run's order, each rounded to the dtype and the sums too:

.. math::
   |\hat{\bar a} - \bar a| \le e\Bigl(\textstyle\sum_c \mathrm{fl}(\mathrm{vjp}_c)
   (\hat G_c, \hat x_c)_a\Bigr) + \Bigl|\sum_c \mathrm{vjp}_c(\hat G_c, \hat x_c)_a
   - \mathrm{vjp}_c(G_c, x_c)_a\Bigr|,

the first term the running bound of the sum of the consumers' running results (so each
VJP's own bound and the :math:`u|\text{partial sum}|` of every addition). :math:`\Delta` is the
difference of the *hand-derived* VJP at the two points, not against the autodiff reference:
a hand VJP that disagrees with autodiff keeps that disagreement in the measured error and
out of the bound, so a wrong VJP (in the registry or in the run) still fails. The row's
tolerance is the normwise check of the entrywise bound, :math:`\mathrm{rtol} = \max_i(e_i +
|\Delta_i|) / \max_i|y_i|` (the scale of :meth:`~nlaverify.tolerance.Tolerance.compare` with
``floor=0``). It decides the row where it is below 1 (:func:`decide`): it holds by
construction, the stage model is an estimate. Feeding a-priori input bounds into the running
namespace instead of the exact :math:`\Delta` is no alternative: the worst case over the
signs of :math:`|J|\,e` gave bounds of 0.9 to 11 on every row of the scan.

Soundness and scope. The bound holds whenever the run evaluates the op's code in the
modelled arithmetic (every elementary operation and elementary function rounded to the
dtype, sums and matmuls accumulated in the accumulation precision): the op code of the
registry *is* the run's code (the subject evaluates the same ``forward`` and ``vjp`` on its
backend), so the running bound follows the run's own order; an XLA fusion that keeps
float32 intermediates only rounds less often, and a sum in another order (pairwise, BLAS
blocking, FMA) keeps the worst-case bound :math:`(k-1)u_a\sum|a_i|`. It is the worst case
over the signs of every rounding: a single rounding (a residual add) attains it up to
:math:`1/(1+u)`, long sums and the scan's backward sit up to 80 times below it. The ops that
route on a *computed* intermediate (the mixture-of-experts router's top-:math:`k`,
:data:`ROUTING_OPS`) and any op the running namespace cannot evaluate keep the stage model:
a routing flip inside the error band is a jump that no first-order bound sees. A branch on
an *argument* (ReLU, ``topk_mask``) is decided on :math:`\hat x` exactly as the run decides
it, and a flip against the reference is inside :math:`\Delta`.

What it detects. The bound charges each node with its own arithmetic only; an error made
upstream is charged upstream, whose row comes first in topological order (values) or in
back-propagation order (cotangents). A bug at :math:`v` that moves :math:`\hat y` by
:math:`b` (entrywise) fails the row whenever :math:`\max_i |b_i| > 2\max_i(e_i +
|\Delta_i|)` (then some entry's error exceeds the normwise bound), and usually well below
that (the error adds to :math:`\Delta` entry by entry): in bfloat16 :math:`e` is a few
:math:`u = 2^{-8}` times the entries' magnitudes (for a matmul with float32 accumulation
:math:`u|AB|` plus :math:`2^{-24}k|A||B|`). Measured on ``tiny-mamba`` (one output column of
the run scaled by :math:`1 + \delta`, 4 seeds): a projection, a norm and a weight cotangent
are named at their node on every seed from :math:`\delta = 2^{-5}`, :math:`2^{-4}`,
:math:`2^{-4}` in bfloat16 (8 to 16 :math:`u`) and from :math:`2^{-18}`, :math:`2^{-19}`,
:math:`2^{-19}` in float32 (32 to 64 :math:`u`); a bug in one consumer's share of a summed
cotangent is diluted by the sum (a norm's :math:`\bar x` joining the residual stream's: from
:math:`2^{-2}` in bfloat16, :math:`2^{-16}` in float32).

Seed: Wilkinson's running error analysis (Higham, *Accuracy and Stability of Numerical
Algorithms*, 2002, §3.1, §3.3, Lemma 3.1); issue 37.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.graph.core import _arguments
from nlaverify.graph.run import Evaluation
from nlaverify.ops.registry import get_op
from nlaverify.precision.running import running_error, running_namespace
from nlaverify.tolerance import Tolerance, unit_roundoff

__all__ = ["MAX_ENTRIES", "ROUTING_OPS", "LocalTerms", "decide", "local_terms", "local_tolerances",
           "product_roundoff"]

#: ops that route on a computed intermediate (the router's top-:math:`k` inside a
#: mixture of experts): a flip inside the error band is a jump the running bound does not
#: see, so their rows keep the stage model
ROUTING_OPS = frozenset({"moe", "moe_swiglu", "moe_topk", "qwen2_moe", "qwen2_moe_norm",
                         "deepseek_v3_moe"})


#: what an op the running namespace cannot evaluate raises (a namespace function it lacks,
#: an operation on its scalars it does not define): the rows keep the stage model
_UNSUPPORTED = (AttributeError, NotImplementedError, TypeError, ValueError, ZeroDivisionError,
                OverflowError)

#: the largest argument (entries) whose op runs on the running namespace, whose scalars are
#: Python objects (about a microsecond an operation): the tiny presets and the zoo stay far
#: below (``tiny-mamba``'s largest, batch 3: 1152), a node of ``mid`` (d = 256, n = 128,
#: V = 2048: 262144 logits) would take seconds; larger nodes keep the stage model
MAX_ENTRIES = 2**14

#: the float64 evaluations whose own error the bound covers (f(x^) and f(x) by NumPy, the
#: reference by JAX), each a few u64 of the row's scale (:func:`_tolerance`)
_FLOAT64_EVALUATIONS = 3


def product_roundoff(dtype: str, accumulation: str, products: str | None = None) -> float:
    r"""The relative error :math:`u_p` of one product of a matmul stage: operands rounded
    to ``products`` (TF32: :math:`2^{-11}` each, exact product, then the dtype's rounding),
    :math:`u_p = (1 + u_t)^2 (1 + u) - 1`; else, where sums accumulate in a wider precision
    (bfloat16 on XLA: the product of two bfloat16 numbers is exact in float32),
    :math:`u_p = u_a`; else :math:`u`."""
    u, u_acc = unit_roundoff(dtype), unit_roundoff(accumulation)
    if products is not None:
        u_t = unit_roundoff(products)
        return (1.0 + u_t) ** 2 * (1.0 + u) - 1.0
    return u_acc if u_acc < u else u


def decide(stage: Tolerance | None, local: Tolerance | None) -> Tolerance | None:
    r"""The bound a row is held to. The a-posteriori bound, where there is one and it says
    something (:math:`\mathrm{rtol} < 1`), decides: it holds by construction (module
    docstring), while the stage model is a statistical estimate that does not carry the
    amplification of the nodes downstream back to a cotangent (``dt_low.W`` of
    ``tiny-mamba`` at seed 8 in bfloat16: error 0.47, stage bound 0.28, a-posteriori bound
    0.47). Where it is vacuous (a cotangent summed over a batch whose worst case over the
    rounding signs cancels, :math:`\bar b_\Delta`, :math:`\bar A_{\log}`) the smaller of the
    two stands; without one, the stage model."""
    if local is None or stage is None:
        return stage if local is None else local
    if local.rtol < 1.0:
        return local
    return local if local.rtol < stage.rtol else stage


def _f64(x: Any) -> np.ndarray:
    arr = np.asarray(x.get() if hasattr(x, "get") else x)
    return arr if arr.dtype.kind in "iub" else arr.astype(np.float64)


def _tolerance(own: np.ndarray, moved: np.ndarray, expected: np.ndarray,
               dtype: str) -> Tolerance:
    r""":math:`\mathrm{rtol} = \max_i (e_i + |\Delta_i|) / \max_i|y_i|` (module docstring)."""
    u, u64 = unit_roundoff(dtype), unit_roundoff("float64")
    # the float64 evaluations f(x^), f(x) and the reference each err by about u64/u of the
    # dtype's own bound plus a rounding of the result; rtol * scale rounds once more
    slack = _FLOAT64_EVALUATIONS * u64
    bound = own * (1.0 + slack / u) + np.abs(moved)
    scale = (float(np.max(np.abs(expected))) if expected.size else 0.0) or 1.0
    worst = float(np.max(bound)) if bound.size else 0.0
    mine = float(np.max(own)) if own.size else 0.0
    return Tolerance(worst / scale * (1.0 + slack) + slack,
                     f"a-posteriori bound in {dtype} at the run's inputs: "
                     f"max_i(e_i + |f(x^) - f(x)|_i)={worst:.3g} over scale {scale:.3g} "
                     f"(own rounding max e_i={mine:.3g})")


def _lift(rn: Any, x: np.ndarray) -> Any:
    """An argument on the running namespace: floats as exact scalars, ids and masks kept."""
    return x if x.dtype.kind in "iub" else rn.asarray(x)


@dataclass(frozen=True)
class LocalTerms:
    r"""The parts of one row's a-posteriori bound, entry by entry (module docstring)."""

    #: :math:`e(\hat x)`, the running bound of the row's own rounding
    own: np.ndarray
    #: :math:`f(\hat x)` in float64 (for a cotangent, the sum of the consumers' VJPs)
    at_run: np.ndarray
    #: :math:`f(x)` in float64 at the reference's inputs
    at_reference: np.ndarray

    def tolerance(self, expected: np.ndarray, dtype: str) -> Tolerance:
        """The row's tolerance against the reference ``expected``."""
        return _tolerance(self.own, self.at_run - self.at_reference, expected, dtype)


def local_tolerances(graph: nx.DiGraph, reference: Evaluation, subject: Evaluation,
                     dtype: str, accumulation: str, products: str | None = None,
                     output: str = "loss") -> dict[tuple[str, str], Tolerance]:
    r"""The a-posteriori tolerances (module docstring), keyed ``(node, "value")`` and
    ``(node, "cotangent")``; a row missing here keeps the stage model alone.

    Args:
        reference: the float64 values and cotangents (:math:`x`, :math:`G`).
        subject: the run in ``dtype`` (its values and cotangents are :math:`\hat x`,
            :math:`\hat G`).
        accumulation: the precision the run's sums accumulate in.
        products: the precision matmul operands are rounded to (``"tfloat32"``), if any.
        output: the seed of back-propagation (its cotangent is exact).
    """
    terms = local_terms(graph, reference, subject, dtype, accumulation, products, output)
    return {(v, what): t.tolerance(_f64((reference.values if what == "value"
                                          else reference.cotangents)[v]), dtype)
            for (v, what), t in terms.items()}


def local_terms(graph: nx.DiGraph, reference: Evaluation, subject: Evaluation,
                dtype: str, accumulation: str, products: str | None = None,
                output: str = "loss") -> dict[tuple[str, str], LocalTerms]:
    """The parts of every row's a-posteriori bound (:func:`local_tolerances`)."""
    rn = running_namespace(unit_roundoff(dtype), unit_roundoff(accumulation),
                           product_roundoff(dtype, accumulation, products))
    xp = get_namespace("numpy")
    order = list(nx.topological_sort(graph))
    out: dict[tuple[str, str], LocalTerms] = {}
    #: (consumer, argument) -> the running result, the VJP at the run's and the reference's
    sent: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for v in order:
        attrs = graph.nodes[v]
        if attrs.get("kind") != "op" or attrs["op"] in ROUTING_OPS:
            continue
        args = _arguments(graph, v)
        if v not in subject.values or any(a not in subject.values or a not in
                                           reference.values for a in args):
            continue
        spec, st = get_op(attrs["op"]), attrs["static"]
        if max(np.size(subject.values[w]) for w in [v, *args]) > MAX_ENTRIES:
            continue
        xh = [_f64(subject.values[a]) for a in args]
        xr = [_f64(reference.values[a]) for a in args]
        try:
            with np.errstate(all="ignore"):
                xo = [_lift(rn, x) for x in xh]
                out[(v, "value")] = LocalTerms(running_error(spec.forward(rn, *xo, **st)),
                                               _f64(spec.forward(xp, *xh, **st)),
                                               _f64(spec.forward(xp, *xr, **st)))
        except _UNSUPPORTED:  # an op the running namespace cannot run: stage model
            continue
        if v not in subject.cotangents or v not in reference.cotangents:
            continue
        real = [a for a, s in zip(args, spec.args, strict=True) if s.kind == "real"]
        try:
            with np.errstate(all="ignore"):
                run = list(spec.vjp(rn, rn.asarray(_f64(subject.cotangents[v])), *xo, **st))
                at_run = spec.vjp(xp, _f64(subject.cotangents[v]), *xh, **st)
                at_ref = spec.vjp(xp, _f64(reference.cotangents[v]), *xr, **st)
        except _UNSUPPORTED:  # the cotangents it sends keep the stage model
            continue
        for a, t, h, r in zip(real, run, at_run, at_ref, strict=True):
            sent[(v, a)] = (np.asarray(t, dtype=object), _f64(h), _f64(r))
    position = {v: i for i, v in enumerate(order)}
    for a in order:
        if (a == output or a not in subject.cotangents or a not in reference.cotangents
                or graph.nodes[a].get("dtype") == "int"):
            continue
        consumers = sorted((c for c in graph.successors(a) if c in subject.cotangents
                            and _sends(graph, c, a)), key=position.__getitem__, reverse=True)
        if not consumers or any((c, a) not in sent for c in consumers):
            continue
        total, at_run, at_ref = sent[(consumers[0], a)]
        for c in consumers[1:]:  # back-propagation's order: cot = cot + g, rounded
            t, h, r = sent[(c, a)]
            total, at_run, at_ref = total + t, at_run + h, at_ref + r
        with np.errstate(all="ignore"):
            out[(a, "cotangent")] = LocalTerms(running_error(total), at_run, at_ref)
    return out


def _sends(graph: nx.DiGraph, consumer: str, arg: str) -> bool:
    """Whether ``consumer``'s VJP sends a cotangent to ``arg`` (a real argument of it)."""
    attrs = graph.nodes[consumer]
    if attrs.get("kind") != "op":
        return False
    spec = get_op(attrs["op"])
    return any(a == arg and s.kind == "real"
               for a, s in zip(_arguments(graph, consumer), spec.args, strict=True))
