r"""``check_model``: your model, node by node against the nlaverify graph.

Any model callable (a PyTorch ``nn.Module``, a JAX or NumPy function, an equinox module) and
the graph of a :class:`~nlaverify.config.TransformerConfig`
(:func:`~nlaverify.graph.build.build_transformer`) run on the same weights and tokens. The
graph's values and cotangents come from :func:`~nlaverify.graph.run.run_graph` (NumPy,
float64, hand-derived VJPs that the catalogue proves); your model's come from a map of
intermediates you give, graph node :math:`\to` your name:

* **PyTorch**: forward hooks by module name, ``{"blocks.{l}.norm1": "transformer.h.{l}.ln_1"}``
  (``{l}`` runs over the blocks), capturing the module's output, or its first input with
  ``"transformer.h.{l}.ln_2:input"``;
* **JAX, NumPy, equinox**: your model returns ``(logits, intermediates)`` (or ``(logits,
  intermediates, loss)``), a dict; the map names its keys (default: the keys are graph nodes);
* a **layout** per node where yours differs from the graph's (``(name, layout)``: heads last
  versus the graph's :math:`(H, n, d_h)`, a fused :math:`[Q\,|\,K\,|\,V]`, a transpose):
  :func:`heads_first`, :func:`chunk`, :func:`compose`, or any function of a float64 NumPy
  array. A batch of one (your model is called on ``tokens[None]``) is dropped first.

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

**Bounds** are those of your dtype. In float64 and float32, node :math:`v` is judged as
:func:`nlaverify.graph.compare.compare` judges a graph evaluation (and
:func:`~nlaverify.interop.hf_verify.verify_hf` a Hugging Face model):
:func:`~nlaverify.graph.compare.node_tolerance` with the graph's longest accumulation
:math:`k`, the node's depth :math:`D_v` and :math:`\kappa` from the reference's magnitude,

.. math:: \frac{\max_\iota |y_\iota - r_\iota|}{\max(1, \max_\iota |r_\iota|)}
          \le C\,\kappa\,D_v\sqrt{k}\,u ;

a parameter's gradient gets depth :math:`2D_{loss}` (forward then backward). In bfloat16 and
float16 that linear composition is vacuous, and the per-node bounds of
:mod:`nlaverify.precision` apply (:func:`~nlaverify.precision.bounds.node_bounds`: the
accumulation each node depends on, its rounding stages composed at random, its local
condition estimate; sums accumulated in float32, as PyTorch's and XLA's kernels do); a bound
of 1 or more (a quantity zero up to rounding, e.g. the key bias's gradient) is skipped, not
judged. The parameters are rounded to your dtype before anything runs, so both sides start
from the same numbers and only arithmetic is measured.

Rows follow the graph's topological order, so the first failing row is the first divergent
node (named in the report's notes, with the source of your value); the gradients come last.

Seed: Baggag & Saad §2.6 (back-propagation as a chain of stages, each checked against its
reference), §3.3-§3.9 (the blocks); Higham & Mary (2019) for the bounds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import networkx as nx
import numpy as np

from nlaverify.check.adapters import (
    DTYPES,
    detect_framework,
    framework_dtype,
    require_framework,
    to_float64,
    to_framework,
)
from nlaverify.check.report import (
    CheckError,
    CheckReport,
    Row,
    compare_arrays,
    error_row,
    skip_row,
)
from nlaverify.tolerance import Tolerance

#: a function from your captured value (float64 NumPy, batch of one dropped) to the graph's
Layout = Callable[[Any], Any]

__all__ = ["Layout", "check_model", "chunk", "compose", "heads_first"]


# --- layouts ------------------------------------------------------------------------

def heads_first(n_heads: int) -> Layout:
    r"""``(n, H d_h)`` or ``(n, H, d_h)`` (heads last, as most code writes them) to the
    graph's ``(H, n, d_h)``; head :math:`h` is columns :math:`h d_h .. (h+1) d_h - 1`."""
    def f(a: Any) -> np.ndarray:
        a = np.asarray(a)
        return a.reshape(a.shape[0], n_heads, -1).transpose(1, 0, 2)
    return f


def chunk(i: int, parts: int) -> Layout:
    r"""The ``i``-th of ``parts`` equal slices of the last axis: a fused projection
    :math:`[Q\,|\,K\,|\,V]` (``chunk(1, 3)`` is :math:`K`)."""
    def f(a: Any) -> np.ndarray:
        a = np.asarray(a)
        w = a.shape[-1] // parts
        return a[..., i * w:(i + 1) * w]
    return f


