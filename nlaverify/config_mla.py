r"""Multi-head latent attention's options of :class:`nlaverify.config.TransformerConfig` and
their checks (DeepSeek-AI 2024, DeepSeek-V2 §2.1.2-2.1.3; Hugging Face ``DeepseekV3Config``'s
names and meanings).

``kv_lora_rank`` :math:`r > 0` turns MLA on in every attention block: the keys and values
come from one latent :math:`c^{KV} = \operatorname{RMSNorm}(x W^{DKV})` of width :math:`r`
(``kv_a_proj_with_mqa``, ``kv_a_layernorm``), :math:`k^C_i = c^{KV} W^{UK}_i`,
:math:`v_i = c^{KV} W^{UV}_i` (``kv_b_proj``), with a rotated key :math:`k^R =
\operatorname{RoPE}(x W^{KR})` of width :math:`d_r` shared by the heads; the queries are
:math:`[q^C_i; \operatorname{RoPE}(q^R_i)]` of :math:`x` (``q_lora_rank = None``,
``q_proj``) or of :math:`\operatorname{RMSNorm}(x W^{DQ})` (``q_lora_rank`` :math:`r_q`;
``q_a_proj``, ``q_a_layernorm``, ``q_b_proj``). Head widths: ``qk_nope_head_dim``
:math:`d_c`, ``qk_rope_head_dim`` :math:`d_r`, ``v_head_dim`` :math:`d_v`; scores
:math:`q_i^\top k_i / \sqrt{d_c + d_r}`. The latent norms use :data:`MLA_NORM_EPS` (Hugging
Face builds ``DeepseekV3RMSNorm(kv_lora_rank)`` with its default epsilon, not
``rms_norm_eps``). The KV cache holds :math:`r + d_r` values per token and layer.
"""

from __future__ import annotations

from typing import Any

from nlaverify.config_options import ConfigError

__all__ = ["MLA_FIELDS", "MLA_NORM_EPS", "check_mla", "mla_cache_width", "mla_score_scale",
           "uses_mla"]

#: the fields of multi-head latent attention (:func:`check_mla`)
MLA_FIELDS = ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
              "v_head_dim")
#: the epsilon of ``q_a_layernorm`` and ``kv_a_layernorm`` (Hugging Face
#: ``DeepseekV3RMSNorm(hidden_size, eps=1e-6)``, built without ``rms_norm_eps``)
MLA_NORM_EPS = 1e-6

#: options MLA is not combined with: (field, the value it must keep, why)
_EXCLUSIVE = (
    ("attention", "softmax", "the latent attention is softmax attention"),
    ("positions", "rope", "the decoupled key is rotated (DeepSeek-V2 §2.1.3)"),
    ("n_kv_heads", None, "every head has its own key and value from the latent"),
    ("qk_norm", False, "no QK-norm in DeepSeek's attention"),
    ("attn_bias", False, "the projections of the graph's MLA have no biases"),
    ("lora_rank", 0, "LoRA targets q, k, v projections MLA does not have"),
    ("rotary_dim", None, "the rotated part is qk_rope_head_dim"),
    ("sliding_window", None, "DeepSeek's attention sees the whole prefix"),
    ("attn_softcap", None, "DeepSeek's scores are not capped"),
    ("query_pre_attn_scalar", None, "scores are scaled by 1/sqrt(qk_nope + qk_rope)"),
)


def uses_mla(cfg: Any) -> bool:
    r"""Whether the attention blocks of ``cfg`` are multi-head latent attention
    (``kv_lora_rank`` :math:`> 0`; DeepSeek-V2 §2.1)."""
    return bool(cfg.kv_lora_rank)


def mla_cache_width(cfg: Any) -> int:
    r"""Values cached per token and attention block: :math:`r + d_r` (``kv_lora_rank +
    qk_rope_head_dim``, the latent and the shared rotated key; DeepSeek-V2 §2.1.2, Table 1),
    against :math:`2 h_{kv} d_h` for keys and values materialised per head."""
    if uses_mla(cfg):
        return cfg.kv_lora_rank + cfg.qk_rope_head_dim
    return 2 * cfg.n_kv_heads * cfg.d_head


def mla_score_scale(cfg: Any) -> float | None:
    r"""The scale of MLA's scores when YaRN changes it, else ``None`` (the attention's own
    :math:`1/\sqrt{d_c + d_r}`): with ``rope_scaling`` of kind ``yarn``, factor :math:`s > 1`
    and ``mscale_all_dim`` :math:`\mu > 0`, :math:`m^2/\sqrt{d_c + d_r}`, :math:`m = 0.1\mu
    \ln s + 1` (DeepSeek-V2's released attention, ``softmax_scale * mscale * mscale``;
    Hugging Face ``yarn_apply_mscale``; Peng et al. 2023, YaRN eq. 21)."""
    import math

    sc = cfg.rope_scaling
    if not uses_mla(cfg) or sc is None or sc.kind != "yarn" or not sc.mscale_all_dim or \
            sc.factor <= 1:
        return None
    m = 0.1 * sc.mscale_all_dim * math.log(sc.factor) + 1.0
    return m * m / math.sqrt(cfg.qk_nope_head_dim + cfg.qk_rope_head_dim)


def _int(cfg: Any, f: str, low: int, none_ok: bool) -> None:
    v = getattr(cfg, f)
    if v is None and none_ok:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ConfigError(f"TransformerConfig.{f}: expected an integer >= {low}"
                          f"{' or None' if none_ok else ''}, got {v!r}")


def check_mla(cfg: Any) -> None:
    """The MLA fields (module docstring): ``kv_lora_rank`` an integer >= 0; with it 0 the
    other four unset (``None``); with it > 0 ``qk_nope_head_dim``, ``qk_rope_head_dim``
    (even: RoPE rotates pairs) and ``v_head_dim`` positive, ``q_lora_rank`` positive or
    ``None``, and the options of :data:`_EXCLUSIVE` at their values. Each error names the
    field, expected against actual."""
    _int(cfg, "kv_lora_rank", 0, False)
    if not cfg.kv_lora_rank:
        for f in MLA_FIELDS[1:]:
            if getattr(cfg, f) is not None:
                raise ConfigError(f"TransformerConfig.{f}: applies to multi-head latent "
                                  f"attention (kv_lora_rank > 0); expected None with "
                                  f"kv_lora_rank=0, got {getattr(cfg, f)!r}")
        return
    _int(cfg, "q_lora_rank", 1, True)
    for f in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        if getattr(cfg, f) is None:
            raise ConfigError(f"TransformerConfig.{f}: expected a positive integer with "
                              f"kv_lora_rank={cfg.kv_lora_rank}, got None")
        _int(cfg, f, 1, False)
    if cfg.qk_rope_head_dim % 2:
        raise ConfigError(f"TransformerConfig.qk_rope_head_dim: RoPE rotates pairs; expected "
                          f"an even integer, got {cfg.qk_rope_head_dim}")
    for f, want, why in _EXCLUSIVE:
        want = cfg.n_heads if f == "n_kv_heads" else want
        if getattr(cfg, f) != want:
            raise ConfigError(f"TransformerConfig.{f}: expected {want!r} with multi-head "
                              f"latent attention (kv_lora_rank={cfg.kv_lora_rank}: {why}), "
                              f"got {getattr(cfg, f)!r}")
