"""Shared test set-up: hypothesis profiles and the repository root.

JAX allocates GPU memory on demand (see below), so any number of xdist workers can
share one GPU. Profiles: ``ci`` (default; few examples, no deadline, derandomized so CI never
flakes) and ``nightly`` (many examples). Pick with ``HYPOTHESIS_PROFILE=nightly``.
"""

from __future__ import annotations

import os
import tempfile

# JAX's memory policy, set before any test imports JAX: on a GPU machine each xdist worker
# would otherwise preallocate 75 % of the device memory, and with more than one worker
# the later ones fail ("All configs failed during profiling"). Allocate on demand instead.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# Compile once: JAX's persistent compilation cache, shared by the xdist workers and kept
# between runs in the temporary folder (the key covers the program, the flags, XLA_FLAGS and
# the JAX version, so a stale entry is never used). Measured on test_curvature_report +
# test_zoo: 107 s without, 28 s with a warm cache; a cold cache costs its writes.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(
    tempfile.gettempdir(), f"nlaverify-jax-cache-{os.getuid() if hasattr(os, 'getuid') else 0}"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
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


# The quick tier (``python3 -m pytest -m quick -n 2``, about two minutes): every module
# imported (tests/test_imports.py) and each family's sharpest check, a planted bug that the
# family's machinery must kill. The full suite (the README's command) runs them all; the
# guide says when to use which. A node id here that no longer exists fails the quick tier's
# own check (tests/test_imports.py), so the list cannot rot silently.
QUICK: tuple[str, ...] = (
    "tests/test_imports.py",
    "tests/test_house.py",
    "tests/test_errors.py::test_shape_mismatch_names_argument_and_shapes",
    "tests/test_cli.py::test_unknown_identity_exit_2",
    # proofs and the exact machinery
    "tests/test_exact.py::test_dropped_term_of_mha_vjp_is_refuted_before_any_simplification",
    "tests/test_mutations.py::test_sign_flip_is_caught",
    "tests/test_proofs.py::test_wrong_closed_forms_are_refuted",
    "tests/test_proofs.py::test_stale_document_is_named",
    "tests/test_proofs_incremental.py::"
    "test_a_flipped_sign_changes_exactly_the_identities_that_reach_the_module",
    # the pipeline, batching, forward mode, precision
    "tests/test_transformer.py::test_planted_vjp_error_is_reported_at_that_node",
    "tests/test_jvp.py::test_a_wrong_jvp_is_caught_by_the_graph_check_and_the_proof",
    "tests/test_batching.py::test_planted_batch_bug_in_one_op_fails_its_batch_identity",
    "tests/test_precision.py::test_planted_float16_node_is_named",
    "tests/test_hostile.py::test_planted_softmax_without_max_shift_fails_the_hostile_check",
    # the front door
    "tests/test_check_op.py::test_attention_scale_bug_in_bfloat16",
    "tests/test_check_model.py::test_planted_bug_named_at_its_node",
    "tests/test_check_optimizer.py::test_adam_bugs_are_killed",
    "tests/test_check_decode.py::test_planted_bug_is_named_at_its_node_and_position",
    "tests/test_check_function.py::test_variance_eleven_percent_off_is_detected",
    "tests/test_check_curvature.py::test_check_curvature_hessian_sign_bug",
    # curvature, Kronecker, optimizers, Newton–Schulz
    "tests/test_curvature_graph.py::test_planted_missing_one_over_n_is_caught",
    "tests/test_kfac_graph.py::test_planted_missing_average_is_caught",
    "tests/test_curvature_proofs.py::test_planted_bug_fails_the_proof",
    "tests/test_kronecker.py::test_a_planted_error_fails_the_proof",
    "tests/test_optim_rules.py::test_planted_mutant_is_caught",
    "tests/test_optimizer_proofs.py::test_planted_bug_fails",
    "tests/test_newton_schulz.py::test_mutant_wrong_coefficient_is_caught",
    "tests/test_ns_certify.py::test_planted_bug_ignoring_critical_points_fails",
    # attention, low rank, geometry
    "tests/test_attention_proofs.py::test_planted_bug_fails",
    "tests/test_linear_attention.py::test_a_wrong_normaliser_is_caught",
    "tests/test_attention_statistics.py::test_rate_mutant_with_shared_rows_is_caught",
    "tests/test_online_softmax.py::test_a_wrong_merge_is_refuted_by_both_identities",
    "tests/test_lowrank_proofs.py::test_proofs_catch_planted_errors",
    "tests/test_geometry.py::test_proofs_fail_on_planted_errors",
    # real models, the zoo
    "tests/test_interop_weights.py::test_planted_mapping_mistakes_fail_the_logits_check",
    "tests/test_hf_verify.py::test_planted_mistake_is_reported_at_its_node",
    "tests/test_zoo_presets.py::test_a_planted_preset_error_fails",
)


def _is_quick(nodeid: str) -> bool:
    base = nodeid.split("[", 1)[0]
    return any(base == q or base.startswith(q + "::") for q in QUICK)


def pytest_collection_modifyitems(config, items) -> None:
    """Mark the quick tier (:data:`QUICK`)."""
    for item in items:
        if _is_quick(item.nodeid):
            item.add_marker(pytest.mark.quick)
