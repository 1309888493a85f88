"""Issue 23 (stage 1 of "shared experts beside routed ones and sigmoid routers with a
load-balancing bias and scaled gates"): the routers of Qwen2-MoE and DeepSeek-V3 against
Hugging Face ``transformers`` (``Qwen2MoeSparseMoeBlock``, ``DeepseekV3MoE``: tiny random
configs, torch float64 on the CPU) in the output, the chosen experts and every gradient
(autograd), judged by the tolerance model; planted bugs on our side fail; our VJP/JVP against
JAX autodiff at sizes the exact proofs leave degenerate; argument errors.

Both HF routers drop to float32 (Qwen2-MoE: ``softmax(router_logits, dtype=torch.float)``;
DeepSeek-V3: ``F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))``),
so the comparison in float64 runs each router's own code with the float32 casts removed
(:func:`_exact_qwen_router`, :func:`_exact_deepseek_router`), and checks the replacement
against the stock router at float32's bound (so the patch cannot hide a bug of HF's code).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from nlaverify.backends import get_namespace  # noqa: E402
from nlaverify.errors import ShapeError  # noqa: E402
from nlaverify.interop.hf_patches import _router_forward  # noqa: E402
from nlaverify.interop.hf_patches_deepseek import v3_router_exact  # noqa: E402
from nlaverify.ops import moe_routing as mr  # noqa: E402
from nlaverify.ops import moe_shared as ms  # noqa: E402
from nlaverify.ops.activations import sigmoid  # noqa: E402
from nlaverify.tolerance import magnitude_condition, tolerance  # noqa: E402

NP = get_namespace("numpy")
#: tiny sizes: d = 4 tokens' width, m = 3 per expert, shared width 5 (Qwen) or
#: n_shared * m = 6 (DeepSeek), E = 4 (Qwen) or 8 in 4 groups (DeepSeek), 2 x 3 tokens
D, M, N_TOK = 4, 3, (2, 3)


def _exact_qwen_router(self, hidden_states):
    """``Qwen2MoeTopKRouter.forward`` without its float32 softmax: the patch ``verify --hf
    --hf-exact`` runs (``hf_patches._router_forward``), so these tests check that code."""
    return _router_forward(self, hidden_states, exact=True, renormalize=self.norm_topk_prob)


#: ``DeepseekV3TopkRouter.forward`` without the float32 casts, as ``verify --hf --hf-exact``
#: patches it
_exact_deepseek_router = v3_router_exact


def _dense(weights, indices, E: int) -> np.ndarray:
    """HF's ``(topk_weights, topk_indices)`` as dense gates ``(T, E)``."""
    out = np.zeros((weights.shape[0], E))
    np.put_along_axis(out, indices.detach().numpy(), weights.detach().numpy(), axis=1)
    return out


def _randomise(module, seed: int, scale: float = 0.5) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(scale * torch.randn(p.shape, generator=gen, dtype=p.dtype))


def _qwen_block(norm_topk_prob: bool, seed: int = 0):
    from transformers import Qwen2MoeConfig
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

    cfg = Qwen2MoeConfig(hidden_size=D, moe_intermediate_size=M,
                         shared_expert_intermediate_size=5, num_experts=4,
                         num_experts_per_tok=2, norm_topk_prob=norm_topk_prob,
                         experts_implementation="eager")
    block = Qwen2MoeSparseMoeBlock(cfg).double()
    _randomise(block, seed)
    return block


def _deepseek_block(seed: int = 0, norm_topk_prob: bool = True):
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE

    cfg = DeepseekV3Config(hidden_size=D, moe_intermediate_size=M, n_routed_experts=8,
                           n_group=4, topk_group=2, num_experts_per_tok=3, n_shared_experts=2,
                           routed_scaling_factor=2.5, norm_topk_prob=norm_topk_prob,
                           experts_implementation="eager")
    block = DeepseekV3MoE(cfg).double()
    _randomise(block, seed)
    with torch.no_grad():  # a bias that changes the choice (HF initialises it to 0)
        gen = torch.Generator().manual_seed(seed + 100)
        block.gate.e_score_correction_bias.copy_(
            0.3 * torch.randn(8, generator=gen, dtype=torch.float64))
    return block


