r"""``check_decode``: a user's incremental decoding loop (a KV cache) against the full forward
of the graph, position by position and node by node.

Causal attention makes decoding incremental: the logits and every intermediate of the token at
position :math:`p` depend only on tokens :math:`0..p`, so a decoder that feeds the tokens in
chunks (a prefill, then one token per step) and keeps the keys and values of the past in a
cache must reproduce, at each position, the full forward of the same tokens (Baggag & Saad
§3.4.4, causal masking; §3.6.2, RoPE at absolute positions; §3.11.2, grouped-query heads;
§3.13.1, autoregressive generation). :func:`check_decode` runs your step function over the
tokens and compares what it returns with the graph of :func:`~nlaverify.graph.build.
build_transformer` evaluated once on all of them in float64
(:func:`~nlaverify.graph.run.run_graph`):

* the logits of every position of every chunk (node ``logits``: untempered, a
  temperature :math:`T \ne 1` divides them after it, at ``logits_tempered``);
* every intermediate your step returns, keyed by graph node name: the cached keys after RoPE
  ``blocks.{l}.attn.k_rope`` and values ``blocks.{l}.attn.v_heads`` *at every cache
  position*, after every step (so a cache entry that is overwritten, shifted or never written
  is named by its position), the attention output ``blocks.{l}.attn.heads`` or ``.merged``,
  the stream ``blocks.{l}.resid1``...

A failing row names the node and the position, then the worst entry inside it, e.g.
``blocks.0.attn.k_rope[pos 3][1, 0]`` (key/value head 1, coordinate 0 of position 3). Each
node's bound is the tolerance model of your ``dtype`` for that node of the graph
(:func:`~nlaverify.graph.compare.node_tolerance`: its depth, the longest accumulation, the
magnitude of its values; below float32 the per-node bounds of
:func:`~nlaverify.precision.bounds.node_bounds`, errors of independent stages added in
quadrature, sums accumulated in ``accumulation``), as in :func:`~nlaverify.check.check_model`.

The reference is nlaverify's proved graph; the blockwise, online-softmax attention
(:func:`~nlaverify.ops.online_softmax.blockwise_attention`, proved equal to softmax attention
for every block split, and for one query against a cache with the causal mask aligned at the
last position) is the reference for a fused decoding kernel itself (``check_op``).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from nlaverify.check.adapters import (
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
    inconclusive_row,
)
from nlaverify.tolerance import Tolerance

__all__ = ["check_decode"]

_DTYPES = ("float64", "float32", "bfloat16", "float16")

Bound = Callable[[str], Tolerance]


def _tokens(tokens: Any, config: Any) -> np.ndarray:
    arr = np.asarray(to_float64(tokens, what="argument 'tokens'"))
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1 or arr.size == 0:
        raise CheckError(f"argument 'tokens': expected token ids of shape (n,) with n >= 1 (or "
                         f"a batch of one, (1, n)), got shape {arr.shape}")
    if not np.all(arr == np.round(arr)):
        raise CheckError("argument 'tokens': expected integer token ids, got non-integer "
                         "values")
    ids = arr.astype(np.int64)
    if ids.min() < 0 or ids.max() >= config.vocab_size:
        bad = int(ids[(ids < 0) | (ids >= config.vocab_size)][0])
        raise CheckError(f"argument 'tokens': expected ids in [0, vocab_size="
                         f"{config.vocab_size}), got {bad}")
    if ids.size > config.context:
        raise CheckError(f"argument 'tokens': expected at most context={config.context} "
                         f"tokens, got {ids.size}")
    return ids


def _params(params: Any, graph: Any, dtype: str) -> dict[str, np.ndarray]:
    """The graph's parameters as float64, rounded to ``dtype`` first (the values your step
    can hold), each named in an error."""
    if not isinstance(params, Mapping):
        raise CheckError(f"argument 'params': expected a mapping of graph parameter names to "
                         f"arrays, got {type(params).__name__}")
    want = {n: tuple(int(s) for s in a["shape"]) for n, a in graph.nodes(data=True)
            if a["kind"] == "param"}
    unknown = sorted(set(params) - set(want))
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), list(want), n=1)
        raise CheckError(f"argument 'params': {unknown[0]!r} is not a parameter of the graph"
                         + (f" (did you mean {close[0]!r}?)" if close else ""))
    missing = sorted(set(want) - set(params))
    if missing:
        raise CheckError(f"argument 'params': no value for {missing[0]!r} (shape "
                         f"{want[missing[0]]})"
                         + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
    store = framework_dtype("numpy", dtype)
    out = {}
    for name, shape in want.items():
        x = to_float64(params[name], what=f"argument 'params': {name!r}")
        if x.shape != shape:
            raise CheckError(f"argument 'params': {name!r}: expected shape {shape}, got "
                             f"{x.shape}")
        if not np.all(np.isfinite(x)):
            raise CheckError(f"argument 'params': {name!r}: expected finite values")
        out[name] = x.astype(store).astype(np.float64)
    return out


def _bounds(graph: Any, ev: Any, dtype: str, n: int, accumulation: str) -> Bound:
    """``bound(node)``: the tolerance of a node's value in ``dtype`` (module docstring)."""
    from nlaverify.graph.compare import accumulation_length, node_depths, node_tolerance

    if dtype in ("float64", "float32"):
        k = accumulation_length(graph, n)
        depth = node_depths(graph)
        return lambda node: node_tolerance(dtype, k, depth[node], ev.values[node])
    from nlaverify.precision.bounds import node_bounds

    bounds = node_bounds(graph, ev, dtype, n, accumulation=accumulation)
    return lambda node: bounds[node].value


