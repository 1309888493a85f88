r"""Weight transformations claimed to leave the function unchanged (issue 20, item 3),
verified node by node (:func:`nlaverify.transform.check_transform`) on ``tiny`` and zoo
configurations with every relevant norm type, placement of biases and (un)tied unembedding;
planted non-invariant transformations named at their node; bad input refused.

Every bound is :func:`nlaverify.graph.compare.node_tolerance`'s, through ``check_transform``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from nlaverify.config import preset
from nlaverify.errors import ArgumentError
from nlaverify.graph.build import build_transformer
from nlaverify.graph.run import init_params
from nlaverify.transform import (
    Transformed,
    center_unembedding,
    center_writers,
    check_residual_decomposition,
    check_transform,
    direct_logit_attribution,
    fold_norms,
    fold_value_bias,
    hadamard,
    random_orthogonal,
    rotate,
)
from nlaverify.transform import attribution as ta
from nlaverify.transform import weights as tw
from nlaverify.zoo import zoo_config

TINY = preset("tiny")
LAYERNORM = {
    "tiny": TINY,
    "tiny-tied": replace(TINY, tied_embeddings=True, name="tiny-tied"),
    "tiny-nobias": replace(TINY, attn_bias=False, mlp_bias=False, name="tiny-nobias"),
    "tiny-sinusoidal-t2": replace(TINY, positions="sinusoidal", temperature=2.0,
                                  name="tiny-sinusoidal-t2"),
    "lora-r2-all": zoo_config("lora-r2-all"),
    "linformer-k3": zoo_config("linformer-k3"),
    "favor-plus-iid": zoo_config("favor-plus-iid"),
}
RMSNORM = {
    "tiny-rms": replace(TINY, norm="rmsnorm", name="tiny-rms"),
    "tiny-rms-nofinal": replace(TINY, norm="rmsnorm", final_norm=False, name="tiny-rms-nf"),
    "gqa-rope-swiglu": zoo_config("gqa-rope-swiglu"),
    "gemma-like": zoo_config("gemma-like"),
    "rope-scaled-window-qknorm": zoo_config("rope-scaled-window-qknorm"),
}
ALL = {**LAYERNORM, **RMSNORM}


def _params(cfg, seed: int = 0) -> dict[str, np.ndarray]:
    return init_params(build_transformer(cfg), seed)


def _claiming_equal(t: Transformed) -> Transformed:
    """The same weights claiming every op node equal: a check that cannot tell a changed
    node from an unchanged one would pass it."""
    return replace(t, claims=tw._claims(build_transformer(t.config), {}))


def _gains(t: Transformed) -> list[np.ndarray]:
    g = build_transformer(t.config)
    return [t.params[f"{n}.gamma"] for n in tw._stream_norms(g)]


@pytest.mark.parametrize("name", list(ALL))
def test_fold_norms_preserves_every_node(name: str) -> None:
    cfg = ALL[name]
    p = _params(cfg)
    t = fold_norms(cfg, p)
    r = check_transform(cfg, p, t)
    assert r.ok, (r.first_failure, r.worst())
    assert len(r.rows) >= 15 and r.first_failure is None
    assert all(np.all(g == 1.0) for g in _gains(t))
    if cfg.final_norm:
        assert not t.config.tied_embeddings  # a tied unembedding is untied to take gamma
    # not vacuous: the norm outputs did change, and the check sees it
    assert check_transform(cfg, p, _claiming_equal(t)).first_failure == "blocks.0.norm1"


@pytest.mark.parametrize("name", [k for k, c in LAYERNORM.items() if not c.tied_embeddings])
def test_center_writers_shifts_the_stream_by_a_row_constant(name: str) -> None:
    cfg = LAYERNORM[name]
    p = _params(cfg)
    t = center_writers(cfg, p)
    r = check_transform(cfg, p, t)
    assert r.ok, (r.first_failure, r.worst())
    assert {row.relation for row in r.rows} == {"equal", "row_shift"}
    assert np.allclose(t.params["embed.W_E"].sum(axis=-1), 0.0, rtol=0.0,
                       atol=r.row("embed").bound)
    bad = check_transform(cfg, p, _claiming_equal(t))
    assert bad.first_failure == "embed"  # the stream did change, by a row constant


def test_center_writers_after_fold_on_a_tied_model() -> None:
    cfg = LAYERNORM["tiny-tied"]
    f = fold_norms(cfg, _params(cfg))
    t = center_writers(f.config, f.params)
    assert check_transform(f.config, f.params, t).ok


@pytest.mark.parametrize("name", list(ALL))
def test_center_unembedding_shifts_the_logits_only(name: str) -> None:
    cfg = ALL[name]
    p = _params(cfg)
    t = center_unembedding(cfg, p)
    r = check_transform(cfg, p, t)
    assert r.ok, (r.first_failure, r.worst())
    assert r.row("logits").relation == "row_shift" and r.row("loss").relation == "equal"
    assert check_transform(cfg, p, _claiming_equal(t)).first_failure == "logits"


VALUE_BIAS = {
    "tiny": TINY,
    "lora-r2-all": zoo_config("lora-r2-all"),
    "gqa-biased": replace(zoo_config("gqa-rope-swiglu"), attn_bias=True, name="gqa-biased"),
    "window-qknorm-biased": replace(zoo_config("rope-scaled-window-qknorm"),
                                    attn_out_bias=True, name="window-qknorm-biased"),
}


@pytest.mark.parametrize("name", list(VALUE_BIAS))
def test_fold_value_bias_into_the_output_bias(name: str) -> None:
    cfg = VALUE_BIAS[name]
    p = _params(cfg)
    t = fold_value_bias(cfg, p)
    r = check_transform(cfg, p, t)
    assert r.ok, (r.first_failure, r.worst())
    assert r.row("blocks.0.attn.out").relation == "equal"
    assert not any(np.any(v) for k, v in t.params.items() if k.endswith(".b_V"))
    assert check_transform(cfg, p, _claiming_equal(t)).first_failure == "blocks.0.attn.v"


@pytest.mark.parametrize("rotation", ["hadamard", "random"])
@pytest.mark.parametrize("name", list(RMSNORM))
def test_rotate_after_folding(name: str, rotation: str) -> None:
    cfg = RMSNORM[name]
    f = fold_norms(cfg, _params(cfg))
    d = cfg.d_model
    Q = hadamard(d) if rotation == "hadamard" else random_orthogonal(d, seed=3)
    t = rotate(f.config, f.params, Q)
    r = check_transform(f.config, f.params, t)
    assert r.ok, (r.first_failure, r.worst())
    rotated = {row.node for row in r.rows if row.relation == "rotated"}
    assert {"x0", "blocks.0.norm1", "blocks.0.resid2"} <= rotated
    assert check_transform(f.config, f.params, _claiming_equal(t)).first_failure == "embed"


@pytest.mark.parametrize("name", ["tiny", "lora-r2-all", "tiny-rms", "gemma-like"])
def test_residual_stream_is_the_sum_of_its_writes(name: str) -> None:
    cfg = ALL[name]
    row = check_residual_decomposition(cfg, _params(cfg))
    assert row.ok and row.node == f"blocks.{cfg.n_blocks - 1}.resid2", row


@pytest.mark.parametrize("name", ["tiny", "tiny-tied", "tiny-sinusoidal-t2", "lora-r2-all",
                                  "tiny-rms", "tiny-rms-nofinal", "gemma-like"])
def test_direct_logit_attribution_sums_to_the_logits(name: str) -> None:
    cfg = ALL[name]
    a = direct_logit_attribution(cfg, _params(cfg))
    assert a.check.ok, a.check
    writers = 2 * cfg.n_blocks + 1
    assert len(a.parts) == writers + (cfg.norm == "layernorm" and cfg.final_norm)


def test_attribution_with_each_part_s_own_scale_does_not_sum_to_the_logits(monkeypatch) -> None:
    """The scale must be frozen at the whole stream's: normalising each component by its
    own scale (a common shortcut) is caught, far above the bound."""
    real = ta.attribute

    def own_scale(part, gamma, sigma, centered):
        return real(part, gamma, ta.frozen_scale(part, TINY.norm_eps, centered), centered)

    monkeypatch.setattr(ta, "attribute", own_scale)
    row = direct_logit_attribution(TINY, _params(TINY)).check
    assert not row.ok and row.ratio > 1e6


def test_a_padded_batch_is_checked_like_one_sequence() -> None:
    from nlaverify.graph.run import sample_data

    p, data = _params(TINY), sample_data(TINY.vocab_size, 6, 1, batch=3)
    for t in (fold_norms(TINY, p), center_writers(TINY, p), fold_value_bias(TINY, p),
              center_unembedding(TINY, p)):
        r = check_transform(TINY, p, t, data=data)
        assert r.ok and r.row("logits").node == "logits", (t.name, r.first_failure)
    assert direct_logit_attribution(TINY, p, data=data).check.ok


# ------------------------------------------------------------------ planted mistakes


def _planted(cfg, name: str, edit) -> tuple[dict, Transformed]:
    p = _params(cfg)
    g, q = tw._checked(cfg, p, "planted")
    claims = edit(g, q)
    return p, Transformed(name, cfg, q, claims)


def test_planted_fold_into_the_wrong_layer_is_named() -> None:
    def swap(g, q):  # norm1 folded into the MLP's first layer, norm2 into q/k/v
        tw._fold_norm_into(TINY, g, q, "blocks.0.norm1", ["blocks.0.mlp.in"])
        tw._fold_norm_into(TINY, g, q, "blocks.0.norm2",
                           ["blocks.0.attn.q", "blocks.0.attn.k", "blocks.0.attn.v"])
        return tw._claims(g, dict.fromkeys(("blocks.0.norm1", "blocks.0.norm2")))

    p, t = _planted(TINY, "fold-wrong-layer", swap)
    r = check_transform(TINY, p, t)
    assert r.first_failure == "blocks.0.attn.q" and not r.ok
    assert r.row("blocks.0.attn.q").ratio > 1e6


def test_planted_fold_of_the_bias_only_into_the_wrong_layer_is_named() -> None:
    def bias_elsewhere(g, q):  # beta of norm2 folded into the attention output's bias
        beta = q["blocks.0.norm2.beta"].copy()
        tw._fold_norm_into(TINY, g, q, "blocks.0.norm2", ["blocks.0.mlp.in"])
        q["blocks.0.mlp.in.b_in"] = q["blocks.0.mlp.in.b_in"] - beta @ _params(TINY)[
            "blocks.0.mlp.in.W_in"]
        q["blocks.0.attn.out.b_O"] = q["blocks.0.attn.out.b_O"] + beta
        return tw._claims(g, dict.fromkeys(("blocks.0.norm2",)))

    p, t = _planted(TINY, "bias-wrong-layer", bias_elsewhere)
    r = check_transform(TINY, p, t)
    assert r.first_failure == "blocks.0.attn.out"


def test_planted_rotation_without_folding_the_gain_is_named() -> None:
    cfg = RMSNORM["tiny-rms"]
    p = _params(cfg)
    g, q = tw._checked(cfg, p, "planted")
    t = tw._rotate(cfg, g, q, hadamard(cfg.d_model))
    r = check_transform(cfg, p, t)
    assert r.first_failure == "blocks.0.norm1"
    assert r.row("x0").ok and r.row("embed").ok  # the stream itself is rotated correctly


def test_planted_centering_of_an_rmsnorm_model_is_named() -> None:
    cfg = RMSNORM["tiny-rms"]

    def center(g, q):
        for name in ["embed.W_E", "pos.W_P"]:
            q[name] = tw.center_last(q[name])
        return tw._claims(g, dict.fromkeys(tw._stream(g), "row_shift"))

    p, t = _planted(cfg, "center-rms", center)
    assert check_transform(cfg, p, t).first_failure == "blocks.0.norm1"


# ------------------------------------------------------------------ bad input


def test_unknown_missing_and_misshaped_parameters_are_refused() -> None:
    p = _params(TINY)
    with pytest.raises(ArgumentError, match=r"'embed\.W_X' is not a parameter"):
        fold_norms(TINY, {**p, "embed.W_X": p["embed.W_E"]})
    with pytest.raises(ArgumentError, match=r"no value for 'blocks\.0\.attn\.out\.W_O'"):
        fold_norms(TINY, {k: v for k, v in p.items() if k != "blocks.0.attn.out.W_O"})
    with pytest.raises(ArgumentError, match=r"'pos\.W_P': expected shape \(16, 8\)"):
        center_writers(TINY, {**p, "pos.W_P": p["pos.W_P"][:3]})


def test_inapplicable_transformations_are_refused() -> None:
    rms, p_rms = RMSNORM["tiny-rms"], _params(RMSNORM["tiny-rms"])
    with pytest.raises(ArgumentError, match="needs LayerNorm"):
        center_writers(rms, p_rms)
    with pytest.raises(ArgumentError, match="needs RMSNorm"):
        rotate(TINY, _params(TINY), hadamard(8))
    with pytest.raises(ArgumentError, match="run fold_norms first"):
        rotate(rms, p_rms, hadamard(8))
    with pytest.raises(ArgumentError, match="untied unembedding"):
        center_writers(LAYERNORM["tiny-tied"], _params(LAYERNORM["tiny-tied"]))
    post = zoo_config("post-layernorm")
    with pytest.raises(ArgumentError, match="pre-LN"):
        fold_norms(post, _params(post))
    moe = zoo_config("moe-relu-top2")
    with pytest.raises(ArgumentError, match="mixture-of-experts"):
        fold_norms(moe, _params(moe))
    favor = replace(zoo_config("favor-plus-iid"), attn_bias=True)
    with pytest.raises(ArgumentError, match="needs softmax attention"):
        fold_value_bias(favor, _params(favor))
    with pytest.raises(ArgumentError, match="attn_bias=False"):
        fold_value_bias(LAYERNORM["tiny-nobias"], _params(LAYERNORM["tiny-nobias"]))
    sin = replace(rms, positions="sinusoidal")
    with pytest.raises(ArgumentError, match="sinusoidal"):
        rotate(sin, _params(sin), hadamard(8))


def test_bad_rotations_are_refused() -> None:
    f = fold_norms(RMSNORM["tiny-rms"], _params(RMSNORM["tiny-rms"]))
    Q = hadamard(8)
    with pytest.raises(ArgumentError, match="not orthogonal"):
        rotate(f.config, f.params, Q * (1 + 1e-9))
    with pytest.raises(ArgumentError, match=r"expected a real \(8, 8\) matrix"):
        rotate(f.config, f.params, hadamard(4))
    with pytest.raises(ArgumentError, match="power of 2"):
        hadamard(6)
    assert set(np.unique(Q * np.sqrt(8))) == {-1.0, 1.0}  # Sylvester: entries +-1/sqrt(d)


def test_check_transform_refuses_a_non_transform() -> None:
    with pytest.raises(ArgumentError, match="expected a Transformed"):
        check_transform(TINY, _params(TINY), _params(TINY))


def test_every_zoo_member_is_transformed_or_refused_by_name() -> None:
    """Over the whole zoo, each transformation either passes its node-by-node check or is
    refused with an ArgumentError saying why (post-LN, MoE, RMSNorm for centering, LayerNorm
    for rotation, no value bias): never another exception, never a failed claim; and most
    members get at least one transformation checked."""
    from nlaverify.errors import ArgumentError
    from nlaverify.transform import (
        center_unembedding,
        center_writers,
        check_transform,
        fold_norms,
        fold_value_bias,
        random_orthogonal,
        rotate,
    )
    from nlaverify.zoo import ZOO

    checked: dict[str, list[str]] = {}
    for member in ZOO:
        name = getattr(member, "name", member)
        cfg = zoo_config(name)
        params = init_params(build_transformer(cfg), 0)
        done = checked.setdefault(name, [])
        for label, fn in (("fold_norms", fold_norms), ("center_writers", center_writers),
                          ("center_unembedding", center_unembedding),
                          ("fold_value_bias", fold_value_bias)):
            try:
                result = fn(cfg, params)
            except ArgumentError:
                continue
            rep = check_transform(cfg, params, result)
            assert rep.ok, (name, label, rep.first_failure)
            done.append(label)
        if "fold_norms" in done and cfg.norm == "rmsnorm" and not cfg.n_experts:
            folded = fold_norms(cfg, params)
            try:
                rotated = rotate(folded.config, folded.params,
                                 random_orthogonal(cfg.d_model, 1))
            except ArgumentError:
                continue
            assert check_transform(folded.config, folded.params, rotated).ok, name
            done.append("rotate")
    # 8 of the 13: the two post-LN and the three MoE members are refused by name
    assert sum(bool(v) for v in checked.values()) >= 8, checked
    assert sum("rotate" in v for v in checked.values()) >= 3, checked


def test_unfrozen_attribution_error_is_exact() -> None:
    """With each component normalised by its own scale, the split misses the logits by
    exactly sum_k (gamma * a_k P)(1/sigma_k - 1/sigma) W_U: the own-scale parts plus the
    norm's bias minus the graph's logits equal the reported error (here 150 % of the logits:
    the frozen scale is not a detail)."""
    from nlaverify.backends import get_namespace
    from nlaverify.graph.core import evaluate
    from nlaverify.graph.run import graph_inputs, sample_data
    from nlaverify.tolerance import tolerance
    from nlaverify.transform import direct_logit_attribution

    cfg = preset("tiny")
    params = init_params(build_transformer(cfg), 0)
    data = sample_data(cfg.vocab_size, 8, 0)
    att = direct_logit_attribution(cfg, params, data=data)
    assert att.check.ok and att.unfrozen_relative_error > 0.1
    g, xp = build_transformer(cfg), get_namespace("numpy")
    v = evaluate(g, xp, graph_inputs(g, xp, params, data, "float64"))
    gamma, beta, W_U = (params[k] for k in ("final_norm.gamma", "final_norm.beta",
                                            "unembed.W_U"))
    parts = [v["x0"], *(v[f"blocks.{b}.{w}"] for b in range(cfg.n_blocks)
                        for w in ("attn.out", "mlp.out"))]

    def norm_alone(a):
        c = a - a.mean(-1, keepdims=True)
        return gamma * c / np.sqrt((c * c).mean(-1, keepdims=True) + cfg.norm_eps)

    own = sum(norm_alone(a) @ W_U for a in parts) + beta @ W_U
    tol = tolerance("float64", size=cfg.d_model * len(parts), depth=8)
    assert tol.compare(own - v["logits"], att.unfrozen_error).ok


def test_soft_capped_logits_refuse_the_shift_and_the_split() -> None:
    """c tanh(z/c) is neither shift-invariant nor additive: centering the unembedding and the
    direct logit attribution are refused by name on a model with a final soft cap (the
    claims would be false: check_transform found it at logits_uncapped)."""
    from nlaverify.transform import direct_logit_attribution

    cfg = preset("tiny").replace(final_softcap=3.0)
    params = init_params(build_transformer(cfg), 0)
    with pytest.raises(ArgumentError, match="soft-capped"):
        center_unembedding(cfg, params)
    with pytest.raises(ArgumentError, match="soft-capped"):
        direct_logit_attribution(cfg, params)
    assert check_transform(cfg, params, fold_norms(cfg, params)).ok  # the cap reads the same


def test_attribution_includes_the_unembedding_bias() -> None:
    """GPT-J and Phi add b_U to the logits: the split must carry it as its own part (without
    it the parts missed the logits by 0.72 against a bound of 1e-12)."""
    from nlaverify.transform import direct_logit_attribution
    from nlaverify.zoo import zoo_config

    cfg = zoo_config("gptj-like")
    params = init_params(build_transformer(cfg), 0)
    params["unembed.b_U"] = np.random.default_rng(0).standard_normal(
        params["unembed.b_U"].shape) * 3
    rep = direct_logit_attribution(cfg, params)
    assert "unembed.b_U" in rep.parts and rep.check.error <= rep.check.bound, rep.check
