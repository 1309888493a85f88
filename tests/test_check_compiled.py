"""A kernel compiled per shape (JAX) is checked in a few fixed shapes (issue 35, item 2):
its drawn cases come in ``SHAPE_BUCKETS`` shapes (the smallest sizes, the largest with the
deepest batch, two between), so a JAX ``check_op`` compiles a handful of programs instead of
one per case; a failure found in a bucket is still shrunk to a small case.
"""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from nlaverify.check import check_op  # noqa: E402
from nlaverify.check.op_search import SHAPE_BUCKETS, shape_buckets  # noqa: E402
from nlaverify.ops.registry import OPS  # noqa: E402


def test_buckets_hold_the_smallest_and_the_largest_shapes() -> None:
    ranges = {"n": (1, 16), "m": (1, 16)}
    b = shape_buckets(OPS["softmax"], ranges, None, seed=0)
    assert len(b) == SHAPE_BUCKETS and len({repr(x) for x in b}) == SHAPE_BUCKETS
    assert b[0] == ({"n": 1, "m": 1}, ())
    assert b[1][0] == {"n": 16, "m": 16} and len(b[1][1]) == 2
    # the op's size constraints hold in every bucket (heads divide the width)
    for sizes, _ in shape_buckets(OPS["split_heads"], {"n": (1, 4), "hd": (2, 9)}, None, 3):
        assert sizes["hd"] % 2 == 0


def test_a_jax_check_sees_few_shapes_and_still_shrinks_a_failure() -> None:
    seen: set[tuple[int, ...]] = set()

    def softmax(Z):
        seen.add(tuple(Z.shape))
        return jax.nn.softmax(Z, axis=-1)

    assert check_op(softmax, "softmax", dtype="float32", hostile=False).ok
    assert len(seen) <= SHAPE_BUCKETS, sorted(seen)

    def sees_the_next_token(Q, K, V):
        n = Q.shape[-2]
        S = Q @ jnp.swapaxes(K, -1, -2) / jnp.sqrt(Q.shape[-1])
        S = jnp.where(jnp.arange(n)[:, None] + 1 >= jnp.arange(n)[None, :], S, -jnp.inf)
        return jax.nn.softmax(S, axis=-1) @ V

    r = check_op(sees_the_next_token, "causal_attention", dtype="float32", hostile=False)
    assert r.failures
    q = r.first_failure.reproducer.split("args = [")[1].split("np.array(")[1]
    assert q.count("[") <= 4, q  # n = 2 rows, d_k = 1: shrunk below the buckets' sizes
