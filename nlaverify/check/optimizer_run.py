r"""The machinery of :func:`~nlaverify.check.optimizer.check_optimizer`: resolving its
arguments (the reference rule, the kind of ``update``), drawing the parameters and gradients
of a case, running the user's step (optax, ``torch.optim``, or a plain step function) and the
float64 reference trajectory. The bound and the report are in :mod:`nlaverify.check.optimizer`,
which imports this module (never the reverse).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from nlaverify.check.adapters import (
    DTYPES,
    FRAMEWORKS,
    detect_framework,
    framework_dtype,
    require_framework,
    to_float64,
    to_framework,
)
from nlaverify.check.report import CheckError
from nlaverify.errors import NlaverifyError
from nlaverify.optim import rules as _r

#: the parameters drawn by default: a wide and a tall matrix (Muon's transpose trick and
#: shape scale, Shampoo's two statistics) and a vector (Muon's AdamW fallback)
DEFAULT_SHAPES: dict[str, tuple[int, ...]] = {"W": (4, 6), "V": (6, 3), "b": (6,)}
DEFAULT_STEPS = 5
#: the gradient matrices are scaled so that their largest singular value is at least this:
#: Muon's quintic diverges above ~1.3 without the normalisation before Newton–Schulz
MIN_TOP_SINGULAR_VALUE = 2.0


def _rules() -> dict[str, Callable[..., _r.Rule]]:
    from nlaverify.optim import muon as _mu

    return {"sgd": _r.sgd, "momentum": _r.momentum,
            "nesterov": partial(_r.momentum, nesterov=True), "adagrad": _r.adagrad,
            "rmsprop": _r.rmsprop, "adam": _r.adam, "nadam": partial(_r.adam, nesterov=True),
            "adamw": _r.adamw, "nadamw": partial(_r.adamw, nesterov=True), "muon": _mu.muon,
            "shampoo": _mu.shampoo}


#: the rule names ``rule`` accepts
RULES: tuple[str, ...] = ("sgd", "momentum", "nesterov", "adagrad", "rmsprop", "adam", "nadam",
                          "adamw", "nadamw", "muon", "shampoo")


# ------------------------------------------------------------------------------ arguments


def _check_dtype(dtype: Any) -> str:
    name = str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1]
    if name not in DTYPES:
        raise CheckError(f"argument 'dtype': expected one of {', '.join(DTYPES)}, got "
                         f"{dtype!r}")
    return name


def _resolve_rule(rule: Any) -> tuple[_r.Rule, dict[str, Any]]:
    """The reference :class:`Rule` and its hyper-parameters (empty for a Rule object)."""
    if isinstance(rule, _r.Rule):
        return rule, {}
    if isinstance(rule, str):
        name, hyper = rule, {}
    elif isinstance(rule, Sequence) and len(rule) == 2 and isinstance(rule[0], str) \
            and isinstance(rule[1], Mapping):
        name, hyper = rule[0], dict(rule[1])
    else:
        raise CheckError(f"argument 'rule': expected a rule name, (name, hyper-parameters) "
                         f"or a nlaverify.optim.rules.Rule, got {rule!r}")
    table = _rules()
    if name not in table:
        raise CheckError(f"argument 'rule': unknown rule {name!r}; known: {', '.join(RULES)}")
    try:
        built = table[name](**hyper)
    except (NlaverifyError, TypeError, ValueError) as exc:
        raise CheckError(f"argument 'rule': {name} with {hyper!r}: {exc}") from exc
    return built, hyper


def _is_torch_optimizer_class(obj: Any) -> bool:
    return isinstance(obj, type) and any(
        b.__name__ == "Optimizer" and b.__module__.startswith("torch.optim")
        for b in obj.__mro__)


def _is_torch_optimizer_instance(obj: Any) -> bool:
    return _is_torch_optimizer_class(type(obj))


def _positional_arity(fn: Callable[..., Any]) -> int | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = list(sig.parameters.values())
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params):
        return 3
    return sum(p.kind in kinds and p.default is inspect.Parameter.empty for p in params)


def _resolve_update(update: Any, framework: str | None, init: Any) -> tuple[str, str]:
    """``(kind, framework)``: kind is ``"optax"``, ``"torch"`` or ``"step"``."""
    if framework is not None and framework not in FRAMEWORKS:
        raise CheckError(f"argument 'framework': expected one of {', '.join(FRAMEWORKS)}, got "
                         f"{framework!r}")
    if init is not None and not callable(init):
        raise CheckError(f"argument 'init': expected a callable init(params) -> state, got "
                         f"{type(init).__name__}")
    if _is_torch_optimizer_instance(update):
        raise CheckError("argument 'update': got a torch.optim.Optimizer instance, which is "
                         "bound to its own parameters; pass the class (torch.optim.AdamW) or "
                         "a factory (lambda params: torch.optim.AdamW(params, lr=...))")
    if not isinstance(update, type) and callable(getattr(update, "init", None)) and callable(
            getattr(update, "update", None)):
        kind, fw = "optax", "jax"
    elif _is_torch_optimizer_class(update):
        kind, fw = "torch", "torch"
    elif callable(update):
        arity = _positional_arity(update)
        if arity == 1:
            kind, fw = "torch", "torch"
        elif arity == 3:
            kind, fw = "step", detect_framework(update)
        else:
            raise CheckError(f"argument 'update': expected an optax GradientTransformation, a "
                             f"torch.optim.Optimizer class, a factory of one argument "
                             f"(params -> optimizer) or a step(params, grads, state) -> "
                             f"(params, state) of three; got a callable of "
                             f"{'unknown' if arity is None else arity} positional arguments")
    else:
        raise CheckError(f"argument 'update': expected an optax GradientTransformation, a "
                         f"torch.optim.Optimizer class or factory, or a step function; got "
                         f"{type(update).__name__}")
    if kind != "step" and init is not None:
        raise CheckError(f"argument 'init': only for a plain step function; a {kind} optimizer "
                         "initialises its own state")
    if framework is not None:
        if kind != "step" and framework != fw:
            raise CheckError(f"argument 'framework': a {kind} optimizer runs on {fw!r}, got "
                             f"{framework!r}")
        fw = framework
    require_framework(fw, argument="framework")
    return kind, fw


def _round(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` rounded to ``dtype`` (an overflow becomes inf, refused by the caller)."""
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float64).astype(framework_dtype("numpy", dtype)).astype(
            np.float64)


