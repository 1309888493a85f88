r"""The loop every recurrent decoder shares (Mamba, Mamba-2, RWKV-4; Baptista, Stuart & Tran
§5.3.4: :math:`v_{k+1} = f(v_k, h_k)`): ``check_decode``'s step protocol ``step(tokens,
start, cache) -> (logits, cache, intermediates)`` around a per-token function that carries
one state per block, and the graph's ``logits`` row of the last hidden state.

Written with ``jax.numpy`` only; each decoder keeps its own block (its independent forms).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax.numpy as jnp

from nlaverify.config import TransformerConfig

__all__ = ["recurrent_step", "unembed"]


def unembed(p: Mapping[str, Any], cfg: TransformerConfig, x: Any) -> Any:
    r"""The graph's ``logits`` node for one hidden state ``x`` ``(d,)``: :math:`xW_U + b_U`
    (the transposed embedding when tied), **untempered** (``check_decode`` compares the
    ``logits`` node; the temperature divides them at ``logits_tempered``, after it). A
    final soft-cap is the caller's (the attention-free decoders refuse it)."""
    z = x @ (p["embed.W_E"].T if cfg.tied_embeddings else p["unembed.W_U"])
    return z + p["unembed.b_U"] if cfg.unembed_bias else z


def recurrent_step(cfg: TransformerConfig, token: Callable[[Any, int, list, dict], Any],
                   new_state: Callable[[TransformerConfig], Any], nodes: Sequence[str]
                   ) -> Callable[..., tuple[Any, list, dict[str, Any]]]:
    """``check_decode``'s ``step``: ``token(id, position, states, rec)`` returns one row of
    logits, updating ``states`` (one per block; ``new_state(cfg)`` each when the cache is
    empty) and appending to ``rec[f"blocks.{l}.{node}"]`` for each of ``nodes``; the
    intermediates are those lists stacked over the chunk's positions."""
    def step(tokens: Any, start: int, cache: Any) -> tuple[Any, list, dict[str, Any]]:
        states = list(cache) if cache is not None else [new_state(cfg)
                                                        for _ in range(cfg.n_blocks)]
        rec: dict[str, list] = {f"blocks.{layer}.{k}": [] for layer in range(cfg.n_blocks)
                                for k in nodes}
        rows = [token(t, start + i, states, rec)
                for i, t in enumerate(jnp.asarray(tokens).reshape(-1))]
        return jnp.stack(rows), states, {k: jnp.stack(v) for k, v in rec.items()}

    return step
