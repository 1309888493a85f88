"""``nlaverify transform``: steps applied in turn to a preset or a Hugging Face checkpoint,
each checked node by node against its input; the result written as a checkpoint only when
every check passes, and read back equal; bad steps and outputs refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nlaverify.cli import main
from nlaverify.graph.build import build_transformer
from nlaverify.graph.run import init_params
from nlaverify.interop.hf_config import hf_config_dict, load_hf_config
from nlaverify.interop.weights import load_checkpoint, params_to_hf, save_safetensors
from nlaverify.tolerance import tolerance

LLAMA = {"model_type": "llama", "vocab_size": 13, "num_hidden_layers": 2,
         "max_position_embeddings": 16, "intermediate_size": 24, "hidden_size": 16,
         "num_attention_heads": 2, "num_key_value_heads": 1}


@pytest.fixture()
def llama_dir(tmp_path):
    cfg = load_hf_config(LLAMA).config
    params = init_params(build_transformer(cfg), 3)
    rng = np.random.default_rng(0)  # gains away from 1, so that the fold matters
    params = {k: v * (1 + 0.3 * rng.standard_normal(v.shape)) if "gamma" in k else v
              for k, v in params.items()}
    folder = tmp_path / "llama"
    folder.mkdir()
    save_safetensors(folder / "model.safetensors", params_to_hf(cfg, "llama", params))
    (folder / "config.json").write_text(json.dumps(hf_config_dict(cfg, "llama")))
    return folder


def test_preset_chain(capsys) -> None:
    assert main(["transform", "--steps", "fold-norms,center-writers,center-unembedding",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and [r["step"] for r in out["steps"]] == [
        "fold-norms", "center-writers", "center-unembedding"]
    assert all(r["nodes"] > 20 and r["worst_ratio"] < 1 for r in out["steps"])


def test_checkpoint_rotated_and_written(llama_dir, tmp_path, capsys) -> None:
    out_dir = tmp_path / "rotated"
    assert main(["transform", "--hf", str(llama_dir), "--steps", "fold-norms,rotate:random",
                 "--out", str(out_dir)]) == 0
    text = capsys.readouterr().out
    assert "rotate:random" in text and f"written to {out_dir}" in text
    hf, params = load_checkpoint(out_dir, dtype=np.float64)
    assert hf.model_type == "llama"
    assert all(np.all(v == 1.0) for k, v in params.items() if "gamma" in k)  # folded: exactly
    # the written checkpoint computes the original's logits (read back through interop)
    hf0, params0 = load_checkpoint(llama_dir, dtype=np.float64)
    tokens = np.array([1, 5, 2, 12, 7, 3])
    z0, z1 = (_logits(h.config, p, tokens) for h, p in ((hf0, params0), (hf, params)))
    assert tolerance("float64", size=16, depth=12).compare(z1, z0).ok


def _logits(cfg, params, tokens):
    from nlaverify.backends import get_namespace
    from nlaverify.graph.core import evaluate
    from nlaverify.graph.run import graph_inputs

    g, xp = build_transformer(cfg), get_namespace("numpy")
    return evaluate(g, xp, graph_inputs(g, xp, params, {"tokens": tokens}, "float64"),
                    outputs=["logits"])["logits"]


def test_refusals(capsys) -> None:
    assert main(["transform", "--steps", "fold-norms,squash"]) == 2
    assert "argument '--steps'" in capsys.readouterr().err
    assert main(["transform", "--steps", "rotate"]) == 2  # tiny is a LayerNorm model
    assert "needs RMSNorm" in capsys.readouterr().err
    assert main(["transform", "--steps", "fold-norms", "--out", "/proc/x"]) == 2
    assert "--out '/proc/x': cannot write" in capsys.readouterr().err
