r"""``check_model``: your model, node by node against the nlaverify graph.

Any model callable (a PyTorch ``nn.Module``, a JAX or NumPy function, an equinox module) and
the graph of a :class:`~nlaverify.config.TransformerConfig`
(:func:`~nlaverify.graph.build.build_transformer`) run on the same weights and tokens. The
graph's values and cotangents come from :func:`~nlaverify.graph.run.run_graph` (NumPy,
float64, hand-derived VJPs that the catalogue proves); your model's come from a map of
intermediates you give, graph node :math:`\to` your name:

* **PyTorch**: forward hooks by module name, ``{"blocks.{l}.norm1": "transformer.h.{l}.ln_1"}``
  (``{l}`` runs over the blocks), capturing the module's output, or its first input with
  ``"transformer.h.{l}.ln_2:input"``; a value no module returns (inside an attention
  function, say) comes from your ``call``, which may return ``(logits, intermediates[,
  loss])``: a name that is no module path is a key of that dict (the Hugging Face adapter,
  :func:`~nlaverify.interop.hf_verify.verify_hf`, reads its attention tensors so);
* **JAX, NumPy, equinox**: your model returns ``(logits, intermediates)`` (or ``(logits,
  intermediates, loss)``), a dict; the map names its keys (default: the keys are graph nodes);
* a **layout** per node where yours differs from the graph's (``(name, layout)``: heads last
  versus the graph's :math:`(H, n, d_h)`, a fused :math:`[Q\,|\,K\,|\,V]`, a transpose):
  :func:`heads_first`, :func:`chunk`, :func:`compose`, or any function of a float64 NumPy
  array, applied to one sequence at a time (a batch of one, your model called on
  ``tokens[None]``, is dropped first; a batch of :math:`B` is laid out sequence by
  sequence);
* a **batch**: ``tokens`` of shape ``(B, n)`` (right-padded sequences, ``targets`` with
  ``-100`` at the padding, as :func:`~nlaverify.graph.run.sample_data` draws them for
  ``nlaverify verify --batch``) runs as it is on both sides; every node then carries the
  batch axis first, and the loss is the mean over the targets that are not ``-100``.

**Weights** go one way: the graph's parameters (``params``, default the seeded
:func:`~nlaverify.graph.run.init_params`) into your model, by your ``load(model, params)``,
which receives them as arrays of your framework in your dtype and returns what your model
runs with: a PyTorch state dict ``{name: tensor}`` (run by ``torch.func.functional_call``;
every parameter must be given), the weights a JAX function is called with
(``model(weights, tokens)``), or the loaded equinox module (called as ``loaded(tokens)``).
Since ``load`` is differentiable (transposes, concatenations), the gradient of your loss with
respect to the graph's parameters is your framework's autodiff through ``load`` and your
model: no inverse map is needed, and every gradient is compared in the graph's layout.

**The loss** is yours when your model returns one, else the mean next-token cross-entropy of
your logits, :math:`L = \frac1{|T|}\sum_{t\in T} -\log\operatorname{softmax}(z_t)_{y_t}` over
the positions with a target (``torch.nn.functional.cross_entropy``; on JAX and NumPy the
graph's own ``cross_entropy`` op run on your logits).

**Bounds** are those of your dtype. In float64, node :math:`v` is judged as
:func:`nlaverify.graph.compare.compare` judges a graph evaluation (and
:func:`~nlaverify.interop.hf_verify.verify_hf` a float64 Hugging Face model):
:func:`~nlaverify.graph.compare.node_tolerance` with the graph's longest accumulation
:math:`k`, the node's depth :math:`D_v` and :math:`\kappa` from the reference's magnitude,

.. math:: \frac{\max_\iota |y_\iota - r_\iota|}{\max(1, \max_\iota |r_\iota|)}
          \le C\,\kappa\,D_v\sqrt{k}\,u ;

a parameter's gradient gets depth :math:`2D_{loss}` (forward then backward), and a batch
accumulates a weight's gradient over :math:`k \ge Bn` rows. Below float64 (float32,
bfloat16, float16) that linear composition is loose (float32: 200x to 1800x above the error of
the nanoGPT example's nodes, so a tanh GELU for the exact one passed) or vacuous, and the per-node
bounds of :mod:`nlaverify.precision` apply, relative to the node's own size
(:func:`~nlaverify.precision.bounds.node_bounds`: the accumulation each node depends on, its
rounding stages composed at random, its local condition estimate; bfloat16/float16 sums
accumulated in ``accumulation``, float32 as PyTorch's and XLA's kernels do; TF32 or bfloat16
matmul operands where your framework is set to them: JAX on a GPU or TPU unless
pinned to ``"highest"``, PyTorch's ``float32_matmul_precision``). Measured
in float32 on the two examples (seeds 0-19 at :math:`n = 8`; :math:`n = 16` and padded
batches of 3 and 8 on 3 to 10 seeds more):
worst error/bound 0.20 (nanoGPT, a key weight's gradient) and 0.07 (equinox), against 0.005
and 0.002 under the linear bound. A derived bound of 1 or more (a quantity zero up to
rounding, e.g. the key bias's gradient) says no digit is meaningful relative to the quantity
itself: such a node is judged by the linear bound against the unit scale instead, and
skipped where that is 1 or more too (bfloat16). The parameters are rounded to your dtype
before anything runs, so both sides start from the same numbers and only arithmetic is
measured.

Rows follow the graph's topological order, so the first failing row is the first divergent
node (named in the report's notes, with the source of your value); the gradients come last.

Seed: Baggag & Saad §2.6 (back-propagation as a chain of stages, each checked against its
reference), §3.3-§3.9 (the blocks); Higham & Mary (2019) for the bounds.
"""


