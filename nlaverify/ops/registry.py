"""The table of ops: each forward next to its VJP, with argument shapes.

One :class:`OpSpec` per op feeds everything that is generic over ops: the
exact proofs (``sympy.diff`` of the forward against the VJP on the SymPy
namespace), the JAX-autodiff and mpmath cross-checks, the finite-difference
checks, the hypothesis strategies and the mutation tests. A new op added here
is proved and tested everywhere at once.

The record types (:class:`Arg`, :class:`OpSpec`) and the fixed proof inputs
(:func:`fixed_routing_mask`, :func:`with_ignored`) live in :mod:`nlaverify.ops.opspec` and are
re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nlaverify.config import RopeScaling
from nlaverify.errors import UnknownNameError
from nlaverify.ops import (
    activations,
    embedding,
    linear,
    linear_attention,
    lora,
    loss,
    moe,
    norms,
    rotary,
    sdpa,
    softmaxes,
)
from nlaverify.ops import softcap as _softcap
from nlaverify.ops import ssm_specs as _ssm_specs
from nlaverify.ops.opspec import Arg, ArgKind, OpSpec, fixed_routing_mask, with_ignored

__all__ = ["OPS", "Arg", "ArgKind", "OpSpec", "R", "fixed_routing_mask", "get_op",
           "op_signature", "with_ignored"]


def _even(key: str) -> Callable[[dict[str, int]], dict[str, int]]:
    return lambda s: {**s, key: 2 * max(1, s[key] // 2)}


def _multiple(key: str, of: int) -> Callable[[dict[str, int]], dict[str, int]]:
    return lambda s: {**s, key: of * max(1, s[key] // of)}


def _norm_amplification(args: list[Any]) -> float:
    r"""The cancellation of the mean subtraction, :math:`\max(1, \max|x| / \min\sigma)`: the
    factor by which a normalization amplifies relative error beyond its inputs' magnitudes."""
    import numpy as np

    x = np.asarray(args[0], dtype=np.float64)
    c = x - x.mean(axis=-1, keepdims=True)
    sigma = float(np.sqrt((c * c).mean(axis=-1) + 1e-5).min())
    return max(1.0, float(np.abs(x).max()) / sigma)


def _norm_condition(args: list[Any]) -> float:
    r"""Normalization amplifies relative error by :math:`\max|x-\mu| / \min\sigma`
    (:func:`_norm_amplification`), on top of the input magnitudes."""
    from nlaverify.tolerance import magnitude_condition

    return magnitude_condition(*args) * _norm_amplification(args)


def _spec(name, fwd, vjp, args, seed, stmt, proof, ranges, **kw) -> OpSpec:
    return OpSpec(name, fwd, vjp, tuple(args), seed, stmt, proof, ranges, **kw)


def R(name: str, dims: tuple[str | int, ...], kind: ArgKind = "real",
      ignore: int | None = None) -> Arg:
    return Arg(name, dims, kind, ignore)
_NUM = (1, 4)


def _kernel_amplification(causal: bool) -> Callable[[list[Any]], float]:
    r"""The cancellation of kernel attention's normaliser at ``[Qf, Kf, V]``,
    :math:`\max(1, \max_i \sum_j |s_{ij}| / |\sum_j s_{ij}|)` with :math:`s = (Q_f K_f^\top)
    \circ M` (features of either sign can make :math:`D` small; positive ones give 1)."""
    def amplification(args: list[Any]) -> float:
        import numpy as np

        Qf, Kf = (np.asarray(a, dtype=np.float64) for a in args[:2])
        S = Qf @ np.swapaxes(Kf, -1, -2)
        if causal:
            S = S * np.tril(np.ones(S.shape[-2:]))
        return max(1.0, float(np.max(np.abs(S).sum(-1) / np.abs(S.sum(-1)))))

    return amplification


def _kernel_condition(causal: bool) -> Callable[[list[Any]], float]:
    r"""Condition of :func:`~nlaverify.ops.linear_attention.kernel_attention` at
    ``[Qf, Kf, V]``: input magnitudes times the cancellation of the normaliser
    (:func:`_kernel_amplification`)."""
    amplification = _kernel_amplification(causal)

    def condition(args: list[Any]) -> float:
        from nlaverify.tolerance import magnitude_condition

        return magnitude_condition(*args) * amplification(args)

    return condition


