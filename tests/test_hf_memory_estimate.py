"""The memory estimate of ``verify --hf`` (review of issue 23): its terms, not a measurement.

Before, 6 float64 copies a parameter were counted (rwkv-4-169m: 7.6 GiB estimated, 16 GB
reached). The estimate now counts the copies the code path holds at its peak (12 a parameter,
by holder), the graph's and HF's activations (linear in the tokens) and the attention scores
no graph node holds (quadratic in the tokens, none without attention).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nlaverify.errors import ArgumentError
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.interop.hf_config import load_hf_config
from nlaverify.interop.hf_model import (
    ACTIVATION_COPIES,
    BYTES_PER_PARAMETER,
    PARAMETER_COPIES,
    _check_size,
    memory_estimate,
)

DATA = Path(__file__).resolve().parents[1] / "nlaverify" / "data" / "hf_configs"
TINY = {"model_type": "llama", "vocab_size": 13, "hidden_size": 16, "intermediate_size": 24,
        "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64}


def _estimate(source, n: int) -> tuple[dict[str, int], int]:
    c = load_hf_config(source).config
    g = build_transformer(c)
    return memory_estimate(g, c, n), parameter_counts(g).total


def test_parameter_copies_cover_the_peak() -> None:
    # what the old estimate left out: load's tables, check_model's copies, the contributions
    assert sum(PARAMETER_COPIES.values()) == 12 and BYTES_PER_PARAMETER == 96
    est, total = _estimate(DATA / "rwkv-4-169m-pile.json", 6)
    assert est["parameters"] == 96 * total
    assert est["attention"] == 0  # an all-RWKV model has no attention scores
    # rwkv-4-169m reached 16 GB where 6 copies (7.6 GiB) were estimated
    assert 6 * 8 * total < 8.2e9 < 16e9 <= sum(est.values()) < 2 * 16e9


def test_activation_and_attention_terms_scale_with_the_tokens() -> None:
    small, total = _estimate(TINY, 8)
    large, _ = _estimate(TINY, 16)
    assert small["parameters"] == large["parameters"] == 96 * total
    assert large["attention"] == 4 * small["attention"] > 0  # 2 blocks x 4 heads x n^2
    assert small["attention"] == 8 * 4 * 2 * 4 * 8 * 8
    # every op node of the graph but the scalar loss grows with n
    assert 2 * small["activations"] - 8 * ACTIVATION_COPIES * 2 <= large["activations"] <= (
        2 * small["activations"])


def test_refusal_quotes_the_terms() -> None:
    c = load_hf_config(TINY).config
    g = build_transformer(c)
    total = parameter_counts(g).total
    with pytest.raises(ArgumentError, match=r"would be held on 6 tokens: parameters .*, "
                                            r"activations .*, attention "):
        _check_size(g, c, total - 1, 6)
    _check_size(g, c, total, 6)
