"""``check_decode``: a KV-cache decoder written the way users write it (RoPE, GQA, a sliding
window, a preallocated cache) passes in float64 and float32, NumPy and JAX; each planted bug
fails at its node and position; bad input is named."""

from __future__ import annotations

import numpy as np
import pytest

from nlaverify.check import CheckError, check_decode
from nlaverify.config import TransformerConfig
from nlaverify.graph.build import build_transformer
from nlaverify.graph.run import init_params

CFG = TransformerConfig(vocab_size=13, d_model=8, n_heads=4, n_kv_heads=2, n_blocks=2,
                        d_mlp=16, norm="rmsnorm", positions="rope", mlp="swiglu", context=16,
                        sliding_window=3, name="decode-test")
TOKENS = np.array([3, 1, 4, 1, 5, 9, 2, 6])


@pytest.fixture(scope="module")
def params() -> dict[str, np.ndarray]:
    return init_params(build_transformer(CFG), seed=0)


def make_decoder(cfg: TransformerConfig, params: dict, *, dtype: str = "float64",
                 bug: str | None = None, xp=np):
    """A Llama-style decoder with a preallocated KV cache (one per block), written from the
    papers, not from nlaverify: returns ``(step, cache_factory)``. ``bug`` plants one
    mistake: ``"rope_offset"`` (single steps at position + 1), ``"rope_shift"`` (every
    position + 1), ``"window"`` (the window sees
    w + 1 keys), ``"gqa_tile"`` (key/value heads tiled instead of repeated),
    ``"stale_cache"`` (the cache is written in the prefill only), ``"aliased"`` (every block
    and both k and v write one shared buffer: NumPy's ``asarray`` does not copy)."""
    H, Hkv, dh = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
    rep, w = H // Hkv, cfg.sliding_window
    P = {k: xp.asarray(np.asarray(v, dtype=dtype)) for k, v in params.items()}

    def norm(x, g):
        return g * x / xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + cfg.norm_eps)

    def rope(x, pos):  # x (h, t, dh): interleaved pairs (x_2i, x_2i+1), RoFormer
        theta = cfg.rope_base ** (-np.arange(0, dh, 2) / dh)
        ang = xp.asarray((np.asarray(pos)[:, None] * theta[None, :]).astype(dtype))
        c, s = xp.cos(ang), xp.sin(ang)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return xp.stack([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1).reshape(x.shape)

    def write(buf, lo, hi, val):
        if xp is np:
            buf[:, lo:hi] = val
            return buf
        return buf.at[:, lo:hi].set(val)

    def cache_factory():  # one buffer per block and per k/v ("aliased": one for all)
        shape = (Hkv, cfg.context, dh)
        if bug == "aliased":
            z = np.zeros(shape, dtype=dtype)
            return [{"k": z, "v": z} for _ in range(cfg.n_blocks)]
        return [{"k": xp.asarray(np.zeros(shape, dtype=dtype)),
                 "v": xp.asarray(np.zeros(shape, dtype=dtype))} for _ in range(cfg.n_blocks)]

    def step(tokens, start, cache):
        t = int(tokens.shape[0])
        hi = start + t
        # "rope_offset": a single step rotates at the cache length after its append (pos + 1);
        # "rope_shift": every position off by one, the prefill's too
        off = (bug == "rope_offset" and start > 0) or bug == "rope_shift"
        pos = np.arange(start, hi) + (1 if off else 0)
        x = P["embed.W_E"][tokens]
        seen = {}
        for b in range(cfg.n_blocks):
            p = f"blocks.{b}"
            h = norm(x, P[f"{p}.norm1.gamma"])
            q = (h @ P[f"{p}.attn.q.W_Q"]).reshape(t, H, dh).transpose(1, 0, 2)
            k = (h @ P[f"{p}.attn.k.W_K"]).reshape(t, Hkv, dh).transpose(1, 0, 2)
            v = (h @ P[f"{p}.attn.v.W_V"]).reshape(t, Hkv, dh).transpose(1, 0, 2)
            q, k = rope(q, pos), rope(k, pos)
            if not (bug == "stale_cache" and start > 0):
                cache[b]["k"] = write(cache[b]["k"], start, hi, k)
                cache[b]["v"] = write(cache[b]["v"], start, hi, v)
            K, V = cache[b]["k"][:, :hi], cache[b]["v"][:, :hi]
            seen[f"{p}.attn.k_rope"], seen[f"{p}.attn.v_heads"] = K, V
            if bug == "gqa_tile":
                K, V = xp.tile(K, (rep, 1, 1)), xp.tile(V, (rep, 1, 1))
            else:
                K, V = xp.repeat(K, rep, axis=0), xp.repeat(V, rep, axis=0)
            S = q @ K.transpose(0, 2, 1) / np.sqrt(dh).astype(dtype)
            qp, kp = np.arange(start, hi)[:, None], np.arange(hi)[None, :]
            lag = qp - kp
            ok = (lag >= 0) & ((lag <= w) if bug == "window" else (lag < w))
            S = xp.where(xp.asarray(ok), S, -np.inf)
            E = xp.exp(S - S.max(axis=-1, keepdims=True))
            o = (E / E.sum(axis=-1, keepdims=True)) @ V
            seen[f"{p}.attn.heads"] = o
            x = x + o.transpose(1, 0, 2).reshape(t, H * dh) @ P[f"{p}.attn.out.W_O"]
            h = norm(x, P[f"{p}.norm2.gamma"])
            a = h @ P[f"{p}.mlp.gate.W_gate"]
            x = x + (a / (1 + xp.exp(-a)) * (h @ P[f"{p}.mlp.up.W_up"])) @ P[
                f"{p}.mlp.out.W_down"]
        logits = norm(x, P["final_norm.gamma"]) @ P["unembed.W_U"]
        return logits, cache, seen

    return step, cache_factory


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("prefill", [1, 3])
def test_correct_numpy_decoder_passes(params, dtype: str, prefill: int) -> None:
    step, cache = make_decoder(CFG, params, dtype=dtype)
    report = check_decode(step, CFG, params, TOKENS, cache_factory=cache, prefill=prefill,
                          dtype=dtype)
    assert report, report
    nodes = {r.where.split("[pos")[0] for r in report.rows}
    assert {"logits", "blocks.1.attn.k_rope", "blocks.0.attn.heads"} <= nodes
    # the cache is checked at every position after every step (hi = prefill, ..., 8)
    k_rows = [r for r in report.rows if r.where.startswith("blocks.0.attn.k_rope")]
    assert len(k_rows) == sum(range(prefill, 9))
    assert report.worst_ratio < 1


def test_correct_jax_decoder_passes_float32(params) -> None:
    import jax.numpy as jnp

    step, cache = make_decoder(CFG, params, dtype="float32", xp=jnp)
    report = check_decode(step, CFG, params, TOKENS[:5], cache_factory=cache, prefill=2,
                          dtype="float32", framework="jax")  # 5 tokens: JAX runs op by op
    assert report, report


@pytest.mark.parametrize("bug", [None, "window"])
def test_jax_decoder_in_bfloat16(params, bug) -> None:
    # bfloat16 storage and arithmetic throughout: the correct one passes (worst ratio
    # 0.12-0.17 over seeds 0-2), the window off by one (the smallest signal of the planted
    # bugs, ratio 4.6-7.8) fails at its node and position
    import jax.numpy as jnp
    import ml_dtypes

    step, cache = make_decoder(CFG, params, dtype=ml_dtypes.bfloat16, xp=jnp, bug=bug)
    report = check_decode(step, CFG, params, TOKENS[:5], cache_factory=cache, prefill=3,
                          dtype="bfloat16", framework="jax")
    if bug is None:
        assert report, report
    else:
        assert report.first_failure.where.startswith("blocks.0.attn.heads[pos 3][")


def test_torch_step_through_the_adapters(params) -> None:
    # tokens arrive as torch tensors, torch outputs come back through DLPack
    import torch

    step, cache = make_decoder(CFG, params, bug="gqa_tile")

    def torch_step(tokens, start, c):
        assert isinstance(tokens, torch.Tensor) and tokens.dtype == torch.int64
        logits, c, seen = step(tokens.numpy(), start, c)
        return torch.from_numpy(logits), c, {k: torch.from_numpy(np.ascontiguousarray(v))
                                             for k, v in seen.items()}

    report = check_decode(torch_step, CFG, params, TOKENS, cache_factory=cache,
                          framework="torch")
    assert report.first_failure.where.startswith("blocks.0.attn.heads[pos 0][")


def test_window_sized_cache_returning_the_last_w_positions_passes(params) -> None:
    step, cache = make_decoder(CFG, params)

    def windowed(tokens, start, c):  # a rolling cache: only the last w keys are kept
        logits, c, seen = step(tokens, start, c)
        w = CFG.sliding_window
        return logits, c, {k: v[:, -w:] for k, v in seen.items() if "k_rope" in k}

    report = check_decode(windowed, CFG, params, TOKENS, cache_factory=cache)
    assert report, report
    last = [r.where for r in report.rows if r.check == "step at position 7"]
    assert "blocks.0.attn.k_rope[pos 5]" in {w.split("][")[0] + "]" for w in last}
    assert not any(w.startswith("blocks.0.attn.k_rope[pos 4]") for w in last)


@pytest.mark.parametrize(("bug", "prefill", "where", "step"), [
    ("rope_offset", 3, "blocks.0.attn.k_rope[pos 3]", "step at position 3"),
    ("window", 1, "blocks.0.attn.heads[pos 3]", "step at position 3"),
    ("gqa_tile", 1, "blocks.0.attn.heads[pos 0]", "step at position 0"),
    ("stale_cache", 3, "blocks.0.attn.v_heads[pos 3]", "step at position 3"),
    ("aliased", 1, "blocks.0.attn.v_heads[pos 0]", "step at position 0"),
])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_planted_bug_is_named_at_its_node_and_position(params, bug, prefill, where, step,
                                                       dtype) -> None:
    fn, cache = make_decoder(CFG, params, dtype=dtype, bug=bug)
    report = check_decode(fn, CFG, params, TOKENS, cache_factory=cache, prefill=prefill,
                          dtype=dtype)
    assert not report.ok
    first = report.first_failure
    assert first.where.startswith(where + "["), (bug, first)
    assert first.check == step
    assert first.ratio > 1 and np.isfinite(first.bound) and first.bound > 0
    assert any(r.where.startswith("logits[pos") for r in report.failures)


def test_logits_only_still_catch_the_rope_offset(params) -> None:
    fn, cache = make_decoder(CFG, params, bug="rope_offset")

    def no_taps(tokens, start, c):
        return fn(tokens, start, c)[:2]

    report = check_decode(no_taps, CFG, params, TOKENS, cache_factory=cache, prefill=3)
    assert report.first_failure.where.startswith("logits[pos 3][")
    assert any("logits only" in n for n in report.notes)


def test_a_uniform_rope_shift_is_invisible_in_the_logits_but_named_in_the_cache(params):
    # scores depend on relative positions only (identity rope_relative_position): the
    # logits agree, the cached keys (incompatible with any other prefill) do not
    fn, cache = make_decoder(CFG, params, bug="rope_shift")
    report = check_decode(fn, CFG, params, TOKENS, cache_factory=cache)
    assert {r.where.split("[pos")[0] for r in report.failures} == {
        "blocks.0.attn.k_rope", "blocks.1.attn.k_rope"}
    assert report.first_failure.where.startswith("blocks.0.attn.k_rope[pos 0][")


# -- bad input -----------------------------------------------------------------------------


def test_a_step_that_raises_fails_on_its_row(params) -> None:
    step, cache = make_decoder(CFG, params)

    def flaky(tokens, start, c):
        if start == 2:
            raise RuntimeError("cache full")
        return step(tokens, start, c)

    report = check_decode(flaky, CFG, params, TOKENS, cache_factory=cache)
    bad = report.first_failure
    assert bad.where == "step_fn" and bad.check == "step at position 2"
    assert "RuntimeError: cache full" in bad.reason


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"tokens": np.array([[1, 2], [3, 4]])}, "argument 'tokens'.*shape"),
    ({"tokens": np.array([1, 99])}, "argument 'tokens'.*vocab_size"),
    ({"tokens": np.arange(17) % 13}, "argument 'tokens'.*context"),
    ({"config": {"d_model": 8}}, "argument 'config'"),
    ({"config": CFG.replace(causal=False, sliding_window=None)}, "argument 'config'.*causal"),
    ({"prefill": 0}, "argument 'prefill'"),
    ({"dtype": "int8"}, "argument 'dtype'"),
    ({"framework": "tensorflow"}, "argument 'framework'"),
    ({"params": {"embed.W_E": np.zeros((13, 8))}}, "argument 'params'.*no value"),
])
def test_bad_arguments_are_named(params, kwargs, match) -> None:
    step, cache = make_decoder(CFG, params)
    args = {"config": CFG, "params": params, "tokens": TOKENS, **kwargs}
    with pytest.raises(CheckError, match=match):
        check_decode(step, args["config"], args["params"], args["tokens"], cache_factory=cache,
                     **{k: v for k, v in kwargs.items() if k in ("prefill", "dtype",
                                                                 "framework")})


