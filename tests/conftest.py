"""Shared test set-up: hypothesis profiles and the repository root.

JAX allocates GPU memory on demand (see below), so any number of xdist workers can
share one GPU. Profiles: ``ci`` (default; few examples, no deadline, derandomized so CI never
flakes) and ``nightly`` (many examples). Pick with ``HYPOTHESIS_PROFILE=nightly``.
"""

from __future__ import annotations

import os

# JAX's memory policy, set before any test imports JAX: on a GPU machine each xdist worker
# would otherwise preallocate 75 % of the device memory, and with more than one worker
# the later ones fail ("All configs failed during profiling"). Allocate on demand instead.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=6, deadline=None, derandomize=True, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "nightly", max_examples=200, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_root() -> Path:
    return REPO
