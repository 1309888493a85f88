"""Run the derivations and (re)generate or check the proof documents, incrementally.

Each entry of the committed ``index.json`` records two hashes: ``inputs``, the SHA-256 of the
sources its derivation can reach (the modules of its ``derive`` function, of the functions it
certifies, of the catalogue module that registers it and of the document renderer, with every
``nlaverify`` module they import, transitively: :mod:`nlaverify.sourcegraph`) and of the
SymPy, mpmath and NumPy versions; and ``document``, the SHA-256 of its committed Markdown.
:func:`derive` without ids re-derives only the identities whose ``inputs`` changed, whose
document is missing or differs from its recorded hash, or whose verdict is not ``proved``;
the others are verified from the record without running SymPy. ``everything=True``
(``nlaverify derive --all``) derives every identity.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from nlaverify.identities.core import _ORDER, Identity, Proof, get_identity, load_catalogue
from nlaverify.symbolic.document import (
    identity_path,
    page_extra_module,
    render_family,
    render_identity,
    render_index,
    write_atomically,
)

#: where the committed proof documents live, relative to the repository root
DEFAULT_ROOT = Path("docs/proofs")
#: modules every proof document depends on: the renderer and the catalogue's types (not this
#: runner: ``index.json`` and the family pages it renders are compared in every check anyway)
RENDERER_MODULES = ("nlaverify.symbolic.document", "nlaverify.identities.core")


def identity_roots(identity: Identity) -> list[str]:
    """The modules an identity's proof starts from (their imports are followed by the hash):
    its ``derive`` function's (unwrapped), its certified functions', the module that
    registered it, the module that registered its page extra, and :data:`RENDERER_MODULES`."""
    from nlaverify.sourcegraph import owning_module, package_modules

    modules = package_modules()
    roots = [inspect.unwrap(identity.derive).__module__, *RENDERER_MODULES]
    roots += [m for m in (owning_module(c, modules) for c in identity.certifies) if m]
    if identity.id in _ORDER:
        roots.append(_ORDER[identity.id][0])
    extra = page_extra_module(identity.id)
    if extra:
        roots.append(extra)
    return sorted(set(roots))


def inputs_hashes(catalogue: dict[str, Identity], package_dir: Path | None = None
                  ) -> dict[str, str]:
    """``{id: inputs hash}`` for the catalogue, read from ``package_dir`` (default: the
    package's own folder; a modified copy in tests). See the module docstring."""
    from nlaverify.sourcegraph import PACKAGE_DIR, SourceHasher

    hasher = SourceHasher(package_dir or PACKAGE_DIR)
    return {i: hasher.hash(identity_roots(x)) for i, x in catalogue.items()}


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def needs_derivation(catalogue: dict[str, Identity], index: dict[str, dict], root: Path,
                     hashes: dict[str, str]) -> dict[str, str]:
    """``{id: reason}`` for every identity the record cannot vouch for: not recorded, not
    ``proved``, inputs changed, document missing or not the one recorded."""
    reasons: dict[str, str] = {}
    for i, identity in catalogue.items():
        entry = index.get(i)
        doc = root / identity_path(identity)
        if entry is None:
            reasons[i] = "not in index.json"
        elif entry.get("verdict") != "proved":
            reasons[i] = f"recorded verdict {entry.get('verdict')!r}"
        elif entry.get("inputs") != hashes[i]:
            reasons[i] = "inputs changed"
        elif not doc.exists():
            reasons[i] = "document missing"
        elif entry.get("document") != _sha256(doc.read_text(encoding="utf-8")):
            reasons[i] = "document differs from its recorded hash"
    return reasons


def derive_one(identity_id: str) -> tuple[str, Proof, float]:
    """Derive one identity; an exception becomes an ``error`` verdict with its traceback."""
    identity = get_identity(identity_id)
    start = time.perf_counter()
    try:
        proof = identity.derive()
    except Exception:  # a crashing derivation is reported, never hidden
        proof = Proof("error", (), traceback.format_exc(limit=6))
    return identity_id, proof, time.perf_counter() - start


def _ignore_sigint() -> None:
    """Pool initializer: Ctrl-C reaches the parent only, which then terminates the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool`` now: queued derivations cancelled, running workers killed and reaped.

    ``shutdown(wait=True)`` (what ``with`` does) waits for the running derivations and those
    already handed to the workers (22-36 s measured for the slowest; once over ten minutes,
    leaving workers behind)."""
    terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    if terminate is not None:
        terminate()
        return
    # before shutdown, which forgets them
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(timeout=10)


def run_derivations(
    ids: Sequence[str], jobs: int = 1, progress: Callable[[str], None] | None = None
) -> dict[str, Proof]:
    """Derive ``ids`` (in parallel with ``jobs`` processes); results in the order of ``ids``."""
    results: dict[str, Proof] = {}
    total = len(ids)

    def report(k: int, identity_id: str, proof: Proof, seconds: float) -> None:
        if progress:
            progress(f"[{k:>3}/{total}] {identity_id:<32} {proof.verdict:<7} {seconds:6.2f} s")

    if jobs > 1 and total > 1:
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"),
                                   initializer=_ignore_sigint)
        try:
            for k, (identity_id, proof, sec) in enumerate(pool.map(derive_one, ids), 1):
                results[identity_id] = proof
                report(k, identity_id, proof, sec)
        except BaseException:
            _terminate(pool)
            raise
        pool.shutdown()
    else:
        for k, identity_id in enumerate(ids, 1):
            _, proof, sec = derive_one(identity_id)
            results[identity_id] = proof
            report(k, identity_id, proof, sec)
    return {i: results[i] for i in ids}


