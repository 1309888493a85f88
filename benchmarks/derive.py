"""Time to regenerate every proof, and time of the test suite, on this machine.

Run from the repository root: ``python benchmarks/derive.py [--skip-tests]``.
Proofs are regenerated into a temporary folder (the committed documents are
not touched) and compared byte for byte with the committed ones.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--workers", default="2", help="pytest-xdist workers")
    args = parser.parse_args()

    from nlaverify.proofs import derive

    with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "w") as quiet:
        start = time.perf_counter()
        code = derive(root=Path(tmp), out=quiet, everything=True)
        derive_s = time.perf_counter() - start
        cmp = filecmp.dircmp(tmp, ROOT / "docs" / "proofs")
        same = not (cmp.diff_files or cmp.left_only or cmp.right_only) and all(
            not sub.diff_files for sub in cmp.subdirs.values())
    print(f"derive: all proofs regenerated in {derive_s:.1f} s on {os.cpu_count()} cores "
          f"(exit {code}; byte-identical to docs/proofs: {same})")
    if not args.skip_tests:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", args.workers],
                              cwd=ROOT, capture_output=True, text=True, check=False)
        tests_s = time.perf_counter() - start
        last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "no output"
        print(f"tests: {tests_s:.1f} s with {args.workers} workers ({last})")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
