r"""A Gemma 3 multimodal checkpoint (``Gemma3ForConditionalGeneration``, ``model_type:
gemma3``): its language model's weights read by ``load_checkpoint`` (issue 23).

Oracle: ``transformers``' own ``save_pretrained`` of a tiny random
``Gemma3ForConditionalGeneration`` (text d = 16, 2 layers, vocab 32; a one-layer SigLIP of
width 8), in the saved layout (``language_model.model.*``, ``vision_tower.*``,
``multi_modal_projector.*``) and in memory (``model.language_model.*``); its text-only
forward in float64 against the graph on the loaded weights, to the float32 tolerance model
(stock ``Gemma3RMSNorm`` computes in float32). Non-vacuous: the same weights with two layers'
``up_proj`` swapped fail the comparison; a key mix-up is refused by name; ``verify --hf`` on
the folder agrees node by node with ``--hf-exact``.
"""

from __future__ import annotations

import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.errors import UnknownNameError
from nlaverify.graph.build import build_transformer
from nlaverify.graph.core import evaluate
from nlaverify.graph.run import graph_inputs
from nlaverify.interop.weights import load_checkpoint, params_from_hf
from nlaverify.tolerance import tolerance

TEXT = dict(vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=8, intermediate_size=20, max_position_embeddings=16,
            sliding_window=3, query_pre_attn_scalar=6,
            layer_types=["sliding_attention", "full_attention"])
VISION = dict(hidden_size=8, intermediate_size=12, num_hidden_layers=1, num_attention_heads=2,
              image_size=8, patch_size=4, num_channels=3)
TOKENS = np.array([3, 17, 5, 28, 9], dtype=np.int64)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.Gemma3Config(text_config=TEXT, vision_config=VISION,
                                    mm_tokens_per_image=1, image_token_index=31,
                                    boi_token_index=29, eoi_token_index=30)
    model = transformers.Gemma3ForConditionalGeneration(cfg).to(torch.float64)
    with torch.no_grad():  # norm gains away from 0 (HF initialises them to 0)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(torch.randn_like(p) / 4)
    path = tmp_path_factory.mktemp("gemma3_mm")
    model.save_pretrained(path)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(TOKENS)[None]).logits[0].numpy()
    return path, model, logits


def _graph_logits(config, params) -> np.ndarray:
    g = build_transformer(config)
    xp = get_namespace("numpy")
    data = {"tokens": TOKENS, "targets": np.roll(TOKENS, -1)}
    return np.asarray(evaluate(g, xp, graph_inputs(g, xp, params, data),
                               outputs=["logits"])["logits"])


def _tol(config):
    # stock Gemma3RMSNorm computes in float32: k = d, four norms per block, embedding, head
    return tolerance("float32", size=config.d_model, depth=4 * config.n_blocks + 2)


def test_saved_checkpoint_logits_match_hf_text_forward(saved) -> None:
    path, model, hf_logits = saved
    from safetensors.numpy import load_file

    keys = set(load_file(str(path / "model.safetensors")))
    assert any(k.startswith("language_model.model.") for k in keys)  # the saved layout
    assert any(k.startswith("vision_tower.") for k in keys)
    hf, params = load_checkpoint(path, dtype=np.float64)
    assert hf.model_type == "gemma3_text" and "vision tower" in hf.note
    c = _tol(hf.config).compare(_graph_logits(hf.config, params), hf_logits)
    assert c.ok, c
    # the in-memory layout (model.language_model.*, lm_head.weight, model.vision_tower.*)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    assert "model.language_model.layers.0.self_attn.q_proj.weight" in state
    again = params_from_hf(hf, state)
    assert all(np.array_equal(again[k], params[k]) for k in params)
    # planted: layers 0 and 1 of up_proj swapped (same shapes) -> the logits disagree
    bad = dict(params)
    bad["blocks.0.mlp.up.W_up"], bad["blocks.1.mlp.up.W_up"] = (params["blocks.1.mlp.up.W_up"],
                                                          params["blocks.0.mlp.up.W_up"])
    assert not _tol(hf.config).compare(_graph_logits(hf.config, bad), hf_logits).ok


def test_key_mix_ups_refused_by_name(saved) -> None:
    path, model, _ = saved
    hf, _ = load_checkpoint(path)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    # a Gemma3ForCausalLM key beside the multimodal ones: two layouts mixed
    mixed = dict(state)
    mixed["model.norm.weight"] = mixed.pop("model.language_model.norm.weight")
    with pytest.raises(UnknownNameError, match=r"'model\.norm\.weight'.*neither layout"):
        params_from_hf(hf, mixed)
    # a language-model key misspelled: refused, and the missing one named as given
    typo = dict(state)
    typo["model.language_model.layers.0.self_attn.qq_proj.weight"] = typo.pop(
        "model.language_model.layers.0.self_attn.q_proj.weight")
    with pytest.raises(UnknownNameError, match=r"unknown key 'model\.language_model\.layers"
                                               r"\.0\.self_attn\.qq_proj\.weight'"):
        params_from_hf(hf, typo)
    gone = {k: v for k, v in state.items() if "layers.1.mlp.down_proj" not in k}
    with pytest.raises(UnknownNameError, match=r"missing key 'model\.language_model\.layers"
                                               r"\.1\.mlp\.down_proj\.weight'"):
        params_from_hf(hf, gone)
    # the same tensor in both spellings
    twice = dict(state)
    twice["language_model.model.norm.weight"] = twice["model.language_model.norm.weight"]
    with pytest.raises(UnknownNameError, match="given twice"):
        params_from_hf(hf, twice)


def test_verify_hf_on_the_folder(saved) -> None:
    from nlaverify.interop.hf_verify import format_hf_report, verify_hf

    path, _, _ = saved
    r = verify_hf(str(path), seq_len=5, exact=True)
    assert r.ok and r.first_divergence is None, format_hf_report(r)
    assert "vision tower and multimodal projector are not modelled" in format_hf_report(r)
    w = next(c for c in r.checks if c.name.startswith("weights:"))
    assert w.ok, w  # HF holds what nlaverify read (one rounding of 1 + w and back)
