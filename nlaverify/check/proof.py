r"""``prove``: the exact proof of *your* op's VJP and JVP, the same proof the catalogue uses.

Write the op once against an array namespace ``xp`` (the functions of the array API that
:mod:`nlaverify.ops` uses: ``xp.sum``, ``xp.exp``, ``xp.sqrt``, ``xp.matmul`` / ``@``,
``xp.matrix_transpose``, ``xp.where`` ...; no in-place updates, no Python ``if`` on array
values, no ``xp.mean`` (divide a sum by the size: exact on SymPy) and no ``xp.max`` in a
formula (``xp.stability_shift`` for the shift before an exponential); docs/check.md lists
the functions):

.. code-block:: python

    def my_rmsnorm(xp, x, gamma, *, eps):
        r = xp.sqrt(xp.sum(x * x, axis=-1, keepdims=True) / x.shape[-1] + eps)
        return x / r * gamma

Then the *same* function runs on NumPy, JAX or CuPy for your model, in mpmath for reference
values, and on the SymPy namespace, where every entry is an independent real symbol. There
:func:`prove` forms, for every entry :math:`a_\iota` of every real argument,

.. math:: \bar a_\iota^{\mathrm{ref}} = \sum_o g_o\,\frac{\partial f_o}{\partial a_\iota},
          \qquad \dot f_o^{\mathrm{ref}} = \sum_{a,\iota}\frac{\partial f_o}{\partial
          a_\iota}\,\dot a_\iota

by :func:`sympy.diff` of your forward's output and requires your VJP's (JVP's) entry minus
it to simplify to exactly 0. A wrong derivative is refuted with the entry and a rational
point where the difference is not 0 (:func:`nlaverify.symbolic.exact.zero_test`).

Seed: Baggag & Saad §2.6 (the VJP as the transpose of the Jacobian).
"""

from __future__ import annotations

import re
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nlaverify.check.report import CheckError, CheckReport, Row
from nlaverify.identities.core import Identity, Proof
from nlaverify.ops.registry import Arg, OpSpec

__all__ = ["UserOp", "prove", "proved_parts", "user_op"]


@dataclass(frozen=True)
class UserOp(OpSpec):
    """An :class:`~nlaverify.ops.registry.OpSpec` for a user's op, whose JVP is given
    (not looked up as ``<forward>_jvp`` in the forward's module)."""

    user_jvp: Callable[..., Any] | None = None
    #: a VJP was given (``user_op(vjp=...)``); without one, ``check_op`` takes the reference
    #: VJP from JAX autodiff of the forward in float64 (not proved), and ``prove`` has no VJP
    #: to prove
    vjp_given: bool = True
    #: the hostile values each argument gets (name, kind of
    #: :data:`~nlaverify.cases.hostile_kinds.HOSTILE_KINDS`), from ``user_op(hostile=...)``
    hostile_kinds: tuple[tuple[str, str], ...] = ()

    @property
    def jvp(self) -> Callable[..., Any] | None:
        return self.user_jvp


#: the derivatives :func:`prove` proved, by UserOp (a weak reference: a spec that is gone
#: takes its record with it)
_PROVED: dict[int, tuple[weakref.ref[UserOp], frozenset[str]]] = {}


def proved_parts(spec: OpSpec) -> frozenset[str]:
    """The derivatives of ``spec`` that :func:`prove` proved exactly in this process
    (``{"vjp", "jvp"}`` or a part; empty for a spec never proved)."""
    entry = _PROVED.get(id(spec))
    if entry is None or entry[0]() is not spec:
        return frozenset()
    return entry[1]


def _no_vjp(xp: Any, G: Any, *args: Any, **static: Any) -> tuple[Any, ...]:
    raise NotImplementedError("no VJP given")


def _arg(name: str, spec: Any) -> Arg:
    if isinstance(spec, Arg):
        return spec
    if isinstance(spec, tuple | list) and all(isinstance(d, str | int) for d in spec):
        return Arg(name, tuple(spec))
    raise CheckError(f"argument 'args': {name!r}: expected a tuple of dimension names or "
                     f"sizes (e.g. ('n', 'd')) or an Arg, got {spec!r}")