def _experts(block) -> list[np.ndarray]:
    """HF's fused experts as ours: ``gate_up_proj[e] = [W_1^e; W_3^e]^T``, ``down_proj[e] =
    (W_2^e)^T``."""
    gu = block.experts.gate_up_proj.detach().numpy()
    down = block.experts.down_proj.detach().numpy()
    m = gu.shape[1] // 2
    return [np.swapaxes(gu[:, :m], 1, 2), np.swapaxes(gu[:, m:], 1, 2), np.swapaxes(down, 1, 2)]


def _shared(mlp) -> list[np.ndarray]:
    return [mlp.gate_proj.weight.detach().numpy().T, mlp.up_proj.weight.detach().numpy().T,
            mlp.down_proj.weight.detach().numpy().T]


def _hf_grads_as_ours(block, shared, gate_vec: bool) -> list[np.ndarray]:
    """HF's parameter gradients in our layout: ``dW_r, dW1, dW3, dW2, dU1, dU3, dU2``
    (and ``dw_sg``)."""
    g = block.experts.gate_up_proj.grad.numpy()
    m = g.shape[1] // 2
    out = [block.gate.weight.grad.numpy().T, np.swapaxes(g[:, :m], 1, 2),
           np.swapaxes(g[:, m:], 1, 2), np.swapaxes(block.experts.down_proj.grad.numpy(), 1, 2),
           shared.gate_proj.weight.grad.numpy().T, shared.up_proj.weight.grad.numpy().T,
           shared.down_proj.weight.grad.numpy().T]
    if gate_vec:
        out.append(block.shared_expert_gate.weight.grad.numpy()[0])
    return out


def _run_hf(block, exact_router, X: np.ndarray, G: np.ndarray, monkeypatch):
    """HF's output, gates and gradients (dX first) with the router patched to float64, and
    the stock router's gates on the same input (the patch fidelity)."""
    x = torch.tensor(X, requires_grad=True)
    stock = block.gate(x.detach())
    monkeypatch.setattr(block.gate, "forward", exact_router.__get__(block.gate))
    _, w, idx = block.gate(x.detach())
    E = block.gate.weight.shape[0]
    y = block(x)
    y.backward(torch.tensor(G))
    return (y.detach().numpy(), _dense(w, idx, E), _dense(stock[1].double(), stock[2], E),
            x.grad.numpy())


def _tol(*arrays, depth: int = 6):
    """Forward (router, gates, two expert matmuls, the sum) and backward stages; k the
    longest accumulation; kappa from the inputs' magnitudes."""
    return tolerance("float64", size=8, depth=depth, condition=magnitude_condition(*arrays))


def _data(seed: int):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((*N_TOK, D))
    return X, rng.standard_normal((*N_TOK, D))


@pytest.mark.parametrize("norm_topk_prob", [False, True])
def test_qwen2_moe_block_equals_hugging_face(norm_topk_prob: bool, monkeypatch) -> None:
    block = _qwen_block(norm_topk_prob)
    X, G = _data(1)
    y_hf, gates_hf, gates_stock, dX_hf = _run_hf(block, _exact_qwen_router, X, G, monkeypatch)
    W_r = block.gate.weight.detach().numpy().T
    args = [W_r, *_experts(block), *_shared(block.shared_expert),
            block.shared_expert_gate.weight.detach().numpy()[0]]
    logits = X @ W_r
    mask = mr.qwen_moe_select(NP, logits, 2)
    gates, mask2 = mr.qwen_moe_router(NP, logits.reshape(-1, 4), top_k=2,
                                      renormalize=norm_topk_prob)
    assert np.array_equal(mask.reshape(-1, 4), (gates_hf > 0).astype(float))
    assert np.array_equal(mask2, mask.reshape(-1, 4))
    tol = _tol(X, *args)
    assert tolerance("float32", size=4).compare(gates_stock, gates_hf).ok  # patch fidelity
    assert tol.compare(gates, gates_hf).ok
    y = ms.qwen2_moe(NP, X, mask, *args, renormalize=norm_topk_prob)
    assert tol.compare(y, y_hf).ok, tol.compare(y, y_hf)
    cots = ms.qwen2_moe_vjp(NP, G, X, mask, *args, renormalize=norm_topk_prob)
    grads_hf = [dX_hf, *_hf_grads_as_ours(block, block.shared_expert, True)]
    for name, ours, theirs in zip(("X", "W_r", "W1", "W3", "W2", "U1", "U3", "U2", "w_sg"),
                                  cots, grads_hf, strict=True):
        c = tol.compare(ours, theirs)
        assert c.ok, (name, c, tol.reason)


