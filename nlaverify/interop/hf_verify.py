r"""Node-by-node verification of a Hugging Face model against the nlaverify graph.

``nlaverify verify --hf PATH_OR_CONFIG`` (issue 10, item 3): the HF model
(``transformers``, float64 on the CPU) and the nlaverify graph (NumPy, float64) run on
the same weights and tokens. Forward hooks capture HF's intermediates; a registered
attention function (:data:`CAPTURE_ATTENTION`, in ``transformers``'
``AttentionInterface``) records each block's query (after RoPE), key and value (before
``repeat_kv``) and the attention output, then delegates to HF's own eager attention (stock)
or to :func:`exact_eager_attention` (exact). Each capture is mapped to its graph node,
undoing HF's conventions: the RoPE permutation of each head's coordinates
(:func:`nlaverify.interop.weights.rope_permutation`, ``ours[..., j] = hf[..., perm[j]]``),
HF's ``(B, H, n, d_h)`` / ``(B, n, H, d_h)`` head layouts versus the graph's
``(H, n, d_h)``, GPT-2's fused ``c_attn`` (split into q, k, v), Mixtral's top-k indices
(as the 0/1 routing mask), Gemma's embedding module (which returns the scaled embedding,
the graph's ``embed_scaled``). HF is one adapter of :func:`nlaverify.check.check_model`,
not a separate engine: the captures are its map of ``intermediates`` (module hooks, and the
attention function's tensors returned by its ``call``), its ``load`` is ``params_to_hf``
made differentiable (:func:`_hf_load`), and every row below is check_model's row, renamed
in HF's terms. Node values are compared in topological order, each judged
by the tolerance model of the HF model's dtype exactly as
:func:`nlaverify.graph.compare.compare` judges a graph evaluation (longest accumulation
:math:`k`, the node's depth :math:`D`, :math:`\kappa` from the reference's magnitude);
the first node beyond its bound is :attr:`HFVerifyReport.first_divergence`. Every
parameter gradient (torch autograd of HF's loss through ``load``) is compared with the
graph's, with the bound :func:`~nlaverify.graph.compare.compare` gives a parameter's
cotangent; an HF parameter's row is the worst of the graph parameters it holds.

**Weights.** A config source gets nlaverify's seeded
:func:`~nlaverify.graph.run.init_params`, written into HF by ``params_to_hf``. A
checkpoint directory is read twice, independently: by nlaverify
(:func:`~nlaverify.interop.weights.load_checkpoint`, which validates everything first)
and by HF's own ``from_pretrained``; a check row compares the two. Mixtral's experts run
HF's ``"eager"`` experts loop (the default ``grouped_mm`` kernel takes no float64 on the
CPU).

**Tokens and loss.** ``tokens`` (``(n,)``) is the input sequence and, as in HF's
``labels=input_ids``, its own target: position :math:`t` predicts token :math:`t+1`, the
last position has no target (the graph's targets are ``tokens[1:]`` followed by
:data:`~nlaverify.ops.loss.IGNORE_INDEX`), and the loss is the mean cross-entropy over
the :math:`n-1` positions that have one,
:math:`L = \frac1{n-1}\sum_{t<n} -\log \operatorname{softmax}(z_t)_{x_{t+1}}`.
Stock mode takes HF's own loss (``model(input_ids, labels=input_ids)``, which upcasts the
logits to float32); exact mode computes the same mean with ``torch`` in the model dtype.

**Stock and exact.** ``exact=False`` runs HF as shipped and names the first node where it
departs from the model dtype's arithmetic. Found by experiment (``transformers`` 5.24,
float64): ``blocks.0.norm1`` (the first RMSNorm, computed in float32) for Llama, Mistral,
Mixtral, Qwen2, Qwen3 and Gemma; ``loss`` for GPT-2 (its LayerNorm, GELU and eager
attention stay in float64), or ``blocks.0.attn.heads`` with ``reorder_and_upcast_attn``.
The float32 islands behind them, each located at its own node by leaving its patch out
(:data:`~nlaverify.interop.hf_patches.EXACT_PATCHES`): every RMSNorm (``norm1``,
``norm2``, ``final_norm``, Qwen3's ``q_norm``/``k_norm``), the RoPE angles (``q_rope``),
the attention softmax (``heads``), Mixtral's router softmax (``mlp.out``) and the loss.
In stock mode :attr:`HFVerifyReport.first_beyond_float32` also judges every node with
float32's bound: ``None`` means every departure is float32 rounding; a node there is a
real difference (a planted mistake shows there). ``exact=True`` patches HF for the
duration (:mod:`nlaverify.interop.hf_patches`; only the patches the model needs,
:func:`~nlaverify.interop.hf_patches.needed_patches`: GPT-2's attention stays HF's own) so
that it computes in the model dtype everywhere; the two implementations must then agree to
the tolerance model in every node, the logits, the loss and every gradient. A patch must
not hide a bug of the HF code it replaces: every patched call also runs HF's stock code on
the same inputs, and a "patch fidelity" check row per call (named by its graph node,
:attr:`HFVerifyReport.first_patch_divergence`) compares the two at float32's bound.

Limits: a model above ``max_params`` parameters (:data:`DEFAULT_MAX_PARAMS`,
``$NLAVERIFY_HF_MAX_PARAMS``) is refused before anything is allocated; a directory holding
``pytorch_model.bin`` (or another format) and no safetensors is refused, never verified on
seeded weights; a config ``transformers`` refuses is a
:class:`~nlaverify.config.ConfigError`.

torch and transformers are imported lazily (the ``[hf]`` extra).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nlaverify.errors import ArgumentError, ShapeError, UnknownNameError

#: the name of nlaverify's capturing attention function in ``AttentionInterface``
CAPTURE_ATTENTION = "nlaverify_capture"
#: the HF ``model_type``\ s whose module layout :func:`verify_hf` maps
LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma")


def _require_hf() -> tuple[Any, Any]:
    """``(torch, transformers)``, or a :class:`~nlaverify.errors.MissingExtraError` (an
    ImportError; one line and exit 2 on the command line) naming the extra to install."""
    from nlaverify.errors import MissingExtraError

    try:
        import torch
        import transformers
    except ImportError as exc:
        raise MissingExtraError(f"nlaverify verify --hf needs torch and transformers, not "
                                f"installed here ({exc}): pip install 'nlaverify[hf]'") from exc
    return torch, transformers


# --- capture ------------------------------------------------------------------------

@dataclass
class _Recorder:
    """HF intermediates of one forward pass: module outputs/inputs by ``(path, where)``
    and the attention tensors by ``(layer, name)``, as float64 NumPy copies."""

    exact: bool
    tensors: dict[tuple[Any, str], Any] = field(default_factory=dict)
    #: exact mode: HF's stock output next to each exact replacement's (patch fidelity)
    fidelity: list[Any] | None = None

    def keep(self, key: tuple[Any, str], value: Any) -> None:
        self.tensors[key] = _detach(value)


def _detach(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        out = value.detach()
        return out.numpy().copy() if out.dtype in (torch.int64, torch.int32) else \
            out.to(torch.float64).numpy().copy()
    if isinstance(value, tuple | list):
        return tuple(_detach(v) for v in value)
    return value


_ACTIVE: contextvars.ContextVar[_Recorder | None] = contextvars.ContextVar(
    "nlaverify_hf_recorder", default=None)


def exact_eager_attention(module: Any, query: Any, key: Any, value: Any,
                          attention_mask: Any, scaling: float | None = None,
                          dropout: float = 0.0, **kwargs: Any) -> tuple[Any, Any]:
    r"""HF's ``eager_attention_forward`` (``models/llama/modeling_llama.py``) with the
    softmax in the model dtype instead of float32:
    :math:`\operatorname{softmax}(QK^\top s + M)V`, keys and values repeated over the
    ``num_key_value_groups`` query heads, :math:`M` HF's additive mask (causal, or a
    sliding window). Returns ``(B, n, H, d_h)`` and the weights, as HF does."""
    import torch

    if kwargs.get("softcap") is not None:
        raise ArgumentError("exact_eager_attention: attention logit soft-capping is not "
                            "modelled by nlaverify")
    rep = getattr(module, "num_key_value_groups", 1)
    if rep > 1:
        b, h, n, d = key.shape
        key = key[:, :, None].expand(b, h, rep, n, d).reshape(b, h * rep, n, d)
        value = value[:, :, None].expand(b, h, rep, n, d).reshape(b, h * rep, n, d)
    s = query.shape[-1] ** -0.5 if scaling is None else scaling
    weights = torch.matmul(query, key.transpose(2, 3)) * s
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = torch.softmax(weights, dim=-1)
    out = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return out, weights


def _capture_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                       *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """The registered attention function: records query (after RoPE), key and value
    (before ``repeat_kv``) and the output, then runs HF's eager attention of the model's
    own ``modeling_*.py`` (stock), or :func:`exact_eager_attention` (exact)."""

    from nlaverify.interop.hf_patches import record_fidelity

    rec = _ACTIVE.get()
    if rec is not None and rec.exact:
        out = exact_eager_attention(module, query, key, value, attention_mask, *args, **kwargs)
        # HF's own attention on the same inputs: the replacement must not hide its bugs
        record_fidelity(rec.fidelity, f"attention[{module.layer_idx}]", "attention_softmax",
                        "eager_attention_forward", lambda: _stock_attention(
                            module, query, key, value, attention_mask, *args, **kwargs)[0],
                        out[0])
    else:
        out = _stock_attention(module, query, key, value, attention_mask, *args, **kwargs)
    if rec is not None:
        layer = module.layer_idx
        for name, t in (("query", query), ("key", key), ("value", value), ("output", out[0])):
            rec.keep((layer, name), t)
    return out


def _stock_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                     *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """HF's own eager attention of the model's ``modeling_*.py`` (GPT-2 with
    ``reorder_and_upcast_attn``: its float32 ``_upcast_and_reordered_attn``)."""
    from nlaverify.interop.hf_patches import modeling_module

    if getattr(module, "reorder_and_upcast_attn", False):  # GPT-2's float32 option
        # its float32 scores + the model-dtype mask would fail HF's own dtype assertion
        # (models/gpt2/modeling_gpt2.py, transformers 5.24, float64 models): mask in float32
        import torch

        mask = None if attention_mask is None else attention_mask.to(torch.float32)
        return module._upcast_and_reordered_attn(query, key, value, mask)
    return modeling_module(module).eager_attention_forward(
        module, query, key, value, attention_mask, *args, **kwargs)


def _register_attention() -> None:
    """Register :data:`CAPTURE_ATTENTION` with HF's attention and mask interfaces (the
    eager mask: additive, causal or sliding-window). Idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(CAPTURE_ATTENTION, _capture_attention)
    AttentionMaskInterface.register(CAPTURE_ATTENTION, eager_mask)


