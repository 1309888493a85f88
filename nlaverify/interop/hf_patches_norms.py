r"""Exact-arithmetic patches of the LayerNorm-family models of issue 23, OLMo and Cohere, and
of Gemma 3's RoPE (one frequency table per layer type).

Stock ``transformers`` (5.25) computes these in float32 even when the model is float64; each
was found by reading the installed source and shows at its own graph node when it alone is
left unpatched (``tests/test_interop_olmo.py``, ``tests/test_interop_cohere.py``). Applied by
:func:`nlaverify.interop.hf_patches.exact_arithmetic` (:func:`patch_module`), recorded for
patch fidelity as every other patch is:

- ``"layernorm"`` (node ``blocks.{l}.norm1``): ``models/olmo/modeling_olmo.py``
  ``OlmoLayerNorm.forward`` (``F.layer_norm(hidden_states.to(torch.float32), ...)``, no
  weight or bias) and ``models/cohere/modeling_cohere.py`` ``CohereLayerNorm.forward``
  (``hidden_states.to(torch.float32)``, ``self.weight.to(torch.float32)``); replaced by
  :func:`_olmo_layernorm_exact`, :func:`_cohere_layernorm_exact`.
- ``"cohere_rotary"`` (``attn.q_rope``): ``modeling_cohere.py`` ``apply_rotary_pos_emb``
  (``q.float()``, ``k.float()``: the rotation itself in float32); replaced by
  :func:`_cohere_apply_rotary_exact` (a module function, swapped for the duration).
  ``CohereRotaryEmbedding.forward`` (float32 angles, ``repeat_interleave``: the interleaved
  layout) is part of ``"rotary"``, replaced by :func:`_cohere_rotary_exact`.
- ``"rotary"`` of Gemma 3 (``attn.q_rope``): ``models/gemma3/modeling_gemma3.py``
  ``Gemma3RotaryEmbedding.forward(x, position_ids, layer_type)`` (float32 angles from the
  float32 ``{layer_type}_inv_freq`` of each layer type); replaced by
  :func:`_gemma3_rotary_exact`, the global layers at the config's base and scaling, the local
  ones at ``rope_local_base`` unscaled.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NORM_EXACT_PATCHES", "patch_module", "rotate_half_interleaved"]

#: the exact-arithmetic patches of this module, by name, and the stock code each replaces
NORM_EXACT_PATCHES: dict[str, str] = {
    "layernorm": "models/olmo/modeling_olmo.py OlmoLayerNorm.forward (F.layer_norm of "
                 "hidden_states.to(torch.float32)); models/cohere/modeling_cohere.py "
                 "CohereLayerNorm.forward (hidden_states.to(torch.float32), "
                 "self.weight.to(torch.float32))",
    "cohere_rotary": "models/cohere/modeling_cohere.py apply_rotary_pos_emb (q.float(), "
                     "k.float())",
}


def rotate_half_interleaved(x: Any) -> Any:
    r"""The interleaved pairing :math:`(x_{2i}, x_{2i+1}) \mapsto (-x_{2i+1}, x_{2i})`
    (Cohere's ``rotate_half``; for the half layout of the others, a planted mistake)."""
    import torch

    pairs = x.reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).reshape(x.shape)


def _olmo_layernorm_exact(self: Any, hidden_states: Any) -> Any:
    r"""``OlmoLayerNorm.forward`` in the input dtype: :math:`(x - \bar x)/\sqrt{\sigma^2 +
    10^{-5}}`, no gain or bias."""
    import torch.nn.functional as F

    return F.layer_norm(hidden_states, self.normalized_shape, None, None, eps=1e-5)


def _cohere_layernorm_exact(self: Any, hidden_states: Any) -> Any:
    r"""``CohereLayerNorm.forward`` in the input dtype: :math:`w \odot (x - \bar x)/
    \sqrt{\sigma^2 + \epsilon}`, no bias."""
    import torch

    mean = hidden_states.mean(-1, keepdim=True)
    var = (hidden_states - mean).pow(2).mean(-1, keepdim=True)
    return self.weight * ((hidden_states - mean) * torch.rsqrt(var + self.variance_epsilon))


def _cohere_rotary_exact(self: Any, x: Any, position_ids: Any) -> Any:
    r"""``CohereRotaryEmbedding.forward`` with float64 angles :math:`t\theta_i` from float64
    frequencies (``self._nlaverify_inv_freq``), Cohere's interleaved layout
    ``repeat_interleave(freqs, 2)``; cos and sin in ``x``'s dtype."""
    import torch

    freqs = position_ids[..., None].to(torch.float64) * self._nlaverify_inv_freq.to(x.device)
    emb = torch.repeat_interleave(freqs, 2, dim=-1)
    scale = self.attention_scaling
    return (emb.cos() * scale).to(dtype=x.dtype), (emb.sin() * scale).to(dtype=x.dtype)