def test_misshaped_params_are_named(params) -> None:
    step, cache = make_decoder(CFG, params)
    bad = {**params, "unembed.W_U": params["unembed.W_U"].T}
    with pytest.raises(CheckError, match=r"'unembed.W_U': expected shape \(8, 13\)"):
        check_decode(step, CFG, bad, TOKENS, cache_factory=cache)


@pytest.mark.parametrize(("returns", "match"), [
    (lambda lg, c, s: lg, "returned a ndarray; expected a tuple"),
    (lambda lg, c, s: ("logits", c), "logits: expected an array"),
    (lambda lg, c, s: (lg[:, :5], c), r"expected logits of shape \(1, 13\)"),
    (lambda lg, c, s: (lg, c, {"blocks.0.attn.k_rop": s["blocks.0.attn.k_rope"]}),
     "did you mean 'blocks.0.attn.k_rope'"),
    (lambda lg, c, s: (lg, c, {"blocks.0.attn.k_rope": s["blocks.0.attn.k_rope"][:, :, :1]}),
     r"intermediate 'blocks.0.attn.k_rope': expected shape \(2, L, 2\)"),
    (lambda lg, c, s: (lg, c, [1, 2]), "intermediates of type list"),
])
def test_steps_that_break_the_protocol_are_named(params, returns, match) -> None:
    step, cache = make_decoder(CFG, params)

    def fn(tokens, start, c):
        return returns(*step(tokens, start, c))

    with pytest.raises(CheckError, match=f"argument 'step_fn'.*{match}"):
        check_decode(fn, CFG, params, TOKENS, cache_factory=cache)


def test_a_misshaped_later_step_fails_its_row_and_keeps_the_earlier_ones(params) -> None:
    """Logits of the wrong shape at position 3 only: that step fails on its row (was a
    CheckError that lost the rows of positions 0..2)."""
    step, cache = make_decoder(CFG, params)

    def late(tokens, start, c):
        logits, c2, *rest = step(tokens, start, c)
        return ((logits[:, :5] if start == 3 else logits), c2, *rest)

    report = check_decode(late, CFG, params, TOKENS, cache_factory=cache)
    bad = report.first_failure
    assert bad.check == "step at position 3" and bad.where == "step_fn", report
    assert "expected logits of shape (1, 13)" in bad.reason
    assert any(r.check == "step at position 2" and r.verdict == "pass" for r in report.rows)