# --- the map from HF captures to graph nodes ----------------------------------------

@dataclass(frozen=True)
class _Tap:
    """Graph node ``node`` is ``convert`` of the capture ``(path, where)`` (a module's
    ``"out"``/``"in"``; ``path=None``: the attention function's ``(layer, where)``)."""

    node: str
    path: str | None
    where: str
    convert: Callable[[Any], np.ndarray]
    layer: int | None = None

    @property
    def source(self) -> str:
        if self.path is None:
            return f"attention[{self.layer}].{self.where}"
        return f"{self.path}.{'output' if self.where == 'out' else 'input'}"


def _rows(a: np.ndarray) -> np.ndarray:
    """``(1, n, c) -> (n, c)`` (a batch of one)."""
    return a[0] if a.ndim == 3 else a


def _layouts(config: Any) -> dict[str, Callable[..., Callable[[Any], np.ndarray]]]:
    """Converters from HF layouts to the graph's, with the RoPE permutation ``perm`` of
    each head's last axis when ``positions == "rope"``."""
    from nlaverify.interop.weights import rope_permutation

    dh = config.d_head
    perm = rope_permutation(dh) if config.positions == "rope" else np.arange(dh)

    def cols(h: int, permute: bool = True) -> Callable[[Any], np.ndarray]:
        def f(a: Any) -> np.ndarray:
            r = _rows(a)
            p = perm if permute else np.arange(dh)
            return r.reshape(r.shape[0], h, dh)[..., p].reshape(r.shape[0], h * dh)
        return f

    def heads_of_rows(h: int, permute: bool = True) -> Callable[[Any], np.ndarray]:
        def f(a: Any) -> np.ndarray:
            r = _rows(a)
            p = perm if permute else np.arange(dh)
            return r.reshape(r.shape[0], h, dh).transpose(1, 0, 2)[..., p]
        return f

    def bhnd(permute: bool = True) -> Callable[[Any], np.ndarray]:  # (1, H, n, dh)
        return lambda a: a[0][..., perm if permute else np.arange(dh)]

    def bnhd(permute: bool = True) -> Callable[[Any], np.ndarray]:  # (1, n, H, dh)
        return lambda a: a[0].transpose(1, 0, 2)[..., perm if permute else np.arange(dh)]

    return {"cols": cols, "heads_of_rows": heads_of_rows, "bhnd": bhnd, "bnhd": bnhd}


def _taps(model_type: str, config: Any) -> list[_Tap]:
    """Every graph node with an HF counterpart, for a model of ``model_type``."""
    if model_type == "gpt2":
        return _gpt2_taps(config)
    if model_type in LLAMA_LIKE:
        return _llama_taps(config, model_type)
    raise UnknownNameError(f"verify_hf: model_type {model_type!r}: expected one of gpt2, "
                           f"{', '.join(LLAMA_LIKE)}")


