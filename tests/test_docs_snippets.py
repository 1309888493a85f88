"""Every Python snippet of the README and the docs runs, verbatim.

The snippets of one page run in order in one namespace (a page may build on its earlier
snippets, as a reader does); a failing snippet is named by its page and line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: pages not written by hand: the proofs (``nlaverify derive``), the build output, and the
#: pages the docs extension generates at build time (docs/_ext/nlaverify_docs.py)
GENERATED = ("docs/proofs/", "docs/_build/", "docs/families/", "docs/api/")
PAGES = ["README.md", *sorted(
    rel for rel in (p.relative_to(REPO).as_posix() for p in (REPO / "docs").rglob("*.md"))
    if not rel.startswith(GENERATED))]
#: the guide's family pages (docs/guide/*.md)
GUIDE_FAMILIES = ("pipeline", "precision", "curvature", "optimizers", "attention",
                  "real_models", "low_rank", "geometry", "tokens")
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def snippets(page: str) -> list[tuple[int, str]]:
    """``(line, code)`` of every ```python block of ``page``."""
    text = (REPO / page).read_text(encoding="utf-8")
    return [(text[: m.start()].count("\n") + 1, m.group(1)) for m in _BLOCK.finditer(text)]


def test_pages_have_snippets():
    assert snippets("docs/check.md") and snippets("docs/guide.md")
    assert snippets("docs/guide/precision.md") and snippets("docs/guide/curvature.md")
    assert {"docs/check.md", "docs/guide.md", "docs/getting_started.md",
            *(f"docs/guide/{family}.md" for family in GUIDE_FAMILIES)} <= set(PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_snippets_run(page, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a snippet that writes files writes them here
    scope: dict = {"__name__": "__snippet__"}
    for line, code in snippets(page):
        try:
            exec(compile(code, f"{page}:{line}", "exec"), scope)
        except Exception as exc:  # name the snippet
            raise AssertionError(f"{page}, snippet at line {line} failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
