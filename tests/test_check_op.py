"""nlaverify.check.check_op and prove: users' kernels against the proved ops.

Each planted bug below is one users make; each test says what it detects. The correct
kernels must pass in float32 and bfloat16 (no false alarm), the buggy ones fail with the
argument, the entry, the bound and the ratio named.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from nlaverify.check import CheckError, CheckFailed, check_op, op_signature, prove
from nlaverify.check.op import exact_in

torch = pytest.importorskip("torch")


# -- kernels written the way users write them ---------------------------------------------


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w


def rmsnorm_no_mean(x, w):  # the sum where the mean belongs: off by sqrt(d)
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-5) * w


def rmsnorm_eps_outside(x, w):  # eps added to the root, not under it
    return x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + 1e-5) * w


def softmax_unshifted(z):  # exp overflows for logits beyond ~88 (float32)
    e = torch.exp(z)
    return e / e.sum(-1, keepdim=True)


def causal_attention(q, k, v):
    n = q.shape[-2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


def causal_attention_scaled_by_d(q, k, v):  # 1/d instead of 1/sqrt(d)
    n = q.shape[-2]
    s = q @ k.transpose(-1, -2) / q.shape[-1]
    s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


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
    assert not r.ok and r.first_failure.where.startswith("out[")


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


# -- prove ---------------------------------------------------------------------------------


def my_rmsnorm(xp, x, gamma, *, eps):
    r = xp.sqrt(xp.sum(x * x, axis=-1, keepdims=True) / x.shape[-1] + eps)
    return x / r * gamma


def my_rmsnorm_vjp(xp, G, x, gamma, *, eps):
    d = x.shape[-1]
    r = xp.sqrt(xp.sum(x * x, axis=-1, keepdims=True) / d + eps)
    xh, gx = x / r, G * gamma
    dx = (gx - xh * xp.sum(gx * xh, axis=-1, keepdims=True) / d) / r
    return dx, xp.sum(G * xh, axis=tuple(range(G.ndim - 1)))


def my_rmsnorm_vjp_wrong(xp, G, x, gamma, *, eps):  # the projection term dropped
    r = xp.sqrt(xp.sum(x * x, axis=-1, keepdims=True) / x.shape[-1] + eps)
    return G * gamma / r, xp.sum(G * x / r, axis=tuple(range(G.ndim - 1)))


def test_prove_users_vjp_exactly(tmp_path):
    """The exact proof of a user's VJP; a wrong one is refuted at an entry of x with a
    rational counterexample; the proof document is written."""
    kw = dict(args={"x": ("n", "d"), "gamma": ("d",)}, sizes={"n": 1, "d": 3},
              static={"eps": 1e-5}, symbols={"eps": "epsilon"})
    ok = prove(my_rmsnorm, vjp=my_rmsnorm_vjp, document=tmp_path / "rms.md", **kw)
    assert ok.ok and ok.rows[0].check == "vjp (exact)"
    assert "Verdict:** proved" in (tmp_path / "rms.md").read_text()
    bad = prove(my_rmsnorm, vjp=my_rmsnorm_vjp_wrong, **kw)
    assert not bad.ok and bad.first_failure.where.startswith("x[")
    assert "refuted at a rational point" in bad.first_failure.reason


def test_prove_bad_input():
    with pytest.raises(CheckError, match=r"'sizes'.*no size for dimension.*d"):
        prove(my_rmsnorm, vjp=my_rmsnorm_vjp, args={"x": ("n", "d")}, sizes={"n": 1})
    with pytest.raises(CheckError, match="nothing to prove"):
        prove(my_rmsnorm, args={"x": ("n", "d")}, sizes={"n": 1, "d": 1})
    r = prove(lambda xp, x: xp.mean(x), vjp=lambda xp, G, x: (G,), args={"x": ("n",)},
              sizes={"n": 2})
    assert not r.ok and "written against xp" in r.first_failure.reason


# -- the pytest plugin ----------------------------------------------------------------------


def test_pytest_plugin(tmp_path):
    """The plugin loads its profile (no deadline) and shows a failing report's rows."""
    test = tmp_path / "test_user.py"
    test.write_text(
        "from hypothesis import settings\n"
        "from nlaverify.check import CheckReport, Row\n"
        "def test_profile():\n"
        "    assert settings().deadline is None and settings().max_examples == 20\n"
        "def test_report_output():\n"
        "    r = CheckReport('k', 'check_op', [Row('k', 'forward', 1.0, 0.1, 'fail', "
        "'out[0, 1]', 2.0, 1.0)])\n"
        "    assert r\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--nlaverify-profile=ci", str(test)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300)
    out = proc.stdout + proc.stderr
    assert "1 failed, 1 passed" in out, out
    assert "out[0, 1]" in out and "yours 2.0, reference 1.0" in out


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
    from nlaverify.check.op import _draw_values, _run_case, _Settings
    from nlaverify.ops.registry import OPS

    spec = OPS["rmsnorm"]
    case = _draw_values(spec, {"n": 1, "d": 4}, (), 0, "bfloat16", spec.static)
    s = _Settings(rmsnorm, None, None, "torch", "bfloat16", "float32", None, "rmsnorm",
                  False, [0, 1])
    case.condition = lambda real: 2.0**9  # pretend an ill-conditioned case
    case.origin = "hostile seed 0"
    rows = _run_case(s, case)
    assert rows and all(r.verdict == "skip" and "cannot resolve" in r.reason for r in rows)
