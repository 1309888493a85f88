"""nlaverify.interop.weights: Hugging Face state dicts and safetensors <-> graph parameters.

The independent oracle is ``transformers`` itself: the tiny model it builds from
``hf_config_dict`` must have exactly the keys and shapes ``params_to_hf`` writes, accept them
with ``load_state_dict(strict=True)``, and compute the same logits (and gradients) as the
nlaverify graph on the same weights. Planted mapping mistakes must fail those checks.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.config import TransformerConfig
from nlaverify.errors import ArgumentError, ShapeError, UnknownNameError
from nlaverify.graph.build import build_transformer, parameter_counts
from nlaverify.graph.core import evaluate
from nlaverify.graph.run import graph_inputs, init_params, run_graph
from nlaverify.interop import weights as W
from nlaverify.interop import weights_layout as WL
from nlaverify.interop.hf_config import hf_config_dict, load_hf_config
from nlaverify.tolerance import tolerance

DATA = Path(__file__).resolve().parents[1] / "nlaverify" / "data" / "hf_configs"
TOKENS = np.array([1, 5, 2, 12, 7, 3], dtype=np.int64)
TARGETS = np.array([5, 2, 12, 7, 3, 0], dtype=np.int64)
_SIZES = {"vocab_size": 13, "num_hidden_layers": 2, "max_position_embeddings": 16,
          "intermediate_size": 24}

#: one tiny config.json per model type, each exercising that type's conventions
TINY: dict[str, dict] = {
    "gpt2": {"model_type": "gpt2", "vocab_size": 13, "n_embd": 16, "n_head": 4, "n_layer": 2,
             "n_inner": 24, "n_positions": 16},
    # GQA (2 query heads per key/value head) and Llama-3.1 RoPE scaling whose smooth band
    # holds theta_1 (wavelength 62.8 between L/high = 16 and L/low = 64)
    "llama": {"model_type": "llama", **_SIZES, "hidden_size": 16, "num_attention_heads": 2,
              "num_key_value_heads": 1, "rope_theta": 10000.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 64}},
    "mistral": {"model_type": "mistral", **_SIZES, "hidden_size": 16,
                "num_attention_heads": 4, "num_key_value_heads": 2, "sliding_window": 3},
    "mixtral": {"model_type": "mixtral", **_SIZES, "hidden_size": 16,
                "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
                "num_experts_per_tok": 2},
    "qwen2": {"model_type": "qwen2", **_SIZES, "hidden_size": 16, "num_attention_heads": 4,
              "num_key_value_heads": 2, "tie_word_embeddings": True},
    "qwen3": {"model_type": "qwen3", **_SIZES, "hidden_size": 16, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 8},
    "gemma": {"model_type": "gemma", **_SIZES, "hidden_size": 16, "num_attention_heads": 4,
              "num_key_value_heads": 1, "head_dim": 8},
}


def _config(mt: str) -> TransformerConfig:
    return load_hf_config(TINY[mt]).config


def _params(mt: str) -> dict[str, np.ndarray]:
    return init_params(build_transformer(_config(mt)), seed=0)


def _graph_logits(cfg: TransformerConfig, params: dict[str, np.ndarray]) -> np.ndarray:
    g = build_transformer(cfg)
    xp = get_namespace("numpy")
    data = {"tokens": TOKENS, "targets": TARGETS}
    return np.asarray(evaluate(g, xp, graph_inputs(g, xp, params, data),
                               outputs=["logits"])["logits"])


def _tol(mt: str, cfg: TransformerConfig):
    # Stock HF Llama-family models compute RMSNorm, the RoPE angles and the attention softmax
    # in float32 even in a float64 model (helper C's hf_verify patches them for exact float64
    # comparisons), so the logits agree to the float32 tolerance model: k = d_model, one stage
    # per sub-block plus embedding and head. GPT-2 stays in float64 throughout.
    dtype = "float64" if mt == "gpt2" else "float32"
    return tolerance(dtype, size=cfg.d_model, depth=2 * cfg.n_blocks + 2)


# --- pure NumPy ---------------------------------------------------------------------------


def test_rope_permutation_pairs_hf_halves():
    perm = W.rope_permutation(8)
    assert perm.tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    hf = np.arange(8) * 10.0
    ours = hf[perm]
    # nlaverify's pair (2i, 2i+1) is HF's pair (i, i + d_h/2)
    assert [(ours[2 * i], ours[2 * i + 1]) for i in range(4)] == [
        (hf[i], hf[i + 4]) for i in range(4)]
    for bad in (7, 0, True, 2.0):
        with pytest.raises(ArgumentError, match="d_head"):
            W.rope_permutation(bad)


@pytest.mark.parametrize("mt", list(TINY))
def test_params_round_trip_exact(mt):
    cfg, params = _config(mt), _params(mt)
    back = W.params_from_hf((cfg, mt), W.params_to_hf(cfg, mt, params))
    assert set(back) == set(params)
    for k in params:
        assert np.array_equal(back[k], params[k]), k


def test_gradients_map_without_gemma_offset():
    cfg, params = _config("gemma"), _params("gemma")
    with_offset = W.params_to_hf(cfg, "gemma", params)
    grads = W.params_to_hf(cfg, "gemma", params, gradients=True)
    key = "model.layers.0.input_layernorm.weight"
    assert np.array_equal(with_offset[key], params["blocks.0.norm1.gamma"] - 1)
    assert np.array_equal(grads[key], params["blocks.0.norm1.gamma"])
    assert np.array_equal(grads["lm_head.weight"], params["embed.W_E"])


def test_malformed_state_dicts_are_named():
    cfg, mt = _config("llama"), "llama"
    good = W.params_to_hf(cfg, mt, _params(mt))
    snapshot = {k: v.copy() for k, v in good.items()}
    key = "model.layers.0.self_attn.q_proj.weight"
    with pytest.raises(ShapeError, match=r"params_from_hf: key 'model\.layers\.0\.self_attn\."
                                         r"q_proj\.weight': expected shape \(16, 16\), got "
                                         r"\(16, 8\)"):
        W.params_from_hf((cfg, mt), {**good, key: good[key][:, :8]})
    with pytest.raises(UnknownNameError, match=r"missing key 'model\.norm\.weight'"):
        W.params_from_hf((cfg, mt), {k: v for k, v in good.items() if k != "model.norm.weight"})
    with pytest.raises(UnknownNameError, match=r"unknown key 'model\.layers\.2\.mlp\."):
        W.params_from_hf((cfg, mt), {**good, "model.layers.2.mlp.up_proj.weight": good[
            "model.layers.0.mlp.up_proj.weight"]})
    with pytest.raises(UnknownNameError, match="given twice"):
        W.params_from_hf((cfg, mt), {**good, "norm.weight": good["model.norm.weight"]})
    with pytest.raises(UnknownNameError, match=r"unknown key 'model\.layers\.0\.self_attn\."
                                               r"q_proj\.bias'"):  # no attention_bias
        W.params_from_hf((cfg, mt), {**good, "model.layers.0.self_attn.q_proj.bias":
                                     np.zeros(16)})
    with pytest.raises(ShapeError, match=r"params_to_hf: parameter 'embed\.W_E'"):
        W.params_to_hf(cfg, mt, {**_params(mt), "embed.W_E": np.zeros((13, 8))})
    with pytest.raises(UnknownNameError, match="params_to_hf: no value for parameter node"):
        W.params_to_hf(cfg, mt, {k: v for k, v in _params(mt).items() if k != "embed.W_E"})
    # the caller's mapping is untouched by a failed load
    assert all(np.array_equal(good[k], snapshot[k]) for k in snapshot) and set(good) == set(
        snapshot)


def test_prefixes_tied_head_and_checkpoint_layouts():
    cfg, mt = _config("qwen2"), "qwen2"  # tied embeddings
    good = W.params_to_hf(cfg, mt, _params(mt))
    bare = {k.removeprefix("model."): v for k, v in good.items()}  # base-model keys
    ref = W.params_from_hf((cfg, mt), good)
    for state in (bare, {k: v for k, v in good.items() if k != "lm_head.weight"}):
        got = W.params_from_hf((cfg, mt), state)
        assert all(np.array_equal(got[k], ref[k]) for k in ref)
    with pytest.raises(ArgumentError, match=r"lm_head\.weight differs"):
        W.params_from_hf((cfg, mt), {**good, "lm_head.weight": good["lm_head.weight"] + 1})
    # errors name keys as the caller spelled them (no "model." added)
    with pytest.raises(ShapeError, match=r"key 'norm\.weight': expected shape"):
        W.params_from_hf((cfg, mt), {**bare, "norm.weight": np.zeros(3)})
    with pytest.raises(UnknownNameError, match=r"unknown key 'foo'"):
        W.params_from_hf((cfg, mt), {**bare, "foo": np.zeros(3)})
    with pytest.raises(UnknownNameError, match=r"missing key 'norm\.weight'"):
        W.params_from_hf((cfg, mt), {k: v for k, v in bare.items() if k != "norm.weight"})


def test_mixtral_per_expert_checkpoint_layout():
    cfg, mt = _config("mixtral"), "mixtral"
    params = _params(mt)
    fused = W.params_to_hf(cfg, mt, params)
    legacy = {}
    m = cfg.d_mlp
    for k, v in fused.items():
        k = k.replace(".mlp.gate.", ".block_sparse_moe.gate.")
        if k.endswith("experts.gate_up_proj"):
            base = k.replace("mlp.experts.gate_up_proj", "block_sparse_moe.experts.")
            for e in range(cfg.n_experts):
                legacy[f"{base}{e}.w1.weight"] = v[e, :m]
                legacy[f"{base}{e}.w3.weight"] = v[e, m:]
        elif k.endswith("experts.down_proj"):
            base = k.replace("mlp.experts.down_proj", "block_sparse_moe.experts.")
            for e in range(cfg.n_experts):
                legacy[f"{base}{e}.w2.weight"] = v[e]
        else:
            legacy[k] = v
    got = W.params_from_hf((cfg, mt), legacy)
    assert all(np.array_equal(got[k], params[k]) for k in params)
    gone = "model.layers.1.block_sparse_moe.experts.3.w2.weight"
    with pytest.raises(UnknownNameError, match=r"missing key 'model\.layers\.1\."
                                               r"block_sparse_moe\.experts\.3\.w2\.weight'"):
        W.params_from_hf((cfg, mt), {k: v for k, v in legacy.items() if k != gone})
    with pytest.raises(UnknownNameError, match="n_experts=4"):
        W.params_from_hf((cfg, mt), {**legacy, gone.replace(".3.", ".4."): legacy[gone]})
    with pytest.raises(UnknownNameError, match=r"'model\.layers\.5\..*n_blocks=2"):
        W.params_from_hf((cfg, mt), {**legacy, gone.replace(".1.", ".5.", 1): legacy[gone]})


def test_gpt2_legacy_mask_buffer():
    cfg, mt = _config("gpt2"), "gpt2"
    good = {k.removeprefix("transformer."): v for k, v in W.params_to_hf(
        cfg, mt, _params(mt)).items()}  # the layout of the released gpt2 checkpoint
    mask = np.tri(16)[None, None]
    W.params_from_hf((cfg, mt), {**good, "h.0.attn.bias": mask, "h.1.attn.bias": mask})
    with pytest.raises(ArgumentError, match="lower-triangular"):
        W.params_from_hf((cfg, mt), {**good, "h.0.attn.bias": np.ones((1, 1, 16, 16))})
    # transformers 4.x saved the mask as bool (or uint8): accepted
    for dt in (bool, np.uint8):
        W.params_from_hf((cfg, mt), {**good, "h.0.attn.bias": mask.astype(dt)})
    with pytest.raises(ArgumentError, match=r"'h\.1\.attn\.bias'.*lower-triangular"):
        W.params_from_hf((cfg, mt), {**good, "h.1.attn.bias": np.ones((1, 1, 16, 16), bool)})


def test_gemma_offset_in_float64_when_asked():
    """Gemma's gamma = 1 + w of a float32 checkpoint: rounded to float32 by default (dtypes
    kept), exact with dtype=float64 (what HF's float64 model computes)."""
    cfg, mt = _config("gemma"), "gemma"
    state = {k: v.astype(np.float32) for k, v in W.params_to_hf(cfg, mt, _params(mt)).items()}
    w = state["model.layers.0.input_layernorm.weight"].astype(np.float64)
    got = W.params_from_hf((cfg, mt), state, dtype=np.float64)["blocks.0.norm1.gamma"]
    assert got.dtype == np.float64 and np.array_equal(got, 1.0 + w)
    kept = W.params_from_hf((cfg, mt), state)["blocks.0.norm1.gamma"]
    assert kept.dtype == np.float32 and not np.array_equal(kept, 1.0 + w)
    with pytest.raises(Exception, match="floating dtype"):
        W.params_from_hf((cfg, mt), state, dtype=np.int32)


def test_lora_is_not_dropped_on_export():
    from nlaverify.config import ConfigError

    cfg = _config("llama").replace(lora_rank=2)
    with pytest.raises(ConfigError, match=r"lora_rank=2.*merge_lora"):
        W.params_to_hf(cfg, "llama", init_params(build_transformer(cfg), seed=0))


def test_load_checkpoint_directory(tmp_path):
    cfg, mt = _config("gemma"), "gemma"
    params = _params(mt)
    (tmp_path / "config.json").write_text(json.dumps(hf_config_dict(cfg, mt)))
    W.save_safetensors(tmp_path / "model.safetensors", W.params_to_hf(cfg, mt, params))
    hf, got = W.load_checkpoint(tmp_path)
    assert hf.config == cfg and hf.model_type == mt
    assert all(np.array_equal(got[k], params[k]) for k in params)


# --- against transformers -----------------------------------------------------------------


@pytest.fixture(scope="session")
def hf():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    return torch, transformers


@pytest.fixture(scope="session")
def models(hf):
    """One tiny float64 HF model per model type, holding nlaverify's seeded parameters."""
    torch, transformers = hf
    out = {}
    for mt in TINY:
        cfg = _config(mt)
        hf_cfg = transformers.AutoConfig.for_model(**hf_config_dict(cfg, mt))
        # transformers 5 runs fused experts with grouped_mm, which has no float64 kernel
        extra = {"experts_implementation": "eager"} if cfg.n_experts else {}
        model = transformers.AutoModelForCausalLM.from_config(hf_cfg, dtype=torch.float64,
                                                              **extra).eval()
        out[mt] = (cfg, model)
    return out


def _load(torch, model, state):
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in
                           state.items()}, strict=True)