def _gemma3_rotary_exact(self: Any, x: Any, position_ids: Any, layer_type: str) -> Any:
    r"""``Gemma3RotaryEmbedding.forward`` with float64 angles :math:`t\theta_i` from the
    float64 frequencies of ``layer_type`` (``self._nlaverify_inv_freq[layer_type]``), HF's
    half layout ``cat(freqs, freqs)`` and its ``{layer_type}_attention_scaling``; cos and sin
    in ``x``'s dtype."""
    import torch

    inv = self._nlaverify_inv_freq[layer_type].to(device=x.device)
    freqs = position_ids[..., None].to(torch.float64) * inv
    emb = torch.cat((freqs, freqs), dim=-1)
    scale = getattr(self, f"{layer_type}_attention_scaling")
    return (emb.cos() * scale).to(dtype=x.dtype), (emb.sin() * scale).to(dtype=x.dtype)


def _cohere_apply_rotary_exact(q: Any, k: Any, cos: Any, sin: Any, unsqueeze_dim: int = 1,
                               *, rotate: Any) -> tuple[Any, Any]:
    """``apply_rotary_pos_emb`` of ``modeling_cohere.py`` in the dtype of ``q`` and ``k``
    (``rotate``: the module's ``rotate_half`` as called, so a planted pairing still shows)."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate(q) * sin, k * cos + rotate(k) * sin


def patch_module(undo: Any, name: str, module: Any, parts: Any, config: Any, sink: Any,
                 exact_inv_freq: Any, record_fidelity: Any) -> bool:
    """Patch ``module`` (at ``name``) if it is one of this module's (``undo`` an
    :class:`~nlaverify.interop.hf_patches._Restorer`, ``sink`` the fidelity list, the last two
    :mod:`~nlaverify.interop.hf_patches`' functions of those names); whether it was handled.
    The Cohere model itself gets ``"cohere_rotary"`` (a module function)."""
    import sys

    import torch

    cls = type(module).__name__
    if cls in ("OlmoLayerNorm", "CohereLayerNorm"):
        if "layernorm" in parts:
            undo.set_exact(module, name, "layernorm", _olmo_layernorm_exact if cls[0] == "O"
                           else _cohere_layernorm_exact, sink)
        return True
    if cls == "CohereRotaryEmbedding":
        if "rotary" in parts:
            module._nlaverify_inv_freq = torch.from_numpy(exact_inv_freq(config))
            undo.on_exit(lambda m=module: delattr(m, "_nlaverify_inv_freq"))
            undo.set_exact(module, name, "rotary", _cohere_rotary_exact, sink)
        return True
    if cls == "Gemma3RotaryEmbedding":
        if "rotary" in parts:
            local = config.rope_local_base
            sliding = config if local is None else config.replace(rope_base=local,
                                                                  rope_scaling=None)
            module._nlaverify_inv_freq = {
                "full_attention": torch.from_numpy(exact_inv_freq(config)),
                "sliding_attention": torch.from_numpy(exact_inv_freq(sliding))}
            undo.on_exit(lambda m=module: delattr(m, "_nlaverify_inv_freq"))
            undo.set_exact(module, name, "rotary", _gemma3_rotary_exact, sink)
        return True
    if cls == "CohereForCausalLM" and "cohere_rotary" in parts:
        mod = sys.modules[type(module).__module__]
        stock, calls = mod.apply_rotary_pos_emb, [0]
        blocks = config.n_blocks

        def apply(q: Any, k: Any, cos: Any, sin: Any, unsqueeze_dim: int = 1) -> Any:
            # one call per layer, in order, per forward pass: the layer is the count mod L
            layer, calls[0] = calls[0] % blocks, calls[0] + 1
            out = _cohere_apply_rotary_exact(q, k, cos, sin, unsqueeze_dim,
                                             rotate=mod.rotate_half)
            # q and k (h and h_kv heads) recorded as one tensor, joined along the heads
            record_fidelity(sink, f"model.layers.{layer}.self_attn.apply_rotary",
                            "cohere_rotary", "apply_rotary_pos_emb",
                            lambda: torch.cat(stock(q, k, cos, sin, unsqueeze_dim), dim=1),
                            torch.cat(out, dim=1))
            return out

        undo.set_global(mod, "apply_rotary_pos_emb", apply)
    return False