from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import networkx as nx
import numpy as np

from nlaverify.check.adapters import to_float64
from nlaverify.check.model_run import (
    _dtype_of,
    _framework_of,
    _matmul_products,
    _run_functional,
    _run_torch,
)
from nlaverify.check.model_taps import (
    Layout,
    _data,
    _expand,
    _layout,
    _Tap,
    chunk,
    compose,
    heads_first,
)
from nlaverify.check.report import (
    CheckError,
    CheckReport,
    Row,
    compare_arrays,
    error_row,
    inconclusive_row,
    skip_row,
)
from nlaverify.tolerance import Tolerance

__all__ = ["Layout", "check_model", "chunk", "compose", "heads_first"]


# --- the bounds ---------------------------------------------------------------------

@dataclass
class _Bounds:
    """``bound(node, gradient) -> (tolerance, floor)`` of the module docstring, with the
    terms it is built from (``k``, the depths) for adapters that judge a node twice."""

    graph: nx.DiGraph
    ev: Any
    dtype: str
    n: int
    rows: int
    accumulation: str
    products: str | None = None
    k: int = 0
    depth: dict[str, int] = field(default_factory=dict)
    _per_node: Any = None

    def __post_init__(self) -> None:
        from nlaverify.graph.compare import accumulation_length, node_depths

        # a weight's gradient sums over every token row of the batch, as graph.compare has it
        self.k = max(accumulation_length(self.graph, self.n), self.rows)
        self.depth = node_depths(self.graph)
        if self.dtype != "float64":
            from nlaverify.precision.bounds import node_bounds

            # float32 sums accumulate in float32 itself; bfloat16/float16 in ``accumulation``
            acc = None if self.dtype == "float32" else self.accumulation
            self._per_node = node_bounds(self.graph, self.ev, self.dtype, self.n,
                                         accumulation=acc, products=self.products,
                                         rows=self.rows)

    def linear(self, dtype: str, node: str, gradient: bool) -> Tolerance:
        r"""The linear composition :math:`C\kappa D\sqrt{k}u` of ``dtype`` at ``node``."""
        from nlaverify.graph.compare import node_tolerance

        depth = 2 * self.depth["loss"] if gradient else self.depth[node]
        return node_tolerance(dtype, self.k, depth, self.ev.values[node])

    def __call__(self, node: str, gradient: bool) -> tuple[Tolerance, float]:
        if self._per_node is None:
            return self.linear(self.dtype, node, gradient), 1.0
        b = self._per_node[node]
        tol = b.cotangent if gradient else b.value
        assert tol is not None
        if tol.rtol < 1.0:
            return tol, 0.0
        # zero up to rounding (the key bias's gradient): no digit of it is meaningful
        # relative to itself, but its size against the unit scale still is, where the
        # linear bound of this dtype is below 1 (float32; bfloat16's then skips too)
        lin = self.linear(self.dtype, node, gradient)
        return replace(lin, reason=f"{lin.reason}, against max(1, |r|): the derived bound "
                                   f"{tol.rtol:.3g} >= 1 (zero up to rounding)"), 1.0