def _linear_attention_specs() -> list[OpSpec]:
    """The ops of :mod:`nlaverify.ops.linear_attention` (Baggag & Saad §4.3, §4.4)."""
    la = linear_attention
    small = (1, 3)
    qkv = [R("Q", ("n", "d")), R("K", ("n", "d")), R("V", ("n", "d_v"))]
    qkv_sizes = {"n": small, "d": small, "d_v": (1, 2)}
    kernel_stmt = (r"\bar Y = [G, -\operatorname{rowsum}(G\odot O)]/D,\ "
                   r"\bar Q_f = \bar Y (K_f^\top C)^\top,\ \bar K_f = C\,\bar Y^\top Q_f,\ "
                   r"\bar V = (K_f Q_f^\top \bar Y)_{:, :d_v}")
    causal_stmt = (r"\text{as kernel attention, with prefix sums } S_i = \textstyle"
                   r"\sum_{j\le i} K_{f,j} C_j^\top,\ \bar Q_{f,i} = S_i \bar Y_i,\ "
                   r"R_j = \textstyle\sum_{i\ge j} Q_{f,i}\bar Y_i^\top,\ "
                   r"\bar K_{f,j} = R_j C_j")
    favor_stmt = (r"\bar{\tilde X} = \operatorname{trig\_vjp}(D_X \bar X_f) + "
                  r"\operatorname{rowsum}(\bar X_f\odot X_f)\,\tilde x,\ \bar X = "
                  r"\bar{\tilde X}/d^{1/4}\ (X \in \{Q, K\},\ X_f = D_X\phi(\tilde X))")
    plus_stmt = (r"\bar Z = \bar X_f\odot X_f,\ \bar X = (\bar Z W - \operatorname{rowsum}"
                 r"(\bar Z)\,\tilde x)/d^{1/4}\ (X_f = e^{Z - c}/\sqrt m\text{; the shift }c"
                 r"\text{ cancels: no cotangent})")
    out = []
    for causal in (False, True):
        pre, st = ("causal_", {"causal": True}) if causal else ("", {})
        out += [
            _spec(pre + "kernel_attention", la.kernel_attention, la.kernel_attention_vjp,
                  [R("Qf", ("n", "m")), R("Kf", ("n", "m")), R("V", ("n", "d_v"))],
                  "Baggag & Saad §4.3", causal_stmt if causal else kernel_stmt,
                  {"n": 2, "m": 2, "d_v": 1}, {"n": small, "m": small, "d_v": (1, 2)},
                  static=st, condition=_kernel_condition(causal),
                  amplification=_kernel_amplification(causal)),
            _spec(pre + "favor_attention", la.favor_attention, la.favor_attention_vjp,
                  [*qkv, R("W", ("m", "d"), "fixed"), R("b", ("m",), "fixed")],
                  "Baggag & Saad §4.4", favor_stmt, {"n": 2, "d": 1, "d_v": 1, "m": 2},
                  {**qkv_sizes, "m": (8, 12)}, static=st),
            _spec(pre + "favor_plus_attention", la.favor_plus_attention,
                  la.favor_plus_attention_vjp, [*qkv, R("W", ("m", "d"), "fixed")],
                  "Baggag & Saad §4.4", plus_stmt, {"n": 2, "d": 1, "d_v": 1, "m": 2},
                  {**qkv_sizes, "m": small}, static=st),
            _spec(pre + "elu1_attention", la.elu1_attention, la.elu1_attention_vjp, qkv,
                  "Baggag & Saad §4.3",
                  r"\bar Q = \bar Q_f\odot\phi'(Q),\ \bar K = \bar K_f\odot\phi'(K),\ "
                  # d = 2: with one feature phi(q_i) cancels from its row (no Q cotangent)
                  r"\phi = \operatorname{elu} + 1", {"n": 2, "d": 2, "d_v": 1}, qkv_sizes,
                  static=st),
        ]
    out += [
        _spec("elu1", la.elu1, la.elu1_vjp, [R("x", ("n", "d"))], "Baggag & Saad §4.3",
              r"\bar x = g\odot(\mathbb 1[x>0] + e^{x}\,\mathbb 1[x\le 0])",
              {"n": 1, "d": 2}, {"n": _NUM, "d": _NUM}),
        _spec("trig_features", la.trig_features, la.trig_features_vjp,
              [R("X", ("n", "d")), R("W", ("m", "d"), "fixed"), R("b", ("m",), "fixed")],
              "Baggag & Saad §4.4",
              r"\bar X = -\bigl(G\odot\sqrt{2/m}\,\sin(XW^\top + b)\bigr)W",
              {"n": 1, "d": 2, "m": 2}, {"n": small, "d": small, "m": small}),
        _spec("positive_features", la.positive_features, la.positive_features_vjp,
              [R("X", ("n", "d")), R("W", ("m", "d"), "fixed")], "Baggag & Saad §4.4",
              r"\bar Z = G\odot\Phi,\ \bar X = \bar Z W - \operatorname{rowsum}(\bar Z)\,x",
              {"n": 1, "d": 2, "m": 2}, {"n": small, "d": small, "m": small}),
        _spec("hyperbolic_features", la.hyperbolic_features, la.hyperbolic_features_vjp,
              [R("X", ("n", "d")), R("W", ("m", "d"), "fixed")], "Baggag & Saad §4.4",
              r"\bar E = G\odot\Phi,\ \bar X = (\bar E_+ - \bar E_-)W - "
              r"\operatorname{rowsum}(\bar E)\,x", {"n": 1, "d": 2, "m": 1},
              {"n": small, "d": small, "m": small}),
        _spec("efficient_attention", la.efficient_attention, la.efficient_attention_vjp, qkv,
              "Baggag & Saad §4.3",
              r"\bar X = P_Q^\top G,\ \bar V = P_K\bar X,\ \bar Q = \operatorname{softmax\_vjp}"
              r"_{\mathrm{rows}}(G X^\top),\ \bar K = \operatorname{softmax\_vjp}_{\mathrm{cols}}"
              r"(V\bar X^\top)", {"n": 2, "d": 2, "d_v": 1}, qkv_sizes),
        _spec("linformer_attention", la.linformer_attention, la.linformer_attention_vjp,
              [*qkv, R("E", ("k", "n")), R("F", ("k", "n"))], "Baggag & Saad §4.4",
              r"\bar Q = dS\,EK,\ \bar K = E^\top dS^\top Q,\ \bar E = dS^\top Q K^\top,\ "
              r"\bar V = F^\top P^\top G,\ \bar F = P^\top G V^\top",
              # k = 2: with one projected key the softmax is 1 and Q, K, E get no cotangent
              {"n": 2, "d": 1, "d_v": 1, "k": 2}, {**qkv_sizes, "k": small}),
    ]
    return out