def compose(*layouts: Layout) -> Layout:
    """The layouts applied left to right: ``compose(chunk(0, 3), heads_first(H))``."""
    def f(a: Any) -> Any:
        for g in layouts:
            a = g(a)
        return a
    return f


# --- the map from your names to graph nodes -----------------------------------------

@dataclass(frozen=True)
class _Tap:
    """Graph node ``node`` is ``layout`` of your ``name`` (PyTorch: a module's ``where``,
    ``"output"`` or ``"input"``; JAX/NumPy: a key of the returned intermediates)."""

    node: str
    name: str
    where: str
    layout: Layout | None

    @property
    def source(self) -> str:
        return f"{self.name} ({self.where})" if self.where != "key" else f"[{self.name!r}]"


def _expand(intermediates: Any, graph: nx.DiGraph, n_blocks: int, torch_names: bool
            ) -> list[_Tap]:
    """The taps of ``intermediates``, ``{l}`` expanded over the blocks; every node must be an
    op node of the graph."""
    if not isinstance(intermediates, Mapping):
        raise CheckError(f"argument 'intermediates': expected a mapping graph node -> your "
                         f"name (or (name, layout)), got {type(intermediates).__name__}")
    taps: list[_Tap] = []
    for key, value in intermediates.items():
        if isinstance(value, str):
            name, layout = value, None
        elif (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str)
              and callable(value[1])):
            name, layout = value
        else:
            raise CheckError(f"argument 'intermediates': node {key!r}: expected your name (a "
                             f"str) or (name, layout function), got {value!r}")
        if not isinstance(key, str):
            raise CheckError(f"argument 'intermediates': expected graph node names (str), got "
                             f"{key!r}")
        layers = range(n_blocks) if "{l}" in key else [None]
        for layer in layers:
            node = key if layer is None else key.replace("{l}", str(layer))
            mine = name if layer is None else name.replace("{l}", str(layer))
            if node not in graph or graph.nodes[node]["kind"] != "op":
                similar = [n for n in graph if graph.nodes[n]["kind"] == "op"
                           and n.rsplit(".", 1)[-1] == node.rsplit(".", 1)[-1]][:3]
                raise CheckError(f"argument 'intermediates': {node!r} is not an op node of the "
                                 f"graph" + (f" (nodes like {', '.join(similar)})" if similar
                                             else " (see nlaverify.graph.build)"))
            where = "key"
            if torch_names:
                where = "output"
                if ":" in mine:
                    mine, where = mine.rsplit(":", 1)
                    if where not in ("input", "output"):
                        raise CheckError(f"argument 'intermediates': node {node!r}: expected "
                                         f"'module' or 'module:input'/'module:output', got "
                                         f"{name!r}")
            taps.append(_Tap(node, mine, where, layout))
    return taps


# --- inputs -------------------------------------------------------------------------

def _framework_of(model: Any, framework: str | None) -> str:
    if framework is not None:
        require_framework(framework, argument="framework")
        return framework
    if _is_equinox(model):
        return "jax"
    if not callable(model):
        raise CheckError(f"argument 'model': expected a callable (an nn.Module, a JAX or "
                         f"NumPy function, an equinox module), got {type(model).__name__}")
    return detect_framework(model)


def _is_equinox(model: Any) -> bool:
    return any((getattr(b, "__module__", "") or "").split(".")[0] == "equinox"
               for b in type(model).__mro__[1:])


def _dtype_of(model: Any, framework: str, dtype: str | None) -> str:
    """``dtype``, else your model's: its first floating parameter (PyTorch) or leaf
    (equinox), else float64."""
    if dtype is not None:
        if dtype not in DTYPES:
            raise CheckError(f"argument 'dtype': expected one of {', '.join(DTYPES)}, got "
                             f"{dtype!r}")
        return dtype
    found: Any = None
    if framework == "torch":
        found = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    elif _is_equinox(model):
        import jax
        import jax.numpy as jnp

        found = next((x.dtype for x in jax.tree_util.tree_leaves(model)
                      if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating)), None)
    name = str(found).rsplit(".", 1)[-1] if found is not None else "float64"
    if name not in DTYPES:
        raise CheckError(f"argument 'dtype': your model holds {name}; pass dtype= one of "
                         f"{', '.join(DTYPES)}")
    return name