def user_op(fn: Callable[..., Any], *, args: Mapping[str, Any], sizes: Mapping[str, int],
            vjp: Callable[..., Any] | None = None, jvp: Callable[..., Any] | None = None,
            static: Mapping[str, Any] | None = None, symbols: Mapping[str, str] | None = None,
            name: str | None = None, seed: str = "user",
            hostile: Mapping[str, str] | None = None) -> UserOp:
    """Your op as a spec: ``fn(xp, *args, **static)``, ``vjp(xp, G, *args, **static)`` (one
    cotangent per real argument), ``jvp(xp, tangents, *args, **static)``; ``args`` maps
    each positional argument's name to its named dimensions (``{"x": ("n", "d")}``, in
    order) or an :class:`~nlaverify.ops.registry.Arg`; ``symbols`` makes a static value a
    positive symbol in the proof (``{"eps": "epsilon"}``). The spec also feeds
    :func:`~nlaverify.check.check_op` (your op as the reference of your kernel), whose
    hostile cases give each argument named in ``hostile`` the values of its kind
    (:data:`~nlaverify.cases.hostile_kinds.HOSTILE_KINDS`: ``"logits"``, ``"scores"``,
    ``"norm_rows"``, ``"activations"``; ``{"Q": "scores", "K": "scores"}`` for attention),
    the other arguments standard normal values, the bound from the statistical condition
    estimate at each case."""
    for what, f in (("fn", fn), ("vjp", vjp), ("jvp", jvp)):
        if f is not None and not callable(f):
            raise CheckError(f"argument {what!r}: expected a callable, got {type(f).__name__}")
    if not isinstance(args, Mapping) or not args:
        raise CheckError(f"argument 'args': expected a non-empty mapping name -> dimensions, "
                         f"got {args!r}")
    arg_list = tuple(_arg(k, v) for k, v in args.items())
    dims = {d for a in arg_list for d in a.dims if isinstance(d, str)}
    missing = sorted(dims - set(sizes))
    if missing:
        raise CheckError(f"argument 'sizes': no size for dimension(s) {', '.join(missing)} "
                         f"(the args use {', '.join(sorted(dims))})")
    bad = {k: v for k, v in sizes.items() if not isinstance(v, int) or isinstance(v, bool)
           or v < 1}
    if bad:
        raise CheckError(f"argument 'sizes': expected ints >= 1, got {bad}")
    for key in symbols or {}:
        if key not in (static or {}):
            raise CheckError(f"argument 'symbols': {key!r} is not a static argument "
                             f"(static: {', '.join(static or {}) or 'none'})")
    kinds = _hostile_kinds(hostile, arg_list)
    label = name or getattr(fn, "__name__", "op")
    return UserOp(label, fn, vjp or _no_vjp, arg_list, seed, "", dict(sizes),
                  {k: (v, v) for k, v in sizes.items()}, dict(static or {}),
                  dict(symbols or {}), user_jvp=jvp, vjp_given=vjp is not None,
                  hostile_kinds=kinds)


def _hostile_kinds(hostile: Mapping[str, str] | None, arg_list: tuple[Arg, ...]
                   ) -> tuple[tuple[str, str], ...]:
    """``user_op``'s ``hostile`` mapping checked: real arguments of the op, known kinds."""
    from nlaverify.cases.hostile_kinds import HOSTILE_KINDS

    if hostile is None:
        return ()
    if not isinstance(hostile, Mapping):
        raise CheckError(f"argument 'hostile': expected a mapping argument name -> kind, got "
                         f"{hostile!r}")
    real = [a.name for a in arg_list if a.kind == "real"]
    for key, kind in hostile.items():
        if key not in real:
            raise CheckError(f"argument 'hostile': {key!r} is not a real argument of the op "
                             f"(real arguments: {', '.join(real) or 'none'})")
        if kind not in HOSTILE_KINDS:
            raise CheckError(f"argument 'hostile': {key!r}: expected a kind among "
                             f"{', '.join(map(repr, HOSTILE_KINDS))}, got {kind!r}")
    return tuple((k, v) for k, v in hostile.items())


_ENTRY = re.compile(r"^(?:output )?entry ([^:]+): (.*)$", re.S)


def _row(subject: str, check: str, proof: Proof, seconds: float) -> Row:
    if proof.verdict == "proved":
        return Row(subject, check, 0.0, 0.0, "pass", "",
                   reason=f"exact: {proof.detail} simplified to 0 ({seconds:.2f} s)")
    m = _ENTRY.match(proof.detail)
    where, why = (m.group(1), m.group(2)) if m else ("", proof.detail)
    return Row(subject, check, float("inf"), 0.0, "fail", where.strip(), reason=why)


def _run(prover: Callable[..., Proof], spec: UserOp, sizes: Mapping[str, int],
         time_limit: float | None) -> tuple[Proof, float]:
    start = time.perf_counter()
    try:
        proof = prover(spec, dict(sizes), time_limit=time_limit)
    except Exception as exc:  # the user's function raised on the exact namespace
        proof = Proof("failed", (), f"raised {type(exc).__name__}: {exc} (on the SymPy "
                                    "namespace: is the op written against xp?)")
    return proof, time.perf_counter() - start


