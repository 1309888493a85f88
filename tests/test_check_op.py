"""nlaverify.check.check_op: users' kernels against the proved ops, and its bad input.

Each planted bug below is one users make; each test says what it detects. The correct
kernels must pass in float32 and bfloat16 (no false alarm), the buggy ones fail with the
argument, the entry, the bound and the ratio named. (``prove`` and the pytest plugin:
tests/test_check_op_prove.py; the hostile review's findings: tests/test_check_op_hostile.py;
the kernels those share: tests/_check_op_kernels.py.)
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from _check_op_kernels import (
    causal_attention,
    causal_attention_scaled_by_d,
    rmsnorm,
    softmax_unshifted,
)

from nlaverify.check import CheckError, CheckFailed, check_op, op_signature
from nlaverify.check.op import exact_in

torch = pytest.importorskip("torch")


# -- kernels written the way users write them ---------------------------------------------


def rmsnorm_no_mean(x, w):  # the sum where the mean belongs: off by sqrt(d)
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-5) * w


def rmsnorm_eps_outside(x, w):  # eps added to the root, not under it
    return x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + 1e-5) * w


class _SiLU(torch.autograd.Function):
    """A custom backward, as fused kernels have; ``wrong=True`` drops the x(1 - s) term."""

    wrong = False

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * s if _SiLU.wrong else g * s * (1 + x * (1 - s))


def silu_custom(x):
    return _SiLU.apply(x)


def np_softmax(z):
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def np_softmax_vjp(g, z):
    p = np_softmax(z)
    return (p * (g - (g * p).sum(-1, keepdims=True)),)


def np_softmax_vjp_wrong(g, z):  # the diagonal term only
    return (np_softmax(z) * g,)


# -- the front door ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_correct_torch_kernels_pass(dtype):
    """No false alarm: correct float32/bfloat16 kernels, on drawn cases with batch and head
    axes and on the hostile ones, forward, autodiff VJP and JVP."""
    for fn, op in ((rmsnorm, "rmsnorm"), (causal_attention, "causal_attention")):
        report = check_op(fn, op, dtype=dtype, examples=6, hostile=2)
        assert report.ok, report
        checks = {r.check for r in report.rows}
        assert any(c.startswith("vjp") for c in checks) and any(c.startswith("jvp")
                                                                 for c in checks)
        assert 0 < report.worst_ratio < 1


def test_missing_mean_is_named_with_bound_and_ratio():
    """Detects an RMSNorm off by sqrt(d) (the sum for the mean), at the entry of the output
    and of the cotangent of x, with the bound and the ratio; shrunk to the smallest case
    that shows it (d = 2: at d = 1 the sum is the mean)."""
    report = check_op(rmsnorm_no_mean, "rmsnorm", dtype="float32", examples=8, hostile=False)
    assert not report.ok
    rows = {r.check: r for r in report.failures}
    fwd = rows["forward"]
    assert fwd.where.startswith("out[") and fwd.ratio > 100
    assert fwd.actual is not None and fwd.expected is not None
    x_row = rows["vjp (torch autodiff) x"]
    assert x_row.where.startswith("x[") and x_row.ratio > 100
    text = report.failure_text()
    assert "FAILED" in repr(report) and fwd.where in repr(report)
    assert "bound" in text and "ratio" in text and "reproducer" in text
    with pytest.raises(CheckFailed, match=r"x\["):
        report.raise_if_failed()
    # the hypothesis-shrunk case: no batch axes, one row, d = 2
    args_line = fwd.reproducer.split("args = [")[1].split("]),")[0]
    assert args_line.strip().startswith("np.array([[") and args_line.count("], [") == 0
    assert len(json.loads(args_line.strip()[len("np.array("):] + "]")[0]) == 2


def test_reproducer_runs_verbatim():
    """The reproducer is a runnable snippet that fails the same way."""
    report = check_op(rmsnorm_no_mean, "rmsnorm", dtype="float32", examples=4, hostile=False)
    code = report.first_failure.reproducer
    assert f"from {__name__} import rmsnorm_no_mean as fn" in code
    scope: dict = {}
    exec(compile(code.replace("print(report)", ""), "<reproducer>", "exec"), scope)
    again = scope["report"]
    assert not again.ok and again.first_failure.where == report.first_failure.where


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_eps_outside_the_root_and_unshifted_softmax_die_on_hostile_inputs(dtype):
    """Bugs invisible on moderate inputs: eps outside the root (tiny rows, mean square
    below eps) and softmax without the max shift (logits of 1e4 overflow)."""
    r1 = check_op(rmsnorm_eps_outside, "rmsnorm", dtype=dtype, examples=0, hostile=2)
    r2 = check_op(softmax_unshifted, "softmax", dtype=dtype, examples=0, hostile=1)
    for r in (r1, r2):
        assert not r.ok and "hostile" in r.first_failure.check
    assert r2.first_failure.ratio == math.inf  # nan where the reference is finite


def test_attention_scale_bug_in_bfloat16():
    """Detects 1/d for 1/sqrt(d) even in bfloat16 (bound 2^-8 x 32 x kappa)."""
    r = check_op(causal_attention_scaled_by_d, "causal_attention", dtype="bfloat16",
                 examples=6, hostile=False, shapes={"d_k": (8, 16)})
    # the shrunk case may show it first in a cotangent: bfloat16 derivative rows are judged
    # relative to each cotangent's own size
    assert not r.ok and r.first_failure.where.split("[")[0] in ("out", "Q", "K", "V"), r


def test_custom_autograd_backward():
    """A custom torch.autograd.Function: the correct backward passes, one missing its
    x(1 - s) term is named at x (the forward is right, so only the VJP row fails)."""
    assert check_op(silu_custom, "silu", dtype="float32", examples=4, hostile=1).ok
    _SiLU.wrong = True
    try:
        r = check_op(silu_custom, "silu", dtype="float32", examples=4, hostile=False)
    finally:
        _SiLU.wrong = False
    assert [f.check for f in r.failures] == ["vjp (torch autodiff) x"]
    assert r.failures[0].where.startswith("x[")


def test_numpy_kernel_with_and_without_vjp():
    """NumPy has no autodiff: the VJP rows are skipped with the reason, unless vjp= is given;
    a VJP missing the -<g, p> p term fails at Z."""
    r = check_op(np_softmax, "softmax", dtype="float64", examples=3, hostile=1)
    assert r.ok
    assert any(x.verdict == "skip" and "autodiff" in x.reason for x in r.rows)
    assert check_op(np_softmax, "softmax", vjp=np_softmax_vjp, dtype="float64", examples=3,
                    hostile=1, check_jvp=False).ok
    bad = check_op(np_softmax, "softmax", vjp=np_softmax_vjp_wrong, dtype="float32",
                   examples=3, hostile=False, check_jvp=False)
    assert not bad.ok and bad.first_failure.where.startswith("Z[")


def test_jax_kernel_with_its_own_vjp():
    """A JAX kernel under jit, with JAX's autodiff; 30-digit reference in float64."""
    jnp = pytest.importorskip("jax.numpy")

    def jax_rmsnorm(x, w):
        return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-5) * w

    r = check_op(jax_rmsnorm, "rmsnorm", dtype="float64", examples=3, hostile=1, batch=(2,))
    r.raise_if_failed()
    assert r.worst_ratio < 0.1


