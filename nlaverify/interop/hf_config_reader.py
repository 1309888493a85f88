"""Reading a Hugging Face ``config.json``: the source (dict, file or checkpoint directory) and
the typed reader of its fields that remembers which keys were used, so that an unknown key is
refused by name. Used by :func:`nlaverify.interop.hf_config.load_hf_config` and the per-type
readers (``hf_config_*.py``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nlaverify.config import ConfigError
from nlaverify.interop.hf_config_tables import HF_DEFAULTS, IGNORED, IGNORED_ONLY

__all__ = ["Reader", "read_source", "typed"]


class Reader:
    """Reads typed fields of one config dict, remembering which keys were used."""

    def __init__(self, d: Mapping[str, Any], model_type: str) -> None:
        self.d, self.mt, self.used = d, model_type, {"model_type"}

    def has(self, key: str) -> bool:
        return key in self.d

    def raw(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return self.d.get(key, default)

    def get(self, key: str, kind: str, *, required: bool = False) -> Any:
        """The value of ``key`` (the HF class default when absent and not ``required``),
        checked to be of ``kind`` (``"int"``, ``"float"``, ``"bool"``, ``"str"``, with
        ``"int?"`` etc. allowing ``None``)."""
        self.used.add(key)
        if key not in self.d:
            if required:
                raise ConfigError(f"load_hf_config: {self.mt} config: missing required field "
                                  f"{key!r}")
            return HF_DEFAULTS[self.mt][key]
        return typed(self.mt, key, self.d[key], kind)

    def get_any(self, key: str, kind: str) -> Any:
        """``key`` checked to be of ``kind`` when present, else ``None``."""
        self.used.add(key)
        return typed(self.mt, key, self.d[key], kind) if key in self.d else None

    def check_unknown(self) -> None:
        import difflib

        extra = [k for k in self.d if k not in self.used and not str(k).startswith("_")
                 and (k not in IGNORED or self.mt not in IGNORED_ONLY.get(k, (self.mt,)))]
        if extra:
            close = difflib.get_close_matches(str(extra[0]), sorted(self.used), n=2)
            hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
            raise ConfigError(f"load_hf_config: {self.mt} config: unsupported key {extra[0]!r} "
                              f"= {self.d[extra[0]]!r}{hint}: nlaverify does not know what it "
                              "changes, so it is not ignored"
                              + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""))


_KINDS = {"int": "an integer", "float": "a finite number", "bool": "true or false",
          "str": "a string"}


def typed(mt: str, key: str, v: Any, kind: str) -> Any:
    """``v`` checked to be of ``kind`` (see :meth:`Reader.get`), else a ConfigError."""
    optional = kind.endswith("?")
    base = kind.rstrip("?")
    if v is None and optional:
        return None
    ok = {"int": isinstance(v, int) and not isinstance(v, bool),
          "float": isinstance(v, int | float) and not isinstance(v, bool)
          and math.isfinite(v),
          "bool": isinstance(v, bool), "str": isinstance(v, str)}[base]
    if not ok:
        raise ConfigError(f"load_hf_config: {mt} config: field {key!r}: expected "
                          f"{_KINDS[base]}{' or null' if optional else ''}, got {v!r}")
    return v


def read_source(source: Mapping[str, Any] | str | os.PathLike) -> tuple[dict[str, Any], str]:
    """The config dict and a name for it (the file's directory or stem)."""
    if isinstance(source, Mapping):
        return dict(source), ""
    if not isinstance(source, str | os.PathLike):
        raise ConfigError(f"load_hf_config: argument 'source': expected a dict, a config.json "
                          f"path or a checkpoint directory, got {type(source).__name__}")
    path = Path(source)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError(f"load_hf_config: argument 'source': no such file {str(path)!r}")
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"load_hf_config: {str(path)!r} is not valid UTF-8 JSON: {e}"
                          ) from None
    except OSError as e:
        raise ConfigError(f"load_hf_config: {str(path)!r}: not readable ({e})") from None
    if not isinstance(d, dict):
        raise ConfigError(f"load_hf_config: {str(path)!r}: expected a JSON object, got "
                          f"{type(d).__name__}")
    name = path.parent.name if path.name == "config.json" else path.stem
    return d, name
