"""The pytest plugin of nlaverify (entry point ``pytest11``; active wherever nlaverify is
installed, and silent unless used).

* ``--nlaverify-profile=ci|nightly`` (or the ini option ``nlaverify_profile``) loads a
  hypothesis profile made for checks that compile: ``ci`` (20 examples, derandomized, no
  deadline: a first JAX or torch.compile call takes seconds, which hypothesis' default
  200 ms deadline reports as ``DeadlineExceeded`` on a correct kernel) or ``nightly`` (500
  examples, no deadline). Without the option your own hypothesis settings stand.
* Fixtures: ``nlaverify_namespace`` (a factory: ``nlaverify_namespace("jax")``, ``"mpmath"``
  with ``digits=``, ``"sympy"``...), ``xp`` (the NumPy namespace, parametrize it
  indirectly for others) and ``nlaverify_tolerance`` (:func:`nlaverify.tolerance.tolerance`).
* Assertion output: ``assert report`` on a :class:`nlaverify.check.CheckReport` shows its
  one-line summary (the first failure: where, yours, the reference, the ratio);
  ``report.raise_if_failed()`` and a comparison such as ``report.ok == True`` show the table
  of failing rows and the reproducer.

Nothing of nlaverify (nor JAX) is imported until a fixture or a report asks for it, so the
plugin does not change a test session that does not use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

PROFILES = {"ci": dict(max_examples=20, derandomize=True),
            "nightly": dict(max_examples=500)}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nlaverify")
    group.addoption("--nlaverify-profile", action="store", default=None,
                    choices=sorted(PROFILES),
                    help="load nlaverify's hypothesis profile (no deadline: first calls "
                         "compile)")
    parser.addini("nlaverify_profile", "nlaverify's hypothesis profile (ci or nightly)",
                  default="")


def register_profiles() -> None:
    """Register the hypothesis profiles ``nlaverify-ci`` and ``nlaverify-nightly``."""
    from hypothesis import HealthCheck, settings

    for name, kw in PROFILES.items():
        settings.register_profile(f"nlaverify-{name}", deadline=None, print_blob=True,
                                  suppress_health_check=[HealthCheck.too_slow], **kw)


def pytest_configure(config: pytest.Config) -> None:
    name = config.getoption("--nlaverify-profile") or config.getini("nlaverify_profile")
    if not name:
        return
    if name not in PROFILES:
        raise pytest.UsageError(f"nlaverify_profile: expected one of {', '.join(PROFILES)}, "
                                f"got {name!r}")
    from hypothesis import settings

    register_profiles()
    settings.load_profile(f"nlaverify-{name}")


def pytest_report_header(config: pytest.Config) -> str | None:
    name = config.getoption("--nlaverify-profile") or config.getini("nlaverify_profile")
    return f"nlaverify: hypothesis profile nlaverify-{name}" if name else None


def _is_report(obj: Any) -> bool:
    return type(obj).__name__ == "CheckReport" and type(obj).__module__.startswith(
        "nlaverify.check")


def pytest_assertrepr_compare(config: pytest.Config, op: str, left: Any,
                              right: Any) -> list[str] | None:
    for side in (left, right):
        if _is_report(side):
            return [f"nlaverify {side.kind} {side.subject}: "
                    f"{'ok' if side.ok else 'FAILED'}", *side.failure_text().splitlines()]
    return None


@pytest.fixture
def nlaverify_namespace() -> Callable[..., Any]:
    """A factory of nlaverify's array namespaces: ``nlaverify_namespace("jax")``."""
    from nlaverify.backends import get_namespace

    return get_namespace


@pytest.fixture
def xp(request: pytest.FixtureRequest) -> Any:
    """The namespace named by an indirect parameter (default ``"numpy"``)."""
    from nlaverify.backends import get_namespace

    return get_namespace(getattr(request, "param", "numpy"))


@pytest.fixture
def nlaverify_tolerance() -> Callable[..., Any]:
    """:func:`nlaverify.tolerance.tolerance`, the one tolerance model."""
    from nlaverify.tolerance import tolerance

    return tolerance
