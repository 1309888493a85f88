r"""Node-by-node verification of a Hugging Face model against the nlaverify graph.

``nlaverify verify --hf PATH_OR_CONFIG`` (issue 10, item 3): the HF model
(``transformers``, float64 on the CPU) and the nlaverify graph (NumPy, float64) run on
the same weights and tokens. Forward hooks capture HF's intermediates, and a registered
attention function the query (after RoPE), key, value and attention output
(:mod:`nlaverify.interop.hf_capture`); each capture is mapped to its graph node, undoing
HF's conventions (:mod:`nlaverify.interop.hf_taps`). HF is one adapter of
:func:`nlaverify.check.check_model`, not a separate engine: the captures are its map of
``intermediates`` (module hooks, and the attention function's tensors returned by its
``call``), its ``load`` is ``params_to_hf`` made differentiable
(:func:`~nlaverify.interop.hf_model._hf_load`), and every row below is check_model's row,
renamed in HF's terms (:mod:`nlaverify.interop.hf_report`). Node values are compared in
topological order, each judged by the tolerance model of the HF model's dtype exactly as
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
Mixtral, Qwen2, Qwen3, Gemma and Mamba; ``loss`` for GPT-2 (its LayerNorm, GELU and eager
attention stay in float64), or ``blocks.0.attn.heads`` with ``reorder_and_upcast_attn``;
``blocks.0.attn.q_rope`` for GPT-NeoX (float32 RoPE angles; its LayerNorms stay in float64);
``blocks.0.attn.heads`` for GPT-J (its eager attention forms :math:`QK^\top` in float32; its
sin/cos table is built in the default dtype, float64 under ``from_config(dtype=float64)``);
``blocks.0.attn.q_rope`` for Phi; ``blocks.0.rwkv.time_mix`` for RWKV-4 (its CPU WKV rounds
the keys to float32 and keeps a float32 state; HF's model is built with ``rescale_every = 0``,
:mod:`~nlaverify.interop.hf_config_rwkv`).
The float32 islands behind them, each located at its own node by leaving its patch out
(:data:`~nlaverify.interop.hf_patches.EXACT_PATCHES`): every RMSNorm (``norm1``,
``norm2``, ``final_norm``, Qwen3's ``q_norm``/``k_norm``), the RoPE angles (``q_rope``),
the attention softmax (``heads``), Mixtral's router softmax (``mlp.out``), Mamba's scan
(``mamba.scan``), residual stream (``resid1``) and logits (``loss``), Mamba-2's scan and
gated norm (``mamba2.scan``, ``mamba2.norm``, :mod:`~nlaverify.interop.hf_patches_mamba2`),
RWKV's WKV (``rwkv.time_mix``), and the loss.
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

Modules: :mod:`~nlaverify.interop.hf_capture` (attention function, call),
:mod:`~nlaverify.interop.hf_taps` (captures -> nodes), :mod:`~nlaverify.interop.hf_model`
(source, model, weights, ``load``), :mod:`~nlaverify.interop.hf_checks` (fidelity,
weights, RoPE rows), :mod:`~nlaverify.interop.hf_report` (rows, text); their public names are
importable from here. torch and transformers are imported lazily (the ``[hf]`` extra).
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection
from typing import Any

import numpy as np

from nlaverify.errors import ArgumentError
from nlaverify.interop.hf_capture import (
    CAPTURE_ATTENTION,
    _hf_call,
    _require_hf,
    exact_eager_attention,
)
from nlaverify.interop.hf_checks import (
    _fidelity_check,
    _fidelity_node,
    _rope_check,
    _weights_check,
)
from nlaverify.interop.hf_model import (
    BYTES_PER_PARAMETER,
    DEFAULT_MAX_PARAMS,
    _build_hf_model,
    _check_size,
    _check_tokens,
    _exact_parts,
    _hf_load,
    _load_weights,
    _max_params,
    _resolve,
    memory_estimate,
)
from nlaverify.interop.hf_report import HFCheck, HFNodeRow, HFVerifyReport, format_hf_report
from nlaverify.interop.hf_taps import LLAMA_LIKE, _capture_name, _taps

__all__ = ["BYTES_PER_PARAMETER", "CAPTURE_ATTENTION", "DEFAULT_MAX_PARAMS", "LLAMA_LIKE",
           "HFCheck", "HFNodeRow", "HFVerifyReport", "exact_eager_attention", "format_hf_report",
           "hf_verify_command", "memory_estimate", "verify_hf"]


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
    from nlaverify.check.model import _compare_model
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import init_params, sample_data
    from nlaverify.interop.hf_patches import (
        ALL_EXACT_PATCHES,
        exact_arithmetic,
        needed_patches,
        plant_mistake,
    )
    from nlaverify.interop.weights import load_checkpoint, params_to_hf
    from nlaverify.ops.loss import IGNORE_INDEX

    if dtype not in ("float64", "float32"):
        raise ArgumentError(f"verify_hf: argument 'dtype': expected 'float64' or 'float32', "
                            f"got {dtype!r}")
    parts = _exact_parts(exact, ALL_EXACT_PATCHES)
    limit = _max_params(max_params)
    hf, described, checkpoint = _resolve(source)
    config, model_type = hf.config, hf.model_type
    needed = needed_patches(model_type, hf.raw)
    parts = parts & needed
    graph = build_transformer(config)
    _check_size(graph, config, limit, int(np.shape(tokens)[0]) if tokens is not None and
                np.ndim(tokens) == 1 else seq_len if isinstance(seq_len, int) else 0)
    if checkpoint is not None:  # read and validated whole before HF loads it
        # float64 before any offset: Gemma's 1 + w of a float32/bfloat16 checkpoint is
        # exact in float64, as HF's from_pretrained(dtype=float64) computes it
        _, params = load_checkpoint(checkpoint, dtype=np.float64)
        weights = described + (f" ({hf.note})" if hf.note else "")  # gemma3: the vision side
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
    sources.setdefault("logits", f"{type(model).__name__}.output.logits")  # Gemma 2: capped
    sources["loss"] = ("torch cross_entropy in the model dtype" if "loss" in parts
                       else "HF ForCausalLMLoss (loss_utils.py)")
    with exact_arithmetic(model, config, parts, fidelity=fidelity), plant_mistake(
            model, model_type, plant, exact="router_softmax" in parts) as planted:
        mc = _compare_model(
            model, config, params, tokens, targets=targets, load=load,
            intermediates={t.node: (_capture_name(t), t.convert) for t in taps},
            call=_hf_call("attention_softmax" in parts, "loss" in parts, fidelity,
                          "mamba_logits" in parts),
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
        b32 = mc.bound.linear("float32", node, False).rtol if judge32 else None
        report.rows.append(HFNodeRow(node, mc.graph.nodes[node]["op"], sources[node],
                                     error, bound, note, b32))
        if b32 is not None and report.first_beyond_float32 is None and not error <= b32:
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
            b32 = min(mc.bound.linear("float32", g, True).rtol
                      for g in graph_params) if judge32 else None
            check = HFCheck(key, worst.error, worst.bound, "" if len(graph_params) == 1 else
                            f"worst of {', '.join(graph_params)}: {worst.check}", b32)
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


def hf_verify_command(source: Any, *, seq_len: int = 6, seed: int = 0, exact: bool = False,
                      as_json: bool = False, max_params: int | None = None) -> int:
    """``nlaverify verify --hf PATH_OR_CONFIG [--hf-exact]``: print the report (or JSON)
    and return the exit status (0: every node, the loss and every gradient agree; in stock
    mode on a float64 model, within float32's bound, HF's own rounding:
    :attr:`HFVerifyReport.verdict`)."""
    from nlaverify import jsonout

    report = verify_hf(source, seq_len=seq_len, seed=seed, exact=exact, max_params=max_params)
    if as_json:
        jsonout.dump(report.as_dict())
    else:
        print(format_hf_report(report))
    return 0 if report.verdict else 1
