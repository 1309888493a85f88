r"""Capturing Hugging Face's intermediates: the registered attention function and the call.

A registered attention function (:data:`CAPTURE_ATTENTION`, in ``transformers``'
``AttentionInterface``) records each block's query (after RoPE), key and value (before
``repeat_kv``) and the attention output, then delegates to HF's own eager attention (stock)
or to :func:`exact_eager_attention` (exact). :func:`_hf_call` is
:func:`~nlaverify.check.check_model`'s ``call`` for a Hugging Face model: HF on one
sequence, returning its logits, these captures and its loss (module docstring of
:mod:`nlaverify.interop.hf_verify`). torch and transformers are imported lazily (the
``[hf]`` extra).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from nlaverify.interop.hf_capture_mamba2 import capture_mamba2
from nlaverify.interop.hf_patches import modeling_module, record_fidelity

#: the name of nlaverify's capturing attention function in ``AttentionInterface``
CAPTURE_ATTENTION = "nlaverify_capture"


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
    """HF intermediates of one forward pass that no module returns, by capture name
    (``attention[l].query``, ``mamba[l].conv``...), as float64 NumPy copies."""

    exact: bool
    tensors: dict[str, Any] = field(default_factory=dict)
    #: exact mode: HF's stock output next to each exact replacement's (patch fidelity)
    fidelity: list[Any] | None = None

    def keep(self, key: str, value: Any) -> None:
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
    sliding window); with ``softcap`` :math:`c` (Gemma 2) the scores are :math:`c\tanh(S/c)`
    before the mask. Returns ``(B, n, H, d_h)`` and the weights, as HF does."""
    import torch

    cap = kwargs.get("softcap")
    rep = getattr(module, "num_key_value_groups", 1)
    if rep > 1:
        b, h, n, d = key.shape
        key = key[:, :, None].expand(b, h, rep, n, d).reshape(b, h * rep, n, d)
        value = value[:, :, None].expand(b, h, rep, n, d).reshape(b, h * rep, n, d)
    s = query.shape[-1] ** -0.5 if scaling is None else scaling
    weights = torch.matmul(query, key.transpose(2, 3)) * s
    if cap is not None:  # Gemma 2's eager_attention_forward: c tanh(S/c) before the mask
        weights = torch.tanh(weights / cap) * cap
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
            rec.keep(f"attention[{layer}].{name}", t)
    return out


@contextlib.contextmanager
def _capture_mamba(model: Any, rec: _Recorder) -> Iterator[None]:
    r"""For the duration, record what no module of HF's Mamba returns
    (``models/mamba/modeling_mamba.py``): the convolution before its SiLU
    (``mamba[l].conv``: ``causal_conv1d_forward`` run without its activation, which is then
    applied as it would apply it, ``ACT2FN[activation]``) and the time step :math:`\delta`
    handed to ``mamba_scan_forward`` (``mamba[l].dt``, before the bias and softplus). Both
    module functions are wrapped, whatever they are now (exact mode's scan included), and
    restored. Mamba-2: :func:`~nlaverify.interop.hf_capture_mamba2.capture_mamba2`; nothing
    for other models."""
    mod = modeling_module(model)
    if hasattr(mod, "mamba2_scan_forward"):  # Mamba-2: its own captures (hf_capture_mamba2)
        with capture_mamba2(mod, rec.keep):
            yield
        return
    if not hasattr(mod, "mamba_scan_forward"):
        yield
        return
    conv_fn, scan_fn = mod.causal_conv1d_forward, mod.mamba_scan_forward

    def conv(conv1d: Any, hidden_states: Any, cache: Any, layer_idx: int,
             activation: str | None = None, **kwargs: Any) -> Any:
        out = conv_fn(conv1d, hidden_states, cache, layer_idx, activation=None, **kwargs)
        rec.keep(f"mamba[{layer_idx}].conv", out)
        return out if activation is None else mod.ACT2FN[activation](out)

    def scan(module: Any, hidden_states: Any, time_step: Any, *args: Any, **kwargs: Any
             ) -> Any:
        rec.keep(f"mamba[{module.layer_idx}].dt", time_step)
        return scan_fn(module, hidden_states, time_step, *args, **kwargs)

    mod.causal_conv1d_forward, mod.mamba_scan_forward = conv, scan
    try:
        yield
    finally:
        mod.causal_conv1d_forward, mod.mamba_scan_forward = conv_fn, scan_fn


def _stock_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                     *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """HF's own eager attention of the model's ``modeling_*.py`` (GPT-2 with
    ``reorder_and_upcast_attn``: its float32 ``_upcast_and_reordered_attn``)."""
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


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' logging at error level for the duration (its warnings are not ours)."""
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


@contextlib.contextmanager
def _head_output(model: Any, keep: bool) -> Iterator[list[Any]]:
    """A list receiving ``model.lm_head``'s output (in the graph, not detached) while
    ``keep``: the logits before a ``*ForCausalLM.forward`` casts them (Mamba's
    ``.float()``)."""
    got: list[Any] = []
    handle = model.lm_head.register_forward_hook(
        lambda _m, _i, out: got.append(out)) if keep else None
    try:
        yield got
    finally:
        if handle is not None:
            handle.remove()


def _hf_call(exact_attention: bool, exact_loss: bool, fidelity: list[Any],
             exact_logits: bool = False) -> Callable[[Any, Any, Any], Any]:
    """check_model's ``call``: HF on ``tokens[None]``, returning ``(logits, the captures of
    the attention function and of Mamba's module functions, loss)``
    (:mod:`~nlaverify.interop.hf_verify`: HF's own loss, or the same mean with ``torch`` in
    the model dtype, HF's loss function then going to ``fidelity``). ``exact_logits``: the
    logits as ``lm_head`` returns them, HF's returned (cast) logits going to ``fidelity``
    (patch ``"mamba_logits"``)."""
    def call(model: Any, ids: Any, targets: Any) -> tuple[Any, dict[str, Any], Any]:
        import torch

        rec = _Recorder(exact_attention, fidelity=fidelity)
        token = _ACTIVE.set(rec)
        ids = ids[None, :]
        try:
            with _quiet_transformers(), _capture_mamba(model, rec), _head_output(
                    model, exact_logits) as head:
                if exact_loss:
                    returned = model(input_ids=ids, use_cache=False).logits
                    logits = head[-1] if exact_logits else returned
                    if exact_logits:
                        record_fidelity(fidelity, "logits", "mamba_logits", type(model).__name__,
                                        lambda: returned, logits)
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
        # the returned logits of the batch of one: read by check_model where no tap gives
        # the graph's "logits" (Gemma 2 caps lm_head's output in *ForCausalLM.forward)
        return logits[0], dict(rec.tensors), loss
    return call
