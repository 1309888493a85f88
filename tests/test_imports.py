"""Every module of the package imports (the quick tier's first check), and the quick tier's
list names tests that exist."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from nlaverify.sourcegraph import package_modules

REPO = Path(__file__).resolve().parents[1]
MODULES = sorted(m for m in package_modules() if not m.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_module_imports(name: str) -> None:
    importlib.import_module(name)


@pytest.mark.parametrize("name", MODULES)
def test_every_name_of_all_exists(name: str) -> None:
    """``from <module> import *`` works: every name of ``__all__`` is an attribute (an
    ``__all__`` that names a function never imported breaks a star import)."""
    module = importlib.import_module(name)
    missing = [n for n in getattr(module, "__all__", ()) if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names {missing}, which the module does not define"


def test_quick_tier_names_existing_tests() -> None:
    """Each entry of ``tests/conftest.py``'s ``QUICK`` selects at least one collected test."""
    from conftest import QUICK

    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "quick",
                           *sorted({q.split("::")[0] for q in QUICK})],
                          cwd=REPO, capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, f"collection failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    ids = [line.split("[", 1)[0] for line in proc.stdout.splitlines() if "::" in line]
    missing = [q for q in QUICK if not any(i == q or i.startswith(q + "::") for i in ids)]
    assert not missing, f"QUICK names no collected test: {missing}\n{proc.stdout[-2000:]}"


def test_lazy_public_names_survive_submodule_imports() -> None:
    """``nlaverify``'s public names load on first use (PEP 562); a name that is also a
    submodule's (``tolerance``) would be shadowed by the module once the submodule is
    imported, so none of the lazy names may be one, and ``tolerance`` stays the function."""
    import pkgutil
    import subprocess
    import sys

    import nlaverify

    submodules = {m.name for m in pkgutil.iter_modules(nlaverify.__path__)}
    assert not set(nlaverify._LAZY) & submodules
    code = ("import nlaverify.tolerance, nlaverify; from nlaverify import Tolerance, "
            "tolerance; assert callable(nlaverify.tolerance) and callable(tolerance); "
            "assert nlaverify.tolerance('float32').rtol > 0")
    subprocess.run([sys.executable, "-c", code], check=True)
