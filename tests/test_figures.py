"""The figures' data do not depend on the machine's kernels or thread counts.

``tests/_figure_data.py`` computes the data of the committed figures (reduced sizes, the same
library functions) after :func:`nlaverify.reproducible.pin_process`, as the figure commands
do. Run under two environments a user might have (OpenBLAS on 1 thread with the kernel this
CPU picks, or on 2 threads with another kernel forced; XLA with its default flags or asked for
several host devices), the saved data must be byte-identical.

The control shows that the comparison can see a difference: without the pin, OpenBLAS's
Haswell (AVX2) and SkylakeX (AVX-512) kernels, and NumPy and XLA with and without their
AVX-512 code, give different bits for the same data (a bound that compared rounded values, or
a pin that did nothing, would let that through). It needs an AVX-512 CPU to run both kernel
families, and is skipped, saying so, on one without.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nlaverify.reproducible import MARKER, OPT_OUT

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "_figure_data.py"


def _avx512() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def _run(tmp: Path, name: str, env: dict[str, str]) -> dict[str, bytes]:
    out = tmp / f"{name}.npz"
    env = {k: v for k, v in env.items() if k != "PYTEST_CURRENT_TEST"}
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, f"{name}:\n{proc.stdout}\n{proc.stderr}"
    with np.load(out) as data:
        return {k: data[k].tobytes() for k in data.files}


def _user_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in (MARKER, OPT_OUT, "OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "XLA_FLAGS",
                        "NPY_DISABLE_CPU_FEATURES")}
    env.update(extra)
    return env


def _differing(a: dict[str, bytes], b: dict[str, bytes]) -> list[str]:
    assert a.keys() == b.keys()
    return sorted(k for k in a if a[k] != b[k])


@pytest.fixture(scope="module")
def one_thread(tmp_path_factory) -> dict[str, bytes]:
    """The data of a pinned run started from a user's environment with OpenBLAS on one
    thread (shared by the comparison and the control)."""
    return _run(tmp_path_factory.mktemp("figure_data"), "one_thread",
                _user_env(OPENBLAS_NUM_THREADS="1"))


@pytest.mark.skipif(sys.platform != "linux", reason="the pinned kernels are set for Linux")
def test_figure_data_are_identical_under_two_thread_and_kernel_settings(one_thread,
                                                                         tmp_path) -> None:
    other = _user_env(OPENBLAS_NUM_THREADS="2",
                      XLA_FLAGS="--xla_force_host_platform_device_count=2")
    if _avx512():
        other["OPENBLAS_CORETYPE"] = "SkylakeX"
    two = _run(tmp_path, "two_threads", other)
    assert _differing(one_thread, two) == []


@pytest.mark.skipif(not _avx512(), reason="the control needs an AVX-512 CPU to run both "
                                          "kernel families")
def test_control_without_the_pin_the_kernels_show(one_thread, tmp_path) -> None:
    """The same program with the pin turned off (:data:`~nlaverify.reproducible.OPT_OUT`)
    and AVX-512 kernels: the data differ from the pinned run's."""
    wide = _user_env(OPENBLAS_NUM_THREADS="1", OPENBLAS_CORETYPE="SkylakeX")
    wide[OPT_OUT] = "1"
    assert _differing(one_thread, _run(tmp_path, "avx512", wide)), (
        "AVX-512 kernels gave the same bits: the test has no power here")
