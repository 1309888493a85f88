r"""Hugging Face ``OPTConfig`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 23).

Checked against ``transformers`` 5.25 (``models/opt/configuration_opt.py`` and
``modeling_opt.py``). An ``OPTForCausalLM`` (Zhang et al. 2022, OPT: Open Pre-trained
Transformer Language Models) is GPT-2's function under other names: token embeddings
``model.decoder.embed_tokens`` plus learned absolute positions ``embed_positions``, pre-LN
blocks (``self_attn_layer_norm``, ``final_layer_norm``; ``nn.LayerNorm``, :math:`\epsilon =
10^{-5}` fixed in the code), separate ``q/k/v/out_proj`` and a non-gated MLP ``fc1`` ->
``activation_function`` -> ``fc2``, every Linear biased by ``enable_bias``, a final
LayerNorm and ``lm_head`` (no bias; tied by ``tie_word_embeddings``). HF scales the query
after ``q_proj`` (``q * d_h^{-1/2}``, then attention with scaling 1): the same function.

**Position offset.** ``OPTLearnedPositionalEmbedding`` has ``max_position_embeddings + 2``
rows and position :math:`p` reads row :math:`p + 2` (``position_ids + self.offset``); rows 0
and 1 are never read by a causal language model (positions start at 0), and released
checkpoints hold their random initialisation there. The config sets ``position_offset=2``
(``context = max_position_embeddings``): the graph's table ``pos.W_P`` is Hugging Face's
whole ``embed_positions.weight``, ``context + 2`` rows, position :math:`p` reading row
:math:`p + 2` (:func:`~nlaverify.ops.embedding.add_learned_positions`), copied both ways
(:mod:`nlaverify.interop.weights_layout_opt`); the two rows never read are parameters, as
Hugging Face counts them, with zero gradient.

Fields: ``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``ffn_dim`` (required); ``activation_function`` (``relu``; ``gelu`` the erf GELU, ``gelu_new``
/ ``gelu_pytorch_tanh`` the tanh one), ``max_position_embeddings``, ``enable_bias``,
``layer_norm_elementwise_affine`` (false: LayerNorms without gain or bias,
``norm_affine=False``), ``tie_word_embeddings``. Refused by key: ``do_layer_norm_before=false``
(OPT-350M's post-LN block, which also drops the final norm), ``_remove_final_layer_norm=true``,
``word_embed_proj_dim`` other than ``hidden_size`` (OPT-350M's ``project_in`` / ``project_out``).
Ignored: ``dropout``, ``layerdrop`` (``OPTDecoder`` skips layers only in training),
``init_std``.
"""

from __future__ import annotations

from typing import Any

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.interop.hf_config_neox import NEOX_ACTS
from nlaverify.interop.hf_config_tables import first_mismatch

__all__ = ["OPT_EPS", "OPT_OFFSET", "opt_fields", "opt_hf_dict", "opt_mismatch"]

#: ``nn.LayerNorm``'s default epsilon (OPT passes none)
OPT_EPS = 1e-5
#: ``OPTLearnedPositionalEmbedding.offset``: position p reads row p + 2
OPT_OFFSET = 2


def opt_fields(r: Any) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of an ``OPTConfig`` dict (module docstring), read
    through :mod:`~nlaverify.interop.hf_config`'s reader ``r``. Raises :class:`ConfigError`
    naming the key."""
    mt = "opt"
    if not r.get("do_layer_norm_before", "bool"):
        raise ConfigError(f"load_hf_config: {mt} config: field 'do_layer_norm_before': only "
                          "true is supported (OPT-350M's post-LN block without a final norm "
                          "is not mapped)")
    if r.get("_remove_final_layer_norm", "bool"):
        raise ConfigError(f"load_hf_config: {mt} config: field '_remove_final_layer_norm': "
                          "only false is supported")
    d = r.get("hidden_size", "int", required=True)
    h = r.get("num_attention_heads", "int", required=True)
    if h < 1 or d % h:
        raise ConfigError(f"load_hf_config: {mt} config: field 'hidden_size'={d}: expected a "
                          f"multiple of num_attention_heads={h}")
    proj = r.get("word_embed_proj_dim", "int?")
    if proj is not None and proj != d:
        raise ConfigError(f"load_hf_config: {mt} config: field 'word_embed_proj_dim'={proj}: "
                          f"only hidden_size={d} is supported (project_in / project_out are "
                          "not mapped)")
    act = r.get("activation_function", "str")
    if act not in NEOX_ACTS:
        raise ConfigError(f"load_hf_config: {mt} config: field 'activation_function': "
                          f"expected one of {', '.join(NEOX_ACTS)}, got {act!r}")
    return _fields(r.get("vocab_size", "int", required=True), d, h,
                   r.get("num_hidden_layers", "int", required=True),
                   r.get("ffn_dim", "int", required=True), NEOX_ACTS[act],
                   r.get("max_position_embeddings", "int"), r.get("enable_bias", "bool"),
                   r.get("layer_norm_elementwise_affine", "bool"),
                   r.get("tie_word_embeddings", "bool"))


def _fields(vocab: int, d: int, heads: int, blocks: int, d_mlp: int, mlp: str, ctx: int,
            bias: bool, affine: bool, tied: bool) -> dict[str, Any]:
    """The fields of a Hugging Face OPT (pre-LN, no projections) of these values."""
    return dict(vocab_size=vocab, d_model=d, n_heads=heads, n_blocks=blocks, d_mlp=d_mlp,
                norm="layernorm", placement="pre", positions="learned", context=ctx,
                mlp=mlp, attn_bias=bias, mlp_bias=bias, norm_affine=affine,
                tied_embeddings=tied, norm_eps=OPT_EPS, position_offset=OPT_OFFSET)


def opt_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``OPTConfig`` (pre-LN) cannot express, as
    ``(field, value, expected)``, or ``None``."""
    if c.mlp not in NEOX_ACTS.values():
        return "mlp", c.mlp, tuple(sorted(set(NEOX_ACTS.values())))
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
            c.vocab_size, c.d_model, c.n_heads, c.n_blocks, c.d_mlp, c.mlp, c.context,
            c.attn_bias, c.norm_affine, c.tied_embeddings)))


def opt_hf_dict(c: TransformerConfig) -> dict[str, Any]:
    """The ``OPTConfig`` fields of ``c`` (checked by :func:`opt_mismatch`)."""
    act = {v: k for k, v in NEOX_ACTS.items() if k != "gelu_pytorch_tanh"}[c.mlp]
    return {"architectures": ["OPTForCausalLM"], "model_type": "opt",
            "vocab_size": c.vocab_size, "hidden_size": c.d_model,
            "num_hidden_layers": c.n_blocks, "num_attention_heads": c.n_heads,
            "ffn_dim": c.d_mlp, "activation_function": act,
            "max_position_embeddings": c.context, "do_layer_norm_before": True,
            "word_embed_proj_dim": c.d_model, "enable_bias": c.attn_bias,
            "layer_norm_elementwise_affine": c.norm_affine,
            "tie_word_embeddings": c.tied_embeddings}
