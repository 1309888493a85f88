r"""Running your model for :func:`~nlaverify.check.check_model`: a PyTorch module (forward
hooks, ``torch.func.functional_call`` on the weights your ``load`` returns, autograd
through ``load``), or a JAX / NumPy function or an equinox module (``jax.grad`` through
``load``). Each runner returns your logits, loss, captured intermediates and the gradient
of your loss with respect to the graph's parameters; nothing here compares.

Seed: Baggag & Saad §2.6 (back-propagation through a chain of stages).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import networkx as nx
import numpy as np

from nlaverify.check.adapters import (
    DTYPES,
    detect_framework,
    framework_dtype,
    require_framework,
    to_framework,
)
from nlaverify.check.model_taps import _expand, _Tap, _user_call
from nlaverify.check.report import CheckError

# --- your framework and dtype ------------------------------------------------------

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


def _matmul_products(framework: str, dtype: str) -> str | None:
    r"""The precision a float32 model's matmul operands are rounded to, where your framework
    is told to round them below float32 (``None``: full float32 products).

    JAX on a GPU runs float32 matmuls in TF32 (:math:`u_p = 2^{-11}`) unless pinned by
    ``jax_default_matmul_precision`` to ``"highest"``/``"float32"``, and a TPU in one
    bfloat16 pass (:math:`u_p = 2^{-8}`, ``"high"``: about TF32's); PyTorch follows
    ``torch.get_float32_matmul_precision()`` (``"high"``: TF32, ``"medium"``: bfloat16) and
    ``torch.backends.cuda.matmul.allow_tf32``. The bounds of :mod:`nlaverify.precision`
    then count :math:`u_p` at every node a matmul reaches, as ``nlaverify verify
    --matmul-precision tf32`` does; a precision your own calls pass (``precision=``) is not
    seen here.
    """
    if dtype != "float32":
        return None
    if framework == "jax":
        import jax

        backend = jax.default_backend()
        pinned = str(jax.config.jax_default_matmul_precision or "default").lower()
        if backend == "cpu" or pinned in ("highest", "float32"):
            return None
        if backend == "tpu" and pinned in ("default", "bfloat16", "fastest"):
            return "bfloat16"
        return "tfloat32"
    if framework == "torch":
        import torch

        level = torch.get_float32_matmul_precision()
        if level == "medium":
            return "bfloat16"
        if level == "high" or torch.backends.cuda.matmul.allow_tf32:
            return "tfloat32"
    return None


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
    for names in groups.values():  # functional_call refuses tied names of different tensors
        given = [n for n in names if n in weights]
        if any(weights[n] is not weights[given[0]] for n in given[1:]):
            raise CheckError(f"argument 'load': the model ties {' and '.join(map(repr, given))} "
                             "(one tensor), but load gives them different tensors: give one "
                             "name (or untie the model, and the config's tied_embeddings)")
    if missing:
        raise CheckError(f"argument 'load': no weight for the model's parameter {missing[0]!r}"
                         + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
                         + ": every parameter must come from the graph's")
    state = {k: b.to(tdt) if b.is_floating_point() else b for k, b in buffers.items()
             if k not in weights}
    state.update(weights)
    return state


def _no_module(t: _Tap, modules: Mapping[str, Any], returned: Mapping[str, Any] | None
               ) -> CheckError:
    near = [m for m in modules if m and m.rsplit(".", 1)[-1] == t.name.rsplit(".", 1)[-1]]
    keys = "" if returned is None else (
        f"; nor is it a key of the intermediates your call returned ("
        f"{', '.join(map(repr, list(returned)[:4]))})")
    return CheckError(f"argument 'intermediates': node {t.node!r}: the model has no module "
                      f"{t.name!r}" + (f" (modules like {', '.join(near[:3])})" if near
                                       else "") + keys)


@contextlib.contextmanager
def _hooks(model: Any, taps: Sequence[_Tap], store: dict[tuple[str, str], Any]
           ) -> Iterator[None]:
    """Forward hooks on the modules ``taps`` name (the others are keys of the
    intermediates your ``call`` returns), writing to ``store``; removed on exit."""
    modules = dict(model.named_modules())
    wanted: dict[str, set[str]] = {}
    for t in taps:
        if t.name in modules:
            wanted.setdefault(t.name, set()).add(t.where)
    handles = []
    for path, where in wanted.items():
        # a module's input is read before it runs (a pre-hook): an in-place module (ReLU(
        # inplace=True)) overwrites its input, which a forward hook would read afterwards
        def pre_hook(module: Any, args: Any, path: str = path) -> None:
            store[(path, "input")] = _detach(args[0] if args else None)

        def hook(module: Any, args: Any, output: Any, path: str = path) -> None:
            store[(path, "output")] = _detach(output)
        if "input" in where:
            handles.append(modules[path].register_forward_pre_hook(pre_hook))
        if "output" in where:
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
    if len(out) == 3 and isinstance(out[1], Mapping):  # (logits, intermediates, loss)
        return out[0], out[1], out[2]
    if len(out) == 2 and isinstance(out[1], Mapping):  # (logits, intermediates)
        return out[0], out[1], None
    if len(out) not in (1, 2):
        raise CheckError(f"output of model: expected logits, (logits, loss) or (logits, dict "
                         f"of intermediates, loss), got a {type(out).__name__} of {len(out)} "
                         f"items")
    return out[0], None, out[1] if len(out) == 2 else None


def _check_logits(logits: Any, ids_shape: tuple[int, ...], vocab: int) -> None:
    """Your logits: floating, one row of ``vocab`` per token (before any loss is taken of
    them), else a CheckError naming the output."""
    shape = tuple(logits.shape)
    kind = str(logits.dtype)
    if not any(f in kind for f in ("float", "bfloat")):
        raise CheckError(f"output of model: expected floating logits, got dtype {kind}")
    if (len(shape) < 1 or shape[-1] != vocab
            or int(np.prod(shape[:-1])) != int(np.prod(ids_shape))):
        raise CheckError(f"output of model: expected logits of shape {(*ids_shape, vocab)} "
                         f"(one row of vocab_size={vocab} per token), got {shape}")


def _mutated(given: Sequence[Any], kept: Sequence[Any], equal: Callable[[Any, Any], bool]
             ) -> list[str]:
    """A note for each of tokens, targets that your model changed in place (it ran on a copy;
    the check keeps the originals)."""
    return [f"your model changed its {what} in place (it ran on a copy; the reference and "
            f"the loss use the originals)"
            for what, g, k in zip(("input ids", "targets"), given, kept, strict=True)
            if not equal(g, k)]


def _training_randomness(model: Any) -> list[str]:
    """The modules of ``model`` in training mode that draw random numbers there (dropout
    with p > 0): a ``call`` that switched the model to training mode made them active."""
    import torch

    return [name or type(m).__name__ for name, m in model.named_modules()
            if m.training and isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0]


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

    ids, tgt = (torch.from_numpy(data[k].copy()) for k in ("tokens", "targets"))
    if batched and ids.ndim == 1:  # a batch of one (a batch (B, n) runs as it is)
        ids, tgt = ids[None], tgt[None]
    given = (ids.clone(), tgt.clone())  # yours to change in place; ids, tgt stay the check's
    store: dict[tuple[str, str], Any] = {}
    training = model.training
    model.eval()  # dropout off
    try:
        with _hooks(model, taps, store), torch.enable_grad():
            out = _user_call(lambda: torch.func.functional_call(
                _Wrapped(), {f"inner.{k}": v for k, v in state.items()}, given),
                "model", f"on tokens of shape {tuple(ids.shape)}")
        random_layers = _training_randomness(model)
    finally:
        model.train(training)
    if random_layers:
        raise CheckError(f"argument 'call': it put the model in training mode "
                         f"(model.train()), where {', '.join(random_layers[:3])} draw random "
                         "masks: the outputs are random, so any comparison would be a false "
                         "alarm; the check runs the model in eval mode (do not call train() "
                         "in call, or pass a model whose dropout is 0)")
    logits, returned, loss = _split_output(out, False)
    if not isinstance(logits, torch.Tensor):
        raise CheckError(f"output of model: expected logits, a torch.Tensor, got "
                         f"{type(logits).__name__}")
    _check_logits(logits, tuple(ids.shape), config.vocab_size)
    loss_source = "your model's loss"
    if loss is None:
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=IGNORE_INDEX)
        loss_source = "torch cross_entropy of your logits"
    elif not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise CheckError(f"output of model: expected (logits, loss) with a scalar loss "
                         f"tensor, got {type(loss).__name__}")
    modules = dict(model.named_modules())
    captured = {}
    for t in taps:
        if t.name not in modules:  # a key of the intermediates your call returned
            if returned is None or t.name not in returned or t.where == "input":
                raise _no_module(t, modules, returned)
            captured[replace(t, where="key")] = _detach(returned[t.name])
            continue
        if (t.name, t.where) not in store:
            raise CheckError(f"argument 'intermediates': node {t.node!r}: module {t.name!r} "
                             "never ran during the forward pass")
        captured[t] = store[(t.name, t.where)]
    result: dict[str, Any] = {"logits": logits.detach(), "loss": loss.detach().reshape(()),
                              "loss_source": loss_source, "captured": captured,
                              "notes": _mutated(given, (ids, tgt), torch.equal)}
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
    tok = data["tokens"].copy()  # NumPy arrays go by reference: the check keeps its own
    ids = to_framework(tok[None] if batched and tok.ndim == 1 else tok, framework, None)
    tgt = to_framework(data["targets"].reshape(-1).copy(), framework, None)
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
        _check_logits(logits, tuple(ids.shape), graph.graph["config"].vocab_size)
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
    if taps is None:  # the default map: every key you return must be a graph node
        stray = [k for k in (inter or {}) if not (isinstance(k, str) and k in graph
                                                  and graph.nodes[k]["kind"] == "op")]
        if stray:
            raise CheckError(f"output of model: intermediates key {stray[0]!r} is not an op "
                             "node of the graph, and intermediates= is not given (every key "
                             "is then a node): pass intermediates={node: your key}")
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
        "notes": _mutated((tok, np.asarray(tgt)), (data["tokens"], data["targets"].reshape(-1)),
                          np.array_equal) if framework == "numpy" else [],
        "loss_source": "your model's loss" if own else "nlaverify cross_entropy of your logits"}
    if gradients and framework == "jax":
        import jax

        try:
            grads = jax.jit(jax.grad(lambda p: xp.reshape(split(forward(p))[2], ())))(leaves)
            result["grads"] = dict(grads)
        except Exception as exc:  # a model that runs but cannot be traced
            result["grads_error"] = exc
    return result
