"""Structural facts of the Transformer pipeline, proved on the running graph.

Each proof builds the graph with :func:`nlaverify.graph.build.build_transformer`
and evaluates it with :func:`nlaverify.graph.core.evaluate` on the exact SymPy
namespace, so what is proved is the pipeline that runs (Baggag & Saad §3.6,
§3.9, §3.11.1, §3.13.1).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import sympy

from nlaverify.backends import get_namespace
from nlaverify.config import TransformerConfig
from nlaverify.graph.build import build_transformer
from nlaverify.graph.core import evaluate
from nlaverify.identities.core import Identity, Proof, Step, qualname, register
from nlaverify.ops.rotary import rope
from nlaverify.symbolic.exact import is_zero, symbol_array
from nlaverify.symbolic.normal_form import rational_zero

#: a small config for the residual-stream proof
PROOF_CONFIG = TransformerConfig(vocab_size=3, d_model=2, n_heads=1, n_blocks=1, d_mlp=2,
                                 positions="none", context=3, mlp="relu", attn_bias=True,
                                 mlp_bias=True, name="proof")


def _obj(x) -> np.ndarray:
    return np.asarray(x, dtype=object)


def derive_rope_relative() -> Proof:
    xp = get_namespace("sympy")
    n, dh = 3, 4
    q, k = symbol_array("q", (dh,)), symbol_array("k", (dh,))
    Q = _obj(rope(xp, np.stack([q] * n)[None]))[0]
    K = _obj(rope(xp, np.stack([k] * n)[None]))[0]
    S = Q @ K.T
    for s, t in itertools.product(range(n - 1), repeat=2):
        diff = sympy.expand_trig(S[s, t] - S[s + 1, t + 1])
        # the rational normal form with sin/cos by multiple angles and sin^2 + cos^2 = 1
        # (exact, nlaverify.symbolic.normal_form) first; else the zero test's simplify
        if not (rational_zero(diff, trig=True) or is_zero(diff)):
            return Proof("failed", (), f"S[{s},{t}] != S[{s + 1},{t + 1}]")
    return Proof("proved", (
        Step(f"Apply the running `rope` to {n} positions carrying the same query $q$ and the "
             f"same key $k$ (head dimension {dh}, symbolic entries)."),
        Step("Every score $S_{st} = \\langle R_s q, R_t k\\rangle$ equals $S_{s+1,t+1}$ "
             "exactly: the score depends on $t - s$ only.",
             r"\langle R_s q, R_t k\rangle = q^\top R_s^\top R_t k = q^\top R_{t-s} k."),
    ))


def _stream_symbols(graph, cfg, n: int, overrides_for: list[str]) -> dict:
    return {node: symbol_array(node.replace(".", "_"), (n, cfg.d_model))
            for node in overrides_for}


def derive_residual_stream() -> Proof:
    cfg = PROOF_CONFIG.replace(n_blocks=3, name="proof-3")
    graph = build_transformer(cfg)
    n = 2
    sub = ["x0"] + [f"blocks.{b}.{s}.out" for b in range(cfg.n_blocks) for s in ("attn", "mlp")]
    over = _stream_symbols(graph, cfg, n, sub)
    last = f"blocks.{cfg.n_blocks - 1}.resid2"
    xp = get_namespace("sympy")
    x_L = _obj(evaluate(graph, xp, {}, outputs=[last], overrides=over)[last])
    total = sum((over[s] for s in sub[1:]), over["x0"])
    ok = all(is_zero(v) for v in (x_L - total).reshape(-1))
    return Proof("proved" if ok else "failed", (
        Step(f"Build the Pre-LN graph with {cfg.n_blocks} blocks; impose symbolic values on the "
             "stream entry $x_0$ and on every sublayer output $a_l$ (attention) and $m_l$ (MLP)."),
        Step("Evaluate the stream after the last block from these values alone:",
             r"x_L = x_0 + \sum_{l=1}^{L} a_l + \sum_{l=1}^{L} m_l \quad\text{exactly}."),
        Step("The identity path is exact because Pre-LN normalizes only the sublayer inputs; "
             "with Post-LN the norm after each sum breaks it (Baggag & Saad §3.9)."),
    ))


#: ops that act on each sequence position separately, with the sequence axis of
#: their output; each is proved row-wise by :func:`_rowwise`
ROWWISE_OUT_AXIS: dict[str, int] = {
    "affine": 0, "linear": 0, "layernorm": 0, "rmsnorm": 0, "relu": 0, "gelu_erf": 0,
    "gelu_tanh": 0, "silu": 0, "swiglu": 0, "tanh": 0, "residual_add": 0, "mul": 0,
    "scale": 0, "shift": 0, "unembed_tied": 0, "split_heads": 1, "merge_heads": 0,
    "repeat_kv": 1, "rope": 1, "add_positions": 0, "add_learned_positions": 0,
    "topk_mask": 0, "moe": 0, "moe_swiglu": 0, "embed": 0,
}
#: of those, the ones whose map depends on the position itself
POSITIONAL = {"rope", "add_positions", "add_learned_positions"}


def _op_case(op: str, n_min: int) -> tuple[Any, list[Any], dict[str, Any], dict[str, int]]:
    from nlaverify.ops.registry import OPS
    from nlaverify.symbolic.vjp_proof import symbolic_inputs

    spec = OPS[op]
    sizes = {k: max(v, n_min) if k == "n" else v for k, v in spec.proof_sizes.items()}
    args, static = symbolic_inputs(spec, sizes)
    return spec, args, static, sizes


def _run(spec: Any, args: list[Any], static: dict[str, Any]) -> np.ndarray:
    xp = get_namespace("sympy")
    xp.reset_shifts()
    return _obj(spec.forward(xp, *args, **static))


def _rowwise(op: str) -> bool:
    """Exact: output position t involves input position t only. For real inputs, by the
    free symbols of each output row; for token ids, by changing token u and checking that
    every other output row stays exactly the same (and row u changes)."""
    spec, args, static, sizes = _op_case(op, 2)
    n = sizes["n"]
    out = _run(spec, args, static)
    ax = ROWWISE_OUT_AXIS[op]
    rows_of = []
    for a, x in zip(spec.args, args, strict=True):
        if "n" in a.dims and a.kind != "tokens":
            rows_of.append([set(_obj(np.take(x, t, axis=a.dims.index("n"))).reshape(-1))
                            for t in range(n)])
    for t in range(n):
        got = set().union(*(sympy.sympify(v).free_symbols for v in
                            _obj(np.take(out, t, axis=ax)).reshape(-1)))
        if any(got & rows[u] for rows in rows_of for u in range(n) if u != t):
            return False
    for k, a in enumerate(spec.args):
        if a.kind != "tokens" or sizes["V"] < 2:
            continue
        for u in range(n):
            changed = list(args)
            changed[k] = args[k].copy()
            changed[k][u] = (args[k][u] + 1) % sizes["V"]
            out2 = _run(spec, changed, static)
            for t in range(n):
                same = all(is_zero(v) for v in (_obj(np.take(out2, t, axis=ax))
                                                 - _obj(np.take(out, t, axis=ax))).reshape(-1))
                if same != (t != u):
                    return False
    return True


def _equivariant(op: str) -> bool:
    """Exact: permuting the positions of every sequence input permutes the output the same
    way (a transposition and a 3-cycle, which generate S_3): the op treats every position
    alike, so it cannot see the order."""
    spec, args, static, sizes = _op_case(op, 3)
    out = _run(spec, args, static)
    ax = ROWWISE_OUT_AXIS[op]
    for perm in ((1, 0, 2), (1, 2, 0)):
        P = list(perm) + list(range(3, sizes["n"]))
        moved = [np.take(x, P, axis=a.dims.index("n")) if "n" in a.dims else x
                 for a, x in zip(spec.args, args, strict=True)]
        diff = _run(spec, moved, static) - np.take(out, P, axis=ax)
        if not all(is_zero(v) for v in _obj(diff).reshape(-1)):
            return False
    return True


def _attention_lemma(causal: bool) -> bool:
    """Exact, at n = 3: causal attention's row i uses rows <= i only; unmasked attention
    commutes with a transposition and a 3-cycle of the rows."""
    from nlaverify.ops.sdpa import attention

    xp = get_namespace("sympy")
    n = 3
    Q, K, V = (symbol_array(c, (1, n, 1)) for c in "qkv")
    out = _obj(attention(xp, Q, K, V, causal))
    if causal:
        for i in range(n):
            got = sympy.sympify(out[0, i, 0]).free_symbols
            later = set(Q[0, i + 1:].reshape(-1)) | set(K[0, i + 1:].reshape(-1)) | set(
                V[0, i + 1:].reshape(-1))
            if got & later:
                return False
        return True
    for perm in ((1, 0, 2), (1, 2, 0)):
        P = list(perm)
        moved = _obj(attention(xp, Q[:, P], K[:, P], V[:, P], causal))
        if not all(is_zero(v) for v in (moved - out[:, P]).reshape(-1)):
            return False
    return True


def _walk(cfg: TransformerConfig, allow_positional: bool) -> tuple[bool, str, set[str]]:
    """Check that every op between the tokens and the logits is row-wise or attention."""
    import networkx as nx

    graph = build_transformer(cfg)
    between = nx.descendants(graph, "tokens") & (nx.ancestors(graph, "logits") | {"logits"})
    used: set[str] = set()
    for node in between:
        op = graph.nodes[node]["op"]
        used.add(op)
        if op == "attention":
            if graph.nodes[node]["static"]["causal"] != cfg.causal:
                return False, f"node {node}: unexpected mask", used
        elif op not in ROWWISE_OUT_AXIS or (op in POSITIONAL and not allow_positional):
            return False, f"node {node}: op {op} is not row-wise", used
    return True, "", used


_WALK_CONFIGS = (
    "tiny",
    TransformerConfig(vocab_size=5, d_model=8, n_heads=4, n_kv_heads=2, n_blocks=2, d_mlp=4,
                      norm="rmsnorm", positions="rope", mlp="swiglu", n_experts=3, top_k=2,
                      placement="post", tied_embeddings=True, context=8, name="llama-moe"),
)


def _structural(causal: bool) -> Proof:
    from nlaverify.config import preset

    steps = []
    ok = _attention_lemma(causal)
    steps.append(Step(
        "Lemma (attention, exact at n = 3, symbolic Q, K, V): " + (
            "with the causal mask, output row $i$ involves rows $\\le i$ of $Q, K, V$ only."
            if causal else "without a mask, $A(PQ, PK, PV) = P\\,A(Q, K, V)$ for a "
            "transposition and a 3-cycle, which generate $S_3$."),
        r"\operatorname{softmax}\bigl(P S P^\top\bigr) P V = P \operatorname{softmax}(S) V"
        if not causal else r"P_{ij} = 0\ (j > i)\ \Rightarrow\ A_i = \sum_{j\le i} P_{ij} v_j"))
    for name in _WALK_CONFIGS:
        cfg = preset(name) if isinstance(name, str) else name
        if not causal:
            cfg = cfg.replace(causal=False, positions="none", name=f"{cfg.name}-unmasked")
        walked, why, used = _walk(cfg, allow_positional=causal)
        row_ok = [op for op in sorted(used) if op != "attention"]
        lemma = _rowwise if causal else _equivariant
        bad = [op for op in row_ok if not lemma(op)]
        ok = ok and walked and not bad
        what = ("proved row-wise (exact: output position $t$ involves input position $t$ "
                "only; for token ids, changing token $u$ changes output row $u$ only)" if causal
                else "proved permutation equivariant (exact: permuting the positions of its "
                "inputs by a transposition or a 3-cycle permutes its output alike)")
        steps.append(Step(
            f"Config `{cfg.name}`: every op between the tokens and the logits is attention or "
            f"one of {', '.join(f'`{o}`' for o in row_ok)}, each {what}"
            + (f". FAILED: {why}{bad}" if why or bad else ".")))
    steps.append(Step(
        "By induction over the topological order of the running graph: " + (
            "row $i$ of every node depends on tokens $1..i$ only." if causal
            else "every node maps permuted tokens to the permuted value, so the logits are "
            "permuted with the tokens.")))
    return Proof("proved" if ok else "failed", tuple(steps))


def derive_permutation_equivariance() -> Proof:
    return _structural(causal=False)


def derive_causality() -> Proof:
    return _structural(causal=True)


_cert = (qualname(build_transformer), qualname(evaluate))
register(Identity(
    "rope_relative_position", "transformer", "RoPE scores depend on relative position only",
    r"\langle R_s q, R_t k\rangle = \langle q, R_{t-s} k\rangle", "Baggag & Saad §3.6.2",
    (qualname(rope),), derive_rope_relative))
register(Identity(
    "pre_ln_residual_stream", "transformer", "The Pre-LN residual stream decomposition",
    r"x_L = x_0 + \sum_{l} a_l + \sum_{l} m_l", "Baggag & Saad §3.9, §3.11.1", _cert,
    derive_residual_stream))
register(Identity(
    "attention_permutation_equivariance", "transformer",
    "Unmasked attention without positions is permutation equivariant",
    r"F(PX) = P\,F(X)", "Baggag & Saad §3.6.1", _cert, derive_permutation_equivariance))
register(Identity(
    "causal_prefix_dependence", "transformer",
    "With causal masking, position i depends on tokens 1..i only",
    r"\partial z_i / \partial x_j = 0\ (j > i)", "Baggag & Saad §3.4.4, §3.13.1", _cert,
    derive_causality))