def _check_ids(arr: Any, what: str, config: Any, allow_ignore: bool) -> np.ndarray:
    from nlaverify.ops.loss import IGNORE_INDEX

    a = np.asarray(arr)
    if a.ndim != 1:
        raise CheckError(f"argument {what!r}: expected shape (n,), got {a.shape}")
    if a.dtype.kind not in "iu":
        raise CheckError(f"argument {what!r}: expected integer token ids, got dtype {a.dtype}")
    ok = (a >= 0) & (a < config.vocab_size)
    if allow_ignore:
        ok |= a == IGNORE_INDEX
    if not ok.all():
        bad = int(a[~ok][0])
        raise CheckError(f"argument {what!r}: expected ids in [0, vocab_size="
                         f"{config.vocab_size})" + (f" or {IGNORE_INDEX}" if allow_ignore
                                                    else "") + f", got {bad}")
    return a.astype(np.int64)


def _data(config: Any, tokens: Any, targets: Any, seed: int) -> dict[str, np.ndarray]:
    """Tokens ``(n,)`` and targets (default: the next token, none at the last position)."""
    from nlaverify.graph.run import sample_data
    from nlaverify.ops.loss import IGNORE_INDEX

    if tokens is None:
        return sample_data(config.vocab_size, min(8, config.context), seed)
    tok = _check_ids(tokens, "tokens", config, False)
    if not 2 <= tok.shape[0] <= config.context:
        raise CheckError(f"argument 'tokens': expected 2 <= n <= context={config.context}, "
                         f"got n={tok.shape[0]}")
    if targets is None:
        tgt = np.concatenate([tok[1:], [IGNORE_INDEX]]).astype(np.int64)
    else:
        tgt = _check_ids(targets, "targets", config, True)
        if tgt.shape != tok.shape:
            raise CheckError(f"argument 'targets': expected shape {tok.shape} (as tokens), "
                             f"got {tgt.shape}")
    return {"tokens": tok, "targets": tgt}


def _user_call(fn: Callable[[], Any], argument: str, doing: str) -> Any:
    """``fn()``; anything it raises (but a CheckError) is a CheckError naming
    ``argument``."""
    try:
        return fn()
    except CheckError:
        raise
    except Exception as exc:
        raise CheckError(f"argument {argument!r}: raised {type(exc).__name__} {doing}: "
                         f"{exc}") from exc


# --- PyTorch ------------------------------------------------------------------------

def _torch_state(model: Any, weights: Any, tdt: Any) -> dict[str, Any]:
    """Your ``load``'s state dict, checked (every parameter given once, no unknown key,
    shapes and dtypes right), with the floating buffers in your dtype."""
    import torch

    if not isinstance(weights, Mapping):
        raise CheckError(f"argument 'load': expected it to return a state dict {{name: "
                         f"tensor}} for torch.func.functional_call, got "
                         f"{type(weights).__name__}")
    params = dict(model.named_parameters(remove_duplicate=False))
    buffers = dict(model.named_buffers(remove_duplicate=False))
    for key, value in weights.items():
        target = params.get(key, buffers.get(key))
        if target is None:
            raise CheckError(f"argument 'load': returned weight {key!r}, which the model does "
                             f"not have (parameters like {', '.join(list(params)[:3])})")
        if not isinstance(value, torch.Tensor):
            raise CheckError(f"argument 'load': weight {key!r}: expected a torch.Tensor, got "
                             f"{type(value).__name__}")
        if tuple(value.shape) != tuple(target.shape):
            raise CheckError(f"argument 'load': weight {key!r}: expected shape "
                             f"{tuple(target.shape)}, got {tuple(value.shape)}")
        if target.is_floating_point() and value.dtype != tdt:
            raise CheckError(f"argument 'load': weight {key!r}: expected dtype {tdt}, got "
                             f"{value.dtype}")
    groups: dict[int, list[str]] = {}  # tied parameters: one name per tensor suffices
    for key, p in params.items():
        groups.setdefault(id(p), []).append(key)
    missing = [names[0] for names in groups.values() if not any(n in weights for n in names)]
    if missing:
        raise CheckError(f"argument 'load': no weight for the model's parameter {missing[0]!r}"
                         + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
                         + ": every parameter must come from the graph's")
    state = {k: b.to(tdt) if b.is_floating_point() else b for k, b in buffers.items()
             if k not in weights}
    state.update(weights)
    return state


