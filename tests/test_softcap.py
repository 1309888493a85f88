r"""Issue 23 (item 1): logit soft-capping :math:`c\tanh(x/c)` (Gemma Team 2024, Gemma 2 §2) on
the attention scores (``attn_softcap``, before the causal mask) and on the final logits
(``final_softcap``): the ops ``softcap`` and ``softcap_attention``, their exact proofs, the
graph node by node against the independent JAX model, and the planted bugs named at their
nodes.

Independent oracles: mpmath's ``tanh`` at 30 digits for the cap, explicit loops in float64
NumPy for capped attention, JAX autodiff for every cotangent and tangent, and the JAX model
(:mod:`nlaverify.models.jax_transformer`: the logistic form :math:`c(2\sigma(2z/c) - 1)`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.graph.build import build_transformer
from nlaverify.graph.compare import accumulation_length
from nlaverify.graph.run import init_params, run_graph, sample_data
from nlaverify.ops import softcap as sc
from nlaverify.ops.registry import OPS
from nlaverify.tolerance import magnitude_condition, tolerance
from nlaverify.zoo import zoo_config

jax.config.update("jax_enable_x64", True)

MEMBER = "softcap-rmsnorm"
NP = get_namespace("numpy")


def test_softcap_equals_mpmath_tanh() -> None:
    import mpmath

    rng = np.random.default_rng(0)
    x = 4.0 * rng.standard_normal((5, 7))
    x[0, :3] = (0.0, 300.0, -300.0)  # zero, and saturated far past the cap
    for c in (0.5, 2.0, 30.0):
        with mpmath.workdps(30):
            want = np.array([[float(mpmath.mpf(c) * mpmath.tanh(mpmath.mpf(v) / c)) for v in row]
                             for row in x])
        got = sc.softcap(NP, x, c)
        # relative condition <= 1 (module docstring): a few roundings per entry
        assert tolerance("float64", size=1, depth=3).compare(got, want).ok, c
        assert np.all(np.abs(got) <= c)


def _capped_attention_loops(Q: np.ndarray, K: np.ndarray, V: np.ndarray, c: float,
                            window: int | None) -> np.ndarray:
    """Row by row: only the visible keys of query i enter the softmax of the capped scores."""
    n, dk = Q.shape
    out = np.zeros((n, V.shape[1]))
    for i in range(n):
        seen = [j for j in range(i + 1) if window is None or i - j < window]
        s = np.array([c * np.tanh((Q[i] @ K[j]) / np.sqrt(dk) / c) for j in seen])
        w = np.exp(s - s.max())
        out[i] = (w / w.sum()) @ V[seen]
    return out


@pytest.mark.parametrize("window", [None, 2])
def test_softcap_attention_equals_loops(window: int | None) -> None:
    rng = np.random.default_rng(1)
    Q, K, V = (3.0 * rng.standard_normal((5, 3)) for _ in range(3))
    got = sc.softcap_attention(NP, Q, K, V, 0.7, causal=True, window=window)
    tol = tolerance("float64", size=5, depth=6, condition=magnitude_condition(Q, K, V))
    assert tol.compare(got, _capped_attention_loops(Q, K, V, 0.7, window)).ok


def test_cap_after_the_mask_reveals_the_hidden_keys() -> None:
    # the planted bug of the op: c tanh(.) applied to the masked scores turns -inf into -c,
    # so query 0 attends to every key; the loops (and the op) see key 0 only
    from nlaverify.errors import NonFiniteError
    from nlaverify.ops.sdpa import attention_scores
    from nlaverify.ops.softmaxes import softmax

    rng = np.random.default_rng(2)
    Q, K, V = (rng.standard_normal((4, 2)) for _ in range(3))

    masked = attention_scores(NP, Q, K, causal=True)
    with pytest.raises(NonFiniteError, match="softcap: argument 'x'"):
        sc.softcap(NP, masked, 1.0)  # the op refuses a masked score: it is no logit
    leaky = softmax(NP, np.tanh(masked)) @ V  # c = 1: -inf capped to -1
    right = sc.softcap_attention(NP, Q, K, V, 1.0, causal=True)
    # query 0 sees only key 0: its weight is exactly 1, so the row is V[0] exactly; the cap
    # after the mask gives the masked keys weight e^-1 / (e^tanh(s) + 3 e^-1), far from 0
    assert np.array_equal(right[0], V[0])
    assert not tolerance("float64", size=4, depth=3).compare(leaky[0], V[0]).ok


@pytest.mark.parametrize(("op", "static"), [
    ("softcap", {"cap": 0.8}), ("softcap_attention", {"cap": 0.8, "causal": True}),
    ("softcap_attention", {"cap": 1.5, "causal": True, "window": 2}),
    ("softcap_attention", {"cap": 3.0, "causal": False})])
def test_vjp_and_jvp_against_jax_autodiff(op: str, static: dict[str, Any]) -> None:
    spec = OPS[op]
    sizes = {"n": 5, "d": 3, "d_k": 3, "d_v": 2}
    rng = np.random.default_rng(3)
    args = [jnp.asarray(2.0 * rng.standard_normal(tuple(sizes[d] for d in a.dims)))
            for a in spec.args]
    xp = get_namespace("jax")
    out = spec.forward(xp, *args, **static)
    G = jnp.asarray(rng.standard_normal(out.shape))
    _, auto = spec.autodiff_vjp(args, G, **static)
    T = [jnp.asarray(rng.standard_normal(a.shape)) for a in args]
    tol = tolerance("float64", size=sizes["n"] * sizes["d"], depth=8,
                    condition=magnitude_condition(*args, G))
    for a, got, want in zip(spec.args, spec.vjp(xp, G, *args, **static), auto, strict=True):
        assert tol.compare(got, want).ok, a.name
    assert tol.compare(spec.jvp(xp, tuple(T), *args, **static),
                       spec.autodiff_jvp(args, T, **static)).ok


def _bug_forward(xp: Any, x: Any, cap: Any) -> Any:
    """The planted bug: :math:`c\\tanh(x)`, the :math:`1/c` inside forgotten."""
    return xp.const(cap) * xp.tanh(x)


def _bug_vjp(xp: Any, G: Any, x: Any, cap: Any) -> tuple[Any]:
    """The VJP of the planted bug, consistent with it."""
    t = xp.tanh(x)
    return (G * xp.const(cap) * (1 - t * t),)


def test_derivatives_proved_exactly_and_a_wrong_slope_fails() -> None:
    from nlaverify.symbolic.vjp_proof import prove_jvp, prove_vjp

    for op in ("softcap", "softcap_attention"):
        assert prove_vjp(OPS[op]).verdict == "proved", op
        assert prove_jvp(OPS[op]).verdict == "proved", op
    # the bug's VJP next to the right forward: the proof (for every c > 0) fails
    assert prove_vjp(dataclasses.replace(OPS["softcap"], vjp=_bug_vjp)).verdict == "failed"


def test_softcap_ops_are_proved_identities_of_the_catalogue() -> None:
    from nlaverify.identities.core import load_catalogue

    catalogue = load_catalogue()
    for op in ("softcap", "softcap_attention"):
        for suffix in ("vjp", "jvp", "batch"):
            assert f"{op}_{suffix}" in catalogue


def test_capped_graph_has_its_nodes() -> None:
    g = build_transformer(zoo_config(MEMBER))
    assert g.nodes["blocks.0.attn.heads"]["op"] == "softcap_attention"
    assert g.nodes["blocks.0.attn.heads"]["static"]["cap"] == 0.5
    assert g.nodes["logits"]["op"] == "softcap"
    assert list(g.predecessors("logits")) == ["logits_uncapped"]
    plain = build_transformer(zoo_config(MEMBER).replace(attn_softcap=None,
                                                         final_softcap=None))
    assert plain.nodes["blocks.0.attn.heads"]["op"] == "attention"
    assert "logits_uncapped" not in plain


def test_zoo_member_verified_node_by_node() -> None:
    from nlaverify.pipeline import verify_pipeline

    report = verify_pipeline(zoo_config(MEMBER), ("numpy", "jax"))
    assert report.ok, report.errors
    assert {label for label, *_ in report.end_to_end} >= {"independent JAX model"}


def test_independent_model_equals_every_capped_node() -> None:
    from nlaverify.models.jax_transformer import intermediates

    cfg = zoo_config(MEMBER).replace(n_blocks=2)
    g = build_transformer(cfg)
    params, data = init_params(g, 4), sample_data(cfg.vocab_size, 6, 4)
    ev = run_graph(g, "numpy", params, data)
    rec = intermediates({k: jnp.asarray(v) for k, v in params.items()}, data["tokens"], cfg)
    for node in ("blocks.0.attn.heads", "blocks.1.attn.heads", "logits_uncapped", "logits"):
        ref = ev.values[node]
        tol = tolerance("float64", size=8, depth=30, condition=magnitude_condition(ref))
        assert tol.compare(rec[node], ref).ok, node
    assert np.all(np.abs(ev.values["logits"]) < cfg.final_softcap)


def _first_divergence(cfg: TransformerConfig) -> str | None:
    from nlaverify.pipeline import _first_model_divergence

    g = build_transformer(cfg)
    params, data = init_params(g, 0), sample_data(cfg.vocab_size, 6, 0)
    ref = run_graph(g, "numpy", params, data)
    jp = {k: jnp.asarray(v) for k, v in params.items()}
    return _first_model_divergence(g, ref, jp, data, cfg, accumulation_length(g, 6),
                                   2 * (4 * cfg.n_blocks + 6))


def test_planted_cap_without_inner_scale_is_named_at_the_logits(monkeypatch) -> None:
    # c tanh(x) in the forward *and* its VJP: every node agrees with JAX autodiff of the
    # (wrong) graph; the independent model parts from it first at the capped logits
    from nlaverify.pipeline import verify_pipeline

    cfg = zoo_config(MEMBER)
    assert _first_divergence(cfg) is None
    monkeypatch.setitem(OPS, "softcap", dataclasses.replace(OPS["softcap"],
                                                            forward=_bug_forward,
                                                            vjp=_bug_vjp))
    assert _first_divergence(cfg) == "logits"
    report = verify_pipeline(cfg, ("numpy",))
    assert not report.ok and all(c.ok for c in report.comparisons)
    assert any(s == "independent JAX model" and e > b for s, _, e, b in report.end_to_end)


def test_planted_cap_after_the_mask_is_named_at_the_heads(monkeypatch) -> None:
    from nlaverify.ops.sdpa import attention_scores
    from nlaverify.ops.softmaxes import softmax

    def after_mask(xp: Any, Q: Any, K: Any, V: Any, cap: Any, causal: bool = False,
                   window: int | None = None, scale: Any = None) -> Any:
        S = attention_scores(xp, Q, K, causal, window, scale)
        finite = xp.where(S > -np.inf, S, -1e300)  # the op refuses -inf; -1e300 caps to -c
        return xp.matmul(softmax(xp, sc.softcap(xp, finite, cap)), V)

    monkeypatch.setitem(OPS, "softcap_attention",
                        dataclasses.replace(OPS["softcap_attention"], forward=after_mask))
    assert _first_divergence(zoo_config(MEMBER)) == "blocks.0.attn.heads"


@pytest.mark.parametrize(("changes", "field"), [
    ({"attn_softcap": 0}, "attn_softcap"), ({"final_softcap": -1.0}, "final_softcap"),
    ({"final_softcap": float("inf")}, "final_softcap"), ({"attn_softcap": True}, "attn_softcap"),
    ({"attn_softcap": 50.0, "attention": "favor+"}, "attn_softcap")])
def test_bad_softcaps_are_named(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=f"TransformerConfig.{field}"):
        TransformerConfig(vocab_size=5, d_model=4, n_heads=1, n_blocks=1, d_mlp=4, **changes)


def test_softcap_fields_change_graph_and_model_alike() -> None:
    from nlaverify.zoo import check_field_effects

    for effect in check_field_effects(["attn_softcap", "final_softcap"]):
        assert effect.ok, effect
