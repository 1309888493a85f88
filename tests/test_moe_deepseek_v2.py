"""DeepSeek-V2's MoE block (``nlaverify.ops.moe_deepseek_v2``) against Hugging Face's
``DeepseekV2Moe`` (transformers 5.25) in float64, forward and gradients, greedy and
group-limited (groups scored by their max), with planted bugs that must fail; the VJP/JVP
against JAX autodiff at full sizes; the exact router patch's fidelity to HF's stock one."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from nlaverify.backends import get_namespace  # noqa: E402
from nlaverify.errors import ShapeError  # noqa: E402
from nlaverify.interop.hf_patches_deepseek import v2_router_exact  # noqa: E402
from nlaverify.ops import moe_deepseek_v2 as v2  # noqa: E402
from nlaverify.ops import moe_routing as mr  # noqa: E402
from nlaverify.ops.softmaxes import softmax  # noqa: E402
from nlaverify.tolerance import tolerance  # noqa: E402
from tests.test_moe_routing import (  # noqa: E402
    N_TOK,
    _data,
    _dense,
    _experts,
    _hf_grads_as_ours,
    _jax_check,
    _randomise,
    _run_hf,
    _shared,
    _tol,
)

NP = get_namespace("numpy")
D, M, E, RHO = 4, 3, 8, 16.0
METHODS = {"greedy": {"n_group": 1, "topk_group": 1},
           "group_limited_greedy": {"n_group": 4, "topk_group": 2}}


def _block(method: str, seed: int = 0):
    from transformers import DeepseekV2Config
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2Moe

    grp = METHODS[method]
    cfg = DeepseekV2Config(hidden_size=D, moe_intermediate_size=M, n_routed_experts=E,
                           num_experts_per_tok=3, n_shared_experts=2, topk_method=method,
                           n_group=grp["n_group"] if method != "greedy" else None,
                           topk_group=grp["topk_group"] if method != "greedy" else None,
                           routed_scaling_factor=RHO, num_attention_heads=1,
                           num_key_value_heads=1, experts_implementation="eager")
    block = DeepseekV2Moe(cfg).double()
    _randomise(block, seed, scale=1.0)
    return block


def _args(block) -> list[np.ndarray]:
    return [block.gate.weight.detach().numpy().T, *_experts(block), *_shared(block.shared_experts)]


@pytest.mark.parametrize("method", list(METHODS))
def test_deepseek_v2_moe_equals_hugging_face(method: str, monkeypatch) -> None:
    block = _block(method)
    X, G = _data(5)
    y_hf, gates_hf, gates_stock, dX_hf = _run_hf(block, v2_router_exact, X, G, monkeypatch)
    args = _args(block)
    s = v2.deepseek_v2_affinity(NP, (X @ args[0]).reshape(-1, E))
    mask = v2.deepseek_v2_select(NP, s, 3, **METHODS[method])
    assert np.array_equal(mask, (gates_hf > 0).astype(float))
    if method != "greedy":  # the group limit changed the choice of some token
        assert not np.array_equal(mask, v2.deepseek_v2_select(NP, s, 3))
    tol = _tol(X, *args)
    assert tolerance("float32", size=E).compare(gates_stock, gates_hf).ok  # patch fidelity
    assert tol.compare(RHO * s * mask, gates_hf).ok   # gates rho * s, never renormalised
    mask = mask.reshape(*N_TOK, E)
    y = v2.deepseek_v2_moe(NP, X, mask, *args, routed_scaling_factor=RHO)
    assert tol.compare(y, y_hf).ok, tol.compare(y, y_hf)
    cots = v2.deepseek_v2_moe_vjp(NP, G, X, mask, *args, routed_scaling_factor=RHO)
    grads_hf = [dX_hf, *_hf_grads_as_ours(block, block.shared_experts, False)]
    for name, ours, theirs in zip(("X", "W_r", "W1", "W3", "W2", "U1", "U3", "U2"), cots,
                                  grads_hf, strict=True):
        c = tol.compare(ours, theirs)
        assert c.ok, (name, c, tol.reason)


PLANTS = ("no_routed_scaling", "renormalised", "sigmoid_for_softmax", "group_sum_of_two",
          "no_shared")


@pytest.mark.parametrize("plant", PLANTS)
def test_deepseek_v2_planted_bug_fails_against_hugging_face(plant: str, monkeypatch) -> None:
    from nlaverify.ops import moe_shared as ms

    block = _block("group_limited_greedy")
    X, G = _data(5)
    y_hf = _run_hf(block, v2_router_exact, X, G, monkeypatch)[0]
    args = _args(block)
    s = v2.deepseek_v2_affinity(NP, X @ args[0])
    mask = v2.deepseek_v2_select(NP, s, 3, **METHODS["group_limited_greedy"])
    rho = 1.0 if plant == "no_routed_scaling" else RHO
    if plant == "group_sum_of_two":   # V3's group score on V2's affinities
        mask = mr.group_limited_topk_mask(NP, s, 3, 4, 2)
    if plant == "no_shared":
        args = [*args[:4], 0 * args[4], args[5], args[6]]
    if plant in ("renormalised", "sigmoid_for_softmax"):
        kind, static = (("softmax", {"renormalize": True}) if plant == "renormalised" else
                        ("sigmoid", {"routed_scaling_factor": RHO, "renormalize": False,
                                     "eps": 0.0}))
        y = ms._block("planted", NP, X, mask, tuple(args), None, kind, static)
    else:
        y = v2.deepseek_v2_moe(NP, X, mask, *args, routed_scaling_factor=rho)
    assert not _tol(X, *args).compare(y, y_hf).ok


def test_group_max_differs_from_group_sum_here() -> None:
    """The planted ``group_sum_of_two`` is seen: on these data V3's group score chooses
    differently from V2's max (else the plant above would prove nothing)."""
    block = _block("group_limited_greedy")
    X, _ = _data(5)
    s = softmax(NP, X @ _args(block)[0])
    assert not np.array_equal(v2.deepseek_v2_select(NP, s, 3, 4, 2),
                              mr.group_limited_topk_mask(NP, s, 3, 4, 2))