@contextlib.contextmanager
def _hooks(model: Any, taps: Sequence[_Tap], store: dict[tuple[str, str], Any]
           ) -> Iterator[None]:
    modules = dict(model.named_modules())
    wanted: dict[str, set[str]] = {}
    for t in taps:
        if t.name not in modules:
            near = [m for m in modules if m and m.rsplit(".", 1)[-1] == t.name.rsplit(".", 1)[-1]]
            raise CheckError(f"argument 'intermediates': node {t.node!r}: the model has no "
                             f"module {t.name!r}" + (f" (modules like {', '.join(near[:3])})"
                                                     if near else ""))
        wanted.setdefault(t.name, set()).add(t.where)
    handles = []
    for path, where in wanted.items():
        def hook(module: Any, args: Any, output: Any, path: str = path,
                 where: set[str] = where) -> None:
            if "output" in where:
                store[(path, "output")] = _detach(output)
            if "input" in where:
                store[(path, "input")] = _detach(args[0] if args else None)
        handles.append(modules[path].register_forward_hook(hook))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _detach(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, tuple | list):
        return tuple(_detach(v) for v in value)
    return value


def _split_output(out: Any, returned: bool) -> tuple[Any, Any, Any]:
    """``(logits, intermediates, loss)`` of your model's output: logits; ``(logits, loss)``
    (PyTorch); ``(logits, intermediates)`` or ``(logits, intermediates, loss)`` (JAX, NumPy);
    missing parts are ``None``."""
    if not isinstance(out, tuple | list):
        return out, None, None
    if returned:
        if len(out) not in (2, 3) or not isinstance(out[1], Mapping):
            raise CheckError(f"output of model: expected (logits, dict of intermediates[, "
                             f"loss]), got a {type(out).__name__} of {len(out)} items"
                             + (f", the second a {type(out[1]).__name__}" if len(out) > 1
                                else ""))
        return out[0], out[1], out[2] if len(out) == 3 else None
    if len(out) not in (1, 2):
        raise CheckError(f"output of model: expected logits or (logits, loss), got a "
                         f"{type(out).__name__} of {len(out)} items")
    return out[0], None, out[1] if len(out) == 2 else None


def _run_torch(model: Any, load: Callable[..., Any], call: Callable[..., Any] | None,
               params: Mapping[str, np.ndarray], data: Mapping[str, np.ndarray],
               taps: Sequence[_Tap], dtype: str, batched: bool, gradients: bool,
               config: Any) -> dict[str, Any]:
    import torch

    from nlaverify.ops.loss import IGNORE_INDEX

    if not isinstance(model, torch.nn.Module):
        raise CheckError(f"argument 'model': a PyTorch model must be a torch.nn.Module (for "
                         f"forward hooks), got {type(model).__name__}")
    tdt = framework_dtype("torch", dtype)
    leaves = {k: to_framework(v, "torch", dtype, requires_grad=gradients)
              for k, v in params.items()}
    weights = _user_call(lambda: load(model, leaves), "load", "loading the graph's parameters")
    state = _torch_state(model, weights, tdt)

    class _Wrapped(torch.nn.Module):  # functional_call runs forward(); ``call`` runs yours
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, ids: Any, tgt: Any) -> Any:
            return self.inner(ids) if call is None else call(self.inner, ids, tgt)

    ids, tgt = (torch.from_numpy(data[k]) for k in ("tokens", "targets"))
    if batched:
        ids, tgt = ids[None], tgt[None]
    store: dict[tuple[str, str], Any] = {}
    training = model.training
    model.eval()  # dropout off
    try:
        with _hooks(model, taps, store), torch.enable_grad():
            out = _user_call(lambda: torch.func.functional_call(
                _Wrapped(), {f"inner.{k}": v for k, v in state.items()}, (ids, tgt)),
                "model", f"on tokens of shape {tuple(ids.shape)}")
    finally:
        model.train(training)
    logits, _, loss = _split_output(out, False)
    if not isinstance(logits, torch.Tensor):
        raise CheckError(f"output of model: expected logits, a torch.Tensor, got "
                         f"{type(logits).__name__}")
    loss_source = "your model's loss"
    if loss is None:
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=IGNORE_INDEX)
        loss_source = "torch cross_entropy of your logits"
    elif not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise CheckError(f"output of model: expected (logits, loss) with a scalar loss "
                         f"tensor, got {type(loss).__name__}")
    captured = {}
    for t in taps:
        if (t.name, t.where) not in store:
            raise CheckError(f"argument 'intermediates': node {t.node!r}: module {t.name!r} "
                             "never ran during the forward pass")
        captured[t] = store[(t.name, t.where)]
    result: dict[str, Any] = {"logits": logits.detach(), "loss": loss.detach().reshape(()),
                              "loss_source": loss_source, "captured": captured}
    if gradients:
        try:
            grads = torch.autograd.grad(loss.reshape(()), list(leaves.values()),
                                        allow_unused=True)
            result["grads"] = {k: (None if g is None else g.detach())
                               for k, g in zip(leaves, grads, strict=True)}
        except RuntimeError as exc:
            result["grads_error"] = exc
    return result