def _gpt2_taps(c: Any) -> list[_Tap]:
    lay = _layouts(c)
    d = c.d_model
    taps = [_Tap("embed", "transformer.wte", "out", _rows),
            _Tap("x0", "transformer.drop", "out", _rows)]  # wte + wpe (dropout: identity)
    for layer in range(c.n_blocks):
        p, h = f"blocks.{layer}", f"transformer.h.{layer}"
        taps += [_Tap(f"{p}.norm1", f"{h}.ln_1", "out", _rows)]
        for i, x in enumerate("qkv"):  # the fused c_attn output [q | k | v]
            taps.append(_Tap(f"{p}.attn.{x}", f"{h}.attn.c_attn", "out",
                             lambda a, i=i: _rows(a)[:, i * d:(i + 1) * d]))
        for x, where in (("q", "query"), ("k", "key"), ("v", "value")):
            taps.append(_Tap(f"{p}.attn.{x}_heads", None, where, lay["bhnd"](False), layer))
        taps += [_Tap(f"{p}.attn.heads", None, "output", lay["bnhd"](False), layer),
                 _Tap(f"{p}.attn.merged", f"{h}.attn.c_proj", "in", _rows),
                 _Tap(f"{p}.attn.out", f"{h}.attn.c_proj", "out", _rows),
                 _Tap(f"{p}.resid1", f"{h}.ln_2", "in", _rows),
                 _Tap(f"{p}.norm2", f"{h}.ln_2", "out", _rows),
                 _Tap(f"{p}.mlp.in", f"{h}.mlp.c_fc", "out", _rows),
                 _Tap(f"{p}.mlp.act", f"{h}.mlp.act", "out", _rows),
                 _Tap(f"{p}.mlp.out", f"{h}.mlp.c_proj", "out", _rows),
                 _Tap(f"{p}.resid2", h, "out", _rows)]
    return [*taps, _Tap("final_norm", "transformer.ln_f", "out", _rows),
            _Tap("logits", "lm_head", "out", _rows)]


def _onehot(n_experts: int) -> Callable[[Any], np.ndarray]:
    """Mixtral's router output ``(logits, weights, indices)`` -> the 0/1 routing mask."""
    def f(out: Any) -> np.ndarray:
        idx = np.asarray(out[2]).astype(np.int64)  # check_model hands it over in float64
        mask = np.zeros((idx.shape[0], n_experts))
        np.put_along_axis(mask, idx, 1.0, axis=-1)
        return mask
    return f


def _llama_taps(c: Any, model_type: str) -> list[_Tap]:
    lay = _layouts(c)
    rope = c.positions == "rope"
    H, Hkv = c.n_heads, c.n_kv_heads
    # Gemma's embedding module returns the scaled embedding, the graph's embed_scaled
    first = "embed_scaled" if c.embed_scale else "embed"
    taps = [_Tap(first, "model.embed_tokens", "out", _rows),
            _Tap("x0", "model.embed_tokens", "out", _rows)]
    for layer in range(c.n_blocks):
        p, h = f"blocks.{layer}", f"model.layers.{layer}"
        a = f"{h}.self_attn"
        taps += [_Tap(f"{p}.norm1", f"{h}.input_layernorm", "out", _rows),
                 _Tap(f"{p}.attn.q", f"{a}.q_proj", "out", lay["cols"](H, rope)),
                 _Tap(f"{p}.attn.k", f"{a}.k_proj", "out", lay["cols"](Hkv, rope)),
                 _Tap(f"{p}.attn.v", f"{a}.v_proj", "out", _rows),
                 _Tap(f"{p}.attn.q_heads", f"{a}.q_proj", "out", lay["heads_of_rows"](H, rope)),
                 _Tap(f"{p}.attn.k_heads", f"{a}.k_proj", "out",
                      lay["heads_of_rows"](Hkv, rope)),
                 _Tap(f"{p}.attn.v_heads", None, "value", lay["bhnd"](False), layer)]
        if getattr(c, "qk_norm", False):
            taps += [_Tap(f"{p}.attn.q_norm", f"{a}.q_norm", "out", lay["bnhd"](rope)),
                     _Tap(f"{p}.attn.k_norm", f"{a}.k_norm", "out", lay["bnhd"](rope))]
        if rope:
            taps += [_Tap(f"{p}.attn.q_rope", None, "query", lay["bhnd"](), layer),
                     _Tap(f"{p}.attn.k_rope", None, "key", lay["bhnd"](), layer)]
        taps += [_Tap(f"{p}.attn.heads", None, "output", lay["bnhd"](False), layer),
                 _Tap(f"{p}.attn.merged", f"{a}.o_proj", "in", _rows),
                 _Tap(f"{p}.attn.out", f"{a}.o_proj", "out", _rows),
                 _Tap(f"{p}.resid1", f"{h}.post_attention_layernorm", "in", _rows),
                 _Tap(f"{p}.norm2", f"{h}.post_attention_layernorm", "out", _rows)]
        m = f"{h}.mlp"
        if c.n_experts:
            taps += [_Tap(f"{p}.mlp.scores", f"{m}.gate", "out", lambda o: np.asarray(o[0])),
                     _Tap(f"{p}.mlp.route", f"{m}.gate", "out", _onehot(c.n_experts)),
                     _Tap(f"{p}.mlp.out", m, "out", _rows)]
        else:
            taps += [_Tap(f"{p}.mlp.gate", f"{m}.gate_proj", "out", _rows),
                     _Tap(f"{p}.mlp.up", f"{m}.up_proj", "out", _rows),
                     _Tap(f"{p}.mlp.act", f"{m}.down_proj", "in", _rows),
                     _Tap(f"{p}.mlp.out", f"{m}.down_proj", "out", _rows)]
        taps.append(_Tap(f"{p}.resid2", h, "out", _rows))
    return [*taps, _Tap("final_norm", "model.norm", "out", _rows),
            _Tap("logits", "lm_head", "out", _rows)]


# --- the report ---------------------------------------------------------------------

@dataclass(frozen=True)
class HFNodeRow:
    """One graph node: HF's value (``hf``, the capture it comes from) against the graph's,
    normwise error and the tolerance model's bound."""

    node: str
    op: str
    hf: str
    error: float
    bound: float
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.error <= self.bound


@dataclass(frozen=True)
class HFCheck:
    """An end-to-end check: a parameter gradient (by its HF state-dict key), the RoPE
    frequencies of exact mode, a checkpoint's weights, or the fidelity of one patched HF
    call (stock vs exact, float32's bound)."""

    name: str
    error: float
    bound: float
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.error <= self.bound


