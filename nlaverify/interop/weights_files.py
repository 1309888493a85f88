r"""``safetensors`` checkpoints read and written as NumPy arrays (torch not needed).

``safetensors`` 0.8 maps ``BF16`` to NumPy's ``"bfloat16"``, which exists once
``ml_dtypes`` (which JAX brings) is imported: this module imports it before every read and
write. Only safetensors is read: a directory holding only ``pytorch_model.bin`` (or another
format, :data:`FOREIGN_WEIGHTS`) is refused, naming the file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nlaverify.errors import ArgumentError, DTypeError


def _to_numpy(v: Any, key: str, fn: str) -> np.ndarray:
    if hasattr(v, "detach") and hasattr(v, "numpy"):  # a torch tensor, without importing torch
        # copied: an array sharing memory with a live model's parameter would change with it
        v = v.detach().cpu()
        if str(v.dtype) == "torch.bfloat16":  # NumPy has no bfloat16: reinterpret the bits
            import ml_dtypes
            import torch

            return v.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
        v = v.numpy().copy()
    arr = np.asarray(v)
    if arr.dtype.kind not in "fV" or (arr.dtype.kind == "V" and "bfloat16" not in str(
            arr.dtype)):
        raise DTypeError(f"{fn}: key {key!r}: expected a floating dtype, got {arr.dtype}")
    return arr


#: weight files of other formats (HF's ``WEIGHTS_NAME`` etc.): nlaverify reads only
#: safetensors, and refuses a checkpoint directory holding only these
FOREIGN_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".pkl")


def foreign_weight_files(path: str | os.PathLike) -> list[str]:
    """The weight files in directory ``path`` nlaverify cannot read (``pytorch_model.bin``,
    ``tf_model.h5``, ``flax_model.msgpack``, their shard indexes...), sorted."""
    p = Path(path)
    if not p.is_dir():
        return []
    return sorted(f.name for f in p.iterdir() if f.is_file() and (
        f.name.endswith(FOREIGN_WEIGHTS) or f.name.endswith(
            tuple(e + ".index.json" for e in FOREIGN_WEIGHTS))))


def _safetensors_numpy() -> tuple[Any, Any, type[BaseException]]:
    """``(load_file, save_file, SafetensorError)`` of ``safetensors.numpy``, with
    ``ml_dtypes`` imported first: ``safetensors.numpy`` maps ``BF16`` to NumPy's
    ``"bfloat16"`` dtype, which exists only once ``ml_dtypes`` has registered it."""
    try:
        import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy)
    except ImportError:  # pragma: no cover - jax brings it
        pass
    from safetensors import SafetensorError
    from safetensors.numpy import load_file, save_file

    return load_file, save_file, SafetensorError


def _read_file(f: Path, what: str) -> dict[str, np.ndarray]:
    """The tensors of one safetensors file, or an ArgumentError naming it (truncated or not
    a safetensors file; a dtype NumPy lacks)."""
    load_file, _, safetensor_error = _safetensors_numpy()
    try:
        return dict(load_file(str(f)))
    except (safetensor_error, OSError, ValueError) as e:
        raise ArgumentError(f"load_safetensors: {what} {str(f)!r} is not a readable safetensors "
                            f"file ({type(e).__name__}: {e})") from None
    except TypeError as e:  # e.g. BF16 without ml_dtypes
        raise DTypeError(f"load_safetensors: {what} {str(f)!r}: {e} (BF16 needs ml_dtypes and "
                         "safetensors >= 0.8)") from None


def _read_index(p: Path, index: Path) -> dict[str, np.ndarray]:
    """A sharded checkpoint: every shard of ``index``'s ``weight_map``, validated."""
    try:
        doc = json.loads(index.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, OSError) as e:
        raise ArgumentError(f"load_safetensors: {str(index)!r} is not valid JSON ({e})"
                            ) from None
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict):
        raise ArgumentError(f"load_safetensors: {str(index)!r}: expected a JSON object with a "
                            f"'weight_map' object, got {type(doc).__name__}"
                            + ("" if not isinstance(doc, dict) else
                               f" whose weight_map is {type(weight_map).__name__}"))
    root = p.resolve()
    for k, shard in weight_map.items():
        if not isinstance(shard, str):
            raise ArgumentError(f"load_safetensors: {index.name}: weight_map[{k!r}]: expected "
                                f"a shard file name, got {shard!r}")
        if (p / shard).resolve().parent != root:
            raise ArgumentError(f"load_safetensors: {index.name}: weight_map[{k!r}] = "
                                f"{shard!r}: expected a file in the checkpoint directory")
    for shard in sorted(set(weight_map.values())):
        if not (p / shard).is_file():
            raise ArgumentError(f"load_safetensors: shard {shard!r} listed in {index.name} is "
                                "missing")
    out: dict[str, np.ndarray] = {}
    for shard in sorted(set(weight_map.values())):
        for k, v in _read_file(p / shard, "shard").items():
            if weight_map.get(k) != shard:
                raise ArgumentError(f"load_safetensors: tensor {k!r} is in shard {shard!r} but "
                                    f"the index maps it to {weight_map.get(k)!r}")
            out[k] = v
    missing = sorted(set(weight_map) - set(out))
    if missing:
        raise ArgumentError(f"load_safetensors: tensor {missing[0]!r} listed in {index.name} "
                            "is in no shard")
    return out


