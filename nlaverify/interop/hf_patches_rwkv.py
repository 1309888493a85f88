r"""Exact arithmetic and planted mistakes of Hugging Face RWKV-4 (``models/rwkv/modeling_rwkv.py``,
transformers 5.25; issue 37). Applied by :func:`nlaverify.interop.hf_patches.exact_arithmetic`
and :func:`~nlaverify.interop.hf_patches.plant_mistake`, which hand in their undo list and
fidelity recorder (this module imports nothing of the package but its errors).

**The float32 island** (patch ``"rwkv_wkv"``, node ``blocks.{l}.rwkv.time_mix``): on the CPU
(and for one token) ``RwkvSelfAttention.forward`` calls ``rwkv_linear_attention_cpu``, whose
running state :math:`(p, q, m)` starts in float32 and which rounds every key to float32
(``key[:, t].float()``) whatever the model dtype: :math:`e^{k_t}` then carries float32's
relative error :math:`u_{32}|k_t|`. :func:`time_mix_exact` is the same forward, the WKV
:func:`wkv_exact` line for line that function's running-maximum recurrence in the model
dtype; every call also runs the stock forward on the same inputs into the fidelity sink, by
the module's path ``rwkv.blocks.{l}.attention``. LayerNorm, the sigmoids, relu² and the
projections run in the model dtype already; the loss is the shared ``"loss"`` patch.

**Planted mistake** (:data:`RWKV_PLANTS`): ``rwkv_mix_swap`` exchanges block 0's
``attention.time_mix_key`` and ``time_mix_receptance`` (a mapping that reads the key's mix as
the receptance's): verification must name ``blocks.0.rwkv.time_mix``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nlaverify.errors import ArgumentError

__all__ = ["RWKV_EXACT_PATCHES", "RWKV_PLANTS", "patch_module", "plant", "time_mix_exact",
           "wkv_exact"]

#: the exact-arithmetic patches of Hugging Face RWKV, by name, and the stock code replaced
RWKV_EXACT_PATCHES: dict[str, str] = {
    "rwkv_wkv": "models/rwkv/modeling_rwkv.py rwkv_linear_attention_cpu (float32 state, "
                "key[:, t].float()), called by RwkvSelfAttention.forward",
}

#: the planted mistakes of Hugging Face RWKV (test instruments)
RWKV_PLANTS: dict[str, str] = {
    "rwkv_mix_swap": "block 0's attention.time_mix_key and time_mix_receptance exchanged",
}


def wkv_exact(time_decay: Any, time_first: Any, key: Any, value: Any) -> Any:
    r"""``rwkv_linear_attention_cpu`` (no state) in ``key``'s dtype: :math:`w =
    -e^{\text{time\_decay}}`, and per token, with the state :math:`(p, q, m)` from
    :math:`(0, 0, -10^{38})`, :math:`m_o = \max(m, u + k_t)`, :math:`\mathrm{wkv}_t =
    (e^{m - m_o}p + e^{u + k_t - m_o}v_t)/(e^{m - m_o}q + e^{u + k_t - m_o})`, then
    :math:`m' = \max(m + w, k_t)`, :math:`p' = e^{m + w - m'}p + e^{k_t - m'}v_t`,
    :math:`q' = e^{m + w - m'}q + e^{k_t - m'}`. ``key``, ``value`` ``(b, n, a)``."""
    import torch

    num = torch.zeros_like(key[:, 0])
    den = torch.zeros_like(key[:, 0])
    mx = torch.zeros_like(key[:, 0]) - 1e38
    w = -torch.exp(time_decay)
    out = []
    for t in range(key.size(1)):
        kt, vt = key[:, t], value[:, t]
        mo = torch.maximum(mx, kt + time_first)
        e1, e2 = torch.exp(mx - mo), torch.exp(kt + time_first - mo)
        out.append((e1 * num + e2 * vt) / (e1 * den + e2))
        ms = torch.maximum(mx + w, kt)
        e1, e2 = torch.exp(mx + w - ms), torch.exp(kt - ms)
        num, den, mx = e1 * num + e2 * vt, e1 * den + e2, ms
    return torch.stack(out, dim=1)


def time_mix_exact(self: Any, hidden: Any, state: Any = None, use_cache: bool = False
                   ) -> tuple[Any, Any]:
    r"""``RwkvSelfAttention.forward`` without a state, the WKV by :func:`wkv_exact`:
    :math:`(\sigma(r) \odot \mathrm{wkv}(w, u, k, v))W_o` of HF's own token-shifted
    projections (``extract_key_value``). Returns ``(output, None)`` as HF does."""
    if state is not None or use_cache:
        raise ArgumentError("exact RwkvSelfAttention.forward: a state (recurrent decoding) is "
                            "not modelled; verification runs use_cache=False")
    receptance, key, value, _ = self.extract_key_value(hidden)
    return self.output(receptance * wkv_exact(self.time_decay, self.time_first, key, value)
                       ), None


def patch_module(undo: Any, name: str, module: Any, parts: Any, sink: list[Any] | None,
                 record: Callable[..., None]) -> bool:
    """Patch ``module`` (at ``name``) if it is an ``RwkvSelfAttention`` and ``"rwkv_wkv"`` is
    among ``parts``: its forward becomes :func:`time_mix_exact`, each call also running the
    stock forward (no gradients) into ``sink`` by ``record`` (:func:`~nlaverify.interop.
    hf_patches.record_fidelity`). Returns whether it was patched."""
    if type(module).__name__ != "RwkvSelfAttention" or "rwkv_wkv" not in parts:
        return False
    stock: Any = None

    def forward(self_: Any, *args: Any, **kwargs: Any) -> Any:
        out = time_mix_exact(self_, *args, **kwargs)
        record(sink, name, "rwkv_wkv", type(self_).__name__,
               lambda: stock(*args, **kwargs)[0], out[0])
        return out

    stock = undo.set_forward(module, forward)
    return True


def plant(undo: Any, model: Any, which: str) -> str:
    """Plant ``which`` (a key of :data:`RWKV_PLANTS`) in ``model`` until ``undo`` restores
    it; returns what was changed."""
    import torch

    named = dict(model.named_parameters())
    keys = [f"rwkv.blocks.0.attention.time_mix_{k}" for k in ("key", "receptance")]
    if which != "rwkv_mix_swap" or any(k not in named for k in keys):
        raise ArgumentError(f"plant {which!r}: expected an RwkvForCausalLM with {keys[0]}")
    a, b = named[keys[0]], named[keys[1]]
    saved_a, saved_b = a.detach().clone(), b.detach().clone()
    with torch.no_grad():
        a.copy_(saved_b)
        b.copy_(saved_a)
    undo.on_exit(lambda: (a.data.copy_(saved_a), b.data.copy_(saved_b)))
    return f"{keys[0]} and {keys[1]} exchanged"
