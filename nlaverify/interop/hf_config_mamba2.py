r"""Hugging Face ``Mamba2Config`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 37).

Checked against ``transformers`` 5.25 (``models/mamba2/configuration_mamba2.py`` and
``modeling_mamba2.py``). A ``Mamba2ForCausalLM`` is an embedding, ``num_hidden_layers`` blocks
:math:`x \leftarrow x + \operatorname{Mixer}(\operatorname{RMSNorm}(x))` with *no* MLP
(``Mamba2Block``), a final RMSNorm ``norm_f`` and an ``lm_head`` (untied by default), no
positional embedding (Dao & Gu 2024, §7-§8). Hence ``mixer="mamba2"``, ``mlp="none"``,
``norm="rmsnorm"``, pre-norm, ``positions="none"``; the attention and MLP sizes are unread and
fixed (``n_heads=1``, ``d_mlp=1``), ``context`` is
:data:`~nlaverify.interop.hf_config_mamba.MAMBA_CONTEXT`.

Fields: ``hidden_size`` (:math:`d`), ``num_hidden_layers``, ``vocab_size`` (required);
``num_heads`` (``ssm_heads`` :math:`H`), ``head_dim`` (:math:`P`: ``num_heads * head_dim``
must be ``expand * hidden_size``, the mixer's ``intermediate_size``, or HF's
``view(..., num_heads, head_dim)`` fails), ``n_groups`` (``ssm_groups``), ``state_size``
(``ssm_state``), ``conv_kernel`` (``ssm_conv``), ``expand`` (``ssm_expand``, an integer),
``layer_norm_epsilon`` (every RMSNorm's, the gated one's too), ``tie_word_embeddings``.
``hidden_act`` must be ``silu``, ``use_bias`` false, ``use_conv_bias`` true.
``time_step_limit`` must be :math:`(0, \infty)`, its default: HF clamps :math:`\Delta` to it
after the softplus, which ``mamba2_scan`` does not (another limit is refused by key).

Accepted and ignored, with the reason (:data:`~nlaverify.interop.hf_config_tables.IGNORED`):
``chunk_size`` (the chunked SSD algorithm equals the recurrence for every chunking: identity
``ssm_ssd_chunked_equals_recurrence``), ``time_step_rank`` (``Mamba2Mixer`` does not read
it), ``residual_in_fp32`` and the ``time_step_*`` initialisation keys.
"""

from __future__ import annotations

import math
from typing import Any

from nlaverify.config import NO_MLP, ConfigError, TransformerConfig
from nlaverify.interop.hf_config_mamba import MAMBA_CONTEXT, _typed, refuse_unfixed
from nlaverify.interop.hf_config_tables import first_mismatch

__all__ = ["mamba2_fields", "mamba2_hf_dict", "mamba2_mismatch"]


def _number(v: Any) -> Any:
    """A JSON number, or ``transformers``' encoding of a non-finite one (``save_pretrained``
    writes :math:`\\infty` as ``{"__float__": "Infinity"}``)."""
    if isinstance(v, dict) and set(v) == {"__float__"} and v["__float__"] in (
            "Infinity", "-Infinity", "NaN"):
        return float(v["__float__"].replace("Infinity", "inf"))
    return v


def _no_limit(limit: Any) -> bool:
    """``time_step_limit`` is :math:`(0, \\infty)` (a list or tuple; JSON's ``Infinity``)."""
    if not isinstance(limit, (list, tuple)) or len(limit) != 2:
        return False
    lo, hi = (_number(v) for v in limit)
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (lo, hi)) and \
        lo == 0 and math.isinf(hi) and hi > 0


def mamba2_fields(r: Any) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of a ``Mamba2Config`` dict, read through
    :mod:`~nlaverify.interop.hf_config`'s reader ``r`` (its ``get``, ``raw``; every key it
    reads is marked used). Raises :class:`ConfigError` naming a key nlaverify cannot
    express (module docstring)."""
    d = r.get("hidden_size", "int", required=True)
    expand = r.get("expand", "int")
    refuse_unfixed(_typed(r), "load_hf_config: mamba2 config")
    limit = r.raw("time_step_limit", [0.0, math.inf])
    if not _no_limit(limit):
        raise ConfigError(f"load_hf_config: mamba2 config: field 'time_step_limit': only "
                          f"(0.0, inf) is supported (HF clamps softplus(dt + dt_bias) to it; "
                          f"nlaverify's mamba2_scan does not clamp), got {limit!r}")
    heads, head_dim = r.get("num_heads", "int"), r.get("head_dim", "int")
    if heads * head_dim != expand * d:
        raise ConfigError(f"load_hf_config: mamba2 config: field 'num_heads'={heads}: "
                          f"num_heads * head_dim = {heads * head_dim} must equal the mixer's "
                          f"intermediate_size expand * hidden_size = {expand * d}")
    return _fields(r.get("vocab_size", "int", required=True), d,
                   r.get("num_hidden_layers", "int", required=True), heads,
                   r.get("n_groups", "int"), r.get("state_size", "int"),
                   r.get("conv_kernel", "int"), expand, r.get("layer_norm_epsilon", "float"),
                   r.get("tie_word_embeddings", "bool"))


def _fields(vocab: int, d: int, blocks: int, heads: int, groups: int, state: int, conv: int,
            expand: int, eps: float, tied: bool) -> dict[str, Any]:
    """The fields of a Hugging Face Mamba-2 of these sizes, the fixed ones included."""
    return dict(vocab_size=vocab, d_model=d, n_heads=1, n_blocks=blocks, d_mlp=1,
                norm="rmsnorm", placement="pre", positions="none", context=MAMBA_CONTEXT,
                mlp=NO_MLP, mixer="mamba2", ssm_heads=heads, ssm_groups=groups,
                ssm_state=state, ssm_conv=conv, ssm_expand=expand, norm_eps=eps,
                tied_embeddings=tied)


def mamba2_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``Mamba2Config`` cannot express, as ``(field,
    value, expected)``, or ``None``: every field but the sizes must be what
    :func:`mamba2_fields` reads."""
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
        c.vocab_size, c.d_model, c.n_blocks, c.ssm_heads, c.ssm_groups, c.ssm_state,
        c.ssm_conv, c.ssm_expand, c.norm_eps, c.tied_embeddings)), {})


def mamba2_hf_dict(c: TransformerConfig) -> dict[str, Any]:
    """The ``Mamba2Config`` fields of ``c`` (already checked by :func:`mamba2_mismatch`),
    every size written out: ``transformers.AutoConfig.for_model(**d)`` builds it."""
    return {"architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, "num_heads": c.ssm_heads,
            "head_dim": c.d_inner // c.ssm_heads, "n_groups": c.ssm_groups,
            "state_size": c.ssm_state, "expand": c.ssm_expand, "conv_kernel": c.ssm_conv,
            "use_bias": False, "use_conv_bias": True, "hidden_act": "silu",
            "layer_norm_epsilon": c.norm_eps, "time_step_limit": [0.0, math.inf],
            "tie_word_embeddings": c.tied_embeddings}
