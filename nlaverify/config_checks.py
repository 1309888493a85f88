"""The checks of :class:`nlaverify.config.TransformerConfig` beyond the vocabularies: types,
the attention options, issue 10's architecture options (each raising a ConfigError naming the
field). Called from ``TransformerConfig.__post_init__``; the option checks of later issues live
in :mod:`nlaverify.config_options`.
"""

from __future__ import annotations

from typing import Any

from nlaverify.config_options import (
    BIDIRECTIONAL_ATTENTIONS,
    ConfigError,
    RopeScaling,
    check_lora,
    check_softcaps,
)

__all__ = ["check_architecture_options", "check_attention", "check_position_offset",
           "check_types"]


def check_architecture_options(self: Any) -> None:
    """RoPE scaling only with RoPE, a window >= 1 on causal softmax attention; the
    default of ``attn_out_bias`` is resolved by :attr:`out_bias` (issue 10's options).
    QK-norm is an RMSNorm of each head (Qwen3) whatever ``norm`` is."""
    if isinstance(self.rope_scaling, dict):
        try:
            object.__setattr__(self, "rope_scaling", RopeScaling(**self.rope_scaling))
        except TypeError as e:
            raise ConfigError(f"TransformerConfig.rope_scaling: {e}") from None
    if self.rope_scaling is not None:
        if not isinstance(self.rope_scaling, RopeScaling):
            raise ConfigError(f"TransformerConfig.rope_scaling: expected a RopeScaling, a "
                              f"dict or None, got {self.rope_scaling!r}")
        if self.positions != "rope":
            raise ConfigError(f"TransformerConfig.rope_scaling: applies to positions='rope',"
                              f" got positions={self.positions!r}")
    check_softcaps(self)
    check_position_offset(self)
    w = self.sliding_window
    if w is not None:
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise ConfigError(f"TransformerConfig.sliding_window: expected a positive "
                              f"integer or None, got {w!r}")
        if not (self.causal and self.attention == "softmax"):
            raise ConfigError("TransformerConfig.sliding_window: applies to causal softmax "
                              f"attention, got causal={self.causal}, "
                              f"attention={self.attention!r}")


def check_position_offset(self: Any) -> None:
    r"""``position_offset`` :math:`o`: an integer >= 0, nonzero only with learned positions.
    The table ``W_P`` then has ``context`` :math:`+\,o` rows and position :math:`p` reads
    row :math:`p + o` (Zhang et al. 2022, OPT; Hugging Face ``OPTLearnedPositionalEmbedding``:
    ``max_position_embeddings + 2`` rows, ``position_ids + self.offset``); the rows below
    :math:`o` are parameters no position reads."""
    o = self.position_offset
    if isinstance(o, bool) or not isinstance(o, int) or o < 0:
        raise ConfigError(f"TransformerConfig.position_offset: expected an integer >= 0, got "
                          f"{o!r}")
    if o and self.positions != "learned":
        raise ConfigError(f"TransformerConfig.position_offset: the row offset of the learned "
                          f"position table; expected positions='learned' (or offset 0), got "
                          f"positions={self.positions!r}, position_offset={o}")


def check_attention(self: Any) -> None:
    """The attention options: sizes >= 1, seeds >= 0, no causal form where none exists."""
    for f, low in (("random_features", 1), ("linformer_k", 1), ("feature_seed", 0)):
        v = getattr(self, f)
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise ConfigError(f"TransformerConfig.{f}: expected an integer >= {low}, got "
                              f"{v!r}")
    if self.causal and self.attention in BIDIRECTIONAL_ATTENTIONS:
        raise ConfigError(f"TransformerConfig.causal: attention={self.attention!r} has no "
                          "causal form (it mixes every position into every output); "
                          "expected causal=False")

def check_types(self: Any) -> None:
    """Booleans are booleans, integers integers (not bools), reals finite numbers."""
    import math

    for f in ("attn_bias", "mlp_bias", "tied_embeddings", "final_norm", "causal",
              "orthogonal_features", "qk_norm", "moe_renormalize", "embed_scale",
              "parallel_residual", "unembed_bias", "post_norms", "pre_norms",
              "qk_norm_joint", "norm_affine", "norm_bias"):
        if not isinstance(getattr(self, f), bool):
            raise ConfigError(f"TransformerConfig.{f}: expected True or False, got "
                              f"{getattr(self, f)!r}")
    check_lora(self)
    if self.attn_out_bias is not None and not isinstance(self.attn_out_bias, bool):
        raise ConfigError(f"TransformerConfig.attn_out_bias: expected True, False or None, "
                          f"got {self.attn_out_bias!r}")
    for f in ("n_kv_heads", "d_head", "n_experts", "top_k", "rope_base"):
        v = getattr(self, f)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise ConfigError(f"TransformerConfig.{f}: expected an integer, got {v!r}")
    for f in ("temperature", "norm_eps"):
        v = getattr(self, f)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ConfigError(f"TransformerConfig.{f}: expected a finite number, got {v!r}")
    if self.rope_base < 2:
        raise ConfigError(f"TransformerConfig.rope_base: expected an integer >= 2 (the base "
                          f"of the RoPE frequencies b^(-2i/d_h)), got {self.rope_base}")
