r"""The end-to-end check rows of :func:`~nlaverify.interop.hf_verify.verify_hf` besides the
nodes and gradients: the fidelity of each patched HF call (exact mode), a checkpoint's
weights as HF and nlaverify read them, and HF's own RoPE frequencies (exact mode)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from nlaverify.backends.host import dtype_name
from nlaverify.interop.hf_patches import exact_inv_freq
from nlaverify.interop.hf_report import HFCheck
from nlaverify.tolerance import magnitude_condition, tolerance


def _fidelity_node(path: str) -> str:
    """The graph node where a patched HF module's output first enters (module docstring of
    :mod:`~nlaverify.interop.hf_patches`)."""
    if path == "loss":
        return "loss"
    if path in ("model.norm", "backbone.norm_f"):
        return "final_norm"
    if path == "logits":
        return "logits"
    if path.endswith("rotary_emb"):
        return "blocks.0.attn.q_rope"  # the angles of every block's q_rope / k_rope
    m = re.fullmatch(r"attention\[(\d+)\]", path)
    if m:
        return f"blocks.{m.group(1)}.attn.heads"
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", path)
    sub = {"input_layernorm": "norm1", "post_attention_layernorm": "norm2",
           "self_attn.q_norm": "attn.q_norm", "self_attn.k_norm": "attn.k_norm",
           "mlp.gate": "mlp.out", "self_attn.apply_rotary": "attn.q_rope",
           "self_attn.q_a_layernorm": "attn.q_a_norm",  # DeepSeek's latent norms
           "self_attn.kv_a_layernorm": "attn.kv_a_norm"}
    if m and m.group(2) in sub:
        return f"blocks.{m.group(1)}.{sub[m.group(2)]}"
    m = re.fullmatch(r"rwkv\.blocks\.(\d+)\.attention", path)  # RWKV's time mixing
    if m:
        return f"blocks.{m.group(1)}.rwkv.time_mix"
    m = re.fullmatch(r"backbone\.layers\.(\d+)\.mixer\.(scan|norm)", path)  # Mamba-2
    if m:
        return f"blocks.{m.group(1)}.mamba2.{m.group(2)}"
    m = re.fullmatch(r"backbone\.layers\.(\d+)\.(norm|mixer)", path)  # Mamba
    if m:
        return f"blocks.{m.group(1)}.{'norm1' if m.group(2) == 'norm' else 'mamba.scan'}"
    return path


def _fidelity_check(f: Any, config: Any, n: int) -> HFCheck:
    r"""A patched call: HF's stock output against the exact replacement's, at float32's
    bound (stock HF computes these steps in float32): :func:`~nlaverify.tolerance.tolerance`
    of float32 with the step's longest accumulation :math:`k` (RMSNorm :math:`d`, :math:`d_h`
    or DeepSeek's latent :math:`r`, attention :math:`\max(n, d_h)`, router :math:`\max(d, E)`,
    loss :math:`V`, RoPE
    :math:`d_h/2`, Mamba's scan :math:`nN`: a state of :math:`N` summed over up to :math:`n`
    steps, its logits :math:`d`; RWKV's time mixing :math:`na`: the WKV's sums over up to
    :math:`n` tokens, then :math:`W_o` over :math:`a`), a few dependent stages (:math:`D = 4`:
    cast, reduce, normalise, scale), :math:`\kappa` the output's magnitude; RoPE's angles
    :math:`t\theta_i` carry the float32 error of :math:`\theta_i = b^{-2i/d}` (relative
    :math:`u\ln b`) times :math:`t \le n - 1`, so :math:`\kappa = (n-1)\max(1, \ln b)`
    there; the loss's :math:`\kappa` is the logits' scale, :math:`\max(1, \ln V)`."""
    dh = config.d_head or config.d_model // config.n_heads
    latent = {"q_a_layernorm": getattr(config, "q_lora_rank", None),  # DeepSeek's MLA
              "kv_a_layernorm": getattr(config, "kv_lora_rank", None)}.get(
        f.path.rsplit(".", 1)[-1])
    size = {"rmsnorm": dh if f.path.endswith(("q_norm", "k_norm")) else latent or
            config.d_model,
            "attention_softmax": max(n, dh), "router_softmax": max(config.d_model,
                                                                  config.n_experts or 1),
            "loss": config.vocab_size, "rotary": max(1, dh // 2),
            "mamba_scan": n * config.ssm_state, "mamba_logits": config.d_model,
            "layernorm": config.d_model, "cohere_rotary": max(1, dh // 2),
            "deepseek_rotary": max(1, dh // 2),
            "router_sigmoid": max(config.d_model, config.n_experts or 1),
            "router_v2": max(config.d_model, config.n_experts or 1),
            "rwkv_wkv": n * config.rwkv_dim, "mamba2_scan": n * config.ssm_state,
            "mamba2_gated_norm": config.d_inner // config.ssm_groups}[f.kind]
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
    # buffers too: DeepSeek-V3's router bias (the graph's constant, hf_model._hf_constants)
    named = {**dict(model.named_buffers()), **dict(model.named_parameters(
        remove_duplicate=False))}
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
    condition of :math:`b^{-2i/d}` in its exponent is :math:`|{-2i/d}\,\ln b| \le \ln b`.
    GPT-J keeps no frequencies, only its table of :math:`\sin t\theta_i, \cos t\theta_i`:
    :math:`\theta_i` is read back from the row :math:`t = 1`. Gemma 3 keeps one table per
    layer type (``{type}_inv_freq``): each is checked, the local one against
    ``rope_local_base`` unscaled, and the worse reported."""
    ours = exact_inv_freq(config)
    rotary = [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")]
    kinds = [k for k in ("full_attention", "sliding_attention")
             if hasattr(rotary[0], f"{k}_inv_freq")]
    if kinds:  # Gemma3RotaryEmbedding
        local = config if config.rope_local_base is None else config.replace(
            rope_base=config.rope_local_base, rope_scaling=None)
        checks = [_compare_freqs(getattr(rotary[0], f"{k}_inv_freq").detach().double().numpy(),
                                 exact_inv_freq(config if k == "full_attention" else local),
                                 local if k == "sliding_attention" else config, k)
                  for k in kinds]
        return max(checks, key=lambda c: c.error / c.bound)
    if hasattr(rotary[0], "embed_positions"):  # GPT-J: a float32 table [sin | cos] by position
        row = rotary[0].embed_positions[1].detach().double().numpy()  # t = 1: the angles
        theirs = np.arctan2(row[:row.size // 2], row[row.size // 2:])  # theta_i <= 1 < pi
    else:
        theirs = rotary[0].inv_freq.detach().double().numpy()
    return _compare_freqs(theirs, ours, config, "")


def _compare_freqs(theirs: np.ndarray, ours: np.ndarray, config: Any, kind: str) -> HFCheck:
    r"""HF's float32 frequencies against nlaverify's at float32 precision, the condition
    :math:`\ln b` of ``config``'s base; ``kind`` names the layer type (Gemma 3)."""
    name = "rotary frequencies (HF float32 vs nlaverify float64)"
    tol = tolerance("float32", size=config.d_head // 2, depth=2,
                    condition=max(1.0, math.log(config.rope_base)))
    if theirs.shape != ours.shape:
        return HFCheck(name, float("inf"), tol.rtol, f"shape {theirs.shape} vs {ours.shape}")
    return HFCheck(name, tol.compare(theirs, ours, floor=0.0).normwise, tol.rtol,
                   f"worst: {kind}" if kind else "")
