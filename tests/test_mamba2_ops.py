"""Mamba-2's scan and gated RMSNorm (nlaverify.ops.ssm2): the proved VJP/JVP against JAX
autodiff, the forward against Hugging Face's chunked SSD kernel (``mamba2_chunk_scan``) and
``Mamba2RMSNormGated`` with their float32 islands removed, the dual (attention) form, bad
input, and ``check_op`` on a user's SSD kernel with the bugs people write (``repeat`` for
``repeat_interleave`` in the group broadcast, the decay mask off by one, the skip dropped)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.check import check_op
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.ops import ssm, ssm2
from nlaverify.tolerance import tolerance

jax.config.update("jax_enable_x64", True)
XP = get_namespace("jax")
NP = get_namespace("numpy")


def _scan_args(rng, b=2, n=5, H=4, P=3, G=2, N=3):
    return [rng.normal(size=s) for s in ((b, n, H, P), (b, n, H), (H,), (b, n, G, N),
                                         (b, n, G, N), (H,), (H,))]


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_scan_vjp_and_jvp_equal_autodiff(groups) -> None:
    """Batched, with 1, 2 or 4 groups over 4 heads: the group sum of the adjoint (each group
    serving 4, 2 or 1 heads) against ``jax.vjp``/``jax.jvp`` of the forward."""
    rng = np.random.default_rng(groups)
    args = [jnp.asarray(a) for a in _scan_args(rng, G=groups)]
    y, pullback = jax.vjp(lambda *a: ssm2.mamba2_scan(XP, *a), *args)
    G = jnp.asarray(rng.normal(size=y.shape))
    tol = tolerance("float64", size=5 * 3 * 4, depth=4)
    for name, ref, got in zip(("x", "dt", "A_log", "B", "C", "D", "dt_bias"), pullback(G),
                              ssm2.mamba2_scan_vjp(XP, G, *args), strict=True):
        assert tol.compare(got, ref).ok, name
    T = tuple(jnp.asarray(rng.normal(size=a.shape)) for a in args)
    _, ref = jax.jvp(lambda *a: ssm2.mamba2_scan(XP, *a), tuple(args), T)
    assert tol.compare(ssm2.mamba2_scan_jvp(XP, T, *args), ref).ok


def _torch_float64_islands(monkeypatch):
    """Hugging Face's Mamba-2 casts to float32 inside the scan and the norm (``.float()``,
    ``.to(torch.float32)``); for an exact comparison those casts keep float64."""
    import torch

    monkeypatch.setattr(torch.Tensor, "float", lambda self: self)
    original = torch.Tensor.to

    def to(self, *args, **kwargs):
        if args and args[0] is torch.float32:
            return self
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)


@pytest.mark.parametrize("chunk", [2, 3, 8])
def test_scan_equals_hugging_face_chunked_ssd(monkeypatch, chunk) -> None:
    """HF's ``mamba2_chunk_scan`` (the dual form in chunks of 2, 3 or 8 over 7 tokens: padded
    last chunk, one chunk longer than the sequence) equals the recurrence; with HF's float32
    casts the difference is float32's rounding, without them float64's."""
    torch = pytest.importorskip("torch")
    from transformers.models.mamba2 import modeling_mamba2 as m

    rng = np.random.default_rng(chunk)
    x, dt, A_log, B, C, D, db = _scan_args(rng, n=7)
    ours = ssm2.mamba2_scan(NP, x, dt, A_log, B, C, D, db)

    def hf():
        t = torch.tensor
        return m.mamba2_chunk_scan(t(x), t(dt), -torch.exp(t(A_log)), t(B), t(C),
                                   chunk_size=chunk, D=t(D), dt_bias=t(db),
                                   dt_softplus=True).double().numpy()

    assert not tolerance("float64", size=7 * 3, depth=4).compare(hf(), ours).ok
    assert tolerance("float32", size=7 * 3, depth=4).compare(hf(), ours).ok
    _torch_float64_islands(monkeypatch)
    assert tolerance("float64", size=7 * 3, depth=4).compare(hf(), ours).ok


def test_scan_equals_its_dual_attention_form() -> None:
    """Per head, the scan is the masked attention ``ssd_attention`` (the 1-semiseparable decay
    matrix of ``log a = Delta A``, keys B, queries C, values ``Delta x``) plus the skip."""
    rng = np.random.default_rng(3)
    x, dt, A_log, B, C, D, db = _scan_args(rng, b=1, G=1)
    y = ssm2.mamba2_scan(NP, x, dt, A_log, B, C, D, db)[0]
    Dt = ssm.softplus(NP, dt + db)[0]
    for h in range(4):
        ref = ssm.ssd_attention(NP, Dt[:, h] * -np.exp(A_log[h]), B[0, :, 0], C[0, :, 0],
                                Dt[:, h, None] * x[0, :, h]) + D[h] * x[0, :, h]
        assert tolerance("float64", size=15, depth=3).compare(y[:, h], ref).ok, h


def test_gated_rmsnorm_derivatives_and_hugging_face(monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    from transformers.models.mamba2 import modeling_mamba2 as m

    rng = np.random.default_rng(5)
    x, z, gamma = rng.normal(size=(2, 3, 12)), rng.normal(size=(2, 3, 12)), rng.normal(size=12)
    f = lambda *a: ssm2.gated_rmsnorm(XP, *a, 1e-6, 4)  # noqa: E731
    args = tuple(jnp.asarray(a) for a in (x, z, gamma))
    y, pullback = jax.vjp(f, *args)
    G = jnp.asarray(rng.normal(size=y.shape))
    tol = tolerance("float64", size=12, depth=4)
    for ref, got in zip(pullback(G), ssm2.gated_rmsnorm_vjp(XP, G, *args, 1e-6, 4),
                        strict=True):
        assert tol.compare(got, ref).ok
    T = tuple(jnp.asarray(rng.normal(size=a.shape)) for a in args)
    assert tol.compare(ssm2.gated_rmsnorm_jvp(XP, T, *args, 1e-6, 4), jax.jvp(f, args, T)[1]).ok
    # the groups matter: one group of 12 is another function
    assert not tol.compare(ssm2.gated_rmsnorm(NP, x, z, gamma, 1e-6), np.asarray(y)).ok
    mod = m.Mamba2RMSNormGated(12, 4, eps=1e-6).double()
    with torch.no_grad():
        mod.weight.copy_(torch.tensor(gamma))
    _torch_float64_islands(monkeypatch)
    hf = mod(torch.tensor(x), torch.tensor(z)).detach().numpy()
    assert tol.compare(hf, np.asarray(y)).ok


def test_bad_input_is_named() -> None:
    rng = np.random.default_rng(0)
    x, dt, A_log, B, C, D, db = _scan_args(rng, H=4, G=3)
    with pytest.raises(ArgumentError, match=r"argument 'B'.*G dividing the heads H = 4.*G = 3"):
        ssm2.mamba2_scan(NP, x, dt, A_log, B, C, D, db)
    x, dt, A_log, B, C, D, db = _scan_args(rng)
    with pytest.raises(ShapeError, match=r"'dt'.*H=4.*\(2, 5, 3\)"):
        ssm2.mamba2_scan(NP, x, dt[..., :3], A_log, B, C, D, db)
    with pytest.raises(ArgumentError, match="at least one token"):
        ssm2.mamba2_scan(NP, x[:, :0], dt[:, :0], A_log, B[:, :0], C[:, :0], D, db)
    with pytest.raises(ArgumentError, match=r"'group_size'.*d = 6, got 4"):
        ssm2.gated_rmsnorm(NP, np.ones((2, 6)), np.ones((2, 6)), np.ones(6), 1e-6, 4)


# -- the front door: a user's SSD kernel (Hugging Face's algorithm, one chunk) -----------
def ssd_kernel(x, dt, A_log, B, C, D, dt_bias, bug=None):
    """One sequence ``x (n, H, P)``: the quadratic dual form, as people write it."""
    H, G = x.shape[-2], B.shape[-2]
    Dt = jax.nn.softplus(dt + dt_bias)                                # (n, H)
    share = (lambda M: jnp.tile(M, (1, H // G, 1))) if bug == "repeat" else \
        (lambda M: jnp.repeat(M, H // G, axis=1))
    Bh, Ch = share(B), share(C)                                       # (n, H, N)
    cs = jnp.cumsum(Dt * -jnp.exp(A_log), axis=0)                     # (n, H)
    n = x.shape[0]
    keep = jnp.tril(jnp.ones((n, n), bool), -1 if bug == "mask_off_by_one" else 0)
    seg = jnp.where(keep[:, :, None], cs[:, None, :] - cs[None, :, :], -jnp.inf)
    scores = jnp.einsum("thn,shn->tsh", Ch, Bh) * jnp.exp(seg)
    y = jnp.einsum("tsh,shp->thp", scores, x * Dt[..., None])
    return y if bug == "no_skip" else y + D[:, None] * x


def _batched(bug=None):
    def fn(x, dt, A_log, B, C, D, dt_bias):
        lead = x.shape[:-3]
        flat = [a.reshape((-1, *a.shape[len(lead):])) for a in (x, dt, B, C)]
        out = jax.vmap(lambda x_, d_, b_, c_: ssd_kernel(x_, d_, A_log, b_, c_, D, dt_bias,
                                                         bug=bug))(*flat)
        return out.reshape(x.shape)

    fn.__name__ = f"ssd_{bug or 'correct'}"
    return fn


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_check_op_passes_a_correct_ssd_kernel(dtype) -> None:
    """On the drawn (moderate) cases. The hostile, trained-like cases fail this dual form
    (its segment sums are differences of a cumulative sum of Delta A, which loses the A_log
    cotangent: ``tests/test_check_op_mamba2_hostile.py``), so they are left out here."""
    report = check_op(_batched(), "mamba2_scan", dtype=dtype, seed=0, hostile=False)
    assert report.ok, report
    assert not check_op(_batched(), "mamba2_scan", dtype=dtype, seed=0, examples=0).ok


@pytest.mark.parametrize("bug", ["repeat", "mask_off_by_one", "no_skip"])
def test_check_op_kills_planted_ssd_bugs(bug) -> None:
    """``repeat`` shares group ``j mod G`` with head ``j`` (``torch.repeat`` for
    ``repeat_interleave``): wrong only when 1 < G < H, which the drawn cases include."""
    report = check_op(_batched(bug), "mamba2_scan", dtype="float32", seed=0)
    assert not report.ok, bug


def test_the_proof_refutes_a_wrong_vjp(monkeypatch) -> None:
    """The identity certifies the running VJP: the skip's cotangent with its sign flipped is
    refuted (``ssm_mamba2_scan_vjp``, the spec's own function swapped)."""
    from dataclasses import replace

    from nlaverify.identities import ssm_derivatives as ids
    from nlaverify.symbolic.vjp_proof import prove_vjp

    def wrong(xp, G, x, *rest):
        bars = ssm2.mamba2_scan_vjp(xp, G, x, *rest)
        return (bars[0] - 2 * G * rest[4][:, None], *bars[1:])

    assert prove_vjp(ids.MAMBA2_SCAN).verdict == "proved"
    assert prove_vjp(replace(ids.MAMBA2_SCAN, vjp=wrong)).verdict == "failed"


# -- the chunked SSD (ssd_chunked): numbers, Hugging Face's kernel, planted bugs ------------
CHUNKINGS = [1, 2, 3, 7, 9, [2, 3, 2], [1, 5, 1], [6, 1]]


def _ssd_args(rng, T=7, N=3, d=4):
    return (-np.abs(rng.normal(size=T)), rng.normal(size=(T, N)), rng.normal(size=(T, N)),
            rng.normal(size=(T, d)))


@pytest.mark.parametrize("chunks", CHUNKINGS, ids=str)
def test_ssd_chunked_equals_the_recurrence_numerically(chunks) -> None:
    """d = 4 value channels, 7 steps: ragged last chunks, one chunk longer than the sequence,
    chunks of 1 and listed sizes."""
    la, B, C, X = _ssd_args(np.random.default_rng(11))
    got = ssm2.ssd_chunked(NP, la, B, C, X, chunks)
    assert got.shape == X.shape
    assert tolerance("float64", size=7 * 4, depth=7).compare(
        got, ssm.ssd_recurrence(NP, la, B, C, X)).ok


@pytest.mark.parametrize("chunk", [2, 3, 8])
def test_ssd_chunked_equals_hugging_face_per_head(monkeypatch, chunk) -> None:
    """Each head of HF's ``mamba2_chunk_scan`` (float64, its float32 casts removed; no skip)
    is ``ssd_chunked`` of ``log a = Delta A``, the head's group's B, C and ``Delta x``, at
    HF's chunk size."""
    torch = pytest.importorskip("torch")
    from transformers.models.mamba2 import modeling_mamba2 as m

    rng = np.random.default_rng(20 + chunk)
    x, dt, A_log, B, C, _, db = _scan_args(rng, b=1, n=7)
    _torch_float64_islands(monkeypatch)
    t = torch.tensor
    hf = m.mamba2_chunk_scan(t(x), t(dt), -torch.exp(t(A_log)), t(B), t(C), chunk_size=chunk,
                             D=t(np.zeros(4)), dt_bias=t(db), dt_softplus=True)
    hf = hf.double().numpy()[0]
    Dt = ssm.softplus(NP, dt + db)[0]
    tol = tolerance("float64", size=7 * 3, depth=7)
    for h in range(4):
        g = h // 2  # 4 heads, 2 groups: repeat_interleave
        ours = ssm2.ssd_chunked(NP, Dt[:, h] * -np.exp(A_log[h]), B[0, :, g], C[0, :, g],
                                Dt[:, h, None] * x[0, :, h], chunk)
        assert tol.compare(hf[:, h], ours).ok, h


def test_ssd_chunked_bad_input_is_named() -> None:
    la, B, C, X = _ssd_args(np.random.default_rng(0))
    with pytest.raises(ArgumentError, match=r"ssd_chunked: argument 'X'.*at least one step"):
        ssm2.ssd_chunked(NP, la[:0], B[:0], C[:0], X[:0], 2)
    with pytest.raises(ArgumentError, match=r"ssd_chunked: argument 'chunks'.*positive"):
        ssm2.ssd_chunked(NP, la, B, C, X, 0)
    with pytest.raises(ArgumentError, match=r"ssd_chunked: argument 'chunks'.*summing to"):
        ssm2.ssd_chunked(NP, la, B, C, X, [2, 2])
    # chunked_scan keeps its own name
    with pytest.raises(ArgumentError, match=r"chunked_scan: argument 'chunks'"):
        ssm.chunked_scan(NP, np.ones(3), np.ones(3), 0)


def _planted_ssd_chunked(kind):
    """``ssd_chunked`` with one of the bugs people write in the chunked algorithm."""
    def f(xp, log_a, B, C, X, chunks):
        out, H = [], None
        for lo, hi in ssm.chunk_bounds(X.shape[0], chunks):
            Y = ssm.ssd_attention(xp, log_a[lo:hi], B[lo:hi], C[lo:hi], X[lo:hi])
            if H is not None:
                end = (lambda t: t) if kind == "readout_off_by_one" else (lambda t: t + 1)
                Y = Y + xp.stack([xp.exp(xp.sum(log_a[lo:end(t)])) * xp.sum(C[t][:, None] * H,
                                                                            axis=0)
                                  for t in range(lo, hi)], axis=0)
            start = (lambda s: s) if kind == "state_off_by_one" else (lambda s: s + 1)
            S = sum((xp.exp(xp.sum(log_a[start(s):hi])) * (B[s][:, None] * X[s][None, :])
                     for s in range(lo, hi)), xp.zeros_like(B[lo][:, None] * X[lo][None, :]))
            carry = log_a[lo:hi - 1] if kind == "carry_skips_last" else log_a[lo:hi]
            H = S if H is None else xp.exp(xp.sum(carry)) * H + S
            out.append(Y)
        return xp.concat(out, axis=0)

    return f


@pytest.mark.parametrize("kind", ["readout_off_by_one", "state_off_by_one",
                                  "carry_skips_last"])
def test_the_chunked_identity_refutes_planted_bugs(monkeypatch, kind) -> None:
    """Identity ``ssm_ssd_chunked_equals_recurrence``, derived with ``ssd_chunked`` swapped
    for a planted bug (the read-out exponent one step short, the chunk state summed one step
    early, the carry without the chunk's last decay), fails; each bug is also visible in
    numbers."""
    from nlaverify.identities.core import load_catalogue

    la, B, C, X = _ssd_args(np.random.default_rng(4))
    wrong = _planted_ssd_chunked(kind)
    assert not np.allclose(wrong(NP, la, B, C, X, 3), ssm.ssd_recurrence(NP, la, B, C, X))
    monkeypatch.setattr(ssm2, "ssd_chunked", wrong)
    proof = load_catalogue()["ssm_ssd_chunked_equals_recurrence"].derive()
    assert proof.verdict == "failed", kind


def test_the_chunked_identity_proves_the_planting_harness(monkeypatch) -> None:
    """The harness above without a bug is the real algorithm: the identity proves it."""
    from nlaverify.identities.core import load_catalogue

    monkeypatch.setattr(ssm2, "ssd_chunked", _planted_ssd_chunked("none"))
    assert load_catalogue()["ssm_ssd_chunked_equals_recurrence"].derive().verdict == "proved"


# -- hostile inputs: overflow named, never a silent NaN ------------------------------------
@pytest.mark.parametrize("op", ["mamba2_scan", "mamba2_scan_vjp", "mamba2_scan_jvp"])
def test_scan_refuses_an_overflowing_decay_by_name(op) -> None:
    from nlaverify.errors import NonFiniteError

    rng = np.random.default_rng(1)
    x, dt, A_log, B, C, D, db = _scan_args(rng)
    bad = (x, dt - 1e4, A_log + 800, B, C, D, db)   # exp(A_log) = inf; softplus(dt) = 0
    call = {"mamba2_scan": lambda a: ssm2.mamba2_scan(NP, *a),
            "mamba2_scan_vjp": lambda a: ssm2.mamba2_scan_vjp(NP, np.ones_like(x), *a),
            "mamba2_scan_jvp": lambda a: ssm2.mamba2_scan_jvp(NP, (np.ones_like(x),) + (None,) * 6,
                                                            *a)}[op]
    with np.errstate(all="ignore"), pytest.raises(
            NonFiniteError, match=rf"{op}: argument 'A_log': expected A = -exp\(A_log\)"):
        call(bad)
    # A finite, Delta * A overflowing (Delta = softplus(1e306) = 1e306, A ~ -e^10)
    big = (x, dt + 1e306, A_log + 10, B, C, D, db)
    with np.errstate(all="ignore"), pytest.raises(NonFiniteError,
                                                  match=r"'A_log'.*Delta \* A"):
        call(big)


def test_scan_overflow_checks_skip_tracers() -> None:
    """Under ``jax.jit`` the arguments are tracers: no check, no error, same numbers."""
    args = [jnp.asarray(a) for a in _scan_args(np.random.default_rng(2))]
    jitted = jax.jit(lambda *a: ssm2.mamba2_scan(XP, *a))(*args)
    assert tolerance("float64", size=15, depth=4).compare(
        jitted, ssm2.mamba2_scan(XP, *args)).ok


def test_gated_rmsnorm_refuses_a_bool_group_size() -> None:
    with pytest.raises(ArgumentError, match=r"gated_rmsnorm: argument 'group_size'.*True"):
        ssm2.gated_rmsnorm(NP, np.ones((2, 4)), np.ones((2, 4)), np.ones(4), 1e-6, True)
