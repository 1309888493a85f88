r"""Issue 23: partial rotary embeddings and RoPE's two pairings (``rotary_dim``,
``rope_pairing``). Only the first :math:`r` coordinates of each head rotate, at
:math:`b^{-2i/r}`, the rest pass (Pythia's ``rotary_pct``, GPT-J's ``rotary_dim``, Phi's
``partial_rotary_factor``); pairs :math:`(x_{2i}, x_{2i+1})` (GPT-J) or :math:`(x_i,
x_{i+r/2})` (GPT-NeoX).

Oracles: an explicit block rotation matrix built here in NumPy (not the op's tables), the
independent JAX model (complex multiplication, node by node), and the exact proofs
(``rope_partial_vjp``/``_jvp`` from the registry, ``rope_partial_relative_position`` and
``rope_pairing_permutation``), each shown to fail on a planted mistake.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.errors import ArgumentError
from nlaverify.graph.build import build_transformer
from nlaverify.identities import architectures as arch
from nlaverify.ops import rotary
from nlaverify.tolerance import tolerance
from nlaverify.zoo import check_field_effects, zoo_config

NP = get_namespace("numpy")


def _rotation(t: int, d: int, r: int, base: int, layout: str) -> np.ndarray:
    """The ``(d, d)`` matrix acting on a row at position ``t``: 2x2 rotations by
    ``t * base**(-2i/r)`` on the pairs of the layout, the identity past ``r``."""
    M = np.eye(d)
    for i in range(r // 2):
        a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + r // 2)
        c, s = math.cos(t * base ** (-2 * i / r)), math.sin(t * base ** (-2 * i / r))
        M[a, a], M[a, b], M[b, a], M[b, b] = c, -s, s, c
    return M


@pytest.mark.parametrize("layout", rotary.LAYOUTS)
@pytest.mark.parametrize("r", [2, 4, 6])
def test_rope_equals_block_rotation(layout: str, r: int) -> None:
    rng = np.random.default_rng(r)
    X = rng.standard_normal((2, 5, 6))
    got = rotary.rope(NP, X, base=7, layout=layout, rotary_dim=r)
    want = np.stack([X[:, t] @ _rotation(t, 6, r, 7, layout).T for t in range(5)], axis=1)
    # each rotated pair is x cos - y sin: two products and a sum, against a matrix product
    # of 6 terms
    assert tolerance("float64", size=6, depth=2).compare(got, want).ok
    np.testing.assert_array_equal(got[..., r:], X[..., r:])
    if r == 6:  # the whole head: the op without rotary_dim
        np.testing.assert_array_equal(got, rotary.rope(NP, X, base=7, layout=layout))


@pytest.mark.parametrize("layout", rotary.LAYOUTS)
def test_vjp_is_transpose_and_jvp_linear(layout: str) -> None:
    rng = np.random.default_rng(1)
    X, G, T = (rng.standard_normal((1, 4, 6)) for _ in range(3))
    kw = {"layout": layout, "rotary_dim": 4, "base": 7}
    (Xbar,) = rotary.rope_vjp(NP, G, X, **kw)
    # <G, rope(T)> = <rope_vjp(G), T>: the VJP is the transpose of the linear map
    tol = tolerance("float64", size=G.size, depth=3)  # the rotation, a product, a 24-term sum
    assert tol.compare(np.sum(G * rotary.rope(NP, T, **kw)), np.sum(Xbar * T)).ok
    np.testing.assert_array_equal(rotary.rope_jvp(NP, (T,), X, **kw), rotary.rope(NP, T, **kw))


@pytest.mark.parametrize("r", [0, 3, 8, True, 2.0])
def test_bad_rotary_dim_named(r: object) -> None:
    with pytest.raises(ArgumentError, match="rotary_dim"):
        rotary.rope(NP, np.zeros((1, 2, 6)), rotary_dim=r)


BASE = dict(vocab_size=11, d_model=8, n_heads=2, n_blocks=1, d_mlp=12, context=8)


@pytest.mark.parametrize(("kw", "field"), [
    ({"positions": "rope", "rotary_dim": 3}, "rotary_dim"),
    ({"positions": "rope", "rotary_dim": 6}, "rotary_dim"),
    ({"positions": "rope", "rotary_dim": True}, "rotary_dim"),
    ({"positions": "learned", "rotary_dim": 2}, "rotary_dim"),
    ({"positions": "rope", "rope_pairing": "neox"}, "rope_pairing"),
    ({"positions": "learned", "rope_pairing": "half"}, "rope_pairing")])
def test_config_refuses_by_field(kw: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=f"TransformerConfig.{field}"):
        TransformerConfig(**BASE, **kw)


def test_graph_passes_the_options_to_rope() -> None:
    cfg = TransformerConfig(**BASE, positions="rope", rotary_dim=2, rope_pairing="half")
    node = build_transformer(cfg).nodes["blocks.0.attn.q_rope"]
    assert (node["static"]["rotary_dim"], node["static"]["layout"]) == (2, "half")
    full = build_transformer(cfg.replace(rotary_dim=4, rope_pairing="interleaved"))
    assert "rotary_dim" not in full.nodes["blocks.0.attn.k_rope"]["static"]  # r = d_h: whole


@pytest.mark.parametrize("cfg", [
    zoo_config("partial-rotary-half"),
    # GPT-J's block: interleaved pairs on 2 of d_h = 6, one shared norm, parallel residual
    TransformerConfig(**BASE, d_head=6, positions="rope", rotary_dim=2, rope_base=7,
                      parallel_residual=True, n_kv_heads=1, name="gptj-like")],
    ids=["neox-like", "gptj-like"])
def test_verified_node_by_node(cfg: TransformerConfig) -> None:
    from nlaverify.pipeline import verify_pipeline

    report = verify_pipeline(cfg, ("numpy", "jax"))
    assert report.ok, report.errors
    assert {label for label, *_ in report.end_to_end} >= {"independent JAX model"}


def test_field_effects_seen() -> None:
    effects = check_field_effects(["rotary_dim", "rope_pairing"])
    assert effects and all(e.ok for e in effects), effects


def test_identities_proved() -> None:
    assert arch.derive_rope_partial_relative().verdict == "proved"
    assert arch.derive_rope_pairing_permutation().verdict == "proved"


def test_identities_fail_on_planted_mistakes(monkeypatch: pytest.MonkeyPatch) -> None:
    import nlaverify.interop.weights_layout as wl

    # the pairing identity names the permutation: the identity permutation is refuted
    monkeypatch.setattr(wl, "rope_permutation", lambda d: np.arange(d))
    assert arch.derive_rope_pairing_permutation().verdict == "failed"
    monkeypatch.undo()
    # a partial rope that rotates the whole head fails the pass-through clause
    whole = rotary.rope
    monkeypatch.setattr(arch._rotary, "rope",
                        lambda xp, X, rotary_dim=None, **kw: whole(xp, X, **kw))
    assert arch.derive_rope_partial_relative().verdict == "failed"
