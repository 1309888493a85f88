r"""The kernels of ``benchmarks/user_bugs.py``: LLM kernels written the way people write them
(PyTorch and JAX), each in a correct and a buggy version.

Each :class:`Kernel` names the nlaverify call that checks it (``check_op`` against a proved
op of :data:`nlaverify.ops.registry.OPS`, ``check_optimizer`` against a reference rule,
``check_function`` against a reference function, ``check_decode``), the bug in one line, and
the two versions. The correct versions are the idioms of the field (Hugging Face's
``LlamaRMSNorm`` upcast, ``F.layer_norm``'s biased variance, FlashAttention's running max
and rescale, Meta's interleaved RoPE, ``repeat_interleave`` for GQA); the buggy ones are the
mistakes people make and post about (Baggag & Saad §3 for the ops, §2.4 and §5.5 for the
optimizers, §5.3 for K-FAC).

Conventions the kernels follow, from the reference ops (``nlaverify.check.op_signature``):
RoPE pairs :math:`(x_{2i}, x_{2i+1})` (RoFormer's interleaved convention,
``nlaverify/ops/rotary.py``; Hugging Face's half split is a permutation of the head's
coordinates, hence a *bug* against this op); ``repeat_kv`` lets query head :math:`k` read
key/value head :math:`\lfloor k/n_{\text{rep}}\rfloor`; ``cross_entropy`` ignores targets
``-100`` and averages over the others.

The kernels live by kind in :mod:`_kernels_ops`, :mod:`_kernels_attention` and
:mod:`_kernels_steps` (re-exported here); this module holds :class:`Kernel` and the table
:data:`KERNELS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from _kernels_attention import (  # noqa: F401  (re-exported)
    BLOCK,
    attention_torch,
    attention_torch_by_d,
    causal_attention_jax,
    causal_attention_jax_no_self,
    causal_attention_torch,
    causal_attention_torch_peek,
    online_attention_torch,
    online_attention_torch_no_rescale,
    online_causal_attention_jax,
    online_causal_attention_jax_no_rescale,
    repeat_kv_jax,
    repeat_kv_jax_tile,
    repeat_kv_torch,
    repeat_kv_torch_tile,
    rope_jax,
    rope_jax_half_split,
    rope_torch,
    rope_torch_half_split,
)
from _kernels_ops import (  # noqa: F401  (re-exported)
    EPS,
    IGNORE,
    affine_torch_fp16_acc,
    affine_torch_fp32_acc,
    cross_entropy_jax,
    cross_entropy_jax_no_ignore,
    cross_entropy_torch,
    cross_entropy_torch_mean_all,
    gelu_jax,
    gelu_jax_default,
    gelu_torch,
    gelu_torch_tanh,
    layernorm_jax,
    layernorm_jax_unbiased,
    layernorm_torch,
    layernorm_torch_unbiased,
    rmsnorm_jax,
    rmsnorm_jax_eps_outside,
    rmsnorm_torch,
    rmsnorm_torch_fp16_sum,
    rmsnorm_torch_function,
    rmsnorm_torch_function_bad_backward,
    rmsnorm_torch_no_mean,
    rmsnorm_torch_stride_blind,
    softmax_jax,
    softmax_jax_custom_vjp,
    softmax_jax_custom_vjp_bad,
    softmax_jax_no_shift,
    softmax_torch,
    softmax_torch_no_shift,
    swiglu_jax,
    swiglu_jax_swapped,
)
from _kernels_steps import (  # noqa: F401  (re-exported)
    ADAMW,
    ADAMW_95,
    MUON,
    MUON_COEFFS,
    MUON_SHAPES,
    adamw95_step_torch,
    adamw95_step_torch_beta1_in_v,
    adamw_init_torch,
    adamw_step_torch,
    adamw_step_torch_coupled,
    decode_config,
    decoder_torch,
    decoder_torch_rope_after_append,
    kfac_factors_jax,
    kfac_factors_jax_sum,
    muon_step_jax,
    muon_step_jax_no_normalize,
)


@dataclass(frozen=True)
class Kernel:
    """One benchmark entry: ``correct`` and ``buggy`` versions of a kernel, checked by
    ``call`` against ``target`` (an op, a rule or a reference), in each of ``dtypes``.
    ``options`` are extra keywords of the call (``shapes=``, ``batch=``); ``grad`` the sizes
    of the float64 inputs for ``torch.autograd.gradcheck`` / ``jax.test_util.check_grads``
    (``None``: they do not apply, e.g. an optimizer step has no backward to check)."""

    name: str
    framework: str
    call: str
    target: str
    bug: str
    correct: Callable[..., Any]
    buggy: Callable[..., Any]
    dtypes: tuple[str, ...] = ("float32", "bfloat16")
    options: dict[str, Any] = field(default_factory=dict)
    grad: dict[str, int] | None = None
    #: words the report's diagnosis line should hold for the buggy version (``None``: no
    #: classic mistake of nlaverify.ops.variants or convention describes the bug)
    named: str | None = None


# -- the table ----------------------------------------------------------------------------

_G = {"n": 4, "d": 8, "m": 6, "d_k": 4, "d_v": 3, "h": 2, "h_kv": 2, "d_h": 6, "V": 5,
      "d_in": 64, "d_out": 3}
FP16 = ("float16",)

KERNELS: list[Kernel] = [
    Kernel("softmax", "torch", "check_op", "softmax", "no max shift",
           softmax_torch, softmax_torch_no_shift, grad=_G, named="no max shift"),
    Kernel("softmax", "jax", "check_op", "softmax", "no max shift",
           softmax_jax, softmax_jax_no_shift, grad=_G, named="no max shift"),
    Kernel("rmsnorm", "torch", "check_op", "rmsnorm", "sum of squares, no 1/d",
           rmsnorm_torch, rmsnorm_torch_no_mean, grad=_G, named="sum of squares for their mean"),
    Kernel("rmsnorm", "jax", "check_op", "rmsnorm", "eps outside the root",
           rmsnorm_jax, rmsnorm_jax_eps_outside, grad=_G, named="eps outside the square root"),
    Kernel("layernorm", "torch", "check_op", "layernorm", "unbiased variance (torch.var)",
           layernorm_torch, layernorm_torch_unbiased, grad=_G, named="unbiased variance"),
    Kernel("layernorm", "jax", "check_op", "layernorm", "unbiased variance (ddof=1)",
           layernorm_jax, layernorm_jax_unbiased, grad=_G, named="unbiased variance"),
    Kernel("attention", "torch", "check_op", "attention", "scores scaled by 1/d_k",
           attention_torch, attention_torch_by_d, grad=_G, named="scale='linear'"),
    Kernel("causal attention", "torch", "check_op", "causal_attention",
           "mask tril(diagonal=1): sees the next token",
           causal_attention_torch, causal_attention_torch_peek, grad=_G,
           named="sees the next token"),
    Kernel("causal attention", "jax", "check_op", "causal_attention",
           "mask '>' : excludes the diagonal", causal_attention_jax,
           causal_attention_jax_no_self, grad=_G, named="without the diagonal"),
    Kernel("online-softmax attention", "torch", "check_op", "attention",
           "no exp(m - m') rescale of l and acc", online_attention_torch,
           online_attention_torch_no_rescale, grad=_G),
    Kernel("online-softmax causal attention", "jax", "check_op", "causal_attention",
           "no exp(m - m') rescale of l and acc", online_causal_attention_jax,
           online_causal_attention_jax_no_rescale, grad=_G),
    Kernel("rope", "torch", "check_op", "rope", "half-split pairs (rotate_half)",
           rope_torch, rope_torch_half_split, grad=_G, named="layout='half'"),
    Kernel("rope", "jax", "check_op", "rope", "half-split pairs",
           rope_jax, rope_jax_half_split, grad=_G, named="layout='half'"),
    Kernel("rope, half layout", "torch", "check_op", "rope",
           "interleaved pairs where the half layout is in force",
           rope_torch_half_split, rope_torch, grad=_G, options={"static": {"layout": "half"}},
           named="layout='interleaved'"),
    Kernel("rmsnorm, stride-blind", "torch", "check_op", "rmsnorm",
           "reads storage as row-major (fails on a transposed view)",
           rmsnorm_torch, rmsnorm_torch_stride_blind, grad=_G, named="contiguous row-major"),
    Kernel("repeat_kv (GQA)", "torch", "check_op", "repeat_kv", "Tensor.repeat (tile)",
           repeat_kv_torch, repeat_kv_torch_tile, grad=_G, named="tile for repeat"),
    Kernel("repeat_kv (GQA)", "jax", "check_op", "repeat_kv", "jnp.tile",
           repeat_kv_jax, repeat_kv_jax_tile, grad=_G, named="tile for repeat"),
    Kernel("rmsnorm autograd.Function", "torch", "check_op", "rmsnorm",
           "backward: sum for mean in x̄", rmsnorm_torch_function,
           rmsnorm_torch_function_bad_backward, grad=_G,
           named="sums g*gamma*x-hat where the mean belongs"),
    Kernel("softmax custom_vjp", "jax", "check_op", "softmax",
           "bwd: <g, y> over all axes", softmax_jax_custom_vjp, softmax_jax_custom_vjp_bad,
           grad=_G, named="summed over every axis"),
    Kernel("affine, d_in = 4096", "torch", "check_op", "affine",
           "float16 running sum", affine_torch_fp32_acc, affine_torch_fp16_acc, FP16,
           {"shapes": {"d_in": 4096, "n": (1, 2), "d_out": (1, 2)}, "batch": False},
           grad=_G),
    Kernel("rmsnorm, d = 4096", "torch", "check_op", "rmsnorm",
           "float16 sum of squares", rmsnorm_torch, rmsnorm_torch_fp16_sum, FP16,
           {"shapes": {"d": 4096, "n": (1, 2)}, "batch": False}, grad=_G),
    Kernel("gelu (erf)", "torch", "check_op", "gelu_erf", "approximate='tanh'",
           gelu_torch, gelu_torch_tanh, grad=_G, named="tanh approximation"),
    Kernel("gelu (erf)", "jax", "check_op", "gelu_erf", "jax.nn.gelu default (tanh)",
           gelu_jax, gelu_jax_default, grad=_G, named="tanh approximation"),
    Kernel("swiglu", "jax", "check_op", "swiglu", "SiLU on the wrong branch",
           swiglu_jax, swiglu_jax_swapped, grad=_G, named="wrong branch"),
    Kernel("cross-entropy", "torch", "check_op", "cross_entropy",
           "mean over all tokens, ignored ones too", cross_entropy_torch,
           cross_entropy_torch_mean_all, grad=_G, named="ignored targets counted"),
    Kernel("cross-entropy", "jax", "check_op", "cross_entropy",
           "no ignore index (optax integer labels)", cross_entropy_jax,
           cross_entropy_jax_no_ignore, grad=_G),
    Kernel("AdamW step", "torch", "check_optimizer", "adamw", "coupled (L2) decay",
           adamw_step_torch, adamw_step_torch_coupled, named="added to the gradient"),
    Kernel("AdamW step, betas (0.9, 0.95), lr 3e-4", "torch", "check_optimizer", "adamw",
           "beta1 in the second moment's bias correction (update 1.41x)",
           adamw95_step_torch, adamw95_step_torch_beta1_in_v, options={"hyper": ADAMW_95},
           named="bias correction by beta1"),
    Kernel("Muon step", "jax", "check_optimizer", "muon", "no normalisation before NS",
           muon_step_jax, muon_step_jax_no_normalize, named="no Frobenius normalisation"),
    Kernel("Muon step, gradients x 30", "jax", "check_optimizer", "muon",
           "no normalisation before NS", muon_step_jax, muon_step_jax_no_normalize,
           options={"grad_scale": 30.0}, named="no Frobenius normalisation"),
    Kernel("K-FAC factors", "jax", "check_function", "kfac_factors",
           "sum over positions, not the mean", kfac_factors_jax, kfac_factors_jax_sum,
           named="a sum where a mean"),
    Kernel("KV-cache decoder", "torch", "check_decode", "causal decoder (GQA, RoPE)",
           "RoPE position = cache length after the append (off by one)", decoder_torch,
           decoder_torch_rope_after_append),
]
