"""A model without attention blocks (all RWKV, all Mamba, all Mamba-2) refuses the
attention's options by field, and an all-RWKV model the MLP kind and ``parallel_norms`` it
does not read: accepted, they would change nothing. Hybrids keep them (their attention blocks
read them), and Hugging Face's configs, the presets and the zoo build unchanged."""

from __future__ import annotations

import pytest

from nlaverify.config import ConfigError, preset
from nlaverify.zoo import zoo_config

ATTENTION_ONLY = {"qk_norm": True, "attn_softcap": 5.0, "attention": "favor",
                  "sliding_window": 3, "attn_bias": True, "attn_out_bias": True,
                  "query_pre_attn_scalar": 3.0, "n_kv_heads": 1, "d_head": 2}
ALL_SSM = ["rwkv", "mamba-rmsnorm", "mamba2"]


@pytest.mark.parametrize("member", ALL_SSM)
@pytest.mark.parametrize(("field", "value"), list(ATTENTION_ONLY.items()))
def test_attention_options_are_refused_without_attention(member, field, value) -> None:
    c = zoo_config(member)
    with pytest.raises(ConfigError, match=rf"TransformerConfig\.{field}: an option of the "
                                          rf"attention.*has no attention block"):
        c.replace(**{field: value})


@pytest.mark.parametrize(("field", "value", "why"), [
    ("mlp", "swiglu", "reads no MLP kind"), ("mlp", "relu", "reads no MLP kind"),
    ("parallel_norms", 2, "no parallel residual")])
def test_all_rwkv_refuses_what_its_channel_mixing_does_not_read(field, value, why) -> None:
    for c in (zoo_config("rwkv"), preset("tiny-rwkv")):
        with pytest.raises(ConfigError, match=rf"TransformerConfig\.{field}: .*{why}"):
            c.replace(**{field: value})


@pytest.mark.parametrize("member", ["hybrid-rwkv-attention", "hybrid-mamba-attention",
                                    "hybrid-mamba2-attention"])
@pytest.mark.parametrize(("field", "value"), [
    (f, v) for f, v in ATTENTION_ONLY.items() if f not in ("d_head", "attention")])
def test_hybrids_keep_the_attention_options(member, field, value) -> None:
    c = zoo_config(member).replace(**{field: value})
    assert getattr(c, field) == value


def test_hybrid_rwkv_keeps_its_mlp_and_mamba_keeps_its_mlp_kind() -> None:
    assert zoo_config("hybrid-rwkv-attention").replace(mlp="gelu").mlp == "gelu"
    assert zoo_config("mamba-rmsnorm").replace(mlp="gelu").mlp == "gelu"


def test_defaults_and_a_new_n_heads_pass() -> None:
    """The defaults written out pass; a new ``n_heads`` needs ``n_kv_heads`` and ``d_head``
    reset (they were resolved from the old one), as the message says."""
    c = zoo_config("rwkv")
    assert c.replace(attention="softmax", attn_out_bias=False, mlp="gelu",
                     parallel_norms=1).attn_out_bias is False
    with pytest.raises(ConfigError, match=r"n_kv_heads.*pass n_kv_heads=None"):
        c.replace(n_heads=4)
    assert c.replace(n_heads=4, n_kv_heads=None, d_head=None).n_heads == 4


def test_hugging_face_configs_of_ssm_models_load() -> None:
    from nlaverify.interop import load_hf_config

    rwkv = load_hf_config({"model_type": "rwkv", "vocab_size": 50, "hidden_size": 8,
                           "num_hidden_layers": 2, "context_length": 16}).config
    mamba2 = load_hf_config({"model_type": "mamba2", "vocab_size": 50, "hidden_size": 8,
                             "num_hidden_layers": 2, "num_heads": 4, "head_dim": 4,
                             "expand": 2, "n_groups": 2}).config
    assert (rwkv.mixer, mamba2.mixer) == ("rwkv", "mamba2")


@pytest.mark.parametrize("member", ALL_SSM)
def test_latent_attention_is_refused_without_attention(member) -> None:
    """Multi-head latent attention's fields on a model with no attention block (review of
    issue 23: accepted, and they changed nothing)."""
    with pytest.raises(ConfigError, match=r"TransformerConfig\.kv_lora_rank: an option of the "
                                          r"attention.*has no attention block"):
        zoo_config(member).replace(kv_lora_rank=4, qk_nope_head_dim=2, qk_rope_head_dim=2,
                                   v_head_dim=2)
