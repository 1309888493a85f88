"""nlaverify.check.check_op: the cases found by the hostile review.

Scalar losses in torch, in-place writes to an input, integer outputs, reproducers with
infinite inputs or placeholders, nothing run, strict JSON of non-finite values, a UserOp as
the reference, non-contiguous outputs, replayed tangents, narrow LayerNorm rows in bfloat16,
JAX on subnormal inputs, the float64 reference, frameworks imported inside the function and
vacuous bounds.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from _check_op_kernels import (
    causal_attention,
    causal_attention_scaled_by_d,
    rmsnorm,
    softmax_unshifted,
)

from nlaverify.check import CheckError, CheckFailed, check_op

torch = pytest.importorskip("torch")


# -- found by the hostile review -------------------------------------------------------------


def cross_entropy_torch(z, t):
    F = torch.nn.functional
    return F.cross_entropy(z.reshape(-1, z.shape[-1]), t.reshape(-1), ignore_index=-100)


def cross_entropy_over_all_tokens(z, t):  # divides by every position, padding included
    F = torch.nn.functional
    s = F.cross_entropy(z.reshape(-1, z.shape[-1]), t.reshape(-1), ignore_index=-100,
                        reduction="sum")
    return s / t.numel()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_scalar_loss_torch_cross_entropy(dtype):
    """A scalar loss in torch: its 0-d cotangent must reach autograd as 0-d (a 1-d one made
    every VJP row of a correct F.cross_entropy raise); the mean over all positions instead
    of the non-ignored ones is caught at the forward."""
    r = check_op(cross_entropy_torch, "cross_entropy", dtype=dtype, examples=4, hostile=1)
    assert r.ok, r
    assert any(x.check.startswith("vjp (torch autodiff) Z") for x in r.rows)
    bad = check_op(cross_entropy_over_all_tokens, "cross_entropy", dtype=dtype, examples=6,
                   hostile=False)
    assert not bad.ok and bad.first_failure.check == "forward"


def silu_then_double_input(x):
    y = torch.nn.functional.silu(x)
    x.mul_(2.0)
    return y


def silu_after_noop_mul(x):  # values unchanged, but an in-place write all the same
    x.mul_(1.0)
    return torch.nn.functional.silu(x)


def test_in_place_write_to_an_input_is_named():
    """A kernel writing to its input (torch x.mul_()) fails at the forward, naming the
    argument, even when the values do not change (torch's version counter)."""
    for fn in (silu_then_double_input, silu_after_noop_mul):
        r = check_op(fn, "silu", dtype="float32", examples=2, hostile=False)
        f = r.first_failure
        assert not r.ok and f.check == "forward" and f.where == "x"
        assert "modified its argument 'x' in place" in f.reason


def test_integer_output_is_named():
    """A float op returning an integer array fails with the dtype named."""
    r = check_op(lambda x: torch.relu(x).to(torch.int64), "relu", framework="torch",
                 examples=2, hostile=False)
    assert not r.ok and "returned int64" in r.first_failure.reason


def test_reproducer_with_infinite_inputs_runs():
    """A hostile case with -inf (masked) logits: the reproducer's arrays name inf, and it
    fails again the same way."""
    r = check_op(softmax_unshifted, "softmax", dtype="float32", examples=0, hostile=1)
    code = r.first_failure.reproducer
    assert "inf" in code.split("args = [")[1]
    scope: dict = {}
    exec(compile(code.replace("print(report)", ""), "<reproducer>", "exec"), scope)
    assert not scope["report"].ok


def test_placeholder_reproducer_says_so():
    """A lambda cannot be imported: the reproducer marks where to define it, and the
    report does not claim it runs as it is."""
    r = check_op(lambda x: 2 * x, "silu", framework="torch", examples=2, hostile=False)
    text = r.failure_text()
    assert "define your function where marked" in text and "fn = ...  # your function" in text


def test_nothing_run_is_not_ok():
    """examples=0 with hostile=False runs nothing: not ok, and the report says why."""
    r = check_op(rmsnorm, "rmsnorm", examples=0, hostile=False)
    assert not r.ok and not r.rows
    assert "nothing ran" in repr(r) and "nothing ran" in r.failure_text()
    with pytest.raises(CheckFailed):
        r.raise_if_failed()


def test_json_of_non_finite_values_is_strict():
    """NaN outputs give infinite errors and ratios: the JSON stays strict (no NaN/Infinity
    literals) and names them."""
    r = check_op(lambda x: x * float("nan"), "silu", framework="torch", examples=1,
                 hostile=False)

    def refuse(name):
        raise ValueError(name)

    d = json.loads(r.to_json(), parse_constant=refuse)
    assert d["ok"] is False and d["worst_ratio"] == "inf"
    assert d["rows"][0]["actual"] is None and d["rows"][0]["ratio"] == "inf"


def test_user_op_as_the_reference():
    """A UserOp from user_op is the reference of a kernel: the right one passes, one off by
    1 % fails at the forward."""
    from nlaverify.check.proof import user_op

    def square(xp, x):
        return x * x

    def square_vjp(xp, G, x):
        return (2 * x * G,)

    spec = user_op(square, args={"x": ("n", "d")}, sizes={"n": 2, "d": 3}, vjp=square_vjp)
    assert check_op(lambda x: x * x, spec, framework="torch", examples=3).ok
    bad = check_op(lambda x: 1.01 * x * x, spec, framework="torch", examples=3)
    assert not bad.ok and bad.first_failure.where.startswith("out[")


def test_non_contiguous_output_passes():
    """A kernel returning a non-contiguous view is read correctly."""
    def silu_t(x):
        return torch.nn.functional.silu(x.transpose(-1, -2).contiguous()).transpose(-1, -2)

    assert check_op(silu_t, "silu", dtype="float32", examples=3, hostile=1).ok


class _SiLUJvp:
    """silu with a hand-written JVP; ``wrong=True`` drops the x s (1 - s) term."""

    wrong = False

    @staticmethod
    def jvp(tangents, x):
        s = torch.sigmoid(x)
        d = s if _SiLUJvp.wrong else s * (1 + x * (1 - s))
        return d * tangents[0]


def test_reproducer_replays_the_tangents():
    """A JVP-only bug: the reproducer carries the failing case's tangents (not fresh ones)
    and fails again at the same entry with the same error."""
    _SiLUJvp.wrong = True
    try:
        r = check_op(torch.nn.functional.silu, "silu", jvp=_SiLUJvp.jvp, dtype="float32",
                     framework="torch", examples=4, hostile=False)
        f = r.first_failure
        assert f.check == "jvp"
        code = f.reproducer.replace("jvp = ...", "jvp = _SiLUJvp.jvp  #")
        scope: dict = {"_SiLUJvp": _SiLUJvp}
        exec(compile(code.replace("print(report)", ""), "<reproducer>", "exec"), scope)
        again = scope["report"].first_failure
    finally:
        _SiLUJvp.wrong = False
    assert again.check == "jvp (input 0)" and again.where == f.where
    assert again.error == f.error


def layernorm_torch(x, g, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, eps=1e-5)


def test_layernorm_backward_of_a_narrow_row_in_bfloat16():
    """No false alarm on torch's own LayerNorm backward in bfloat16 at d = 2 with a small
    spread: x-hat barely moves with x there (the perturbation estimate of the VJP's
    condition says 1), yet its rounding reaches the cotangent amplified by 1/sigma; the
    bound takes the op's a-priori condition max|x| / sigma for the derivative rows."""
    rng = np.random.default_rng(0)
    x = np.array([[-0.73046875, -0.5390625], [-1.0546875, 0.44140625], [0.25, 0.3125]])
    args = [x, np.array([1.25, -0.75]), np.array([0.5, 0.0])]
    cases = [(args, rng.standard_normal((3, 2))) for _ in range(4)]
    r = check_op(layernorm_torch, "layernorm", dtype="bfloat16", inputs=cases)
    # no false alarm; the VJP rows whose bound reaches 1 are inconclusive (not passes), so
    # the report is ok only when inconclusive rows are allowed
    assert r.ran and not r.failures, r
    assert r.inconclusive and not r.ok, r
    r.allow_inconclusive = True
    assert r.ok, r


def test_jax_kernel_on_subnormal_inputs_is_not_a_mutation():
    """JAX flushes float32 subnormals of the hostile activations: that is the conversion,
    not an in-place write (JAX arrays are immutable), so a correct jax.nn.silu passes."""
    jax = pytest.importorskip("jax")
    r = check_op(jax.nn.silu, "silu", dtype="float32", framework="jax", examples=0, hostile=1)
    assert r.ok, r


def test_float64_reference_for_large_low_precision_cases():
    """reference="float64" (the proved op on NumPy) judges a bfloat16 attention kernel at
    sizes where mpmath is slow, passes the correct one and names the 1/d scale; it is
    refused for a float64 subject (the reference's error would equal the subject's)."""
    big = {"n": (8, 24), "d_k": (16, 48), "d_v": (8, 16)}
    ok = check_op(causal_attention, "causal_attention", dtype="bfloat16", shapes=big,
                  examples=4, hostile=1, reference="float64")
    assert ok.ok, ok.failure_text()
    assert any("float64 NumPy" in n for n in ok.notes)
    bad = check_op(causal_attention_scaled_by_d, "causal_attention", dtype="bfloat16",
                   shapes=big, examples=4, hostile=False, reference="float64")
    assert not bad.ok and "reference='float64'" in bad.first_failure.reproducer
    with pytest.raises(CheckError, match="argument 'reference'"):
        check_op(causal_attention, "causal_attention", dtype="float64", reference="float64")
    with pytest.raises(CheckError, match=r"argument 'reference'.*'sympy'"):
        check_op(causal_attention, "causal_attention", reference="sympy")


def test_framework_imported_inside_the_function():
    def local_torch_softmax(z):
        import torch as t

        return t.softmax(z, -1)

    def local_jax_softmax(z):
        import jax.numpy as jnp_local

        e = jnp_local.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    from nlaverify.check.adapters import detect_framework

    assert detect_framework(local_torch_softmax) == "torch"
    assert detect_framework(local_jax_softmax) == "jax"


def test_a_vacuous_bound_is_not_a_pass():
    """A row whose bound reaches 1 cannot fail for a finite error: it is skipped with the
    reason, never reported as passed (a bfloat16 case conditioned like 1/2^-8)."""
    from nlaverify.cases.inputs import drawn_input as _draw_values
    from nlaverify.check.op import _run_case, _Settings
    from nlaverify.ops.registry import OPS

    spec = OPS["rmsnorm"]
    case = _draw_values(spec, {"n": 1, "d": 4}, (), 0, "bfloat16", spec.static)
    s = _Settings(rmsnorm, None, None, "torch", "bfloat16", "float32", None, "rmsnorm",
                  False, [0, 1])
    case.condition = lambda real: 2.0**9  # pretend an ill-conditioned case
    case.origin = "hostile seed 0"
    rows = _run_case(s, case)
    assert rows and all(r.verdict == "skip" and "cannot resolve" in r.reason for r in rows)
    assert all(r.inconclusive for r in rows)