def prove(
    fn: Callable[..., Any] | UserOp,
    *,
    args: Mapping[str, Any] | None = None,
    sizes: Mapping[str, int] | None = None,
    vjp: Callable[..., Any] | None = None,
    jvp: Callable[..., Any] | None = None,
    static: Mapping[str, Any] | None = None,
    symbols: Mapping[str, str] | None = None,
    name: str | None = None,
    time_limit: float | None = 60.0,
    document: str | Path | None = None,
) -> CheckReport:
    r"""Prove your op's VJP and/or JVP exactly (see the module docstring).

    Args:
        fn: your forward ``fn(xp, *args, **static)``, or a :class:`UserOp` from
            :func:`user_op` (then the other arguments but ``time_limit`` and ``document``
            are not given).
        args: ``{name: dims}`` of the positional arguments, in order.
        sizes: the concrete size of every named dimension in the proof (small: every
            entry is a symbol; 2 or 3 per dimension is typical).
        vjp: ``vjp(xp, G, *args, **static)``: one cotangent per real argument.
        jvp: ``jvp(xp, tangents, *args, **static)``: the output tangent.
        static: static keyword values; ``symbols`` turns some into positive symbols.
        time_limit: seconds per entry for the simplification (``None``: no limit).
        document: a path: write the proof as a Markdown document there (atomically), in
            the form of ``nlaverify derive``'s documents.

    Returns:
        A :class:`~nlaverify.check.report.CheckReport` with a row ``vjp (exact)`` and/or
        ``jvp (exact)``: ``pass`` when every entry's difference simplified to 0; ``fail``
        naming the entry (``x[0, 1]``) with the reason and the rational counterexample.
    """
    from nlaverify.symbolic.vjp_proof import prove_jvp, prove_vjp

    if isinstance(fn, UserOp):
        spec = fn
        if any(v is not None for v in (args, sizes, vjp, jvp, static, symbols)):
            raise CheckError("argument 'fn': a UserOp carries its args, sizes, vjp, jvp and "
                             "static values; give them to user_op instead")
    else:
        if args is None or sizes is None:
            raise CheckError("prove: arguments 'args' and 'sizes' are required (the "
                             "dimensions of each argument, and their sizes in the proof)")
        spec = user_op(fn, args=args, sizes=sizes, vjp=vjp, jvp=jvp, static=static,
                       symbols=symbols, name=name)
    has_vjp = spec.vjp is not _no_vjp
    if not has_vjp and spec.jvp is None:
        raise CheckError("prove: nothing to prove: give vjp= and/or jvp=")
    report = CheckReport(spec.name, "prove")
    report.notes.append("exact: your forward differentiated by sympy.diff on the SymPy "
                        f"namespace at sizes {dict(spec.proof_sizes)}")
    proofs: list[tuple[str, Proof]] = []
    if has_vjp:
        proof, sec = _run(prove_vjp, spec, spec.proof_sizes, time_limit)
        report.rows.append(_row(spec.name, "vjp (exact)", proof, sec))
        proofs.append(("VJP", proof))
    if spec.jvp is not None:
        proof, sec = _run(prove_jvp, spec, spec.proof_sizes, time_limit)
        report.rows.append(_row(spec.name, "jvp (exact)", proof, sec))
        proofs.append(("JVP", proof))
    if document is not None:
        write_document(spec, proofs, Path(document))
    done = frozenset(kind.lower() for kind, proof in proofs if proof.verdict == "proved")
    if done:
        _PROVED[id(spec)] = (weakref.ref(spec), done | proved_parts(spec))
    return report


def write_document(spec: UserOp, proofs: Sequence[tuple[str, Proof]], path: Path) -> None:
    """The proofs of ``spec`` as one Markdown document at ``path``, written atomically."""
    from nlaverify.symbolic.document import render_identity, write_atomically

    parts = []
    for kind, proof in proofs:
        fwd = f"{spec.forward.__module__}.{spec.forward.__qualname__}"
        identity = Identity(
            f"{spec.name}_{kind.lower()}", "user", f"the {kind} of `{spec.name}`",
            (r"\bar a = \left(\frac{\partial f}{\partial a}\right)^{\!\top} g" if kind == "VJP"
             else r"\dot f = \sum_a \frac{\partial f}{\partial a}\,\dot a"),
            spec.seed, (fwd,), lambda proof=proof: proof)
        parts.append(render_identity(identity, proof)
                     .replace(f"`nlaverify derive {identity.id}`", "`nlaverify.check.prove`")
                     .replace("`nlaverify derive`", "`nlaverify.check.prove`"))
    write_atomically(path.parent, {path.name: "\n".join(parts)})