def _deepseek_args(block) -> list[np.ndarray]:
    return [block.gate.weight.detach().numpy().T, *_experts(block), *_shared(block.shared_experts)]


_DS = {"top_k": 3, "n_group": 4, "topk_group": 2}


@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_deepseek_v3_moe_equals_hugging_face(norm_topk_prob: bool, monkeypatch) -> None:
    """DeepSeek-V3's block against HF's, with its released normalised gates and with
    ``norm_topk_prob=False`` (gates :math:`\\rho s_e`, no normaliser), forward and gradients."""
    block = _deepseek_block(norm_topk_prob=norm_topk_prob)
    rn = {"renormalize": norm_topk_prob}
    X, G = _data(2)
    y_hf, gates_hf, gates_stock, dX_hf = _run_hf(block, _exact_deepseek_router, X, G,
                                                 monkeypatch)
    args = _deepseek_args(block)
    bias = block.gate.e_score_correction_bias.detach().numpy()
    logits = X @ args[0]
    gates, mask = mr.deepseek_v3_router(NP, logits.reshape(-1, 8), bias,
                                        routed_scaling_factor=2.5, **_DS, **rn)
    assert np.array_equal(mask, (gates_hf > 0).astype(float))
    # the bias changed the choice of some token (else the test would not see it)
    plain = mr.deepseek_v3_select(NP, sigmoid(NP, logits.reshape(-1, 8)), 0 * bias, **_DS)
    assert not np.array_equal(plain, mask)
    tol = _tol(X, *args)
    assert tolerance("float32", size=8).compare(gates_stock, gates_hf).ok  # patch fidelity
    assert tol.compare(gates, gates_hf).ok
    if norm_topk_prob:
        np.testing.assert_allclose(gates.sum(-1), 2.5, rtol=tol.rtol)   # gates sum to rho
    else:  # unnormalised: rho times the chosen sigmoids, which sum to less than top_k
        assert tol.compare(gates, 2.5 * sigmoid(NP, logits.reshape(-1, 8)) * mask).ok
    mask = mask.reshape(*N_TOK, 8)
    y = ms.deepseek_v3_moe(NP, X, mask, *args, routed_scaling_factor=2.5, **rn)
    assert tol.compare(y, y_hf).ok, tol.compare(y, y_hf)
    cots = ms.deepseek_v3_moe_vjp(NP, G, X, mask, *args, routed_scaling_factor=2.5, **rn)
    grads_hf = [dX_hf, *_hf_grads_as_ours(block, block.shared_experts, False)]
    for name, ours, theirs in zip(("X", "W_r", "W1", "W3", "W2", "U1", "U3", "U2"), cots,
                                  grads_hf, strict=True):
        c = tol.compare(ours, theirs)
        assert c.ok, (name, c, tol.reason)


PLANTS = ("bias_in_gate", "no_routed_scaling", "softmax_for_sigmoid", "no_renormalisation")