def _hf_logits(torch, model) -> np.ndarray:
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(TOKENS)[None]).logits[0].numpy()


@pytest.mark.parametrize("mt", list(TINY))
def test_state_dict_keys_shapes_and_logits_match_hf(hf, models, mt):
    torch, _ = hf
    cfg, model = models[mt]
    params = _params(mt)
    state = W.params_to_hf(cfg, mt, params)
    sd = model.state_dict()
    assert set(state) == set(sd)
    assert {k: state[k].shape for k in sd} == {k: tuple(v.shape) for k, v in sd.items()}
    _load(torch, model, state)
    back = W.params_from_hf((cfg, mt), model.state_dict())  # torch tensors in
    assert all(np.array_equal(back[k], params[k]) for k in params)
    c = _tol(mt, cfg).compare(_graph_logits(cfg, params), _hf_logits(torch, model))
    assert c.ok, (mt, c)


def test_torch_bfloat16_tensors_become_ml_dtypes(hf, models):
    torch, _ = hf
    ml_dtypes = pytest.importorskip("ml_dtypes")
    cfg, model = models["gemma"]
    state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    got = W.params_from_hf((cfg, "gemma"), state)
    assert got["embed.W_E"].dtype == ml_dtypes.bfloat16
    assert np.array_equal(got["embed.W_E"].astype(np.float64),
                          state["model.embed_tokens.weight"].double().numpy())