def _index_entry(identity: Identity, verdict: str, inputs: object, document: object
                 ) -> dict[str, object]:
    return {"family": identity.family, "title": identity.title, "seed": identity.seed,
            "verdict": verdict, "doc": identity_path(identity),
            "certifies": list(identity.certifies), "inputs": inputs, "document": document}


def read_index(root: Path = DEFAULT_ROOT) -> dict[str, dict[str, object]]:
    """The committed ``index.json`` (empty when there is none)."""
    path = root / "index.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def render_documents(
    catalogue: dict[str, Identity], proofs: dict[str, Proof], old_index: dict[str, dict],
    hashes: dict[str, str] | None = None,
) -> dict[str, str]:
    """All files to write: the derived identities' documents, every family index and
    ``index.json`` (identities not re-derived keep their committed verdict and hashes; the
    derived ones record ``hashes`` when given, else keep the committed ``inputs``)."""
    files = {identity_path(catalogue[i]): render_identity(catalogue[i], p)
             for i, p in proofs.items()}
    verdicts = {i: str(old_index.get(i, {}).get("verdict", "missing")) for i in catalogue}
    verdicts.update({i: p.verdict for i, p in proofs.items()})
    inputs = {i: old_index.get(i, {}).get("inputs") for i in catalogue}
    documents = {i: old_index.get(i, {}).get("document") for i in catalogue}
    for i in proofs:
        documents[i] = _sha256(files[identity_path(catalogue[i])])
        if hashes is not None:
            inputs[i] = hashes[i]
    families: dict[str, list[tuple[Identity, str]]] = {}
    for i, identity in catalogue.items():
        families.setdefault(identity.family, []).append((identity, verdicts[i]))
    for family, rows in families.items():
        files[f"{family}.md"] = render_family(family, rows)
    files["index.json"] = render_index(
        {i: _index_entry(catalogue[i], verdicts[i], inputs[i], documents[i])
         for i in catalogue})
    return files


