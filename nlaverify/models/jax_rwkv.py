r"""An independent JAX RWKV-4 language model (Peng et al. 2023; Hugging Face
``RwkvForCausalLM``), written apart from :mod:`nlaverify.ops.rwkv_block`: the oracle the ops
composed are checked against (``tests/test_rwkv_block.py``), and, through
:func:`graph_time_mix` and :func:`graph_channel_mix` (the graph's parameter and node names),
the RWKV blocks of :mod:`nlaverify.models.jax_transformer` (``mixer="rwkv"``).

It shares no code with the ops. The WKV is computed as **per-channel causal softmax
attention** with a decay bias, not as a scan: for channel :math:`c`, the logits of query
:math:`t` over keys :math:`i` are :math:`\ell_{ti} = (t-1-i)w_c + k_{ic}` for :math:`i < t`,
:math:`u_c + k_{tc}` for :math:`i = t` and :math:`-\infty` beyond, and
:math:`\mathrm{wkv}_{tc} = \sum_i \operatorname{softmax}_i(\ell_{t\cdot})\,v_{ic}`, which is
the WKV's definition divided through (``jax.nn.softmax`` subtracts the row maximum). The
token shift is a ``jnp.pad``; LayerNorm is written out.

The forward (``rescale_every = 0`` semantics, see :func:`params_from_hf`):

.. math:: h = \mathrm{LN}_0(E[\text{ids}]);\quad h \mathrel{+}= \mathrm{TimeMix}_\ell(
   \mathrm{LN}_{1,\ell}(h));\ h \mathrel{+}= \mathrm{ChannelMix}_\ell(\mathrm{LN}_{2,\ell}(h));
   \quad \text{logits} = \mathrm{LN}_{\text{out}}(h)\,W_{\text{head}} .

**Parameters**: a flat ``dict`` of arrays, weights ``(d_in, d_out)`` (:math:`Y = XW`):

* ``emb`` ``(V, d)``; ``ln0.g``, ``ln0.b`` (HF ``blocks.0.pre_ln``); ``ln_out.g``,
  ``ln_out.b``; ``head`` ``(d, V)`` (untied);
* per block ``i``, prefixed ``blocks.{i}.``: ``ln1.g``, ``ln1.b``, ``ln2.g``, ``ln2.b``;
  ``att.mu_k``, ``att.mu_v``, ``att.mu_r`` ``(d,)`` (HF ``time_mix_key/value/receptance``);
  ``att.time_decay``, ``att.time_first`` ``(a,)`` (:math:`w = -e^{\text{time\_decay}}`);
  ``att.W_k``, ``att.W_v``, ``att.W_r`` ``(d, a)``, ``att.W_o`` ``(a, d)``; ``ffn.mu_k``,
  ``ffn.mu_r`` ``(d,)``; ``ffn.W_k`` ``(d, f)``, ``ffn.W_r`` ``(d, d)``, ``ffn.W_v``
  ``(f, d)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["graph_channel_mix", "graph_time_mix", "params_from_hf", "rwkv_channel_mix",
           "rwkv_logits", "rwkv_time_mix", "wkv_attention"]


def _layernorm(x: Any, g: Any, b: Any, eps: float) -> Any:
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * g + b


def _shifted(x: Any) -> Any:
    """:math:`x_{t-1}`, 0 at :math:`t = 0`, along axis -2."""
    pad = [(0, 0)] * (x.ndim - 2) + [(1, 0), (0, 0)]
    return jnp.pad(x, pad)[..., :-1, :]


def wkv_attention(w: Any, u: Any, k: Any, v: Any) -> Any:
    r"""The WKV as causal softmax attention per channel (the module's docstring): ``w``,
    ``u`` ``(a,)``, ``k``, ``v`` ``(..., n, a)``; ``(..., n, a)``."""
    n = k.shape[-2]
    t = jnp.arange(n)[:, None]
    i = jnp.arange(n)[None, :]
    lag = (t - 1 - i).astype(k.dtype)                      # (n, n)
    past = lag[..., None] * w + k[..., None, :, :]         # (..., t, i, a)
    bonus = (u + k)[..., :, None, :]                       # (..., t, 1, a)
    logits = jnp.where((i < t)[..., None], past,
                       jnp.where((i == t)[..., None], bonus, -jnp.inf))
    p = jax.nn.softmax(logits, axis=-2)
    return jnp.sum(p * v[..., None, :, :], axis=-2)


def rwkv_time_mix(p: Mapping[str, Any], x: Any, pre: str) -> Any:
    """RWKV-4 time mixing of ``x`` ``(..., n, d)`` with the parameters ``pre + 'att.*'``."""
    prev = _shifted(x)

    def mix(name: str) -> Any:
        mu = p[pre + name]
        return x * mu + prev * (1 - mu)

    k = mix("att.mu_k") @ p[pre + "att.W_k"]
    v = mix("att.mu_v") @ p[pre + "att.W_v"]
    r = jax.nn.sigmoid(mix("att.mu_r") @ p[pre + "att.W_r"])
    w = -jnp.exp(p[pre + "att.time_decay"])
    return (r * wkv_attention(w, p[pre + "att.time_first"], k, v)) @ p[pre + "att.W_o"]


def rwkv_channel_mix(p: Mapping[str, Any], x: Any, pre: str) -> Any:
    """RWKV-4 channel mixing of ``x`` ``(..., n, d)`` with the parameters ``pre + 'ffn.*'``."""
    prev = _shifted(x)
    xk = x * p[pre + "ffn.mu_k"] + prev * (1 - p[pre + "ffn.mu_k"])
    xr = x * p[pre + "ffn.mu_r"] + prev * (1 - p[pre + "ffn.mu_r"])
    k = jnp.square(jax.nn.relu(xk @ p[pre + "ffn.W_k"]))
    return jax.nn.sigmoid(xr @ p[pre + "ffn.W_r"]) * (k @ p[pre + "ffn.W_v"])


def rwkv_logits(p: Mapping[str, Any], ids: Any, n_layers: int, eps: float = 1e-5,
                eps_out: float = 1e-5, rescale_every: int = 0) -> Any:
    """Logits ``(..., n, V)`` of the RWKV-4 stack on token ids ``(..., n)``. ``eps`` is the
    blocks' LayerNorm epsilon (HF ``layer_norm_epsilon``: ``pre_ln``, ``ln1``, ``ln2``),
    ``eps_out`` that of ``ln_out`` (HF builds it with PyTorch's default, 1e-5);
    ``rescale_every = R > 0`` halves the hidden state after every ``R``-th block, as HF's
    eval mode does (the weights must then be the rescaled ones: :func:`params_from_hf`)."""
    h = _layernorm(p["emb"][ids], p["ln0.g"], p["ln0.b"], eps)
    for i in range(n_layers):
        pre = f"blocks.{i}."
        h = h + rwkv_time_mix(p, _layernorm(h, p[pre + "ln1.g"], p[pre + "ln1.b"], eps), pre)
        h = h + rwkv_channel_mix(p, _layernorm(h, p[pre + "ln2.g"], p[pre + "ln2.b"], eps),
                                 pre)
        if rescale_every > 0 and (i + 1) % rescale_every == 0:
            h = h / 2
    return _layernorm(h, p["ln_out.g"], p["ln_out.b"], eps_out) @ p["head"]


_HF_BLOCK = {"ln1.weight": "ln1.g", "ln1.bias": "ln1.b", "ln2.weight": "ln2.g",
             "ln2.bias": "ln2.b", "attention.time_decay": "att.time_decay",
             "attention.time_first": "att.time_first", "attention.time_mix_key": "att.mu_k",
             "attention.time_mix_value": "att.mu_v",
             "attention.time_mix_receptance": "att.mu_r", "attention.key.weight": "att.W_k",
             "attention.value.weight": "att.W_v", "attention.receptance.weight": "att.W_r",
             "attention.output.weight": "att.W_o", "feed_forward.time_mix_key": "ffn.mu_k",
             "feed_forward.time_mix_receptance": "ffn.mu_r",
             "feed_forward.key.weight": "ffn.W_k", "feed_forward.receptance.weight": "ffn.W_r",
             "feed_forward.value.weight": "ffn.W_v"}
_HF_TOP = {"rwkv.embeddings.weight": "emb", "rwkv.blocks.0.pre_ln.weight": "ln0.g",
           "rwkv.blocks.0.pre_ln.bias": "ln0.b", "rwkv.ln_out.weight": "ln_out.g",
           "rwkv.ln_out.bias": "ln_out.b", "head.weight": "head"}


def params_from_hf(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    r"""This module's parameters from the ``state_dict`` of a Hugging Face
    ``RwkvForCausalLM`` (arrays converted with ``numpy.asarray``; ``nn.Linear`` weights
    transposed to ``(d_in, d_out)``, the ``(1, 1, d)`` ``time_mix_*`` flattened).

    ``rescale_every`` (HF's inference trick against float16 overflow): in eval mode, with
    ``rescale_every = R > 0``, HF divides block ``i``'s ``attention.output`` and
    ``feed_forward.value`` weights by :math:`2^{\lfloor i/R\rfloor}` in place (the state dict
    then holds the divided weights) and halves the hidden state after every :math:`R`-th
    block. This is *not* the same function: every LayerNorm after the first halving sees
    :math:`h/2^j` with the same :math:`\epsilon`, i.e. :math:`h` with :math:`4^j\epsilon`
    (``tests/test_rwkv_block.py`` measures the change, about :math:`3\cdot10^{-4}` on the
    logits of its small model). :func:`rwkv_logits` reproduces it given the eval-mode
    state dict and ``rescale_every = R``; ``R = 0`` (or a state dict taken in training mode)
    is the plain model. Keys not listed (a tied ``head`` absent) raise ``KeyError``."""
    import numpy as np

    def arr(v: Any) -> Any:
        return np.asarray(v.detach().cpu().numpy() if hasattr(v, "detach") else v)

    out: dict[str, Any] = {}
    for key, val in state_dict.items():
        if key in _HF_TOP:
            name = _HF_TOP[key]
        else:
            parts = key.split(".")
            if parts[:2] != ["rwkv", "blocks"] or ".".join(parts[3:]) not in _HF_BLOCK:
                raise KeyError(f"params_from_hf: unknown Hugging Face RWKV key {key!r}")
            name = f"blocks.{parts[2]}.{_HF_BLOCK['.'.join(parts[3:])]}"
        a = arr(val)
        if key.endswith(".weight") and a.ndim == 2 and name != "emb":
            a = a.T
        out[name] = a.reshape(-1) if "time_mix" in key else a
    return out


#: the graph's names of the time mixing's and the channel mixing's parameters
_GRAPH_ATT = ("mu_k", "mu_v", "mu_r", "time_decay", "time_first", "W_k", "W_v", "W_r", "W_o")
_GRAPH_FFN = ("mu_k", "mu_r", "W_k", "W_r", "W_v")


def graph_time_mix(p: Mapping[str, Any], name: str, x: Any, rec: dict[str, Any]) -> Any:
    r""":func:`rwkv_time_mix` of ``x`` ``(n, d)`` with the graph's parameters ``{name}.mu_k``
    ... ``{name}.W_o`` (:func:`nlaverify.graph.build.build_transformer`'s ``blocks.{l}.rwkv``),
    recorded in ``rec`` at the graph's node ``{name}.time_mix``."""
    q = {f"att.{k}": p[f"{name}.{k}"] for k in _GRAPH_ATT}
    out = rec[f"{name}.time_mix"] = rwkv_time_mix(q, x, "")
    return out


def graph_channel_mix(p: Mapping[str, Any], name: str, x: Any, rec: dict[str, Any]) -> Any:
    r""":func:`rwkv_channel_mix` of ``x`` ``(n, d)`` with the graph's parameters
    ``{name}.mu_k`` ... ``{name}.W_v`` (``blocks.{l}.ffn``), recorded at ``{name}.channel_mix``."""
    q = {f"ffn.{k}": p[f"{name}.{k}"] for k in _GRAPH_FFN}
    out = rec[f"{name}.channel_mix"] = rwkv_channel_mix(q, x, "")
    return out