def _plant(mt, cfg, params, monkeypatch):
    """Planted mapping mistakes: ``(name, HF state, graph config)`` that must be caught."""
    if mt == "llama":
        square = "model.layers.0.self_attn.o_proj.weight"  # (d, H d_h) = (16, 16)
        state = W.params_to_hf(cfg, mt, params)
        yield "transposed square projection", {**state, square: state[square].T}, cfg
        with monkeypatch.context() as m:
            m.setattr(WL, "rope_permutation", lambda dh: np.arange(dh))
            yield "wrong RoPE pairing", W.params_to_hf(cfg, mt, params), cfg
        yield "RoPE scaling dropped", state, cfg.replace(rope_scaling=None)
    elif mt == "gemma":
        yield "Gemma offset dropped", W.params_to_hf(cfg, mt, params, gradients=True), cfg
        yield "embedding scale dropped", W.params_to_hf(cfg, mt, params), cfg.replace(
            embed_scale=False)
    elif mt == "mistral":
        yield "sliding window dropped", W.params_to_hf(cfg, mt, params), cfg.replace(
            sliding_window=None)
    elif mt == "mixtral":
        swapped = {**params}
        for layer in range(cfg.n_blocks):
            p = f"blocks.{layer}.mlp."
            swapped[p + "W1"], swapped[p + "W3"] = params[p + "W3"], params[p + "W1"]
        yield "gate and up experts swapped", W.params_to_hf(cfg, mt, swapped), cfg
    elif mt == "gpt2":
        state = W.params_to_hf(cfg, mt, params)
        k = "transformer.h.0.attn.c_attn.weight"
        d = cfg.d_model
        qkv = state[k]
        yield "fused q and k swapped", {**state, k: np.concatenate(
            [qkv[:, d:2 * d], qkv[:, :d], qkv[:, 2 * d:]], axis=1)}, cfg


