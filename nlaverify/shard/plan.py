r"""The sharding plan: a mesh spec (``"dp=2,tp=2,sp=2"``) checked against a config, and the
layout of every graph node on that mesh, Megatron-style.

Axes (Shoeybi et al. 2019, *Megatron-LM*; Korthikanti et al. 2022, sequence parallelism;
Rajbhandari et al. 2020, ZeRO-3 / FSDP):

* ``dp`` shards the batch (the leading dimension of every value); the parameters are
  replicated and their cotangents, sums over the batch, are all-reduced over ``dp``.
* ``fsdp`` shards the batch as ``dp`` does and, in addition, every parameter along its first
  dimension ``fsdp`` divides: a parameter is all-gathered before its use and its cotangent
  reduce-scattered.
* ``tp`` shards the attention heads (the query, key and value projections column-parallel,
  the heads, the output projection row-parallel: an all-reduce after it) and the MLP's
  hidden dimension (``in`` / ``gate`` / ``up`` column-parallel, ``out`` row-parallel: an
  all-reduce); with ``vocab=tp`` (the default when ``tp`` divides the vocabulary) the
  embedding's rows, the unembedding's columns and the logits (a vocabulary-parallel
  cross-entropy: all-reduces of the max, of the sum of exponentials and of the target logit).
* ``sp`` shards the sequence (dimension ``"n"`` of every value): per-token ops are local,
  attention all-gathers the keys and values, the parameter cotangents (sums over positions)
  are all-reduced over ``sp``.

Nothing here imports JAX: a bad mesh is an error before anything is compiled or run.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import networkx as nx

from nlaverify.config import TransformerConfig
from nlaverify.errors import ArgumentError

#: the mesh axes, in the order they appear in the mesh
AXES: tuple[str, ...] = ("dp", "fsdp", "sp", "tp")
#: the most simulated CPU devices a plan may ask for
MAX_DEVICES = 64
#: a layout: per dimension of a value, ``None`` (replicated) or the mesh axes sharding it
Layout = tuple[tuple[str, ...] | None, ...]

_COLUMN = ("attention.W_Q", "attention.W_K", "attention.W_V", "mlp.W_in", "mlp.W_gate",
           "mlp.W_up")
_COLUMN_BIAS = ("attention.b_Q", "attention.b_K", "attention.b_V", "mlp.b_in", "mlp.b_gate",
                "mlp.b_up")
_ROW = ("attention.W_O", "mlp.W_out", "mlp.W_down")
_PROJECTIONS = (".attn.q", ".attn.k", ".attn.v", ".mlp.in", ".mlp.gate", ".mlp.up",
                ".mlp.act")
_HEADS = (".attn.q_heads", ".attn.k_heads", ".attn.v_heads", ".attn.q_norm", ".attn.k_norm",
          ".attn.q_rope", ".attn.k_rope", ".attn.k_shared", ".attn.v_shared", ".attn.heads")
_LOGITS = ("logits", "logits_uncapped", "logits_tempered")


@dataclass(frozen=True)
class MeshPlan:
    """A checked mesh: axis sizes (every axis of :data:`AXES`, 1 when absent), the run's
    sequence length and batch, and whether ``tp`` shards the vocabulary."""

    axes: dict[str, int]
    seq_len: int
    batch: int | None
    vocab_parallel: bool
    spec: str
    notes: tuple[str, ...] = field(default=())

    @property
    def devices(self) -> int:
        """The number of devices the mesh needs (the product of its axis sizes)."""
        return math.prod(self.axes.values())

    @property
    def shards(self) -> int:
        """The most shards any one reduction is split over (every axis together)."""
        return self.devices

    def size(self, axis: str) -> int:
        return self.axes.get(axis, 1)

    def mesh_axes(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """Names and sizes of the mesh (the axes of the spec, in :data:`AXES` order)."""
        names = tuple(a for a in AXES if a in self.given)
        return names, tuple(self.axes[a] for a in names)

    @property
    def given(self) -> tuple[str, ...]:
        """The axes the spec names (an axis of size 1 included), in :data:`AXES` order."""
        named = parse_mesh(self.spec)
        return tuple(a for a in AXES if a in named)

    def describe(self) -> str:
        return ",".join(f"{a}={self.axes[a]}" for a in self.given)


def parse_mesh(spec: str) -> dict[str, int]:
    """``"dp=2,tp=2"`` -> ``{"dp": 2, "tp": 2}``, plus an optional ``vocab=tp`` or
    ``vocab=none`` (returned as ``-1`` / ``0`` under ``"vocab"``); a syntax error, an
    unknown or repeated axis or a size below 1 raises :class:`ArgumentError` naming it."""
    if not isinstance(spec, str) or not spec.strip():
        raise ArgumentError(f"mesh: expected axes like 'dp=2,tp=2' (axes {', '.join(AXES)}), "
                            f"got {spec!r}")
    out: dict[str, int] = {}
    for item in spec.split(","):
        m = re.fullmatch(r"\s*([a-z]+)\s*=\s*([+-]?[A-Za-z0-9.]+)\s*", item)
        if m is None:
            raise ArgumentError(f"mesh: {item.strip()!r} is not AXIS=SIZE (e.g. 'dp=2,tp=2')")
        axis, value = m.groups()
        if axis in out:
            raise ArgumentError(f"mesh: axis {axis!r} given twice in {spec!r}")
        if axis == "vocab":
            if value not in ("tp", "none"):
                raise ArgumentError(f"mesh: vocab={value!r}: expected vocab=tp (shard the "
                                    "vocabulary over tp) or vocab=none (replicate it)")
            out[axis] = -1 if value == "tp" else 0
            continue
        if axis not in AXES:
            raise ArgumentError(f"mesh: unknown axis {axis!r}: expected some of "
                                f"{', '.join(AXES)}")
        if not value.isdigit() or int(value) < 1:
            raise ArgumentError(f"mesh: {axis}={value}: expected a positive integer size")
        out[axis] = int(value)
    if not any(a in out for a in AXES):
        raise ArgumentError(f"mesh: {spec!r} names no axis (expected some of {', '.join(AXES)})")
    return out


def _divides(axis: str, size: int, what: str, dim: int) -> None:
    """``axis`` (a label such as ``tp=2`` or ``dp=2*fsdp=2``) of ``size`` shards ``dim``."""
    if dim % size:
        raise ArgumentError(f"mesh: {axis} does not divide {what} ({dim}): {dim} % {size} = "
                            f"{dim % size}")


def default_run_size(spec: str, seq_len: int | None, batch: int | None,
                     base: int = 6) -> tuple[int, int | None]:
    """The sequence length and batch a mesh runs on when not given: the smallest multiple of
    ``sp`` at least ``base``, and ``dp * fsdp`` sequences when the batch is sharded."""
    axes = parse_mesh(spec)
    sp, rows = axes.get("sp", 1), axes.get("dp", 1) * axes.get("fsdp", 1)
    if seq_len is None:
        seq_len = sp * math.ceil(base / sp)
    if batch is None and rows > 1:
        batch = rows
    return seq_len, batch


def plan_mesh(config: TransformerConfig, spec: str, *, seq_len: int, batch: int | None,
              devices: int | None = None) -> MeshPlan:
    """Check ``spec`` against ``config`` and the run, before anything runs.

    ``tp`` must divide the query heads, the key/value heads and the MLP's hidden size (and
    the vocabulary with ``vocab=tp``); ``sp`` the sequence length; ``dp * fsdp`` the batch
    (a batch is then required); ``fsdp`` the model dimension; the mesh must fit in
    ``devices`` (default :data:`MAX_DEVICES`, the simulated ones). Each error names the axis,
    the dimension and both numbers."""
    parsed = parse_mesh(spec)
    axes = {a: parsed.get(a, 1) for a in AXES}
    tp, sp, rows = axes["tp"], axes["sp"], axes["dp"] * axes["fsdp"]
    notes: list[str] = []
    if tp > 1:
        _divides(f"tp={tp}", tp, "the query heads n_heads", config.n_heads)
        _divides(f"tp={tp}", tp, "the key/value heads n_kv_heads", int(config.n_kv_heads or 0))
        if not config.n_experts:
            _divides(f"tp={tp}", tp, "the MLP hidden size d_mlp", config.d_mlp)
    if tp > 1 and any(config.block_mixer(b) == "mamba" for b in range(config.n_blocks)):
        notes.append(f"the Mamba mixers are replicated over tp={tp} (the plan shards "
                     "attention heads and MLPs)")
    if tp > 1 and any(config.block_mixer(b) == "mamba2" for b in range(config.n_blocks)):
        notes.append(f"the Mamba-2 mixers are replicated over tp={tp} (the plan shards "
                     "attention heads and MLPs, not the scan's heads)")
    if tp > 1 and any(config.block_mixer(b) == "rwkv" for b in range(config.n_blocks)):
        notes.append(f"the RWKV time and channel mixings are replicated over tp={tp} (the "
                     "plan shards attention heads and MLPs)")
    if tp > 1 and config.n_experts:
        notes.append(f"the experts are replicated over tp={tp} (no expert parallelism)")
    vocab = parsed.get("vocab")
    if vocab == -1:
        if tp == 1:
            raise ArgumentError("mesh: vocab=tp needs a tp axis larger than 1")
        _divides(f"tp={tp}", tp, "the vocabulary vocab_size", config.vocab_size)
    vocab_parallel = tp > 1 and vocab != 0 and config.vocab_size % tp == 0
    if tp > 1 and vocab is None and not vocab_parallel:
        notes.append(f"the vocabulary ({config.vocab_size}) is replicated: tp={tp} does not "
                     "divide it (vocab=tp asks for it and fails)")
    if sp > 1:
        _divides(f"sp={sp}", sp, "the sequence length seq_len", seq_len)
    if rows > 1:
        label = "*".join(a for a in ("dp", "fsdp") if axes[a] > 1) + f"={rows}"
        if batch is None:
            raise ArgumentError(f"mesh: {label} shards the batch, but the run has none (one "
                                f"unbatched sequence): give a batch that {rows} divides")
        _divides(label, rows, "the batch", batch)
    if axes["fsdp"] > 1:
        _divides(f"fsdp={axes['fsdp']}", axes["fsdp"], "the model dimension d_model",
                 config.d_model)
    limit = MAX_DEVICES if devices is None else devices
    total = math.prod(axes.values())
    if total > limit:
        what = "simulated CPU devices allowed" if devices is None else "devices available"
        raise ArgumentError(f"mesh: {spec!r} needs {total} devices, more than the {limit} "
                            f"{what}")
    return MeshPlan(axes, seq_len, batch, vocab_parallel, spec, tuple(notes))


def _suffix(node: str, options: tuple[str, ...]) -> bool:
    return any(node.endswith(o) for o in options)


def _tp_dim(graph: nx.DiGraph, plan: MeshPlan, node: str) -> int | None:
    """The dimension (of the node's declared shape) that ``tp`` shards, or ``None``."""
    if plan.size("tp") == 1:
        return None
    attrs = graph.nodes[node]
    comp = attrs.get("component") or ""
    if attrs["kind"] == "param":
        if comp in _COLUMN:
            return 1
        if comp in _COLUMN_BIAS or comp in _ROW:
            return 0
        if plan.vocab_parallel and comp in ("embedding", "unembedding"):
            return 0 if comp == "embedding" else 1
        return None
    if attrs["kind"] != "op":
        return None
    if _suffix(node, _HEADS):
        return 0
    if _suffix(node, _PROJECTIONS) or node.endswith(".attn.merged"):
        return len(attrs["shape"]) - 1
    if plan.vocab_parallel and node in _LOGITS:
        return len(attrs["shape"]) - 1
    return None


def layout(graph: nx.DiGraph, plan: MeshPlan, node: str, ndim: int) -> Layout:
    """The layout of ``node``'s value (``ndim`` dimensions, leading batch dimensions
    included): the batch over ``dp``/``fsdp``, ``"n"`` over ``sp``, the heads, the MLP's
    hidden units and the vocabulary over ``tp``, the parameters over ``fsdp``."""
    attrs = graph.nodes[node]
    shape = tuple(attrs.get("shape") or ())
    lead = ndim - len(shape)
    out: list[tuple[str, ...] | None] = [None] * ndim
    rows = tuple(a for a in ("dp", "fsdp") if plan.size(a) > 1)
    if lead > 0 and rows and attrs["kind"] != "param":
        out[0] = rows
    if plan.size("sp") > 1 and "n" in shape:
        out[lead + shape.index("n")] = ("sp",)
    t = _tp_dim(graph, plan, node)
    if t is not None:
        out[lead + t] = ("tp",)
    f = plan.size("fsdp")
    if attrs["kind"] == "param" and f > 1:
        for i, s in enumerate(shape):
            if out[i] is None and isinstance(s, int) and s % f == 0:
                out[i] = ("fsdp",)
                break
    return tuple(out)


def format_layout(lay: Layout) -> str:
    """``[dp, sp, None]``: the axes sharding each dimension."""
    return "[" + ", ".join("None" if d is None else "*".join(d) for d in lay) + "]"


def _sum_axes(plan: MeshPlan) -> str:
    axes = [f"{a}={plan.size(a)}" for a in ("dp", "fsdp", "sp") if plan.size(a) > 1]
    return "x".join(axes)


def collective(graph: nx.DiGraph, plan: MeshPlan, node: str, cotangent: bool = False) -> str:
    """The collective the plan makes responsible for ``node``'s value (or cotangent): what
    a report names when that node is the first to diverge."""
    attrs = graph.nodes[node]
    tp, sp = plan.size("tp"), plan.size("sp")
    if attrs["kind"] == "param":
        if cotangent and _sum_axes(plan):
            how = "reduce-scatter" if plan.size("fsdp") > 1 else "all-reduce"
            return f"{how} of the parameter gradient over {_sum_axes(plan)} (a sum over " \
                   "the batch and the sequence)"
        if plan.size("fsdp") > 1:
            return f"all-gather of the parameter over fsdp={plan.size('fsdp')}"
        return "none (a replicated parameter)" if not cotangent else \
            "none (the gradient of an unsplit sum)"
    if node == "loss" and not cotangent:
        parts = []
        if plan.vocab_parallel:
            parts.append(f"vocabulary-parallel cross-entropy over tp={tp} (all-reduce of the "
                         "max, of the sum of exponentials and of the target logit)")
        if _sum_axes(plan):
            parts.append(f"the mean over tokens sharded {_sum_axes(plan)} (all-reduce of "
                         "the summed loss and of the token count)")
        return "; ".join(parts) or "none (computed on one shard's whole input)"
    if tp > 1 and not cotangent and _suffix(node, (".attn.out", ".mlp.out")):
        return f"row-parallel matmul over tp={tp} (all-reduce of the partial sums)"
    if sp > 1 and not cotangent and node.endswith(".attn.heads"):
        return f"attention over the sequence sharded sp={sp} (all-gather of the keys and " \
               "values)"
    if sp > 1 and cotangent and _suffix(node, (".attn.k_heads", ".attn.v_heads",
                                               ".attn.k_rope", ".attn.k_shared",
                                               ".attn.v_shared")):
        return f"backward of attention over sp={sp} (reduce-scatter of the key and value " \
               "cotangents)"
    if cotangent and tp > 1 and any(_suffix(s, _PROJECTIONS[:-1])
                                    for s in graph.successors(node)):
        return f"backward of the column-parallel matmuls over tp={tp} (all-reduce of the " \
               "input cotangent)"
    if plan.vocab_parallel and node == "embed" and not cotangent:
        return f"vocabulary-parallel embedding over tp={tp} (masked lookup, all-reduce)"
    if plan.vocab_parallel and cotangent and any(s in _LOGITS for s in graph.successors(node)):
        return f"backward of the vocabulary-parallel unembedding over tp={tp} (all-reduce " \
               "of the input cotangent)"
    return "none planned (the op is local on its layout; XLA's resharding, if any)"


__all__ = ["AXES", "MAX_DEVICES", "Layout", "MeshPlan", "collective", "default_run_size",
           "format_layout", "layout", "parse_mesh", "plan_mesh"]