def _draw(shapes: Mapping[str, tuple[int, ...]], steps: int, dtype: str, seed: int
          ) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """Parameters and gradients rounded to ``dtype``. Parameters: standard normal entries, half
    of them (drawn at random) scaled by :math:`10^{-U}`, :math:`U` uniform on :math:`[0, 3]`:
    magnitudes spread over three decades, as trained weights are; the small ones are where a
    narrow dtype resolves a small update (:func:`~nlaverify.check.optimizer.update_row`), the
    large ones where a bug proportional to :math:`w` (weight decay) shows. Gradients:
    standard normal, each matrix scaled so that its top singular value is at least
    :data:`MIN_TOP_SINGULAR_VALUE`."""
    rng = np.random.default_rng(seed)
    params = {}
    for k, s in shapes.items():
        small = rng.random(s) < 0.5
        if small.size:  # every leaf holds a small weight: there a narrow dtype resolves
            small.flat[0] = True  # an update (a leaf of six weights of size 1 did not)
        scale = np.where(small, 10.0 ** -rng.uniform(0.0, 3.0, s), 1.0)
        if small.size:
            scale.flat[0] = 1e-3
        params[k] = _round(rng.standard_normal(s) * scale, dtype)
    grads = []
    for _ in range(steps):
        g = {}
        for k, s in shapes.items():
            x = rng.standard_normal(s)
            if len(s) == 2 and min(s) > 0:
                top = float(np.linalg.norm(x, 2))
                x = x * max(1.0, MIN_TOP_SINGULAR_VALUE / top) if top > 0 else x
            g[k] = _round(x, dtype)
        grads.append(g)
    return params, grads


