"""The logit lens, attention patterns and rollout, and the OV/QK circuits
(nlaverify.transform.lens), each tied to the graph's own values: the lens at the last state
is the model's logits, pattern @ V is the attention node's value, the heads' OV circuits
reassemble the attention output, the QK circuit gives the scores, ranks are at most d_h."""

from __future__ import annotations

import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.config import preset
from nlaverify.errors import ArgumentError
from nlaverify.graph.build import build_transformer
from nlaverify.graph.core import evaluate
from nlaverify.graph.run import graph_inputs, init_params, sample_data
from nlaverify.tolerance import tolerance
from nlaverify.transform import lens

CFG = preset("tiny")
PARAMS = init_params(build_transformer(CFG), 0)
DATA = sample_data(CFG.vocab_size, 8, 0)


def _values():
    g, xp = build_transformer(CFG), get_namespace("numpy")
    return evaluate(g, xp, graph_inputs(g, xp, PARAMS, DATA, "float64"))


def test_lens_ends_at_the_model() -> None:
    rows = lens.logit_lens(CFG, PARAMS, data=DATA)
    assert rows[0].node == "x0" and rows[-1].node == "blocks.1.resid2"
    assert len(rows) == 1 + 2 * CFG.n_blocks
    assert rows[-1].top1_agreement == 1.0
    assert abs(rows[-1].kl_to_final) <= tolerance("float64", size=CFG.vocab_size).rtol
    assert all(r.kl_to_final > 1e-6 for r in rows[:-1])  # earlier states differ


def test_patterns_are_the_transport_of_the_attention_node() -> None:
    values = _values()
    P = lens.attention_patterns(CFG, PARAMS, data=DATA)
    tol = tolerance("float64", size=8, depth=4)
    for node, A in P.items():
        assert np.all(A >= 0) and tol.compare(A.sum(-1), np.ones(A.shape[:-1])).ok
        assert np.all(np.triu(A, 1) == 0)  # causal
        V = values[node.replace(".heads", ".v_heads")]
        assert tol.compare(A @ V, values[node]).ok, node
    R = lens.attention_rollout(P)
    assert tol.compare(R.sum(-1), np.ones(8)).ok and np.all(R >= 0)
    plain = lens.attention_rollout(P, residual=False)
    means = [A.mean(0) for A in P.values()]
    assert tol.compare(plain, means[1] @ means[0]).ok


def test_ov_circuits_reassemble_the_attention_output() -> None:
    """attn.out = sum_h A_h X W^OV_h + 1 (sum_h b^V_h W^O_h + b^O): the circuits are the
    whole of the attention's linear part."""
    values = _values()
    P = lens.attention_patterns(CFG, PARAMS, data=DATA)
    d_h = CFG.d_model // CFG.n_heads
    for b in range(CFG.n_blocks):
        X = values[f"blocks.{b}.norm1"]
        A = P[f"blocks.{b}.attn.heads"]
        WO, bV = PARAMS[f"blocks.{b}.attn.out.W_O"], PARAMS[f"blocks.{b}.attn.v.b_V"]
        total = PARAMS[f"blocks.{b}.attn.out.b_O"] + sum(
            A[h] @ X @ lens.ov_circuit(CFG, PARAMS, b, h)
            + bV[h * d_h:(h + 1) * d_h] @ WO[h * d_h:(h + 1) * d_h] for h in range(CFG.n_heads))
        tol = tolerance("float64", size=CFG.d_model, depth=6)
        assert tol.compare(total, values[f"blocks.{b}.attn.out"]).ok, b
        for h in range(CFG.n_heads):
            assert np.linalg.matrix_rank(lens.ov_circuit(CFG, PARAMS, b, h)) <= d_h
            assert np.linalg.matrix_rank(lens.qk_circuit(CFG, PARAMS, b, h)) <= d_h


def test_qk_circuit_gives_the_scores() -> None:
    params = {k: (np.zeros_like(v) if k.endswith(("b_Q", "b_K")) else v)
              for k, v in PARAMS.items()}
    P = lens.attention_patterns(CFG, params, data=DATA)
    g, xp = build_transformer(CFG), get_namespace("numpy")
    X = evaluate(g, xp, graph_inputs(g, xp, params, DATA, "float64"))["blocks.0.norm1"]
    d_h = CFG.d_model // CFG.n_heads
    for h in range(CFG.n_heads):
        S = X @ lens.qk_circuit(CFG, params, 0, h) @ X.T / np.sqrt(d_h)
        S = np.where(np.tril(np.ones((8, 8), bool)), S, -np.inf)
        A = np.exp(S - S.max(-1, keepdims=True))
        A /= A.sum(-1, keepdims=True)
        assert tolerance("float64", size=d_h, depth=4).compare(
            A, P["blocks.0.attn.heads"][h]).ok


def test_refusals() -> None:
    with pytest.raises(ArgumentError, match="head"):
        lens.ov_circuit(CFG, PARAMS, 0, CFG.n_heads)
    with pytest.raises(ArgumentError, match="block"):
        lens.qk_circuit(CFG, PARAMS, 5, 0)
    rope = CFG.replace(positions="rope")
    with pytest.raises(ArgumentError, match="RoPE"):
        lens.qk_circuit(rope, init_params(build_transformer(rope), 0), 0, 0)
    with pytest.raises(ArgumentError, match="pre-LN"):
        post = CFG.replace(placement="post")
        lens.logit_lens(post, init_params(build_transformer(post), 0))
    with pytest.raises(ArgumentError, match="at least one layer"):
        lens.attention_rollout({})
