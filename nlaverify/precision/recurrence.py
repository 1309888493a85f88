r"""The graph-level bound of a recurrence node (the selective scans of Mamba blocks): the
op's running error bound (:mod:`nlaverify.precision.running`) at the inputs the run gave it,
plus the exact effect of the run's input errors.

Why not the stage model. :func:`~nlaverify.precision.bounds.node_bounds` counts the scan as one
rounding stage under a condition estimate :math:`\kappa` and bounds a node by
:math:`\sqrt{\lambda C}\,\kappa\sqrt D\,u`. A node reached through :math:`D \approx 20` stages
whose own map cancels (the skip's cotangent :math:`\bar D_e = \sum_t G_{te}\,
\operatorname{silu}(z_{te})u_{te}`, :math:`\kappa \approx 7`) gets a bound of 1 or more in bfloat16:
vacuous, so the row fails although its error is :math:`6\cdot 10^{-2}` (issue 37,
``tiny-mamba``). The looseness is not the scan's own rounding (one stage of 21) but the
*propagated* part: the a-priori bound of the scan's output cotangent is 13 times its error,
and the scan amplifies it. Feeding the a-priori input bounds into the running namespace
(every entry of an input :math:`a` given :math:`e_a = \mathrm{rtol}_a \max|a|`) is worse:
the worst case over signs of :math:`|J|\,e` gave bounds of 0.9 to 11 on every row of the scan.

The bound here. The run evaluates :math:`\hat y = \mathrm{fl}(f)(\hat x)` on its own inputs
:math:`\hat x` (values and the output cotangent :math:`\hat G` of the run, exact in the dtype),
the reference is :math:`y = f(x)`. Entrywise, by the triangle inequality,

.. math::
   |\hat y - y| \le \underbrace{|\mathrm{fl}(f)(\hat x) - f(\hat x)|}_{\le\, e(\hat x)}
   + \underbrace{|f(\hat x) - f(x)|}_{\Delta,\ \text{exact}},

where :math:`e(\hat x)` is the first-order running error bound of the op's own evaluation
order at :math:`\hat x` divided by :math:`1 - m u` (:func:`~nlaverify.precision.running.
running_error`: no :math:`C`, no :math:`\kappa`, no stage count) and :math:`\Delta` is computed
in float64 by the proved op at the run's inputs: the upstream error carried through the scan
*exactly*, to all orders, not through a model of it (its own float64 error, :math:`\approx
2^{-53}\kappa`, is neglected as the reference's is). The row's tolerance is the normwise check
of that entrywise bound, :math:`\mathrm{rtol} = \max_i (e_i + |\Delta_i|) / \max_i |y_i|`,
and the row keeps the smaller of it and the stage model's bound (:func:`tighter`).
The same holds for the VJP: the cotangent the scan sends to an argument :math:`a` is
:math:`\mathrm{fl}(\mathrm{vjp})(\hat G, \hat x)_a`, bounded by
:math:`e_a(\hat G, \hat x) + |\mathrm{vjp}(\hat G, \hat x)_a - \bar a|`. It is the whole
cotangent of :math:`a` only when the scan is :math:`a`'s one consumer (``dt``, ``B``, ``C``,
``z``, :math:`A_{\log}`, :math:`D`, :math:`b_\Delta`); an argument that other nodes also read
(the convolution's output) sums several VJPs and keeps the stage model.

What it checks. The bound is a-posteriori in the inputs: a node is held to what *its own*
arithmetic may add to the errors it was given, which is where a bug in the node shows (a
dropped skip :math:`D u` moves :math:`\hat y` by :math:`|D u \operatorname{silu}(z)|`, far outside
:math:`e + |\Delta|`), while an error made upstream is charged to the upstream node, whose row
(earlier in topological order, or in back-propagation order for cotangents) fails first.
The running bound is the worst case over the rounding signs of the op's own order; XLA's
fusions that keep float32 intermediates only err less (see :mod:`~nlaverify.precision.
running` for the scope).
"""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.graph.core import _arguments
from nlaverify.graph.run import Evaluation
from nlaverify.ops.registry import get_op
from nlaverify.precision.running import as_arrays, running_error, running_namespace
from nlaverify.tolerance import Tolerance, unit_roundoff

__all__ = ["recurrence_tolerances", "running_ops", "tighter"]


