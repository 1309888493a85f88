"""RWKV-4's block (issue 37): the ops of :mod:`nlaverify.ops.rwkv_block` against JAX autodiff,
their exact proofs, the independent JAX model :mod:`nlaverify.models.jax_rwkv`, and Hugging
Face's ``RwkvForCausalLM``.

Oracles: ``jax.vjp``/``jax.jvp`` of each op's forward (float64); ``sympy.diff`` (the proofs of
:mod:`nlaverify.identities.rwkv`); the JAX model, which computes the WKV as per-channel causal
softmax attention rather than a scan; and HF's PyTorch path (random weights, float64, eval).
HF's CPU WKV (``rwkv_linear_attention_cpu``) keeps its state and keys in float32 whatever the
model dtype: a float32 island. The stock model is compared at float32's bound; with the WKV
patched to the same code in the model dtype it must agree at float64's.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.identities import rwkv as rwkv_identities
from nlaverify.models import jax_rwkv
from nlaverify.ops import norms, rwkv, rwkv_block
from nlaverify.ops.rwkv_specs import RWKV_OPS
from nlaverify.symbolic.vjp_proof import prove_jvp, prove_vjp
from nlaverify.tolerance import tolerance

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

#: the small HF model of the issue
HF = dict(vocab_size=20, hidden_size=16, num_hidden_layers=2, attention_hidden_size=16,
          intermediate_size=32, context_length=16, tie_word_embeddings=False)
IDS = [[1, 5, 7, 3, 19, 0, 2], [4, 4, 11, 18, 6, 9, 13]]
#: dependent stages of the stack: embedding and ln0, ten per block (two norms, three
#: projections, the mixes, the WKV, the gates, relu^2), ln_out and the head
DEPTH = 4 + 10 * HF["num_hidden_layers"]


def _inputs(spec, rng, batch=2):
    sizes = {k: hi for k, (_, hi) in spec.size_ranges.items()}
    out = []
    for a in spec.args:
        shape = tuple(sizes[d] for d in a.dims)
        out.append(jnp.asarray(rng.normal(size=((batch, *shape) if a.per_sequence else shape))))
    return out


@pytest.mark.parametrize("name", sorted(RWKV_OPS))
def test_vjp_and_jvp_equal_jax_autodiff(name: str) -> None:
    spec, xp, rng = RWKV_OPS[name], get_namespace("jax"), np.random.default_rng(0)
    args = _inputs(spec, rng)
    out = spec.forward(xp, *args)
    G = jnp.asarray(rng.normal(size=out.shape))
    _, want = spec.autodiff_vjp(args, G)
    tol = tolerance("float64", size=out.size, depth=4)
    for arg, got, ref in zip(spec.args, spec.vjp(xp, G, *args), want, strict=True):
        assert tol.compare(got, ref).ok, (name, arg.name)
    T = [jnp.asarray(rng.normal(size=a.shape)) for a in args]
    assert tol.compare(spec.jvp(xp, tuple(T), *args), spec.autodiff_jvp(args, T)).ok
    # None tangents are zero ones
    half = tuple(t if k % 2 or len(T) == 1 else None for k, t in enumerate(T))
    assert tol.compare(spec.jvp(xp, half, *args),
                       spec.autodiff_jvp(args, [t if h is not None else 0 * t
                                                for t, h in zip(T, half, strict=True)])).ok


@pytest.mark.parametrize("name", ["wkv", "rwkv_token_mix", "rwkv_time_mix"])
def test_proofs(name: str) -> None:
    assert prove_vjp(RWKV_OPS[name]).verdict == "proved"
    assert prove_jvp(RWKV_OPS[name]).verdict == "proved"


def _wkv_vjp_without_bonus(xp, G, w, u, k, v):
    wbar, ubar, kbar, vbar = rwkv.wkv_vjp(xp, G, w, u, k, v)
    return wbar, 0 * ubar, kbar, vbar


def test_proof_refutes_a_wrong_vjp_and_recurrent_form_is_proved() -> None:
    wrong = dataclasses.replace(RWKV_OPS["wkv"], vjp=_wkv_vjp_without_bonus)
    assert prove_vjp(wrong).verdict == "failed"
    assert rwkv_identities.derive_time_mix_recurrent().verdict == "proved"
    assert rwkv_identities.derive_channel_mix_recurrent().verdict == "proved"


def test_recurrent_forms_equal_the_sequence_forms_in_float64() -> None:
    """The decoding path (one token at a time, state carried) on a batch of sequences."""
    xp, rng = get_namespace("numpy"), np.random.default_rng(5)
    for name, rec in (("rwkv_time_mix", rwkv_block.time_mix_recurrent),
                      ("rwkv_channel_mix", rwkv_block.channel_mix_recurrent)):
        spec = RWKV_OPS[name]
        args = [np.asarray(a) for a in _inputs(spec, rng, batch=3)]
        want = spec.forward(xp, *args)
        assert tolerance("float64", size=want.shape[-2], depth=4).compare(
            rec(xp, *args), want).ok, name


@pytest.mark.parametrize("offset", [1000.0, -1000.0])
def test_wkv_large_keys_stay_finite_and_match_the_attention_form(offset: float) -> None:
    """Keys of +-1000 overflow or underflow the naive form (e^{+-1000}) in float64; the
    running maximum and the adjoint's own shift keep every exponent <= 0, and both agree
    with the JAX model's softmax form (an independent stable evaluation)."""
    xp, rng = get_namespace("numpy"), np.random.default_rng(3)
    n, a = 6, 3
    w, u = -np.exp(rng.normal(size=a)), rng.normal(size=a)
    k = rng.normal(size=(n, a)) * 400 + offset
    v, G = rng.normal(size=(n, a)), rng.normal(size=(n, a))
    y = rwkv.wkv(xp, w, u, k, v)
    with np.errstate(over="ignore", invalid="ignore"):
        assert not np.all(np.isfinite(rwkv.wkv_naive(xp, w, u, k, v)))
    tol = tolerance("float64", size=n, depth=2, condition=float(jnp.abs(k).max()))
    assert tol.compare(y, jax_rwkv.wkv_attention(w, u, k, v)).ok
    _, pull = jax.vjp(lambda *z: jax_rwkv.wkv_attention(*z), w, u, k, v)
    for got, ref in zip(rwkv.wkv_vjp(xp, G, w, u, k, v), pull(G), strict=True):
        assert np.all(np.isfinite(np.asarray(got)))
        assert tol.compare(got, ref).ok