def _judge(subject: str, check: str, got: Any, ref: Any, tol: Tolerance, floor: float,
           label: str, source: str) -> Row:
    if tol.rtol >= 1.0:  # admits any answer of the right size: nothing meaningful to judge
        return inconclusive_row(subject, check, f"bound {tol.rtol:.3g} >= 1 ({tol.reason}): "
                                "it admits any answer of this size, no digit is meaningful "
                                "here", resolution=tol.rtol, where=label)
    row = compare_arrays(subject, check, got, ref, tol, label=label, floor=floor)
    return replace(row, reason=f"yours: {source}; {row.reason}")


def check_model(
    model: Any, config: Any, params: Mapping[str, Any] | None = None, tokens: Any = None, *,
    load: Callable[[Any, Mapping[str, Any]], Any] | None = None,
    intermediates: Mapping[str, str | tuple[str, Layout]] | None = None,
    dtype: str | None = None, targets: Any = None,
    call: Callable[[Any, Any, Any], Any] | None = None, framework: str | None = None,
    batched: bool | None = None, gradients: bool = True, accumulation: str = "float32",
    seed: int = 0, subject: str | None = None,
) -> CheckReport:
    r"""Check ``model`` node by node against the graph of ``config`` (module docstring).

    Args:
        model: a ``torch.nn.Module``; a JAX or NumPy function ``model(weights, tokens)``; or
            an equinox module (called as ``load(model, params)(tokens)``). It returns logits
            ``(n, V)`` (or ``(1, n, V)``), PyTorch also ``(logits, loss)``, JAX/NumPy
            ``(logits, intermediates)`` or ``(logits, intermediates, loss)``.
        config: the :class:`~nlaverify.config.TransformerConfig` your model implements.
        params: the graph's parameters (node name -> array; default
            :func:`~nlaverify.graph.run.init_params` of ``seed``), rounded to ``dtype``.
        tokens: ids ``(n,)``, ``2 <= n <= context`` (default: ``min(8, context)`` seeded
            ids and their next tokens as targets).
        load: ``load(model, params) -> weights`` (module docstring); the params arrive as
            arrays of your framework in ``dtype``. Required for PyTorch; on JAX/NumPy the
            default passes the graph's parameter dict itself.
        intermediates: graph node -> your name, or ``(name, layout)``; ``{l}`` in a node
            runs over the blocks. PyTorch names are module paths (``path`` for its output,
            ``path:input`` for its first input); JAX/NumPy names are keys of the returned
            dict (default: every returned key is a graph node). ``logits`` (your model's
            output) and ``loss`` are always compared.
        dtype: your model's dtype (default: its parameters', else float64); the bounds are
            those of ``dtype``.
        targets: ids ``(n,)`` of the next tokens (``-100``: none); default ``tokens[1:]``
            and none at the last position.
        call: PyTorch: ``call(model, tokens, targets)`` runs your model (default
            ``model(tokens)``), e.g. nanoGPT's ``lambda m, x, y: m(x, y)``.
        framework: ``"torch"``, ``"jax"`` or ``"numpy"`` where detection guesses wrong.
        batched: call your model on a batch of one, ``tokens[None]`` (default: PyTorch yes,
            JAX/NumPy no); a leading axis of 1 is then dropped from every capture.
        gradients: compare every parameter's gradient (frameworks with autodiff).
        accumulation: bfloat16/float16: the precision your sums accumulate in.
        subject: the report's name for your model (default: its type or function name).

    Returns:
        a :class:`~nlaverify.check.report.CheckReport`: one row per mapped node in
        topological order (the first failing row is the first divergent node, named in the
        notes), then one per parameter gradient.

    Raises:
        CheckError: bad input, naming the argument: an unknown node or module, a key your
            model does not return, a node mapped twice, a capture of the wrong shape, a model
            or ``load`` that raises, tied parameters given two tensors, an output that is not
            an array, logits that are not floating or not one row of ``vocab_size`` per token.
            Your model runs on a copy of ``tokens`` and ``targets``: a model that changes them
            in place is noted in the report, and the reference and loss keep the originals.
    """
    return _compare_model(model, config, params, tokens, load=load,
                          intermediates=intermediates, dtype=dtype, targets=targets, call=call,
                          framework=framework, batched=batched, gradients=gradients,
                          accumulation=accumulation, seed=seed, subject=subject).report