def running_ops() -> frozenset[str]:
    """The ops judged by their running error bound
    (:data:`nlaverify.check.op_reference.RUNNING_ERROR_OPS`, one list for ``check_op`` and the
    graph; imported when first needed)."""
    from nlaverify.check.op_reference import RUNNING_ERROR_OPS

    return RUNNING_ERROR_OPS


def _f64(x: Any) -> np.ndarray:
    return np.asarray(x.get() if hasattr(x, "get") else x).astype(np.float64)


def _local(own: np.ndarray, moved: np.ndarray, expected: np.ndarray, dtype: str) -> Tolerance:
    r""":math:`\mathrm{rtol} = \max_i (e_i + |\Delta_i|) / \max_i|y_i|` (module docstring); the
    scale as :meth:`~nlaverify.tolerance.Tolerance.compare` with ``floor=0`` takes it."""
    bound = own + np.abs(moved)
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    scale = scale or 1.0
    worst = float(np.max(bound)) if bound.size else 0.0
    return Tolerance(worst / scale, f"running error bound in {dtype} at the run's inputs: "
                     f"max_i(e_i + |f(x^) - f(x)|_i)={worst:.3g} over scale {scale:.3g} "
                     f"(own rounding max e_i={float(np.max(own)) if own.size else 0.0:.3g})")


def tighter(stage: Tolerance | None, local: Tolerance | None) -> Tolerance | None:
    r"""The smaller of a row's two bounds. Both are bounds the check holds (the stage model
    for every node, the running bound for a recurrence): if both hold, so does the smaller,
    and a row is never judged looser than the stage model alone judged it. The stage model
    wins where the worst case over the rounding signs is pessimistic: a cotangent summed over
    the batch and the steps that cancels (:math:`\bar b_\Delta`, :math:`\bar A_{\log}`
    with ``batch=3`` in bfloat16), whose own running bound reached 1 to 1.8."""
    if stage is None or local is None:
        return local if stage is None else stage
    return local if local.rtol < stage.rtol else stage


def recurrence_tolerances(graph: nx.DiGraph, reference: Evaluation, subject: Evaluation,
                          dtype: str, accumulation: str) -> dict[tuple[str, str], Tolerance]:
    r"""The tolerances of the rows a recurrence node decides (module docstring), keyed
    ``(node, "value")`` for the node's value and ``(argument, "cotangent")`` for each argument
    whose one consumer it is; the other rows keep the stage model.

    Args:
        reference: the float64 values and cotangents.
        subject: the run in ``dtype`` (its values and cotangents are the op's inputs).
        accumulation: the precision the run's sums accumulate in.
    """
    ops = [v for v in graph if graph.nodes[v].get("kind") == "op"]
    if not ops:
        return {}
    running = running_ops()
    rn = running_namespace(unit_roundoff(dtype), unit_roundoff(accumulation))
    xp = get_namespace("numpy")
    out: dict[tuple[str, str], Tolerance] = {}
    for v in ops:
        attrs = graph.nodes[v]
        args = _arguments(graph, v)
        if (attrs["op"] not in running or v not in subject.values
                or any(a not in subject.values for a in args)):
            continue
        spec, st = get_op(attrs["op"]), attrs["static"]
        xh = [_f64(subject.values[a]) for a in args]  # exact in the dtype, held in float64
        xo = [rn.asarray(x) for x in xh]
        with np.errstate(all="ignore"):
            own = running_error(spec.forward(rn, *xo, **st))
            moved = _f64(spec.forward(xp, *xh, **st)) - _f64(reference.values[v])
        out[(v, "value")] = _local(own, moved, _f64(reference.values[v]), dtype)
        if v not in subject.cotangents or v not in reference.cotangents:
            continue
        gh = _f64(subject.cotangents[v])
        real = [a for a, s in zip(args, spec.args, strict=True) if s.kind == "real"]
        with np.errstate(all="ignore"):
            owns = as_arrays(list(spec.vjp(rn, rn.asarray(gh), *xo, **st)))
            exact = [_f64(c) for c in spec.vjp(xp, gh, *xh, **st)]
        for a, e, c in zip(real, owns, exact, strict=True):
            if (list(graph.successors(a)) != [v] or args.count(a) != 1
                    or a not in reference.cotangents):
                continue
            ref = _f64(reference.cotangents[a])
            out[(a, "cotangent")] = _local(e, c - ref, ref, dtype)
    return out
