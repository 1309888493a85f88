"""The configuration of a decoder-only Transformer, and published presets.

Baggag & Saad §3.3 (architecture), §3.11.2-3.11.3 (GPT-3, Llama-3 and their
parameter counts), §3.12 (mixture of experts); Baptista, Stuart & Tran §5.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from nlaverify.errors import UnknownNameError

NORMS = ("layernorm", "rmsnorm")
PLACEMENTS = ("pre", "post")
POSITIONS = ("sinusoidal", "learned", "rope", "none")
MLPS = ("relu", "gelu", "swiglu")


class ConfigError(ValueError):
    """An invalid :class:`TransformerConfig`; the message names the field."""


@dataclass(frozen=True)
class TransformerConfig:
    r"""A decoder-only Transformer (tokens are rows, Baggag & Saad §3.3).

    ``d_head`` defaults to ``d_model // n_heads`` and ``n_kv_heads`` to ``n_heads``
    (plain multi-head attention; fewer key/value heads is grouped-query attention).
    ``mlp="gelu"`` uses the tanh form of GELU (GPT-2/3). ``n_experts > 0`` replaces
    each MLP by ``n_experts`` routed experts with a softmax top-``top_k`` router.
    ``temperature`` divides the logits before the output softmax and the loss.
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
    attn_bias: bool = False
    mlp_bias: bool = False
    tied_embeddings: bool = False
    final_norm: bool = True
    causal: bool = True
    temperature: float = 1.0
    norm_eps: float = 1e-5
    rope_base: int = 10000
    name: str = field(default="custom", compare=False)

    def __post_init__(self) -> None:
        for f in ("vocab_size", "d_model", "n_heads", "n_blocks", "d_mlp", "context"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"TransformerConfig.{f}: expected a positive integer, got {v!r}")
        for f, allowed in (("norm", NORMS), ("placement", PLACEMENTS),
                           ("positions", POSITIONS), ("mlp", MLPS)):
            if getattr(self, f) not in allowed:
                raise ConfigError(f"TransformerConfig.{f}: expected one of {', '.join(allowed)},"
                                  f" got {getattr(self, f)!r}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"TransformerConfig.d_model: expected a multiple of n_heads="
                              f"{self.n_heads}, got {self.d_model}")
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
        if self.positions == "rope" and self.d_head % 2:
            raise ConfigError(f"TransformerConfig.d_head: RoPE needs an even head dimension, "
                              f"got {self.d_head}")
        if self.n_experts < 0:
            raise ConfigError(f"TransformerConfig.n_experts: expected >= 0, got {self.n_experts}")
        if self.n_experts and not 1 <= self.top_k <= self.n_experts:
            raise ConfigError(f"TransformerConfig.top_k: expected 1 <= top_k <= n_experts="
                              f"{self.n_experts}, got {self.top_k}")
        if self.n_experts and self.mlp_bias:
            raise ConfigError("TransformerConfig.mlp_bias: expert MLPs have no biases; expected "
                              "False when n_experts > 0")
        if not self.temperature > 0:
            raise ConfigError(f"TransformerConfig.temperature: expected > 0, got "
                              f"{self.temperature}")
        if not self.norm_eps > 0:
            raise ConfigError(f"TransformerConfig.norm_eps: expected > 0, got {self.norm_eps}")

    @property
    def n_rep(self) -> int:
        """Query heads per key/value head (1 for plain multi-head attention)."""
        return self.n_heads // self.n_kv_heads  # type: ignore[operator]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def replace(self, **changes: Any) -> TransformerConfig:
        """A copy with ``changes`` (validated again)."""
        return replace(self, **changes)


PRESETS: dict[str, TransformerConfig] = {
    # small enough that every backend, mpmath included, runs it in CI
    "tiny": TransformerConfig(vocab_size=11, d_model=8, n_heads=2, n_blocks=2, d_mlp=16,
                              positions="learned", context=16, mlp="gelu", attn_bias=True,
                              mlp_bias=True, name="tiny"),
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
}


def preset(name: str) -> TransformerConfig:
    """The preset called ``name`` (see :data:`PRESETS`)."""
    if name not in PRESETS:
        raise UnknownNameError(f"unknown preset {name!r}: expected one of "
                               f"{', '.join(PRESETS)}")
    return PRESETS[name]
