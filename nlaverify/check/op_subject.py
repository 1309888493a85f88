"""The user's side of :func:`nlaverify.check.check_op`: the kernel's arguments in its
framework, what it did to them (an in-place write, an integer output), its calls under
``jax.jit`` and its framework's autodiff, and the reproducer of a failing case."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nlaverify.cases.inputs import OpCaseInput
from nlaverify.check.adapters import (
    array_framework,
    autodiff_jvp,
    autodiff_vjp,
    to_float64,
    to_framework,
)
from nlaverify.check.report import CheckError


def _user_args(case: OpCaseInput, framework: str, dtype: str) -> list[Any]:
    """The case's arguments as arrays of ``framework`` in ``dtype``; an explicit case's
    arrays that already are (the framework's, the dtype's) are handed over as given, so a
    non-contiguous view stays one."""
    out = []
    for k, x in enumerate(case.args):
        integer = np.issubdtype(np.asarray(x).dtype, np.integer)
        mine = case.given[k] if case.given is not None else None
        if mine is not None and array_framework(mine) == framework and (
                integer or _same_dtype(mine, framework, dtype)):
            out.append(mine)
        else:
            out.append(to_framework(x, framework, None if integer else dtype))
    return out


def _same_dtype(x: Any, framework: str, dtype: str) -> bool:
    from nlaverify.check.adapters import framework_dtype

    try:
        return bool(x.dtype == framework_dtype(framework, dtype))
    except Exception:
        return False


def _snapshot(args: list[Any]) -> list[np.ndarray | None]:
    """The arguments as the framework holds them (JAX flushes float32 subnormals), to tell
    an in-place write from the conversion; ``None`` for JAX's immutable arrays."""
    return [None if array_framework(x) == "jax" else to_float64(x, what="argument")
            for x in args]


def _mutated(case: OpCaseInput, before: list[np.ndarray | None],
             args: list[Any]) -> str | None:
    """The first argument the user's function modified in place (``x.mul_()``), or
    ``None``: such a kernel corrupts its caller's tensors (and, in torch, autograd)."""
    for a, x0, x in zip(case.spec.args, before, args, strict=True):
        if x0 is None:
            continue
        if getattr(x, "_version", 0):  # torch counts in-place writes, x.mul_(1) included
            return a.name
        try:
            now = to_float64(x, what=f"argument {a.name!r}")
        except CheckError:
            return a.name
        if now.shape != x0.shape or not np.array_equal(now, x0, equal_nan=True):
            return a.name
    return None


def _integer_output(out: Any) -> str | None:
    """The dtype of an integer or boolean output (a float kernel returning ``int64``:
    truncated values), or ``None`` for a floating one."""
    if isinstance(out, bool | int):
        return type(out).__name__
    dt = getattr(out, "dtype", None)
    if dt is None:
        return None
    if hasattr(out, "is_floating_point"):  # torch
        return None if out.is_floating_point() else str(dt).removeprefix("torch.")
    try:
        kind = np.dtype(dt).kind
    except TypeError:
        return None
    return str(dt) if kind in "biu" else None


def _as_list(x: Any, what: str, n: int) -> list[Any]:
    if isinstance(x, list | tuple):
        items = list(x)
    elif n == 1:
        items = [x]
    else:
        raise CheckError(f"{what}: expected a tuple of {n} arrays (one per real argument), "
                         f"got {type(x).__name__}")
    if len(items) != n:
        raise CheckError(f"{what}: expected {n} arrays (one per real argument), got "
                         f"{len(items)}")
    return items


