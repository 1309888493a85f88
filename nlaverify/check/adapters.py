"""One adapter layer between users' frameworks and nlaverify: arrays in and out, autodiff.

A user's callable is written in NumPy, JAX, PyTorch or CuPy. Inputs are drawn once in
float64 NumPy, with values exactly representable in the user's dtype, and handed to the
framework by :func:`to_framework`; outputs come back by :func:`to_float64`, through
DLPack where the framework exports it (the conversion to float64 happens *inside* the
framework first, which is exact, because NumPy's DLPack has no bfloat16). The framework's
own autodiff (``jax.vjp``/``jax.jvp``, ``torch.autograd.grad``/``torch.func.jvp``)
stands in for a VJP or JVP the user does not write.

torch and CuPy are optional: naming a framework that is not installed raises
:class:`~nlaverify.check.report.CheckError` naming the argument.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nlaverify.check.report import CheckError

FRAMEWORKS = ("numpy", "jax", "torch", "cupy")
DTYPES = ("float64", "float32", "bfloat16", "float16")

__all__ = [
    "DTYPES",
    "FRAMEWORKS",
    "autodiff_jvp",
    "autodiff_vjp",
    "detect_framework",
    "framework_dtype",
    "require_framework",
    "to_float64",
    "to_framework",
]

_MODULE = {"numpy": "numpy", "jax": "jax", "torch": "torch", "cupy": "cupy"}


def require_framework(framework: str, *, argument: str = "framework") -> Any:
    """The framework's module, imported; an unknown or missing one is a :class:`CheckError`
    naming ``argument``."""
    if framework not in FRAMEWORKS:
        raise CheckError(f"argument {argument!r}: expected one of {', '.join(FRAMEWORKS)}, "
                         f"got {framework!r}")
    try:
        mod = importlib.import_module(_MODULE[framework])
    except ImportError as exc:
        hint = {"torch": "pip install torch", "cupy": "pip install 'nlaverify[cuda12]' (or "
                "cuda13) on a machine with a GPU"}.get(framework, f"pip install {framework}")
        raise CheckError(f"argument {argument!r}: framework {framework!r} is not installed "
                         f"({hint})") from exc
    if framework == "jax":
        mod.config.update("jax_enable_x64", True)
    if framework == "cupy":
        try:
            mod.cuda.runtime.getDeviceCount()
        except Exception as exc:  # pragma: no cover - needs cupy without a GPU
            raise CheckError(f"argument {argument!r}: CuPy is installed but finds no GPU "
                             f"({type(exc).__name__}: {exc})") from exc
    return mod


def _root(obj: Any) -> str:
    return (getattr(obj, "__module__", None) or type(obj).__module__ or "").split(".", 1)[0]


def detect_framework(fn: Callable[..., Any]) -> str:
    """The framework a callable is written in: a ``torch.nn.Module``, a method of one or of a
    ``torch.autograd.Function`` (``MyFunction.apply``) or a function whose code reads
    ``torch`` is PyTorch; a jitted function or one reading ``jax``/``jnp`` is
    JAX; ``cupy`` likewise; anything else NumPy. Pass ``framework=`` where this guesses
    wrong (e.g. a function that only calls other functions)."""
    if _root(type(fn)) in ("torch", "jax", "jaxlib", "cupy"):
        r = _root(type(fn))
        return "jax" if r == "jaxlib" else r
    owner = getattr(fn, "__self__", None)  # a bound method: MyFunction.apply, module.forward
    owner_cls = owner if inspect.isclass(owner) else type(owner)
    for base in (*type(fn).__mro__, *(owner_cls.__mro__ if owner is not None else ())):
        if _root(base) == "torch":
            return "torch"
    seen = _roots(getattr(fn, "__wrapped__", fn), depth=3, visited=set())
    for fw in ("torch", "cupy", "jax"):
        if fw in seen or (fw == "jax" and "jaxlib" in seen):
            return fw
    return "numpy"


def _roots(obj: Any, depth: int, visited: set[int]) -> set[str]:
    """The top-level packages a function's code refers to: the modules and objects named in
    its code (and in nested functions), the classes' bases, and, ``depth`` levels down, the
    functions it calls (a helper module's own imports)."""
    if id(obj) in visited or depth < 0:
        return set()
    visited.add(id(obj))
    if inspect.isclass(obj):
        return {_root(b) for b in obj.__mro__}
    if not inspect.isfunction(obj):
        return {_root(type(obj))}
    names: set[str] = set()
    stack = [obj.__code__]
    while stack:
        code = stack.pop()
        names |= set(code.co_names)
        stack += [c for c in code.co_consts if inspect.iscode(c)]
    # a framework imported inside the function (``import torch``, ``import jax.numpy as
    # jnp``): the module's name is in the code's names, not in its globals
    found = {n.split(".")[0] for n in names if n.split(".")[0] in ("torch", "jax", "cupy")
             and n not in obj.__globals__}
    cells = dict(zip(obj.__code__.co_freevars, obj.__closure__ or (), strict=False))
    refs = [obj.__globals__.get(name) for name in names]
    for cell in cells.values():
        try:
            refs.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    for ref in refs:
        if ref is None:
            continue
        if inspect.ismodule(ref):
            found.add(ref.__name__.split(".")[0])
        elif inspect.isclass(ref) or inspect.isfunction(ref):
            found |= {_root(ref)} | _roots(ref, depth - 1, visited)
        else:
            found.add(_root(type(ref)))
    return found


def framework_dtype(framework: str, dtype: str) -> Any:
    """The dtype object called ``dtype`` in ``framework`` (``bfloat16`` in NumPy and CuPy
    through ml_dtypes)."""
    if dtype not in DTYPES:
        raise CheckError(f"argument 'dtype': expected one of {', '.join(DTYPES)}, got "
                         f"{dtype!r}")
    mod = require_framework(framework)
    if framework == "torch":
        return getattr(mod, dtype)
    if framework == "jax":
        import jax.numpy as jnp

        return getattr(jnp, dtype)
    if dtype == "bfloat16":
        if framework == "cupy":
            raise CheckError("argument 'dtype': CuPy has no bfloat16 arrays; check a CuPy "
                             "kernel in float16, float32 or float64 (or a JAX-GPU one in "
                             "bfloat16)")
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def to_framework(x: np.ndarray, framework: str, dtype: str | None, *,
                 requires_grad: bool = False) -> Any:
    """``x`` (float64 or integer NumPy) as an array of ``framework`` in ``dtype`` (integers
    keep their dtype, as int64). The values are exact in ``dtype`` by construction, so the
    conversion does not round."""
    mod = require_framework(framework)
    integer = np.issubdtype(np.asarray(x).dtype, np.integer)
    if framework == "torch":
        # np.array, not np.ascontiguousarray: the latter makes a 0-d array (a scalar loss's
        # cotangent) 1-d, which torch.autograd.grad rejects against a 0-d output
        t = mod.from_numpy(np.array(x, dtype=np.int64 if integer else np.float64, order="C"))
        if not integer and dtype is not None:
            t = t.to(framework_dtype("torch", dtype))
        if requires_grad and not integer:
            t.requires_grad_(True)
        return t
    if framework == "jax":
        import jax

        # rounded in NumPy, then placed: a device_put compiles nothing, where a conversion
        # on the device is one XLA compilation per shape
        host = (np.asarray(x, np.int64) if integer else
                np.asarray(x, np.float64).astype(framework_dtype("numpy", dtype or "float64")))
        return jax.device_put(host)
    if framework == "cupy":  # pragma: no cover - needs a GPU
        return mod.asarray(np.asarray(x, np.int64 if integer else np.float64)).astype(
            np.int64 if integer else framework_dtype("cupy", dtype or "float64"))
    if integer:
        return np.asarray(x, dtype=np.int64)
    return np.asarray(x, np.float64).astype(framework_dtype("numpy", dtype or "float64"))


def array_framework(x: Any) -> str | None:
    """The framework of an array (``None`` for anything else)."""
    if isinstance(x, np.ndarray | np.generic):
        return "numpy"
    root = _root(type(x))
    return {"jaxlib": "jax", "jax": "jax", "torch": "torch", "cupy": "cupy"}.get(root)


def to_float64(x: Any, *, what: str = "output") -> np.ndarray:
    """A user's array (NumPy, JAX, torch, CuPy; a Python or NumPy scalar) as float64 NumPy,
    through DLPack where possible. Anything else is a :class:`CheckError` naming ``what``."""
    if isinstance(x, bool | int | float | np.generic):
        return np.asarray(x, dtype=np.float64)
    if isinstance(x, np.ndarray):
        if x.dtype == object or not (np.issubdtype(x.dtype, np.number) or x.dtype.kind == "V"
                                     or "bfloat16" in str(x.dtype)):
            raise CheckError(f"{what}: expected a numeric array, got a NumPy array of dtype "
                             f"{x.dtype}")
        return x.astype(np.float64)
    root = _root(type(x))
    if root == "torch":
        import torch

        if not isinstance(x, torch.Tensor):
            raise CheckError(f"{what}: expected an array, got {type(x).__name__}")
        t = x.detach()
        if t.is_complex():
            raise CheckError(f"{what}: expected a real array, got dtype {t.dtype}")
        t = t.to(torch.float64).cpu().contiguous()
        return np.from_dlpack(t).copy()
    if root in ("jax", "jaxlib"):
        import jax

        if not isinstance(x, jax.Array):
            raise CheckError(f"{what}: expected an array, got {type(x).__name__}")
        if isinstance(x, jax.core.Tracer):
            raise CheckError(f"{what}: got a JAX tracer (was the function called under "
                             "jit/grad by someone else?)")
        return np.asarray(jax.device_get(x)).astype(np.float64)
    if root == "cupy":  # pragma: no cover - needs a GPU
        return np.asarray(x.astype("float64").get())
    raise CheckError(f"{what}: expected an array (NumPy, JAX, torch or CuPy), got "
                     f"{type(x).__name__}")


def autodiff_vjp(fn: Callable[..., Any], framework: str, args: Sequence[Any],
                 real: Sequence[int], G: Any) -> tuple[Any, list[Any]]:
    """``(output, cotangents)`` of ``fn(*args)`` by the framework's reverse mode, with
    respect to the arguments at positions ``real`` (``G`` in the framework, the output's
    dtype). NumPy and CuPy have none: :class:`NotImplementedError`."""
    if framework == "jax":
        import jax

        def f(*reals: Any) -> Any:
            full = list(args)
            for k, r in zip(real, reals, strict=True):
                full[k] = r
            return fn(*full)

        out, pullback = jax.vjp(f, *[args[k] for k in real])
        return out, list(pullback(G.astype(out.dtype)))
    if framework == "torch":
        import torch

        leaves = [args[k].detach().clone().requires_grad_(True) for k in real]
        full = list(args)
        for k, leaf in zip(real, leaves, strict=True):
            full[k] = leaf
        out = fn(*full)
        if not isinstance(out, torch.Tensor):
            raise CheckError(f"output of fn: expected a torch.Tensor, got {type(out).__name__}")
        grads = torch.autograd.grad(out, leaves, grad_outputs=G.to(out.dtype),
                                    allow_unused=True)
        return out, [torch.zeros_like(leaf) if g is None else g
                     for g, leaf in zip(grads, leaves, strict=True)]
    raise NotImplementedError(f"{framework} has no autodiff: pass vjp= (and jvp=) to check "
                              "the derivatives")


def autodiff_jvp(fn: Callable[..., Any], framework: str, args: Sequence[Any],
                 real: Sequence[int], tangents: Sequence[Any]) -> Any:
    """The output tangent of ``fn(*args)`` along ``tangents`` (one per position of
    ``real``) by the framework's forward mode (``jax.jvp``, ``torch.func.jvp``)."""
    def f(*reals: Any) -> Any:
        full = list(args)
        for k, r in zip(real, reals, strict=True):
            full[k] = r
        return fn(*full)

    primals = tuple(args[k] for k in real)
    if framework == "jax":
        import jax

        return jax.jvp(f, primals, tuple(tangents))[1]
    if framework == "torch":
        import warnings

        import torch.func

        with warnings.catch_warnings():
            # torch's forward-mode rules of some ops (masked_fill) go through torch.jit.script,
            # deprecated from torch 2.9: its warning is torch's, not the user's kernel's, and
            # under ``-W error`` it would turn every JVP row into a skip
            warnings.filterwarnings("ignore", message=".*torch.jit.script.*deprecated",
                                    category=DeprecationWarning)
            return torch.func.jvp(f, primals, tuple(tangents))[1]
    raise NotImplementedError(f"{framework} has no forward-mode autodiff: pass jvp=")