def _leaf(x: Any, dtype: str, what: str) -> np.ndarray:
    if isinstance(x, bool) or not (hasattr(x, "shape") or isinstance(x, list | tuple | float
                                                                        | int)):
        raise CheckError(f"{what}: expected an array, got {type(x).__name__}")
    try:
        a = to_float64(np.asarray(x) if isinstance(x, list | tuple) else x, what=what)
    except CheckError:
        raise
    except Exception as exc:
        raise CheckError(f"{what}: expected a real array, got {type(x).__name__} "
                         f"({type(exc).__name__}: {exc})") from exc
    r = _round(a, dtype)
    if not np.all(np.isfinite(r)):
        raise CheckError(f"{what}: expected finite values in {dtype}, got a non-finite entry")
    return r


def _take(params: Any, grads: Any, steps: int | None, dtype: str, seed: int
          ) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)
                              or steps < 1):
        raise CheckError(f"argument 'steps': expected an integer >= 1, got {steps!r}")
    if params is None:
        shapes = DEFAULT_SHAPES
    else:
        if not isinstance(params, Mapping) or not params:
            raise CheckError(f"argument 'params': expected a non-empty dict name -> array, got "
                             f"{type(params).__name__}")
        p = {}
        for k, v in params.items():
            if not isinstance(k, str):
                raise CheckError(f"argument 'params': keys must be strings, got {k!r}")
            p[k] = _leaf(v, dtype, f"argument 'params': key {k!r}")
        shapes = {k: v.shape for k, v in p.items()}
    if grads is None:
        n = DEFAULT_STEPS if steps is None else steps
        drawn_p, drawn_g = _draw(shapes, n, dtype, seed)
        return (drawn_p if params is None else p), drawn_g
    if isinstance(grads, Mapping) or not isinstance(grads, Sequence) or not grads:
        raise CheckError(f"argument 'grads': expected a non-empty list of dicts name -> array "
                         f"(one per step), got {type(grads).__name__}")
    if steps is not None and steps != len(grads):
        raise CheckError(f"argument 'steps': {steps} steps, but 'grads' holds {len(grads)}")
    if params is None:
        raise CheckError("argument 'params': required with 'grads' (the gradients' shapes "
                         "are the parameters')")
    out = []
    for i, g in enumerate(grads):
        if not isinstance(g, Mapping) or set(g) != set(shapes):
            got = sorted(g) if isinstance(g, Mapping) else type(g).__name__
            raise CheckError(f"argument 'grads': step {i}: expected a dict with the keys of "
                             f"params {sorted(shapes)}, got {got}")
        gi = {}
        for k in shapes:
            gi[k] = _leaf(g[k], dtype, f"argument 'grads': step {i}: key {k!r}")
            if gi[k].shape != shapes[k]:
                raise CheckError(f"argument 'grads': step {i}: key {k!r}: expected shape "
                                 f"{shapes[k]} (as in params), got {gi[k].shape}")
        out.append(gi)
    return p, out


# ------------------------------------------------------------------------------ runners


class _Protocol(Exception):
    """The user's step returned something of the wrong structure."""


def _readback(new: Any, keys: Sequence[str], t: int) -> dict[str, np.ndarray]:
    if not isinstance(new, Mapping):
        raise _Protocol(f"update at step {t}: expected the new params as a dict name -> array, "
                        f"got {type(new).__name__}")
    if set(new) != set(keys):
        missing, extra = sorted(set(keys) - set(new)), sorted(set(new) - set(keys))
        raise _Protocol(f"update at step {t}: the returned params' keys differ from params': "
                        f"missing {missing}, unexpected {extra}")
    out = {}
    for k in keys:
        try:
            out[k] = to_float64(new[k], what=f"params[{k!r}] returned at step {t}")
        except CheckError as exc:
            raise _Protocol(str(exc)) from exc
    return out


