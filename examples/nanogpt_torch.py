r"""A nanoGPT-style GPT in PyTorch, verified node by node by :func:`nlaverify.check.check_model`.

The model is written the way Karpathy's nanoGPT (``model.py``) writes it: Pre-LN blocks,
learned positions, a fused ``c_attn`` projection :math:`[Q\,|\,K\,|\,V]`, causal attention
by an explicit mask, an exact-erf GELU MLP, LayerNorm with an optional bias, the head tied
to the token embedding, and ``forward(idx, targets)`` returning ``(logits, loss)``. Its
configuration maps onto a :class:`~nlaverify.config.TransformerConfig` (:func:`graph_config`),
the graph's parameters load into it (:func:`load`: PyTorch's ``Linear`` stores
:math:`W^\top`, and ``c_attn`` concatenates :math:`W_Q, W_K, W_V`), and the module map
:data:`INTERMEDIATES` tells ``check_model`` where each graph node is found.

Run ``python examples/nanogpt_torch.py`` (float64), ``--dtype float32``, or plant a bug with
``--plant scale`` (attention scaled by :math:`1/d_h` instead of :math:`1/\sqrt{d_h}`),
``--plant ln_bias`` (LayerNorm without its bias), ``--plant mask`` (the causal mask off by
one: each token sees the next) or ``--plant gelu`` (the tanh GELU in place of the exact one):
the report names the node where it first shows (:data:`PLANTS`).

Seed: Baggag & Saad §3.3-§3.9 (the blocks of a decoder-only Transformer).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
from torch.nn import functional as F

from nlaverify.check import CheckReport, check_model
from nlaverify.check.model import chunk, compose, heads_first
from nlaverify.config import TransformerConfig

#: planted bug -> the graph node where check_model must name it
PLANTS = {"scale": "blocks.0.attn.heads", "ln_bias": "blocks.0.norm1",
          "mask": "blocks.0.attn.heads", "gelu": "blocks.0.mlp.act"}


@dataclass
class GPTConfig:
    block_size: int = 16
    vocab_size: int = 23
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 8
    dropout: float = 0.0
    bias: bool = True
    plant: str | None = None  # a deliberate bug, for the demonstration (PLANTS)


class LayerNorm(nn.Module):
    """LayerNorm but with an optional bias (PyTorch doesn't support simply bias=False)."""

    def __init__(self, ndim: int, bias: bool, plant: str | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None
        self.plant = plant

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        bias = None if self.plant == "ln_bias" else self.bias
        return F.layer_norm(input, self.weight.shape, self.weight, bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # key, query, value projections for all heads, but in a batch
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.plant = config.n_head, config.n_embd, config.plant
        # causal mask to ensure that attention is only applied to the left in the input
        # sequence (the "mask" plant lets each token see one token ahead)
        diagonal = 1 if config.plant == "mask" else 0
        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size),
                                                diagonal=diagonal)
                             .view(1, 1, config.block_size, config.block_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()  # batch size, sequence length, embedding dimensionality (n_embd)
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        # manual implementation of attention
        scale = 1.0 / (k.size(-1) if self.plant == "scale" else math.sqrt(k.size(-1)))
        att = (q @ k.transpose(-2, -1)) * scale
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU(approximate="tanh" if config.plant == "gelu" else "none")
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias, plant=config.plant)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias, plant=config.plant)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        _, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)  # shape (t)
        tok_emb = self.transformer.wte(idx)  # token embeddings of shape (b, t, n_embd)
        pos_emb = self.transformer.wpe(pos)  # position embeddings of shape (t, n_embd)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)
        else:  # inference-time mini-optimization: only forward the lm_head on the last position
            logits = self.lm_head(x[:, [-1], :])
            loss = None
        return logits, loss


# --- the map onto nlaverify ---------------------------------------------------------

def graph_config(c: GPTConfig) -> TransformerConfig:
    """nanoGPT's configuration as the graph's: Pre-LN LayerNorm (eps 1e-5), learned
    positions, exact GELU with a 4d hidden layer, biases everywhere but the tied head."""
    return TransformerConfig(vocab_size=c.vocab_size, d_model=c.n_embd, n_heads=c.n_head,
                             n_blocks=c.n_layer, d_mlp=4 * c.n_embd, context=c.block_size,
                             norm="layernorm", placement="pre", positions="learned",
                             mlp="gelu_erf", attn_bias=c.bias, mlp_bias=c.bias,
                             tied_embeddings=True, norm_eps=1e-5, name="nanoGPT")


