"""A leading batch axis through every op, the graph, the lowered jit and the independent
model; right-padded sequences with an ignore-index in the loss (mean over non-ignored)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.config import TransformerConfig, preset
from nlaverify.graph.run import sample_data
from nlaverify.identities.batching import prove_batch_axis
from nlaverify.ops import loss, registry
from nlaverify.ops.loss import IGNORE_INDEX
from nlaverify.pipeline import format_report, verify_pipeline
from nlaverify.symbolic.vjp_proof import prove_vjp

#: a config whose every op has a batch path of its own: GQA (repeat_kv), RoPE, MoE (top-k,
#: gates), tied unembedding, temperature
GQA_MOE = TransformerConfig(vocab_size=7, d_model=8, n_heads=4, n_kv_heads=2, n_blocks=1,
                            d_mlp=4, positions="rope", context=8, mlp="swiglu", n_experts=3,
                            top_k=2, tied_embeddings=True, temperature=0.5, norm="rmsnorm",
                            name="gqa-moe")


# B = 1 (a batch axis of one) and B = 4 (every padding length 4..1); B = 2 adds nothing new
@pytest.mark.parametrize("batch", [1, 4])
def test_tiny_batched_and_padded_node_by_node_on_every_backend(batch: int) -> None:
    report = verify_pipeline(preset("tiny"), ("numpy", "jax", "strict", "mpmath"), n=5,
                             batch=batch, digits=30)
    assert report.ok, format_report(report, per_node=False)
    assert len(report.comparisons) == 4 and len(report.end_to_end) == 6


def test_every_batched_op_path_in_one_config() -> None:
    report = verify_pipeline(GQA_MOE, ("numpy", "strict"), n=4, batch=3)
    assert report.ok, format_report(report, per_node=False)


def test_padding_gives_ignored_targets_and_right_padded_tokens() -> None:
    data = sample_data(11, 5, 0, batch=4)
    assert data["tokens"].shape == data["targets"].shape == (4, 5)
    kept = (data["targets"] != IGNORE_INDEX).sum(axis=1)
    assert kept.tolist() == [5, 4, 3, 2]
    assert (data["tokens"][3, 2:] == 0).all()


def test_batched_loss_is_the_mean_over_non_ignored_targets() -> None:
    # the convention, on numbers: per-sequence sums of -log p divided by the batch's count
    xp = get_namespace("numpy")
    rng = np.random.default_rng(3)
    Z = rng.standard_normal((2, 3, 4))
    t = np.array([[1, IGNORE_INDEX, 2], [0, 3, IGNORE_INDEX]])
    logp = Z - np.log(np.exp(Z).sum(-1, keepdims=True))
    picked = [-logp[b, i, t[b, i]] for b in range(2) for i in range(3) if t[b, i] >= 0]
    assert loss.cross_entropy(xp, Z, t) == pytest.approx(sum(picked) / 4, rel=1e-14)


def test_all_ignored_targets_are_an_error() -> None:
    from nlaverify.errors import ShapeError

    with pytest.raises(ShapeError, match=r"targets.*at least one target"):
        loss.cross_entropy(get_namespace("numpy"), np.zeros((1, 2, 3)),
                           np.full((1, 2), IGNORE_INDEX))


def _sum_not_mean(spec):
    """The planted bug: the sum over non-ignored tokens instead of their mean (forward and
    VJP consistent, so the single-sequence VJP proof still holds)."""
    def fwd(xp, Z, targets, ignore_index=IGNORE_INDEX, reduction="mean"):
        Y, _, _ = loss._targets("cross_entropy", xp, Z, targets, ignore_index)
        return -xp.sum(Y * loss.log_softmax(xp, Z))

    def vjp(xp, G, Z, targets, ignore_index=IGNORE_INDEX, reduction="mean"):
        Y, w, _ = loss._targets("cross_entropy_vjp", xp, Z, targets, ignore_index, G)
        return ((loss.softmax(xp, Z) - Y) * w * G,)

    return dataclasses.replace(spec, forward=fwd, vjp=vjp)


def test_planted_sum_instead_of_mean_is_caught(monkeypatch) -> None:
    wrong = _sum_not_mean(registry.OPS["cross_entropy"])
    assert prove_vjp(wrong).verdict == "proved"  # consistent: the VJP proof cannot see it
    assert prove_batch_axis(wrong).verdict == "failed"  # the batch-reduction identity can
    monkeypatch.setitem(registry.OPS, "cross_entropy", wrong)
    report = verify_pipeline(preset("tiny"), ("numpy",), n=4, batch=2)
    assert not report.ok  # the independent model's loss is the mean
    assert ("independent JAX model", "loss") in [(s, q) for s, q, e, b in report.end_to_end
                                                  if e > b]


@pytest.mark.parametrize("op", ["embed", "add_learned_positions", "unembed_tied", "repeat_kv",
                                "split_heads", "moe"])
def test_planted_batch_bug_in_one_op_fails_its_batch_identity(op: str) -> None:
    spec = registry.OPS[op]

    def wrong(xp, G, *args, **static):
        out = list(spec.vjp(xp, G, *args, **static))
        if np.ndim(args[0]) == len(spec.args[0].dims):  # one sequence: unchanged
            return tuple(out)
        k = len(out) - 1
        if op in ("split_heads", "repeat_kv"):  # per-token cotangent, scaled by b+1
            B = np.shape(out[k])[0]
            out[k] = out[k] * xp.asarray(np.arange(1.0, B + 1).reshape(
                (B,) + (1,) * (np.ndim(out[k]) - 1)))
        else:  # a shared parameter's cotangent taken from the last sequence only
            last = [a[-1] if np.ndim(a) > len(d.dims) else a
                    for a, d in zip(args, spec.args, strict=True)]
            out[k] = spec.vjp(xp, G[-1], *last, **static)[k]
        return tuple(out)

    assert prove_batch_axis(spec).verdict == "proved"
    assert prove_batch_axis(dataclasses.replace(spec, vjp=wrong)).verdict \
        == "failed"
