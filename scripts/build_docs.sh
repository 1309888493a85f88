#!/usr/bin/env bash
# Build the documentation site into docs/_build/html, every warning an error.
# Usable from any directory; extra arguments go to sphinx-build (e.g. -E for a clean read).
# Needs the docs extra: python3 -m pip install -e '.[docs]'
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -x "$ROOT/.venv/bin/sphinx-build" ]]; then
    SPHINX="$ROOT/.venv/bin/sphinx-build"
else
    SPHINX="sphinx-build"
fi
exec "$SPHINX" -W --keep-going -b html "$@" "$ROOT/docs" "$ROOT/docs/_build/html"