@pytest.mark.parametrize("mt", ["llama", "gemma", "mistral", "mixtral", "gpt2"])
def test_planted_mapping_mistakes_fail_the_logits_check(hf, models, mt, monkeypatch):
    torch, _ = hf
    cfg, model = models[mt]
    params = _params(mt)
    planted = 0
    for name, state, graph_cfg in _plant(mt, cfg, params, monkeypatch):
        _load(torch, model, state)
        c = _tol(mt, cfg).compare(_graph_logits(graph_cfg, params), _hf_logits(torch, model))
        assert not c.ok, f"{mt}: planted mistake '{name}' was not caught ({c})"
        planted += 1
    assert planted


@pytest.mark.parametrize("mt", ["gemma", "mixtral"])
def test_gradients_match_hf(hf, models, mt):
    """``params_to_hf(..., gradients=True)`` of the graph's gradients equals HF's ``.grad``
    (Gemma: no offset on the norm gains, the tied head's gradient in the embedding's;
    Mixtral: the fused expert layout)."""
    torch, _ = hf
    cfg, model = models[mt]
    params = _params(mt)
    _load(torch, model, W.params_to_hf(cfg, mt, params))
    model.zero_grad()
    logits = model(input_ids=torch.from_numpy(TOKENS)[None]).logits[0]
    # nlaverify's loss: mean cross-entropy of logits_t against targets_t (no shift)
    torch.nn.functional.cross_entropy(logits, torch.from_numpy(TARGETS)).backward()
    ev = run_graph(build_transformer(cfg), "numpy", params,
                   {"tokens": TOKENS, "targets": TARGETS})
    grads = W.params_to_hf(cfg, mt, {k: np.asarray(ev.cotangents[k]) for k in params},
                           gradients=True)
    # float32 inside stock HF (see _tol); forward and backward: twice the stages
    tol = tolerance("float32", size=cfg.d_model, depth=2 * (2 * cfg.n_blocks + 2))
    for name, p in model.named_parameters():
        c = tol.compare(grads[name], p.grad.numpy())
        assert c.ok, (mt, name, c)


