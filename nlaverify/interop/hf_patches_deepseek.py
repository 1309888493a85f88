r"""Exact-arithmetic patches of Hugging Face DeepSeek-V2 (``models/deepseek_v2/
modeling_deepseek_v2.py``, transformers 5.25), whose RoPE is complex: stock code computes it
in float32/complex64 even when the model is float64. Applied by
:func:`nlaverify.interop.hf_patches.exact_arithmetic` (:func:`patch_module`), recorded for
patch fidelity as every other patch is (the complex outputs as their real and imaginary
parts, ``torch.view_as_real``):

- ``"rotary"`` (node ``blocks.0.attn.q_rope``): ``DeepseekV2RotaryEmbedding.forward``
  (``position_ids.float() * inv_freq``, ``torch.polar``: complex64 :math:`e^{it\theta_i}`);
  replaced by :func:`_v2_rotary_exact` (complex128 from nlaverify's float64 frequencies).
- ``"deepseek_rotary"`` (``attn.q_rope``): ``apply_rotary_emb`` (``xq.float()``,
  ``xk.float()``: the pairs :math:`x_{2i} + i x_{2i+1}` multiplied in complex64); replaced
  by :func:`_v2_apply_rotary_exact` (a module function, swapped for the duration).

DeepSeek-V3 (``models/deepseek_v3/modeling_deepseek_v3.py``):

- ``"router_sigmoid"`` (node ``blocks.{l}.mlp.out``, as Mixtral's ``"router_softmax"``):
  ``DeepseekV3TopkRouter.forward`` (``hidden_states.type(torch.float32)``,
  ``self.weight.type(torch.float32)``: the logits, the sigmoid, the biased group-limited
  selection and the gates in float32); replaced by :func:`v3_router_exact`, the same steps in
  the model dtype. Its fidelity record is the dense gates ``(T, E)`` (zero off the chosen
  experts).
- ``"router_v2"`` (node ``blocks.{l}.mlp.out``): ``DeepseekV2TopkRouter.forward`` (the same
  float32 casts: softmax affinities, greedy or group-limited selection, scaled gates in
  float32); replaced by :func:`v2_router_exact`. Fidelity record as ``"router_sigmoid"``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEEPSEEK_EXACT_PATCHES", "patch_module", "v2_router_exact", "v3_router_exact"]

#: the exact-arithmetic patches of this module, by name, and the stock code each replaces
DEEPSEEK_EXACT_PATCHES: dict[str, str] = {
    "router_sigmoid": "models/deepseek_v3/modeling_deepseek_v3.py DeepseekV3TopkRouter.forward "
                      "(hidden_states.type(torch.float32), self.weight.type(torch.float32))",
    "router_v2": "models/deepseek_v2/modeling_deepseek_v2.py DeepseekV2TopkRouter.forward "
                 "(hidden_states.type(torch.float32), self.weight.type(torch.float32))",
    "deepseek_rotary": "models/deepseek_v2/modeling_deepseek_v2.py apply_rotary_emb "
                       "(xq.float(), xk.float(): the complex rotation in complex64)",
}


def _v2_rotary_exact(self: Any, x: Any, position_ids: Any) -> Any:
    r"""``DeepseekV2RotaryEmbedding.forward`` with float64 angles :math:`t\theta_i` from
    float64 frequencies (``self._nlaverify_inv_freq``): :math:`a\,e^{it\theta_i}` in
    complex128 (:math:`a` the module's ``attention_scaling``)."""
    import torch

    freqs = position_ids[..., None].to(torch.float64) * self._nlaverify_inv_freq.to(x.device)
    return torch.polar(torch.ones_like(freqs), freqs) * self.attention_scaling


def v3_router_exact(self: Any, hidden_states: Any) -> tuple[Any, Any, Any]:
    r"""``DeepseekV3TopkRouter.forward`` in the dtype of ``hidden_states`` (DeepSeek-V3
    technical report §2.1.2, eq. (12)-(16)): :math:`s = \sigma(xW_r)`; each of the ``n_group``
    groups scored by the sum of its top two :math:`s + b`; the top :math:`k` of :math:`s + b`
    among the ``topk_group`` best groups; gates :math:`g_e = \rho\, s_e / (\sum_{S} s +
    10^{-20})` (without ``norm_topk_prob``: :math:`\rho\, s_e`). Returns ``(logits, gates,
    indices)`` as HF's."""
    import torch

    h = hidden_states.view(-1, self.hidden_dim)
    logits = torch.nn.functional.linear(h, self.weight.to(h.dtype))
    scores = logits.sigmoid()
    choice = scores + self.e_score_correction_bias.to(h.dtype)
    per = self.num_experts // self.num_group
    group_scores = choice.view(-1, self.num_group, per).topk(2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    mask = group_mask.unsqueeze(-1).expand(-1, self.num_group, per).reshape(-1,
                                                                              self.num_experts)
    choice = choice.masked_fill(~mask.bool(), float("-inf"))
    idx = torch.topk(choice, k=self.top_k, dim=-1, sorted=False)[1]
    gates = scores.gather(1, idx)
    if self.norm_topk_prob:
        gates = gates / (gates.sum(dim=-1, keepdim=True) + 1e-20)
    return logits, gates * self.routed_scaling_factor, idx


def v2_router_exact(self: Any, hidden_states: Any) -> tuple[Any, Any, Any]:
    r"""``DeepseekV2TopkRouter.forward`` in the dtype of ``hidden_states`` (DeepSeek-V2
    technical report §2.2): :math:`s = \operatorname{softmax}(xW_r)`; ``greedy``: the top
    :math:`k` of :math:`s`; ``group_limited_greedy``: each of the ``n_group`` groups scored by
    its largest :math:`s`, the ``topk_group`` best kept (the rest filled with 0, as HF), the top
    :math:`k` among them; gates :math:`\rho\, s_e` (no renormalising). Returns ``(logits,
    gates, indices)`` as HF's."""
    import torch

    h = hidden_states.view(-1, self.hidden_dim)
    logits = torch.nn.functional.linear(h, self.weight.to(h.dtype))
    scores = logits.softmax(dim=-1)
    if self.topk_method == "group_limited_greedy":
        per = self.num_experts // self.num_group
        group_scores = scores.view(-1, self.num_group, per).max(dim=-1).values
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
        mask = group_mask.unsqueeze(-1).expand(-1, self.num_group, per).reshape(
            -1, self.num_experts)
        scores = scores.masked_fill(~mask.bool(), 0.0)
    gates, idx = torch.topk(scores, k=self.top_k, dim=-1, sorted=False)
    return logits, gates * self.routed_scaling_factor, idx


def _v2_apply_rotary_exact(xq: Any, xk: Any, freqs_cis: Any) -> tuple[Any, Any]:
    r"""``apply_rotary_emb`` of ``modeling_deepseek_v2.py`` in the dtype of ``xq``, ``xk``:
    each pair :math:`(x_{2i}, x_{2i+1})` as :math:`x_{2i} + i x_{2i+1}` times
    :math:`e^{it\theta_i}`, written back in place (the interleaved rotation)."""
    import torch

    f = freqs_cis.unsqueeze(1)

    def rotate(x: Any) -> Any:
        z = torch.view_as_complex(x.contiguous().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(z * f).flatten(3).type_as(x)

    return rotate(xq), rotate(xk)


def patch_module(undo: Any, name: str, module: Any, parts: Any, config: Any, sink: Any,
                 exact_inv_freq: Any, record_fidelity: Any) -> bool:
    """Patch ``module`` (at ``name``) if it is one of this module's (``undo`` an
    :class:`~nlaverify.interop.hf_patches._Restorer`, ``sink`` the fidelity list, the last two
    :mod:`~nlaverify.interop.hf_patches`' functions of those names); whether it was handled.
    The DeepSeek-V2 model itself gets ``"deepseek_rotary"`` (a module function); DeepSeek-V3's
    routers ``"router_sigmoid"``."""
    import sys

    import torch

    cls = type(module).__name__
    if cls == "DeepseekV3TopkRouter":
        if "router_sigmoid" in parts:
            undo.set_exact(module, name, "router_sigmoid", v3_router_exact, sink)
        return True
    if cls == "DeepseekV2TopkRouter":
        if "router_v2" in parts:
            undo.set_exact(module, name, "router_v2", v2_router_exact, sink)
        return True
    if cls == "DeepseekV2RotaryEmbedding":
        if "rotary" in parts:
            module._nlaverify_inv_freq = torch.from_numpy(exact_inv_freq(config))
            undo.on_exit(lambda m=module: delattr(m, "_nlaverify_inv_freq"))
            stock: Any = None

            def forward(self_: Any, x: Any, position_ids: Any) -> Any:
                out = _v2_rotary_exact(self_, x, position_ids)
                record_fidelity(sink, name, "rotary", cls, lambda: torch.view_as_real(
                    stock(x, position_ids)), torch.view_as_real(out))
                return out

            stock = undo.set_forward(module, forward)
        return True
    if cls == "DeepseekV2ForCausalLM" and "deepseek_rotary" in parts:
        mod = sys.modules[type(module).__module__]
        original, calls = mod.apply_rotary_emb, [0]
        blocks = config.n_blocks

        def apply(xq: Any, xk: Any, freqs_cis: Any) -> Any:
            # one call per layer, in order, per forward pass: the layer is the count mod L
            layer, calls[0] = calls[0] % blocks, calls[0] + 1
            out = _v2_apply_rotary_exact(xq, xk, freqs_cis)
            # the queries (h heads) and the shared key (1 head) joined along the heads
            record_fidelity(sink, f"model.layers.{layer}.self_attn.apply_rotary",
                            "deepseek_rotary", "apply_rotary_emb",
                            lambda: torch.cat(original(xq, xk, freqs_cis), dim=1),
                            torch.cat(out, dim=1))
            return out

        undo.set_global(mod, "apply_rotary_emb", apply)
    return False