@dataclass
class ModelComparison:
    """What :func:`check_model` judged, for adapters that build their own report on its rows
    (:func:`~nlaverify.interop.hf_verify.verify_hf`): the report, the graph and its float64
    evaluation, the data, the bounds, your values in the graph's layout (node -> (value,
    source)), the op nodes you did not map, the first divergent node, and your gradients
    (graph parameter -> your framework's array, ``None`` where none reached it)."""

    report: CheckReport
    graph: nx.DiGraph
    ev: Any
    data: dict[str, np.ndarray]
    bound: _Bounds
    yours: dict[str, tuple[np.ndarray, str]]
    unmapped: list[str]
    first: str | None
    grads: dict[str, Any] | None


def _compare_model(
    model: Any, config: Any, params: Mapping[str, Any] | None = None, tokens: Any = None, *,
    load: Callable[[Any, Mapping[str, Any]], Any] | None = None,
    intermediates: Mapping[str, str | tuple[str, Layout]] | None = None,
    dtype: str | None = None, targets: Any = None,
    call: Callable[[Any, Any, Any], Any] | None = None, framework: str | None = None,
    batched: bool | None = None, gradients: bool = True, accumulation: str = "float32",
    seed: int = 0, subject: str | None = None, constants: Mapping[str, Any] | None = None,
) -> ModelComparison:
    """:func:`check_model`, with what its rows were judged on (:class:`ModelComparison`);
    ``constants``: values of the graph's constant inputs passed with the data, replacing
    their defaults (a checkpoint's, e.g. DeepSeek-V3's router bias ``blocks.{l}.mlp.e_bias``,
    :func:`nlaverify.graph.build.graph_constants`)."""
    from nlaverify.config import TransformerConfig
    from nlaverify.errors import NlaverifyError
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import init_params, run_graph
    from nlaverify.precision.check import round_params

    if not isinstance(config, TransformerConfig):
        raise CheckError(f"argument 'config': expected a TransformerConfig, got "
                         f"{type(config).__name__}")
    fw = _framework_of(model, framework)
    if fw == "cupy":
        raise CheckError("argument 'framework': check_model runs PyTorch, JAX or NumPy models; "
                         "run a CuPy model through JAX or NumPy")
    dtype = _dtype_of(model, fw, dtype)
    if dtype == "bfloat16" and fw == "numpy":
        raise CheckError("argument 'dtype': a NumPy model has no bfloat16 arithmetic; check "
                         "it in float32 or float64")
    graph = build_transformer(config)
    if params is None:
        params = init_params(graph, seed)
    elif not isinstance(params, Mapping):
        raise CheckError(f"argument 'params': expected a mapping graph parameter -> array, got "
                         f"{type(params).__name__}")
    data = {**_data(config, tokens, targets, seed), **(constants or {})}
    try:  # the graph's side: float64, the parameters rounded to your dtype
        rounded = round_params({k: to_float64(v, what=f"params[{k!r}]")
                                for k, v in params.items()}, dtype)
        ev = run_graph(graph, "numpy", rounded, data)
    except NlaverifyError as exc:
        if isinstance(exc, CheckError):
            raise
        raise CheckError(f"argument 'params': {exc}") from exc
    if load is None:
        if fw == "torch":
            raise CheckError("argument 'load': a PyTorch model needs load(model, params) -> "
                             "state dict, mapping the graph's parameters to your module's")
        def load(m: Any, p: Mapping[str, Any]) -> Any:
            return p
    if not callable(load):
        raise CheckError(f"argument 'load': expected a function load(model, params), got "
                         f"{type(load).__name__}")
    if batched is None:
        batched = fw == "torch"
    taps = _expand(intermediates or {}, graph, config.n_blocks, fw == "torch")
    can_grad = gradients and fw in ("torch", "jax")
    if fw == "torch":
        run = _run_torch(model, load, call, rounded, data, taps, dtype, batched, can_grad,
                         config)
    else:
        run = _run_functional(model, load, fw, rounded, data,
                              None if intermediates is None else taps, dtype, batched,
                              can_grad, graph)
    subject = subject or getattr(model, "__name__", None) or type(model).__name__
    report = CheckReport(subject, "check_model")
    n = data["tokens"].shape[-1]
    batch = data["tokens"].shape[0] if data["tokens"].ndim == 2 else None

    # your values in the graph's layout
    yours: dict[str, tuple[np.ndarray, str]] = {}
    for t, raw in run["captured"].items():
        yours[t.node] = (_layout(t, raw, tuple(np.shape(ev.values[t.node])), batched,
                                 batch), t.source)
    if "logits" not in yours:
        t = _Tap("logits", "the model's output", "output", None)
        yours["logits"] = (_layout(t, run["logits"], tuple(np.shape(ev.values["logits"])),
                                   batched, batch), "the model's output")
    yours["loss"] = (to_float64(run["loss"], what="loss of model").reshape(()),
                     run["loss_source"])

    bound = _Bounds(graph, ev, dtype, n, int(data["tokens"].size), accumulation,
                    _matmul_products(fw, dtype))
    unmapped, first = [], None
    for node in nx.topological_sort(graph):
        attrs = graph.nodes[node]
        if attrs["kind"] != "op":
            continue
        if node not in yours:
            unmapped.append(node)
            continue
        got, source = yours[node]
        tol, floor = bound(node, False)
        row = _judge(subject, f"node {node}", got, ev.values[node], tol, floor, node,
                     f"{source}, op {attrs['op']}")
        report.rows.append(row)
        if row.verdict == "fail" and first is None:
            first = node
            report.notes.append(f"first divergent node: {node} (op {attrs['op']}; yours: "
                                f"{source})")

    # every parameter gradient, in the graph's layout
    if not gradients:
        report.notes.append("gradients not compared (gradients=False)")
    elif not can_grad:
        report.rows.append(skip_row(subject, "gradients", f"{fw} has no autodiff"))
    elif "grads_error" in run:
        report.rows.append(error_row(subject, "gradients", run["grads_error"]))
    else:
        for p in (v for v in nx.topological_sort(graph) if graph.nodes[v]["kind"] == "param"):
            g = run["grads"].get(p)
            got = np.zeros(np.shape(ev.cotangents[p])) if g is None else to_float64(
                g, what=f"gradient of {p!r}")
            tol, floor = bound(p, True)
            src = "your autodiff through load" + (" (no gradient reached it: 0)" if g is None
                                                  else "")
            report.rows.append(_judge(subject, f"gradient {p}", got, ev.cotangents[p], tol,
                                      floor, p, src))
    if first is None and report.failures:
        report.notes.append(f"first failure: {report.failures[0].check}")
    report.notes.extend(run.get("notes", []))
    if unmapped:
        report.notes.append(f"graph nodes your model does not expose: {', '.join(unmapped)}")
    report.notes.append(f"reference: the nlaverify graph of {config.name} (NumPy float64, "
                        f"hand-derived VJPs) on your dtype's rounded parameters; bounds of "
                        f"{dtype}; " + (f"{n} tokens" if batch is None else
                                        f"a batch of {batch} sequences of {n} tokens"))
    return ModelComparison(report, graph, ev, data, bound, yours, unmapped, first,
                           run.get("grads"))
