"""nlaverify.interop.weights: safetensors files and sharded checkpoint directories.

Round trips are exact (bfloat16 included, through ``ml_dtypes``); a write is atomic (bad
input leaves no file); every malformed index, truncated shard or unreadable directory is an
:class:`~nlaverify.errors.ArgumentError` naming the file or key at fault.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nlaverify.errors import ArgumentError
from nlaverify.interop import weights as W


def test_safetensors_round_trip_bf16_sharded_atomic(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    tensors = {"a": np.arange(6.0).reshape(2, 3), "b": np.arange(4).astype(ml_dtypes.bfloat16)}
    f = tmp_path / "x.safetensors"
    W.save_safetensors(f, tensors)
    back = W.load_safetensors(f)
    assert back["b"].dtype == ml_dtypes.bfloat16
    assert all(np.array_equal(back[k], tensors[k]) for k in tensors)
    with pytest.raises(Exception, match="'c'"):  # nothing written on bad input
        W.save_safetensors(f, {"c": np.array(["x"])})
    assert set(W.load_safetensors(f)) == {"a", "b"} and len(list(tmp_path.iterdir())) == 1
    # a sharded checkpoint directory
    d = tmp_path / "ckpt"
    d.mkdir()
    W.save_safetensors(d / "s1.safetensors", {"a": tensors["a"]})
    W.save_safetensors(d / "s2.safetensors", {"b": tensors["b"]})
    index = {"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    assert set(W.load_safetensors(d)) == {"a", "b"}
    index["weight_map"]["z"] = "s2.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ArgumentError, match="'z'"):
        W.load_safetensors(d)


def test_bf16_checkpoint_loads_in_a_fresh_interpreter(tmp_path):
    """safetensors.numpy needs ml_dtypes imported to name bfloat16: nlaverify must import it
    itself (this process has it already, so the load runs in a fresh one)."""
    import subprocess
    import sys

    ml_dtypes = pytest.importorskip("ml_dtypes")
    f = tmp_path / "b.safetensors"
    W.save_safetensors(f, {"b": np.arange(4).astype(ml_dtypes.bfloat16)})
    code = ("import sys; from nlaverify.interop.weights import load_safetensors; "
            "assert 'ml_dtypes' not in sys.modules; "
            f"print(load_safetensors({str(f)!r})['b'].dtype)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], check=False)
    assert out.returncode == 0 and out.stdout.strip() == "bfloat16", out.stderr[-500:]


def _shards(d: Path) -> dict:
    W.save_safetensors(d / "s1.safetensors", {"a": np.ones(2)})
    W.save_safetensors(d / "s2.safetensors", {"b": np.zeros(3)})
    return {"a": "s1.safetensors", "b": "s2.safetensors"}


@pytest.mark.parametrize(("index", "match"), [
    ("{not json", "not valid JSON"),
    ("[1]", "expected a JSON object with a 'weight_map' object, got list"),
    ('{"weight_map": ["a", "b"]}', "weight_map is list"),
    ('{"weight_map": {"a": 1, "b": 1}}', r"weight_map\['a'\]: expected a shard file name"),
    ('{"weight_map": {"a": "../s1.safetensors", "b": "s2.safetensors"}}',
     "expected a file in the checkpoint directory"),
    (b'{"weight_map": {"a": "s\xff.safetensors"}}', "not valid JSON"),
])
def test_malformed_shard_index_is_named(tmp_path, index, match):
    _shards(tmp_path)
    f = tmp_path / "model.safetensors.index.json"
    f.write_bytes(index if isinstance(index, bytes) else index.encode())
    with pytest.raises(ArgumentError, match=match):
        W.load_safetensors(tmp_path)


def test_truncated_shard_missing_dir_and_single_file_preferred(tmp_path):
    wm = _shards(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    with open(tmp_path / "s2.safetensors", "r+b") as fh:
        fh.truncate(20)
    with pytest.raises(ArgumentError, match=r"s2\.safetensors.*not a readable safetensors"):
        W.load_safetensors(tmp_path)
    # both a single file and an index: transformers' from_pretrained reads the single file
    W.save_safetensors(tmp_path / "model.safetensors", {"c": np.ones(1)})
    assert set(W.load_safetensors(tmp_path)) == {"c"}
    with pytest.raises(ArgumentError, match="does not exist"):
        W.save_safetensors(tmp_path / "no" / "x.safetensors", {"a": np.ones(1)})
    with pytest.raises(ArgumentError, match="is a directory"):
        W.save_safetensors(tmp_path, {"a": np.ones(1)})
    # a directory with only weights nlaverify cannot read names them
    other = tmp_path / "bin"
    other.mkdir()
    (other / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(ArgumentError, match=r"pytorch_model\.bin"):
        W.load_safetensors(other)
