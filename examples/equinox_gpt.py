r"""A Llama-style decoder in equinox, verified node by node by :func:`nlaverify.check.check_model`.

The model is written the way Meta's reference Llama (``llama/model.py``) writes it, in
equinox: RMSNorm (gain only, :math:`x/\sqrt{\overline{x^2} + \epsilon}`), rotary positions
on interleaved pairs :math:`(x_{2i}, x_{2i+1})` (Llama's ``view_as_complex``), grouped-query
attention (each key/value head shared by ``n_rep`` query heads, ``repeat_kv``), a SwiGLU MLP
:math:`(\operatorname{silu}(xW_1)\odot xW_3)W_2`, no biases, an untied output head. It runs on
one sequence ``(n,)`` and returns ``(logits, intermediates)``, a dict of its own names
(:data:`INTERMEDIATES` maps them to graph nodes; its heads are last, ``(n, H, d_h)``, the
graph's first). The graph's parameters load into it by :func:`load` (``eqx.nn.Linear`` holds
:math:`W^\top`; ``eqx.tree_at`` writes them, so ``jax.grad`` flows through the load).

Run ``python examples/equinox_gpt.py`` (float64), ``--dtype float32``, or plant a bug with
``--plant rope`` (RoPE pairing coordinate :math:`i` with :math:`i + d_h/2`, Hugging Face's
convention, without permuting the weights), ``--plant rms_mean`` (RMSNorm summing instead of
averaging: the missing :math:`1/d`), ``--plant gqa_tile`` (key/value heads tiled instead of
repeated) or ``--plant swiglu`` (SiLU of the up projection instead of the gate): the report
names the node where it first shows (:data:`PLANTS`).

Seed: Baggag & Saad §3.6.2 (RoPE), §3.8.1 (RMSNorm), §3.11.2 (grouped-query attention).
"""

from __future__ import annotations

import argparse
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from nlaverify.check import CheckReport, check_model
from nlaverify.check.model import heads_first
from nlaverify.config import TransformerConfig

jax.config.update("jax_enable_x64", True)

#: planted bug -> the graph node where check_model must name it
PLANTS = {"rope": "blocks.0.attn.q_rope", "rms_mean": "blocks.0.norm1",
          "gqa_tile": "blocks.0.attn.v_shared", "swiglu": "blocks.0.mlp.act"}

DIM, N_HEADS, N_KV_HEADS, N_LAYERS, VOCAB, HIDDEN, MAX_SEQ = 16, 4, 2, 2, 29, 24, 16
EPS, ROPE_BASE = 1e-5, 10000


class RMSNorm(eqx.Module):
    weight: jax.Array
    eps: float = eqx.field(static=True)
    plant: str | None = eqx.field(static=True)

    def __call__(self, x: jax.Array) -> jax.Array:
        ms = jnp.sum(x * x, -1, keepdims=True) if self.plant == "rms_mean" else jnp.mean(
            x * x, -1, keepdims=True)
        return self.weight * (x * jax.lax.rsqrt(ms + self.eps))


def apply_rotary(x: jax.Array, plant: str | None) -> jax.Array:
    """RoPE of ``x`` ``(n, H, d_h)``: pair :math:`(x_{2i}, x_{2i+1})` rotated by
    :math:`t\\theta_i`, :math:`\\theta_i = b^{-2i/d_h}` (the "rope" plant pairs :math:`i` with
    :math:`i + d_h/2`)."""
    n, _, dh = x.shape
    freqs = 1.0 / ROPE_BASE ** (jnp.arange(0, dh, 2, dtype=x.dtype) / dh)
    angles = jnp.arange(n, dtype=x.dtype)[:, None] * freqs[None, :]  # (n, d_h/2)
    cos, sin = jnp.cos(angles)[:, None, :], jnp.sin(angles)[:, None, :]
    if plant == "rope":
        x1, x2 = x[..., : dh // 2], x[..., dh // 2:]
        return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return jnp.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).reshape(x.shape)


