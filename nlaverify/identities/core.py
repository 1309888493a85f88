"""The identity catalogue: data types and the registry.

An :class:`Identity` is one checked fact: a statement in LaTeX, the seed
section it comes from, the functions it certifies (by qualified name), a
``derive`` function that proves it exactly and returns a :class:`Proof`, and
optionally a numeric cross-check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from nlaverify.errors import UnknownNameError

Verdict = Literal["proved", "failed", "error"]


@dataclass(frozen=True)
class Step:
    """One derivation step: prose, and optionally a displayed LaTeX formula."""

    text: str
    latex: str | None = None


@dataclass(frozen=True)
class Proof:
    """The outcome of a derivation: verdict, the steps taken, and what was checked."""

    verdict: Verdict
    steps: tuple[Step, ...]
    detail: str = ""


@dataclass(frozen=True)
class Identity:
    """One entry of the catalogue (see the module docstring)."""

    id: str
    family: str
    title: str
    statement: str
    seed: str
    certifies: tuple[str, ...]
    derive: Callable[[], Proof]
    check: Callable[[], Any] | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)


_REGISTRY: dict[str, Identity] = {}
#: modules that register identities when imported, in document order
CATALOGUE_MODULES: tuple[str, ...] = (
    "nlaverify.identities.lemmas",
    "nlaverify.identities.jacobians",
    "nlaverify.identities.closed_forms",
    "nlaverify.identities.backprop",
    "nlaverify.identities.transformer",
    "nlaverify.identities.batching",
    "nlaverify.identities.curvature",
    "nlaverify.identities.natural_gradient",
    "nlaverify.identities.kronecker",
    "nlaverify.identities.kfac",
    "nlaverify.identities.shampoo",
    "nlaverify.identities.newton_schulz",
    "nlaverify.identities.optimizers",
    "nlaverify.identities.attention",
    "nlaverify.identities.lowrank",
    "nlaverify.identities.lora",
    "nlaverify.identities.geometry",
    "nlaverify.identities.online_softmax",
    "nlaverify.identities.scaling",
    "nlaverify.identities.ssm",
    "nlaverify.identities.ssm_duality",
    "nlaverify.identities.ssm_derivatives",
    "nlaverify.identities.rwkv",
    "nlaverify.identities.interpretability",
    "nlaverify.identities.objectives",
    "nlaverify.identities.decoding",
    "nlaverify.identities.sharding",
    "nlaverify.identities.sharding_shampoo",
    "nlaverify.identities.diffusion",
    "nlaverify.identities.architectures",
    "nlaverify.identities.mla_graph",
    "nlaverify.identities.rope_yarn",
    "nlaverify.identities.moe_routing",
    "nlaverify.identities.moe_deepseek_v2",
)


_ORDER: dict[str, tuple[str, int]] = {}


def register(identity: Identity) -> Identity:
    """Add ``identity`` to the catalogue; ids are unique. The catalogue's order is
    that of :data:`CATALOGUE_MODULES`, then of registration within a module, whatever
    the order in which the modules happened to be imported."""
    import sys

    if identity.id in _REGISTRY:
        raise ValueError(f"identity id {identity.id!r} is registered twice")
    # the module whose top level registers it: a helper that registers for other modules
    # (kronecker's ``_reg``, called by kfac and shampoo) does not decide, so the order does
    # not depend on which of those modules happened to be imported first
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back
    module = frame.f_globals.get("__name__", "")
    _REGISTRY[identity.id] = identity
    _ORDER[identity.id] = (module, len(_ORDER))
    return identity


def _position(identity_id: str) -> tuple[int, int]:
    module, seq = _ORDER[identity_id]
    rank = CATALOGUE_MODULES.index(module) if module in CATALOGUE_MODULES else len(
        CATALOGUE_MODULES)
    return rank, seq


def load_catalogue() -> dict[str, Identity]:
    """Import every catalogue module and return ``{id: Identity}`` in document order."""
    import importlib

    for name in CATALOGUE_MODULES:
        importlib.import_module(name)
    return {i: _REGISTRY[i] for i in sorted(_REGISTRY, key=_position)}


def get_identity(identity_id: str) -> Identity:
    """The identity called ``identity_id``; an unknown id names the close ones."""
    catalogue = load_catalogue()
    if identity_id not in catalogue:
        import difflib

        close = difflib.get_close_matches(identity_id, list(catalogue), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UnknownNameError(f"unknown identity id {identity_id!r}{hint}; "
                               f"`nlaverify list` prints all {len(catalogue)}")
    return catalogue[identity_id]


def qualname(f: Callable[..., Any]) -> str:
    """``module.qualname`` of a function: how a proof names what it certifies."""
    return f"{f.__module__}.{f.__qualname__}"


def guard(derive: Callable[[], Proof]) -> Callable[[], Proof]:
    """``derive``, with an input error raised by the library it runs (a planted mistake may
    break shapes or domains) reported as a *failed* identity instead of a crash."""
    import functools

    from nlaverify.errors import NlaverifyError

    @functools.wraps(derive)
    def wrapped() -> Proof:
        try:
            return derive()
        except (NlaverifyError, ValueError, TypeError, ArithmeticError, IndexError) as exc:
            return Proof("failed", (Step(f"The derivation raised: {exc!r}"),), repr(exc))

    return wrapped
