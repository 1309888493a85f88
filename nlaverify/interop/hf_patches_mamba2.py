r"""Exact arithmetic and planted mistakes of Hugging Face Mamba-2
(``models/mamba2/modeling_mamba2.py``, transformers 5.25; issue 37). Applied by
:func:`nlaverify.interop.hf_patches.exact_arithmetic` and
:func:`~nlaverify.interop.hf_patches.plant_mistake`, which hand in their undo list and
fidelity recorder (this module imports nothing of the package but its errors).

HF's float32 islands in ``Mamba2ForCausalLM`` (Dao & Gu 2024 §7-§8 compute them so too), by
the name of the patch that removes each (:data:`MAMBA2_EXACT_PATCHES`):

- ``"mamba2_scan"`` (``mamba2.scan``): ``mamba2_scan_forward`` takes
  :math:`A = -e^{A_{\log}}` of ``A_log.float()`` and ``mamba2_chunk_scan`` casts
  :math:`x, B, C, \Delta` to float32 (``.float()``) before the chunked SSD;
  :func:`mamba2_scan_exact` is the same function (the chunked algorithm equals the recurrence,
  identity ``ssm_ssd_chunked_equals_recurrence``) run as the recurrence in the input dtype;
- ``"mamba2_gated_norm"`` (``mamba2.norm``): ``Mamba2RMSNormGated`` computes
  :math:`x\odot\operatorname{silu}(z)` and its per-group RMSNorm in float32
  (``.to(torch.float32)``); :func:`gated_norm_exact` in the input dtype.

The others are shared with Mamba (:data:`~nlaverify.interop.hf_patches.MAMBA_EXACT_PATCHES`:
``"mamba_residual"`` for ``Mamba2Block``'s ``residual_in_fp32``, ``"mamba_logits"`` for
``Mamba2ForCausalLM``'s ``.float()`` logits) and :data:`~nlaverify.interop.hf_patches.
EXACT_PATCHES` (``"rmsnorm"``: ``Mamba2RMSNorm`` is Llama's; ``"loss"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nlaverify.errors import ArgumentError

__all__ = ["MAMBA2_EXACT_PATCHES", "MAMBA2_PLANTS", "gated_norm_exact", "mamba2_scan_exact",
           "patch_module", "patch_scan", "plant"]

#: the exact-arithmetic patches of Hugging Face Mamba-2 and the stock code each replaces
MAMBA2_EXACT_PATCHES: dict[str, str] = {
    "mamba2_scan": "models/mamba2/modeling_mamba2.py mamba2_scan_forward / mamba2_chunk_scan "
                   "(A = -exp(A_log.float()); hidden_states, B, C, dt .float())",
    "mamba2_gated_norm": "models/mamba2/modeling_mamba2.py Mamba2RMSNormGated.forward "
                         "(hidden_states and gate .to(torch.float32))",
}

#: the planted mistakes of Hugging Face Mamba-2 (test instruments)
MAMBA2_PLANTS: dict[str, str] = {
    "mamba2_bc_swap": "block 0's in_proj rows of B and C exchanged (the state written with "
                      "C, read with B)",
}


def mamba2_scan_exact(module: Any, hidden_states: Any, B: Any, C: Any, dt: Any, cache: Any,
                      **kwargs: Any) -> Any:
    r"""``mamba2_scan_forward`` (no cache) as the recurrence in the input dtype: with
    :math:`A = -e^{A_{\log}}`, :math:`\Delta = \operatorname{softplus}(\delta + b_\Delta)`
    (PyTorch's, linear above 20) clamped to ``time_step_limit``, head :math:`j` reading group
    :math:`\lfloor jG/H\rfloor` (``repeat_interleave``),

    .. math:: h_t = e^{\Delta_t A} h_{t-1} + \Delta_t\,x_t B_t^\top,\qquad y_t = h_t C_t +
       D\odot x_t .

    ``hidden_states`` ``(b, n, E)``, ``B``, ``C`` ``(b, n, GN)``, ``dt`` ``(b, n, H)``, as HF
    passes them; returns ``(b, n, E)``."""
    import torch
    import torch.nn.functional as F

    if cache is not None:
        raise ArgumentError("exact mamba2_scan_forward: a cache (incremental decoding) is not "
                            "modelled; verification runs use_cache=False")
    b, n, _ = hidden_states.shape
    H, P, G = module.num_heads, module.head_dim, module.n_groups
    N = module.ssm_state_size
    A = -torch.exp(module.A_log)                                           # (H,)
    Dt = F.softplus(dt + module.dt_bias)                                   # (b, n, H)
    lo, hi = module.time_step_limit
    Dt = torch.clamp(Dt, min=lo, max=hi)
    x = hidden_states.reshape(b, n, H, P)
    Bh = B.reshape(b, n, G, N).repeat_interleave(H // G, dim=2)            # (b, n, H, N)
    Ch = C.reshape(b, n, G, N).repeat_interleave(H // G, dim=2)
    state = x.new_zeros(b, H, P, N)
    ys = []
    for t in range(n):
        decay = torch.exp(Dt[:, t] * A)[..., None, None]                  # (b, H, 1, 1)
        state = decay * state + (Dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        ys.append(torch.matmul(state, Ch[:, t, :, :, None])[..., 0])       # (b, H, P)
    y = torch.stack(ys, dim=1) + module.D[:, None] * x
    return y.reshape(b, n, H * P)


def gated_norm_exact(self: Any, hidden_states: Any, gate: Any = None) -> Any:
    r"""``Mamba2RMSNormGated.forward`` in the input dtype: :math:`v = x\odot
    \operatorname{silu}(z)`, each group of ``group_size`` channels
    :math:`v/\sqrt{\overline{v^2} + \epsilon}`, times the weight."""
    import torch.nn.functional as F

    v = hidden_states if gate is None else hidden_states * F.silu(gate)
    *lead, width = v.shape
    g = v.reshape(*lead, width // self.group_size, self.group_size)
    g = g / (g.pow(2).mean(-1, keepdim=True) + self.variance_epsilon).sqrt()
    return self.weight * g.reshape(*lead, width)


def patch_scan(undo: Any, mod: Any, sink: list[Any] | None, record: Callable[..., None]
               ) -> None:
    """``mod.mamba2_scan_forward`` (the module function every ``Mamba2Mixer`` calls) replaced
    by :func:`mamba2_scan_exact`; each call also runs the stock function into ``sink``, by the
    path ``backbone.layers.{l}.mixer.scan`` (``record``: :func:`~nlaverify.interop.
    hf_patches.record_fidelity`; ``undo``: its restorer)."""
    stock = mod.mamba2_scan_forward

    def scan(module: Any, *args: Any, **kwargs: Any) -> Any:
        out = mamba2_scan_exact(module, *args, **kwargs)
        record(sink, f"backbone.layers.{module.layer_idx}.mixer.scan", "mamba2_scan",
               "mamba2_scan_forward", lambda: stock(module, *args, **kwargs), out)
        return out

    undo.set_global(mod, "mamba2_scan_forward", scan)


def patch_module(undo: Any, name: str, module: Any, parts: Any, sink: list[Any] | None,
                 record: Callable[..., None]) -> bool:
    """Patch ``module`` (at ``name``) if it is a ``Mamba2RMSNormGated`` and
    ``"mamba2_gated_norm"`` is among ``parts`` (its forward becomes :func:`gated_norm_exact`,
    each call also running the stock forward into ``sink``), or a ``Mamba2Block`` and
    ``"mamba_residual"`` is (HF's own branch for ``residual_in_fp32=False``: nothing of HF's
    replaced). Returns whether it was patched."""
    cls = type(module).__name__
    if cls == "Mamba2Block" and "mamba_residual" in parts:
        undo.on_exit(lambda m=module, v=module.residual_in_fp32: setattr(
            m, "residual_in_fp32", v))
        module.residual_in_fp32 = False
        return False  # its norm and mixer are patched as modules of their own
    if cls != "Mamba2RMSNormGated" or "mamba2_gated_norm" not in parts:
        return False
    stock: Any = None

    def forward(self_: Any, *args: Any, **kwargs: Any) -> Any:
        out = gated_norm_exact(self_, *args, **kwargs)
        record(sink, name, "mamba2_gated_norm", cls, lambda: stock(*args, **kwargs), out)
        return out

    stock = undo.set_forward(module, forward)
    return True


def plant(undo: Any, model: Any, which: str) -> str:
    """Plant ``which`` (a key of :data:`MAMBA2_PLANTS`) in ``model`` until ``undo`` restores
    it; returns what was changed."""
    import torch

    key = "backbone.layers.0.mixer.in_proj.weight"
    w = dict(model.named_parameters()).get(key)
    if which != "mamba2_bc_swap" or w is None or not hasattr(model.config, "n_groups"):
        raise ArgumentError(f"plant {which!r}: expected a Mamba2ForCausalLM with {key}")
    c = model.config
    E, GN = c.num_heads * c.head_dim, c.n_groups * c.state_size
    saved = w.detach().clone()
    rows = torch.cat([saved[:2 * E], saved[2 * E + GN:2 * E + 2 * GN],
                      saved[2 * E:2 * E + GN], saved[2 * E + 2 * GN:]])
    with torch.no_grad():
        w.copy_(rows)
    undo.on_exit(lambda: w.data.copy_(saved))
    return f"{key}: its rows of B and C exchanged"