# --- JAX, NumPy, equinox ------------------------------------------------------------

def _run_functional(model: Any, load: Callable[..., Any], framework: str,
                    params: Mapping[str, np.ndarray], data: Mapping[str, np.ndarray],
                    taps: Sequence[_Tap] | None, dtype: str, batched: bool, gradients: bool,
                    graph: nx.DiGraph) -> dict[str, Any]:
    """Your function (or equinox module) forward, and ``jax.grad`` of its loss through
    ``load``. ``taps=None``: every key of the returned intermediates is a graph node."""
    from nlaverify.backends import get_namespace
    from nlaverify.ops.registry import get_op

    eqx = _is_equinox(model)
    leaves = {k: to_framework(v, framework, dtype) for k, v in params.items()}
    ids = to_framework(data["tokens"][None] if batched else data["tokens"], framework, None)
    tgt = to_framework(data["targets"], framework, None)
    xp = get_namespace("jax" if framework == "jax" else "numpy")
    ce = get_op("cross_entropy")

    def forward(p: Mapping[str, Any], wrap: bool = True) -> Any:
        guard = _user_call if wrap else (lambda f, *_: f())
        w = guard(lambda: load(model, p), "load", "loading the graph's parameters")
        if eqx:
            if not callable(w):
                raise CheckError(f"argument 'load': expected it to return the loaded equinox "
                                 f"module, got {type(w).__name__}")
            return guard(lambda: w(ids), "model", f"on tokens of shape {ids.shape}")
        return guard(lambda: model(w, ids), "model", f"on tokens of shape {ids.shape}")

    def split(out: Any) -> tuple[Any, Any, Any, bool]:
        """``(logits, intermediates, loss, returned_loss)``, the loss computed if not
        returned."""
        returned = isinstance(out, tuple | list) and len(out) > 1
        logits, inter, loss = _split_output(out, True) if returned else (out, None, None)
        if not hasattr(logits, "shape") or not hasattr(logits, "dtype"):
            raise CheckError(f"output of model: expected logits, an array, got "
                             f"{type(logits).__name__}")
        own = loss is not None
        if not own:
            loss = ce.forward(xp, xp.reshape(logits, (-1, logits.shape[-1])), tgt)
        return logits, inter, loss, own

    parts = None
    if framework == "jax":  # one compilation, not one per primitive; eager if it fails
        import jax

        traced: list[bool] = []

        def jitted(p: Mapping[str, Any]) -> Any:
            *head, own = split(forward(p, False))
            traced.append(own)
            return tuple(head)

        with contextlib.suppress(Exception):
            parts = (*jax.jit(jitted)(leaves), traced[-1])
    logits, inter, loss, own = split(forward(leaves)) if parts is None else parts
    if taps is None:
        taps = _expand({k: k for k in (inter or {})}, graph, 0, False)
    elif taps and inter is None:
        raise CheckError("output of model: expected (logits, dict of intermediates[, loss]) "
                         "for the intermediates you map, got only logits")
    captured = {}
    for t in taps:
        if t.name not in inter:
            raise CheckError(f"argument 'intermediates': node {t.node!r}: your model's "
                             f"intermediates have no key {t.name!r} (keys: "
                             f"{', '.join(map(repr, list(inter)[:6]))})")
        captured[t] = inter[t.name]
    result: dict[str, Any] = {
        "logits": logits, "loss": loss, "captured": captured,
        "loss_source": "your model's loss" if own else "nlaverify cross_entropy of your logits"}
    if gradients and framework == "jax":
        import jax

        try:
            grads = jax.jit(jax.grad(lambda p: xp.reshape(split(forward(p))[2], ())))(leaves)
            result["grads"] = dict(grads)
        except Exception as exc:  # a model that runs but cannot be traced
            result["grads_error"] = exc
    return result