def _schedule(n: int, prefill: int) -> list[tuple[int, int]]:
    return [(0, prefill)] + [(p, p + 1) for p in range(prefill, n)]


def _split(out: Any, step: str) -> tuple[Any, Any, Mapping[str, Any]]:
    """``(logits, cache, intermediates)`` from what a step returned."""
    if not isinstance(out, tuple | list) or len(out) not in (2, 3):
        got = f"a {type(out).__name__}" + (f" of {len(out)}" if isinstance(out, tuple | list)
                                           else "")
        raise CheckError(f"argument 'step_fn': {step} returned {got}; expected a tuple "
                         "(logits, cache) or (logits, cache, intermediates)")
    logits, cache = out[0], out[1]
    inter = out[2] if len(out) == 3 else {}
    if inter is None:
        inter = {}
    if not isinstance(inter, Mapping):
        raise CheckError(f"argument 'step_fn': {step} returned intermediates of type "
                         f"{type(inter).__name__}; expected a dict of graph node name -> array")
    return logits, cache, inter


def _position_axis(graph: Any, node: str) -> int:
    return list(graph.nodes[node]["shape"]).index("n")


def _as_node(value: Any, graph: Any, node: str, hi: int, step: str) -> tuple[np.ndarray, int]:
    """Your value of ``node`` (a leading batch of one dropped) and the first position it
    covers: its position axis holds the *last* ``L <= hi`` positions (module docstring of
    :func:`check_decode`)."""
    arr = to_float64(value, what=f"argument 'step_fn': {step}, intermediate {node!r}")
    shape = graph.nodes[node]["shape"]
    if arr.ndim == len(shape) + 1 and arr.shape[0] == 1:
        arr = arr[0]
    axis = _position_axis(graph, node)
    want = tuple("L" if s == "n" else int(s) for s in shape)
    ok = arr.ndim == len(shape) and all(w == "L" or w == g for w, g in zip(want, arr.shape,
                                                                          strict=True))
    L = arr.shape[axis] if arr.ndim == len(shape) else 0
    if not ok or not 1 <= L <= hi:
        shown = "(" + ", ".join(str(w) for w in want) + ")"
        raise CheckError(f"argument 'step_fn': {step}, intermediate {node!r}: expected shape "
                         f"{shown} with 1 <= L <= {hi} positions (the last L up to this "
                         f"step; the graph's layout), got {arr.shape}")
    return arr, hi - L


def _logits(value: Any, t: int, V: int, step: str) -> np.ndarray:
    arr = to_float64(value, what=f"argument 'step_fn': {step}, logits")
    if arr.ndim == 3 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim == 1 and t == 1:
        arr = arr[None]
    if arr.shape != (t, V):
        raise CheckError(f"argument 'step_fn': {step}: expected logits of shape ({t}, {V}) "
                         f"(or (1, {t}, {V})), got {arr.shape}")
    return arr