def repeat_kv(x: jax.Array, n_rep: int, plant: str | None) -> jax.Array:
    """``(n, H_kv, d_h) -> (n, H_kv n_rep, d_h)``, query head :math:`j` reading key/value
    head :math:`\\lfloor j / n_{rep}\\rfloor` (the "gqa_tile" plant: :math:`j \\bmod H_{kv}`)."""
    if plant == "gqa_tile":
        return jnp.tile(x, (1, n_rep, 1))
    return jnp.repeat(x, n_rep, axis=1)


def _linear(key: jax.Array, d_in: int, d_out: int, dtype: Any) -> eqx.nn.Linear:
    return eqx.nn.Linear(d_in, d_out, use_bias=False, key=key, dtype=dtype)


class Attention(eqx.Module):
    wq: eqx.nn.Linear
    wk: eqx.nn.Linear
    wv: eqx.nn.Linear
    wo: eqx.nn.Linear
    plant: str | None = eqx.field(static=True)

    def __init__(self, key: jax.Array, dtype: Any, plant: str | None) -> None:
        k = jax.random.split(key, 4)
        dh = DIM // N_HEADS
        self.wq = _linear(k[0], DIM, N_HEADS * dh, dtype)
        self.wk = _linear(k[1], DIM, N_KV_HEADS * dh, dtype)
        self.wv = _linear(k[2], DIM, N_KV_HEADS * dh, dtype)
        self.wo = _linear(k[3], N_HEADS * dh, DIM, dtype)
        self.plant = plant

    def __call__(self, x: jax.Array, out: dict[str, jax.Array], p: str) -> jax.Array:
        n, dh = x.shape[0], DIM // N_HEADS
        xq, xk, xv = (jax.vmap(w)(x) for w in (self.wq, self.wk, self.wv))
        out[f"{p}.wq"], out[f"{p}.wk"], out[f"{p}.wv"] = xq, xk, xv
        xq = apply_rotary(xq.reshape(n, N_HEADS, dh), self.plant)
        xk = apply_rotary(xk.reshape(n, N_KV_HEADS, dh), self.plant)
        out[f"{p}.q_rot"], out[f"{p}.k_rot"] = xq, xk
        keys = repeat_kv(xk, N_HEADS // N_KV_HEADS, self.plant)
        values = repeat_kv(xv.reshape(n, N_KV_HEADS, dh), N_HEADS // N_KV_HEADS, self.plant)
        out[f"{p}.keys"], out[f"{p}.values"] = keys, values
        scores = jnp.einsum("thd,shd->hts", xq, keys) / jnp.sqrt(jnp.asarray(dh, x.dtype))
        mask = jnp.tril(jnp.ones((n, n), dtype=bool))
        scores = jnp.where(mask[None], scores, -jnp.inf)
        attn = jnp.einsum("hts,shd->thd", jax.nn.softmax(scores, axis=-1), values)
        out[f"{p}.output"] = attn  # (n, H, d_h)
        merged = attn.reshape(n, N_HEADS * dh)
        out[f"{p}.merged"] = merged
        out[f"{p}.wo"] = jax.vmap(self.wo)(merged)
        return out[f"{p}.wo"]


class FeedForward(eqx.Module):
    w1: eqx.nn.Linear
    w2: eqx.nn.Linear
    w3: eqx.nn.Linear
    plant: str | None = eqx.field(static=True)

    def __init__(self, key: jax.Array, dtype: Any, plant: str | None) -> None:
        k = jax.random.split(key, 3)
        self.w1, self.w3 = _linear(k[0], DIM, HIDDEN, dtype), _linear(k[1], DIM, HIDDEN, dtype)
        self.w2 = _linear(k[2], HIDDEN, DIM, dtype)
        self.plant = plant

    def __call__(self, x: jax.Array, out: dict[str, jax.Array], p: str) -> jax.Array:
        gate, up = jax.vmap(self.w1)(x), jax.vmap(self.w3)(x)
        out[f"{p}.w1"], out[f"{p}.w3"] = gate, up
        h = jax.nn.silu(up) * gate if self.plant == "swiglu" else jax.nn.silu(gate) * up
        out[f"{p}.hidden"] = h
        out[f"{p}.w2"] = jax.vmap(self.w2)(h)
        return out[f"{p}.w2"]


class TransformerBlock(eqx.Module):
    attention_norm: RMSNorm
    attention: Attention
    ffn_norm: RMSNorm
    feed_forward: FeedForward

    def __init__(self, key: jax.Array, dtype: Any, plant: str | None) -> None:
        k1, k2 = jax.random.split(key)
        self.attention_norm = RMSNorm(jnp.ones(DIM, dtype), EPS, plant)
        self.attention = Attention(k1, dtype, plant)
        self.ffn_norm = RMSNorm(jnp.ones(DIM, dtype), EPS, plant)
        self.feed_forward = FeedForward(k2, dtype, plant)

    def __call__(self, x: jax.Array, out: dict[str, jax.Array], p: str) -> jax.Array:
        hn = self.attention_norm(x)
        out[f"{p}.attention_norm"] = hn
        h = x + self.attention(hn, out, f"{p}.attention")
        out[f"{p}.h"] = h
        hn = self.ffn_norm(h)
        out[f"{p}.ffn_norm"] = hn
        y = h + self.feed_forward(hn, out, f"{p}.feed_forward")
        out[f"{p}.out"] = y
        return y


class Transformer(eqx.Module):
    tok_embeddings: eqx.nn.Embedding
    layers: list[TransformerBlock]
    norm: RMSNorm
    output: eqx.nn.Linear

    def __init__(self, key: jax.Array, dtype: Any = jnp.float64, plant: str | None = None
                 ) -> None:
        keys = jax.random.split(key, N_LAYERS + 2)
        self.tok_embeddings = eqx.nn.Embedding(VOCAB, DIM, key=keys[0], dtype=dtype)
        self.layers = [TransformerBlock(k, dtype, plant) for k in keys[1:-1]]
        self.norm = RMSNorm(jnp.ones(DIM, dtype), EPS, None)
        self.output = _linear(keys[-1], DIM, VOCAB, dtype)

    def __call__(self, tokens: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        out: dict[str, jax.Array] = {}
        h = self.tok_embeddings.weight[tokens]
        out["tok_embeddings"] = h
        for i, layer in enumerate(self.layers):
            h = layer(h, out, f"layers.{i}")
        h = self.norm(h)
        out["norm"] = h
        return jax.vmap(self.output)(h), out


# --- the map onto nlaverify ---------------------------------------------------------

def graph_config() -> TransformerConfig:
    """The model's configuration as the graph's: Pre-LN RMSNorm, RoPE, GQA, SwiGLU."""
    return TransformerConfig(vocab_size=VOCAB, d_model=DIM, n_heads=N_HEADS,
                             n_kv_heads=N_KV_HEADS, n_blocks=N_LAYERS, d_mlp=HIDDEN,
                             context=MAX_SEQ, norm="rmsnorm", placement="pre",
                             positions="rope", rope_base=ROPE_BASE, mlp="swiglu",
                             norm_eps=EPS, name="llama-equinox")


def load(model: Transformer, p: dict[str, jax.Array]) -> Transformer:
    """The graph's parameters (row convention :math:`XW`) written into the module
    (``eqx.nn.Linear`` holds :math:`W^\\top`)."""
    def where(m: Transformer) -> list[Any]:
        leaves = [m.tok_embeddings.weight, m.norm.weight, m.output.weight]
        for b in m.layers:
            a, f = b.attention, b.feed_forward
            leaves += [b.attention_norm.weight, b.ffn_norm.weight, a.wq.weight, a.wk.weight,
                       a.wv.weight, a.wo.weight, f.w1.weight, f.w3.weight, f.w2.weight]
        return leaves

    new = [p["embed.W_E"], p["final_norm.gamma"], p["unembed.W_U"].T]
    for layer in range(N_LAYERS):
        g = f"blocks.{layer}"
        new += [p[f"{g}.norm1.gamma"], p[f"{g}.norm2.gamma"], p[f"{g}.attn.q.W_Q"].T,
                p[f"{g}.attn.k.W_K"].T, p[f"{g}.attn.v.W_V"].T, p[f"{g}.attn.out.W_O"].T,
                p[f"{g}.mlp.gate.W_gate"].T, p[f"{g}.mlp.up.W_up"].T, p[f"{g}.mlp.out.W_down"].T]
    return eqx.tree_at(where, model, new)


#: graph node -> the model's key, with a layout where its heads are last
INTERMEDIATES: dict[str, Any] = {
    "embed": "tok_embeddings", "x0": "tok_embeddings",
    "blocks.{l}.norm1": "layers.{l}.attention_norm",
    "blocks.{l}.attn.q": "layers.{l}.attention.wq",
    "blocks.{l}.attn.k": "layers.{l}.attention.wk",
    "blocks.{l}.attn.v": "layers.{l}.attention.wv",
    "blocks.{l}.attn.q_heads": ("layers.{l}.attention.wq", heads_first(N_HEADS)),
    "blocks.{l}.attn.k_heads": ("layers.{l}.attention.wk", heads_first(N_KV_HEADS)),
    "blocks.{l}.attn.v_heads": ("layers.{l}.attention.wv", heads_first(N_KV_HEADS)),
    "blocks.{l}.attn.q_rope": ("layers.{l}.attention.q_rot", heads_first(N_HEADS)),
    "blocks.{l}.attn.k_rope": ("layers.{l}.attention.k_rot", heads_first(N_KV_HEADS)),
    "blocks.{l}.attn.k_shared": ("layers.{l}.attention.keys", heads_first(N_HEADS)),
    "blocks.{l}.attn.v_shared": ("layers.{l}.attention.values", heads_first(N_HEADS)),
    "blocks.{l}.attn.heads": ("layers.{l}.attention.output", heads_first(N_HEADS)),
    "blocks.{l}.attn.merged": "layers.{l}.attention.merged",
    "blocks.{l}.attn.out": "layers.{l}.attention.wo",
    "blocks.{l}.resid1": "layers.{l}.h",
    "blocks.{l}.norm2": "layers.{l}.ffn_norm",
    "blocks.{l}.mlp.gate": "layers.{l}.feed_forward.w1",
    "blocks.{l}.mlp.up": "layers.{l}.feed_forward.w3",
    "blocks.{l}.mlp.act": "layers.{l}.feed_forward.hidden",
    "blocks.{l}.mlp.out": "layers.{l}.feed_forward.w2",
    "blocks.{l}.resid2": "layers.{l}.out",
    "final_norm": "norm",
}


def verify(plant: str | None = None, dtype: str = "float64", seed: int = 0,
           n: int = 8, gradients: bool = True) -> CheckReport:
    """Build the model (with ``plant``) in ``dtype`` and check it against the graph."""
    from nlaverify.graph.run import sample_data

    # built under one jit (eager initialisation compiles every random draw apart)
    model = eqx.filter_jit(lambda key: Transformer(key, getattr(jnp, dtype), plant))(
        jax.random.PRNGKey(seed))
    data = sample_data(VOCAB, n, seed)
    return check_model(model, graph_config(), None, np.asarray(data["tokens"]),
                       targets=data["targets"], load=load, intermediates=INTERMEDIATES,
                       seed=seed, gradients=gradients,
                       subject=f"llama-equinox{'' if plant is None else f' (plant {plant})'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plant", choices=sorted(PLANTS), default=None)
    ap.add_argument("--dtype", choices=("float64", "float32", "bfloat16"), default="float64")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    report = verify(args.plant, args.dtype, args.seed)
    print(report)
    if args.plant is not None:  # the planted bug must be found, at its node
        expected = f"node {PLANTS[args.plant]}"
        found = report.first_failure.check if report.first_failure else None
        print(f"planted {args.plant!r}: expected at {expected!r}, found at {found!r}")
        return 0 if found == expected else 1
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