def test_wkv_vjp_in_float32_past_the_overflow_of_exp() -> None:
    """Keys to about 150 (e^88 is float32's largest): the float32 VJP keeps float32's
    accuracy against the same VJP in float64."""
    xp, rng = get_namespace("numpy"), np.random.default_rng(7)
    n, a = 6, 3
    args = [-np.exp(rng.normal(size=a)), rng.normal(size=a),
            rng.normal(size=(n, a)) * 30 + 60, rng.normal(size=(n, a))]
    G = rng.normal(size=(n, a))
    want = rwkv.wkv_vjp(xp, G, *args)
    got = rwkv.wkv_vjp(xp, G.astype(np.float32), *(x.astype(np.float32) for x in args))
    tol = tolerance("float32", size=n, depth=4, condition=float(np.abs(args[2]).max()))
    for g, ref in zip(got, want, strict=True):
        assert g.dtype == np.float32 and tol.compare(g, ref).ok


def _ops_logits(p, ids, n_layers, eps=1e-5, eps_out=1e-5):
    """The stack composed from the ops on the NumPy namespace."""
    xp = get_namespace("numpy")
    h = norms.layernorm(xp, p["emb"][np.asarray(ids)], p["ln0.g"], p["ln0.b"], eps)
    for i in range(n_layers):
        q = f"blocks.{i}."
        x = norms.layernorm(xp, h, p[q + "ln1.g"], p[q + "ln1.b"], eps)
        h = h + rwkv_block.time_mix(xp, x, *(p[q + "att." + s] for s in (
            "mu_k", "mu_v", "mu_r", "time_decay", "time_first", "W_k", "W_v", "W_r", "W_o")))
        x = norms.layernorm(xp, h, p[q + "ln2.g"], p[q + "ln2.b"], eps)
        h = h + rwkv_block.channel_mix(xp, x, *(p[q + "ffn." + s] for s in (
            "mu_k", "mu_r", "W_k", "W_r", "W_v")))
    return xp.matmul(norms.layernorm(xp, h, p["ln_out.g"], p["ln_out.b"], eps_out), p["head"])


def _hf_model(rescale_every: int = 0):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.RwkvConfig(**HF, rescale_every=rescale_every)
    torch.manual_seed(0)
    model = transformers.RwkvForCausalLM(cfg).to(torch.float64)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # HF's init zeroes or fixes some tensors: draw all of them
        for _, prm in model.named_parameters():
            prm.copy_(torch.randn(prm.shape, generator=gen, dtype=prm.dtype)
                      * (0.5 if prm.ndim < 2 else 0.3))
    return model.eval(), cfg


def _hf_logits(model) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.tensor(IDS)).logits.numpy()


