"""Issue 23: the identities of :mod:`nlaverify.identities.moe_routing` prove the running
routers, and each derivation FAILS when the function it certifies is broken: a sign flipped
in a VJP or JVP, the load-balancing bias in the gates, the bias ignored by the selection, a
group scored by its best expert alone, gates renormalised over every expert, the shared
expert ungated.

The DeepSeek-V3 block's own proofs (7 s and 10 s) run in ``test_proofs.py`` with the
catalogue; here a broken block is refuted at its first entry (a second or less).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.identities import get_identity, load_catalogue
from nlaverify.identities import moe_routing as ident
from nlaverify.ops import moe_routing as mr
from nlaverify.ops import moe_shared as ms
from nlaverify.ops.moe_specs import MOE_OPS
from nlaverify.ops.registry import get_op
from nlaverify.symbolic.vjp_proof import prove_jvp, prove_vjp

IDS = ("moe_bias_chooses_never_weighs", "moe_group_limited_all_groups_is_topk",
       "moe_deepseek_v3_gates_sum", "moe_qwen2_shared_expert", "qwen2_moe_vjp",
       "qwen2_moe_jvp", "qwen2_moe_norm_vjp", "qwen2_moe_norm_jvp", "deepseek_v3_gates_vjp",
       "deepseek_v3_gates_jvp")


@pytest.mark.parametrize("identity_id", IDS)
def test_identity_is_proved(identity_id: str) -> None:
    proof = get_identity(identity_id).derive()
    assert proof.verdict == "proved", proof.detail


DIFFERENTIABLE = sorted(name for name, spec in MOE_OPS.items() if spec.differentiable)


def test_specs_are_reachable_by_name_and_certify_the_running_functions() -> None:
    for name, spec in MOE_OPS.items():
        assert get_op(name) is spec
    for name in DIFFERENTIABLE:
        spec = MOE_OPS[name]
        assert get_identity(f"{name}_vjp").certifies == spec.qualified_names
        assert spec.jvp is not None


def test_the_selection_is_piecewise_constant_and_has_no_cotangent() -> None:
    """``deepseek_v3_select``: no real argument, no cotangent, no identity to prove."""
    spec = get_op("deepseek_v3_select")
    assert not spec.differentiable and "deepseek_v3_select_vjp" not in load_catalogue()
    xp = get_namespace("numpy")
    s, b = np.array([[0.9, 0.1, 0.6, 0.5]]), np.zeros(4)
    assert spec.vjp(xp, None, s, b, **spec.static) == ()
    assert spec.forward(xp, s, b, **spec.static).tolist() == [[0.0, 0.0, 1.0, 1.0]]


def _flip_first(vjp):
    def wrong(*args, **static):
        out = vjp(*args, **static)
        return (-out[0], *out[1:])

    return wrong


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_vjp_with_a_flipped_sign_is_refuted(name: str) -> None:
    spec = MOE_OPS[name]
    assert prove_vjp(dataclasses.replace(spec, vjp=_flip_first(spec.vjp))).verdict == "failed"


def test_qwen2_moe_vjp_without_the_shared_gate_path_is_refuted(monkeypatch) -> None:
    """The shared gate's sigmoid derivative taken as sigma(z)^2 (sigma(-z) replaced)."""
    real = ms._sigmoid_pair
    monkeypatch.setattr(ms, "_sigmoid_pair", lambda xp, z: (real(xp, z)[0],) * 2)
    assert prove_vjp(MOE_OPS["qwen2_moe"]).verdict == "failed"


def test_deepseek_v3_vjp_renormalised_wrongly_is_refuted(monkeypatch) -> None:
    """The block's VJP through gates that are not renormalised (the forward's are)."""
    real = mr.deepseek_v3_gates_vjp
    monkeypatch.setattr(ms, "deepseek_v3_gates_vjp",
                        lambda xp, G, s, m, **kw: real(xp, G, s, m, **{**kw,
                                                                       "renormalize": False}))
    assert prove_vjp(MOE_OPS["deepseek_v3_moe"]).verdict == "failed"