def derive(
    ids: Sequence[str] = (), *, check: bool = False, root: Path = DEFAULT_ROOT,
    jobs: int | None = None, out=None, everything: bool = False,
    changed_only: bool | None = None,
) -> int:
    """Regenerate (or with ``check``, verify) the proof documents; returns an exit code.

    The selection is ``ids`` (default: the whole catalogue). With ``changed_only`` (the
    default when no ids are given and not ``everything``) only the identities of the
    selection that :func:`needs_derivation` names are derived; the others are vouched for by
    their record (inputs hash and document hash unchanged, verdict ``proved``). ``check``
    writes nothing: it fails, naming each culprit, when a proof is not ``proved`` or a
    committed document differs from the regenerated one. A check that re-derives an identity
    whose inputs changed passes when its proof and document still hold (the recorded hash is
    only a cache key: a new SymPy release must not fail the suite); ``nlaverify derive``
    then records the new hashes.
    """
    out = sys.stderr if out is None else out
    catalogue = load_catalogue()
    for i in ids:
        get_identity(i)  # raises with a clear message for an unknown id
    selected = list(dict.fromkeys(ids)) or list(catalogue)
    if changed_only is None:
        changed_only = not ids and not everything
    start = time.perf_counter()
    old_index = read_index(root)
    hashes = inputs_hashes(catalogue)
    todo = selected
    if changed_only:
        reasons = needs_derivation({i: catalogue[i] for i in selected}, old_index, root, hashes)
        todo = [i for i in selected if i in reasons]
        print(f"{len(selected) - len(todo)}/{len(selected)} identities unchanged since their "
              f"recorded proof (inputs and document hashes); deriving {len(todo)}", file=out)
        counts: dict[str, int] = {}
        for i in todo:
            counts[reasons[i]] = counts.get(reasons[i], 0) + 1
        for reason, count in sorted(counts.items()):
            names = [i for i in todo if reasons[i] == reason]
            shown = ", ".join(names[:6]) + (", ..." if count > 6 else "")
            print(f"  {count} {reason}: {shown}", file=out)
    jobs = jobs or min(max(len(todo), 1), os.cpu_count() or 1)
    proofs = run_derivations(todo, jobs, progress=lambda s: print(s, file=out, flush=True))
    files = render_documents(catalogue, proofs, old_index, None if check else hashes)
    failures = [f"{i}: {p.verdict}" + (f" ({p.detail.strip().splitlines()[-1]})" if p.detail
                                         else "")
                for i, p in proofs.items() if p.verdict != "proved"]
    if check:
        stale = [rel for rel, content in files.items() if not (root / rel).exists()
                 or (root / rel).read_text(encoding="utf-8") != content]
        if not ids:
            known = set(files) | {identity_path(x) for x in catalogue.values()}
            orphans = [str(p.relative_to(root)) for p in sorted(root.rglob("*"))
                       if p.is_file() and str(p.relative_to(root)) not in known]
            failures += [f"orphan proof document: {root / o} (no identity writes it: delete "
                         "it)" for o in orphans]
        for s in stale:
            failures.append(f"stale proof document: {root / s} (run `nlaverify derive`)")
        moved = [i for i in proofs if old_index.get(i, {}).get("inputs") != hashes[i]]
        if moved and not failures:
            print(f"note: {len(moved)} identities re-derived because their inputs changed "
                  "still hold; `nlaverify derive` records their new hashes", file=out)
    else:
        write_atomically(root, files)
    elapsed = time.perf_counter() - start
    proved = sum(p.verdict == "proved" for p in proofs.values())
    print(f"{proved}/{len(proofs)} identities proved in {elapsed:.1f} s"
          + (f" ({len(proofs)} re-derived; {len(selected) - len(todo)} vouched for by their "
             "record)" if len(todo) < len(selected) else "")
          + ("" if check else f"; documents written to {root}/"), file=out)
    for f in failures:
        print(f"FAIL {f}", file=out)
    return 1 if failures else 0


def family_script(family: str, draw: Callable[[], None], argv: Sequence[str], doc: str) -> int:
    """The ``derivations/`` scripts' command line: ``--help`` prints ``doc``;
    ``--figure-only`` only draws the figures; otherwise the family is derived (``--check``:
    verified, nothing written) and, unless checking, the figures drawn. A run that draws
    re-executes itself with the pinned kernels of :mod:`nlaverify.reproducible` first."""
    if "--help" in argv or "-h" in argv:
        print(doc)
        return 0
    if "--figure-only" in argv or "--check" not in argv:
        from nlaverify.reproducible import pin_process

        pin_process()  # the figures' data must not depend on the machine's kernels
    if "--figure-only" in argv:
        draw()
        return 0
    code = derive_family(family, argv)
    if "--check" not in argv:
        draw()
    return code


def derive_family(family: str, argv: Sequence[str] = ()) -> int:
    """Regenerate (``--check`` in ``argv``: verify) one family; the derivations/ scripts.
    ``--help`` prints the usage and writes nothing; an unknown argument is a one-line
    error (exit 2)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog=f"derivations/{family}.py",
        description=f"Regenerate the proof documents of the family {family!r} in "
                    f"{DEFAULT_ROOT}/ (run from the repository root).")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; fail when a proof fails or a document is stale")
    args = parser.parse_args(list(argv))
    ids = [i for i, x in load_catalogue().items() if x.family == family]
    return derive(ids, check=args.check)