def _wkv_cpu_model_dtype(time_decay, time_first, key, value, state=None, return_state=False):
    """``rwkv_linear_attention_cpu`` of transformers line for line, its state and keys in the
    model dtype instead of float32 (the exact patch of the float32 island)."""
    import torch

    output = torch.zeros_like(key)
    if state is None:
        num, den = torch.zeros_like(key[:, 0]), torch.zeros_like(key[:, 0])
        mx = torch.zeros_like(key[:, 0]) - 1e38
    else:
        num, den, mx = (s.to(key.dtype) for s in state)
    time_decay = -torch.exp(time_decay)
    for t in range(key.size(1)):
        kt, vt = key[:, t], value[:, t]
        mo = torch.maximum(mx, kt + time_first)
        e1, e2 = torch.exp(mx - mo), torch.exp(kt + time_first - mo)
        output[:, t] = (e1 * num + e2 * vt) / (e1 * den + e2)
        ms = torch.maximum(mx + time_decay, kt)
        e1, e2 = torch.exp(mx + time_decay - ms), torch.exp(kt - ms)
        num, den, mx = e1 * num + e2 * vt, e1 * den + e2, ms
    return output, ([num, den, mx] if return_state or state is not None else None)


def test_ops_jax_model_and_hugging_face_agree(monkeypatch) -> None:
    from transformers.models.rwkv import modeling_rwkv

    model, cfg = _hf_model()
    p = jax_rwkv.params_from_hf(model.state_dict())
    L, eps = cfg.num_hidden_layers, cfg.layer_norm_epsilon
    ops = _ops_logits(p, IDS, L, eps)
    jx = np.asarray(jax_rwkv.rwkv_logits({k: jnp.asarray(v) for k, v in p.items()},
                                         jnp.asarray(IDS), L, eps))
    tol64 = tolerance("float64", size=cfg.intermediate_size, depth=DEPTH)
    assert tol64.compare(ops, jx).ok
    stock = _hf_logits(model)
    tol32 = tolerance("float32", size=len(IDS[0]), depth=DEPTH)
    assert not tol64.compare(stock, jx).ok  # the float32 island shows at float64's bound
    assert tol32.compare(stock, jx).ok
    monkeypatch.setattr(modeling_rwkv, "rwkv_linear_attention", _wkv_cpu_model_dtype)
    assert tol64.compare(_hf_logits(model), ops).ok
    # a planted mistake: nn.Linear weights read without the transpose (d = a: shapes agree)
    bad = {k: (v.T if k.endswith("att.W_k") else v) for k, v in p.items()}
    assert not tol32.compare(_ops_logits(bad, IDS, L, eps), ops).ok


def test_hugging_face_recurrent_decoding_equals_the_ops_sequence() -> None:
    """HF's one-token path (``state``: the previous tokens and the WKV's (num, den, max),
    stored in float32) after a prompt equals the ops' sequence logits at float32's bound:
    the state the graph's recurrent decoding will carry. Batch 1: with a batch of B > 1 the
    one-token path of ``transformers`` 5.x adds ``shifted`` ``(B, d)`` (``state[1][:, :,
    layer]``, not unsqueezed) to ``hidden`` ``(B, 1, d)``, broadcasting to ``(B, B, d)``."""
    import torch

    model, cfg = _hf_model()
    p = jax_rwkv.params_from_hf(model.state_dict())
    ops = _ops_logits(p, IDS, cfg.num_hidden_layers, cfg.layer_norm_epsilon)
    rows = []
    for seq in IDS:  # one sequence at a time: see the note below
        ids = torch.tensor([seq])
        with torch.no_grad():
            out = model(ids[:, :3], use_cache=True)
            steps = [out.logits.numpy()]
            for t in range(3, ids.shape[1]):
                out = model(ids[:, t:t + 1], state=out.state, use_cache=True)
                steps.append(out.logits.numpy())
        rows.append(np.concatenate(steps, axis=1))
    got = np.concatenate(rows, axis=0)
    assert tolerance("float32", size=len(IDS[0]), depth=DEPTH).compare(got, ops).ok


def test_rescale_every_is_reproduced_and_is_not_the_same_function(monkeypatch) -> None:
    from transformers.models.rwkv import modeling_rwkv

    monkeypatch.setattr(modeling_rwkv, "rwkv_linear_attention", _wkv_cpu_model_dtype)
    model, cfg = _hf_model(rescale_every=1)
    got = _hf_logits(model)  # eval mode: weights divided in place, h halved per block
    p = {k: jnp.asarray(v) for k, v in jax_rwkv.params_from_hf(model.state_dict()).items()}
    args = (jnp.asarray(IDS), cfg.num_hidden_layers, cfg.layer_norm_epsilon)
    tol64 = tolerance("float64", size=cfg.intermediate_size, depth=DEPTH)
    assert tol64.compare(got, jax_rwkv.rwkv_logits(p, *args, rescale_every=1)).ok
    plain, _ = _hf_model(rescale_every=0)
    # LayerNorm's eps is not scale-invariant: the rescaled model is another function
    assert not tol64.compare(got, _hf_logits(plain)).ok
