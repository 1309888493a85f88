"""The configuration of a decoder-only Transformer, and published presets.

Baggag & Saad §3.3 (architecture), §3.11.2-3.11.3 (GPT-3, Llama-3 and their
parameter counts), §3.12 (mixture of experts); Baptista, Stuart & Tran §5.

The option vocabularies, :class:`ConfigError` and :class:`RopeScaling` live in
:mod:`nlaverify.config_options`; the published figures the presets are checked against
(:data:`PUBLISHED`, :data:`PUBLISHED_TOTALS`) in :mod:`nlaverify.config_published`. Both are
re-exported here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from nlaverify.config_checks import check_architecture_options, check_attention, check_types
from nlaverify.config_mla import check_mla
from nlaverify.config_moe import check_moe
from nlaverify.config_options import (
    ATTENTIONS,
    BIDIRECTIONAL_ATTENTIONS,
    GATED_MLPS,
    LORA_TARGETS,
    MIXERS,
    MLPS,
    NO_MLP,
    NORMS,
    PLACEMENTS,
    POSITIONS,
    RANDOM_FEATURE_ATTENTIONS,
    ROPE_PAIRINGS,
    ROPE_SCALINGS,
    ConfigError,
    RopeScaling,
    check_mixer,
    check_no_mlp,
    check_rope_local,
    check_rotary,
)
from nlaverify.config_published import PUBLISHED, PUBLISHED_TOTALS, UNPUBLISHED, Figure
from nlaverify.errors import UnknownNameError

__all__ = [
    "ATTENTIONS", "BIDIRECTIONAL_ATTENTIONS", "GATED_MLPS", "LORA_TARGETS", "MIXERS", "MLPS",
    "NORMS", "NO_MLP",
    "PLACEMENTS", "POSITIONS", "PRESETS", "PUBLISHED", "PUBLISHED_TOTALS",
    "RANDOM_FEATURE_ATTENTIONS", "ROPE_PAIRINGS", "ROPE_SCALINGS", "UNPUBLISHED", "ConfigError",
    "Figure",
    "RopeScaling", "TransformerConfig", "preset", "preset_mismatches",
]


@dataclass(frozen=True)
class TransformerConfig:
    r"""A decoder-only Transformer (tokens are rows, Baggag & Saad §3.3).

    ``d_head`` defaults to ``d_model // n_heads`` and ``n_kv_heads`` to ``n_heads``
    (plain multi-head attention; fewer key/value heads is grouped-query attention); an
    explicit ``d_head`` need not divide ``d_model`` (Gemma-7B: 16 heads of 256, d = 3072).
    ``mlp="gelu"`` uses the tanh form of GELU (GPT-2/3), ``"gelu_erf"`` the exact one;
    ``"swiglu"`` and ``"geglu"`` are gated, :math:`(\phi(xW_g)\odot xW_u)W_d` with SiLU or
    tanh-GELU (Llama; Gemma). ``n_experts > 0`` replaces each MLP by ``n_experts`` routed
    experts with a softmax top-``top_k`` router, the selected gates renormalised to sum to 1
    (Mixtral) unless ``moe_renormalize=False`` (the top-k entries of the softmax over all
    experts). ``temperature`` divides the logits before the output softmax and the loss.
    Released routers (:mod:`nlaverify.config_moe`): ``moe_router`` (``"softmax"``; ``"sigmoid"``:
    DeepSeek-V3, with ``routed_scaling_factor``, ``n_group``, ``topk_group``;
    ``"softmax_group"``: DeepSeek-V2, its groups scored by their max), experts of width
    ``moe_intermediate_size`` (``None``: ``d_mlp``), a shared SwiGLU expert of width
    ``d_shared_expert`` (Qwen's gated by ``shared_expert_gate``), dense ``moe_dense_layers``.

    Options of released architectures (issue 10): ``rope_scaling`` (:class:`RopeScaling`,
    Llama-3.1), ``sliding_window`` :math:`w` (token :math:`i` sees :math:`j` with
    :math:`i - w < j \le i`; Mistral), ``qk_norm`` (RMSNorm of each head's query and key
    before RoPE, gains ``attn.q_norm.gamma``, ``attn.k_norm.gamma`` of size ``d_head``;
    Qwen3), ``attn_out_bias`` (a bias on the output projection; ``None``: as ``attn_bias``;
    Qwen2 has Q/K/V biases and none on O), ``embed_scale`` (the embedding times
    :math:`\sqrt{d}`; Gemma).

    LoRA (Baggag & Saad §4.2; Hu et al. 2022): ``lora_rank`` :math:`r > 0` adapts each
    projection named in ``lora_targets`` (:data:`LORA_TARGETS`: ``q``, ``k``, ``v``, ``o``,
    ``mlp`` for every dense MLP projection) to :math:`X(W_0 + s AB)`, :math:`A \in \mathbb
    R^{d_{in}\times r}`, :math:`B \in \mathbb R^{r\times d_{out}}`, :math:`s = \alpha/r`
    (``lora_alpha``; ``None``: :math:`\alpha = r`, :math:`s = 1`).

    ``attention`` chooses the attention node of every block (Baggag & Saad §3.4, §4.3,
    §4.4): ``"softmax"`` (exact), ``"favor"`` (trigonometric random features, the seed's
    FAVOR), ``"favor+"`` (positive random features, Performer), ``"elu1"`` (linear
    attention with :math:`\phi = \operatorname{elu} + 1`), ``"efficient"`` (Shen et
    al.) or ``"linformer"`` (trained projections :math:`E, F \in \mathbb R^{k \times
    n_{ctx}}`, ``k = linformer_k``: sequences of at most ``context`` tokens, a shorter one
    using the first columns, the zero-padded sequence's result).
    FAVOR and FAVOR+ draw ``random_features`` rows :math:`w_i` per head, orthogonal
    blocks when ``orthogonal_features``, from ``feature_seed`` (:meth:`feature_draws`:
    a pure function of the seed, the draw index, the block and the head). The graph takes
    the draws as fixed inputs (draw 0 unless the data give others); redrawing during
    training is the trainer's schedule: every :math:`s` steps it passes draw
    :math:`\lfloor t/s \rfloor` (:func:`nlaverify.graph.build.feature_inputs`), so a run
    stays a pure function of the config, the schedule and the step.

    ``mixer`` (:data:`MIXERS`, or one per block: a hybrid, as Jamba interleaves them) puts
    Mamba's selective state-space block (Gu & Dao 2023; Baptista, Stuart & Tran §5.3.4) in
    place of attention: :math:`d_{in}` = ``ssm_expand`` :math:`\cdot d` channels, a causal
    depthwise convolution of width ``ssm_conv``, a state of ``ssm_state`` per channel,
    :math:`\Delta` of rank ``ssm_dt_rank`` (``None``: :math:`\lceil d/16\rceil`, Hugging
    Face's ``"auto"``); the MLP sublayer stays unless ``mlp="none"`` (:data:`NO_MLP`: blocks
    :math:`x \leftarrow x + \operatorname{Mixer}(N(x))`, Hugging Face's ``MambaBlock``;
    ``d_mlp`` unread). ``mixer="rwkv"`` is RWKV-4's block (Peng et al. 2023; Hugging Face
    ``RwkvBlock``): time mixing of width :math:`a` = ``rwkv_attention_size`` (``None``:
    :math:`d`) in place of attention, and its channel mixing of width ``d_mlp`` in place of
    the MLP (``mlp`` then names the MLP of the other blocks of a hybrid); block 0 first
    normalises the embedding (``ln0``). ``mixer="mamba2"``: Mamba-2's block (Dao & Gu 2024;
    ``ssm_heads`` :math:`H` heads of :math:`E/H` channels, ``ssm_groups`` :math:`G` groups of
    :math:`B, C`; :func:`~nlaverify.config_options.check_mamba2`). Checked by
    :func:`check_mixer`.

    Soft-capping (Gemma Team 2024, Gemma 2 §2): ``attn_softcap`` :math:`c` caps the scaled
    attention scores, :math:`c\tanh(s/c)`, before the causal mask (softmax attention only);
    ``final_softcap`` caps the logits (before the temperature). ``None``: no cap. Also Gemma
    2's: ``post_norms`` (pre-LN only; sandwich norms ``post_norm1``, ``post_norm2`` on each
    sublayer's output before the residual add), ``query_pre_attn_scalar`` :math:`s` (scores
    :math:`qk^T/\sqrt s` for :math:`qk^T/\sqrt{d_h}`), ``window_layers`` (the blocks that use
    ``sliding_window``, the others full; ``None``: all), checked by :func:`check_softcaps`.
    Gemma 3's (Gemma Team 2025, §2): ``rope_local_base`` :math:`b_\ell` (the RoPE base of the
    windowed blocks, unscaled: :math:`\theta_i = b_\ell^{-2i/d_h}` there, while the global
    blocks keep ``rope_base`` and ``rope_scaling``; ``None``: one RoPE for all), checked by
    :func:`~nlaverify.config_options.check_rope_local`. ``position_offset`` :math:`o` (OPT,
    Zhang et al. 2022): the learned table ``W_P`` has ``context + o`` rows and position
    :math:`p` reads row :math:`p + o` (:func:`~nlaverify.config_checks.check_position_offset`).
    Granite's multipliers (IBM 2024): ``embed_multiplier`` :math:`m` (the embedding times
    :math:`m`, in place of ``embed_scale``), ``residual_multiplier`` :math:`r` (sequential
    pre-LN: :math:`x \leftarrow x + r\,F(N(x))` for each sublayer :math:`F`). OLMo 2's
    (OLMo Team 2024): ``pre_norms=False`` (with ``post_norms``: :math:`x \leftarrow x +
    N'(F(x))`, no ``norm1``/``norm2``), ``qk_norm_joint`` (QK-norm over all heads' queries
    and keys at once, gains of size :math:`h\,d_h`, before the split into heads). The block
    and final norms without learned gain and bias (``norm_affine=False``: OLMo) or without the
    bias (``norm_bias=False``, LayerNorm only: Cohere), checked by :func:`check_softcaps`.

    Multi-head latent attention (DeepSeek-V2 §2.1; :mod:`nlaverify.config_mla`, checked by
    :func:`~nlaverify.config_mla.check_mla`): ``kv_lora_rank`` :math:`r > 0` (0: none) keys
    and values from a normalised latent of width :math:`r` and a rotated key shared by the
    heads; ``q_lora_rank`` (``None``: full-rank queries), ``qk_nope_head_dim``,
    ``qk_rope_head_dim``, ``v_head_dim`` as Hugging Face's ``DeepseekV3Config``.

    ``parallel_residual`` (pre-LN only): attention and MLP read the same stream, :math:`x
    \leftarrow x + \operatorname{Attn}(N_1(x)) + \operatorname{MLP}(N(x))` with :math:`N =
    N_1`, one shared norm (``parallel_norms=1``: GPT-J, Wang & Komatsuzaki 2021; Falcon-7B;
    Cohere) or its own :math:`N_2` (``parallel_norms=2``: GPT-NeoX, Black et al. 2022).

    RoPE's pairing and extent (:mod:`nlaverify.ops.rotary`): ``rope_pairing``
    (:data:`ROPE_PAIRINGS`) ``"interleaved"`` rotates :math:`(x_{2i}, x_{2i+1})` (RoFormer,
    GPT-J), ``"half"`` :math:`(x_i, x_{i+r/2})` (GPT-NeoX, Llama); ``rotary_dim`` :math:`r`
    (even, at most ``d_head``; ``None``: the whole head) rotates the first :math:`r`
    coordinates of each head at :math:`b^{-2i/r}` and passes the rest (Pythia's
    ``rotary_pct``, GPT-J's ``rotary_dim``, Phi's ``partial_rotary_factor``).
    ``unembed_bias``: logits :math:`xW_U + b_U` (untied only; GPT-J's and Phi's ``lm_head``).
    """

    vocab_size: int
    d_model: int
    n_heads: int
    n_blocks: int
    d_mlp: int
    n_kv_heads: int | None = None
    d_head: int | None = None
    norm: str = "layernorm"
    placement: str = "pre"
    positions: str = "learned"
    context: int = 1024
    mlp: str = "gelu"
    n_experts: int = 0
    top_k: int = 1
    moe_router: str = "softmax"
    moe_intermediate_size: int | None = None
    d_shared_expert: int = 0
    shared_expert_gate: bool = False
    routed_scaling_factor: float = 1.0
    n_group: int = 1
    topk_group: int = 1
    moe_dense_layers: tuple[int, ...] = ()
    attn_bias: bool = False
    mlp_bias: bool = False
    tied_embeddings: bool = False
    final_norm: bool = True
    causal: bool = True
    temperature: float = 1.0
    norm_eps: float = 1e-5
    rope_base: int = 10000
    attention: str = "softmax"
    random_features: int = 64
    feature_seed: int = 0
    orthogonal_features: bool = True
    linformer_k: int = 8
    rope_scaling: RopeScaling | None = None
    sliding_window: int | None = None
    qk_norm: bool = False
    attn_out_bias: bool | None = None
    moe_renormalize: bool = True
    embed_scale: bool = False
    lora_rank: int = 0
    lora_alpha: float | None = None
    lora_targets: tuple[str, ...] = ("q", "v")
    mixer: str | tuple[str, ...] = "attention"
    ssm_state: int = 16
    ssm_conv: int = 4
    ssm_expand: int = 2
    ssm_dt_rank: int | None = None
    ssm_heads: int = 1
    ssm_groups: int = 1
    rwkv_attention_size: int | None = None
    attn_softcap: float | None = None
    final_softcap: float | None = None
    parallel_residual: bool = False
    parallel_norms: int = 1
    rotary_dim: int | None = None
    rope_pairing: str = "interleaved"
    unembed_bias: bool = False
    post_norms: bool = False
    query_pre_attn_scalar: float | None = None
    window_layers: tuple[int, ...] | None = None
    rope_local_base: int | None = None
    position_offset: int = 0
    embed_multiplier: float | None = None
    residual_multiplier: float | None = None
    pre_norms: bool = True
    qk_norm_joint: bool = False
    kv_lora_rank: int = 0
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    norm_affine: bool = True
    norm_bias: bool = True
    name: str = field(default="custom", compare=False)

    def __post_init__(self) -> None:
        check_types(self)
        for f in ("vocab_size", "d_model", "n_heads", "n_blocks", "d_mlp", "context"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"TransformerConfig.{f}: expected a positive integer, got {v!r}")
        for f, allowed in (("norm", NORMS), ("placement", PLACEMENTS),
                           ("positions", POSITIONS), ("mlp", (*MLPS, NO_MLP)),
                           ("attention", ATTENTIONS)):
            if getattr(self, f) not in allowed:
                raise ConfigError(f"TransformerConfig.{f}: expected one of {', '.join(allowed)},"
                                  f" got {getattr(self, f)!r}")
        if self.d_head is None and self.d_model % self.n_heads:
            raise ConfigError(f"TransformerConfig.d_model: expected a multiple of n_heads="
                              f"{self.n_heads} (or an explicit d_head), got {self.d_model}")
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.d_head is None:
            object.__setattr__(self, "d_head", self.d_model // self.n_heads)
        if not isinstance(self.n_kv_heads, int) or self.n_kv_heads < 1 or (
                self.n_heads % self.n_kv_heads):
            raise ConfigError(f"TransformerConfig.n_kv_heads: expected a divisor of n_heads="
                              f"{self.n_heads}, got {self.n_kv_heads!r}")
        if not isinstance(self.d_head, int) or self.d_head < 1:
            raise ConfigError(f"TransformerConfig.d_head: expected a positive integer, got "
                              f"{self.d_head!r}")
        if self.positions == "rope" and self.d_head % 2 and not self.kv_lora_rank:
            raise ConfigError(f"TransformerConfig.d_head: RoPE needs an even head dimension, "
                              f"got {self.d_head}")
        if self.n_experts < 0:
            raise ConfigError(f"TransformerConfig.n_experts: expected >= 0, got {self.n_experts}")
        if self.n_experts and not 1 <= self.top_k <= self.n_experts:
            raise ConfigError(f"TransformerConfig.top_k: expected 1 <= top_k <= n_experts="
                              f"{self.n_experts}, got {self.top_k}")
        if self.n_experts and self.mlp not in ("relu", "gelu", "swiglu"):
            raise ConfigError(f"TransformerConfig.mlp: expert MLPs are relu, gelu or swiglu, got "
                              f"{self.mlp!r} with n_experts={self.n_experts}")
        if self.n_experts and self.mlp_bias:
            raise ConfigError("TransformerConfig.mlp_bias: expert MLPs have no biases; expected "
                              "False when n_experts > 0")
        if not self.temperature > 0:
            raise ConfigError(f"TransformerConfig.temperature: expected > 0, got "
                              f"{self.temperature}")
        if not self.norm_eps > 0:
            raise ConfigError(f"TransformerConfig.norm_eps: expected > 0, got {self.norm_eps}")
        check_attention(self)
        check_moe(self)
        check_architecture_options(self)
        check_mixer(self)
        check_no_mlp(self)
        check_rotary(self)
        check_mla(self)
        check_rope_local(self)

    def windowed(self, layer: int) -> bool:
        """Whether block ``layer`` attends through ``sliding_window`` (``window_layers``, or
        every block when that is ``None``; Gemma 2's local layers)."""
        return self.sliding_window is not None and (
            self.window_layers is None or layer in self.window_layers)

    def block_rope(self, layer: int) -> tuple[int, RopeScaling | None]:
        r"""``(base, scaling)`` of block ``layer``'s RoPE: ``(rope_local_base, None)`` on a
        windowed block when ``rope_local_base`` is set (Gemma 3's local layers, Hugging Face
        ``rope_parameters["sliding_attention"]``), else ``(rope_base, rope_scaling)``."""
        if self.rope_local_base is not None and self.windowed(layer):
            return self.rope_local_base, None
        return self.rope_base, self.rope_scaling

    def block_mixer(self, layer: int) -> str:
        """The token mixer of block ``layer`` (:data:`MIXERS`)."""
        return self.mixer if isinstance(self.mixer, str) else self.mixer[layer]

    @property
    def rwkv_dim(self) -> int:
        """The time mixing's width :math:`a` of an RWKV block: ``rwkv_attention_size`` or
        ``d_model`` (Hugging Face ``RwkvConfig.attention_hidden_size``)."""
        return self.rwkv_attention_size if self.rwkv_attention_size is not None else \
            self.d_model

    @property
    def d_inner(self) -> int:
        """The channels of a Mamba block, ``ssm_expand * d_model``."""
        return self.ssm_expand * self.d_model

    @property
    def dt_rank(self) -> int:
        r"""The rank of :math:`\Delta`'s projection: ``ssm_dt_rank`` or :math:`\lceil
        d/16\rceil` (Hugging Face ``MambaConfig``'s ``"auto"``)."""
        return self.ssm_dt_rank if self.ssm_dt_rank is not None else -(-self.d_model // 16)

    @property
    def lora_scale(self) -> float:
        r"""The LoRA scale :math:`s = \alpha/r` (1 when ``lora_alpha`` is ``None``)."""
        if not self.lora_rank or self.lora_alpha is None:
            return 1.0
        return self.lora_alpha / self.lora_rank

    def lora_adapts(self, target: str) -> bool:
        """Whether projection ``target`` (:data:`LORA_TARGETS`) carries a LoRA adapter."""
        return bool(self.lora_rank) and target in self.lora_targets

    @property
    def out_bias(self) -> bool:
        """Whether the attention output projection has a bias (``attn_out_bias``, or
        ``attn_bias`` when that is ``None``)."""
        return self.attn_bias if self.attn_out_bias is None else self.attn_out_bias

    @property
    def n_rep(self) -> int:
        """Query heads per key/value head (1 for plain multi-head attention)."""
        return self.n_heads // self.n_kv_heads  # type: ignore[operator]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def feature_draws(self, layer: int, draw: int = 0, *,
                      fix_signs: bool = True) -> dict[str, np.ndarray]:
        r"""The random features of block ``layer``, redraw number ``draw``: ``{"W": (H, m,
        d_h)}`` and, for FAVOR, ``{"b": (H, m)}`` (float64; empty for attentions without
        random features). Head :math:`h` draws from
        ``SeedSequence([feature_seed, draw, layer, h])`` (a trainer redrawing every :math:`s`
        steps passes ``draw`` :math:`= \lfloor t/s \rfloor` at step :math:`t`): rows
        :math:`w_i` marginally :math:`N(0, I)`, orthogonal in blocks of :math:`d_h` when
        ``orthogonal_features`` (:func:`nlaverify.attention.features.draw_orthogonal`;
        ``fix_signs=False`` plants the unfixed-QR bias), phases :math:`b_i \sim U(0, 2\pi)`
        from a second stream. Choromanski et al. 2021 §3; Baggag & Saad §4.4.
        """
        from nlaverify.attention.features import draw_gaussian, draw_orthogonal, draw_phases

        if self.attention not in RANDOM_FEATURE_ATTENTIONS:
            return {}
        for arg, v, hi in (("layer", layer, self.n_blocks), ("draw", draw, None)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (
                    hi is not None and v >= hi):
                want = f"in [0, n_blocks={hi})" if hi is not None else ">= 0"
                raise ConfigError(f"feature_draws: argument {arg!r}: expected an integer "
                                  f"{want}, got {v!r}")
        m, dh = self.random_features, self.d_head
        assert dh is not None
        Ws, bs = [], []
        for h in range(self.n_heads):
            seed, phase_seed = (int(s) for s in np.random.SeedSequence(
                [self.feature_seed, draw, layer, h]).generate_state(2))
            Ws.append(draw_orthogonal(seed, m, dh, fix_signs=fix_signs)
                      if self.orthogonal_features else draw_gaussian(seed, m, dh))
            bs.append(draw_phases(phase_seed, m))
        out = {"W": np.stack(Ws)}
        if self.attention == "favor":
            out["b"] = np.stack(bs)
        return out

    def replace(self, **changes: Any) -> TransformerConfig:
        """A copy with ``changes`` (validated again)."""
        return replace(self, **changes)


PRESETS: dict[str, TransformerConfig] = {
    # small enough that every backend, mpmath included, runs it in CI
    "tiny": TransformerConfig(vocab_size=11, d_model=8, n_heads=2, n_blocks=2, d_mlp=16,
                              positions="learned", context=16, mlp="gelu", attn_bias=True,
                              mlp_bias=True, name="tiny"),
    # tiny's sizes with Mamba's block in place of attention (Gu & Dao 2023; issue 37)
    "tiny-mamba": TransformerConfig(vocab_size=11, d_model=8, n_heads=2, n_blocks=2, d_mlp=16,
                                    positions="none", context=16, mlp="swiglu", norm="rmsnorm",
                                    mixer="mamba", ssm_state=4, ssm_conv=3, name="tiny-mamba"),
    # tiny's sizes with RWKV-4's block (Peng et al. 2023; issue 37): time mixing of width d,
    # channel mixing of width d_mlp, ln0 on the embedding, no positions
    "tiny-rwkv": TransformerConfig(vocab_size=11, d_model=8, n_heads=2, n_blocks=2, d_mlp=16,
                                   positions="none", context=16, mixer="rwkv",
                                   name="tiny-rwkv"),
    # a mid-sized model for precision and speed checks (d=256, 4 blocks, V=2048)
    "mid": TransformerConfig(vocab_size=2048, d_model=256, n_heads=8, n_blocks=4, d_mlp=1024,
                             positions="learned", context=256, mlp="gelu", attn_bias=True,
                             mlp_bias=True, name="mid"),
    # GPT-2 small (Radford et al. 2019): 124,439,808 parameters with tied embeddings
    "gpt2-small": TransformerConfig(vocab_size=50257, d_model=768, n_heads=12, n_blocks=12,
                                    d_mlp=3072, positions="learned", context=1024, mlp="gelu",
                                    attn_bias=True, mlp_bias=True, tied_embeddings=True,
                                    name="gpt2-small"),
    # GPT-3 175B as counted in Baggag & Saad Table 3: attention without biases, MLP with,
    # untied W_E, W_U, LayerNorm (gamma, beta) twice per block, no final norm, no
    # positional parameters in the count
    "gpt3-175b": TransformerConfig(vocab_size=50257, d_model=12288, n_heads=96, n_blocks=96,
                                   d_mlp=49152, positions="sinusoidal", context=2048,
                                   mlp="gelu", attn_bias=False, mlp_bias=True,
                                   final_norm=False, name="gpt3-175b"),
    # Llama-3 405B (Table 2): 8 key/value heads, SwiGLU, RMSNorm, RoPE, no biases
    "llama3-405b": TransformerConfig(vocab_size=128256, d_model=16384, n_heads=128,
                                     n_kv_heads=8, n_blocks=126, d_mlp=53248, norm="rmsnorm",
                                     positions="rope", context=8192, mlp="swiglu",
                                     rope_base=500000, name="llama3-405b"),
    # Llama-3 405B as counted in Baggag & Saad Table 4 (gamma and beta per norm, MLP
    # biases 2 d_mlp + d_model, no final norm): 405,872,984,064
    "llama3-405b-seed-table": TransformerConfig(
        vocab_size=128256, d_model=16384, n_heads=128, n_kv_heads=8, n_blocks=126,
        d_mlp=53248, norm="layernorm", positions="rope", context=8192, mlp="swiglu",
        mlp_bias=True, final_norm=False, rope_base=500000, name="llama3-405b-seed-table"),
    # Gemma 2B and 7B (Gemma Team 2024, Table 1; the released config.json): multi-query
    # attention for 2B, 256-dimensional heads, GeGLU, RMSNorm, embeddings times sqrt(d), tied
    "gemma-2b": TransformerConfig(vocab_size=256000, d_model=2048, n_heads=8, n_kv_heads=1,
                                  d_head=256, n_blocks=18, d_mlp=16384, norm="rmsnorm",
                                  positions="rope", context=8192, mlp="geglu",
                                  tied_embeddings=True, norm_eps=1e-6, embed_scale=True,
                                  name="gemma-2b"),
    "gemma-7b": TransformerConfig(vocab_size=256000, d_model=3072, n_heads=16, n_kv_heads=16,
                                  d_head=256, n_blocks=28, d_mlp=24576, norm="rmsnorm",
                                  positions="rope", context=8192, mlp="geglu",
                                  tied_embeddings=True, norm_eps=1e-6, embed_scale=True,
                                  name="gemma-7b"),
    # Llama-3.1 405B: Llama-3 405B with the RoPE scaling of the release and a 128K context
    "llama3.1-405b": TransformerConfig(
        vocab_size=128256, d_model=16384, n_heads=128, n_kv_heads=8, n_blocks=126,
        d_mlp=53248, norm="rmsnorm", positions="rope", context=131072, mlp="swiglu",
        rope_base=500000, rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 8192),
        name="llama3.1-405b"),
}


def preset(name: str) -> TransformerConfig:
    """The preset called ``name`` (see :data:`PRESETS`)."""
    if name not in PRESETS:
        raise UnknownNameError(f"unknown preset {name!r}: expected one of "
                               f"{', '.join(PRESETS)}")
    return PRESETS[name]



def preset_mismatches(name: str) -> list[str]:
    """Where preset ``name`` departs from :data:`PUBLISHED`: one line per field, naming
    the published value and its source (an empty list when every field matches)."""
    from dataclasses import fields

    table = PUBLISHED[name]
    cfg = preset(name)
    out = []
    for f in fields(TransformerConfig):
        if f.name == "name":
            continue
        if f.name not in table:
            out.append(f"{name}.{f.name}: no published value recorded")
        elif getattr(cfg, f.name) != table[f.name].value:
            out.append(f"{name}.{f.name} = {getattr(cfg, f.name)!r}, published "
                       f"{table[f.name].value!r} ({table[f.name].source})")
    return out
