r"""The Hugging Face side of :func:`~nlaverify.interop.hf_verify.verify_hf`: resolving the
source, building the model, writing or checking its weights, and ``load``.

* :func:`_resolve`: a config dict, a ``config.json`` or a checkpoint directory (a directory
  holding only weights nlaverify cannot read is refused, never verified on seeded weights);
* :func:`_check_size`: a model above the parameter limit (:data:`DEFAULT_MAX_PARAMS`,
  ``$NLAVERIFY_HF_MAX_PARAMS``) is refused before anything is allocated;
* :func:`_build_hf_model`: HF's ``from_config`` or offline ``from_pretrained``, with the
  capturing attention function (:mod:`nlaverify.interop.hf_capture`);
* :func:`_load_weights`: nlaverify's parameters written in, every key and shape checked
  first;
* :func:`_hf_load`: :func:`~nlaverify.check.check_model`'s ``load``,
  :func:`~nlaverify.interop.weights.params_to_hf` made differentiable.

torch and transformers are imported lazily (the ``[hf]`` extra).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np

from nlaverify.config import ConfigError
from nlaverify.errors import ArgumentError, ShapeError, UnknownNameError
from nlaverify.interop import hf_config
from nlaverify.interop.hf_capture import (
    CAPTURE_ATTENTION,
    _quiet_transformers,
    _register_attention,
    _require_hf,
)
from nlaverify.interop.hf_config_gemma3 import VISION_NOTE
from nlaverify.interop.weights import foreign_weight_files, params_to_hf


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


def _decoded(v: Any) -> Any:
    """``v`` with ``transformers``' JSON encoding of non-finite floats undone (``save_pretrained``
    writes Mamba-2's ``time_step_limit`` :math:`(0, \\infty)` as ``[0.0, {"__float__":
    "Infinity"}]``; ``AutoConfig.for_model`` wants the float)."""
    if isinstance(v, dict) and set(v) == {"__float__"}:
        return float(str(v["__float__"]).replace("Infinity", "inf"))
    return [_decoded(x) for x in v] if isinstance(v, list) else v


def _build_hf_model(hf: Any, dtype: Any, checkpoint: str | None) -> Any:
    """The HF model of ``hf.raw`` (its ``config.json``) in ``dtype``, with the capturing
    attention function, eval mode (dropout off): HF's own ``from_pretrained`` of the
    ``checkpoint`` directory (offline), or random init (weights written afterwards)."""
    _, transformers = _require_hf()
    _register_attention()
    from huggingface_hub.errors import StrictDataclassError

    raw = {k: _decoded(v) for k, v in dict(hf.raw).items() if k != "model_type"}
    if hf.model_type == "rwkv":  # the training-mode function (hf_config_rwkv: rescale_every)
        raw["rescale_every"] = 0
    if raw.get("output_router_logits"):  # MoE: HF adds router_aux_loss_coef times its
        # load-balancing loss to the loss whenever labels are given, in eval mode too; a
        # training term (hf_config_tables.IGNORED) that nlaverify's loss leaves out
        raw["output_router_logits"] = False
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
        hf_config, "num_local_experts", 0) or getattr(hf_config, "num_experts", 0) else {}
    auto = transformers.AutoModelForCausalLM
    with _quiet_transformers():
        if checkpoint is None:
            model = auto.from_config(hf_config, dtype=dtype,
                                     attn_implementation=CAPTURE_ATTENTION, **extra)
        elif hf.note == VISION_NOTE:  # a Gemma3ForConditionalGeneration folder
            model = _gemma3_language_model(transformers, checkpoint, hf_config, dtype)
        else:
            model = auto.from_pretrained(checkpoint, config=hf_config, dtype=dtype,
                                         attn_implementation=CAPTURE_ATTENTION,
                                         local_files_only=True, **extra)
    model.eval()
    _clear_padding_idx(model)
    for module in model.modules():
        # DeepSeek-V3's router weight and bias buffer: float32 whatever the model dtype
        # (_keep_in_fp32_modules_strict, an explicit dtype=torch.float32); held in the
        # model dtype so that the weights written are the graph's (stock forward still casts
        # to float32, the exact patch "router_sigmoid" does not)
        if type(module).__name__ in ("DeepseekV3TopkRouter", "DeepseekV2TopkRouter"):
            module.to(dtype)
    return model


def _gemma3_language_model(transformers: Any, checkpoint: str, text_config: Any,
                           dtype: Any) -> Any:
    """The language model of a ``Gemma3ForConditionalGeneration`` checkpoint as a
    ``Gemma3ForCausalLM``: HF's own ``from_pretrained`` of the whole model (its
    ``conversion_mapping`` reads the saved keys), then its ``model.language_model`` and
    ``lm_head`` copied into a ``Gemma3ForCausalLM`` of ``text_config`` (``load_state_dict``,
    strict). Its text-only forward is the multimodal model's (``Gemma3Model.forward``
    without ``pixel_values``: ``language_model(inputs_embeds=embed_tokens(ids))``); the
    vision tower and projector are not modelled (``VISION_NOTE``)."""
    full = transformers.Gemma3ForConditionalGeneration.from_pretrained(
        checkpoint, dtype=dtype, local_files_only=True)
    model = transformers.AutoModelForCausalLM.from_config(
        text_config, dtype=dtype, attn_implementation=CAPTURE_ATTENTION)
    model.model.load_state_dict(full.model.language_model.state_dict(), strict=True)
    model.lm_head.load_state_dict(full.lm_head.state_dict(), strict=True)
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


def _hf_load(config: Any, model_type: str, params: Mapping[str, np.ndarray],
             state: Mapping[str, np.ndarray], model: Any
             ) -> tuple[Callable[[Any, Mapping[str, Any]], dict[str, Any]], dict[str, list[str]]]:
    r"""check_model's ``load``: :func:`~nlaverify.interop.weights.params_to_hf` as a
    differentiable map of torch tensors, and the graph parameters each HF key holds.

    ``params_to_hf`` only moves entries (transposes, splits, concatenations, the RoPE
    permutation of rows) and adds a constant (Gemma's :math:`w = \gamma - 1`): it is
    :math:`T p + c` with :math:`T` a gather. Run on the entries' indices (``gradients=True``:
    no offset), it gives the gather (an entry written 0 gathers nothing: OPT's unread
    position rows); on zeros, :math:`c`. The gather of ``params`` plus
    :math:`c` must reproduce ``state = params_to_hf(params)`` exactly, or this is refused;
    so autograd through ``load`` is autograd through the map HF's weights came from. The
    values are HF's own parameters at the call (what ``from_pretrained`` read, or what was
    written, a planted mistake included), exactly. Of
    tied HF parameters (Gemma's, GPT-2's head) one key is given, as ``functional_call``
    requires."""
    import torch

    names = list(params)
    sizes = [int(np.size(params[k])) for k in names]
    starts = np.cumsum([0, *sizes])
    # ids from 1: an entry written 0 holds no parameter (OPT's never-read position rows), its
    # value the constant's alone (gather index -1)
    ids = {k: np.arange(starts[i] + 1, starts[i + 1] + 1, dtype=np.float64).reshape(
        np.shape(params[k])) for i, k in enumerate(names)}
    gather = {k: v.astype(np.int64) - 1 for k, v in params_to_hf(config, model_type, ids,
                                                                    gradients=True).items()}
    const = params_to_hf(config, model_type, {k: np.zeros_like(v, dtype=np.float64)
                                                 for k, v in params.items()})
    flat = np.concatenate([np.asarray(params[k], dtype=np.float64).reshape(-1) for k in names])
    for key, g in gather.items():
        if not (g >= 0).any():  # a buffer holding a graph constant (passed with the data)
            continue
        if not np.array_equal(np.where(g < 0, 0.0, flat[np.maximum(g, 0)]) + const[key],
                              np.asarray(state[key])):
            raise ArgumentError(f"verify_hf: params_to_hf({model_type}) at {key!r} is not a "
                                "gather plus a constant; it cannot be differentiated here")
    owner = np.repeat(np.arange(len(names)), sizes)
    # a key holding no parameter (DeepSeek-V3's bias buffer, the graph's constant e_bias)
    # has no gradient to compare
    holds = {key: [names[i] for i in dict.fromkeys(owner[g[g >= 0]].reshape(-1).tolist())]
             for key, g in gather.items() if (g >= 0).any()}
    first = set(dict(model.named_parameters()))  # one name per tied tensor
    given = [k for k in gather if k in first]

    def load(hf_model: Any, p: Mapping[str, Any]) -> dict[str, Any]:
        x = torch.cat([p[k].reshape(-1) for k in names])
        held = dict(hf_model.named_parameters())
        out = {}
        for key in given:
            g = gather[key]
            w = x[torch.from_numpy(np.maximum(g, 0))]
            if np.any(g < 0):  # entries holding no parameter: the constant alone
                w = torch.where(torch.from_numpy(g >= 0), w, torch.zeros_like(w))
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


#: the largest model :func:`~nlaverify.interop.hf_verify.verify_hf` builds by default
#: (parameters); it holds about :data:`BYTES_PER_PARAMETER` bytes per parameter.
#: ``NLAVERIFY_HF_MAX_PARAMS`` or the ``max_params`` argument raise it.
DEFAULT_MAX_PARAMS = 100_000_000
#: the 8-byte copies of the parameters live at verify_hf's peak (the backward pass of
#: check_model), by who holds them. Read from the code path and calibrated: peak RSS grows by
#: 95.6 bytes per parameter on a 19.5M-parameter Llama and a 19.8M RWKV (seq_len 6, float64),
#: and rwkv-4-169m reached 16 GB; the 6 copies counted before (7.6 GiB there) left out
#: load's tables, check_model's own copies and the graph's per-edge contributions.
PARAMETER_COPIES: dict[str, int] = {
    "graph parameters (init_params or the checkpoint)": 1,
    "mapped HF state dict (params_to_hf)": 1,
    "HF model parameters": 1,
    "load's gather indices (int64) and constant (Gemma's offset; zeros elsewhere)": 2,
    "check_model's float64 rounded parameters and its torch leaves": 2,
    "graph cotangents and per-edge VJP contributions of the parameters": 2,
    "load's outputs and the index tensors autograd saves (int64)": 2,
    "the gradients: the gather's scatter buffer and the leaves' gradients read back": 1,
}
#: bytes per parameter: :data:`PARAMETER_COPIES`, 8 bytes each (float64 or int64)
BYTES_PER_PARAMETER = 8 * sum(PARAMETER_COPIES.values())
#: 8-byte copies per element of an op node at ``n`` tokens: the graph's value, cotangent and
#: per-edge contribution (run_graph keeps all three), HF's captured intermediate and the
#: tensor its autograd saves
ACTIVATION_COPIES = 5
#: 8-byte copies per entry of an attention block's (H, n, n) scores, which no graph node
#: holds: HF eager's scores and probabilities (saved for backward) and their gradient, the
#: graph op's probabilities
ATTENTION_COPIES = 4


def memory_estimate(graph: Any, config: Any, n: int) -> dict[str, int]:
    r"""The bytes :func:`~nlaverify.interop.hf_verify.verify_hf` holds at its peak, by term:
    ``parameters`` :math:`= 8 c_p P` (:data:`PARAMETER_COPIES`, :math:`c_p = 12`),
    ``activations`` :math:`= 8 c_a \sum_v |v|_n` over the graph's op nodes at ``n`` tokens
    (:data:`ACTIVATION_COPIES`), ``attention`` :math:`= 8 c_s L H n^2` over the softmax
    attention blocks (:data:`ATTENTION_COPIES`). Terms of the code path of
    ``hf_verify.verify_hf`` and ``check.model._compare_model`` (module docstring), not a
    measurement."""
    import math

    from nlaverify.graph.build import parameter_counts

    elems = sum(math.prod(n if s == "n" else s for s in a["shape"])
                for _, a in graph.nodes(data=True) if a["kind"] == "op")
    attention = sum(config.block_mixer(b) == "attention" for b in range(config.n_blocks))
    return {"parameters": BYTES_PER_PARAMETER * parameter_counts(graph).total,
            "activations": 8 * ACTIVATION_COPIES * elems,
            "attention": 8 * ATTENTION_COPIES * attention * config.n_heads * n * n}


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


def _check_size(graph: Any, config: Any, limit: int, n: int) -> None:
    """Refuse, before anything is allocated, a model above ``limit`` parameters, saying what
    verifying it on ``n`` tokens would hold (:func:`memory_estimate`)."""
    from nlaverify.graph.build import parameter_counts

    total = parameter_counts(graph).total
    if total > limit:
        est = memory_estimate(graph, config, n)
        raise ArgumentError(
            f"verify_hf: {config.name} has {total:,} parameters, above the limit of {limit:,} "
            f"(about {_bytes_text(sum(est.values()))} would be held on {n} tokens: "
            f"{', '.join(f'{k} {_bytes_text(v)}' for k, v in est.items())}); raise it with "
            "--max-params N on the command line, max_params= in Python, or "
            "NLAVERIFY_HF_MAX_PARAMS")


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
    if isinstance(source, Mapping):
        return hf_config.load_hf_config(source), "config dict", None
    if not isinstance(source, str | os.PathLike):
        raise ArgumentError(f"verify_hf: argument 'source': expected a config dict, a "
                            f"config.json path or a checkpoint directory, got "
                            f"{type(source).__name__}")
    if _is_checkpoint_dir(source):
        where = os.fspath(source)
        return hf_config.load_hf_config(source), f"checkpoint {where}", where
    foreign = foreign_weight_files(source)
    if foreign:
        raise ArgumentError(f"verify_hf: argument 'source': {os.fspath(source)!r} holds "
                            f"{', '.join(foreign)} but no safetensors checkpoint; nlaverify "
                            "reads only safetensors (model.safetensors or "
                            "model.safetensors.index.json): convert with transformers' "
                            "save_pretrained(..., safe_serialization=True)")
    return hf_config.load_hf_config(source), os.fspath(source), None


def _hf_constants(model: Any, config: Any, model_type: str,
                  state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    r"""The graph's constants a checkpoint's HF model holds, as data entries: DeepSeek-V3's
    router biases (``e_score_correction_bias`` buffers, as HF loaded them) as
    ``blocks.{l}.mlp.e_bias``
    (:func:`~nlaverify.interop.weights_layout_moe.deepseek_v3_constants`); ``state``'s
    entries of those buffers are set to them (``params_to_hf`` wrote the graph's default
    :func:`~nlaverify.config_moe.routing_bias`). Empty for every other model."""
    from nlaverify.interop.weights_layout_moe import deepseek_v3_constants

    if model_type != "deepseek_v3" or not config.n_experts:
        return {}
    buffers = {k: v.detach().double().cpu().numpy() for k, v in model.named_buffers()}
    out = deepseek_v3_constants(config, buffers)
    for node in out:
        key = f"model.layers.{node.split('.')[1]}.mlp.gate.e_score_correction_bias"
        state[key] = buffers[key]
    return out
