"""An independent decoder-only Transformer in JAX: the oracle of the whole pipeline.

Written from the equations of Baggag & Saad §3.2-3.13 and Baptista, Stuart & Tran
§5 with ``jax.numpy`` and ``jax.nn`` only: it imports nothing from
:mod:`nlaverify.ops` or :mod:`nlaverify.graph`, and its gradient is ``jax.grad``.
Parameters use the graph's node names (``blocks.{l}.attn.q.W_Q`` ...), so the
same dictionary feeds both. Formulations deliberately differ from the ops where
the mathematics allows: RoPE by complex multiplication, GQA by ``jnp.repeat``,
top-k routing by ``jax.lax.top_k``, cross-entropy by ``jax.nn.log_softmax``, Mamba's block
by ``jax.lax.conv_general_dilated`` and ``jax.lax.scan`` (:mod:`.jax_mamba`), and the
linearized attentions (FAVOR, FAVOR+, elu+1, Shen, Linformer; Baggag & Saad §4.3-4.4) as
explicit ``n x n`` quadratic forms where the ops use the linear order and prefix
sums. The random features are the config's own draws
(:meth:`~nlaverify.config.TransformerConfig.feature_draws`), the graph's fixed inputs.

One traversal, :func:`intermediates`, computes the model and records the residual
stream and the sublayer outputs under the names of the graph nodes holding the same
values (see its docstring); :func:`logits` and :func:`loss` are built on it, so a
disagreement with the graph can be traced to the first node where the two part.
Tokens are one sequence ``(n,)`` or a batch ``(B, n)`` (mapped with ``jax.vmap``);
a target equal to :data:`IGNORE_INDEX` marks a position without a target.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from nlaverify.config import NO_MLP, TransformerConfig
from nlaverify.config_moe import sparse_block
from nlaverify.models.decode_loop import recurrent_step, unembed
from nlaverify.models.jax_attention import _attention, _proj, _softcap
from nlaverify.models.jax_mamba import mamba_mixer, mamba_state, mamba_step
from nlaverify.models.jax_mamba2 import graph_mamba2_mixer
from nlaverify.models.jax_mla import mla
from nlaverify.models.jax_moe import moe_mlp
from nlaverify.models.jax_rwkv import graph_channel_mix, graph_time_mix

jax.config.update("jax_enable_x64", True)

Params = Mapping[str, Any]
Record = dict[str, Any]

#: a target with this value contributes nothing to the loss (PyTorch's convention)
IGNORE_INDEX = -100


def _norm(p: Params, name: str, x: Any, cfg: TransformerConfig) -> Any:
    # no learned gain (OLMo) or bias (Cohere): 1 and 0
    g = p[f"{name}.gamma"] if cfg.norm_affine else 1.0
    if cfg.norm == "rmsnorm":
        return g * x / jnp.sqrt(jnp.mean(x**2, axis=-1, keepdims=True) + cfg.norm_eps)
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    beta = p[f"{name}.beta"] if cfg.norm_affine and cfg.norm_bias else 0.0
    return g * (x - mu) / jnp.sqrt(var + cfg.norm_eps) + beta


def _act(cfg: TransformerConfig, u: Any) -> Any:
    if cfg.mlp in ("gelu", "geglu"):
        return jax.nn.gelu(u, approximate=True)
    if cfg.mlp == "gelu_erf":
        return jax.nn.gelu(u, approximate=False)
    return jax.nn.silu(u) if cfg.mlp == "swiglu" else jax.nn.relu(u)


def _mlp(p: Params, name: str, x: Any, cfg: TransformerConfig, rec: Record) -> Any:
    if sparse_block(cfg, int(name.split(".")[1])):  # blocks.{l}.mlp: not a dense layer
        return moe_mlp(p, name, x, cfg, rec)
    if cfg.mlp in ("swiglu", "geglu"):
        g = _proj(p, f"{name}.gate", x, "W_gate", "b_gate", cfg.mlp_bias, ("mlp", cfg))
        u = _proj(p, f"{name}.up", x, "W_up", "b_up", cfg.mlp_bias, ("mlp", cfg))
        rec[f"{name}.gate"], rec[f"{name}.up"], rec[f"{name}.act"] = g, u, _act(cfg, g) * u
        rec[f"{name}.out"] = _proj(p, f"{name}.out", rec[f"{name}.act"], "W_down", "b_down",
                                   cfg.mlp_bias, ("mlp", cfg))
        return rec[f"{name}.out"]
    rec[f"{name}.in"] = _proj(p, f"{name}.in", x, "W_in", "b_in", cfg.mlp_bias, ("mlp", cfg))
    rec[f"{name}.act"] = _act(cfg, rec[f"{name}.in"])
    rec[f"{name}.out"] = _proj(p, f"{name}.out", rec[f"{name}.act"], "W_out", "b_out",
                               cfg.mlp_bias, ("mlp", cfg))
    return rec[f"{name}.out"]


def _mix(p: Params, b: str, x: Any, cfg: TransformerConfig, rec: Record, layer: int,
         draw: int) -> Any:
    """Block ``b``'s mixer: attention, Mamba's, RWKV's or Mamba-2's (its scan's dual form)."""
    m = cfg.block_mixer(layer)
    if m != "attention":
        return {"mamba": mamba_mixer, "mamba2": graph_mamba2_mixer, "rwkv": lambda *a: (
            graph_time_mix(*a[:3], a[4]))}[m](p, f"{b}.{m}", x, cfg, rec)
    if cfg.kv_lora_rank:  # DeepSeek-V2's multi-head latent attention
        return mla(p, f"{b}.attn", x, cfg, rec)
    return _attention(p, f"{b}.attn", x, cfg, rec, layer, draw)


def _sinusoidal(n: int, d: int) -> Any:
    pos = jnp.arange(n)[:, None]
    i = jnp.arange(d)[None, :]
    angle = pos / 10000.0 ** ((i - i % 2) / d)
    return jnp.where(i % 2 == 0, jnp.sin(angle), jnp.cos(angle))


def _sequence(params: Params, tokens: Any, cfg: TransformerConfig, draw: int = 0) -> Record:
    """The model on one sequence ``(n,)``, recording its intermediates."""
    rec: Record = {}
    n = tokens.shape[0]
    x = rec["embed"] = params["embed.W_E"][tokens]
    if cfg.embed_scale:
        x = rec["embed_scaled"] = x * jnp.sqrt(jnp.asarray(cfg.d_model, dtype=x.dtype))
    elif cfg.embed_multiplier is not None:  # Granite
        x = rec["embed_scaled"] = cfg.embed_multiplier * x
    if cfg.positions == "learned":
        o = cfg.position_offset  # OPT: position t reads row t + o of the table
        x = x + params["pos.W_P"][o: o + n]
    elif cfg.positions == "sinusoidal":
        x = x + _sinusoidal(n, cfg.d_model)
    rec["x0"] = x
    for layer in range(cfg.n_blocks):
        b = f"blocks.{layer}"
        if cfg.parallel_residual:  # x + Attn(N1(x)) + MLP(N(x)): the block's input, twice
            h = rec[f"{b}.norm1"] = _norm(params, f"{b}.norm1", x, cfg)
            if cfg.parallel_norms == 2:
                h = rec[f"{b}.norm2"] = _norm(params, f"{b}.norm2", x, cfg)
            m = _mlp(params, f"{b}.mlp", h, cfg, rec)
            a = _mix(params, b, rec[f"{b}.norm1"], cfg, rec, layer, draw)
            rec[f"{b}.resid1"] = x + a
            x = rec[f"{b}.resid2"] = x + (a + m)
        elif cfg.placement == "pre":
            if layer == 0 and cfg.block_mixer(0) == "rwkv":  # RWKV's ln0 (HF pre_ln)
                x = rec[f"{b}.ln0"] = _norm(params, f"{b}.ln0", x, cfg)
            h = x
            if cfg.pre_norms:  # OLMo 2 has none: the sublayers read the stream
                h = rec[f"{b}.norm1"] = _norm(params, f"{b}.norm1", x, cfg)
            a = _mix(params, b, h, cfg, rec, layer, draw)
            if cfg.post_norms:  # Gemma 2's sandwich norms
                a = rec[f"{b}.post_norm1"] = _norm(params, f"{b}.post_norm1", a, cfg)
            r = 1.0 if cfg.residual_multiplier is None else cfg.residual_multiplier
            x = rec[f"{b}.resid1"] = x + r * a  # Granite's residual multiplier
            rwkv = cfg.block_mixer(layer) == "rwkv"  # its channel mixing for the MLP
            if cfg.mlp == NO_MLP and not rwkv:  # Mamba's block: x + Mixer(N(x)) only
                continue
            h = x
            if cfg.pre_norms:
                h = rec[f"{b}.norm2"] = _norm(params, f"{b}.norm2", x, cfg)
            m = graph_channel_mix(params, f"{b}.ffn", h, rec) if rwkv else _mlp(
                params, f"{b}.mlp", h, cfg, rec)
            if cfg.post_norms:
                m = rec[f"{b}.post_norm2"] = _norm(params, f"{b}.post_norm2", m, cfg)
            x = rec[f"{b}.resid2"] = x + r * m
        else:
            rec[f"{b}.resid1"] = x + _mix(params, b, x, cfg, rec, layer, draw)
            x = rec[f"{b}.norm1"] = _norm(params, f"{b}.norm1", rec[f"{b}.resid1"], cfg)
            if cfg.mlp == NO_MLP:
                continue
            rec[f"{b}.resid2"] = x + _mlp(params, f"{b}.mlp", x, cfg, rec)
            x = rec[f"{b}.norm2"] = _norm(params, f"{b}.norm2", rec[f"{b}.resid2"], cfg)
    if cfg.final_norm:
        x = rec["final_norm"] = _norm(params, "final_norm", x, cfg)
    z = x @ (params["embed.W_E"].T if cfg.tied_embeddings else params["unembed.W_U"])
    z = z + params["unembed.b_U"] if cfg.unembed_bias else z
    if cfg.final_softcap is not None:
        rec["logits_uncapped"], z = z, _softcap(z, cfg.final_softcap)
    rec["logits"] = z
    if cfg.temperature != 1.0:
        rec["logits_tempered"] = rec["logits"] / cfg.temperature
    return rec


def intermediates(params: Params, tokens: Any, cfg: TransformerConfig,
                  targets: Any = None, *, draw: int = 0) -> dict[str, Any]:
    r"""Every recorded value of the model, keyed by the graph node holding the same value.

    Keys (``b = blocks.{l}``): ``embed``, ``x0`` (the stream entering block 0);
    ``b.norm1``, ``b.norm2`` (the norms' outputs); ``b.attn.q|k|v`` (projections,
    ``(n, h d_h)``), ``b.attn.q_rope``/``k_rope`` (RoPE only), ``b.attn.k_shared``/
    ``v_shared`` (grouped-query attention only, after sharing), ``b.attn.heads``
    (``(H, n, d_h)``), ``b.attn.out``; ``b.mlp.out`` and, by MLP kind, ``b.mlp.in``,
    ``b.mlp.gate``, ``b.mlp.up``, ``b.mlp.act`` or ``b.mlp.scores`` (router); for a Mamba
    block (``cfg.block_mixer``) ``b.mamba.in_x``, ``in_z``, ``conv``, ``conv_act``,
    ``dt_low``, ``B``, ``C``, ``dt``, ``scan``, ``out`` in place of ``b.attn.*`` (Mamba-2:
    ``b.mamba2.*``, :func:`~.jax_mamba2.mamba2_mixer`); for an RWKV
    block ``b.rwkv.time_mix`` and ``b.ffn.channel_mix`` (and ``blocks.0.ln0``); the
    residual sums ``b.resid1 = s + \operatorname{Attn}(\cdot)``, ``b.resid2 = s +
    \operatorname{MLP}(\cdot)``; ``final_norm`` (when present), ``logits`` and, when
    the temperature :math:`T \ne 1`, ``logits_tempered`` :math:`= Z/T`; ``loss`` (a
    scalar, over the whole batch) when ``targets`` are given.

    Pre-LN (Baggag & Saad §3.9): the stream after each sublayer *is* ``b.resid1`` /
    ``b.resid2``. Post-LN: ``b.resid1`` is the sum before the norm and the stream is
    ``b.norm1 = N(b.resid1)`` (likewise ``b.norm2``), exactly as in the graph. Parallel
    (``parallel_residual``): ``b.resid2`` :math:`= s + (\operatorname{Attn} +
    \operatorname{MLP})`, both of the block's input ``s`` (the MLP of the shared ``b.norm1``
    or of ``b.norm2``), ``b.resid1 = s + \operatorname{Attn}``. With
    ``final_softcap`` :math:`c`, ``logits`` :math:`= c\tanh(Z/c)` of ``logits_uncapped``
    :math:`Z`. Without an MLP (``mlp="none"``) a block records no ``b.norm2``, ``b.mlp.*``
    or ``b.resid2``.

    Args:
        tokens: ``(n,)`` or a batch ``(B, n)`` of token ids; with a batch, every value
            gains a leading axis ``B``.
        targets: optional, the tokens' shape (see :func:`loss`).
        draw: the redraw number of the random features (FAVOR, FAVOR+:
            ``cfg.feature_draws(layer, draw)``; the graph's constants are draw 0).
    """
    tokens = jnp.asarray(tokens)
    params = {k: jnp.asarray(v) for k, v in params.items()}
    if tokens.ndim == 1:
        rec = _sequence(params, tokens, cfg, draw)
    elif tokens.ndim == 2:
        rec = jax.vmap(lambda t: _sequence(params, t, cfg, draw))(tokens)
    else:
        raise ValueError(f"intermediates: argument 'tokens': expected shape (n,) or (B, n), "
                         f"got {tuple(tokens.shape)}")
    if targets is not None:
        rec["loss"] = _mean_nll(_output(rec), targets)
    return rec


def _output(rec: Mapping[str, Any]) -> Any:
    return rec["logits_tempered"] if "logits_tempered" in rec else rec["logits"]


def logits(params: Params, tokens: Any, cfg: TransformerConfig, *, draw: int = 0) -> Any:
    r"""Logits :math:`Z/T \in \mathbb R^{n \times V}` (or ``(B, n, V)``), already divided
    by the temperature :math:`T` (``draw``: see :func:`intermediates`)."""
    return _output(intermediates(params, tokens, cfg, draw=draw))


def _mean_nll(z: Any, targets: Any) -> Any:
    r""":math:`-\frac1{|K|}\sum_{i \in K} \log \operatorname{softmax}(z_i)_{t_i}` over the
    kept positions :math:`K = \{i : t_i \ne` ``IGNORE_INDEX``:math:`\}` of the whole batch
    (NaN when nothing is kept, as 0/0)."""
    targets = jnp.asarray(targets)
    if targets.shape != z.shape[:-1]:
        raise ValueError(f"loss: argument 'targets': expected shape {tuple(z.shape[:-1])} (the "
                         f"tokens' shape), got {tuple(targets.shape)}")
    keep = targets != IGNORE_INDEX
    logp = jax.nn.log_softmax(z, axis=-1)
    picked = jnp.take_along_axis(logp, jnp.where(keep, targets, 0)[..., None], axis=-1)[..., 0]
    return -jnp.sum(jnp.where(keep, picked, 0.0)) / jnp.sum(keep)


def loss(params: Params, tokens: Any, targets: Any, cfg: TransformerConfig) -> Any:
    r"""Mean next-token cross-entropy :math:`-\frac1{|K|}\sum_{i\in K} \log p_{i,t_i}` over
    the positions :math:`K` whose target is not :data:`IGNORE_INDEX` (all of them
    normally, so :math:`|K| = n`, or :math:`Bn` for a batch)."""
    return _mean_nll(logits(params, tokens, cfg), targets)


def make_value_and_grad(cfg: TransformerConfig) -> Callable[..., Any]:
    """``jit(value_and_grad(loss))`` for ``cfg``: ``f(params, tokens, targets)``."""
    return jax.jit(jax.value_and_grad(lambda p, t, y: loss(p, t, y, cfg)))


def make_value_grad_and_logits(cfg: TransformerConfig) -> Callable[..., Any]:
    """One jitted ``f(params, tokens, targets) -> ((loss, logits), grads)`` for ``cfg``:
    the loss, its gradient and the (tempered) logits of one traversal, one compilation."""
    def f(p: Params, t: Any, y: Any) -> tuple[Any, Any]:
        z = logits(p, t, cfg)
        return _mean_nll(z, y), z

    return jax.jit(jax.value_and_grad(f, has_aux=True))


def make_mamba_decode_step(cfg: TransformerConfig, params: Params) -> Any:
    r"""A recurrent decoder for a model whose every block is Mamba's (``check_decode``'s
    step protocol: ``step(tokens, start, cache) -> (logits, cache, intermediates)``): each
    token goes through the blocks one at a time with the carried states of
    :func:`~nlaverify.models.jax_mamba.mamba_step` (the cache: one per block), never
    seeing the sequence again.
    Intermediates: ``blocks.{l}.mamba.out`` and ``blocks.{l}.resid1`` of the chunk's
    positions. Learned, RoPE-free or absent positions (the blocks read no position)."""
    if any(cfg.block_mixer(layer) != "mamba" for layer in range(cfg.n_blocks)):
        raise ValueError(f"make_mamba_decode_step: every block must be 'mamba', got mixer="
                         f"{cfg.mixer!r}")
    if cfg.positions == "sinusoidal" or cfg.parallel_residual or cfg.post_norms or (
            not cfg.pre_norms) or (
            cfg.embed_multiplier is not None or cfg.residual_multiplier is not None):
        raise ValueError("make_mamba_decode_step: sinusoidal positions, parallel residuals, "
                         "post-sublayer norms and Granite's multipliers are not supported")
    p = {k: jnp.asarray(v) for k, v in params.items()}

    def block(layer: int, x: Any, state: Any, rec: dict[str, list]) -> tuple[Any, Any]:
        b = f"blocks.{layer}"
        if cfg.placement == "pre":
            y, state = mamba_step(p, f"{b}.mamba", _norm(p, f"{b}.norm1", x, cfg), state)
            x = x + y
            rec[f"{b}.resid1"].append(x)
            if cfg.mlp != NO_MLP:
                x = x + _mlp(p, f"{b}.mlp", _norm(p, f"{b}.norm2", x[None], cfg), cfg, {})[0]
        else:
            y, state = mamba_step(p, f"{b}.mamba", x, state)
            rec[f"{b}.resid1"].append(x + y)
            x = _norm(p, f"{b}.norm1", x + y, cfg)
            if cfg.mlp != NO_MLP:
                x = _norm(p, f"{b}.norm2", x + _mlp(p, f"{b}.mlp", x[None], cfg, {})[0], cfg)
        rec[f"{b}.mamba.out"].append(y)
        return x, state

    def token(tok: Any, pos: int, states: list, rec: dict[str, list]) -> Any:
        x = p["embed.W_E"][tok]
        if cfg.embed_scale:
            x = x * jnp.sqrt(jnp.asarray(cfg.d_model, dtype=x.dtype))
        if cfg.positions == "learned":
            x = x + p["pos.W_P"][pos + cfg.position_offset]
        for layer in range(cfg.n_blocks):
            x, states[layer] = block(layer, x, states[layer], rec)
        if cfg.final_norm:
            x = _norm(p, "final_norm", x, cfg)
        z = unembed(p, cfg, x)
        return z if cfg.final_softcap is None else _softcap(z, cfg.final_softcap)

    return recurrent_step(cfg, token, mamba_state, ("mamba.out", "resid1"))
