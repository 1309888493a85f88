"""The op proof pages teach the op (issue 36): every op of the catalogue has a VJP and a JVP
page whose statement is the op's own formula (not the generic chain rule), whose derivation
shows a derived expression, and which says what the exact check covers and what it does not;
batch pages state their sizes in words, not as a Python dict."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nlaverify.ops.registry import OPS

PROOFS = Path(__file__).resolve().parents[1] / "docs" / "proofs"
GENERIC = re.compile(r"\\sum_a\s*\\partial f\s*/\s*\\partial a")


def _section(text: str, title: str) -> str:
    m = re.search(rf"^## {title}\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M)
    assert m, f"no '## {title}' section"
    return m.group(1)


PAGES = [(name, mode) for name, spec in sorted(OPS.items()) if spec.differentiable
         for mode in ("vjp", "jvp") if mode == "vjp" or spec.jvp is not None]


def test_every_differentiable_op_has_both_pages() -> None:
    """A differentiable op without a JVP page would escape the test below."""
    assert all(spec.jvp is not None for spec in OPS.values() if spec.differentiable)
    assert len(PAGES) == 2 * sum(spec.differentiable for spec in OPS.values())


@pytest.mark.parametrize(("op", "mode"), PAGES)
def test_op_page_teaches_the_op(op: str, mode: str) -> None:
    text = (PROOFS / "jacobians" / f"{op}_{mode}.md").read_text(encoding="utf-8")
    statement = _section(text, "Statement")
    assert "$$" in statement and not GENERIC.search(statement), \
        f"{op}_{mode}: the statement must be the op's own {mode.upper()}"
    derivation = _section(text, "Derivation")
    assert re.search(r"(One|Every) entry of the derived", derivation), \
        f"{op}_{mode}: the derivation shows no derived expression"
    covers = _section(text, "What the check covers")
    assert "**Covers.**" in covers and "**Does not cover.**" in covers, \
        f"{op}_{mode}: the page must say what the sizes of the exact check cover and do not"


def test_batch_pages_state_sizes_in_words() -> None:
    pages = sorted((PROOFS / "batching").glob("*_batch.md"))
    assert pages
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "{'" not in text, f"{page.name} prints a Python dict"
        assert "batch B =" in _section(text, "Derivation"), page.name
