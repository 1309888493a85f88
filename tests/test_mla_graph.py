"""Multi-head latent attention in the graph (DeepSeek-V2 §2.1; issue 23): the graph against
the independent JAX model node by node, the graph's path against the proved absorbed form,
the concatenation op's proofs, the config's checks, parameter and KV-cache counts, and
planted bugs named at their node."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

from nlaverify.config import ConfigError, TransformerConfig
from nlaverify.cost.memory import kv_cache_bytes
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.ops.ssm_specs import CONV_OPS
from nlaverify.zoo import zoo_config

MLA = "mla"


def _verify(cfg: TransformerConfig) -> Any:
    from nlaverify.pipeline import verify_pipeline

    return verify_pipeline(cfg, ("numpy",))


@pytest.mark.parametrize("q_lora_rank", [6, None], ids=["q-latent", "q-full-rank"])
def test_mla_graph_agrees_with_autodiff_and_the_independent_model(q_lora_rank) -> None:
    cfg = zoo_config(MLA).replace(q_lora_rank=q_lora_rank)
    r = _verify(cfg)
    assert r.ok and r.model_divergence is None, (r.model_divergence, r.errors)
    assert ("q_a_norm" in str(list(build_transformer(cfg)))) == (q_lora_rank is not None)


def test_the_graph_path_is_the_absorbed_form() -> None:
    from nlaverify.identities.mla_graph import derive_mla_graph

    assert derive_mla_graph().verdict == "proved"


def test_the_absorption_identity_sees_a_wrong_score_scale(monkeypatch) -> None:
    # scores over sqrt(d_c) (qk_nope_head_dim alone), not sqrt(d_c + d_r): the graph's
    # attention node with its scale set as a per-head d_h would give it
    import nlaverify.graph.build as build
    from nlaverify.identities.mla_graph import derive_mla_graph

    right = build.build_transformer

    def wrong(config):
        g = right(config)
        g.nodes["blocks.0.attn.heads"]["static"]["scale"] = config.qk_nope_head_dim ** -0.5
        return g

    monkeypatch.setattr(build, "build_transformer", wrong)
    assert derive_mla_graph().verdict == "failed"


def test_concat_proofs_fail_on_a_swapped_split() -> None:
    from nlaverify.symbolic.vjp_proof import prove_jvp, prove_vjp

    spec = CONV_OPS["concat_last"]
    assert prove_vjp(spec).verdict == "proved" and prove_jvp(spec).verdict == "proved"

    def swapped(xp, G, A, B):  # the cotangent split at b, not a
        b = B.shape[-1]
        return G[..., :b], G[..., b:]

    bad = dataclasses.replace(spec, vjp=swapped)
    assert prove_vjp(bad).verdict != "proved"


def _rewired(monkeypatch, change) -> None:
    import nlaverify.pipeline as pipeline

    def wrong(config):
        g = build_transformer(config)
        change(g, config)
        return g

    monkeypatch.setattr(pipeline, "build_transformer", wrong)


def _rewire(g: Any, node: str, pos: int, new: str) -> None:
    old = next(u for u, _, p in g.in_edges(node, data="pos") if p == pos)
    g.remove_edge(old, node)
    g.add_edge(new, node, pos=pos)


def test_rope_on_the_nope_half_is_named_at_q(monkeypatch) -> None:
    from nlaverify.graph.core import add_op

    def change(g, cfg):
        for b in range(cfg.n_blocks):
            p = f"blocks.{b}.attn"
            for h in ("q", "k"):
                src = f"{p}.{h}_nope_heads"
                add_op(g, f"{src}_rot", "rope", [src], **g.nodes[f"{p}.q_rope"]["static"])
                g.nodes[f"{src}_rot"]["shape"] = g.nodes[src]["shape"]
                _rewire(g, f"{p}.{h}", 0, f"{src}_rot")

    _rewired(monkeypatch, change)
    r = _verify(zoo_config(MLA))
    assert not r.ok and r.model_divergence == "blocks.0.attn.q"


def test_skipped_kv_a_layernorm_is_named_at_k_nope(monkeypatch) -> None:
    def change(g, cfg):
        for b in range(cfg.n_blocks):
            p = f"blocks.{b}.attn"
            for node in ("k_nope", "v"):
                _rewire(g, f"{p}.{node}", 0, f"{p}.c_kv")

    _rewired(monkeypatch, change)
    r = _verify(zoo_config(MLA))
    assert not r.ok and r.model_divergence == "blocks.0.attn.k_nope"


def test_rotated_key_on_one_head_only_is_named_at_k(monkeypatch) -> None:
    # the independent model writes k^R into head 0 and leaves the other heads' rotated
    # half 0 (a key buffer filled for one head): the graph's shared key names it at k
    from nlaverify.models import jax_mla

    def first_head_only(k_rot, heads):
        return jnp.zeros((heads, *k_rot.shape)).at[0].set(k_rot)

    assert _verify(zoo_config(MLA)).ok
    monkeypatch.setattr(jax_mla, "shared_key", first_head_only)
    r = _verify(zoo_config(MLA))
    assert not r.ok and r.model_divergence == "blocks.0.attn.k"


def test_parameter_counts_and_kv_cache() -> None:
    cfg = zoo_config(MLA)  # d = 8, h = 2, r = 4, r_q = 6, d_c = 2, d_r = 4, d_v = 3
    d, h, r, rq, dc, dr, dv = 8, 2, 4, 6, 2, 4, 3
    per_block = (d * rq + rq + rq * h * (dc + dr) + d * (r + dr) + r + r * h * (dc + dv)
                 + h * dv * d)
    counts = parameter_counts(build_transformer(cfg))
    attn = sum(v for k, v in counts.by_component.items() if k.startswith("attention"))
    assert attn + counts.by_component["norms.mla"] == cfg.n_blocks * per_block
    # (r + d_r) values per token and block, not 2 h d_h
    assert kv_cache_bytes(cfg, 5, batch=3, itemsize=2) == (r + dr) * 5 * 2 * 3 * 2
    plain = cfg.replace(kv_lora_rank=0, q_lora_rank=None, qk_nope_head_dim=None,
                        qk_rope_head_dim=None, v_head_dim=None)
    assert kv_cache_bytes(plain, 5) == 2 * h * (d // h) * 5 * 2 * 2


@pytest.mark.parametrize(("changes", "field"), [
    ({"kv_lora_rank": -1}, "kv_lora_rank"),
    ({"kv_lora_rank": 0}, "q_lora_rank"),  # MLA's fields set without a latent
    ({"q_lora_rank": 0}, "q_lora_rank"),
    ({"qk_nope_head_dim": None}, "qk_nope_head_dim"),
    ({"qk_rope_head_dim": 3}, "qk_rope_head_dim"),
    ({"v_head_dim": 0}, "v_head_dim"),
    ({"n_kv_heads": 1}, "n_kv_heads"),
    ({"positions": "learned"}, "positions"),
    ({"attn_bias": True}, "attn_bias"),
    ({"qk_norm": True}, "qk_norm"),
    ({"sliding_window": 2}, "sliding_window"),
])
def test_config_errors_name_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=f"TransformerConfig.{field}:"):
        zoo_config(MLA).replace(**changes)


def test_no_mla_leaves_the_fields_unset() -> None:
    cfg = zoo_config("gqa-rope-swiglu")
    assert cfg.kv_lora_rank == 0 and cfg.v_head_dim is None
    assert "blocks.0.attn.c_kv" not in build_transformer(cfg)
    assert np.isfinite(kv_cache_bytes(cfg, 4))


def test_export_to_a_type_without_mla_is_refused() -> None:
    from nlaverify.interop.hf_config_export import hf_config_dict

    for model_type in ("llama", "olmo2", "gpt2"):
        with pytest.raises(ConfigError, match="kv_lora_rank=4"):
            hf_config_dict(zoo_config(MLA), model_type)


def test_stream_transforms_and_patterns_of_an_mla_model() -> None:
    # the latent norms read c_kv / q_a, not the stream: fold_norms folds the stream's, and
    # rotate leaves the latents unrotated (a latent norm taken for a stream norm rotates
    # its (r, h d) readers by the (d, d) Q: a shape error)
    from nlaverify.config import RopeScaling
    from nlaverify.graph.run import init_params, run_graph, sample_data
    from nlaverify.tolerance import magnitude_condition, tolerance
    from nlaverify.transform import lens
    from nlaverify.transform import weights as W
    from nlaverify.transform.verify import check_transform

    cfg = zoo_config(MLA)
    params = init_params(build_transformer(cfg), 0)
    folded = W.fold_norms(cfg, params)
    assert check_transform(cfg, params, folded).ok
    rotated = W.rotate(cfg, folded.params, W.random_orthogonal(cfg.d_model, 0))
    assert check_transform(cfg, folded.params, rotated).ok
    # the patterns carry YaRN's m^2 on the scores: A V is the attention's output
    cfg = cfg.replace(rope_scaling=RopeScaling("yarn", 4.0, original_context=2, mscale=1.0,
                                               mscale_all_dim=1.0))
    g = build_transformer(cfg)
    params, data = init_params(g, 1), sample_data(cfg.vocab_size, 6, 1)
    A = lens.attention_patterns(cfg, params, data=data)["blocks.0.attn.heads"]
    ev = run_graph(g, "numpy", params, data)
    heads = ev.values["blocks.0.attn.heads"]
    tol = tolerance("float64", size=6, depth=6, condition=magnitude_condition(heads))
    assert tol.compare(A @ ev.values["blocks.0.attn.v_heads"], heads).ok


def test_mla_in_float32_is_within_the_precision_bounds() -> None:
    # every node within its rounding bound; concat_last exact (no arithmetic)
    from nlaverify.precision import EXACT_FORWARD, format_precision_report, verify_precision

    assert "concat_last" in EXACT_FORWARD
    r = verify_precision(zoo_config(MLA), "float32")
    assert r.ok, format_precision_report(r)
