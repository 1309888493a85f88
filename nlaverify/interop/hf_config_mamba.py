r"""Hugging Face ``MambaConfig`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 37).

Checked against ``transformers`` 5.25 (``models/mamba/configuration_mamba.py`` and
``modeling_mamba.py``). A ``MambaForCausalLM`` is an embedding, ``num_hidden_layers`` blocks
:math:`x \leftarrow x + \operatorname{Mixer}(\operatorname{RMSNorm}(x))` with *no* MLP
(``MambaBlock``), a final RMSNorm ``norm_f`` and a (tied) ``lm_head``, no positional
embedding. Hence ``mixer="mamba"``, ``mlp="none"``, ``norm="rmsnorm"``, pre-norm,
``positions="none"``; the attention and MLP sizes are unread and fixed (``n_heads=1``,
``d_mlp=1``), and ``context`` (a Mamba reads no position; only the longest sequence
verified) is :data:`MAMBA_CONTEXT`, the length the released models were trained on
(Gu & Dao 2023 §4.2).

Fields: ``hidden_size`` (:math:`d`), ``num_hidden_layers``, ``vocab_size`` (required);
``state_size`` (``ssm_state``), ``expand`` (``ssm_expand``, an integer:
:math:`d_{in} = ` ``expand`` :math:`\cdot d`; ``intermediate_size``, which
``MambaConfig.__post_init__`` recomputes so, must agree), ``conv_kernel`` (``ssm_conv``),
``time_step_rank`` (``ssm_dt_rank``; ``"auto"`` is :math:`\lceil d/16\rceil`, read as
``None``, as is an integer equal to it: HF's own ``to_dict`` writes the resolved integer),
``layer_norm_epsilon``, ``tie_word_embeddings``. ``hidden_act`` must be ``silu`` (the
activation after the convolution), ``use_bias`` false (nlaverify's in/out projections have no
bias) and ``use_conv_bias`` true (its convolution always has one). ``residual_in_fp32``, the
``time_step_*`` initialisation keys and the other keys of
:data:`~nlaverify.interop.hf_config_tables.IGNORED_ONLY` for ``mamba`` are accepted and
ignored, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nlaverify.config import NO_MLP, ConfigError, TransformerConfig
from nlaverify.interop.hf_config_tables import first_mismatch

__all__ = ["MAMBA_CONTEXT", "MAMBA_FIXED", "mamba_fields", "mamba_hf_dict", "mamba_mismatch",
           "refuse_unfixed"]

#: ``context`` of a Mamba read from Hugging Face: the released models' training length
MAMBA_CONTEXT = 2048


def _auto_rank(d_model: int) -> int:
    r""":math:`\lceil d/16\rceil`, ``MambaConfig``'s ``time_step_rank="auto"``."""
    return -(-d_model // 16)


#: the options Mamba's and Mamba-2's mixers fix, with the one value nlaverify models (Hugging
#: Face's defaults): the activation, no in/out projection bias, a convolution bias
MAMBA_FIXED: dict[str, Any] = {"hidden_act": "silu", "use_bias": False, "use_conv_bias": True}


def refuse_unfixed(get: Callable[[str], Any], where: str) -> None:
    """Raise :class:`ConfigError` naming the first key of :data:`MAMBA_FIXED` whose value,
    read by ``get(key)``, is not the one nlaverify models."""
    for key, want in MAMBA_FIXED.items():
        got = get(key)
        if got != want:
            raise ConfigError(f"{where}: field {key!r}: only {want!r} is supported, got "
                              f"{got!r}")


def _typed(r: Any) -> Callable[[str], Any]:
    """``r.get`` with each :data:`MAMBA_FIXED` key's type."""
    return lambda key: r.get(key, "str" if key == "hidden_act" else "bool")


def mamba_fields(r: Any) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of a ``MambaConfig`` dict, read through
    :mod:`~nlaverify.interop.hf_config`'s reader ``r`` (its ``get``, ``raw``; every key it
    reads is marked used). Raises :class:`ConfigError` naming a key nlaverify cannot
    express (module docstring)."""
    d = r.get("hidden_size", "int", required=True)
    expand = r.get("expand", "int")
    refuse_unfixed(_typed(r), "load_hf_config: mamba config")
    inner = r.get("intermediate_size", "int?")
    if inner is not None and inner != expand * d:
        raise ConfigError(f"load_hf_config: mamba config: field 'intermediate_size'={inner} "
                          f"contradicts expand * hidden_size = {expand * d} (MambaConfig "
                          "recomputes it so)")
    rank = r.raw("time_step_rank", "auto")
    if rank != "auto" and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 1):
        raise ConfigError(f"load_hf_config: mamba config: field 'time_step_rank': expected "
                          f"'auto' or a positive integer, got {rank!r}")
    return _fields(r.get("vocab_size", "int", required=True), d,
                   r.get("num_hidden_layers", "int", required=True), r.get("state_size", "int"),
                   r.get("conv_kernel", "int"), expand,
                   None if rank in ("auto", _auto_rank(d)) else rank,
                   r.get("layer_norm_epsilon", "float"), r.get("tie_word_embeddings", "bool"))


def _fields(vocab: int, d: int, blocks: int, state: int, conv: int, expand: int,
            rank: int | None, eps: float, tied: bool) -> dict[str, Any]:
    """The fields of a Hugging Face Mamba of these sizes, the fixed ones included."""
    return dict(vocab_size=vocab, d_model=d, n_heads=1, n_blocks=blocks, d_mlp=1,
                norm="rmsnorm", placement="pre", positions="none", context=MAMBA_CONTEXT,
                mlp=NO_MLP, mixer="mamba", ssm_state=state, ssm_conv=conv, ssm_expand=expand,
                ssm_dt_rank=rank, norm_eps=eps, tied_embeddings=tied)


def mamba_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    r"""The first field of ``c`` a Hugging Face ``MambaConfig`` cannot express, as ``(field,
    value, expected)``, or ``None``: every field but the sizes must be what
    :func:`mamba_fields` reads (an explicit ``ssm_dt_rank`` :math:`= \lceil d/16\rceil` is
    ``None``'s spelling)."""
    rank = None if c.ssm_dt_rank == _auto_rank(c.d_model) else c.ssm_dt_rank
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
        c.vocab_size, c.d_model, c.n_blocks, c.ssm_state, c.ssm_conv, c.ssm_expand, rank,
        c.norm_eps, c.tied_embeddings)), {"ssm_dt_rank": rank})


def mamba_hf_dict(c: TransformerConfig) -> dict[str, Any]:
    """The ``MambaConfig`` fields of ``c`` (already checked by :func:`mamba_mismatch`),
    every size written out: ``transformers.AutoConfig.for_model(**d)`` builds it."""
    return {"architectures": ["MambaForCausalLM"], "model_type": "mamba",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, "state_size": c.ssm_state,
            "expand": c.ssm_expand, "intermediate_size": c.d_inner,
            "conv_kernel": c.ssm_conv, "time_step_rank": c.dt_rank, "use_bias": False,
            "use_conv_bias": True, "hidden_act": "silu", "layer_norm_epsilon": c.norm_eps,
            "tie_word_embeddings": c.tied_embeddings}
