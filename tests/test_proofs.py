"""The proof pipeline: every identity proved, documents current, reproducible and
written atomically; wrong closed forms are refuted."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import sympy

from nlaverify.identities import load_catalogue
from nlaverify.identities.core import Identity, Proof, Step
from nlaverify.proofs import derive, read_index
from nlaverify.symbolic.document import write_atomically
from nlaverify.symbolic.indexed import i, j, n, zero_for_valid_indices

#: the catalogue's derivations run as this many tests (every SHARDS-th identity in
#: catalogue order), one class each so that the two CI workers share them (``--dist
#: loadscope`` keeps a module's functions together but sends classes apart): together they are
#: ``nlaverify derive --check`` (each shard also checks the family documents and
#: ``index.json`` it renders; ``test_no_orphan_or_missing_proof_documents`` the rest). Like
#: ``nlaverify derive --check``, a shard re-derives only the identities whose recorded inputs
#: hash or document no longer vouches for them (``tests/test_proofs_incremental.py`` shows
#: that a change re-derives what depends on it); the nightly profile derives every one, like
#: ``nlaverify derive --all --check``.
SHARDS = 6
EVERYTHING = os.environ.get("HYPOTHESIS_PROFILE") == "nightly"


def _check_shard(repo_root: Path, capsys, shard: int) -> None:
    ids = list(load_catalogue())[shard::SHARDS]
    code = derive(ids, check=True, root=repo_root / "docs" / "proofs", jobs=1,
                  changed_only=not EVERYTHING)
    err = capsys.readouterr().err
    assert code == 0, err


for _k in range(SHARDS):
    globals()[f"TestCommittedProofsShard{_k}"] = type(
        f"TestCommittedProofsShard{_k}", (), {
            "test_committed_proofs_are_proved_and_current":
                lambda self, repo_root, capsys, _k=_k: _check_shard(repo_root, capsys, _k),
            "__doc__": f"Shard {_k} of {SHARDS} of the derive check."})


def test_no_orphan_or_missing_proof_documents(repo_root: Path) -> None:
    from nlaverify.proofs import identity_path

    root = repo_root / "docs" / "proofs"
    catalogue = load_catalogue()
    index = read_index(root)
    assert set(index) == set(catalogue)
    assert all(entry["verdict"] == "proved" for entry in index.values())
    want = {identity_path(x) for x in catalogue.values()} | {
        f"{x.family}.md" for x in catalogue.values()}
    have = {str(p.relative_to(root)) for p in root.rglob("*.md")}
    assert have == want, (sorted(have - want), sorted(want - have))


def test_every_op_has_a_proof_certifying_the_running_functions() -> None:
    from nlaverify.ops.registry import OPS

    catalogue = load_catalogue()
    for name, spec in OPS.items():
        if not spec.differentiable:  # topk_mask: no real argument, nothing to transpose
            continue
        identity = catalogue[f"{name}_vjp"]
        assert set(spec.qualified_names) <= set(identity.certifies)


def test_stale_document_is_named(tmp_path: Path, repo_root: Path, capsys) -> None:
    root = tmp_path / "proofs"
    shutil.copytree(repo_root / "docs" / "proofs", root)
    doc = root / "jacobians" / "relu_vjp.md"
    doc.write_text(doc.read_text() + "edited by hand\n")
    assert derive(["relu_vjp"], check=True, root=root) == 1
    assert "stale proof document" in capsys.readouterr().err
    assert derive(["relu_vjp"], root=root) == 0  # regenerating repairs it
    assert derive(["relu_vjp"], check=True, root=root) == 0


def _toy(verdict: str) -> Identity:
    return Identity(f"toy_{verdict}", "toy", "A toy", "1 = 1", "none", ("x.y",),
                    lambda: Proof(verdict, (Step("trivial", "1 = 1"),), "why"))


def test_failed_proof_and_orphan_fail_the_check(tmp_path: Path, monkeypatch, capsys) -> None:
    import nlaverify.proofs as proofs

    catalogue = {t.id: t for t in (_toy("proved"), _toy("failed"))}
    monkeypatch.setattr(proofs, "load_catalogue", lambda: catalogue)
    monkeypatch.setattr(proofs, "get_identity", lambda i: catalogue[i])
    assert derive(root=tmp_path, jobs=1) == 1  # the failed toy fails, documents still written
    first = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert derive(root=tmp_path, jobs=1) == 1
    assert first == {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    (tmp_path / "toy" / "gone.md").write_text("old\n")
    assert derive(check=True, root=tmp_path, jobs=1) == 1
    err = capsys.readouterr().err
    assert "toy_failed: failed (why)" in err and "gone.md" in err


def test_crashing_derivation_is_an_error_verdict(tmp_path: Path, monkeypatch) -> None:
    import nlaverify.proofs as proofs

    def boom() -> Proof:
        raise RuntimeError("kaboom")

    bad = Identity("toy_crash", "toy", "crash", "0 = 1", "none", (), boom)
    monkeypatch.setattr(proofs, "get_identity", lambda i: bad)
    _, proof, _ = proofs.derive_one("toy_crash")
    assert proof.verdict == "error" and "kaboom" in proof.detail


def test_write_is_all_or_nothing(tmp_path: Path) -> None:
    (tmp_path / "blocked").write_text("a file where a folder should be")
    files = {"a.md": "new a\n", "blocked/b.md": "new b\n"}
    (tmp_path / "a.md").write_text("old a\n")
    with pytest.raises(OSError):
        write_atomically(tmp_path, files)
    assert (tmp_path / "a.md").read_text() == "old a\n"
    assert not list(tmp_path.rglob(".tmp-*"))


def test_wrong_closed_forms_are_refuted() -> None:
    z, x = sympy.IndexedBase("z"), sympy.IndexedBase("x")
    m = sympy.Symbol("m", integer=True, positive=True)
    p = lambda a: sympy.exp(z[a]) / sympy.Sum(sympy.exp(z[m]), (m, 1, n))  # noqa: E731
    right = p(i) * (sympy.KroneckerDelta(i, j) - p(j))
    assert zero_for_valid_indices(sympy.diff(p(i), z[j]) - right)[0]
    assert not zero_for_valid_indices(sympy.diff(p(i), z[j]) - p(i) * sympy.KroneckerDelta(i, j))[0]
    r = sympy.sqrt(sympy.Sum(x[m] ** 2, (m, 1, n)) / n + sympy.Symbol("e", positive=True))
    wrong = (sympy.KroneckerDelta(i, j) - x[i] * x[j] / r**2) / r  # the 1/n dropped
    assert not zero_for_valid_indices(sympy.diff(x[i] / r, x[j]) - wrong)[0]


def test_mlp_and_graph_example_proved() -> None:
    catalogue = load_catalogue()
    for key in ("mlp_backprop_recursion", "graph_example_reverse_mode", "softmax_jacobian"):
        assert catalogue[key].derive().verdict == "proved"
    assert np.isfinite(1.0)
