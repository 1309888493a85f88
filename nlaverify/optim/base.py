r"""The common ground of the reference update rules (:mod:`nlaverify.optim.rules`): the
:class:`Rule` type, the argument checks and the dtype conventions that every rule shares.

A rule is two pure functions, as in optax: ``init(xp, params) -> state`` and
``update(xp, grads, state, params) -> (updates, state)``. Parameters are a flat
``dict[str, array]`` (:data:`Params`); the state is a pytree of dicts of arrays
(:data:`State`; the step counter :math:`t` is a 0-d int32 array, :func:`zero_count`, an exact
integer on the object namespaces); a learning rate is a number or a schedule ``lr(t)`` of the
step count before the step (:func:`learning_rate`). The powers :math:`\beta^t` of the bias
corrections are taken in float64 (:func:`count_as`, :func:`bias_factor`), and
:func:`typed` keeps updates and state in the dtypes they came in (optax 0.2.8's
conventions). The rules themselves are in :mod:`nlaverify.optim.elementwise` and
:mod:`nlaverify.optim.muon`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.errors import ArgumentError, ShapeError

#: parameters, gradients and updates: a flat mapping name -> array
Params = dict[str, Any]
#: an optimizer state: a pytree of dicts (and tuples) of arrays
State = Any
#: a learning rate: a number, or a schedule of the step count
LearningRate = Any


@dataclass(frozen=True)
class Rule:
    """An update rule: ``init(xp, params) -> state`` and ``update(xp, grads, state, params)
    -> (updates, state)``, both pure (optax's ``GradientTransformation``, with the namespace
    passed explicitly)."""

    name: str
    init: Callable[[Namespace, Params], State]
    update: Callable[..., tuple[Params, State]]


# --------------------------------------------------------------------------- validation


def _symbolic(v: Any) -> bool:
    return type(v).__module__.startswith("sympy")


def check_hyper(rule: str, name: str, value: Any, *, lo: float | None = None,
                hi: float | None = None, lo_open: bool = False, hi_open: bool = False,
                schedule: bool = False) -> Any:
    """A hyperparameter: a finite real number in the stated range (a SymPy expression or a
    0-d array passes unchecked: symbolic proofs, traced values); a schedule (callable) when
    ``schedule``. Raises :class:`ArgumentError` naming the argument."""
    if schedule and callable(value):
        return value
    if _symbolic(value):
        return value
    expected = f"expected a real number{' or a schedule' if schedule else ''}"
    if getattr(value, "shape", None) == () and not isinstance(value, numbers.Real):
        # a 0-d array: its dtype must be real; a concrete one is range-checked like a number,
        # a traced one (no value yet, inside jax.jit) passes unchecked
        if getattr(getattr(value, "dtype", None), "kind", "f") in "bcOSUV" and \
                "float" not in str(getattr(value, "dtype", "")):
            raise ArgumentError(f"{rule}: argument '{name}': {expected}, got a 0-d array of "
                                f"dtype {value.dtype}")
        try:
            f = float(value)
        except Exception:  # a tracer: checked where it becomes concrete
            return value
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"{rule}: argument '{name}': {expected}, got {value!r}")
    else:
        f = float(value)
    bad = not math.isfinite(f)
    if lo is not None:
        bad |= f <= lo if lo_open else f < lo
    if hi is not None:
        bad |= f >= hi if hi_open else f > hi
    if bad:
        rng = (f"{'(' if lo_open else '['}{'-inf' if lo is None else lo}, "
               f"{'inf' if hi is None else hi}{')' if hi_open or hi is None else ']'}")
        raise ArgumentError(f"{rule}: argument '{name}': expected a finite number in {rng}, "
                            f"got {value!r}")
    return value


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape)


def check_tree(rule: str, what: str, tree: Any, ref: Params, ref_what: str = "params") -> None:
    """``tree`` has the keys of ``ref`` and each leaf its shape; a :class:`ShapeError` names
    the key otherwise."""
    _check_arrays(rule, what, tree)
    if set(tree) != set(ref):
        missing, extra = sorted(set(ref) - set(tree)), sorted(set(tree) - set(ref))
        raise ShapeError(f"{rule}: argument '{what}': keys differ from {ref_what}'s: missing "
                         f"{missing}, unexpected {extra}")
    for k, v in tree.items():
        if _shape(v) != _shape(ref[k]):
            raise ShapeError(f"{rule}: argument '{what}': key {k!r}: expected shape "
                             f"{_shape(ref[k])} (as in {ref_what}), got {_shape(v)}")


def const(xp: Namespace, v: Any) -> Any:
    """A hyperparameter as a scalar of ``xp``: fractions exactly on SymPy, symbols as they
    are, floats as Python floats elsewhere (no dtype promotion of float32/bfloat16)."""
    if isinstance(v, Fraction):
        return xp.rational(v.numerator, v.denominator)
    if _symbolic(v) or not isinstance(v, numbers.Real):
        return v
    return xp.const(v)


def zero_count(xp: Namespace) -> Any:
    """The step counter :math:`t = 0`: a 0-d int32 array (an exact 0 on object namespaces)."""
    if xp.object_arrays:
        return xp.asarray(0)
    return xp.asarray(0, dtype=xp.int32)


def check_flag(rule: str, name: str, value: Any) -> bool:
    """A boolean switch (``nesterov``, ``bias_correction``): ``True`` or ``False`` only (a
    string such as ``"no"`` is truthy); :class:`ArgumentError` naming it otherwise."""
    if not isinstance(value, bool):
        raise ArgumentError(f"{rule}: argument '{name}': expected True or False, got "
                            f"{value!r}")
    return value


def check_state(rule: str, state: Any, keys: tuple[str, ...]) -> None:
    """``state`` is a state of this rule's ``init`` (a dict with exactly ``keys``); an
    :class:`ArgumentError` naming the argument otherwise (e.g. another rule's state)."""
    if not isinstance(state, dict) or set(state) != set(keys):
        got = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise ArgumentError(f"{rule}: argument 'state': expected the state of {rule}'s init "
                            f"(keys {sorted(keys)}), got {got}")


def _power_dtype(xp: Namespace) -> Any:
    r"""The dtype of :math:`\beta^t`: float64 where the backend has it (optax computes
    :math:`1 - \beta^t` in the default float, never in the moment's dtype)."""
    return getattr(xp, "float64", None) or xp.float32


def count_as(xp: Namespace, count: Any, like: Any = None) -> Any:
    r"""The counter :math:`t` (an exact int32 in the state) as the exponent of
    :math:`\beta^t`: a float64 scalar (float32 without float64), *not* in ``like``'s dtype:
    in bfloat16 :math:`\beta_2 = 0.999` rounds to 1 and :math:`1 - \beta_2^t` to 0. Exact on
    the object namespaces. ``like`` is accepted for compatibility and unused."""
    if xp.object_arrays:
        return xp.asarray(count)[()]
    return xp.astype(xp.asarray(count), _power_dtype(xp))


def bias_factor(xp: Namespace, beta: Any, count: Any, like: Any) -> Any:
    r""":math:`1 - \beta^t`, computed in float64 (:func:`count_as`) and only then cast to
    ``like``'s dtype (optax's ``tree_bias_correction``: the power in low precision rounds to
    1), so that the division by it runs in the moment's dtype. Exact on SymPy."""
    f = 1 - const(xp, beta) ** count_as(xp, count)
    return f if xp.object_arrays else xp.astype(f, like.dtype)


def keep_dtypes(xp: Namespace, new: Any, old: Any) -> Any:
    """``new`` with every array leaf cast to the dtype of the matching leaf of ``old`` (same
    tree): NumPy's bfloat16 (ml_dtypes) promotes ``array * python_float`` to float32, JAX
    does not; casting back keeps updates and state in the parameters' dtypes everywhere."""
    if xp.object_arrays:
        return new
    if isinstance(new, dict) and isinstance(old, dict):
        return {k: keep_dtypes(xp, v, old[k]) if k in old else v for k, v in new.items()}
    if isinstance(new, (tuple, list)) and isinstance(old, (tuple, list)) and len(new) == len(
            old):
        items = [keep_dtypes(xp, a, b) for a, b in zip(new, old, strict=True)]
        return type(new)(*items) if hasattr(new, "_fields") else type(new)(items)
    dt = getattr(old, "dtype", None)
    if dt is not None and getattr(new, "dtype", dt) != dt:
        return xp.astype(new, dt)
    return new


def typed(update: Callable[..., tuple[Params, State]]) -> Callable[..., tuple[Params, State]]:
    """``update`` with its updates in the gradients' dtypes and its new state in the old
    state's dtypes (:func:`keep_dtypes`); a no-op where they already agree (JAX)."""

    def wrapped(xp: Namespace, grads: Params, state: State,
                params: Params | None = None) -> tuple[Params, State]:
        out, new = update(xp, grads, state, params)
        return keep_dtypes(xp, out, grads), keep_dtypes(xp, new, state)

    wrapped.__doc__ = update.__doc__
    return wrapped


def learning_rate(xp: Namespace, lr: LearningRate, count: Any) -> Any:
    """:math:`\\eta_t`: ``lr(t)`` for a schedule (``t`` the count before the step), else
    ``lr``."""
    return lr(count) if callable(lr) else const(xp, lr)


def _params_for(rule: str, grads: Params, ref: Params, params: Params | None,
                need: bool, ref_what: str = "the state") -> None:
    check_tree(rule, "grads", grads, ref, ref_what)
    if params is not None:
        check_tree(rule, "params", params, grads, "grads")
    elif need:
        raise ArgumentError(f"{rule}: argument 'params': required (weight decay), got None")


def _zeros(xp: Namespace, params: Params) -> Params:
    return {k: xp.zeros_like(v) for k, v in params.items()}


def _check_arrays(rule: str, what: str, tree: Any) -> Params:
    """``tree`` is a dict name -> array, else a ShapeError naming ``what`` (and the key)."""
    if not isinstance(tree, dict):
        raise ShapeError(f"{rule}: argument '{what}': expected a dict name -> array, got "
                         f"{type(tree).__name__}")
    for k, v in tree.items():
        if not hasattr(v, "shape"):
            raise ShapeError(f"{rule}: argument '{what}': key {k!r}: expected an array, got "
                             f"{type(v).__name__}")
    return tree


def _check_params(rule: str, params: Any) -> Params:
    return _check_arrays(rule, "params", params)


__all__ = [
    "LearningRate",
    "Params",
    "Rule",
    "State",
    "bias_factor",
    "check_flag",
    "check_hyper",
    "check_state",
    "check_tree",
    "const",
    "count_as",
    "keep_dtypes",
    "learning_rate",
    "typed",
    "zero_count",
]
