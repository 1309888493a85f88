r"""An independent JAX Mamba-2 language model (Dao & Gu 2024, *Transformers are SSMs*; Hugging
Face ``Mamba2ForCausalLM``): the oracle :mod:`nlaverify.ops.ssm2` composed is checked against
(``tests/test_mamba2_model.py``), and the oracle of the pipeline's ``mamba2`` mixer.

It shares no code with the ops. The scan is computed in its **dual, attention-like form**
(the state-space duality, §3 of the paper; identity ``ssm_state_space_duality``), not as a
recurrence: for head :math:`j` with :math:`a_t = \Delta_{tj} A_j` and the cumulative sums
:math:`c_t = \sum_{r\le t} a_r`,

.. math:: y_{t} = \sum_{s \le t} e^{c_t - c_s}\,(C_t\cdot B_s)\,\Delta_{s}\,x_{s}
   + D\,x_t ,

one masked :math:`n\times n` matrix per head (``jnp.einsum``), where the ops carry the state
with :meth:`~nlaverify.backends.base.Namespace.linear_recurrence`. The convolution is
``jax.lax.conv_general_dilated`` (depthwise over :math:`x, B, C` together, as Hugging Face's
``conv1d``); the norms are written out.

The forward:

.. math:: h = E[\text{ids}];\quad h \mathrel{+}= \mathrm{Mixer}_\ell(\mathrm{RMS}_\ell(h));
   \quad \text{logits} = \mathrm{RMS}_f(h)\,W_{\text{head}},

.. math:: [z, \xi, \delta] = u W_{in},\ [x, B, C] = \operatorname{silu}(\operatorname{conv}
   (\xi)),\ y = \mathrm{SSD}(x, \delta, A, B, C, D),\ \mathrm{Mixer}(u) =
   \mathrm{GatedRMS}(y, z)\,W_{out} .

**Parameters**: a flat ``dict``, weights ``(d_in, d_out)`` (:math:`Y = XW`): ``emb`` ``(V,
d)``, ``final_norm.gamma``, ``head`` ``(d, V)`` (the transposed embedding when tied); per
block ``i``, prefixed ``blocks.{i}.``: ``norm1.gamma``; ``mamba2.in_z.W``, ``in_x.W`` ``(d,
E)``, ``in_B.W``, ``in_C.W`` ``(d, GN)``, ``in_dt.W`` ``(d, H)`` (Hugging Face's ``in_proj``
split), ``conv_x.w`` ``(E, k)``, ``conv_B.w``, ``conv_C.w`` ``(GN, k)`` and their ``.b``
(Hugging Face's depthwise ``conv1d`` split by channel, as the graph holds it; convolved here
as one), ``dt.b``, ``A_log``, ``D`` ``(H,)``, ``norm.gamma`` ``(E,)``, ``out.W`` ``(E, d)``:
the names of the graph's nodes (:func:`nlaverify.graph.build_mamba2.mamba2_block`), so
:func:`graph_mamba2_mixer` is the pipeline's oracle of ``mixer="mamba2"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from nlaverify.config import ConfigError
from nlaverify.interop.hf_config_mamba import MAMBA_FIXED, refuse_unfixed
from nlaverify.interop.hf_config_mamba2 import _no_limit

__all__ = ["Mamba2Shape", "gated_rms", "graph_mamba2_mixer", "mamba2_logits", "mamba2_mixer",
           "params_from_hf", "ssd_dual"]

Params = Mapping[str, Any]


@dataclass(frozen=True)
class Mamba2Shape:
    """The sizes of a Mamba-2 model (Hugging Face ``Mamba2Config``'s names in comments)."""

    n_blocks: int           # num_hidden_layers
    n_heads: int            # num_heads
    head_dim: int           # head_dim
    n_groups: int           # n_groups
    state: int              # state_size
    conv: int               # conv_kernel
    eps: float = 1e-5       # layer_norm_epsilon

    @property
    def d_inner(self) -> int:
        return self.n_heads * self.head_dim

    @classmethod
    def from_hf(cls, config: Any) -> Mamba2Shape:
        r"""From a Hugging Face ``Mamba2Config`` (or its dict). Raises :class:`ConfigError`
        naming an option this model does not implement, as the interop loader
        (:mod:`nlaverify.interop.hf_config_mamba2`) does: ``use_bias`` true,
        ``use_conv_bias`` false, ``hidden_act`` other than ``silu``, a ``time_step_limit``
        other than :math:`(0, \infty)` (an absent key is HF's default)."""
        get = config.get if isinstance(config, dict) else (lambda k: getattr(config, k))
        opt = (lambda k, d: config.get(k, d)) if isinstance(config, dict) else (
            lambda k, d: getattr(config, k, d))
        refuse_unfixed(lambda key: opt(key, MAMBA_FIXED[key]), "Mamba2Shape.from_hf")
        limit = opt("time_step_limit", (0.0, float("inf")))
        if not _no_limit(limit):
            raise ConfigError(f"Mamba2Shape.from_hf: field 'time_step_limit': only (0.0, inf) "
                              f"is implemented (HF clamps softplus(dt + dt_bias) to it), got "
                              f"{limit!r}")
        return cls(get("num_hidden_layers"), get("num_heads"), get("head_dim"),
                   get("n_groups"), get("state_size"), get("conv_kernel"),
                   get("layer_norm_epsilon"))


def _rms(x: Any, g: Any, eps: float) -> Any:
    return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * g


def gated_rms(y: Any, z: Any, gamma: Any, groups: int, eps: float) -> Any:
    r"""Hugging Face's ``Mamba2RMSNormGated`` on ``y``, ``z`` ``(..., E)``: :math:`v = y\odot
    \operatorname{silu}(z)`, RMS-normalized in ``groups`` groups of :math:`E/G` channels,
    times :math:`\gamma`."""
    E = y.shape[-1]
    v = (y * jax.nn.silu(z)).reshape(*y.shape[:-1], groups, E // groups)
    return _rms(v, 1.0, eps).reshape(y.shape) * gamma


def _depthwise_causal(x: Any, w: Any, b: Any) -> Any:
    """PyTorch's ``conv1d(groups=C, padding=k-1)[..., :n]`` on ``x`` ``(n, C)``, ``w``
    ``(C, k)``."""
    n, C = x.shape
    k = w.shape[-1]
    lhs = jnp.pad(x.T, ((0, 0), (k - 1, 0)))[None]
    out = jax.lax.conv_general_dilated(lhs, w[:, None, :], (1,), "VALID",
                                       dimension_numbers=("NCH", "OIH", "NCH"),
                                       feature_group_count=C)
    return out[0].T[:n] + b


def ssd_dual(x: Any, Dt: Any, A: Any, B: Any, C: Any) -> Any:
    r"""The scan without its skip, in the dual form of the module's docstring: ``x`` ``(n, H,
    P)``, ``Dt`` ``(n, H)`` (after softplus), ``A`` ``(H,)``, ``B``, ``C`` ``(n, H, N)`` (per
    head); ``(n, H, P)``."""
    n = x.shape[0]
    c = jnp.cumsum(Dt * A, axis=0)                                          # (n, H)
    causal = jnp.tril(jnp.ones((n, n), dtype=bool))
    decay = jnp.exp(jnp.where(causal[:, :, None], c[:, None, :] - c[None, :, :], -jnp.inf))
    scores = jnp.einsum("thn,shn->tsh", C, B) * decay                      # (t, s, H)
    return jnp.einsum("tsh,shp->thp", scores, x * Dt[..., None])


def mamba2_mixer(p: Params, name: str, u: Any, shape: Mamba2Shape,
                 rec: dict[str, Any] | None = None) -> Any:
    r"""Mamba-2's mixer on one sequence ``u`` ``(n, d)`` (Hugging Face ``Mamba2Mixer``'s
    ``torch_forward``, no cache, no padding mask). Records ``{name}.in_z`` ... ``{name}.out``
    in ``rec``."""
    H, P, G, N = shape.n_heads, shape.head_dim, shape.n_groups, shape.state
    E, n = shape.d_inner, u.shape[0]
    z = u @ p[f"{name}.in_z.W"]
    xi = jnp.concatenate([u @ p[f"{name}.in_x.W"], u @ p[f"{name}.in_B.W"],
                          u @ p[f"{name}.in_C.W"]], axis=-1)
    dt = u @ p[f"{name}.in_dt.W"]
    parts = ("conv_x", "conv_B", "conv_C")
    conv = _depthwise_causal(xi, jnp.concatenate([p[f"{name}.{c}.w"] for c in parts]),
                             jnp.concatenate([p[f"{name}.{c}.b"] for c in parts]))
    act = jax.nn.silu(conv)
    x, B, C = act[:, :E], act[:, E:E + G * N], act[:, E + G * N:]
    per_head = lambda M: jnp.repeat(M.reshape(n, G, N), H // G, axis=1)  # noqa: E731
    Dt = jax.nn.softplus(dt + p[f"{name}.dt.b"])
    A = -jnp.exp(p[f"{name}.A_log"])
    xh = x.reshape(n, H, P)
    scan = ssd_dual(xh, Dt, A, per_head(B), per_head(C)) + p[f"{name}.D"][:, None] * xh
    y = scan.reshape(n, E)
    normed = gated_rms(y, z, p[f"{name}.norm.gamma"], G, shape.eps)
    out = normed @ p[f"{name}.out.W"]
    if rec is not None:
        pre = {"in_x": xi[:, :E], "in_B": xi[:, E:E + G * N], "in_C": xi[:, E + G * N:]}
        convs = {"conv_x": conv[:, :E], "conv_B": conv[:, E:E + G * N],
                 "conv_C": conv[:, E + G * N:]}
        rec.update({f"{name}.{k}": v for k, v in {
            "in_z": z, "in_dt": dt, **pre, **convs, "x": x, "B": B, "C": C, "x_heads": xh,
            "B_groups": B.reshape(n, G, N), "C_groups": C.reshape(n, G, N), "scan": scan,
            "y": y, "norm": normed, "out": out}.items()})
    return out


def mamba2_logits(p: Params, ids: Any, shape: Mamba2Shape,
                  rec: dict[str, Any] | None = None) -> Any:
    """Logits ``(n, V)`` of one sequence of token ids ``(n,)`` (the module's forward)."""
    h = p["emb"][ids]
    for i in range(shape.n_blocks):
        b = f"blocks.{i}"
        h = h + mamba2_mixer(p, f"{b}.mamba2", _rms(h, p[f"{b}.norm1.gamma"], shape.eps),
                             shape, rec)
        if rec is not None:
            rec[f"{b}.resid1"] = h
    return _rms(h, p["final_norm.gamma"], shape.eps) @ p["head"]


def _check_state_keys(state: Mapping[str, Any], shape: Mamba2Shape) -> None:
    """Refuse, by key, a state dict of options this model does not implement: projection
    biases (``use_bias=True``), a convolution without bias (``use_conv_bias=False``)."""
    for i in range(shape.n_blocks):
        h = f"backbone.layers.{i}.mixer."
        for proj in ("in_proj", "out_proj"):
            if f"{h}{proj}.bias" in state:
                raise ConfigError(f"params_from_hf: key '{h}{proj}.bias': projection biases "
                                  f"(Mamba2Config use_bias=True) are not implemented")
        if f"{h}conv1d.bias" not in state:
            raise ConfigError(f"params_from_hf: key '{h}conv1d.bias' is missing: a "
                              f"convolution without bias (Mamba2Config use_conv_bias=False) "
                              f"is not implemented")


def params_from_hf(state: Mapping[str, Any], shape: Mamba2Shape, *,
                   tied: bool = False) -> dict[str, Any]:
    r"""The flat parameters of the module's docstring from a Hugging Face ``Mamba2ForCausalLM``
    state dict (arrays, ``(out, in)`` PyTorch layout): ``in_proj`` split into
    :math:`[z, x, B, C, \delta]` (``intermediate_size``, then the convolution's
    :math:`E + 2GN`, then ``num_heads``), the convolution's ``(C, 1, k)`` weight squeezed."""
    E, GN, H = shape.d_inner, shape.n_groups * shape.state, shape.n_heads
    _check_state_keys(state, shape)
    emb = jnp.asarray(state["backbone.embeddings.weight"])
    p: dict[str, Any] = {"emb": emb,
                         "final_norm.gamma": jnp.asarray(state["backbone.norm_f.weight"]),
                         "head": emb.T if tied else jnp.asarray(state["lm_head.weight"]).T}
    for i in range(shape.n_blocks):
        h, q = f"backbone.layers.{i}.", f"blocks.{i}.mamba2."
        W = jnp.asarray(state[f"{h}mixer.in_proj.weight"]).T
        cuts = [0, E, 2 * E, 2 * E + GN, 2 * E + 2 * GN, 2 * E + 2 * GN + H]
        for k, part in enumerate(("in_z", "in_x", "in_B", "in_C", "in_dt")):
            p[f"{q}{part}.W"] = W[:, cuts[k]:cuts[k + 1]]
        p[f"blocks.{i}.norm1.gamma"] = jnp.asarray(state[f"{h}norm.weight"])
        w = jnp.asarray(state[f"{h}mixer.conv1d.weight"])[:, 0, :]
        b = jnp.asarray(state[f"{h}mixer.conv1d.bias"])
        for part, lo, hi in (("x", 0, E), ("B", E, E + GN), ("C", E + GN, E + 2 * GN)):
            p[f"{q}conv_{part}.w"], p[f"{q}conv_{part}.b"] = w[lo:hi], b[lo:hi]
        for ours, theirs in (("dt.b", "dt_bias"), ("A_log", "A_log"), ("D", "D"),
                             ("norm.gamma", "norm.weight")):
            p[f"{q}{ours}"] = jnp.asarray(state[f"{h}mixer.{theirs}"])
        p[f"{q}out.W"] = jnp.asarray(state[f"{h}mixer.out_proj.weight"]).T
    return p


def graph_mamba2_mixer(p: Params, name: str, u: Any, cfg: Any, rec: dict[str, Any]) -> Any:
    """:func:`mamba2_mixer` with the sizes of a :class:`~nlaverify.config.TransformerConfig`
    (``ssm_heads``, ``ssm_groups``, ``ssm_state``, ``ssm_conv``, ``d_inner``; the gated norm's
    epsilon ``norm_eps``), recording the graph's node names: the ``mamba2`` mixer of
    :mod:`nlaverify.models.jax_transformer`."""
    shape = Mamba2Shape(cfg.n_blocks, cfg.ssm_heads, cfg.d_inner // cfg.ssm_heads,
                        cfg.ssm_groups, cfg.ssm_state, cfg.ssm_conv, cfg.norm_eps)
    return mamba2_mixer(p, name, u, shape, rec)