class _Runner:
    subject: str

    def start(self, params: dict[str, np.ndarray]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def step(self, grads: dict[str, np.ndarray], t: int) -> dict[str, np.ndarray]:
        raise NotImplementedError  # pragma: no cover - abstract


class _OptaxRunner(_Runner):
    def __init__(self, tx: Any, dtype: str, jit: bool) -> None:
        self.tx, self.dtype, self.jit = tx, dtype, jit
        self.subject = f"optax {type(tx).__name__}"

    def start(self, params: dict[str, np.ndarray]) -> None:
        import jax

        self.keys = list(params)
        self.params = {k: to_framework(v, "jax", self.dtype) for k, v in params.items()}
        self.state = self.tx.init(self.params)
        self.update = jax.jit(self.tx.update) if self.jit else self.tx.update

    def step(self, grads: dict[str, np.ndarray], t: int) -> dict[str, np.ndarray]:
        import jax.numpy as jnp

        g = {k: to_framework(v, "jax", self.dtype) for k, v in grads.items()}
        out = self.update(g, self.state, self.params)
        if not (isinstance(out, tuple | list) and len(out) == 2):
            raise _Protocol(f"update.update at step {t}: expected (updates, state), got "
                            f"{type(out).__name__}")
        u, self.state = out
        _readback(u, self.keys, t)  # the updates' structure
        self.params = {k: jnp.asarray(p + u[k]).astype(p.dtype) for k, p in self.params.items()}
        return _readback(self.params, self.keys, t)


class _TorchRunner(_Runner):
    def __init__(self, make: Any, dtype: str, options: Mapping[str, Any]) -> None:
        self.make, self.dtype, self.options = make, dtype, dict(options)
        self.subject = getattr(make, "__name__", type(make).__name__)

    def start(self, params: dict[str, np.ndarray]) -> None:
        import torch

        self.params = {k: torch.nn.Parameter(to_framework(v, "torch", self.dtype))
                       for k, v in params.items()}
        opt = self.make(list(self.params.values()), **self.options)
        if not isinstance(opt, torch.optim.Optimizer):
            raise CheckError(f"argument 'update': the factory returned {type(opt).__name__}, "
                             f"expected a torch.optim.Optimizer")
        self.opt = opt
        self.subject = type(opt).__name__

    def step(self, grads: dict[str, np.ndarray], t: int) -> dict[str, np.ndarray]:
        for k, p in self.params.items():
            p.grad = to_framework(grads[k], "torch", self.dtype)
        self.opt.step()
        return _readback({k: p.detach() for k, p in self.params.items()}, list(self.params), t)


class _StepRunner(_Runner):
    def __init__(self, fn: Callable[..., Any], init: Callable[..., Any] | None, framework: str,
                 dtype: str) -> None:
        self.fn, self.init, self.fw, self.dtype = fn, init, framework, dtype
        self.subject = getattr(fn, "__qualname__", type(fn).__name__)

    def start(self, params: dict[str, np.ndarray]) -> None:
        self.keys = list(params)
        self.params = {k: to_framework(v, self.fw, self.dtype) for k, v in params.items()}
        self.state = None if self.init is None else self.init(dict(self.params))

    def step(self, grads: dict[str, np.ndarray], t: int) -> dict[str, np.ndarray]:
        g = {k: to_framework(v, self.fw, self.dtype) for k, v in grads.items()}
        out = self.fn(dict(self.params), g, self.state)
        if not (isinstance(out, tuple | list) and len(out) == 2):
            raise _Protocol(f"update at step {t}: expected (params, state), got "
                            f"{type(out).__name__}")
        new, self.state = out
        read = _readback(new, self.keys, t)
        self.params = dict(new)
        return read


# ------------------------------------------------------------------------------ reference


def _reference(rule: _r.Rule, params: dict[str, np.ndarray],
               grads: list[dict[str, np.ndarray]]
               ) -> tuple[list[dict[str, np.ndarray]], list[dict[str, float]], list[Any]]:
    """The reference trajectory :math:`w_1..w_T` (float64 NumPy), the update magnitudes
    :math:`\\|u_s\\|_\\infty` per leaf and the states after each step."""
    from nlaverify.backends import get_namespace

    xp = get_namespace("numpy")
    p = {k: v.copy() for k, v in params.items()}
    try:
        state = rule.init(xp, p)
        traj, mags, states = [], [], []
        for g in grads:
            u, state = rule.update(xp, g, state, p)
            mags.append({k: float(np.max(np.abs(u[k]))) if u[k].size else 0.0 for k in p})
            p = _r.apply_updates(xp, p, u)
            traj.append({k: np.asarray(v, np.float64) for k, v in p.items()})
            states.append(state)
    except NlaverifyError as exc:
        raise CheckError(f"argument 'rule': the reference {rule.name} cannot run on these "
                         f"params: {exc}") from exc
    return traj, mags, states