# --- the comparison -----------------------------------------------------------------

def _layout(t: _Tap, raw: Any, shape: tuple[int, ...], batched: bool) -> np.ndarray:
    """Your captured value in the graph's layout, or a CheckError naming the node."""
    what = f"intermediate {t.source} (node {t.node!r})"
    if isinstance(raw, tuple):
        if t.layout is None:
            raise CheckError(f"argument 'intermediates': node {t.node!r}: {t.source} is a "
                             f"tuple of {len(raw)}; pass (name, layout) to pick from it")
        value: Any = tuple(to_float64(r, what=what) if r is not None and not isinstance(
            r, str | bool | int | float) else r for r in raw)
    else:
        if raw is None:
            raise CheckError(f"argument 'intermediates': node {t.node!r}: {t.source} is None")
        value = to_float64(raw, what=what)
        if batched and value.ndim > 0 and value.shape[0] == 1:
            value = value[0]  # the batch of one
    if t.layout is not None:
        value = _user_call(lambda: t.layout(value), "intermediates",
                           f"in the layout of node {t.node!r}")
        value = to_float64(value, what=f"layout of node {t.node!r}")
    if value.shape != shape:
        hint = "" if t.layout is not None else "; pass (name, layout) with a layout function"
        raise CheckError(f"argument 'intermediates': node {t.node!r} ({t.source}): expected "
                         f"shape {shape} (the graph's layout), got {value.shape}{hint}")
    return value


def _bound_model(graph: nx.DiGraph, ev: Any, dtype: str, n: int, accumulation: str
                 ) -> Callable[[str, bool], tuple[Tolerance, float]]:
    """``bound(node, gradient) -> (tolerance, floor)`` of the module docstring."""
    from nlaverify.graph.compare import accumulation_length, node_depths, node_tolerance

    if dtype in ("float64", "float32"):
        k = accumulation_length(graph, n)
        depth = node_depths(graph)
        d_out = depth["loss"]

        def linear(node: str, gradient: bool) -> tuple[Tolerance, float]:
            ref = ev.values[node]
            return node_tolerance(dtype, k, 2 * d_out if gradient else depth[node], ref), 1.0
        return linear
    from nlaverify.precision.bounds import node_bounds

    bounds = node_bounds(graph, ev, dtype, n, accumulation=accumulation)

    def per_node(node: str, gradient: bool) -> tuple[Tolerance, float]:
        b = bounds[node]
        tol = b.cotangent if gradient else b.value
        assert tol is not None
        return tol, 0.0
    return per_node


def _judge(subject: str, check: str, got: Any, ref: Any, tol: Tolerance, floor: float,
           label: str, source: str) -> Row:
    if tol.rtol >= 1.0:  # admits any answer of the right size: nothing meaningful to judge
        return skip_row(subject, check, f"bound {tol.rtol:.3g} >= 1 ({tol.reason}): it "
                        "admits any answer of this size, no digit is meaningful here")
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
            model does not return, a capture of the wrong shape, a model or ``load`` that
            raises, an output that is not an array.
    """
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
    data = _data(config, tokens, targets, seed)
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
    n = data["tokens"].shape[0]

    # your values in the graph's layout
    yours: dict[str, tuple[np.ndarray, str]] = {}
    for t, raw in run["captured"].items():
        yours[t.node] = (_layout(t, raw, tuple(np.shape(ev.values[t.node])), batched),
                         t.source)
    if "logits" not in yours:
        t = _Tap("logits", "the model's output", "output", None)
        yours["logits"] = (_layout(t, run["logits"], tuple(np.shape(ev.values["logits"])),
                                   batched), "the model's output")
    yours["loss"] = (to_float64(run["loss"], what="loss of model").reshape(()),
                     run["loss_source"])

    bound = _bound_model(graph, ev, dtype, n, accumulation)
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
    if unmapped:
        report.notes.append(f"graph nodes your model does not expose: {', '.join(unmapped)}")
    report.notes.append(f"reference: the nlaverify graph of {config.name} (NumPy float64, "
                        f"hand-derived VJPs) on your dtype's rounded parameters; bounds of "
                        f"{dtype}; {n} tokens")
    return report
