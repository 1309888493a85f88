"""The deterministic zoo: every config field exercised and visible, presets against their
published figures, the independent model's intermediates, and planted *consistent* bugs
(the same mistake in an op's forward and its VJP, or in the graph builder) that every
exact proof and every graph-versus-autodiff check lets through but the zoo kills.

Runtime: the zoo is verified once (module fixture); every planted bug is checked by the
field-effect pairs of the zoo member that covers it (forward only, fast), and by the whole
pipeline on that member for one bug by default, for all of them with
``HYPOTHESIS_PROFILE=nightly`` or ``NLAVERIFY_FULL_KILL=1``. (The presets, the independent
model and the CLI: tests/test_zoo_presets.py, tests/test_zoo_model.py, tests/test_zoo_cli.py.)
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from nlaverify import zoo
from nlaverify.config import TransformerConfig, preset
from nlaverify.graph import build
from nlaverify.graph.build import build_transformer
from nlaverify.graph.run import init_params, run_graph, sample_data
from nlaverify.ops import embedding, moe, rotary
from nlaverify.ops.activations import swiglu, swiglu_vjp
from nlaverify.ops.registry import OPS
from nlaverify.pipeline import format_report

FULL_KILL = (os.environ.get("HYPOTHESIS_PROFILE", "ci") != "ci"
             or os.environ.get("NLAVERIFY_FULL_KILL") == "1")


# --------------------------------------------------------------------------- the zoo


@functools.cache
def _report(name: str):
    """The member's verified report (once per worker process; the members are separate
    tests, so the two CI workers share them)."""
    return zoo.verify_zoo(("numpy", "jax"), [zoo.zoo_config(name)])[0]


def _check_member(name: str) -> None:
    rep = _report(name)
    assert rep.config.name == name
    assert rep.ok, format_report(rep, per_node=False)
    assert {c.subject for c in rep.comparisons} == {"numpy", "jax"}
    assert len(rep.end_to_end) == 6 and rep.model_divergence is None
    assert zoo.format_zoo_line(rep).split()[2] == "ok"


# one class per member, so that the two CI workers share them (--dist loadscope sends
# classes apart; the module's functions stay together)
for _c in zoo.ZOO:
    _cls = "TestZooMember_" + _c.name.replace("-", "_")
    globals()[_cls] = type(_cls, (), {
        "test_passes_node_by_node_on_numpy_and_jax": lambda self, _n=_c.name: _check_member(_n),
        "__doc__": f"The zoo member {_c.name!r}, node by node."})


def test_every_field_is_exercised_by_the_zoo() -> None:
    cov = zoo.zoo_coverage()
    names = [f.name for f in dataclasses.fields(TransformerConfig) if f.name != "name"]
    assert list(cov) == names  # a new field appears here and must be covered
    assert zoo.uncovered_fields() == [], cov
    assert len({c.name for c in zoo.ZOO}) == len(zoo.ZOO)
    # the values the audit's bugs need to be seen
    c = {m.name: m for m in zoo.ZOO}
    assert any(m.n_kv_heads >= 2 and m.n_rep >= 2 for m in zoo.ZOO)  # k % h_kv visible
    assert {m.mlp for m in zoo.ZOO if m.n_experts >= 3} == {"relu", "gelu", "swiglu"}
    assert {m.top_k for m in zoo.ZOO if m.n_experts} >= {1, 2}
    assert any(1 < m.top_k < m.n_experts for m in zoo.ZOO)  # renormalisation visible
    assert {m.positions for m in zoo.ZOO} == {"learned", "sinusoidal", "rope", "none"}
    assert {(m.norm, m.placement) for m in zoo.ZOO} == {
        (n, p) for n in ("layernorm", "rmsnorm") for p in ("pre", "post")}
    assert any(m.norm_eps >= 0.1 for m in zoo.ZOO if m.placement == "pre")
    assert any(m.norm_eps >= 0.1 for m in zoo.ZOO if m.placement == "post")
    assert any(m.rope_base <= 100 for m in zoo.ZOO if m.positions == "rope")
    assert {0.5, 3.0} <= {m.temperature for m in zoo.ZOO}
    assert any(m.d_head != m.d_model // m.n_heads for m in zoo.ZOO)
    assert all(m.vocab_size <= 17 and m.d_model <= 12 and m.n_blocks <= 2 for m in c.values())
    # sensitivity: without the GQA/RoPE member, rope_base is no longer covered
    assert zoo.uncovered_fields([m for m in zoo.ZOO if m.name != "gqa-rope-swiglu"]) == [
        "rope_base"]


def test_effect_pairs_change_exactly_one_field() -> None:
    assert set(zoo.EFFECT_PAIRS) == set(zoo.config_fields())
    for name, pairs in zoo.EFFECT_PAIRS.items():
        for member, value in pairs:
            a = zoo.zoo_config(member)
            b = a.replace(**{name: value})
            diff = [f for f in zoo.config_fields() if getattr(a, f) != getattr(b, f)]
            assert diff == [name], (name, member, diff)


@pytest.fixture(scope="session")
def effects():
    return zoo.check_field_effects()


def test_every_field_changes_graph_and_model_by_the_same_visible_amount(effects) -> None:
    assert {e.field for e in effects} == set(zoo.config_fields())
    bad = [e.describe() for e in effects if not e.ok]
    assert not bad, "\n".join(bad)
    for e in effects:
        # the same amount: the two differences agree to within the bound (both members agree)
        d_graph = e.graph_loss[1] - e.graph_loss[0]
        d_model = e.model_loss[1] - e.model_loss[0]
        assert abs(d_graph - d_model) <= 2 * e.bound * max(1.0, *map(abs, e.graph_loss))
        assert e.as_dict()["ok"] is True


def test_field_effect_fails_when_a_field_has_no_effect() -> None:
    # sensitivity of the "visible" clause: temperature 1 -> 1 changes nothing
    same = zoo.field_effect("temperature", "moe-gelu-top1-tied", 0.5)
    assert same.agrees and not same.visible and not same.ok
    assert "effect too small" in same.describe()


# ---------------------------------------------------------------- planted bugs


def _consistent(spec, forward: Callable[..., Any]):
    """``spec`` with ``forward`` and the VJP JAX derives from it: a bug in the forward that
    the VJP repeats, as an op author who wrote both the same wrong way would."""
    import jax.numpy as jnp

    def vjp(xp, G, *args, **static):
        host = isinstance(G, np.ndarray)
        conv = [jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
        _, grads = dataclasses.replace(spec, forward=forward).autodiff_vjp(
            conv, jnp.asarray(G) if host else G, **static)
        return tuple(np.asarray(g) for g in grads) if host else tuple(grads)

    return dataclasses.replace(spec, forward=forward, vjp=vjp)


def _builder_patch(monkeypatch, mutate: Callable[..., tuple]) -> None:
    """Route every op the builder adds through ``mutate(cfg, name, op, inputs, static)``."""
    original = build._Builder.op

    def op(self, name, op_name, inputs, *rest, **static):
        name, op_name, inputs, static = mutate(self.g.graph["config"], name, op_name,
                                               list(inputs), dict(static))
        return original(self, name, op_name, inputs, *rest, **static)

    monkeypatch.setattr(build._Builder, "op", op)


def plant_gqa_modulo(mp) -> None:
    """Query head k reads key/value head k mod h_kv instead of k // n_rep."""
    def forward(xp, X, n_rep):
        if n_rep == 1:
            return X
        h_kv = X.shape[-3]
        idx = xp.asarray([k % h_kv for k in range(h_kv * n_rep)])
        return xp.take(X, idx, axis=len(X.shape) - 3)

    def vjp(xp, G, X, n_rep):
        if n_rep == 1:
            return (G,)
        lead = tuple(G.shape[:-3])
        grouped = xp.reshape(G, (*lead, n_rep, X.shape[-3], *G.shape[-2:]))
        return (xp.sum(grouped, axis=len(lead)),)

    mp.setitem(OPS, "repeat_kv", dataclasses.replace(OPS["repeat_kv"], forward=forward,
                                                     vjp=vjp))


