"""Node-by-node verification of Hugging Face models (nlaverify.interop.hf_verify).

Tiny random-weight models built from config dicts (nothing is downloaded), float64 on the
CPU. Every verdict is the tolerance model's (``HFVerifyReport.ok`` and the rows' bounds
come from :func:`nlaverify.tolerance.tolerance`); no bare constant. Each claim is checked
to be non-vacuous: a planted mistake, a left-out exact-arithmetic patch or a graph config
missing an option must each be reported at its own node.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from nlaverify import jsonout
from nlaverify.config import ConfigError
from nlaverify.errors import ArgumentError, ShapeError, UnknownNameError
from nlaverify.interop import hf_config
from nlaverify.interop.hf_patches import EXACT_PATCHES, PLANTS, needed_patches
from nlaverify.interop.hf_verify import (
    HFVerifyReport,
    format_hf_report,
    hf_verify_command,
    verify_hf,
)

_RMS = dict(vocab_size=13, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
            rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)

#: tiny configs, as a user writes them (HF config.json keys)
CONFIGS = {
    "gpt2": dict(model_type="gpt2", vocab_size=13, n_embd=16, n_layer=2, n_head=4,
                 n_positions=32),
    # GQA (2 query heads per key/value head... here 2:1) and Llama-3.1 RoPE scaling with
    # all three bands: wavelengths 2pi (kept, < 64/4), 20pi (blended), 200pi (divided)
    "llama": dict(_RMS, model_type="llama", num_attention_heads=2, num_key_value_heads=1,
                  head_dim=8, max_position_embeddings=128,
                  rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                    high_freq_factor=4.0,
                                    original_max_position_embeddings=64)),
    "mixtral": dict(_RMS, model_type="mixtral", num_local_experts=4, num_experts_per_tok=2),
    "mistral": dict(_RMS, model_type="mistral", sliding_window=3),
    "qwen2": dict(_RMS, model_type="qwen2"),
    "qwen3": dict(_RMS, model_type="qwen3", head_dim=4),
    # free d_head (2 x 8 != 12), sqrt(12) embedding scale, tied, GeGLU, (1 + w) norms
    "gemma": dict(_RMS, model_type="gemma", hidden_size=12, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=8, hidden_act="gelu_pytorch_tanh",
                  tie_word_embeddings=True),
}
N = 5


def _hf_parameter_names(cfg: dict) -> set[str]:
    """Every parameter of the HF model, by its state-dict name (tied ones under both)."""
    import transformers

    raw = {k: v for k, v in cfg.items() if k != "model_type"}
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(cfg["model_type"], **raw))
    return {k for k, _ in model.named_parameters(remove_duplicate=False)}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_exact_mode_agrees_in_every_node_loss_and_gradient(name: str) -> None:
    r = verify_hf(CONFIGS[name], seq_len=N, exact=True)
    assert r.ok, format_hf_report(r)
    assert r.first_divergence is None and r.first_gradient_divergence is None
    for node in ("logits", "loss", "blocks.1.resid2", "blocks.0.attn.heads"):
        assert r.row(node).ok
    # every HF parameter's gradient was compared
    assert {g.name for g in r.gradients} == _hf_parameter_names(CONFIGS[name])
    # no HF counterpart: repeat_kv's outputs (inside HF's attention) and Gemma's unscaled
    # embedding (HF's embedding module returns it scaled: the graph's embed_scaled)
    hidden = {"embed"} if name == "gemma" else set()
    assert all(u.endswith(("k_shared", "v_shared")) or u in hidden for u in r.unmapped)
    # only the patches the model needs (GPT-2: the loss; its attention stays HF's own)
    assert r.patches == sorted(needed_patches(name, CONFIGS[name]))
    assert (r.patches == ["loss"]) == (name == "gpt2")
    fidelity = [c for c in r.checks if c.name.startswith("patch fidelity")]
    others = [c.name for c in r.checks if c not in fidelity]
    # one fidelity row per patched call, each naming its graph node
    assert any(c.name.startswith("patch fidelity loss:") for c in fidelity)
    if name != "gpt2":
        assert others == ["rotary frequencies (HF float32 vs nlaverify float64)"]
        assert r.row("blocks.0.attn.q_rope").ok
        for node in ("blocks.0.norm1", "blocks.1.norm2", "final_norm", "blocks.0.attn.q_rope",
                     "blocks.1.attn.heads"):
            assert any(c.name.startswith(f"patch fidelity {node}:") for c in fidelity), node
    if name == "mixtral":
        assert any(c.name.startswith("patch fidelity blocks.1.mlp.out:") for c in fidelity)


# Stock HF (as shipped) in float64: the first node where it departs from float64
# arithmetic, found by experiment (transformers 5.24): every RMSNorm model's first RMSNorm
# (computed in float32), GPT-2's loss (ForCausalLMLoss upcasts the logits to float32).
# GPT-2 with reorder_and_upcast_attn computes its attention in float32.
STOCK_FIRST = {"gpt2": "loss", "llama": "blocks.0.norm1", "mixtral": "blocks.0.norm1",
               "mistral": "blocks.0.norm1", "qwen2": "blocks.0.norm1",
               "qwen3": "blocks.0.norm1", "gemma": "blocks.0.norm1",
               "gpt2-upcast": "blocks.0.attn.heads"}
CONFIGS_STOCK = {**CONFIGS, "gpt2-upcast": dict(CONFIGS["gpt2"], reorder_and_upcast_attn=True)}


@pytest.mark.parametrize("name", ["gpt2", "gpt2-upcast", "llama", "gemma"])
def test_stock_mode_names_the_first_float32_node(name: str) -> None:
    r = verify_hf(CONFIGS_STOCK[name], seq_len=N)
    assert not r.ok
    assert r.first_divergence == STOCK_FIRST[name]
    # and every departure is float32 rounding, not a wrong function: a healthy verdict
    assert r.first_beyond_float32 is None
    assert r.stock_ok and r.verdict
    text = format_hf_report(r)
    assert f"verify --hf {CONFIGS_STOCK[name]['model_type']}: ok within float32 rounding" in text
    assert "FAIL" not in text and len(text.splitlines()) == 2


def test_each_float32_upcast_shows_at_its_own_node() -> None:
    """Leave out one exact-arithmetic patch at a time: stock HF's float32 step it replaces
    is reported where it happens (so every patch is needed, and each is where the module
    docstring of hf_patches says)."""
    expected = {"rmsnorm": "blocks.0.norm1", "rotary": "blocks.0.attn.q_rope",
                "attention_softmax": "blocks.0.attn.heads",
                "router_softmax": "blocks.0.mlp.out", "loss": "loss"}
    assert set(expected) == set(EXACT_PATCHES)
    for patch, node in expected.items():
        r = verify_hf(CONFIGS["mixtral"], seq_len=N, exact=set(EXACT_PATCHES) - {patch})
        assert r.first_divergence == node, patch
        assert r.first_beyond_float32 is None


PLANTED = [("llama", "transpose_square", "blocks.0.attn.q"),
           ("gpt2", "transpose_square", "blocks.0.attn.out"),
           ("llama", "rope_pairing", "blocks.0.attn.q_rope"),
           ("mixtral", "no_renormalize", "blocks.0.mlp.out")]


@pytest.mark.parametrize(("name", "plant", "node"), PLANTED)
def test_planted_mistake_is_reported_at_its_node(name: str, plant: str, node: str) -> None:
    r = verify_hf(CONFIGS[name], seq_len=N, exact=True, plant=plant)
    assert r.first_divergence == node, format_hf_report(r)
    assert r.planted and not r.ok
    assert all(row.ok for row in r.rows[:[x.node for x in r.rows].index(node)])
    # stock HF: float32 rounding comes first, but the mistake is the first node beyond
    # even float32's bound
    s = verify_hf(CONFIGS[name], seq_len=N, plant=plant)
    assert s.first_beyond_float32 == node
    assert not s.stock_ok and not s.verdict  # exit 1, naming the node
    assert f"the first node beyond even float32's bound is {node}" in format_hf_report(s)


def _rmsnorm_without_weight(mod: object) -> tuple[object, str, object]:
    import torch

    def forward(self, x):  # HF's RMSNorm, gain forgotten
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    return mod.LlamaRMSNorm, "forward", forward  # type: ignore[attr-defined]


def _attention_unscaled(mod: object) -> tuple[object, str, object]:
    stock = mod.eager_attention_forward  # type: ignore[attr-defined]

    def eager(module, q, k, v, mask, scaling=None, dropout=0.0, **kw):  # scaling dropped
        return stock(module, q, k, v, mask, 1.0, dropout, **kw)
    return mod, "eager_attention_forward", eager


def _rotary_shifted(mod: object) -> tuple[object, str, object]:
    stock = mod.LlamaRotaryEmbedding.forward  # type: ignore[attr-defined]

    def forward(self, x, position_ids):  # positions off by one
        return stock(self, x, position_ids + 1)
    return mod.LlamaRotaryEmbedding, "forward", forward  # type: ignore[attr-defined]


def _router_not_renormalised(mod: object) -> tuple[object, str, object]:
    from nlaverify.interop.hf_patches import _router_forward

    def forward(self, h):
        return _router_forward(self, h, exact=False, renormalize=False)
    return mod.MixtralTopKRouter, "forward", forward  # type: ignore[attr-defined]


@pytest.mark.parametrize(("name", "bug", "node"), [
    ("llama", _rmsnorm_without_weight, "blocks.0.norm1"),
    ("llama", _attention_unscaled, "blocks.0.attn.heads"),
    ("llama", _rotary_shifted, "blocks.0.attn.q_rope"),
    ("mixtral", _router_not_renormalised, "blocks.0.mlp.out"),
])
def test_exact_mode_still_checks_the_hf_code_it_replaces(
        monkeypatch: pytest.MonkeyPatch, name: str, bug: object, node: str) -> None:
    """A bug in HF's own code (planted in the class / modeling module, as a transformers
    regression would be) must not hide behind the exact replacement: the patch fidelity
    check of the module (stock HF vs exact, float32's bound) fails, naming its node."""
    import importlib

    mod = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    monkeypatch.setattr(*bug(mod))  # type: ignore[operator]
    r = verify_hf(CONFIGS[name], seq_len=N, exact=True)
    assert not r.ok and r.first_patch_divergence == node, format_hf_report(r)
    assert r.first_divergence is None  # the exact replacement itself agrees
    assert f"beyond float32 where patched: {node}" in format_hf_report(r, per_node=False)


def test_gpt2_exact_mode_runs_hf_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPT-2 needs only the loss patch: its (float64) attention stays HF's, so a bug in it
    shows at its node in exact mode too; with reorder_and_upcast_attn (float32) the
    attention patch is applied and fidelity-checked."""
    from transformers.models.gpt2 import modeling_gpt2

    stock = modeling_gpt2.eager_attention_forward

    def times_1_5(*args, **kwargs):
        out, w = stock(*args, **kwargs)
        return out * 1.5, w

    monkeypatch.setattr(modeling_gpt2, "eager_attention_forward", times_1_5)
    r = verify_hf(CONFIGS["gpt2"], seq_len=N, exact=True)
    assert r.first_divergence == "blocks.0.attn.heads" and r.patches == ["loss"]
    monkeypatch.setattr(modeling_gpt2, "eager_attention_forward", stock)
    up = verify_hf(CONFIGS_STOCK["gpt2-upcast"], seq_len=N, exact=True)
    assert up.ok and up.patches == ["attention_softmax", "loss"], format_hf_report(up)
    assert any(c.name.startswith("patch fidelity blocks.1.attn.heads") for c in up.checks)


def test_plants_are_restored_and_checked() -> None:
    from transformers.models.llama import modeling_llama

    original = modeling_llama.rotate_half
    verify_hf(CONFIGS["llama"], seq_len=N, exact=True, plant="rope_pairing")
    assert modeling_llama.rotate_half is original
    assert set(PLANTS) == {p for _, p, _ in PLANTED}
    with pytest.raises(UnknownNameError, match="transpose_everything"):
        verify_hf(CONFIGS["llama"], seq_len=N, plant="transpose_everything")
    with pytest.raises(ArgumentError, match="no square projection"):  # 2 x 8 heads, d=12
        verify_hf(CONFIGS["gemma"], seq_len=N, plant="transpose_square")
    with pytest.raises(ArgumentError, match="no Mixtral top-k router"):
        verify_hf(CONFIGS["llama"], seq_len=N, plant="no_renormalize")
    with pytest.raises(UnknownNameError, match="softmax_everywhere"):
        verify_hf(CONFIGS["llama"], seq_len=N, exact={"softmax_everywhere"})


@pytest.mark.parametrize(("name", "field", "node"), [
    ("llama", "rope_scaling", "blocks.0.attn.q_rope"),
    ("mistral", "sliding_window", "blocks.0.attn.heads"),
])
def test_a_graph_missing_an_option_is_caught(monkeypatch: pytest.MonkeyPatch, name: str,
                                             field: str, node: str) -> None:
    """The test configs exercise each option: a graph built without it differs from stock
    HF beyond float32's bound at the node the option acts on. (Exact mode substitutes
    nlaverify's RoPE frequencies into HF, so there the wrong scaling is caught by the check
    of HF's own frequencies instead.)"""
    real = hf_config.load_hf_config

    def without(source: object) -> hf_config.HFConfig:
        hf = real(source)
        return hf_config.HFConfig(hf.model_type, hf.config.replace(**{field: None}), hf.raw)

    monkeypatch.setattr(hf_config, "load_hf_config", without)
    assert verify_hf(CONFIGS[name], seq_len=N + 1).first_beyond_float32 == node
    exact = verify_hf(CONFIGS[name], seq_len=N + 1, exact=True)
    assert not exact.ok
    if field == "rope_scaling":
        assert exact.first_divergence is None and not exact.checks[0].ok
    else:
        assert exact.first_divergence == node


def test_a_wrong_capture_convention_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The map from HF's captures to graph nodes is itself checked: forget the RoPE
    permutation of the query columns, or read HF's (B, n, H, d_h) attention output as if it
    were (B, H, n, d_h), and the node is reported."""
    from nlaverify.interop import hf_taps

    real = hf_taps._layouts

    def no_permutation(config: object) -> dict:
        lay = real(config)
        return {**lay, "cols": lambda h, permute=True: lay["cols"](h, False)}

    monkeypatch.setattr(hf_taps, "_layouts", no_permutation)
    r = verify_hf(CONFIGS["llama"], seq_len=N, exact=True)
    assert r.first_divergence == "blocks.0.attn.q"

    def heads_misread(config: object) -> dict:
        lay = real(config)
        return {**lay, "bnhd": lambda permute=True: lambda a: np.reshape(
            a[0], (a.shape[2], a.shape[1], a.shape[3]))}

    monkeypatch.setattr(hf_taps, "_layouts", heads_misread)
    r = verify_hf(CONFIGS["gpt2"], seq_len=N, exact=True)
    assert r.first_divergence == "blocks.0.attn.heads"


def test_float32_model_passes_at_float32() -> None:
    """Stock HF in float32 (its float32 steps are then no departure) agrees with the graph
    within float32's bounds."""
    r = verify_hf(CONFIGS["llama"], seq_len=N, dtype="float32")
    assert r.ok, format_hf_report(r)


def test_tokens_report_json_and_command(tmp_path: object, capsys: pytest.CaptureFixture
                                        ) -> None:
    tokens = np.array([3, 1, 4, 1, 5, 9])
    r = verify_hf(CONFIGS["llama"], tokens=tokens, exact=True)  # RopeScaling in its config
    assert isinstance(r, HFVerifyReport) and r.tokens == tokens.tolist()
    d = json.loads(json.dumps(jsonout.finite(r.as_dict()), allow_nan=False))
    assert d["ok"] and d["model_type"] == "llama" and d["first_divergence"] is None
    assert d["config"]["rope_scaling"]["kind"] == "llama3"
    assert len(d["nodes"]) == len(r.rows) and d["exact"]
    assert d["patches"] == sorted(set(EXACT_PATCHES) - {"router_softmax"})  # not Mixtral
    assert d["first_patch_divergence"] is None
    path = tmp_path / "config.json"  # type: ignore[operator]
    path.write_text(json.dumps(CONFIGS["gpt2"]))
    assert hf_verify_command(str(path), seq_len=N, seed=1, exact=True, as_json=False) == 0
    assert "verify --hf gpt2: ok" in capsys.readouterr().out
    # stock GPT-2 departs from float64 at its loss (upcast to float32), within float32's
    # bound: a healthy model, exit 0
    assert hf_verify_command(str(path), seq_len=N, seed=1, exact=False, as_json=True) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["first_divergence"] == "loss" and not out["ok"] and out["stock_ok"]


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    (dict(tokens=np.array([[1, 2, 3]])), ShapeError, "expected shape"),
    (dict(tokens=np.array([1])), ShapeError, "2 <= n"),
    (dict(tokens=np.array([1, 13])), ArgumentError, "vocab_size=13"),
    (dict(tokens=np.array([1.0, 2.0])), ArgumentError, "integer token ids"),
    (dict(seq_len=1), ArgumentError, "seq_len"),
    (dict(dtype="float16"), ArgumentError, "dtype"),
])
def test_bad_arguments_are_named(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        verify_hf(CONFIGS["gpt2"], **kwargs)


def test_config_missing_a_field_is_named() -> None:
    cfg = {k: v for k, v in CONFIGS["llama"].items() if k != "hidden_size"}
    with pytest.raises(ConfigError, match="hidden_size"):
        verify_hf(cfg)


def _checkpoint(tmp_path: object, name: str, tamper: object = None) -> str:
    """A checkpoint directory (config.json + model.safetensors) of nlaverify's seeded
    weights, optionally tampered with."""
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import init_params
    from nlaverify.interop.weights import params_to_hf, save_safetensors

    hf = hf_config.load_hf_config(CONFIGS[name])
    state = params_to_hf(hf.config, name, init_params(build_transformer(hf.config), 3))
    if tamper is not None:
        tamper(state)  # type: ignore[operator]
    d = tmp_path / name  # type: ignore[operator]
    d.mkdir()
    (d / "config.json").write_text(json.dumps(CONFIGS[name]))
    save_safetensors(d / "model.safetensors", state)
    return str(d)


@pytest.mark.parametrize("name", ["llama", "gemma"])
def test_checkpoint_directory_is_verified(tmp_path: object, name: str) -> None:
    """HF loads the checkpoint with its own from_pretrained; nlaverify reads it with
    load_checkpoint; both run the same weights (a check row says so)."""
    r = verify_hf(_checkpoint(tmp_path, name), seq_len=N, exact=True)
    assert r.ok, format_hf_report(r)
    assert r.weights.startswith("checkpoint")
    assert any(c.name.startswith("weights:") and c.ok for c in r.checks)


def test_checkpoint_with_extra_or_misshaped_tensor_is_refused(tmp_path: object) -> None:
    def extra(state: dict) -> None:
        state["model.layers.0.self_attn.rotary.weight"] = np.zeros(3)

    def misshaped(state: dict) -> None:
        key = "model.layers.1.mlp.up_proj.weight"
        state[key] = state[key][:, :-1]

    with pytest.raises(UnknownNameError, match=r"rotary\.weight"):
        verify_hf(_checkpoint(tmp_path, "llama", extra))
    (tmp_path / "llama").rename(tmp_path / "llama_extra")  # type: ignore[operator]
    with pytest.raises(ShapeError, match="up_proj"):
        verify_hf(_checkpoint(tmp_path, "llama", misshaped))


def test_float32_gemma_checkpoint_offset_is_exact(tmp_path: object) -> None:
    """A float32 Gemma checkpoint: HF (float64 model) computes 1 + w exactly; nlaverify must
    too (float64 before the offset), or the weights check fails at a rounding of 1 + w."""
    def to_float32(state: dict) -> None:
        for k in state:
            state[k] = state[k].astype(np.float32)

    r = verify_hf(_checkpoint(tmp_path, "gemma", to_float32), seq_len=N, exact=True)
    assert r.ok, format_hf_report(r)
    weights = next(c for c in r.checks if c.name.startswith("weights:"))
    assert weights.error == 0.0


def test_directory_with_unreadable_weights_is_refused(tmp_path: object) -> None:
    """config.json + pytorch_model.bin (no safetensors) must not be verified on random
    weights."""
    d = tmp_path / "bin"  # type: ignore[operator]
    d.mkdir()
    (d / "config.json").write_text(json.dumps(CONFIGS["llama"]))
    (d / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(ArgumentError, match=r"pytorch_model\.bin.*safetensors"):
        verify_hf(str(d))
    (d / "pytorch_model.bin").unlink()  # a config folder: nlaverify's seeded weights
    assert verify_hf(str(d), seq_len=N, exact=True).weights.startswith("nlaverify init")


def test_size_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model above the parameter limit is refused before anything is allocated."""
    from nlaverify.graph.build import build_transformer, parameter_counts

    total = parameter_counts(build_transformer(hf_config.load_hf_config(
        CONFIGS["gpt2"]).config)).total
    with pytest.raises(ArgumentError, match=f"above the limit of {total - 1:,}") as exc:
        verify_hf(CONFIGS["gpt2"], max_params=total - 1)
    # the size in a unit that shows it (it said "about 0.0 GiB") and the flag's own name
    assert " 0.0 " not in str(exc.value) and "--max-params" in str(exc.value)
    monkeypatch.setenv("NLAVERIFY_HF_MAX_PARAMS", str(total - 1))
    with pytest.raises(ArgumentError, match="NLAVERIFY_HF_MAX_PARAMS"):
        verify_hf(CONFIGS["gpt2"])
    assert verify_hf(CONFIGS["gpt2"], seq_len=N, exact=True, max_params=total).ok
    with pytest.raises(ArgumentError, match="max_params"):
        verify_hf(CONFIGS["gpt2"], max_params=0)


def test_config_hf_refuses_is_a_config_error() -> None:
    """A config nlaverify can read but transformers' strict validation refuses (hidden 10
    not a multiple of 4 heads, with head_dim 6) is a ConfigError, not HF's traceback."""
    cfg = dict(_RMS, model_type="llama", hidden_size=10, num_attention_heads=4,
               num_key_value_heads=4, head_dim=6)
    with pytest.raises(ConfigError, match=r"transformers .* refuses"):
        verify_hf(cfg, seq_len=N)


def test_rows_come_from_check_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """One node-comparison engine: every node row of verify_hf is a row of check_model's
    compare_arrays, so a change there (here: every error doubled) changes verify_hf."""
    from nlaverify.check import model as check_model_module

    real = check_model_module.compare_arrays
    seen: list[str] = []

    def doubled(*args, **kwargs):
        row = real(*args, **kwargs)
        seen.append(row.check)
        return row.__class__(**{**row.__dict__, "error": 2 * row.error})

    before = verify_hf(CONFIGS["qwen2"], seq_len=N, exact=True)
    monkeypatch.setattr(check_model_module, "compare_arrays", doubled)
    after = verify_hf(CONFIGS["qwen2"], seq_len=N, exact=True)
    assert [f"node {r.node}" for r in after.rows] == [c for c in seen if c.startswith("node ")]
    for b, a in zip(before.rows, after.rows, strict=True):
        assert a.error == 2 * b.error and a.bound == b.bound
    assert len(after.gradients) == len(before.gradients)


@pytest.mark.parametrize("name", ["llama", "gemma"])
def test_pad_token_among_the_tokens_is_not_a_failure(name: str) -> None:
    """HF's nn.Embedding(padding_idx=pad_token_id) gives the pad row no gradient (a training
    convention); with the pad token among the inputs a healthy model failed at
    model.embed_tokens.weight. The convention is cleared: the function's gradient is
    compared (Gemma always has pad 0)."""
    cfg = dict(CONFIGS[name], pad_token_id=0)
    r = verify_hf(cfg, tokens=np.array([5, 0, 7, 1, 0]), exact=True)
    assert r.ok and r.first_gradient_divergence is None