@dataclass
class HFVerifyReport:
    """The outcome of :func:`verify_hf`."""

    source: str
    model_type: str
    config: Any
    dtype: str
    exact: bool
    weights: str
    tokens: list[int]
    #: the exact-arithmetic patches applied (:data:`~nlaverify.interop.hf_patches.
    #: EXACT_PATCHES`; all of them when ``exact``)
    patches: list[str] = field(default_factory=list)
    plant: str | None = None
    planted: str | None = None
    rows: list[HFNodeRow] = field(default_factory=list)
    gradients: list[HFCheck] = field(default_factory=list)
    checks: list[HFCheck] = field(default_factory=list)
    #: graph op nodes HF exposes no value for (e.g. ``k_shared``: ``repeat_kv`` runs
    #: inside HF's attention)
    unmapped: list[str] = field(default_factory=list)
    #: the first node, in topological order, whose HF value is beyond its bound
    first_divergence: str | None = None
    #: the first parameter (HF state-dict key, in params_to_hf's order) whose gradient is
    #: beyond its bound
    first_gradient_divergence: str | None = None
    #: stock mode on a float64 model: the first node beyond the bound of float32, the
    #: precision stock HF drops to (None: every departure is float32 rounding)
    first_beyond_float32: str | None = None
    #: exact mode: the graph node of the first patched HF module whose stock code differs
    #: from its exact replacement beyond float32's bound (a bug the patch would hide)
    first_patch_divergence: str | None = None

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows) and all(g.ok for g in self.gradients) and all(
            c.ok for c in self.checks)

    def row(self, node: str) -> HFNodeRow:
        """The row of graph node ``node``."""
        for r in self.rows:
            if r.node == node:
                return r
        raise UnknownNameError(f"HFVerifyReport.row: no row for node {node!r}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-able (non-finite errors stay floats: write with :mod:`nlaverify.jsonout`)."""
        def rows(items: list[Any]) -> list[dict[str, Any]]:
            return [{**{k: getattr(r, k) for k in r.__dataclass_fields__}, "ok": r.ok}
                    for r in items]

        return {"ok": self.ok, "source": self.source, "model_type": self.model_type,
                "config": self.config.as_dict(), "dtype": self.dtype, "exact": self.exact,
                "patches": list(self.patches),
                "weights": self.weights, "tokens": list(self.tokens), "plant": self.plant,
                "planted": self.planted, "first_divergence": self.first_divergence,
                "first_gradient_divergence": self.first_gradient_divergence,
                "first_beyond_float32": self.first_beyond_float32,
                "first_patch_divergence": self.first_patch_divergence,
                "nodes": rows(self.rows), "gradients": rows(self.gradients),
                "checks": rows(self.checks), "unmapped": list(self.unmapped)}


# --- verification -------------------------------------------------------------------

def _is_checkpoint_dir(source: Any) -> bool:
    if isinstance(source, Mapping) or not os.path.isdir(os.fspath(source)):
        return False
    names = os.listdir(os.fspath(source))
    return any(n.endswith(".safetensors") or n == "model.safetensors.index.json"
               for n in names)


def _check_tokens(tokens: Any, config: Any) -> np.ndarray:
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ShapeError(f"verify_hf: argument 'tokens': expected shape (n,), got {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ArgumentError(f"verify_hf: argument 'tokens': expected integer token ids, got "
                            f"dtype {arr.dtype}")
    if not 2 <= arr.shape[0] <= config.context:
        raise ShapeError(f"verify_hf: argument 'tokens': expected 2 <= n <= context="
                         f"{config.context} (position t predicts token t+1), got n="
                         f"{arr.shape[0]}")
    if arr.min() < 0 or arr.max() >= config.vocab_size:
        raise ArgumentError(f"verify_hf: argument 'tokens': expected ids in [0, vocab_size="
                            f"{config.vocab_size}), got {int(arr.min())}..{int(arr.max())}")
    return arr.astype(np.int64)


def _build_hf_model(hf: Any, dtype: Any, checkpoint: str | None) -> Any:
    """The HF model of ``hf.raw`` (its ``config.json``) in ``dtype``, with the capturing
    attention function, eval mode (dropout off): HF's own ``from_pretrained`` of the
    ``checkpoint`` directory (offline), or random init (weights written afterwards)."""
    _, transformers = _require_hf()
    _register_attention()
    from huggingface_hub.errors import StrictDataclassError

    from nlaverify.config import ConfigError

    raw = {k: v for k, v in dict(hf.raw).items() if k != "model_type"}
    try:
        hf_config = transformers.AutoConfig.for_model(hf.model_type, **raw)
    except (StrictDataclassError, ValueError, TypeError) as e:
        raise ConfigError(f"verify_hf: transformers {transformers.__version__} refuses this "
                          f"{hf.model_type} config.json ({type(e).__name__}: "
                          f"{str(e).strip().splitlines()[-1] if str(e).strip() else e!r}); "
                          "nlaverify's reading of it is not a model HF can build") from None
    # experts: HF's loop over experts ("eager"); the default grouped_mm kernel takes no
    # float64 on the CPU (transformers/integrations/moe.py)
    extra = {"experts_implementation": "eager"} if getattr(
        hf_config, "num_local_experts", 0) else {}
    auto = transformers.AutoModelForCausalLM
    with _quiet_transformers():
        if checkpoint is None:
            model = auto.from_config(hf_config, dtype=dtype,
                                     attn_implementation=CAPTURE_ATTENTION, **extra)
        else:
            model = auto.from_pretrained(checkpoint, config=hf_config, dtype=dtype,
                                         attn_implementation=CAPTURE_ATTENTION,
                                         local_files_only=True, **extra)
    model.eval()
    _clear_padding_idx(model)
    return model


def _clear_padding_idx(model: Any) -> None:
    """``nn.Embedding(padding_idx=p)`` (HF builds it from ``pad_token_id``; Gemma's is 0)
    gives row ``p`` no gradient: a training convention, not the model's function (the
    forward is the same lookup). Cleared, so that the gradient compared is the function's
    and a token equal to ``pad_token_id`` does not fail a healthy model."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.Embedding) and module.padding_idx is not None:
            module.padding_idx = None


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def _load_weights(model: Any, state: Mapping[str, np.ndarray]) -> None:
    """Copy ``state`` (HF keys) into ``model``: every parameter given, no unknown key, every
    shape right; checked before anything is written."""
    import torch

    named = dict(model.named_parameters(remove_duplicate=False))
    buffers = dict(model.named_buffers())
    unknown = sorted(set(state) - set(named) - set(buffers))
    if unknown:
        raise UnknownNameError(f"verify_hf: the mapped weights hold {unknown[0]!r}, which the "
                               f"HF model does not have")
    missing = sorted(set(named) - set(state))
    if missing:
        raise UnknownNameError(f"verify_hf: no weight for the HF parameter {missing[0]!r}"
                               + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
    for key, value in state.items():
        target = named.get(key, buffers.get(key))
        if tuple(np.shape(value)) != tuple(target.shape):
            raise ShapeError(f"verify_hf: weight {key!r}: expected shape {tuple(target.shape)},"
                             f" got {tuple(np.shape(value))}")
    with torch.no_grad():
        for key, value in state.items():
            target = named.get(key, buffers.get(key))
            target.copy_(torch.from_numpy(np.asarray(value, dtype=np.float64)))


def _capture_name(t: _Tap) -> str:
    """The name :func:`~nlaverify.check.check_model` reads ``t`` by: a module path (``:input``
    for its first input) or a key of the intermediates :func:`_hf_call` returns."""
    if t.path is None:
        return t.source  # attention[layer].query / key / value / output
    return t.path if t.where == "out" else f"{t.path}:input"


def _hf_call(exact_attention: bool, exact_loss: bool, fidelity: list[Any]
             ) -> Callable[[Any, Any, Any], Any]:
    """check_model's ``call``: HF on ``tokens[None]``, returning ``(logits, the attention
    function's captures, loss)`` (module docstring: HF's own loss, or the same mean with
    ``torch`` in the model dtype, HF's loss function then going to ``fidelity``)."""
    def call(model: Any, ids: Any, targets: Any) -> tuple[Any, dict[str, Any], Any]:
        import torch

        from nlaverify.interop.hf_patches import record_fidelity

        rec = _Recorder(exact_attention, fidelity=fidelity)
        token = _ACTIVE.set(rec)
        ids = ids[None, :]
        try:
            with _quiet_transformers():
                if exact_loss:
                    logits = model(input_ids=ids, use_cache=False).logits
                    loss = torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:])
                    record_fidelity(fidelity, "loss", "loss", "ForCausalLMLoss",
                                    lambda: model.loss_function(
                                        logits=logits, labels=ids,
                                        vocab_size=model.config.vocab_size), loss)
                else:
                    out = model(input_ids=ids, labels=ids, use_cache=False)
                    logits, loss = out.logits, out.loss
        finally:
            _ACTIVE.reset(token)
        captured = {f"attention[{layer}].{where}": v
                    for (layer, where), v in rec.tensors.items()}
        return logits, captured, loss
    return call


