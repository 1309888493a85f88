r"""The map from your model's names to the graph's nodes, for :func:`~nlaverify.check.check_model`.

A *tap* says that graph node :math:`v` is ``layout`` of one of your intermediates: a PyTorch
module's output or first input (forward hooks), or a key of the dict your model (or your
PyTorch ``call``) returns. A *layout* is any function of a float64 NumPy array that takes
your convention to the graph's (heads first, a slice of a fused projection, a permutation);
it always sees **one sequence**: a batch of one is dropped before it, and a batch of
:math:`B` sequences is taken apart along its first axis, each sequence laid out, and the
results stacked, so the same layout serves ``tokens`` of shape ``(n,)`` and ``(B, n)``.

Seed: Baggag & Saad §3.3 (row convention :math:`X \in \mathbb{R}^{n\times d}`, heads
:math:`(H, n, d_h)`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np

from nlaverify.check.adapters import to_float64
from nlaverify.check.report import CheckError

#: a function from your captured value (float64 NumPy, one sequence) to the graph's layout
Layout = Callable[[Any], Any]

__all__ = ["Layout", "chunk", "compose", "heads_first"]


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
    mapped: dict[str, str] = {}  # node -> the key of intermediates that maps it
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
            if node in mapped:  # two sources for one node: which to judge is a guess
                raise CheckError(f"argument 'intermediates': node {node!r} is mapped twice, "
                                 f"by {mapped[node]!r} and by {key!r}: map each node once")
            mapped[node] = key
            taps.append(_Tap(node, mine, where, layout))
    return taps


# --- inputs -------------------------------------------------------------------------

def _check_ids(arr: Any, what: str, config: Any, allow_ignore: bool) -> np.ndarray:
    from nlaverify.ops.loss import IGNORE_INDEX

    a = np.asarray(arr)
    if a.ndim not in (1, 2):
        raise CheckError(f"argument {what!r}: expected shape (n,) or (B, n), got {a.shape}")
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
    r"""Tokens ``(n,)`` or a batch ``(B, n)`` and their targets (default: the next token,
    none at the last position; a padded batch gives its own, ``-100`` at the padding, as
    :func:`~nlaverify.graph.run.sample_data` does)."""
    from nlaverify.graph.run import sample_data
    from nlaverify.ops.loss import IGNORE_INDEX

    if tokens is None:
        if targets is not None:
            raise CheckError("argument 'targets': given without tokens; pass the tokens they "
                             "are the targets of")
        return sample_data(config.vocab_size, min(8, config.context), seed)
    tok = _check_ids(tokens, "tokens", config, False)
    if not 2 <= tok.shape[-1] <= config.context:
        raise CheckError(f"argument 'tokens': expected 2 <= n <= context={config.context}, "
                         f"got n={tok.shape[-1]}")
    if targets is None:
        last = np.full((*tok.shape[:-1], 1), IGNORE_INDEX, dtype=np.int64)
        tgt = np.concatenate([tok[..., 1:], last], axis=-1).astype(np.int64)
    else:
        tgt = _check_ids(targets, "targets", config, True)
        if tgt.shape != tok.shape:
            raise CheckError(f"argument 'targets': expected shape {tok.shape} (as tokens), "
                             f"got {tgt.shape}")
    if not (tgt != IGNORE_INDEX).any():
        raise CheckError(f"argument 'targets': every target is {IGNORE_INDEX}: the loss is "
                         "the mean over no position")
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


# --- your values in the graph's layout ----------------------------------------------

def _layout(t: _Tap, raw: Any, shape: tuple[int, ...], batched: bool,
            batch: int | None = None) -> np.ndarray:
    """Your captured value in the graph's layout (``shape``), or a CheckError naming the
    node. ``batch=None``: one sequence (with ``batched``, a leading axis of 1 is dropped);
    ``batch=B``: the first axis is the batch, and ``t.layout`` is applied to each sequence
    (a tuple capture, e.g. a router's ``(logits, weights, indices)``, goes to it whole)."""
    what = f"intermediate {t.source} (node {t.node!r})"

    def laid_out(value: Any) -> np.ndarray:
        if t.layout is None:
            return value
        out = _user_call(lambda: t.layout(value), "intermediates",
                         f"in the layout of node {t.node!r}")
        return to_float64(out, what=f"layout of node {t.node!r}")

    if isinstance(raw, tuple):
        if t.layout is None:
            raise CheckError(f"argument 'intermediates': node {t.node!r}: {t.source} is a "
                             f"tuple of {len(raw)}; pass (name, layout) to pick from it")
        value: Any = laid_out(tuple(to_float64(r, what=what) if r is not None and not
                                    isinstance(r, str | bool | int | float) else r
                                    for r in raw))
    else:
        if raw is None:
            raise CheckError(f"argument 'intermediates': node {t.node!r}: {t.source} is None")
        value = to_float64(raw, what=what)
        if batch is None:
            if batched and value.ndim > 0 and value.shape[0] == 1:
                value = value[0]  # the batch of one
            value = laid_out(value)
        elif t.layout is not None:
            if value.ndim == 0 or value.shape[0] != batch:
                raise CheckError(f"argument 'intermediates': node {t.node!r} ({t.source}): "
                                 f"expected a batch of {batch} sequences on the first axis, "
                                 f"got shape {value.shape}")
            value = np.stack([laid_out(v) for v in value])
    if value.shape != shape:
        hint = "" if t.layout is not None else "; pass (name, layout) with a layout function"
        raise CheckError(f"argument 'intermediates': node {t.node!r} ({t.source}): expected "
                         f"shape {shape} (the graph's layout), got {value.shape}{hint}")
    return value
