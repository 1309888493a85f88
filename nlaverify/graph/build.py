"""Build the computational graph of a decoder-only Transformer, shapes only.

Nodes carry ``kind`` (``"input"``, ``"param"`` or ``"op"``), ``shape`` (ints, and the
string ``"n"`` for the sequence length, bound at evaluation), and for parameters a
``component`` label (for :func:`parameter_counts`) and an ``init`` rule. No array
is allocated (GPT-3 175B builds in milliseconds) except the random features of FAVOR and
FAVOR+ and the fixed gains of norms without learned ones, constant inputs that hold their
``value`` (:func:`graph_constants`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np

from nlaverify.config import GATED_MLPS, NO_MLP, TransformerConfig
from nlaverify.config_moe import sparse_block
from nlaverify.graph.build_attention import attention_sublayer
from nlaverify.graph.build_mamba2 import mamba2_block
from nlaverify.graph.build_moe import moe_sublayer
from nlaverify.graph.core import add_input, add_op

Shape = tuple[int | str, ...]


class _Builder:
    def __init__(self, config: TransformerConfig | None) -> None:
        self.g = nx.DiGraph(config=config)

    def param(self, name: str, shape: Shape, component: str, init: tuple[str, float],
              block: int | None = None) -> str:
        self.g.add_node(name, kind="param", shape=tuple(shape), component=component,
                        init=init, block=block)
        return name

    def op(self, name: str, op: str, inputs: list[str], shape: Shape, **static: Any) -> str:
        add_op(self.g, name, op, inputs, **static)
        self.g.nodes[name]["shape"] = tuple(shape)
        return name

    def project(self, name: str, x: str, d_in: int, d_out: int, bias: bool, component: str,
                block: int | None, wname: str = "W", bname: str = "b",
                target: str | None = None) -> str:
        """``x W (+ b)`` with fresh parameters ``name.W`` (and ``name.b``); when the config
        adapts ``target`` with LoRA, ``x (W + s AB) (+ b)`` with ``name.lora_A`` ``(d_in, r)``
        and ``name.lora_B`` ``(r, d_out)`` (component ``lora``)."""
        W = self.param(f"{name}.{wname}", (d_in, d_out), f"{component}.{wname}",
                       ("normal", d_in**-0.5), block)
        b = None if not bias else self.param(f"{name}.{bname}", (d_out,),
                                             f"{component}.{bname}", ("normal", 0.1), block)
        cfg = self.g.graph.get("config")
        if target is not None and cfg is not None and cfg.lora_adapts(target):
            r = cfg.lora_rank
            # B is drawn, not zero, so that every LoRA cotangent is exercised by the checks;
            # a fine-tuning run starts from B = 0 (nlaverify.finetune.lora_init)
            A = self.param(f"{name}.lora_A", (d_in, r), "lora", ("normal", d_in**-0.5), block)
            B = self.param(f"{name}.lora_B", (r, d_out), "lora", ("normal", 0.1), block)
            if b is None:
                return self.op(name, "lora_linear", [x, W, A, B], ("n", d_out),
                               scale=cfg.lora_scale)
            return self.op(name, "lora_affine", [x, W, b, A, B], ("n", d_out),
                           scale=cfg.lora_scale)
        if b is None:
            return self.op(name, "linear", [x, W], ("n", d_out))
        return self.op(name, "affine", [x, W, b], ("n", d_out))

    def norm(self, name: str, x: str, cfg: TransformerConfig, component: str,
             block: int | None) -> str:
        """The block or final norm ``name`` of ``x``: learned gains ``name.gamma`` (and, for a
        LayerNorm, bias ``name.beta``), or, where the config drops them (``norm_affine``,
        ``norm_bias``), constant inputs ``name.gamma`` of ones / ``name.beta`` of zeros: the
        same op, nothing learned (OLMo's LayerNorm; Cohere's without bias)."""
        d = cfg.d_model
        gamma = self.param(f"{name}.gamma", (d,), component, ("one_plus", 0.1), block) if (
            cfg.norm_affine) else self.constant(f"{name}.gamma", np.ones(d))
        if cfg.norm == "rmsnorm":
            return self.op(name, "rmsnorm", [x, gamma], ("n", d), eps=cfg.norm_eps)
        beta = self.param(f"{name}.beta", (d,), component, ("normal", 0.1), block) if (
            cfg.norm_affine and cfg.norm_bias) else self.constant(f"{name}.beta", np.zeros(d))
        return self.op(name, "layernorm", [x, gamma, beta], ("n", d), eps=cfg.norm_eps)

    def constant(self, name: str, value: Any) -> str:
        """A constant input ``name`` holding ``value`` (:func:`graph_constants`)."""
        add_input(self.g, name, value.shape)
        self.g.nodes[name].update(value=value, constant=True)
        return name


def _mamba(b: _Builder, p: str, x: str, cfg: TransformerConfig, block: int) -> str:
    r"""Mamba's block (Gu & Dao 2023, Figure 3; Hugging Face ``MambaMixer``'s parameter
    layout, its ``in_proj`` and ``x_proj`` split by output): with :math:`E` = ``d_inner``,

    .. math:: u = \operatorname{silu}(\operatorname{conv}(x W_x)),\quad \delta = (u W_{\Delta,
       \text{low}}) W_\Delta,\quad B = u W_B,\quad C = u W_C,

    ``scan`` :math:`= \operatorname{mamba\_scan}(u, \delta, A_{\log}, B, C, D, x W_z,
    b_\Delta)` (:func:`nlaverify.ops.ssm.mamba_scan`: :math:`A = -e^{A_{\log}}`,
    :math:`\Delta = \operatorname{softplus}(\delta + b_\Delta)`, gate
    :math:`\operatorname{silu}(xW_z)`), ``out`` :math:`= \text{scan}\, W_{out}`. Nodes
    ``{p}.in_x``, ``in_z``, ``conv``, ``conv_act``, ``dt_low``, ``B``, ``C``, ``dt``,
    ``scan``, ``out``."""
    d, E, N, R, k = cfg.d_model, cfg.d_inner, cfg.ssm_state, cfg.dt_rank, cfg.ssm_conv
    xi = b.project(f"{p}.in_x", x, d, E, False, "mamba.in_proj", block)
    z = b.project(f"{p}.in_z", x, d, E, False, "mamba.in_proj", block)
    w = b.param(f"{p}.conv.w", (E, k), "mamba.conv.w", ("normal", k**-0.5), block)
    cb = b.param(f"{p}.conv.b", (E,), "mamba.conv.b", ("normal", 0.1), block)
    c = b.op(f"{p}.conv", "causal_conv1d", [xi, w, cb], ("n", E))
    u = b.op(f"{p}.conv_act", "silu", [c], ("n", E))
    low = b.project(f"{p}.dt_low", u, E, R, False, "mamba.x_proj", block)
    Bm = b.project(f"{p}.B", u, E, N, False, "mamba.x_proj", block)
    Cm = b.project(f"{p}.C", u, E, N, False, "mamba.x_proj", block)
    dt = b.project(f"{p}.dt", low, R, E, False, "mamba.dt_proj", block)
    dt_b = b.param(f"{p}.dt.b", (E,), "mamba.dt_proj.b", ("normal", 0.5), block)
    A_log = b.param(f"{p}.A_log", (E, N), "mamba.A_log", ("normal", 0.5), block)
    D = b.param(f"{p}.D", (E,), "mamba.D", ("one_plus", 0.1), block)
    y = b.op(f"{p}.scan", "mamba_scan", [u, dt, A_log, Bm, Cm, D, z, dt_b], ("n", E))
    return b.project(f"{p}.out", y, E, d, False, "mamba.out_proj", block)


def _rwkv_time_mix(b: _Builder, p: str, x: str, cfg: TransformerConfig, block: int) -> str:
    r"""RWKV-4's time mixing (Peng et al. 2023; Hugging Face ``RwkvSelfAttention``), node
    ``{p}.time_mix`` (:func:`nlaverify.ops.rwkv_block.time_mix`): with :math:`a` =
    ``rwkv_dim``, mixes :math:`\mu_k, \mu_v, \mu_r \in \mathbb R^d`, ``time_decay``
    (:math:`w = -e^{\text{time\_decay}}`) and ``time_first`` (:math:`u`) in :math:`\mathbb
    R^a`, :math:`W_k, W_v, W_r \in \mathbb R^{d\times a}`, :math:`W_o \in \mathbb R^{a\times
    d}`. The mixes are drawn :math:`\mu \sim N(0, 1/4)` (both tokens weigh in), the decays
    :math:`|w| = e^{\text{time\_decay}}` of order 1 (several past tokens weigh in)."""
    d, a = cfg.d_model, cfg.rwkv_dim
    comp = "rwkv.time_mix"
    mus = [b.param(f"{p}.{m}", (d,), f"{comp}.mix", ("normal", 0.5), block)
           for m in ("mu_k", "mu_v", "mu_r")]
    td = b.param(f"{p}.time_decay", (a,), f"{comp}.time_decay", ("normal", 0.5), block)
    tf = b.param(f"{p}.time_first", (a,), f"{comp}.time_first", ("normal", 0.5), block)
    Ws = [b.param(f"{p}.{w}", (d, a), f"{comp}.{w}", ("normal", d**-0.5), block)
          for w in ("W_k", "W_v", "W_r")]
    Wo = b.param(f"{p}.W_o", (a, d), f"{comp}.W_o", ("normal", a**-0.5), block)
    return b.op(f"{p}.time_mix", "rwkv_time_mix", [x, *mus, td, tf, *Ws, Wo], ("n", d))


def _rwkv_channel_mix(b: _Builder, p: str, x: str, cfg: TransformerConfig, block: int) -> str:
    r"""RWKV-4's channel mixing (Hugging Face ``RwkvFeedForward``), node ``{p}.channel_mix``
    (:func:`nlaverify.ops.rwkv_block.channel_mix`), in place of the MLP: :math:`\mu_k, \mu_r
    \in \mathbb R^d`, :math:`W_k \in \mathbb R^{d\times f}` (:math:`f` = ``d_mlp``),
    :math:`W_r \in \mathbb R^{d\times d}`, :math:`W_v \in \mathbb R^{f\times d}`."""
    d, f = cfg.d_model, cfg.d_mlp
    comp = "rwkv.channel_mix"
    mus = [b.param(f"{p}.{m}", (d,), f"{comp}.mix", ("normal", 0.5), block)
           for m in ("mu_k", "mu_r")]
    Wk = b.param(f"{p}.W_k", (d, f), f"{comp}.W_k", ("normal", d**-0.5), block)
    Wr = b.param(f"{p}.W_r", (d, d), f"{comp}.W_r", ("normal", d**-0.5), block)
    Wv = b.param(f"{p}.W_v", (f, d), f"{comp}.W_v", ("normal", f**-0.5), block)
    return b.op(f"{p}.channel_mix", "rwkv_channel_mix", [x, *mus, Wk, Wr, Wv], ("n", d))


def _mixer(b: _Builder, p: str, x: str, cfg: TransformerConfig, block: int) -> str:
    """Block ``block``'s token mixer (``cfg.block_mixer``): attention at ``{p}.attn``,
    Mamba's block at ``{p}.mamba``, RWKV's time mixing at ``{p}.rwkv`` or Mamba-2's block at
    ``{p}.mamba2``."""
    mixer = cfg.block_mixer(block)
    if mixer == "mamba":
        return _mamba(b, f"{p}.mamba", x, cfg, block)
    if mixer == "rwkv":
        return _rwkv_time_mix(b, f"{p}.rwkv", x, cfg, block)
    if mixer == "mamba2":
        return mamba2_block(b, f"{p}.mamba2", x, cfg, block)
    return attention_sublayer(b, f"{p}.attn", x, cfg, block)


def _ffn(b: _Builder, p: str, x: str, cfg: TransformerConfig, block: int) -> str:
    """Block ``block``'s MLP sublayer: RWKV's channel mixing at ``{p}.ffn`` in an RWKV
    block, else the MLP at ``{p}.mlp``."""
    if cfg.block_mixer(block) == "rwkv":
        return _rwkv_channel_mix(b, f"{p}.ffn", x, cfg, block)
    return _mlp(b, f"{p}.mlp", x, cfg, block)


#: the activation op of each dense (ungated) MLP
DENSE_ACTIVATIONS = {"gelu": "gelu_tanh", "gelu_erf": "gelu_erf", "relu": "relu"}

def graph_constants(graph: nx.DiGraph) -> dict[str, Any]:
    """The values of the graph's constant inputs (the random features drawn from the
    config, :meth:`~nlaverify.config.TransformerConfig.feature_draws`, draw 0), by node:
    fixed, not differentiated, and passed with the data (an entry of the data replaces
    the constant, e.g. a redraw :func:`feature_inputs`)."""
    return {n: a["value"] for n, a in graph.nodes(data=True) if a.get("constant")}


def feature_inputs(config: TransformerConfig, draw: int = 0, *,
                   fix_signs: bool = True) -> dict[str, Any]:
    r"""The random features of every block, redraw number ``draw``, keyed by the graph's
    constant input nodes (``blocks.{l}.attn.features.W`` ``(H, m, d_h)`` and, for FAVOR,
    ``.b`` ``(H, m)``): pass them with the data to redraw (a trainer redrawing every
    :math:`s` steps passes ``draw`` :math:`= \lfloor t/s \rfloor`) or to plant the
    unfixed-QR bias (``fix_signs=False``)."""
    return {f"blocks.{layer}.attn.features.{key}": value
            for layer in range(config.n_blocks) if config.block_mixer(layer) == "attention"
            for key, value in config.feature_draws(layer, draw, fix_signs=fix_signs).items()}


def _mlp(b: _Builder, p: str, x: str, cfg: TransformerConfig, block: int) -> str:
    d, m = cfg.d_model, cfg.d_mlp
    if sparse_block(cfg, block):  # the experts, or a dense block of moe_dense_layers
        return moe_sublayer(b, p, x, cfg, block)
    comp = "mlp"
    if cfg.mlp in GATED_MLPS:
        a = b.project(f"{p}.gate", x, d, m, cfg.mlp_bias, comp, block, "W_gate", "b_gate",
                      "mlp")
        u = b.project(f"{p}.up", x, d, m, cfg.mlp_bias, comp, block, "W_up", "b_up", "mlp")
        h = b.op(f"{p}.act", cfg.mlp, [a, u], ("n", m))
        return b.project(f"{p}.out", h, m, d, cfg.mlp_bias, comp, block, "W_down", "b_down",
                         "mlp")
    u = b.project(f"{p}.in", x, d, m, cfg.mlp_bias, comp, block, "W_in", "b_in", "mlp")
    h = b.op(f"{p}.act", DENSE_ACTIVATIONS[cfg.mlp], [u], ("n", m))
    return b.project(f"{p}.out", h, m, d, cfg.mlp_bias, comp, block, "W_out", "b_out", "mlp")


def build_transformer(config: TransformerConfig) -> nx.DiGraph:
    r"""The graph of ``config`` from token ids to the mean next-token cross-entropy.

    Inputs ``tokens`` and ``targets`` (both ``(n,)``); intermediate nodes ``x0`` (the
    residual stream entering block 0), ``blocks.{l}.resid1`` / ``resid2`` (the stream
    after attention / MLP), ``logits`` (soft-capped when ``final_softcap`` is set, the
    unembedding then ``logits_uncapped``), ``loss``. Pre-LN:
    :math:`x \leftarrow x + \operatorname{Attn}(N(x))`, :math:`x \leftarrow x +
    \operatorname{MLP}(N(x))`; Post-LN: :math:`x \leftarrow N(x + \operatorname{Attn}(x))`,
    :math:`x \leftarrow N(x + \operatorname{MLP}(x))` (Baggag & Saad §3.9). Parallel
    (``parallel_residual``; Wang & Komatsuzaki 2021, Black et al. 2022): ``resid1`` :math:`=
    x + \operatorname{Attn}(N_1(x))`, ``resid2`` :math:`=` ``resid1`` :math:`+
    \operatorname{MLP}(N(x))`, :math:`N` the shared ``norm1`` or NeoX's ``norm2``. Without
    an MLP (``mlp="none"``, Mamba's block) a block ends at ``resid1`` (pre-LN) or ``norm1``
    (post-LN): no ``norm2``, ``mlp.*`` or ``resid2``. An RWKV block (``mixer="rwkv"``) has
    ``rwkv.time_mix`` in place of attention and ``ffn.channel_mix`` in place of the MLP,
    and block 0 normalises the embedding first (``blocks.0.ln0``, Hugging Face's
    ``pre_ln``). A Mamba-2 block (``mixer="mamba2"``) has ``mamba2.in_z`` ... ``mamba2.out``
    in place of attention (:func:`~nlaverify.graph.build_mamba2.mamba2_block`). Gemma 2
    (``post_norms``): ``resid1``
    :math:`= x + N'_1(\operatorname{Attn}(N_1(x)))` with ``post_norm1``, likewise
    ``post_norm2`` on the MLP's output; ``query_pre_attn_scalar`` :math:`s` scales the rotated
    queries by :math:`\sqrt{d_h/s}` (``attn.q_scaled``) so the attention's
    :math:`1/\sqrt{d_h}` gives :math:`qk^T/\sqrt s`; ``window_layers`` picks the windowed
    blocks, whose ``attn.q_rope``/``k_rope`` use ``rope_local_base`` unscaled when it is set
    (Gemma 3). Granite: ``embed_scaled`` is the embedding times ``embed_multiplier``;
    ``residual_multiplier`` scales each sublayer's output (``scaled1``, ``scaled2``). OLMo 2:
    ``pre_norms=False`` drops ``norm1``/``norm2`` (the sublayers read the stream), and
    ``qk_norm_joint`` normalises ``attn.q``/``attn.k`` as rows of :math:`h\,d_h` before the
    split (``attn.q_norm``, ``attn.k_norm`` of shape ``(n, h d_h)``).
    """
    cfg, b = config, _Builder(config)
    d, V = cfg.d_model, cfg.vocab_size
    add_input(b.g, "tokens", ("n",))
    add_input(b.g, "targets", ("n",))
    b.g.nodes["tokens"]["dtype"] = b.g.nodes["targets"]["dtype"] = "int"
    W_E = b.param("embed.W_E", (V, d), "embedding", ("normal", 1.0))
    x = b.op("embed", "embed", ["tokens", W_E], ("n", d))
    if cfg.embed_scale:  # Gemma: the embedding times sqrt(d), rounded to the working dtype
        x = b.op("embed_scaled", "scale", [x], ("n", d), c=math.sqrt(d))
    elif cfg.embed_multiplier is not None:  # Granite: times embedding_multiplier
        x = b.op("embed_scaled", "scale", [x], ("n", d), c=cfg.embed_multiplier)
    if cfg.positions == "learned":
        # OPT: context + o rows, position p reads row p + o (the rows below o never read)
        o = cfg.position_offset
        W_P = b.param("pos.W_P", (cfg.context + o, d), "positions", ("normal", 0.5))
        x = b.op("x0", "add_learned_positions", [x, W_P], ("n", d),
                 **({"offset": o} if o else {}))
    elif cfg.positions == "sinusoidal":
        x = b.op("x0", "add_positions", [x], ("n", d))
    else:
        x = b.op("x0", "scale", [x], ("n", d), c=1)  # the named stream entry, x_0
    for layer in range(cfg.n_blocks):
        p = f"blocks.{layer}"
        if cfg.parallel_residual:  # GPT-J, GPT-NeoX: both sublayers read the block's input
            h = b.norm(f"{p}.norm1", x, cfg, "norms.blocks", layer)
            a = _mixer(b, p, h, cfg, layer)
            if cfg.parallel_norms == 2:
                h = b.norm(f"{p}.norm2", x, cfg, "norms.blocks", layer)
            m = _mlp(b, f"{p}.mlp", h, cfg, layer)
            x = b.op(f"{p}.resid2", "residual_add", [
                b.op(f"{p}.resid1", "residual_add", [x, a], ("n", d)), m], ("n", d))
        elif cfg.placement == "pre":
            if layer == 0 and cfg.block_mixer(0) == "rwkv":  # RWKV's ln0 of the embedding
                x = b.norm(f"{p}.ln0", x, cfg, "norms.blocks", layer)
            h = b.norm(f"{p}.norm1", x, cfg, "norms.blocks", layer) if cfg.pre_norms else x
            a = _mixer(b, p, h, cfg, layer)
            if cfg.post_norms:  # Gemma 2's sandwich: N(sublayer output) before the add
                a = b.norm(f"{p}.post_norm1", a, cfg, "norms.blocks", layer)
            r = cfg.residual_multiplier
            if r is not None:  # Granite: x + r F(N(x))
                a = b.op(f"{p}.scaled1", "scale", [a], ("n", d), c=r)
            x = b.op(f"{p}.resid1", "residual_add", [x, a], ("n", d))
            if cfg.mlp == NO_MLP and cfg.block_mixer(layer) != "rwkv":
                continue
            h = b.norm(f"{p}.norm2", x, cfg, "norms.blocks", layer) if cfg.pre_norms else x
            m = _ffn(b, p, h, cfg, layer)
            if cfg.post_norms:
                m = b.norm(f"{p}.post_norm2", m, cfg, "norms.blocks", layer)
            if r is not None:
                m = b.op(f"{p}.scaled2", "scale", [m], ("n", d), c=r)
            x = b.op(f"{p}.resid2", "residual_add", [x, m], ("n", d))
        else:
            a = _mixer(b, p, x, cfg, layer)
            x = b.norm(f"{p}.norm1", b.op(f"{p}.resid1", "residual_add", [x, a], ("n", d)),
                       cfg, "norms.blocks", layer)
            if cfg.mlp == NO_MLP:
                continue
            m = _mlp(b, f"{p}.mlp", x, cfg, layer)
            x = b.norm(f"{p}.norm2", b.op(f"{p}.resid2", "residual_add", [x, m], ("n", d)),
                       cfg, "norms.blocks", layer)
    if cfg.final_norm:
        x = b.norm("final_norm", x, cfg, "norms.final", None)
    # with a final cap (Gemma 2) the unembedding is ``logits_uncapped`` and ``logits`` the
    # capped c tanh(z/c): every reader of the logits sees the model's output
    raw = "logits" if cfg.final_softcap is None else "logits_uncapped"
    if cfg.tied_embeddings:
        z = b.op(raw, "unembed_tied", [x, W_E], ("n", V))
    else:
        W_U = b.param("unembed.W_U", (d, V), "unembedding", ("normal", d**-0.5))
        if cfg.unembed_bias:  # GPT-J, Phi: lm_head with a bias
            b_U = b.param("unembed.b_U", (V,), "unembedding", ("normal", 0.1))
            z = b.op(raw, "affine", [x, W_U, b_U], ("n", V))
        else:
            z = b.op(raw, "linear", [x, W_U], ("n", V))
    if cfg.final_softcap is not None:
        z = b.op("logits", "softcap", [z], ("n", V), cap=cfg.final_softcap)
    if cfg.temperature != 1.0:
        z = b.op("logits_tempered", "scale", [z], ("n", V), c=1.0 / cfg.temperature)
    b.op("loss", "cross_entropy", [z, "targets"], ())
    return b.g


def build_mlp(sizes: list[int]) -> nx.DiGraph:
    r"""The MLP of Baggag & Saad §2.1 as a graph (e.g. ``[400, 100, 100, 10]``):
    :math:`s_l = z_{l-1} W_l + b_l`, :math:`z_l = \tanh(s_l)` on hidden layers, the last
    layer affine, loss :math:`\tfrac12\lVert\hat y - y\rVert^2` (inputs ``x``, ``y``)."""
    b = _Builder(None)
    add_input(b.g, "x", ("n", sizes[0]))
    add_input(b.g, "y", ("n", sizes[-1]))
    z = "x"
    for layer in range(1, len(sizes)):
        s = b.project(f"layer{layer}", z, sizes[layer - 1], sizes[layer], True, "mlp", layer)
        z = s if layer == len(sizes) - 1 else b.op(f"z{layer}", "tanh", [s], ("n", sizes[layer]))
    b.op("loss", "half_squared_error", [z, "y"], ())
    return b.g


@dataclass(frozen=True)
class ParameterCounts:
    """Parameter counts by component, per block, and in total."""

    by_component: dict[str, int]
    per_block: dict[int, int]
    norms_per_block: dict[int, int]
    total: int = field(default=0)

    def as_dict(self) -> dict[str, Any]:
        return {"by_component": self.by_component, "per_block": self.per_block,
                "norms_per_block": self.norms_per_block, "total": self.total}


def parameter_counts(graph: nx.DiGraph) -> ParameterCounts:
    """Count parameters from shapes alone (no weights exist)."""
    comp: dict[str, int] = {}
    per_block: dict[int, int] = {}
    norms: dict[int, int] = {}
    for _, attrs in graph.nodes(data=True):
        if attrs["kind"] != "param":
            continue
        size = 1
        for s in attrs["shape"]:
            size *= int(s)
        comp[attrs["component"]] = comp.get(attrs["component"], 0) + size
        if attrs["block"] is not None:
            per_block[attrs["block"]] = per_block.get(attrs["block"], 0) + size
            if attrs["component"] == "norms.blocks":
                norms[attrs["block"]] = norms.get(attrs["block"], 0) + size
    return ParameterCounts(dict(sorted(comp.items())), per_block, norms, sum(comp.values()))