def test_report_json_and_signature():
    r = check_op(rmsnorm, "rmsnorm", dtype="float32", examples=2, hostile=False)
    d = json.loads(r.to_json())
    assert d["ok"] is True and d["kind"] == "check_op" and d["rows"]
    assert {"subject", "check", "error", "bound", "ratio", "verdict", "where"} <= set(d["rows"][0])
    assert op_signature("rmsnorm") == "rmsnorm(x[..., n, d], gamma[d]); static: eps=1e-05"


def test_exact_in_rounds_to_the_dtype():
    x = np.array([1 / 3, 1e-3, 300.0])
    b = exact_in(x, "bfloat16")
    assert np.all(exact_in(b, "bfloat16") == b) and not np.all(b == x)
    with pytest.raises(CheckError, match="range of float16"):
        exact_in(np.array([1e6]), "float16")


# -- bad input -----------------------------------------------------------------------------


def test_bad_input_is_named():
    with pytest.raises(CheckError, match="argument 'fn'"):
        check_op(3, "rmsnorm")
    with pytest.raises(CheckError, match=r"unknown op 'rms'.*rmsnorm"):
        check_op(rmsnorm, "rms")
    with pytest.raises(CheckError, match=r"argument 'dtype'.*float8"):
        check_op(rmsnorm, "rmsnorm", dtype="float8")
    with pytest.raises(CheckError, match=r"argument 'framework'.*'tensorflow'"):
        check_op(rmsnorm, "rmsnorm", framework="tensorflow")
    with pytest.raises(CheckError, match=r"argument 'shapes'.*'q'"):
        check_op(rmsnorm, "rmsnorm", shapes={"q": 3})
    with pytest.raises(CheckError, match=r"argument 'static'.*tau"):
        check_op(rmsnorm, "rmsnorm", static={"tau": 1.0})
    with pytest.raises(CheckError, match="argument 'batch'"):
        check_op(rmsnorm, "rmsnorm", batch=(0,))
    with pytest.raises(CheckError, match=r"output of fn: expected an array.*list"):
        check_op(lambda x, w: [1.0], "rmsnorm", framework="torch", examples=1)
    with pytest.raises(CheckError, match="output of vjp: expected 2 arrays"):
        check_op(lambda x, w: x * w, "rmsnorm", vjp=lambda g, x, w: (x,), examples=1,
                 framework="numpy", hostile=False)
    with pytest.raises(CheckError, match="returned a torch array: pass framework='torch'"):
        check_op(lambda x, w: torch.ones(x.shape), "rmsnorm", framework="numpy", examples=1)
    with pytest.raises(CheckError, match=r"inputs'\[0\]: expected 2 arrays"):
        check_op(rmsnorm, "rmsnorm", inputs=[[np.ones((2, 3))]])