OPS: dict[str, OpSpec] = {s.name: s for s in [
    _spec("affine", linear.affine, linear.affine_vjp,
          [R("X", ("n", "d_in")), R("W", ("d_in", "d_out")), R("b", ("d_out",))],
          "Baggag & Saad §2.6, §3.4.1",
          r"\bar X = G W^\top,\ \bar W = X^\top G,\ \bar b = G^\top\mathbf 1",
          {"n": 2, "d_in": 2, "d_out": 2}, {"n": _NUM, "d_in": _NUM, "d_out": _NUM}),
    _spec("lora_linear", lora.lora_linear, lora.lora_linear_vjp,
          [R("X", ("n", "d_in")), R("W", ("d_in", "d_out")), R("A", ("d_in", "r")),
           R("B", ("r", "d_out"))], "Baggag & Saad §4.2 (LoRA)",
          r"\bar X = GW^\top + s\,GB^\top A^\top,\ \bar W = X^\top G,\ "
          r"\bar A = s\,X^\top G B^\top,\ \bar B = s\,(XA)^\top G",
          # d_in != d_out != r: a transposed factor is a shape error
          {"n": 2, "d_in": 3, "d_out": 2, "r": 1}, {"n": _NUM, "d_in": _NUM, "d_out": _NUM,
                                                    "r": (1, 3)},
          static={"scale": 2}),
    _spec("lora_affine", lora.lora_affine, lora.lora_affine_vjp,
          [R("X", ("n", "d_in")), R("W", ("d_in", "d_out")), R("b", ("d_out",)),
           R("A", ("d_in", "r")), R("B", ("r", "d_out"))], "Baggag & Saad §4.2 (LoRA)",
          r"\text{as lora\_linear, and } \bar b = G^\top\mathbf 1",
          {"n": 2, "d_in": 3, "d_out": 2, "r": 1}, {"n": _NUM, "d_in": _NUM, "d_out": _NUM,
                                                    "r": (1, 3)},
          static={"scale": 2}),
    _spec("embed", embedding.embed, embedding.embed_vjp,
          [R("tokens", ("n",), "tokens"), R("W_E", ("V", "d"))],
          "Baggag & Saad §3.2", r"\bar W_E = U^\top G",
          {"n": 4, "V": 3, "d": 2}, {"n": _NUM, "V": (1, 6), "d": _NUM}),
    _spec("add_positions", embedding.add_positions, embedding.add_positions_vjp,
          [R("X", ("n", "d"))], "Baggag & Saad §3.2, §3.6.2", r"\bar X = G",
          {"n": 3, "d": 4}, {"n": _NUM, "d": (1, 6)}),
    _spec("softmax", softmaxes.softmax, softmaxes.softmax_vjp, [R("Z", ("n", "m"))],
          "Baggag & Saad §3.4.2",
          r"\bar z = p \odot (g - \langle g, p\rangle\mathbf 1) "
          r"= (\operatorname{diag}(p) - p p^\top) g",
          {"n": 2, "m": 3}, {"n": _NUM, "m": (1, 6)}, static={"masked_row": "zero"}),
    _spec("log_softmax", softmaxes.log_softmax, softmaxes.log_softmax_vjp, [R("Z", ("n", "m"))],
          "Baggag & Saad §3.1, §3.13.1", r"\bar z = g - p\,(\mathbf 1^\top g)",
          {"n": 2, "m": 3}, {"n": _NUM, "m": (1, 6)}),
    _spec("attention", sdpa.attention, sdpa.attention_vjp,
          [R("Q", ("n", "d_k")), R("K", ("n", "d_k")), R("V", ("n", "d_v"))],
          "Baggag & Saad §3.4.2",
          r"\bar V = P^\top G,\ dS = P\odot(dP - \operatorname{rowsum}(dP\odot P)),\ "
          r"\bar Q = dS\,K/\sqrt{d_k},\ \bar K = dS^\top Q/\sqrt{d_k}",
          {"n": 2, "d_k": 2, "d_v": 1}, {"n": _NUM, "d_k": _NUM, "d_v": _NUM},
          static={"scale": None}),
    # muP's 1/d_k score scale (Yang et al. 2021), a convention of attention (static scale)
    _spec("attention_mup", sdpa.attention, sdpa.attention_vjp,
          [R("Q", ("n", "d_k")), R("K", ("n", "d_k")), R("V", ("n", "d_v"))],
          "Baggag & Saad §3.4.2; Yang et al. 2021 (muP)",
          r"\bar Q = dS\,K/d_k,\ \bar K = dS^\top Q/d_k,\ \bar V = P^\top G",
          {"n": 2, "d_k": 2, "d_v": 1}, {"n": _NUM, "d_k": _NUM, "d_v": _NUM},
          static={"scale": "linear"}),
    _spec("causal_attention", sdpa.attention, sdpa.attention_vjp,
          [R("Q", ("n", "d_k")), R("K", ("n", "d_k")), R("V", ("n", "d_v"))],
          "Baggag & Saad §3.4.4",
          r"\text{as attention, with } P_{ij} = 0 = dS_{ij} \text{ for } j > i",
          {"n": 2, "d_k": 2, "d_v": 1}, {"n": _NUM, "d_k": _NUM, "d_v": _NUM},
          static={"causal": True, "scale": None}),
    # fewer queries than keys (a KV cache, chunked prefill): the causal mask's alignment is
    # a convention (static align: FlashAttention >= 2.1 bottom-right, torch SDPA top-left)
    _spec("causal_attention_kv", sdpa.attention, sdpa.attention_vjp,
          [R("Q", ("n", "d_k")), R("K", ("n_k", "d_k")), R("V", ("n_k", "d_v"))],
          "Baggag & Saad §3.4.4; Dao 2023 (FlashAttention-2.1, bottom-right causal mask)",
          r"\text{as causal attention over } n_k \ge n \text{ keys, with } P_{ij} = 0 = dS_{ij}"
          r"\text{ for } j > i + n_k - n",
          {"n": 2, "n_k": 3, "d_k": 1, "d_v": 1},
          {"n": _NUM, "n_k": (1, 6), "d_k": _NUM, "d_v": _NUM},
          static={"causal": True, "scale": None, "align": "bottom_right"},
          fix_sizes=lambda s: {**s, "n_k": max(s["n_k"], s["n"])}),
    _spec("sliding_window_attention", sdpa.attention, sdpa.attention_vjp,
          [R("Q", ("n", "d_k")), R("K", ("n", "d_k")), R("V", ("n", "d_v"))],
          "Baggag & Saad §3.4.4; Jiang et al. 2023 (Mistral, sliding window)",
          r"\text{as causal attention, with } P_{ij} = 0 = dS_{ij} \text{ unless } "
          r"i - w < j \le i",
          {"n": 3, "d_k": 1, "d_v": 1}, {"n": _NUM, "d_k": _NUM, "d_v": _NUM},
          static={"causal": True, "window": 2}),
    _spec("split_heads", sdpa.split_heads, sdpa.split_heads_vjp,
          [R("X", ("n", "hd"))], "Baggag & Saad §3.5.1",
          r"\bar X = \operatorname{merge}(G)", {"n": 2, "hd": 4},
          {"n": _NUM, "hd": (2, 8)}, static={"n_heads": 2}, fix_sizes=_multiple("hd", 2)),
    _spec("merge_heads", sdpa.merge_heads, sdpa.merge_heads_vjp,
          [R("X", ("h", "n", "d_h"))], "Baggag & Saad §3.5.2",
          r"\bar X = \operatorname{split}(G)", {"h": 2, "n": 2, "d_h": 2},
          {"h": _NUM, "n": _NUM, "d_h": _NUM}),
    _spec("multihead_attention", sdpa.multihead_attention,
          sdpa.multihead_attention_vjp,
          [R("X", ("n", "d")), R("W_Q", ("d", "hd")), R("W_K", ("d", "hd")),
           R("W_V", ("d", "hd")), R("W_O", ("hd", "d"))],
          "Baggag & Saad §3.5.3",
          r"\text{chain rule through affine, split, attention, merge; } "
          r"\bar X = \textstyle\sum_{u\in\{Q,K,V\}} \operatorname{merge}(\bar U) W_U^\top",
          {"n": 2, "d": 2, "hd": 2}, {"n": _NUM, "d": _NUM, "hd": (2, 6)},
          static={"n_heads": 2, "causal": True}, fix_sizes=_multiple("hd", 2)),
    _spec("layernorm", norms.layernorm, norms.layernorm_vjp,
          [R("x", ("n", "d")), R("gamma", ("d",)), R("beta", ("d",))],
          "Baggag & Saad §3.8",
          r"\bar x = \tfrac1\sigma\bigl(g_{\hat x} - \overline{g_{\hat x}} - \hat x\,"
          r"\overline{g_{\hat x}\odot\hat x}\bigr),\ \bar\gamma = \sum g\odot\hat x,\ "
          r"\bar\beta = \sum g",
          {"n": 2, "d": 3}, {"n": _NUM, "d": (2, 6)},
          static={"eps": 1e-5}, proof_static={"eps": "epsilon"}, condition=_norm_condition,
          amplification=_norm_amplification, amplified=("x",)),
    _spec("rmsnorm", norms.rmsnorm, norms.rmsnorm_vjp,
          [R("x", ("n", "d")), R("gamma", ("d",))], "Baggag & Saad §3.8.1",
          r"\bar x = \tfrac1r\bigl(g_{\hat x} - \hat x\,\overline{g_{\hat x}\odot\hat x}\bigr),\ "
          r"\bar\gamma = \sum g\odot\hat x",
          {"n": 2, "d": 3}, {"n": _NUM, "d": (1, 6)},
          static={"eps": 1e-5}, proof_static={"eps": "epsilon"}, condition=_norm_condition,
          amplification=_norm_amplification, amplified=("x",)),
    _spec("relu", activations.relu, activations.relu_vjp, [R("x", ("n", "d"))],
          "Baggag & Saad §3.7.2", r"\bar x = g\odot\mathbb 1[x>0]",
          {"n": 1, "d": 2}, {"n": _NUM, "d": _NUM}),
    _spec("gelu_erf", activations.gelu_erf, activations.gelu_erf_vjp, [R("x", ("n", "d"))],
          "Baggag & Saad §3.7.2", r"\bar x = g\odot(\Phi(x) + x\varphi(x))",
          {"n": 1, "d": 2}, {"n": _NUM, "d": _NUM}),
    _spec("gelu_tanh", activations.gelu_tanh, activations.gelu_tanh_vjp,
          [R("x", ("n", "d"))], "Baggag & Saad §3.7.2",
          r"\bar x = g\odot\bigl(\tfrac12(1+t) + \tfrac x2(1-t^2)\sqrt{2/\pi}(1+3a x^2)\bigr)",
          {"n": 1, "d": 2}, {"n": _NUM, "d": _NUM}),
    _spec("silu", activations.silu, activations.silu_vjp, [R("x", ("n", "d"))],
          "Baggag & Saad §3.7.3", r"\bar x = g\odot\sigma(x)(1 + x(1-\sigma(x)))",
          {"n": 1, "d": 2}, {"n": _NUM, "d": _NUM}),
    _spec("swiglu", activations.swiglu, activations.swiglu_vjp,
          [R("a", ("n", "d")), R("b", ("n", "d"))], "Baggag & Saad §3.7.3",
          r"\bar a = g\odot b\odot\operatorname{SiLU}'(a),\ \bar b = g\odot\operatorname{SiLU}(a)",
          {"n": 1, "d": 2}, {"n": _NUM, "d": _NUM}),
    _spec("geglu", activations.geglu, activations.geglu_vjp,
          [R("a", ("n", "d")), R("b", ("n", "d"))], "Baggag & Saad §3.7.2-3.7.3 (Gemma)",
          r"\bar a = g\odot b\odot\operatorname{GELU}_{\tanh}'(a),\ "
          r"\bar b = g\odot\operatorname{GELU}_{\tanh}(a)",
          {"n": 1, "d": 2}, {"n": _NUM, "d": _NUM}),
    _spec("residual_add", linear.add, linear.add_vjp, [R("x", ("n", "d")), R("y", ("n", "d"))],
          "Baggag & Saad §3.8, §3.9", r"\bar x = \bar y = G",
          {"n": 2, "d": 2}, {"n": _NUM, "d": _NUM}),
    _spec("mul", linear.mul, linear.mul_vjp, [R("x", ("n", "d")), R("y", ("n", "d"))],
          "Baggag & Saad §2.6", r"\bar x = G\odot y,\ \bar y = G\odot x",
          {"n": 1, "d": 2}, {"n": _NUM, "d": _NUM}),
    _spec("scale", linear.scale, linear.scale_vjp, [R("x", ("n", "d"))],
          "Baggag & Saad §2.6", r"\bar x = c\,G", {"n": 1, "d": 2}, {"n": _NUM, "d": _NUM},
          static={"c": 3}),
    _spec("shift", linear.shift, linear.shift_vjp, [R("x", ("n", "d"))],
          "Baggag & Saad §2.6", r"\bar x = G", {"n": 1, "d": 2}, {"n": _NUM, "d": _NUM},
          static={"c": -2}),
    _spec("linear", linear.linear, linear.linear_vjp,
          [R("X", ("n", "d_in")), R("W", ("d_in", "d_out"))], "Baggag & Saad §3.4.1",
          r"\bar X = G W^\top,\ \bar W = X^\top G",
          {"n": 2, "d_in": 2, "d_out": 2}, {"n": _NUM, "d_in": _NUM, "d_out": _NUM}),
    _spec("unembed_tied", linear.unembed_tied, linear.unembed_tied_vjp,
          [R("X", ("n", "d")), R("W_E", ("V", "d"))], "Baggag & Saad §3.3.3",
          r"\bar X = G W_E,\ \bar W_E = G^\top X",
          {"n": 2, "d": 2, "V": 3}, {"n": _NUM, "d": _NUM, "V": (1, 6)}),
    *embedding.learned_position_specs(),
    _spec("rope", rotary.rope, rotary.rope_vjp, [R("X", ("h", "n", "d_h"))],
          "Baggag & Saad §3.6.2",
          r"\bar X = G\odot C + R^\top(G\odot S) = G\odot C - R(G\odot S)",
          {"h": 1, "n": 3, "d_h": 4}, {"h": _NUM, "n": _NUM, "d_h": (2, 8)},
          static={"base": 10000, "layout": "interleaved"}, fix_sizes=_even("d_h")),
    # the other pairing (GPT-NeoX, Hugging Face Llama's rotate_half) at Llama-3's base
    _spec("rope_half", rotary.rope, rotary.rope_vjp, [R("X", ("h", "n", "d_h"))],
          "Baggag & Saad §3.6.2; Black et al. 2022 (GPT-NeoX), Dubey et al. 2024 (Llama-3 base)",
          r"\bar X = G\odot C - R(G\odot S),\ R[x_1, x_2] = [-x_2, x_1]",
          {"h": 1, "n": 3, "d_h": 4}, {"h": _NUM, "n": _NUM, "d_h": (2, 8)},
          static={"base": 500000, "layout": "half"}, fix_sizes=_even("d_h")),
    # Llama-3.1's scaling with d_h = 6 and L = 512: one frequency kept, one blended, one
    # divided by the factor (all three branches of rope_frequencies)
    _spec("rope_scaled", rotary.rope, rotary.rope_vjp, [R("X", ("h", "n", "d_h"))],
          "Baggag & Saad §3.6.2; Dubey et al. 2024 (Llama-3.1 RoPE scaling)",
          r"\bar X = G\odot C - R(G\odot S),\ C, S \text{ at the scaled } \theta_i'",
          {"h": 1, "n": 3, "d_h": 6}, {"h": _NUM, "n": _NUM, "d_h": (2, 8)},
          static={"scaling": RopeScaling("llama3", 8.0, 1.0, 4.0, 512)},
          fix_sizes=_even("d_h")),
    # partial rotary in the half pairing (GPT-NeoX/Pythia's rotary_pct, Phi's
    # partial_rotary_factor): 4 of 6 coordinates rotated, 2 passed through
    _spec("rope_partial", rotary.rope, rotary.rope_vjp, [R("X", ("h", "n", "d_h"))],
          "Baggag & Saad §3.6.2; Black et al. 2022 (GPT-NeoX rotary_pct), Wang & "
          "Komatsuzaki 2021 (GPT-J rotary_dim)",
          r"\bar X = G\odot C - (R\oplus 0)(G\odot S),\ C = 1,\ S = 0 \text{ past } r",
          {"h": 1, "n": 3, "d_h": 6}, {"h": _NUM, "n": _NUM, "d_h": (4, 8)},
          static={"layout": "half", "rotary_dim": 4}, fix_sizes=_even("d_h")),
    _spec("repeat_kv", sdpa.repeat_kv, sdpa.repeat_kv_vjp, [R("X", ("h_kv", "n", "d"))],
          "Baggag & Saad §3.11.2 (grouped-query attention)",
          r"\bar X_j = \textstyle\sum_{r=0}^{n_{\mathrm{rep}}-1} G_{j n_{\mathrm{rep}} + r}",
          {"h_kv": 2, "n": 2, "d": 1}, {"h_kv": _NUM, "n": _NUM, "d": _NUM},
          static={"n_rep": 2}),
    _spec("moe", moe.moe, moe.moe_vjp,
          [R("X", ("n", "d")), R("scores", ("n", "E")), R("mask", ("n", "E"), "mask"),
           R("W_in", ("E", "d", "m")), R("W_out", ("E", "m", "d"))],
          "Baggag & Saad §3.12.2",
          r"\bar Y_e = g_{\cdot e}\odot G,\ \bar g_{te} = \langle G_t, Y_{e,t}\rangle,\ "
          r"\bar s = \operatorname{softmax\_vjp}(\bar g)\ \text{(routing fixed)}",
          # m = 2 != d: a transposed expert weight (or its tangent) is a shape error, not
          # a product of 1x1 matrices that commutes
          {"n": 2, "d": 1, "E": 3, "m": 2}, {"n": _NUM, "d": _NUM, "E": (2, 4), "m": _NUM},
          static={"activation": "gelu"}),
    _spec("moe_swiglu", moe.moe, moe.moe_vjp,
          [R("X", ("n", "d")), R("scores", ("n", "E")), R("mask", ("n", "E"), "mask"),
           R("W1", ("E", "d", "m")), R("W3", ("E", "d", "m")), R("W2", ("E", "m", "d"))],
          "Baggag & Saad §3.12.2, §3.7.3",
          r"\text{as moe, with SwiGLU experts } E_e(x) = (\operatorname{SiLU}(xW_1^e)\odot "
          r"xW_3^e)W_2^e",
          {"n": 2, "d": 1, "E": 2, "m": 1}, {"n": _NUM, "d": _NUM, "E": (2, 4), "m": _NUM},
          static={"activation": "swiglu"}),
    _spec("moe_topk", moe.moe, moe.moe_vjp,
          [R("X", ("n", "d")), R("scores", ("n", "E")), R("mask", ("n", "E"), "mask"),
           R("W_in", ("E", "d", "m")), R("W_out", ("E", "m", "d"))],
          "Baggag & Saad §3.12.2 (gates not renormalised, Qwen-MoE norm_topk_prob=False)",
          r"g = M\odot\operatorname{softmax}(s),\ "
          r"\bar s = \operatorname{softmax\_vjp}_p(M\odot\bar g)",
          # one token, two of three experts selected: not renormalising changes the gates
          # (the gating does not depend on the experts' activation: ReLU keeps the proof short;
          # SwiGLU experts without renormalisation run node by node in the zoo)
          {"n": 1, "d": 1, "E": 3, "m": 1}, {"n": _NUM, "d": _NUM, "E": (3, 4), "m": _NUM},
          static={"activation": "relu", "renormalize": False}),
    _spec("tanh", activations.tanh, activations.tanh_vjp, [R("x", ("n", "d"))],
          "Baggag & Saad §2.1", r"\bar x = g\odot(1-\tanh^2 x)",
          {"n": 1, "d": 2}, {"n": _NUM, "d": _NUM}),
    _spec("half_squared_error", loss.half_squared_error, loss.half_squared_error_vjp,
          [R("Yhat", ("n", "m")), R("Y", ("n", "m"), "fixed")], "Baggag & Saad §2.2",
          r"\bar{\hat Y} = g(\hat Y - Y)", {"n": 1, "m": 2}, {"n": _NUM, "m": _NUM}),
    _spec("topk_mask", moe.topk_mask, moe.topk_mask_vjp, [R("scores", ("n", "E"), "fixed")],
          "Baggag & Saad §3.12.2", r"\text{piecewise constant: no cotangent (routing fixed)}",
          {"n": 2, "E": 3}, {"n": _NUM, "E": (2, 4)}, static={"top_k": 2}),
    _spec("cross_entropy", loss.cross_entropy, loss.cross_entropy_vjp,
          [R("Z", ("n", "V")), R("targets", ("n",), "tokens", ignore=loss.IGNORE_INDEX)],
          "Baggag & Saad §3.1, §3.13.1",
          r"L = -\tfrac1N\textstyle\sum_{i:\,t_i\neq\varnothing}\log p_{i,t_i},\ "
          r"\bar Z_i = \tfrac{g}{N}\,\mathbb 1[t_i\neq\varnothing]\,(p_i - y_i),\ "
          r"N = \#\{i: t_i \neq \varnothing\}",
          {"n": 3, "V": 3}, {"n": _NUM, "V": (2, 6)},
          static={"ignore_index": loss.IGNORE_INDEX, "reduction": "mean"}),
    _spec("cross_entropy_sum", loss.cross_entropy, loss.cross_entropy_vjp,
          [R("Z", ("n", "V")), R("targets", ("n",), "tokens", ignore=loss.IGNORE_INDEX)],
          "Baggag & Saad §3.1, §3.13.1 (PyTorch reduction='sum')",
          r"L = -\textstyle\sum_{i:\,t_i\neq\varnothing}\log p_{i,t_i},\ "
          r"\bar Z_i = g\,\mathbb 1[t_i\neq\varnothing]\,(p_i - y_i)",
          {"n": 3, "V": 3}, {"n": _NUM, "V": (2, 6)},
          static={"ignore_index": loss.IGNORE_INDEX, "reduction": "sum"}),
    *_linear_attention_specs(),
]}