def load(model: GPT, p: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The graph's parameters (row convention :math:`XW + b`) as nanoGPT's state dict
    (``nn.Linear`` holds :math:`W^\\top`; ``c_attn`` is :math:`[W_Q | W_K | W_V]`)."""
    s = {"transformer.wte.weight": p["embed.W_E"], "transformer.wpe.weight": p["pos.W_P"],
         "transformer.ln_f.weight": p["final_norm.gamma"],
         "transformer.ln_f.bias": p["final_norm.beta"]}
    for layer in range(model.config.n_layer):
        g, h = f"blocks.{layer}", f"transformer.h.{layer}"
        s[f"{h}.ln_1.weight"], s[f"{h}.ln_1.bias"] = p[f"{g}.norm1.gamma"], p[f"{g}.norm1.beta"]
        s[f"{h}.ln_2.weight"], s[f"{h}.ln_2.bias"] = p[f"{g}.norm2.gamma"], p[f"{g}.norm2.beta"]
        s[f"{h}.attn.c_attn.weight"] = torch.cat(
            [p[f"{g}.attn.{x}.W_{x.upper()}"] for x in "qkv"], dim=1).T
        s[f"{h}.attn.c_attn.bias"] = torch.cat([p[f"{g}.attn.{x}.b_{x.upper()}"] for x in "qkv"])
        s[f"{h}.attn.c_proj.weight"] = p[f"{g}.attn.out.W_O"].T
        s[f"{h}.attn.c_proj.bias"] = p[f"{g}.attn.out.b_O"]
        s[f"{h}.mlp.c_fc.weight"], s[f"{h}.mlp.c_fc.bias"] = (p[f"{g}.mlp.in.W_in"].T,
                                                            p[f"{g}.mlp.in.b_in"])
        s[f"{h}.mlp.c_proj.weight"], s[f"{h}.mlp.c_proj.bias"] = (p[f"{g}.mlp.out.W_out"].T,
                                                                p[f"{g}.mlp.out.b_out"])
    return s


def intermediates(c: GPTConfig) -> dict[str, Any]:
    """Graph node -> nanoGPT module (its output, or ``:input``), with a layout where nanoGPT's
    differs: the fused ``c_attn`` output is :math:`[Q | K | V]`, and the heads are merged
    before ``c_proj``, so the attention node is read from its input, heads first."""
    H = c.n_head
    a = "transformer.h.{l}.attn"
    taps: dict[str, Any] = {"embed": "transformer.wte", "x0": "transformer.drop"}
    taps.update({
        "blocks.{l}.norm1": "transformer.h.{l}.ln_1",
        "blocks.{l}.attn.heads": (f"{a}.c_proj:input", heads_first(H)),
        "blocks.{l}.attn.merged": f"{a}.c_proj:input",
        "blocks.{l}.attn.out": f"{a}.c_proj",
        "blocks.{l}.resid1": "transformer.h.{l}.ln_2:input",
        "blocks.{l}.norm2": "transformer.h.{l}.ln_2",
        "blocks.{l}.mlp.in": "transformer.h.{l}.mlp.c_fc",
        "blocks.{l}.mlp.act": "transformer.h.{l}.mlp.gelu",
        "blocks.{l}.mlp.out": "transformer.h.{l}.mlp.c_proj",
        "blocks.{l}.resid2": "transformer.h.{l}",
        "final_norm": "transformer.ln_f",
        "logits": "lm_head",
    })
    for i, x in enumerate("qkv"):
        taps[f"blocks.{{l}}.attn.{x}"] = (f"{a}.c_attn", chunk(i, 3))
        taps[f"blocks.{{l}}.attn.{x}_heads"] = (f"{a}.c_attn", compose(chunk(i, 3),
                                                                     heads_first(H)))
    return taps


def verify(plant: str | None = None, dtype: str = "float64", seed: int = 0,
           n: int = 8, gradients: bool = True) -> CheckReport:
    """Build the nanoGPT model (with ``plant``), check it against the graph in ``dtype``."""
    from nlaverify.graph.run import sample_data

    c = GPTConfig(plant=plant)
    model = GPT(c).to(getattr(torch, dtype))
    data = sample_data(c.vocab_size, n, seed)  # tokens and their next tokens
    return check_model(model, graph_config(c), None, data["tokens"], targets=data["targets"],
                       load=load, intermediates=intermediates(c), seed=seed,
                       gradients=gradients,
                       call=lambda m, idx, targets: m(idx, targets),
                       subject=f"nanoGPT{'' if plant is None else f' (plant {plant})'}")


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