def test_a_kernel_that_raises_fails_its_row():
    def broken(x, w):
        raise RuntimeError("CUDA error: out of memory")

    r = check_op(broken, "rmsnorm", framework="torch", examples=1, hostile=False)
    assert not r.ok and "RuntimeError: CUDA error" in r.first_failure.reason


def test_missing_framework_is_named():
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(CheckError, match="framework 'cupy' is not installed"):
            check_op(rmsnorm, "rmsnorm", framework="cupy")
    else:  # pragma: no cover - a GPU machine
        pytest.skip("CuPy is installed here")



def test_explicit_inputs_beyond_the_dtype_are_named():
    """An explicit input (argument, cotangent or tangent) beyond float16's range is a
    CheckError saying so (not the reference's complaint about infinite values), and a bad
    ``hostile`` or ``batch`` is named before any case runs."""
    import numpy as np

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * g

    x, g = np.ones((2, 3)), np.ones(3)
    for item in ([x * 1e6, g], ([x, g], np.full((2, 3), 1e6)),
                 ([x, g], np.ones((2, 3)), [x * 1e6, g])):
        with pytest.raises(CheckError, match="exceeds the range of float16"):
            check_op(rms, "rmsnorm", dtype="float16", framework="numpy", inputs=[item])
    calls = []

    def counted(x, g):
        calls.append(1)
        return rms(x, g)

    with pytest.raises(CheckError, match="argument 'hostile'"):
        check_op(counted, "rmsnorm", framework="numpy", hostile="bogus")
    with pytest.raises(CheckError, match="argument 'batch'"):
        check_op(counted, "rmsnorm", framework="numpy", batch="ab")
    assert not calls
