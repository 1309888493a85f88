r"""Hugging Face ``GPTJConfig`` <-> :class:`~nlaverify.config.TransformerConfig` (issue 23).

Checked against ``transformers`` 5.25 (``models/gptj/configuration_gptj.py`` and
``modeling_gptj.py``). A ``GPTJForCausalLM`` (Wang & Komatsuzaki 2021) is an embedding
``wte``, ``n_layer`` blocks :math:`x \leftarrow x + \operatorname{Attn}(N(x)) +
\operatorname{MLP}(N(x))` with *one* LayerNorm ``ln_1`` (``parallel_residual=True,
parallel_norms=1``), a final LayerNorm ``ln_f`` and an ``lm_head`` *with a bias*
(``unembed_bias``). Attention: separate ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``
without biases; RoPE on the first ``rotary_dim`` coordinates of each head in the
*interleaved* pairing (``rotate_every_two``: nlaverify's own, nothing permuted), base 10000
(fixed in ``create_sinusoidal_positions``). MLP ``fc_in``, ``activation_function``,
``fc_out``, biased.

Fields (``GPTJConfig.attribute_map`` aliases ``hidden_size``, ``num_attention_heads``,
``num_hidden_layers``, ``max_position_embeddings`` read too): ``vocab_size``, ``n_embd``,
``n_layer``, ``n_head`` (required); ``n_positions``, ``rotary_dim`` (an even integer at most
the head dimension; ``null`` is refused: HF then builds sin/cos tables of the whole width,
which do not fit a head), ``n_inner`` (default :math:`4d`), ``activation_function`` (as
GPT-2's), ``layer_norm_epsilon``; ``tie_word_embeddings`` must be false (the head's bias has
no tied counterpart). Dropouts are ignored (training only).
"""

from __future__ import annotations

from typing import Any

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.interop.hf_config_tables import first_mismatch

__all__ = ["gptj_fields", "gptj_hf_dict", "gptj_mismatch"]

_ALIASES = {"hidden_size": "n_embd", "max_position_embeddings": "n_positions",
            "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"}
#: ``activation_function`` -> ``TransformerConfig.mlp`` (ACT2FN's names, as GPT-2's)
GPTJ_ACTS = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu": "gelu_erf",
             "relu": "relu"}


def gptj_fields(r: Any) -> dict[str, Any]:
    """The :class:`TransformerConfig` fields of a ``GPTJConfig`` dict, read through
    :mod:`~nlaverify.interop.hf_config`'s reader ``r``. Raises :class:`ConfigError` naming a
    key nlaverify cannot express."""
    mt = "gptj"
    d = dict(r.d)
    for alias, key in _ALIASES.items():
        if alias in d:
            r.used.add(alias)
            if key in d and d[key] != d[alias]:
                raise ConfigError(f"load_hf_config: {mt} config: field {alias!r}={d[alias]!r} "
                                  f"contradicts {key!r}={d[key]!r}")
            d[key] = d[alias]
    r2 = type(r)(d, mt)
    dm, h = r2.get("n_embd", "int", required=True), r2.get("n_head", "int", required=True)
    if h < 1 or dm % h:
        raise ConfigError(f"load_hf_config: {mt} config: field 'n_embd'={dm}: expected a "
                          f"multiple of n_head={h}")
    rot = r2.get("rotary_dim", "int?")
    if rot is None or rot < 2 or rot % 2 or rot > dm // h:
        raise ConfigError(f"load_hf_config: {mt} config: field 'rotary_dim': expected an even "
                          f"integer in [2, head_dim={dm // h}], got {rot!r}")
    act = r2.get("activation_function", "str")
    if act not in GPTJ_ACTS:
        raise ConfigError(f"load_hf_config: {mt} config: field 'activation_function': expected "
                          f"one of {', '.join(GPTJ_ACTS)}, got {act!r}")
    if r2.get("tie_word_embeddings", "bool"):
        raise ConfigError(f"load_hf_config: {mt} config: field 'tie_word_embeddings': only "
                          "false is supported (GPT-J's lm_head has a bias of its own)")
    inner = r2.get("n_inner", "int?")
    out = _fields(r2.get("vocab_size", "int", required=True), dm, h,
                  r2.get("n_layer", "int", required=True), 4 * dm if inner is None else inner,
                  GPTJ_ACTS[act], r2.get("n_positions", "int"),
                  r2.get("layer_norm_epsilon", "float"), None if rot == dm // h else rot)
    r.used |= r2.used
    return out


def _fields(vocab: int, d: int, heads: int, blocks: int, d_mlp: int, mlp: str, ctx: int,
            eps: float, rotary_dim: int | None) -> dict[str, Any]:
    """The fields of a Hugging Face GPT-J of these values, the fixed ones included."""
    return dict(vocab_size=vocab, d_model=d, n_heads=heads, n_blocks=blocks, d_mlp=d_mlp,
                norm="layernorm", placement="pre", positions="rope", rotary_dim=rotary_dim,
                context=ctx, mlp=mlp, attn_bias=False, mlp_bias=True, unembed_bias=True,
                norm_eps=eps, parallel_residual=True, parallel_norms=1)


def gptj_mismatch(c: TransformerConfig) -> tuple[str, Any, Any] | None:
    """The first field of ``c`` a Hugging Face ``GPTJConfig`` cannot express, as ``(field,
    value, expected)``, or ``None``."""
    if c.mlp not in GPTJ_ACTS.values():
        return "mlp", c.mlp, tuple(sorted(set(GPTJ_ACTS.values())))
    rot = None if c.rotary_dim == c.d_head else c.rotary_dim
    return first_mismatch(c, lambda: TransformerConfig(**_fields(
        c.vocab_size, c.d_model, c.n_heads, c.n_blocks, c.d_mlp, c.mlp, c.context, c.norm_eps,
        rot)), {"rotary_dim": rot})


def gptj_hf_dict(c: TransformerConfig) -> dict[str, Any]:
    """The ``GPTJConfig`` fields of ``c`` (already checked by :func:`gptj_mismatch`), every
    size written out: ``transformers.AutoConfig.for_model(**d)`` builds it."""
    act = {v: k for k, v in GPTJ_ACTS.items() if k != "gelu_pytorch_tanh"}[c.mlp]
    return {"architectures": ["GPTJForCausalLM"], "model_type": "gptj",
            "vocab_size": c.vocab_size, "n_embd": c.d_model, "n_layer": c.n_blocks,
            "n_head": c.n_heads, "n_inner": c.d_mlp, "n_positions": c.context,
            "rotary_dim": c.rotary_dim or c.d_head, "activation_function": act,
            "layer_norm_epsilon": c.norm_eps, "tie_word_embeddings": False}
