r"""Hugging Face ``RwkvConfig`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 37).

Checked against ``transformers`` 5.25 (``models/rwkv/configuration_rwkv.py`` and
``modeling_rwkv.py``). An ``RwkvForCausalLM`` is an embedding, a LayerNorm of it
(``blocks.0.pre_ln``), ``num_hidden_layers`` pre-LN blocks :math:`x \leftarrow x +
\operatorname{TimeMix}(\mathrm{LN}_1(x))`, :math:`x \leftarrow x +
\operatorname{ChannelMix}(\mathrm{LN}_2(x))` (``RwkvBlock``), a final LayerNorm ``ln_out`` and
an untied ``head``, no positional embedding (Peng et al. 2023). Hence ``mixer="rwkv"``,
``norm="layernorm"``, pre-norm, ``positions="none"``; the attention sizes are unread and fixed
(``n_heads=1``), as is ``mlp`` (an all-RWKV model has no MLP: its channel mixing takes the
place).

Fields: ``hidden_size`` (:math:`d`), ``num_hidden_layers``, ``vocab_size`` (required);
``attention_hidden_size`` (``rwkv_attention_size``, the time mixing's width :math:`a`;
``None`` is :math:`d`, read as ``None``, as is an integer equal to it: HF's ``__post_init__``
writes the resolved integer), ``intermediate_size`` (``d_mlp``, the channel mixing's width;
``None`` is :math:`4d`), ``context_length`` (alias ``max_position_embeddings``; ``context``:
HF's CUDA kernel's longest sequence, the longest sequence verified), ``layer_norm_epsilon``
(``norm_eps``). Refused, naming the key: ``tie_word_embeddings`` true (HF would tie ``head``
to the embedding; the released RWKV-4 models do not, and the weights' table maps the untied
``head`` only), and a ``layer_norm_epsilon`` other than :math:`10^{-5}`: ``RwkvModel`` builds
``ln_out`` as ``nn.LayerNorm(hidden_size)``, PyTorch's default :math:`\epsilon = 10^{-5}`
whatever the config says, and nlaverify has one ``norm_eps`` for every norm.

``rescale_every`` :math:`R` is accepted and *not* modelled (listed in
:data:`~nlaverify.interop.hf_config_tables.IGNORED` with the reason): in eval mode HF divides
block :math:`i`'s ``attention.output`` and ``feed_forward.value`` weights by
:math:`2^{\lfloor i/R\rfloor}` in place and halves the stream after every :math:`R`-th block
(a float16 overflow guard). That is not the trained function: every LayerNorm after a halving
sees :math:`h/2^j` with the same :math:`\epsilon` (``tests/test_rwkv_block.py`` measures
the change). nlaverify maps the training-mode model (:math:`R = 0`), and
:func:`~nlaverify.interop.hf_verify.verify_hf` builds HF's model with ``rescale_every = 0``
(:func:`~nlaverify.interop.hf_model._build_hf_model`); :func:`rwkv_hf_dict` writes 0.
"""

from __future__ import annotations

from typing import Any

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.interop.hf_config_tables import first_mismatch

__all__ = ["LN_OUT_EPS", "rwkv_fields", "rwkv_hf_dict", "rwkv_mismatch"]

#: ``RwkvModel.ln_out``'s epsilon: ``nn.LayerNorm``'s default, whatever the config says
LN_OUT_EPS = 1e-5


def rwkv_fields(r: Any) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of an ``RwkvConfig`` dict, read through
    :mod:`~nlaverify.interop.hf_config`'s reader ``r`` (its ``get``, ``raw``; every key it
    reads is marked used). Raises :class:`ConfigError` naming a key nlaverify cannot
    express (module docstring)."""
    d = r.get("hidden_size", "int", required=True)
    ctx = r.get("context_length", "int")
    if r.has("max_position_embeddings"):  # RwkvConfig.attribute_map's alias
        alias = r.get("max_position_embeddings", "int")
        if r.has("context_length") and alias != ctx:
            raise ConfigError(f"load_hf_config: rwkv config: field 'max_position_embeddings'="
                              f"{alias} contradicts 'context_length'={ctx}")
        ctx = alias
    if r.get("tie_word_embeddings", "bool"):
        raise ConfigError("load_hf_config: rwkv config: field 'tie_word_embeddings': only false "
                          "is supported (the released RWKV-4 heads are untied; a head tied to "
                          "the embedding is not mapped), got True")
    eps = r.get("layer_norm_epsilon", "float")
    if eps != LN_OUT_EPS:
        raise ConfigError(f"load_hf_config: rwkv config: field 'layer_norm_epsilon': only "
                          f"{LN_OUT_EPS} is supported (RwkvModel.ln_out is nn.LayerNorm("
                          f"hidden_size), epsilon 1e-05 whatever the config says; nlaverify has "
                          f"one norm_eps), got {eps!r}")
    att = r.get("attention_hidden_size", "int?")
    inner = r.get("intermediate_size", "int?")
    return _fields(r.get("vocab_size", "int", required=True), d,
                   r.get("num_hidden_layers", "int", required=True),
                   None if att in (None, d) else att, 4 * d if inner is None else inner, ctx,
                   eps)


def _fields(vocab: int, d: int, blocks: int, att: int | None, inner: int, ctx: int,
            eps: float) -> dict[str, Any]:
    """The fields of a Hugging Face RWKV-4 of these sizes, the fixed ones included."""
    return dict(vocab_size=vocab, d_model=d, n_heads=1, n_blocks=blocks, d_mlp=inner,
                norm="layernorm", placement="pre", positions="none", context=ctx,
                mixer="rwkv", rwkv_attention_size=att, norm_eps=eps, tied_embeddings=False)


def rwkv_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``RwkvConfig`` cannot express, as ``(field,
    value, expected)``, or ``None``: every field but the sizes must be what
    :func:`rwkv_fields` reads (an explicit ``rwkv_attention_size`` equal to ``d_model`` is
    ``None``'s spelling)."""
    att = None if c.rwkv_attention_size == c.d_model else c.rwkv_attention_size
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
        c.vocab_size, c.d_model, c.n_blocks, att, c.d_mlp, c.context, LN_OUT_EPS)),
        {"rwkv_attention_size": att})


def rwkv_hf_dict(c: TransformerConfig) -> dict[str, Any]:
    """The ``RwkvConfig`` fields of ``c`` (already checked by :func:`rwkv_mismatch`), every
    size written out, ``rescale_every = 0`` (module docstring):
    ``transformers.AutoConfig.for_model(**d)`` builds it."""
    return {"architectures": ["RwkvForCausalLM"], "model_type": "rwkv",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, "attention_hidden_size": c.rwkv_dim,
            "intermediate_size": c.d_mlp, "context_length": c.context,
            "layer_norm_epsilon": c.norm_eps, "rescale_every": 0,
            "tie_word_embeddings": False}