@dataclass
class _Settings:
    fn: Callable[..., Any]
    vjp: Callable[..., Any] | None
    jvp: Callable[..., Any] | None
    framework: str
    dtype: str
    accumulation: str | None
    products: str | None
    subject: str
    check_jvp: bool
    real: list[int] = field(default_factory=list)
    reference: str = "mpmath"
    #: also run the forward on non-contiguous views (:mod:`nlaverify.check.op_layouts`)
    layouts: bool = True
    #: static values passed by keyword to fn, vjp, jvp (those their signatures name)
    static_kw: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: notes the run adds to the report (once each)
    notes: list[str] = field(default_factory=list)

    def _bound(self, what: str, f: Callable[..., Any]) -> Callable[..., Any]:
        kw = self.static_kw.get(what)
        return functools.partial(f, **kw) if kw else f

    @property
    def call(self) -> Callable[..., Any]:
        """``fn`` with the statics its signature names passed by keyword."""
        return self._bound("fn", self.fn)

    def call_vjp(self, G: Any, *args: Any) -> Any:
        assert self.vjp is not None
        return self._bound("vjp", self.vjp)(G, *args)

    def call_jvp(self, T: Any, *args: Any) -> Any:
        assert self.jvp is not None
        return self._bound("jvp", self.jvp)(T, *args)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def _jitted(self, key: str, f: Callable[..., Any], *args: Any) -> Any:
        """JAX: run ``f`` under ``jax.jit`` (one compilation per shape instead of one per
        primitive); a function that cannot be traced runs eagerly from then on. The jitted
        functions are kept across calls (:data:`_JIT_CACHE`, by the user's function), so a
        second ``check_op`` of the same kernel reuses every compiled shape."""
        if self.framework != "jax":
            return f(*args)
        import jax

        slot = (self.fn, key, tuple(self.real),
                tuple(sorted(self.static_kw.get("fn", {}).items())))
        try:
            cached = _JIT_CACHE.get(slot)
        except TypeError:  # an unhashable callable: no cache
            slot, cached = None, None
        if cached is False:
            return f(*args)
        if cached is None:
            cached = jax.jit(f)
            if slot is not None:
                if len(_JIT_CACHE) >= _JIT_CACHE_SIZE:
                    _JIT_CACHE.clear()
                _JIT_CACHE[slot] = cached
        try:
            return cached(*args)
        except (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError,
                jax.errors.TracerArrayConversionError, jax.errors.TracerIntegerConversionError):
            if slot is not None:
                _JIT_CACHE[slot] = False
            return f(*args)

    def forward(self, args: list[Any]) -> Any:
        return self._jitted("fn", self.call, *args)

    def autodiff_vjp(self, G: Any, args: list[Any]) -> list[Any]:
        fn, fw, real = self.call, self.framework, self.real
        return self._jitted("vjp", lambda G, *a: autodiff_vjp(fn, fw, a, real, G)[1],
                            G, *args)

    def autodiff_jvp(self, T: list[Any], args: list[Any]) -> Any:
        fn, fw, real = self.call, self.framework, self.real
        return self._jitted("jvp", lambda T, *a: autodiff_jvp(fn, fw, a, real, T),
                            T, *args)


#: jitted user functions and their autodiff, by (function, kind, real arguments): reused by
#: later calls of check_op on the same kernel (``False``: the function cannot be traced)
_JIT_CACHE: dict[tuple[Any, ...], Any] = {}
_JIT_CACHE_SIZE = 64


def _source_ref(fn: Callable[..., Any], name: str) -> str:
    mod = getattr(fn, "__module__", None)
    qual = getattr(fn, "__qualname__", None)
    if mod and qual and mod != "__main__" and "<" not in qual and "." not in qual:
        return f"from {mod} import {qual} as {name}"
    return (f"{name} = ...  # your function: define or import it here (it is defined in "
            f"{mod or 'an unnamed module'} as {qual or '?'})")


def _array_code(x: np.ndarray) -> str:
    """NumPy code for ``x`` (non-finite entries as ``inf``/``nan``: the reproducer imports
    them from NumPy)."""
    if np.issubdtype(x.dtype, np.integer):
        return f"np.array({x.tolist()!r}, dtype=np.int64)"
    return f"np.array({np.asarray(x, np.float64).tolist()!r})"


def reproducer(s: _Settings, case: OpCaseInput, op_text: str, options: str) -> str:
    """A snippet that re-runs ``check_op`` on exactly this case."""
    lines = ["import numpy as np", "from numpy import inf, nan  # noqa: F401",
             "from nlaverify.check import check_op",
             _source_ref(s.fn, "fn")]
    if s.vjp is not None:
        lines.append(_source_ref(s.vjp, "vjp"))
    if s.jvp is not None:
        lines.append(_source_ref(s.jvp, "jvp"))
    if op_text == "spec":
        lines.append("spec = ...  # your function's reference: the OpSpec or UserOp given as op")
    lines.append("args = [")
    lines += [f"    {_array_code(np.asarray(a))}," for a in case.args]
    lines.append("]")
    lines.append(f"cotangent = {_array_code(case.cotangent)}")
    lines.append("tangents = [")
    lines += [f"    {_array_code(np.asarray(t))}," for t in case.tangents]
    lines.append("]")
    extra = "".join(f", {k}={k}" for k in ("vjp", "jvp") if getattr(s, k) is not None)
    lines.append(f"report = check_op(fn, {op_text}{extra}, "
                 f"inputs=[(args, cotangent, tangents)]{options})")
    lines.append("print(report)")
    return "\n".join(lines)


# -- the call ------------------------------------------------------------------------------


def _wider_output(out: Any, framework: str, dtype: str) -> str | None:
    """The output's dtype when it is a floating type wider than ``dtype`` (a bfloat16 kernel
    returning float32), else ``None``."""
    from nlaverify.check.adapters import framework_dtype

    got = getattr(out, "dtype", None)
    if got is None or dtype == "float64":
        return None
    try:
        want = framework_dtype(framework, dtype)
        itemsize = getattr(got, "itemsize", None) or np.dtype(str(got).removeprefix(
            "torch.")).itemsize
        want_size = getattr(want, "itemsize", None) or np.dtype(str(want).removeprefix(
            "torch.")).itemsize
    except Exception:
        return None
    return str(got).removeprefix("torch.") if itemsize > want_size else None
