"""Issue 37, item 5: ``check_op(fn, "selective_scan")`` on users' scan kernels (Gu & Dao 2023,
Algorithm 2; Baptista, Stuart & Tran §5.3.4), sequential (``jax.lax.scan``) and chunked
(``jax.lax.associative_scan`` inside chunks of 2, the state carried across them, the
structure of Mamba-2's kernel), with the planted bugs of the issue, each killed in float32
and no false alarm on the correct kernels, over 20 seeds.

The reference is the op of :data:`nlaverify.ops.ssm_specs.SCAN_OPS` (its VJP and JVP proved
by the family ``ssm``), at 30 digits on the kernel's float32 inputs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from nlaverify.check import check_op

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


def _check(fn, seed: int, examples: int = 3):
    return check_op(fn, "selective_scan", dtype="float32", seed=seed, examples=examples,
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