def _hf_load(config: Any, model_type: str, params: Mapping[str, np.ndarray],
             state: Mapping[str, np.ndarray], model: Any
             ) -> tuple[Callable[[Any, Mapping[str, Any]], dict[str, Any]], dict[str, list[str]]]:
    r"""check_model's ``load``: :func:`~nlaverify.interop.weights.params_to_hf` as a
    differentiable map of torch tensors, and the graph parameters each HF key holds.

    ``params_to_hf`` only moves entries (transposes, splits, concatenations, the RoPE
    permutation of rows) and adds a constant (Gemma's :math:`w = \gamma - 1`): it is
    :math:`T p + c` with :math:`T` a gather. Run on the entries' indices (``gradients=True``:
    no offset), it gives the gather; on zeros, :math:`c`. The gather of ``params`` plus
    :math:`c` must reproduce ``state = params_to_hf(params)`` exactly, or this is refused;
    so autograd through ``load`` is autograd through the map HF's weights came from. The
    values are HF's own parameters at the call (what ``from_pretrained`` read, or what was
    written, a planted mistake included), exactly. Of
    tied HF parameters (Gemma's, GPT-2's head) one key is given, as ``functional_call``
    requires."""
    import torch

    from nlaverify.interop.weights import params_to_hf

    names = list(params)
    sizes = [int(np.size(params[k])) for k in names]
    starts = np.cumsum([0, *sizes])
    ids = {k: np.arange(starts[i], starts[i + 1], dtype=np.float64).reshape(np.shape(params[k]))
           for i, k in enumerate(names)}
    gather = {k: v.astype(np.int64) for k, v in params_to_hf(config, model_type, ids,
                                                                gradients=True).items()}
    const = params_to_hf(config, model_type, {k: np.zeros_like(v, dtype=np.float64)
                                                 for k, v in params.items()})
    flat = np.concatenate([np.asarray(params[k], dtype=np.float64).reshape(-1) for k in names])
    for key, g in gather.items():
        if not np.array_equal(flat[g] + const[key], np.asarray(state[key])):
            raise ArgumentError(f"verify_hf: params_to_hf({model_type}) at {key!r} is not a "
                                "gather plus a constant; it cannot be differentiated here")
    owner = np.repeat(np.arange(len(names)), sizes)
    holds = {key: [names[i] for i in dict.fromkeys(owner[g].reshape(-1).tolist())]
             for key, g in gather.items()}
    first = set(dict(model.named_parameters()))  # one name per tied tensor
    given = [k for k in gather if k in first]

    def load(hf_model: Any, p: Mapping[str, Any]) -> dict[str, Any]:
        x = torch.cat([p[k].reshape(-1) for k in names])
        held = dict(hf_model.named_parameters())
        out = {}
        for key in given:
            w = x[torch.from_numpy(gather[key])]
            if np.any(const[key]):
                w = w + torch.from_numpy(const[key]).to(x.dtype)
            # the value HF holds (what it loaded, a planted mistake included), exactly; the
            # derivative that of the gather (w - w.detach() is an exact zero)
            out[key] = held[key].detach() + (w - w.detach())
        return out
    return load, holds


def _exact_parts(exact: Any, known: Mapping[str, str]) -> frozenset[str]:
    """The exact-arithmetic patches ``exact`` asks for (``True``: all, ``False``: none)."""
    if isinstance(exact, bool):
        return frozenset(known) if exact else frozenset()
    if isinstance(exact, str) or not isinstance(exact, Collection):
        raise ArgumentError(f"verify_hf: argument 'exact': expected True, False or a "
                            f"collection of patch names, got {exact!r}")
    unknown = sorted(set(exact) - set(known))
    if unknown:
        raise UnknownNameError(f"verify_hf: argument 'exact': unknown patch {unknown[0]!r}: "
                               f"expected some of {', '.join(known)}")
    return frozenset(exact)


#: the largest model :func:`verify_hf` builds by default (parameters); it holds about
#: :data:`BYTES_PER_PARAMETER` bytes per parameter. ``NLAVERIFY_HF_MAX_PARAMS`` or the
#: ``max_params`` argument raise it.
DEFAULT_MAX_PARAMS = 100_000_000
#: float64 copies held per parameter: the graph's value and cotangent, HF's parameter and
#: gradient, the mapped state dict and mapped gradients (8 bytes each)
BYTES_PER_PARAMETER = 6 * 8


def _max_params(max_params: int | None) -> int:
    """``max_params``, else ``$NLAVERIFY_HF_MAX_PARAMS``, else :data:`DEFAULT_MAX_PARAMS`."""
    if max_params is None:
        env = os.environ.get("NLAVERIFY_HF_MAX_PARAMS")
        if env is None:
            return DEFAULT_MAX_PARAMS
        try:
            max_params = int(env)
        except ValueError:
            raise ArgumentError(f"verify_hf: environment variable NLAVERIFY_HF_MAX_PARAMS: "
                                f"expected an integer, got {env!r}") from None
    if isinstance(max_params, bool) or not isinstance(max_params, int) or max_params < 1:
        raise ArgumentError(f"verify_hf: argument 'max_params': expected an integer >= 1, got "
                            f"{max_params!r}")
    return max_params


