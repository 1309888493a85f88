"""The presets of the zoo's configurations: every field against its published figure, the
parameter totals against the published counts, and a planted preset error fails."""

from __future__ import annotations

from typing import Any

import pytest

from nlaverify import zoo
from nlaverify.config import (
    PRESETS,
    PUBLISHED,
    PUBLISHED_TOTALS,
    UNPUBLISHED,
    TransformerConfig,
    preset,
    preset_mismatches,
)
from nlaverify.graph.build import build_transformer, parameter_counts

# --------------------------------------------------------------------------- presets


def test_every_preset_field_matches_the_published_figures() -> None:
    assert set(PRESETS) == set(PUBLISHED) | UNPUBLISHED
    fields = set(zoo.config_fields())
    for name, table in PUBLISHED.items():
        assert set(table) == fields, name
        assert all(fig.source for fig in table.values())
        assert preset_mismatches(name) == [], name
    assert preset("mid").as_dict() | {"name": None} == TransformerConfig(
        vocab_size=2048, d_model=256, n_heads=8, n_blocks=4, d_mlp=1024, context=256,
        attn_bias=True, mlp_bias=True, name="").as_dict() | {"name": None}


def test_parameter_totals_match_the_published_counts() -> None:
    for name, (total, source) in PUBLISHED_TOTALS.items():
        assert parameter_counts(build_transformer(preset(name))).total == total, (name, source)


@pytest.mark.parametrize(("field", "value"), [("rope_base", 10000), ("vocab_size", 128000),
                                              ("n_kv_heads", 16), ("context", 4096)])
def test_a_planted_preset_error_fails(monkeypatch, field: str, value: Any) -> None:
    wrong = PRESETS["llama3-405b"].replace(**{field: value})
    monkeypatch.setitem(PRESETS, "llama3-405b", wrong)
    bad = preset_mismatches("llama3-405b")
    assert len(bad) == 1 and bad[0].startswith(f"llama3-405b.{field} = ")
    assert "Dubey" in bad[0] or "Baggag" in bad[0]
    if field == "vocab_size":  # the exact count sees it too
        assert parameter_counts(build_transformer(wrong)).total != PUBLISHED_TOTALS[
            "llama3-405b"][0]

