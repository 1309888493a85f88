r"""The exact-arithmetic patch of Hugging Face Mamba's scan (``models/mamba/modeling_mamba.py``,
transformers 5.25; patch ``"mamba_scan"`` of
:data:`nlaverify.interop.hf_patches.MAMBA_EXACT_PATCHES`): ``mamba_scan_forward`` casts
:math:`A_{\log}`, :math:`b_\Delta` and :math:`D` to float32 and ``mamba_selective_scan`` the
scan's :math:`B` and :math:`u`; :func:`mamba_scan_exact` is the same scan in the input dtype.
Kept apart from :mod:`nlaverify.interop.hf_patches` (which applies it, handing in its undo
list and fidelity recorder), so this module imports nothing of the package but its errors."""

from __future__ import annotations

from typing import Any

from nlaverify.errors import ArgumentError

__all__ = ["mamba_scan_exact", "patch_mamba_scan"]


def mamba_scan_exact(module: Any, hidden_states: Any, time_step: Any, B: Any, C: Any,
                     gate: Any, cache: Any, **kwargs: Any) -> Any:
    r"""``mamba_scan_forward`` (``models/mamba/modeling_mamba.py``, no cache) with
    ``mamba_selective_scan``'s sequential loop in the input dtype instead of float32:
    :math:`A = -e^{A_{\log}}`, :math:`\Delta = \operatorname{softplus}(\delta + b_\Delta)`
    (PyTorch's, linear above 20), :math:`h_t = e^{\Delta_t A} h_{t-1} + \Delta_t B_t u_t`,
    :math:`y_t = h_t C_t + D u_t`, times :math:`\operatorname{silu}(z_t)`; channels first
    ``(b, E, n)``, ``B``, ``C`` ``(b, n, N)``, as HF passes them."""
    import torch
    import torch.nn.functional as F

    if cache is not None:
        raise ArgumentError("exact mamba_scan_forward: a cache (incremental decoding) is not "
                            "modelled; verification runs use_cache=False")
    A = -torch.exp(module.A_log)                                          # (E, N)
    dt = F.softplus(time_step + module.dt_proj.bias[None, :, None])       # (b, E, n)
    dA = torch.exp(A[None, :, None, :] * dt[..., None])                   # (b, E, n, N)
    dBu = dt[..., None] * B[:, None, :, :] * hidden_states[..., None]
    state = torch.zeros_like(dA[:, :, 0])
    ys = []
    for t in range(hidden_states.shape[-1]):
        state = dA[:, :, t] * state + dBu[:, :, t]
        ys.append(torch.matmul(state, C[:, t, :, None])[..., 0])
    y = torch.stack(ys, dim=-1) + hidden_states * module.D[None, :, None]
    return y * F.silu(gate)


def patch_mamba_scan(undo: Any, mod: Any, sink: list[Any] | None, record: Any) -> None:
    """``mod.mamba_scan_forward`` (the module function every ``MambaMixer`` calls) replaced by
    :func:`mamba_scan_exact`; each call also runs the stock function into ``sink``, by the
    mixer's path ``backbone.layers.{l}.mixer`` (``record``: :func:`~nlaverify.interop.
    hf_patches.record_fidelity`; ``undo``: its restorer)."""
    stock = mod.mamba_scan_forward

    def scan(module: Any, *args: Any, **kwargs: Any) -> Any:
        out = mamba_scan_exact(module, *args, **kwargs)
        record(sink, f"backbone.layers.{module.layer_idx}.mixer", "mamba_scan",
               "mamba_scan_forward", lambda: stock(module, *args, **kwargs), out)
        return out

    undo.set_global(mod, "mamba_scan_forward", scan)