@pytest.mark.parametrize("plant", PLANTS)
def test_deepseek_v3_planted_bug_fails_against_hugging_face(plant: str, monkeypatch) -> None:
    block = _deepseek_block()
    X, G = _data(2)
    y_hf = _run_hf(block, _exact_deepseek_router, X, G, monkeypatch)[0]
    args = _deepseek_args(block)
    bias = block.gate.e_score_correction_bias.detach().numpy()
    s = sigmoid(NP, X @ args[0])
    mask = mr.deepseek_v3_select(NP, s, bias, **_DS)
    static = {"routed_scaling_factor": 2.5}
    if plant == "bias_in_gate":
        gates = mr.deepseek_v3_gates
        monkeypatch.setattr(ms, "deepseek_v3_gates",
                            lambda xp, sc, mk, **kw: gates(xp, sc + bias, mk, **kw))
    elif plant == "no_routed_scaling":
        static = {"routed_scaling_factor": 1.0}
    elif plant == "no_renormalisation":
        static["renormalize"] = False
    y = (ms._block("planted", NP, X, mask, tuple(args), None, "softmax",
                   {"renormalize": True}) if plant == "softmax_for_sigmoid"
         else ms.deepseek_v3_moe(NP, X, mask, *args, **static))
    assert not _tol(X, *args).compare(y, y_hf).ok


def _jax_check(name: str, sizes: dict[str, int]) -> None:
    """Our VJP and JVP against ``jax.vjp``/``jax.jvp`` of the forward, float64."""
    import jax
    import jax.numpy as jnp

    from nlaverify.ops.moe_specs import MOE_OPS
    from nlaverify.ops.opspec import fixed_routing_mask

    jax.config.update("jax_enable_x64", True)
    spec, xp = MOE_OPS[name], get_namespace("jax")
    rng = np.random.default_rng(3)
    args = []
    for a in spec.args:
        shape = tuple(sizes[d] for d in a.dims)
        args.append(jnp.asarray(fixed_routing_mask(*shape) if a.kind == "mask"
                                else rng.standard_normal(shape)))
    _, cot_ref = spec.autodiff_vjp(args, G := jnp.asarray(rng.standard_normal(
        spec.forward(xp, *args, **spec.static).shape)), **spec.static)
    cots = spec.vjp(xp, G, *args, **spec.static)
    reals = [x for a, x in zip(spec.args, args, strict=True) if a.kind == "real"]
    T = [jnp.asarray(rng.standard_normal(x.shape)) for x in reals]
    tol = tolerance("float64", size=max(sizes.values()), depth=6,
                    condition=magnitude_condition(*args))
    for a, c, r in zip(spec.real_args, cots, cot_ref, strict=True):
        assert tol.compare(c, r).ok, (name, a.name)
    assert tol.compare(spec.jvp(xp, tuple(T), *args, **spec.static),
                       spec.autodiff_jvp(args, T, **spec.static)).ok


@pytest.mark.parametrize("name", ["qwen2_moe", "qwen2_moe_norm", "deepseek_v3_moe",
                                  "deepseek_v3_gates"])
def test_vjp_and_jvp_equal_jax_autodiff_at_full_sizes(name: str) -> None:
    _jax_check(name, {"n": 3, "d": 4, "E": 5, "m": 2, "f": 3})


def test_selection_arguments_are_named() -> None:
    s = np.zeros((2, 6))
    with pytest.raises(ShapeError, match=r"'n_group'.*E=6"):
        mr.group_limited_topk_mask(NP, s, 2, 4, 1)
    with pytest.raises(ShapeError, match="'topk_group'"):
        mr.group_limited_topk_mask(NP, s, 2, 3, 4)
    with pytest.raises(ShapeError, match=r"'top_k'.*= 2, got 3"):
        mr.group_limited_topk_mask(NP, s, 3, 3, 1)
    with pytest.raises(ShapeError, match="'bias'"):
        mr.deepseek_v3_select(NP, s, np.zeros(5), 2, 3, 1)
    X, mask = np.zeros((2, 4)), np.zeros((2, 3))
    W = [np.zeros((4, 5)), *(np.zeros((5, 4, 1)),) * 2, np.zeros((5, 1, 4)),
         *(np.zeros((4, 2)),) * 2, np.zeros((2, 4))]
    with pytest.raises(ShapeError, match=r"'mask'.*E=5\), got \(2, 3\)"):
        ms.deepseek_v3_moe(NP, X, mask, *W)
    with pytest.raises(ShapeError, match="'w_sg'"):
        ms.qwen2_moe(NP, X, np.zeros((2, 5)), *W, np.zeros(3))
