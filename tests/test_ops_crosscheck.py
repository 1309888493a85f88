"""Every op's hand-derived VJP against JAX autodiff, the mpmath reference, float32
and a high-precision finite difference, on hypothesis-drawn sizes and inputs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from nlaverify.crosscheck import check_case
from nlaverify.ops.registry import OPS
from nlaverify.strategies import op_cases

DIGITS = 40


# half the profile's examples (3 in ci): 50-digit mpmath and finite differences on every
# op; `nlaverify verify` (tests/test_cli.py) and the JVP tests check every op again
@pytest.mark.parametrize("op", [k for k, s in OPS.items() if s.differentiable])
@settings(max_examples=max(1, settings().max_examples // 2))
@given(data=__import__("hypothesis").strategies.data())
def test_vjp_agrees_with_jax_mpmath_fd(op: str, data) -> None:
    case = data.draw(op_cases(op))
    rows = check_case(case, ("numpy", "jax", "mpmath"), digits=DIGITS)
    assert {r.check.split(" (")[0] for r in rows} >= {"numpy vs jax.vjp"}
    assert len(rows) == 4
    bad = [r for r in rows if not r.ok]
    assert not bad, "\n".join(f"{r.check}: error {r.error:.3e} > {r.rtol:.3e} ({r.reason})"
                              for r in bad)
