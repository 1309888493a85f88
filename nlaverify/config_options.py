r"""The options a :class:`nlaverify.config.TransformerConfig` chooses among, its error, and
the RoPE frequency scaling.

The vocabularies of the string-valued fields (norm, placement, positions, MLP, attention, LoRA
targets, RoPE pairings; ``mlp="none"``, :data:`NO_MLP`), the checks of the LoRA, MLP-less and
partial-rotary fields (:func:`check_lora`, :func:`check_no_mlp`, :func:`check_rotary`), the
token mixers (:func:`check_mixer`, :func:`check_mamba2`), the
soft caps and Gemma 2's options (:func:`check_softcaps`), Gemma 3's local RoPE base
(:func:`check_rope_local`),
:class:`ConfigError` and :class:`RopeScaling`, the
one structured field:
:math:`\theta_i = b^{-2i/d_h}` rescaled for long contexts (Chen et al. 2023; Dubey et al.
2024). Baggag & Saad §3.3, §3.4, §4.2-4.4; Baptista, Stuart & Tran §5.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nlaverify.errors import NlaverifyError

NORMS = ("layernorm", "rmsnorm")
PLACEMENTS = ("pre", "post")
POSITIONS = ("sinusoidal", "learned", "rope", "none")
#: ``gelu`` is the tanh form (GPT-2/3, HF ``gelu_new``), ``gelu_erf`` the exact one (HF ``gelu``);
#: ``swiglu`` and ``geglu`` are gated (SiLU / tanh-GELU of the gate times the up projection)
MLPS = ("relu", "gelu", "gelu_erf", "swiglu", "geglu")
#: gated MLPs: three projections W_gate, W_up, W_down
GATED_MLPS = ("swiglu", "geglu")
#: ``mlp=NO_MLP``: blocks without an MLP sublayer, :math:`x \leftarrow x +
#: \operatorname{Mixer}(N(x))` (Mamba's block, Gu & Dao 2023 §3.4; HF ``MambaBlock``)
NO_MLP = "none"
#: projections LoRA can adapt: attention's query, key, value, output, and every dense MLP
#: projection (Hu et al. 2022; Baggag & Saad §4.2)
LORA_TARGETS = ("q", "k", "v", "o", "mlp")
#: RoPE frequency scalings (:class:`RopeScaling`)
ROPE_SCALINGS = ("linear", "llama3", "yarn")
#: RoPE's pairings of a head's coordinates (:mod:`nlaverify.ops.rotary`): ``interleaved``
#: rotates :math:`(x_{2i}, x_{2i+1})` (RoFormer, GPT-J), ``half`` :math:`(x_i, x_{i+r/2})`
#: (GPT-NeoX, Hugging Face Llama's ``rotate_half``)
ROPE_PAIRINGS = ("interleaved", "half")
#: the attention node of each block (Baggag & Saad §3.4, §4.3-4.4; issue 9)
ATTENTIONS = ("softmax", "favor", "favor+", "elu1", "efficient", "linformer")
#: attentions with random features (the draws are part of the config, see feature_draws)
RANDOM_FEATURE_ATTENTIONS = ("favor", "favor+")
#: the token mixer of a block (issue 37): softmax-family attention (``attention``), Mamba's
#: selective state-space block (``mamba``; Gu & Dao 2023) or RWKV-4's time mixing with its
#: channel mixing in place of the MLP (``rwkv``; Peng et al. 2023) or Mamba-2's block
#: (``mamba2``; Dao & Gu 2024: a scalar decay per head); a per-block tuple mixes them (a
#: hybrid, as Jamba does)
MIXERS = ("attention", "mamba", "rwkv", "mamba2")
#: attentions that are bidirectional only (no causal form)
BIDIRECTIONAL_ATTENTIONS = ("efficient", "linformer")


class ConfigError(NlaverifyError, ValueError):
    """An invalid :class:`TransformerConfig`; the message names the field."""


@dataclass(frozen=True)
class RopeScaling:
    r"""A rescaling of the RoPE frequencies :math:`\theta_i = b^{-2i/d_h}` for contexts longer
    than the one trained on (:func:`nlaverify.ops.rotary.rope_frequencies`).

    ``kind="linear"`` (position interpolation, Chen et al. 2023): :math:`\theta_i / s`.
    ``kind="llama3"`` (Dubey et al. 2024; the released Llama-3.1 ``rope_scaling``): with
    wavelength :math:`\lambda_i = 2\pi/\theta_i`, :math:`L` = ``original_context``,
    :math:`\lambda_{hi} = L/` ``high_freq_factor`` and :math:`\lambda_{lo} = L/`
    ``low_freq_factor``: :math:`\theta_i` is kept when :math:`\lambda_i < \lambda_{hi}`,
    divided by :math:`s` = ``factor`` when :math:`\lambda_i > \lambda_{lo}`, and in between
    :math:`(1-\mu)\theta_i/s + \mu\theta_i` with :math:`\mu = (L/\lambda_i -
    \text{low})/(\text{high} - \text{low})`.
    ``kind="yarn"`` (Peng et al. 2023, YaRN; DeepSeek-V2/V3's ``rope_scaling``): the ramp
    between ``beta_fast`` and ``beta_slow`` rotations over ``original_context``
    (:func:`nlaverify.ops.rotary.yarn_ramp`). Its cos/sin amplitude
    :math:`m(s, \mu)/m(s, \mu_{all})`, :math:`m(s, \mu) = 0.1\mu\ln s + 1` (``mscale``
    :math:`\mu`, ``mscale_all_dim`` :math:`\mu_{all}`), must be 1 (both equal, or
    :math:`s \le 1`): a scaled rotation is not modelled; multi-head latent attention's scores
    are multiplied by :math:`m(s, \mu_{all})^2` (:func:`~nlaverify.config_mla.mla_score_scale`,
    Hugging Face ``yarn_apply_mscale``).
    """

    kind: str
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_context: int = 8192
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None

    def __post_init__(self) -> None:
        import math

        if self.kind not in ROPE_SCALINGS:
            raise ConfigError(f"RopeScaling.kind: expected one of {', '.join(ROPE_SCALINGS)}, "
                              f"got {self.kind!r}")
        for f in ("factor", "low_freq_factor", "high_freq_factor"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int | float) or not (
                    math.isfinite(v) and v > 0):
                raise ConfigError(f"RopeScaling.{f}: expected a finite number > 0, got {v!r}")
        if self.kind == "llama3" and not self.high_freq_factor > self.low_freq_factor:
            raise ConfigError(f"RopeScaling.high_freq_factor: expected > low_freq_factor="
                              f"{self.low_freq_factor}, got {self.high_freq_factor}")
        v = self.original_context
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"RopeScaling.original_context: expected a positive integer, got "
                              f"{v!r}")
        check_yarn(self)


def check_yarn(sc: Any) -> None:
    """YaRN's fields of a :class:`RopeScaling`: ``beta_fast > beta_slow > 0``, ``mscale`` and
    ``mscale_all_dim`` finite or ``None`` and, for ``kind="yarn"``, a cos/sin amplitude of 1
    (:class:`RopeScaling`'s docstring); for the other kinds all at their defaults."""
    import math

    yarn = sc.kind == "yarn"
    for f, default in (("beta_fast", 32.0), ("beta_slow", 1.0), ("mscale", None),
                       ("mscale_all_dim", None)):
        v = getattr(sc, f)
        if not yarn and v != default:
            raise ConfigError(f"RopeScaling.{f}: applies to kind='yarn'; expected {default!r} "
                              f"with kind={sc.kind!r}, got {v!r}")
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not (
                math.isfinite(v) and v >= 0)):
            raise ConfigError(f"RopeScaling.{f}: expected a finite number >= 0, got {v!r}")
    if yarn and not sc.beta_fast > sc.beta_slow > 0:
        raise ConfigError(f"RopeScaling.beta_slow: expected 0 < beta_slow < beta_fast="
                          f"{sc.beta_fast}, got {sc.beta_slow}")

    def m(mu: float) -> float:
        return 1.0 if sc.factor <= 1 else 0.1 * mu * math.log(sc.factor) + 1.0

    amplitude = m(sc.mscale) / m(sc.mscale_all_dim) if sc.mscale and sc.mscale_all_dim else \
        m(1.0)
    if yarn and amplitude != 1.0:
        raise ConfigError(f"RopeScaling.mscale: the cos/sin amplitude {amplitude!r} of "
                          f"kind='yarn' (Hugging Face rope_type 'yarn') with mscale="
                          f"{sc.mscale!r}, mscale_all_dim={sc.mscale_all_dim!r} is not "
                          f"modelled; expected mscale == mscale_all_dim (an amplitude of 1)")


def check_lora(cfg: Any) -> None:
    """A :class:`~nlaverify.config.TransformerConfig`'s LoRA fields: ``lora_rank`` an integer
    >= 0, ``lora_alpha`` a finite number > 0 or ``None``, ``lora_targets`` distinct names of
    :data:`LORA_TARGETS` (a list becomes a tuple), no ``mlp`` target with routed experts."""
    import math

    r = cfg.lora_rank
    if isinstance(r, bool) or not isinstance(r, int) or r < 0:
        raise ConfigError(f"TransformerConfig.lora_rank: expected an integer >= 0 (0: no "
                          f"LoRA), got {r!r}")
    a = cfg.lora_alpha
    if a is not None and (isinstance(a, bool) or not isinstance(a, int | float) or not (
            math.isfinite(a) and a > 0)):
        raise ConfigError(f"TransformerConfig.lora_alpha: expected a finite number > 0 or "
                          f"None, got {a!r}")
    t = cfg.lora_targets
    if isinstance(t, list):
        t = tuple(t)
        object.__setattr__(cfg, "lora_targets", t)
    if not isinstance(t, tuple) or not t or any(x not in LORA_TARGETS for x in t) or len(
            set(t)) != len(t):
        raise ConfigError(f"TransformerConfig.lora_targets: expected distinct names among "
                          f"{', '.join(LORA_TARGETS)}, got {t!r}")
    if r and cfg.n_experts and "mlp" in t:
        raise ConfigError("TransformerConfig.lora_targets: 'mlp' adapts dense MLP "
                          f"projections; this model routes to n_experts={cfg.n_experts} "
                          "experts")


def check_mixer(cfg: Any) -> None:
    """``mixer`` a name of :data:`MIXERS` or one per block (a list becomes a tuple); the
    state-space sizes positive integers (``ssm_dt_rank`` and ``rwkv_attention_size`` may be
    ``None``); RWKV blocks (:func:`check_rwkv`) in the block layout they have."""
    m = cfg.mixer
    if isinstance(m, list):
        m = tuple(m)
        object.__setattr__(cfg, "mixer", m)
    ok = m in MIXERS if isinstance(m, str) else (
        isinstance(m, tuple) and len(m) == cfg.n_blocks and all(x in MIXERS for x in m))
    if not ok:
        raise ConfigError(f"TransformerConfig.mixer: expected one of {', '.join(MIXERS)} "
                          f"or a tuple of n_blocks={cfg.n_blocks} of them, got {m!r}")
    for f in ("ssm_state", "ssm_conv", "ssm_expand", "ssm_dt_rank", "ssm_heads", "ssm_groups",
              "rwkv_attention_size"):
        v = getattr(cfg, f)
        optional = f in ("ssm_dt_rank", "rwkv_attention_size")
        if (v is not None or not optional) and (
                isinstance(v, bool) or not isinstance(v, int) or v < 1):
            none = " or None" if optional else ""
            raise ConfigError(f"TransformerConfig.{f}: expected a positive integer{none}, "
                              f"got {v!r}")
    check_rwkv(cfg)
    check_mamba2(cfg)
    check_attention_free(cfg)


def check_attention_free(cfg: Any) -> None:
    """A model without an attention block (all RWKV, Mamba or Mamba-2 blocks) reads none of
    the attention's options: each must keep its default, or it would be accepted and change
    nothing (a hybrid reads them all in its attention blocks). ``n_kv_heads`` and ``d_head``
    must be the defaults of ``n_heads`` (``n_heads`` and ``d_model // n_heads``)."""
    blocks = [cfg.mixer] * cfg.n_blocks if isinstance(cfg.mixer, str) else list(cfg.mixer)
    if "attention" in blocks:
        return
    rules: tuple[tuple[str, bool, str], ...] = (
        ("attention", cfg.attention != "softmax", "'softmax' (the default)"),
        ("n_kv_heads", cfg.n_kv_heads != cfg.n_heads,
         f"n_heads = {cfg.n_heads} (the default: pass n_kv_heads=None with a new n_heads)"),
        ("d_head", cfg.d_head != cfg.d_model // cfg.n_heads,
         f"d_model // n_heads = {cfg.d_model // cfg.n_heads} (the default: pass d_head=None "
         f"with a new n_heads)"),
        ("qk_norm", cfg.qk_norm, "False"),
        ("attn_softcap", cfg.attn_softcap is not None, "None"),
        ("sliding_window", cfg.sliding_window is not None, "None"),
        ("attn_bias", cfg.attn_bias, "False"),
        ("attn_out_bias", cfg.attn_out_bias not in (None, False), "None or False"),
        ("query_pre_attn_scalar", cfg.query_pre_attn_scalar is not None, "None"),
        ("kv_lora_rank", cfg.kv_lora_rank != 0, "0 (no multi-head latent attention)"),
    )
    for f, bad, want in rules:
        if bad:
            raise ConfigError(f"TransformerConfig.{f}: an option of the attention, and a model "
                              f"of mixer={cfg.mixer!r} has no attention block to read it: "
                              f"expected {want}, got {getattr(cfg, f)!r}")


def check_mamba2(cfg: Any) -> None:
    r"""The sizes of a Mamba-2 block (``mixer="mamba2"``; Dao & Gu 2024, §7; Hugging Face
    ``Mamba2Mixer``): :math:`H` = ``ssm_heads`` divides :math:`E` = ``d_inner`` (heads of
    :math:`P = E/H` channels, each with its scalar decay :math:`A_j`), :math:`G` =
    ``ssm_groups`` divides :math:`H` (head :math:`j` reads the :math:`B, C` of group
    :math:`\lfloor jG/H\rfloor`) and :math:`E` (the gated RMSNorm normalizes groups of
    :math:`E/G` channels); its convolution and scan are causal. Unread without a Mamba-2
    block."""
    blocks = [cfg.mixer] * cfg.n_blocks if isinstance(cfg.mixer, str) else list(cfg.mixer)
    if "mamba2" not in blocks:
        return
    E, H, G = cfg.ssm_expand * cfg.d_model, cfg.ssm_heads, cfg.ssm_groups
    rules: tuple[tuple[str, bool, str], ...] = (
        ("ssm_heads", E % H != 0, f"a divisor of d_inner = ssm_expand * d_model = {E} (heads "
                                  f"of d_inner/ssm_heads channels)"),
        ("ssm_groups", H % G != 0, f"a divisor of ssm_heads = {H} (each group of B, C serves "
                                   f"ssm_heads/ssm_groups heads)"),
        ("causal", not cfg.causal, "True (Mamba-2's convolution and scan are causal)"),
    )
    for f, bad, want in rules:
        if bad:
            raise ConfigError(f"TransformerConfig.{f}: expected {want}, got "
                              f"{getattr(cfg, f)!r} with mixer={cfg.mixer!r}")


def check_rwkv(cfg: Any) -> None:
    r"""The options an RWKV-4 block (``mixer="rwkv"``, Peng et al. 2023; Hugging Face
    ``RwkvBlock``) has: a sequential pre-LN block :math:`x \leftarrow x + \operatorname{
    TimeMix}(\mathrm{LN}_1(x))`, :math:`x \leftarrow x + \operatorname{ChannelMix}(\mathrm{
    LN}_2(x))` of LayerNorms, causal, without positions (the token shift and the decay
    order the tokens; RoPE only for the attention blocks of a hybrid). Its channel mixing
    takes the place of the MLP: no routed experts, no MLP bias or LoRA in an all-RWKV model
    (no MLP to carry them), no ``mlp="none"`` there either."""
    blocks = [cfg.mixer] * cfg.n_blocks if isinstance(cfg.mixer, str) else list(cfg.mixer)
    n_rwkv = blocks.count("rwkv")
    if not n_rwkv:  # rwkv_attention_size is then unread, as ssm_state is without Mamba
        return
    only = n_rwkv == len(blocks)
    rules: tuple[tuple[str, bool, str], ...] = (
        ("placement", cfg.placement != "pre", "RWKV's block is pre-LN: expected 'pre'"),
        ("parallel_residual", cfg.parallel_residual,
         "RWKV's channel mixing reads the stream after the time mixing: expected False"),
        ("post_norms", cfg.post_norms, "RWKV's block has no norm on a sublayer's output: "
                                       "expected False"),
        ("pre_norms", not cfg.pre_norms, "RWKV's sublayers read LN(x): expected True"),
        ("residual_multiplier", cfg.residual_multiplier is not None,
         "RWKV's residual adds are unscaled: expected None"),
        ("norm", cfg.norm != "layernorm", "RWKV's norms are LayerNorms: expected "
                                          "'layernorm'"),
        ("causal", not cfg.causal, "RWKV's token shift and WKV are causal: expected True"),
        ("positions", cfg.positions not in (("none",) if only else ("none", "rope")),
         "RWKV reads no positions (the token shift and the decay order the tokens): "
         "expected 'none'" + ("" if only else " or, for the attention blocks, 'rope'")),
        ("n_experts", cfg.n_experts > 0, "RWKV's channel mixing is not routed: expected 0"),
        ("mlp_bias", only and cfg.mlp_bias, "an all-RWKV model has no MLP to bias (its "
                                            "channel mixing has none): expected False"),
        ("lora_rank", only and cfg.lora_rank > 0, "RWKV's projections carry no LoRA "
                                                  "adapters: expected 0"),
        ("mlp", only and cfg.mlp == NO_MLP, "every RWKV block has its channel mixing: "
                                            "expected an MLP kind, not 'none'"),
        ("mlp", only and cfg.mlp != "gelu", "an all-RWKV model reads no MLP kind (its channel "
                                           "mixing takes the MLP's place): expected the "
                                           "default 'gelu'"),
        ("parallel_norms", only and cfg.parallel_norms != 1,
         "an all-RWKV model has no parallel residual to normalise: expected 1 (the default)"),
    )
    for f, bad, why in rules:
        if bad:
            raise ConfigError(f"TransformerConfig.{f}: {why}, got {getattr(cfg, f)!r} with "
                              f"mixer={cfg.mixer!r}")


def check_no_mlp(cfg: Any) -> None:
    """``mlp=NO_MLP`` (:data:`NO_MLP`) takes no option of the MLP it does not have: no
    ``mlp_bias``, no LoRA target ``mlp``, no parallel residual (whose second branch is the
    MLP). ``d_mlp`` is not read."""
    if cfg.mlp != NO_MLP:
        return
    if cfg.mlp_bias:
        raise ConfigError("TransformerConfig.mlp_bias: mlp='none' has no MLP to bias; "
                          "expected False")
    if cfg.lora_rank and "mlp" in cfg.lora_targets:
        raise ConfigError("TransformerConfig.lora_targets: 'mlp' adapts MLP projections; "
                          "mlp='none' has none")
    if cfg.parallel_residual:
        raise ConfigError("TransformerConfig.parallel_residual: the parallel branch is the "
                          "MLP; mlp='none' has none")


def check_rotary(cfg: Any) -> None:
    """No ``unembed_bias`` with tied embeddings; RoPE's ``rope_pairing`` one of
    :data:`ROPE_PAIRINGS`; ``rotary_dim`` ``None`` or an even
    integer in ``[2, d_head]`` (the rotated coordinates of each head); either away from its
    default only with ``positions="rope"``."""
    if cfg.unembed_bias and cfg.tied_embeddings:
        raise ConfigError("TransformerConfig.unembed_bias: a bias on the unembedding W_U; tied "
                          "embeddings have none of their own (expected tied_embeddings=False)")
    if cfg.rope_pairing not in ROPE_PAIRINGS:
        raise ConfigError(f"TransformerConfig.rope_pairing: expected one of "
                          f"{', '.join(ROPE_PAIRINGS)}, got {cfg.rope_pairing!r}")
    if cfg.rope_pairing != "interleaved" and cfg.positions != "rope":
        raise ConfigError(f"TransformerConfig.rope_pairing: applies to positions='rope', got "
                          f"positions={cfg.positions!r}")
    r = cfg.rotary_dim
    if r is None:
        return
    if isinstance(r, bool) or not isinstance(r, int) or r < 2 or r % 2 or r > cfg.d_head:
        raise ConfigError(f"TransformerConfig.rotary_dim: expected None or an even integer in "
                          f"[2, d_head={cfg.d_head}] (the rotated coordinates of each head), "
                          f"got {r!r}")
    if cfg.positions != "rope":
        raise ConfigError(f"TransformerConfig.rotary_dim: applies to positions='rope', got "
                          f"positions={cfg.positions!r}")


def check_softcaps(cfg: Any) -> None:
    """Each soft cap a finite number > 0 or ``None``, the attention cap on softmax attention;
    the parallel residual pre-LN with 1 or 2 norms; Gemma 2's ``post_norms`` (pre-LN, not
    parallel), ``query_pre_attn_scalar`` (a finite number > 0 or ``None``, softmax attention)
    and ``window_layers`` (distinct block indices in increasing order, a list becoming a
    tuple, with a ``sliding_window``); Granite's ``embed_multiplier`` (not with
    ``embed_scale``) and ``residual_multiplier`` (sequential pre-LN), finite and > 0;
    OLMo 2's ``pre_norms=False`` (with ``post_norms`` and an MLP) and ``qk_norm_joint``
    (with ``qk_norm``); ``norm_bias=False`` (LayerNorm with gains, Cohere)."""
    import math

    for f in ("attn_softcap", "final_softcap", "query_pre_attn_scalar", "embed_multiplier",
              "residual_multiplier"):
        c = getattr(cfg, f)
        if c is not None and (isinstance(c, bool) or not isinstance(c, int | float)
                              or not (math.isfinite(c) and c > 0)):
            raise ConfigError(f"TransformerConfig.{f}: expected a finite number > 0 or "
                              f"None, got {c!r}")
        if c is not None and f in ("attn_softcap", "query_pre_attn_scalar") and (
                cfg.attention != "softmax"):
            raise ConfigError(f"TransformerConfig.{f}: scales or caps softmax attention's "
                              f"scores, got attention={cfg.attention!r}")
    if cfg.parallel_residual and cfg.placement != "pre":
        raise ConfigError("TransformerConfig.parallel_residual: both sublayers read the "
                          f"stream through a norm (pre-LN), got placement={cfg.placement!r}")
    if cfg.parallel_norms not in (1, 2) or isinstance(cfg.parallel_norms, bool):
        raise ConfigError("TransformerConfig.parallel_norms: expected 1 (one norm shared by "
                          f"attention and MLP) or 2, got {cfg.parallel_norms!r}")
    if cfg.post_norms and (cfg.placement != "pre" or cfg.parallel_residual):
        raise ConfigError("TransformerConfig.post_norms: a norm on each sublayer's output "
                          "inside a sequential pre-LN block (Gemma 2), got placement="
                          f"{cfg.placement!r}, parallel_residual={cfg.parallel_residual}")
    if cfg.embed_multiplier is not None and cfg.embed_scale:
        raise ConfigError("TransformerConfig.embed_multiplier: the embedding is scaled by "
                          "sqrt(d) (embed_scale) or by embed_multiplier, not both")
    if cfg.residual_multiplier is not None and (cfg.placement != "pre"
                                                or cfg.parallel_residual):
        raise ConfigError("TransformerConfig.residual_multiplier: scales each sublayer of a "
                          "sequential pre-LN block (Granite), got placement="
                          f"{cfg.placement!r}, parallel_residual={cfg.parallel_residual}")
    if not cfg.pre_norms and not (cfg.post_norms and cfg.mlp != NO_MLP):
        raise ConfigError("TransformerConfig.pre_norms: False leaves each sublayer only the "
                          "norm on its output (OLMo 2); expected post_norms=True and an MLP")
    if cfg.qk_norm_joint and not cfg.qk_norm:
        raise ConfigError("TransformerConfig.qk_norm_joint: how QK-norm normalises (all heads "
                          "at once); expected qk_norm=True")
    if not cfg.norm_bias and (cfg.norm != "layernorm" or not cfg.norm_affine):
        raise ConfigError("TransformerConfig.norm_bias: False drops the bias of a LayerNorm "
                          f"with gains; expected norm='layernorm' and norm_affine=True, got "
                          f"norm={cfg.norm!r}, norm_affine={cfg.norm_affine}")
    w = cfg.window_layers
    if w is None:
        return
    if isinstance(w, list):
        w = tuple(w)
        object.__setattr__(cfg, "window_layers", w)
    if not isinstance(w, tuple) or any(isinstance(i, bool) or not isinstance(i, int)
                                       for i in w) or list(w) != sorted(set(w)) or (
            w and not 0 <= w[0] <= w[-1] < cfg.n_blocks):
        raise ConfigError(f"TransformerConfig.window_layers: expected distinct block indices in "
                          f"[0, n_blocks={cfg.n_blocks}) in increasing order, got {w!r}")
    if cfg.sliding_window is None:
        raise ConfigError("TransformerConfig.window_layers: names the blocks that use the "
                          "sliding window; expected a sliding_window")


def check_rope_local(cfg: Any) -> None:
    r"""Gemma 3's ``rope_local_base`` :math:`b_\ell` (Gemma Team 2025, §2; Hugging Face
    ``Gemma3RotaryEmbedding``, ``rope_parameters["sliding_attention"]``): ``None`` or an
    integer >= 2, the base :math:`\theta_i = b_\ell^{-2i/d_h}` of the windowed blocks' RoPE
    (unscaled); it needs RoPE and a ``sliding_window`` (blocks to apply to), else it would be
    accepted and change nothing."""
    b = cfg.rope_local_base
    if b is None:
        return
    if isinstance(b, bool) or not isinstance(b, int) or b < 2:
        raise ConfigError(f"TransformerConfig.rope_local_base: expected None or an integer >= 2 "
                          f"(the RoPE base of the windowed blocks), got {b!r}")
    if cfg.positions != "rope" or cfg.sliding_window is None or cfg.window_layers == ():
        raise ConfigError("TransformerConfig.rope_local_base: the RoPE base of the windowed "
                          "blocks; expected positions='rope' and a sliding_window on some "
                          f"block, got positions={cfg.positions!r}, sliding_window="
                          f"{cfg.sliding_window!r}, window_layers={cfg.window_layers!r}")