def plant_rope_base_ignored(mp) -> None:
    """The builder hard-codes RoPE's base 10,000 instead of ``cfg.rope_base``."""
    _builder_patch(mp, lambda cfg, name, op, inputs, static: (
        name, op, inputs, {**static, "base": 10000} if op == "rope" else static))


def plant_norm_eps_ignored(mp) -> None:
    """The builder hard-codes epsilon 1e-5 instead of ``cfg.norm_eps``."""
    _builder_patch(mp, lambda cfg, name, op, inputs, static: (
        name, op, inputs, {**static, "eps": 1e-5} if op in ("layernorm", "rmsnorm")
        else static))


def plant_rope_frequencies(mp) -> None:
    """theta_i = b^(-i/d) instead of b^(-2i/d), in the tables both forward and VJP use."""
    tables = rotary.rope_tables
    mp.setattr(rotary, "rope_tables", lambda xp, n, d, base=10000, scaling=None,
               layout="interleaved": tuple(T[:, :d] for T in tables(xp, n, 2 * d, base,
                                                                      scaling, layout)))


def plant_rope_pairing(mp) -> None:
    """Rotate pairs (i, i + d/2) (the rotate-half convention) instead of (2i, 2i+1)."""
    tables = rotary.rope_tables

    def half_tables(xp, n, d, base=10000, scaling=None, layout="interleaved"):
        return tuple(xp.concat([T[:, 0::2], T[:, 0::2]], axis=-1) for T in
                     tables(xp, n, d, base, scaling))

    def rotate_half(xp, x, layout="interleaved"):
        h = x.shape[-1] // 2
        return xp.concat([-x[..., h:], x[..., :h]], axis=-1)

    mp.setattr(rotary, "rope_tables", half_tables)
    mp.setattr(rotary, "rotate_half", rotate_half)