def test_hf_save_pretrained_checkpoint_loads(hf, models, tmp_path):
    """A checkpoint as transformers writes it (save_pretrained: config.json and
    model.safetensors, Mixtral's experts in its on-disk layout) loads back exactly."""
    torch, _ = hf
    for mt in ("mixtral", "gpt2"):
        cfg, model = models[mt]
        params = _params(mt)
        _load(torch, model, W.params_to_hf(cfg, mt, params))
        model.save_pretrained(tmp_path / mt)
        hfc, got = W.load_checkpoint(tmp_path / mt)
        assert hfc.config == cfg
        assert all(np.array_equal(got[k], params[k]) for k in params), mt


#: Gemma Team 2024, Table 2: embedding and non-embedding parameters, with the paper's
#: vocabulary of 256,128 entries (the released checkpoints have 256,000)
GEMMA_PAPER = {"gemma-2b": (524_550_144, 1_981_884_416), "gemma-7b": (786_825_216,
                                                                     7_751_248_896)}


@pytest.mark.parametrize("name", ["llama-3.1-405b", "gemma-2b", "gemma-7b"])
def test_parameter_counts_published_and_hf_meta(hf, name):
    torch, transformers = hf
    h = load_hf_config(DATA / f"{name}.json")
    counts = parameter_counts(build_transformer(h.config))
    # the meta device allocates nothing: 405B builds in < 1 s (about 3 s cold, one core)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**h.raw))
    assert counts.total == sum(p.numel() for p in model.parameters())
    d, V = h.config.d_model, h.config.vocab_size
    if name == "llama-3.1-405b":
        assert counts.total == 405_853_388_800  # HF meta-llama/Llama-3.1-405B safetensors total
    else:
        embedding, non_embedding = GEMMA_PAPER[name]
        assert embedding == 256_128 * d and V == 256_000
        assert counts.by_component["embedding"] == V * d
        assert counts.total - V * d == non_embedding
        assert counts.total == embedding + non_embedding - 128 * d
