r"""The SPMD cross-check: the sharded computations of :mod:`nlaverify.sharding` run on
JAX's own SPMD machinery — a :class:`jax.sharding.Mesh` of simulated CPU devices and
:func:`jax.shard_map` with the collectives :func:`jax.lax.psum`, :func:`jax.lax.pmax`,
:func:`jax.lax.ppermute` — compared with the unsharded reference (NumPy, float64) by the
tolerance model, and a divergent result compared with the named counterexamples of
:mod:`nlaverify.sharding` so that the report names the bug, not only the place.

**Simulated devices.** XLA fixes its number of CPU devices when JAX starts, from
``XLA_FLAGS=--xla_force_host_platform_device_count=N``. :func:`run_spmd_check` therefore
runs the check in a fresh Python subprocess with that flag (and ``JAX_PLATFORMS=cpu``) and
reads its report back as JSON; :func:`spmd_check` itself runs in the current process and
needs JAX started with at least 2 devices.

The JAX programs below are written directly with ``jax.numpy`` and ``jax.lax`` collectives —
an independent implementation, the way a user writes sharded code — and each takes the
planted bugs of :data:`PLANTS` (a missing all-reduce after the row-parallel matmul of
the MLP or of the attention heads' output projection, a loss averaged per shard, a
vocabulary-parallel softmax without the global max, a ring step without the rescale, Muon
on a shard).

**Tolerances.** Each row's bound is :func:`nlaverify.tolerance.tolerance` in float64 with
:math:`k` the longest accumulation (per shard plus the merge across shards) and :math:`D`
the dependent stages; the Newton–Schulz row takes :math:`\kappa = a_1^{\,\text{steps}}`,
the largest slope of the composed polynomials (their derivative at 0).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError
from nlaverify.ops import sdpa as _sd
from nlaverify.ops.loss import IGNORE_INDEX, cross_entropy
from nlaverify.ops.sdpa import attention
from nlaverify.optim import newton_schulz as _ns
from nlaverify.optim import rules as _r
from nlaverify.sharding import data as _da
from nlaverify.sharding import optimizer as _op
from nlaverify.sharding import sequence as _sq
from nlaverify.sharding import tensor as _te
from nlaverify.tolerance import Tolerance, tolerance

#: planted bug -> the checks it breaks
PLANTS: dict[str, tuple[str, ...]] = {
    "missing_all_reduce": ("tensor_parallel_mlp", "tensor_parallel_attention"),
    "per_shard_mean": ("data_parallel_gradient",),
    "no_global_max": ("vocab_parallel_cross_entropy",),
    "no_rescale": ("ring_attention",),
    "muon_on_shard": ("zero_newton_schulz",),
}
#: the checks, in report order
CHECKS: tuple[str, ...] = ("tensor_parallel_mlp", "tensor_parallel_attention",
                           "data_parallel_gradient",
                           "vocab_parallel_cross_entropy", "ring_attention", "zero_adam",
                           "zero_newton_schulz")
#: the mesh axis every check shards over
AXIS = "x"


@dataclass(frozen=True)
class SpmdRow:
    """One check of the sharded run against the unsharded reference.

    ``bug`` names the known counterexample the sharded result matches when it diverges
    (``None`` when it agrees, ``"unknown divergence"`` when it matches none)."""

    check: str
    collective: str
    devices: int
    ok: bool
    max_abs: float
    scale: float
    rtol: float
    reason: str
    bug: str | None


@dataclass(frozen=True)
class _Case:
    collective: str
    sharded: Any
    reference: Any
    tol: Tolerance
    known: tuple[tuple[str, Callable[[], Any]], ...]


def _row(name: str, n: int, case: _Case) -> SpmdRow:
    cmp = case.tol.compare(case.sharded, case.reference)
    bug = None
    if not cmp.ok:
        bug = "unknown divergence"
        for label, value in case.known:
            if case.tol.compare(case.sharded, value()).ok:
                bug = label
                break
    return SpmdRow(name, case.collective, n, cmp.ok, cmp.max_abs, cmp.scale, case.tol.rtol,
                   case.tol.reason, bug)


def _cases(n: int, plants: frozenset[str], rng: np.random.Generator,
           only: frozenset[str]) -> dict[str, Callable[[], _Case]]:
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((n,), (AXIS,))
    xp = get_namespace("numpy")

    def smap(f: Callable, in_specs: tuple, out_specs: Any) -> Callable:
        run = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                    check_vma=False))

        def placed(*args: Any) -> np.ndarray:  # each input laid out by its NamedSharding
            return np.asarray(run(*(jax.device_put(x, NamedSharding(mesh, spec))
                                    for x, spec in zip(args, in_specs, strict=True))))

        return placed

    def tp() -> _Case:
        X, W1, W2 = rng.normal(size=(6, 8)), rng.normal(size=(8, 4 * n)), rng.normal(
            size=(4 * n, 5))

        def body(x: Any, w1: Any, w2: Any) -> Any:
            part = jnp.matmul(jnp.tanh(jnp.matmul(x, w1)), w2)
            return part if "missing_all_reduce" in plants else lax.psum(part, AXIS)

        got = smap(body, (P(), P(None, AXIS), P(AXIS, None)), P())(X, W1, W2)
        act = lambda xp, H: xp.tanh(H)  # noqa: E731
        W1s, W2s = np.split(W1, n, axis=1), np.split(W2, n, axis=0)
        return _Case("psum after the row-parallel matmul", got,
                     _te.mlp(xp, X, W1, W2, act), tolerance("float64", size=4 * n, depth=2),
                     (("missing all-reduce after the row-parallel matmul",
                       lambda: _te.tensor_parallel_mlp_without_all_reduce(
                           xp, X, W1s, W2s, act, device=0)),))

    def heads() -> _Case:
        tokens, d, d_k, h_s = 5, 6, 2, 2
        H = h_s * n
        X, W_O = rng.normal(size=(tokens, d)), rng.normal(size=(H * d_k, d))
        W_Q, W_K, W_V = (rng.normal(size=(d, H * d_k)) for _ in range(3))

        def body(x: Any, wq: Any, wk: Any, wv: Any, wo: Any) -> Any:
            q, k, v = (jnp.matmul(x, w).reshape(tokens, h_s, d_k).transpose(1, 0, 2)
                       for w in (wq, wk, wv))
            p = jax.nn.softmax(jnp.matmul(q, k.transpose(0, 2, 1)) / np.sqrt(d_k), axis=-1)
            a = jnp.matmul(p, v).transpose(1, 0, 2).reshape(tokens, h_s * d_k)
            part = jnp.matmul(a, wo)
            return part if "missing_all_reduce" in plants else lax.psum(part, AXIS)

        col = P(None, AXIS)
        got = smap(body, (P(), col, col, col, P(AXIS, None)), P())(X, W_Q, W_K, W_V, W_O)
        first = [w[:, : h_s * d_k] for w in (W_Q, W_K, W_V)]
        return _Case("psum after the output projection of the local heads", got,
                     _sd.multihead_attention(xp, X, W_Q, W_K, W_V, W_O, H),
                     tolerance("float64", size=H * d_k, depth=3),
                     (("missing all-reduce after the row-parallel output projection",
                       lambda: _sd.multihead_attention(xp, X, *first, W_O[: h_s * d_k], h_s)),))

    def dp() -> _Case:
        rows, V = 4, 5
        X, W = rng.normal(size=(rows * n, 3)), rng.normal(size=(3, V))
        t = rng.integers(0, V, size=rows * n)
        for s in range(n):  # device s has s % rows padded positions: uneven counts
            t[s * rows: s * rows + s % rows] = IGNORE_INDEX

        def body(x: Any, w: Any, tt: Any) -> Any:
            p = jax.nn.softmax(jnp.matmul(x, w), axis=-1)
            keep = (tt != IGNORE_INDEX).astype(x.dtype)
            y = jax.nn.one_hot(tt, V, dtype=x.dtype)
            g = jnp.matmul(x.T, keep[:, None] * (p - y))
            count = jnp.sum(keep)
            if "per_shard_mean" in plants:
                return lax.psum(g / count, AXIS) / n
            return lax.psum(g, AXIS) / lax.psum(count, AXIS)

        got = smap(body, (P(AXIS, None), P(), P(AXIS)), P())(X, W, t)
        Xs, ts = np.split(X, n), np.split(t, n)
        return _Case("psum of summed gradients and of token counts", got,
                     _da.linear_head_gradient(xp, X, W, t),
                     tolerance("float64", size=rows * n, depth=2),
                     (("loss averaged per shard instead of per token",
                       lambda: _da.data_parallel_gradient_per_shard_mean(xp, Xs, W, ts)),))

    def vocab() -> _Case:
        rows, V_s = 6, 5
        Z = rng.normal(size=(rows, V_s * n)) * np.repeat(np.arange(1, n + 1) * 4.0, V_s)
        t = rng.integers(0, V_s * n, size=rows)
        t[1] = IGNORE_INDEX

        def body(z: Any, tt: Any) -> Any:
            m_s = jnp.max(z, axis=-1, keepdims=True)
            if "no_global_max" in plants:
                lse = m_s + jnp.log(lax.psum(jnp.sum(jnp.exp(z - m_s), -1, keepdims=True),
                                             AXIS))
            else:
                m = lax.pmax(m_s, AXIS)
                lse = m + jnp.log(lax.psum(jnp.sum(jnp.exp(z - m), -1, keepdims=True), AXIS))
            local = tt - lax.axis_index(AXIS) * V_s
            hit = (local >= 0) & (local < V_s)
            picked = jnp.take_along_axis(z, jnp.clip(local, 0, V_s - 1)[:, None], -1)[:, 0]
            zt = lax.psum(jnp.where(hit, picked, 0.0), AXIS)
            keep = (tt != IGNORE_INDEX).astype(z.dtype)
            return jnp.sum(keep * (lse[:, 0] - zt)) / jnp.sum(keep)

        got = smap(body, (P(None, AXIS), P()), P())(Z, t)
        Zs = np.split(Z, n, axis=-1)
        bad = lambda xp, Zs: _te.vocab_parallel_logsumexp_without_global_max(xp, Zs, 0)  # noqa
        return _Case("pmax of the shard maxima, psum of the rescaled sums", got,
                     cross_entropy(xp, Z, t), tolerance("float64", size=V_s * n, depth=2),
                     (("vocabulary-parallel softmax without the global max",
                       lambda: _te.vocab_parallel_cross_entropy(xp, Zs, t, lse=bad)),))

    def ring() -> _Case:
        b, d = 2, 4
        Q, K, V = (rng.normal(size=(b * n, d)) * 2 for _ in range(3))
        perm = [(s, (s + 1) % n) for s in range(n)]

        def body(q: Any, k: Any, v: Any) -> Any:
            i = lax.axis_index(AXIS)
            qpos = i * b + jnp.arange(b)
            m = jnp.full((b, 1), -jnp.inf)
            ell, acc = jnp.zeros((b, 1)), jnp.zeros((b, d))
            for r in range(n):
                j = (i - r) % n
                S = jnp.matmul(q, k.T) / np.sqrt(d)
                S = jnp.where(qpos[:, None] >= j * b + jnp.arange(b)[None, :], S, -jnp.inf)
                mb = jnp.max(S, -1, keepdims=True)
                shift = jnp.where(jnp.isfinite(mb), mb, 0.0)
                Pb = jnp.exp(S - shift)
                lb, ob = jnp.sum(Pb, -1, keepdims=True), jnp.matmul(Pb, v)
                mb = jnp.where(lb == 0, -jnp.inf, shift)
                if "no_rescale" in plants:
                    ell, acc = ell + lb, acc + ob
                else:
                    top = jnp.maximum(m, mb)
                    top = jnp.where(jnp.isfinite(top), top, 0.0)
                    a, c = jnp.exp(m - top), jnp.exp(mb - top)
                    ell, acc = a * ell + c * lb, a * acc + c * ob
                    m = jnp.where(ell == 0, -jnp.inf, top)
                k, v = lax.ppermute(k, AXIS, perm), lax.ppermute(v, AXIS, perm)
            return acc / ell

        got = smap(body, (P(AXIS, None),) * 3, P(AXIS, None))(Q, K, V)
        Qs, Ks, Vs = (np.split(x, n) for x in (Q, K, V))
        return _Case("ppermute around the ring, online-softmax merge", got,
                     attention(xp, Q, K, V, True, None),
                     tolerance("float64", size=b * n, depth=3),
                     (("ring attention step without the rescale",
                       lambda: np.concatenate(_sq.ring_attention_without_rescale(
                           xp, Qs, Ks, Vs, causal=True))),))

    def adam() -> _Case:
        lr, b1, b2, eps = 1e-2, 0.9, 0.999, 1e-8
        W, G = rng.normal(size=(4 * n, 3)), rng.normal(size=(4 * n, 3))

        def body(w: Any, g: Any) -> Any:
            m_hat = (1 - b1) * g / (1 - b1)
            v_hat = (1 - b2) * g * g / (1 - b2)
            return -lr * m_hat / (jnp.sqrt(v_hat) + eps)

        got = smap(body, (P(AXIS, None),) * 2, P(AXIS, None))(W, G)
        rule = _r.adam(lr, b1, b2, eps)
        ref, _ = rule.update(xp, {"w": G}, rule.init(xp, {"w": W}), {"w": W})
        return _Case("none (state and update sharded like the parameter)", got, ref["w"],
                     tolerance("float64", depth=3), ())

    def muon() -> _Case:
        steps, rows = 5, 4
        G = rng.normal(size=(rows * n, 3))
        a = [float(c) for c in _ns.MUON]

        def poly(A: Any, x: Any) -> Any:
            B = a[2] * A
            B = a[1] * A + jnp.matmul(B, A)
            return a[0] * x + jnp.matmul(B, x)

        def body(g: Any) -> Any:
            if "muon_on_shard" in plants:
                x = (g / (jnp.sqrt(jnp.sum(g * g)) + 1e-7)).T
                for _ in range(steps):
                    x = poly(jnp.matmul(x, x.T), x)
                return x.T
            x = (g / (jnp.sqrt(lax.psum(jnp.sum(g * g), AXIS)) + 1e-7)).T
            for _ in range(steps):
                x = poly(lax.psum(jnp.matmul(x, x.T), AXIS), x)
            return x.T

        got = smap(body, (P(AXIS, None),), P(AXIS, None))(G)
        shards = np.split(G, n)
        return _Case("psum of the Gram matrix (no gather along the long axis)", got,
                     _ns.newton_schulz(xp, G, _ns.MUON, steps),
                     tolerance("float64", size=rows * n, depth=2 * steps,
                               condition=float(_ns.MUON[0]) ** steps),
                     (("Muon (Newton-Schulz) on a shard instead of the whole matrix",
                       lambda: np.concatenate(_op.newton_schulz_on_shards(
                           xp, shards, -2, _ns.MUON, steps))),))

    table = {"tensor_parallel_mlp": tp, "tensor_parallel_attention": heads,
             "data_parallel_gradient": dp,
             "vocab_parallel_cross_entropy": vocab, "ring_attention": ring, "zero_adam": adam,
             "zero_newton_schulz": muon}
    return {k: table[k] for k in CHECKS if k in only}


def _check_plants(plants: Sequence[str]) -> frozenset[str]:
    bad = [p for p in plants if p not in PLANTS]
    if bad:
        raise ArgumentError(f"spmd_check: argument 'plants': unknown {bad}; expected some of "
                            f"{', '.join(PLANTS)}")
    return frozenset(plants)


def spmd_check(plants: Sequence[str] = (), checks: Sequence[str] | None = None,
               seed: int = 0) -> list[SpmdRow]:
    r"""Run the checks (default :data:`CHECKS`) on a mesh of every JAX device, with the
    ``plants`` of :data:`PLANTS` planted, in float64; one :class:`SpmdRow` per check.

    Needs JAX started with at least 2 devices (:func:`run_spmd_check` arranges it)."""
    planted = _check_plants(plants)
    chosen = CHECKS if checks is None else tuple(checks)
    unknown = [c for c in chosen if c not in CHECKS]
    if unknown:
        raise ArgumentError(f"spmd_check: argument 'checks': unknown {unknown}; expected some "
                            f"of {', '.join(CHECKS)}")
    import jax

    n = len(jax.devices())
    if n < 2:
        raise ArgumentError(f"spmd_check: expected at least 2 JAX devices, found {n}; set "
                            "XLA_FLAGS=--xla_force_host_platform_device_count=N before JAX "
                            "starts (run_spmd_check does)")
    with jax.enable_x64(True):  # float64 here only, not for the rest of the process
        cases = _cases(n, planted, np.random.default_rng(seed), frozenset(chosen))
        return [_row(name, n, make()) for name, make in cases.items()]


def run_spmd_check(devices: int = 4, plant_sets: Sequence[Sequence[str]] = ((),),
                   seed: int = 0, timeout: float = 600) -> list[list[SpmdRow]]:
    r"""Run :func:`spmd_check` in a subprocess with ``devices`` simulated CPU devices
    (``XLA_FLAGS=--xla_force_host_platform_device_count``), once per set of plants; a
    nonempty set runs only the checks its plants break. Returns the rows of each run."""
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 2:
        raise ArgumentError(f"run_spmd_check: argument 'devices': expected an integer >= 2, "
                            f"got {devices!r}")
    sets = [sorted(_check_plants(p)) for p in plant_sets]
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") +
                          f" --xla_force_host_platform_device_count={devices}").strip())
    code = "import sys; from nlaverify.sharding.spmd import _main; _main(sys.argv[1])"
    out = subprocess.run([sys.executable, "-c", code, json.dumps({"sets": sets, "seed": seed})],
                         env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"run_spmd_check: the subprocess failed ({out.returncode}):\n"
                           f"{out.stderr[-4000:]}")
    return [[SpmdRow(**r) for r in rows] for rows in json.loads(out.stdout.splitlines()[-1])]


def _main(arg: str) -> None:
    """The subprocess side of :func:`run_spmd_check`: one JSON line of rows per set."""
    spec = json.loads(arg)
    runs = []
    for plants in spec["sets"]:
        checks = sorted({c for p in plants for c in PLANTS[p]},
                        key=CHECKS.index) if plants else None
        runs.append([asdict(r) for r in spmd_check(plants, checks, spec["seed"])])
    print(json.dumps(runs))


def format_rows(rows: Sequence[SpmdRow]) -> str:
    """A plain-text table of a report."""
    lines = [f"{'check':30} {'ok':5} {'error/scale':>12} {'rtol':>10}  bug / collective"]
    for r in rows:
        lines.append(f"{r.check:30} {r.ok!s:5} {r.max_abs / r.scale:12.3g} {r.rtol:10.3g}"
                     f"  {r.bug or r.collective}")
    return "\n".join(lines)


__all__ = ["AXIS", "CHECKS", "PLANTS", "SpmdRow", "format_rows", "run_spmd_check",
           "spmd_check"]
