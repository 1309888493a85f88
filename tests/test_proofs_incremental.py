"""Incremental proof checks: an identity is re-derived exactly when what it depends on changed.

The record (``inputs`` and ``document`` hashes in ``docs/proofs/index.json``, see
:mod:`nlaverify.proofs`) is exercised on a copy of the package: an unchanged copy re-derives
nothing; flipping one sign in ``rmsnorm_vjp`` changes the inputs of exactly the identities
whose sources reach ``nlaverify/ops/norms.py`` (and not of the Kronecker lemmas, which do
not), and a check run on that copy re-derives them and fails ``rmsnorm_vjp`` alone among them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nlaverify.identities import load_catalogue
from nlaverify.proofs import identity_roots, inputs_hashes, needs_derivation, read_index
from nlaverify.sourcegraph import PACKAGE_DIR, dependencies, import_graph

REPO = Path(__file__).resolve().parents[1]
NORMS = "nlaverify.ops.norms"
#: the planted bug: the projection term of rmsnorm's VJP with its sign flipped
RIGHT = "dx = (gx - xhat * _mean(xp, gx * xhat, d)) / rho / s"
WRONG = "dx = (gx + xhat * _mean(xp, gx * xhat, d)) / rho / s"


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> dict:
    """A copy of the package and of the proofs whose index records this copy's hashes (as
    ``nlaverify derive`` on this machine would), then the same copy with the sign flipped."""
    root = tmp_path_factory.mktemp("tree")
    shutil.copytree(PACKAGE_DIR, root / "nlaverify",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "docs" / "proofs", root / "proofs")
    catalogue = load_catalogue()
    before = inputs_hashes(catalogue, root / "nlaverify")
    index = read_index(root / "proofs")
    for i, entry in index.items():
        entry["inputs"] = before[i]
    (root / "proofs" / "index.json").write_text(json.dumps(index, indent=2, sort_keys=True)
                                                + "\n")
    norms = root / "nlaverify" / "ops" / "norms.py"
    text = norms.read_text(encoding="utf-8")
    assert text.count(RIGHT) == 1, "the planted line moved: update RIGHT/WRONG"
    unchanged_reasons = needs_derivation(catalogue, read_index(root / "proofs"),
                                         root / "proofs", before)
    norms.write_text(text.replace(RIGHT, WRONG), encoding="utf-8")
    after = inputs_hashes(catalogue, root / "nlaverify")
    return {"root": root, "catalogue": catalogue, "before": before, "after": after,
            "unchanged_reasons": unchanged_reasons}


def test_the_hash_is_the_packages_own_and_reproducible(tree) -> None:
    """A byte-identical copy hashes like the package; the record vouches for every identity."""
    assert tree["before"] == inputs_hashes(tree["catalogue"])
    assert tree["unchanged_reasons"] == {}


def test_a_flipped_sign_changes_exactly_the_identities_that_reach_the_module(tree) -> None:
    changed = {i for i in tree["catalogue"] if tree["before"][i] != tree["after"][i]}
    graph = import_graph(PACKAGE_DIR, dynamic=True)
    reach = {i for i, x in tree["catalogue"].items()
             if NORMS in dependencies(graph, identity_roots(x))}
    assert changed == reach
    certifying = {i for i, x in tree["catalogue"].items()
                  if any(c.startswith(NORMS + ".") for c in x.certifies)}
    assert {"rmsnorm_vjp", "rmsnorm_jvp", "layernorm_vjp"} <= certifying <= changed
    assert not {"kron_determinant", "kron_mixed_product"} & changed
    assert len(changed) < len(tree["catalogue"])


def test_the_check_rederives_the_changed_and_fails_the_wrong_one(tree) -> None:
    """On the planted copy, ``derive(check=True, changed_only=True)`` over a selection
    re-derives the three identities whose inputs changed (not the unchanged Kronecker lemma),
    and fails exactly ``rmsnorm_vjp``: ``rmsnorm_jvp`` and ``relu_vjp`` still hold."""
    root = tree["root"]
    ids = ["rmsnorm_vjp", "rmsnorm_jvp", "relu_vjp", "kron_determinant"]
    code = ("import sys; from pathlib import Path; import nlaverify; "
            "print(nlaverify.__file__, file=sys.stderr); from nlaverify.proofs import derive; "
            f"sys.exit(derive({ids!r}, check=True, changed_only=True, jobs=1, "
            f"root=Path({str(root / 'proofs')!r})))")
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    err = proc.stderr
    assert err.startswith(str(root / "nlaverify")), f"the copy was not the one run:\n{err}"
    assert proc.returncode == 1, err
    assert "1/4 identities unchanged" in err and "3 inputs changed" in err, err
    derived = {line.split("]")[1].split()[0] for line in err.splitlines()
               if line.startswith("[")}
    assert derived == {"rmsnorm_vjp", "rmsnorm_jvp", "relu_vjp"}, err
    failed = {line.split()[1].rstrip(":") for line in err.splitlines()
              if line.startswith("FAIL ") and "stale" not in line}
    assert failed == {"rmsnorm_vjp"}, err
