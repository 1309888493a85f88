r"""Temporary patches of a Hugging Face model: exact arithmetic, and planted mistakes.

Both are context managers on *one* model instance (its modules' ``forward`` replaced on
the instance, an attribute added or set, a weight swapped), plus at most one module-level
function of the model's ``modeling_*.py`` (the ``rope_pairing`` plant, Mamba's scan);
everything is restored in
``finally``. :mod:`nlaverify.interop.hf_verify` uses them; torch and transformers are
imported by the caller.

**Exact arithmetic** (:func:`exact_arithmetic`, :data:`EXACT_PATCHES`). Stock
``transformers`` (5.24) computes these in float32 even when the model is float64 (OLMo's,
Cohere's: :mod:`~nlaverify.interop.hf_patches_norms`); each was found by reading the installed
source, and each shows at its own graph node when it alone is left unpatched
(``tests/test_hf_verify.py``):

- ``"rmsnorm"`` (node ``blocks.{l}.norm1``, the first float32 step of every RMSNorm
  model): ``models/{llama,mistral,mixtral,qwen2,qwen3}/modeling_*.py``
  ``*RMSNorm.forward`` (``hidden_states.to(torch.float32)``) and
  ``models/gemma/modeling_gemma.py`` ``GemmaRMSNorm.forward`` (``x.float()``,
  ``1 + self.weight.float()``); replaced by :func:`_rmsnorm_exact`,
  :func:`_gemma_rmsnorm_exact`.
- ``"rotary"`` (``attn.q_rope``): ``*RotaryEmbedding.forward``
  (``position_ids.float() * inv_freq.float()``) and the float32 ``inv_freq`` of
  ``compute_default_rope_parameters`` / ``modeling_rope_utils.py``
  ``_compute_{linear_scaling,llama3}_parameters``; replaced by :func:`_rotary_exact`.
- ``"attention_softmax"`` (``attn.heads``): ``models/*/modeling_*.py``
  ``eager_attention_forward`` (``softmax(..., dtype=torch.float32)``); replaced by
  :func:`nlaverify.interop.hf_verify.exact_eager_attention`.
- ``"router_softmax"`` (``mlp.out``): ``models/mixtral/modeling_mixtral.py``
  ``MixtralTopKRouter.forward`` (``softmax(router_logits.float())``); replaced by
  :func:`_router_forward`.
- ``"loss"`` (``loss``): ``loss/loss_utils.py`` ``ForCausalLMLoss``
  (``logits.float()``); :mod:`~nlaverify.interop.hf_verify` computes the same mean
  cross-entropy in the model dtype.

Mamba (``models/mamba/modeling_mamba.py``, transformers 5.25; :data:`MAMBA_EXACT_PATCHES`),
besides ``"rmsnorm"`` (``MambaRMSNorm.forward``, node ``blocks.{l}.norm1``) and ``"loss"``:

- ``"mamba_scan"`` (``mamba.scan``): ``mamba_scan_forward`` casts :math:`A_{\log}`,
  :math:`b_\Delta` and :math:`D` to float32 (``.float()``) and ``mamba_selective_scan`` the
  scan's :math:`B` and :math:`u`; replaced by
  :func:`~nlaverify.interop.hf_patches_mamba.mamba_scan_exact` (a module function: the one
  global swapped besides the ``rope_pairing`` plant).
- ``"mamba_residual"`` (``resid1``): ``MambaBlock.forward`` adds the mixer's output to a
  float32 copy of the stream when ``residual_in_fp32`` (the config default); the patch sets
  the block's ``residual_in_fp32`` to false, HF's own other branch (no replacement code).
- ``"mamba_logits"`` (``loss`` and every gradient): ``MambaForCausalLM.forward`` returns
  ``lm_head(...).float()``; :func:`~nlaverify.interop.hf_capture._hf_call` takes the logits
  as ``lm_head`` returns them (its forward hook), HF's returned logits going to the fidelity
  sink.

Mamba-2 (:mod:`~nlaverify.interop.hf_patches_mamba2`): ``"mamba2_scan"``, ``"mamba2_gated_norm"``.
RWKV-4 (:mod:`~nlaverify.interop.hf_patches_rwkv`): ``"rwkv_wkv"`` (``rwkv.time_mix``), the
float32 state and keys of ``rwkv_linear_attention_cpu``, and ``"loss"``; plant ``rwkv_mix_swap``.
DeepSeek-V2 (:mod:`~nlaverify.interop.hf_patches_deepseek`): its complex RoPE, ``"rotary"`` in
complex128 and ``"deepseek_rotary"`` (``attn.q_rope``: ``apply_rotary_emb`` in complex64).

The exact RoPE frequencies are nlaverify's, :func:`nlaverify.ops.rotary.rope_frequencies`
(with the model's base and scaling, in float64); :mod:`~nlaverify.interop.hf_verify`
checks HF's own float32 ``inv_freq`` against them at float32 precision, so the
substitution cannot hide a wrong base or scaling. Only the patches a model needs are
applied (:func:`needed_patches`; GPT-NeoX, Falcon: RoPE, softmax, loss; OPT: softmax, loss):
GPT-2 needs none but the loss (its LayerNorm, tanh-GELU and eager softmax stay in the model
dtype; its attention stays HF's own unless ``reorder_and_upcast_attn``), Mixtral the router.

**Patch fidelity.** A replacement must not hide a bug of the HF code it replaces. Every
patched call therefore also runs HF's stock code (the module's own ``forward`` as it was
before patching: the class's, whatever it is now) on the same inputs, without gradients,
and hands both outputs to a ``fidelity`` sink (:class:`Fidelity`);
:mod:`~nlaverify.interop.hf_verify` judges each pair at float32's bound (stock HF computes
these steps in float32), so e.g. an RMSNorm that ignores its weight fails its check,
named by its graph node, even though the exact replacement was run instead.

**Planted mistakes** (:func:`plant_mistake`, :data:`PLANTS`) are test instruments: each
introduces one known bug in the HF side, which node-by-node verification must report at
the right graph node.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.errors import ArgumentError, UnknownNameError
from nlaverify.interop import hf_patches_deepseek as _deepseek
from nlaverify.interop import hf_patches_mamba2 as _mamba2
from nlaverify.interop import hf_patches_norms as _norms
from nlaverify.interop import hf_patches_rwkv as _rwkv
from nlaverify.interop.hf_patches_mamba import patch_mamba_scan

#: the exact-arithmetic patches, by name, and the stock HF code each replaces
#: (``transformers/...``); ``verify_hf(exact=...)`` takes all of them (``True``) or a subset
EXACT_PATCHES: dict[str, str] = {
    "rmsnorm": "models/{llama,mistral,mixtral,qwen2,qwen3}/modeling_*.py *RMSNorm.forward "
               "(hidden_states.to(torch.float32)); models/gemma/modeling_gemma.py "
               "GemmaRMSNorm.forward (x.float(), self.weight.float())",
    "rotary": "*RotaryEmbedding.forward (position_ids.float() * inv_freq.float()) and the "
              "float32 inv_freq of compute_default_rope_parameters / modeling_rope_utils.py "
              "_compute_{linear_scaling,llama3}_parameters",
    "attention_softmax": "models/*/modeling_*.py eager_attention_forward (softmax(..., "
                         "dtype=torch.float32))",
    "router_softmax": "models/mixtral/modeling_mixtral.py MixtralTopKRouter.forward "
                      "(softmax(router_logits.float()))",
    "loss": "loss/loss_utils.py ForCausalLMLoss (logits.float())",
}

#: the exact-arithmetic patches of Hugging Face Mamba (``models/mamba/modeling_mamba.py``),
#: by name, and the stock code each replaces; applied with ``"rmsnorm"`` (``MambaRMSNorm``)
#: and ``"loss"`` of :data:`EXACT_PATCHES`
MAMBA_EXACT_PATCHES: dict[str, str] = {
    "mamba_scan": "mamba_scan_forward / mamba_selective_scan (A = -exp(A_log.float()), "
                  "dt_proj.bias.float(), D.float(), B.float(), hidden_states.float())",
    "mamba_residual": "MambaBlock.forward (residual.to(torch.float32) when "
                      "residual_in_fp32)",
    "mamba_logits": "MambaForCausalLM.forward (lm_head(...).float())",
}

#: every exact-arithmetic patch by name (``verify_hf(exact=...)`` takes any subset)
ALL_EXACT_PATCHES: dict[str, str] = {**EXACT_PATCHES, **MAMBA_EXACT_PATCHES,
                                     **_norms.NORM_EXACT_PATCHES, **_rwkv.RWKV_EXACT_PATCHES,
                                     **_mamba2.MAMBA2_EXACT_PATCHES,
                                     **_deepseek.DEEPSEEK_EXACT_PATCHES}

#: the planted mistakes (test instruments) and what each does to the HF model
PLANTS: dict[str, str] = {
    "transpose_square": "block 0's first square attention projection (q_proj, else o_proj; "
                        "GPT-2: c_proj) transposed",
    "rope_pairing": "HF's rotate_half (pairs i, i + d_h/2) swapped for the interleaved one "
                    "(pairs 2i, 2i+1) while cos/sin keep HF's half layout",
    "no_renormalize": "Mixtral's top-k router gates not renormalised to sum to 1",
}

#: the planted mistakes of Hugging Face Mamba and GPT-NeoX (test instruments)
MAMBA_PLANTS: dict[str, str] = {
    "mamba_in_proj_swap": "block 0's in_proj halves swapped (the gate z read as the "
                          "convolved branch x, and x as z)",
    "qkv_blocked": "block 0's query_key_value written as blocked [Q | K | V] rows instead "
                   "of HF's per-head (heads, 3, head_dim) layout",
}


@dataclass(frozen=True)
class Fidelity:
    """One patched call: HF's stock output and the exact replacement's, on the same inputs
    (float64 NumPy, in HF's layout), for the module at ``path`` (``kind``: the patch)."""

    path: str
    kind: str
    module: str
    stock: np.ndarray
    exact: np.ndarray


def _as_array(value: Any, kind: str) -> np.ndarray:
    """A patched call's output as one float64 array: RoPE's ``(cos, sin)`` stacked,
    Mixtral's router ``(logits, weights, indices)`` as the dense gates ``(T, E)`` (zero off
    the selected experts), a plain tensor as is."""
    import torch

    def f64(t: Any) -> np.ndarray:
        return t.detach().to(torch.float64).cpu().numpy()

    if kind in ("router_softmax", "router_sigmoid", "router_v2"):  # hf_patches_deepseek
        logits, weights, idx = value
        gates = np.zeros(tuple(logits.shape))
        np.put_along_axis(gates, idx.detach().cpu().numpy(), f64(weights), axis=-1)
        return gates
    if isinstance(value, tuple | list):
        return np.stack([f64(v) for v in value])
    return f64(value)


def record_fidelity(sink: list[Fidelity] | None, path: str, kind: str, module: str,
                    stock: Callable[[], Any], exact_out: Any) -> None:
    """Run HF's ``stock`` code (no gradients) and append it with ``exact_out`` to ``sink``
    (nothing when ``sink`` is ``None``)."""
    import torch

    if sink is None:
        return
    with torch.no_grad():
        stock_out = stock()
    sink.append(Fidelity(path, kind, module, _as_array(stock_out, kind),
                         _as_array(exact_out, kind)))


def needed_patches(model_type: str, raw: Mapping[str, Any]) -> frozenset[str]:
    """The exact-arithmetic patches a model of ``model_type`` (HF config dict ``raw``)
    needs: those whose stock code computes in float32 in that model (module docstring)."""
    if model_type == "gpt2":
        return frozenset({"loss"} | ({"attention_softmax"} if raw.get(
            "reorder_and_upcast_attn") else set()))
    if model_type in ("gpt_neox", "gptj", "phi", "starcoder2", "stablelm", "falcon", "opt"):
        return frozenset({"attention_softmax", "loss", *["rotary"] * (model_type != "opt")})
    if model_type == "rwkv":  # hf_patches_rwkv: the CPU WKV's float32 state and keys
        return frozenset({"rwkv_wkv", "loss"})
    if model_type in ("mamba", "mamba2"):  # residual_in_fp32 defaults to true in both
        scan = {"mamba_scan"} if model_type == "mamba" else {"mamba2_scan", "mamba2_gated_norm"}
        return frozenset({"rmsnorm", *scan, "mamba_logits", "loss"} | (
            {"mamba_residual"} if raw.get("residual_in_fp32", True) else set()))
    parts = {"rmsnorm", "rotary", "attention_softmax", "loss"}
    if model_type in ("olmo", "cohere"):  # float32 LayerNorms (hf_patches_norms)
        parts = parts - {"rmsnorm"} | {"layernorm"} | {"cohere_rotary"} & {f"{model_type}_rotary"}
    if model_type in ("mixtral", "qwen2_moe", "qwen3_moe"):
        parts.add("router_softmax")
    if model_type == "deepseek_v2":  # the complex rotation (hf_patches_deepseek)
        parts.add("deepseek_rotary")
        if raw.get("first_k_dense_replace", 0) < raw.get("num_hidden_layers", 30):
            parts.add("router_v2")  # its MoE layers' float32 router
    if model_type == "deepseek_v3" and raw.get("first_k_dense_replace", 3) < raw.get(
            "num_hidden_layers", 61):  # its MoE layers' float32 router (hf_patches_deepseek)
        parts.add("router_sigmoid")
    return frozenset(parts)


class _Restorer:
    """Undo-list of attribute changes, applied in reverse order."""

    def __init__(self) -> None:
        self._undo: list[Any] = []

    def set_forward(self, module: Any, fn: Any) -> Any:
        """Replace ``module.forward`` by ``fn`` (bound); returns the forward it replaces
        (bound: the class's own unless the instance had one)."""
        had = "forward" in vars(module)
        old = vars(module).get("forward")
        previous = module.forward
        module.forward = fn.__get__(module)
        self._undo.append(lambda: (setattr(module, "forward", old) if had
                                   else delattr(module, "forward")))
        return previous

    def set_exact(self, module: Any, path: str, kind: str, fn: Any,
                  sink: list[Fidelity] | None) -> None:
        """Replace ``module.forward`` by the exact ``fn``; each call also runs the replaced
        (stock) forward on the same inputs into ``sink`` (:func:`record_fidelity`)."""
        stock: Any = None

        def forward(self_: Any, *args: Any, **kwargs: Any) -> Any:
            out = fn(self_, *args, **kwargs)
            record_fidelity(sink, path, kind, type(self_).__name__,
                            lambda: stock(*args, **kwargs), out)
            return out

        stock = self.set_forward(module, forward)

    def set_global(self, namespace: Any, name: str, value: Any) -> None:
        old = getattr(namespace, name)
        setattr(namespace, name, value)
        self._undo.append(lambda: setattr(namespace, name, old))

    def on_exit(self, fn: Any) -> None:
        self._undo.append(fn)

    def restore(self) -> None:
        while self._undo:
            self._undo.pop()()


def modeling_module(model: Any) -> Any:
    """The ``modeling_<type>.py`` module of a Hugging Face model (its ``rotate_half``,
    ``eager_attention_forward``...)."""
    return sys.modules[type(model).__module__]


# --- exact arithmetic ---------------------------------------------------------------

def _rmsnorm_exact(self: Any, hidden_states: Any) -> Any:
    r"""``LlamaRMSNorm.forward`` (and Mistral, Mixtral, Qwen2, Qwen3) without the float32
    upcast: :math:`w \odot x / \sqrt{\overline{x^2} + \epsilon}` in the input dtype."""
    import torch

    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def _gemma_rmsnorm_exact(self: Any, x: Any) -> Any:
    r"""``GemmaRMSNorm.forward`` without the float32 upcast: :math:`(1 + w) \odot x /
    \sqrt{\overline{x^2} + \epsilon}` in the input dtype."""
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


def _rotary_exact(self: Any, x: Any, position_ids: Any) -> Any:
    r"""``*RotaryEmbedding.forward`` with float64 angles :math:`t\theta_i` from float64
    frequencies (``self._nlaverify_inv_freq``), HF's half layout ``cat(freqs, freqs)``;
    cos and sin returned in ``x``'s dtype, as HF does (GPT-J: ``(sin, cos)`` of ``freqs``)."""
    import torch

    inv = self._nlaverify_inv_freq
    freqs = position_ids[..., None].to(torch.float64) * inv.to(device=x.device)
    if hasattr(self, "embed_positions"):  # GPTJRotaryEmbedding: (sin, cos), r/2 each
        return freqs.sin().to(dtype=x.dtype), freqs.cos().to(dtype=x.dtype)
    emb = torch.cat((freqs, freqs), dim=-1)
    scale = self.attention_scaling
    return (emb.cos() * scale).to(dtype=x.dtype), (emb.sin() * scale).to(dtype=x.dtype)


def _router_forward(self: Any, hidden_states: Any, *, exact: bool, renormalize: bool) -> Any:
    r"""``MixtralTopKRouter.forward`` (models/mixtral/modeling_mixtral.py): router logits
    :math:`s = xW^\top`, probabilities :math:`\operatorname{softmax}(s)` (float32 in stock
    HF, the logits' dtype when ``exact``), the ``top_k`` largest, divided by their sum
    when ``renormalize`` (stock HF always does)."""
    import torch

    hidden_states = hidden_states.reshape(-1, self.hidden_dim)
    router_logits = torch.nn.functional.linear(hidden_states, self.weight)
    probs = torch.nn.functional.softmax(router_logits if exact else router_logits.float(),
                                        dim=-1)
    top_value, top_index = torch.topk(probs, self.top_k, dim=-1)
    if renormalize:
        top_value = top_value / top_value.sum(dim=-1, keepdim=True)
    return router_logits, top_value, top_index


def _is_mixtral_router(module: Any) -> bool:
    """Mixtral's router or Qwen-MoE's (the same forward, ``norm_topk_prob`` optional)."""
    return type(module).__name__ in ("MixtralTopKRouter", "Qwen2MoeTopKRouter",
                                     "Qwen3MoeTopKRouter")


def exact_inv_freq(config: Any) -> np.ndarray:
    r"""The float64 RoPE frequencies :math:`\theta_i` of an nlaverify config (base, scaling,
    and the rotated coordinates ``rotary_dim``: :math:`b^{-2i/r}`),
    :func:`nlaverify.ops.rotary.rope_frequencies` on NumPy."""
    from nlaverify.backends import get_namespace
    from nlaverify.ops.rotary import rope_frequencies

    xp = get_namespace("numpy")
    # multi-head latent attention rotates qk_rope_head_dim coordinates (DeepseekV3Config's
    # head_dim)
    r = getattr(config, "rotary_dim", None) or getattr(config, "qk_rope_head_dim", None) or \
        config.d_head
    return np.asarray(rope_frequencies(xp, r, config.rope_base,
                                       config.rope_scaling), dtype=np.float64)


@contextlib.contextmanager
def exact_arithmetic(model: Any, config: Any,
                     parts: Collection[str] = tuple(EXACT_PATCHES), *,
                     fidelity: list[Fidelity] | None = None) -> Iterator[None]:
    """Patch ``model`` (one instance) to compute in its own dtype where stock HF drops to
    float32: the ``parts`` among ``"rmsnorm"``, ``"rotary"``, ``"router_softmax"`` (see
    :data:`EXACT_PATCHES`; attention and the loss are handled by
    :mod:`~nlaverify.interop.hf_verify`). ``config`` is the nlaverify
    :class:`~nlaverify.config.TransformerConfig` (RoPE base and scaling). An RMSNorm of an
    unknown form raises :class:`~nlaverify.errors.UnknownNameError` rather than being left
    in float32 silently. ``fidelity``: a list receiving, per patched call, HF's stock output
    next to the exact one (module docstring)."""
    import torch

    unknown = sorted(set(parts) - set(ALL_EXACT_PATCHES))
    if unknown:
        raise UnknownNameError(f"exact_arithmetic: unknown patch {unknown[0]!r}: expected "
                               f"some of {', '.join(ALL_EXACT_PATCHES)}")
    undo = _Restorer()
    try:
        if "mamba_scan" in parts and type(model).__name__.startswith("Mamba"):
            patch_mamba_scan(undo, modeling_module(model), fidelity, record_fidelity)
        if "mamba2_scan" in parts and type(model).__name__.startswith("Mamba2"):
            _mamba2.patch_scan(undo, modeling_module(model), fidelity, record_fidelity)
        for name, module in model.named_modules():
            cls = type(module).__name__
            if _norms.patch_module(undo, name, module, parts, config, fidelity,  # OLMo, Cohere
                                   exact_inv_freq, record_fidelity) or _rwkv.patch_module(
                    undo, name, module, parts, fidelity, record_fidelity) or _mamba2.patch_module(
                    undo, name, module, parts, fidelity, record_fidelity) or \
                    _deepseek.patch_module(undo, name, module, parts, config, fidelity,
                                           exact_inv_freq, record_fidelity):  # V2's complex RoPE
                continue
            if cls == "MambaBlock" and "mamba_residual" in parts:
                # HF's own branch for residual_in_fp32=False: nothing of HF's is replaced
                undo.on_exit(lambda m=module, v=module.residual_in_fp32: setattr(
                    m, "residual_in_fp32", v))
                module.residual_in_fp32 = False
            if cls in ("GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm") and "rmsnorm" in parts:
                undo.set_exact(module, name, "rmsnorm", _gemma_rmsnorm_exact, fidelity)
            elif cls.endswith("RMSNorm") and "rmsnorm" in parts:
                if not hasattr(module, "variance_epsilon"):
                    raise UnknownNameError(f"exact_arithmetic: module {name!r} ({cls}) is an "
                                           "RMSNorm of a form nlaverify does not patch")
                undo.set_exact(module, name, "rmsnorm", _rmsnorm_exact, fidelity)
            elif cls.endswith("RotaryEmbedding") and "rotary" in parts:
                if getattr(module, "rope_type", "default") not in ("default", "linear",
                                                                    "llama3", "yarn"):
                    raise UnknownNameError(f"exact_arithmetic: module {name!r}: RoPE type "
                                           f"{module.rope_type!r} is not one nlaverify models")
                module._nlaverify_inv_freq = torch.from_numpy(exact_inv_freq(config))
                undo.on_exit(lambda m=module: delattr(m, "_nlaverify_inv_freq"))
                undo.set_exact(module, name, "rotary", _rotary_exact, fidelity)
            elif _is_mixtral_router(module) and "router_softmax" in parts:
                undo.set_exact(module, name, "router_softmax", lambda self, h: _router_forward(
                    self, h, exact=True, renormalize=getattr(self, "norm_topk_prob", True)),
                    fidelity)
        yield
    finally:
        undo.restore()


# --- planted mistakes (test instruments) ----------------------------------------------

def _square_projection(model: Any, model_type: str) -> tuple[str, Any]:
    """``(name, parameter)`` of block 0's first square attention projection weight."""
    named = dict(model.named_parameters())
    if model_type == "gpt2":
        candidates = ["transformer.h.0.attn.c_proj.weight"]
    else:
        candidates = [f"model.{'decoder.' * (model_type == 'opt')}layers.0.self_attn.{p}.weight"
                      for p in ("q_proj", "o_proj")]
    for key in candidates:
        w = named.get(key)
        if w is not None and w.ndim == 2 and w.shape[0] == w.shape[1]:
            return key, w
    raise ArgumentError(f"plant 'transpose_square': no square projection among "
                        f"{', '.join(candidates)} (n_heads * d_head != d_model)")


@contextlib.contextmanager
def plant_mistake(model: Any, model_type: str, plant: str | None, *,
                  exact: bool = False) -> Iterator[str | None]:
    """Plant the mistake ``plant`` (a key of :data:`PLANTS`, or ``None``) in ``model`` for
    the duration; yields a one-line description of what was changed. A test instrument:
    verification must name the node where the planted mistake first shows. ``exact``: the
    router softmax of ``no_renormalize`` in the model dtype (as :func:`exact_arithmetic`
    computes it)."""
    import torch

    if plant is None:
        yield None
        return
    known = [*PLANTS, *MAMBA_PLANTS, *_rwkv.RWKV_PLANTS, *_mamba2.MAMBA2_PLANTS]
    if plant not in known:
        raise UnknownNameError(f"plant: unknown mistake {plant!r}: expected one of "
                               f"{', '.join(known)}")
    undo = _Restorer()
    try:
        if plant == "transpose_square":
            key, w = _square_projection(model, model_type)
            saved = w.detach().clone()
            with torch.no_grad():
                w.copy_(saved.T)
            undo.on_exit(lambda: w.data.copy_(saved))
            what = f"{key} transposed"
        elif plant in _rwkv.RWKV_PLANTS or plant in _mamba2.MAMBA2_PLANTS:
            what = (_rwkv if plant in _rwkv.RWKV_PLANTS else _mamba2).plant(undo, model, plant)
        elif plant == "mamba_in_proj_swap":
            key = "backbone.layers.0.mixer.in_proj.weight"
            w = dict(model.named_parameters()).get(key)
            if w is None:
                raise ArgumentError(f"plant 'mamba_in_proj_swap': model {model_type!r} has no "
                                    f"{key}")
            saved = w.detach().clone()
            half = saved.shape[0] // 2
            with torch.no_grad():
                w.copy_(torch.cat([saved[half:], saved[:half]]))
            undo.on_exit(lambda: w.data.copy_(saved))
            what = f"{key}: its halves (x, z) swapped"
        elif plant == "qkv_blocked":  # GPT-NeoX: (heads, 3, d_h) rows regrouped (3, heads, d_h)
            key = {"falcon": "transformer.h.0.self_attention.query_key_value"}.get(
                model_type, "gpt_neox.layers.0.attention.query_key_value")  # per-head rows
            ws = [w for n, w in model.named_parameters() if n.startswith(key + ".")]
            if not ws:
                raise ArgumentError(f"plant 'qkv_blocked': model {model_type!r} has no {key}")
            for w in ws:
                saved, H = w.detach().clone(), model.config.num_attention_heads
                with torch.no_grad():
                    w.copy_(saved.reshape(H, 3, -1, *saved.shape[1:]).transpose(0, 1)
                            .reshape(saved.shape))
                undo.on_exit(lambda w=w, saved=saved: w.data.copy_(saved))
            what = f"{key}: rows written blocked [Q | K | V]"
        elif plant == "rope_pairing":
            mod = modeling_module(model)
            if not hasattr(mod, "rotate_half") or model_type == "cohere":
                raise ArgumentError(f"plant 'rope_pairing': {mod.__name__} has no half-pairing "
                                    "rotate_half (a model without RoPE, or Cohere's interleaved)")
            undo.set_global(mod, "rotate_half", _norms.rotate_half_interleaved)
            what = f"{mod.__name__}.rotate_half replaced by the interleaved pairing"
        else:  # no_renormalize
            routers = [m for m in model.modules() if _is_mixtral_router(m)]
            if not routers:
                raise ArgumentError(f"plant 'no_renormalize': model {model_type!r} has no "
                                    "Mixtral top-k router")
            for r in routers:
                undo.set_forward(r, lambda self, h: _router_forward(
                    self, h, exact=exact, renormalize=False))
            what = f"{len(routers)} MixtralTopKRouter gates not renormalised"
        yield what
    finally:
        undo.restore()
