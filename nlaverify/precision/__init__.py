r"""Verification below float64: the Transformer graph run in float32 or bfloat16, node
by node against a float64 reference, each node judged by the tolerance model.

Subject: the graph evaluated and back-propagated (hand-derived VJPs) in ``dtype``,
float32 on NumPy or JAX, bfloat16 on JAX (``jnp.bfloat16``). Reference: JAX autodiff of
the same graph in float64 (:func:`nlaverify.graph.run.autodiff_reference`) with the
*same* parameters: they are drawn in float64, rounded to ``dtype`` and converted back
exactly, so what is measured is the arithmetic error of the run, not the rounding of
the parameters. The reference's own error (:math:`\approx 2^{-53}`) is :math:`2^{-29}`
times below float32's unit roundoff and is neglected.

Measured, per node :math:`v`: the normwise relative error of its value and of its
cotangent, :math:`\max_\iota|a_\iota - e_\iota| / \max_\iota|e_\iota|`.

Bound, per node: :func:`nlaverify.tolerance.tolerance` with

* :math:`k_v`, the longest accumulation of the stages :math:`v` depends on (an op's
  own inner dimension, e.g. :math:`d_{in}` for :math:`XW`, not the graph's largest);
* the stage precisions: bfloat16 storage with float32 accumulation on XLA (matmuls and
  ``jnp.sum`` accumulate in float32), and TF32 products when ``matmul_precision="tf32"``;
* :math:`D_v`, the number of rounding stages :math:`v` depends on, composed at random
  (:math:`\sqrt{D}`, Higham & Mary 2019). Exact ops (gathers, head splits and merges)
  are not stages. At a sum :math:`z = x + y` (the residual stream, Baggag & Saad §3.8)
  independent errors add in variance, so :math:`D_z = 1 + (\|x\|^2 D_x + \|y\|^2 D_y)
  / (\|x\|^2 + \|y\|^2)` (root-mean-square norms); likewise where the cotangents sent by
  several consumers are summed (Baggag & Saad §2.6). A cotangent depends on the forward
  values its VJPs read and on the backward stages from the loss;
* :math:`\kappa_v`, the local condition number of the op computing :math:`v` (of the
  VJPs summed into a cotangent), by small-sample statistical condition estimation
  (Kenney & Laub 1994): its inputs that carry rounding error are perturbed, :math:`w +
  \epsilon\,\mathrm{rms}(w)\,r` with random signs :math:`r`, and :math:`\kappa_v =
  \max(1, \mathrm{rms}(\Delta v) / (\epsilon\,\mathrm{rms}(v)))` over two draws, in
  float64 at the reference point. It multiplies the bound of :math:`v` and is passed on
  through exact ops (a permutation keeps the error it is given), but not through the
  next rounding stage: measured errors do not compound stage by stage, while products
  of local estimates (1.1 to 1.5 for well-conditioned stages, whose random-direction
  gain exceeds the gain along the data) grow geometrically with depth and made every
  bfloat16 cotangent bound exceed 1. Where an amplification is real and local, e.g.
  the cancellation :math:`dP - \operatorname{rowsum}(dP\odot P)` of the attention VJP
  (:math:`\kappa \approx 3` for :math:`\bar Q`), it is counted at that node and in the
  heads split before it; the nodes upstream see it through their own stage count only
  (the worst ratios of the tables, about 0.35, are there). A quantity that is zero up
  to rounding (the cotangent of the key bias: softmax is invariant to a shift of a row
  of scores) gets :math:`\kappa \gg 1/u` and a bound above 1: no digit of it is
  meaningful, and the report counts it apart instead of failing. Any other bound of 1
  or more admits any answer of the right size (a zeroed VJP): the row is
  *inconclusive*, neither passed nor failed (an error over it still fails), and the
  report is not ok.
* a branch: ReLU's VJP :math:`g \odot \mathbb 1[x > 0]` jumps by :math:`|g_i|` when
  the sign of an :math:`x_i` within its error bound differs from the reference's; the
  largest such jump is added to the cotangent's bound (as the stages it is worth, so
  the nodes upstream inherit it). Routing flips of mixture-of-experts (``topk_mask``)
  are not modelled.

A-posteriori bound (:mod:`~nlaverify.precision.local`, issue 37): every row also gets what
its op's *own* arithmetic may add at the run's inputs :math:`\hat x` (the running error
bound :math:`e(\hat x)` of :mod:`~nlaverify.precision.running`) plus the run's input errors
carried through the op exactly, :math:`|f(\hat x) - f(x)|` in float64 (for a cotangent, the
consumers' VJPs summed). It holds by construction and decides the row where it is below 1;
the stage model above does not carry an amplification downstream (a selective scan's
backward) back to the cotangents upstream, and false-alarmed there.

Matmul precision on GPUs: JAX runs float32 matmuls in TF32 by default there. The JAX
run is pinned to ``jax.default_matmul_precision("highest")`` (full float32 products);
``matmul_precision="tf32"`` runs with ``"tensorfloat32"`` instead and models TF32's
unit roundoff :math:`2^{-11}` for the products of matmul stages. CPUs have no TF32:
:func:`emulate_tf32` rounds matmul operands to TF32 in software for the tests.

Modules: :mod:`~nlaverify.precision.bounds` (accumulations, stages, condition
estimates, the per-node bounds), :mod:`~nlaverify.precision.local` (the a-posteriori
bound), :mod:`~nlaverify.precision.running` (running error analysis on an array
namespace), :mod:`~nlaverify.precision.check` (the run, the rows and reports, the planted
node, TF32), :mod:`~nlaverify.precision.figure` (the depth figure and the command line).

Run ``python -m nlaverify.precision --preset tiny --dtype bfloat16`` (the same as
``nlaverify verify --preset tiny --dtype bfloat16``), or ``python -m
nlaverify.precision --figure docs/figures/precision_depth.svg`` for the figure of
error growth with depth.

Seed: Baggag & Saad §2.6 (back-propagation), §3.3-§3.9 (the blocks); Higham & Mary,
SIAM J. Sci. Comput. 41(5), 2019 (probabilistic rounding error analysis); Kenney &
Laub, SIAM J. Sci. Comput. 15(1), 1994 (statistical condition estimation).
"""


from nlaverify.precision.bounds import (
    BRANCHING_VJP,
    DTYPES,
    EXACT_FORWARD,
    MATMUL_OPS,
    MATMUL_PRECISIONS,
    SUM_OPS,
    NodeBound,
    accumulations,
    block_of,
    node_bounds,
)
from nlaverify.precision.check import (
    KNOWN_ZERO_COTANGENTS,
    PrecisionReport,
    PrecisionRow,
    PrecisionSetup,
    emulate_tf32,
    format_precision_report,
    matmul_precision_scope,
    measure,
    planted,
    precision_command,
    prepare,
    round_params,
    round_tf32,
    run_subject,
    verify_precision,
)
from nlaverify.precision.figure import draw_figure, figure, main

__all__ = [
    "BRANCHING_VJP", "DTYPES", "EXACT_FORWARD", "KNOWN_ZERO_COTANGENTS", "MATMUL_OPS",
    "MATMUL_PRECISIONS", "SUM_OPS", "NodeBound", "PrecisionReport", "PrecisionRow",
    "PrecisionSetup", "accumulations", "block_of", "draw_figure", "emulate_tf32", "figure",
    "format_precision_report", "main", "matmul_precision_scope", "measure", "node_bounds",
    "planted", "precision_command", "prepare", "round_params", "round_tf32", "run_subject",
    "verify_precision",
]