def test_deepseek_v3_gates_jvp_without_epsilon_is_refuted(monkeypatch) -> None:
    """The JVP's normaliser without the forward's epsilon (``spec.jvp`` is looked up by name
    in the forward's module, so the patch is what the proof runs)."""
    real = mr.deepseek_v3_gates_jvp
    monkeypatch.setattr(mr, "deepseek_v3_gates_jvp",
                        lambda xp, T, s, m, **kw: real(xp, T, s, m, **{**kw, "eps": 0}))
    assert prove_jvp(MOE_OPS["deepseek_v3_gates"]).verdict == "failed"


def _buggy_route(xp, scores, bias, **static):
    """The bias in the gates as well as in the choice."""
    mask = mr.deepseek_v3_select(xp, scores, bias, static["top_k"], static["n_group"],
                                 static["topk_group"])
    return mr.deepseek_v3_gates(xp, scores + bias, mask,
                                routed_scaling_factor=static["routed_scaling_factor"]), mask


def _route_ignoring_bias(xp, scores, bias, **static):
    """The choice made without the bias."""
    return _ROUTE(xp, scores, 0 * bias, **static)


_ROUTE = mr.deepseek_v3_route


@pytest.mark.parametrize("plant", [_buggy_route, _route_ignoring_bias])
def test_bias_identity_fails_when_the_bias_weighs_or_never_chooses(plant, monkeypatch) -> None:
    monkeypatch.setattr(mr, "deepseek_v3_route", plant)
    assert ident.derive_bias_chooses_never_weighs().verdict == "failed"


def _groups_by_best_expert(xp, scores, top_k, n_group, topk_group):
    """Group-limited top-k with each group scored by its best expert (not its best two)."""
    size = scores.shape[-1] // n_group
    parts = [scores[..., g * size:(g + 1) * size] for g in range(n_group)]
    keep = mr.topk_mask(xp, xp.stack([xp.sum(mr.topk_mask(xp, p, 1) * p, axis=-1)
                                      for p in parts], axis=-1), topk_group)
    allowed = xp.concat([xp.stack([keep[..., g]] * size, axis=-1) for g in range(n_group)],
                        axis=-1)
    return mr.masked_topk_mask(xp, scores, allowed, top_k)


def test_group_identity_fails_when_a_group_scores_its_best_expert(monkeypatch) -> None:
    monkeypatch.setattr(mr, "group_limited_topk_mask", _groups_by_best_expert)
    assert ident.derive_group_limited_all_groups().verdict == "failed"


def test_group_identity_fails_when_the_kept_groups_are_ignored(monkeypatch) -> None:
    real = mr.masked_topk_mask
    monkeypatch.setattr(mr, "masked_topk_mask",
                        lambda xp, s, allowed, k: real(xp, s, xp.ones_like(s), k))
    assert ident.derive_group_limited_all_groups().verdict == "failed"


def test_gates_sum_fails_when_renormalised_over_every_expert(monkeypatch) -> None:
    def over_all(xp, s, mask, *, routed_scaling_factor=1.0, renormalize=True, eps=0.0):
        a = mr._on(xp, s, mask)
        return routed_scaling_factor * a / (xp.sum(s, axis=-1, keepdims=True) + eps)

    monkeypatch.setattr(mr, "deepseek_v3_gates", over_all)
    assert ident.derive_gates_sum().verdict == "failed"


def test_shared_expert_identity_fails_when_the_shared_expert_is_ungated(monkeypatch) -> None:
    monkeypatch.setattr(ms, "_sigmoid_pair",
                        lambda xp, z: (xp.ones_like(z), xp.zeros_like(z)))
    assert ident.derive_qwen2_shared_expert().verdict == "failed"


def test_reference_choice_is_hugging_faces_rule_on_an_example() -> None:
    # groups (0, 1) and (2, 3) score 0.9 + 0.1 = 1.0 and 0.6 + 0.5 = 1.1: the second group
    # wins although the best expert is in the first
    v = (0.9, 0.1, 0.6, 0.5)
    assert ident.reference_choice(v, 1, 2, 1) == {2}
    got = mr.group_limited_topk_mask(get_namespace("numpy"), np.array([v]), 1, 2, 1)
    assert got.tolist() == [[0.0, 0.0, 1.0, 0.0]]
    assert _groups_by_best_expert(get_namespace("numpy"), np.array([v]), 1, 2, 1).tolist() == [
        [1.0, 0.0, 0.0, 0.0]]