def _check_size(graph: Any, config: Any, limit: int) -> None:
    """Refuse, before anything is allocated, a model above ``limit`` parameters."""
    from nlaverify.graph.build import parameter_counts

    total = parameter_counts(graph).total
    if total > limit:
        raise ArgumentError(
            f"verify_hf: {config.name} has {total:,} parameters, above the limit of {limit:,} "
            f"(about {_bytes_text(total * BYTES_PER_PARAMETER)} of float64 copies would be "
            "allocated); raise it with --max-params N on the command line, max_params= in "
            "Python, or NLAVERIFY_HF_MAX_PARAMS")


def _bytes_text(n: float) -> str:
    """A byte count in the largest unit that keeps it >= 1 (``12.5 GiB``, ``3.1 MiB``)."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _resolve(source: Any) -> tuple[Any, str, str | None]:
    """``(hf_config, description, checkpoint directory or None)``. A directory holding
    weights nlaverify cannot read (``pytorch_model.bin``...) and no safetensors is refused:
    it must not be verified on random weights."""
    from nlaverify.interop.hf_config import load_hf_config
    from nlaverify.interop.weights import foreign_weight_files

    if isinstance(source, Mapping):
        return load_hf_config(source), "config dict", None
    if not isinstance(source, str | os.PathLike):
        raise ArgumentError(f"verify_hf: argument 'source': expected a config dict, a "
                            f"config.json path or a checkpoint directory, got "
                            f"{type(source).__name__}")
    if _is_checkpoint_dir(source):
        return load_hf_config(source), f"checkpoint {os.fspath(source)}", os.fspath(source)
    foreign = foreign_weight_files(source)
    if foreign:
        raise ArgumentError(f"verify_hf: argument 'source': {os.fspath(source)!r} holds "
                            f"{', '.join(foreign)} but no safetensors checkpoint; nlaverify "
                            "reads only safetensors (model.safetensors or "
                            "model.safetensors.index.json): convert with transformers' "
                            "save_pretrained(..., safe_serialization=True)")
    return load_hf_config(source), os.fspath(source), None


def verify_hf(source: Any, *, tokens: Any = None, seq_len: int = 6, seed: int = 0,
              exact: bool | Collection[str] = False, plant: str | None = None,
              dtype: str = "float64", max_params: int | None = None) -> HFVerifyReport:
    r"""Run the Hugging Face model of ``source`` and the nlaverify graph on the same weights
    and tokens; compare every mapped node, the loss and every parameter gradient.

    Args:
        source: an HF config dict, a ``config.json`` path or a directory holding one
            (weights: nlaverify's seeded :func:`~nlaverify.graph.run.init_params`, written
            into HF with :func:`~nlaverify.interop.weights.params_to_hf`), or a checkpoint
            directory (``config.json`` + safetensors,
            :func:`~nlaverify.interop.weights.load_checkpoint`).
        tokens: the input ids ``(n,)``, ``2 <= n <= context`` (default: ``seq_len`` seeded
            ids, :func:`~nlaverify.graph.run.sample_data`); position :math:`t` predicts
            token :math:`t+1` (module docstring).
        exact: patch HF to compute in the model dtype where it drops to float32
            (:func:`~nlaverify.interop.hf_patches.exact_arithmetic`): ``True`` (every
            patch the model needs, :func:`~nlaverify.interop.hf_patches.needed_patches`),
            ``False`` (stock HF), or a subset of
            :data:`~nlaverify.interop.hf_patches.EXACT_PATCHES` (to locate each upcast; the
            ones the model does not need are not applied). Each patched call also runs HF's
            stock code on the same inputs: a check row per call (patch fidelity, named by
            its graph node) fails when they differ beyond float32's bound.
        plant: a planted mistake (test instrument, :data:`~nlaverify.interop.hf_patches.
            PLANTS`).
        dtype: the HF model's dtype (``"float64"`` or ``"float32"``); the graph runs in
            float64 and the bounds are those of ``dtype``.
        max_params: refuse (before allocating) a model with more parameters (default
            ``$NLAVERIFY_HF_MAX_PARAMS``, else :data:`DEFAULT_MAX_PARAMS`).

    Returns:
        :class:`HFVerifyReport`; ``first_divergence`` names the first graph node (in
        topological order) whose HF value is beyond the tolerance model's bound.
    """
    if isinstance(source, str | os.PathLike) and not os.path.exists(source):
        raise ArgumentError(f"verify_hf: argument 'source': no such file or folder: "
                            f"{os.fspath(source)!r} (a config.json or a checkpoint folder)")
    torch, _ = _require_hf()
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import init_params, sample_data
    from nlaverify.interop.hf_patches import (
        EXACT_PATCHES,
        exact_arithmetic,
        needed_patches,
        plant_mistake,
    )
    from nlaverify.interop.weights import load_checkpoint, params_to_hf
    from nlaverify.ops.loss import IGNORE_INDEX

    if dtype not in ("float64", "float32"):
        raise ArgumentError(f"verify_hf: argument 'dtype': expected 'float64' or 'float32', "
                            f"got {dtype!r}")
    parts = _exact_parts(exact, EXACT_PATCHES)
    limit = _max_params(max_params)
    hf, described, checkpoint = _resolve(source)
    config, model_type = hf.config, hf.model_type
    needed = needed_patches(model_type, hf.raw)
    parts = parts & needed
    graph = build_transformer(config)
    _check_size(graph, config, limit)
    if checkpoint is not None:  # read and validated whole before HF loads it
        # float64 before any offset: Gemma's 1 + w of a float32/bfloat16 checkpoint is
        # exact in float64, as HF's from_pretrained(dtype=float64) computes it
        _, params = load_checkpoint(checkpoint, dtype=np.float64)
        weights = described
    else:
        params = init_params(graph, seed)
        weights = f"nlaverify init_params(seed={seed})"
    if tokens is None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or not (
                2 <= seq_len <= config.context):
            raise ArgumentError(f"verify_hf: argument 'seq_len': expected an integer in [2, "
                                f"context={config.context}], got {seq_len!r}")
        tokens = sample_data(config.vocab_size, seq_len, seed)["tokens"]
    tokens = _check_tokens(tokens, config)
    n = tokens.shape[0]
    targets = np.concatenate([tokens[1:], [IGNORE_INDEX]]).astype(np.int64)

    # the HF side, run and judged by check_model (one node-comparison engine): HF is an
    # adapter, its captures a map of intermediates, its weights a load built on params_to_hf
    from nlaverify.check.model import _compare_model

    taps = _taps(model_type, config)
    model = _build_hf_model(hf, getattr(torch, dtype), checkpoint)
    state = params_to_hf(config, model_type, params)
    weights_check = None
    if checkpoint is None:
        _load_weights(model, state)
    else:  # HF read the checkpoint its own way: does it hold what nlaverify read?
        weights_check = _weights_check(model, state)
    load, hf_keys = _hf_load(config, model_type, params, state, model)
    report = HFVerifyReport(described, model_type, config, dtype, parts == needed,
                            weights, tokens.tolist(), patches=sorted(parts), plant=plant)
    fidelity: list[Any] = []
    sources = {t.node: t.source for t in taps}
    sources["loss"] = ("torch cross_entropy in the model dtype" if "loss" in parts
                       else "HF ForCausalLMLoss (loss_utils.py)")
    with exact_arithmetic(model, config, parts, fidelity=fidelity), plant_mistake(
            model, model_type, plant, exact="router_softmax" in parts) as planted:
        mc = _compare_model(
            model, config, params, tokens, targets=targets, load=load,
            intermediates={t.node: (_capture_name(t), t.convert) for t in taps},
            call=_hf_call("attention_softmax" in parts, "loss" in parts, fidelity),
            dtype=dtype, batched=False, subject=f"Hugging Face {model_type}")
    report.planted = planted

    # HF's rows are check_model's, with HF's names for the sources and the parameters
    judge32 = dtype == "float64" and not report.exact
    grad_rows: dict[str, Any] = {}
    for row in mc.report.rows:
        if row.check.startswith("gradient"):
            grad_rows[row.check.removeprefix("gradient ")] = row  # "gradients": raised
            continue
        node = row.check.removeprefix("node ")
        error, bound, note = row.error, row.bound, ""
        if row.verdict == "skip":
            error, bound, note = 0.0, 1.0, f"skipped: {row.reason}"
        elif not np.isfinite(error):
            note = row.reason
        report.rows.append(HFNodeRow(node, mc.graph.nodes[node]["op"], sources[node],
                                     error, bound, note))
        if (judge32 and report.first_beyond_float32 is None
                and not error <= mc.bound.linear("float32", node, False).rtol):
            report.first_beyond_float32 = node
    report.first_divergence = mc.first
    report.unmapped = list(mc.unmapped)

    # every HF parameter's gradient: the worst of check_model's rows of the graph
    # parameters it holds (a fused c_attn holds three), in params_to_hf's order
    named = dict(model.named_parameters(remove_duplicate=False))
    failed = grad_rows.get("gradients")  # check_model's one row "gradients": autograd raised
    for key, graph_params in hf_keys.items():
        p = named.get(key)
        if p is None or tuple(p.shape) != np.shape(state[key]):
            check = HFCheck(key, math.inf, 0.0, "no such HF parameter" if p is None else
                            f"HF shape {tuple(p.shape)} vs mapped {np.shape(state[key])}")
        elif failed is not None:
            check = HFCheck(key, math.inf, math.nan, failed.reason)
        else:
            worst = max((grad_rows[g] for g in graph_params), key=lambda r: r.ratio)
            check = HFCheck(key, worst.error, worst.bound, "" if len(graph_params) == 1 else
                            f"worst of {', '.join(graph_params)}: {worst.check}")
        report.gradients.append(check)
        if not check.ok and report.first_gradient_divergence is None:
            report.first_gradient_divergence = key

    if weights_check is not None:
        report.checks.append(weights_check)
    if "rotary" in parts and config.positions == "rope":
        report.checks.append(_rope_check(model, config))
    for f in fidelity:
        check = _fidelity_check(f, config, n)
        report.checks.append(check)
        if not check.ok and report.first_patch_divergence is None:
            report.first_patch_divergence = _fidelity_node(f.path)
    return report


def _fidelity_node(path: str) -> str:
    """The graph node where a patched HF module's output first enters (module docstring of
    :mod:`~nlaverify.interop.hf_patches`)."""
    import re

    if path == "loss":
        return "loss"
    if path == "model.norm":
        return "final_norm"
    if path.endswith("rotary_emb"):
        return "blocks.0.attn.q_rope"  # the angles of every block's q_rope / k_rope
    m = re.fullmatch(r"attention\[(\d+)\]", path)
    if m:
        return f"blocks.{m.group(1)}.attn.heads"
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", path)
    sub = {"input_layernorm": "norm1", "post_attention_layernorm": "norm2",
           "self_attn.q_norm": "attn.q_norm", "self_attn.k_norm": "attn.k_norm",
           "mlp.gate": "mlp.out"}
    if m and m.group(2) in sub:
        return f"blocks.{m.group(1)}.{sub[m.group(2)]}"
    return path


def _fidelity_check(f: Any, config: Any, n: int) -> HFCheck:
    r"""A patched call: HF's stock output against the exact replacement's, at float32's
    bound (stock HF computes these steps in float32): :func:`~nlaverify.tolerance.tolerance`
    of float32 with the step's longest accumulation :math:`k` (RMSNorm :math:`d` or
    :math:`d_h`, attention :math:`\max(n, d_h)`, router :math:`\max(d, E)`, loss :math:`V`,
    RoPE :math:`d_h/2`), a few dependent stages (:math:`D = 4`: cast, reduce, normalise,
    scale), :math:`\kappa` the output's magnitude; RoPE's angles :math:`t	heta_i` carry
    the float32 error of :math:`	heta_i = b^{-2i/d}` (relative :math:`u\ln b`) times
    :math:`t \le n - 1`, so :math:`\kappa = (n-1)\max(1, \ln b)` there; the loss's
    :math:`\kappa` is the logits' scale, :math:`\max(1, \ln V)`."""
    from nlaverify.tolerance import magnitude_condition, tolerance

    dh = config.d_head or config.d_model // config.n_heads
    size = {"rmsnorm": dh if f.path.endswith(("q_norm", "k_norm")) else config.d_model,
            "attention_softmax": max(n, dh), "router_softmax": max(config.d_model,
                                                                  config.n_experts or 1),
            "loss": config.vocab_size, "rotary": max(1, dh // 2)}[f.kind]
    cond = magnitude_condition(f.exact, power=1)
    if f.kind == "rotary":
        cond = max(cond, (n - 1) * max(1.0, math.log(config.rope_base)))
    elif f.kind == "loss":
        cond = max(cond, math.log(config.vocab_size))
    tol = tolerance("float32", size=size, depth=4, condition=cond)
    node = _fidelity_node(f.path)
    name = f"patch fidelity {node}: HF {f.module} (stock, {f.path}) vs exact replacement"
    if f.stock.shape != f.exact.shape:
        return HFCheck(name, math.inf, tol.rtol, f"shape {f.stock.shape} vs {f.exact.shape}")
    return HFCheck(name, tol.compare(f.stock, f.exact).normwise, tol.rtol)


def _weights_check(model: Any, state: Mapping[str, np.ndarray]) -> HFCheck:
    r"""HF's ``from_pretrained`` parameters against ``params_to_hf`` of the parameters
    nlaverify read from the same checkpoint: the worst normwise difference over the
    state-dict keys, against one rounding per entry (Gemma's offset
    :math:`\gamma = 1 + w` and back), :func:`~nlaverify.tolerance.tolerance` in the model
    dtype."""
    from nlaverify.backends.host import dtype_name
    from nlaverify.tolerance import magnitude_condition, tolerance

    named = dict(model.named_parameters(remove_duplicate=False))
    name = "weights: HF from_pretrained vs params_to_hf(load_checkpoint)"
    worst = HFCheck(name, 0.0, 1.0)
    for key, ref in state.items():
        param = named.get(key)
        if param is None or tuple(param.shape) != np.shape(ref):
            have = "no such parameter" if param is None else f"shape {tuple(param.shape)}"
            return HFCheck(name, math.inf, 0.0, f"{key}: HF has {have}, nlaverify maps "
                           f"shape {np.shape(ref)}")
        tol = tolerance(dtype_name(param.dtype), condition=magnitude_condition(ref, power=1))
        err = tol.compare(param.detach().double().numpy(), ref).normwise
        if err / tol.rtol >= worst.error / worst.bound:
            worst = HFCheck(name, err, tol.rtol, f"worst: {key}")
    return worst


def _rope_check(model: Any, config: Any) -> HFCheck:
    r"""Exact mode replaces HF's RoPE frequencies by nlaverify's: check HF's own (float32,
    from the HF config's ``rope_theta`` and ``rope_scaling``) against them at float32
    precision, so a wrong base or scaling cannot hide behind the substitution. The
    condition of :math:`b^{-2i/d}` in its exponent is :math:`|{-2i/d}\,\ln b| \le \ln b`."""
    from nlaverify.interop.hf_patches import exact_inv_freq
    from nlaverify.tolerance import tolerance

    ours = exact_inv_freq(config)
    rotary = [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")]
    theirs = rotary[0].inv_freq.detach().double().numpy()
    tol = tolerance("float32", size=config.d_head // 2, depth=2,
                    condition=max(1.0, math.log(config.rope_base)))
    if theirs.shape != ours.shape:
        return HFCheck("rotary frequencies (HF float32 vs nlaverify float64)", float("inf"),
                       tol.rtol, f"shape {theirs.shape} vs {ours.shape}")
    return HFCheck("rotary frequencies (HF float32 vs nlaverify float64)",
                   tol.compare(theirs, ours, floor=0.0).normwise, tol.rtol)


def format_hf_report(report: HFVerifyReport, per_node: bool = True) -> str:
    """A table of node errors and bounds (error/bound <= 1 passes), the gradients, and a
    summary naming the first divergent node."""
    mode = "exact" if report.exact else (
        f"stock but {'+'.join(report.patches)}" if report.patches else "stock")
    lines = [f"Hugging Face {report.model_type} ({report.source}; {report.dtype}, {mode} "
             f"arithmetic) vs the nlaverify graph; weights: {report.weights}; "
             f"tokens {report.tokens}"]
    if report.planted:
        lines.append(f"planted mistake {report.plant!r}: {report.planted}")
    if per_node:
        lines.append(f"{'node':<28} {'op':<18} {'error':>10} {'bound':>10} {'ratio':>9}  HF")
        for r in report.rows:
            flag = "" if r.ok else "  <- FAIL"
            lines.append(f"{r.node:<28} {r.op:<18} {r.error:10.2e} {r.bound:10.2e} "
                         f"{r.error / r.bound:9.2e}  {r.hf}{flag}"
                         + (f" ({r.note})" if r.note else ""))
    bad = [g for g in report.gradients if not g.ok]
    worst = max(report.gradients, key=lambda g: g.error / g.bound, default=None)
    if worst is not None:
        lines.append(f"gradients: {len(report.gradients) - len(bad)}/{len(report.gradients)} "
                     f"parameters within bound; worst {worst.name} error {worst.error:.2e} "
                     f"bound {worst.bound:.2e}")
    for g in bad[:10]:
        lines.append(f"  gradient {g.name}: error {g.error:.2e} bound {g.bound:.2e}: FAIL")
    fidelity = [c for c in report.checks if c.name.startswith("patch fidelity")]
    for c in report.checks:
        if c in fidelity and c.ok:
            continue  # summarised below; failures listed
        lines.append(f"{c.name}: error {c.error:.2e} bound {c.bound:.2e}: "
                     f"{'ok' if c.ok else 'FAIL'}")
    if fidelity:
        worst_f = max(fidelity, key=lambda c: c.error / c.bound)
        lines.append(f"patch fidelity (HF's stock code vs each exact replacement, float32's "
                     f"bound): {sum(c.ok for c in fidelity)}/{len(fidelity)} calls within "
                     f"bound; worst ratio {worst_f.error / worst_f.bound:.2e} "
                     f"({worst_f.name.split(':')[0].removeprefix('patch fidelity ')})")
    if report.unmapped:
        lines.append(f"graph nodes HF does not expose: {', '.join(report.unmapped)}")
    if not per_node and report.first_divergence is not None:
        r = report.row(report.first_divergence)
        lines.append(f"first divergent node {r.node} ({r.op}, HF {r.hf}): error "
                     f"{r.error:.2e} bound {r.bound:.2e}")
    if report.ok:
        lines.append(f"verify --hf {report.model_type}: ok ({len(report.rows)} nodes, "
                     f"{len(report.gradients)} gradients)")
        return "\n".join(lines)
    lines.append(f"verify --hf {report.model_type}: FAIL; first divergent node: "
                 f"{report.first_divergence}; first divergent gradient: "
                 f"{report.first_gradient_divergence}"
                 + (f"; HF's own code beyond float32 where patched: "
                    f"{report.first_patch_divergence}" if report.first_patch_divergence
                    else ""))
    if report.dtype == "float64" and not report.exact and report.first_divergence:
        lines.append("stock arithmetic: " + (
            f"the first node beyond even float32's bound is {report.first_beyond_float32}"
            if report.first_beyond_float32 else
            "every departure is within float32's bound (HF computes some steps in "
            "float32; --hf-exact patches them)"))
    return "\n".join(lines)


def hf_verify_command(source: Any, *, seq_len: int = 6, seed: int = 0, exact: bool = False,
                      as_json: bool = False, max_params: int | None = None) -> int:
    """``nlaverify verify --hf PATH_OR_CONFIG [--hf-exact]``: print the report (or JSON)
    and return the exit status (0: every node, the loss and every gradient agree)."""
    from nlaverify import jsonout

    report = verify_hf(source, seq_len=seq_len, seed=seed, exact=exact, max_params=max_params)
    if as_json:
        jsonout.dump(report.as_dict())
    else:
        print(format_hf_report(report))
    return 0 if report.ok else 1