def test_stock_router_is_float32_and_ignores_norm_topk_prob() -> None:
    """HF's stock router computes in float32 (hence the exact patch) and has no
    ``norm_topk_prob``: the released option is not read (gates :math:`\\rho s` always)."""
    block = _block("greedy")
    assert not hasattr(block.gate, "norm_topk_prob")
    x = torch.tensor(_data(5)[0]).reshape(-1, D)
    logits, w, idx = block.gate(x)
    assert logits.dtype == torch.float32
    ours = _dense(*v2_router_exact(block.gate, x)[1:], E)
    assert np.array_equal(ours > 0, _dense(w.double(), idx, E) > 0)


def test_vjp_and_jvp_equal_jax_autodiff_at_full_sizes() -> None:
    _jax_check("deepseek_v2_moe", {"n": 3, "d": 4, "E": 5, "m": 2, "f": 3})


def test_selection_arguments_are_named() -> None:
    s = np.ones((2, 6))
    with pytest.raises(ShapeError, match="'n_group'"):
        v2.deepseek_v2_select(NP, s, 2, 4, 1)
    with pytest.raises(ShapeError, match="'topk_group'"):
        v2.deepseek_v2_select(NP, s, 2, 3, 4)
    with pytest.raises(ShapeError, match="'top_k'"):
        v2.deepseek_v2_select(NP, s, 3, 3, 1)


def _numpy_select(sum_of_two: bool = False):
    """DeepSeek-V2's selection written in NumPy (the kernel under test): groups of 2 scored
    by their max, one kept, its 2 experts chosen; ``sum_of_two``: V3's group score (a bug)."""
    def select(scores):
        g = scores.reshape(*scores.shape[:-1], 2, 2)
        g = g.sum(-1) if sum_of_two else g.max(-1)
        return np.repeat(np.eye(2, dtype=scores.dtype)[np.argmax(g, axis=-1)], 2, axis=-1)
    return select


def test_check_op_passes_the_selection_and_fails_the_sum_of_two() -> None:
    from nlaverify.cases.inputs import OpCaseInput
    from nlaverify.check import check_op
    from nlaverify.check.op_selection import deepseek_v2_near_ties
    from nlaverify.ops.registry import get_op

    static = {"top_k": 2, "n_group": 2, "topk_group": 1}
    # token 0: group 0 wins by its max (0.5 > 0.4), group 1 by its sum (0.7 > 0.6)
    s = np.array([[0.5, 0.1, 0.4, 0.3], [0.9, 0.8, 0.1, 0.2]])
    assert check_op(_numpy_select(), "deepseek_v2_select", dtype="float32", static=static,
                    inputs=[[s]]).ok
    assert check_op(_numpy_select(True), "deepseek_v2_select", dtype="float32",
                    static=static, inputs=[[s]]).failures
    tie = OpCaseInput(get_op("deepseek_v2_select"), [np.array([[0.5, 0.1, 0.5, 0.3]])],
                      np.zeros((1, 4)), [], static, "x")
    assert deepseek_v2_near_ties(tie, "float64").tolist() == [True]


def _hf_v2_select(k: int, n_group: int, topk_group: int):
    """A torch float32 copy of HF 5.25's ``DeepseekV2TopkRouter`` selection on the scores
    (``group_limited_greedy``: groups' max, ``masked_fill(~score_mask, 0.0)``, top-k)."""
    import torch

    def select(scores):
        s = scores.reshape(-1, scores.shape[-1])
        E = s.shape[-1]
        gs = s.view(-1, n_group, E // n_group).max(dim=-1).values
        gm = torch.zeros_like(gs).scatter_(1, torch.topk(gs, k=topk_group, dim=-1)[1], 1)
        keep = gm.unsqueeze(-1).expand(-1, n_group, E // n_group).reshape(-1, E).bool()
        idx = torch.topk(s.masked_fill(~keep, 0.0), k=k, dim=-1, sorted=False)[1]
        return torch.zeros_like(s).scatter_(1, idx, 1.0).reshape(scores.shape)
    return select


@pytest.mark.parametrize(("k", "n_group", "topk_group", "E"), [(3, 4, 2, 8), (4, 2, 1, 8)])
def test_check_op_no_false_alarm_on_hf_router_copy(k, n_group, topk_group, E) -> None:
    """The drawn cases are signed: HF's dropped groups' 0 outranks a kept negative score, and
    the reference does the same (no failure on a faithful float32 copy of HF's router)."""
    pytest.importorskip("torch")
    from nlaverify.check import check_op

    static = {"top_k": k, "n_group": n_group, "topk_group": topk_group}
    for seed in (0, 1):
        r = check_op(_hf_v2_select(k, n_group, topk_group), "deepseek_v2_select",
                     dtype="float32", framework="torch", static=static, shapes={"E": E},
                     seed=seed)
        assert not r.failures, r.failures
