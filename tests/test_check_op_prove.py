"""nlaverify.check.prove and the pytest plugin.

``prove``: the exact proof of a user's VJP (a wrong one refuted at a rational point, the proof
document written) and its bad input; the plugin: its profile and a failing report's rows.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from nlaverify.check import CheckError, prove

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
