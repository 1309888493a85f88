"""JSON reports that every parser reads: non-finite numbers become strings.

``json.dump`` writes ``NaN`` and ``Infinity``, which are not JSON; a failed check's error
(``inf``) or a skipped row's ``nan`` is written as the string ``"inf"``, ``"-inf"`` or
``"nan"`` instead.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, TextIO


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by its name, recursively."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def dump(obj: Any, stream: TextIO | None = None) -> None:
    """Write ``obj`` as strict JSON (indented, non-finite numbers as strings) and a newline."""
    out = sys.stdout if stream is None else stream
    json.dump(finite(obj), out, indent=2, allow_nan=False)
    out.write("\n")
