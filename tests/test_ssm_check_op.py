"""Issue 37, item 5: ``check_op(fn, "selective_scan")`` on users' scan kernels (Gu & Dao 2023,
Algorithm 2; Baptista, Stuart & Tran §5.3.4), sequential (``jax.lax.scan``) and chunked
(``jax.lax.associative_scan`` inside chunks of 2, the state carried across them, the
structure of Mamba-2's kernel), with the planted bugs of the issue, each killed in float32
and in bfloat16 and no false alarm (nor a report left inconclusive) on the correct
kernels, over 20 seeds.

The reference is the op of :data:`nlaverify.ops.ssm_specs.SCAN_OPS` (its VJP and JVP proved
by the family ``ssm``), at 30 digits on the kernel's inputs (rounded to the dtype first);
every row's bound is the scan's running error bound (:mod:`nlaverify.precision.running`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nlaverify.check import check_op
from nlaverify.precision.running import running_error, running_namespace
from nlaverify.tolerance import tolerance, unit_roundoff

jax.config.update("jax_enable_x64", True)

#: the bugs: the output read from the state before this token's update (one step late);
#: Euler for A (1 + Delta A for exp(Delta A)); the skip D dropped; the state carried across
#: a chunk boundary taken one step early
BUGS = ("read_before_update", "euler_A", "no_skip", "chunk_boundary_off_by_one")
SEEDS = range(20)


def _discretized(u, delta, A, B, D, delta_bias, bug):
    dt = jax.nn.softplus(delta + delta_bias)                          # (n, d)
    dA = 1 + dt[:, :, None] * A if bug == "euler_A" else jnp.exp(dt[:, :, None] * A)
    dBu = (dt * u)[:, :, None] * B[:, None, :]                        # (n, d, N)
    return dA, dBu


def _finish(y, u, D, z, bug):
    return (y if bug == "no_skip" else y + D * u) * jax.nn.silu(z)


def sequential_scan(u, delta, A, B, C, D, z, delta_bias, bug=None):
    """One sequence ``(n, d)``: the state carried by ``jax.lax.scan``."""
    dA, dBu = _discretized(u, delta, A, B, D, delta_bias, bug)

    def step(h, inp):
        a, b, c = inp
        new = a * h + b
        return new, (h if bug == "read_before_update" else new) @ c

    _, y = jax.lax.scan(step, jnp.zeros(A.shape, u.dtype), (dA, dBu, C))
    return _finish(y, u, D, z, bug)


def chunked_scan(u, delta, A, B, C, D, z, delta_bias, bug=None, chunk=2):
    """One sequence: an associative scan inside each chunk, the carry across chunks."""
    dA, dBu = _discretized(u, delta, A, B, D, delta_bias, bug)
    h, ys = jnp.zeros(A.shape, u.dtype), []
    for lo in range(0, u.shape[0], chunk):
        a, b = jax.lax.associative_scan(lambda e, f: (e[0] * f[0], f[0] * e[1] + f[1]),
                                        (dA[lo:lo + chunk], dBu[lo:lo + chunk]))
        states = a * h + b
        ys.append(jnp.einsum("kdn,kn->kd", states, C[lo:lo + chunk]))
        last = -2 if bug == "chunk_boundary_off_by_one" and states.shape[0] > 1 else -1
        h = states[last]
    return _finish(jnp.concatenate(ys), u, D, z, bug)


def batched(kernel, bug=None):
    """``kernel`` over any leading batch axes of the per-token arguments (``jax.vmap``)."""
    def fn(u, delta, A, B, C, D, z, delta_bias):
        lead = u.shape[:-2]
        flat = [x.reshape((-1, *x.shape[-2:])) for x in (u, delta, B, C, z)]
        out = jax.vmap(lambda u_, d_, b_, c_, z_: kernel(u_, d_, A, b_, c_, D, z_, delta_bias,
                                                         bug=bug))(*flat)
        return out.reshape((*lead, *out.shape[-2:]))

    fn.__name__ = f"{kernel.__name__}_{bug or 'correct'}"
    return fn


#: the sweeps' sizes: n = 4 tokens cross a chunk boundary (chunks of 2), and fixed sizes
#: keep hypothesis' shrinking of a failing case short
SHAPES = {"n": 4, "d": 2, "N": 2}


def _check(fn, seed: int, examples: int = 3, dtype: str = "float32"):
    return check_op(fn, "selective_scan", dtype=dtype, seed=seed, examples=examples,
                    hostile=False, shapes=SHAPES, batch=False)


def test_correct_kernel_passes_with_every_row() -> None:
    report = check_op(batched(sequential_scan), "selective_scan", dtype="float32", seed=0,
                      hostile=False)
    assert report.ok, str(report)
    checked = {r.check.split(" (")[0] for r in report.rows if r.verdict == "pass"}
    assert {"forward", "jvp"} <= checked and any(c.startswith("vjp") for c in checked)


@pytest.mark.parametrize("kernel", [sequential_scan, chunked_scan])
def test_no_false_alarm_over_20_seeds(kernel) -> None:
    for seed in SEEDS:
        report = _check(batched(kernel), seed)
        assert report.ok, (seed, str(report))


@pytest.mark.parametrize("bug", BUGS)
def test_planted_bug_is_killed_on_every_seed(bug: str) -> None:
    kernel = chunked_scan if bug == "chunk_boundary_off_by_one" else sequential_scan
    for seed in SEEDS:
        report = _check(batched(kernel, bug), seed)
        assert not report.ok, (bug, seed)


# -- bfloat16, with the float32 sweep's 3 drawn cases per seed. A drawn case can be truly
# unresolvable in bfloat16 (seed 14's first case: its A-bar cancels terms 6 times larger than
# itself, and that row's bound is 2.9 of its scale: inconclusive); the report is ok when every
# check was resolved by some case (the others are named in its notes). One case per seed is
# not enough to kill Euler's A everywhere: 1 + Delta A differs from exp(Delta A) by
# (Delta A)^2 / 2, below bfloat16's resolution when Delta A is small (survived a seed).
BF16_EXAMPLES = 3


@pytest.mark.parametrize("kernel", [sequential_scan, chunked_scan])
def test_bfloat16_no_false_alarm_over_20_seeds(kernel) -> None:
    for seed in SEEDS:
        report = _check(batched(kernel), seed, BF16_EXAMPLES, "bfloat16")
        assert report.ok, (seed, str(report))


@pytest.mark.parametrize("bug", BUGS)
def test_bfloat16_planted_bug_is_killed_on_every_seed(bug: str) -> None:
    kernel = chunked_scan if bug == "chunk_boundary_off_by_one" else sequential_scan
    for seed in SEEDS:
        report = _check(batched(kernel, bug), seed, BF16_EXAMPLES, "bfloat16")
        assert report.failures, (bug, seed, str(report))


def test_running_error_of_the_recurrence_is_the_decay_weighted_sum() -> None:
    r"""The namespace's bound on :math:`h_k = a_k h_{k-1} + b_k` (exact inputs, two roundings
    a step) is the closed form :math:`e_k = \sum_{j \le k} \bigl(\prod_{i=j+1}^{k}|a_i|\bigr)
    u\,(|a_j h_{j-1}| + |h_j|)`, divided by :math:`1 - m u` with :math:`m = 2k` roundings on
    the deepest path (a product and a sum a step)."""
    u = unit_roundoff("bfloat16")
    xp = running_namespace(u, unit_roundoff("float32"))
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.5, 1.0, 6), rng.standard_normal(6)
    h, hs = xp.scalar(0.0), [0.0]
    for k in range(6):
        h = xp.scalar(a[k]) * h + xp.scalar(b[k])
        hs.append(a[k] * hs[-1] + b[k])
    closed = sum(np.prod(np.abs(a[j + 1:])) * u * (abs(a[j] * hs[j]) + abs(hs[j + 1]))
                 for j in range(6))
    got = float(running_error(np.asarray(h, dtype=object)))
    # both sides are float64 sums of 6 products of up to 6 factors, in different orders
    tol = tolerance("float64", size=6, depth=8)
    assert tol.compare(got, closed / (1 - 2 * 6 * u)).ok, (got, closed)