def plant_moe_no_renormalisation(mp) -> None:
    """Gates = softmax over all experts, masked, not renormalised over the chosen k (the
    forward only: the VJP below is JAX's of the planted forward)."""
    gates = moe._gates
    mp.setattr(moe, "_gates", lambda xp, scores, mask, renormalize=True: gates(
        xp, scores, mask, False))
    for name in ("moe", "moe_swiglu"):
        mp.setitem(OPS, name, _consistent(OPS[name], OPS[name].forward))


def plant_topk_off_by_one(mp) -> None:
    spec = OPS["topk_mask"]
    mp.setitem(OPS, "topk_mask", dataclasses.replace(spec, forward=lambda xp, s, top_k: (
        spec.forward(xp, s, top_k=min(top_k + 1, s.shape[-1])))))


def plant_sinusoid_order(mp) -> None:
    """P[t, 2i] = cos, P[t, 2i+1] = sin (swapped)."""
    def swapped(xp, n, d, base=10000):
        exponents = xp.asarray([xp.rational(2 * (k // 2), d) for k in range(d)])
        omega = xp.exp(-exponents * xp.log(xp.asarray([xp.rational(base)])))
        angle = xp.asarray([[xp.rational(t)] for t in range(n)]) * omega
        even = xp.asarray([k % 2 == 0 for k in range(d)])
        return xp.where(even, xp.cos(angle), xp.sin(angle))

    mp.setattr(embedding, "sinusoidal_positions", swapped)


def plant_swiglu_order(mp) -> None:
    """SiLU(up) * gate instead of SiLU(gate) * up, forward and VJP alike."""
    mp.setitem(OPS, "swiglu", dataclasses.replace(
        OPS["swiglu"], forward=lambda xp, a, b: swiglu(xp, b, a),
        vjp=lambda xp, G, a, b: swiglu_vjp(xp, G, b, a)[::-1]))


def plant_post_ln_residual_before_norm(mp) -> None:
    """Post-LN: the residual branch adds the stream *before* the norm (resid, not norm)."""
    def mutate(cfg, name, op, inputs, static):
        if op == "residual_add" and cfg.placement == "post":
            inputs = [s.replace(".norm1", ".resid1").replace(".norm2", ".resid2")
                      if s.endswith((".norm1", ".norm2")) else s for s in inputs]
        return name, op, inputs, static

    _builder_patch(mp, mutate)


def plant_temperature_multiplies(mp) -> None:
    _builder_patch(mp, lambda cfg, name, op, inputs, static: (
        name, op, inputs, {**static, "c": cfg.temperature} if name == "logits_tempered"
        else static))


@dataclass(frozen=True)
class Bug:
    name: str
    plant: Callable[[Any], None]
    field: str                                    # the field whose effect it corrupts
    covers: Callable[[TransformerConfig], bool]   # a zoo member where it must show
    diverges_at: tuple[str, ...]                  # where the model and the graph part
    pipeline: bool = False                        # run the whole pipeline by default


BUGS = [
    Bug("gqa k % h_kv", plant_gqa_modulo, "n_kv_heads",
        lambda c: c.n_kv_heads >= 2 and c.n_rep >= 2,
        ("blocks.0.attn.k_shared", "blocks.0.attn.v_shared"), pipeline=True),
    Bug("builder ignores rope_base", plant_rope_base_ignored, "rope_base",
        lambda c: c.positions == "rope" and c.rope_base != 10000,
        ("blocks.0.attn.q_rope", "blocks.0.attn.k_rope")),
    Bug("builder ignores norm_eps", plant_norm_eps_ignored, "norm_eps",
        lambda c: c.norm_eps >= 0.1, ("blocks.0.norm1",)),
    Bug("rope frequencies", plant_rope_frequencies, "positions",
        lambda c: c.positions == "rope", ("blocks.0.attn.q_rope", "blocks.0.attn.k_rope")),
    Bug("rope pairing", plant_rope_pairing, "positions", lambda c: c.positions == "rope",
        ("blocks.0.attn.q_rope", "blocks.0.attn.k_rope")),
    Bug("moe gates not renormalised", plant_moe_no_renormalisation, "n_experts",
        lambda c: c.n_experts >= 3 and c.top_k >= 2 and c.mlp != "swiglu",
        ("blocks.0.mlp.out",)),
    Bug("top-k off by one", plant_topk_off_by_one, "top_k",
        lambda c: c.n_experts >= 3 and c.top_k < c.n_experts, ("blocks.0.mlp.out",)),
    Bug("sinusoid sin/cos order", plant_sinusoid_order, "positions",
        lambda c: c.positions == "sinusoidal", ("x0",)),
    Bug("swiglu gate/up order", plant_swiglu_order, "mlp",
        lambda c: c.mlp == "swiglu" and not c.n_experts, ("blocks.0.mlp.act",)),
    Bug("post-ln residual before the norm", plant_post_ln_residual_before_norm, "placement",
        lambda c: c.placement == "post", ("blocks.0.resid2",)),
    Bug("temperature multiplies", plant_temperature_multiplies, "temperature",
        lambda c: c.temperature != 1.0, ("logits_tempered",)),
]


def _covering(bug: Bug) -> list[str]:
    """Zoo members where ``bug`` must show: those moving its field off the default (the
    coverage table) that also switch the faulty feature on."""
    names = [m for m in zoo.zoo_coverage()[bug.field] if bug.covers(zoo.zoo_config(m))]
    assert names, f"no zoo member covers {bug.name}"
    return names


@pytest.fixture
def planted(request, monkeypatch) -> Iterator[Bug]:
    bug: Bug = request.param
    bug.plant(monkeypatch)
    yield bug


@pytest.mark.parametrize("planted", BUGS, ids=[b.name for b in BUGS], indirect=True)
def test_planted_bug_is_killed_by_the_field_effect_check(planted: Bug) -> None:
    members = set(_covering(planted))
    pairs = [(m, v) for m, v in zoo.EFFECT_PAIRS[planted.field] if m in members]
    assert pairs, f"no effect pair of {planted.field} on {members}"
    results = [zoo.field_effect(planted.field, m, v) for m, v in pairs]
    assert not all(r.ok for r in results), [r.describe() for r in results]
    assert any(not r.agrees for r in results)  # the graph no longer matches the model


@pytest.mark.parametrize("planted", [b for b in BUGS if b.pipeline or FULL_KILL],
                         ids=[b.name for b in BUGS if b.pipeline or FULL_KILL], indirect=True)
def test_planted_bug_is_killed_by_the_zoo_and_located(planted: Bug) -> None:
    cfg = zoo.zoo_config(_covering(planted)[0])
    rep = zoo.verify_zoo(("numpy",), [cfg])[0]
    # consistent: the graph still agrees with JAX autodiff of itself, node by node ...
    assert all(c.ok for c in rep.comparisons), format_report(rep, per_node=False)
    # ... but not with the independent model, and the place where they part is named
    assert not rep.ok
    assert rep.model_divergence in planted.diverges_at, rep.model_divergence
    assert rep.as_dict()["model_first_divergence"] == rep.model_divergence
    assert (f"independent JAX model: first divergence at {rep.model_divergence}"
            in format_report(rep, per_node=False))


def test_planted_bugs_are_invisible_without_the_zoo(monkeypatch) -> None:
    # the audit's finding, reproduced: on the tiny preset (no GQA, no RoPE, default eps,
    # base and temperature) these consistent bugs change nothing at all
    cfg = preset("tiny")
    g = build_transformer(cfg)
    params, data = init_params(g, 0), sample_data(cfg.vocab_size, 6, 0)
    clean = run_graph(g, "numpy", params, data).values["loss"]
    for bug in (BUGS[0], BUGS[1], BUGS[2], BUGS[3], BUGS[10]):
        with monkeypatch.context() as mp:
            bug.plant(mp)
            g2 = build_transformer(cfg)
            assert float(run_graph(g2, "numpy", params, data).values["loss"]) == float(clean)