def load_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The tensors of a ``.safetensors`` file, or of a checkpoint directory, as NumPy arrays
    (``BF16`` as ``ml_dtypes.bfloat16``). A directory is read as ``transformers``'
    ``from_pretrained`` reads it (``modeling_utils._get_resolved_checkpoint_files``): its
    ``model.safetensors`` if present, else the shards listed in
    ``model.safetensors.index.json``'s ``weight_map`` (each a file of the directory itself).

    Raises:
        ArgumentError: no such file, a directory without a safetensors checkpoint (naming
            the ``pytorch_model.bin`` etc. it holds instead), an unreadable index or shard
            (invalid JSON, truncated file), a shard listed but missing or outside the
            directory, a tensor in two shards or in a shard the index does not name.
    """
    p = Path(path)
    if p.is_file():
        return _read_file(p, "file")
    if not p.is_dir():
        raise ArgumentError(f"load_safetensors: argument 'path': no such file or directory "
                            f"{str(p)!r}")
    single = p / "model.safetensors"
    if single.is_file():
        return _read_file(single, "file")
    index = p / "model.safetensors.index.json"
    if index.is_file():
        return _read_index(p, index)
    foreign = foreign_weight_files(p)
    raise ArgumentError(f"load_safetensors: {str(p)!r} holds neither model.safetensors nor "
                        "model.safetensors.index.json" + (
                            f" (it holds {', '.join(foreign)}: nlaverify reads only "
                            "safetensors; convert with transformers' save_pretrained(..., "
                            "safe_serialization=True))" if foreign else ""))


def save_safetensors(path: str | os.PathLike, tensors: Mapping[str, Any]) -> None:
    """Write ``tensors`` (NumPy arrays, ``ml_dtypes.bfloat16`` included) to one
    ``.safetensors`` file, atomically (a temporary file ``.NAME.*.tmp`` in the same
    directory, then ``os.replace``): the file is whole or untouched. A process killed
    mid-write can leave the temporary file behind (never a partial ``path``).

    Raises:
        ArgumentError: ``path``'s directory does not exist, or ``path`` is a directory; a
            non-string key. DTypeError: a non-floating tensor."""
    _, save_file, _ = _safetensors_numpy()
    if not isinstance(tensors, Mapping):
        raise ArgumentError(f"save_safetensors: argument 'tensors': expected a mapping, got "
                            f"{type(tensors).__name__}")
    arrays = {}
    for k, v in tensors.items():
        if not isinstance(k, str):
            raise ArgumentError(f"save_safetensors: key {k!r}: expected a string")
        arrays[k] = np.ascontiguousarray(_to_numpy(v, k, "save_safetensors"))
    target = Path(path)
    if target.is_dir():
        raise ArgumentError(f"save_safetensors: argument 'path': {str(target)!r} is a "
                            "directory, expected a file name")
    if not target.parent.is_dir():
        raise ArgumentError(f"save_safetensors: argument 'path': directory "
                            f"{str(target.parent)!r} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                               dir=str(target.parent))
    os.close(fd)
    try:
        save_file(arrays, tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