def _compare(subject: str, check: str, node: str, got: np.ndarray, ref: np.ndarray,
             first: int, axis: int, tol: Tolerance) -> list[Row]:
    """One row per position of ``got`` (positions ``first, first + 1, ...`` on ``axis``)."""
    rows = []
    for k in range(got.shape[axis]):
        pos = first + k
        label = f"{node}[pos {pos}]"
        mine, theirs = np.take(got, k, axis=axis), np.take(ref, pos, axis=axis)
        if tol.rtol >= 1.0:
            rows.append(inconclusive_row(subject, check, f"bound {tol.rtol:.3g} >= 1 "
                                         f"({tol.reason})", resolution=tol.rtol, where=label))
            continue
        rows.append(compare_arrays(subject, check, mine, theirs, tol, label=label))
    return rows


def check_decode(
    step_fn: Callable[..., Any], config: Any, params: Mapping[str, Any], tokens: Any, *,
    cache_factory: Callable[[], Any] | None = None, prefill: int = 1,
    framework: str | None = None, dtype: str = "float64", accumulation: str = "float32",
    subject: str | None = None,
) -> CheckReport:
    r"""Check an incremental decoding loop with a KV cache against the full forward.

    The tokens are fed in chunks: positions :math:`[0, \text{prefill})` in one call, then one
    token per call. **The step protocol**::

        logits, cache = step_fn(tokens, start, cache)
        logits, cache, intermediates = step_fn(tokens, start, cache)

    ``tokens``: the chunk's ids, an integer array of your framework, shape ``(t,)``;
    ``start``: the position of its first token (a Python ``int``; the chunk covers positions
    ``start .. start + t - 1``); ``cache``: what the previous step returned (first
    ``cache_factory()``, or ``None``). It returns the chunk's logits ``(t, V)`` (or
    ``(1, t, V)``; ``(V,)`` for one token) and the new cache, which is opaque to the check.
    ``intermediates`` (optional) maps graph node names to arrays in the graph's layout, with
    the position axis :math:`n` of length :math:`L`: the **last** :math:`L` positions up to
    this chunk, :math:`[\text{start} + t - L, \text{start} + t)`. So the whole cache
    (:math:`L = \text{start} + t`), a sliding-window cache of the last :math:`w`
    (:math:`L = \min(w, \text{start} + t)`, unrolled in position order) and the chunk's own
    outputs (:math:`L = t`) all fit. Useful nodes (``l`` the block):

    =============================  ==============================================
    ``blocks.{l}.attn.k_rope``      cached keys after RoPE ``(n_kv_heads, L, d_head)``
    ``blocks.{l}.attn.v_heads``     cached values ``(n_kv_heads, L, d_head)``
    ``blocks.{l}.attn.q_rope``      queries after RoPE ``(n_heads, L, d_head)``
    ``blocks.{l}.attn.heads``       attention output per head ``(n_heads, L, d_head)``
    ``blocks.{l}.attn.merged``      heads merged ``(L, n_heads d_head)``
    ``blocks.{l}.resid1``, ...       the residual stream ``(L, d_model)``
    =============================  ==============================================

    (``k_heads`` / ``k_rope`` exist for ``positions="rope"``; without RoPE cache
    ``k_heads``.) Each position of each returned node is compared with the graph's value at
    that position: a row per (step, node, position), in the order the nodes are computed, the
    logits last.

    Args:
        step_fn: your decoding step (NumPy, JAX or PyTorch; ``framework`` names it where
            :func:`~nlaverify.check.adapters.detect_framework` guesses wrong).
        config: the :class:`~nlaverify.config.TransformerConfig` your decoder implements
            (causal; RoPE, ``n_kv_heads``, ``sliding_window`` as configured).
        params: the graph's parameters your step uses (node name -> array, e.g.
            :func:`~nlaverify.graph.run.init_params` of ``build_transformer(config)``); the
            reference rounds them to ``dtype``, as your step holds them.
        tokens: ids ``(n,)`` (or ``(1, n)``), ``n <= context``.
        cache_factory: ``cache_factory() -> cache``, the empty cache of the first step.
        prefill: the length of the first chunk (1: token by token).
        dtype: the precision your step computes in: ``float64``, ``float32``, ``bfloat16``
            or ``float16``; the bounds are the tolerance model's for it.
        accumulation: below float32, the precision sums accumulate in.
        subject: the name in the report (default: the step function's).

    Returns:
        A :class:`~nlaverify.check.report.CheckReport` (kind ``"decode"``). A step that
        raises, or after the first step returns logits or a tuple of the wrong form, fails
        on its own row (``where="step_fn"``) and ends the run; the earlier rows stand.

    Raises:
        CheckError: bad input, naming the argument: a config that is not a causal
            ``TransformerConfig``, tokens out of range or of the wrong shape, unknown or
            mis-shaped params, an unknown dtype or framework, a ``prefill`` out of range, and
            a step whose return value breaks the protocol (not a tuple, non-array or
            mis-shaped logits, an unknown node name).
    """
    from nlaverify.config import TransformerConfig
    from nlaverify.errors import NlaverifyError
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import run_graph

    if not callable(step_fn):
        raise CheckError(f"argument 'step_fn': expected a callable, got "
                         f"{type(step_fn).__name__}")
    if not isinstance(config, TransformerConfig):
        raise CheckError(f"argument 'config': expected a nlaverify.config.TransformerConfig, "
                         f"got {type(config).__name__}")
    if not config.causal:
        raise CheckError("argument 'config': incremental decoding needs causal attention, "
                         "got causal=False")
    if dtype not in _DTYPES:
        raise CheckError(f"argument 'dtype': expected one of {', '.join(_DTYPES)}, got "
                         f"{dtype!r}")
    ids = _tokens(tokens, config)
    n = int(ids.size)
    if isinstance(prefill, bool) or not isinstance(prefill, int) or not 1 <= prefill <= n:
        raise CheckError(f"argument 'prefill': expected an integer in [1, {n}] (the number of "
                         f"tokens), got {prefill!r}")
    fw = framework or detect_framework(step_fn)
    require_framework(fw, argument="framework")
    graph = build_transformer(config)
    ref_params = _params(params, graph, dtype)
    targets = np.roll(ids, -1)
    try:
        ev = run_graph(graph, "numpy", ref_params, {"tokens": ids, "targets": targets})
    except NlaverifyError as exc:
        raise CheckError(f"argument 'params': the reference forward rejected them: {exc}"
                         ) from exc
    bound = _bounds(graph, ev, dtype, n, accumulation)
    from nlaverify.graph.compare import node_depths

    depth = node_depths(graph)
    name = subject or getattr(step_fn, "__name__", type(step_fn).__name__)
    report = CheckReport(name, "decode")
    report.notes.append(f"reference: the graph of {config.name!r} on all {n} tokens in "
                        f"float64 (run_graph); bounds: the tolerance model for {dtype}")
    try:
        cache = cache_factory() if cache_factory is not None else None
    except Exception as exc:  # the user's code raised: its own failed row
        report.rows.append(error_row(name, "cache_factory()", exc, where="cache_factory"))
        return report
    seen: set[str] = set()
    V = config.vocab_size
    for lo, hi in _schedule(n, prefill):
        step = f"step at positions {lo}..{hi - 1}" if hi - lo > 1 else f"step at position {lo}"
        chunk = to_framework(ids[lo:hi], fw, None)
        try:
            out = step_fn(chunk, lo, cache)
        except Exception as exc:
            report.rows.append(error_row(name, step, exc, where="step_fn"))
            break
        try:
            logits, cache, inter = _split(out, step)
            z = _logits(logits, hi - lo, V, step)
        except CheckError as exc:
            if not report.rows:  # the first step: the protocol itself is misunderstood
                raise
            # a later step returned a malformed output: that step fails, the earlier rows
            # stand (a mis-shaped step is the user's bug at that step, like an exception)
            report.rows.append(Row(name, step, math.inf, math.nan, "fail", "step_fn",
                                   reason=str(exc)))
            break
        rows: list[tuple[int, list[Row]]] = []
        for node, value in inter.items():
            if node not in graph or graph.nodes[node]["kind"] != "op" or "n" not in (
                    graph.nodes[node]["shape"] or ()):
                known = [v for v, a in graph.nodes(data=True) if a["kind"] == "op"
                         and "n" in (a["shape"] or ())]
                close = difflib.get_close_matches(str(node), known, n=1)
                raise CheckError(f"argument 'step_fn': {step} returned intermediate {node!r}, "
                                 "not a per-position node of the graph"
                                 + (f" (did you mean {close[0]!r}?)" if close else ""))
            arr, first = _as_node(value, graph, node, hi, step)
            seen.add(node)
            rows.append((depth[node], _compare(name, step, node, arr, ev.values[node], first,
                                               _position_axis(graph, node), bound(node))))
        rows.sort(key=lambda r: r[0])
        for _, rs in rows:
            report.rows.extend(rs)
        report.rows.extend(_compare(name, step, "logits", z, ev.values["logits"], lo, 0,
                                    bound("logits")))
    report.notes.append("checked: logits" + (f", {', '.join(sorted(seen))}" if seen else
                                             " only (return intermediates to check the cache)"))
    return report
