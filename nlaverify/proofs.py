"""Run the derivations and (re)generate or check the proof documents."""

from __future__ import annotations

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

from nlaverify.identities.core import Identity, Proof, get_identity, load_catalogue
from nlaverify.symbolic.document import (
    identity_path,
    render_family,
    render_identity,
    render_index,
    write_atomically,
)

#: where the committed proof documents live, relative to the repository root
DEFAULT_ROOT = Path("docs/proofs")


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


def _index_entry(identity: Identity, verdict: str) -> dict[str, object]:
    return {"family": identity.family, "title": identity.title, "seed": identity.seed,
            "verdict": verdict, "doc": identity_path(identity),
            "certifies": list(identity.certifies)}


def read_index(root: Path = DEFAULT_ROOT) -> dict[str, dict[str, object]]:
    """The committed ``index.json`` (empty when there is none)."""
    path = root / "index.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def render_documents(
    catalogue: dict[str, Identity], proofs: dict[str, Proof], old_index: dict[str, dict]
) -> dict[str, str]:
    """All files to write: the derived identities' documents, every family index and
    ``index.json`` (identities not re-derived keep their committed verdict)."""
    files = {identity_path(catalogue[i]): render_identity(catalogue[i], p)
             for i, p in proofs.items()}
    verdicts = {i: str(old_index.get(i, {}).get("verdict", "missing")) for i in catalogue}
    verdicts.update({i: p.verdict for i, p in proofs.items()})
    families: dict[str, list[tuple[Identity, str]]] = {}
    for i, identity in catalogue.items():
        families.setdefault(identity.family, []).append((identity, verdicts[i]))
    for family, rows in families.items():
        files[f"{family}.md"] = render_family(family, rows)
    files["index.json"] = render_index(
        {i: _index_entry(catalogue[i], verdicts[i]) for i in catalogue})
    return files


def derive(
    ids: Sequence[str] = (), *, check: bool = False, root: Path = DEFAULT_ROOT,
    jobs: int | None = None, out=None,
) -> int:
    """Regenerate (or with ``check``, verify) the proof documents; returns an exit code.

    ``check`` writes nothing: it fails, naming each culprit, when a proof is not
    ``proved`` or a committed document differs from the regenerated one.
    """
    out = sys.stderr if out is None else out
    catalogue = load_catalogue()
    for i in ids:
        get_identity(i)  # raises with a clear message for an unknown id
    selected = list(ids) or list(catalogue)
    jobs = jobs or min(len(selected), os.cpu_count() or 1)
    start = time.perf_counter()
    proofs = run_derivations(selected, jobs, progress=lambda s: print(s, file=out, flush=True))
    files = render_documents(catalogue, proofs, read_index(root) if ids else {})
    failures = [f"{i}: {p.verdict}" + (f" ({p.detail.strip().splitlines()[-1]})" if p.detail
                                         else "")
                for i, p in proofs.items() if p.verdict != "proved"]
    if check:
        stale = [rel for rel, content in files.items() if not (root / rel).exists()
                 or (root / rel).read_text(encoding="utf-8") != content]
        if not ids:
            known = set(files)
            stale += [str(p.relative_to(root)) for p in sorted(root.rglob("*.md"))
                      if str(p.relative_to(root)) not in known]
        for s in stale:
            failures.append(f"stale proof document: {root / s} (run `nlaverify derive`)")
    else:
        write_atomically(root, files)
    elapsed = time.perf_counter() - start
    proved = sum(p.verdict == "proved" for p in proofs.values())
    print(f"{proved}/{len(proofs)} identities proved in {elapsed:.1f} s"
          + ("" if check else f"; documents written to {root}/"), file=out)
    for f in failures:
        print(f"FAIL {f}", file=out)
    return 1 if failures else 0


def family_script(family: str, draw: Callable[[], None], argv: Sequence[str], doc: str) -> int:
    """The ``derivations/`` scripts' command line: ``--help`` prints ``doc``;
    ``--figure-only`` only draws the figures; otherwise the family is derived (``--check``:
    verified, nothing written) and, unless checking, the figures drawn."""
    if "--help" in argv or "-h" in argv:
        print(doc)
        return 0
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