def get_op(name: str) -> OpSpec:
    """The :class:`OpSpec` called ``name`` (of :data:`OPS`, or a scan of
    :data:`~nlaverify.ops.ssm_specs.SCAN_OPS`, RWKV's :data:`~nlaverify.ops.rwkv_specs.RWKV_OPS`
    or a MoE router's :data:`~nlaverify.ops.moe_specs.MOE_OPS`); an unknown name lists the known
    ones."""
    from nlaverify.ops.moe_specs import MOE_OPS
    from nlaverify.ops.rwkv_specs import RWKV_OPS
    from nlaverify.ops.ssm_specs import SCAN_OPS

    try:
        return OPS[name] if name in OPS else (SCAN_OPS.get(name) or MOE_OPS.get(name)
                                              or RWKV_OPS[name])
    except KeyError:
        import difflib

        close = difflib.get_close_matches(str(name), list(OPS), n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise UnknownNameError(
            f"unknown op {name!r}: {hint}expected one of {', '.join(sorted(OPS))}") from None


def op_signature(op: str | OpSpec) -> str:
    """How ``check_op`` calls your function for ``op``: the positional arguments with their
    named dimensions and kinds, and the static values the reference uses.

    >>> op_signature("rmsnorm")
    'rmsnorm(x[..., n, d], gamma[d]); static: eps=1e-05'
    """
    spec = get_op(op) if isinstance(op, str) else op
    parts = []
    for a in spec.args:
        dims = ", ".join(str(d) for d in a.dims)
        lead = "..., " if a.per_sequence else ""
        kind = "" if a.kind == "real" else f" ({a.kind})"
        parts.append(f"{a.name}[{lead}{dims}]{kind}")
    static = ", ".join(f"{k}={v!r}" for k, v in spec.static.items())
    return f"{spec.name}({', '.join(parts)})" + (f"; static: {static}" if static else "")


def _online_softmax_specs() -> list[OpSpec]:
    r"""The blockwise (online-softmax, FlashAttention) attention of
    :mod:`nlaverify.ops.online_softmax`: :math:`n = 3` tokens, keys in blocks of 2 (a ragged
    split :math:`[2, 1]`); causal, queries 0 and 1 see no key of the second block (the
    masked-block path). Self-attention shapes (one ``n``), so that the batching machinery
    gives every argument a batch axis; other query counts are proved by the identity
    ``blockwise_attention_equals_softmax_attention``."""
    from nlaverify.ops import online_softmax as osm

    args = [R("Q", ("n", "d_k")), R("K", ("n", "d_k")), R("V", ("n", "d_v"))]
    stmt = (r"P_b = e^{S_b - m}/\ell,\ \bar V_b = P_b^\top G,\ dS_b = P_b\odot(GV_b^\top - "
            r"\operatorname{rowsum}(G\odot A)),\ \bar Q = \textstyle\sum_b dS_b K_b/\sqrt{d_k},"
            r"\ \bar K_b = dS_b^\top Q/\sqrt{d_k}")
    sizes = {"n": 3, "d_k": 2, "d_v": 1}
    ranges = {"n": (1, 6), "d_k": _NUM, "d_v": _NUM}
    return [
        _spec("blockwise_attention", osm.blockwise_attention, osm.blockwise_attention_vjp,
              args, "Baggag & Saad §3.4.2; Milakov & Gimelshein 2018; Dao et al. 2022",
              stmt, sizes, ranges, static={"block": 2}),
        _spec("causal_blockwise_attention", osm.blockwise_attention,
              osm.blockwise_attention_vjp, args,
              "Baggag & Saad §3.4.4; Dao et al. 2022 (FlashAttention, causal)",
              stmt + r",\ P_{ij} = 0 \text{ for } j > i", sizes, ranges,
              static={"block": 2, "causal": True}),
    ]


OPS.update({s.name: s for s in _online_softmax_specs()})
OPS.update(_ssm_specs.CONV_OPS)
OPS.update(_softcap.SOFTCAP_OPS)
